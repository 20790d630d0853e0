"""What the user writes: pydantic models of an operator spec, validated field by field.

Rules that need a target (hardware limits) live in `codegen.rules`; this module only checks what a
single field or a spec on its own can be wrong about.
"""

from __future__ import annotations

import keyword
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from pydantic_core import PydanticCustomError

from codegen.hardware import DType, Target

# Ceilings on what one spec (or the spec set) may ask for; over one is a one-line error naming the rule.
MAX_INT32 = 2**31 - 1  # every size and count (shapes, tiles, threads, unroll): TileLang shapes are int32 [int32]
MAX_SHAPES = 256  # shapes per spec [too_long]
MAX_INSTANCES = 1024  # kernel instances (spec entries x targets) in one spec set [instance_limit]
MAX_FP32 = 3.4028234663852886e38  # eps and softmax_scale become fp32 literals of the kernel [fp32_range]


def _int32(value: int) -> int:
    if value > MAX_INT32:
        raise PydanticCustomError("int32", f"must be at most {MAX_INT32} (2**31 - 1): TileLang sizes are int32")
    return value


def _fp32(value: float) -> float:
    if value > MAX_FP32:
        raise PydanticCustomError("fp32_range", f"must be at most {MAX_FP32:.7g}, the largest fp32: the kernel "
                                  "computes with it in fp32")
    return value


PositiveInt = Annotated[StrictInt, Field(gt=0), AfterValidator(_int32)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0), AfterValidator(_int32)]
# a number > 0 that is finite (inf and nan are refused [finite_number]) and a finite fp32
PositiveFp32 = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False), AfterValidator(_fp32)]
# verify's tolerance multiplier (README "Verification"); < 1 tightens, > 1 loosens
ToleranceScale = Annotated[StrictFloat, Field(gt=0, le=100, allow_inf_nan=False)]

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,47}$"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a kernel, or None. A kernel name becomes a file name, a Python
    identifier and a kernel symbol, so only lower-case identifiers that are not keywords will do."""
    if not re.fullmatch(NAME_PATTERN, name):
        return "must be a lower-case identifier: a letter, then letters, digits or '_' (at most 48 characters)"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    return None


def _check_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise PydanticCustomError("identifier", problem)
    return name


Identifier = Annotated[str, AfterValidator(_check_name)]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WarpPolicy(StrEnum):
    """How TileLang splits a block's tile among its waves/warps (tilelang.GemmWarpPolicy)."""

    SQUARE = "square"
    FULL_ROW = "full_row"
    FULL_COL = "full_col"


class TailPolicy(StrEnum):
    NONE = "none"  # every shape must be a multiple of the block
    PREDICATED = "predicated"  # one kernel, bounds-checked loads/stores
    SPECIALIZED = "specialized"  # unchecked interior kernel + separate bounds-checked edge kernels


class Layout(StrEnum):
    """BLAS-style: first letter A, second B. 'n' = stored as written (A: MxK, B: KxN); 't' = stored
    transposed (A: KxM, B: NxK). 'nt' is nn.Linear's A @ W^T."""

    NN = "nn"
    NT = "nt"
    TN = "tn"
    TT = "tt"

    @property
    def trans_a(self) -> bool:
        return self.value[0] == "t"

    @property
    def trans_b(self) -> bool:
        return self.value[1] == "t"


class GemmDTypes(Model):
    a: DType
    b: DType
    out: DType
    accumulate: DType = DType.FP32


class GemmShape(Model):
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt


class Tiling(Model):
    block_m: PositiveInt
    block_n: PositiveInt
    block_k: PositiveInt
    threads: PositiveInt
    policy: WarpPolicy = WarpPolicy.SQUARE


class Pipeline(Model):
    # K-loop stages: 0 or 1 = one LDS buffer, no overlap; N >= 2 = N LDS buffers, loads of tile k+N-1
    # overlap the MMA of tile k. On gfx942 tilegen emits explicit order/stage lists (TileLang 0.1.15
    # ignores num_stages there); on sm_90 TileLang schedules num_stages itself.
    stages: Annotated[StrictInt, Field(ge=0, le=4)] = 2


class GemmTuning(Model):
    """The per-target tunables; `overrides.<target>` may replace any of them for one target."""

    tiling: Tiling
    pipeline: Pipeline = Pipeline()
    unroll: PositiveInt = 1
    swizzle_panel: NonNegativeInt = 0
    k_pack: Literal[1, 2] = 1


class GemmOverride(Model):
    tiling: Tiling | None = None
    pipeline: Pipeline | None = None
    unroll: PositiveInt | None = None
    swizzle_panel: NonNegativeInt | None = None
    k_pack: Literal[1, 2] | None = None


class GemmSpec(Model):
    name: Identifier
    op: Literal["gemm"]
    dtypes: GemmDTypes
    layout: Layout = Layout.NN
    shapes: Annotated[list[GemmShape], Field(min_length=1, max_length=MAX_SHAPES)]
    tiling: Tiling
    pipeline: Pipeline = Pipeline()
    unroll: PositiveInt = 1
    swizzle_panel: NonNegativeInt = 0
    k_pack: Literal[1, 2] = 1
    tail: TailPolicy = TailPolicy.NONE
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]
    overrides: dict[Target, GemmOverride] = {}
    allow_spills: StrictBool = False  # a build with register spills fails unless this is true
    verify_tolerance_scale: ToleranceScale = 1.0  # reported with results
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None  # gfx942 occupancy floor for `build`

    def tuning_for(self, target: Target) -> tuple[GemmTuning, dict[str, tuple[str, ...]]]:
        """The effective tunables for `target` and, per field, the spec path it came from."""
        override = self.overrides.get(target)
        values: dict[str, object] = {}
        origin: dict[str, tuple[str, ...]] = {}
        for field_name in GemmTuning.model_fields:
            replaced = getattr(override, field_name) if override is not None else None
            if replaced is not None:
                values[field_name] = replaced
                origin[field_name] = ("overrides", target.value, field_name)
            else:
                values[field_name] = getattr(self, field_name)
                origin[field_name] = (field_name,)
        return GemmTuning(**values), origin


# ---- row-wise families (softmax, rmsnorm, layernorm) --------------------------------------------------------------
# One row of `cols` elements per workgroup; each thread streams `vector` contiguous elements per
# chunk of threads*vector columns. No staged copy (the loads are independent vector loads): there is
# no `pipeline` field; unrolling the column loop is what keeps several loads in flight.


class RowDTypes(Model):
    input: DType
    out: DType
    accumulate: DType = DType.FP32


class RowShape(Model):
    rows: PositiveInt
    cols: PositiveInt


class SoftmaxVariant(StrEnum):
    # one pass over memory: the row is read once into registers while a running max and sum are kept
    # per chunk, then normalised from registers (the row must fit the register budget: rule row_registers)
    ONLINE = "online"
    # no row buffer: a max pass, an exp/sum pass and a normalise pass over global memory (any length)
    TWO_PASS = "two_pass"


class NormVariant(StrEnum):
    # no row buffer: the statistics passes and the normalise pass each read the row from global memory
    # (the re-reads mostly hit L2); any row length
    STREAMED = "streamed"
    # the row is read once into registers (every load of the row issued up front), the statistics and
    # the output come from registers (the row must fit the register budget: rule row_registers)
    REGISTERS = "registers"


Vector = Literal[1, 2, 4, 8]


class RowSpecBase(Model):
    name: Identifier
    dtypes: RowDTypes
    shapes: Annotated[list[RowShape], Field(min_length=1, max_length=MAX_SHAPES)]
    threads: PositiveInt
    vector: Vector = 8  # elements per thread per load (one 16-byte load for fp16/bf16 at 8)
    unroll: PositiveInt = 1  # unroll factor of the streaming column loops (T.unroll)
    tail: TailPolicy = TailPolicy.NONE
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]
    allow_spills: StrictBool = False
    verify_tolerance_scale: ToleranceScale = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None

    @property
    def row_in_registers(self) -> bool:
        """Whether the kernel holds the whole row in registers (register budget, always fully unrolled)."""
        return False


class SoftmaxSpec(RowSpecBase):
    op: Literal["softmax"]
    variant: SoftmaxVariant = SoftmaxVariant.TWO_PASS

    @property
    def row_in_registers(self) -> bool:
        return self.variant == SoftmaxVariant.ONLINE


class NormSpecBase(RowSpecBase):
    """rmsnorm / layernorm over the last dim, with a weight (and, for layernorm, a bias) of `cols`
    elements in the input dtype; the statistics streamed over global memory or taken from the row held
    in registers (`variant`)."""

    eps: PositiveFp32  # added to the mean square / variance; no default: models differ
    variant: NormVariant = NormVariant.STREAMED

    @property
    def row_in_registers(self) -> bool:
        return self.variant == NormVariant.REGISTERS


class RmsNormSpec(NormSpecBase):
    op: Literal["rmsnorm"]


class LayerNormSpec(NormSpecBase):
    op: Literal["layernorm"]


# ---- attention forward (FlashAttention style) ---------------------------------------------------------------------
# One workgroup per (query block of block_m rows, head, batch); KV blocks of block_n keys stream through
# LDS/shared memory with an online softmax (running max and sum in fp32); nothing of seq_q x seq_kv is stored.
# Layout: Q and O [batch, seq_q, heads, head_dim], K and V [batch, seq_kv, kv_heads, head_dim] (README).

ATTENTION_HEAD_DIMS = (64, 128)


class AttentionShape(Model):
    batch: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt  # heads share a K/V head in groups of heads // kv_heads (GQA; = heads for MHA)
    seq_q: PositiveInt
    seq_kv: PositiveInt


class AttentionTiling(Model):
    block_m: PositiveInt  # query rows per workgroup
    block_n: PositiveInt  # keys per KV block (one step of the online softmax)
    threads: PositiveInt


class AttentionTuning(Model):
    """The per-target tunables; `overrides.<target>` may replace any of them for one target."""

    tiling: AttentionTiling
    pipeline: Pipeline = Pipeline()


class AttentionOverride(Model):
    tiling: AttentionTiling | None = None
    pipeline: Pipeline | None = None


class AttentionSpec(Model):
    name: Identifier
    op: Literal["attention"]
    dtypes: RowDTypes
    shapes: Annotated[list[AttentionShape], Field(min_length=1, max_length=MAX_SHAPES)]
    head_dim: PositiveInt  # 64 or 128 (rule head_dim)
    causal: StrictBool = False  # top-left aligned: query i attends to keys <= i
    softmax_scale: PositiveFp32 | None = None  # None: 1/sqrt(head_dim)
    tiling: AttentionTiling
    pipeline: Pipeline = Pipeline()
    tail: TailPolicy = TailPolicy.NONE
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]
    overrides: dict[Target, AttentionOverride] = {}
    allow_spills: StrictBool = False
    verify_tolerance_scale: ToleranceScale = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None

    def tuning_for(self, target: Target) -> tuple[AttentionTuning, dict[str, tuple[str, ...]]]:
        """The effective tunables for `target` and, per field, the spec path it came from."""
        override = self.overrides.get(target)
        values: dict[str, object] = {}
        origin: dict[str, tuple[str, ...]] = {}
        for field_name in AttentionTuning.model_fields:
            replaced = getattr(override, field_name) if override is not None else None
            values[field_name] = replaced if replaced is not None else getattr(self, field_name)
            origin[field_name] = ("overrides", target.value, field_name) if replaced is not None else (field_name,)
        return AttentionTuning(**values), origin


SPEC_MODELS: dict[str, type[Model]] = {
    "gemm": GemmSpec, "softmax": SoftmaxSpec, "rmsnorm": RmsNormSpec, "layernorm": LayerNormSpec,
    "attention": AttentionSpec,
}
OpSpec = GemmSpec | SoftmaxSpec | RmsNormSpec | LayerNormSpec | AttentionSpec
