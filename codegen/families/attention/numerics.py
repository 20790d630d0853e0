"""Attention numerics: FLOP and byte formulas, inputs, the fp32 reference and its modelled error, the
tolerance, negative controls, derived edge shapes and the torch baselines.

Shapes are (batch, heads, kv_heads, seq_q, seq_kv); Q, O are [batch, seq_q, heads, head_dim] and
K, V [batch, seq_kv, kv_heads, head_dim]. Causal masks are top-left aligned: query i sees keys j <= i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.families.base import Numerics
from codegen.hardware import DTYPE_BYTES, DType, Target
from codegen.numerics import SUBNORMAL_ROUNDOFF, TINY, UNIT_ROUNDOFF, compiled_once
from codegen.spec import TailPolicy
from codegen.targets import torch_dtype


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
    if inst.tail == TailPolicy.NONE:
        return [(1, 2, 1, one, one), (1, 2, 1, 2 * one, 2 * one if inst.causal else 3 * one)]
    return [(1, 2, 1, 1, 1), (1, 2, 1, bm + 1, bm + 1), (1, 2, 1, bm - 1, 2 * bn + 1)]


@dataclass(frozen=True, kw_only=True)
class AttentionCase:
    Q: object  # stored inputs (device, input dtype, kernel layout)
    K: object
    V: object
    q_offset: int = 0  # position of Q's first row in the whole sequence (a chunk of the query rows)

    # the same rounded values in fp32, made on use (a chunk's part only, in the chunked check)
    @property
    def Q32(self):
        return self.Q.float()

    @property
    def K32(self):
        return self.K.float()

    @property
    def V32(self):
        return self.V.float()


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
    return AttentionCase(Q=qq.to(device), K=kq.to(device), V=vq.to(device))


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
    rows = torch.arange(sq, device=q.device)[:, None] + case.q_offset
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


def attention_chunks(inst, case: AttentionCase, max_elements: int):
    """The chunked check: per batch, groups of K/V heads with the query heads they serve, and blocks of
    query rows, so that a chunk's score matrix (heads x rows x seq_kv fp32) is about max_elements
    elements (one K/V head's group and one row at least). The causal mask and dropped_kv_block use the
    rows' positions in the whole sequence (q_offset)."""
    import torch

    from codegen.verify import CheckChunk

    b, sq, h, _ = case.Q.shape
    skv, kvh = case.K.shape[1], case.K.shape[2]
    group = h // kvh
    per_kv_head = group * sq * skv
    kv_step = max(1, min(kvh, max_elements // max(per_kv_head, 1)))
    q_step = sq if kv_step > 1 or per_kv_head <= max_elements else max(1, max_elements // max(group * skv, 1))
    visited = math.ceil(skv / inst.block_n)
    if inst.causal:
        visited = min(visited, math.ceil(inst.block_m / inst.block_n))
    start = (visited - 1) * inst.block_n
    for bi in range(b):
        for g0 in range(0, kvh, kv_step):
            heads = slice(g0 * group, min(kvh, g0 + kv_step) * group)
            for q0 in range(0, sq, q_step):
                rows = slice(q0, q0 + q_step)
                sub = AttentionCase(Q=case.Q[bi:bi + 1, rows, heads], K=case.K[bi:bi + 1, :, g0:g0 + kv_step],
                                    V=case.V[bi:bi + 1, :, g0:g0 + kv_step], q_offset=q0)
                ref, mag = _attention32(inst, sub, causal=inst.causal, stats=True)
                wrong, _ = _attention32(inst, sub, causal=not inst.causal)
                dropped, top = ref, min(inst.block_m, sq) - q0
                if top > 0:
                    bad, _ = _attention32(inst, sub, causal=inst.causal, kv_end=lambda r: start)
                    dropped = ref.clone()
                    dropped[:, :top] = bad[:, :top]
                controls = {"zeros": torch.zeros_like(ref),
                            "causal_mask_missing" if inst.causal else "causal_mask_applied": wrong,
                            "dropped_kv_block": dropped}
                yield CheckChunk(index=(slice(bi, bi + 1), rows, heads), ref=ref, mag=mag, controls=controls)
                del ref, mag, wrong, dropped, controls


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


@dataclass(frozen=True, kw_only=True)
class AttentionTolerance:
    """Attention: tol_id = u_out*|ref_id| + eta_out + scale*mag_id. The first two terms bound the final
    rounding to the output dtype; mag (_attention_error_mag) is the modelled error of the
    kernel's arithmetic with its unit roundoffs already in: P rounded to the input dtype before P.V
    (2*u_in relative, the dominant term), fp32 sums over seq_kv keys and head_dim products, the exp2
    argument's rounding, and fp16-subnormal P values -- all carried by P.|V|. Only mag is scaled."""

    u_out: float
    eta_out: float
    u_in: float
    u_acc: float
    head_dim: int
    seq_kv: int
    scale: float = 1.0

    def describe(self) -> str:
        return (f"{self.u_out:.3g}*|ref| + {self.eta_out:.3g} + {self.scale:g}*((2*{self.u_in:.3g} + {self.u_acc:.3g}*"
                f"(4*sqrt({self.seq_kv}) + 4*sqrt({self.head_dim})*A + 4*(1 + B)))*P.|V| + eta_in*M.|V|/l)")

    def bound(self, ref, mag):
        return self.u_out * ref.abs() + self.eta_out + self.scale * mag + TINY


def attention_tolerance(spec_dtypes: tuple[str, ...], head_dim: int, seq_kv: int, scale: float = 1.0) -> AttentionTolerance:
    i, out, acc = (DType(d) for d in spec_dtypes)
    return AttentionTolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_in=UNIT_ROUNDOFF[i],
                              u_acc=UNIT_ROUNDOFF[acc], head_dim=head_dim, seq_kv=seq_kv, scale=scale)


def tolerance(inst, shape, run_target: Target) -> AttentionTolerance:
    return attention_tolerance(inst.spec_dtypes, inst.head_dim, shape[4], inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=attention_flops,
    bytes=attention_bytes,
    make_inputs=attention_inputs,
    reference=attention_reference,
    chunks=attention_chunks,
    tolerance=tolerance,
    controls=attention_controls,
    derived_shapes=attention_derived_shapes,
    out_shape=lambda inst, s: (s[0], s[3], s[1], inst.head_dim),
    launch=lambda kernel, case, out: kernel(case.Q, case.K, case.V, out),
    baselines=attention_baselines,
)
