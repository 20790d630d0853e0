"""Hardware facts, one frozen record per target. Every legality rule and roofline reads from here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Target(StrEnum):
    GFX942 = "gfx942"  # AMD Instinct MI300X (CDNA3)
    SM_90 = "sm_90"  # NVIDIA H100/H200 (Hopper)


class DType(StrEnum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"
    FP8_E4M3 = "fp8_e4m3"


DTYPE_BYTES: Mapping[DType, int] = MappingProxyType(
    {DType.FP16: 2, DType.BF16: 2, DType.FP32: 4, DType.FP8_E4M3: 1}
)


@dataclass(frozen=True, kw_only=True)
class MmaShape:
    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True, kw_only=True)
class Hardware:
    target: Target
    product: str
    vendor: str
    tilelang_target: Mapping[str, str]  # passed to tilelang.lower / tvm.target.Target
    wave_lanes: int  # wavefront (AMD) / warp (NVIDIA) size
    wave_word: str  # "wavefront" or "warp", for error messages
    min_threads: int
    max_threads_per_workgroup: int
    compute_units: int  # CUs (AMD) / SMs (NVIDIA)
    lds_bytes_per_workgroup: int  # LDS (AMD) / shared memory per block (NVIDIA)
    register_file_bytes_per_cu: int
    max_registers_per_thread: int  # 32-bit registers one thread's ALU code can address (gfx942: arch VGPRs)
    simds_per_cu: int  # SIMDs (AMD) / SM sub-partitions (NVIDIA) that share a CU's waves
    lds_bytes_per_cu: int  # LDS (AMD) / shared memory of one CU/SM, shared by its resident workgroups
    # Smallest matrix-core instruction per input dtype; block sizes must be multiples of it.
    mma_shapes: Mapping[DType, tuple[MmaShape, ...]]
    # TileLang's name for each dtype on this target (fp8 e4m3 differs: fnuz on gfx942).
    tilelang_dtypes: Mapping[DType, str]
    peak_dense_tflops: Mapping[DType, float]
    hbm_bandwidth_tbps: float
    has_k_pack: bool  # TileLang's ROCm gemm packs MFMA ops along K
    needs_explicit_pipeline: bool  # T.Pipelined(num_stages) is a plain loop unless order/stage given

    @property
    def lds_word(self) -> str:
        return "LDS" if self.vendor == "amd" else "shared memory"


def _frozen(d: dict) -> Mapping:
    return MappingProxyType(d)


GFX942 = Hardware(
    target=Target.GFX942,
    product="AMD Instinct MI300X",
    vendor="amd",
    tilelang_target=_frozen({"kind": "hip", "mcpu": "gfx942"}),
    wave_lanes=64,
    wave_word="wavefront",
    min_threads=64,
    max_threads_per_workgroup=1024,
    compute_units=304,
    lds_bytes_per_workgroup=64 * 1024,
    register_file_bytes_per_cu=512 * 1024,  # 4 SIMDs x 512 VGPRs x 64 lanes x 4 B
    max_registers_per_thread=256,  # arch VGPRs (the other 256 of the unified file are AGPRs, MFMA only)
    simds_per_cu=4,
    lds_bytes_per_cu=64 * 1024,
    mma_shapes=_frozen(
        {
            DType.FP16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.BF16: (MmaShape(m=16, n=16, k=16), MmaShape(m=32, n=32, k=8)),
            DType.FP32: (MmaShape(m=16, n=16, k=4), MmaShape(m=32, n=32, k=2)),
            DType.FP8_E4M3: (MmaShape(m=16, n=16, k=32), MmaShape(m=32, n=32, k=16)),
        }
    ),
    tilelang_dtypes=_frozen(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fnuz",
        }
    ),
    peak_dense_tflops=_frozen(
        {DType.FP16: 1307.4, DType.BF16: 1307.4, DType.FP32: 163.4, DType.FP8_E4M3: 2614.9}
    ),
    hbm_bandwidth_tbps=5.3,
    has_k_pack=True,
    needs_explicit_pipeline=True,
)

SM_90 = Hardware(
    target=Target.SM_90,
    product="NVIDIA H200 SXM",
    vendor="nvidia",
    tilelang_target=_frozen({"kind": "cuda", "arch": "sm_90a"}),  # "a": wgmma/TMA
    wave_lanes=32,
    wave_word="warp",
    min_threads=32,
    max_threads_per_workgroup=1024,
    compute_units=132,
    lds_bytes_per_workgroup=227 * 1024,
    register_file_bytes_per_cu=256 * 1024,  # 65536 x 32-bit registers per SM
    max_registers_per_thread=255,
    simds_per_cu=4,
    lds_bytes_per_cu=228 * 1024,
    mma_shapes=_frozen(
        {
            DType.FP16: (MmaShape(m=16, n=8, k=16),),
            DType.BF16: (MmaShape(m=16, n=8, k=16),),
            DType.FP32: (MmaShape(m=16, n=8, k=8),),  # tf32
            DType.FP8_E4M3: (MmaShape(m=16, n=8, k=32),),
        }
    ),
    tilelang_dtypes=_frozen(
        {
            DType.FP16: "float16",
            DType.BF16: "bfloat16",
            DType.FP32: "float32",
            DType.FP8_E4M3: "float8_e4m3fn",
        }
    ),
    peak_dense_tflops=_frozen(
        {DType.FP16: 989.4, DType.BF16: 989.4, DType.FP32: 494.7, DType.FP8_E4M3: 1978.9}
    ),
    hbm_bandwidth_tbps=4.8,
    has_k_pack=False,
    needs_explicit_pipeline=False,
)

HARDWARE: Mapping[Target, Hardware] = MappingProxyType({GFX942.target: GFX942, SM_90.target: SM_90})
