"""KernelInstance: one spec resolved for one target. Every template variable is a field here."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath

from codegen.errors import SpecError, SpecErrors
from codegen.hardware import HARDWARE, Target
from codegen.load import LoadedSpec, format_path
from codegen.rules import REDUCE_GROUP_LANES, attention_lds_bytes, check, lds_bytes, row_chunk, row_lds_bytes
from codegen.spec import AttentionSpec, GemmSpec, LayerNormSpec, SoftmaxSpec, WarpPolicy

TEMPLATE_DIR = PurePosixPath("templates")

_POLICY = {
    WarpPolicy.SQUARE: "T.GemmWarpPolicy.Square",
    WarpPolicy.FULL_ROW: "T.GemmWarpPolicy.FullRow",
    WarpPolicy.FULL_COL: "T.GemmWarpPolicy.FullCol",
}


class _Identity:
    """Identity methods shared by every family's instance (a frozen dataclass with the common fields
    name, target, op, template, spec_file, shapes, allow_spills, min_waves_per_simd,
    verify_tolerance_scale, lds_bytes, threads, tilelang_target)."""

    def canonical(self, template_sha256: str) -> str:
        data = asdict(self)
        del data["spec_file"], data["verify_tolerance_scale"]
        data["template_sha256"] = template_sha256
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def instance_hash(self, template_sha256: str) -> str:
        return hashlib.sha256(self.canonical(template_sha256).encode()).hexdigest()

    def uri(self, template_sha256: str) -> str:
        return f"{self.name}_{self.target.value.replace('_', '')}_{self.instance_hash(template_sha256)[:8]}"

    @property
    def out_dir(self) -> PurePosixPath:
        return PurePosixPath("generated") / self.target.value / self.op


@dataclass(frozen=True, kw_only=True)
class GemmInstance(_Identity):
    """A GEMM kernel for one target: C[M, N] = op(A) @ op(B), fully resolved."""

    # identity
    name: str
    target: Target
    op: str = "gemm"
    template: str = "gemm.py.j2"
    # provenance (not part of the identity hash)
    spec_file: str = field(compare=False)
    # problem
    shapes: tuple[tuple[int, int, int], ...]
    a_dtype: str  # TileLang dtype names for this target
    b_dtype: str
    out_dtype: str
    accum_dtype: str
    spec_dtypes: tuple[str, str, str, str]  # a, b, out, accumulate as written in the spec
    layout: str
    trans_a: bool
    trans_b: bool
    # tiling and schedule
    block_m: int
    block_n: int
    block_k: int
    threads: int
    policy: str
    stages: int
    pipeline_order: tuple[int, ...] | None  # explicit schedule (gfx942); None = TileLang infers (sm_90)
    pipeline_stage: tuple[int, ...] | None
    unroll: int
    swizzle_panel: int
    k_pack: int | None  # None on targets without k_pack
    tail: str
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)  # how the kernel is checked, not what it is
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]

    # ---- template inputs ------------------------------------------------------------------
    def template_vars(self) -> dict[str, object]:
        a_shape = "(K, M)" if self.trans_a else "(M, K)"
        b_shape = "(N, K)" if self.trans_b else "(K, N)"
        a_tile = "(BLOCK_K, BLOCK_M)" if self.trans_a else "(BLOCK_M, BLOCK_K)"
        b_tile = "(BLOCK_N, BLOCK_K)" if self.trans_b else "(BLOCK_K, BLOCK_N)"
        a_origin = "k * BLOCK_K, row0" if self.trans_a else "row0, k * BLOCK_K"
        b_origin = "col0, k * BLOCK_K" if self.trans_b else "k * BLOCK_K, col0"
        loop = pipelined_loop("k_tiles", self.stages, self.pipeline_order, self.pipeline_stage)
        gemm_args = [f"transpose_A={self.trans_a}", f"transpose_B={self.trans_b}", f"policy={_POLICY[WarpPolicy(self.policy)]}"]
        if self.k_pack is not None and self.k_pack > 1:
            gemm_args.append(f"k_pack={self.k_pack}")
        return {
            "a_shape": a_shape, "b_shape": b_shape, "a_tile": a_tile, "b_tile": b_tile,
            "a_origin": a_origin, "b_origin": b_origin, "k_loop": loop,
            "gemm_fn": "rocm_gemm" if self.k_pack is not None else "T.gemm",
            "gemm_args": ", ".join(gemm_args),
            "target_literal": repr(dict(self.tilelang_target)),
        }

    def metadata(self, uri: str) -> dict[str, object]:
        a, b, out, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"a": a, "b": b, "out": out, "accumulate": acc}, "layout": self.layout,
            "shapes": [list(s) for s in self.shapes],
            "tiling": {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                       "threads": self.threads, "policy": self.policy},
            "pipeline": {"stages": self.stages,
                         "order": list(self.pipeline_order) if self.pipeline_order else None,
                         "stage": list(self.pipeline_stage) if self.pipeline_stage else None},
            "unroll": self.unroll, "swizzle_panel": self.swizzle_panel, "k_pack": self.k_pack,
            "tail": self.tail, "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd, "lds_bytes": self.lds_bytes,
        }

    def summary(self) -> dict[str, str]:
        """The columns of `tilegen list`."""
        return {"dtypes": "/".join(self.spec_dtypes[:3]), "layout": self.layout,
                "tiling": f"{self.block_m}x{self.block_n}x{self.block_k}", "threads": str(self.threads),
                "schedule": f"stages {self.stages}", "tail": self.tail}

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:3])


@dataclass(frozen=True, kw_only=True)
class RowInstance(_Identity):
    """A row-wise kernel (softmax, rmsnorm, layernorm) over X[rows, cols] for one target: one workgroup
    per row, each thread loading `vector` contiguous elements per chunk of threads*vector columns."""

    name: str
    target: Target
    op: str
    template: str
    spec_file: str = field(compare=False)
    shapes: tuple[tuple[int, int], ...]  # (rows, cols)
    in_dtype: str  # TileLang dtype names
    out_dtype: str
    accum_dtype: str
    spec_dtypes: tuple[str, str, str]  # input, out, accumulate as written in the spec
    threads: int
    vector: int
    chunk: int  # threads * vector columns per chunk
    reduce_groups: int  # 32-lane groups whose partials meet in LDS
    unroll: int
    tail: str
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]

    def template_vars(self) -> dict[str, object]:
        return {"target_literal": repr(dict(self.tilelang_target))}

    def metadata(self, uri: str) -> dict[str, object]:
        i, o, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"input": i, "out": o, "accumulate": acc}, "shapes": [list(s) for s in self.shapes],
            "threads": self.threads, "vector": self.vector, "unroll": self.unroll, "tail": self.tail,
            "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd,
            "lds_bytes": self.lds_bytes, **self._family_metadata(),
        }

    def _family_metadata(self) -> dict[str, object]:
        return {}

    def summary(self) -> dict[str, str]:
        return {"dtypes": self.dtype_label(), "layout": "row", "tiling": f"1 row x {self.vector}/thread",
                "threads": str(self.threads), "schedule": self._schedule(), "tail": self.tail}

    def _schedule(self) -> str:
        return f"unroll {self.unroll}"

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])


@dataclass(frozen=True, kw_only=True)
class SoftmaxInstance(RowInstance):
    """softmax over the last dim: Y[r, :] = exp(X[r, :] - max) / sum(exp(X[r, :] - max))."""

    op: str = "softmax"
    template: str = "softmax.py.j2"
    variant: str  # online | two_pass

    def _family_metadata(self) -> dict[str, object]:
        return {"variant": self.variant}

    def _schedule(self) -> str:
        return self.variant if self.variant == "online" else f"{self.variant}, unroll {self.unroll}"


@dataclass(frozen=True, kw_only=True)
class NormInstance(RowInstance):
    """rmsnorm: Y = X / sqrt(mean(X^2) + eps) * W; layernorm: Y = (X - mean) / sqrt(var + eps) * W + B
    (biased variance). W and B have `cols` elements in the input dtype. variant streamed: rmsnorm reads
    the row twice (sum of squares, normalise), layernorm three times (mean, centred sum of squares,
    normalise); variant registers: the row is read once into registers and every pass runs on them."""

    op: str  # rmsnorm | layernorm
    template: str = "norm.py.j2"
    eps: float
    variant: str  # streamed | registers
    centered: bool  # subtract the mean (layernorm) -- and divide by the centred, not raw, mean square
    has_bias: bool  # add B (layernorm)

    def _family_metadata(self) -> dict[str, object]:
        return {"eps": self.eps, "variant": self.variant}

    def _schedule(self) -> str:
        if self.variant == "registers":
            return "registers, 1 read"
        return f"{3 if self.centered else 2} reads, unroll {self.unroll}"

    def template_vars(self) -> dict[str, object]:
        """The statements that differ between rmsnorm and layernorm, as finished literals."""
        params = ["X: T.Tensor((M, N), IN_DTYPE)", "W: T.Tensor((N,), IN_DTYPE)"]
        if self.has_bias:
            params.append("B: T.Tensor((N,), IN_DTYPE)")
        params.append("Y: T.Tensor((M, N), OUT_DTYPE)")
        # element v of the chunk being processed: at offset o (= chunk * VEC) of the row held in registers,
        # or of the VEC-element buffer a streamed pass loads each chunk into
        x = "xb[o + v]" if self.variant == "registers" else "xb[v]"
        if self.centered:
            formula = "Y = (X - mean) / sqrt(var + EPS) * W + B (biased variance, like F.layer_norm)"
            square = f"({x} - mu[0]) * ({x} - mu[0])"
            out = f"({x} - mu[0]) * rstd[0] * wv[v] + bv[v]"
        else:
            formula = "Y = X / sqrt(mean(X^2) + EPS) * W"
            square = f"{x} * {x}"
            out = f"{x} * rstd[0] * wv[v]"
        return {
            **super().template_vars(),
            "formula": formula,
            "param_doc": "W and B" if self.has_bias else "W",
            "last_pass_doc": "normalise, scale and shift" if self.has_bias else "normalise and scale",
            "eps_literal": repr(self.eps),
            "kernel_params": ", ".join(params),
            "store_call": "store_chunk(X, W, B, Y, N, row, @C, xb, wv, bv, mu, rstd, @G)" if self.has_bias
                          else "store_chunk(X, W, Y, N, row, @C, xb, wv, mu, rstd, @G)",
            "store_params": "X, W, B, Y, n, row, c, xb, wv, bv, mu, rstd, guarded" if self.has_bias
                            else "X, W, Y, n, row, c, xb, wv, mu, rstd, guarded",
            "square_term": square,
            "out_term": out,
        }


# Statements of the attention template's KV loop body, in order: the K and V copies (global -> LDS),
# then the compute (mask/clear S, S = Q.K^T, the online-softmax update in 8 statements, O += P.V).
# The explicit gfx942 schedule puts the copies in stage 0 and the compute in stage stages-1.
ATTENTION_LOOP_COPIES = 2
ATTENTION_LOOP_COMPUTE = 11
LOG2E = 1.4426950408889634


@dataclass(frozen=True, kw_only=True)
class AttentionInstance(_Identity):
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
    pipeline_order: tuple[int, ...] | None  # explicit schedule (gfx942); None = TileLang's num_stages (sm_90)
    pipeline_stage: tuple[int, ...] | None
    tail: str
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]
    uses_rocm_gemm: bool  # tilelang.rocm.language.gemm (gfx942) instead of T.gemm

    def template_vars(self) -> dict[str, object]:
        loop = pipelined_loop("kv_blocks", self.stages, self.pipeline_order, self.pipeline_stage)
        return {
            "target_literal": repr(dict(self.tilelang_target)),
            "kv_loop": loop,
            "gemm_fn": "rocm_gemm" if self.uses_rocm_gemm else "T.gemm",
            "scale_literal": repr(self.softmax_scale),
            "scale_log2_literal": repr(self.softmax_scale * LOG2E),
        }

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
            "tail": self.tail, "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd,
            "lds_bytes": self.lds_bytes,
        }

    def summary(self) -> dict[str, str]:
        return {"dtypes": self.dtype_label(), "layout": "bshd" + (" causal" if self.causal else ""),
                "tiling": f"{self.block_m}x{self.block_n} d{self.head_dim}", "threads": str(self.threads),
                "schedule": f"stages {self.stages}", "tail": self.tail}

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])


KernelInstance = GemmInstance | SoftmaxInstance | NormInstance | AttentionInstance


def row_instance(loaded: LoadedSpec, target: Target) -> RowInstance:
    spec = loaded.spec
    hw = HARDWARE[target]
    d = spec.dtypes
    common = {
        "name": spec.name, "target": target, "spec_file": loaded.doc.file,
        "shapes": tuple((s.rows, s.cols) for s in spec.shapes),
        "in_dtype": hw.tilelang_dtypes[d.input], "out_dtype": hw.tilelang_dtypes[d.out],
        "accum_dtype": hw.tilelang_dtypes[d.accumulate], "spec_dtypes": (d.input.value, d.out.value, d.accumulate.value),
        "threads": spec.threads, "vector": spec.vector, "chunk": row_chunk(spec),
        "reduce_groups": max(1, spec.threads // REDUCE_GROUP_LANES), "unroll": spec.unroll, "tail": spec.tail.value,
        "allow_spills": spec.allow_spills, "min_waves_per_simd": spec.min_waves_per_simd,
        "verify_tolerance_scale": spec.verify_tolerance_scale, "lds_bytes": row_lds_bytes(spec),
        "tilelang_target": tuple(sorted(hw.tilelang_target.items())),
    }
    if isinstance(spec, SoftmaxSpec):
        return SoftmaxInstance(**common, variant=spec.variant.value)
    layer = isinstance(spec, LayerNormSpec)
    return NormInstance(**common, op=spec.op, eps=spec.eps, variant=spec.variant.value, centered=layer, has_bias=layer)


def pipelined_loop(extent: str, stages: int, order: tuple[int, ...] | None, stage: tuple[int, ...] | None) -> str:
    """The loop header of a pipelined main loop: the explicit schedule (gfx942), TileLang's num_stages
    (sm_90), or a plain loop for one stage."""
    if order is not None:
        return f"T.Pipelined({extent}, order={list(order)}, stage={list(stage)})"
    if stages >= 2:
        return f"T.Pipelined({extent}, num_stages={stages})"
    return f"T.serial({extent})"


def _explicit_schedule(stages: int, copies: int, compute: int) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[None, None]:
    """order/stage lists for a loop body of `copies` global->LDS copies then `compute` statements: the
    copies run in stage 0, stages-1 iterations ahead of the compute."""
    if stages < 2:
        return None, None
    return tuple(range(copies + compute)), (0,) * copies + (stages - 1,) * compute


def gemm_instance(loaded: LoadedSpec, target: Target) -> GemmInstance:
    spec: GemmSpec = loaded.spec
    hw = HARDWARE[target]
    tuning, _ = spec.tuning_for(target)
    t = tuning.tiling
    # copy A, copy B, gemm
    order, stage = (_explicit_schedule(tuning.pipeline.stages, 2, 1) if hw.needs_explicit_pipeline
                    else (None, None))
    d = spec.dtypes
    return GemmInstance(
        name=spec.name, target=target, spec_file=loaded.doc.file,
        shapes=tuple((s.m, s.n, s.k) for s in spec.shapes),
        a_dtype=hw.tilelang_dtypes[d.a], b_dtype=hw.tilelang_dtypes[d.b],
        out_dtype=hw.tilelang_dtypes[d.out], accum_dtype=hw.tilelang_dtypes[d.accumulate],
        spec_dtypes=(d.a.value, d.b.value, d.out.value, d.accumulate.value),
        layout=spec.layout.value, trans_a=spec.layout.trans_a, trans_b=spec.layout.trans_b,
        block_m=t.block_m, block_n=t.block_n, block_k=t.block_k, threads=t.threads, policy=t.policy.value,
        stages=tuning.pipeline.stages, pipeline_order=order, pipeline_stage=stage,
        unroll=tuning.unroll, swizzle_panel=tuning.swizzle_panel,
        k_pack=tuning.k_pack if hw.has_k_pack else None,
        tail=spec.tail.value, allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=lds_bytes(spec, tuning),
        tilelang_target=tuple(sorted(hw.tilelang_target.items())),
    )


def attention_instance(loaded: LoadedSpec, target: Target) -> AttentionInstance:
    spec: AttentionSpec = loaded.spec
    hw = HARDWARE[target]
    tuning, _ = spec.tuning_for(target)
    t, stages = tuning.tiling, tuning.pipeline.stages
    order, stage = (_explicit_schedule(stages, ATTENTION_LOOP_COPIES, ATTENTION_LOOP_COMPUTE)
                    if hw.needs_explicit_pipeline else (None, None))
    d = spec.dtypes
    scale = spec.softmax_scale if spec.softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim)
    return AttentionInstance(
        name=spec.name, target=target, spec_file=loaded.doc.file,
        shapes=tuple((s.batch, s.heads, s.kv_heads, s.seq_q, s.seq_kv) for s in spec.shapes),
        in_dtype=hw.tilelang_dtypes[d.input], out_dtype=hw.tilelang_dtypes[d.out],
        accum_dtype=hw.tilelang_dtypes[d.accumulate], spec_dtypes=(d.input.value, d.out.value, d.accumulate.value),
        head_dim=spec.head_dim, causal=spec.causal, softmax_scale=scale,
        block_m=t.block_m, block_n=t.block_n, threads=t.threads, stages=stages,
        pipeline_order=order, pipeline_stage=stage, tail=spec.tail.value,
        allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=attention_lds_bytes(spec, tuning, hw),
        tilelang_target=tuple(sorted(hw.tilelang_target.items())), uses_rocm_gemm=hw.has_k_pack,
    )


def make_instance(loaded: LoadedSpec, target: Target) -> KernelInstance:
    if isinstance(loaded.spec, GemmSpec):
        return gemm_instance(loaded, target)
    if isinstance(loaded.spec, AttentionSpec):
        return attention_instance(loaded, target)
    return row_instance(loaded, target)


def build_instances(loaded: list[LoadedSpec], targets: list[Target] | None = None) -> list[KernelInstance]:
    """Check every rule on every (spec, target) and across the whole set; return sorted instances.

    All errors of the set are collected and raised together, so nothing is generated from a set
    that has any error.
    """
    errors: list[SpecError] = []
    first_by_name: dict[str, LoadedSpec] = {}
    instances: list[KernelInstance] = []
    for ls in loaded:
        spec = ls.spec
        if spec.name in first_by_name:
            first = first_by_name[spec.name]
            errors.append(SpecError(ls.locate(("name",)),
                                    f"name='{spec.name}': duplicate name (first defined at {first.locate(('name',))})",
                                    "duplicate_name"))
            continue
        first_by_name[spec.name] = ls
        for i, tgt in enumerate(spec.targets):
            if tgt in spec.targets[:i]:
                errors.append(SpecError(ls.locate(("targets", i)), f"targets[{i}]={tgt.value}: listed twice",
                                        "duplicate_target"))
        for tgt in getattr(spec, "overrides", {}):
            if tgt not in spec.targets:
                errors.append(SpecError(ls.locate(("overrides", tgt.value), key=True),
                                        f"overrides.{tgt.value}: {tgt.value} is not in targets", "override_target"))
        for tgt in sorted(set(spec.targets)):
            for v in check(spec, HARDWARE[tgt]):
                shown = format_path(v.path)
                if v.value is not None:
                    shown += f"={v.value}"
                errors.append(SpecError(ls.locate(v.path), f"{shown}: {v.message}", v.rule))
            if targets is None or tgt in targets:
                instances.append(make_instance(ls, tgt))
    if errors:
        # a rule that does not depend on the target fails alike on each one: report it once
        raise SpecErrors(list({str(e): e for e in errors}.values()))
    return sorted(instances, key=lambda i: (i.target.value, i.op, i.name))
