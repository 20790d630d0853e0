"""The norm family (`op: rmsnorm`, `op: layernorm`): one template, norm.py.j2, whose instance fields
`centered` and `has_bias` are the difference; statistics streamed or from the row held in registers."""

from __future__ import annotations

from codegen.families.base import TEMPLATES_DIR, Family
from codegen.families.norm.instance import make_instance
from codegen.families.norm.numerics import NUMERICS
from codegen.families.norm.rules import check
from codegen.families.norm.spec import LAYERNORM_STARTER, RMSNORM_STARTER, LayerNormSpec, RmsNormSpec

FAMILY = Family(
    name="norm",
    specs={"rmsnorm": RmsNormSpec, "layernorm": LayerNormSpec},
    template_dir=TEMPLATES_DIR / "norm",
    check=check,
    instance=make_instance,
    numerics=NUMERICS,
    starters={"rmsnorm": RMSNORM_STARTER, "layernorm": LAYERNORM_STARTER},
)
