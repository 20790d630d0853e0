"""Hand sweep of sm_90 row-kernel configurations (softmax, rmsnorm, layernorm) beside torch, to pick the
seed specs' threads / vector / unroll / variant.

    python benchmarks/sweep_rows_sm90.py [--out reports/h200/sweep_rows_sm90.md] [--ops softmax rmsnorm]
                                         [--threads 128 256] [--unroll 1 2]

Each variant is a spec written in memory, validated like any spec, rendered, compiled in parallel,
verified (one seed, negative controls) at every shape and timed with `tilegen bench`'s method (L2
flushed, median, torch eager and torch.compile in the same run). A variant that fails verification is
listed as failed and not timed.
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from codegen.core.errors import SpecErrors
from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.run.bench import bench_case, flush_bytes, measure_copy_gbps
from codegen.run.gpu import ContainedRunner, detect_gpu, precompile
from codegen.run.verify import SEEDS, verify_case
from codegen.spec.load import parse_specs

SHAPES = [(8192, 4096), (16384, 8192)]
RAGGED = [(8192, 5120)]
# op -> extra spec lines of each of its variants
OPS = {
    "softmax": ["variant: two_pass", "variant: online"],
    "rmsnorm": ["eps: 1.0e-6\n  variant: streamed", "eps: 1.0e-6\n  variant: registers"],
    "layernorm": ["eps: 1.0e-5\n  variant: streamed", "eps: 1.0e-5\n  variant: registers"],
}


@dataclass(frozen=True)
class Variant:
    op: str
    extra: str
    threads: int
    vector: int
    unroll: int
    tail: str
    shapes: tuple[tuple[int, int], ...]

    def spec(self, i: int) -> str:
        shapes = ", ".join(f"{{rows: {r}, cols: {c}}}" for r, c in self.shapes)
        return (f"- name: sweep_{i}\n  op: {self.op}\n  dtypes: {{input: fp16, out: fp16, accumulate: fp32}}\n"
                f"  {self.extra}\n  shapes: [{shapes}]\n  threads: {self.threads}\n  vector: {self.vector}\n"
                f"  unroll: {self.unroll}\n  tail: {self.tail}\n  targets: [sm_90]\n")


def variants(ops: list[str], threads: list[int], unrolls: list[int]) -> list[Variant]:
    """The tiling sweep at the target shapes (tail none), then predicated vs specialized on a ragged
    row at the same configuration. The online softmax is always fully unrolled."""
    out = []
    for op in ops:
        for extra, t, u in itertools.product(OPS[op], threads, unrolls):
            if u > 1 and ("online" in extra or "registers" in extra):
                continue
            vector = min(8, min(c for _, c in SHAPES) // t)  # one chunk of threads*vector fits every row
            out.append(Variant(op, extra, t, vector, u, "none", tuple(SHAPES)))
        for extra, tail in itertools.product(OPS[op], ("predicated", "specialized")):
            out.append(Variant(op, extra, 256, 8, 1, tail, tuple(RAGGED)))
    return out


def legal(vs: list[Variant]) -> tuple[list, list[str]]:
    """Rendered files of the variants the spec rules accept; one report line for each they reject."""
    files, rejected = [], []
    for i, v in enumerate(vs):
        try:
            files += render_all(build_instances(parse_specs(v.spec(i), "<sweep>")))
        except SpecErrors as exc:
            rule = str(exc).splitlines()[0].rsplit("[", 1)[-1].rstrip("]")
            rejected.append(f"| {v.op} | {v.extra.rsplit(': ', 1)[1]} | {v.threads} | {v.vector} | {v.unroll} | {v.tail} | "
                            f"all | rejected by rule {rule} | | | | | |")
    return files, rejected


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("reports/h200/sweep_rows_sm90.md"))
    ap.add_argument("--ops", nargs="*", default=sorted(OPS))
    ap.add_argument("--threads", nargs="*", type=int, default=[64, 128, 256])
    ap.add_argument("--unroll", nargs="*", type=int, default=[1, 2])
    args = ap.parse_args()
    files, rejected = legal(variants(args.ops, args.threads, args.unroll))
    gpu = detect_gpu()
    jobs = [(f, s) for f in files for s in f.instance.shapes]
    errors = precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    lines = [("| op | variant | threads | vector | unroll | tail | shape | verified | ms | GB/s | % copy | vs eager | "
             "vs compile |"), "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rejected]
    with ContainedRunner(300) as runner:
        _, copy_gbps, _ = runner.call(measure_copy_gbps, nflush)
        for f, shape in jobs:
            i = f.instance
            head = (f"| {i.op} | {i.variant} | {i.threads} | {i.vector} | {i.unroll} | {i.tail} | "
                    f"{'x'.join(map(str, shape))} |")
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
                        "measured in the same run)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
