"""Softmax legality rules: the row-wise families' rules (codegen.families.rows); softmax adds none."""

from __future__ import annotations

from codegen.families.rows import check_rows
from codegen.families.rules import Violation
from codegen.families.softmax.spec import SoftmaxSpec
from codegen.targets.base import TargetSpec


def check(spec: SoftmaxSpec, target: TargetSpec) -> list[Violation]:
    """Every softmax legality rule on one target."""
    return check_rows(spec, target)
