; hand-written: a 64 x 32 fp32 tile kept row-major in LDS with no padding, read down a column: lane i reads
; row i (128 B apart), so the 32 lanes of a group all hit bank 0 (32-way); its padded twin (132 B rows)
; is conflict-free. Both inside a loop, with a uniform (SGPR) stage offset added. Before the loop, a 16-byte
; read of an 8 x 128 B tile down its rows (row = lane & 7, chunk = lane >> 3, no swizzle): the 8 lanes of a
; group share 4 banks (8-way).
	v_and_b32_e32 v16, 7, v0
	v_lshrrev_b32_e32 v17, 3, v0
	v_lshlrev_b32_e32 v17, 4, v17
	v_lshl_add_u32 v18, v16, 7, v17
	ds_read_b128 v[20:23], v18
	v_lshlrev_b32_e32 v1, 7, v0
	v_mul_u32_u24_e32 v2, 0x84, v0
	s_mov_b32 s6, 0
.LBB0_1:
	v_add_u32_e32 v3, s5, v1
	ds_read_b32 v4, v3
	v_add_u32_e32 v5, s5, v2
	ds_read_b32 v6, v5 offset:16
	s_waitcnt lgkmcnt(0)
	v_mfma_f32_16x16x16_f16 a[0:3], v[4:5], v[6:7], a[0:3]
	s_add_i32 s6, s6, 1
	s_cmp_lt_u32 s6, s7
	s_cbranch_scc1 .LBB0_1
	s_endpgm
