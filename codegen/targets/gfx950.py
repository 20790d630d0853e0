"""gfx950: AMD Instinct MI355X (CDNA4). Its hardware record and its TargetSpec; the toolchain, compile
command, resource report, occupancy model, doctor checks and device match are the AMD ones of
`codegen.targets.amdgcn`, for this arch.

What differs from gfx942, all in the record: 256 CUs; 160 KiB of LDS per CU, all of it addressable by
one workgroup (LLVM's gfx950 `FeatureAddressableLocalMemorySize163840`; TileLang 0.1.15's carver
`cdna.py` uses the same 160 KiB); OCP fp8 (`float8_e4m3fn`, as on sm_90) where gfx942 has the fnuz
variant; twice the matrix throughput per CU. Its compiler is Debian's clang-22 (bookworm-security)
with rocm-device-libs-21, the first Debian device libraries with `oclc_isa_version_950.bc`
(tools/fetch-gfx942-toolchain.sh); Debian's clang-19 rejects `-mcpu=gfx950`.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from codegen.core.hardware import DType, Hardware, MmaShape, Target
from codegen.targets import amdgcn
from codegen.targets.amdgcn import ROCM_ROOT, AmdToolchain

HW = Hardware(
    # launch limits as gfx942's (HIP's maxGridSize, and the AQL dispatch packet's 32-bit work-item count):
    max_grid_workgroups=(2**31 - 1, 65536, 65536),
    max_grid_work_items=2**32 - 1,
    target=Target.GFX950,
    product="AMD Instinct MI355X",
    vendor="amd",
    tilelang_target=MappingProxyType({"kind": "hip", "mcpu": "gfx950"}),
    wave_lanes=64,
    wave_word="wavefront",
    min_threads=64,
    max_threads_per_workgroup=1024,
    compute_units=256,
    lds_bytes_per_workgroup=160 * 1024,
    register_file_bytes_per_cu=512 * 1024,  # 4 SIMDs x 512 VGPRs x 64 lanes x 4 B, as on gfx942
    max_registers_per_thread=256,  # arch VGPRs (the other 256 of the unified file are AGPRs, MFMA only)
    simds_per_cu=4,
    lds_bytes_per_cu=160 * 1024,
    # the smallest MFMA per dtype first (the block-size rule reads [0]); gfx950 keeps CDNA3's 16x16x16
    # f16/bf16 and adds 16x16x32 (TileLang uses it for k_pack=2), fp8 is the OCP format
    mma_shapes=MappingProxyType(
        {
            DType.FP16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8),
                         MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
            DType.BF16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8),
                         MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
            DType.FP32: (MmaShape(m=16, n=16, k=4), MmaShape(m=32, n=32, k=2)),
            DType.FP8_E4M3: (MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
        }
    ),
    tilelang_dtypes=MappingProxyType(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fn",
        }
    ),
    # AMD's MI355X figures (2400 MHz peak engine clock): dense matrix FP16/BF16 2.5 PFLOPS, FP8 5.0 PFLOPS
    # (8192 FP8 FLOP per CU per clock x 256 CUs), FP32 157.3 TFLOPS; HBM3E 8 TB/s
    fp8_e4m3_max=448.0,  # OCP e4m3fn
    peak_dense_tflops=MappingProxyType(
        {DType.FP16: 2516.6, DType.BF16: 2516.6, DType.FP32: 157.3, DType.FP8_E4M3: 5033.2}
    ),
    hbm_bandwidth_tbps=8.0,
    lds_word="LDS",
)

GFX950_ARCH = HW.tilelang_target["mcpu"]


def find_gfx950(root: Path, *, env_json: Path | None = None, rocm: Path = ROCM_ROOT) -> AmdToolchain:
    return amdgcn.find_amd(root, GFX950_ARCH, env_json=env_json, rocm=rocm)


def find_toolchain(root: Path, *, env_json: Path | None = None) -> AmdToolchain:
    """The target record's discovery: find_gfx950, looked up when called."""
    return find_gfx950(root, env_json=env_json)


TARGET = amdgcn.target_spec(
    HW,
    find_toolchain=find_toolchain,
    torch_dtypes={DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32",
                  DType.FP8_E4M3: "float8_e4m3fn"},
    min_flush_bytes=1 << 30,  # the 256 MiB Infinity Cache is not in torch's L2_cache_size
)
