"""The build stage: generated kernels compiled for their targets, with resource reports (compile), a
content-addressed cache (cache), the machine's toolchain checks (doctor) and the sm_90 SASS report (sass)."""
