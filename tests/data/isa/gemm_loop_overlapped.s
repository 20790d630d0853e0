; hand-written from the loop above, rescheduled as a double-buffered loop would be: the next stage's
; global loads are issued before this stage's MFMAs and waited for only after them
.LBB0_3:                                ; =>This Inner Loop Header: Depth=1
	ds_read_b128 v[18:21], v4
	ds_read_b128 v[22:25], v4 offset:1024
	global_load_dwordx4 v[30:33], v[8:9], off
	global_load_dwordx4 v[34:37], v[10:11], off
	s_waitcnt lgkmcnt(0)
	v_mfma_f32_16x16x16_bf16 a[60:63], v[18:19], v[22:23], a[60:63]
	v_mfma_f32_16x16x16_bf16 a[56:59], v[20:21], v[24:25], a[56:59]
	s_waitcnt vmcnt(0)
	ds_write_b128 v17, v[30:33]
	ds_write_b128 v50, v[34:37]
	s_barrier
	s_cmp_lg_u32 s6, 64
	s_cbranch_scc0 .LBB0_3
	s_endpgm
