"""What the `verify`, `bench` and `run` commands do, as library functions the CLI calls."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from codegen.errors import TilegenError
from codegen.gpu import NoGpu, detect_gpu
from codegen.gpurun import bench_all, verify_all
from codegen.report import device_slug, write_bench, write_verify


def require_gpu():
    try:
        return detect_gpu()
    except NoGpu as exc:
        raise TilegenError(f"no GPU to run kernels on: {exc}. `tilegen lower`/`build` work without one") from None


def _wide(console: Console) -> Console:
    """Tables at full width in logs: a console that is not a terminal would wrap them at 80 columns."""
    return console if console.is_terminal else Console(file=console.file, width=200, highlight=False)


def verify_table(report) -> Table:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    worst: dict[str, str] = {}
    for c in report.cases:
        counts[c["uri"]][c["status"]] += 1
        if c["status"] not in ("verified",) and c["uri"] not in worst:
            worst[c["uri"]] = c["error"] or next((f"{k}: {v}" for k, v in c["controls"].items() if "PASSED" in v), "")
    table = Table(title=f"verify on {report.gpu['name']}")
    for col in ("kernel", "verified", "failed", "vacuous", "error", "skipped", "note"):
        table.add_column(col)
    for uri in sorted(counts):
        n = counts[uri]
        table.add_row(uri, *(str(n.get(s, 0)) for s in ("verified", "failed", "vacuous", "error", "skipped")),
                      worst.get(uri, ""))
    return table


def bench_table(report) -> Table:
    table = Table(title=f"bench on {report.gpu['name']} (copy {report.copy_gbps:.0f} GB/s)")
    for col in ("kernel", "shape", "ms", "TFLOP/s", "% peak", "GB/s", "% copy BW", "bound", "vs eager", "vs compile",
                "vs other", "status"):
        table.add_column(col)
    for r in report.rows:
        k = r.get("kernel") or {}
        s = r.get("speedup") or {}
        table.add_row(r["uri"], "x".join(map(str, r["shape"])), f"{k['median_ms']:.4f}" if k else "",
                      f"{r['tflops']:.1f}" if r.get("tflops") else "", f"{r['pct_peak']:.0f}" if r.get("pct_peak") else "",
                      f"{r['gbps']:.0f}" if r.get("gbps") else "", f"{r['pct_copy_bw']:.0f}" if r.get("pct_copy_bw") else "",
                      r.get("bound") or "",
                      f"{s['eager']:.2f}x" if "eager" in s else "", f"{s['compile']:.2f}x" if "compile" in s else "",
                      " ".join(f"{n} {v:.2f}x" for n, v in sorted(s.items()) if n not in ("eager", "compile")),
                      r["status"] + (f": {r['error']}" if r.get("error") else ""))
    return table


def run_verify(files, *, out_dir: Path, jobs: int | None, timeout_s: float, as_json: bool, console) -> bool:
    gpu = require_gpu()
    report = verify_all(files, gpu, jobs=jobs, timeout_s=timeout_s, console=console)
    written = write_verify(report, out_dir / device_slug(gpu.name))
    if as_json:
        sys.stdout.write(json.dumps({"gpu": report.gpu, "cases": report.cases}, indent=1, sort_keys=True) + "\n")
    _wide(console).print(verify_table(report))
    console.print("reports: " + ", ".join(str(p) for p in written), markup=False)
    return report.ok


def run_bench(files, *, out_dir: Path, jobs: int | None, timeout_s: float, as_json: bool, console) -> bool:
    gpu = require_gpu()
    report = bench_all(files, gpu, jobs=jobs, timeout_s=timeout_s, console=console)
    written = write_bench(report, out_dir / device_slug(gpu.name))
    if as_json:
        sys.stdout.write(json.dumps({"gpu": report.gpu, "copy_gbps": report.copy_gbps, "rows": report.rows},
                                    indent=1, sort_keys=True) + "\n")
    _wide(console).print(bench_table(report))
    console.print("reports: " + ", ".join(str(p) for p in written), markup=False)
    return report.ok
