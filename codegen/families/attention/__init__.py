"""The attention family (`op: attention`): FlashAttention-style forward with GQA, a top-left causal
mask and a pipelined KV loop."""

from __future__ import annotations

from codegen.families.attention.instance import make_instance
from codegen.families.attention.numerics import NUMERICS
from codegen.families.attention.rules import check
from codegen.families.attention.spec import STARTER, AttentionSpec
from codegen.families.base import TEMPLATES_DIR, Family

FAMILY = Family(
    name="attention",
    specs={"attention": AttentionSpec},
    template_dir=TEMPLATES_DIR / "attention",
    check=check,
    instance=make_instance,
    numerics=NUMERICS,
    starters={"attention": STARTER},
)
