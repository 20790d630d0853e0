"""The norm spec models (`op: rmsnorm`, `op: layernorm`): one family, one template."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StrictFloat

from codegen.families.rows import RowSpecBase


class NormVariant(StrEnum):
    # no row buffer: the statistics passes and the normalise pass each read the row from global memory
    # (the re-reads mostly hit L2); any row length
    STREAMED = "streamed"
    # the row is read once into registers (every load of the row issued up front), the statistics and
    # the output come from registers (the row must fit the register budget: rule row_registers)
    REGISTERS = "registers"


class NormSpecBase(RowSpecBase):
    """rmsnorm / layernorm over the last dim, with a weight (and, for layernorm, a bias) of `cols`
    elements in the input dtype; the statistics streamed over global memory or taken from the row held
    in registers (`variant`)."""

    eps: Annotated[StrictFloat, Field(gt=0)]  # added to the mean square / variance; no default: models differ
    variant: NormVariant = NormVariant.STREAMED

    @property
    def row_in_registers(self) -> bool:
        return self.variant == NormVariant.REGISTERS

    @property
    def streaming_variant(self) -> str:
        return NormVariant.STREAMED.value


class RmsNormSpec(NormSpecBase):
    op: Literal["rmsnorm"]


class LayerNormSpec(NormSpecBase):
    op: Literal["layernorm"]
