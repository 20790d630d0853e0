"""The softmax family (`op: softmax`): softmax over the last dim, two-pass (streamed) or online (the
row held in registers)."""

from __future__ import annotations

from codegen.families.base import TEMPLATES_DIR, Family
from codegen.families.softmax.instance import make_instance
from codegen.families.softmax.numerics import NUMERICS
from codegen.families.softmax.rules import check
from codegen.families.softmax.spec import STARTER, SoftmaxSpec

FAMILY = Family(
    name="softmax",
    specs={"softmax": SoftmaxSpec},
    template_dir=TEMPLATES_DIR / "softmax",
    check=check,
    instance=make_instance,
    numerics=NUMERICS,
    starters={"softmax": STARTER},
)
