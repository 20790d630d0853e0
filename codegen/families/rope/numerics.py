"""rope numerics: FLOP and byte formulas, inputs (Q, K and the cos/sin tables of real RoPE angles), the
fp32 reference and its modelled error, the tolerance, negative controls, derived edge shapes and the
torch baselines (eager HF `rotate_half` and torch.compile of it).

Shapes are (tokens, heads, kv_heads). The kernel writes two tensors, Q_out [tokens, heads, head_dim] and
K_out [tokens, kv_heads, head_dim]; verify and bench hand a family one output tensor, so the output here
is one buffer [tokens*heads + tokens*kv_heads, head_dim] whose first tokens*heads rows are Q_out and the
rest K_out -- `rope_launch` passes the two contiguous views of it to the kernel, and the reference and
the controls use the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import Numerics
from codegen.families.numerics import SUBNORMAL_ROUNDOFF, UNIT_ROUNDOFF, CheckChunk, compiled_once, normal_draws
from codegen.families.rows import RowTolerance
from codegen.families.spec import TailPolicy
from codegen.targets import torch_dtype

TABLE_BYTES = 4  # cos and sin of tables: half are fp32
TOLERANCE_MODEL = "5*(|x1*cos| + |x2*sin|) for out1, 5*(|x2*cos| + |x1*sin|) for out2"  # mag of rope_reference, for reports
# RoPE bases of the two input kinds: Llama-2 / NeoX 10000; Llama-3 500000
BASE = {"normal": 10000.0, "wide": 500000.0}
# positions drawn per token from [0, MAX_POSITION): a prefill batch's range, and a long context
MAX_POSITION = {"normal": 8192, "wide": 1 << 20}


def rope_flops(inst, shape) -> float:
    """3 per rotated element: out1 = x1*cos - x2*sin and out2 = x2*cos + x1*sin are 2 multiplies and
    1 add each; the pass-through copy is not counted."""
    t, h, kvh = shape
    return 3.0 * t * (h + kvh) * inst.rotary_dim


def rope_bytes(inst, shape) -> float:
    """Compulsory DRAM traffic: read Q and K once, write Q_out and K_out once, read the rotary_dim/2 angles of the
    token's cos and sin rows once (fp32; full tables: in the input dtype, the first half of each row)."""
    t, h, kvh = shape
    i, o = DType(inst.spec_dtypes[0]), DType(inst.spec_dtypes[1])
    table_bytes = DTYPE_BYTES[i] if inst.full_tables else TABLE_BYTES
    return float(t * (h + kvh) * inst.head_dim * (DTYPE_BYTES[i] + DTYPE_BYTES[o]) + t * inst.rotary_dim * table_bytes)


def rope_derived_shapes(inst) -> list[tuple[int, int, int]]:
    """Edge shapes on top of the spec's: with no tail policy, the first shape's heads on 1 and 3 tokens
    (whole item loops only); predicated, 1 query and 1 key head (fewer items than threads), 3 query heads
    on 1 key head (GQA 3:1) and the first shape's heads on 5 tokens."""
    _, h, kvh = inst.shapes[0]
    if inst.tail == TailPolicy.NONE:
        return [(1, h, kvh), (3, h, kvh)]
    return [(1, 1, 1), (2, 3, 1), (5, h, kvh)]


@dataclass(frozen=True, kw_only=True)
class RopeCase:
    Q: object  # stored inputs (device, input dtype)
    K: object
    COS: object  # [tokens, rotary_dim/2], fp32; full tables: [tokens, rotary_dim] in the input dtype ([c, c])
    SIN: object
    Q32: object  # the same rounded values in fp32
    K32: object
    positions: object  # [tokens] int64, what the tables were built from (for reports and tests)


def rope_tables(positions, rotary_dim: int, base: float):
    """cos and sin [tokens, rotary_dim/2] of angle pos * base^(-2i/rotary_dim), computed in float64
    and rounded to fp32 (what the kernel reads; the reference reads the same fp32 values)."""
    import torch

    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos().float(), angle.sin().float()


def tables32(inst, case: RopeCase):
    """cos and sin [tokens, rotary_dim/2] in fp32 as the kernel reads them (full tables: the first half of each row,
    whose values the input dtype already rounded): what the references compute with."""
    half = inst.rotary_dim // 2
    return case.COS[:, :half].float(), case.SIN[:, :half].float()


def rope_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> RopeCase:
    """'normal': Q, K ~ N(0,1), positions in [0, 8192), base 10000. 'wide': each (token, head) vector
    scaled by e^[-3, 3] (outputs of different sizes), positions in [0, 2^20), base 500000 (Llama-3):
    large angles. Q and K rounded to the input dtype; the tables are fp32, or (full tables) each row's angles
    twice in the input dtype, as transformers' rotary embedding returns them."""
    import torch

    t, h, kvh = shape
    d = inst.head_dim
    (q, k), g = normal_draws(seed, (t, h, d), (t, kvh, d))  # shared: not written
    if kind == "wide":
        q = q * torch.exp(torch.empty(t, h, 1).uniform_(-3, 3, generator=g))
        k = k * torch.exp(torch.empty(t, kvh, 1).uniform_(-3, 3, generator=g))
    positions = torch.randint(0, MAX_POSITION[kind], (t,), generator=g)
    cos, sin = rope_tables(positions, inst.rotary_dim, BASE[kind])
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    qq, kq = q.to(dt, copy=True), k.to(dt, copy=True)  # rounded inputs: the reference sees exactly what the kernel sees
    if inst.full_tables:
        cos, sin = torch.cat((cos, cos), dim=-1).to(dt), torch.cat((sin, sin), dim=-1).to(dt)
    return RopeCase(Q=qq.to(device), K=kq.to(device), COS=cos.to(device), SIN=sin.to(device),
                    Q32=qq.float().to(device), K32=kq.float().to(device), positions=positions)


def rope32(x, cos, sin, rotary_dim: int, *, sign: float = 1.0, interleaved: bool = False, stats: bool = False):
    """fp32 rotary embedding of x [tokens, heads, head_dim] with cos/sin [tokens, rotary_dim/2]:
    rotate_half pairs (x[i], x[half + i]), or with `interleaved` the GPT-J pairs (x[2i], x[2i+1]);
    sign -1 rotates the other way. With stats, also the modelled error magnitude (rope_reference)."""
    import torch

    half = rotary_dim // 2
    c, s = cos[:, None, :], sin[:, None, :]
    if interleaved:
        i1, i2 = slice(0, rotary_dim, 2), slice(1, rotary_dim, 2)
    else:
        i1, i2 = slice(0, half), slice(half, rotary_dim)
    x1, x2 = x[..., i1], x[..., i2]
    out = x.clone()
    out[..., i1] = x1 * c - sign * (x2 * s)
    out[..., i2] = x2 * c + sign * (x1 * s)
    if not stats:
        return out
    mag = torch.zeros_like(x)
    mag[..., i1] = 5.0 * ((x1 * c).abs() + (x2 * s).abs())  # out1 = x1*c - x2*s
    mag[..., i2] = 5.0 * ((x2 * c).abs() + (x1 * s).abs())  # out2 = x2*c + x1*s
    return out, mag


def _flat(q, k):
    """Q_out and K_out in the one output buffer's layout: [tokens*heads + tokens*kv_heads, head_dim]."""
    import torch

    return torch.cat((q.reshape(-1, q.shape[-1]), k.reshape(-1, k.shape[-1])))


def rope_reference(inst, case: RopeCase):
    """fp32 reference of the same rounded inputs and fp32 tables, and the per-element error magnitude
    the tolerance scales by u_acc (docs/verification.md): 5*(|x1*c| + |x2*s|) for out1 = x1*c - x2*s,
    5*(|x2*c| + |x1*s|) for out2 = x2*c + x1*s, 0 for the pass-through elements (copied exactly). The
    kernel rounds the two products and their sum in fp32 (or contracts one product into an FMA): at
    most u_acc*(|p1| + |p2|) + u_acc*|out| <= 2*u_acc*(|p1| + |p2|) from the exact value; the fp32
    reference as much again, in either direction: 4. The fifth covers rounding to the output dtype a
    value those errors moved (the u_out term is taken of |ref|, not of the kernel's fp32 value)."""
    cos, sin = tables32(inst, case)
    q, qm = rope32(case.Q32, cos, sin, inst.rotary_dim, stats=True)
    k, km = rope32(case.K32, cos, sin, inst.rotary_dim, stats=True)
    return _flat(q, k), _flat(qm, km)


def rope_controls(inst, case: RopeCase, ref) -> dict[str, object]:
    """Plausible wrong kernels: nothing written; the rotation the wrong way (sin's sign flipped); the
    GPT-J interleaved pairing instead of rotate_half; K left unrotated (Q only); each token rotated with
    the next token's cos/sin row (a wrong table row; not for one token); and, with a pass-through part,
    that part not copied (zeros)."""
    import torch

    rd, (cos, sin) = inst.rotary_dim, tables32(inst, case)
    controls = {
        "zeros": torch.zeros_like(ref),
        "sin_sign_flipped": _flat(rope32(case.Q32, cos, sin, rd, sign=-1.0), rope32(case.K32, cos, sin, rd, sign=-1.0)),
        "interleaved_pairs": _flat(rope32(case.Q32, cos, sin, rd, interleaved=True),
                                   rope32(case.K32, cos, sin, rd, interleaved=True)),
        "k_not_rotated": _flat(rope32(case.Q32, cos, sin, rd), case.K32),
    }
    if cos.shape[0] > 1:
        nc, ns = cos.roll(-1, dims=0), sin.roll(-1, dims=0)
        controls["next_token_tables"] = _flat(rope32(case.Q32, nc, ns, rd), rope32(case.K32, nc, ns, rd))
    if rd < inst.head_dim:
        bad = ref.clone()
        bad[:, rd:] = 0.0
        controls["pass_through_not_copied"] = bad
    return controls


def rope_chunks(inst, case: RopeCase, max_elements: int):
    """The chunked check (codegen.run.verify.judge_chunks): blocks of whole tokens, about max_elements output
    elements each (one token at least), each block once for its Q_out rows and once for its K_out rows of
    the output buffer. The fp32 copies of Q and K are made per block; the controls are rope_controls' own,
    computed per block (`k_not_rotated` is the reference on the Q rows; `next_token_tables` takes the next
    token's row across block boundaries and wraps at the last, as a roll over the whole table does)."""
    import torch

    tokens, heads, d = case.Q.shape
    kv_heads = case.K.shape[1]
    rd, (cos, sin) = inst.rotary_dim, tables32(inst, case)
    step = max(1, max_elements // max((heads + kv_heads) * d, 1))
    for t0 in range(0, tokens, step):
        t1 = min(tokens, t0 + step)
        c, s = cos[t0:t1], sin[t0:t1]
        following = (torch.arange(t0, t1, device=cos.device) + 1) % tokens
        nc, ns = cos[following], sin[following]
        for x, first, is_k in ((case.Q[t0:t1], t0 * heads, False),
                               (case.K[t0:t1], tokens * heads + t0 * kv_heads, True)):
            x32 = x.float()
            ref, mag = rope32(x32, c, s, rd, stats=True)
            ref, mag = ref.reshape(-1, d), mag.reshape(-1, d)
            wrong = {
                "zeros": torch.zeros_like(ref),
                "sin_sign_flipped": rope32(x32, c, s, rd, sign=-1.0).reshape(-1, d),
                "interleaved_pairs": rope32(x32, c, s, rd, interleaved=True).reshape(-1, d),
                "k_not_rotated": x32.reshape(-1, d) if is_k else ref,
            }
            if tokens > 1:
                wrong["next_token_tables"] = rope32(x32, nc, ns, rd).reshape(-1, d)
            if rd < inst.head_dim:
                bad = ref.clone()
                bad[:, rd:] = 0.0
                wrong["pass_through_not_copied"] = bad
            yield CheckChunk(index=(slice(first, first + ref.shape[0]),), ref=ref, mag=mag, controls=wrong)


def rope_baselines(inst, case: RopeCase, out_dtype):
    """The usual HF formulation (transformers' `apply_rotary_pos_emb` with `rotate_half`; partial rotary
    as in its GPT-NeoX / Phi models: rotate q[..., :rotary_dim], concatenate the rest): cos/sin expanded to
    rotary_dim and cast to the input dtype once, outside the timing, as HF's rotary module does once per
    forward -- so its math is in the input dtype, not fp32. `eager`, and `compile`: torch.compile of it."""
    import torch

    rd, d = inst.rotary_dim, inst.head_dim
    dt = case.Q.dtype
    c32, s32 = tables32(inst, case)
    cos = torch.cat((c32, c32), dim=-1).to(dt)[:, None, :]  # [tokens, 1, rotary_dim]
    sin = torch.cat((s32, s32), dim=-1).to(dt)[:, None, :]

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def op(q, k, cos, sin):
        if rd < d:
            q_rot, q_pass = q[..., :rd], q[..., rd:]
            k_rot, k_pass = k[..., :rd], k[..., rd:]
        else:
            q_rot, k_rot = q, k
        q_embed = q_rot * cos + rotate_half(q_rot) * sin
        k_embed = k_rot * cos + rotate_half(k_rot) * sin
        if rd < d:
            q_embed, k_embed = torch.cat((q_embed, q_pass), dim=-1), torch.cat((k_embed, k_pass), dim=-1)
        return q_embed.to(out_dtype), k_embed.to(out_dtype)

    compiled = compiled_once(("rope", inst.spec_dtypes, rd, d), op)
    q, k = case.Q, case.K
    return {"eager": lambda: op(q, k, cos, sin), "compile": lambda: compiled(q, k, cos, sin)}


def rope_out_shape(inst, shape) -> tuple[int, int]:
    t, h, kvh = shape
    return (t * h + t * kvh, inst.head_dim)


def rope_launch(kernel, case: RopeCase, out, k_out=None) -> None:
    """Q_out and K_out are the two contiguous parts of `out` (see the module docstring), or, with `k_out`, `out`
    is Q_out (the ops allocate the two apart)."""
    if k_out is None:
        nq = case.Q.shape[0] * case.Q.shape[1]
        out, k_out = out[:nq].view(case.Q.shape), out[nq:].view(case.K.shape)
    kernel(case.Q, case.K, case.COS, case.SIN, out, k_out)


def tolerance(inst, shape, run_target: Target) -> RowTolerance:
    """tol = u_out*|ref| + eta_out + scale*u_acc*mag, mag = 5*(|x1*cos| + |x2*sin|) for out1 and
    5*(|x2*cos| + |x1*sin|) for out2 (rope_reference); the same record as the row families'."""
    _, out, acc = (DType(d) for d in inst.spec_dtypes)
    return RowTolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_acc=UNIT_ROUNDOFF[acc],
                        model=TOLERANCE_MODEL, scale=inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=rope_flops,
    bytes=rope_bytes,
    make_inputs=rope_inputs,
    reference=rope_reference,
    tolerance=tolerance,
    controls=rope_controls,
    derived_shapes=rope_derived_shapes,
    out_shape=rope_out_shape,
    launch=rope_launch,
    baselines=rope_baselines,
    chunks=rope_chunks,
)
