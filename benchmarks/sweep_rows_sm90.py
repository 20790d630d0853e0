"""Hand sweep of sm_90 row-kernel configurations (softmax, rmsnorm, layernorm) beside torch, to pick the
seed specs' threads / vector / unroll / variant.

    python benchmarks/sweep_rows_sm90.py [--out reports/h200/sweep_rows_sm90.md] [--ops softmax rmsnorm]

Each variant is a spec written in memory, validated like any spec, rendered, compiled in parallel,
verified (one seed, negative controls) at every shape and timed with `tilegen bench`'s method (L2
flushed, median, torch eager and torch.compile in the same run). A variant that fails verification is
listed as failed and not timed.
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

from codegen.bench import bench_case, flush_bytes, measure_copy_gbps
from codegen.gpu import ContainedRunner, detect_gpu, precompile
from codegen.instance import build_instances
from codegen.load import parse_specs
from codegen.render import render_all
from codegen.verify import SEEDS, verify_case

SHAPES = [(8192, 4096), (16384, 8192)]
THREADS = [256, 512, 1024]
UNROLL = [1, 2]
# op -> extra spec lines of each of its variants
OPS = {
    "softmax": ["variant: two_pass", "variant: online"],
    "rmsnorm": ["eps: 1.0e-6"],
    "layernorm": ["eps: 1.0e-5"],
}


def variant_spec(i: int, op: str, extra: str, threads: int, unroll: int) -> str:
    shapes = ", ".join(f"{{rows: {r}, cols: {c}}}" for r, c in SHAPES)
    vector = min(8, min(c for _, c in SHAPES) // threads)  # one chunk of threads*vector fits every row
    return (f"- name: sweep_{i}\n  op: {op}\n  dtypes: {{input: fp16, out: fp16, accumulate: fp32}}\n"
            f"  {extra}\n  shapes: [{shapes}]\n  threads: {threads}\n  vector: {vector}\n  unroll: {unroll}\n"
            f"  tail: none\n  targets: [sm_90]\n")


def combos(ops: list[str]) -> list[tuple[str, str, int, int]]:
    """Every (op, variant lines, threads, unroll); the online softmax is always fully unrolled."""
    return [(op, extra, t, u) for op in ops for extra, t, u in itertools.product(OPS[op], THREADS, UNROLL)
            if not (u > 1 and "online" in extra)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("reports/h200/sweep_rows_sm90.md"))
    ap.add_argument("--ops", nargs="*", default=sorted(OPS))
    args = ap.parse_args()
    text = "".join(variant_spec(i, *c) for i, c in enumerate(combos(args.ops)))
    files = render_all(build_instances(parse_specs(text, "<sweep>")))
    gpu = detect_gpu()
    jobs = [(f, s) for f in files for s in SHAPES]
    errors = precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    lines = ["| op | variant | threads | vector | unroll | shape | verified | ms | GB/s | % copy | vs eager | vs compile |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    with ContainedRunner(300) as runner:
        _, copy_gbps, _ = runner.call(measure_copy_gbps, nflush)
        for f, shape in jobs:
            i = f.instance
            variant = getattr(i, "variant", "-")
            head = f"| {i.op} | {variant} | {i.threads} | {i.vector} | {i.unroll} | {'x'.join(map(str, shape))} |"
            if (f.uri, shape) in errors:
                lines.append(f"{head} compile error: {errors[(f.uri, shape)][:80]} | | | | | |")
                continue
            ok, cases, _ = runner.call(verify_case, f, shape, gpu.run_target, SEEDS[:1])
            statuses = sorted({c.status for c in cases}) if ok else [f"error: {str(cases)[:60]}"]
            if statuses != ["verified"]:
                lines.append(f"{head} {' '.join(statuses)} | | | | | |")
                print(lines[-1], flush=True)
                continue
            ok, row, _ = runner.call(bench_case, f, shape, gpu.run_target, nflush, copy_gbps)
            if not ok:
                lines.append(f"{head} verified | error: {str(row)[:80]} | | | | |")
                continue
            lines.append(f"{head} verified | {row.kernel.median_ms:.4f} | {row.gbps:.0f} | {row.pct_copy_bw:.1f} | "
                         f"{row.speedup['eager']:.2f} | {row.speedup['compile']:.2f} |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"fp16 row-kernel sweep on {gpu.name} (tilegen bench method; copy {copy_gbps:.0f} GB/s "
                        "measured in the same run; tail none)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
