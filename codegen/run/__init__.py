"""The run stage, on the GPU present: kernels run in contained workers (gpu, gpurun), verified (verify),
benchmarked (bench), profiled (profile, profile_child), reported (report); `tilegen run` (mainjob)."""
