"""Machinery shared by the row-wise families (softmax, norm): one row of `cols` elements per workgroup,
each thread streaming `vector` contiguous elements per chunk of threads*vector columns. The spec base,
its legality rules, the instance base and the numerics every row family uses alike. Their template
partial is templates/_shared/_rows.j2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt

from codegen.core.hardware import DTYPE_BYTES, DType, Hardware, Target
from codegen.families.base import InstanceBase, dtype_tag, tail_tag, tilelang_target
from codegen.families.numerics import SUBNORMAL_ROUNDOFF, TINY, UNIT_ROUNDOFF, CheckChunk, normal_draws
from codegen.families.rules import Violation, threads_violations
from codegen.families.spec import (
    MAX_INT32,
    MAX_SHAPES,
    Identifier,
    Knob,
    Model,
    PositiveInt,
    RowDTypes,
    TailPolicy,
    ToleranceScale,
    Unroll,
    int_choice,
    tunable_paths,
    with_knobs,
)
from codegen.targets import torch_dtype
from codegen.targets.base import TargetSpec

# ---- spec -------------------------------------------------------------------------------------------
# No staged copy (the loads are independent vector loads): there is no `pipeline` field; unrolling the
# column loop is what keeps several loads in flight.


class RowShape(Model):
    rows: PositiveInt
    cols: PositiveInt


Vector = int_choice(1, 2, 4, 8)
MAX_SPLIT = 65535  # workgroups per row: grid x of both split kernels
MAX_PACK = 32  # rows per workgroup: 1024 threads / one 32-lane group per row
SPLIT_AUTO_WAVES = 2  # split: auto aims at this many workgroups per CU/SM over all rows

# A row family's tunables, declared once, in order: RowSpecBase's tunable fields and ROW_TUNABLES (what a row
# family's `search:` may list) are derived from this. Row specs take no overrides: each is the same on every target.
ROW_KNOBS: tuple[Knob, ...] = (
    Knob(name="threads", type=PositiveInt, doc="threads per workgroup (shared by its `pack` rows)"),
    Knob(name="vector", type=Vector, default=8,
         doc="elements per thread per load (one 16-byte load for fp16/bf16 at 8)"),
    Knob(name="unroll", type=Unroll, default=1, doc="unroll factor of the streaming column loops (T.unroll)"),
    Knob(name="variant", declares_field=False),  # each family's own StrEnum, declared by its spec model
    Knob(name="tail", type=TailPolicy, default=TailPolicy.NONE, doc="none | predicated | specialized"),
    Knob(name="peel", type=StrictBool, default=False,
         doc="a scalar head up to the row's first vector*bytes boundary, aligned vector loads, a scalar tail "
             "(odd rows)"),
    Knob(name="split", type=Annotated[StrictInt, Field(ge=1, le=MAX_SPLIT)] | Literal["auto"], default=1,
         doc="workgroups per row: 1 (one per row), N, or auto (resolved per shape from the target's CU/SM count); "
             "over 1, a first kernel reduces each workgroup's segment into an fp32 workspace, a second combines "
             "and writes"),
    Knob(name="pack", type=Annotated[StrictInt, Field(ge=1, le=MAX_PACK)], default=1,
         doc="rows per workgroup (many short rows): threads // pack threads per row, each its own reductions"),
)
ROW_TUNABLES = tunable_paths(ROW_KNOBS)


class _RowSpecHead(Model):
    """RowSpecBase's fields before its tunables."""

    name: Identifier
    dtypes: RowDTypes
    shapes: Annotated[list[RowShape], Field(min_length=1, max_length=MAX_SHAPES)]


class RowSpecBase(with_knobs("RowSpecTunables", _RowSpecHead, ROW_KNOBS, module=__name__)):
    """A row family's spec: the head fields, the tunables of ROW_KNOBS, then these; each family adds its own
    (`op`, `variant`, ...)."""

    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]  # noqa: RUF012 - pydantic copies it
    allow_spills: StrictBool = False
    verify_tolerance_scale: ToleranceScale = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None

    @property
    def row_in_registers(self) -> bool:
        """Whether the kernel holds the whole row in registers (register budget, always fully unrolled)."""
        return False

    @property
    def streaming_variant(self) -> str:
        """The family's variant that streams the row from global memory (any length), for messages."""
        raise NotImplementedError

    @property
    def splits(self) -> bool:
        """Whether several workgroups share a row (split over 1, or auto)."""
        return self.split != 1

    @property
    def fused(self) -> tuple[tuple[str, object], ...]:
        """(field, value) of each operation fused into the row's pass that the spec asks for (norm: residual,
        quant; softmax: scale, mask); () for the plain op. Rule fused_combination reads it."""
        return ()

    @property
    def out_dtypes(self) -> tuple[DType, ...]:
        """The output dtypes the op writes (rmsnorm adds fp8 e4m3 with its per-token scale)."""
        return ROW_TYPES


# ---- rules ------------------------------------------------------------------------------------------
# One workgroup per row; a chunk is threads*vector columns (each thread loads `vector` contiguous
# elements). Block reductions combine 32-lane groups (TileLang's warp_reduce is 32 lanes wide on
# both targets) through LDS/shared memory.

REDUCE_GROUP_LANES = 32
ROW_VECTOR_BYTES = 16  # the widest load one thread issues (dwordx4 / LDG.128)
ROW_TYPES = (DType.FP16, DType.BF16, DType.FP32)


@dataclass(frozen=True, kw_only=True)
class RowContext:
    spec: RowSpecBase
    target: TargetSpec

    @property
    def hw(self) -> Hardware:
        return self.target.hw


RowRule = Callable[[RowContext], Iterator[Violation]]


def row_threads(spec: RowSpecBase) -> int:
    """Threads per row: the workgroup's, shared by its `pack` rows."""
    return spec.threads // spec.pack


def row_chunk(spec: RowSpecBase) -> int:
    return row_threads(spec) * spec.vector


def row_lds_bytes(spec: RowSpecBase) -> int:
    """LDS/shared memory of a row kernel: one fp32 partial per 32-lane reduction group."""
    return 4 * max(1, spec.threads // REDUCE_GROUP_LANES)


def row_pack(c: RowContext) -> Iterator[Violation]:
    """pack: several rows per workgroup, each row its own threads // pack threads and its own reductions, which
    meet in LDS per 32-lane group: so a whole number of 32-lane groups per row; the grid is rows // pack."""
    spec = c.spec
    if spec.pack == 1:
        return
    per_row = spec.threads / spec.pack
    if spec.threads % spec.pack or int(per_row) % REDUCE_GROUP_LANES:
        yield Violation(rule="pack_threads", path=("pack",), value=spec.pack,
                        message=f"{spec.threads} threads for {spec.pack} rows is {per_row:g} per row: each row needs "
                                f"a multiple of {REDUCE_GROUP_LANES} threads (its own warp reductions)")
    if spec.splits:
        yield Violation(rule="pack_split", path=("pack",), value=spec.pack,
                        message="pack puts several rows in one workgroup, split one row in several: use one")
    for i, s in enumerate(spec.shapes):
        if s.rows % spec.pack:
            yield Violation(rule="pack_rows", path=("shapes", i, "rows"), value=s.rows,
                            message=f"not a multiple of pack={spec.pack} (each workgroup takes {spec.pack} whole rows)")


def row_register_budget(hw: Hardware, threads: int) -> int:
    """fp32 row elements one thread may hold (the online softmax and the registers norm keep the row there):
    half of what a thread gets when the workgroup's threads share one CU's register file,
    min(max_registers_per_thread, register_file_bytes_per_cu / 4 / threads) / 2; the other half is
    left for addresses, statistics and the compiler's temporaries."""
    per_thread = min(hw.max_registers_per_thread, hw.register_file_bytes_per_cu // 4 // max(threads, 1))
    return per_thread // 2


def _dtype_list(dtypes: tuple[DType, ...]) -> str:
    names = [d.value for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1]


def row_dtype_supported(c: RowContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    if d.input not in ROW_TYPES:
        yield Violation(rule="dtype_supported", path=("dtypes", "input"), value=d.input.value,
                        message=f"{c.spec.op} takes {_dtype_list(ROW_TYPES)}")
    if d.out not in c.spec.out_dtypes:
        verb = "takes" if c.spec.out_dtypes == ROW_TYPES else "writes"
        yield Violation(rule="dtype_supported", path=("dtypes", "out"), value=d.out.value,
                        message=f"{c.spec.op} {verb} {_dtype_list(c.spec.out_dtypes)}")
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
    if c.spec.tail != TailPolicy.NONE or c.spec.threads % c.spec.pack:
        return
    chunk = row_chunk(c.spec)
    per = "threads/pack*vector" if c.spec.pack > 1 else "threads*vector"
    for i, s in enumerate(c.spec.shapes):
        if s.cols % chunk:
            yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                            message=f"cols={s.cols} is not a multiple of {per}={chunk}: "
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
                                    f"{c.hw.target} (more threads, or variant: {spec.streaming_variant})")


def row_unroll(c: RowContext) -> Iterator[Violation]:
    spec = c.spec
    if spec.row_in_registers and spec.unroll != 1:
        yield Violation(rule="unroll_variant", path=("unroll",), value=spec.unroll,
                        message=f"the {spec.variant.value} variant's column loop is always fully unrolled (its row "
                                f"lives in registers); unroll applies to {spec.streaming_variant}")


def row_peel(c: RowContext) -> Iterator[Violation]:
    """peel: true aligns each row's loads itself (a scalar head up to the row's first vector boundary, whole
    vectors, a scalar tail), so the head and tail shift the vector body by a different amount per row."""
    spec = c.spec
    if not spec.peel:
        return
    if spec.row_in_registers:
        yield Violation(rule="peel_variant", path=("peel",), value=True,
                        message=f"the {spec.variant.value} variant holds the row in registers by chunk; peeled rows "
                                f"are streamed: variant: {spec.streaming_variant}")
    if spec.vector == 1:
        yield Violation(rule="peel_vector", path=("vector",), value=1,
                        message="peel aligns vector loads; with vector 1 there is nothing to align")
    if spec.tail == TailPolicy.NONE:
        yield Violation(rule="peel_tail", path=("tail",), value=spec.tail.value,
                        message="peel moves each row's vector body by its head, so its last chunk is ragged in "
                                "some rows: set tail: specialized or predicated")
    for i, s in enumerate(spec.shapes):
        if s.rows * s.cols > MAX_INT32:
            yield Violation(rule="index_width", path=("shapes", i), value=None,
                            message=f"peel indexes the rows as one flat int32 array: rows*cols={s.rows * s.cols} "
                                    f"is over {MAX_INT32}")


def row_split(c: RowContext) -> Iterator[Violation]:
    """split: several workgroups per row, each streaming one segment of whole chunks (a second kernel
    re-reads its segment to write it), so only the streamed variant splits; a peeled row's segments would
    start off its vector boundary."""
    spec = c.spec
    if not spec.splits:
        return
    if spec.row_in_registers:
        yield Violation(rule="split_variant", path=("split",), value=spec.split,
                        message=f"the {spec.variant.value} variant keeps one row in one workgroup's registers; "
                                f"split rows are streamed: variant: {spec.streaming_variant}")
    if spec.peel:
        yield Violation(rule="split_peel", path=("split",), value=spec.split,
                        message="split segments start at chunk boundaries of the row, which peel moves by each "
                                "row's head: use one of split or peel")
    if spec.unroll != 1:
        yield Violation(rule="split_unroll", path=("unroll",), value=spec.unroll,
                        message="a split row's segment loop is not unrolled (its trip count differs per "
                                "workgroup): unroll 1")
    if isinstance(spec.split, int):
        chunk = row_chunk(spec)
        for i, s in enumerate(spec.shapes):
            chunks = -(-s.cols // chunk)
            if spec.split > chunks:
                yield Violation(rule="split_segments", path=("shapes", i, "cols"), value=s.cols,
                                message=f"split={spec.split} workgroups for {chunks} chunk(s) of {chunk} columns: "
                                        f"some workgroups would get no columns (split at most {chunks}, or auto)")


# The row options the fused operations (norm: residual, quant; softmax: scale, mask) are not written for, and why:
# (option, whether the spec uses it, the reason). Rule fused_combination refuses each pair.
FUSED_UNSUPPORTED: tuple[tuple[str, Callable[[RowSpecBase], bool], str], ...] = (
    ("peel", lambda s: s.peel, "peeled rows are addressed through flat views of X and Y alone"),
    ("split", lambda s: s.splits, "a split row's second kernel writes from the first one's partials alone"),
)


def row_fused(c: RowContext) -> Iterator[Violation]:
    """A fused operation (`RowSpecBase.fused`) beside a row option it is not written for (FUSED_UNSUPPORTED)."""
    for path, value in c.spec.fused:
        for option, used, why in FUSED_UNSUPPORTED:
            if used(c.spec):
                yield Violation(rule="fused_combination", path=(path,), value=value,
                                message=f"not with {option}: {why}")


ROW_RULES: tuple[RowRule, ...] = (
    row_dtype_supported, row_wave_multiple, row_vector_width, row_tail_policy, row_registers, row_unroll, row_peel,
    row_split, row_pack, row_fused,
)


def check_rows(spec: RowSpecBase, target: TargetSpec, extra: tuple[RowRule, ...] = ()) -> list[Violation]:
    """The row rules, then a family's own `extra` rules, on one target."""
    ctx = RowContext(spec=spec, target=target)
    return [v for rule in (*ROW_RULES, *extra) for v in rule(ctx)]


# ---- instance ---------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RowInstance(InstanceBase):
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
    chunk: int  # threads per row * vector columns per chunk
    reduce_groups: int  # 32-lane groups whose partials meet in LDS
    pack: int  # rows per workgroup (threads // pack threads per row)
    unroll: int
    tail: TailPolicy
    peel: bool  # scalar head and tail around aligned vectors, each row (rule row_peel)
    split: int  # workgroups per row when fixed (1: one per row); see split_workgroups
    split_workgroups: int | None  # split: auto -- the grid to reach over all rows (CUs/SMs x SPLIT_AUTO_WAVES)
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]

    def global_load_bytes(self) -> int | None:
        """`vector` contiguous input elements per lane: one load of vector x dtype bytes (at most 16)."""
        return min(ROW_VECTOR_BYTES, self.vector * DTYPE_BYTES[DType(self.spec_dtypes[0])])

    def narrow_load_hint(self, shape: tuple) -> str | None:
        """Why the loads are narrower at this shape: a row shorter than one vector, or rows of a column count that
        is not whole vectors (each row after the first starts off the vector boundary) -- which peel aligns."""
        cols = shape[-1]
        if not isinstance(cols, int):
            return None
        width = self.global_load_bytes()
        if cols < self.vector:
            return f"a row of {cols} column(s) is less than one vector of {self.vector}: no load can be {width} bytes wide"
        if cols % self.vector and not self.peel:
            return (f"rows of {cols} columns are not whole vectors of {self.vector}, so most rows start off a "
                    f"{width}-byte boundary: peel: true (a streamed variant) aligns each row's loads between a scalar "
                    "head and tail")
        return None

    def stem(self) -> str:
        parts = [f"{self.op}_{dtype_tag(*self.spec_dtypes[:2])}", *self._fused_tags(), self._variant_tag(),
                 f"t{self.threads}", f"v{self.vector}"]
        parts += [f"u{self.unroll}"] * (self.unroll > 1) + ["peel"] * self.peel
        if self.splits:
            parts.append("sauto" if self.split_workgroups else f"s{self.split}")
        if self.pack > 1:
            parts.append(f"p{self.pack}")
        return "_".join(parts) + tail_tag(self.tail)

    def _variant_tag(self) -> str:
        raise NotImplementedError

    def _fused_tags(self) -> list[str]:
        """A tag per operation fused into the row's pass (the family's), after the dtypes in the name."""
        return []

    def template_vars(self) -> dict[str, object]:
        """How a chunk macro's (X, n, row) arguments address the row: unpeeled, X[row, col] with column
        extent n; peeled, the flat views Xf/Yf from the row's first aligned element a0 with extent nvec in
        whole vectors, so that the vector index is provably a multiple of VEC (TVM emits the 16-byte load
        only then)."""
        if self.peel:
            row = {"row_args": "Xf, nvec, a0", "store_args": "Xf, Yf, nvec, a0", "y_at": "Y[row + c * CHUNK + tx * VEC + v]",
                   "in_row": "c * THREADS + tx < n", "param_origin": "head"}
        else:
            row = {"row_args": "X, N, row", "store_args": "X, Y, N, row", "y_at": "Y[row, c * CHUNK + tx * VEC + v]",
                   "in_row": "c * CHUNK + tx * VEC + v < n", "param_origin": "0"}
        if self.split_workgroups is not None:
            split = {"split_expr": "max(1, min(-(-SPLIT_WORKGROUPS // M), CHUNKS))",
                     "split_doc": f"split: auto -- {SPLIT_AUTO_WAVES} workgroups per CU/SM over all rows"}
        else:
            split = {"split_expr": str(self.split), "split_doc": "split"}
        return {"target_literal": repr(dict(self.tilelang_target)), **row, **split}

    @property
    def splits(self) -> bool:
        return self.split != 1 or self.split_workgroups is not None

    # how a packed kernel (pack > 1) addresses its rows, as finished expressions for the templates
    @property
    def row_threads(self) -> int:
        return self.threads // self.pack

    @property
    def row_groups(self) -> int:
        return self.row_threads // REDUCE_GROUP_LANES

    @property
    def lane_expr(self) -> str:
        """A thread's index within its row."""
        return "T.get_thread_binding() % ROW_THREADS" if self.pack > 1 else "T.get_thread_binding()"

    @property
    def grid_rows_expr(self) -> str:
        return "M // PACK" if self.pack > 1 else "M"

    @property
    def block_var(self) -> str:
        """The workgroup index T.Kernel binds: the row itself, or the block of PACK rows."""
        return "bx" if self.pack > 1 else "row"

    # the chunk loops of _rows.j2: how far the loop over a row's chunks runs and whether those chunks are checked
    # against the row's end (predicated: all CHUNKS, each checked; otherwise the FULL ones unchecked), and whether
    # one checked ragged chunk follows them (specialized)
    @property
    def loop_chunks(self) -> str:
        return "CHUNKS" if self.tail == TailPolicy.PREDICATED else "FULL"

    @property
    def loop_checked(self) -> str:
        return "True" if self.tail == TailPolicy.PREDICATED else "False"

    @property
    def ragged_chunk(self) -> bool:
        return self.tail == TailPolicy.SPECIALIZED

    @property
    def reduce_scope(self) -> str:
        return "row's threads" if self.pack > 1 else "workgroup"

    def split_layout(self, rows: int, cols: int) -> tuple[int, int]:
        """(workgroups per row, columns of each workgroup's segment) at one shape, as the template's make_kernel
        computes SPLIT and SEGCH * CHUNK: segment i is columns [i * seg, min((i + 1) * seg, cols))."""
        chunks = -(-cols // self.chunk)
        if self.split_workgroups is None:
            split = self.split
        else:
            split = max(1, min(-(-self.split_workgroups // rows), chunks))
        return split, -(-chunks // split) * self.chunk

    def split_slots(self) -> int:
        """fp32 partials per (row, workgroup) in the split workspace."""
        raise NotImplementedError

    def workspace_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        """The fp32 workspace [rows, SPLIT, slots] a split kernel takes (None: no split)."""
        if not self.splits:
            return None
        rows, cols = shape
        return (rows, self.split_layout(rows, cols)[0], self.split_slots())

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """`T.Kernel(M, ...)`: one workgroup per row, along x; split: two kernels of `T.Kernel(SPLIT, M, ...)`."""
        rows, cols = shape
        if self.splits:
            split = self.split_layout(rows, cols)[0]
            return ((split, rows, 1), (split, rows, 1))
        return ((rows // self.pack, 1, 1),)

    def metadata(self, uri: str) -> dict[str, object]:
        i, o, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"input": i, "out": o, "accumulate": acc}, "shapes": [list(s) for s in self.shapes],
            "threads": self.threads, "vector": self.vector, "unroll": self.unroll, "tail": self.tail.value,
            "peel": self.peel, "split": "auto" if self.split_workgroups else self.split, "pack": self.pack,
            "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd,
            "lds_bytes": self.lds_bytes, **self._family_metadata(),
        }

    def _family_metadata(self) -> dict[str, object]:
        return {}

    def summary(self) -> dict[str, str]:
        return {"dtypes": self.dtype_label(), "layout": "row", "tiling": f"1 row x {self.vector}/thread",
                "threads": str(self.threads), "schedule": self._schedule(), "tail": self.tail.value}

    def _schedule(self) -> str:
        return f"unroll {self.unroll}"

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])


def row_fields(spec: RowSpecBase, target: TargetSpec, spec_file: str) -> dict[str, object]:
    """The RowInstance fields every row-wise family fills alike."""
    hw = target.hw
    d = spec.dtypes
    return {
        "name": spec.name, "target": target.target, "spec_file": spec_file,
        "shapes": tuple((s.rows, s.cols) for s in spec.shapes),
        "in_dtype": hw.tilelang_dtypes[d.input], "out_dtype": hw.tilelang_dtypes[d.out],
        "accum_dtype": hw.tilelang_dtypes[d.accumulate], "spec_dtypes": (d.input.value, d.out.value, d.accumulate.value),
        "threads": spec.threads, "vector": spec.vector, "chunk": row_chunk(spec),
        "reduce_groups": max(1, spec.threads // REDUCE_GROUP_LANES), "unroll": spec.unroll, "tail": spec.tail,
        "peel": spec.peel, "pack": spec.pack,
        "split": spec.split if isinstance(spec.split, int) else 1,
        "split_workgroups": None if isinstance(spec.split, int) else SPLIT_AUTO_WAVES * hw.compute_units,
        "allow_spills": spec.allow_spills, "min_waves_per_simd": spec.min_waves_per_simd,
        "verify_tolerance_scale": spec.verify_tolerance_scale, "lds_bytes": row_lds_bytes(spec),
        "tilelang_target": tilelang_target(target),
    }


# ---- numerics ---------------------------------------------------------------------------------------

def row_bytes(inst, rows: int, cols: int) -> float:
    """Compulsory DRAM traffic of a row kernel: read X and write Y once."""
    i, o = DType(inst.spec_dtypes[0]), DType(inst.spec_dtypes[1])
    return float(rows * cols * (DTYPE_BYTES[i] + DTYPE_BYTES[o]))


def row_derived_shapes(inst) -> list[tuple[int, int]]:
    """Edge shapes on top of the spec's: with no tail policy, one and two whole chunks
    (threads*vector columns); with one, a single column and one column either side of a chunk
    multiple. Never longer than the spec's longest row (the online variant's register budget)."""
    c, p = inst.chunk, inst.pack  # a packed kernel takes whole blocks of `pack` rows
    longest = max(cols for _, cols in inst.shapes)
    cand = [(1, c), (3, 2 * c)] if inst.tail == TailPolicy.NONE else [(1, 1), (2, c + 1), (3, 2 * c - 1)]
    return [(r * p, n) for r, n in cand if n <= max(longest, c)]


def peel_scalar_mask(inst, rows: int, cols: int, r0: int = 0, device=None):
    """[rows, cols] bool, True where a peeled kernel (peel: true) reads and writes element by element: each
    row's head, from its first element to the first VEC-aligned element of the flat (16-byte aligned)
    buffer, and its tail after the last whole vector -- for rows r0 .. r0 + rows of the tensor. The same
    arithmetic as the template's peel_setup (_rows.j2)."""
    import torch

    vec = inst.vector
    base = torch.arange(r0, r0 + rows, dtype=torch.int64, device=device).unsqueeze(1) * cols
    head = torch.clamp((-base) % vec, max=cols)
    tail0 = head + (cols - head) // vec * vec
    col = torch.arange(cols, dtype=torch.int64, device=device).unsqueeze(0)
    return (col < head) | (col >= tail0)


def split_kept_columns(inst, rows: int, cols: int, device=None):
    """[cols] bool for the split control: False on the columns of the first segment (`split_layout` at the
    whole tensor's `rows`), the partial that a combine loop starting at 1 leaves out; all True without a split.
    The first segment is always a whole one; the last may be a single chunk, too little of a long row to move
    its statistics past the tolerance (seen: 1024 of 4194304 columns at 608 workgroups)."""
    import torch

    kept = torch.ones(cols, dtype=torch.bool, device=device)
    if inst.splits:
        _, seg = inst.split_layout(rows, cols)
        kept[:seg] = False
    return kept


def dropped_chunk_columns(inst, rows: int, cols: int, device=None):
    """[cols] bool for the dropped_chunk control: the columns a wrong column trip count leaves out of the
    statistics -- the row's last chunk (all of a shorter row); with a split, the last chunk of every
    workgroup's segment (each runs that loop; `rows`: the whole tensor's, which split: auto depends on)."""
    import torch

    dropped = torch.zeros(cols, dtype=torch.bool, device=device)
    if inst.splits:
        _, seg = inst.split_layout(rows, cols)
        for start in range(0, cols, seg):
            end = min(start + seg, cols)
            dropped[max(start, end - inst.chunk):end] = True
    else:
        dropped[max(0, cols - inst.chunk):] = True
    return dropped


def row_workspace(inst, shape, device):
    """The fp32 workspace of a split kernel (None without a split); every slot is written by kernel 1."""
    import torch

    ws = inst.workspace_shape(tuple(shape))
    return None if ws is None else torch.empty(ws, dtype=torch.float32, device=device)


@dataclass(frozen=True, kw_only=True)
class RowCase:
    X: object  # stored input (device, input dtype)
    WS: object = None  # split: the fp32 partials workspace [rows, SPLIT, slots] (device)

    def block(self, r0: int, r1: int) -> RowCase:
        """Rows r0 .. r1 of the case (the chunked check's block)."""
        return replace(self, X=self.X[r0:r1])

    @property
    def X32(self):
        """The same rounded values in fp32, made on use (a chunk's rows only, in the chunked check)."""
        return self.X.float()


def row_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> RowCase:
    """'normal': X ~ N(0,1). 'wide': each row scaled by e^[-2, 2] and shifted by N(0, 4): a spread of
    maxima and means."""
    import torch

    rows, cols = shape
    (x,), g = normal_draws(seed, (rows, cols))  # shared: not written
    if kind == "wide":
        x = x * torch.exp(torch.empty(rows, 1).uniform_(-2, 2, generator=g)) + 2 * torch.randn(rows, 1, generator=g)
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    xq = x.to(dt, copy=True)  # rounded inputs: the reference sees exactly what the kernel sees
    return RowCase(X=xq.to(device), WS=row_workspace(inst, shape, device))


def row_chunks(inst, case, max_elements: int, reference, controls, *, first_row_controls: tuple[str, ...] = (),
               whole_controls=None):
    """The chunked check of a row family: blocks of whole rows, about max_elements elements each (one row
    at least), the case's rows sliced (`case.block`: X and its other per-row tensors; weights and bias whole).
    `reference(inst, sub)` and
    `controls(inst, sub, ref, r0=r0, rows=rows)` are the family's own, row by row alike (r0: the block's first
    row, for controls that depend on where a row lies in memory; rows: the whole tensor's, which split: auto
    depends on); a control in `first_row_controls`
    wrongs the first row only, so in later blocks it is the reference itself; `whole_controls(inst, case,
    step)`, if given, returns {name: fn(sub, r0) -> wrong} for controls that mix rows (a pre-pass over the
    blocks gathers what they need)."""
    rows, cols = case.X.shape
    step = max(inst.pack, max_elements // max(cols, 1) // inst.pack * inst.pack)  # whole blocks of packed rows
    mixed = whole_controls(inst, case, step) if whole_controls else {}
    for r0 in range(0, rows, step):
        sub = case.block(r0, r0 + step)
        ref, mag = reference(inst, sub)
        wrong = controls(inst, sub, ref, r0=r0, rows=rows)
        for name in first_row_controls:
            if r0 > 0:
                wrong[name] = ref
        for name, fn in mixed.items():
            wrong[name] = fn(sub, r0)
        yield CheckChunk(index=(slice(r0, r0 + step),), ref=ref, mag=mag, controls=wrong)


def row_output_chunks(inst, case, max_elements: int, outputs, references, controls, *,
                      first_row_controls: tuple[str, ...] = (), rounding_controls: frozenset[str] = frozenset()):
    """row_chunks for a kernel of several outputs, each indexed by row first ([rows, cols] or [rows, 1]): blocks of
    whole rows, about max_elements elements over all the [rows, cols] outputs together (`outputs(inst, shape)`: the
    family's Output list); `references(inst, sub)` gives
    one (ref, mag) per output and `controls(inst, sub, refs, r0=r0, rows=rows)` {name: one wrong tensor per output}
    (the reference itself where the control leaves that output right). A block yields one CheckChunk per output; a
    control in `first_row_controls` wrongs the first row only (later blocks: the references); `rounding_controls`
    model one rounding step (CheckChunk.rounding_controls)."""
    rows, cols = case.X.shape
    full = max(1, sum(1 for o in outputs(inst, (rows, cols)) if o.shape[-1] == cols))
    step = max(inst.pack, max_elements // max(cols * full, 1) // inst.pack * inst.pack)
    for r0 in range(0, rows, step):
        sub = case.block(r0, r0 + step)
        refs = references(inst, sub)
        wrong = controls(inst, sub, refs, r0=r0, rows=rows)
        for name in first_row_controls:
            if r0 > 0 and name in wrong:
                wrong[name] = tuple(ref for ref, _ in refs)
        for i, (ref, mag) in enumerate(refs):
            yield CheckChunk(index=(slice(r0, r0 + step),), ref=ref, mag=mag, output=i,
                             controls={name: w[i] for name, w in wrong.items()}, rounding_controls=rounding_controls)


@dataclass(frozen=True, kw_only=True)
class RowTolerance:
    """Row-wise families (softmax, rmsnorm, layernorm): tol_ij = u_out*|ref_ij| + eta_out + scale*u_acc*mag_ij, where
    eta_out is the output dtype's absolute rounding bound in its subnormal range (half the smallest
    subnormal: softmax outputs of long rows reach it) and the family's reference gives mag (its
    modelled fp32 error magnitude per element, see each family's numerics)."""

    u_out: float
    eta_out: float
    u_acc: float
    model: str  # mag's formula, for reports
    scale: float = 1.0

    def describe(self) -> str:
        return f"{self.u_out:.3g}*|ref| + {self.eta_out:.3g} + {self.scale:g}*{self.u_acc:.3g}*({self.model})"

    def bound(self, ref, mag):
        return self.u_out * ref.abs() + self.eta_out + self.scale * self.u_acc * mag + TINY


def row_tolerance(model: str, spec_dtypes: tuple[str, ...], cols: int, scale: float = 1.0) -> RowTolerance:
    """`model`: the family's formula of mag with {n} for the row length (e.g. "|ref|*(4*sqrt({n}) + 8)")."""
    _, out, acc = (DType(d) for d in spec_dtypes)
    return RowTolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_acc=UNIT_ROUNDOFF[acc],
                        model=model.format(n=cols), scale=scale)
