"""The host cost of one tilegen op call: what `tilegen.load`'s dispatch adds to a kernel launch, on the CPU.

    python3 benchmarks/ops_overhead.py [--calls 10000] [--repeats 5]

A small project (the decode shapes of a Llama layer, scaled down) is loaded with kernels that do nothing (a
launch that returns at once), so the time of a call is the ops' own Python: the input checks, the route
lookup, the count, the output and workspace allocations and the launch's argument marshalling. Each op is
called `--calls` times back to back in plain eager mode (no grad), `--repeats` times; the best repeat's
microseconds per call are printed, beside an empty Python loop and `torch.empty` of the output's size (the
floor of an op that allocates its output). Nothing here is a GPU measurement: a TileLang launch adds its own
cost on top.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout where tilegen is not installed
    sys.path.insert(0, str(ROOT))

import torch

import tilegen
from codegen.core.hardware import Target
from codegen.ops.cache import CacheEvent, PrecompileReport

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, TOKENS, CACHE = 512, 4, 2, 64, 16, 256
SPECS = f"""\
- name: proj
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  shapes: [{{m: {TOKENS}, n: {HIDDEN}, k: {HIDDEN}}}]
  tiling: {{block_m: 16, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
- name: norm
  op: rmsnorm
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes: [{{rows: {TOKENS}, cols: {HIDDEN}}}]
  threads: 64
  vector: 8
  targets: [sm_90]
- name: add_norm
  op: rmsnorm
  residual: true
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes: [{{rows: {TOKENS}, cols: {HIDDEN}}}]
  threads: 64
  vector: 8
  targets: [sm_90]
- name: rope
  op: rope
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes: [{{tokens: {TOKENS}, heads: {HEADS}, kv_heads: {KV_HEADS}}}]
  head_dim: {HEAD_DIM}
  rotary_dim: {HEAD_DIM}
  threads: 32
  vector: 8
  tail: predicated
  targets: [sm_90]
- name: decode
  op: attention
  variant: decode
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes: [{{batch: {TOKENS}, heads: {HEADS}, kv_heads: {KV_HEADS}, seq_q: 1, seq_kv: {CACHE}}}]
  head_dim: {HEAD_DIM}
  tiling: {{block_m: 64, block_n: 64, threads: 128}}
  pipeline: {{stages: 2}}
  split_kv: 2
  targets: [sm_90]
"""


class NullKernels:
    """An ops backend on the CPU whose kernels return at once."""

    device_type = "cpu"

    def get(self, rendered, compile_shape):
        def kernel(*args):
            return None

        return kernel, CacheEvent(uri=rendered.uri, shape=tuple(compile_shape), key="", hit=False, seconds=0.0)

    def precompile(self, jobs, workers):
        return PrecompileReport(kernels=0, cached=0, errors={}, seconds=0.0)


def per_call_us(fn, calls: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / calls * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
        (root / "specs").mkdir()
        (root / "specs" / "ops.yaml").write_text(SPECS, encoding="utf-8")
        ops = tilegen.load(root, backend=NullKernels(), target=Target.SM_90, device_name="NVIDIA H200", strict=True)
    bf = torch.bfloat16
    x, w, wn = torch.randn(TOKENS, HIDDEN, dtype=bf), torch.randn(HIDDEN, HIDDEN, dtype=bf), torch.ones(HIDDEN, dtype=bf)
    r = torch.randn(TOKENS, HIDDEN, dtype=bf)
    q, k = torch.randn(TOKENS, HEADS, HEAD_DIM, dtype=bf), torch.randn(TOKENS, KV_HEADS, HEAD_DIM, dtype=bf)
    cos, sin = torch.randn(TOKENS, HEAD_DIM // 2), torch.randn(TOKENS, HEAD_DIM // 2)
    qd = torch.randn(TOKENS, 1, HEADS, HEAD_DIM, dtype=bf)
    kd = torch.randn(TOKENS, CACHE, KV_HEADS, HEAD_DIM, dtype=bf)
    calls = {
        "empty loop": lambda: None,
        "torch.empty (the output alone)": lambda: torch.empty((TOKENS, HIDDEN), dtype=bf),
        "linear": lambda: ops.linear(x, w),
        "rmsnorm": lambda: ops.rmsnorm(x, wn, 1e-5),
        "rope": lambda: ops.rope(q, k, cos, sin),
        "attention_decode": lambda: ops.attention_decode(qd, kd, kd, scale=0.125),
    }
    if hasattr(ops, "add_rmsnorm"):
        calls["add_rmsnorm"] = lambda: ops.add_rmsnorm(x, r, wn, 1e-5)
    print(f"torch {torch.__version__}, {args.calls} calls x {args.repeats} repeats, no grad, kernels that return at once")
    print("| call | us/call |\n|---|---|")
    with torch.no_grad():
        for name, fn in calls.items():
            print(f"| {name} | {per_call_us(fn, args.calls, args.repeats):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
