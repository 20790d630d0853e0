"""`tilegen doctor`: what this machine has for `tilegen build`, and the command to get what is missing.

Each check says which targets' builds need it; "info" checks (torch, GPUs, ROCm) are reported but
never needed to build. A smoke build per target compiles a one-line kernel that includes TileLang's
headers with exactly the commands `build` runs, so "ok" means `build` will find everything.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table

from codegen.hardware import Target
from codegen.toolchain import (
    FETCH_GFX942,
    GET_NVCC,
    ROCM_ROOT,
    CudaToolchain,
    Gfx942Toolchain,
    ToolchainMissing,
    find_cuda,
    find_gfx942,
    find_nvcc,
    find_tilelang,
)

PINNED_TILELANG = "0.1.15"
MIN_PYTHON = (3, 11)
ALL_TARGETS = (Target.GFX942, Target.SM_90)
Status = Literal["ok", "missing", "info"]

# (file suffix, tl_templates folder, threads) of each target's smoke kernel
_SMOKE = {Target.GFX942: ("hip", "hip", 64), Target.SM_90: ("cu", "cuda", 32)}
_SMOKE_KERNEL = 'extern "C" __global__ void __launch_bounds__({threads}) tilegen_doctor(float* x) {{ x[threadIdx.x] = 1.0f; }}\n'


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None  # the command (or action) that gets it
    needed_by: tuple[Target, ...] = ()  # targets whose build needs it


def _first_line(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if proc.returncode == 0 and lines else None


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


def _rocm() -> Check:
    if not ROCM_ROOT.is_dir():
        return Check(name="ROCm", status="info", detail=f"not installed at {ROCM_ROOT}; gfx942 builds use the project toolchain",
                     fix="optional: a ROCm install (https://rocm.docs.amd.com) is preferred over .toolchain/ when present")
    info = ROCM_ROOT / ".info" / "version"
    version = info.read_text(encoding="utf-8").strip() if info.is_file() else "version unknown"
    return Check(name="ROCm", status="info", detail=f"{version} at {ROCM_ROOT}")


def _smoke(target: Target, compile_: Callable[[Path, Path], list[list[str]]]) -> Check:
    """Compile a one-line kernel that includes TileLang's headers with build's own commands."""
    suffix, folder, threads = _SMOKE[target]
    text = f"#include <tl_templates/{folder}/common.h>\n" + _SMOKE_KERNEL.format(threads=threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tilegen-doctor-") as tmp:
        src = Path(tmp) / f"smoke.{suffix}"
        src.write_text(text, encoding="utf-8")
        for cmd in compile_(src, Path(tmp)):
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, cwd=tmp)
            if proc.returncode != 0:
                out = (proc.stderr or proc.stdout).strip().replace(tmp + "/", "")
                first = next((ln for ln in out.splitlines() if "error" in ln.lower()), out.splitlines()[0] if out else "")
                return Check(name=f"{target} smoke build", status="missing", detail=f"{Path(cmd[0]).name}: {first}",
                             fix=FETCH_GFX942 if target == Target.GFX942 else GET_NVCC, needed_by=(target,))
    return Check(name=f"{target} smoke build", status="ok",
                 detail=f"a kernel including tl_templates compiled in {time.perf_counter() - t0:.1f} s", needed_by=(target,))


def _gfx942(root: Path) -> list[Check]:
    need = (Target.GFX942,)
    try:
        tc: Gfx942Toolchain = find_gfx942(root)
    except ToolchainMissing as exc:
        return [Check(name="gfx942 clang + HIP headers", status="missing", detail=str(exc).split("; ")[0],
                      fix=FETCH_GFX942, needed_by=need)]
    checks = [Check(name="gfx942 clang", status="ok", detail=f"{tc.version} ({tc.clang}, from {tc.origin})", needed_by=need)]
    supported = subprocess.run([tc.clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={tc.arch}", "-x", "assembler", "-c",
                                os.devnull, "-o", os.devnull], check=False, capture_output=True, timeout=60).returncode == 0
    checks.append(Check(name="clang gfx942 support", status="ok" if supported else "missing",
                        detail=f"-mcpu={tc.arch} {'accepted' if supported else 'rejected'}",
                        fix=None if supported else FETCH_GFX942, needed_by=need))
    parts = ", ".join(f"{k} {v}" for k, v in tc.components)
    checks.append(Check(name="HIP headers + device libs", status="ok", detail=f"{parts or 'ROCm'} (from {tc.origin})", needed_by=need))
    if supported:
        checks.append(_smoke(Target.GFX942, lambda src, d: [tc.asm_command(src, d / "smoke.s"),
                                                            tc.code_object_command(d / "smoke.s", d / "smoke.co")]))
    return checks


def _sm90() -> list[Check]:
    need = (Target.SM_90,)
    nvcc = find_nvcc()
    try:
        tc: CudaToolchain = find_cuda()
    except ToolchainMissing as exc:
        return [Check(name="nvcc", status="missing", detail=str(exc).split("; ")[0], fix=GET_NVCC, needed_by=need)]
    codes = subprocess.run([tc.nvcc, "--list-gpu-code"], check=False, capture_output=True, text=True, timeout=60)
    has_sm90 = codes.returncode == 0 and "sm_90" in codes.stdout.split()  # sm_90a comes with sm_90 (CUDA >= 12.0)
    checks = [Check(name="nvcc", status="ok" if has_sm90 else "missing",
                    detail=f"{tc.version} at {nvcc}" + ("" if has_sm90 else "; no sm_90 in --list-gpu-code"),
                    fix=None if has_sm90 else GET_NVCC, needed_by=need)]
    ptxas = Path(tc.nvcc).with_name("ptxas")
    ptxas_version = _first_line([str(ptxas), "--version"]) if ptxas.exists() else None
    checks.append(Check(name="ptxas", status="ok" if ptxas_version else "missing",
                        detail=f"{ptxas}" if ptxas_version else f"not next to {tc.nvcc}", fix=None if ptxas_version else GET_NVCC,
                        needed_by=need))
    host = shutil.which("g++") or shutil.which("c++")
    checks.append(Check(name="host C++ compiler (nvcc's)", status="ok" if host else "missing", detail=host or "no g++ on PATH",
                        fix=None if host else "apt-get install g++", needed_by=need))
    if has_sm90 and ptxas_version and host:
        checks.append(_smoke(Target.SM_90, lambda src, d: [tc.cubin_command(src, d / "smoke.cubin", d)]))
    return checks


def diagnose(root: Path, targets: tuple[Target, ...] = ALL_TARGETS) -> list[Check]:
    checks = [_python(), _tilelang(), *_torch(), _rocm()]
    if Target.GFX942 in targets:
        checks += _gfx942(root)
    if Target.SM_90 in targets:
        checks += _sm90()
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
