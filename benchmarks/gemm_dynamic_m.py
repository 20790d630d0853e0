"""What a dynamic M costs (issue 12): the dynamic-M GEMM kernel beside the static kernel of the same
configuration, and torch, at the same M values, timed in one run on the GPU present.

    python3 benchmarks/gemm_dynamic_m.py --out DIR [--spec gemm_fp16_dynamic_m] [--m 1,16,128,1000,4096]

The dynamic kernel is the spec's own (specs/gemm_dynamic.yaml: M symbolic over dynamic_m, one compile for
every M); its static twin is the same spec without `dynamic_m` -- the same tiles, schedule and tail policy
(`predicated`), compiled for one M at a time, as tilegen does for every other spec. Both are derived from the
typed spec (model_copy) and checked by the family's rules; N and K are the spec's first shape's. Both are
compiled first (the static twin once per M, the dynamic kernel once: the wall time of each is reported), then,
for each M, in one contained worker: the same inputs through both kernels (whether the two outputs are
bitwise identical is reported), and each kernel and torch eager timed with `tilegen bench`'s method (L2 flushed
before every launch, the median), in two interleaved rounds so that drift favours neither.

Writes DIR/gemm_dynamic_m.md (the table) and DIR/gemm_dynamic_m.json. Without a GPU it exits 1 with the
reason and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout where tilegen is not installed
    sys.path.insert(0, str(ROOT))

from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.families import family, family_for_op
from codegen.families.gemm.spec import GemmShape
from codegen.generate.instance import grid_limit
from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile, render
from codegen.run.bench import Timing, flush_bytes, time_ms
from codegen.run.gpu import ContainedRunner, NoGpu, detect_gpu, precompile
from codegen.spec.load import format_path, load_spec_files
from codegen.targets import TARGETS, torch_dtype

SPEC = "gemm_fp16_dynamic_m"
MS = (1, 16, 128, 1000, 4096)
ROUNDS = 2  # timed rounds of (dynamic, static, eager); each round is tilegen bench's 10-200 launches


def kernels(project: Project, spec_name: str, target: Target, ms: tuple[int, ...]) -> tuple[RenderedFile, RenderedFile]:
    """(dynamic kernel, static twin) of spec `spec_name` for `target`, both with shapes (m, n, k) for m in `ms`
    at the spec's first shape's n and k; raises TilegenError naming the rule a derived spec breaks."""
    loaded = [ls for ls in load_spec_files(project.spec_paths(None), project.root) if ls.spec.name == spec_name]
    if not loaded:
        raise TilegenError(f"no spec named {spec_name!r}")
    ls = loaded[0]
    spec = ls.spec
    if spec.op != "gemm" or getattr(spec, "dynamic_m", None) is None:
        raise TilegenError(f"{spec_name} is not a GEMM spec with dynamic_m")
    if target not in spec.targets:
        raise TilegenError(f"{spec_name} has no {target} kernel (targets: {', '.join(t.value for t in spec.targets)})")
    n, k = spec.shapes[0].n, spec.shapes[0].k
    shapes = [GemmShape(m=m, n=n, k=k) for m in ms]
    fam = family_for_op("gemm")
    out = []
    for variant in (spec.model_copy(update={"shapes": shapes}),
                    spec.model_copy(update={"shapes": shapes, "dynamic_m": None})):
        inst = fam.instance(variant, TARGETS[target], ls.doc.file)
        broken = fam.check(variant, TARGETS[target]) or grid_limit(inst)
        if broken:
            v = broken[0]
            shown = format_path(v.path) + ("" if v.value is None else f"={v.value}")
            raise TilegenError(f"{spec_name} at M = {', '.join(map(str, ms))}: {shown}: {v.message} [{v.rule}]")
        out.append(render(inst))
    dynamic, static = out
    return dynamic, static


def time_m(dynamic: RenderedFile, static: RenderedFile, shape: tuple[int, int, int], run_target: Target,
           flush_nbytes: int) -> dict:
    """In a contained worker: both kernels (from TileLang's cache) on the same inputs, and their times beside
    torch eager, at one shape."""
    import torch

    from codegen.run.gpu import compile_kernel

    inst = dynamic.instance
    fam = family(inst).numerics
    kd, ks = compile_kernel(dynamic, shape, run_target), compile_kernel(static, shape, run_target)
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cuda", run_target=run_target)
    out_dtype = torch_dtype(inst.spec_dtypes[-2], run_target)
    cd = torch.full(fam.out_shape(inst, shape), float("nan"), dtype=out_dtype, device="cuda")
    cs = torch.full_like(cd, float("nan"))
    fam.launch(kd, case, cd)
    fam.launch(ks, case, cs)
    torch.cuda.synchronize()
    identical = bool(torch.equal(cd, cs))
    max_diff = float((cd.float() - cs.float()).abs().nan_to_num(nan=float("inf")).max().item())
    flush = torch.empty(flush_nbytes, dtype=torch.uint8, device="cuda")
    fns = {"dynamic": lambda: fam.launch(kd, case, cd), "static": lambda: fam.launch(ks, case, cs),
           "eager": fam.baselines(inst, case, out_dtype)["eager"]}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            samples[name] += time_ms(fn, flush)
    return {"m": shape[0], "identical": identical, "max_abs_diff": max_diff,
            **{name: vars(Timing.of(s)) for name, s in samples.items()}}


def markdown(doc: dict) -> str:
    rows = ["| M | dynamic ms | static ms | dynamic / static | torch eager ms | dynamic TFLOP/s | static TFLOP/s | outputs |",
            "|---|---|---|---|---|---|---|---|"]
    n, k = doc["n"], doc["k"]
    for r in doc["rows"]:
        if "error" in r:
            rows.append(f"| {r['m']} | error: {r['error'][:100]} | | | | | | |")
            continue
        d, s, e = (r[x]["median_ms"] for x in ("dynamic", "static", "eager"))
        tf = 2.0 * r["m"] * n * k / 1e9
        same = "identical" if r["identical"] else f"differ (max {r['max_abs_diff']:.3g})"
        rows.append(f"| {r['m']} | {d:.4f} | {s:.4f} | {d / s:.3f} | {e:.4f} | {tf / d:.1f} | {tf / s:.1f} | {same} |")
    c = doc["compile"]
    return "\n".join([
        f"# Dynamic M against static M: `{doc['spec']}` on {doc['gpu']} ({doc['run_target']})",
        "",
        (f"`benchmarks/gemm_dynamic_m.py`, one run: N = {n}, K = {k}; dynamic kernel `{doc['dynamic']}` (one compile "
         f"for every M in [{doc['dynamic_m'][0]}, {doc['dynamic_m'][1]}]), static twin `{doc['static']}` (the same "
         "configuration compiled for each M). Medians of tilegen bench's method, L2 flushed before every launch, "
         f"{ROUNDS} interleaved rounds; dynamic / static > 1 means the dynamic kernel is slower."),
        "",
        *rows,
        "",
        (f"Compilation before the timing ({c['workers']} workers; TileLang's cache may have held some already): "
         f"dynamic {c['dynamic_compiles']} compile(s) in {c['dynamic_s']:.1f} s, static {c['static_compiles']} in "
         f"{c['static_s']:.1f} s."),
        f"torch {doc['torch']}, {doc['runtime']}.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "h200" / "gemm_dynamic_m",
                    help="folder for gemm_dynamic_m.md and .json")
    ap.add_argument("--spec", default=SPEC, help="a GEMM spec with dynamic_m")
    ap.add_argument("--m", default=",".join(map(str, MS)), help="M values, comma-separated")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per M in the worker")
    args = ap.parse_args(argv)
    try:
        ms = tuple(int(x) for x in args.m.split(","))
    except ValueError:
        ap.error(f"--m {args.m}: expected integers joined by ',', e.g. {','.join(map(str, MS))}")
    if min(ms) < 1:
        ap.error(f"--m {args.m}: every M must be at least 1")
    try:
        gpu = detect_gpu()
    except NoGpu as exc:
        print(f"gemm_dynamic_m: no GPU to run on: {exc}", file=sys.stderr)
        return 1
    try:
        dynamic, static = kernels(Project(root=ROOT), args.spec, gpu.run_target, ms)
    except TilegenError as exc:
        print(f"gemm_dynamic_m: {exc}", file=sys.stderr)
        return 1
    shapes = [(m, *dynamic.instance.shapes[0][1:]) for m in ms]
    workers = os.cpu_count() or 1
    t0 = time.perf_counter()
    errors = precompile([(dynamic, s) for s in shapes], gpu.run_target, workers=workers)
    t1 = time.perf_counter()
    errors |= precompile([(static, s) for s in shapes], gpu.run_target, workers=workers)
    t2 = time.perf_counter()
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    rows = []
    with ContainedRunner(args.timeout) as runner:
        for shape in shapes:
            error = errors.get((dynamic.uri, shape)) or errors.get((static.uri, shape))
            if error is None:
                ok, value, _ = runner.call(time_m, dynamic, static, shape, gpu.run_target, nflush)
                error = None if ok else str(value)
            rows.append({"m": shape[0], "error": error} if error else value)
            print(f"M={shape[0]}: {error or 'timed'}", flush=True)
    inst = dynamic.instance
    doc = {"spec": args.spec, "gpu": gpu.name, "run_target": gpu.run_target.value, "torch": gpu.torch_version,
           "runtime": gpu.runtime_version, "n": inst.shapes[0][1], "k": inst.shapes[0][2],
           "dynamic_m": list(inst.dynamic_m), "dynamic": dynamic.uri, "static": static.uri,
           "compile": {"workers": workers, "dynamic_s": t1 - t0, "static_s": t2 - t1,
                       "dynamic_compiles": len(dynamic.instance.compile_shapes()),
                       "static_compiles": len(static.instance.compile_shapes())},
           "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gemm_dynamic_m.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (args.out / "gemm_dynamic_m.md").write_text(markdown(doc), encoding="utf-8")
    print(markdown(doc))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
