"""Compile-time resources of gfx942 attention tilings: what `tilegen build` reads from the real gfx942
code object for each legal (block_m, block_n, threads, stages), and whether the same program lowers for
CUDA (so `tilegen verify` can run it on the H200 as a logic check). No timings: there is no MI300X here.

    python benchmarks/attention_tiles_gfx942.py [--out reports/static/attention_tiles_gfx942.md]

Each candidate is a spec written in memory and validated like any spec (illegal ones are listed with the
rule that rejects them), built with the project's toolchain and build cache (`.cache/build`).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from codegen.build.compile import BuildOptions, build_files
from codegen.core.errors import SpecErrors, TilegenError
from codegen.core.hardware import Target
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAD_DIMS = [128, 64]
BLOCK_M = [64, 128]
BLOCK_N = [16, 32, 64]
THREADS = [128, 256, 512]
STAGES = [1, 2]
SHAPE = (4, 32, 32, 4096, 4096)
CHECK_SHAPE = (1, 2, 1, 256, 256)  # small: only whether CUDA lowering succeeds matters


def spec(d: int, bm: int, bn: int, threads: int, stages: int) -> str:
    b, h, kvh, sq, skv = SHAPE
    return (f"- name: t_d{d}_{bm}x{bn}_t{threads}_s{stages}\n  op: attention\n"
            f"  dtypes: {{input: fp16, out: fp16, accumulate: fp32}}\n"
            f"  shapes: [{{batch: {b}, heads: {h}, kv_heads: {kvh}, seq_q: {sq}, seq_kv: {skv}}}]\n"
            f"  head_dim: {d}\n  tiling: {{block_m: {bm}, block_n: {bn}, threads: {threads}}}\n"
            f"  pipeline: {{stages: {stages}}}\n  tail: none\n  targets: [gfx942]\n")


def cuda_lowers(f) -> str:
    try:
        lower(f, CHECK_SHAPE, Target.SM_90)
    except TilegenError as exc:
        return "no: " + str(exc).rsplit("failed: ", 1)[-1][:60]
    return "yes"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "reports/static/attention_tiles_gfx942.md")
    args = ap.parse_args()
    files, rejected = [], []
    for combo in itertools.product(HEAD_DIMS, BLOCK_M, BLOCK_N, THREADS, STAGES):
        try:
            files += render_all(build_instances(parse_specs(spec(*combo), "<tiles>")))
        except SpecErrors as exc:
            rejected.append((combo, str(exc).splitlines()[0].rsplit("[", 1)[-1].rstrip("]")))
    report = build_files(files, REPO_ROOT, BuildOptions())
    lines = [("| head_dim | block_m x block_n | threads | stages | LDS | VGPR + AGPR | waves/SIMD | MFMA instructions in the code | "
             "lowers for CUDA (H200 logic check) | build |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for f, r in zip(files, report.results, strict=True):
        i, s = f.instance, r.summary()
        mfma = ", ".join(f"{n} {m.removeprefix('v_mfma_')}" for m, n in s.get("mfma", {}).items()) or "-"
        regs = f"{s['vgprs']} + {s['agprs']}" if s else "-"
        lines.append(f"| {i.head_dim} | {i.block_m}x{i.block_n} | {i.threads} | {i.stages} | {i.lds_bytes} | {regs} | "
                     f"{s.get('waves_per_simd', '-')} | {mfma} | {cuda_lowers(f)} | {r.error or 'ok'} |")
        print(lines[-1], flush=True)
    lines += ["", "Rejected by the spec rules:", "",
              *(f"- head_dim {d}, {bm}x{bn}, {t} threads, {st} stage(s): `{rule}`" for (d, bm, bn, t, st), rule in rejected)]
    args.out.write_text("gfx942 attention tilings (fp16, not causal, B4 H32 S4096): compile-time resources of the "
                        "real gfx942 code object (clang-19, `tilegen build`'s report; MFMA counts are static: a pipelined loop's prologue repeats its body). No timings: there is no "
                        "MI300X here.\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
