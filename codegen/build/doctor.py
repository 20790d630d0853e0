"""`tilegen doctor`: what this machine has for `tilegen build`, and the command to get what is missing.

Each check says which targets' builds need it; "info" checks (torch, GPUs, ROCm) are reported but
never needed to build. A smoke build per target compiles a one-line kernel that includes TileLang's
headers with exactly the commands `build` runs, so "ok" means `build` will find everything.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from codegen.core.columns import Column
from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing, find_tilelang
from codegen.targets import TARGETS
from codegen.targets.base import Check

PINNED_TILELANG = "0.1.15"
MIN_PYTHON = (3, 11)
ALL_TARGETS = tuple(TARGETS)

__all__ = ["DOCTOR_COLUMNS", "Check", "DoctorReport", "diagnose", "doctor", "missing_for"]


def _python() -> Check:
    v = sys.version_info
    ok = v[:2] >= MIN_PYTHON
    return Check(name="Python", status="ok" if ok else "missing", detail=f"{sys.version.split()[0]} at {sys.executable}",
                 fix=None if ok else f"use Python >= {'.'.join(map(str, MIN_PYTHON))} (`uv venv -p 3.11 .venv`)",
                 needed_by=ALL_TARGETS)


def _tilelang() -> Check:
    fix = f"pip install tilelang=={PINNED_TILELANG}"
    try:
        tl = find_tilelang()
    except ToolchainMissing:
        return Check(name="tilelang", status="missing", detail="not installed", fix=fix, needed_by=ALL_TARGETS)
    if tl.version != PINNED_TILELANG:
        return Check(name="tilelang", status="missing", detail=f"{tl.version}, the specs are checked against {PINNED_TILELANG}",
                     fix=fix, needed_by=ALL_TARGETS)
    return Check(name="tilelang", status="ok", detail=f"{tl.version} at {tl.package_dir}", needed_by=ALL_TARGETS)


def _torch() -> list[Check]:
    """torch runs kernels and counts GPUs; `build` never needs it."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return [Check(name="torch", status="info", detail="not installed (needed to run kernels, not to build them)",
                      fix="pip install torch")]
    import torch

    if torch.version.hip:
        kind, count = f"ROCm {torch.version.hip} build", torch.cuda.device_count()
    elif torch.version.cuda:
        kind, count = f"CUDA {torch.version.cuda} build", torch.cuda.device_count()
    else:
        kind, count = "CPU-only build", 0
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    gpus = ", ".join(names) if names else "none"
    return [
        Check(name="torch", status="info", detail=f"{version} ({kind})"),
        Check(name="GPUs", status="info", detail=f"{count} seen by torch: {gpus}; "
              f"/dev/kfd {'present' if os.path.exists('/dev/kfd') else 'absent'}, "
              f"/dev/nvidia0 {'present' if os.path.exists('/dev/nvidia0') else 'absent'}"),
    ]


def diagnose(root: Path, targets: tuple[Target, ...] = ALL_TARGETS) -> list[Check]:
    checks = [_python(), _tilelang(), *_torch()]
    for spec in TARGETS.values():  # targets of one vendor share some (ROCm): each line once
        checks += [c for c in spec.info_checks() if c not in checks]
    for target in targets:
        checks += TARGETS[target].doctor_checks(root)
    return checks


def missing_for(checks: list[Check], targets: tuple[Target, ...]) -> list[Check]:
    return [c for c in checks if c.status == "missing" and set(c.needed_by) & set(targets)]


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    targets: tuple[Target, ...]  # the targets asked about
    checks: tuple[Check, ...]

    @property
    def missing(self) -> list[Check]:
        return missing_for(list(self.checks), self.targets)

    @property
    def ok(self) -> bool:
        return not self.missing

    def verdict(self) -> str:
        asked = ", ".join(t.value for t in self.targets)
        if self.missing:
            return f"not ready to build {asked}: " + "; ".join(f"{c.name} ({c.fix})" for c in self.missing)
        return f"ready to build {asked}"


_STATUS_STYLE = {"ok": "green", "missing": "bold red", "info": "cyan"}

DOCTOR_COLUMNS: tuple[Column, ...] = (
    Column(header="check", value=lambda c: c.name),
    Column(header="status", value=lambda c: c.status, style=lambda c: _STATUS_STYLE[c.status]),
    Column(header="details", value=lambda c: c.detail),
    Column(header="to get it", value=lambda c: c.fix or ""),
)


def doctor(root: Path, targets: tuple[Target, ...] | None = None) -> DoctorReport:
    """The `tilegen doctor` command's checks, for `targets` (default: every target)."""
    asked = targets or ALL_TARGETS
    return DoctorReport(targets=asked, checks=tuple(diagnose(root, asked)))
