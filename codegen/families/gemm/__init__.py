"""The GEMM family (`op: gemm`): C[M, N] = op(A) @ op(B) with A/B layouts, tiles, a pipelined K loop,
swizzled rasterization and tail policies."""

from __future__ import annotations

from codegen.families.base import TEMPLATES_DIR, Family
from codegen.families.gemm.instance import make_instance
from codegen.families.gemm.numerics import NUMERICS
from codegen.families.gemm.rules import check
from codegen.families.gemm.spec import STARTER, GemmSpec

FAMILY = Family(
    name="gemm",
    specs={"gemm": GemmSpec},
    template_dir=TEMPLATES_DIR / "gemm",
    check=check,
    instance=make_instance,
    numerics=NUMERICS,
    starters={"gemm": STARTER.format(name="gemm_fp16_nt")},
)
