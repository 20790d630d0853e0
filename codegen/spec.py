"""What every family's spec model is made of: the pydantic base, identifiers, tail policy, pipeline and
dtype pairs, and the per-target resolution of tunables. Each family's own model lives in its folder
(`codegen/families/<family>/spec.py`); the registry (`codegen.families`) maps `op:` to it.

Rules that need a target (hardware limits) live in each family's rules; a spec model only checks what
a single field or a spec on its own can be wrong about.
"""

from __future__ import annotations

import keyword
import re
from enum import StrEnum
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt
from pydantic_core import PydanticCustomError

from codegen.hardware import DType, Target

Tm = TypeVar("Tm", bound=BaseModel)

PositiveInt = Annotated[StrictInt, Field(gt=0)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]

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


class TailPolicy(StrEnum):
    NONE = "none"  # every shape must be a multiple of the block
    PREDICATED = "predicated"  # one kernel, bounds-checked loads/stores
    SPECIALIZED = "specialized"  # unchecked interior kernel + separate bounds-checked edge kernels


class Pipeline(Model):
    # K-loop stages: 0 or 1 = one LDS buffer, no overlap; N >= 2 = N LDS buffers, loads of tile k+N-1
    # overlap the MMA of tile k. On gfx942 tilegen emits explicit order/stage lists (TileLang 0.1.15
    # ignores num_stages there); on sm_90 TileLang schedules num_stages itself.
    stages: Annotated[StrictInt, Field(ge=0, le=4)] = 2


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
