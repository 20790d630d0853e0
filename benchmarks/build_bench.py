"""Benchmark `tilegen build`: where the time of a build goes, what parallel workers buy, what a warm
rebuild costs.

    .venv/bin/python benchmarks/build_bench.py [--first-shape] [--jobs N]

Measures, for the committed specs:
  1. spec -> source: loading and validating every spec, then rendering each instance (median of 20);
  2. a cold build (fresh cache) with --jobs 1: per (instance, shape), TileLang lowering and the
     device compile (gfx942: clang -S + link; sm_90: nvcc -cubin), from the workers' own timers;
  3. the same cold build with every core (default --jobs), and the speed-up over --jobs 1;
  4. a warm rebuild: `tilegen build --all` end to end (interpreter start included), median of 3.
Writes reports/build_bench.md and reports/build_bench.json. Caches live in a temporary folder; the
project's .cache/build is not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codegen.build.compile import BuildOptions, BuildReport, build, default_jobs
from codegen.generate.pipeline import Project
from codegen.generate.render import render

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def spec_to_source(project: Project) -> dict[str, object]:
    t0 = time.perf_counter()
    instances = project.instances()
    load_s = time.perf_counter() - t0
    per = {}
    for inst in instances:
        samples = []
        for _ in range(20):
            t = time.perf_counter()
            f = render(inst)
            samples.append(time.perf_counter() - t)
        per[f.uri] = statistics.median(samples)
    return {"load_and_validate_s": load_s, "render_s": per}


def cold(project: Project, jobs: int, first_shape: bool) -> BuildReport:
    with tempfile.TemporaryDirectory(prefix="tilegen-bench-") as cache:
        report = build(project, BuildOptions(all_=True, first_shape=first_shape, jobs=jobs, cache_dir=Path(cache)))
    failed = [f"{r.uri} {r.shape}: {r.error}" for r in report.failed]
    if failed:
        sys.exit("cold build failed:\n" + "\n".join(failed))
    return report


def warm_cli(first_shape: bool, cache: Path, runs: int = 3) -> list[float]:
    cmd = [str(Path(sys.executable).with_name("tilegen")), "build", "--all", "--cache-dir", str(cache)]
    cmd += ["--first-shape"] if first_shape else []
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0 or not proc.stderr.strip().splitlines()[-1].startswith("0 built,"):
            sys.exit(f"warm rebuild was not all cached:\n{proc.stderr}")
    return times


def tilelang_import_s() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tilelang"], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--first-shape", action="store_true", help="only the first shape of each spec (quicker)")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="the parallel run's workers (default: all cores)")
    args = ap.parse_args()
    project = Project()
    load_before = os.getloadavg()
    s2s = spec_to_source(project)
    import_s = tilelang_import_s()
    serial = cold(project, 1, args.first_shape)
    parallel = cold(project, args.jobs, args.first_shape)
    with tempfile.TemporaryDirectory(prefix="tilegen-bench-warm-") as cache:
        build(project, BuildOptions(all_=True, first_shape=args.first_shape, jobs=args.jobs, cache_dir=Path(cache)))
        t = time.perf_counter()
        warm_in_process = build(project, BuildOptions(all_=True, first_shape=args.first_shape, cache_dir=Path(cache)))
        warm_lib_s = time.perf_counter() - t
        warm = warm_cli(args.first_shape, Path(cache))
    load_after = os.getloadavg()

    rows = []
    for r in sorted(serial.results, key=lambda r: (r.target.value, r.name, r.shape)):
        rows.append({"uri": r.uri, "target": r.target.value, "shape": list(r.shape), "kernels": len(r.kernels),
                     "render_s": s2s["render_s"][r.uri], "lower_s": r.lower_s, "compile_s": r.compile_s})
    by_target = {}
    for t in sorted({r["target"] for r in rows}):
        mine = [r for r in rows if r["target"] == t]
        by_target[t] = {"builds": len(mine),
                        "lower_s_median": statistics.median(r["lower_s"] for r in mine),
                        "compile_s_median": statistics.median(r["compile_s"] for r in mine),
                        "lower_s_total": sum(r["lower_s"] for r in mine),
                        "compile_s_total": sum(r["compile_s"] for r in mine)}
    result = {
        "machine": {"cpu": _cpu_model(), "usable_cores": default_jobs(), "python": platform.python_version(),
                    "loadavg_1m_before": round(load_before[0], 2), "loadavg_1m_after": round(load_after[0], 2)},
        "toolchains": {t.value: v for t, v in serial.toolchains.items()},
        "scope": "first shape of each spec" if args.first_shape else "every shape of every spec",
        "builds": len(serial.results),
        "spec_load_and_validate_s": s2s["load_and_validate_s"],
        "tilelang_import_s": import_s,
        "cold_jobs1_s": serial.wall_s,
        "cold_parallel_jobs": parallel.jobs,
        "cold_parallel_s": parallel.wall_s,
        "speedup": serial.wall_s / parallel.wall_s,
        "warm_library_s": warm_lib_s,
        "warm_library_cached": sum(r.status == "cached" for r in warm_in_process.results),
        "warm_cli_s": warm,
        "by_target": by_target,
        "per_build": rows,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "build_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / "build_bench.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# `tilegen build` benchmark",
        "",
        (f"Written by `benchmarks/build_bench.py`. Machine: {m['cpu']}, {m['usable_cores']} usable core(s), "
         f"Python {m['python']}; 1-minute load average {m['loadavg_1m_before']} before, {m['loadavg_1m_after']} after "
         "(other work on the machine inflates every figure)."),
        "Toolchains: " + "; ".join(f"{t}: {', '.join(f'{k} {v}' for k, v in d.items())}"
                                   for t, d in r["toolchains"].items()) + ".",
        f"Scope: {r['scope']} ({r['builds']} builds).",
        "",
        "## Whole build",
        "",
        "| run | wall s |",
        "| --- | ---: |",
        f"| cold, `--jobs 1` | {r['cold_jobs1_s']:.1f} |",
        f"| cold, `--jobs {r['cold_parallel_jobs']}` | {r['cold_parallel_s']:.1f} |",
        f"| speed-up | {r['speedup']:.2f}x |",
        (f"| warm, `tilegen build --all` end to end (median of {len(r['warm_cli_s'])}) | "
         f"{statistics.median(r['warm_cli_s']):.2f} |"),
        f"| warm, `codegen.build.compile.build()` in process | {r['warm_library_s']:.2f} |",
        "",
        (f"Each worker first imports TileLang ({r['tilelang_import_s']:.1f} s in a fresh interpreter), which a warm "
         "build never does. Loading and validating every spec takes "
         f"{r['spec_load_and_validate_s'] * 1000:.0f} ms."),
        "",
        "## Per stage",
        "",
        "| target | builds | lowering median s | compile median s | lowering total s | compile total s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t, d in r["by_target"].items():
        lines.append(f"| {t} | {d['builds']} | {d['lower_s_median']:.2f} | {d['compile_s_median']:.2f} | "
                     f"{d['lower_s_total']:.1f} | {d['compile_s_total']:.1f} |")
    lines += ["", "## Per build (the `--jobs 1` run)", "",
              "| instance | target | shape | kernels | spec->source ms | lowering s | compile s |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for b in r["per_build"]:
        lines.append(f"| {b['uri']} | {b['target']} | {'x'.join(map(str, b['shape']))} | {b['kernels']} | "
                     f"{b['render_s'] * 1000:.2f} | {b['lower_s']:.2f} | {b['compile_s']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
