#!/usr/bin/env python3
"""One Llama-3-8B decoder layer -- transformers' own LlamaDecoderLayer, random weights -- run as transformers
wrote it, with every projection, both RMSNorms, RoPE and attention routed through this project's tilegen ops
(tilegen.patch_llama_layer), and the same with three fused kernels (patch_llama_layer(fuse=True)): the residual
add after attention fused into post_attention_layernorm (ops.add_rmsnorm), gate_proj + up_proj + SiLU + product in
one gated-MLP kernel (ops.gated_mlp, SwiGLU) and down_proj with the closing residual add in its epilogue
(ops.linear(..., residual=)). In one run:

1. compiles the project's kernels in parallel into examples/llama_layer/.cache/ops (loads them when cached);
2. checks the three layers against an fp32 reference of the same layer (same weights, same inputs) within a modelled
   tolerance, prefill and decode, and three negative controls (one op broken on purpose) that must fail it;
3. shows every op call's route (tuned / spec / bucket / dynamic / fallback) and a dispatch check at odd shapes;
4. times prefill (batch 1 x 2048 tokens) and decode (batch 16 x 1 token over a 4096-position KV cache) for the
   three layers in eager mode, under torch.compile, and replayed as CUDA graphs (eager, and compiled as
   torch.compile(mode="reduce-overhead") runs it), and counts torch.compile's graph
   breaks of the tilegen layers, and times each GEMM of the layers through dispatch against cuBLAS (the fused
   ones against the unfused torch sequence they replace) and the fused layer's attention, norms and RoPE against
   the torch code they replace in transformers' layer;
5. measures the first calls of a fresh process (kernels loaded from the cache, not compiled);
6. prints the tables and writes reports/llama_layer_<device>.json and .md beside this file.

    python3 examples/llama_layer/run.py [--phases prefill,decode] [--no-compile] [--no-graphs]

from the repository root on a GPU machine (torch with CUDA, transformers, tilelang). Exit code 1 if a check
fails or a negative control is not caught.

The tolerance (per output element; `tolerance` below): the bf16 layers are compared with the fp32 reference
  tol = u*(|ref| + |h|) + Z*u*(sqrt(S_ATTN)*rms(a) + sqrt(S_ATTN + S_MLP)*rms(m))
u = 2^-8 (bf16 unit roundoff). The first term bounds the two roundings of the residual stream, which reach the
output unscaled: the output's own, and that of h = x + a, the residual after attention. a = the attention
branch's output, m = the MLP branch's (h, a and m are the reference's, by forward hooks): each bf16 rounding of
an intermediate inside a branch (S_ATTN = 6 in the attention
branch: the normed input, q/k/v, the rope tables and q/k, P before P.V, the attention output, o_proj; S_MLP = 6
in the MLP: the normed input as it reads h, gate/up, SiLU, the product, down_proj) is a relative error of
at most u that the following linear maps carry to the branch output at its own scale; the errors add as a random
walk (sqrt of the count), the MLP's on top of the attention branch's (it reads the residual sum), and Z = 6
standard deviations bound the largest of ~10^7 elements. transformers' own bf16 layer must pass it too (the
model's check); a control must fail it. The fused layer rounds a subset of those intermediates, so the same
bound holds for it: add_rmsnorm rounds the sum and the normed input as the unfused ops do; the gated-MLP kernel
keeps gate/up, the SiLU and the product in fp32 and rounds only the product, where the unfused MLP rounds each of
them; down_proj + residual rounds only the output (down_proj's own rounding is gone, the output's is the first
term). Their products accumulate in fp32 as the plain GEMMs do, which the model does not count apart either.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
try:
    import tilegen
except ImportError:  # run from a checkout without PYTHONPATH: the repository's own package
    sys.path.insert(0, str(REPO))
    import tilegen

import torch

from codegen.ops import stats_table
from codegen.ops.llama import KVCache, call_layer, patch_llama_layer
from codegen.run.bench import Timing


@dataclass(frozen=True, kw_only=True)
class Model:
    """Llama-3-8B's layer sizes."""

    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 14336
    eps: float = 1e-5
    rope_theta: float = 500000.0


@dataclass(frozen=True, kw_only=True)
class Workload:
    phase: str  # prefill | decode
    batch: int
    tokens: int  # new tokens per sequence
    cache: int  # positions of the KV cache after the step (0: no cache)


LLAMA3_8B = Model()
PREFILL = Workload(phase="prefill", batch=1, tokens=2048, cache=0)
DECODE = Workload(phase="decode", batch=16, tokens=1, cache=4096)
U_BF16 = 2.0**-8
Z = 6.0
S_ATTN, S_MLP = 6, 6
SMOKE_MODEL = Model(hidden=512, heads=4, kv_heads=2, head_dim=128, mlp=1024)
SMOKE_WORKLOADS = (Workload(phase="prefill", batch=1, tokens=128, cache=0),
                   Workload(phase="decode", batch=2, tokens=1, cache=256))
DEVICE = "cuda"  # "cpu" in a --smoke run
FUSED_ROW = "tilegen ops, fused (add+RMSNorm, SwiGLU, down+residual)"  # the row of patch_llama_layer(fuse=True)
FUSED_OPS = ("add_rmsnorm", "gated_mlp", "gemm_epilogue")  # the fused layer's fused ops (their routes are shown)
DROPPED_K = 64  # the negative control's dropped K columns of down_proj: one K tile of the prefill GEMM (block_k 64)


# ---- the layer -----------------------------------------------------------------------------------------------

def build_layer(model: Model, *, seed: int, device, dtype=torch.bfloat16):
    """transformers' LlamaDecoderLayer at `model`'s sizes, SDPA attention, weights drawn from `seed`: projections
    N(0, 0.02^2) (the config's initializer_range), RMSNorm weights 1 + N(0, 0.1^2) (not all ones, so a norm that
    drops its weight is seen); and its rotary embedding."""
    from transformers.models.llama import modeling_llama as ml

    config = ml.LlamaConfig(hidden_size=model.hidden, intermediate_size=model.mlp, num_attention_heads=model.heads,
                            num_key_value_heads=model.kv_heads, head_dim=model.head_dim, rms_norm_eps=model.eps,
                            rope_theta=model.rope_theta, max_position_embeddings=8192, hidden_act="silu")
    config._attn_implementation = "sdpa"
    layer = ml.LlamaDecoderLayer(config, layer_idx=0).to(device=device, dtype=dtype).eval()
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(layer.named_parameters()):
            noise = torch.randn(p.shape, generator=g, device=device, dtype=torch.float32)
            p.copy_(1 + 0.1 * noise if "norm" in name else config.initializer_range * noise)
    rotary = ml.LlamaRotaryEmbedding(config=config).to(device)
    return layer, rotary


@dataclass
class Inputs:
    """One workload's inputs: hidden states, positions' (cos, sin) in bf16 and fp32, the earlier K/V of the cache."""

    x: object
    pe: tuple
    pe32: tuple
    past_k: object = None  # [batch, cache - tokens, kv_heads, head_dim]
    past_v: object = None


def make_inputs(model: Model, w: Workload, rotary, *, seed: int, device) -> Inputs:
    g = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(w.batch, w.tokens, model.hidden, generator=g, device=device).to(torch.bfloat16)
    start = max(w.cache - w.tokens, 0)
    pos = torch.arange(start, start + w.tokens, device=device)[None].expand(w.batch, w.tokens)
    inputs = Inputs(x=x, pe=rotary(x, pos), pe32=rotary(x.float(), pos))
    if w.cache:
        shape = (w.batch, w.cache - w.tokens, model.kv_heads, model.head_dim)
        inputs.past_k = torch.randn(shape, generator=g, device=device).to(torch.bfloat16)
        inputs.past_v = torch.randn(shape, generator=g, device=device).to(torch.bfloat16)
    return inputs


def make_cache(model: Model, w: Workload, inputs: Inputs, layout: str, dtype):
    if not w.cache:
        return None
    cache = KVCache(batch=w.batch, kv_heads=model.kv_heads, head_dim=model.head_dim, max_len=w.cache, layout=layout,
                    dtype=dtype, device=inputs.x.device)
    cache.fill(0, inputs.past_k.to(dtype), inputs.past_v.to(dtype))
    return cache


def run_fp32_reference(ref_layer, model: Model, w: Workload, inputs: Inputs):
    """The layer in fp32 (TF32 off): its output, the residual after attention h, and the RMS of the attention and
    MLP branch outputs."""
    from codegen.families.gemm.numerics import full_fp32

    branches = {}
    hooks = [ref_layer.self_attn.register_forward_hook(lambda m, a, out: branches.__setitem__("a", out[0])),
             ref_layer.mlp.register_forward_hook(lambda m, a, out: branches.__setitem__("m", out)),
             ref_layer.post_attention_layernorm.register_forward_pre_hook(lambda m, a: branches.__setitem__("h", a[0]))]
    try:
        with full_fp32(), torch.no_grad():
            out = call_layer(ref_layer, inputs.x.float(), inputs.pe32, make_cache(model, w, inputs, "bhsd", torch.float32))
    finally:
        for h in hooks:
            h.remove()
    rms = {k: float(branches[k].float().square().mean().sqrt()) for k in ("a", "m")}
    return out, branches["h"], rms["a"], rms["m"]


@dataclass(kw_only=True)
class Tolerance:
    u: float
    z: float
    s_attn: int
    s_mlp: int
    rms_attn: float
    rms_mlp: float

    @property
    def floor(self) -> float:
        return self.z * self.u * (math.sqrt(self.s_attn) * self.rms_attn + math.sqrt(self.s_attn + self.s_mlp) * self.rms_mlp)

    def bound(self, ref, h):
        return self.u * (ref.abs() + h.abs()) + self.floor

    def describe(self) -> str:
        return (f"{self.u:.3g}*(|ref| + |h|) + {self.z:g}*{self.u:.3g}*(sqrt({self.s_attn})*{self.rms_attn:.4g} + "
                f"sqrt({self.s_attn + self.s_mlp})*{self.rms_mlp:.4g}) = {self.u:.3g}*(|ref| + |h|) + {self.floor:.4g}")


def tolerance(rms_attn: float, rms_mlp: float) -> Tolerance:
    return Tolerance(u=U_BF16, z=Z, s_attn=S_ATTN, s_mlp=S_MLP, rms_attn=rms_attn, rms_mlp=rms_mlp)


def compare(name: str, out, ref, h, tol: Tolerance) -> dict:
    diff = (out.float() - ref).abs()
    bound = tol.bound(ref, h)
    bad = int((~(diff <= bound)).sum())  # NaN counts
    return {"name": name, "passed": bad == 0, "mismatches": bad, "elements": diff.numel(),
            "max_abs_err": float(diff.nan_to_num(nan=math.inf).max()),
            "max_err_over_tol": float((diff / bound).nan_to_num(nan=math.inf).max()),
            "rms_rel_err": float(diff.square().mean().sqrt() / ref.square().mean().sqrt())}


# ---- negative controls: one op broken on purpose -----------------------------------------------------------

class _Broken:
    """The ops with one of them wrong."""

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        return getattr(self._ops, name)


class WrongWayRope(_Broken):
    """RoPE rotating the other way (sin negated): q and k at the wrong angles."""

    def rope(self, q, k, cos, sin, **tables):
        return self._ops.rope(q, k, cos, -sin, **tables)


class DroppedKTile(_Broken):
    """down_proj missing its last K tile: the last DROPPED_K input columns read as zeros."""

    def __init__(self, ops, k: int):
        super().__init__(ops)
        self._k = k

    def linear(self, x, weight, bias=None, **epilogue):
        if weight.shape[1] == self._k:
            x = x.clone()
            x[..., -DROPPED_K:] = 0
        return self._ops.linear(x, weight, bias, **epilogue)


class SwappedGateUp(_Broken):
    """The fused layer's gated MLP with its two weights swapped: silu(h Wu^T) * (h Wg^T)."""

    def gated_mlp(self, x, w_gate, w_up, *, activation="silu"):
        return self._ops.gated_mlp(x, w_up, w_gate, activation=activation)


# name -> (the broken ops, whether the layer is patched with fuse=True)
CONTROLS = {"rope_wrong_way": (lambda ops, model: WrongWayRope(ops), False),
            "down_proj_k_tile_dropped": (lambda ops, model: DroppedKTile(ops, model.mlp), False),
            "fused_mlp_gate_up_swapped": (lambda ops, model: SwappedGateUp(ops), True)}


# ---- timing -------------------------------------------------------------------------------------------------

def time_ms(fn, iters: int, warmup: int = 3) -> Timing:
    """Per-call times of back-to-back calls (CUDA events): what the GPU waits for the host shows, as a user's loop
    sees it. (On the CPU of a --smoke run: wall-clock.)"""
    for _ in range(warmup):
        fn()
    if DEVICE == "cpu":
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return Timing.of(times)
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return Timing.of([s.elapsed_time(e) for s, e in pairs])


def cuda_graph(fn):
    """fn captured as a CUDA graph (warmed up on a side stream first); its replay."""
    if DEVICE == "cpu":
        raise RuntimeError("no CUDA graphs on the CPU")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


# ---- the run --------------------------------------------------------------------------------------------------

def first_calls(out_path: str, phases: list[str], seed: int) -> int:
    """In a fresh process: load the ops and call the tilegen layer once per phase; what it took, as JSON."""
    from codegen.core.workers import load_tilelang

    t0 = time.perf_counter()
    load_tilelang()  # once per process, before the first kernel: timed on its own, not as that kernel's load
    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    ops = tilegen.load(HERE)
    loaded = time.perf_counter() - t0
    layer, rotary = build_layer(LLAMA3_8B, seed=seed, device=DEVICE)
    fused = patch_llama_layer(copy.deepcopy(layer), ops, fuse=True)
    ours = patch_llama_layer(layer, ops)
    doc = {"tilelang_import_s": imported, "load_s": loaded, "phases": {}}
    for w in (PREFILL, DECODE):
        if w.phase not in phases:
            continue
        inputs = make_inputs(LLAMA3_8B, w, rotary, seed=seed, device=DEVICE)
        for label, module in ((w.phase, ours), (f"{w.phase} fused", fused)):  # the fused layer: its own kernels
            cache = make_cache(LLAMA3_8B, w, inputs, "bshd", torch.bfloat16)
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                call_layer(module, inputs.x, inputs.pe, cache)
            torch.cuda.synchronize()
            doc["phases"][label] = time.perf_counter() - t
    doc["kernels"] = [asdict(e) for e in ops.cache_events()]
    Path(out_path).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"torch": torch.__version__, "cuda": str(torch.version.cuda or torch.version.hip)}
    for pkg in ("transformers", "tilelang"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    # TILEGEN_GIT_COMMIT first: a copy of the tree run elsewhere may carry a stale .git (codegen.run.report's rule)
    out["commit"] = os.environ.get("TILEGEN_GIT_COMMIT", "")
    try:
        out["commit"] = out["commit"] or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                                        text=True, check=False).stdout.strip() or "unknown"
    except OSError:
        out["commit"] = "unknown"
    return out


def _ratio(base: float | None, t: float | None) -> str:
    return f"{base / t:.3f}x" if base and t else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="prefill,decode", help="comma-separated: prefill, decode")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per row (default: 30 prefill, 200 decode)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reports", default=str(HERE / "reports"), help="where the JSON and Markdown go")
    ap.add_argument("--first-calls", metavar="JSON", help=argparse.SUPPRESS)  # the fresh process of step 5
    # this script's own code at small sizes on the CPU, with the ops tilegen.load gives there (tests: kernels that
    # compute with torch); nothing it prints is a measurement
    ap.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    global DEVICE
    DEVICE = "cpu" if args.smoke else "cuda"
    if not args.smoke and not torch.cuda.is_available():
        print(f"run.py needs a GPU: torch {torch.__version__} sees none", file=sys.stderr)
        return 2
    if args.first_calls:
        return first_calls(args.first_calls, phases, args.seed)
    model, workloads = (SMOKE_MODEL, SMOKE_WORKLOADS) if args.smoke else (LLAMA3_8B, (PREFILL, DECODE))
    workloads = [w for w in workloads if w.phase in phases]
    report: dict = {"command": "python3 examples/llama_layer/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    "device": "cpu (smoke run)" if args.smoke else torch.cuda.get_device_name(), **versions(),
                    "model": asdict(model),
                    "workloads": [asdict(w) for w in workloads]}
    print(f"device {report['device']}, torch {report['torch']}, transformers {report['transformers']}, "
          f"tilelang {report['tilelang']}")

    # 1. the kernels
    t0 = time.perf_counter()
    ops = tilegen.load(HERE)
    pre = ops.precompile()
    report["compile"] = {"kernels": pre.kernels, "already_cached": pre.cached, "seconds": pre.seconds,
                         "errors": {f"{u} {s}": e for (u, s), e in pre.errors.items()}}
    print(f"kernels: {pre.kernels} (configuration, compile shape), {pre.cached} already in the cache, compiled the "
          f"rest in {pre.seconds:.1f} s; load {time.perf_counter() - t0 - pre.seconds:.1f} s")
    for (uri, shape), error in sorted(pre.errors.items()):
        print(f"  compile failed: {uri} {shape}: {error}")

    # 2. correctness
    layer, rotary = build_layer(model, seed=args.seed, device=DEVICE)
    ours = patch_llama_layer(copy.deepcopy(layer), ops)
    fused = patch_llama_layer(copy.deepcopy(layer), ops, fuse=True)
    ref_layer = copy.deepcopy(layer).float()
    broken = {name: patch_llama_layer(copy.deepcopy(layer), make(ops, model), fuse=fuse)
              for name, (make, fuse) in CONTROLS.items()}
    inputs = {w.phase: make_inputs(model, w, rotary, seed=args.seed, device=DEVICE) for w in workloads}
    checks, ok = [], True
    ops.reset_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilegen.FallbackWarning)
        for w in workloads:
            inp = inputs[w.phase]
            ref, h, rms_a, rms_m = run_fp32_reference(ref_layer, model, w, inp)
            tol = tolerance(rms_a, rms_m)
            with torch.no_grad():
                hf = call_layer(layer, inp.x, inp.pe, make_cache(model, w, inp, "bhsd", torch.bfloat16))
                tg = call_layer(ours, inp.x, inp.pe, make_cache(model, w, inp, "bshd", torch.bfloat16))
                routes = ops.stats()
                ops.reset_stats()
                tf = call_layer(fused, inp.x, inp.pe, make_cache(model, w, inp, "bshd", torch.bfloat16))
                routes_fused = ops.stats()
                rows = [compare("transformers (bf16)", hf, ref, h, tol), compare("tilegen (bf16)", tg, ref, h, tol),
                        compare("tilegen fused (bf16)", tf, ref, h, tol)]
                for name, bad_layer in broken.items():
                    out = call_layer(bad_layer, inp.x, inp.pe, make_cache(model, w, inp, "bshd", torch.bfloat16))
                    rows.append(compare(f"control: {name}", out, ref, h, tol) | {"control": True})
            for r in rows:
                r["phase"] = w.phase
                r["caught"] = not r["passed"] if r.get("control") else None
                ok &= r["caught"] if r.get("control") else r["passed"]
            checks += rows
            report.setdefault("tolerance", {})[w.phase] = tol.describe()
            print(f"\n{w.phase}: tolerance {tol.describe()}")
            for r in rows:
                verdict = ("caught" if r["caught"] else "NOT CAUGHT") if r.get("control") else \
                    ("pass" if r["passed"] else "FAIL")
                print(f"  {r['name']:<36} {verdict:<10} max |err|/tol {r['max_err_over_tol']:.3f}, "
                      f"max |err| {r['max_abs_err']:.4g}, rms rel err {r['rms_rel_err']:.3g}, "
                      f"{r['mismatches']} of {r['elements']} over")
            ops.reset_stats()
            report.setdefault("routes", {})[w.phase] = [asdict(s) for s in routes]
            report.setdefault("routes_fused", {})[w.phase] = [asdict(s) for s in routes_fused]
            print(f"\nroutes of the tilegen layer ({w.phase}, one call):\n{stats_table(routes)}")
            fused_rows = [s for s in routes_fused if s.op in FUSED_OPS]
            print(f"routes of the fused layer's fused ops ({w.phase}):\n{stats_table(fused_rows)}")
    report["checks"] = checks
    report["fallback_warnings"] = sorted({str(c.message) for c in caught if c.category is tilegen.FallbackWarning})

    # 3. the dispatch at other shapes: a dynamic-M token count, an M bucket, a shape no kernel serves
    from codegen.families.gemm.numerics import Tolerance as GemmTolerance
    from codegen.families.gemm.numerics import full_fp32

    g = torch.Generator(device=DEVICE).manual_seed(args.seed + 2)
    dispatch = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilegen.FallbackWarning)
        for label, m, weight in (("q_proj at 300 tokens", 300, layer.self_attn.q_proj.weight),
                                 ("gate_proj at 8 tokens", 8, layer.mlp.gate_proj.weight),
                                 ("gate_proj at 100 tokens", 100, layer.mlp.gate_proj.weight)):
            x = torch.randn(m, model.hidden, generator=g, device=DEVICE).to(torch.bfloat16)
            with torch.no_grad():
                y = ops.linear(x, weight)
            with full_fp32():
                ref, mag = x.float() @ weight.float().t(), x.float().abs() @ weight.float().abs().t()
            bound = GemmTolerance(u_out=U_BF16, eta_out=2.0**-134, u_acc=2.0**-24, u_prod=0.0, k=model.hidden).bound(ref, mag)
            good = bool(((y.float() - ref).abs() <= bound).all())
            stat = next(s for s in ops.stats() if s.shape == (m, weight.shape[0], model.hidden))
            dispatch.append({"call": label, "route": stat.route, "kernel": stat.kernel, "why": stat.detail,
                             "within_gemm_tolerance": good})
            ok &= good
            ops.reset_stats()
    report["dispatch_check"] = dispatch
    print("\ndispatch at other shapes:")
    for d in dispatch:
        print(f"  {d['call']:<26} {d['route']:<9} {d['kernel']}  ({d['why']}); "
              f"{'within' if d['within_gemm_tolerance'] else 'OUTSIDE'} the GEMM tolerance")
    for c in caught:
        print(f"  warning: {c.message}")

    # 4. timing
    timings, graph_breaks = [], {}
    for w in workloads:
        iters = args.iters or (30 if w.phase == "prefill" else 200)
        inp = inputs[w.phase]
        base: dict[str, float] = {}
        for who, module, layout in (("transformers", layer, "bhsd"), ("tilegen", ours, "bshd"),
                                    (FUSED_ROW, fused, "bshd")):
            cache = make_cache(model, w, inp, layout, torch.bfloat16)

            def call(mod=module, cache=cache, inp=inp):
                with torch.no_grad():
                    return call_layer(mod, inp.x, inp.pe, cache)

            modes, compiled_call = [("eager", call)], None
            if not args.no_compile:
                try:
                    with torch.no_grad():
                        explained = torch._dynamo.explain(module)(inp.x, **layer_kwargs(module, inp, cache))
                    graph_breaks[f"{w.phase} {who}"] = explained.graph_break_count
                except Exception as exc:  # noqa: BLE001 - reported, the timing goes on
                    graph_breaks[f"{w.phase} {who}"] = f"explain failed: {type(exc).__name__}: {exc}"[:300]
                torch._dynamo.reset()
                compiled = torch.compile(module, dynamic=False)
                compiled_call = lambda c=compiled, cache=cache, inp=inp: _call_no_grad(c, inp, cache)
                modes.append(("torch.compile", compiled_call))
            if not args.no_graphs:
                modes.append(("eager + CUDA graph", lambda call=call: cuda_graph(call)))
                if compiled_call is not None:  # what torch.compile(mode="reduce-overhead") does: the compiled graph replayed
                    modes.append(("torch.compile + CUDA graph", lambda f=compiled_call: cuda_graph(f)))
            for mode, fn in modes:
                row = {"phase": w.phase, "layer": who, "mode": mode}
                try:
                    if mode.endswith("CUDA graph"):
                        fn = fn()  # captured here, so that a capture that fails is this row's error
                    t = time_ms(fn, iters)
                    row.update(median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms, iters=t.iters)
                    if who == "transformers":
                        base[mode] = t.median_ms
                except Exception as exc:  # noqa: BLE001 - a mode that fails is a row that says so
                    row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                timings.append(row)
        for row in timings:
            if row["phase"] == w.phase and "median_ms" in row:
                row["vs_transformers_eager"] = _ratio(base.get("eager"), row["median_ms"])
                row["vs_transformers_compile"] = _ratio(base.get("torch.compile"), row["median_ms"])
                row["vs_transformers_same_mode"] = _ratio(base.get(row["mode"]), row["median_ms"])
    report["timings"] = timings
    report["graph_breaks"] = graph_breaks
    report["routes_while_timing"] = [asdict(s) for s in ops.stats()]
    table = _timing_table(timings)
    print("\n" + "\n".join(table))
    if graph_breaks:
        print("torch.compile graph breaks: " + ", ".join(f"{k} {v}" for k, v in graph_breaks.items()))

    # 4b. each GEMM of the layer through dispatch against cuBLAS (F.linear), at the layer's shapes
    gemms = []
    for w in workloads:
        for r in report["routes"][w.phase]:
            if r["op"] != "gemm":
                continue
            m, n, k = r["shape"]
            x = torch.randn(m, k, generator=g, device=DEVICE).to(torch.bfloat16)
            weight = (0.02 * torch.randn(n, k, generator=g, device=DEVICE)).to(torch.bfloat16)
            ours_fn = lambda x=x, weight=weight: ops.linear(x, weight)
            cublas_fn = lambda x=x, weight=weight: torch.nn.functional.linear(x, weight)
            with torch.no_grad():
                ours_t, cublas_t = time_ms(ours_fn, 100), time_ms(cublas_fn, 100)
                row = {"phase": w.phase, "shape": [m, n, k], "calls_in_layer": r["calls"], "route": r["route"],
                       "kernel": r["kernel"], "tilegen_ms": ours_t.median_ms, "cublas_ms": cublas_t.median_ms,
                       "vs_cublas": cublas_t.median_ms / ours_t.median_ms}
                if DEVICE != "cpu":  # one call captured as a CUDA graph: its replays run no Python (the GPU's time)
                    ours_g, cublas_g = time_ms(cuda_graph(ours_fn), 100), time_ms(cuda_graph(cublas_fn), 100)
                    row |= {"tilegen_graph_ms": ours_g.median_ms, "cublas_graph_ms": cublas_g.median_ms,
                            "vs_cublas_graph": cublas_g.median_ms / ours_g.median_ms}
            gemms.append(row)
    report["gemms"] = gemms
    gemm_table = [("| phase | m x n x k | calls | route | kernel | tilegen ms | cuBLAS ms | vs cuBLAS | tilegen graph ms "
                   "| cuBLAS graph ms | vs cuBLAS, graphs |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    gemm_table += [f"| {r['phase']} | {'x'.join(map(str, r['shape']))} | {r['calls_in_layer']} | {r['route']} | "
                   f"{r['kernel']} | {r['tilegen_ms']:.4f} | {r['cublas_ms']:.4f} | {r['vs_cublas']:.3f}x | "
                   + (f"{r['tilegen_graph_ms']:.4f} | {r['cublas_graph_ms']:.4f} | {r['vs_cublas_graph']:.3f}x |"
                      if "tilegen_graph_ms" in r else "- | - | - |") for r in gemms]
    print("\nthe layer's GEMMs through dispatch, back-to-back calls (eager) and one call replayed as a CUDA graph:\n"
          + "\n".join(gemm_table))
    table += ["", ("The layer's GEMMs through dispatch (median): back-to-back eager calls, which pay the host's cost "
                   "per call, and one call captured as a CUDA graph and replayed, which does not (the kernels' time):"),
              "", *gemm_table]

    # 4c. the fused layer's fused GEMMs against the unfused torch sequences they replace (cuBLAS and eager torch)
    fused_gemms = []
    for w in workloads:
        for r in report["routes_fused"][w.phase]:
            if r["op"] not in ("gated_mlp", "gemm_epilogue"):
                continue
            m, n, k = r["shape"]
            x = torch.randn(m, k, generator=g, device=DEVICE).to(torch.bfloat16)
            wa = (0.02 * torch.randn(n, k, generator=g, device=DEVICE)).to(torch.bfloat16)
            if r["op"] == "gated_mlp":
                wb = (0.02 * torch.randn(n, k, generator=g, device=DEVICE)).to(torch.bfloat16)
                what = "silu(x Wg^T) * (x Wu^T)"

                def ours_fn(x=x, wa=wa, wb=wb):
                    return ops.gated_mlp(x, wa, wb)

                def torch_fn(x=x, wa=wa, wb=wb):
                    return torch.nn.functional.silu(torch.nn.functional.linear(x, wa)) * torch.nn.functional.linear(x, wb)
            else:
                res = torch.randn(m, n, generator=g, device=DEVICE).to(torch.bfloat16)
                what = "x W^T + residual"

                def ours_fn(x=x, wa=wa, res=res):
                    return ops.linear(x, wa, residual=res)

                def torch_fn(x=x, wa=wa, res=res):
                    return torch.nn.functional.linear(x, wa) + res
            with torch.no_grad():
                ours_t, torch_t = time_ms(ours_fn, 100), time_ms(torch_fn, 100)
            fused_gemms.append({"phase": w.phase, "op": r["op"], "computes": what, "shape": [m, n, k],
                                "route": r["route"], "kernel": r["kernel"], "tilegen_ms": ours_t.median_ms,
                                "torch_ms": torch_t.median_ms, "vs_torch": torch_t.median_ms / ours_t.median_ms})
    report["fused_gemms"] = fused_gemms
    fused_table = ["| phase | op | computes | m x n x k | route | kernel | tilegen ms | torch eager ms | vs torch |",
                   "|---|---|---|---|---|---|---|---|---|"]
    fused_table += [f"| {r['phase']} | {r['op']} | {r['computes']} | {'x'.join(map(str, r['shape']))} | {r['route']} | "
                    f"{r['kernel']} | {r['tilegen_ms']:.4f} | {r['torch_ms']:.4f} | {r['vs_torch']:.3f}x |"
                    for r in fused_gemms]
    print("\nthe fused layer's fused GEMMs against the unfused torch sequence (cuBLAS + eager element-wise ops):\n"
          + "\n".join(fused_table))
    table += ["", ("The fused layer's fused GEMMs against the unfused torch sequence (cuBLAS GEMMs and eager "
                   "element-wise ops; back-to-back calls, median):"), "", *fused_table]

    # 4d. the layer's other ops (attention, the norms, RoPE) through dispatch, against the torch code they replace
    try:
        others = other_ops(ops, model, workloads, report["routes_fused"], g)
    except Exception as exc:  # noqa: BLE001 - a failed breakdown is reported; the layer's own figures stand
        others = []
        report["other_ops_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    report["other_ops"] = others
    other_table = [("| phase | op | shape | route | kernel | tilegen ms | torch ms | vs torch | tilegen graph ms "
                    "| torch graph ms | vs torch, graphs |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    other_table += [f"| {r['phase']} | {r['op']} | {'x'.join(map(str, r['shape']))} | {r['route']} | {r['kernel']} | "
                    f"{r['tilegen_ms']:.4f} | {r['torch_ms']:.4f} | {r['vs_torch']:.3f}x | "
                    + (f"{r['tilegen_graph_ms']:.4f} | {r['torch_graph_ms']:.4f} | {r['vs_torch_graph']:.3f}x |"
                       if "tilegen_graph_ms" in r else "- | - | - |") for r in others]
    print("\nthe fused layer's other ops through dispatch against the torch code they replace:\n"
          + "\n".join(other_table) + (f"\n({report['other_ops_error']})" if "other_ops_error" in report else ""))
    table += ["", ("The fused layer's other ops through dispatch against the torch code they replace (SDPA as "
                   "transformers calls it, its RMSNorm and RoPE as it writes them; median of back-to-back calls, "
                   "and of one call replayed as a CUDA graph):"), "", *other_table]
    if "other_ops_error" in report:
        table += ["", f"Not measured: {report['other_ops_error']}"]

    # 5. a fresh process: the first calls load the kernels from the cache
    if not args.smoke:
        report["first_calls"] = fresh_process(ops, phases, args.seed)

    report["passed"] = bool(ok)
    _write(report, table, Path(args.reports))
    print(f"\n{'PASS' if ok else 'FAIL'}: the checks {'agree' if ok else 'do not all agree'} with the tolerance model")
    return 0 if ok else 1


OTHER_OPS = ("attention", "attention_decode", "rmsnorm", "add_rmsnorm", "rope")


def other_ops(ops, model: Model, workloads, routes: dict, g) -> list[dict]:
    """Each attention, norm and RoPE route of the fused layer, timed through dispatch beside the torch code it
    replaces in transformers' layer: SDPA (GQA, causal in prefill), its LlamaRMSNorm (after the residual add for
    add_rmsnorm) and apply_rotary_pos_emb; back-to-back calls and, on a GPU, one call replayed as a
    CUDA graph."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    F = torch.nn.functional
    bf16, d, eps, scale = torch.bfloat16, model.head_dim, model.eps, model.head_dim ** -0.5
    rows = []
    for w in workloads:
        for r in routes[w.phase]:
            if r["op"] not in OTHER_OPS:
                continue
            shape = tuple(r["shape"])

            def rand(*dims):
                return torch.randn(*dims, generator=g, device=DEVICE).to(bf16)

            if r["op"] in ("attention", "attention_decode"):
                b, h, kvh, sq, skv = shape
                q, k, v = rand(b, sq, h, d), rand(b, skv, kvh, d), rand(b, skv, kvh, d)
                qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # transformers' [batch, heads, seq, d]
                causal = r["op"] == "attention" and sq > 1
                call = ops.attention if r["op"] == "attention" else ops.attention_decode

                def ours(q=q, k=k, v=v, call=call, causal=causal):
                    return call(q, k, v, causal=causal, scale=scale)

                def theirs(qt=qt, kt=kt, vt=vt, causal=causal):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale, enable_gqa=True)
            elif r["op"] in ("rmsnorm", "add_rmsnorm"):
                rows_, cols = shape
                x, res, weight = rand(rows_, cols), rand(rows_, cols), (1 + 0.1 * rand(cols).float()).to(bf16)
                norm = LlamaRMSNorm(cols, eps=eps).to(device=DEVICE, dtype=bf16)
                norm.weight.data.copy_(weight)
                if r["op"] == "rmsnorm":
                    def ours(x=x, weight=weight):
                        return ops.rmsnorm(x, weight, eps)

                    def theirs(x=x, norm=norm):
                        return norm(x)
                else:
                    def ours(x=x, res=res, weight=weight):
                        return ops.add_rmsnorm(x, res, weight, eps)

                    def theirs(x=x, res=res, norm=norm):
                        s = x + res
                        return norm(s), s
            else:  # rope, on transformers' full tables ([tokens, head_dim], each angle twice)
                t, h, kvh = shape
                q, k = rand(t, h, d), rand(t, kvh, d)
                angles = torch.rand(t, d // 2, generator=g, device=DEVICE) * 6.28
                cos, sin = (torch.cat((f(angles), f(angles)), dim=-1).to(bf16) for f in (torch.cos, torch.sin))
                tables = "full" if "tables=full" in r["want"] else "half"
                cos_k, sin_k = (cos, sin) if tables == "full" else (cos[:, : d // 2].float(), sin[:, : d // 2].float())

                def ours(q=q, k=k, cos_k=cos_k, sin_k=sin_k, tables=tables):
                    return ops.rope(q, k, cos_k, sin_k, tables=tables)

                def theirs(q=q, k=k, cos=cos, sin=sin):  # [tokens, heads, d]: cos, sin unsqueezed at dim 1
                    return apply_rotary_pos_emb(q, k, cos, sin)
            with torch.no_grad():
                ours_t, theirs_t = time_ms(ours, 50), time_ms(theirs, 50)
                row = {"phase": w.phase, "op": r["op"], "shape": list(shape), "route": r["route"], "kernel": r["kernel"],
                       "tilegen_ms": ours_t.median_ms, "torch_ms": theirs_t.median_ms,
                       "vs_torch": theirs_t.median_ms / ours_t.median_ms}
                if DEVICE != "cpu":
                    ours_g, theirs_g = time_ms(cuda_graph(ours), 50), time_ms(cuda_graph(theirs), 50)
                    row |= {"tilegen_graph_ms": ours_g.median_ms, "torch_graph_ms": theirs_g.median_ms,
                            "vs_torch_graph": theirs_g.median_ms / ours_g.median_ms}
            rows.append(row)
    return rows


def layer_kwargs(module, inp: Inputs, cache) -> dict:
    """The keyword arguments call_layer passes (for torch._dynamo.explain, which traces the module itself)."""
    from codegen.ops.llama import cache_kwarg

    kwargs = {"position_embeddings": inp.pe, "attention_mask": None}
    if cache is not None:
        kwargs |= {cache_kwarg(module): cache, "use_cache": True}
    return kwargs


def fresh_process(ops, phases: list[str], seed: int) -> dict:
    """This script's --first-calls in a new process: what its first calls took, and whether every kernel came
    from the cache; beside it each kernel's cold compile time (from its cache entry)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "first.json"
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--first-calls", str(out),
                               "--phases", ",".join(phases), "--seed", str(seed)],
                              capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0 or not out.is_file():
            first = {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
            print(f"\nfresh process failed: {first['error']}")
            return first
        first = json.loads(out.read_text(encoding="utf-8"))
    loads = first["kernels"]
    first["all_from_cache"] = all(k["hit"] for k in loads)
    first["slowest_load_s"] = max((k["seconds"] for k in loads), default=0.0)
    cold = first["cold_compile_s"] = _compile_seconds(ops, loads)
    print(f"\nfresh process: TileLang imported in {first['tilelang_import_s']:.2f} s; {len(loads)} kernels, all loaded "
          f"from the cache: {first['all_from_cache']}; slowest load {first['slowest_load_s']:.2f} s; first call "
          + ", ".join(f"{p} {t:.2f} s" for p, t in first["phases"].items())
          + f"; their cold compiles took {min(cold.values(), default=0):.1f}-{max(cold.values(), default=0):.1f} s each")
    return first


def _call_no_grad(module, inp: Inputs, cache):
    with torch.no_grad():
        return call_layer(module, inp.x, inp.pe, cache)


def _compile_seconds(ops, loads: list[dict]) -> dict[str, float]:
    """Each kernel's cold compile time, from its cache entry (whichever process compiled it)."""
    from codegen.ops.cache import compile_seconds

    cache = getattr(ops.backend, "cache", None)
    out = {}
    for k in loads:
        s = compile_seconds(cache, k["key"]) if cache is not None else None
        if s is not None:
            out[f"{k['uri']} {'x'.join(map(str, k['shape']))}"] = s
    return out


def _timing_table(rows: list[dict]) -> list[str]:
    lines = ["| phase | layer | mode | median ms | p10-p90 ms | vs transformers eager | vs transformers compile |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "median_ms" in r:
            lines.append(f"| {r['phase']} | {r['layer']} | {r['mode']} | {r['median_ms']:.4f} | "
                         f"{r['p10_ms']:.4f}-{r['p90_ms']:.4f} | {r['vs_transformers_eager']} | "
                         f"{r['vs_transformers_compile']} |")
        else:
            lines.append(f"| {r['phase']} | {r['layer']} | {r['mode']} | failed: {r['error']} | | | |")
    return lines


def _write(report: dict, table: list[str], folder: Path) -> None:
    from codegen.generate.lockfile import device_slug

    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"llama_layer_{device_slug(report['device'])}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    md = [f"# Llama-3-8B decoder layer on tilegen ops: {report['device']}", "",
          (f"`{report['command']}` at commit {report['commit']}; torch {report['torch']} (CUDA {report['cuda']}), "
           f"transformers {report['transformers']}, tilelang {report['tilelang']}."), "", "## Agreement", ""]
    md += [f"- {p}: tolerance {t}" for p, t in report.get("tolerance", {}).items()]
    md += ["", "| phase | output | verdict | max err/tol | max abs err | rms rel err |", "|---|---|---|---|---|---|"]
    for r in report["checks"]:
        verdict = ("caught" if r["caught"] else "NOT CAUGHT") if r.get("control") else ("pass" if r["passed"] else "FAIL")
        md.append(f"| {r['phase']} | {r['name']} | {verdict} | {r['max_err_over_tol']:.3f} | {r['max_abs_err']:.4g} | "
                  f"{r['rms_rel_err']:.3g} |")
    md += ["", "## Time", "", *table, ""]
    if report.get("graph_breaks"):
        md.append("torch.compile graph breaks: " + ", ".join(f"{k} {v}" for k, v in report["graph_breaks"].items()))
    first = report.get("first_calls") or {}
    if first.get("kernels"):
        loads = sorted(k["seconds"] for k in first["kernels"])
        md += ["", (f"A fresh process (kernels from the cache: {first['all_from_cache']}): "
                    + (f"TileLang imported in {first['tilelang_import_s']:.2f} s once; " if "tilelang_import_s" in first else "")
                    + f"{len(loads)} kernel loads of {loads[0]:.3f}-{loads[-1]:.3f} s each; first call of each layer "
                    + ", ".join(f"{p} {t:.2f} s" for p, t in first["phases"].items()) + ".")]
    for phase, rows in report.get("routes", {}).items():
        md += ["", f"## Routes: {phase}", "", "| op | want | shape | route | kernel | calls | why |",
               "|---|---|---|---|---|---|---|"]
        md += [f"| {r['op']} | {r['want']} | {'x'.join(map(str, r['shape']))} | {r['route']} | {r['kernel']} | "
               f"{r['calls']} | {r['detail']} |" for r in rows]
    for phase, rows in report.get("routes_fused", {}).items():
        md += ["", f"## Routes of the fused layer's fused ops: {phase}", "", "| op | want | shape | route | kernel | calls | why |",
               "|---|---|---|---|---|---|---|"]
        md += [f"| {r['op']} | {r['want']} | {'x'.join(map(str, r['shape']))} | {r['route']} | {r['kernel']} | "
               f"{r['calls']} | {r['detail']} |" for r in rows if r["op"] in FUSED_OPS]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print(f"wrote {stem.with_suffix('.json')} and .md")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
