"""Reports of verify and bench: JSON (for machines), CSV, a markdown table and PNG plots."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

from codegen.core.columns import Column, csv_text, markdown_table
from codegen.core.files import write_text_atomic
from codegen.core.hardware import DType, Target
from codegen.targets import HARDWARE, TARGETS


def environment(gpu: dict) -> dict:
    """Where the numbers came from: device, driver, clocks, library versions, git commit, the command."""
    env = {"device": gpu.get("name"), "torch": gpu.get("torch_version"), "runtime": gpu.get("runtime_version"),
           "python": platform.python_version()}
    try:
        import tilelang

        env["tilelang"] = tilelang.__version__
    except Exception:  # noqa: BLE001 - the report is still useful without it
        env["tilelang"] = "unavailable"
    env["git_commit"] = git_commit()
    env["command"] = command_line()
    run_target = gpu.get("run_target")
    if run_target in {t.value for t in TARGETS}:
        env.update(TARGETS[Target(run_target)].device_environment())
    return env


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def git_commit() -> str:
    """TILEGEN_GIT_COMMIT when set (a copy of the tree run elsewhere may carry a stale .git), else git's HEAD."""
    return os.environ.get("TILEGEN_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"]).strip() or "unknown"


def command_line() -> str:
    """The command line this process was started with, as typed: `tilegen verify NAME ...` (`python -m codegen`
    is the same CLI and shown so); another program (a benchmark script) by its file name."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "tilegen"
    return shlex.join(["tilegen" if prog in ("tilegen", "__main__.py") else prog, *sys.argv[1:]])


def device_slug(name: str) -> str:
    m = re.search(r"(H100|H200|MI300X|MI300A|MI325X)", name or "")
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", (name or "gpu").lower()).strip("-")).lower()


def _shape(s) -> str:
    return "x".join(str(v) for v in s)


def _fmt(v) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------- verify
# one row per case (a verify.json case); verify.md and `tilegen verify`'s --cases table
VERIFY_COLUMNS: tuple[Column, ...] = (
    Column(header="kernel", value=lambda c: c["uri"]),
    Column(header="run on", value=lambda c: c["run_target"]),
    Column(header="shape", value=lambda c: c["shape"], fmt=_shape),
    Column(header="inputs", value=lambda c: c["inputs"], fmt=str),
    Column(header="seed", value=lambda c: c["seed"], fmt=str, justify="right"),
    Column(header="status", value=lambda c: c["status"]),
    Column(header="max abs err", value=lambda c: c["max_abs_err"], fmt=_fmt, justify="right"),
    Column(header="max rel err", value=lambda c: c["max_rel_err"], fmt=_fmt, justify="right"),
    Column(header="mismatch", value=lambda c: c["mismatch_ratio"], fmt=_fmt, justify="right"),
    Column(header="tolerance", value=lambda c: c["tolerance"], fmt=str),
    Column(header="note", value=lambda c: c["error"] or c["label"], fmt=str),
)

VERIFY_STATUSES = ("verified", "failed", "vacuous", "error", "skipped")

# one row per kernel (codegen.run.gpurun.VerifyTally): the terminal's summary of a verify run
VERIFY_SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column(header="kernel", value=lambda t: t.uri),
    *(Column(header=s, value=lambda t, s=s: t.counts.get(s, 0), justify="right") for s in VERIFY_STATUSES),
    Column(header="note", value=lambda t: t.note),
)


def write_verify(report, out_dir: Path) -> list[Path]:
    data = {"environment": environment(report.gpu), "gpu": report.gpu, "cases": report.cases}
    write_text_atomic(out_dir / "verify.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out_dir / "verify.md", verify_markdown(data))
    return [out_dir / "verify.json", out_dir / "verify.md"]


def verify_markdown(data: dict) -> str:
    """The markdown table of a verify.json document (so it can be rebuilt from the JSON alone)."""
    env = data["environment"]
    counts = Counter(c["status"] for c in data["cases"])
    head = (f"Device: {env.get('device')} (driver {env.get('driver', '?')}), torch {env.get('torch')}, "
            f"tilelang {env.get('tilelang')}, commit {env.get('git_commit')}. "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".\n\n")
    return head + "\n".join(markdown_table(VERIFY_COLUMNS, data["cases"])) + "\n"


# ---------------------------------------------------------------- bench
def _flat(row: dict) -> dict:
    """A bench.json row as the flat record the columns read."""
    k = row.get("kernel") or {}
    b = row.get("baselines") or {}
    s = row.get("speedup") or {}
    return {
        "uri": row["uri"], "name": row["name"], "target": row["target"], "shape": _shape(row["shape"]),
        # an fp32 GEMM's dtypes name its precision mode, and the baselines' (e.g. "eager: allow_tf32=True")
        "dtypes": row["dtypes"] + (f" (torch {row['baseline_precision']})" if row.get("baseline_precision") else ""),
        "status": row["status"], "kernel_ms": k.get("median_ms"),
        "kernel_p10_ms": k.get("p10_ms"), "kernel_p90_ms": k.get("p90_ms"),
        "eager_ms": (b.get("eager") or {}).get("median_ms"), "compile_ms": (b.get("compile") or {}).get("median_ms"),
        "tflops": row.get("tflops"), "gbps": row.get("gbps"), "pct_peak": row.get("pct_peak"),
        "pct_copy_bw": row.get("pct_copy_bw"), "bound": row.get("bound"), "speedup_eager": s.get("eager"),
        "speedup_compile": s.get("compile"),
        # baselines other than eager/compile (attention: sdpa_flash, sdpa_cudnn), as "name ms (speed-up x)"
        "other_baselines": _other_baselines(b, s),
        "error": row.get("error") or "; ".join(f"{n}: {e}" for n, e in (row.get("baseline_errors") or {}).items()),
    }


def _other_baselines(baselines: dict, speedup: dict) -> str:
    return "; ".join(f"{n} {(t or {}).get('median_ms', float('nan')):.4g} ms ({speedup.get(n, float('nan')):.2f}x)"
                     for n, t in sorted(baselines.items()) if n not in ("eager", "compile"))


def _field(key: str, header: str | None = None, *, fmt=_fmt, justify="right") -> Column:
    return Column(header=header, csv=key, value=lambda f: f[key], fmt=fmt, justify=justify)


# one row per (kernel, shape), read from _flat(row): bench.csv (the `csv` names, in this order),
# bench.md and the terminal table (the columns with a header, in this order)
BENCH_COLUMNS: tuple[Column, ...] = (
    _field("uri", "kernel", fmt=str, justify="left"),
    _field("name"),
    _field("target"),
    _field("shape", "shape", fmt=str, justify="left"),
    _field("dtypes", "dtypes", fmt=str, justify="left"),
    _field("status"),
    _field("kernel_ms", "tilegen ms"),
    _field("kernel_p10_ms"),
    _field("kernel_p90_ms"),
    _field("eager_ms", "eager ms"),
    _field("compile_ms", "compile ms"),
    _field("tflops", "TFLOP/s"),
    _field("gbps", "GB/s"),
    _field("pct_peak", "% peak"),
    _field("pct_copy_bw", "% copy BW"),
    _field("bound", "bound", fmt=lambda v: v or "", justify="left"),
    _field("speedup_eager", "vs eager"),
    _field("speedup_compile", "vs compile"),
    _field("other_baselines", "other baselines", fmt=str, justify="left"),
    _field("error"),
    Column(header="status", value=lambda f: f["status"] + (f" ({f['error']})" if f["error"] else "")),
)

CSV_FIELDS = tuple(c.csv for c in BENCH_COLUMNS if c.csv is not None)


def bench_rows(report) -> list[dict]:
    return [_flat(r) for r in report.rows]


def write_bench(report, out_dir: Path) -> list[Path]:
    env = environment(report.gpu)
    data = {"environment": env, "gpu": report.gpu, "copy_gbps": report.copy_gbps, "flush_bytes": report.flush_bytes,
            "rows": report.rows} | ({"tuning": report.tuning} if report.tuning else {})
    write_text_atomic(out_dir / "bench.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out_dir / "bench.csv", csv_text(BENCH_COLUMNS, bench_rows(report)))
    write_text_atomic(out_dir / "bench.md", bench_markdown(data))
    paths = [out_dir / "bench.json", out_dir / "bench.csv", out_dir / "bench.md"]
    paths += _plots(report, out_dir)
    return paths


def bench_markdown(data: dict) -> str:
    """The markdown table of a bench.json document (so it can be rebuilt from the JSON alone)."""
    env = data["environment"]
    head = (f"Device: {env.get('device')} (driver {env.get('driver', '?')}, SM clock {env.get('sm_clock', '?')}), "
            f"torch {env.get('torch')}, tilelang {env.get('tilelang')}, commit {env.get('git_commit')}. "
            f"Copy bandwidth measured in the same run: {data['copy_gbps']:.0f} GB/s. "
            f"L2 flushed with {data['flush_bytes'] >> 20} MiB before every timed launch; median over the iterations shown."
            + (" A row that only a lockfile asked for is compared with the torch baselines its spec's hand kernel "
               "timed at the same shape in this run." if any(r.get("baselines_from") for r in data["rows"]) else "")
            + "\n\n")
    tuning = ["", "Tuned configurations (lockfiles under tuned/), each timed beside the hand configuration:", "",
              *(f"- {line}" for line in data["tuning"])] if data.get("tuning") else []
    return head + "\n".join([*markdown_table(BENCH_COLUMNS, [_flat(r) for r in data["rows"]]), *tuning]) + "\n"


def _plots(report, out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    rows = [r for r in report.rows if r["status"] == "ok"]
    if not rows:
        return []
    labels = [f"{r['name']}\n{_shape(r['shape'])}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rows)), 5))
    x = range(len(rows))
    bases = sorted({b for r in rows for b in r["speedup"]}, key=lambda b: (b not in ("eager", "compile"), b))
    width = 0.8 / max(len(bases), 1)
    for n, base in enumerate(bases):
        off = (n - (len(bases) - 1) / 2) * width
        ax.bar([i + off for i in x], [r["speedup"].get(base, 0) for r in rows], width=width, label=f"vs torch {base}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(x), labels, rotation=70, fontsize=7)
    ax.set_ylabel("speed-up (baseline time / tilegen time)")
    ax.set_title(f"tilegen vs torch on {report.gpu['name']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "speedup.png", dpi=120)
    plt.close(fig)

    hw = HARDWARE[Target(report.gpu["run_target"])]
    bw = report.copy_gbps * 1e9 if report.copy_gbps else hw.hbm_bandwidth_tbps * 1e12
    fig, ax = plt.subplots(figsize=(7, 5))
    intens = [r["flops"] / r["bytes"] for r in rows]
    xs = [min(intens) / 2, max(intens) * 2]
    for dt in sorted({DType(r["dtypes"].split("/")[0]) for r in rows}):
        peak = hw.peak_dense_tflops[dt] * 1e12
        ridge = peak / bw
        ax.plot([xs[0], ridge, max(xs[1], ridge * 2)], [xs[0] * bw / 1e12, peak / 1e12, peak / 1e12], lw=1,
                label=f"roofline {dt.value} (copy BW, datasheet peak)")
    ax.scatter(intens, [r["tflops"] for r in rows], zorder=3)
    for i, r in zip(intens, rows):
        ax.annotate(r["name"].removeprefix("gemm_"), (i, r["tflops"]), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"roofline, {report.gpu['name']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "roofline.png", dpi=120)
    plt.close(fig)
    return [out_dir / "speedup.png", out_dir / "roofline.png"]
