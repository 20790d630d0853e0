"""rmsnorm / layernorm legality rules: the row-wise families' rules (codegen.families.rows); norm adds none."""

from __future__ import annotations

from codegen.families.norm.spec import NormSpecBase
from codegen.families.rows import check_rows
from codegen.rules import Violation
from codegen.targets.base import TargetSpec


def check(spec: NormSpecBase, target: TargetSpec) -> list[Violation]:
    """Every rmsnorm / layernorm legality rule on one target."""
    return check_rows(spec, target)
