"""Which device compilers this machine has (the gfx942/gfx950 toolchain of tools/setup.sh or ROCm, nvcc), for the
tests that build real ISA. test_build's grid builds (lowers and compiles) the first shape of every hand instance of
the targets in AVAILABLE; test_kernels lowers the rest of the (kernel, shape) grid and leaves those to the grid."""

from __future__ import annotations

from pathlib import Path

from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing
from codegen.targets import find_toolchain

ROOT = Path(__file__).resolve().parent.parent


def missing(target: Target) -> str | None:
    """Why `target`'s device compiler is not here (its discovery's one-line message); None where it is."""
    try:
        find_toolchain(target, ROOT)
    except ToolchainMissing as exc:
        return str(exc)
    return None


GFX942_MISSING = missing(Target.GFX942)
NVCC_MISSING = missing(Target.SM_90)
# the targets test_build's grid builds on this machine
AVAILABLE = tuple(t for t, why in ((Target.GFX942, GFX942_MISSING), (Target.SM_90, NVCC_MISSING)) if why is None)
