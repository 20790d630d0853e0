"""The softmax spec model (`op: softmax`): Y = softmax(X, dim=-1) over rows of `cols` elements."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from codegen.families.rows import RowSpecBase


class SoftmaxVariant(StrEnum):
    # one pass over memory: the row is read once into registers while a running max and sum are kept
    # per chunk, then normalised from registers (the row must fit the register budget: rule row_registers)
    ONLINE = "online"
    # no row buffer: a max pass, an exp/sum pass and a normalise pass over global memory (any length)
    TWO_PASS = "two_pass"


class SoftmaxSpec(RowSpecBase):
    op: Literal["softmax"]
    variant: SoftmaxVariant = SoftmaxVariant.TWO_PASS

    @property
    def row_in_registers(self) -> bool:
        return self.variant == SoftmaxVariant.ONLINE

    @property
    def streaming_variant(self) -> str:
        return SoftmaxVariant.TWO_PASS.value
