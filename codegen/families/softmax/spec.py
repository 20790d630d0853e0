"""The softmax spec model (`op: softmax`): Y = softmax(X * scale + mask, dim=-1) over rows of `cols` elements
(scale and mask optional)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from codegen.core.hardware import Target
from codegen.families.rows import ROW_TUNABLES, RowSpecBase
from codegen.families.spec import NormalFp32, search_entry, search_model


class SoftmaxVariant(StrEnum):
    # one pass over memory: the row is read once into registers while a running max and sum are kept
    # per chunk, then normalised from registers (the row must fit the register budget: rule row_registers)
    ONLINE = "online"
    # no row buffer: a max pass, an exp/sum pass and a normalise pass over global memory (any length)
    TWO_PASS = "two_pass"


class SoftmaxMask(StrEnum):
    NONE = "none"
    FULL = "full"  # an additive mask of X's shape, [rows, cols], in the input dtype (-inf masks an element out)
    BROADCAST = "broadcast"  # one additive mask row, [cols], in the input dtype, added to every row


class SoftmaxSpec(RowSpecBase):
    op: Literal["softmax"]
    variant: SoftmaxVariant = SoftmaxVariant.TWO_PASS
    scale: NormalFp32 | None = None  # the logits are X * scale (in fp32) before the mask is added; None: X
    mask: SoftmaxMask = SoftmaxMask.NONE
    # `tilegen tune`'s space per target: one block, or a list of blocks (the union of their spaces); `gen` ignores it
    search: dict[Target, search_entry(SoftmaxSearch)] = {}  # noqa: RUF012

    @property
    def row_in_registers(self) -> bool:
        return self.variant == SoftmaxVariant.ONLINE

    @property
    def streaming_variant(self) -> str:
        return SoftmaxVariant.TWO_PASS.value

    @property
    def fused(self) -> tuple[tuple[str, object], ...]:
        return (("scale", self.scale),) * (self.scale is not None) + (("mask", self.mask.value),) * (
            self.mask != SoftmaxMask.NONE)


SoftmaxSearch = search_model("SoftmaxSearch", SoftmaxSpec, ROW_TUNABLES)
SoftmaxSpec.model_rebuild()


# `tilegen init` writes this as specs/softmax.yaml.
STARTER = """\
# softmax over the last dim of X[rows, cols], fp32 statistics; one workgroup per row.
# Every field, its default and rules: tilegen's docs/softmax.md.
- name: softmax_fp16
  op: softmax
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  variant: two_pass         # two_pass (any row length) | online (row held in registers, one read)
  # scale: 0.125            # softmax(X * scale + mask): a normal fp32 constant
  mask: none                # none | full ([rows, cols] additive mask) | broadcast ([cols], added to every row)
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 128              # a multiple of 64 on gfx942, of 32 on sm_90
  vector: 8                 # elements per thread per load (8 x fp16 = one 16-byte load)
  tail: none                # none | predicated | specialized (cols not a multiple of threads x vector)
  # unroll: 1               # unroll of the two_pass column loops
  # peel: false             # aligned vector loads on rows that start off a 16-byte boundary (two_pass)
  # split: 1                # workgroups per row: 1 to 65535, or auto (two_pass)
  # pack: 1                 # rows per workgroup, 1 to 32: many short rows
  targets: [gfx942, sm_90]
"""
