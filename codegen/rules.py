"""Legality rules: named predicates over (spec, target). Each failure says which rule and why.

A rule gets the spec, the target's hardware record and the effective tunables for that target, and
yields `Violation`s whose `path` is the spec field to blame (an override's field when the value came
from `overrides.<target>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from codegen.hardware import DTYPE_BYTES, HARDWARE, DType, Hardware
from codegen.spec import (
    ATTENTION_HEAD_DIMS,
    AttentionSpec,
    AttentionTuning,
    GemmSpec,
    GemmTuning,
    Layout,
    NormVariant,
    RowSpecBase,
    SoftmaxSpec,
    SoftmaxVariant,
    TailPolicy,
)

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True, kw_only=True)
class Violation:
    rule: str
    path: FieldPath
    value: object
    message: str


@dataclass(frozen=True, kw_only=True)
class GemmContext:
    spec: GemmSpec
    hw: Hardware
    tuning: GemmTuning
    origin: dict[str, tuple[str, ...]]  # tuning field -> spec path it came from

    def at(self, field: str, *rest: str | int) -> FieldPath:
        return self.origin[field] + rest


def lds_bytes(spec: GemmSpec, tuning: GemmTuning) -> int:
    """Shared-memory bytes of one GEMM workgroup: the A and B tiles times the pipeline's buffers."""
    t = tuning.tiling
    per_stage = t.block_m * t.block_k * DTYPE_BYTES[spec.dtypes.a] + t.block_n * t.block_k * DTYPE_BYTES[spec.dtypes.b]
    return per_stage * max(1, tuning.pipeline.stages)


GemmRule = Callable[[GemmContext], Iterator[Violation]]


def dtype_supported(c: GemmContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    for field in ("a", "b", "out", "accumulate"):
        dt = getattr(d, field)
        if dt not in c.hw.tilelang_dtypes:
            yield Violation(rule="dtype_supported", path=("dtypes", field), value=dt.value,
                            message=f"not supported on {c.hw.target}")
    if d.a != d.b:
        yield Violation(rule="dtype_supported", path=("dtypes", "b"), value=d.b.value,
                        message=f"must equal dtypes.a ({d.a.value}): mixed-input MMA is not supported")
    if d.accumulate != DType.FP32:
        yield Violation(rule="dtype_supported", path=("dtypes", "accumulate"), value=d.accumulate.value,
                        message="the accumulator must be fp32")
    if d.out == DType.FP8_E4M3:
        yield Violation(rule="dtype_supported", path=("dtypes", "out"), value=d.out.value,
                        message="fp8 output needs a scale, which the gemm template does not have")
    if d.a == DType.FP8_E4M3 and c.spec.layout != Layout.NT:
        yield Violation(rule="dtype_supported", path=("layout",), value=c.spec.layout.value,
                        message=f"fp8 matrix cores on {c.hw.target} need K-major operands: use layout nt")


def threads_violations(threads: int, hw: Hardware, path: FieldPath) -> Iterator[Violation]:
    """Rule wave_multiple, for every family: whole waves/warps, within the workgroup limit."""
    if threads % hw.wave_lanes or threads < hw.min_threads:
        yield Violation(rule="wave_multiple", path=path, value=threads,
                        message=f"must be a multiple of the {hw.wave_lanes}-lane {hw.wave_word} on {hw.target}")
    elif threads > hw.max_threads_per_workgroup:
        yield Violation(rule="wave_multiple", path=path, value=threads,
                        message=f"exceeds {hw.max_threads_per_workgroup} threads per workgroup on {hw.target}")


def wave_multiple(c: GemmContext) -> Iterator[Violation]:
    yield from threads_violations(c.tuning.tiling.threads, c.hw, c.at("tiling", "threads"))


def mma_shape(c: GemmContext) -> Iterator[Violation]:
    t = c.tuning.tiling
    mma = c.hw.mma_shapes[c.spec.dtypes.a][0]
    k_pack = c.tuning.k_pack if c.hw.has_k_pack else 1
    word = f"{c.spec.dtypes.a.value} MMA tile {mma} on {c.hw.target}"
    if t.block_m % mma.m:
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_m"), value=t.block_m,
                        message=f"must be a multiple of {mma.m} (the {word})")
    if t.block_n % mma.n:
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"must be a multiple of {mma.n} (the {word})")
    if t.block_k % (mma.k * k_pack):
        packed = f" times k_pack={k_pack}" if k_pack > 1 else ""
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_k"), value=t.block_k,
                        message=f"must be a multiple of {mma.k * k_pack} (the {word}{packed})")
    if t.threads % c.hw.wave_lanes or not c.hw.min_threads <= t.threads <= c.hw.max_threads_per_workgroup:
        return  # wave_multiple reports the thread count; a wave split of it would mean nothing
    waves = t.threads // c.hw.wave_lanes
    tiles = (t.block_m // mma.m) * (t.block_n // mma.n)
    if tiles and tiles % waves:
        yield Violation(rule="mma_shape", path=c.at("tiling", "threads"), value=t.threads,
                        message=f"{waves} {c.hw.wave_word}s cannot share the {tiles} {mma} MMA tiles of a "
                                f"{t.block_m}x{t.block_n} block evenly on {c.hw.target}")


def lds_budget(c: GemmContext) -> Iterator[Violation]:
    need = lds_bytes(c.spec, c.tuning)
    have = c.hw.lds_bytes_per_workgroup
    if need > have:
        t = c.tuning.tiling
        yield Violation(
            rule="lds_budget", path=c.at("tiling"), value=None,
            message=f"{t.block_m}x{t.block_n}x{t.block_k} tiles x {max(1, c.tuning.pipeline.stages)} stage(s) need "
                    f"{need} B ({need / 1024:g} KiB) of {c.hw.lds_word}, over the {have} B ({have / 1024:g} KiB) "
                    f"per workgroup on {c.hw.target}",
        )


def tail_policy(c: GemmContext) -> Iterator[Violation]:
    if c.spec.tail != TailPolicy.NONE:
        return
    t = c.tuning.tiling
    # the block size is the same on every target unless an override changed it; then say which target
    where = f" on {c.hw.target}" if c.origin["tiling"][0] == "overrides" else ""
    for i, s in enumerate(c.spec.shapes):
        dims = (("m", s.m, "block_m", t.block_m), ("n", s.n, "block_n", t.block_n), ("k", s.k, "block_k", t.block_k))
        ragged = [f"{d}={v} is not a multiple of {b}={bv}" for d, v, b, bv in dims if v % bv]
        if ragged:
            yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                            message=f"{', '.join(ragged)}{where}: set tail: predicated or specialized")


def unroll_fits(c: GemmContext) -> Iterator[Violation]:
    u = c.tuning.unroll
    if u == 1:
        return
    if c.tuning.pipeline.stages >= 2:
        yield Violation(rule="unroll_pipeline", path=c.at("unroll"), value=u,
                        message="a pipelined K loop is scheduled by stages; unroll needs pipeline.stages <= 1")
    bk = c.tuning.tiling.block_k
    for i, s in enumerate(c.spec.shapes):
        if s.k % (bk * u):
            yield Violation(rule="unroll_divides", path=c.at("unroll"), value=u,
                            message=f"shapes[{i}].k={s.k} is not a multiple of block_k*unroll={bk * u}")


def k_pack_target(c: GemmContext) -> Iterator[Violation]:
    override = c.spec.overrides.get(c.hw.target)
    if not c.hw.has_k_pack and override is not None and override.k_pack not in (None, 1):
        yield Violation(rule="k_pack_target", path=("overrides", c.hw.target.value, "k_pack"), value=override.k_pack,
                        message=f"k_pack exists only for gfx942's MFMA gemm, not {c.hw.target}")
    # a top-level k_pack that no k_pack target takes (none listed, or each overrides it) would be silently ignored;
    # every target finds it alike, and build_instances reports identical lines once
    if c.spec.k_pack != 1 and not any(HARDWARE[t].has_k_pack and c.spec.tuning_for(t)[1]["k_pack"] == ("k_pack",)
                                      for t in c.spec.targets):
        yield Violation(rule="k_pack_target", path=("k_pack",), value=c.spec.k_pack,
                        message="k_pack exists only for gfx942's MFMA gemm, and no gfx942 target here uses this value")


def swizzle_panel(c: GemmContext) -> Iterator[Violation]:
    p = c.tuning.swizzle_panel
    if p not in (0, 1) and p & (p - 1):
        yield Violation(rule="swizzle_panel", path=c.at("swizzle_panel"), value=p,
                        message="must be 0 (off) or a power of two")


GEMM_RULES: tuple[GemmRule, ...] = (
    dtype_supported, wave_multiple, mma_shape, lds_budget, tail_policy, unroll_fits, k_pack_target, swizzle_panel,
)


def check_gemm(spec: GemmSpec, hw: Hardware) -> list[Violation]:
    tuning, origin = spec.tuning_for(hw.target)
    ctx = GemmContext(spec=spec, hw=hw, tuning=tuning, origin=origin)
    return [v for rule in GEMM_RULES for v in rule(ctx)]


# ---- row-wise families (softmax, rmsnorm, layernorm) -----------------------------------------------
# One workgroup per row; a chunk is threads*vector columns (each thread loads `vector` contiguous
# elements). Block reductions combine 32-lane groups (TileLang's warp_reduce is 32 lanes wide on
# both targets) through LDS/shared memory.

REDUCE_GROUP_LANES = 32
ROW_VECTOR_BYTES = 16  # the widest load one thread issues (dwordx4 / LDG.128)
ROW_TYPES = (DType.FP16, DType.BF16, DType.FP32)


@dataclass(frozen=True, kw_only=True)
class RowContext:
    spec: RowSpecBase
    hw: Hardware


RowRule = Callable[[RowContext], Iterator[Violation]]


def row_chunk(spec: RowSpecBase) -> int:
    return spec.threads * spec.vector


def row_lds_bytes(spec: RowSpecBase) -> int:
    """LDS/shared memory of a row kernel: one fp32 partial per 32-lane reduction group."""
    return 4 * max(1, spec.threads // REDUCE_GROUP_LANES)


def row_register_budget(hw: Hardware, threads: int) -> int:
    """fp32 row elements one thread may hold (the online softmax and the registers norm keep the row there):
    half of what a thread gets when the workgroup's threads share one CU's register file,
    min(max_registers_per_thread, register_file_bytes_per_cu / 4 / threads) / 2; the other half is
    left for addresses, statistics and the compiler's temporaries."""
    per_thread = min(hw.max_registers_per_thread, hw.register_file_bytes_per_cu // 4 // max(threads, 1))
    return per_thread // 2


def row_dtype_supported(c: RowContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    for field in ("input", "out"):
        dt = getattr(d, field)
        if dt not in ROW_TYPES:
            yield Violation(rule="dtype_supported", path=("dtypes", field), value=dt.value,
                            message=f"{c.spec.op} takes fp16, bf16 or fp32")
    if d.accumulate != DType.FP32:
        yield Violation(rule="dtype_supported", path=("dtypes", "accumulate"), value=d.accumulate.value,
                        message="the statistics are kept in fp32: accumulate must be fp32")


def row_wave_multiple(c: RowContext) -> Iterator[Violation]:
    yield from threads_violations(c.spec.threads, c.hw, ("threads",))


def row_vector_width(c: RowContext) -> Iterator[Violation]:
    nbytes = c.spec.vector * DTYPE_BYTES[c.spec.dtypes.input]
    if nbytes > ROW_VECTOR_BYTES:
        yield Violation(rule="vector_width", path=("vector",), value=c.spec.vector,
                        message=f"{c.spec.vector} x {c.spec.dtypes.input.value} is {nbytes} B, over the "
                                f"{ROW_VECTOR_BYTES}-byte widest load on {c.hw.target}")


def row_tail_policy(c: RowContext) -> Iterator[Violation]:
    if c.spec.tail != TailPolicy.NONE:
        return
    chunk = row_chunk(c.spec)
    for i, s in enumerate(c.spec.shapes):
        if s.cols % chunk:
            yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                            message=f"cols={s.cols} is not a multiple of threads*vector={chunk}: "
                                    "set tail: predicated or specialized")


def row_registers(c: RowContext) -> Iterator[Violation]:
    spec = c.spec
    if not spec.row_in_registers:
        return
    if spec.threads % c.hw.wave_lanes or spec.threads > c.hw.max_threads_per_workgroup:
        return  # wave_multiple reports the thread count
    budget = row_register_budget(c.hw, spec.threads)
    chunk = row_chunk(spec)
    for i, s in enumerate(spec.shapes):
        held = -(-s.cols // chunk) * spec.vector
        if held > budget:
            yield Violation(rule="row_registers", path=("shapes", i, "cols"), value=s.cols,
                            message=f"the {spec.variant.value} variant holds the row in registers: {held} fp32 per "
                                    f"thread with {spec.threads} threads, over the budget of {budget} on "
                                    f"{c.hw.target} (more threads, or variant: {_streaming_variant(spec)})")


def _streaming_variant(spec: RowSpecBase) -> str:
    return SoftmaxVariant.TWO_PASS.value if isinstance(spec, SoftmaxSpec) else NormVariant.STREAMED.value


def row_unroll(c: RowContext) -> Iterator[Violation]:
    spec = c.spec
    if spec.row_in_registers and spec.unroll != 1:
        yield Violation(rule="unroll_variant", path=("unroll",), value=spec.unroll,
                        message=f"the {spec.variant.value} variant's column loop is always fully unrolled (its row "
                                f"lives in registers); unroll applies to {_streaming_variant(spec)}")


ROW_RULES: tuple[RowRule, ...] = (
    row_dtype_supported, row_wave_multiple, row_vector_width, row_tail_policy, row_registers, row_unroll,
)


# ---- attention ------------------------------------------------------------------------------------
# One workgroup per (query block, head, batch). Both matmuls (S = Q.K^T over head_dim, O += P.V over
# block_n) split the block's query rows among the waves/warps (GemmWarpPolicy.FullRow), so each
# wave owns whole rows of S and the row max/sum never cross waves.

ATTENTION_TYPES = (DType.FP16, DType.BF16)


@dataclass(frozen=True, kw_only=True)
class AttentionContext:
    spec: AttentionSpec
    hw: Hardware
    tuning: AttentionTuning
    origin: dict[str, tuple[str, ...]]

    def at(self, field: str, *rest: str | int) -> FieldPath:
        return self.origin[field] + rest


# TileLang 0.1.15's T.reduce_max / T.reduce_sum on HIP take a workspace of one fp32 per thread in LDS
# each (seen in the lowered source: two `workspace` buffers after the tiles); on CUDA they use warp
# shuffles only.
ATTENTION_REDUCE_WORKSPACES = 2


def attention_lds_bytes(spec: AttentionSpec, tuning: AttentionTuning, hw: Hardware) -> int:
    """Shared-memory bytes of one attention workgroup: the Q tile once, the K and V tiles once per
    pipeline buffer, and on AMD the two reductions' workspaces. Nothing else is allocated in shared
    memory (S, P, O, max and sum are fragments; O is stored straight from registers)."""
    t, d, nbytes = tuning.tiling, spec.head_dim, DTYPE_BYTES[spec.dtypes.input]
    tiles = (t.block_m * d + 2 * t.block_n * d * max(1, tuning.pipeline.stages)) * nbytes
    workspace = ATTENTION_REDUCE_WORKSPACES * t.threads * 4 if hw.vendor == "amd" else 0
    return tiles + workspace


AttentionRule = Callable[[AttentionContext], Iterator[Violation]]


def attn_dtype_supported(c: AttentionContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    if d.input not in ATTENTION_TYPES:
        yield Violation(rule="dtype_supported", path=("dtypes", "input"), value=d.input.value,
                        message="attention takes fp16 or bf16")
    if d.out != d.input:
        yield Violation(rule="dtype_supported", path=("dtypes", "out"), value=d.out.value,
                        message=f"must equal dtypes.input ({d.input.value})")
    if d.accumulate != DType.FP32:
        yield Violation(rule="dtype_supported", path=("dtypes", "accumulate"), value=d.accumulate.value,
                        message="the scores, running max and sum are kept in fp32: accumulate must be fp32")


def attn_head_dim(c: AttentionContext) -> Iterator[Violation]:
    if c.spec.head_dim not in ATTENTION_HEAD_DIMS:
        yield Violation(rule="head_dim", path=("head_dim",), value=c.spec.head_dim,
                        message=f"supported head_dim values are {', '.join(map(str, ATTENTION_HEAD_DIMS))}")


def attn_gqa_heads(c: AttentionContext) -> Iterator[Violation]:
    for i, s in enumerate(c.spec.shapes):
        if s.heads % s.kv_heads:
            yield Violation(rule="gqa_heads", path=("shapes", i, "kv_heads"), value=s.kv_heads,
                            message=f"must divide heads={s.heads} (each K/V head serves heads/kv_heads query heads)")


def attn_wave_multiple(c: AttentionContext) -> Iterator[Violation]:
    yield from threads_violations(c.tuning.tiling.threads, c.hw, c.at("tiling", "threads"))


def attn_mma_shape(c: AttentionContext) -> Iterator[Violation]:
    t, hw = c.tuning.tiling, c.hw
    mma = hw.mma_shapes[c.spec.dtypes.input][0] if c.spec.dtypes.input in ATTENTION_TYPES else None
    if mma is None:
        return  # dtype_supported reports it
    word = f"{c.spec.dtypes.input.value} MMA tile {mma} on {hw.target}"
    n_step = max(mma.n, mma.k)  # block_n is the N of Q.K^T and the K of P.V
    if t.block_n % n_step:
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"must be a multiple of {n_step} (the N and K of the {word})")
    if t.threads % hw.wave_lanes or not hw.min_threads <= t.threads <= hw.max_threads_per_workgroup:
        return  # wave_multiple reports the thread count
    waves = t.threads // hw.wave_lanes
    if t.block_m % (waves * mma.m):
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_m"), value=t.block_m,
                        message=f"must be a multiple of {waves * mma.m}: {waves} {hw.wave_word}s each own whole "
                                f"{mma.m}-row MMA tiles of the query block (the {word})")


def attn_lds_budget(c: AttentionContext) -> Iterator[Violation]:
    need, have = attention_lds_bytes(c.spec, c.tuning, c.hw), c.hw.lds_bytes_per_workgroup
    if need > have:
        t, stages = c.tuning.tiling, max(1, c.tuning.pipeline.stages)
        yield Violation(
            rule="lds_budget", path=c.at("tiling"), value=None,
            message=f"Q {t.block_m}x{c.spec.head_dim} + (K + V) {t.block_n}x{c.spec.head_dim} x {stages} stage(s)"
                    f"{' + reduction workspaces' if c.hw.vendor == 'amd' else ''} "
                    f"need {need} B ({need / 1024:g} KiB) of {c.hw.lds_word}, over the {have} B ({have / 1024:g} KiB) "
                    f"per workgroup on {c.hw.target}")


def attn_tail_policy(c: AttentionContext) -> Iterator[Violation]:
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="tail_policy", path=("tail",), value=c.spec.tail.value,
                        message="attention has no specialized edge kernels: use none or predicated")
    if c.spec.tail != TailPolicy.NONE:
        return
    t = c.tuning.tiling
    where = f" on {c.hw.target}" if c.origin["tiling"][0] == "overrides" else ""
    for i, s in enumerate(c.spec.shapes):
        dims = (("seq_q", s.seq_q, "block_m", t.block_m), ("seq_kv", s.seq_kv, "block_n", t.block_n))
        ragged = [f"{d}={v} is not a multiple of {b}={bv}" for d, v, b, bv in dims if v % bv]
        if ragged:
            yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                            message=f"{', '.join(ragged)}{where}: set tail: predicated")


ATTENTION_RULES: tuple[AttentionRule, ...] = (
    attn_dtype_supported, attn_head_dim, attn_gqa_heads, attn_wave_multiple, attn_mma_shape, attn_lds_budget,
    attn_tail_policy,
)


def check_attention(spec: AttentionSpec, hw: Hardware) -> list[Violation]:
    tuning, origin = spec.tuning_for(hw.target)
    ctx = AttentionContext(spec=spec, hw=hw, tuning=tuning, origin=origin)
    return [v for rule in ATTENTION_RULES for v in rule(ctx)]


def check(spec, hw: Hardware) -> list[Violation]:
    """Every legality rule of the spec's operator family on one target."""
    if isinstance(spec, GemmSpec):
        return check_gemm(spec, hw)
    if isinstance(spec, AttentionSpec):
        return check_attention(spec, hw)
    ctx = RowContext(spec=spec, hw=hw)
    return [v for rule in ROW_RULES for v in rule(ctx)]
