"""GEMM shape classes through a project's dispatch, against cuBLAS: what a model calling `tilegen.load(...)`
gets, class by class, and the geometric mean the tuned-by-default targets are stated in.

    python3 benchmarks/gemm_classes.py [--project DIR] [--out reports/h200/gemm_classes]   # on a GPU machine
    python3 benchmarks/gemm_classes.py --list                                              # anywhere: the routes

The project is examples/gemm_classes (one spec per class group and (dtype, layout), its own lockfile) unless
--project names another.

For every (dtype, layout) of fp16 / bf16 x NT / NN and every class of CLASSES (square, the MLP projections of
Llama-3-8B at 4096 tokens, decode M in {1, 16, 64, 128}, narrow N, deep K), the call `ops.gemm` would make is
routed by the project's dispatch (codegen.ops.dispatch: a tuned entry, a spec's shape, a bucket, a dynamic-M
kernel, else the torch fallback). The kernel it names is timed by `tilegen bench`'s method (codegen.run.bench:
CUDA events, L2 flushed before every launch, medians) at the shape it runs at (a bucket: the padded M; the kernel
alone, not the op's copy of A into the padded buffer), beside torch at the call's shape in the same worker: eager
(cuBLAS) and torch.compile. A class no kernel serves is a row of its own, `not served`, with dispatch's reason, and
counts as a miss.

The summary is per (dtype, layout) and over all rows: the geometric mean of the speed-up on cuBLAS over the
served classes, the slowest class, and how many classes are not served. Each row names the target its kernel ran
for (the GPU's) and its status: ok, error, or not served.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "gemm_classes"
if str(ROOT) not in sys.path:  # a checkout where tilegen is not installed
    sys.path.insert(0, str(ROOT))

# (class, M, N, K): the classes of the tuned-by-default targets
CLASSES: tuple[tuple[str, int, int, int], ...] = (
    ("square", 4096, 4096, 4096),
    ("square", 8192, 8192, 8192),
    ("MLP up", 4096, 14336, 4096),
    ("MLP down", 4096, 4096, 14336),
    ("decode M=1", 1, 4096, 4096),
    ("decode M=16", 16, 4096, 4096),
    ("decode M=64", 64, 4096, 4096),
    ("decode M=128", 128, 4096, 4096),
    ("narrow N", 4096, 128, 8192),
    ("narrow N", 2048, 256, 8192),
    ("deep K", 256, 1024, 65536),
    ("deep K", 512, 512, 131072),
)
COMBOS: tuple[tuple[str, str], ...] = (("fp16", "nt"), ("bf16", "nt"), ("fp16", "nn"), ("bf16", "nn"))
TARGET_GEOMEAN, TARGET_FLOOR = 1.02, 0.95  # the targets: geometric mean on cuBLAS, and no class below


@dataclass(frozen=True, kw_only=True)
class Call:
    """One class of one (dtype, layout), and the route dispatch gives it."""

    dtype: str
    layout: str
    cls: str
    shape: tuple[int, int, int]
    route: str
    kernel: str
    run_shape: tuple[int, ...]
    detail: str


def gemm_operands(dtype: str, layout: str, shape: tuple[int, int, int], device):
    """Empty A and B of `shape` stored as `layout` says (codegen.ops.adapters.LAYOUTS), for a route lookup."""
    import torch

    from codegen.ops.adapters import LAYOUTS

    m, n, k = shape
    ta, tb = LAYOUTS[layout]
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    a = torch.empty((k, m) if ta else (m, k), dtype=dt, device=device)
    b = torch.empty((n, k) if tb else (k, n), dtype=dt, device=device)
    return a, b, dt


def routes(ops, device) -> tuple[list[Call], dict[tuple[str, tuple], object]]:
    """Every (dtype, layout, class) routed by `ops`; and the rendered kernel of each served call's route."""
    from codegen.ops.adapters import GemmArgs

    calls, rendered = [], {}
    for dtype, layout in COMBOS:
        for cls, m, n, k in CLASSES:
            a, b, dt = gemm_operands(dtype, layout, (m, n, k), device)
            r = ops.route("gemm", GemmArgs(a, b, layout, dt, ""))
            calls.append(Call(dtype=dtype, layout=layout, cls=cls, shape=(m, n, k), route=r.route, kernel=r.kernel,
                              run_shape=tuple(r.run_shape), detail=r.detail))
            if r.rendered is not None:
                rendered[r.kernel, tuple(r.run_shape)] = r.rendered
    return calls, rendered


class RoutesOnly:
    """A backend for route lookups only (`--list`): tensors on torch's meta device, nothing compiled or run."""

    device_type = "meta"

    def get(self, rendered, compile_shape):
        raise RuntimeError("--list routes calls; it runs no kernel")

    def precompile(self, jobs, workers):
        raise RuntimeError("--list routes calls; it compiles no kernel")


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarise(rows: list[dict]) -> list[dict]:
    """Per (dtype, layout), then over every row: served classes, their geometric mean and slowest, the misses."""
    groups = [(f"{d} {lay}", [r for r in rows if (r["dtype"], r["layout"]) == (d, lay)]) for d, lay in COMBOS]
    out = []
    for name, rs in [*groups, ("all", rows)]:
        timed = [r for r in rs if r.get("vs_cublas")]
        slowest = min(timed, key=lambda r: r["vs_cublas"], default=None)
        gm = geomean([r["vs_cublas"] for r in timed])
        below = [r for r in timed if r["vs_cublas"] < TARGET_FLOOR]
        out.append({"group": name, "classes": len(rs), "timed": len(timed),
                    "not_served": sum(r["route"] == "fallback" for r in rs),
                    "failed": sum(r["route"] != "fallback" and not r.get("vs_cublas") for r in rs),
                    "geomean_vs_cublas": gm, "below_floor": len(below),
                    "slowest": (f"{slowest['class']} {'x'.join(map(str, slowest['shape']))} "
                                f"{slowest['vs_cublas']:.3f}x") if slowest else "",
                    "met": bool(gm and gm >= TARGET_GEOMEAN and not below and len(timed) == len(rs))})
    return out


def _x(v) -> str:
    return "x".join(map(str, v))


def markdown(doc: dict) -> str:
    head = ["| dtype | layout | class | m x n x k | route | kernel | ms | cuBLAS ms | vs cuBLAS | vs compile |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        run = f" (run at {_x(r['run_shape'])})" if r["run_shape"] and tuple(r["run_shape"]) != tuple(r["shape"]) else ""
        lead = f"| {r['dtype']} | {r['layout']} | {r['class']} | {_x(r['shape'])} | {r['route']}{run} | "
        if r["route"] == "fallback":
            head.append(f"{lead}not served: {r['detail']} | | | | |")
        elif "error" in r:
            head.append(f"{lead}`{r['kernel']}` | error: {r['error'][:120]} | | | |")
        else:
            comp = f"{r['vs_compile']:.3f}x" if r.get("vs_compile") else "-"
            head.append(f"{lead}`{r['kernel']}` | {r['ms']:.4f} | {r['cublas_ms']:.4f} | {r['vs_cublas']:.3f}x | {comp} |")
    summary = ["| group | classes | timed | not served | geomean vs cuBLAS | below 0.95x | slowest | targets met |",
               "|---|---|---|---|---|---|---|---|"]
    for s in doc["summary"]:
        gm = f"{s['geomean_vs_cublas']:.3f}x" if s["geomean_vs_cublas"] else "-"
        summary.append(f"| {s['group']} | {s['classes']} | {s['timed']} | {s['not_served']} | {gm} | "
                       f"{s['below_floor']} | {s['slowest']} | {'yes' if s['met'] else 'no'} |")
    env = doc["environment"]
    return "\n".join([
        f"# GEMM classes through dispatch on {env['device']}",
        "",
        (f"`{env['command']}` at {env['git_commit']}, one run. Each class's call routed by the project's dispatch "
         "(tuned entry, spec shape, bucket, dynamic M, else not served); the kernel timed by tilegen bench's method "
         "(L2 flushed before every launch, medians) beside torch at the call's shape in the same worker (eager: "
         f"cuBLAS). Targets: geometric mean >= {TARGET_GEOMEAN}x cuBLAS, no class below {TARGET_FLOOR}x, every "
         "class served."),
        "",
        *summary,
        "",
        *head,
        "",
        f"torch {env['torch']}.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, default=PROJECT,
                    help="the project whose dispatch serves the calls (default: examples/gemm_classes)")
    ap.add_argument("--out", type=Path, help="write gemm_classes.json and .md here")
    ap.add_argument("--list", action="store_true", help="only the routes (no GPU: as dispatch on an H200 sees them)")
    args = ap.parse_args(argv)

    import torch

    import tilegen
    from codegen.core.files import dump_json
    from codegen.core.hardware import Target
    from codegen.run.report import command_line, git_commit

    if args.list:
        ops = tilegen.load(args.project, backend=RoutesOnly(), target=Target.SM_90, device_name="NVIDIA H200")
        calls, _ = routes(ops, "meta")
        for c in calls:
            print(f"{c.dtype} {c.layout} {c.cls:13} {_x(c.shape):>18}  {c.route:8} {c.kernel}")
        return 0

    from codegen.run.bench import bench_case, flush_bytes, measure_copy_gbps
    from codegen.run.gpu import ContainedRunner, NoGpu, detect_gpu, precompile

    try:
        gpu = detect_gpu()
    except NoGpu as exc:
        print(f"gemm_classes: no GPU to time the classes on: {exc} (--list routes them without one)", file=sys.stderr)
        return 1
    ops = tilegen.load(args.project)
    calls, rendered = routes(ops, "cuda")
    jobs = [(f, shape) for (_, shape), f in rendered.items()]
    errors = precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    rows = []
    with ContainedRunner(300) as runner:
        _, copy_gbps, _ = runner.call(measure_copy_gbps, nflush)
        for c in calls:
            row = {"dtype": c.dtype, "layout": c.layout, "class": c.cls, "shape": list(c.shape), "route": c.route,
                   "kernel": c.kernel, "run_shape": list(c.run_shape), "detail": c.detail,
                   "target": gpu.run_target.value, "status": "not served"}
            rows.append(row)
            if c.route == "fallback":
                continue
            f = rendered[c.kernel, c.run_shape]
            row["status"] = "error"
            if (f.uri, c.run_shape) in errors:
                row["error"] = "compile: " + errors[f.uri, c.run_shape][:300]
                continue
            ok, bench, _ = runner.call(bench_case, f, c.shape, gpu.run_target, nflush, copy_gbps, None, c.run_shape)
            if not ok or bench.status != "ok":
                row["error"] = str(bench if not ok else bench.error)[:300]
                continue
            row |= {"status": "ok", "ms": bench.kernel.median_ms, "tflops": bench.tflops,
                    "cublas_ms": bench.baselines["eager"].median_ms, "vs_cublas": bench.speedup["eager"],
                    "vs_compile": bench.speedup.get("compile")}
            print(f"{c.dtype} {c.layout} {c.cls:13} {_x(c.shape):>18} {c.route:8} {row['vs_cublas']:.3f}x", flush=True)
    doc = {"environment": {"command": command_line(), "git_commit": git_commit(), "device": gpu.name,
                           "torch": torch.__version__},
           "copy_gbps": copy_gbps, "targets": {"geomean_vs_cublas": TARGET_GEOMEAN, "floor_vs_cublas": TARGET_FLOOR},
           "summary": summarise(rows), "rows": rows}
    text = markdown(doc)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemm_classes.json").write_text(dump_json(doc), encoding="utf-8")
        (args.out / "gemm_classes.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
