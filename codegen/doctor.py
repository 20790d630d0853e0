"""`tilegen doctor`: what this machine has for `tilegen build`, and the command to get what is missing.

Each check says which targets' builds need it; "info" checks (torch, GPUs, ROCm) are reported but
never needed to build. A smoke build per target compiles a one-line kernel that includes TileLang's
headers with exactly the commands `build` runs, so "ok" means `build` will find everything.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from codegen.hardware import Target
from codegen.targets import TARGETS
from codegen.targets.base import Check
from codegen.toolchain import ToolchainMissing, find_tilelang

PINNED_TILELANG = "0.1.15"
MIN_PYTHON = (3, 11)
ALL_TARGETS = tuple(TARGETS)

__all__ = ["Check", "diagnose", "missing_for", "run_doctor"]


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


def run_doctor(root: Path, targets: tuple[Target, ...] | None, *, out: Console) -> int:
    """The `tilegen doctor` command: a table of checks, then one verdict line. Returns the exit code."""
    asked = targets or ALL_TARGETS
    checks = diagnose(root, asked)
    table = Table(title=f"tilegen doctor: {', '.join(t.value for t in asked)}")
    for col in ("check", "status", "details", "to get it"):
        table.add_column(col, overflow="fold")
    style = {"ok": "green", "missing": "bold red", "info": "cyan"}
    for c in checks:
        table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail, c.fix or "")
    out.print(table)
    missing = missing_for(checks, asked)
    if missing:
        out.print(f"not ready to build {', '.join(t.value for t in asked)}: "
                  + "; ".join(f"{c.name} ({c.fix})" for c in missing), markup=False)
        return 1
    out.print(f"ready to build {', '.join(t.value for t in asked)}", markup=False)
    return 0
