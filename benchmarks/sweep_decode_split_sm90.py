"""Sweep of decode attention's split_kv over batch sizes and KV lengths on sm_90, beside cuDNN: the data a rule
choosing split_kv from the shape needs (how many workgroups fill the GPU, when the combine's cost outweighs it).

    python benchmarks/sweep_decode_split_sm90.py [--out reports/h200/sweep_decode_split] [--splits 1 2 4 8 16 32]
                                                  [--batches 1 2 4 8 16 32 64] [--seq-kv 4096 32768]

One spec per split_kv (fp16, head_dim 128, 32 query / 8 K/V heads, one query, the 64 x 64 tile of the decode
seeds), written in memory and validated like any spec, at every (batch, seq_kv). Each (kernel, shape) is compiled
in parallel, verified (one seed, negative controls) and timed with `tilegen bench`'s method (L2 flushed, median);
torch's baselines (SDPA's cuDNN and flash backends, torch.compile) are timed once per shape, beside split_kv 1. A
kernel that fails verification is listed as failed and not timed. Each row gives the split's workgroups (splits x
K/V heads x row blocks x batch) against the SMs, which a rule would read. Writes sweep.json and sweep.md to --out
after every timed row, marked partial until the sweep ends (a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.run.bench import bench_case, flush_bytes, measure_copy_gbps
from codegen.run.gpu import ContainedRunner, detect_gpu, precompile
from codegen.run.verify import SEEDS, verify_case
from codegen.spec.load import parse_specs
from codegen.targets import HARDWARE

HEADS, KV_HEADS, HEAD_DIM, BLOCK_M, BLOCK_N, THREADS = 32, 8, 128, 64, 64, 128


def spec(split: int, batches: list[int], seq_kvs: list[int]) -> str:
    shapes = ", ".join(f"{{batch: {b}, heads: {HEADS}, kv_heads: {KV_HEADS}, seq_q: 1, seq_kv: {s}}}"
                       for s in seq_kvs for b in batches)
    return (f"- name: decode_split_{split}\n  op: attention\n  variant: decode\n"
            f"  dtypes: {{input: fp16, out: fp16, accumulate: fp32}}\n  shapes: [{shapes}]\n"
            f"  head_dim: {HEAD_DIM}\n  causal: false\n"
            f"  tiling: {{block_m: {BLOCK_M}, block_n: {BLOCK_N}, threads: {THREADS}}}\n"
            f"  pipeline: {{stages: 2}}\n  split_kv: {split}\n  tail: none\n  targets: [sm_90]\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/h200/sweep_decode_split"))
    ap.add_argument("--splits", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--batches", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--seq-kv", nargs="*", type=int, default=[4096, 32768])
    args = ap.parse_args()
    files = []
    for split in args.splits:  # a split over the KV blocks of a length is refused by the rules: the spec says so
        files += render_all(build_instances(parse_specs(spec(split, args.batches, args.seq_kv), f"<split {split}>")))
    gpu = detect_gpu()
    sms = HARDWARE[gpu.run_target].compute_units
    jobs = [(f, s) for f in files for s in f.instance.shapes]
    errors = precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    first = {s: f.uri for f, s in reversed(jobs)}  # the smallest split of each shape times the baselines
    rows = []
    with ContainedRunner(300) as runner:
        _, copy_gbps, _ = runner.call(measure_copy_gbps, nflush)
        for f, shape in jobs:
            inst = f.instance
            batch, _, _, _, seq_kv = shape
            (grid, _combine) = inst.launch_grids(shape)
            row = {"batch": batch, "seq_kv": seq_kv, "split_kv": inst.split_kv, "uri": f.uri,
                   "workgroups": grid[0] * grid[1] * grid[2], "sms": sms}
            rows.append(row)
            if (f.uri, shape) in errors:
                row["status"] = f"compile error: {errors[(f.uri, shape)][:120]}"
                continue
            ok, cases, _ = runner.call(verify_case, f, shape, gpu.run_target, SEEDS[:1])
            statuses = sorted({c.status for c in cases}) if ok else [f"error: {str(cases)[:80]}"]
            row["status"] = " ".join(statuses)
            if statuses != ["verified"]:
                continue
            ok, bench, _ = runner.call(bench_case, f, shape, gpu.run_target, nflush, copy_gbps,
                                       frozenset({first[shape]}))
            if not ok:
                row["status"] = f"verified; bench error: {str(bench)[:120]}"
                continue
            row |= {"ms": bench.kernel.median_ms, "pct_copy": bench.pct_copy_bw,
                    "baselines_ms": {k: t.median_ms for k, t in bench.baselines.items()}}
            print(row, flush=True)
            write(args, gpu.name, copy_gbps, sms, rows, partial=True)  # a run cut short keeps what it measured
    write(args, gpu.name, copy_gbps, sms, rows, partial=False)
    return 0


def write(args, device: str, copy_gbps: float, sms: int, rows: list[dict], partial: bool) -> None:
    """sweep.json and sweep.md under --out from the rows so far (`partial`: the sweep has not finished)."""
    rows = [dict(r) for r in rows]
    for r in rows:  # each shape's baselines (timed beside its smallest split) against every split
        base = next((q.get("baselines_ms") for q in rows if (q["batch"], q["seq_kv"]) == (r["batch"], r["seq_kv"])
                     and q.get("baselines_ms")), None) or {}
        if "ms" in r:
            r["vs"] = {k: v / r["ms"] for k, v in sorted(base.items())}
    best = {}
    for r in rows:
        key = (r["batch"], r["seq_kv"])
        if "ms" in r and (key not in best or r["ms"] < best[key]["ms"]):
            best[key] = r
    md = [(f"Decode attention split_kv sweep on {device} (fp16, d{HEAD_DIM}, {HEADS}/{KV_HEADS} heads, one query, "
           f"{BLOCK_M}x{BLOCK_N} tile, {THREADS} threads; {sms} SMs; copy {copy_gbps:.0f} GB/s in the same run). "
           "`best`: the fastest split of its shape." + (" Partial: the sweep had not finished." if partial else "")), "",
          "| batch | seq_kv | split_kv | workgroups | status | ms | % copy | vs sdpa_cudnn | vs sdpa_flash | best |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["seq_kv"], r["batch"], r["split_kv"])):
        vs = r.get("vs", {})
        cells = [f"{r['ms']:.4f}", f"{r['pct_copy']:.1f} %"] if "ms" in r else ["", ""]
        cells += [f"{vs[k]:.2f}x" if k in vs else "" for k in ("sdpa_cudnn", "sdpa_flash")]
        mark = "yes" if best.get((r["batch"], r["seq_kv"])) is r else ""
        md.append(f"| {r['batch']} | {r['seq_kv']} | {r['split_kv']} | {r['workgroups']} | {r['status']} | "
                  + " | ".join(cells) + f" | {mark} |")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"device": device, "copy_gbps": copy_gbps, "sms": sms, "rows": rows, "partial": partial,
           "command": "python3 benchmarks/sweep_decode_split_sm90.py " + " ".join(
               f"--{k.replace('_', '-')} {' '.join(map(str, v))}" for k, v in
               (("splits", args.splits), ("batches", args.batches), ("seq_kv", args.seq_kv)))}
    (args.out / "sweep.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (args.out / "sweep.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    if not partial:
        print("\n".join(md))


if __name__ == "__main__":
    raise SystemExit(main())
