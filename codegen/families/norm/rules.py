"""rmsnorm / layernorm legality rules: the row-wise families' rules (codegen.families.rows), and the per-token
fp8 output's (quant)."""

from __future__ import annotations

from collections.abc import Iterator

from codegen.core.hardware import DType
from codegen.families.norm.spec import NormSpecBase, Quant
from codegen.families.rows import RowContext, check_rows
from codegen.families.rules import Violation
from codegen.targets.base import TargetSpec


def norm_quant(c: RowContext) -> Iterator[Violation]:
    """quant: per_token is rmsnorm's fp8 e4m3 output with its per-row scale, and an fp8 output is only written
    so: each of the two asks for the other (layernorm's fp8 output is refused by dtype_supported alone)."""
    spec = c.spec
    fp8 = spec.dtypes.out == DType.FP8_E4M3
    if spec.quant == Quant.PER_TOKEN and spec.op != "rmsnorm":
        yield Violation(rule="quant_op", path=("quant",), value=spec.quant.value,
                        message="the per-token fp8 output is written by rmsnorm only")
    elif spec.quant == Quant.PER_TOKEN and not fp8:
        yield Violation(rule="quant_dtype", path=("quant",), value=spec.quant.value,
                        message=f"per_token writes fp8 e4m3 and a per-row scale: set dtypes.out: fp8_e4m3 "
                                f"(not {spec.dtypes.out.value})")
    elif fp8 and spec.quant != Quant.PER_TOKEN and DType.FP8_E4M3 in spec.out_dtypes:
        yield Violation(rule="quant_dtype", path=("dtypes", "out"), value=spec.dtypes.out.value,
                        message="an fp8 e4m3 output needs its per-row scale: set quant: per_token")


def check(spec: NormSpecBase, target: TargetSpec) -> list[Violation]:
    """Every rmsnorm / layernorm legality rule on one target."""
    return check_rows(spec, target, extra=(norm_quant,))
