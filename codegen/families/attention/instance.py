"""The attention instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from codegen.families.attention.rules import attention_lds_bytes
from codegen.families.attention.spec import AttentionSpec
from codegen.families.base import InstanceBase, dtype_tag, explicit_schedule, pipelined_loop, tail_tag, tilelang_target
from codegen.hardware import Target
from codegen.spec import TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

# Statements of the attention template's KV loop body, in order: the K and V copies (global -> LDS),
# then the compute (mask/clear S, S = Q.K^T, the online-softmax update in 8 statements, O += P.V).
# An explicit schedule (explicit_pipeline_schedule targets) puts the copies in stage 0 and the compute in stage stages-1.
ATTENTION_LOOP_COPIES = 2
ATTENTION_LOOP_COMPUTE = 11
LOG2E = 1.4426950408889634


VECTOR_LOAD_BYTES = 16  # TileLang's coalesced tile copies: one 16-byte load per lane


@dataclass(frozen=True, kw_only=True)
class AttentionInstance(InstanceBase):
    """FlashAttention-style forward for one target: O = softmax(scale * Q.K^T [masked]) . V, one
    workgroup per (query block, head, batch), KV blocks streamed with an online softmax."""

    name: str
    target: Target
    op: str = "attention"
    template: str = "attention.py.j2"
    spec_file: str = field(compare=False)
    shapes: tuple[tuple[int, int, int, int, int], ...]  # (batch, heads, kv_heads, seq_q, seq_kv)
    in_dtype: str  # TileLang dtype names
    out_dtype: str
    accum_dtype: str
    spec_dtypes: tuple[str, str, str]  # input, out, accumulate as written in the spec
    head_dim: int
    causal: bool  # top-left aligned: query i attends to keys <= i
    softmax_scale: float  # resolved: the spec's, or 1/sqrt(head_dim)
    block_m: int
    block_n: int
    threads: int
    stages: int
    pipeline_order: tuple[int, ...] | None  # explicit schedule (explicit_pipeline_schedule); None = num_stages
    pipeline_stage: tuple[int, ...] | None
    tail: TailPolicy
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]
    uses_rocm_gemm: bool  # the target's gemm_fn is tilelang.rocm.language.gemm, not T.gemm

    def uses_matrix_cores(self) -> bool:
        return True  # Q.K^T and P.V

    def global_load_bytes(self) -> int | None:
        """The main loop's tile copies are laid out for 16-byte loads per lane."""
        return VECTOR_LOAD_BYTES

    def stem(self) -> str:
        causal = "_causal" if self.causal else ""
        return (f"attn_{dtype_tag(*self.spec_dtypes[:2])}_d{self.head_dim}{causal}_{self.block_m}x{self.block_n}"
                f"_t{self.threads}_s{self.stages}{tail_tag(self.tail)}")

    def template_vars(self) -> dict[str, object]:
        loop = pipelined_loop("kv_blocks", self.stages, self.pipeline_order, self.pipeline_stage)
        return {
            "target_literal": repr(dict(self.tilelang_target)),
            "kv_loop": loop,
            "gemm_fn": TARGETS[self.target].gemm_fn,
            "scale_literal": repr(self.softmax_scale),
            "scale_log2_literal": repr(self.softmax_scale * LOG2E),
        }

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """`T.Kernel(ceildiv(seq_q, BLOCK_M), heads, batch)`: one workgroup per (query block, head, batch)."""
        batch, heads, _, seq_q, _ = shape
        return ((-(-seq_q // self.block_m), heads, batch),)

    def metadata(self, uri: str) -> dict[str, object]:
        i, o, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"input": i, "out": o, "accumulate": acc},
            "shapes": [dict(zip(("batch", "heads", "kv_heads", "seq_q", "seq_kv"), s, strict=True)) for s in self.shapes],
            "head_dim": self.head_dim, "causal": self.causal, "softmax_scale": self.softmax_scale,
            "tiling": {"block_m": self.block_m, "block_n": self.block_n, "threads": self.threads},
            "pipeline": {"stages": self.stages,
                         "order": list(self.pipeline_order) if self.pipeline_order else None,
                         "stage": list(self.pipeline_stage) if self.pipeline_stage else None},
            "tail": self.tail.value, "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd,
            "lds_bytes": self.lds_bytes,
        }

    def summary(self) -> dict[str, str]:
        return {"dtypes": self.dtype_label(), "layout": "bshd" + (" causal" if self.causal else ""),
                "tiling": f"{self.block_m}x{self.block_n} d{self.head_dim}", "threads": str(self.threads),
                "schedule": f"stages {self.stages}", "tail": self.tail.value}

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])


def make_instance(spec: AttentionSpec, target: TargetSpec, spec_file: str) -> AttentionInstance:
    hw = target.hw
    tuning, _ = spec.tuning_for(target.target)
    t, stages = tuning.tiling, tuning.pipeline.stages
    order, stage = explicit_schedule(target, stages, ATTENTION_LOOP_COPIES, ATTENTION_LOOP_COMPUTE)
    d = spec.dtypes
    scale = spec.softmax_scale if spec.softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim)
    return AttentionInstance(
        name=spec.name, target=target.target, spec_file=spec_file,
        shapes=tuple((s.batch, s.heads, s.kv_heads, s.seq_q, s.seq_kv) for s in spec.shapes),
        in_dtype=hw.tilelang_dtypes[d.input], out_dtype=hw.tilelang_dtypes[d.out],
        accum_dtype=hw.tilelang_dtypes[d.accumulate], spec_dtypes=(d.input.value, d.out.value, d.accumulate.value),
        head_dim=spec.head_dim, causal=spec.causal, softmax_scale=scale,
        block_m=t.block_m, block_n=t.block_n, threads=t.threads, stages=stages,
        pipeline_order=order, pipeline_stage=stage, tail=spec.tail,
        allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=attention_lds_bytes(spec, tuning, target),
        tilelang_target=tilelang_target(target), uses_rocm_gemm=target.gemm_fn == "rocm_gemm",
    )
