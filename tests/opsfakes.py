"""Kernels that compute with torch, for the ops tests on the CPU: each takes the arguments the generated
kernel takes, in its order (the family numerics' `launch` passes them), checks their shapes against the compile
shape -- a padded M bucket, a workspace of the wrong size or a view of the wrong extent fails here -- and writes
its output from formulas of its own, in float64 (not the ops' torch fallbacks, which the tests compare with)."""

from __future__ import annotations

import math

import torch

from codegen.ops.cache import CacheEvent, PrecompileReport


class KernelCallError(AssertionError):
    pass


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise KernelCallError(what)


_ACT = {"relu": lambda x: x.clamp_min(0), "silu": lambda x: x / (1 + torch.exp(-x)),
        "gelu_erf": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
        "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))}


def _count_in(inst, ws, splits: int, what: str) -> None:
    """A split fixup's counters (the workspaces that must be zero on entry): zero on entry; each split counts
    itself in, the last sets the counter back."""
    for w, zeroed in zip(ws, inst.workspace_zeroed(), strict=True):
        if zeroed:
            _expect(w.dtype == torch.int32 and bool((w == 0).all()), f"{what} counters not zero on entry")
            w += splits
            w.zero_()


def gemm_kernel(inst, shape):
    """A, B, then the fused kernels' B_UP, Bias, Residual (inst.input_names), the workspaces, C."""
    f = inst.fused

    def run(A, B, *rest):
        rest = list(rest)
        extra = {name: rest.pop(0) for name in inst.input_names()}
        *ws, C = rest
        m = A.shape[1] if inst.trans_a else A.shape[0]
        k = A.shape[0] if inst.trans_a else A.shape[1]
        n = B.shape[0] if inst.trans_b else B.shape[1]
        if inst.dynamic_m is None:
            _expect((m, n, k) == tuple(shape), f"gemm compiled for {shape} called at {(m, n, k)}")
        else:
            _expect(inst.dynamic_m[0] <= m <= inst.dynamic_m[1] and (n, k) == tuple(shape[1:]), f"dynamic {m, n, k}")
        _expect(tuple(tuple(w.shape) for w in ws) == inst.workspace_shapes((m, n, k)), "gemm workspaces")
        _count_in(inst, ws, inst.split_k, "gemm tile")
        _expect(tuple(C.shape) == (m, n), "gemm C")
        a = (A.t() if inst.trans_a else A).double()
        b = (B.t() if inst.trans_b else B).double()
        c = a @ b
        if f is not None and f.gate is not None:
            up = extra["B_UP"]
            _expect(up.shape == B.shape and up.dtype == B.dtype, "gemm B_UP")
            c = _ACT[f.activation](c) * (a @ (up.t() if inst.trans_b else up).double())
        elif f is not None:
            c = c * f.scale if f.scale is not None else c
            if f.bias_dtype is not None:
                _expect(tuple(extra["Bias"].shape) == (n,), "gemm Bias")
                c = c + extra["Bias"].double()
            c = _ACT[f.activation](c) if f.activation else c
            if f.residual:
                _expect(tuple(extra["Residual"].shape) == (m, n) and extra["Residual"].dtype == C.dtype, "gemm Residual")
                c = c + f.beta * extra["Residual"].double()
        C.copy_(c.to(C.dtype))
    return run


def softmax_kernel(inst, shape):
    def run(X, *rest):
        *ins, Y = rest
        mask = ins.pop(0) if inst.mask != "none" else None
        _expect(tuple(X.shape) == tuple(shape) and tuple(Y.shape) == tuple(shape), "softmax X, Y")
        _expect(len(ins) == (inst.workspace_shape(shape) is not None), "softmax workspace")
        if mask is not None:
            _expect(tuple(mask.shape) == (tuple(shape) if inst.mask == "full" else (shape[1],)), "softmax mask")
        x = X.double()
        if inst.scale is not None:
            x = x * inst.scale
        if mask is not None:
            x = x + mask.double()
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        Y.copy_((e / e.sum(dim=-1, keepdim=True)).to(Y.dtype))
    return run


def norm_kernel(inst, shape):
    """The norms and their fused kernels: X, (R), W, (B), (workspace); then (S), Y, (SC)."""
    def run(X, *rest):
        rest = list(rest)
        R = rest.pop(0) if inst.residual else None
        W = rest.pop(0)
        SC = rest.pop() if inst.per_token else None
        Y = rest.pop()
        S = rest.pop() if inst.residual else None
        bias = rest.pop(0) if inst.has_bias else None
        want_ws = inst.workspace_shape(shape)
        _expect([tuple(t.shape) for t in rest] == ([want_ws] if want_ws else []), "norm workspace")
        _expect(tuple(X.shape) == tuple(shape) and tuple(Y.shape) == tuple(shape), "norm X, Y")
        x = X.double()
        if R is not None:
            _expect(tuple(R.shape) == tuple(shape) and tuple(S.shape) == tuple(shape), "norm R, S")
            S.copy_((x + R.double()).to(S.dtype))
            x = S.double()
        if inst.centered:
            x = x - x.mean(dim=-1, keepdim=True)
        y = x / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + inst.eps) * W.double()
        if bias is not None:
            y = y + bias.double()
        if SC is not None:
            _expect(tuple(SC.shape) == (shape[0], 1), "norm SC")
            scale = (y.abs().amax(dim=-1, keepdim=True) / inst.fp8_max).clamp_min(2.0**-126)
            SC.copy_(scale)
            y = (y / scale).clamp(-inst.fp8_max, inst.fp8_max)
        Y.copy_(y.to(Y.dtype))
    return run


def rope_kernel(inst, shape):
    def run(Q, K, COS, SIN, QO, KO):
        t, h, kvh = shape
        _expect(tuple(Q.shape) == (t, h, inst.head_dim) and tuple(K.shape) == (t, kvh, inst.head_dim), "rope Q, K")
        _expect(QO.shape == Q.shape and KO.shape == K.shape, "rope outputs")
        half = inst.rotary_dim // 2
        _expect(tuple(COS.shape) == (t, inst.rotary_dim if inst.full_tables else half), "rope tables")
        for x, out in ((Q, QO), (K, KO)):
            x = x.double()
            c, s = COS[:, :half].double()[:, None, :], SIN[:, :half].double()[:, None, :]
            x1, x2 = x[..., :half], x[..., half:inst.rotary_dim]
            y = x.clone()
            y[..., :half] = x1 * c - x2 * s
            y[..., half:inst.rotary_dim] = x2 * c + x1 * s
            out.copy_(y.to(out.dtype))
    return run


def attention_kernel(inst, compiled):
    def run(Q, K, V, *rest):
        *ws, O = rest
        b, h, kvh, sq, skv = compiled
        if inst.dynamic_kv is not None:  # compiled for every KV length: K says which
            _expect(skv == "seq_kv" and inst.dynamic_kv[0] <= K.shape[1] <= inst.dynamic_kv[1], f"dynamic kv {K.shape}")
            skv = K.shape[1]
        shape = (b, h, kvh, sq, skv)
        _expect(tuple(Q.shape) == (b, sq, h, inst.head_dim) and tuple(K.shape) == (b, skv, kvh, inst.head_dim),
                "attention Q, K")
        _expect(tuple(tuple(w.shape) for w in ws) == inst.workspace_shapes(shape), "attention workspaces")
        _count_in(inst, ws, inst.split_for(shape), "attention split")
        q, k, v = (t.double().transpose(1, 2) for t in (Q, K, V))
        k, v = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
        s = (q @ k.transpose(-1, -2)) * inst.softmax_scale
        if inst.mask.value != "none":
            shift = skv - sq if inst.mask.value == "bottom_right" else 0
            hide = torch.ones(sq, skv, dtype=torch.bool).triu(1 + shift)
            s = s.masked_fill(hide, -math.inf)
        O.copy_((torch.softmax(s, dim=-1) @ v).transpose(1, 2).to(O.dtype))
    return run


KERNELS = {"gemm": gemm_kernel, "softmax": softmax_kernel, "rmsnorm": norm_kernel, "layernorm": norm_kernel,
           "rope": rope_kernel, "attention": attention_kernel}


class TorchKernels:
    """An ops backend on the CPU whose kernels are the functions above; records every compile it was asked for."""

    device_type = "cpu"

    def __init__(self):
        self.compiled: list[tuple[str, tuple]] = []

    def get(self, rendered, compile_shape):
        self.compiled.append((rendered.uri, tuple(compile_shape)))
        kernel = KERNELS[rendered.instance.op](rendered.instance, compile_shape)
        return kernel, CacheEvent(uri=rendered.uri, shape=tuple(compile_shape), key="", hit=False, seconds=0.0)

    def precompile(self, jobs, workers):
        return PrecompileReport(kernels=len({(r.uri, tuple(s)) for r, s in jobs}), cached=0, errors={}, seconds=0.0)
