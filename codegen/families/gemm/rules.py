"""GEMM legality rules: named predicates over (spec, target), each yielding `Violation`s."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from codegen.families.gemm.spec import (
    B_EVICTION,
    EPILOGUE,
    LDS_LAYOUT,
    MAX_SPLIT_K,
    Epilogue,
    Eviction,
    GemmShape,
    GemmSpec,
    GemmTuning,
    GridPolicy,
    Layout,
    LdsLayout,
    Precision,
    Staging,
    Structure,
)
from codegen.hardware import DTYPE_BYTES, DType
from codegen.rules import TunedContext, Violation, target_only_value, threads_violations
from codegen.spec import K_PACK, TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec
from codegen.yamlsrc import format_path

GemmContext = TunedContext[GemmSpec, GemmTuning]


GEMV_MAX_M = 16  # the small-M path holds every row of A's products in each lane's registers
GEMV_DTYPES = (DType.FP16, DType.BF16)
VECTOR_BYTES = 16  # one global load per lane


def gemv_vector(spec: GemmSpec) -> int:
    """Elements of one 16-byte load of B (and A) in the gemv structure."""
    return VECTOR_BYTES // DTYPE_BYTES[spec.dtypes.a]


def transposed_b_rows(block_k: int, block_n: int, threads: int, vector: int) -> int | None:
    """lds_layout transposed_b: the consecutive rows (K) of B's block_k x block_n tile each thread loads,
    `vector` elements (16 bytes) of each, so that the threads cover the tile once -- (block_k / rows) threads
    along K, fastest, times (block_n / vector) along N. None where the tile cannot be split so (rule
    lds_layout_tile)."""
    per_thread, rest = divmod(block_k * block_n, threads * vector)
    if rest or block_n % vector or block_k % per_thread:  # rest: fewer elements than threads x vector too
        return None
    return per_thread


def lds_bytes(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> int:
    """Shared-memory bytes of one GEMM workgroup: the A and B tiles times the pipeline's buffers -- for tf32
    and 3xtf32 (gemm_xf32.py.j2's main kernel) the staged TF32 tile sets: one (tf32) or two (3xtf32: high parts
    and residuals) per buffer; its staging kernels hold one A or B tile, less. With epilogue shared (where it
    applies: shared_epilogue) the C tile in the output dtype too, in the same bytes: TileLang 0.1.15 merges
    shared buffers whose lifetimes do not overlap, and the C tile lives after the K loop, so it takes the
    pipeline's buffers (the lowered source places it at offset 0 with them) -- the larger of the two counts.
    gemv: its lanes load straight into registers; only the cross-lane sum takes one fp32 a thread, on targets
    whose reductions go through LDS."""
    if tuning.structure == Structure.GEMV:
        return tuning.tiling.threads * 4 if target.reduce_workspace_in_lds else 0
    t = tuning.tiling
    per_stage = t.block_m * t.block_k * DTYPE_BYTES[spec.dtypes.a] + t.block_n * t.block_k * DTYPE_BYTES[spec.dtypes.b]
    pipeline = per_stage * max(1, tuning.pipeline.stages) * tf32_tile_sets(spec)
    return max(pipeline, c_tile_bytes(spec, tuning)) if shared_epilogue(spec, tuning, target) else pipeline


def c_tile_bytes(spec: GemmSpec, tuning: GemmTuning) -> int:
    """The shared-memory C tile of epilogue shared: block_m x block_n in the output dtype."""
    return tuning.tiling.block_m * tuning.tiling.block_n * DTYPE_BYTES[spec.dtypes.out]


def tma_copy_misfit(spec: GemmSpec, tuning: GemmTuning) -> str | None:
    """Why the TMA copy options (b_eviction, epilogue) do not apply to this configuration: only the tiles
    templates of fp16/bf16/fp8 inputs have them (gemm_tma.py.j2), None where they do."""
    if tuning.structure == Structure.GEMV:
        return "structure gemv (no tiles through shared memory)"
    if spec.dtypes.a == DType.FP32:
        return "fp32 inputs (their templates, gemm_fp32 and gemm_xf32, have no such copy)"
    if tuning.split_k > 1:
        return f"split_k={tuning.split_k} yet (the split-K template has no such copy)"
    if spec.dynamic_m is not None:
        return "dynamic_m yet (the dynamic-M template has no such copy)"
    if tuning.grid == GridPolicy.PERSISTENT:
        return "grid persistent yet (the persistent template has no such copy)"
    if tuning.staging == Staging.PADDED:
        return "staging padded yet (the padded template has no such copy)"
    return None


def b_eviction(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> Eviction:
    """The eviction priority the target's kernel gets: the asked one on a target with TMA copies where it
    applies, else normal (rules b_eviction_target, b_eviction_combination refuse asking it there)."""
    if target.tma_copies and tma_copy_misfit(spec, tuning) is None:
        return tuning.b_eviction
    return Eviction.NORMAL


def shared_epilogue(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> bool:
    """epilogue shared, on a target with TMA copies, where it applies (as b_eviction)."""
    return (tuning.epilogue == Epilogue.SHARED and target.tma_copies and tma_copy_misfit(spec, tuning) is None)


def tf32_tile_sets(spec: GemmSpec) -> int:
    """A+B tile sets per pipeline buffer: 2 for 3xtf32 (high parts and residuals), else 1."""
    return 2 if spec.dtypes.a == DType.FP32 and spec.precision == Precision.X3TF32 else 1


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


def precision_dtype(c: GemmContext) -> Iterator[Violation]:
    """Rule precision_dtype: tf32 and 3xtf32 say how fp32 inputs meet the tensor cores; other inputs
    (fp16, bf16, fp8) enter the MMA exactly, so only the default `ieee` means anything for them."""
    if c.spec.precision != Precision.IEEE and c.spec.dtypes.a != DType.FP32:
        yield Violation(rule="precision_dtype", path=("precision",), value=c.spec.precision.value,
                        message=f"only for fp32 inputs (dtypes.a is {c.spec.dtypes.a.value}, whose products the MMA "
                                "forms exactly): remove it or use ieee")


def precision_target(c: GemmContext) -> Iterator[Violation]:
    """Rule precision_target: a mode the target's generated code cannot do (TargetSpec.fp32_precisions)."""
    p = c.spec.precision
    if c.spec.dtypes.a == DType.FP32 and p.value not in c.target.fp32_precisions:
        yield Violation(rule="precision_target", path=("precision",), value=p.value,
                        message=f"not possible on {c.hw.target}: {c.target.fp32_precision_note}; "
                                f"drop {c.hw.target} from targets or use {' / '.join(c.target.fp32_precisions)}")


def precision_schedule(c: GemmContext) -> Iterator[Violation]:
    """Rule precision_schedule: tf32 and 3xtf32 (gemm_xf32.py.j2) stage both operands into padded K-major
    workspaces, so the main kernel only ever sees whole blocks: no specialized edge kernels, and its K loop is
    TileLang's pipeline (no explicit unroll)."""
    if c.spec.dtypes.a != DType.FP32 or c.spec.precision == Precision.IEEE:
        return
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="precision_schedule", path=("tail",), value=c.spec.tail.value,
                        message=f"{c.spec.precision.value} pads both operands to whole blocks, so there are no edge "
                                "kernels to specialize: use predicated (ragged shapes) or none")
    if c.tuning.unroll > 1:
        yield Violation(rule="precision_schedule", path=c.at("unroll"), value=c.tuning.unroll,
                        message=f"{c.spec.precision.value}'s K loop is TileLang's pipeline (pipeline.stages), "
                                "not an explicit unroll: use unroll 1")


def wave_multiple(c: GemmContext) -> Iterator[Violation]:
    yield from threads_violations(c.tuning.tiling.threads, c.hw, c.at("tiling", "threads"))


def mma_shape(c: GemmContext) -> Iterator[Violation]:
    t = c.tuning.tiling
    mma = c.hw.mma_shapes[c.spec.dtypes.a][0]
    k_pack = c.tuning.k_pack if c.target.supports_k_pack else 1
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
    need = lds_bytes(c.spec, c.tuning, c.target)
    have = c.hw.lds_bytes_per_workgroup
    if need > have:
        t = c.tuning.tiling
        # epilogue shared: the C tile reuses the pipeline's bytes, so it is named only where it is the larger
        c_tile = c_tile_bytes(c.spec, c.tuning) if shared_epilogue(c.spec, c.tuning, c.target) else 0
        what = (f"the epilogue's {t.block_m}x{t.block_n} {c.spec.dtypes.out.value} C tile (epilogue shared; it "
                "reuses the smaller pipeline buffers)" if c_tile == need else
                f"{t.block_m}x{t.block_n}x{t.block_k} tiles x {max(1, c.tuning.pipeline.stages)} stage(s)"
                + (" x 2 (3xtf32: high parts and residuals)" if tf32_tile_sets(c.spec) == 2 else ""))
        yield Violation(
            rule="lds_budget", path=c.at("tiling"), value=None,
            message=f"{what} need{'s' if c_tile == need else ''} "
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
        if c.tuning.structure == Structure.GEMV:
            dims = dims[1:]  # gemv serves all of M in each workgroup (rule gemv_shape)
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
    yield from unroll_divides(c)


def unroll_divides(c: GemmContext) -> Iterator[Violation]:
    """Rule unroll_divides: every k is whole rounds of unroll K steps of block_k -- in each of split_k
    equal splits when the K range is split (the unrolled loop has no remainder round)."""
    bk, u = c.tuning.tiling.block_k, c.tuning.unroll
    sk = c.tuning.split_k if c.tuning.structure == Structure.TILED else 1  # gemv: rule split_k_structure
    step, word = (bk * u * sk, "block_k*unroll*split_k") if sk > 1 else (bk * u, "block_k*unroll")
    for i, s in enumerate(c.spec.shapes):
        if s.k % step:
            yield Violation(rule="unroll_divides", path=c.at("unroll"), value=u,
                            message=f"shapes[{i}].k={s.k} is not a multiple of {word}={step}")


def k_pack_target(c: GemmContext) -> Iterator[Violation]:
    """Rule k_pack_target: k_pack is an argument of TileLang's ROCm gemm only (TargetSpec.supports_k_pack)."""
    yield from target_only_value(c, K_PACK, lambda v: f"k_pack exists only for the ROCm MFMA gemm "
                                                      f"({', '.join(_k_pack_targets())})", "k_pack_target")


def _k_pack_targets() -> list[str]:
    return [t.value for t, spec in TARGETS.items() if spec.supports_k_pack]


def _lds_layout_targets(layout: LdsLayout) -> list[str]:
    return [t.value for t, spec in TARGETS.items() if layout.value in spec.gemm_lds_layouts]


def lds_layout_target(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_target: transposed_b exists only where the target's template was built for it
    (TargetSpec.gemm_lds_layouts: gfx942, gfx950); a target-only value as k_pack (target_only_value)."""
    yield from target_only_value(c, LDS_LAYOUT, lambda v: f"{v.value} is only for {', '.join(_lds_layout_targets(v))}",
                                 "lds_layout_target")


def _transposed_b_asked(c: GemmContext) -> bool:
    """transposed_b asked of a target that takes it (another stages B as stored: rule lds_layout_target)."""
    return c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and c.tuning.lds_layout.value in c.target.gemm_lds_layouts


def _transposed_b_misfit(c: GemmContext) -> str | None:
    if c.tuning.structure == Structure.GEMV:
        return "structure gemv stages no B tile in LDS"
    if c.spec.layout.trans_b:
        return f"layout {c.spec.layout.value} stores B as N x K, K contiguous already: use natural"
    if c.spec.dtypes.b == DType.FP32:
        return "fp32 GEMMs stage B as stored (gemm_fp32.py.j2): use natural"
    return None


def lds_layout_applies(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_applies: transposed_b rewrites how a K x N B tile (layouts nn, tn) of fp16/bf16 goes
    into LDS for the matrix cores. It means nothing for a B stored N x K (nt, tt: already K-contiguous), for
    fp32 inputs (gemm_fp32.py.j2 stages B as stored) or for the gemv structure (no LDS tile)."""
    why = _transposed_b_misfit(c) if _transposed_b_asked(c) else None
    if why:
        yield Violation(rule="lds_layout_applies", path=c.at("lds_layout"), value=c.tuning.lds_layout.value,
                        message=why)


def lds_layout_tile(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_tile: transposed_b splits the block_k x block_n tile of B into whole 16-byte runs of
    its rows, the same number of consecutive rows for every thread (transposed_b_rows)."""
    if not _transposed_b_asked(c) or _transposed_b_misfit(c):
        return
    t = c.tuning.tiling
    vec = VECTOR_BYTES // DTYPE_BYTES[c.spec.dtypes.b]
    if transposed_b_rows(t.block_k, t.block_n, t.threads, vec) is None:
        yield Violation(rule="lds_layout_tile", path=c.at("lds_layout"), value=c.tuning.lds_layout.value,
                        message=f"the {t.block_k}x{t.block_n} tile of B (block_k x block_n) does not split into "
                                f"{t.threads} threads x whole rows of {vec} elements ({VECTOR_BYTES} bytes): "
                                f"block_k * block_n must be a multiple of threads * {vec}, and block_k of the rows "
                                "per thread")


def swizzle_panel(c: GemmContext) -> Iterator[Violation]:
    p = c.tuning.swizzle_panel
    if p not in (0, 1) and p & (p - 1):
        yield Violation(rule="swizzle_panel", path=c.at("swizzle_panel"), value=p,
                        message="must be 0 (off) or a power of two")


INT32_LITERAL_LIMIT = 2**31  # TileLang checks every integer literal of an int32 index against it


def edge_offset_index_width(c: GemmContext) -> Iterator[Violation]:
    """Rule index_width: the `specialized` bottom-edge kernel's first element of C, (m // block_m * block_m)
    * n, is a compile-time literal, and TileLang (0.1.x) fails to lower an index literal >= 2**31 ("Literal
    value 2147483648 exceeds maximum of int32", seen lowering m=32771, n=65536 on both targets) instead of
    widening it. `predicated` and `none` index C through int64 there (tests/test_limits.py reads it)."""
    if c.spec.tail != TailPolicy.SPECIALIZED:
        return
    bm = c.tuning.tiling.block_m
    for i, s in enumerate(c.spec.shapes):
        start = s.m // bm * bm * s.n
        if s.m % bm and start >= INT32_LITERAL_LIMIT:
            yield Violation(rule="index_width", path=("shapes", i), value=None,
                            message=f"the specialized bottom-edge kernel starts at element {start} of C "
                                    f"((m // block_m * block_m) * n), past the int32 literals TileLang lowers: "
                                    "use tail: predicated")


def gemv_shape(c: GemmContext) -> Iterator[Violation]:
    """Rule gemv_shape: the small-M structure streams B's rows (N x K, K contiguous: layout nt) in 16-byte
    vectors, block_k // vector lanes to a column of C (a power of two within one wave, which sums them with a
    cross-lane reduction), block_n columns a workgroup, every row of A (m <= block_m <= 16) in registers."""
    t, hw = c.tuning.tiling, c.hw
    vec = gemv_vector(c.spec)
    if c.spec.layout != Layout.NT:
        yield Violation(rule="gemv_shape", path=("layout",), value=c.spec.layout.value,
                        message="structure gemv streams B's rows along K: use layout nt (A: M x K, B: N x K)")
    if c.spec.dtypes.a not in GEMV_DTYPES:
        yield Violation(rule="gemv_shape", path=("dtypes", "a"), value=c.spec.dtypes.a.value,
                        message=f"structure gemv takes {' or '.join(d.value for d in GEMV_DTYPES)} inputs")
        return
    if t.block_m > GEMV_MAX_M:
        yield Violation(rule="gemv_shape", path=c.at("tiling", "block_m"), value=t.block_m,
                        message=f"structure gemv keeps every row of A in registers: at most {GEMV_MAX_M} rows")
    for i, s in enumerate(c.spec.shapes):
        if s.m > t.block_m:
            yield Violation(rule="gemv_shape", path=("shapes", i), value=None,
                            message=f"m={s.m} is over tiling.block_m={t.block_m}, the rows one gemv workgroup serves")
        if s.k % vec:
            yield Violation(rule="gemv_shape", path=("shapes", i), value=None,
                            message=f"k={s.k} is not a multiple of {vec}: gemv loads K in {VECTOR_BYTES}-byte vectors")
    lanes = t.block_k // vec
    if t.block_k % vec or lanes & (lanes - 1) or lanes > hw.wave_lanes:
        yield Violation(rule="gemv_shape", path=c.at("tiling", "block_k"), value=t.block_k,
                        message=f"must be {vec} (one {VECTOR_BYTES}-byte vector) times a power of two up to "
                                f"{hw.wave_lanes} (the lanes of one {hw.wave_word} that sum a column)")
    elif t.threads != lanes * t.block_n:
        yield Violation(rule="gemv_shape", path=c.at("tiling", "threads"), value=t.threads,
                        message=f"must be block_n * block_k / {vec} = {lanes * t.block_n}: one lane per vector "
                                "of a K step, for each of the block's columns")


def gemv_unroll(c: GemmContext) -> Iterator[Violation]:
    """unroll_divides for gemv, where a tail policy guards the K steps (and tail_policy covers unroll 1)."""
    if c.spec.tail == TailPolicy.NONE and c.tuning.unroll > 1:
        yield from unroll_divides(c)


def dynamic_m(c: GemmContext) -> Iterator[Violation]:
    """Rules dynamic_m_*: a kernel compiled with M symbolic (T.dynamic) serves every M of `dynamic_m` with one
    binary. dynamic_m_range: min <= max, and every shape's m (the workloads verify and bench run) inside.
    dynamic_m_tail: the last row block is ragged for an arbitrary M, so loads and stores along M must be
    bounds-checked -- tail: predicated (none has no checks; specialized splits interior and edge kernels at
    M // block_m, which a symbolic M does not fix). dynamic_m_structure: the tiled structure only (gemv keeps
    every row of A in registers, at most block_m <= 16). dynamic_m_dtype: not fp32 inputs (their template,
    gemm_fp32.py.j2, has no dynamic-M entry point). dynamic_m_search: no search block -- a lockfile picks a
    kernel per shape, and a dynamic-M spec is one kernel for every M. dynamic_m_layout: not with lds_layout
    transposed_b where that applies (gemm_transposed_b.py.j2 has no dynamic-M entry point). The grid at M = max is rule grid_limit
    (codegen.instance.grid_limit over GemmInstance.limit_shapes)."""
    r = c.spec.dynamic_m
    if r is None:
        return
    if r.min > r.max:
        yield Violation(rule="dynamic_m_range", path=("dynamic_m", "min"), value=r.min,
                        message=f"is over dynamic_m.max={r.max}: the range is empty")
    else:
        for i, s in enumerate(c.spec.shapes):
            if not r.min <= s.m <= r.max:
                yield Violation(rule="dynamic_m_range", path=("shapes", i, "m"), value=s.m,
                                message=f"is outside dynamic_m [{r.min}, {r.max}], the rows the kernel serves")
    if c.spec.tail != TailPolicy.PREDICATED:
        yield Violation(rule="dynamic_m_tail", path=("tail",), value=c.spec.tail.value,
                        message="a dynamic M leaves the last row block ragged: use tail: predicated "
                                "(bounds-checked loads and stores)")
    if c.tuning.structure != Structure.TILED:
        yield Violation(rule="dynamic_m_structure", path=c.at("structure"), value=c.tuning.structure.value,
                        message="dynamic_m needs structure tiled (gemv serves at most block_m <= "
                                f"{GEMV_MAX_M} rows, known when it is compiled)")
    if c.spec.dtypes.a == DType.FP32:
        yield Violation(rule="dynamic_m_dtype", path=("dynamic_m",), value=None,
                        message="not for fp32 inputs yet: their template (precision modes) has no dynamic-M "
                                "entry point")
    if c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and LdsLayout.TRANSPOSED_B.value in c.target.gemm_lds_layouts:
        yield Violation(rule="dynamic_m_layout", path=c.at("lds_layout"), value=c.tuning.lds_layout.value,
                        message=f"not with dynamic_m on {c.hw.target} yet: the transposed-B template has no dynamic-M "
                                "entry point; use lds_layout: natural")
    if c.spec.search:
        yield Violation(rule="dynamic_m_search", path=("search",), value=None,
                        message="a dynamic-M spec is one kernel for every M, and tuning picks a kernel per "
                                "shape: remove search or dynamic_m")


# split-K (split_k > 1, structure tiled): split s of split_k takes K tiles [s*t, (s+1)*t), t = split_tiles(...),
# of the ceil(k/block_k) and writes its fp32 partial block to a workspace [split_k, M, N]; a second kernel
# sums the partials in the fixed order s = 0..split_k-1 and rounds once (gemm_splitk.py.j2)
SPLIT_K_WORKSPACE_BYTES = 256 * 2**20  # rule split_k_workspace: the fp32 partials the caller allocates
# what the tiles templates of gemm.py.j2's kind take (split-K, persistent, padded): fp32 inputs have their own
# (gemm_fp32.py.j2, gemm_xf32.py.j2)
TILE_TEMPLATE_DTYPES = (DType.FP16, DType.BF16, DType.FP8_E4M3)


def split_tiles(k: int, block_k: int, split_k: int) -> int:
    """K tiles every split runs: ceil(k / (block_k * split_k)) = ceil(ceil(k / block_k) / split_k); the
    tiles past ceil(k / block_k) (tail predicated: in the last split) are out of bounds and load as zeros."""
    return -(-k // (block_k * split_k))


def split_k_workspace_bytes(split_k: int, m: int, n: int) -> int:
    """Bytes of the fp32 workspace of one split-K launch: split_k partial products of C (M x N)."""
    return split_k * m * n * 4


def split_k_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules split_k_*: what a K split needs. split_k_limit: at most MAX_SPLIT_K splits. split_k_structure:
    only the tiled structure splits K (gemv's lanes of a column already share K). split_k_tail: not with
    tail: specialized (its interior and edge kernels would each need a split and a sum). split_k_dtype: fp16,
    bf16, fp8 inputs (fp32's precision modes have their own template, without a split). split_k_divides
    (tail none): every k is split_k equal runs of whole K tiles, k % (block_k * split_k) == 0. split_k_tiles
    (tail predicated): each split runs t = ceil(k / (block_k * split_k)) K tiles, and the last split must still
    get at least one of the ceil(k / block_k) real ones (the rest of its run, and a ragged last tile, load
    zeros). split_k_workspace: split_k * m * n fp32 partials within SPLIT_K_WORKSPACE_BYTES.
    split_k_combination: not with dynamic_m, nor with lds_layout transposed_b where that applies (their
    templates have no K split)."""
    sk = c.tuning.split_k
    if sk == 1:
        return
    at = c.at("split_k")
    if sk > MAX_SPLIT_K:
        yield Violation(rule="split_k_limit", path=at, value=sk,
                        message=f"at most {MAX_SPLIT_K} splits of the K range (each writes an fp32 partial of C)")
    if c.tuning.structure != Structure.TILED:
        yield Violation(rule="split_k_structure", path=at, value=sk,
                        message=f"only structure tiled splits K (this is {c.tuning.structure.value}): leave split_k at 1")
        return
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="split_k_tail", path=("tail",), value=c.spec.tail.value,
                        message=f"split_k={sk} needs tail: none or predicated (the specialized interior and edge "
                                "kernels have no K split)")
    if c.spec.dtypes.a not in TILE_TEMPLATE_DTYPES:
        yield Violation(rule="split_k_dtype", path=at, value=sk,
                        message=f"a K split takes {', '.join(d.value for d in TILE_TEMPLATE_DTYPES)} inputs, not "
                                f"{c.spec.dtypes.a.value} (the fp32 precision modes have no split): leave split_k at 1")
    if c.spec.dynamic_m is not None:
        yield Violation(rule="split_k_combination", path=at, value=sk,
                        message="not with dynamic_m yet (the dynamic-M template has no K split): leave split_k at 1")
    if c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and LdsLayout.TRANSPOSED_B.value in c.target.gemm_lds_layouts:
        yield Violation(rule="split_k_combination", path=at, value=sk,
                        message=f"not with lds_layout transposed_b on {c.hw.target} yet (the transposed-B template has "
                                "no K split): leave split_k at 1 or use lds_layout: natural")
    bk = c.tuning.tiling.block_k
    where = f" on {c.hw.target}" if "overrides" in (c.origin["split_k"][0], c.origin["tiling"][0]) else ""
    for i, s in enumerate(c.spec.shapes):
        if c.spec.tail == TailPolicy.NONE and s.k % bk == 0 and s.k % (bk * sk):  # tail_policy reports k % block_k
            yield Violation(rule="split_k_divides", path=("shapes", i), value=None,
                            message=f"k={s.k} is not a multiple of block_k*split_k={bk * sk}{where}: every split "
                                    "takes the same whole K tiles (or set tail: predicated)")
        tiles, run = -(-s.k // bk), split_tiles(s.k, bk, sk)
        if c.spec.tail == TailPolicy.PREDICATED and (sk - 1) * run >= tiles:
            yield Violation(rule="split_k_tiles", path=("shapes", i), value=None,
                            message=f"k={s.k} is {tiles} K tile(s) of block_k={bk}: split_k={sk} runs of {run} "
                                    f"leave the last split none{where}: every split needs at least one")
        need = split_k_workspace_bytes(sk, s.m, s.n)
        if need > SPLIT_K_WORKSPACE_BYTES:
            yield Violation(rule="split_k_workspace", path=("shapes", i), value=None,
                            message=f"split_k={sk} x m={s.m} x n={s.n} fp32 partials need {need} B "
                                    f"({need / 2**20:g} MiB) of workspace, over {SPLIT_K_WORKSPACE_BYTES // 2**20} MiB{where}")


def persistent_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules persistent_*: grid persistent launches min(tiles, compute_units x resident) workgroups that loop over
    the output tiles (gemm_persistent.py.j2, its own template). persistent_structure: the tiled structure only
    (gemv has no output tiles to loop over). persistent_tail: tail none or predicated (specialized launches
    three kernels over interior and edges, each its own grid). persistent_dtype: fp16, bf16, fp8 inputs (fp32's
    precision modes have their own templates, without the loop). persistent_combination: not with split_k > 1,
    dynamic_m, nor lds_layout transposed_b where that applies (their templates have no tile loop).
    persistent_residency: one workgroup must fit on a CU/SM (TargetSpec.resident_workgroups > 0)."""
    if c.tuning.grid != GridPolicy.PERSISTENT:
        return
    at, g = c.at("grid"), c.tuning.grid.value
    if c.tuning.structure != Structure.TILED:
        yield Violation(rule="persistent_structure", path=at, value=g,
                        message=f"only structure tiled has output tiles to loop over (this is "
                                f"{c.tuning.structure.value}): use grid: tiles")
        return
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="persistent_tail", path=("tail",), value=c.spec.tail.value,
                        message="grid persistent needs tail: none or predicated (the specialized interior and edge "
                                "kernels each launch their own grid)")
    if c.spec.dtypes.a not in TILE_TEMPLATE_DTYPES:
        yield Violation(rule="persistent_dtype", path=at, value=g,
                        message=f"a persistent grid takes {', '.join(d.value for d in TILE_TEMPLATE_DTYPES)} inputs, not "
                                f"{c.spec.dtypes.a.value} (the fp32 templates have no tile loop): use grid: tiles")
    if c.tuning.split_k > 1:
        yield Violation(rule="persistent_combination", path=at, value=g,
                        message=f"not with split_k={c.tuning.split_k} yet (the split-K template has no tile loop): "
                                "use grid: tiles or split_k: 1")
    if c.spec.dynamic_m is not None:
        yield Violation(rule="persistent_combination", path=at, value=g,
                        message="not with dynamic_m yet (the dynamic-M template has no tile loop): use grid: tiles")
    if c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and LdsLayout.TRANSPOSED_B.value in c.target.gemm_lds_layouts:
        yield Violation(rule="persistent_combination", path=at, value=g,
                        message=f"not with lds_layout transposed_b on {c.hw.target} yet (the transposed-B template "
                                "has no tile loop): use grid: tiles or lds_layout: natural")
    need = lds_bytes(c.spec, c.tuning, c.target)
    if need <= c.hw.lds_bytes_per_workgroup and c.target.resident_workgroups(c.tuning.tiling.threads, need) < 1:
        yield Violation(rule="persistent_residency", path=at, value=g,
                        message=f"a workgroup of {c.tuning.tiling.threads} threads and {need} B of {c.hw.lds_word} "
                                f"does not fit on one {c.hw.target} CU/SM at all: use grid: tiles")


# the sm_90 TMA copy options of the tiles template (gemm_tma.py.j2): spec field -> (its default, what it is)
TMA_OPTIONS = {"b_eviction": (B_EVICTION, "an L2 hint on TMA loads"),
               "epilogue": (EPILOGUE, "C through shared memory to TMA stores")}
TMA_ALIGN_BYTES = 16  # a TMA tensor's strides: multiples of 16 bytes (cuTensorMapEncodeTiled)


def _tma_targets() -> list[str]:
    return [t.value for t, spec in TARGETS.items() if spec.tma_copies]


def tma_copy_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules b_eviction_* and epilogue_*: the copy options only sm_90's TMA has. *_target: as lds_layout, a
    top-level value is used by the targets with TMA copies (TargetSpec.tma_copies: sm_90) and the others keep
    the default; asking it of another target's override, or of no target that has it, is an error.
    *_combination: the tiles template only (gemm_tma.py.j2) -- not structure gemv, fp32 inputs, split_k > 1,
    dynamic_m, grid persistent nor staging padded (their templates have no such copy). b_eviction_tma: B's rows a multiple of
    16 bytes at every shape (k for layouts nt/tt, n for nn/tn), else TileLang loads B without TMA and the hint
    never reaches the code. epilogue_tma: C's rows (n) a multiple of 16 bytes, else TileLang stores the shared
    C tile with plain stores, no TMA store. The C tile's shared memory is rule lds_budget (lds_bytes)."""
    for name, (only, what) in TMA_OPTIONS.items():
        yield from target_only_value(c, only, lambda v, n=name, w=what: f"{n} {v.value} is {w}, only for "
                                                                         f"{', '.join(_tma_targets())}", f"{name}_target")
    if not c.target.tma_copies:
        return
    asked = {name: getattr(c.tuning, name) for name, (only, _) in TMA_OPTIONS.items()
             if getattr(c.tuning, name) != only.default}
    why = tma_copy_misfit(c.spec, c.tuning) if asked else None
    for name, value in asked.items():
        if why:
            yield Violation(rule=f"{name}_combination", path=c.at(name), value=value.value,
                            message=f"not with {why}: leave {name} at {TMA_OPTIONS[name][0].default.value}")
    if why:
        return
    b, out = c.spec.dtypes.b, c.spec.dtypes.out
    for i, s in enumerate(c.spec.shapes):
        dim, row = leading_dims(c.spec.layout, s)["B"]
        if "b_eviction" in asked and row * DTYPE_BYTES[b] % TMA_ALIGN_BYTES:
            yield Violation(rule="b_eviction_tma", path=("shapes", i), value=None,
                            message=f"B's rows are {dim}={row} {b.value} elements ({row * DTYPE_BYTES[b]} B), not a "
                                    f"multiple of {TMA_ALIGN_BYTES} B: TileLang loads B without TMA there, and "
                                    f"b_eviction {asked['b_eviction'].value} would not reach the code")
        if "epilogue" in asked and s.n * DTYPE_BYTES[out] % TMA_ALIGN_BYTES:
            yield Violation(rule="epilogue_tma", path=("shapes", i), value=None,
                            message=f"C's rows are n={s.n} {out.value} elements ({s.n * DTYPE_BYTES[out]} B), not a "
                                    f"multiple of {TMA_ALIGN_BYTES} B: TileLang stores the shared C tile without TMA "
                                    "there (use epilogue: direct)")


# staging padded: A and B copied into zero-padded workspaces of whole blocks before the main kernel
# (gemm_padded.py.j2), for shapes where an operand's rows do not start on 16-byte boundaries


def leading_dims(layout: Layout, shape: GemmShape) -> dict[str, tuple[str, int]]:
    """Per operand, the dimension its stored rows run along (the stride between rows, in elements): A is
    M x K (stride k) or, stored transposed, K x M (stride m); B is K x N (stride n) or N x K (stride k)."""
    return {"A": ("m", shape.m) if layout.trans_a else ("k", shape.k),
            "B": ("k", shape.k) if layout.trans_b else ("n", shape.n)}


def unaligned_operands(spec: GemmSpec, shape: GemmShape) -> list[str]:
    """The operands whose rows do not start on VECTOR_BYTES boundaries at this shape (leading dimension not a
    multiple of VECTOR_BYTES / element bytes): their tiles cannot be read with 16-byte or TMA loads."""
    vec = VECTOR_BYTES // DTYPE_BYTES[spec.dtypes.a]
    return [op for op, (_, ld) in leading_dims(spec.layout, shape).items() if ld % vec]


def staging_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules staging_*: what staging padded needs. staging_structure: the tiled structure (gemv reads B
    straight into registers, no tiles). staging_dtype: fp16, bf16, fp8 inputs (fp32's precision modes have
    their own templates; tf32/3xtf32 stage already). staging_combination: not with split_k > 1, dynamic_m,
    lds_layout transposed_b where that applies (their templates read the caller's tensors) or grid persistent
    (no tile loop here); b_eviction / epilogue refuse it under their own *_combination rules. staging_tail: not
    tail: specialized (the padded operands are whole blocks: there are no edge kernels to specialize; the
    store of C is bounds-checked as with predicated). staging_schedule: unroll 1 (the main K loop is the
    pipeline of pipeline.stages). staging_applies: every shape has an operand whose leading dimension is not
    a multiple of 16 bytes -- at a shape where both are aligned, the tiles already load 16 bytes at a time and
    the copies would be pure cost."""
    if c.tuning.staging == Staging.NONE:
        return
    at, value = c.at("staging"), c.tuning.staging.value
    if c.tuning.structure != Structure.TILED:
        yield Violation(rule="staging_structure", path=at, value=value,
                        message=f"only structure tiled stages its operands (this is {c.tuning.structure.value}, which "
                                "loads B straight into registers): use staging: none")
        return
    if c.spec.dtypes.a not in TILE_TEMPLATE_DTYPES:
        yield Violation(rule="staging_dtype", path=at, value=value,
                        message=f"staging takes {', '.join(d.value for d in TILE_TEMPLATE_DTYPES)} inputs, not "
                                f"{c.spec.dtypes.a.value} (the fp32 templates read the caller's tensors; tf32 and "
                                "3xtf32 stage into padded workspaces already): use staging: none")
        return
    if c.tuning.split_k > 1:
        yield Violation(rule="staging_combination", path=at, value=value,
                        message=f"not with split_k={c.tuning.split_k} yet (the split-K template reads the caller's "
                                "tensors): use staging: none or split_k 1")
    if c.spec.dynamic_m is not None:
        yield Violation(rule="staging_combination", path=at, value=value,
                        message="not with dynamic_m yet (the workspaces are sized for one M): use staging: none")
    if c.tuning.grid == GridPolicy.PERSISTENT:
        yield Violation(rule="staging_combination", path=at, value=value,
                        message="not with grid persistent yet (the padded template has no tile loop): use staging: "
                                "none or grid: tiles")
    if c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and LdsLayout.TRANSPOSED_B.value in c.target.gemm_lds_layouts:
        yield Violation(rule="staging_combination", path=at, value=value,
                        message=f"not with lds_layout transposed_b on {c.hw.target} yet (the transposed-B template "
                                "reads the caller's B): use staging: none or lds_layout: natural")
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="staging_tail", path=("tail",), value=c.spec.tail.value,
                        message="staging: padded pads A and B to whole blocks, so there are no edge kernels to "
                                "specialize: use tail: predicated (only the store of C is bounds-checked)")
    if c.tuning.unroll > 1:
        yield Violation(rule="staging_schedule", path=c.at("unroll"), value=c.tuning.unroll,
                        message="staging: padded's K loop is the pipeline of pipeline.stages, not an explicit "
                                "unroll: use unroll 1")
    vec = VECTOR_BYTES // DTYPE_BYTES[c.spec.dtypes.a]
    where = f" ({format_path(c.origin['staging'])})" if c.origin["staging"][0] == "overrides" else ""
    for i, s in enumerate(c.spec.shapes):
        if not unaligned_operands(c.spec, s):
            shown = ", ".join(f"{op}'s {d}={ld}" for op, (d, ld) in leading_dims(c.spec.layout, s).items())
            yield Violation(rule="staging_applies", path=("shapes", i), value=None,
                            message=f"every leading dimension is a multiple of {vec} elements ({VECTOR_BYTES} bytes) "
                                    f"({shown}), so the tiles load {VECTOR_BYTES} bytes at a time unstaged and "
                                    f"staging: padded{where} would only add copies: use staging: none")


GEMM_RULES: tuple[GemmRule, ...] = (
    dtype_supported, precision_dtype, precision_target, precision_schedule, wave_multiple, mma_shape, lds_budget,
    tail_policy, unroll_fits, k_pack_target, swizzle_panel, edge_offset_index_width, lds_layout_target,
    lds_layout_applies, lds_layout_tile, dynamic_m, split_k_rules, persistent_rules, tma_copy_rules, staging_rules,
)
# the small-M path: no MMA tiles, no LDS pipeline (pipeline.stages, policy, swizzle_panel and k_pack do not
# apply to it); unroll is the number of K steps in flight per lane
GEMV_RULES: tuple[GemmRule, ...] = (dtype_supported, precision_dtype, wave_multiple, gemv_shape, tail_policy,
                                     gemv_unroll, k_pack_target, lds_layout_target, lds_layout_applies, dynamic_m,
                                     split_k_rules, persistent_rules, tma_copy_rules, staging_rules)


def check(spec: GemmSpec, target: TargetSpec) -> list[Violation]:
    """Every GEMM legality rule of the structure the spec asks for on one target."""
    tuning, origin = spec.tuning_for(target.target)
    ctx = GemmContext(spec=spec, target=target, tuning=tuning, origin=origin)
    rules = GEMV_RULES if tuning.structure == Structure.GEMV else GEMM_RULES
    return [v for rule in rules for v in rule(ctx)]
