"""Hand sweep of sm_90 GEMM tilings beside cuBLAS (torch), to pick the seed specs' overrides.

    python benchmarks/sweep_gemm_sm90.py [--out reports/h200/sweep_gemm_sm90.md]

Each variant is a spec written in memory, validated like any spec, rendered, compiled in parallel
and timed with `tilegen bench`'s method (L2 flushed, median, torch eager/compile in the same run).
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.run.bench import bench_case, flush_bytes, measure_copy_gbps
from codegen.run.gpu import ContainedRunner, detect_gpu, precompile
from codegen.spec.load import parse_specs

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
TILES = [(128, 256, 64, 256), (256, 128, 64, 256), (128, 128, 64, 256)]
STAGES = [3, 4]
PANELS = [0, 8]


def variant_spec(i: int, tile, stages: int, panel: int) -> str:
    bm, bn, bk, threads = tile
    shapes = ", ".join(f"{{m: {m}, n: {n}, k: {k}}}" for m, n, k in SHAPES)
    return (f"- name: sweep_{i}\n  op: gemm\n  dtypes: {{a: fp16, b: fp16, out: fp16}}\n  layout: nt\n"
            f"  shapes: [{shapes}]\n"
            f"  tiling: {{block_m: {bm}, block_n: {bn}, block_k: {bk}, threads: {threads}}}\n"
            f"  pipeline: {{stages: {stages}}}\n  swizzle_panel: {panel}\n  targets: [sm_90]\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("reports/h200/sweep_gemm_sm90.md"))
    args = ap.parse_args()
    text = "".join(variant_spec(i, t, s, p) for i, (t, s, p) in enumerate(itertools.product(TILES, STAGES, PANELS)))
    files = render_all(build_instances(parse_specs(text, "<sweep>")))
    gpu = detect_gpu()
    jobs = [(f, s) for f in files for s in SHAPES]
    errors = precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    lines = ["| block MxNxK | threads | stages | panel | shape | ms | TFLOP/s | vs eager | vs compile |",
             "|---|---|---|---|---|---|---|---|---|"]
    with ContainedRunner(300) as runner:
        _, copy_gbps, _ = runner.call(measure_copy_gbps, nflush)
        for f, shape in jobs:
            i = f.instance
            head = f"| {i.block_m}x{i.block_n}x{i.block_k} | {i.threads} | {i.stages} | {i.swizzle_panel} | {'x'.join(map(str, shape))} |"
            if (f.uri, shape) in errors:
                lines.append(f"{head} compile error: {errors[(f.uri, shape)][:80]} | | | |")
                continue
            ok, row, _ = runner.call(bench_case, f, shape, gpu.run_target, nflush, copy_gbps)
            if not ok:
                lines.append(f"{head} error: {str(row)[:80]} | | | |")
                continue
            lines.append(f"{head} {row.kernel.median_ms:.4f} | {row.tflops:.0f} | {row.speedup['eager']:.3f} | "
                         f"{row.speedup['compile']:.3f} |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"fp16 NT GEMM tiling sweep on {gpu.name} (tilegen bench method)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
