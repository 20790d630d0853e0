; hand-written negative control in the shape of a row kernel's body (rmsnorm fp16, vector 8 meant one
; 16-byte load per lane), with the loads split into 2-byte ones as a lost vectorisation would emit
	global_load_ushort v1, v[2:3], off
	global_load_ushort v4, v[2:3], off offset:2
	global_load_ushort v5, v[2:3], off offset:4
	global_load_ushort v6, v[2:3], off offset:6
	s_waitcnt vmcnt(0)
	ds_bpermute_b32 v7, v8, v1
	ds_write_b32 v9, v7
	ds_read_b128 v[10:13], v14
	global_store_short v[2:3], v1, off
	s_endpgm
