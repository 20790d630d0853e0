"""What the GEMM family knows about each target beyond its TargetSpec: facts only the GEMM's code generation
and rules read. One record per target (`GEMM_TARGET[target]`); a new target adds its line here."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.core.hardware import Target


@dataclass(frozen=True, kw_only=True)
class GemmTarget:
    # how a tiled GEMM may stage a K x N B tile in LDS/shared memory (spec field lds_layout): "natural" (as
    # stored) everywhere; "transposed_b" (written N x K, read as the nt kernels read B) where its gemm gains by it
    lds_layouts: tuple[str, ...]
    # TileLang lowers the GEMM's global <-> shared tile copies through TMA here (cp.async.bulk.tensor): the
    # options only a TMA copy has -- an L2 eviction priority on B's loads (spec b_eviction) and C staged through
    # shared memory for TMA stores (epilogue shared) -- are offered where this is True (rules *_target)
    tma_copies: bool
    # fp32-input GEMM precision modes (spec field `precision`) this target's generated code can do, and
    # why the others are refused (rule precision_target)
    fp32_precisions: tuple[str, ...]
    fp32_precision_note: str
    # the activation's exp and division may be the hardware's approximations (spec activation_math fast): TileLang
    # lowers tl.fast_rcp (rcp.approx.ftz.f32) here; its HIP code generator has no such call (0.1.15)
    fast_activation: bool


# TileLang 0.1.15's HIP gemm emits v_mfma_f32_16x16x4f32 / 32x32x2f32 for fp32 (true fp32, so `ieee`); its MFMA
# emitter has no xf32 path (gfx942 has v_mfma_f32_16x16x8_xf32 -- clang-19 emits the builtin -- but gfx950 dropped
# it: clang-22 "Cannot select: intrinsic llvm.amdgcn.mfma.f32.16x16x8.xf32")
_AMD = GemmTarget(
    # the MFMA reads a K x N tile 2 bytes a lane (ds_read_u16); transposed_b gives it K-contiguous rows
    lds_layouts=("natural", "transposed_b"),
    tma_copies=False,  # no TMA: tile copies are global loads + LDS writes
    fp32_precisions=("ieee",),
    fp32_precision_note=("TileLang 0.1.15's HIP gemm has no xf32 MFMA path (it emits only the true-fp32 "
                         "v_mfma_f32_*f32), so only ieee is possible"),
    fast_activation=False,
)

GEMM_TARGET: dict[Target, GemmTarget] = {
    Target.GFX942: _AMD,
    Target.GFX950: _AMD,
    Target.SM_90: GemmTarget(
        lds_layouts=("natural",),  # wgmma reads a K x N tile through its own (transposed) descriptor
        tma_copies=True,  # T.copy global -> shared / shared -> global: tl::tma_load / tl::tma_store
        fp32_precisions=("ieee", "tf32", "3xtf32"),  # ieee: CUDA-core FMA; tf32/3xtf32: rounded inputs, mma_sync
        fp32_precision_note="",
        fast_activation=True,
    ),
}
