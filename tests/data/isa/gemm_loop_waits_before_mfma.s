; cut from the gfx942 .s of gemm_bf16_nt_128x128x64_t256_s2_sw8_kp2 (clang -S), main loop shortened:
; the loop issues its global loads, then waits vmcnt(0) for them before its first MFMA
	global_load_dwordx4 v[12:15], v[2:3], off
	s_waitcnt vmcnt(0)
	ds_write_b128 v6, v[12:15]
.LBB0_3:                                ; =>This Inner Loop Header: Depth=1
	s_waitcnt lgkmcnt(0)
	s_barrier
	global_load_dwordx4 v[18:21], v[8:9], off
	global_load_dwordx4 v[22:25], v[10:11], off
	s_waitcnt vmcnt(1)
	ds_write_b128 v17, v[18:21]
	s_waitcnt vmcnt(0)
	ds_write_b128 v50, v[22:25]
	s_waitcnt lgkmcnt(0)
	s_barrier
	ds_read_b128 v[18:21], v4
	ds_read_b128 v[22:25], v4 offset:1024
	s_waitcnt lgkmcnt(0)
	v_mfma_f32_16x16x16_bf16 a[60:63], v[18:19], v[22:23], a[60:63]
	v_mfma_f32_16x16x16_bf16 a[56:59], v[20:21], v[24:25], a[56:59]
	s_add_i32 s6, s6, 1
	s_cmp_lg_u32 s6, 64
	s_cbranch_scc0 .LBB0_3
; %bb.4:
	global_store_dwordx2 v[0:1], v[26:27], off
	s_endpgm
