"""The target and dtype vocabulary and the hardware record type. Each target's record (its `Hardware`)
lives in its module, `codegen/targets/<target>.py`; every legality rule and roofline reads from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Target(StrEnum):
    GFX942 = "gfx942"  # AMD Instinct MI300X (CDNA3)
    GFX950 = "gfx950"  # AMD Instinct MI355X (CDNA4)
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
    # the largest finite value of this target's fp8 e4m3 flavour (OCP e4m3fn: 448; e4m3fnuz: 240): the
    # per-token fp8 output of rmsnorm scales each row's largest magnitude to it
    fp8_e4m3_max: float
    peak_dense_tflops: Mapping[DType, float]
    hbm_bandwidth_tbps: float
    lds_word: str  # what the vendor calls it, for messages: "LDS" or "shared memory"
    # Launch grid: workgroups per grid dimension (x, y, z), and where the runtime counts the grid in
    # work-items instead (AMD: grid_dim * block_dim per dimension), the most work-items per dimension;
    # None where there is no such limit. Rule grid_limit reads both.
    max_grid_workgroups: tuple[int, int, int]
    max_grid_work_items: int | None
    # LDS banks of 4 bytes, for the static bank-conflict estimate (codegen.targets.amdgcn_isa); None: not
    # recorded for this target, no estimate.
    lds_banks: int | None = None
    # the L2 cache of the whole device; None: not recorded (read by fa3's persistent causal tile order)
    l2_bytes: int | None = None
