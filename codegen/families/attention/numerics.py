"""Attention numerics: FLOP and byte formulas, inputs, the fp32 reference and its modelled error, the
tolerance, negative controls, derived edge shapes and the torch baselines.

Shapes are (batch, heads, kv_heads, seq_q, seq_kv); Q, O are [batch, seq_q, heads, head_dim] and
K, V [batch, seq_kv, kv_heads, head_dim]. Causal masks: top_left, query i sees keys j <= i; bottom_right,
j <= i + seq_kv - seq_q (the queries are the last seq_q positions of the cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.attention.spec import AttentionVariant, CausalMask
from codegen.families.base import Numerics
from codegen.families.numerics import (
    SUBNORMAL_ROUNDOFF,
    TINY,
    UNIT_ROUNDOFF,
    compiled_once,
    counters_left,
    normal_draws,
    verify_workspaces,
)
from codegen.families.spec import TailPolicy
from codegen.targets import torch_dtype


def visible_pairs(mask: CausalMask, seq_q: int, seq_kv: int) -> int:
    """(query, key) pairs the mask allows: query i sees min(seq_kv, i + 1 + shift) keys, shift 0
    (top_left) or seq_kv - seq_q (bottom_right, seq_q <= seq_kv by rule causal_alignment)."""
    if mask == CausalMask.NONE:
        return seq_q * seq_kv
    shift = seq_kv - seq_q if mask == CausalMask.BOTTOM_RIGHT else 0
    inside = max(0, min(seq_q, seq_kv - shift))  # queries whose row of the mask ends before seq_kv
    return inside * (shift + 1) + inside * (inside - 1) // 2 + (seq_q - inside) * seq_kv


def attention_flops(inst, shape) -> float:
    """4*B*H*Sq*Skv*D: two matmuls (Q.K^T and P.V) of 2*Sq*Skv*D each per (batch, head); halved for a
    causal mask when seq_q == seq_kv (about half of the score matrix is above the diagonal; the
    diagonal blocks the kernel computes in full are not counted), and for a causal mask at seq_q !=
    seq_kv counted over the visible (query, key) pairs only. Softmax work is not counted."""
    b, h, _, sq, skv = shape
    if inst.causal and sq != skv:
        return 4.0 * b * h * visible_pairs(inst.mask, sq, skv) * inst.head_dim
    flops = 4.0 * b * h * sq * skv * inst.head_dim
    return flops / 2 if inst.causal else flops


def visible_keys(mask: CausalMask, seq_q: int, seq_kv: int) -> int:
    """Keys at least one query may see: the last query sees keys <= seq_q - 1 (top_left), all of them
    (bottom_right, no mask)."""
    return min(seq_kv, seq_q) if mask == CausalMask.TOP_LEFT else seq_kv


def attention_bytes(inst, shape) -> float:
    """Compulsory DRAM traffic: read Q once, each K/V head's K and V rows that some query sees once (the
    whole cache but for top_left with seq_q < seq_kv), write O once. The query heads sharing a K/V head
    (GQA) do not multiply it: decode's traffic is the KV cache. The decode workspace (fp32 partial outputs
    and log-sum-exps, written and read back) is not compulsory and not counted."""
    b, h, kvh, sq, skv = shape
    i, o = DType(inst.spec_dtypes[0]), DType(inst.spec_dtypes[1])
    d, keys = inst.head_dim, visible_keys(inst.mask, sq, skv)
    return float(b * d * (sq * h * DTYPE_BYTES[i] + 2 * keys * kvh * DTYPE_BYTES[i] + sq * h * DTYPE_BYTES[o]))

# split_kv auto's derived shapes: keys for this many splits of one block where the splits fill little of a wave
AUTO_CHECK_SPLITS = 4


def attention_derived_shapes(inst) -> list[tuple[int, int, int, int, int]]:
    """Small edge shapes on top of the spec's, all batch 1, GQA. prefill, 2 query heads on 1 K/V head:
    with no tail policy, one block and a few blocks (seq_q < seq_kv, where the two causal alignments
    differ); predicated, a single token, and one past / one short of a block multiple.
    decode (every split at least one KV block, rule split_kv): 1 query of 2 heads over one block per
    split; 3 queries of 4 heads (12 packed rows) over two blocks per split; a group of 4 at
    block_m / 4 + 1 positions (block_m + 4 rows: a second, almost empty row block) over one split of two
    blocks and the rest of one -- predicated, the keys also one past / half a block past a multiple.
    split_kv auto (these shapes fill little of a wave: a split per KV block, four of them in the first) adds
    half a wave of batches over five blocks: two splits, of two and three blocks. dynamic_kv: the one kernel at
    lengths across its range instead (dynamic_kv_shapes)."""
    bm, bn = inst.block_m, inst.block_n
    if inst.dynamic_kv is not None:
        return dynamic_kv_shapes(inst)
    if inst.variant == AttentionVariant.DECODE:
        ragged = inst.tail != TailPolicy.NONE
        k = (AUTO_CHECK_SPLITS if inst.split_wave else inst.split_kv) * bn
        shapes = [(1, 2, 1, 1, k), (1, 4, 1, 3, 2 * k + (bn // 2 + 1 if ragged else 0)),
                  (1, 8, 2, bm // 4 + 1, k + (1 if ragged else bn))]
        if inst.split_wave:
            shapes.append((max(1, inst.split_wave // 2), 2, 1, 1, 5 * bn - (bn // 2 if ragged else 0)))
        return shapes
    one = math.lcm(bm, bn)
    rounds = [persistent_rounds_shape(inst)] if inst.persistent_grid else []
    if inst.persistent_grid and (inst.snake or inst.dynamic):  # snake: a last round dealt forward after a reversed
        # one; dynamic: workgroups taking more than one tile from the counter
        rounds.append(persistent_rounds_shape(inst, rounds=2))
    if inst.tail == TailPolicy.NONE:
        return [(1, 2, 1, one, one), (1, 2, 1, 2 * one, 3 * one), *rounds]
    # one query short of a block over one key past two KV blocks -- or past as many as cover the queries where
    # block_m > 2 x block_n: bottom_right leaves no query without a key only where seq_q <= seq_kv (causal_alignment)
    return [(1, 2, 1, 1, 1), (1, 2, 1, bm + 1, bm + 1), (1, 2, 1, bm - 1, max(2, -(-bm // bn)) * bn + 1), *rounds]


# dynamic_kv: the longest KV length verified is at most this many elements of K (batch x seq_kv x kv_heads x head_dim)
DYNAMIC_KV_VERIFY_ELEMENTS = 1 << 26


def dynamic_kv_shapes(inst) -> list[tuple[int, int, int, int, int]]:
    """dynamic_kv: for each (batch, heads, kv_heads, seq_q) of the spec's shapes, the one compiled kernel at KV
    lengths across its range: the shortest it serves, one key past it, a ragged length in the middle (half a block
    and one key past a multiple) and the longest -- or, where K and V there would hold more than
    DYNAMIC_KV_VERIFY_ELEMENTS, the longest that fits. Every split has a KV block at each (rule dynamic_kv_split)."""
    lo, hi = inst.dynamic_kv
    out: list[tuple[int, int, int, int, int]] = []
    for b, h, kvh, sq in dict.fromkeys(s[:4] for s in inst.shapes):
        top = min(hi, max(lo, DYNAMIC_KV_VERIFY_ELEMENTS // (b * kvh * inst.head_dim)))
        mid = min(top, max(lo, (lo + top) // 2 // inst.block_n * inst.block_n + inst.block_n // 2 + 1))
        out += [(b, h, kvh, sq, n) for n in dict.fromkeys((lo, min(lo + 1, top), mid, top))]
    return out


PERSISTENT_CHECK_HEADS, PERSISTENT_CHECK_KV_HEADS = 16, 4  # the rounds shape: 4 query heads per K/V head


def persistent_rounds_shape(inst, rounds: int = 1) -> tuple[int, int, int, int, int]:
    """A persistent grid (schedule persistent, fa3's grid persistent): a shape of more tiles than the grid has
    workgroups, so that some workgroups run another tile (its accumulators reset, its Q reloaded): 16 heads on 4 K/V
    heads and one query block more than `rounds` x workgroups / 16 -- gfx942 (304 workgroups) 20 blocks, 320 tiles.
    No tail policy: seq_q = seq_kv, a multiple of lcm(block_m, block_n); predicated: one row short of that many
    query blocks."""
    bm, one = inst.block_m, math.lcm(inst.block_m, inst.block_n)
    q_blocks = -(-rounds * inst.persistent_workgroups // PERSISTENT_CHECK_HEADS) + 1
    seq = (q_blocks * bm - 1) if inst.tail != TailPolicy.NONE else -(-q_blocks * bm // one) * one
    return (1, PERSISTENT_CHECK_HEADS, PERSISTENT_CHECK_KV_HEADS, seq, seq)


@dataclass(frozen=True, kw_only=True)
class AttentionCase:
    Q: object  # stored inputs (device, input dtype, kernel layout)
    K: object
    V: object
    q_offset: int = 0  # position of Q's first row in the whole sequence (a chunk of the query rows)
    seq_q: int | None = None  # the whole sequence's seq_q (bottom_right's shift is seq_kv - seq_q); None: Q's
    workspace: tuple = ()  # decode: the fp32 O_PART and LSE buffers the kernel takes between K/V and O
    # a chunk's place in the whole problem: its first batch and first query head, and the whole problem's
    # (batch, heads); None: Q's own (the persistent control maps tiles through them)
    batch_offset: int = 0
    head_offset: int = 0
    whole: tuple[int, int] | None = None

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

    @property
    def causal_shift(self) -> int:
        """bottom_right: query i sees keys j <= i + seq_kv - seq_q."""
        return self.K.shape[1] - (self.seq_q if self.seq_q is not None else self.Q.shape[1])


# bottom_right with seq_q < seq_kv: the V rows of the last seq_q keys (the only ones some query must not
# see) are this much larger, so that a mask missing or off by one key shows above the tolerance: with
# seq_q = 4 over 4096 keys a missing mask adds 3 keys of weight ~1/4096 to the first query, well under
# bf16's 2^-7 at |v| ~ 1 (the control was vacuous), and 64 |v| puts it above.
HOT_KEY_VALUE_SCALE = 64.0
# decode: the V rows of the two KV blocks the split controls drop are as hot, for the same reason: split 0's
# last block (dropped_kv_block: a wrong KV trip count) and the last split's first block (dropped_split: the
# combine skipping a split). One block of 64 keys is 1/512 of a near-uniform softmax over 32k keys, and a
# random 1/32 of the keys shifts the mean of their V rows little, both under bf16's 2^-7 of |v| (the controls
# were vacuous at 1 x 32 x 8 x 1 x 32785, bf16). Two blocks only: the last block of every split, at 16 splits
# of 2 blocks, made half the keys hot and drowned the last seq_q keys' signal (causal_mask_missing).


def attention_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> AttentionCase:
    """'normal': Q, K, V ~ N(0,1). 'wide': each head of Q, K and V scaled by e^[-1.5, 1.5] (sharper and
    flatter softmax rows from head to head, outputs of different sizes), all rounded to the input dtype.
    Times HOT_KEY_VALUE_SCALE: V of the last seq_q keys (bottom_right with seq_q < seq_kv) and, decode, V of
    the KV blocks the split controls drop (_split_control_keys).
    decode also gets its fp32 workspace (O_PART, LSE), NaN-filled: the kernel must write what it reads (and
    split_kv_combine fixup's counters, zeros: codegen.families.numerics.verify_workspaces)."""
    import torch

    b, h, kvh, sq, skv = shape
    d = inst.head_dim
    (q, k, v), g = normal_draws(seed, (b, sq, h, d), (b, skv, kvh, d), (b, skv, kvh, d))  # shared: not written
    if kind == "wide":
        q = q * torch.exp(torch.empty(1, 1, h, 1).uniform_(-1.5, 1.5, generator=g))
        k = k * torch.exp(torch.empty(1, 1, kvh, 1).uniform_(-1.5, 1.5, generator=g))
        v = v * torch.exp(torch.empty(1, 1, kvh, 1).uniform_(-1.5, 1.5, generator=g))
    hot = torch.zeros(skv, dtype=torch.bool)
    if inst.mask == CausalMask.BOTTOM_RIGHT and sq < skv:
        hot[skv - sq:] = True
    if inst.variant == AttentionVariant.DECODE:
        hot |= _split_control_keys(inst, skv, inst.split_for(shape))
    dt = torch_dtype(inst.spec_dtypes[0], run_target)
    # rounded inputs (the reference sees exactly what the kernel sees), new tensors: the draws are shared
    qq, kq, vq = q.to(dt, copy=True), k.to(dt, copy=True), v.to(dt, copy=True)
    vq[:, hot] = (v[:, hot] * HOT_KEY_VALUE_SCALE).to(dt)  # scaled before the rounding, as the rest is rounded
    workspace = verify_workspaces(inst, shape, device, run_target)
    return AttentionCase(Q=qq.to(device), K=kq.to(device), V=vq.to(device), workspace=workspace)


def allowed_keys(mask: CausalMask, rows, cols, shift: int):
    """Which keys (cols, [1, skv]) each query (rows, [sq, 1] positions in the whole sequence) may see."""
    import torch

    if mask == CausalMask.TOP_LEFT:
        return cols <= rows
    if mask == CausalMask.BOTTOM_RIGHT:
        return cols <= rows + shift
    return torch.ones(rows.shape[0], cols.shape[1], dtype=torch.bool, device=rows.device)


def _attention32(inst, case: AttentionCase, *, mask: CausalMask, stats: bool = False, keep=None):
    """fp32 attention by explicit math, one batch at a time: s = scale*q.k^T, mask, softmax, .v, with
    K/V heads repeated for GQA. keep(rows, cols) -> the keys a control's bug leaves each query row
    (positions in the whole sequence). With stats, also the per-element error magnitudes of the
    tolerance (see attention_reference)."""
    import torch

    q, k, v = case.Q32, case.K32, case.V32
    b, sq, h, _ = q.shape
    skv, kvh = k.shape[1], k.shape[2]
    group = h // kvh
    out = torch.empty_like(q)
    mag = torch.empty_like(q) if stats else None
    rows = torch.arange(sq, device=q.device)[:, None] + case.q_offset
    cols = torch.arange(skv, device=q.device)[None, :]
    allowed = allowed_keys(mask, rows, cols, case.causal_shift)
    if keep is not None:
        allowed = allowed & keep(rows, cols)
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
    """The tolerance's per-element error magnitude for one batch (docs/verification.md, attention):

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
    return _attention32(inst, case, mask=inst.mask, stats=True)


def _split_first_block(split: int, kv_blocks: int, split_kv: int) -> int:
    """decode: the first KV block of split `split` of `split_kv` (the template's s * nb // SPLIT_KV)."""
    return split * kv_blocks // split_kv


def _split_control_keys(inst, seq_kv: int, split: int):
    """decode: a [seq_kv] mask of the keys of split 0's last KV block (what dropped_kv_block drops) and of the
    last split's first block (what dropped_split drops first); with one split, the last block (maybe ragged)."""
    import torch

    nb, bn = math.ceil(seq_kv / inst.block_n), inst.block_n
    keys = torch.zeros(seq_kv, dtype=torch.bool)
    last = _split_first_block(1, nb, split) - 1
    if last >= 0:  # split 0 has a block
        keys[last * bn:(last + 1) * bn] = True
    first = _split_first_block(split - 1, nb, split)
    if first < nb:  # the last split has a block
        keys[first * bn:(first + 1) * bn] = True
    return keys


def case_split(inst, case: AttentionCase) -> int:
    """decode: the KV splits of the whole problem `case` is (a chunk of): AttentionInstance.split_for its shape."""
    batch, heads = case.whole if case.whole is not None else (case.Q.shape[0], case.Q.shape[2])
    seq_q = case.seq_q if case.seq_q is not None else case.Q.shape[1]
    kv_heads = heads // (case.Q.shape[2] // case.K.shape[2])  # a chunk holds whole groups
    return inst.split_for((batch, heads, kv_heads, seq_q, case.K.shape[1]))


def _dropped_block_keep(inst, seq_q: int, seq_kv: int, shift: int, split: int = 1):
    """keep(rows, cols) of dropped_kv_block: a wrong KV trip count. prefill: the rows of the first query
    block miss the last KV block that block visits (causal: up to its last visible key, block_m - 1 +
    shift; else all). decode: every row misses the last KV block of split 0."""
    bn, nb = inst.block_n, math.ceil(seq_kv / inst.block_n)
    if inst.variant == AttentionVariant.DECODE:
        last = _split_first_block(1, nb, split) - 1
        return lambda r, c: (c < last * bn) | (c >= (last + 1) * bn)
    visited = nb
    if inst.causal:
        visited = min(visited, max(1, math.ceil((inst.block_m + (shift if inst.mask == CausalMask.BOTTOM_RIGHT else 0)) / bn)))
    start = (visited - 1) * bn
    return lambda r, c: (r >= inst.block_m) | (c < start)


def _dropped_split_keep(inst, seq_kv: int, split: int):
    """keep(rows, cols) of dropped_split (decode): the combine ignores the last split's partial output,
    i.e. every row loses the keys of that split's KV blocks."""
    nb = math.ceil(seq_kv / inst.block_n)
    start = _split_first_block(split - 1, nb, split) * inst.block_n
    return lambda r, c: c < start


def _controls(inst, case: AttentionCase, ref) -> dict[str, object]:
    """Every negative control for one case (or one chunk of it: rows at case.q_offset)."""
    import torch

    seq_q = case.seq_q if case.seq_q is not None else case.Q.shape[1]
    seq_kv = case.K.shape[1]
    out = {"zeros": torch.zeros_like(ref)}
    if inst.causal:
        if not (inst.mask == CausalMask.BOTTOM_RIGHT and seq_q == 1):  # one query at the end sees every key
            out["causal_mask_missing"] = _attention32(inst, case, mask=CausalMask.NONE)[0]
        if seq_q != seq_kv:  # the two alignments are one mask at seq_q == seq_kv
            other = CausalMask.BOTTOM_RIGHT if inst.mask == CausalMask.TOP_LEFT else CausalMask.TOP_LEFT
            out["causal_other_alignment"] = _attention32(inst, case, mask=other)[0]
    else:
        out["causal_mask_applied"] = _attention32(inst, case, mask=CausalMask.TOP_LEFT)[0]
    split = case_split(inst, case)
    keep = _dropped_block_keep(inst, seq_q, seq_kv, case.causal_shift, split)
    if inst.variant == AttentionVariant.DECODE or case.q_offset < inst.block_m:
        out["dropped_kv_block"] = _attention32(inst, case, mask=inst.mask, keep=keep)[0]
    else:
        out["dropped_kv_block"] = ref  # rows past the first query block: the bug does not reach them
    if inst.variant == AttentionVariant.DECODE:
        out["dropped_split"] = _attention32(inst, case, mask=inst.mask, keep=_dropped_split_keep(inst, seq_kv, split))[0]
    if inst.persistent_grid:
        name = "persistent_fetch_skipped" if getattr(inst, "dynamic", False) else "persistent_last_round_skipped"
        out[name] = persistent_last_round_skipped(inst, case, ref)
    if getattr(inst, "v_transposed", False):
        out["v_transposed_keys_reversed"] = v_transposed_keys_reversed(inst, case)
    return out


def v_rows_per_thread(inst) -> int:
    """v_layout transposed: V_ROWS, the consecutive keys one thread loads and writes (the template's)."""
    vec = 16 // DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    return inst.block_n * inst.head_dim // (inst.threads * vec)


def v_transposed_keys_reversed(inst, case: AttentionCase):
    """Negative control v_transposed_keys_reversed (v_layout transposed): the register permutation between
    the 16-byte loads and the transposed LDS write gets the keys of each thread's V_ROWS group in reverse
    order (_v_col_index's i % V_ROWS as V_ROWS - 1 - i % V_ROWS), so every key's V row is read for its
    neighbour's probability."""
    import torch

    rows, seq_kv = v_rows_per_thread(inst), case.K.shape[1]
    j = torch.arange(seq_kv, device=case.V.device)
    perm = j - j % rows + (rows - 1 - j % rows)
    # a ragged last KV block: keys past seq_kv load as zeros, so a key whose partner lies past them reads zeros
    padded = torch.cat([case.V, torch.zeros_like(case.V[:, :rows])], dim=1)
    return _attention32(inst, replace(case, V=padded[:, perm]), mask=inst.mask)[0]


def persistent_last_round_skipped(inst, case: AttentionCase, ref):
    """Negative control persistent_last_round_skipped: the persistent loop one round short -- every workgroup
    skips its last tile (instance.persistent_last_tiles: with tile_order strided the last `grid` tiles of
    instance.persistent_tile's order), which stays unwritten (verify's NaN fill). With no more tiles than
    workgroups that is every tile; persistent_rounds_shape has more. With tile_order dynamic it is
    persistent_fetch_skipped: the tile counter never hands a tile out, so every tile past the workgroups' first
    stays unwritten."""
    batch, heads = case.whole if case.whole is not None else (case.Q.shape[0], case.Q.shape[2])
    seq_q = case.seq_q if case.seq_q is not None else case.Q.shape[1]
    shape = (batch, heads, case.K.shape[2], seq_q, case.K.shape[1])
    out = ref.clone()
    rows0, rows1 = case.q_offset, case.q_offset + ref.shape[1]
    for tile in inst.persistent_last_tiles(shape):
        qb, h, b = inst.persistent_tile(tile, shape)
        lo, hi = max(qb * inst.block_m, rows0), min((qb + 1) * inst.block_m, rows1)
        b, h = b - case.batch_offset, h - case.head_offset
        if lo < hi and 0 <= b < ref.shape[0] and 0 <= h < ref.shape[2]:
            out[b, lo - rows0:hi - rows0, h] = float("nan")
    return out


def attention_dropped_block(inst, case: AttentionCase, ref):
    """Negative control dropped_kv_block on a whole case (see _dropped_block_keep). Rows left with no key
    at all get NaN (0/0)."""
    seq_q, seq_kv = case.Q.shape[1], case.K.shape[1]
    keep = _dropped_block_keep(inst, seq_q, seq_kv, case.causal_shift, case_split(inst, case))
    bad, _ = _attention32(inst, case, mask=inst.mask, keep=keep)
    if inst.variant == AttentionVariant.DECODE:
        return bad
    out = ref.clone()
    rows = min(inst.block_m, seq_q)
    out[:, :rows] = bad[:, :rows]
    return out


def attention_controls(inst, case: AttentionCase, ref) -> dict[str, object]:
    return _controls(inst, case, ref)


def attention_chunks(inst, case: AttentionCase, max_elements: int):
    """The chunked check: per batch, groups of K/V heads with the query heads they serve, and blocks of
    query rows, so that a chunk's score matrix (heads x rows x seq_kv fp32) is about max_elements
    elements (one K/V head's group and one row at least). The causal masks and the controls use the
    rows' positions in the whole sequence (q_offset, seq_q)."""
    from codegen.families.numerics import CheckChunk

    b, sq, h, _ = case.Q.shape
    skv, kvh = case.K.shape[1], case.K.shape[2]
    group = h // kvh
    per_kv_head = group * sq * skv
    kv_step = max(1, min(kvh, max_elements // max(per_kv_head, 1)))
    q_step = sq if kv_step > 1 or per_kv_head <= max_elements else max(1, max_elements // max(group * skv, 1))
    for bi in range(b):
        for g0 in range(0, kvh, kv_step):
            heads = slice(g0 * group, min(kvh, g0 + kv_step) * group)
            for q0 in range(0, sq, q_step):
                rows = slice(q0, q0 + q_step)
                sub = AttentionCase(Q=case.Q[bi:bi + 1, rows, heads], K=case.K[bi:bi + 1, :, g0:g0 + kv_step],
                                    V=case.V[bi:bi + 1, :, g0:g0 + kv_step], q_offset=q0, seq_q=sq,
                                    batch_offset=bi, head_offset=g0 * group, whole=(b, h))
                ref, mag = _attention32(inst, sub, mask=inst.mask, stats=True)
                controls = _controls(inst, sub, ref)
                yield CheckChunk(index=(slice(bi, bi + 1), rows, heads), ref=ref, mag=mag, controls=controls)
                del ref, mag, controls


def sdpa_mask(mask: CausalMask, seq_q: int, seq_kv: int) -> dict[str, object]:
    """The keyword arguments that give F.scaled_dot_product_attention the kernel's mask. SDPA's is_causal
    is top-left aligned; bottom_right equals it at seq_q == seq_kv and is no mask at all for one query;
    otherwise torch's lower-right CausalBias (which SDPA runs as flash's causal -- bottom-right in
    FlashAttention -- or memory-efficient's lower-right mask, and as a materialised mask elsewhere)."""
    if mask == CausalMask.NONE or (mask == CausalMask.BOTTOM_RIGHT and seq_q == 1):
        return {"is_causal": False}
    if mask == CausalMask.TOP_LEFT or seq_q == seq_kv:
        return {"is_causal": True}
    from torch.nn.attention.bias import causal_lower_right

    return {"attn_mask": causal_lower_right(seq_q, seq_kv)}


def attention_baselines(inst, case: AttentionCase, out_dtype):
    """F.scaled_dot_product_attention in [batch, heads, seq, dim] views of the same tensors, pinned to
    the flash, the cuDNN and the memory-efficient backend (eager; a backend that refuses the case is
    reported as such by bench), and torch.compile of the explicit math. The mask is the kernel's
    (sdpa_mask: never is_causal for bottom_right at seq_q < seq_kv); GQA via enable_gqa."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.transpose(1, 2) for t in (case.Q, case.K, case.V))
    gqa = q.shape[1] != k.shape[1]
    scale, mask = inst.softmax_scale, inst.mask
    sq, skv = q.shape[2], k.shape[2]
    masking = sdpa_mask(mask, sq, skv)

    def sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa, **masking)
        return run

    def math_op(q_, k_, v_):
        group = q_.shape[1] // k_.shape[1]
        k_, v_ = k_.repeat_interleave(group, dim=1), v_.repeat_interleave(group, dim=1)
        s = (q_.float() @ k_.float().transpose(-1, -2)) * scale
        if mask != CausalMask.NONE:
            n_q, n_kv = s.shape[-2:]
            shift = n_kv - n_q if mask == CausalMask.BOTTOM_RIGHT else 0
            s = s.masked_fill(torch.ones(n_q, n_kv, dtype=torch.bool, device=s.device).triu(1 + shift), float("-inf"))
        return (torch.softmax(s, dim=-1) @ v_.float()).to(out_dtype)

    compiled = compiled_once(("attention", inst.spec_dtypes, mask.value, scale), math_op)
    return {"sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION), "compile": lambda: compiled(q, k, v)}


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
    launch=lambda kernel, case, out: kernel(case.Q, case.K, case.V, *case.workspace, out),
    baselines=attention_baselines,
    after_launch=lambda inst, case: counters_left(inst, case.workspace),  # split_kv_combine fixup's counters
)
