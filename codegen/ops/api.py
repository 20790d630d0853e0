"""`load(project_dir)` -> `Ops`: the project's kernels as callables on torch tensors, dispatched per shape.

Each callable is a thin wrapper over its custom op (codegen.ops.library); the custom op's implementation is
`Ops.run_op`: check the inputs (codegen.ops.adapters), find the route (codegen.ops.dispatch.resolve, once per
(want, shape)), count it, then launch the kernel (compiled or loaded once per configuration and compile
shape, codegen.ops.cache) or run the torch fallback -- with a FallbackWarning once per shape, or a
NoKernelError in strict mode.

The per-call cost is what decode pays on the host for every op, so the checks and the route are worked out once
per call key -- each tensor's sizes, strides, dtype and device and the scalar arguments (adapters.call_key),
everything the checks read -- and a later call of the same key is a dict lookup, a counter increment and the
launch. A call of a new key is checked in full, and refused before anything runs if it must be.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from codegen.core.columns import Column, markdown_table
from codegen.core.hardware import Target
from codegen.generate.render import RenderedFile
from codegen.ops import library
from codegen.ops.adapters import (
    ADAPTERS,
    AttentionArgs,
    Ctx,
    GatedArgs,
    GemmArgs,
    GemmEpilogueArgs,
    RopeArgs,
    RowArgs,
    SoftmaxArgs,
    Want,
    call_key,
    mask_name,
)
from codegen.ops.cache import CacheEvent, OpsCache, PrecompileReport, local_environment, precompile
from codegen.ops.dispatch import Candidate, Route, catalog, resolve
from codegen.ops.errors import FallbackWarning, NoKernelError, OpsError, OpsInputError


class Backend(Protocol):
    """Compiles (or loads) kernels for the device the ops run on."""

    device_type: str  # torch's device type of the tensors the kernels take ("cuda" for CUDA and ROCm builds)

    def get(self, rendered: RenderedFile, compile_shape: tuple) -> tuple[object, CacheEvent]: ...

    def precompile(self, jobs: list[tuple[RenderedFile, tuple]], workers: int) -> PrecompileReport: ...


class TileLangBackend:
    """The GPU present: TileLang kernels cached under the project (codegen.ops.cache)."""

    device_type = "cuda"

    def __init__(self, project_root: Path, target: Target, gpu):
        self.target = target
        self.cache = OpsCache.of_project(project_root)
        self.environment = local_environment(target, gpu)

    def get(self, rendered: RenderedFile, compile_shape: tuple) -> tuple[object, CacheEvent]:
        kernel, event = self.cache.get(rendered, compile_shape, self.environment, self.target)
        return direct_call(kernel), event

    def precompile(self, jobs, workers: int) -> PrecompileReport:
        return precompile(self.cache, jobs, self.environment, self.target, workers=workers)


def direct_call(kernel):
    """What the ops call for a compiled TileLang kernel: its TVM-FFI executable where TileLang's Python wrapper
    around it does nothing the ops need -- a kernel of TileLang's tvm_ffi backend that allocates no output (the
    ops pass every output), for which the wrapper only lists the arguments again before calling the executable
    (which checks their count, shapes, dtypes and devices itself). Any other kernel is called as TileLang gave it."""
    adapter = getattr(kernel, "adapter", None)
    if type(adapter).__name__ != "TVMFFIKernelAdapter" or getattr(adapter, "result_idx", None):
        return kernel
    if getattr(adapter, "_ffi_callee_allocated_output_abi", False):
        return kernel
    get = getattr(adapter, "_get_executable", None)
    return kernel if get is None else get()


@dataclass(frozen=True, kw_only=True)
class StatRow:
    """Calls of one (op, want, shape) by one route."""

    op: str
    want: str  # the op's parameters (layout, dtypes, eps, ...)
    shape: tuple
    route: str  # tuned | spec | bucket | dynamic | fallback
    kernel: str  # the kernel's name, or "torch"
    spec: str
    detail: str
    calls: int


@dataclass(kw_only=True)
class _Plan:
    """What one (op, want, shape) runs: its route, the kernel and its launch (None: the fallback), its calls."""

    op: str
    route: Route
    shape: tuple
    run: object  # the adapter's run (kernel, prepared, args, shape, run_shape) -> outputs
    fallback: object  # the adapter's fallback (ctx, args) -> outputs
    kernel: object = None
    prepared: object = None  # codegen.ops.adapters.Prepared
    launch: object = None  # args -> outputs: the adapter's launcher of the kernel (None: the fallback)
    calls: int = 0
    warned: bool = False


STATS_COLUMNS = (
    Column(header="op", value=lambda r: r.op, csv="op"),
    Column(header="want", value=lambda r: r.want, csv="want"),
    Column(header="shape", value=lambda r: "x".join(map(str, r.shape)), csv="shape"),
    Column(header="route", value=lambda r: r.route, csv="route"),
    Column(header="kernel", value=lambda r: r.kernel, csv="kernel"),
    Column(header="calls", value=lambda r: r.calls, csv="calls", justify="right"),
    Column(header="why", value=lambda r: r.detail, csv="detail"),
)


def stats_table(rows: list[StatRow]) -> str:
    """Ops.stats() as a Markdown table (one column definition: codegen.core.columns)."""
    return "\n".join(markdown_table(STATS_COLUMNS, rows))


class Ops:
    """The kernels of one project for one device. Build it with `tilegen.load`."""

    def __init__(self, *, files: list[RenderedFile], target: Target, device_name: str, backend: Backend,
                 strict: bool = False, project_root: Path | None = None,
                 tuned_ms: dict[tuple[str, tuple[int, ...]], float] | None = None):
        self.target = target
        self.device_name = device_name
        self.strict = strict
        self.project_root = project_root
        self.backend = backend
        self._ctx = Ctx(target=target, device_type=backend.device_type)
        self._catalog = catalog(files, target, tuned_ms)
        self._routes: dict[tuple[Want, tuple], Route] = {}
        self._plans: dict[tuple[str, Want, tuple], _Plan] = {}  # what each (op, want, shape) runs, and its count
        self._hot: dict[tuple, _Plan] = {}  # (op, call key) -> its plan: the calls already checked
        self._kernels: dict[tuple[str, tuple], object] = {}
        self._events: list[CacheEvent] = []
        self._failed: dict[tuple[str, tuple], str] = {}  # (uri, compile shape) -> why its compile failed
        self.handle = library.register(self)

    # ---- the ops ---------------------------------------------------------------------------------------------
    def linear(self, x, weight, bias=None, *, scale: float | None = None, activation: str | None = None,
               residual=None, beta: float = 1.0):
        """nn.functional.linear's y = x @ weight^T (+ bias), x [..., in], weight [out, in]: a GEMM of layout nt over
        x's leading dimensions as M. With a bias, scale, activation or residual ([..., out], the output's shape and
        dtype), the fused GEMM of exactly those epilogue ops, in the kernels' fixed order and in fp32:
        y = act(scale * (x @ weight^T) + bias) + beta * residual (gemm_epilogue); without any, the plain GEMM."""
        op = "linear"
        _check_rows(op, "x", x)
        fused = bias is not None or scale is not None or activation is not None or residual is not None
        if not fused and beta != 1.0:
            raise OpsInputError("tilegen.linear: beta scales the residual: pass residual too")
        flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        if not fused:
            y = self.gemm(flat, weight, layout="nt")
        else:
            r = residual
            if isinstance(r, torch.Tensor) and x.dim() != 2:
                out_shape = (*x.shape[:-1], weight.shape[0])
                if tuple(r.shape) != out_shape:
                    raise OpsInputError(f"tilegen.linear: residual is {'x'.join(map(str, r.shape))}; the output is "
                                        f"{'x'.join(map(str, out_shape))}")
                _check_rows(op, "residual", r)
                r = r.reshape(-1, r.shape[-1])
            y = self.gemm(flat, weight, layout="nt", bias=bias, scale=scale, activation=activation, residual=r, beta=beta)
        return y if x.dim() == 2 else y.view(*x.shape[:-1], weight.shape[0])

    def gemm(self, a, b, *, layout: str = "nn", out_dtype=None, precision: str | None = None, bias=None,
             scale: float | None = None, activation: str | None = None, residual=None, beta: float = 1.0):
        """C = op(A) @ op(B), A and B stored as `layout` says (t: transposed: A as K x M, B as N x K; nt is
        nn.Linear's); out_dtype: the output's dtype (default: the inputs'; required for fp8 inputs); precision:
        fp32 inputs only, ieee (default), tf32 or 3xtf32. With epilogue ops -- bias [N] (its own dtype), scale,
        activation (relu, gelu_tanh, gelu_erf, silu), residual [M, N] (C's dtype) times beta -- C = act(scale * AB +
        bias) + beta * residual in fp32, one rounding, served only by the kernels of exactly those ops."""
        if not isinstance(a, torch.Tensor):
            raise OpsInputError(f"tilegen.gemm: a must be a torch.Tensor, not {type(a).__name__}")
        if out_dtype is None:
            if a.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
                raise OpsInputError("tilegen.gemm: fp8 inputs need out_dtype (the kernels write fp16, bf16 or fp32)")
            out_dtype = a.dtype
        if precision is None:
            precision = "ieee" if a.dtype == torch.float32 else ""
        if bias is not None or scale is not None or activation is not None or residual is not None or beta != 1.0:
            scale = None if scale is None else _number("gemm", "scale", scale)
            beta = _number("gemm", "beta", beta)
            activation = "" if activation is None else activation
            if _direct(a, b, bias, residual):
                return self.run_op("gemm_epilogue", GemmEpilogueArgs(a, b, layout, out_dtype, precision, bias, residual,
                                                                     scale, activation, float(beta)))
            _tensors("gemm", a=a, b=b, bias=bias, residual=residual)
            return _custom_op("gemm_epilogue", a, b, bias, residual, layout, out_dtype, precision, scale, activation,
                              float(beta), self.handle)
        if _direct(a, b):
            return self.run_op("gemm", GemmArgs(a, b, layout, out_dtype, precision))
        _tensors("gemm", a=a, b=b)
        return _custom_op("gemm", a, b, layout, out_dtype, precision, self.handle)

    def gated_mlp(self, x, w_gate, w_up, *, activation: str = "silu"):
        """The gated MLP in one kernel: act(x @ w_gate^T) * (x @ w_up^T), x [..., in], w_gate and w_up [out, in]
        (the gate_proj and up_proj weights of nn.Linear, as they are); activation silu (SwiGLU), gelu_erf or
        gelu_tanh (GeGLU). Both products and the gate in fp32, one rounding to x's dtype."""
        _check_rows("gated_mlp", "x", x)
        flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        if _direct(flat, w_gate, w_up):
            y = self.run_op("gated_mlp", GatedArgs(flat, w_gate, w_up, activation))
        else:
            _tensors("gated_mlp", w_gate=w_gate, w_up=w_up)
            y = _custom_op("gated_mlp", flat, w_gate, w_up, activation, self.handle)
        return y if x.dim() == 2 else y.view(*x.shape[:-1], w_gate.shape[0])

    def softmax(self, x, *, scale: float | None = None, mask=None):
        """softmax over the last dimension, fp32 statistics; with `scale` and/or an additive `mask` (x's dtype, x's
        shape or [cols] for every row; -inf masks an element out) the softmax of the fp32 logits x * scale + mask,
        served by the kernels of that scale and mask kind."""
        if scale is not None:
            scale = _number("softmax", "scale", scale)
        if _direct(x, mask):
            return self.run_op("softmax", SoftmaxArgs(x, mask, scale))
        _tensors("softmax", x=x, mask=mask)
        return _custom_op("softmax", x, mask, scale, self.handle)

    def rmsnorm(self, x, weight, eps: float):
        """x * rsqrt(mean(x^2) + eps) * weight over the last dimension (fp32 arithmetic, one rounding)."""
        eps = _number("rmsnorm", "eps", eps)
        if _direct(x, weight):
            return self.run_op("rmsnorm", RowArgs(x, weight, None, eps))
        _tensors("rmsnorm", x=x, weight=weight)
        return _custom_op("rmsnorm", x, weight, eps, self.handle)

    def layernorm(self, x, weight, bias, eps: float):
        """(x - mean) * rsqrt(var + eps) * weight + bias over the last dimension (biased variance)."""
        eps = _number("layernorm", "eps", eps)
        if _direct(x, weight, bias):
            return self.run_op("layernorm", RowArgs(x, weight, bias, eps))
        _tensors("layernorm", x=x, weight=weight, bias=bias)
        return _custom_op("layernorm", x, weight, bias, eps, self.handle)

    def add_rmsnorm(self, x, residual, weight, eps: float):
        """The residual add and the RMSNorm of the sum in one pass: s = x + residual (stored in x's dtype),
        (rmsnorm(s, weight, eps), s) -- the normalised rows and the next block's residual."""
        eps = _number("add_rmsnorm", "eps", eps)
        if _direct(x, residual, weight):
            return self.run_op("add_rmsnorm", RowArgs(x, weight, None, eps, residual))
        _tensors("add_rmsnorm", x=x, residual=residual, weight=weight)
        return _custom_op("add_rmsnorm", x, residual, weight, eps, self.handle)

    def add_layernorm(self, x, residual, weight, bias, eps: float):
        """s = x + residual (x's dtype); (layernorm(s, weight, bias, eps), s)."""
        eps = _number("add_layernorm", "eps", eps)
        if _direct(x, residual, weight, bias):
            return self.run_op("add_layernorm", RowArgs(x, weight, bias, eps, residual))
        _tensors("add_layernorm", x=x, residual=residual, weight=weight, bias=bias)
        return _custom_op("add_layernorm", x, residual, weight, bias, eps, self.handle)

    def rmsnorm_fp8(self, x, weight, eps: float):
        """rmsnorm in the target's fp8 e4m3 with a per-token scale: (q, scale), y ~ q * scale, scale [..., 1] fp32 =
        max(amax|y| / fp8_max, 2^-126) per row (the activations of a row-wise scaled fp8 GEMM)."""
        eps = _number("rmsnorm_fp8", "eps", eps)
        if _direct(x, weight):
            return self.run_op("rmsnorm_fp8", RowArgs(x, weight, None, eps))
        _tensors("rmsnorm_fp8", x=x, weight=weight)
        return _custom_op("rmsnorm_fp8", x, weight, eps, self.handle)

    def add_rmsnorm_fp8(self, x, residual, weight, eps: float):
        """add_rmsnorm with rmsnorm_fp8's output: (q, scale, s)."""
        eps = _number("add_rmsnorm_fp8", "eps", eps)
        if _direct(x, residual, weight):
            return self.run_op("add_rmsnorm_fp8", RowArgs(x, weight, None, eps, residual))
        _tensors("add_rmsnorm_fp8", x=x, residual=residual, weight=weight)
        return _custom_op("add_rmsnorm_fp8", x, residual, weight, eps, self.handle)

    def rope(self, q, k, cos, sin, *, tables: str = "half"):
        """Rotary embedding (rotate_half, NeoX/Llama) of q [tokens, heads, head_dim] and k [tokens, kv_heads,
        head_dim]; (q_out, k_out), out of place. tables "half": cos, sin [tokens, rotary_dim/2] in fp32; "full":
        [tokens, rotary_dim] in q's dtype, each angle twice, as transformers' rotary embedding returns them
        (served by specs with `tables: full`)."""
        if _direct(q, k, cos, sin):
            return self.run_op("rope", RopeArgs(q, k, cos, sin, tables))
        _tensors("rope", q=q, k=k, cos=cos, sin=sin)
        return _custom_op("rope", q, k, cos, sin, tables, self.handle)

    def attention(self, q, k, v, *, causal=False, scale: float | None = None):
        """softmax(scale * q.k^T [masked]) . v -- q, output [batch, seq_q, heads, head_dim], k, v [batch, seq_kv,
        kv_heads, head_dim] (GQA when heads > kv_heads); causal: False, True / 'top_left' (query i sees keys
        j <= i) or 'bottom_right' (the queries are the last seq_q positions); scale default 1/sqrt(head_dim)."""
        mask, scale = mask_name(causal), _scale(scale)
        if _direct(q, k, v):
            return self.run_op("attention", AttentionArgs(q, k, v, mask, scale))
        _tensors("attention", q=q, k=k, v=v)
        return _custom_op("attention", q, k, v, mask, scale, self.handle)

    def attention_decode(self, q, k, v, *, causal=False, scale: float | None = None):
        """attention served by the decode kernels (split KV: a few queries over a long KV cache)."""
        mask, scale = mask_name(causal), _scale(scale)
        if _direct(q, k, v):
            return self.run_op("attention_decode", AttentionArgs(q, k, v, mask, scale))
        _tensors("attention_decode", q=q, k=k, v=v)
        return _custom_op("attention_decode", q, k, v, mask, scale, self.handle)

    # ---- observation -----------------------------------------------------------------------------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        """The Ops itself: a copy of a model that calls it (copy.deepcopy of a patched layer) shares its kernels,
        caches and counts -- and its handle, which names this object to the custom ops."""
        return self

    def stats(self) -> list[StatRow]:
        """Calls so far, per (op, want, shape, route, kernel), sorted. A CUDA graph's replays do not call the
        ops again: they are counted once, when captured."""
        rows = [StatRow(op=p.op, want=p.route.want.params_text(), shape=p.route.shape, route=p.route.route,
                        kernel=p.route.kernel, spec=p.route.spec, detail=p.route.detail, calls=p.calls)
                for p in self._plans.values() if p.calls]
        return sorted(rows, key=lambda s: (s.op, s.want, s.shape, s.route, s.kernel))

    def reset_stats(self) -> None:
        for plan in self._plans.values():
            plan.calls = 0

    def cache_events(self) -> list[CacheEvent]:
        """Every kernel made ready in this process: loaded from the project's cache (hit) or compiled."""
        return list(self._events)

    def route(self, op: str, args) -> Route:
        """The route a call would take (checks its inputs; runs nothing). `op` is a key of
        codegen.ops.adapters.ADAPTERS and `args` its argument record (GemmArgs, RowArgs, ...)."""
        want, shape = self._adapter(op).call(self._ctx, args)
        return self._route(want, shape)

    def kernels(self) -> dict[Want, list[Candidate]]:
        """The kernels the ops can call, by what they serve."""
        return {w: list(c) for w, c in self._catalog.items()}

    def precompile(self, *, workers: int | None = None) -> PrecompileReport:
        """Compile, in parallel worker processes, every kernel at every compile shape a route can name (each
        spec's and lockfile entry's shapes; a dynamic-M kernel once per (N, K)) that the project's cache does not
        hold yet (the report's errors: those that failed). Later first calls load from the cache."""
        import os

        jobs = []
        for cands in self._catalog.values():
            for c in cands:
                jobs += [(c.rendered, c.instance.compile_shape(s)) for s in c.shapes]
        return self.backend.precompile(jobs, workers or os.cpu_count() or 1)

    # ---- the custom ops' implementation ----------------------------------------------------------------------
    def _adapter(self, op: str):
        if op not in ADAPTERS:
            raise OpsError(f"unknown tilegen op {op!r} (known: {', '.join(ADAPTERS)})")
        return ADAPTERS[op]

    def _route(self, want: Want, shape: tuple) -> Route:
        key = (want, shape)
        found = self._routes.get(key)
        if found is None:
            found = resolve(want, shape, self._catalog.get(want, []), self.device_name)
            self._routes[key] = found
        return found

    def run_op(self, op: str, args):
        """One call: its plan (checked and routed once per call key), a count, then the kernel or the fallback."""
        try:
            key = (op, call_key(args))
            plan = self._hot.get(key)
        except TypeError:  # an argument that cannot be hashed: checked in full below (and refused)
            key = plan = None
        if plan is None:
            plan = self._first_call(op, args, key)
        if plan.launch is not None:
            plan.calls += 1
            return plan.launch(args)
        if not plan.warned or self.strict:
            self._fell_back(op, plan)  # strict: raises, and the refused call is not counted
        plan.calls += 1
        return plan.fallback(self._ctx, args)

    def _first_call(self, op: str, args, key) -> _Plan:
        """The checks (an OpsInputError here: nothing is remembered) and the plan of a call key not seen yet."""
        adapter = self._adapter(op)
        want, shape = adapter.call(self._ctx, args)
        plan = self._plans.get((op, want, shape))
        if plan is None:
            plan = self._plan(op, want, shape)
        if key is not None:
            self._hot[key] = plan
        return plan

    def _plan(self, op: str, want: Want, shape: tuple) -> _Plan:
        route = self._route(want, shape)
        adapter = ADAPTERS[op]
        plan = _Plan(op=op, route=route, shape=shape, run=adapter.run, fallback=adapter.fallback)
        if route.rendered is not None:
            plan.kernel = self._kernel(route)
            if plan.kernel is None:  # its compile failed: the route is now a fallback that says so
                plan.route = self._routes[(want, shape)]
            else:
                plan.prepared = adapter.prepare(route.rendered.instance, shape, route.run_shape)
                plan.launch = adapter.launcher(plan.kernel, plan.prepared, shape, route.run_shape)
        self._plans[(op, want, shape)] = plan
        return plan

    def fake_op(self, op: str, args):
        adapter = self._adapter(op)
        adapter.call(self._ctx, args)
        return adapter.fake(self._ctx, args)

    def _fell_back(self, op: str, plan: _Plan) -> None:
        if plan.warned and not self.strict:
            return
        route = plan.route
        message = (f"tilegen.{op} {'x'.join(map(str, route.shape))} ({route.want.params_text()}): torch fallback: "
                   f"{route.detail}")
        if self.strict:
            raise NoKernelError(message + " (strict mode)")
        plan.warned = True
        warnings.warn(message, FallbackWarning, stacklevel=4)

    @staticmethod
    def _compile_shape(route: Route) -> tuple:
        return tuple(route.rendered.instance.compile_shape(route.run_shape))

    def _failed_route(self, route: Route) -> Route:
        why = self._failed[(route.rendered.uri, self._compile_shape(route))]
        return Route(route="fallback", want=route.want, shape=route.shape, spec=route.spec,
                     detail=f"its kernel {route.rendered.uri} ({route.route}) failed to compile: {why}")

    def _kernel(self, route: Route):
        """The compiled kernel of the route (made ready once); None, with the route replaced by a fallback that
        names the compile error, when its compile failed (strict mode: NoKernelError)."""
        key = (route.rendered.uri, self._compile_shape(route))
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        if key not in self._failed:
            try:
                kernel, event = self.backend.get(route.rendered, key[1])
            except Exception as exc:  # noqa: BLE001 - becomes the route's stated reason, never a silent fallback
                text = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                self._failed[key] = f"{type(exc).__name__}: {text[-1] if text else ''}"[:400]
            else:
                self._events.append(event)
                self._kernels[key] = kernel
                return kernel
        failed = self._failed_route(route)
        if self.strict:
            raise NoKernelError(f"tilegen: {failed.detail} (strict mode)")
        self._routes[(route.want, route.shape)] = failed
        return None


_IS_COMPILING = torch.compiler.is_compiling
_DISPATCH_MODES = getattr(torch._C, "_len_torch_dispatch_stack", None)
_FUNCTION_MODES = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_GRAD_ENABLED = torch.is_grad_enabled
_PLAIN = library.PLAIN


def _direct(*tensors) -> bool:
    """Whether a call may run its implementation without going through torch's dispatcher (whose Python custom-op
    machinery costs more than the dispatch itself): plain eager mode -- not tracing (torch.compile, export), no
    torch-function or dispatch mode active, plain tensors (a module's Parameters included; no fake or other
    subclass; None for an absent optional tensor), nothing that autograd would have to record. Otherwise the call
    is the custom op, and torch does what it does with one."""
    if _IS_COMPILING() or _DISPATCH_MODES is None or _FUNCTION_MODES is None or _DISPATCH_MODES() or _FUNCTION_MODES():
        return False
    grad = _GRAD_ENABLED()
    for t in tensors:
        if t is None:
            continue
        if type(t) not in _PLAIN or (grad and t.requires_grad):
            return False
    return True


_OPS = torch.ops.tilegen


def _custom_op(name: str, *args):
    """A call through torch's dispatcher (the calls `_direct` leaves to it): the custom op `tilegen::<name>` where
    autograd must record the call (grad enabled and an input that requires grad), else its twin
    `tilegen::<name>_nograd` (codegen.ops.library), which reaches the same implementation through one Python
    kernel instead of the custom op's layers -- what a torch.compile graph traced under no_grad calls."""
    if library.grad_needed(args):
        return getattr(_OPS, name)(*args)
    return getattr(_OPS, name + library.NOGRAD)(*args)


def _tensors(op: str, **named) -> None:
    """The calls `_direct` leaves to torch's dispatcher: an argument that is not a tensor (None where optional) is
    refused here, by name, not by the dispatcher's schema error."""
    for name, t in named.items():
        if t is not None and not isinstance(t, torch.Tensor):
            raise OpsInputError(f"tilegen.{op}: {name} must be a torch.Tensor, not {type(t).__name__}")


def _number(op: str, name: str, value) -> float:
    """A scalar argument (eps, scale, beta): a real number -- not a string, None or bool."""
    if type(value) is float:  # the common case, without the ABC check below (this runs on every call)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OpsInputError(f"tilegen.{op}: {name} must be a number, not {type(value).__name__}")
    return float(value)


def _check_rows(op: str, name: str, x) -> None:
    """An input the op views as [rows, last dim]: a contiguous tensor of at least one dimension (a strided view is
    refused, never copied by the reshape)."""
    if not isinstance(x, torch.Tensor):
        raise OpsInputError(f"tilegen.{op}: {name} must be a torch.Tensor, not {type(x).__name__}")
    if x.dim() < 1:
        raise OpsInputError(f"tilegen.{op}: {name} must have at least one dimension")
    if not x.is_contiguous():
        raise OpsInputError(f"tilegen.{op}: {name} is not contiguous (strides {tuple(x.stride())}): pass .contiguous()")


def _scale(scale):
    if scale is None:
        return None
    scale = _number("attention", "scale", scale)
    if not (math.isfinite(scale) and scale > 0):
        raise OpsInputError(f"tilegen.attention: scale must be a positive number, not {scale}")
    return scale


def load(project_dir: str | Path | None = None, *, strict: bool = False, backend: Backend | None = None,
         target: Target | None = None, device_name: str | None = None) -> Ops:
    """The ops of the project at `project_dir` (default: the project of the current folder, as the CLI finds
    it) for the GPU present: its kernels (hand configurations and the lockfile's tuned ones) for the GPU's
    target, its lockfile entries for this GPU model, compiled kernels cached under <project>/.cache/ops.
    strict: a call no kernel serves raises NoKernelError instead of running the torch fallback.
    `backend`, `target` and `device_name` replace the GPU present (tests: kernels that compute with torch)."""
    from codegen.generate.pipeline import Project
    from codegen.spec.project import resolve_root

    root = resolve_root(Path(project_dir) if project_dir is not None else None)
    if target is not None and not isinstance(target, Target):
        try:
            target = Target(target)  # "sm_90" as well as Target.SM_90
        except ValueError:
            raise OpsError(f"tilegen.load: target {target!r} is not one of {', '.join(t.value for t in Target)}") from None
    if backend is None:
        from codegen.run.gpu import NoGpu, detect_gpu

        try:
            gpu = detect_gpu()
        except NoGpu as exc:
            raise OpsError(f"tilegen.load: no GPU to run the kernels on: {exc}") from None
        target = gpu.run_target if target is None else target
        device_name = gpu.name if device_name is None else device_name
        backend = TileLangBackend(root, target, gpu)
    elif target is None or device_name is None:
        raise OpsError("tilegen.load: a backend needs the target and device_name it stands for")
    files, entries = Project(root=root).rendered_and_entries([target])
    times = {(e.spec, tuple(e.shape)): e.winner.time_ms for _, e, _ in entries if e.device == device_name}
    return Ops(files=files, target=target, device_name=device_name, backend=backend, strict=strict,
               project_root=root, tuned_ms=times)


__all__ = ["Backend", "FallbackWarning", "NoKernelError", "Ops", "OpsError", "OpsInputError", "StatRow",
           "TileLangBackend", "load", "stats_table"]
