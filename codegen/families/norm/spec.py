"""The norm spec models (`op: rmsnorm`, `op: layernorm`): one family, one template."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import StrictBool

from codegen.core.hardware import DType, Target
from codegen.families.rows import ROW_TUNABLES, ROW_TYPES, RowSpecBase
from codegen.families.spec import PositiveFp32, search_entry, search_model


class NormVariant(StrEnum):
    # no row buffer: the statistics passes and the normalise pass each read the row from global memory
    # (the re-reads mostly hit L2); any row length
    STREAMED = "streamed"
    # the row is read once into registers (every load of the row issued up front), the statistics and
    # the output come from registers (the row must fit the register budget: rule row_registers)
    REGISTERS = "registers"


class Quant(StrEnum):
    NONE = "none"  # the output is written in dtypes.out as computed
    # fp8 e4m3 output (rmsnorm): each row scaled so its largest magnitude is the fp8 maximum, the fp32 scale
    # amax(row) / fp8_max written beside it, one per row ([rows, 1]): Y ~ Q * scale
    PER_TOKEN = "per_token"


class NormSpecBase(RowSpecBase):
    """rmsnorm / layernorm over the last dim, with a weight (and, for layernorm, a bias) of `cols`
    elements in the input dtype; the statistics streamed over global memory or taken from the row held
    in registers (`variant`)."""

    eps: PositiveFp32  # added to the mean square / variance; no default: models differ
    variant: NormVariant = NormVariant.STREAMED
    # residual add in the same pass: S = X + R (written in the input dtype: the next block's residual) and
    # Y = norm(S) -- the sum as stored, rounded once, is what is normalised
    residual: StrictBool = False
    quant: Quant = Quant.NONE  # per_token: fp8 e4m3 output with a dynamic per-row scale (rmsnorm; rules quant_*)
    # `tilegen tune`'s space per target: one block, or a list of blocks (the union of their spaces); `gen` ignores it
    search: dict[Target, search_entry(NormSearch)] = {}  # noqa: RUF012

    @property
    def fused(self) -> tuple[tuple[str, object], ...]:
        return (("residual", True),) * self.residual + (("quant", self.quant.value),) * (self.quant != Quant.NONE)

    @property
    def out_dtypes(self) -> tuple[DType, ...]:
        return (*ROW_TYPES, DType.FP8_E4M3) if self.op == "rmsnorm" else ROW_TYPES

    @property
    def row_in_registers(self) -> bool:
        return self.variant == NormVariant.REGISTERS

    @property
    def streaming_variant(self) -> str:
        return NormVariant.STREAMED.value


NormSearch = search_model("NormSearch", NormSpecBase, ROW_TUNABLES)
NormSpecBase.model_rebuild()


class RmsNormSpec(NormSpecBase):
    op: Literal["rmsnorm"]


class LayerNormSpec(NormSpecBase):
    op: Literal["layernorm"]


# `tilegen init` writes these as specs/rmsnorm.yaml and specs/layernorm.yaml.
RMSNORM_STARTER = """\
# rmsnorm: Y = X / sqrt(mean(X^2) + eps) * W over the last dim, fp32 statistics.
# Every field, its default and rules: tilegen's docs/norm.md.
- name: rmsnorm_fp16
  op: rmsnorm
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-6
  variant: streamed         # streamed (any row length) | registers (row read once into registers)
  residual: false           # true: S = X + R written beside Y = rmsnorm(S) * W, one pass
  quant: none               # per_token: dtypes.out fp8_e4m3 and a per-row fp32 scale (amax / fp8 max)
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  # unroll: 1               # unroll of the streamed column loops
  # peel: false             # aligned vector loads on rows that start off a 16-byte boundary (streamed)
  # split: 1                # workgroups per row: 1 to 65535, or auto (streamed)
  # pack: 1                 # rows per workgroup, 1 to 32: many short rows
  targets: [gfx942, sm_90]
"""

LAYERNORM_STARTER = """\
# layernorm: Y = (X - mean) / sqrt(var + eps) * W + B over the last dim (biased variance), fp32 statistics.
# Every field, its default and rules: tilegen's docs/norm.md.
- name: layernorm_fp16
  op: layernorm
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-5
  variant: registers
  residual: false           # true: S = X + R written beside Y = layernorm(S) * W + B, one pass
  shapes:
    - {rows: 4096, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  # unroll: 1               # unroll of the streamed column loops
  # peel: false             # aligned vector loads on rows that start off a 16-byte boundary (streamed)
  # split: 1                # workgroups per row: 1 to 65535, or auto (streamed)
  # pack: 1                 # rows per workgroup, 1 to 32: many short rows
  targets: [gfx942, sm_90]
"""
