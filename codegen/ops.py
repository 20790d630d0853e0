"""Per-operator facts used by verify and bench, in one place: FLOP and byte formulas, torch
reference, input generation, derived edge shapes and the 'wrong operation' negative control."""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.hardware import DTYPE_BYTES, DType, Target
from codegen.instance import KernelInstance


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_bytes(inst: KernelInstance, m: int, n: int, k: int) -> float:
    """Compulsory DRAM traffic: read A and B once, write C once."""
    a, b, out, _ = (DType(d) for d in inst.spec_dtypes)
    return float(m * k * DTYPE_BYTES[a] + k * n * DTYPE_BYTES[b] + m * n * DTYPE_BYTES[out])


def torch_dtype(dtype: str, target: Target):
    import torch

    d = DType(dtype)
    if d == DType.FP8_E4M3:
        return torch.float8_e4m3fnuz if target == Target.GFX942 else torch.float8_e4m3fn
    return {DType.FP16: torch.float16, DType.BF16: torch.bfloat16, DType.FP32: torch.float32}[d]


def derived_shapes(inst: KernelInstance) -> list[tuple[int, ...]]:
    """Edge shapes verified on top of the spec's (any family: dispatches on inst.op)."""
    return family(inst).derived_shapes(inst)


def gemm_derived_shapes(inst) -> list[tuple[int, int, int]]:
    """GEMM: the smallest legal size, and sizes one above and one below a block multiple where the
    tail policy allows ragged sizes."""
    bm, bn, bk = inst.block_m, inst.block_n, inst.block_k * inst.unroll
    if inst.tail == "none":
        return [(bm, bn, bk), (3 * bm, 2 * bn, 5 * bk)]
    return [(1, 1, 1), (bm + 1, bn - 1, bk + 1), (2 * bm - 1, 2 * bn + 1, 3 * bk - 1)]


@dataclass(frozen=True, kw_only=True)
class GemmCase:
    """Inputs in the kernel's storage layout plus fp32 copies in logical (M x K, K x N) layout."""

    A: object  # torch tensors
    B: object
    A32: object  # logical M x K, fp32
    B32: object  # logical K x N, fp32


INPUT_KINDS = ("normal", "wide")


def make_inputs(inst: KernelInstance, shape: tuple[int, int, int], *, seed: int, kind: str, device, run_target: Target) -> GemmCase:
    """'normal': A ~ N(0,1), B ~ N(0, 1/K) (activations times weights, |C| ~ 1).
    'wide': the same times per-row scales of A and per-column scales of B spread over e^[-3, 3]
    (a dynamic range of about 400x each way), clipped to what the dtype holds."""
    import torch

    m, n, k = shape
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g) / max(k, 1) ** 0.5
    if kind == "wide":
        a = a * torch.exp(torch.empty(m, 1).uniform_(-3, 3, generator=g))
        b = b * torch.exp(torch.empty(1, n).uniform_(-3, 3, generator=g))
    a_dt = torch_dtype(inst.spec_dtypes[0], run_target)
    b_dt = torch_dtype(inst.spec_dtypes[1], run_target)
    if DType(inst.spec_dtypes[0]) == DType.FP8_E4M3:
        limit = torch.finfo(a_dt).max / 2
        a, b = a.clamp(-limit, limit), (b * k**0.5).clamp(-limit, limit)  # fp8: keep B near unit scale
    a_q, b_q = a.to(a_dt), b.to(b_dt)  # rounded inputs: the reference sees exactly what the kernel sees
    A = (a_q.t() if inst.trans_a else a_q).contiguous().to(device)
    B = (b_q.t() if inst.trans_b else b_q).contiguous().to(device)
    return GemmCase(A=A, B=B, A32=a_q.float().to(device), B32=b_q.float().to(device))


def reference(case: GemmCase):
    """fp32 reference from the same rounded inputs, and |A|.|B| (the scale of accumulation error)."""
    import torch

    return torch.matmul(case.A32, case.B32), torch.matmul(case.A32.abs(), case.B32.abs())


def wrong_operation(case: GemmCase):
    """Negative control: the product with B read in the other layout (A.B where A.B^T was asked,
    or vice versa) -- the classic transposition bug. Works for any shape by reinterpreting memory."""
    import torch

    k, n = case.B32.shape
    return torch.matmul(case.A32, case.B32.t().contiguous().reshape(k, n))


def dropped_k_tile(case: GemmCase, ref, block_m: int, block_k: int):
    """Negative control: the reference with the last K tile of the first row block missing -- what a
    kernel that mishandles the K tail would produce."""
    k = case.A32.shape[1]
    k0 = max(0, ((k - 1) // block_k) * block_k)
    rows = slice(0, min(block_m, ref.shape[0]))
    bad = ref.clone()
    bad[rows] -= case.A32[rows, k0:] @ case.B32[k0:, :]
    return bad


# ---------------------------------------------------------------- softmax
def softmax_flops(rows: int, cols: int) -> float:
    """5 per element: max, subtract, exp, add to the sum, scale by 1/sum (exp counted as one)."""
    return 5.0 * rows * cols


def row_bytes(inst, rows: int, cols: int) -> float:
    """Compulsory DRAM traffic of a row kernel: read X and write Y once."""
    i, o = DType(inst.spec_dtypes[0]), DType(inst.spec_dtypes[1])
    return float(rows * cols * (DTYPE_BYTES[i] + DTYPE_BYTES[o]))


def row_derived_shapes(inst) -> list[tuple[int, int]]:
    """Edge shapes on top of the spec's: with no tail policy, one and two whole chunks
    (threads*vector columns); with one, a single column and one column either side of a chunk
    multiple. Never longer than the spec's longest row (the online variant's register budget)."""
    c = inst.chunk
    longest = max(cols for _, cols in inst.shapes)
    cand = [(1, c), (3, 2 * c)] if inst.tail == "none" else [(1, 1), (2, c + 1), (3, 2 * c - 1)]
    return [s for s in cand if s[1] <= max(longest, c)]


@dataclass(frozen=True, kw_only=True)
class RowCase:
    X: object  # stored input (device, input dtype)
    X32: object  # the same rounded values in fp32


def row_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> RowCase:
    """'normal': X ~ N(0,1). 'wide': each row scaled by e^[-2, 2] and shifted by N(0, 4): a spread of
    maxima and means."""
    import torch

    rows, cols = shape
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    if kind == "wide":
        x = x * torch.exp(torch.empty(rows, 1).uniform_(-2, 2, generator=g)) + 2 * torch.randn(rows, 1, generator=g)
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    xq = x.to(dt)  # rounded inputs: the reference sees exactly what the kernel sees
    return RowCase(X=xq.to(device), X32=xq.float().to(device))


def softmax_reference(case: RowCase):
    """fp32 softmax of the same rounded inputs, and the per-element error magnitude the tolerance
    scales by u_acc: |ref| * (4*sqrt(cols) + 4*(1 + |x - max|)) -- the normaliser's accumulation
    (random walk over cols terms) and the exp of x - max (its argument's rounding grows with it)."""
    import torch

    x = case.X32
    ref = torch.softmax(x, dim=-1)
    spread = (x - x.max(dim=-1, keepdim=True).values).abs()
    mag = ref.abs() * (4.0 * x.shape[-1] ** 0.5 + 4.0 * (1.0 + spread))
    return ref, mag


def softmax_dropped_chunk(case: RowCase, chunk: int):
    """Negative control: the first row's max and sum miss its last chunk of `chunk` columns (all of a
    shorter row) -- what a kernel with a wrong column trip count produces; that chunk is still written."""
    import torch

    x = case.X32
    bad = torch.softmax(x, dim=-1)
    cols = x.shape[-1]
    k0 = max(0, cols - chunk)
    if k0 == 0:
        bad[0] = float("inf")  # nothing left to normalise by
        return bad
    kept = x[0, :k0]
    m = kept.max()
    bad[0] = torch.exp(x[0] - m) / torch.exp(kept - m).sum()
    return bad


def softmax_controls(inst, case: RowCase, ref) -> dict[str, object]:
    import torch

    return {
        "zeros": torch.zeros_like(ref),
        "wrong_axis": torch.softmax(case.X32, dim=0),  # softmax over rows instead of columns
        "dropped_chunk": softmax_dropped_chunk(case, inst.chunk),
    }


def softmax_baselines(inst, case: RowCase, out_dtype):
    import torch

    x = case.X
    if out_dtype == x.dtype:
        def op(t):
            return torch.softmax(t, dim=-1)
    else:
        def op(t):
            return torch.softmax(t, dim=-1, dtype=torch.float32).to(out_dtype)
    compiled = compiled_once(("softmax", inst.spec_dtypes), op)
    return {"eager": lambda: op(x), "compile": lambda: compiled(x)}


_COMPILED: dict[tuple, object] = {}


def compiled_once(key, op):
    """torch.compile(op), once per key and process (the bench worker keeps it across cases)."""
    if key not in _COMPILED:
        import torch
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _COMPILED[key] = torch.compile(op, dynamic=False)
    return _COMPILED[key]


# ---------------------------------------------------------------- rmsnorm, layernorm
def rmsnorm_flops(rows: int, cols: int) -> float:
    """4 per element: square, add to the sum, scale by 1/rms, multiply by the weight (the per-row
    sqrt and division are not counted)."""
    return 4.0 * rows * cols


def layernorm_flops(rows: int, cols: int) -> float:
    """8 per element: add to the sum (mean); subtract the mean, square, add (variance); subtract the
    mean, scale by 1/std, multiply by the weight, add the bias (output)."""
    return 8.0 * rows * cols


def norm_bytes(inst, rows: int, cols: int) -> float:
    """Compulsory DRAM traffic: read X once, write Y once, read the weight (and bias) once."""
    params = 2 if inst.has_bias else 1
    return row_bytes(inst, rows, cols) + float(params * cols * DTYPE_BYTES[DType(inst.spec_dtypes[0])])


@dataclass(frozen=True, kw_only=True)
class NormCase:
    X: object  # stored input (device, input dtype)
    W: object  # weight [cols], input dtype
    B: object  # bias [cols], input dtype; None for rmsnorm
    X32: object  # the same rounded values in fp32
    W32: object
    B32: object  # None for rmsnorm


def norm_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> NormCase:
    """X as for softmax ('normal': N(0,1); 'wide': rows scaled by e^[-2, 2] and shifted by N(0, 4),
    so that layernorm's mean subtraction matters); weight 1 + N(0, 0.25) and bias N(0, 0.25)
    (far enough from 1 and 0 that dropping either is caught), all rounded to the input dtype."""
    import torch

    row = row_inputs(inst, shape, seed=seed, kind=kind, device="cpu", run_target=run_target)
    cols = shape[1]
    g = torch.Generator(device="cpu").manual_seed(seed + 7919)
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    w = (1.0 + 0.5 * torch.randn(cols, generator=g)).to(dt)
    b = (0.5 * torch.randn(cols, generator=g)).to(dt) if inst.has_bias else None
    return NormCase(X=row.X.to(device), W=w.to(device), B=None if b is None else b.to(device),
                    X32=row.X32.to(device), W32=w.float().to(device), B32=None if b is None else b.float().to(device))


def _rms_norm32(x, w, eps: float):
    import torch
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * (1.0 if w is None else w)


def norm_reference(inst, case: NormCase):
    """fp32 reference of the same rounded inputs, and the per-element error magnitude the tolerance
    scales by u_acc (README "Verification"), with n = cols and xhat = the normalised x:
    rmsnorm:   |ref| * (4*sqrt(n) + 8) -- the fp32 sum of squares (random walk over n terms) and a
               few roundings in rsqrt and the two products, all relative to the output;
    layernorm: (|xhat*w| + |b|) * (4*sqrt(n) + 8) + 4*sqrt(n) * rstd * |w| * mean(|x|) -- the same
               relative terms on the output before the bias is added (the sum can cancel), plus the
               mean's absolute error, ~u*sqrt(n)*mean|x|, carried through the subtraction x - mean
               (large when a row is shifted far from 0: the cancellation term)."""
    import torch
    import torch.nn.functional as F

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    rel = 4.0 * n**0.5 + 8.0
    if not inst.centered:
        ref = _rms_norm32(x, case.W32, eps)
        return ref, ref.abs() * rel
    ref = F.layer_norm(x, (n,), case.W32, case.B32, eps)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    scaled = (x - mean) * rstd * case.W32
    mag = (scaled.abs() + case.B32.abs()) * rel + 4.0 * n**0.5 * rstd * case.W32.abs() * x.abs().mean(-1, keepdim=True)
    return ref, mag


def norm_dropped_chunk(inst, case: NormCase, chunk: int):
    """Negative control: the first row's statistics miss its last chunk of `chunk` columns (all of a
    shorter row) while still dividing by cols -- what a kernel with a wrong column trip count produces;
    every column is still normalised and written."""
    import torch

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    bad = norm_reference(inst, case)[0].clone()
    kept = x[0, : max(0, n - chunk)]
    if inst.centered:
        mean = kept.sum() / n
        var = (kept - mean).square().sum() / n
        bad[0] = (x[0] - mean) * torch.rsqrt(var + eps) * case.W32 + case.B32
    else:
        bad[0] = x[0] * torch.rsqrt(kept.square().sum() / n + eps) * case.W32
    return bad


def norm_controls(inst, case: NormCase, ref) -> dict[str, object]:
    import torch
    import torch.nn.functional as F

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    controls = {"zeros": torch.zeros_like(ref)}
    if inst.centered:
        controls["no_bias"] = F.layer_norm(x, (n,), case.W32, None, eps)
        controls["rms_not_layer"] = _rms_norm32(x, case.W32, eps) + case.B32  # no mean subtraction
    else:
        controls["no_weight"] = _rms_norm32(x, None, eps)
    controls["dropped_chunk"] = norm_dropped_chunk(inst, case, inst.chunk)
    return controls


def norm_baselines(inst, case: NormCase, out_dtype):
    import torch.nn.functional as F

    x, w, b, eps, n = case.X, case.W, case.B, inst.eps, case.X.shape[-1]
    if inst.centered:
        def op(t):
            return F.layer_norm(t, (n,), w, b, eps).to(out_dtype)
    elif hasattr(F, "rms_norm"):
        def op(t):
            return F.rms_norm(t, (n,), w, eps).to(out_dtype)
    else:
        def op(t):
            t32 = t.float()
            return (t32 * (t32.square().mean(-1, keepdim=True) + eps).rsqrt() * w.float()).to(out_dtype)
    compiled = compiled_once((inst.op, inst.spec_dtypes, eps, n), op)
    return {"eager": lambda: op(x), "compile": lambda: compiled(x)}


def _norm_launch(kernel, case: NormCase, out) -> None:
    if case.B is None:
        kernel(case.X, case.W, out)
    else:
        kernel(case.X, case.W, case.B, out)


# ---------------------------------------------------------------- attention
# Shapes are (batch, heads, kv_heads, seq_q, seq_kv); Q, O are [batch, seq_q, heads, head_dim] and
# K, V [batch, seq_kv, kv_heads, head_dim]. Causal masks are top-left aligned: query i sees keys j <= i.


def attention_flops(inst, shape) -> float:
    """4*B*H*Sq*Skv*D: two matmuls (Q.K^T and P.V) of 2*Sq*Skv*D each per (batch, head); halved for a
    causal mask when seq_q == seq_kv (about half of the score matrix is above the diagonal; the
    diagonal blocks the kernel computes in full are not counted). Softmax work is not counted."""
    b, h, _, sq, skv = shape
    flops = 4.0 * b * h * sq * skv * inst.head_dim
    return flops / 2 if inst.causal and sq == skv else flops


def attention_bytes(inst, shape) -> float:
    """Compulsory DRAM traffic: read Q, K and V once, write O once."""
    b, h, kvh, sq, skv = shape
    i, o = DType(inst.spec_dtypes[0]), DType(inst.spec_dtypes[1])
    d = inst.head_dim
    return float(b * d * (sq * h * DTYPE_BYTES[i] + 2 * skv * kvh * DTYPE_BYTES[i] + sq * h * DTYPE_BYTES[o]))


def attention_derived_shapes(inst) -> list[tuple[int, int, int, int, int]]:
    """Small edge shapes on top of the spec's, all batch 1 with 2 query heads on 1 K/V head (GQA):
    with no tail policy, one block and a few blocks (seq_q != seq_kv where the mask allows it);
    predicated, a single token, and one past / one short of a block multiple."""
    bm, bn = inst.block_m, inst.block_n
    one = math.lcm(bm, bn)
    if inst.tail == "none":
        return [(1, 2, 1, one, one), (1, 2, 1, 2 * one, 2 * one if inst.causal else 3 * one)]
    return [(1, 2, 1, 1, 1), (1, 2, 1, bm + 1, bm + 1), (1, 2, 1, bm - 1, 2 * bn + 1)]


@dataclass(frozen=True, kw_only=True)
class AttentionCase:
    Q: object  # stored inputs (device, input dtype, kernel layout)
    K: object
    V: object
    Q32: object  # the same rounded values in fp32
    K32: object
    V32: object


def attention_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> AttentionCase:
    """'normal': Q, K, V ~ N(0,1). 'wide': each head of Q, K and V scaled by e^[-1.5, 1.5] (sharper and
    flatter softmax rows from head to head, outputs of different sizes), all rounded to the input dtype."""
    import torch

    b, h, kvh, sq, skv = shape
    d = inst.head_dim
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(b, sq, h, d, generator=g)
    k = torch.randn(b, skv, kvh, d, generator=g)
    v = torch.randn(b, skv, kvh, d, generator=g)
    if kind == "wide":
        q = q * torch.exp(torch.empty(1, 1, h, 1).uniform_(-1.5, 1.5, generator=g))
        k = k * torch.exp(torch.empty(1, 1, kvh, 1).uniform_(-1.5, 1.5, generator=g))
        v = v * torch.exp(torch.empty(1, 1, kvh, 1).uniform_(-1.5, 1.5, generator=g))
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    qq, kq, vq = q.to(dt), k.to(dt), v.to(dt)  # rounded inputs: the reference sees exactly what the kernel sees
    return AttentionCase(Q=qq.to(device), K=kq.to(device), V=vq.to(device),
                         Q32=qq.float().to(device), K32=kq.float().to(device), V32=vq.float().to(device))


def _attention32(inst, case: AttentionCase, *, causal: bool, stats: bool = False, kv_end=None):
    """fp32 attention by explicit math, one batch at a time: s = scale*q.k^T, mask, softmax, .v, with
    K/V heads repeated for GQA. kv_end(i) -> keys [0, kv_end) that query row i may see (a control's bug).
    With stats, also the per-element error magnitudes of the tolerance (see attention_reference)."""
    import torch

    q, k, v = case.Q32, case.K32, case.V32
    b, sq, h, _ = q.shape
    skv, kvh = k.shape[1], k.shape[2]
    group = h // kvh
    out = torch.empty_like(q)
    mag = torch.empty_like(q) if stats else None
    rows = torch.arange(sq, device=q.device)[:, None]
    cols = torch.arange(skv, device=q.device)[None, :]
    allowed = (cols <= rows) if causal else torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if kv_end is not None:
        allowed = allowed & (cols < kv_end(rows))
    for bi in range(b):
        qb = q[bi].transpose(0, 1)  # [h, sq, d]
        kb = k[bi].transpose(0, 1).repeat_interleave(group, dim=0)  # [h, skv, d]
        vb = v[bi].transpose(0, 1).repeat_interleave(group, dim=0)
        s = inst.softmax_scale * (qb @ kb.transpose(1, 2))  # [h, sq, skv]
        s = s.masked_fill(~allowed, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - m)
        den = e.sum(dim=-1, keepdim=True)
        p = e / den
        out[bi] = (p @ vb).transpose(0, 1)
        if stats:
            mag[bi] = _attention_error_mag(inst, qb, kb, vb, s, m, den, p, allowed).transpose(0, 1)
    return out, mag


def _attention_error_mag(inst, qb, kb, vb, s, m, den, p, allowed):
    """The tolerance's per-element error magnitude for one batch (README "Verification", attention):

        (2*u_in + u_acc*(4*sqrt(Skv) + 4*sqrt(D)*A_i + 4*(1 + B_i))) * (P.|V|)_id + eta_in*(M.|V|)_id / l_i

    P.|V|: the probabilities times |v| (every error below is relative to a p_ij and carried by |v_jd|);
    2*u_in: P rounded to the input dtype before P.V (one rounding, and the output's fp32 -> storage is
    the separate u_out term); 4*sqrt(Skv)*u_acc: the fp32 sums over keys (row sum and P.V);
    4*sqrt(D)*A_i*u_acc, A_i = max_j SCALE*(|q|.|k|)_ij: the fp32 Q.K^T accumulation, an absolute
    error of the score and so a relative error of its exp; 4*(1 + B_i)*u_acc, B_i = max_j |s_ij - m_i|:
    the exp2 argument's rounding, which grows with it; eta_in*(M.|V|)/l_i: P below the input dtype's
    normal range (fp16 subnormals, absolute rounding eta_in) over the allowed keys M, divided by the
    row's sum l_i = sum_j exp(s_ij - m_i) >= 1. This function returns the whole bracket with u_in,
    u_acc and eta_in filled in, so the tolerance only multiplies it by verify_tolerance_scale."""

    from codegen.verify import SUBNORMAL_ROUNDOFF, UNIT_ROUNDOFF

    u_in = UNIT_ROUNDOFF[DType(inst.spec_dtypes[0])]
    u_acc = UNIT_ROUNDOFF[DType(inst.spec_dtypes[2])]
    eta_in = SUBNORMAL_ROUNDOFF[DType(inst.spec_dtypes[0])]
    d, skv = qb.shape[-1], kb.shape[1]
    absv = vb.abs()
    a = (inst.softmax_scale * (qb.abs() @ kb.abs().transpose(1, 2))).masked_fill(~allowed, 0).amax(-1, keepdim=True)
    spread = (s - m).masked_fill(~allowed, 0).abs().amax(-1, keepdim=True)
    rel = 2 * u_in + u_acc * (4 * skv**0.5 + 4 * d**0.5 * a + 4 * (1 + spread))
    return rel * (p @ absv) + eta_in * (allowed.to(absv.dtype) @ absv) / den


def attention_reference(inst, case: AttentionCase):
    """fp32 reference from the same rounded inputs and the modelled error magnitude per element."""
    return _attention32(inst, case, causal=inst.causal, stats=True)


def attention_dropped_block(inst, case: AttentionCase, ref):
    """Negative control: the rows of the first query block miss the last KV block that block visits
    (the causal kernel visits ceil(block_m/block_n) blocks, a non-causal one all) -- a wrong KV trip
    count. Rows left with no key at all get NaN (0/0)."""
    sq, skv = case.Q32.shape[1], case.K32.shape[1]
    visited = math.ceil(skv / inst.block_n)
    if inst.causal:
        visited = min(visited, math.ceil(inst.block_m / inst.block_n))
    start = (visited - 1) * inst.block_n
    rows = min(inst.block_m, sq)
    bad, _ = _attention32(inst, case, causal=inst.causal, kv_end=lambda r: start)
    out = ref.clone()
    out[:, :rows] = bad[:, :rows]
    return out


def attention_controls(inst, case: AttentionCase, ref) -> dict[str, object]:
    import torch

    wrong, _ = _attention32(inst, case, causal=not inst.causal)
    return {
        "zeros": torch.zeros_like(ref),
        "causal_mask_missing" if inst.causal else "causal_mask_applied": wrong,
        "dropped_kv_block": attention_dropped_block(inst, case, ref),
    }


def attention_baselines(inst, case: AttentionCase, out_dtype):
    """F.scaled_dot_product_attention in [batch, heads, seq, dim] views of the same tensors, pinned to
    the flash and to the cuDNN backend (eager), and torch.compile of the explicit math. SDPA's causal
    mask is top-left aligned like the kernel's; GQA via enable_gqa."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.transpose(1, 2) for t in (case.Q, case.K, case.V))
    gqa = q.shape[1] != k.shape[1]
    scale, causal = inst.softmax_scale, inst.causal

    def sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
        return run

    def math_op(q_, k_, v_):
        group = q_.shape[1] // k_.shape[1]
        k_, v_ = k_.repeat_interleave(group, dim=1), v_.repeat_interleave(group, dim=1)
        s = (q_.float() @ k_.float().transpose(-1, -2)) * scale
        if causal:
            sq, skv = s.shape[-2:]
            s = s.masked_fill(torch.ones(sq, skv, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return (torch.softmax(s, dim=-1) @ v_.float()).to(out_dtype)

    compiled = compiled_once(("attention", inst.spec_dtypes, causal, scale), math_op)
    return {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "compile": lambda: compiled(q, k, v)}


# ---------------------------------------------------------------- the families
@dataclass(frozen=True, kw_only=True)
class OpFamily:
    """What verify and bench need to know about one operator family, in one record."""

    name: str
    flops: object  # (inst, shape) -> float
    bytes: object  # (inst, shape) -> float
    make_inputs: object  # (inst, shape, *, seed, kind, device, run_target) -> case
    reference: object  # (inst, case) -> (fp32 reference, error magnitude for the tolerance)
    tolerance: object  # (inst, shape, run_target) -> a tolerance with bound(ref, mag) and describe()
    controls: object  # (inst, case, ref) -> {name: wrong output}
    derived_shapes: object  # (inst) -> [shape]
    out_shape: object  # (inst, shape) -> output tensor shape
    launch: object  # (kernel, case, out) -> None
    baselines: object  # (inst, case, out_dtype) -> {name: fn}


def _gemm_tolerance(inst, shape, run_target):
    from codegen.verify import gemm_tolerance

    return gemm_tolerance(inst.spec_dtypes, run_target, shape[2], inst.verify_tolerance_scale)


def _row_tolerance(inst, shape, run_target):
    from codegen.verify import row_tolerance

    return row_tolerance(inst.op, inst.spec_dtypes, shape[1], inst.verify_tolerance_scale)


def _gemm_baselines(inst, case, out_dtype):
    from codegen.bench import gemm_baseline_fns

    return gemm_baseline_fns(inst, case.A, case.B, out_dtype)


GEMM = OpFamily(
    name="gemm",
    flops=lambda inst, s: gemm_flops(*s),
    bytes=lambda inst, s: gemm_bytes(inst, *s),
    make_inputs=make_inputs,
    reference=lambda inst, case: reference(case),
    tolerance=_gemm_tolerance,
    controls=lambda inst, case, ref: {
        "zeros": _zeros_like(ref), "wrong_operation": wrong_operation(case),
        "dropped_k_tile": dropped_k_tile(case, ref, inst.block_m, inst.block_k)},
    derived_shapes=gemm_derived_shapes,
    out_shape=lambda inst, s: (s[0], s[1]),
    launch=lambda kernel, case, out: kernel(case.A, case.B, out),
    baselines=_gemm_baselines,
)

SOFTMAX = OpFamily(
    name="softmax",
    flops=lambda inst, s: softmax_flops(*s),
    bytes=lambda inst, s: row_bytes(inst, *s),
    make_inputs=row_inputs,
    reference=lambda inst, case: softmax_reference(case),
    tolerance=_row_tolerance,
    controls=softmax_controls,
    derived_shapes=row_derived_shapes,
    out_shape=lambda inst, s: tuple(s),
    launch=lambda kernel, case, out: kernel(case.X, out),
    baselines=softmax_baselines,
)

def _norm_family(name: str, flops) -> OpFamily:
    """rmsnorm and layernorm differ only in name and FLOP count here; norm_* read inst.op for the rest."""
    return OpFamily(
        name=name,
        flops=lambda inst, s: flops(*s),
        bytes=lambda inst, s: norm_bytes(inst, *s),
        make_inputs=norm_inputs,
        reference=norm_reference,
        tolerance=_row_tolerance,
        controls=norm_controls,
        derived_shapes=row_derived_shapes,
        out_shape=lambda inst, s: tuple(s),
        launch=_norm_launch,
        baselines=norm_baselines,
    )


RMSNORM = _norm_family("rmsnorm", rmsnorm_flops)
LAYERNORM = _norm_family("layernorm", layernorm_flops)


def _attention_tolerance(inst, shape, run_target):
    from codegen.verify import attention_tolerance

    return attention_tolerance(inst.spec_dtypes, inst.head_dim, shape[4], inst.verify_tolerance_scale)


ATTENTION = OpFamily(
    name="attention",
    flops=attention_flops,
    bytes=attention_bytes,
    make_inputs=attention_inputs,
    reference=attention_reference,
    tolerance=_attention_tolerance,
    controls=attention_controls,
    derived_shapes=attention_derived_shapes,
    out_shape=lambda inst, s: (s[0], s[3], s[1], inst.head_dim),
    launch=lambda kernel, case, out: kernel(case.Q, case.K, case.V, out),
    baselines=attention_baselines,
)

FAMILIES: dict[str, OpFamily] = {
    "gemm": GEMM, "softmax": SOFTMAX, "rmsnorm": RMSNORM, "layernorm": LAYERNORM, "attention": ATTENTION,
}


def family(inst) -> OpFamily:
    return FAMILIES[inst.op]


def _zeros_like(ref):
    import torch

    return torch.zeros_like(ref)
