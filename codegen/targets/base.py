"""What a target module provides (`TargetSpec`) and the pieces every target's build shares.

A target is one module, `codegen/targets/<target>.py`, holding one `TargetSpec`: its hardware record,
the properties a family's code generation reads (which gemm, which pipeline schedule), its toolchain
and compile command, how its compiler's resource report is read and judged, its doctor checks and how
its device is recognised at run time. Nothing outside a target module branches on a target's name.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from codegen.core.errors import TilegenError
from codegen.core.hardware import DType, Hardware, Target

COMPILE_TIMEOUT_S = 900


class ReportParseError(TilegenError):
    """A compiler's resource report could not be read."""


# ---- build: what a compiled kernel reports ------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Launch:
    """How TileLang launches one kernel: the attributes of its device function at codegen."""

    threads: int
    grid: tuple[int, int, int]
    dynamic_lds_bytes: int
    source: Literal["tilelang", "tilegen-estimate"]  # dyn_shared_memory_buf, or instance.lds_bytes


class Kernel(Protocol):
    """One compiled kernel symbol with its resources, as a target reads them from its compiler."""

    @property
    def symbol(self) -> str: ...

    @property
    def spills(self) -> int: ...

    # the static analysis' findings ([vector_loads]): warnings, never build failures
    warnings: tuple[str, ...]

    def spill_text(self) -> str:
        """What spilled, for the [spills] build rule's message."""
        ...

    def occupancy_problem(self, min_waves_per_simd: int) -> str | None:
        """Why the kernel misses the spec's occupancy floor, or None (also None where none applies)."""
        ...

    def to_json(self) -> dict[str, object]: ...


class Toolchain(Protocol):
    """A target's device compiler: picklable, with what changes its output (cache key) and its versions."""

    def fingerprint(self) -> dict[str, object]: ...

    def describe(self) -> dict[str, str]: ...


class CompileError(Exception):
    """A compiler command failed; the message is its first error line."""


def run_compiler(cmd: list[str], log: Path, cwd: Path) -> str:
    """Run one compiler command, appending it and its output to `log`; its output, or CompileError."""
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
    try:
        proc = subprocess.run(cmd, check=False, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CompileError(f"{Path(cmd[0]).name} timed out after {COMPILE_TIMEOUT_S} s") from None
    output = proc.stdout + proc.stderr
    with log.open("a", encoding="utf-8") as f:
        f.write(output + f"[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        lines = [ln for ln in output.splitlines() if "error" in ln.lower()] or output.splitlines()[-1:] or ["(no output)"]
        raise CompileError(f"{Path(cmd[0]).name} failed: {lines[0].replace(str(cwd) + '/', '').strip()}")
    return output


def symbol_order(symbol: str) -> tuple[str, int]:
    """x_kernel, x_kernel_1, x_kernel_2, ..., x_kernel_10: TileLang's order of emission."""
    m = re.fullmatch(r"(.*)_(\d+)", symbol)
    return (m.group(1), int(m.group(2))) if m else (symbol, -1)


def read_launches(entry: Path, inst, symbols: list[str], default_threads: dict[str, int]) -> dict[str, Launch]:
    """Each symbol's launch as recorded while lowering (launch.json of the cache entry); where TileLang's
    launch attributes were not seen, the instance's own estimate (source "tilegen-estimate")."""
    recorded = {k["symbol"]: k for k in json.loads((entry / "launch.json").read_text(encoding="utf-8"))["kernels"]}
    out = {}
    for s in symbols:
        k = recorded.get(s)
        if k is not None:
            out[s] = Launch(threads=int(k["threads"]), grid=tuple(k["grid"]),
                            dynamic_lds_bytes=int(k["dynamic_shared_bytes"]), source="tilelang")
        else:
            out[s] = Launch(threads=default_threads[s], grid=(0, 0, 0), dynamic_lds_bytes=inst.lds_bytes,
                            source="tilegen-estimate")
    return out


def vector_checked_symbols(inst, symbols: list[str]) -> set[str]:
    """The kernels whose global loads are checked against the width the spec meant
    (`load_widths`): all of them, except the edge kernels of a specialized tail, which
    handle the ragged rest and may load narrower by design (the interior kernel comes first), and the staging
    kernels of a GEMM staged padded, which read the unaligned operands by design (its main kernel comes last)."""
    ordered = sorted(symbols, key=symbol_order)
    if str(getattr(inst, "tail", "none")) == "specialized":
        return set(ordered[:1])
    if getattr(inst, "padded", False):
        return set(ordered[-1:])
    return set(ordered)


def load_widths(inst, symbols: list[str]) -> dict[str, int | None]:
    """Per kernel of a module, the global load width its spec meant (None: not checked, vector_checked_symbols):
    `inst.global_load_bytes()`, but for a second kernel the instance describes itself -- attention decode's
    combine kernel loads the splits' fp32 partials combine_vec at a time (`combine_load_bytes`)."""
    checked = vector_checked_symbols(inst, symbols)
    ordered = sorted(symbols, key=symbol_order)
    last = getattr(inst, "combine_load_bytes", None)
    return {s: None if s not in checked else last if (last is not None and len(ordered) > 1 and s == ordered[-1])
            else inst.global_load_bytes() for s in symbols}


# ---- doctor ---------------------------------------------------------------------------------------

Status = Literal["ok", "missing", "info"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of `tilegen doctor`."""

    name: str
    status: Status
    detail: str
    fix: str | None = None  # the command (or action) that gets it
    needed_by: tuple[Target, ...] = ()  # targets whose build needs it


# ---- run time --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class DeviceMatch:
    """The GPU torch sees, recognised as a target's device."""

    vendor: str
    runtime_version: str  # "CUDA 12.8", "HIP 6.3..."
    visible_devices_env: str  # the variable that pins a process to some of the GPUs: CUDA_ / HIP_VISIBLE_DEVICES


# ---- the record ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    """Everything tilegen knows about one target. Stage modules look the record up in
    `codegen.targets.TARGETS` and read these fields instead of branching on the target."""

    hw: Hardware
    # code generation: how a family's kernel differs on this target
    gemm_fn: str  # the template's tile matmul: "rocm_gemm" (tilelang.rocm.language.gemm) or "T.gemm"
    supports_k_pack: bool  # the gemm packs MMA ops along K (spec field k_pack)
    explicit_pipeline_schedule: bool  # T.Pipelined(num_stages) is a plain loop here: emit order/stage lists
    reduce_workspace_in_lds: bool  # T.reduce_max / T.reduce_sum take one fp32 per thread of LDS each
    # hand-written warp specialization (TMA loads on mbarriers, setmaxnreg, asynchronous wgmma with
    # wait_wgmma): the attention schedule `ws`; the note says why not where it is False (rule ws_target)
    warp_specialization: bool
    warp_specialization_note: str
    source_suffix: str  # of the lowered device source (".hip", ".cu")
    # (threads, LDS/shared bytes of one workgroup) -> the workgroups of that size one CU/SM holds at once,
    # registers aside (unknown before the build): the LDS/shared memory and wave/warp slots limit. The
    # persistent GEMM grid is compute_units times it; a build whose registers allow fewer says so
    resident_workgroups: Callable[[int, int], int]
    # numerics of the matrix cores, for verify's GEMM tolerance
    # keyed by the input dtype: its rounding inside the MMA (tf32 for fp32 inputs; absent: enters exactly),
    # and the unit roundoff of an accumulator coarser than fp32 (Hopper's fp8 wgmma; absent: fp32's own)
    mma_input_roundoff: Mapping[DType, float]
    mma_accumulator_roundoff: Mapping[DType, float]
    torch_dtypes: Mapping[DType, str]  # torch dtype names on this target's devices (fp8: fnuz on gfx942)
    # build
    build_cost: int  # scheduling weight of one build (slowest first)
    find_toolchain: Callable[..., Toolchain]  # (root, *, env_json=None) -> Toolchain, or ToolchainMissing
    compile: Callable[[Toolchain, Path, str, Path], None]  # (toolchain, stage dir, device source, log)
    read_kernels: Callable[[Path, object], tuple[Kernel, ...]]  # (cache entry, instance) -> kernels
    summarize: Callable[[tuple[Kernel, ...]], dict[str, object]]  # worst case over one build's kernels
    table_cells: Callable[[dict[str, object]], tuple[str, str, str, str, str]]  # regs, LDS, occupancy, spills, MMA
    # tune: the summary key of a build's LDS / shared memory bytes, and the order of candidates by static
    # figures alone (`tilegen tune --static`; None: this target's candidates are not ranked statically)
    lds_summary_key: str
    static_rank: Callable[[dict[str, object]], tuple] | None
    # doctor
    info_checks: Callable[[], list[Check]]  # reported whatever is asked, never needed
    doctor_checks: Callable[[Path], list[Check]]  # (project root) -> what a build for this target needs
    # run time
    match_device: Callable[[object, object], DeviceMatch | str | None]  # (torch, device props) -> match,
    # a reason it is this runtime's GPU but not this target, or None for another runtime's GPU
    min_flush_bytes: int  # bench: least L2 flush buffer (caches torch's L2 size misses)
    device_environment: Callable[[], dict[str, str]]  # driver and clocks for reports ({} if unknown)

    @property
    def target(self) -> Target:
        return self.hw.target

    def torch_dtype(self, dtype: DType):
        import torch

        return getattr(torch, self.torch_dtypes[dtype])


_SMOKE_KERNEL = 'extern "C" __global__ void __launch_bounds__({threads}) tilegen_doctor(float* x) {{ x[threadIdx.x] = 1.0f; }}\n'


def smoke_check(target: Target, *, suffix: str, folder: str, threads: int, fix: str,
                commands: Callable[[Path, Path], list[list[str]]]) -> Check:
    """Compile a one-line kernel that includes TileLang's `tl_templates/<folder>/common.h` with build's own
    commands (`commands(source, folder) -> [argv, ...]`), so "ok" means `build` finds everything."""
    import tempfile
    import time

    text = f"#include <tl_templates/{folder}/common.h>\n" + _SMOKE_KERNEL.format(threads=threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tilegen-doctor-") as tmp:
        src = Path(tmp) / f"smoke.{suffix}"
        src.write_text(text, encoding="utf-8")
        for cmd in commands(src, Path(tmp)):
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, cwd=tmp)
            if proc.returncode != 0:
                out = (proc.stderr or proc.stdout).strip().replace(tmp + "/", "")
                first = next((ln for ln in out.splitlines() if "error" in ln.lower()), out.splitlines()[0] if out else "")
                return Check(name=f"{target} smoke build", status="missing", detail=f"{Path(cmd[0]).name}: {first}",
                             fix=fix, needed_by=(target,))
    return Check(name=f"{target} smoke build", status="ok",
                 detail=f"a kernel including tl_templates compiled in {time.perf_counter() - t0:.1f} s", needed_by=(target,))


def first_output_line(cmd: list[str]) -> str | None:
    """The first line a command prints, or None when it fails or cannot run."""
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if proc.returncode == 0 and lines else None
