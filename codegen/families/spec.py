"""What every family's spec model is made of: the pydantic base, identifiers, tail policy, pipeline and
dtype pairs, and the per-target resolution of tunables. Each family's own model lives in its folder
(`codegen/families/<family>/spec.py`); the registry (`codegen.families`) maps `op:` to it.

Rules that need a target (hardware limits) live in each family's rules; a spec model only checks what
a single field or a spec on its own can be wrong about.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictFloat,
    StrictInt,
    Tag,
)
from pydantic_core import PydanticCustomError

from codegen.core.hardware import DType, Target
from codegen.targets import TARGETS

Tm = TypeVar("Tm", bound=BaseModel)

# Ceilings on what one spec (or the spec set) may ask for; over one is a one-line error naming the rule.
MAX_INT32 = 2**31 - 1  # every size and count (shapes, tiles, threads, unroll): TileLang shapes are int32 [int32]
MAX_SHAPES = 256  # shapes per spec [too_long]
MAX_INSTANCES = 1024  # kernel instances (spec entries x targets) in one spec set [instance_limit]
# points of one search space `tilegen tune` expands by default (`--max-points` raises it) [search_points]. Each
# goes through the family's rules and, when legal and new, is rendered (100-1,700 points a second measured on one
# core: seconds for 512), then is built for real at every shape (4-15 s a build on one core): 512 points all legal
# and distinct are about 2-8 minutes of builds a shape on 16 cores (docs/limits.md). The committed spaces have at
# most 192 points.
MAX_POINTS = 512
# eps and softmax_scale become fp32 literals of the kernel: each must be a normal fp32 [fp32_range] -- a value
# below the smallest normal one is a subnormal (flushed to zero by the GPU's fp32 arithmetic) or rounds to 0
MAX_FP32 = 3.4028234663852886e38  # the largest fp32
MIN_NORMAL_FP32 = 1.1754943508222875e-38  # the smallest normal fp32, 2**-126


def _int32(value: int) -> int:
    if value > MAX_INT32:
        raise PydanticCustomError("int32", f"must be at most {MAX_INT32} (2**31 - 1): TileLang sizes are int32")
    return value


def _fp32(value: float) -> float:
    if not MIN_NORMAL_FP32 <= abs(value) <= MAX_FP32:
        raise PydanticCustomError("fp32_range", f"must be a normal fp32, from {MIN_NORMAL_FP32:.7g} to {MAX_FP32:.7g}: "
                                  "the kernel computes with it in fp32")
    return value


def _written_as_int(value: object) -> object:
    """Before an int choice's Literal, which in pydantic's lax mode takes true for 1 and 4.0 for 4."""
    if isinstance(value, bool | float):
        written = "true or false" if isinstance(value, bool) else "a decimal number"
        raise PydanticCustomError("int_type", f"must be written as an integer, not as {written}")
    return value


def int_choice(*values: int) -> Any:
    """One of `values`, written as an integer: `true` or `4.0` is refused, not read as 1 or 4."""
    return Annotated[Literal[values], BeforeValidator(_written_as_int)]


PositiveInt = Annotated[StrictInt, Field(gt=0), AfterValidator(_int32)]

# a loop's unroll factor: the compiler replicates the body that many times (a GEMM K step, a row's column chunk),
# and past a few dozen copies it only grows the kernel -- a compile of thousands takes minutes and gigabytes
MAX_UNROLL = 64


def _unroll(value: int) -> int:
    if value > MAX_UNROLL:
        raise PydanticCustomError("unroll_limit", f"at most {MAX_UNROLL}: the loop body is compiled that many times "
                                  "over (larger factors only grow the kernel and its compile time)")
    return value


Unroll = Annotated[StrictInt, Field(gt=0), AfterValidator(_unroll)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0), AfterValidator(_int32)]
# a number > 0 that is finite (inf and nan are refused [finite_number]) and a normal fp32 [fp32_range]
PositiveFp32 = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False), AfterValidator(_fp32)]
# a finite normal fp32 number of either sign (0, subnormals, inf and nan refused) [finite_number, fp32_range]
NormalFp32 = Annotated[StrictFloat, Field(allow_inf_nan=False), AfterValidator(_fp32)]
# verify's tolerance multiplier (docs/verification.md); < 1 tightens, > 1 loosens
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


class DynamicRange(Model):
    """`{min, max}`: the sizes of one dimension that one compiled kernel serves, both ends included: the size is
    symbolic in the kernel (T.dynamic), so every size in the range runs the same binary (GEMM `dynamic_m`, decode
    attention `dynamic_kv`); the kernel's other sizes stay fixed at compile time."""

    min: PositiveInt
    max: PositiveInt


class TailPolicy(StrEnum):
    NONE = "none"  # every shape must be a multiple of the block
    PREDICATED = "predicated"  # one kernel, bounds-checked loads/stores
    SPECIALIZED = "specialized"  # unchecked interior kernel + separate bounds-checked edge kernels


class Pipeline(Model):
    # K-loop stages: 0 or 1 = one LDS buffer, no overlap; N >= 2 = N LDS buffers, loads of tile k+N-1
    # overlap the MMA of tile k. On gfx942 tilegen emits explicit order/stage lists (TileLang 0.1.15
    # ignores num_stages there); on sm_90 TileLang schedules num_stages itself. Up to 8: small tiles stream K
    # through deep pipelines (cuBLAS runs 64 x 64 tiles 13 deep at narrow N); LDS bounds it first [lds_budget].
    stages: Annotated[StrictInt, Field(ge=0, le=8)] = 2


class RowDTypes(Model):
    """An input dtype, an output dtype and the accumulator (row-wise families and attention)."""

    input: DType
    out: DType
    accumulate: DType = DType.FP32


def resolve_tuning(spec: BaseModel, tuning: type[Tm], target: Target) -> tuple[Tm, dict[str, tuple[str, ...]]]:
    """The effective tunables of `spec` for `target` (each field of the `tuning` model, replaced by
    `overrides.<target>.<field>` where set) and, per field, the spec path it came from."""
    override = spec.overrides.get(target)
    values: dict[str, object] = {}
    origin: dict[str, tuple[str, ...]] = {}
    for field_name in tuning.model_fields:
        replaced = getattr(override, field_name) if override is not None else None
        values[field_name] = replaced if replaced is not None else getattr(spec, field_name)
        origin[field_name] = ("overrides", target.value, field_name) if replaced is not None else (field_name,)
    return tuning(**values), origin


# ---- search spaces (`tilegen tune`) ------------------------------------------------------------------
# A spec's `search.<target>` block lists values for its family's tunables; `tilegen gen` ignores it (it
# generates the hand configuration only). The search model is built from the spec model itself, so each
# value is validated by the same field type as the tunable (`tiling.block_m` by Tiling.block_m).


def _distinct(values: list) -> list:
    if not values:
        raise PydanticCustomError("empty_search", "an empty list of values: give at least one, or leave the tunable out")
    for i, v in enumerate(values):
        if v in values[:i]:
            raise PydanticCustomError("duplicate_value", f"value {v!r} is listed twice")
    return values


def _values_of(info) -> object:
    """`list[<the tunable's own type>]`, non-empty and without repeats, optional."""
    item = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return Annotated[list[item], AfterValidator(_distinct)] | None


def search_model(name: str, source: type[BaseModel], tunables: tuple[str, ...]) -> type[BaseModel]:
    """The model of one target's search block over `source`'s `tunables` ("unroll", "tiling.block_m"): a
    field per tunable holding a list of its values, nested tunables under a model of their own
    (`tiling: {block_m: [64, 128]}`). Unknown keys are refused like any spec key [unknown_key]."""
    from pydantic import create_model

    groups: dict[str, list[str]] = {}
    for path in tunables:
        head, _, leaf = path.partition(".")
        groups.setdefault(head, [])
        if leaf:
            groups[head].append(leaf)
    fields: dict[str, tuple] = {}
    for head, leaves in groups.items():
        info = source.model_fields[head]
        if not leaves:
            fields[head] = (_values_of(info), None)
            continue
        inner: type[BaseModel] = next(a for a in (info.annotation, *get_args(info.annotation))
                                      if isinstance(a, type) and issubclass(a, BaseModel))
        sub = create_model(f"{name}{head.title()}", __base__=Model,
                           **{leaf: (_values_of(inner.model_fields[leaf]), None) for leaf in leaves})
        fields[head] = (sub | None, None)
    return create_model(name, __base__=Model, **fields)


def search_values(block: BaseModel) -> list[tuple[str, list]]:
    """(tunable path, values) of a search block, in the model's field order; tunables left out are absent."""
    out: list[tuple[str, list]] = []
    for head in type(block).model_fields:
        value = getattr(block, head)
        if value is None:
            continue
        if isinstance(value, BaseModel):
            out.extend((f"{head}.{leaf}", getattr(value, leaf)) for leaf in type(value).model_fields
                       if getattr(value, leaf) is not None)
        else:
            out.append((head, value))
    return out


def _search_tag(value: object) -> str:
    return "list of blocks" if isinstance(value, list) else "one block"


def _some_blocks(blocks: list) -> list:
    if not blocks:
        raise PydanticCustomError("empty_search", "an empty list of blocks: give at least one, or leave the target out")
    return blocks


def _some_tunable(block: BaseModel) -> BaseModel:
    if not search_values(block):
        raise PydanticCustomError("empty_search", "a block that lists no tunable: give at least one, or leave it out")
    return block


def search_entry(block: type[BaseModel]) -> object:
    """The type of `search.<target>`: one block, or a non-empty list of blocks, each listing at least one tunable.
    The list or mapping picks the member (a discriminator), so a wrong block is reported once, as a block's error,
    not also as "must be a list"; the tags are not keys of the entry, so error paths leave them out
    (codegen.spec.load._user_path)."""
    one = Annotated[block, AfterValidator(_some_tunable)]
    return Annotated[Annotated[one, Tag("one block")]
                     | Annotated[list[one], AfterValidator(_some_blocks), Tag("list of blocks")],
                     Discriminator(_search_tag)]


def search_blocks(search: BaseModel | list[BaseModel]) -> list[BaseModel]:
    """A `search.<target>` entry's blocks: one block (a cartesian space), or each block of a list of them (the
    union of their spaces: tunables that go together, such as a structure and the tiles that suit it)."""
    return list(search) if isinstance(search, list) else [search]


def search_block_type(spec_type: type[BaseModel]) -> type[BaseModel]:
    """The search block model of a family's spec (`search: dict[Target, <Block> | list[<Block>]]`)."""
    todo = [spec_type.model_fields["search"].annotation]  # dict[Target, search_entry(<Block>)]
    while todo:
        a = todo.pop(0)
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        todo.extend(get_args(a))
    raise TypeError(f"{spec_type.__name__}.search names no block model")


Values = tuple[tuple[str, object], ...]  # (tunable path, value) of one point, in the search block's order


def hand_spec(spec: BaseModel, target: Target) -> BaseModel:
    """The spec's hand configuration for one target, as a spec of that target alone: its overrides folded
    into the top-level tunables (the same values `tuning_for` resolves), no search block."""
    update: dict[str, object] = {"targets": [target], "search": {}}
    if hasattr(spec, "tuning_for"):
        tuning, _ = spec.tuning_for(target)
        update |= {f: getattr(tuning, f) for f in type(tuning).model_fields} | {"overrides": {}}
        # a top-level value this target does not take (the spec's TARGET_ONLY: k_pack, lds_layout on sm_90, which
        # the AMD targets of the spec take; b_eviction, epilogue on the AMD targets) would be refused in a spec of
        # this target alone; the target's kernel is the same without it
        for only in getattr(type(spec), "TARGET_ONLY", ()):
            if only.name in update and not only.takes(TARGETS[target], update[only.name]):
                update[only.name] = only.default
    return spec.model_copy(update=update)


def apply_point(base: BaseModel, values: Values) -> BaseModel:
    """`base` with each tunable of `values` replaced; nested tunables ("tiling.block_m") replace a field of
    the nested model. Every value was validated by the tunable's own field type in the search block."""
    update: dict[str, object] = {}
    nested: dict[str, dict[str, object]] = {}
    for path, value in values:
        head, _, leaf = path.partition(".")
        if leaf:
            nested.setdefault(head, {})[leaf] = value
        else:
            update[head] = value
    for head, sub in nested.items():
        update[head] = getattr(base, head).model_copy(update=sub)
    return base.model_copy(update=update)


@dataclass(frozen=True)
class TargetOnly:
    """A tunable only some targets take: `takes(target_spec, value)` says whether a target's kernel takes the
    value; the other targets keep `default`. One record serves the rule that refuses asking it of such a
    target (codegen.families.rules.target_only_value) and `tilegen tune`'s per-target hand configuration. A spec model
    lists its own in TARGET_ONLY."""

    name: str
    default: object
    takes: Callable[[Any, object], bool]


# an argument of TileLang's ROCm gemm only (TargetSpec.supports_k_pack): GEMM and attention
K_PACK = TargetOnly("k_pack", 1, lambda t, v: v == 1 or t.supports_k_pack)


# ---- tunables, declared once ---------------------------------------------------------------------------
# A family lists its tunables as `Knob`s, in order; the tuning model (`tuning_for`), the override model
# (`overrides.<target>`), the spec's tunable fields, the tunables `search:` may list and the TARGET_ONLY
# records are all derived from that one declaration.

REQUIRED: Any = ...  # a Knob's default where the spec must give the value (tiling)


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One tunable. `type` is the field's type (an Annotated type carries its constraints) and `default` its
    value where the spec leaves it out (REQUIRED: none). `takes(target_spec, value)`, where given, says which
    targets take a value (a TargetOnly; the others keep `default`). `search`: whether `search:` may list it --
    a tunable whose type is a model is searched by its own fields (`tiling.block_m`), all of them or the ones
    named. `declares_field`: the declaration makes the field (of the spec and, where the family has them, of
    its tuning and override models); False for a field the spec model declares itself, listed here for its
    place in the search order (GEMM's `tail`, the same on every target; a row family's `variant`)."""

    name: str
    type: Any = None
    default: Any = REQUIRED
    doc: str = ""
    takes: Callable[[Any, object], bool] | None = None
    search: bool | tuple[str, ...] = True
    declares_field: bool = True

    @property
    def target_only(self) -> TargetOnly | None:
        return TargetOnly(self.name, self.default, self.takes) if self.takes is not None else None

    def search_paths(self) -> tuple[str, ...]:
        """The paths of this tunable `search:` may list: its name, or one per searched field of its model."""
        if self.search is False:
            return ()
        if isinstance(self.search, tuple):
            return tuple(f"{self.name}.{leaf}" for leaf in self.search)
        if isinstance(self.type, type) and issubclass(self.type, BaseModel):
            return tuple(f"{self.name}.{leaf}" for leaf in self.type.model_fields)
        return (self.name,)


def _declared(knobs: tuple[Knob, ...]) -> tuple[Knob, ...]:
    return tuple(k for k in knobs if k.declares_field)


def knob_fields(knobs: tuple[Knob, ...]) -> dict[str, tuple]:
    """The declared tunables as pydantic fields, each with its type, default and doc, in declaration order."""
    return {k.name: (k.type, Field(k.default, description=k.doc or None)) for k in _declared(knobs)}


def tuning_model(name: str, knobs: tuple[Knob, ...], *, doc: str, module: str) -> type[BaseModel]:
    """The model of a spec's effective tunables on one target (resolve_tuning fills every field)."""
    from pydantic import create_model

    return create_model(name, __base__=Model, __doc__=doc, __module__=module, **knob_fields(knobs))


def override_model(name: str, knobs: tuple[Knob, ...], *, doc: str, module: str) -> type[BaseModel]:
    """The model of `overrides.<target>`: every declared tunable, each optional (None: the spec's value)."""
    from pydantic import create_model

    return create_model(name, __base__=Model, __doc__=doc, __module__=module,
                        **{k.name: (k.type | None, None) for k in _declared(knobs)})


def with_knobs(name: str, base: type[Tm], knobs: tuple[Knob, ...], *, module: str) -> type[Tm]:
    """`base` (the spec fields before the tunables) followed by the declared tunables' fields: a spec model
    subclasses it and declares the fields after them, so the spec's field order is the order it is written in."""
    from pydantic import create_model

    return create_model(name, __base__=base, __module__=module, **knob_fields(knobs))


def tunable_paths(knobs: tuple[Knob, ...]) -> tuple[str, ...]:
    """What `search:` may list, in declaration order (the search block's and every search point's order)."""
    return tuple(path for k in knobs for path in k.search_paths())


def target_only(knobs: tuple[Knob, ...]) -> dict[str, TargetOnly]:
    """The TargetOnly record of each tunable only some targets take, by name, in declaration order."""
    return {k.name: only for k in knobs if (only := k.target_only) is not None}



def missing_from_starter(knobs: tuple[Knob, ...], starter: str) -> list[str]:
    """The tunables (and searched sub-fields, `tiling.block_m`) of `knobs` that `starter` -- a starter spec's
    text -- neither sets nor shows in a commented line (`# lds_layout: natural`), in declaration order."""
    block = re.findall(r"^[ \t]*(?:#[ \t]*)?-?[ \t]*([a-z_][a-z0-9_]*):", starter, flags=re.MULTILINE)
    flow = re.findall(r"[{,][ \t]*([a-z_][a-z0-9_]*):", starter)  # `tiling: {block_m: 128, ...}`
    keys = set(block) | set(flow)
    paths = [p for k in knobs for p in (k.name, *k.search_paths())]
    return [p for p in dict.fromkeys(paths) if p.rpartition(".")[2] not in keys]
