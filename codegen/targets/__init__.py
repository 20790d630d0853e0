"""The target registry: one `TargetSpec` per `Target`, each defined in its own module here.

Adding a target: a value in `codegen.core.hardware.Target`, a module `codegen/targets/<target>.py` defining
`TARGET = TargetSpec(...)`, and its line in `_MODULES` below.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from codegen.core.errors import TilegenError
from codegen.core.hardware import Hardware, Target
from codegen.targets import gfx942, gfx950, sm90
from codegen.targets.base import TargetSpec, Toolchain

_MODULES = (gfx942, gfx950, sm90)

TARGETS: Mapping[Target, TargetSpec] = MappingProxyType({m.TARGET.target: m.TARGET for m in _MODULES})
HARDWARE: Mapping[Target, Hardware] = MappingProxyType({t: spec.hw for t, spec in TARGETS.items()})

_missing = set(Target) - set(TARGETS)
if _missing:  # a Target value without a module would fail later, far from the cause
    raise ImportError(f"no codegen/targets module for target(s) {', '.join(sorted(_missing))}")


def target_spec(target: Target | str) -> TargetSpec:
    try:
        return TARGETS[Target(target)]
    except (KeyError, ValueError):
        raise TilegenError(f"unknown target {target!r} (known: {', '.join(t.value for t in TARGETS)})") from None


def find_toolchain(target: Target, root: Path, *, gfx942_env: Path | None = None) -> Toolchain:
    """The device compiler of `target`; `gfx942_env` is the --gfx942-env file, passed to every target's
    discovery as `env_json` (targets that take no such file ignore it)."""
    return target_spec(target).find_toolchain(root, env_json=gfx942_env)


def torch_dtype(dtype, target: Target):
    """The torch dtype of a spec dtype on `target`'s devices (fp8 e4m3 is fnuz on gfx942), or of "int32" (a
    workspace's counters: codegen.families.gemm.instance.COUNTER_DTYPE)."""
    from codegen.core.hardware import DType

    if dtype == "int32":
        import torch

        return torch.int32
    return TARGETS[target].torch_dtype(DType(dtype))


__all__ = ["HARDWARE", "TARGETS", "TargetSpec", "find_toolchain", "target_spec", "torch_dtype"]
