"""The host cost of one tilegen op call: what `tilegen.load`'s dispatch adds to a kernel launch.

    python3 benchmarks/ops_overhead.py [--calls 10000] [--repeats 5]            # the CPU: kernels that do nothing
    python3 benchmarks/ops_overhead.py --gpu [--calls 2000] [--out DIR]         # the GPU present: real kernels

A small project (the decode shapes of a Llama layer, scaled down) is loaded, and each op is called `--calls`
times back to back in plain eager mode (no grad), `--repeats` times; the best repeat's microseconds per call are
printed.

On the CPU the kernels do nothing (a launch that returns at once), so a call's time is the ops' own Python: the
input checks, the route lookup, the count, the output and workspace allocations and the launch's argument
marshalling; beside it an empty Python loop and `torch.empty` of the output's size (the floor of an op that
allocates its output), and the GEMM called through torch's dispatcher as a torch.compile graph calls it: the
custom op (the calls autograd records) and its nograd twin (the others).

With --gpu the project's kernels are compiled for the GPU present (into a temporary cache) and each row splits a
call's host time into its layers, all timed in the same run: the op as a user calls it (`ops.linear`, ...), its
launch alone (the plan's launch: the output, the kernel call; no checks, no route), the kernel call alone on
prepared arguments (GEMM: through TileLang's Python wrapper, and the TVM-FFI executable the ops call where
codegen.ops.api.direct_call takes it), and the torch op that does the same work (F.linear,
F.rms_norm, SDPA). The kernels are a few microseconds long at these shapes, so a loop of calls is bound by the
host: its wall time per call is the host's cost (the GPU is synchronised once, after the loop). The results go to
`--out` as JSON and Markdown when given.

Both modes also time each op as a torch.compile graph calls it: its nograd twin through torch's dispatcher
(`torch.ops.tilegen.<op>_nograd`, the arguments the graph passes), and a compiled function of CHAIN calls, each
on the previous one's output, per call (the graph's own per-call work included: its buffers and size checks).
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


def per_call_us(fn, calls: int, repeats: int, sync=None) -> float:
    """Best of `repeats` loops of `calls` back-to-back calls, in microseconds per call; `sync` (the GPU's) ends
    each loop, so calls still queued count."""
    fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t)
    return best / calls * 1e6


def write_project(root: Path) -> None:
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "ops.yaml").write_text(SPECS, encoding="utf-8")


def make_inputs(device) -> dict[str, torch.Tensor]:
    bf = torch.bfloat16

    def randn(*shape, dtype=bf):
        return torch.randn(*shape, dtype=torch.float32, device=device).to(dtype)

    return {"x": randn(TOKENS, HIDDEN), "w": randn(HIDDEN, HIDDEN), "wn": torch.ones(HIDDEN, dtype=bf, device=device),
            "r": randn(TOKENS, HIDDEN), "q": randn(TOKENS, HEADS, HEAD_DIM), "k": randn(TOKENS, KV_HEADS, HEAD_DIM),
            "cos": randn(TOKENS, HEAD_DIM // 2, dtype=torch.float32),
            "sin": randn(TOKENS, HEAD_DIM // 2, dtype=torch.float32),
            "qd": randn(TOKENS, 1, HEADS, HEAD_DIM), "kd": randn(TOKENS, CACHE, KV_HEADS, HEAD_DIM)}


def op_calls(ops, t: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """name -> (the call as a user writes it, the run_op name and argument record it makes)."""
    from codegen.ops.adapters import AttentionArgs, GemmArgs, RopeArgs, RowArgs

    return {
        "linear": (lambda: ops.linear(t["x"], t["w"]), "gemm", GemmArgs(t["x"], t["w"], "nt", torch.bfloat16, "")),
        "rmsnorm": (lambda: ops.rmsnorm(t["x"], t["wn"], 1e-5), "rmsnorm", RowArgs(t["x"], t["wn"], None, 1e-5)),
        "rope": (lambda: ops.rope(t["q"], t["k"], t["cos"], t["sin"]), "rope",
                 RopeArgs(t["q"], t["k"], t["cos"], t["sin"])),
        "attention_decode": (lambda: ops.attention_decode(t["qd"], t["kd"], t["kd"], scale=0.125), "attention_decode",
                             AttentionArgs(t["qd"], t["kd"], t["kd"], "none", 0.125)),
        "add_rmsnorm": (lambda: ops.add_rmsnorm(t["x"], t["r"], t["wn"], 1e-5), "add_rmsnorm",
                        RowArgs(t["x"], t["wn"], None, 1e-5, t["r"])),
    }


CHAIN = 10  # calls per compiled function in the "compiled graph" column


def compiled_calls(ops, t: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """name -> (the op's nograd twin called as a compiled graph calls it, a torch.compile'd function of CHAIN
    chained calls of the op as a user writes it)."""
    h, tw = ops.handle, torch.ops.tilegen

    def chain(step):
        def calls(*state):
            for _ in range(CHAIN):
                state = step(*state)
            return state

        return torch.compile(calls, dynamic=False, fullgraph=True)

    linear = chain(lambda y: (ops.linear(y, t["w"]),))
    norm = chain(lambda y: (ops.rmsnorm(y, t["wn"], 1e-5),))
    rope = chain(lambda q, k: ops.rope(q, k, t["cos"], t["sin"]))
    decode = chain(lambda q: (ops.attention_decode(q, t["kd"], t["kd"], scale=0.125),))
    add_norm = chain(lambda x, r: ops.add_rmsnorm(x, r, t["wn"], 1e-5))
    return {
        "linear": (lambda: tw.gemm_nograd.default(t["x"], t["w"], "nt", torch.bfloat16, "", h),
                   lambda: linear(t["x"])),
        "rmsnorm": (lambda: tw.rmsnorm_nograd.default(t["x"], t["wn"], 1e-5, h), lambda: norm(t["x"])),
        "rope": (lambda: tw.rope_nograd.default(t["q"], t["k"], t["cos"], t["sin"], "half", h), lambda: rope(t["q"], t["k"])),
        "attention_decode": (lambda: tw.attention_decode_nograd.default(t["qd"], t["kd"], t["kd"], "none", 0.125, h),
                             lambda: decode(t["qd"])),
        "add_rmsnorm": (lambda: tw.add_rmsnorm_nograd.default(t["x"], t["r"], t["wn"], 1e-5, h),
                        lambda: add_norm(t["x"], t["r"])),
    }


def dispatcher_us(ops, t, name: str, calls: int, repeats: int, sync=None) -> tuple[float, float]:
    """(us per twin call, us per call inside a compiled graph) of op `name`."""
    twin, compiled = compiled_calls(ops, t)[name]
    return (per_call_us(twin, calls, repeats, sync),
            per_call_us(compiled, max(calls // CHAIN, 1), repeats, sync) / CHAIN)


def cpu_main(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root)
        ops = tilegen.load(root, backend=NullKernels(), target=Target.SM_90, device_name="NVIDIA H200", strict=True)
    t = make_inputs("cpu")
    calls = {"empty loop": lambda: None,
             "torch.empty (the output alone)": lambda: torch.empty((TOKENS, HIDDEN), dtype=torch.bfloat16)}
    calls |= {name: user for name, (user, _, _) in op_calls(ops, t).items()}
    # what a call through torch's dispatcher costs (a torch.compile graph's calls): the custom op, which autograd
    # records, and its nograd twin (codegen.ops.library), each called as a compiled graph calls it
    gemm_args = (t["x"], t["w"], "nt", torch.bfloat16, "", ops.handle)
    calls["linear through the custom op tilegen::gemm"] = lambda: torch.ops.tilegen.gemm.default(*gemm_args)
    calls["linear through its twin tilegen::gemm_nograd"] = lambda: torch.ops.tilegen.gemm_nograd.default(*gemm_args)
    print(f"torch {torch.__version__}, {args.calls} calls x {args.repeats} repeats, no grad, kernels that return at once")
    print("| call | us/call |\n|---|---|")
    with torch.no_grad():
        for name, fn in calls.items():
            print(f"| {name} | {per_call_us(fn, args.calls, args.repeats):.2f} |")
        print("\n| op | eager (the call above) us | its twin through the dispatcher us | in a compiled graph us |")
        print("|---|---|---|---|")
        for name, (user, _, _) in op_calls(ops, t).items():
            twin_us, graph_us = dispatcher_us(ops, t, name, args.calls, args.repeats)
            print(f"| {name} | {per_call_us(user, args.calls, args.repeats):.2f} | {twin_us:.2f} | {graph_us:.2f} |")
    return 0


def torch_equivalents(t: dict[str, torch.Tensor]) -> dict[str, object]:
    """The torch op(s) doing each call's work, as a model written in torch calls them (rope: none of its own)."""
    import torch.nn.functional as F

    q_sdpa = t["qd"].transpose(1, 2).contiguous()  # [batch, heads, 1, head_dim]
    kv_sdpa = t["kd"].transpose(1, 2).contiguous()
    return {
        "linear": lambda: F.linear(t["x"], t["w"]),
        "rmsnorm": lambda: F.rms_norm(t["x"], (HIDDEN,), t["wn"], 1e-5),
        "attention_decode": lambda: F.scaled_dot_product_attention(q_sdpa, kv_sdpa, kv_sdpa, scale=0.125,
                                                                   enable_gqa=True),
        "add_rmsnorm": lambda: F.rms_norm(t["x"] + t["r"], (HIDDEN,), t["wn"], 1e-5),
    }


def gpu_main(args) -> int:
    import json

    from codegen.ops.adapters import call_key

    device = "cuda"
    sync = torch.cuda.synchronize
    with tempfile.TemporaryDirectory() as tmp:  # the kernels' cache lives as long as the run
        root = Path(tmp)
        write_project(root)
        ops = tilegen.load(root, strict=True)
        report = ops.precompile()
        if report.errors:
            print(f"compile failed: {report.errors}", file=sys.stderr)
            return 1
        t = make_inputs(device)
        baselines = torch_equivalents(t)
        rows = []
        with torch.no_grad():
            for name, (user, op, record) in op_calls(ops, t).items():
                user()
                plan = ops._hot[(op, call_key(record))]  # the plan the call just made (benchmark-only peek)

                def launch(plan=plan, record=record):
                    return plan.launch(record)

                row = {"call": name, "kernel": plan.route.kernel,
                       "op_us": per_call_us(user, args.calls, args.repeats, sync),
                       "launch_us": per_call_us(launch, args.calls, args.repeats, sync), "bare_us": None,
                       "exec_us": None, "torch_us": None}
                if op == "gemm":  # the kernel call alone on prepared arguments: TileLang's, and what the ops call
                    backend, route = ops.backend, plan.route
                    jit, _ = backend.cache.get(route.rendered, route.rendered.instance.compile_shape(route.run_shape),
                                               backend.environment, backend.target)
                    out = torch.empty(plan.prepared.out_shape, dtype=torch.bfloat16, device=t["x"].device)
                    for col, kernel in (("bare_us", jit), ("exec_us", plan.kernel)):
                        row[col] = per_call_us(lambda kernel=kernel, out=out: kernel(t["x"], t["w"], out),
                                               args.calls, args.repeats, sync)
                if name in baselines:
                    row["torch_us"] = per_call_us(baselines[name], args.calls, args.repeats, sync)
                row["twin_us"], row["graph_us"] = dispatcher_us(ops, t, name, args.calls, args.repeats, sync)
                rows.append(row)

    def us(v):
        return "-" if v is None else f"{v:.2f}"

    head = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.calls} calls x {args.repeats} repeats, "
            "no grad, wall time per call of a back-to-back loop (host-bound at these shapes)")
    columns = ("| call | kernel | tilegen op us | its launch alone us | TileLang kernel call us | "
               "the executable the ops call us | torch us | its twin through the dispatcher us | "
               f"in a compiled graph us (per call of {CHAIN}) |")
    md = [head, "", columns, "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['call']} | {r['kernel']} | {us(r['op_us'])} | {us(r['launch_us'])} | {us(r['bare_us'])} | "
           f"{us(r['exec_us'])} | {us(r['torch_us'])} | {us(r['twin_us'])} | {us(r['graph_us'])} |" for r in rows]
    print("\n".join(md))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ops_overhead.json").write_text(json.dumps({"header": head, "rows": rows}, indent=1) + "\n",
                                               encoding="utf-8")
        (out / "ops_overhead.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="real kernels on the GPU present (compiled into a temporary cache)")
    ap.add_argument("--calls", type=int, default=None, help="calls per loop (default: 10000 on the CPU, 2000 with --gpu)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="with --gpu: write ops_overhead.json and .md here")
    args = ap.parse_args(argv)
    if args.calls is None:
        args.calls = 2000 if args.gpu else 10000
    return gpu_main(args) if args.gpu else cpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
