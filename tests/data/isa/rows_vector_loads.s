; cut from the gfx942 .s of rmsnorm_fp16_streamed_t256_v8_u2 (clang -S), shortened: 16-byte loads
	global_load_dwordx4 v[2:5], v[0:1], off
	global_load_dwordx4 v[6:9], v[0:1], off offset:4096
	s_waitcnt vmcnt(0)
	ds_bpermute_b32 v7, v8, v1
	ds_write_b32 v9, v7
	ds_read_b128 v[10:13], v14
	global_store_dwordx4 v[0:1], v[2:5], off
	s_endpgm
