"""GEMM legality rules: named predicates over (spec, target), each yielding `Violation`s."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from codegen.core.hardware import DTYPE_BYTES, DType
from codegen.core.yamlsrc import format_path
from codegen.families.gemm.spec import (
    ACTIVATION_MATH,
    B_EVICTION,
    EPILOGUE,
    LDS_LAYOUT,
    MAX_SPLIT_K,
    ActivationMath,
    Epilogue,
    Eviction,
    GemmShape,
    GemmSpec,
    GemmTuning,
    GridPolicy,
    Layout,
    LdsLayout,
    Precision,
    SplitKSum,
    Staging,
    Structure,
    Tf32Convert,
)
from codegen.families.gemm.targets import GEMM_TARGET
from codegen.families.rules import FieldPath, TunedContext, Violation, target_only_value, threads_violations
from codegen.families.spec import K_PACK, TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

GemmContext = TunedContext[GemmSpec, GemmTuning]


GEMV_MAX_M = 16  # the small-M path holds every row of A's products in each lane's registers (gemv_n: of B's columns)
GEMV_DTYPES = (DType.FP16, DType.BF16, DType.FP32)
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
    """Shared-memory bytes of one GEMM workgroup: the A and B tiles (with a gate, two B tiles: B's and B_UP's)
    times the pipeline's buffers -- for tf32
    and 3xtf32 (their main kernel) the staged TF32 tile sets: one (tf32) or two (3xtf32: high parts
    and residuals) per buffer; its staging kernels hold one A or B tile, less. tf32_convert inline: the fp32
    tiles per buffer, plus one TF32 tile set (tf32) or two (3xtf32) that each K step's conversion writes.
    With epilogue shared (where it applies: shared_epilogue) the C tile in the output dtype too, in the same
    bytes: TileLang 0.1.15 merges shared buffers whose lifetimes do not overlap, and the C tile lives after the
    K loop, so it takes the pipeline's buffers (the lowered source places it at offset 0 with them) -- the larger of the two counts.
    gemv: its lanes load straight into registers; only the cross-lane sum takes one fp32 a thread, on targets
    whose reductions go through LDS."""
    if tuning.structure.is_gemv:
        return tuning.tiling.threads * 4 if target.reduce_workspace_in_lds else 0
    t = tuning.tiling
    b_tiles = 2 if spec.gate is not None else 1  # the gate: B's and B_UP's tiles in every stage
    per_stage = (t.block_m * t.block_k * DTYPE_BYTES[spec.dtypes.a]
                 + b_tiles * t.block_n * t.block_k * DTYPE_BYTES[spec.dtypes.b])
    stages = max(1, tuning.pipeline.stages)
    if tf32_converted_inline(spec, tuning):  # the fp32 tiles as copied, pipelined, and the TF32 tile set(s) they become
        pipeline = per_stage * (stages + tf32_tile_sets(spec))
    else:
        pipeline = per_stage * stages * tf32_tile_sets(spec)
    return max(pipeline, c_tile_bytes(spec, tuning)) if shared_epilogue(spec, tuning, target) else pipeline


def c_tile_bytes(spec: GemmSpec, tuning: GemmTuning) -> int:
    """The shared-memory C tile of epilogue shared: block_m x block_n in the output dtype."""
    return tuning.tiling.block_m * tuning.tiling.block_n * DTYPE_BYTES[spec.dtypes.out]


def b_eviction(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> Eviction:
    """The eviction priority the target's kernel gets: the asked one on a target with TMA copies (rule
    b_eviction_target refuses asking it of another alone), else normal."""
    tma = GEMM_TARGET[target.target].tma_copies
    return tuning.b_eviction if tma and tuning.structure == Structure.TILED else Eviction.NORMAL


def fast_activation(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> bool:
    """activation_math fast, on a target that lowers it (as b_eviction: rule activation_math_target refuses asking
    it of another alone)."""
    return tuning.activation_math == ActivationMath.FAST and GEMM_TARGET[target.target].fast_activation


def shared_epilogue(spec: GemmSpec, tuning: GemmTuning, target: TargetSpec) -> bool:
    """epilogue shared, on a target with TMA copies (as b_eviction)."""
    tma = GEMM_TARGET[target.target].tma_copies
    return tuning.epilogue == Epilogue.SHARED and tma and tuning.structure == Structure.TILED


def tf32_tile_sets(spec: GemmSpec) -> int:
    """A+B tile sets per pipeline buffer: 2 for 3xtf32 (high parts and residuals), else 1."""
    return 2 if spec.dtypes.a == DType.FP32 and spec.precision == Precision.X3TF32 else 1


def tf32_converted_inline(spec: GemmSpec, tuning: GemmTuning) -> bool:
    """precision tf32 / 3xtf32 of fp32 inputs, converted in the main kernel's tiles (tf32_convert inline)."""
    return (spec.dtypes.a == DType.FP32 and spec.precision != Precision.IEEE
            and tuning.tf32_convert == Tf32Convert.INLINE)


GemmRule = Callable[[GemmContext], Iterator[Violation]]


@dataclass(frozen=True, kw_only=True)
class Trait:
    """One independent GEMM option as the templates see it, on or off for one (spec, target): each picks a part
    of the partials of gemm.py.j2 (GemmInstance.template_vars). `field` is the spec field a refusal names: a
    tunable (the path it came from: top level or an override) or a top-level field ("dtypes.a", "tail", ...)."""

    name: str  # as the spec says it
    field: str
    on: Callable[[GemmContext], bool]
    said: Callable[[GemmContext], str] | None = None  # the name for this spec where the trait has several spellings

    def said_as(self, c: GemmContext) -> str:
        return self.said(c) if self.said else self.name

    def path(self, c: GemmContext) -> FieldPath:
        return c.at(self.field) if self.field in c.origin else tuple(self.field.split("."))

    def value(self, c: GemmContext) -> object:
        """The field's value as the spec wrote it (None for a block such as dynamic_m)."""
        head, *rest = self.field.split(".")
        value = getattr(c.tuning if head in c.origin else c.spec, head)
        for part in rest:
            value = getattr(value, part)
        return getattr(value, "value", value) if isinstance(value, (int, str)) else None


def _fp32(c: GemmContext) -> bool:
    return c.spec.dtypes.a == DType.FP32


TRAITS: dict[str, Trait] = {
    "gemv": Trait(name="structure gemv", field="structure", on=lambda c: c.tuning.structure.is_gemv,
                  said=lambda c: f"structure {c.tuning.structure.value}"),  # gemv_n combines as gemv does
    "fp32": Trait(name="fp32 inputs (precision ieee)", field="dtypes.a",
                  on=lambda c: _fp32(c) and c.spec.precision == Precision.IEEE),
    "tf32": Trait(name="precision tf32 / 3xtf32 (staged)", field="precision",  # tf32_convert staged
                  on=lambda c: (_fp32(c) and c.spec.precision != Precision.IEEE
                                and not tf32_converted_inline(c.spec, c.tuning))),
    "tf32_inline": Trait(name="tf32_convert inline", field="tf32_convert",
                         on=lambda c: tf32_converted_inline(c.spec, c.tuning)),
    "tail_none": Trait(name="tail none", field="tail", on=lambda c: c.spec.tail == TailPolicy.NONE),
    "specialized": Trait(name="tail specialized", field="tail", on=lambda c: c.spec.tail == TailPolicy.SPECIALIZED),
    "unroll": Trait(name="unroll > 1", field="unroll", on=lambda c: c.tuning.unroll > 1),
    "transposed_b": Trait(name="lds_layout transposed_b", field="lds_layout",  # where taken (rule lds_layout_target)
                          on=lambda c: (c.tuning.lds_layout == LdsLayout.TRANSPOSED_B
                                        and LdsLayout.TRANSPOSED_B.value in GEMM_TARGET[c.target.target].lds_layouts)),
    "split_k": Trait(name="split_k > 1", field="split_k", on=lambda c: c.tuning.split_k > 1),
    "persistent": Trait(name="grid persistent", field="grid", on=lambda c: c.tuning.grid == GridPolicy.PERSISTENT),
    "padded": Trait(name="staging padded", field="staging", on=lambda c: c.tuning.staging == Staging.PADDED),
    "dynamic_m": Trait(name="dynamic_m", field="dynamic_m", on=lambda c: c.spec.dynamic_m is not None),
    # sm_90's TMA copy options, where the target has them (rules b_eviction_target, epilogue_target)
    "b_eviction": Trait(name="b_eviction first / last", field="b_eviction",
                        on=lambda c: c.tuning.b_eviction != Eviction.NORMAL and GEMM_TARGET[c.target.target].tma_copies),
    "epilogue_shared": Trait(name="epilogue shared", field="epilogue",
                             on=lambda c: c.tuning.epilogue == Epilogue.SHARED and GEMM_TARGET[c.target.target].tma_copies),
    # what is computed beyond the product: element-wise ops on the accumulator, and the gated MLP's two products
    "epilogue_ops": Trait(name="epilogue_ops", field="epilogue_ops", on=lambda c: c.spec.epilogue_ops is not None),
    "gate": Trait(name="gate", field="gate", on=lambda c: c.spec.gate is not None),
}


@dataclass(frozen=True, kw_only=True)
class Unsupported:
    """Two traits that do not combine (yet), and why; rule unsupported_combination names the second's field."""

    traits: tuple[str, str]  # keys of TRAITS
    why: str
    unless: Callable[[GemmContext], bool] | None = None  # the one setting under which the two do combine

    def refuses(self, c: GemmContext) -> bool:
        return all(TRAITS[t].on(c) for t in self.traits) and not (self.unless is not None and self.unless(c))


# The GEMM combinations that are not supported, and why: every other combination of TRAITS renders and lowers
# for gfx942 and sm_90 (tests/test_gemm_traits.py enumerates every pair).
UNSUPPORTED_COMBINATIONS: tuple[Unsupported, ...] = (
    Unsupported(traits=("tf32", "gemv"), why="gemv's lanes multiply in true fp32 (no tensor cores to round for): "
                                             "use precision ieee"),
    Unsupported(traits=("gemv", "tf32_inline"), why="gemv's lanes multiply in true fp32 (no tensor cores to round "
                                                    "for): use precision ieee"),
    Unsupported(traits=("gemv", "transposed_b"), why="gemv stages no B tile in LDS"),
    Unsupported(traits=("gemv", "split_k"), why="gemv's lanes of a column share K already, and it has no output tile "
                                                "to split"),
    Unsupported(traits=("gemv", "persistent"), why="gemv has no output tiles to loop over"),
    Unsupported(traits=("gemv", "padded"), why="gemv loads B straight into registers: there are no tiles to stage"),
    Unsupported(traits=("gemv", "dynamic_m"), why=f"gemv keeps every row of A in registers: at most block_m <= "
                                                  f"{GEMV_MAX_M} rows, known when it is compiled"),
    Unsupported(traits=("gemv", "b_eviction"), why="gemv has no tiles through shared memory"),
    Unsupported(traits=("gemv", "epilogue_shared"), why="gemv has no C tile"),
    Unsupported(traits=("fp32", "transposed_b"), why="transposed_b is built for 16-bit B tiles; fp32 tiles are "
                                                     "staged as stored: use natural"),
    Unsupported(traits=("tf32", "transposed_b"), why="tf32 / 3xtf32 stage B K-major into their workspaces already: "
                                                     "use natural"),
    Unsupported(traits=("tf32", "padded"), why="tf32 / 3xtf32 stage A and B into zero-padded workspaces already: "
                                               "use staging none, or tf32_convert inline"),
    Unsupported(traits=("tf32", "specialized"), why="the TF32 workspaces are whole blocks, so there are no edge "
                                                    "kernels to specialize: use tail predicated or none, or "
                                                    "tf32_convert inline"),
    Unsupported(traits=("padded", "specialized"), why="the padded operands are whole blocks, so there are no edge "
                                                      "kernels to specialize: use tail predicated"),
    Unsupported(traits=("padded", "tail_none"), why="with tail none every dimension is whole blocks, so every leading "
                                                    "dimension is 16-byte aligned and there is nothing to pad"),
    Unsupported(traits=("split_k", "specialized"), why="the specialized interior and edge kernels have no K split: "
                                                       "use tail none or predicated"),
    Unsupported(traits=("persistent", "specialized"), why="the specialized interior and edge kernels each launch "
                                                          "their own grid: use tail none or predicated"),
    Unsupported(traits=("dynamic_m", "specialized"), why="the edge kernels split at M // block_m, which a symbolic M "
                                                         "does not fix: use tail predicated"),
    Unsupported(traits=("dynamic_m", "tail_none"), why="a dynamic M leaves the last row block ragged: loads and stores "
                                                       "along M must be bounds-checked (tail predicated)"),
    Unsupported(traits=("split_k", "persistent"), why="a persistent workgroup computes whole tiles; splitting a "
                                                      "tile's K over workgroups (stream-K) is not built: use grid tiles"),
    Unsupported(traits=("dynamic_m", "persistent"), why="the persistent grid, min(tiles, resident), is sized when the "
                                                        "kernel is made, from M: use grid tiles"),
    Unsupported(traits=("split_k", "epilogue_shared"), why="split-K stores fp32 partials to its workspace, and the "
                                                           "shared C tile holds the output dtype: use epilogue direct"),
    Unsupported(traits=("gemv", "epilogue_ops"), why="gemv's lanes store one sum a column and apply no epilogue: use "
                                                     "structure tiled"),
    Unsupported(traits=("gemv", "gate"), why="gemv streams one B: use structure tiled"),
    Unsupported(traits=("split_k", "epilogue_ops"), why="the ops must run once on the fixed-order sum of the "
                                                        "partials, and the sum kernel applies none: use split_k_sum "
                                                        "fixup (the tile's last split applies them) or split_k 1",
                unless=lambda c: c.tuning.split_k_sum == SplitKSum.FIXUP),
    Unsupported(traits=("split_k", "gate"), why="the gate multiplies two whole products, and a split holds a part of "
                                                "each: use split_k 1"),
    Unsupported(traits=("epilogue_ops", "gate"), why="the gated product's epilogue is its gate (act(A.B) * (A.B_UP)); "
                                                     "scale, bias and residual are not built beside it"),
    Unsupported(traits=("tf32", "gate"), why="the TF32 staging kernels stage A and one B: use precision ieee"),
    Unsupported(traits=("tf32_inline", "gate"), why="the inline conversion rounds A and one B tile a step: use "
                                                    "precision ieee"),
    Unsupported(traits=("padded", "gate"), why="the padded staging copies A and one B: use staging none"),
    Unsupported(traits=("transposed_b", "gate"), why="transposed_b's registers stage one B tile a step: use natural"),
)


def blocked(c: GemmContext, trait: str) -> bool:
    """Whether `trait` is on in a combination UNSUPPORTED_COMBINATIONS refuses (its own rules then say nothing
    more: the refusal is the one message)."""
    return any(trait in u.traits and u.refuses(c) for u in UNSUPPORTED_COMBINATIONS)


def unsupported_combination(c: GemmContext) -> Iterator[Violation]:
    """Rule unsupported_combination: no two traits of one entry of UNSUPPORTED_COMBINATIONS at once."""
    for u in UNSUPPORTED_COMBINATIONS:
        first, second = (TRAITS[t] for t in u.traits)
        if u.refuses(c):
            yield Violation(rule="unsupported_combination", path=second.path(c), value=second.value(c),
                            message=f"not with {first.said_as(c)} (not supported): {u.why}")


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
    """Rule precision_target: a mode the target's generated code cannot do (GemmTarget.fp32_precisions)."""
    p, gemm = c.spec.precision, GEMM_TARGET[c.target.target]
    if c.spec.dtypes.a == DType.FP32 and p.value not in gemm.fp32_precisions:
        yield Violation(rule="precision_target", path=("precision",), value=p.value,
                        message=f"not possible on {c.hw.target}: {gemm.fp32_precision_note}; "
                                f"drop {c.hw.target} from targets or use {' / '.join(gemm.fp32_precisions)}")


def tf32_convert_applies(c: GemmContext) -> Iterator[Violation]:
    """Rule tf32_convert_applies: tf32_convert says where precision tf32 / 3xtf32 round their fp32 inputs; any
    other GEMM has nothing to convert, so only the default `staged` means anything for it."""
    if c.tuning.tf32_convert != Tf32Convert.STAGED and not (_fp32(c) and c.spec.precision != Precision.IEEE):
        yield Violation(rule="tf32_convert_applies", path=c.at("tf32_convert"), value=c.tuning.tf32_convert.value,
                        message="only for precision tf32 / 3xtf32 of fp32 inputs: remove it")


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
                + (" (gate: two B tiles a stage)" if c.spec.gate is not None else "")
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
        elif c.tuning.structure == Structure.GEMV_N:
            dims = dims[:1] + dims[2:]  # gemv_n serves all of N in each workgroup
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
    sk = c.tuning.split_k if c.tuning.structure == Structure.TILED else 1  # gemv never splits (rule unsupported_combination)
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
    return [t.value for t in TARGETS if layout.value in GEMM_TARGET[t].lds_layouts]


def lds_layout_target(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_target: transposed_b exists only where the target's template was built for it
    (GemmTarget.lds_layouts: gfx942, gfx950); a target-only value as k_pack (target_only_value)."""
    yield from target_only_value(c, LDS_LAYOUT, lambda v: f"{v.value} is only for {', '.join(_lds_layout_targets(v))}",
                                 "lds_layout_target")


def _transposed_b_asked(c: GemmContext) -> bool:
    """transposed_b asked of a target that takes it (another stages B as stored: rule lds_layout_target)."""
    layouts = GEMM_TARGET[c.target.target].lds_layouts
    return c.tuning.lds_layout == LdsLayout.TRANSPOSED_B and c.tuning.lds_layout.value in layouts


def _transposed_b_misfit(c: GemmContext) -> str | None:
    if c.spec.layout.trans_b:
        return f"layout {c.spec.layout.value} stores B as N x K, K contiguous already: use natural"
    return None


def lds_layout_applies(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_applies: transposed_b rewrites how a K x N B tile (layouts nn, tn) goes into LDS for the
    matrix cores. It means nothing for a B stored N x K (nt, tt: already K-contiguous); fp32 inputs and the gemv
    structure are UNSUPPORTED_COMBINATIONS."""
    why = _transposed_b_misfit(c) if _transposed_b_asked(c) and not blocked(c, "transposed_b") else None
    if why:
        yield Violation(rule="lds_layout_applies", path=c.at("lds_layout"), value=c.tuning.lds_layout.value,
                        message=why)


def lds_layout_tile(c: GemmContext) -> Iterator[Violation]:
    """Rule lds_layout_tile: transposed_b splits the block_k x block_n tile of B into whole 16-byte runs of
    its rows, the same number of consecutive rows for every thread (transposed_b_rows)."""
    if not _transposed_b_asked(c) or _transposed_b_misfit(c) or blocked(c, "transposed_b"):
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
    """Rule index_width: the `specialized` kernels start their edges at compile-time offsets, and TileLang (0.1.x)
    fails to lower an index literal >= 2**31 ("Literal value 2147483648 exceeds maximum of int32", seen lowering
    m=32771, n=65536 on both targets) instead of widening it. The literals are a first row, column or K index
    times its row length: the bottom edge's first row m0 = m // block_m * block_m (of C, m0 * n; of A stored M x K,
    m0 * k), the right edge's first column n0 (of B stored N x K, n0 * k) and the interior's guarded last K tile
    k0 (of A stored K x M, k0 * m; of B stored K x N, k0 * n). `predicated` and `none` index through int64 there
    (tests/test_limits.py reads it)."""
    if c.spec.tail != TailPolicy.SPECIALIZED:
        return
    t, layout = c.tuning.tiling, c.spec.layout
    for i, s in enumerate(c.spec.shapes):
        m0, n0, k0 = s.m // t.block_m * t.block_m, s.n // t.block_n * t.block_n, s.k // t.block_k * t.block_k
        starts = []  # (the edge kernel, the operand, its first element, how it is counted)
        if s.m % t.block_m:
            starts.append(("bottom-edge", "C", m0 * s.n, "(m // block_m * block_m) * n"))
            if not layout.trans_a:
                starts.append(("bottom-edge", "A", m0 * s.k, "(m // block_m * block_m) * k"))
        if s.n % t.block_n and m0 and layout.trans_b:
            starts.append(("right-edge", "B", n0 * s.k, "(n // block_n * block_n) * k"))
        if s.k % t.block_k and m0 and n0:
            if layout.trans_a:
                starts.append(("interior", "A", k0 * s.m, "(k // block_k * block_k) * m, its last K tile"))
            if not layout.trans_b:
                starts.append(("interior", "B", k0 * s.n, "(k // block_k * block_k) * n, its last K tile"))
        past = [x for x in starts if x[2] >= INT32_LITERAL_LIMIT]
        if past:
            kernel, operand, start, formula = max(past, key=lambda x: x[2])
            yield Violation(rule="index_width", path=("shapes", i), value=None,
                            message=f"the specialized {kernel} kernel starts at element {start} of {operand} "
                                    f"({formula}), past the int32 literals TileLang lowers: use tail: predicated")


def gemv_shape(c: GemmContext) -> Iterator[Violation]:
    """Rule gemv_shape: the matrix-vector structures stream the large operand's rows along K in 16-byte
    vectors, block_k // vector lanes to an element of C (a power of two within one wave, which sums them with
    a cross-lane reduction), and hold the small operand's rows in registers. gemv (small M): B's rows (N x K, K
    contiguous: layout nt), block_n columns a workgroup, every row of A (m <= block_m <= 16). gemv_n (small N):
    A's rows (M x K, K contiguous: layouts nn and nt), block_m rows a workgroup, every column of B
    (n <= block_n <= 16)."""
    if TRAITS["tf32"].on(c):  # refused beside a gemv structure (rule unsupported_combination): the one message
        return
    t, hw = c.tuning.tiling, c.hw
    vec = gemv_vector(c.spec)
    small_n = c.tuning.structure == Structure.GEMV_N
    if small_n and c.spec.layout.trans_a:
        yield Violation(rule="gemv_shape", path=("layout",), value=c.spec.layout.value,
                        message="structure gemv_n streams A's rows along K: use layout nn or nt (A: M x K)")
    if not small_n and c.spec.layout != Layout.NT:
        yield Violation(rule="gemv_shape", path=("layout",), value=c.spec.layout.value,
                        message="structure gemv streams B's rows along K: use layout nt (A: M x K, B: N x K)")
    if c.spec.dtypes.a not in GEMV_DTYPES:
        if blocked(c, "gemv"):
            return
        yield Violation(rule="gemv_shape", path=("dtypes", "a"), value=c.spec.dtypes.a.value,
                        message=f"structure {c.tuning.structure.value} takes "
                                f"{', '.join(d.value for d in GEMV_DTYPES)} inputs")
        return
    # the side held in registers (A's rows, or B's columns), its block, and the block each workgroup owns
    held, held_block, owned_block, held_noun, operand = (("n", "block_n", "block_m", "column", "B") if small_n else
                                                         ("m", "block_m", "block_n", "row", "A"))
    if getattr(t, held_block) > GEMV_MAX_M:
        yield Violation(rule="gemv_shape", path=c.at("tiling", held_block), value=getattr(t, held_block),
                        message=f"structure {c.tuning.structure.value} keeps every {held_noun} of {operand} in "
                                f"registers: at most {GEMV_MAX_M} {held_noun}s")
    for i, s in enumerate(c.spec.shapes):
        if getattr(s, held) > getattr(t, held_block):
            yield Violation(rule="gemv_shape", path=("shapes", i), value=None,
                            message=f"{held}={getattr(s, held)} is over tiling.{held_block}={getattr(t, held_block)}, "
                                    f"the {held_noun}s one {c.tuning.structure.value} workgroup serves")
        if s.k % vec:
            yield Violation(rule="gemv_shape", path=("shapes", i), value=None,
                            message=f"k={s.k} is not a multiple of {vec}: {c.tuning.structure.value} loads K in "
                                    f"{VECTOR_BYTES}-byte vectors")
    lanes = t.block_k // vec
    if t.block_k % vec or lanes & (lanes - 1) or lanes > hw.wave_lanes:
        yield Violation(rule="gemv_shape", path=c.at("tiling", "block_k"), value=t.block_k,
                        message=f"must be {vec} (one {VECTOR_BYTES}-byte vector) times a power of two up to "
                                f"{hw.wave_lanes} (the lanes of one {hw.wave_word} that sum a {'row' if small_n else 'column'})")
    elif t.threads != lanes * getattr(t, owned_block):
        yield Violation(rule="gemv_shape", path=c.at("tiling", "threads"), value=t.threads,
                        message=f"must be {owned_block} * block_k / {vec} = {lanes * getattr(t, owned_block)}: one "
                                f"lane per vector of a K step, for each of the block's "
                                f"{'rows' if small_n else 'columns'}")


def gemv_unroll(c: GemmContext) -> Iterator[Violation]:
    """unroll_divides for gemv, where a tail policy guards the K steps (and tail_policy covers unroll 1)."""
    if c.spec.tail == TailPolicy.NONE and c.tuning.unroll > 1:
        yield from unroll_divides(c)


def dynamic_m(c: GemmContext) -> Iterator[Violation]:
    """Rules dynamic_m_*: a kernel compiled with M symbolic (T.dynamic) serves every M of `dynamic_m` with one
    binary. dynamic_m_range: min <= max, and every shape's m (the workloads verify and bench run) inside.
    dynamic_m_search: no search block -- a lockfile picks a kernel per shape, and a dynamic-M spec is one kernel
    for every M. Its tail (predicated: the last row block is ragged for an arbitrary M) and the structures and grids
    it does not take are UNSUPPORTED_COMBINATIONS. The grid at M = max is rule grid_limit
    (codegen.generate.instance.grid_limit over GemmInstance.limit_shapes)."""
    r = c.spec.dynamic_m
    if r is None or blocked(c, "dynamic_m"):
        return
    if r.min > r.max:
        yield Violation(rule="dynamic_m_range", path=("dynamic_m", "min"), value=r.min,
                        message=f"is over dynamic_m.max={r.max}: the range is empty")
    else:
        for i, s in enumerate(c.spec.shapes):
            if not r.min <= s.m <= r.max:
                yield Violation(rule="dynamic_m_range", path=("shapes", i, "m"), value=s.m,
                                message=f"is outside dynamic_m [{r.min}, {r.max}], the rows the kernel serves")
    if c.spec.search:
        yield Violation(rule="dynamic_m_search", path=("search",), value=None,
                        message="a dynamic-M spec is one kernel for every M, and tuning picks a kernel per "
                                "shape: remove search or dynamic_m")


# split-K (split_k > 1, structure tiled): split s of split_k takes K tiles [s*t, (s+1)*t), t = split_tiles(...),
# of the ceil(k/block_k) and writes its fp32 partial block to a workspace [split_k, M, N]; a second kernel
# sums the partials in the fixed order s = 0..split_k-1 and rounds once (_mainloop.py.j2)
SPLIT_K_WORKSPACE_BYTES = 256 * 2**20  # rule split_k_workspace: the fp32 partials the caller allocates


def split_tiles(k: int, block_k: int, split_k: int) -> int:
    """K tiles every split runs: ceil(k / (block_k * split_k)) = ceil(ceil(k / block_k) / split_k); the
    tiles past ceil(k / block_k) (tail predicated: in the last split) are out of bounds and load as zeros."""
    return -(-k // (block_k * split_k))


def split_k_workspace_bytes(split_k: int, m: int, n: int) -> int:
    """Bytes of the fp32 workspace of one split-K launch: split_k partial products of C (M x N)."""
    return split_k * m * n * 4


def split_k_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules split_k_*: what a K split needs. split_k_limit: at most MAX_SPLIT_K splits. split_k_divides
    (tail none): every k is split_k equal runs of whole K tiles, k % (block_k * split_k) == 0. split_k_tiles
    (tail predicated): each split runs t = ceil(k / (block_k * split_k)) K tiles, and the last split must still
    get at least one of the ceil(k / block_k) real ones (the rest of its run, and a ragged last tile, load
    zeros). split_k_workspace: split_k * m * n fp32 partials within SPLIT_K_WORKSPACE_BYTES. The structures, tails
    and grids a split does not take are UNSUPPORTED_COMBINATIONS."""
    sk = c.tuning.split_k
    if sk == 1 or blocked(c, "split_k"):
        return
    at = c.at("split_k")
    if sk > MAX_SPLIT_K:
        yield Violation(rule="split_k_limit", path=at, value=sk,
                        message=f"at most {MAX_SPLIT_K} splits of the K range (each writes an fp32 partial of C)")
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
    """Rule persistent_residency: grid persistent launches min(tiles, compute_units x resident) workgroups that
    loop over the output tiles (_scheduler.py.j2), so one workgroup must fit on a CU/SM
    (TargetSpec.resident_workgroups > 0). The structures, tails and options it does not take are
    UNSUPPORTED_COMBINATIONS."""
    if c.tuning.grid != GridPolicy.PERSISTENT or blocked(c, "persistent"):
        return
    at, g = c.at("grid"), c.tuning.grid.value
    need = lds_bytes(c.spec, c.tuning, c.target)
    if need <= c.hw.lds_bytes_per_workgroup and c.target.resident_workgroups(c.tuning.tiling.threads, need) < 1:
        yield Violation(rule="persistent_residency", path=at, value=g,
                        message=f"a workgroup of {c.tuning.tiling.threads} threads and {need} B of {c.hw.lds_word} "
                                f"does not fit on one {c.hw.target} CU/SM at all: use grid: tiles")


# sm_90's TMA copy options: spec field -> (its default, what it is)
TMA_OPTIONS = {"b_eviction": (B_EVICTION, "an L2 hint on TMA loads"),
               "epilogue": (EPILOGUE, "C through shared memory to TMA stores")}
TMA_ALIGN_BYTES = 16  # a TMA tensor's strides: multiples of 16 bytes (cuTensorMapEncodeTiled)


def _tma_targets() -> list[str]:
    return [t.value for t in TARGETS if GEMM_TARGET[t].tma_copies]


def tma_copy_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules b_eviction_* and epilogue_*: the copy options only sm_90's TMA has. *_target: as lds_layout, a
    top-level value is used by the targets with TMA copies (GemmTarget.tma_copies: sm_90) and the others keep
    the default; asking it of another target's override, or of no target that has it, is an error.
    b_eviction_tma: B's rows as the main kernel reads them a multiple of 16 bytes at every shape (k for layouts
    nt/tt, n for nn/tn; a staged workspace's whole blocks), else TileLang loads B without TMA and the hint never
    reaches the code. epilogue_tma: C's rows (n) a multiple of 16 bytes, else TileLang stores the shared C tile
    with plain stores, no TMA store. The C tile's shared memory is rule lds_budget (lds_bytes); the options'
    unsupported combinations are UNSUPPORTED_COMBINATIONS."""
    for name, (only, what) in TMA_OPTIONS.items():
        yield from target_only_value(c, only, lambda v, n=name, w=what: f"{n} {v.value} is {w}, only for "
                                                                         f"{', '.join(_tma_targets())}", f"{name}_target")
    if not GEMM_TARGET[c.target.target].tma_copies:
        return
    asked = {name: getattr(c.tuning, name) for name, (only, _) in TMA_OPTIONS.items()
             if getattr(c.tuning, name) != only.default
             and not blocked(c, "b_eviction" if name == "b_eviction" else "epilogue_shared")}
    b, out = c.spec.dtypes.b, c.spec.dtypes.out
    for i, s in enumerate(c.spec.shapes):
        dim, row = leading_dims(c.spec.layout, s)["B"]
        if _staged(c):  # the main kernel reads B from a workspace of whole blocks (staging padded, tf32 / 3xtf32)
            block = {"n": c.tuning.tiling.block_n, "k": c.tuning.tiling.block_k}[dim]
            row = -(-row // block) * block
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


def _staged(c: GemmContext) -> bool:
    """Whether staging kernels copy A and B into workspaces of whole blocks first (staging padded, tf32 / 3xtf32)."""
    return TRAITS["padded"].on(c) or TRAITS["tf32"].on(c)


# staging padded: A and B copied into zero-padded workspaces of whole blocks before the main kernel
# (_staging.py.j2), for shapes where an operand's rows do not start on 16-byte boundaries


def leading_dims(layout: Layout, shape: GemmShape) -> dict[str, tuple[str, int]]:
    """Per operand, the dimension its stored rows run along (the stride between rows, in elements): A is
    M x K (stride k) or, stored transposed, K x M (stride m); B is K x N (stride n) or N x K (stride k)."""
    return {"A": ("m", shape.m) if layout.trans_a else ("k", shape.k),
            "B": ("k", shape.k) if layout.trans_b else ("n", shape.n)}


def odd_rows(layout: Layout, dtype: DType, shape: GemmShape) -> dict[str, tuple[str, int]]:
    """leading_dims of the operands whose rows do not start on VECTOR_BYTES boundaries at this shape (leading
    dimension not a multiple of VECTOR_BYTES / element bytes): their tiles cannot be read with 16-byte or TMA loads."""
    vec = VECTOR_BYTES // DTYPE_BYTES[dtype]
    return {op: (d, ld) for op, (d, ld) in leading_dims(layout, shape).items() if ld % vec}


def unaligned_operands(spec: GemmSpec, shape: GemmShape) -> list[str]:
    """The operands of odd_rows at this shape."""
    return list(odd_rows(spec.layout, spec.dtypes.a, shape))


def staging_rules(c: GemmContext) -> Iterator[Violation]:
    """Rule staging_applies: staging padded needs every shape to have an operand whose leading dimension is not a
    multiple of 16 bytes -- at a shape where both are aligned, the tiles already load 16 bytes at a time and the
    copies would be pure cost. The structures, precisions and tails it does not take are
    UNSUPPORTED_COMBINATIONS."""
    if c.tuning.staging == Staging.NONE or blocked(c, "padded"):
        return
    vec = VECTOR_BYTES // DTYPE_BYTES[c.spec.dtypes.a]
    where = f" ({format_path(c.origin['staging'])})" if c.origin["staging"][0] == "overrides" else ""
    for i, s in enumerate(c.spec.shapes):
        if not unaligned_operands(c.spec, s):
            shown = ", ".join(f"{op}'s {d}={ld}" for op, (d, ld) in leading_dims(c.spec.layout, s).items())
            yield Violation(rule="staging_applies", path=("shapes", i), value=None,
                            message=f"every leading dimension is a multiple of {vec} elements ({VECTOR_BYTES} bytes) "
                                    f"({shown}), so the tiles load {VECTOR_BYTES} bytes at a time unstaged and "
                                    f"staging: padded{where} would only add copies: use staging: none")


# epilogue_ops / gate: the fused operations on the accumulator (codegen.families.gemm.instance.FusedOps)
BIAS_DTYPES = (DType.FP16, DType.BF16, DType.FP32)  # a bias vector stored in one of these


def fused_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules epilogue_ops_*: epilogue_ops_empty -- an epilogue_ops block names at least one op (an empty one would
    be a second name for the plain GEMM); epilogue_ops_dtype -- the bias is stored fp16, bf16 or fp32, a dtype the
    target holds (the residual is C's dtype). The structures and options the ops and the gate do not take are
    UNSUPPORTED_COMBINATIONS; the gate's two B tiles a stage are rule lds_budget (lds_bytes)."""
    ops = c.spec.epilogue_ops
    if ops is None or blocked(c, "epilogue_ops"):
        return
    if all(getattr(ops, f) is None for f in type(ops).model_fields):
        yield Violation(rule="epilogue_ops_empty", path=("epilogue_ops",), value=None,
                        message="names no op: give scale, bias, activation or residual, or remove epilogue_ops")
    if ops.bias is not None and (ops.bias.dtype not in BIAS_DTYPES or ops.bias.dtype not in c.hw.tilelang_dtypes):
        yield Violation(rule="epilogue_ops_dtype", path=("epilogue_ops", "bias", "dtype"), value=ops.bias.dtype.value,
                        message=f"a bias is stored {', '.join(d.value for d in BIAS_DTYPES)} on {c.hw.target}")


# the activations whose evaluation has an exponential and a division to approximate (activation_math fast)
FAST_ACTIVATIONS = ("silu", "gelu_tanh")


def activation_math_rules(c: GemmContext) -> Iterator[Violation]:
    """Rules activation_math_*: activation_math_target -- fast is the approximations only some targets lower
    (GemmTarget.fast_activation: sm_90), taken as lds_layout is (a top-level value is used where it can be);
    activation_math_applies -- fast needs an activation with an exponential to approximate: silu or gelu_tanh, in
    epilogue_ops or as a gate's (swiglu, geglu_tanh); elsewhere it would be a second name for the same kernel."""
    yield from target_only_value(c, ACTIVATION_MATH, lambda v: f"activation_math {v.value} is the hardware's exp2 "
                                 f"and reciprocal approximations, only for "
                                 f"{', '.join(t.value for t in TARGETS if GEMM_TARGET[t].fast_activation)}",
                                 "activation_math_target")
    if c.tuning.activation_math != ActivationMath.FAST or not GEMM_TARGET[c.target.target].fast_activation:
        return
    ops, gate = c.spec.epilogue_ops, c.spec.gate
    act = gate.activation if gate is not None else (ops.activation if ops is not None else None)
    if act is None or act.value not in FAST_ACTIVATIONS:
        what = "the kernel has no activation" if act is None else f"{act.value} has no exponential to approximate"
        yield Violation(rule="activation_math_applies", path=c.origin["activation_math"], value="fast",
                        message=f"{what}: activation_math fast applies to {' and '.join(FAST_ACTIVATIONS)} (in "
                                "epilogue_ops or a gate's); use accurate")


GEMM_RULES: tuple[GemmRule, ...] = (
    unsupported_combination, dtype_supported, precision_dtype, precision_target, tf32_convert_applies, wave_multiple,
    mma_shape, lds_budget, tail_policy, unroll_fits, k_pack_target, swizzle_panel, edge_offset_index_width,
    lds_layout_target, lds_layout_applies, lds_layout_tile, dynamic_m, split_k_rules, persistent_rules, tma_copy_rules, staging_rules,
    fused_rules, activation_math_rules,
)
# the small-M path: no MMA tiles, no LDS pipeline (pipeline.stages, policy, swizzle_panel and k_pack do not
# apply to it); unroll is the number of K steps in flight per lane
GEMV_RULES: tuple[GemmRule, ...] = (unsupported_combination, dtype_supported, precision_dtype, tf32_convert_applies,
                                     wave_multiple, gemv_shape, tail_policy,
                                     gemv_unroll, k_pack_target, lds_layout_target, lds_layout_applies, dynamic_m,
                                     split_k_rules, persistent_rules, tma_copy_rules, staging_rules, fused_rules,
                                     activation_math_rules)


def check(spec: GemmSpec, target: TargetSpec) -> list[Violation]:
    """Every GEMM legality rule of the structure the spec asks for on one target."""
    tuning, origin = spec.tuning_for(target.target)
    ctx = GemmContext(spec=spec, target=target, tuning=tuning, origin=origin)
    rules = GEMV_RULES if tuning.structure.is_gemv else GEMM_RULES
    return [v for rule in rules for v in rule(ctx)]
