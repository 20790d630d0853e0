; hand-written: the patterns TileLang's row kernels and GEMMs use, each conflict-free under the model:
; consecutive 16-byte lanes (ds_write_b128 / ds_read_b128), consecutive dwords (ds_write_b32), a read2st64
; pair of dwords 256 B apart, and the xor-swizzled twin of lds_conflicting.s's 8-way column read
; (row = lane & 7, 16-byte chunk = (lane >> 3) ^ row); then one address the model cannot follow
; (it comes from a global load) and one through an op with an unknown uniform (an SGPR mask).
	v_lshlrev_b32_e32 v1, 4, v0
	v_lshlrev_b32_e32 v2, 2, v0
	ds_write_b128 v1, v[4:7]
	ds_read_b128 v[8:11], v1 offset:1024
	ds_write_b32 v2, v12
	ds_read2st64_b32 v[14:15], v2 offset1:1
	v_and_b32_e32 v16, 7, v0
	v_lshrrev_b32_e32 v17, 3, v0
	v_xor_b32_e32 v17, v17, v16
	v_lshlrev_b32_e32 v17, 4, v17
	v_lshl_add_u32 v18, v16, 7, v17
	ds_read_b128 v[20:23], v18
	global_load_dword v24, v[2:3], off
	s_waitcnt vmcnt(0)
	ds_read_b32 v25, v24
	v_and_b32_e32 v26, s8, v2
	ds_read_b32 v27, v26
	s_endpgm
