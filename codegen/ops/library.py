"""The ops as torch.library custom ops (namespace `tilegen`), each with a register_fake: torch.compile traces a
model that calls them as opaque nodes of its graph (no graph break), and runs the real implementation -- the
dispatch of the Ops object the call names, codegen.ops.api -- when the compiled graph runs.

The Ops object travels as an int handle (a graph constant): the live Ops objects are kept by handle here.
Outputs are fresh tensors from torch's allocator (workspaces too); nothing on the call path waits on the GPU,
so a CUDA graph can capture the calls (compile each shape before capturing: the first call compiles or loads).
"""

from __future__ import annotations

import itertools
import weakref

import torch

from codegen.ops.adapters import AttentionArgs, GatedArgs, GemmArgs, GemmEpilogueArgs, RopeArgs, RowArgs, SoftmaxArgs
from codegen.ops.errors import OpsError

NAMESPACE = "tilegen"
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


def register(ops) -> int:
    handle = next(_HANDLES)
    _LIVE[handle] = ops
    return handle


def lookup(handle: int):
    try:
        return _LIVE[int(handle)]
    except KeyError:
        raise OpsError(f"tilegen ops handle {handle} names no live Ops object (it was garbage-collected; keep "
                       "the object tilegen.load returned for as long as a model calls its ops)") from None


_IMPLS: dict[str, object] = {}  # op name -> its implementation (the custom op's and its twin's)
_FAKES: dict[str, object] = {}  # op name -> its fake (register_fake)


def _op(name: str):
    def define(fn):
        _IMPLS[name] = fn
        return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=())(fn)

    return define


def _fake(name: str):
    def register(fn):
        _FAKES[name] = fn
        return torch.library.register_fake(f"{NAMESPACE}::{name}")(fn)

    return register


@_op("gemm")
def gemm(a: torch.Tensor, b: torch.Tensor, layout: str, out_dtype: torch.dtype, precision: str,
         handle: int) -> torch.Tensor:
    return lookup(handle).run_op("gemm", GemmArgs(a, b, layout, out_dtype, precision))


@_fake("gemm")
def _(a, b, layout, out_dtype, precision, handle):
    return lookup(handle).fake_op("gemm", GemmArgs(a, b, layout, out_dtype, precision))


@_op("gemm_epilogue")
def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None, layout: str,
                  out_dtype: torch.dtype, precision: str, scale: float | None, activation: str, beta: float,
                  handle: int) -> torch.Tensor:
    """act(scale * op(A) @ op(B) + bias) + beta * residual (activation '': none)."""
    return lookup(handle).run_op("gemm_epilogue", GemmEpilogueArgs(a, b, layout, out_dtype, precision, bias, residual,
                                                                   scale, activation, beta))


@_fake("gemm_epilogue")
def _(a, b, bias, residual, layout, out_dtype, precision, scale, activation, beta, handle):
    return lookup(handle).fake_op("gemm_epilogue", GemmEpilogueArgs(a, b, layout, out_dtype, precision, bias, residual,
                                                                    scale, activation, beta))


@_op("gated_mlp")
def gated_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str, handle: int) -> torch.Tensor:
    """act(x @ w_gate^T) * (x @ w_up^T)."""
    return lookup(handle).run_op("gated_mlp", GatedArgs(x, w_gate, w_up, activation))


@_fake("gated_mlp")
def _(x, w_gate, w_up, activation, handle):
    return lookup(handle).fake_op("gated_mlp", GatedArgs(x, w_gate, w_up, activation))


@_op("softmax")
def softmax(x: torch.Tensor, mask: torch.Tensor | None, scale: float | None, handle: int) -> torch.Tensor:
    return lookup(handle).run_op("softmax", SoftmaxArgs(x, mask, scale))


@_fake("softmax")
def _(x, mask, scale, handle):
    return lookup(handle).fake_op("softmax", SoftmaxArgs(x, mask, scale))


@_op("rmsnorm")
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, handle: int) -> torch.Tensor:
    return lookup(handle).run_op("rmsnorm", RowArgs(x, weight, None, eps))


@_fake("rmsnorm")
def _(x, weight, eps, handle):
    return lookup(handle).fake_op("rmsnorm", RowArgs(x, weight, None, eps))


@_op("layernorm")
def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, handle: int) -> torch.Tensor:
    return lookup(handle).run_op("layernorm", RowArgs(x, weight, bias, eps))


@_fake("layernorm")
def _(x, weight, bias, eps, handle):
    return lookup(handle).fake_op("layernorm", RowArgs(x, weight, bias, eps))


@_op("add_rmsnorm")
def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                handle: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, x + residual)."""
    return lookup(handle).run_op("add_rmsnorm", RowArgs(x, weight, None, eps, residual))


@_fake("add_rmsnorm")
def _(x, residual, weight, eps, handle):
    return lookup(handle).fake_op("add_rmsnorm", RowArgs(x, weight, None, eps, residual))


@_op("add_layernorm")
def add_layernorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                  handle: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, x + residual)."""
    return lookup(handle).run_op("add_layernorm", RowArgs(x, weight, bias, eps, residual))


@_fake("add_layernorm")
def _(x, residual, weight, bias, eps, handle):
    return lookup(handle).fake_op("add_layernorm", RowArgs(x, weight, bias, eps, residual))


@_op("rmsnorm_fp8")
def rmsnorm_fp8(x: torch.Tensor, weight: torch.Tensor, eps: float, handle: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 rows, fp32 scales [..., 1])."""
    return lookup(handle).run_op("rmsnorm_fp8", RowArgs(x, weight, None, eps))


@_fake("rmsnorm_fp8")
def _(x, weight, eps, handle):
    return lookup(handle).fake_op("rmsnorm_fp8", RowArgs(x, weight, None, eps))


@_op("add_rmsnorm_fp8")
def add_rmsnorm_fp8(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    handle: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp8 rows, fp32 scales [..., 1], x + residual)."""
    return lookup(handle).run_op("add_rmsnorm_fp8", RowArgs(x, weight, None, eps, residual))


@_fake("add_rmsnorm_fp8")
def _(x, residual, weight, eps, handle):
    return lookup(handle).fake_op("add_rmsnorm_fp8", RowArgs(x, weight, None, eps, residual))


@_op("rope")
def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, tables: str,
         handle: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q_out, K_out)."""
    return lookup(handle).run_op("rope", RopeArgs(q, k, cos, sin, tables))


@_fake("rope")
def _(q, k, cos, sin, tables, handle):
    return lookup(handle).fake_op("rope", RopeArgs(q, k, cos, sin, tables))


@_op("attention")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str, scale: float | None,
              handle: int) -> torch.Tensor:
    return lookup(handle).run_op("attention", AttentionArgs(q, k, v, mask, scale))


@_fake("attention")
def _(q, k, v, mask, scale, handle):
    return lookup(handle).fake_op("attention", AttentionArgs(q, k, v, mask, scale))


@_op("attention_decode")
def attention_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str, scale: float | None,
                     handle: int) -> torch.Tensor:
    return lookup(handle).run_op("attention_decode", AttentionArgs(q, k, v, mask, scale))


@_fake("attention_decode")
def _(q, k, v, mask, scale, handle):
    return lookup(handle).fake_op("attention_decode", AttentionArgs(q, k, v, mask, scale))


OPS = ("gemm", "gemm_epilogue", "gated_mlp", "softmax", "rmsnorm", "layernorm", "add_rmsnorm", "add_layernorm", "rmsnorm_fp8", "add_rmsnorm_fp8", "rope",
       "attention", "attention_decode")

# ---- the twins autograd need not record: tilegen::<op>_nograd ----------------------------------------------------
# A custom_op call passes several Python layers (its autograd wrapper, a redispatch, the backend wrapper and its
# aliasing checks): about 11 us a call on a CPU where the implementation itself takes 6. A call that autograd need
# not record -- grad disabled, or no input that requires grad: inference, a torch.compile graph traced under
# no_grad -- goes through the op's twin, defined on the same schema with one Python kernel: at the Autograd key it
# runs the implementation (or, called with inputs autograd must record, hands the call to the custom op, whose
# backward then refuses), and the same implementation serves the backends' keys (inference mode skips Autograd).
NOGRAD = "_nograd"
_TWINS = torch.library.Library(NAMESPACE, "FRAGMENT")


# plain tensors: torch.Tensor, and nn.Parameter -- a module's weights -- which adds no torch-function or dispatch
# behaviour of its own (its __torch_function__ is torch's disabled one). The ops' direct call takes them too.
PLAIN = (torch.Tensor, torch.nn.Parameter)
_DISPATCH_MODES = torch._C._len_torch_dispatch_stack


def grad_needed(args) -> bool:
    """Whether autograd must record a call of these arguments: grad enabled and an input that requires grad."""
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _define_twin(name: str) -> None:
    custom = getattr(torch.ops.tilegen, name).default
    schema = str(custom._schema)  # tilegen::NAME(args) -> outputs
    _TWINS.define(name + NOGRAD + schema[schema.index("("):])
    impl = _IMPLS[name]  # the custom op's implementation: Ops.run_op of the handle's Ops

    def autograd(*args):
        # grad_needed's test and the plain test in one pass over the arguments (this runs on every call of a
        # compiled graph). Plain: real tensors and no dispatch mode, so the implementation may run here; otherwise
        # (fake or functional tensors while torch.compile traces, a mode that must see the op) the call goes on
        # below the Autograd key.
        grad, plain = torch.is_grad_enabled(), not _DISPATCH_MODES()
        for a in args:
            if isinstance(a, torch.Tensor):
                if grad and a.requires_grad:
                    return custom(*args)
                plain = plain and type(a) in PLAIN
        if plain:
            return impl(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return twin(*args)

    _TWINS.impl(name + NOGRAD, impl, "CompositeExplicitAutograd")
    _TWINS.impl(name + NOGRAD, autograd, "Autograd")
    twin = getattr(torch.ops.tilegen, name + NOGRAD).default
    torch.library.register_fake(f"{NAMESPACE}::{name}{NOGRAD}", _FAKES[name], lib=_TWINS)


for _name in OPS:
    _define_twin(_name)
