"""gfx942: AMD Instinct MI300X (CDNA3). Its hardware record and its TargetSpec; the toolchain, compile
command, resource report, occupancy model, doctor checks and device match are the AMD ones of
`codegen.targets.amdgcn`, for this arch."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from codegen.core.hardware import DType, Hardware, MmaShape, Target
from codegen.targets import amdgcn
from codegen.targets.amdgcn import ROCM_ROOT, AmdToolchain

HW = Hardware(
    target=Target.GFX942,
    product="AMD Instinct MI300X",
    vendor="amd",
    tilelang_target=MappingProxyType({"kind": "hip", "mcpu": "gfx942"}),
    wave_lanes=64,
    wave_word="wavefront",
    min_threads=64,
    max_threads_per_workgroup=1024,
    compute_units=304,
    lds_bytes_per_workgroup=64 * 1024,
    register_file_bytes_per_cu=512 * 1024,  # 4 SIMDs x 512 VGPRs x 64 lanes x 4 B
    max_registers_per_thread=256,  # arch VGPRs (the other 256 of the unified file are AGPRs, MFMA only)
    simds_per_cu=4,
    lds_bytes_per_cu=64 * 1024,  # on CDNA3 the CU's LDS is the same 64 KiB as the per-workgroup limit
    mma_shapes=MappingProxyType(
        {
            DType.FP16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.BF16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.FP32: (MmaShape(m=16, n=16, k=4), MmaShape(m=32, n=32, k=2)),
            DType.FP8_E4M3: (MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
        }
    ),
    tilelang_dtypes=MappingProxyType(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fnuz",
        }
    ),
    fp8_e4m3_max=240.0,  # e4m3fnuz: exponent bias 8, no infinities, one NaN
    peak_dense_tflops=MappingProxyType(
        {DType.FP16: 1307.4, DType.BF16: 1307.4, DType.FP32: 163.4, DType.FP8_E4M3: 2614.9}
    ),
    hbm_bandwidth_tbps=5.3,
    lds_word="LDS",
    lds_banks=32,  # CDNA3 ISA guide, "Local Data Share": 32 banks of 4 bytes (128 B per clock)
    # ROCm clr, hipamd/src/hip_device.cpp ihipGetDeviceProperties (ROCm 6.x): maxGridSize = {INT32_MAX,
    # UINT16_MAX + 1, UINT16_MAX + 1}; and HIP's API notes (hipModuleLaunchKernel and the occupancy calls):
    # "HIP does not support kernel launch with total work items defined in dimension with size
    # gridDim x blockDim >= 2^32" -- the HSA AQL dispatch packet's grid_size_x/y/z are uint32 work-item
    # counts, not workgroup counts.
    max_grid_workgroups=(2**31 - 1, 65536, 65536),
    max_grid_work_items=2**32 - 1,
)

GFX942_ARCH = HW.tilelang_target["mcpu"]
FETCH_GFX942 = amdgcn.FETCH_AMD

def find_gfx942(root: Path, *, env_json: Path | None = None, rocm: Path = ROCM_ROOT) -> AmdToolchain:
    return amdgcn.find_amd(root, GFX942_ARCH, env_json=env_json, rocm=rocm)


def find_toolchain(root: Path, *, env_json: Path | None = None) -> AmdToolchain:
    """The target record's discovery: find_gfx942, looked up when called."""
    return find_gfx942(root, env_json=env_json)


TARGET = amdgcn.target_spec(
    HW,
    find_toolchain=find_toolchain,
    torch_dtypes={DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32",
                  DType.FP8_E4M3: "float8_e4m3fnuz"},
    min_flush_bytes=1 << 30,  # the 256 MiB Infinity Cache is not in torch's L2_cache_size
)
