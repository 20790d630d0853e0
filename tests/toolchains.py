"""Which device compilers this machine has: the gfx942 toolchain (clang/lld of tools/setup.sh, or ROCm) and nvcc.
test_build's grid builds (lowers and compiles) the first shape of every hand instance of the targets whose compiler
is present; test_kernels lowers the rest of the (kernel, shape) grid and leaves those to the grid."""

from __future__ import annotations

from pathlib import Path

from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing
from codegen.targets.gfx942 import find_gfx942
from codegen.targets.sm90 import find_cuda

ROOT = Path(__file__).resolve().parent.parent


def _gfx942_missing() -> str | None:
    try:
        find_gfx942(ROOT)
    except ToolchainMissing as exc:
        return str(exc)
    return None


def _nvcc_missing() -> str | None:
    try:
        find_cuda()
    except ToolchainMissing as exc:
        return str(exc)
    return None


GFX942_MISSING = _gfx942_missing()
NVCC_MISSING = _nvcc_missing()
# the targets test_build's grid builds on this machine
AVAILABLE = tuple(t for t, missing in ((Target.GFX942, GFX942_MISSING), (Target.SM_90, NVCC_MISSING)) if missing is None)
