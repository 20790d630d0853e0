"""`tilegen profile NAME [--shape ...]`: one kernel (and its torch baselines, same shape) under the GPU's
profiler, and why it is as fast as it is.

NVIDIA (sm_90): Nsight Compute, `ncu --clock-control none --csv --page raw --print-units base` with the
sections SpeedOfLight, MemoryWorkloadAnalysis, Occupancy, LaunchStats, WarpStateStats and
ComputeWorkloadAnalysis, filtered to the NVTX range `tilegen_profile` (codegen.run.profile_child) and, for
the kernel, to its symbol (`--kernel-name regex:^<uri>`). Read: DRAM bytes and duration (achieved
bandwidth, % of the hardware record's peak), L2 sector hit rate, achieved / theoretical occupancy and
the launch's occupancy limits, tensor-pipe utilisation (whatever `sm__pipe_tensor*` / `sm__inst_executed_
pipe_tensor*` percentage the sections report), warp stall reasons (cycles per issued instruction).

AMD (gfx942/gfx950): rocprofv3 counter collection (`--pmc`, one pass per counter group, filtered to the
kernel's symbol with `--kernel-include-regex`), its long-format counter_collection.csv: FETCH_SIZE and
WRITE_SIZE (KiB) for DRAM bytes, TCC_HIT_sum / TCC_MISS_sum for the L2 hit rate, MemUnitStalled,
VALUBusy, SQ_INSTS_MFMA and SQ_VALU_MFMA_BUSY_CYCLES / GRBM_GUI_ACTIVE for the MFMA pipe, OccupancyPercent.
This path is written against rocprofv3's documented CSV format and tested on a sample written from it;
it has NOT run on an MI300X. Baselines are not profiled on AMD (no NVTX-range filter is used there).

Cost under ncu: ncu replays each profiled kernel once per counter pass. The kernel gets every section
above; a baseline gets only BASELINE_SECTIONS (time, DRAM bytes, L2 hit, occupancy, tensor pipe: no stall
or memory-workload tables), so a family with several baselines (attention: SDPA, explicit math, its
torch.compile) costs a few passes each. ncu follows the Python process only (`--target-processes
application-only`: not TileLang's nvcc, not torch.compile's worker processes). `--no-baselines` profiles the
kernel alone; `timeout_s` bounds each profiler run.

A profiler that is missing is one line naming how to get it (exit 1); nothing is written unless every
subject was profiled and parsed. Reports: reports/<gpu>/profile/<kernel>_<shape>.{json,md}, or the files
straight into the folder given as `folder` (`tilegen profile --out DIR`: DIR itself, no sub-folders).

`profile_candidates` profiles the N best measured candidates of `tilegen tune` (`--profile-top N`) with the
same machinery and returns one row of counters per candidate and shape.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from codegen.core.errors import TilegenError
from codegen.core.files import write_text_atomic
from codegen.core.hardware import Hardware
from codegen.generate.render import RenderedFile
from codegen.run.profile_child import NVTX_RANGE

PROFILE_TIMEOUT_S = 900


class ProfilerMissing(TilegenError):
    """The GPU's profiler is not installed; the message says how to get it."""


class ProfileParseError(TilegenError):
    """The profiler's output could not be read."""


# ---- what one subject measured --------------------------------------------------------------------

@dataclass(kw_only=True)
class Measured:
    """One subject (the kernel, or one baseline) as its profiler reported it; None: not reported."""

    subject: str
    kernels: list[str]  # kernel names the profiler matched
    duration_ns: float
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    dram_pct_of_peak_profiler: float | None = None  # the profiler's own % of peak (ncu dram__throughput)
    l2_hit_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str | None = None
    tensor_pipe_pct: float | None = None
    sm_throughput_pct: float | None = None
    mem_unit_stalled_pct: float | None = None  # AMD MemUnitStalled
    valu_busy_pct: float | None = None  # AMD VALUBusy
    mfma_instructions: float | None = None  # AMD SQ_INSTS_MFMA
    stalls: dict[str, float] = field(default_factory=dict)  # reason -> cycles per issued instruction (ncu)
    missing: list[str] = field(default_factory=list)  # what the profiler did not report

    @property
    def dram_bytes(self) -> float | None:
        if self.dram_read_bytes is None and self.dram_write_bytes is None:
            return None
        return (self.dram_read_bytes or 0.0) + (self.dram_write_bytes or 0.0)

    def dram_gbps(self) -> float | None:
        b = self.dram_bytes
        return None if b is None or self.duration_ns <= 0 else b / self.duration_ns

    def dram_pct_of_peak(self, hw: Hardware) -> float | None:
        g = self.dram_gbps()
        return None if g is None else 100.0 * g / (hw.hbm_bandwidth_tbps * 1e3)

    def top_stalls(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(self.stalls.items(), key=lambda kv: -kv[1])[:n]


# ---- ncu --csv --page raw ---------------------------------------------------------------------------
# Wide format: a header row (ID, Process ID, Process Name, Host Name, Kernel Name, Context, Stream, Block
# Size, Grid Size, Device, CC, then one column per metric), a units row, then one row per profiled kernel.
# Numbers may carry thousands separators ("1,048,576"); "n/a" is a metric without a value.

NCU_SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats",
                "ComputeWorkloadAnalysis")
BASELINE_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")  # fewer passes: no stalls, no memory tables
NCU_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sector_hit_rate.pct",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_STALL_RE = re.compile(r"^smsp__average_warps?_(?:latency_)?issue_stalled_([a-z_]+?)(?:_per_issue_active)?\.ratio$")
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"  # every MMA kind (ncu 2025.3, sm_90)
_TENSOR_RE = re.compile(r"^sm__(?:pipe_tensor|inst_executed_pipe_tensor)\w*\.(?:avg\.)?pct_of_peak_sustained_active$")
_OCC_LIMIT_RE = re.compile(r"^launch__occupancy_limit_(\w+)$")


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _in_base_units(value: float, unit: str) -> float:
    """byte/Kbyte/Mbyte..., byte/second..., nsecond/usecond/...: to bytes, bytes/s, ns."""
    if unit in _TIME_NS:
        return value * _TIME_NS[unit]
    m = re.fullmatch(r"([KMGT]?)byte(/second)?", unit)
    if m:
        return value * _SCALE[m.group(1)]
    return value


def parse_ncu_raw_csv(text: str) -> list[dict[str, object]]:
    """One dict per profiled kernel: the identifying columns as text, every metric as a float in base
    units (None where the value is n/a). Lines that are not CSV records (==PROF== messages) are dropped."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        raise ProfileParseError("ncu printed no CSV report (no kernel matched the filters?)")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, data = rows[0], rows[1], rows[2:]
    if "Kernel Name" not in header:
        raise ProfileParseError("ncu CSV without a 'Kernel Name' column: not `--csv --page raw` output")
    if units and units[0].strip() and _number(units[0]) is not None:  # no units row (ncu without it)
        units, data = [""] * len(header), rows[1:]
    first_metric = header.index("CC") + 1 if "CC" in header else header.index("Kernel Name") + 1
    out = []
    for row in data:
        rec: dict[str, object] = {h: row[i] for i, h in enumerate(header[:first_metric]) if i < len(row)}
        for i in range(first_metric, min(len(header), len(row))):
            v = _number(row[i])
            rec[header[i]] = None if v is None else _in_base_units(v, units[i].strip() if i < len(units) else "")
        out.append(rec)
    if not out:
        raise ProfileParseError("ncu CSV has a header but no kernel rows (no kernel matched the filters)")
    return out


def _weighted(rows: list[dict[str, object]], metric: str, weights: list[float]) -> float | None:
    pairs = [(r.get(metric), w) for r, w in zip(rows, weights)]
    pairs = [(v, w) for v, w in pairs if isinstance(v, float)]
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else sum(v for v, _ in pairs) / len(pairs)


def _summed(rows: list[dict[str, object]], metric: str) -> float | None:
    vals = [r.get(metric) for r in rows if isinstance(r.get(metric), float)]
    return sum(vals) if vals else None


def ncu_measured(subject: str, rows: list[dict[str, object]]) -> Measured:
    """Sum over the subject's kernels (bytes, time); percentages and ratios weighted by each kernel's time."""
    durations = [r.get("gpu__time_duration.sum") for r in rows]
    if not all(isinstance(d, float) for d in durations):
        raise ProfileParseError("ncu rows without gpu__time_duration.sum")
    m = Measured(subject=subject, kernels=[str(r.get("Kernel Name")) for r in rows], duration_ns=sum(durations))
    m.dram_read_bytes = _summed(rows, "dram__bytes_read.sum")
    m.dram_write_bytes = _summed(rows, "dram__bytes_write.sum")
    m.dram_pct_of_peak_profiler = _weighted(rows, "dram__throughput.avg.pct_of_peak_sustained_elapsed", durations)
    m.l2_hit_pct = _weighted(rows, "lts__t_sector_hit_rate.pct", durations)
    m.achieved_occupancy_pct = _weighted(rows, "sm__warps_active.avg.pct_of_peak_sustained_active", durations)
    m.theoretical_occupancy_pct = _weighted(rows, "sm__maximum_warps_per_active_cycle_pct", durations)
    m.sm_throughput_pct = _weighted(rows, "sm__throughput.avg.pct_of_peak_sustained_elapsed", durations)
    names = set().union(*(r.keys() for r in rows))
    m.tensor_pipe_pct = _weighted(rows, TENSOR_PIPE, durations)
    if m.tensor_pipe_pct is None:  # an ncu without the all-kinds metric: the busiest per-kind one
        tensor = [v for n in sorted(names) if _TENSOR_RE.match(n) and (v := _weighted(rows, n, durations)) is not None]
        m.tensor_pipe_pct = max(tensor) if tensor else None
    limits = {mm.group(1): v for n in names if (mm := _OCC_LIMIT_RE.match(n)) and (v := _weighted(rows, n, durations)) is not None}
    if limits:  # blocks per SM each resource allows; the smallest limits occupancy
        least = min(limits.values())
        m.occupancy_limiter = "/".join(k for k in sorted(limits) if limits[k] == least)  # ties: each of them
    for n in sorted(names):
        # "selected" is the issue cycle itself (always 1.0), not a stall
        if (mm := _STALL_RE.match(n)) and mm.group(1) != "selected" and not mm.group(1).endswith("not_issued"):
            v = _weighted(rows, n, durations)
            if v is not None:
                m.stalls[mm.group(1)] = v
    m.missing = [f.name for f in fields(m) if getattr(m, f.name) in (None, {}) and f.name not in ("mem_unit_stalled_pct",
                 "valu_busy_pct", "mfma_instructions")]
    return m


# ---- rocprofv3 counter_collection.csv ----------------------------------------------------------------
# Long format, one row per (dispatch, counter): Correlation_Id, Dispatch_Id, Agent_Id, Queue_Id, Process_Id,
# Thread_Id, Grid_Size, Kernel_Id, Kernel_Name, Workgroup_Size, LDS_Block_Size, Scratch_Size, VGPR_Count,
# Accum_VGPR_Count, SGPR_Count, Counter_Name, Counter_Value, Start_Timestamp, End_Timestamp (ns).

ROCPROF_PASSES = (("FETCH_SIZE", "WRITE_SIZE"), ("TCC_HIT_sum", "TCC_MISS_sum"), ("MemUnitStalled", "VALUBusy"),
                  ("SQ_INSTS_MFMA", "SQ_VALU_MFMA_BUSY_CYCLES", "GRBM_GUI_ACTIVE"), ("OccupancyPercent",))
ROCPROF_KIB = 1024.0  # FETCH_SIZE / WRITE_SIZE are in KiB


def parse_rocprof_csv(text: str) -> dict[str, dict[str, object]]:
    """Dispatch_Id -> {"kernel", "duration_ns", counter name -> value} (a counter summed over its rows)."""
    reader = csv.DictReader(io.StringIO(text))
    need = {"Dispatch_Id", "Kernel_Name", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp"}
    if reader.fieldnames is None or not need <= set(reader.fieldnames):
        raise ProfileParseError(f"rocprofv3 CSV lacks {sorted(need - set(reader.fieldnames or []))}: not counter_collection.csv")
    out: dict[str, dict[str, object]] = {}
    for row in reader:
        d = out.setdefault(row["Dispatch_Id"], {"kernel": row["Kernel_Name"],
                                                "duration_ns": float(row["End_Timestamp"]) - float(row["Start_Timestamp"])})
        d[row["Counter_Name"]] = float(d.get(row["Counter_Name"], 0.0)) + float(row["Counter_Value"])
    return out


def rocprof_measured(subject: str, passes: list[dict[str, dict[str, object]]], hw: Hardware) -> Measured:
    """One Measured from the passes' dispatches (each pass profiled the same launches of the kernel): time
    from the first pass, each counter summed over its pass's dispatches."""
    passes = [p for p in passes if p]
    if not passes:
        raise ProfileParseError("rocprofv3 wrote no counter rows for the kernel (did its symbol match?)")
    first = passes[0]
    m = Measured(subject=subject, kernels=sorted({str(d["kernel"]) for d in first.values()}),
                 duration_ns=sum(float(d["duration_ns"]) for d in first.values()))
    counters: dict[str, float] = {}
    for p in passes:
        for d in p.values():
            for k, v in d.items():
                if k not in ("kernel", "duration_ns"):
                    counters[k] = counters.get(k, 0.0) + float(v)
    n_dispatch = len(first)

    def mean(name: str) -> float | None:
        return counters[name] / n_dispatch if name in counters else None

    if "FETCH_SIZE" in counters:
        m.dram_read_bytes = counters["FETCH_SIZE"] * ROCPROF_KIB
    if "WRITE_SIZE" in counters:
        m.dram_write_bytes = counters["WRITE_SIZE"] * ROCPROF_KIB
    hit, miss = counters.get("TCC_HIT_sum"), counters.get("TCC_MISS_sum")
    if hit is not None and miss is not None and hit + miss > 0:
        m.l2_hit_pct = 100.0 * hit / (hit + miss)
    m.mem_unit_stalled_pct = mean("MemUnitStalled")
    m.valu_busy_pct = mean("VALUBusy")
    m.achieved_occupancy_pct = mean("OccupancyPercent")
    m.mfma_instructions = counters.get("SQ_INSTS_MFMA")
    busy, active = counters.get("SQ_VALU_MFMA_BUSY_CYCLES"), counters.get("GRBM_GUI_ACTIVE")
    if busy is not None and active:
        # rocprof-compute's MFMA utilisation: busy cycles over (GPU active cycles x CUs x 4 SIMDs)
        m.tensor_pipe_pct = 100.0 * busy / (active * hw.compute_units * hw.simds_per_cu)
    wanted = {c for p in ROCPROF_PASSES for c in p}
    m.missing = sorted(wanted - set(counters))
    return m


# ---- the verdict ---------------------------------------------------------------------------------------

MEMORY_BOUND_PCT = 60.0  # of peak DRAM bandwidth
COMPUTE_BOUND_PCT = 50.0  # of the tensor pipe
LOW_OCCUPANCY_PCT = 25.0
# what to change, by bottleneck: spec fields, listed where the instance has them
KNOBS = {
    "memory": ("vector", "block_m", "block_n", "swizzle_panel"),
    "compute": ("block_k", "k_pack", "stages"),
    "occupancy": ("threads", "block_m", "block_n", "stages", "unroll", "split_k"),  # split_k: too few output tiles
    "latency": ("stages", "vector", "unroll", "threads", "split_k"),
}


def verdict(m: Measured, hw: Hardware, inst) -> tuple[str, str, list[str]]:
    """(bottleneck, one-line verdict, the spec fields that address it)."""
    have = {f.name for f in fields(inst) if getattr(inst, f.name) is not None}  # k_pack is None where absent
    dram = m.dram_pct_of_peak(hw)
    tensor = m.tensor_pipe_pct
    occ = m.achieved_occupancy_pct
    if dram is not None and dram >= MEMORY_BOUND_PCT and (tensor is None or dram / 100 >= tensor / 100):
        kind, line = "memory", f"memory-bound at {dram:.0f} % of peak DRAM bandwidth ({m.dram_gbps():.0f} GB/s)"
    elif tensor is not None and tensor >= COMPUTE_BOUND_PCT:
        kind, line = "compute", f"compute-bound at {tensor:.0f} % of the tensor pipe"
    elif occ is not None and occ < LOW_OCCUPANCY_PCT:
        lim = f", limited by {m.occupancy_limiter}" if m.occupancy_limiter else ""
        kind, line = "occupancy", f"latency-bound with low occupancy ({occ:.0f} % achieved{lim})"
    else:
        top = m.top_stalls(1)
        why = f", top stall {top[0][0]} ({top[0][1]:.1f} cycles/instr)" if top else ""
        parts = [f"DRAM {dram:.0f} %" if dram is not None else None, f"tensor {tensor:.0f} %" if tensor is not None else None]
        kind, line = "latency", f"latency-bound ({', '.join(p for p in parts if p) or 'no utilisation counters'}{why})"
    knobs = [k for k in KNOBS[kind] if k in have]
    return kind, line, knobs


# ---- the profilers ---------------------------------------------------------------------------------------

GET_NCU = ("ncu (Nsight Compute) not found on PATH: install it with the CUDA toolkit (`apt-get install "
           "nsight-compute` / the cuda-nsight-compute package, or https://developer.nvidia.com/nsight-compute) "
           "and put its ncu on PATH")
GET_ROCPROF = ("rocprofv3 not found on PATH: it comes with ROCm's rocprofiler-sdk (`apt-get install "
               "rocprofiler-sdk`, then /opt/rocm/bin on PATH; https://rocm.docs.amd.com/projects/rocprofiler-sdk)")


def _child(root: Path, uri: str, shape: str, subject: str, rendered_file: Path | None = None) -> list[str]:
    """The profiled process; `rendered_file`: a pickled RenderedFile (a tune candidate is in no spec)."""
    return [sys.executable, "-m", "codegen.run.profile_child", str(root), uri, shape, subject,
            *([str(rendered_file)] if rendered_file else [])]


def _child_env() -> dict[str, str]:
    """The child imports this very codegen package, wherever the profiler starts it from."""
    here = str(Path(__file__).resolve().parents[2])  # the folder holding codegen/
    rest = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": here + (os.pathsep + rest if rest else "")}


def _run(cmd: list[str], what: str, timeout_s: float = PROFILE_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env=_child_env())
    except subprocess.TimeoutExpired:
        raise TilegenError(f"{what} timed out after {timeout_s:g} s") from None
    if proc.returncode != 0:
        text = (proc.stderr + proc.stdout).strip()
        if "ERR_NVGPUCTRPERM" in text:
            raise TilegenError("ncu may not read the GPU's counters (ERR_NVGPUCTRPERM): run as root or set "
                               "NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
        last = [ln for ln in text.splitlines() if ln.strip()][-3:]
        raise TilegenError(f"{what} failed (exit {proc.returncode}): {' | '.join(last)}")
    return proc


def ncu_command(ncu: str, log: Path, kernel_regex: str | None, child: list[str],
                sections: tuple[str, ...] = NCU_SECTIONS) -> list[str]:
    cmd = [ncu, "--clock-control", "none", "--target-processes", "application-only", "--csv", "--page", "raw",
           "--print-units", "base", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--log-file", str(log)]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    for s in sections:
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(NCU_METRICS)]
    return cmd + child


def rocprof_command(rocprof: str, out_dir: Path, counters: tuple[str, ...], kernel_regex: str, child: list[str]) -> list[str]:
    return [rocprof, "--pmc", *counters, "--kernel-include-regex", kernel_regex, "--output-format", "csv",
            "-d", str(out_dir), "-o", "tilegen", "--", *child]


def find_profiler(vendor: str) -> str:
    """The profiler executable for the GPU's vendor, or ProfilerMissing naming how to get it."""
    name, fix = {"nvidia": ("ncu", GET_NCU), "amd": ("rocprofv3", GET_ROCPROF)}[vendor]
    found = shutil.which(name)
    if found is None:
        raise ProfilerMissing(fix)
    return found


def profile_nvidia(ncu: str, root: Path, uri: str, shape: str, baselines: list[str], *,
                   timeout_s: float = PROFILE_TIMEOUT_S, rendered_file: Path | None = None) -> list[Measured]:
    out = []
    with tempfile.TemporaryDirectory(prefix="tilegen-ncu-") as tmp:
        for subject in ["kernel", *(f"baseline:{b}" for b in baselines)]:
            log = Path(tmp) / f"{subject.replace(':', '_')}.csv"
            kernel = subject == "kernel"
            _run(ncu_command(ncu, log, f"^{uri}" if kernel else None, _child(root, uri, shape, subject, rendered_file),
                             NCU_SECTIONS if kernel else BASELINE_SECTIONS),
                 f"ncu on {subject}", timeout_s)
            out.append(ncu_measured(subject, parse_ncu_raw_csv(log.read_text(encoding="utf-8"))))
    return out


def profile_amd(rocprof: str, root: Path, uri: str, shape: str, hw: Hardware, *,
                timeout_s: float = PROFILE_TIMEOUT_S, rendered_file: Path | None = None) -> list[Measured]:
    passes = []
    with tempfile.TemporaryDirectory(prefix="tilegen-rocprof-") as tmp:
        for i, counters in enumerate(ROCPROF_PASSES):
            d = Path(tmp) / f"pass{i}"
            _run(rocprof_command(rocprof, d, counters, f"^{uri}", _child(root, uri, shape, "kernel", rendered_file)),
                 f"rocprofv3 pass {i} ({' '.join(counters)})", timeout_s)
            found = sorted(d.rglob("*counter_collection.csv"))
            # a counter this GPU does not define: rocprofv3 may write no CSV and still exit 0
            passes.append(parse_rocprof_csv(found[0].read_text(encoding="utf-8")) if found else {})
    return [rocprof_measured("kernel", passes, hw)]


# ---- the report ------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class ProfileReport:
    uri: str
    name: str
    target: str
    shape: tuple[int, ...]
    gpu: str
    profiler: str
    bottleneck: str
    verdict: str
    knobs: list[str]
    subjects: list[Measured]
    peak_dram_gbps: float
    notes: list[str]

    def to_json(self, hw: Hardware) -> dict[str, object]:
        subs = []
        for m in self.subjects:
            d = asdict(m)
            d |= {"dram_bytes": m.dram_bytes, "dram_gbps": m.dram_gbps(), "dram_pct_of_peak": m.dram_pct_of_peak(hw),
                  "top_stalls": m.top_stalls()}
            subs.append(d)
        return {"uri": self.uri, "name": self.name, "target": self.target, "shape": list(self.shape), "gpu": self.gpu,
                "profiler": self.profiler, "bottleneck": self.bottleneck, "verdict": self.verdict, "knobs": self.knobs,
                "peak_dram_gbps": self.peak_dram_gbps, "notes": self.notes, "subjects": subs}


def _f(v: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def markdown(r: ProfileReport, hw: Hardware) -> str:
    shape = "x".join(map(str, r.shape))
    lines = [f"# Profile: {r.uri} at {shape} on {r.gpu}", "",
             f"**{r.verdict}**" + (f" — spec fields that address it: {', '.join(r.knobs)}" if r.knobs else ""), "",
             f"Profiler: {r.profiler}. Peak DRAM bandwidth (hardware record): {r.peak_dram_gbps:.0f} GB/s.", "",
             ("| subject | time (us) | DRAM GB/s | % of peak | L2 hit % | occupancy % (achieved / theoretical, limiter) "
              "| tensor pipe % | top stalls (cycles/instr) |"),
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for m in r.subjects:
        occ = f"{_f(m.achieved_occupancy_pct)} / {_f(m.theoretical_occupancy_pct)}" + (
            f" ({m.occupancy_limiter})" if m.occupancy_limiter else "")
        stalls = ", ".join(f"{k} {v:.1f}" for k, v in m.top_stalls()) or "-"
        lines.append(f"| {m.subject} | {m.duration_ns / 1e3:.1f} | {_f(m.dram_gbps(), '.0f')} | "
                     f"{_f(m.dram_pct_of_peak(hw), '.0f')} | {_f(m.l2_hit_pct)} | {occ} | {_f(m.tensor_pipe_pct)} | {stalls} |")
    lines += ["", *(f"- {n}" for n in r.notes)]
    return "\n".join(lines) + "\n"


def pictures(r: ProfileReport, hw: Hardware, flops: float, dtype, folder: Path) -> list[Path]:
    """`<kernel>_<shape>_roofline.png` (each subject at its measured DRAM bytes and time, under the hardware
    record's roofline) and `<kernel>_<shape>_stalls.png` (the kernel's stall reasons); [] without matplotlib
    or without the counters to place a point."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    stem = f"{r.uri}_{'x'.join(map(str, r.shape))}"
    written = []
    points = [(m.subject, flops / m.dram_bytes, flops / m.duration_ns / 1e3) for m in r.subjects
              if m.dram_bytes and m.duration_ns > 0 and flops > 0]
    if points:
        peak, bw = hw.peak_dense_tflops[dtype], hw.hbm_bandwidth_tbps  # TFLOP/s, TB/s
        ridge = peak / bw
        lo, hi = min(min(p[1] for p in points) / 4, ridge / 4), max(max(p[1] for p in points) * 4, ridge * 4)
        fig, ax = plt.subplots(figsize=(7, 5))
        ax.plot([lo, ridge, hi], [lo * bw, peak, peak], lw=1, color="k",
                label=f"{dtype.value} roofline ({bw:.1f} TB/s, {peak:.0f} TFLOP/s, hardware record)")
        for name, x, y in points:
            ax.scatter([x], [y], zorder=3, label=f"{name}: {y:.1f} TFLOP/s at {x:.1f} FLOP/B")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / measured DRAM byte)")
        ax.set_ylabel("TFLOP/s (FLOPs / profiled time)")
        ax.set_title(f"{r.uri} {'x'.join(map(str, r.shape))}, {r.gpu}", fontsize=8)
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(folder / f"{stem}_roofline.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    stalls = r.subjects[0].top_stalls(8)
    if stalls:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.barh([k for k, _ in stalls][::-1], [v for _, v in stalls][::-1])
        ax.set_xlabel("cycles per issued instruction")
        ax.set_title(f"warp stall reasons, {r.uri}", fontsize=8)
        fig.tight_layout()
        written.append(folder / f"{stem}_stalls.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written


def report_paths(out_dir: Path, uri: str, shape: tuple[int, ...]) -> tuple[Path, Path]:
    stem = f"{uri}_{'x'.join(map(str, shape))}"
    return out_dir / f"{stem}.json", out_dir / f"{stem}.md"


def parse_shape(text: str | None, rendered: RenderedFile) -> tuple[int, ...]:
    inst = rendered.instance
    if text is None:
        return tuple(inst.shapes[0])
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise TilegenError(f"--shape {text}: expected integers joined by 'x', e.g. {'x'.join(map(str, inst.shapes[0]))}") from None
    if len(shape) != len(inst.shapes[0]):
        raise TilegenError(f"--shape {text}: {inst.name} takes {len(inst.shapes[0])} sizes, e.g. "
                           f"{'x'.join(map(str, inst.shapes[0]))}")
    return shape


def profile_rendered(rendered: RenderedFile, shape: tuple[int, ...], gpu, profiler: str, root: Path, *,
                     baselines: bool = True, timeout_s: float = PROFILE_TIMEOUT_S,
                     rendered_file: Path | None = None) -> ProfileReport:
    """One kernel (and, on NVIDIA, its torch baselines unless `baselines` is False) at one shape under the
    GPU's profiler; nothing written. `rendered_file`: the kernel pickled, for one that is in no spec."""
    from codegen.targets import HARDWARE

    shape_arg = "x".join(map(str, shape))
    hw = HARDWARE[gpu.run_target]
    notes = []
    if gpu.vendor == "nvidia":
        names = []
        if baselines:
            names = json.loads(_run(_child(root, rendered.uri, shape_arg, "names", rendered_file), "listing the baselines",
                                    timeout_s).stdout.strip().splitlines()[-1])
        subjects = profile_nvidia(profiler, root, rendered.uri, shape_arg, names, timeout_s=timeout_s,
                                  rendered_file=rendered_file)
        tool = (f"ncu --clock-control none --target-processes application-only (kernel: sections "
                f"{', '.join(NCU_SECTIONS)}; baselines: {', '.join(BASELINE_SECTIONS)})")
        notes.append("ncu replays each kernel once per counter pass with caches flushed between passes (its default "
                     "--cache-control all); times are ncu's gpu__time_duration, not bench's event times.")
        if not baselines:
            notes.append("baselines not profiled (--no-baselines).")
    else:
        subjects = profile_amd(profiler, root, rendered.uri, shape_arg, hw, timeout_s=timeout_s,
                               rendered_file=rendered_file)
        tool = f"rocprofv3 --pmc ({len(ROCPROF_PASSES)} passes)"
        notes.append("rocprofv3 path: written from rocprofv3's documented counter_collection.csv format and tested on "
                     "a sample written from it; not yet run on an MI300X. Baselines not profiled on AMD.")
        notes.append("tensor pipe % on AMD = SQ_VALU_MFMA_BUSY_CYCLES / (GRBM_GUI_ACTIVE x CUs x SIMDs per CU).")
    kernel = subjects[0]
    bottleneck, line, knobs = verdict(kernel, hw, rendered.instance)
    if kernel.missing:
        notes.append(f"not reported by the profiler: {', '.join(kernel.missing)}")
    return ProfileReport(uri=rendered.uri, name=rendered.instance.name, target=rendered.instance.target.value,
                         shape=shape, gpu=gpu.name, profiler=tool, bottleneck=bottleneck, verdict=line, knobs=knobs,
                         subjects=subjects, peak_dram_gbps=hw.hbm_bandwidth_tbps * 1e3, notes=notes)


def write_profile(report: ProfileReport, rendered: RenderedFile, hw: Hardware, folder: Path) -> tuple[Path, Path]:
    """The report's JSON and Markdown (and pictures, with matplotlib) straight into `folder`."""
    from codegen.core.hardware import DType
    from codegen.families import family

    paths = report_paths(folder, report.uri, report.shape)
    write_text_atomic(paths[0], json.dumps(report.to_json(hw), indent=2) + "\n")
    write_text_atomic(paths[1], markdown(report, hw))
    inst = rendered.instance
    pictures(report, hw, family(inst).numerics.flops(inst, report.shape), DType(inst.spec_dtypes[0]), folder)
    return paths


def run_profile(project, name: str, shape_text: str | None, *, folder: Path | None = None, baselines: bool = True,
                timeout_s: float = PROFILE_TIMEOUT_S) -> tuple[ProfileReport, tuple[Path, Path]]:
    """Profile NAME (spec name or URI) at one shape on the GPU present; write its report into `folder` (default
    reports/<gpu>/profile/); return it and the paths."""
    from codegen.run.gpucli import require_gpu
    from codegen.run.report import device_slug
    from codegen.targets import HARDWARE

    gpu = require_gpu()
    profiler = find_profiler(gpu.vendor)
    files = [f for f in project.select([name], all_=False, targets=[gpu.run_target])]
    if not files:
        raise TilegenError(f"'{name}' has no {gpu.run_target} kernel to profile on {gpu.name}")
    if len(files) > 1:
        raise TilegenError(f"'{name}' names {len(files)} kernels: profile one by its URI ({', '.join(f.uri for f in files)})")
    rendered = files[0]
    shape = parse_shape(shape_text, rendered)
    report = profile_rendered(rendered, shape, gpu, profiler, project.root, baselines=baselines, timeout_s=timeout_s)
    folder = folder or project.reports_dir / device_slug(gpu.name) / "profile"
    return report, write_profile(report, rendered, HARDWARE[gpu.run_target], folder)


# ---- the tuner's best candidates (`tilegen tune --profile-top N`) ---------------------------------------

@dataclass(frozen=True, kw_only=True)
class CandidateProfile:
    """One measured tune candidate at one shape: its place and time from measured selection beside what the
    profiler read (None where it did not report, or where the profile failed: `error`)."""

    rank: int  # 1 = the best by measured selection's final score
    uri: str
    shape: tuple[int, ...]
    score: float | None  # measured selection's geometric-mean ratio to the best (1.0 = best)
    time_ms: float | None  # bench median from measured selection (winner, runner-up, hand), where it has one
    profiled_us: float | None = None  # ncu's / rocprofv3's kernel duration
    dram_gbps: float | None = None
    dram_pct_of_peak: float | None = None
    l2_hit_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    tensor_pipe_pct: float | None = None
    verdict: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def _cell(fmt: str):
    return lambda v: "-" if v is None else format(v, fmt)


def candidate_columns():
    """The table of `tilegen tune --profile-top N`: one column definition (terminal and report)."""
    from codegen.core.columns import Column

    return (
        Column(header="#", value=lambda r: r.rank, justify="right"),
        Column(header="candidate", value=lambda r: r.uri),
        Column(header="shape", value=lambda r: "x".join(map(str, r.shape))),
        Column(header="score", value=lambda r: r.score, fmt=_cell(".3f"), justify="right"),
        Column(header="bench ms", value=lambda r: r.time_ms, fmt=_cell(".4f"), justify="right"),
        Column(header="profiled us", value=lambda r: r.profiled_us, fmt=_cell(".1f"), justify="right"),
        Column(header="DRAM GB/s", value=lambda r: r.dram_gbps, fmt=_cell(".0f"), justify="right"),
        Column(header="% peak", value=lambda r: r.dram_pct_of_peak, fmt=_cell(".0f"), justify="right"),
        Column(header="L2 hit %", value=lambda r: r.l2_hit_pct, fmt=_cell(".1f"), justify="right"),
        Column(header="occupancy %", value=lambda r: r.achieved_occupancy_pct, fmt=_cell(".1f"), justify="right"),
        Column(header="tensor %", value=lambda r: r.tensor_pipe_pct, fmt=_cell(".1f"), justify="right"),
        Column(header="verdict", value=lambda r: r.verdict or (f"error: {r.error}" if r.error else None)),
    )


def measured_ranking(measured: dict[str, object]) -> tuple[list[tuple[str, float]], dict[tuple[str, tuple], float]]:
    """From codegen.tune.measure's document: the survivors of the last round, best first, with their scores, and
    the bench medians ((uri, shape) -> ms: every timed candidate's median of its rounds, `candidates`; older
    documents kept only each shape's winner and runner-up)."""
    rounds = measured.get("rounds") or []
    scores = dict(rounds[-1]["scores"]) if rounds else {}
    ranked = sorted(scores.items(), key=lambda kv: (kv[1], kv[0]))
    times: dict[tuple[str, tuple], float] = {}
    for uri, c in (measured.get("candidates") or {}).items():
        for shape, ms in c["median_ms"].items():
            times[(uri, tuple(int(x) for x in shape.split("x")))] = float(ms)
    for s in measured.get("shapes", []):
        shape = tuple(s["shape"])
        for key in ("winner", "runner_up"):
            if s.get(key):
                times[(s[key]["uri"], shape)] = float(s[key]["time_ms"])
    return ranked, times


def profile_candidates(files: dict[str, RenderedFile], measured: dict[str, object], top: int, gpu, root: Path, *,
                       timeout_s: float = PROFILE_TIMEOUT_S, profile_one=None) -> list[CandidateProfile]:
    """The `top` best candidates of measured selection, each at every measured shape, under the GPU's profiler
    (no baselines); a candidate whose profile fails keeps its row with the error. `profile_one(rendered, shape,
    rendered_file) -> ProfileReport` replaces the profiler (tests)."""
    import pickle

    from codegen.targets import HARDWARE

    if top < 1:
        return []
    hw = HARDWARE[gpu.run_target]
    ranked, times = measured_ranking(measured)
    shapes = [tuple(s["shape"]) for s in measured.get("shapes", [])]
    if profile_one is None:
        profiler = find_profiler(gpu.vendor)

        def profile_one(rendered, shape, rendered_file):
            return profile_rendered(rendered, shape, gpu, profiler, root, baselines=False, timeout_s=timeout_s,
                                    rendered_file=rendered_file)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tilegen-candidates-") as tmp:
        for rank, (uri, score) in enumerate(ranked[:top], start=1):
            rendered = files[uri]
            pickled = Path(tmp) / f"{uri}.pickle"
            pickled.write_bytes(pickle.dumps(rendered))
            for shape in shapes:
                base = {"rank": rank, "uri": uri, "shape": shape, "score": score, "time_ms": times.get((uri, shape))}
                try:
                    rep = profile_one(rendered, shape, pickled)
                except TilegenError as exc:
                    rows.append(CandidateProfile(**base, error=str(exc).splitlines()[0]))
                    continue
                k = rep.subjects[0]
                rows.append(CandidateProfile(
                    **base, profiled_us=k.duration_ns / 1e3, dram_gbps=k.dram_gbps(), dram_pct_of_peak=k.dram_pct_of_peak(hw),
                    l2_hit_pct=k.l2_hit_pct, achieved_occupancy_pct=k.achieved_occupancy_pct,
                    tensor_pipe_pct=k.tensor_pipe_pct, verdict=rep.verdict))
    return rows
