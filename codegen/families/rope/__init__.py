"""The rope family (`op: rope`): rotary position embedding, rotate_half (GPT-NeoX / Llama), of Q and K
in one launch, out of place, one workgroup per token."""

from __future__ import annotations

from codegen.families.base import TEMPLATES_DIR, Family
from codegen.families.rope.instance import make_instance
from codegen.families.rope.numerics import NUMERICS
from codegen.families.rope.rules import check
from codegen.families.rope.spec import STARTER, RopeSpec

FAMILY = Family(
    name="rope",
    specs={"rope": RopeSpec},
    template_dir=TEMPLATES_DIR / "rope",
    check=check,
    instance=make_instance,
    numerics=NUMERICS,
    starters={"rope": STARTER},
)
