"""GEMM numerics: FLOP and byte formulas, inputs, the fp32 reference, the tolerance, negative controls,
derived edge shapes and the torch baselines.

Tolerance (per output element, documented in docs/verification.md):

    tol_ij = u_out * |ref_ij|  +  eta_out  +  scale * (4 * u_acc * sqrt(K) + u_prod) * (|A|.|B|)_ij  +  tiny

u_out: unit roundoff of the output dtype and eta_out half its smallest subnormal (together the final rounding:
relative in the normal range, absolute below it -- an fp16 C element under 6.1e-5 rounds by up to 2^-25
whatever its size); u_acc: of the accumulator the matrix
cores really use (fp32: 2^-24; Hopper fp8 wgmma keeps ~14 bits: 2^-14); u_prod: the relative error of
each product from how the kernel represents its inputs where it runs (`product_model`): 0 when the
products are exact (fp16/bf16/fp8 in any MMA; fp32 `ieee`: CUDA-core FMA or fp32 MFMA); 2u + u^2 for a
product of two inputs each rounded with unit roundoff u (fp32 `tf32`: TF32 round-to-nearest, u = 2^-11;
raw fp32 bits fed to sm_90's tf32 MMA: truncation, u = 2^-10 -- the gfx942 fp32 program's logic check);
3u^2(1+u)^2 for 3xtf32 (the dropped a_lo*b_lo term and the two residuals' roundings). sqrt(K) is the
random-walk growth of K accumulation errors and (|A|.|B|)_ij their scale. The first two terms are the exact
bound of the final rounding; the second is a model, so only it is scaled: scale defaults to 1 and a spec
may tighten or loosen it (verify_tolerance_scale). The check passes only if *no* element exceeds its
tolerance, and only counts as verified if every applicable negative control fails it -- for fp32 `ieee`
and `3xtf32` that includes a TF32 result (`tf32_result`), so the check can tell TF32 from fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import Numerics
from codegen.families.gemm.rules import split_tiles
from codegen.families.gemm.spec import Structure
from codegen.families.numerics import (
    SUBNORMAL_ROUNDOFF,
    TINY,
    UNIT_ROUNDOFF,
    CheckChunk,
    compiled_once,
    counters_left,
    normal_draws,
    verify_workspaces,
)
from codegen.families.spec import TailPolicy
from codegen.targets import TARGETS, torch_dtype

TF32_ROUNDOFF = 2.0**-11  # TF32 keeps 10 of fp32's 23 mantissa bits: unit roundoff of round-to-nearest


@dataclass(frozen=True, kw_only=True)
class ProductModel:
    """What one product a_ik * b_kj of the kernel is, where it runs: its relative error bound from the
    input representation, and whether it is fp32-class (then a TF32 result must fail the tolerance)."""

    label: str
    u_prod: float
    fp32_class: bool


def product_model(inst, run_target: Target) -> ProductModel:
    """Derived from the generated code: the tf32 / 3xtf32 staging kernels (_staging.py.j2) round tf32/3xtf32 inputs themselves
    (bit arithmetic: nearest, ties away from zero), so the tensor core's own truncation drops only zero bits; an `ieee`
    kernel on sm_90 has no MMA (fp32_product "fma"); any other MMA of stored inputs rounds them as the run
    target's record says (mma_input_roundoff: sm_90 truncates fp32 to tf32, AMD takes fp32 exactly)."""
    u = TF32_ROUNDOFF
    if inst.precision == "tf32":
        return ProductModel(label="tf32 (inputs rounded to nearest, ties away)", u_prod=2 * u + u * u, fp32_class=False)
    if inst.precision == "3xtf32":
        return ProductModel(label="3xtf32", u_prod=3 * u * u * (1 + u) ** 2, fp32_class=True)
    fp32 = inst.precision is not None
    if fp32 and inst.fp32_product == "fma":
        return ProductModel(label="ieee (CUDA-core FMA)", u_prod=0.0, fp32_class=True)
    raw = TARGETS[run_target].mma_input_roundoff.get(DType(inst.spec_dtypes[0]), 0.0)
    if raw:
        return ProductModel(label=f"{run_target}'s MMA truncates fp32 to tf32", u_prod=2 * raw + raw * raw,
                            fp32_class=False)
    return ProductModel(label="ieee (fp32 MMA)" if fp32 else "", u_prod=0.0, fp32_class=fp32)


def to_tf32(x):
    """x (fp32) rounded to TF32 as the generated code does it: add 0x1000 to the bits, clear the low 13 --
    round to nearest, ties away from zero (cvt.rna.tf32.f32 for finite x)."""
    import torch

    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class full_fp32:
    """Context: torch's fp32 matmuls in full fp32 (allow_tf32 off) -- the reference must not be TF32 whatever
    the process set before (a TF32 baseline, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE)."""

    def __init__(self, allow_tf32: bool = False):
        self.allow_tf32 = allow_tf32

    def __enter__(self):
        import torch

        self.saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.allow_tf32
        return self

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.saved


def gemm_flops(m: int, n: int, k: int, products: int = 1) -> float:
    """2 m n k a product (the gate: two)."""
    return 2.0 * m * n * k * products


def gemm_bytes(inst, m: int, n: int, k: int) -> float:
    """Compulsory DRAM traffic: read A and B once, write C once -- and a fused kernel's inputs once (B_UP, the
    bias vector, the residual)."""
    a, b, out, _ = (DType(d) for d in inst.spec_dtypes)
    total = m * k * DTYPE_BYTES[a] + k * n * DTYPE_BYTES[b] + m * n * DTYPE_BYTES[out]
    f = getattr(inst, "fused", None)
    if f is not None:
        bias = n * DTYPE_BYTES[DType(f.bias_dtype)] if f.bias_dtype else 0
        total += k * n * DTYPE_BYTES[b] * (f.gate is not None) + bias + m * n * DTYPE_BYTES[out] * f.residual
    return float(total)


def fused_baseline_bytes(inst, shape) -> dict[str, float]:
    """The unfused torch sequence's compulsory bytes (Numerics.baseline_bytes): eager -- the GEMM (with the bias in
    cuBLAS's addmm epilogue, alpha its scale) writes C, then the activation reads and writes it, then the residual add
    reads C and the residual and writes the sum; the gate: two GEMMs (A read twice), the activation on one product
    (read, write), the product (two reads, a write). compile: Inductor fuses the element-wise ops after the GEMMs
    into one pass (each product read once, the residual read, C written). {} for a plain GEMM."""
    f = getattr(inst, "fused", None)
    if f is None:
        return {}
    m, n, k = shape
    a, b, out, _ = (DTYPE_BYTES[DType(d)] for d in inst.spec_dtypes)
    c = m * n * out
    if f.gate is not None:
        gemms = 2 * (m * k * a + k * n * b + c)
        return {"eager": float(gemms + 2 * c + 3 * c), "compile": float(gemms + 3 * c)}
    gemm = m * k * a + k * n * b + c + n * out * bool(f.bias_dtype)
    eager = gemm + 2 * c * bool(f.activation) + 3 * c * f.residual
    fused_pass = (2 + f.residual) * c if (f.activation or f.residual) else 0
    return {"eager": float(eager), "compile": float(gemm + fused_pass)}


# A dynamic-M kernel is verified up to the largest M of its range whose A and C together hold at most this
# many elements: 8192 x (4096 + 4096) fits; a range up to 2**31 - 1 rows is verified up to what fits
DYNAMIC_VERIFY_ELEMENTS = 1 << 27


def dynamic_m_values(inst, n: int, k: int) -> list[int]:
    """The M values a dynamic-M kernel is verified at (beside its spec's shapes), each inside its range: the
    smallest, a block multiple and one past it (a ragged last row block of one row), and the largest -- or,
    where A and C at the largest would hold more than DYNAMIC_VERIFY_ELEMENTS, the largest M that fits."""
    lo, hi = inst.dynamic_m
    top = min(hi, max(lo, DYNAMIC_VERIFY_ELEMENTS // (n + k)))
    wanted = [lo, inst.block_m, inst.block_m + 1, top]
    return sorted({m for m in wanted if lo <= m <= top})


def gemm_derived_shapes(inst) -> list[tuple[int, int, int]]:
    """The edge shapes (_edge_shapes); tiled with unroll > 1: each k rounded up to whole rounds of unroll K
    tiles -- the unrolled loop has no remainder round, and rule unroll_divides holds every shape a kernel serves
    to that (m and n stay ragged)."""
    shapes = _edge_shapes(inst)
    if inst.unroll > 1 and inst.split_k == 1 and inst.structure == Structure.TILED.value:
        step = inst.block_k * inst.unroll
        shapes = list(dict.fromkeys((m, n, -(-k // step) * step) for m, n, k in shapes))
    return shapes


def _edge_shapes(inst) -> list[tuple[int, int, int]]:
    """GEMM: the smallest legal size, and sizes one above and one below a block multiple where the
    tail policy allows ragged sizes. A dynamic-M kernel serves its shapes' (n, k) at every M: those (n, k)
    at the M values of `dynamic_m_values` -- one compile for all of them. Split-K: every split gets whole K
    tiles (tail none: k a multiple of block_k * unroll * split_k); predicated: k of split_k tiles, the last one element (one tile a split),
    of 2 * split_k tiles less one element (the last tile ragged), and of 3 * split_k - 1 tiles less one
    element (the last split's run ends in a tile wholly past K, which loads zeros) -- with unroll, whole
    rounds (rule unroll_divides), m and n still ragged."""
    bm, bn, bk = inst.block_m, inst.block_n, inst.block_k * inst.unroll
    if inst.dynamic_m is not None:
        nk = dict.fromkeys((n, k) for _, n, k in inst.shapes)
        return [(m, n, k) for n, k in nk for m in dynamic_m_values(inst, n, k)]
    if inst.split_k > 1:
        sk, kt = inst.split_k, inst.block_k
        if inst.tail == TailPolicy.NONE:
            return [(bm, bn, bk * sk), (3 * bm, 2 * bn, 5 * bk * sk)]
        if inst.unroll > 1:
            return [(1, 1, bk * sk), (bm + 1, bn - 1, bk * sk), (2 * bm - 1, 2 * bn + 1, 3 * bk * sk)]
        return [(1, 1, (sk - 1) * kt + 1), (bm + 1, bn - 1, 2 * sk * kt - 1), (2 * bm - 1, 2 * bn + 1, (3 * sk - 1) * kt - 1)]
    if inst.persistent:  # and more tiles than workgroups: two rounds, the second of one or two tiles
        rows = -(-(inst.resident_workgroups + 1) // 2)
        if inst.tail == TailPolicy.NONE:
            return [(bm, bn, bk), (3 * bm, 2 * bn, 5 * bk), (rows * bm, 2 * bn, bk)]
        return [(1, 1, 1), (bm + 1, bn - 1, bk + 1), (2 * bm - 1, 2 * bn + 1, 3 * bk - 1),
                (rows * bm - 1, 2 * bn - 1, bk + 1)]
    if inst.structure == Structure.GEMV_N.value:  # gemv_n: gemv's shapes with the roles of m and n swapped
        v = inst.vector
        if inst.tail == TailPolicy.NONE:
            return [(bm, 1, bk), (3 * bm, bn, 5 * bk)]
        return [(1, 1, v), (bm + 1, bn, bk + v), (2 * bm - 1, max(1, bn - 1), 3 * bk - v)]
    if inst.vector:  # gemv: every m up to block_m, k in whole vectors (rule gemv_shape); one step, one round short
        v = inst.vector
        if inst.tail == TailPolicy.NONE:
            return [(1, bn, bk), (bm, 3 * bn, 5 * bk)]
        return [(1, 1, v), (bm, bn + 1, bk + v), (max(1, bm - 1), 2 * bn - 1, 3 * bk - v)]
    if inst.tail == TailPolicy.NONE:
        return [(bm, bn, bk), (3 * bm, 2 * bn, 5 * bk)]
    return [(1, 1, 1), (bm + 1, bn - 1, bk + 1), (2 * bm - 1, 2 * bn + 1, 3 * bk - 1)]


@dataclass(frozen=True, kw_only=True)
class GemmCase:
    """Inputs in the kernel's storage layout (A as K x M when trans_a, B as N x K when trans_b); their fp32
    copies in logical (M x K, K x N) layout are made on use."""

    A: object  # torch tensors
    B: object
    trans_a: bool = False
    trans_b: bool = False
    tf32_control: bool = False  # the kernel's products are fp32-class where it runs: a TF32 result must fail
    workspace: tuple = ()  # the workspaces the kernel takes between B and C (GemmInstance.workspace_shapes)
    # the fused kernels' inputs (GemmInstance.input_names), None where the kernel takes none: the gate's second
    # weight (B's layout), the bias vector (N, its own dtype) and the residual (M x N, C's dtype)
    B_UP: object = None
    bias: object = None
    residual: object = None

    @property
    def A32(self):
        return (self.A.t() if self.trans_a else self.A).float()

    @property
    def B32(self):
        return (self.B.t() if self.trans_b else self.B).float()

    @property
    def B_UP32(self):
        return (self.B_UP.t() if self.trans_b else self.B_UP).float()

    @property
    def inputs(self) -> tuple:
        """The kernel's arguments between B and the workspaces, in its order (B_UP, Bias, Residual where taken)."""
        return tuple(x for x in (self.B_UP, self.bias, self.residual) if x is not None)

    def block(self, rows: slice, cols: slice) -> GemmCase:
        """The case of C[rows, cols]: A's rows and B's columns, still in their storage layout (and the fused inputs'
        rows and columns)."""
        a = self.A[:, rows] if self.trans_a else self.A[rows]
        b = self.B[cols] if self.trans_b else self.B[:, cols]
        up = None if self.B_UP is None else self.B_UP[cols] if self.trans_b else self.B_UP[:, cols]
        return GemmCase(A=a, B=b, trans_a=self.trans_a, trans_b=self.trans_b, tf32_control=self.tf32_control,
                        B_UP=up, bias=None if self.bias is None else self.bias[cols],
                        residual=None if self.residual is None else self.residual[rows, cols])


def make_inputs(inst, shape: tuple[int, int, int], *, seed: int, kind: str, device, run_target: Target) -> GemmCase:
    """'normal': A ~ N(0,1), B ~ N(0, 1/K) (activations times weights, |C| ~ 1).
    'wide': the same times per-row scales of A and per-column scales of B spread over e^[-3, 3]
    (a dynamic range of about 400x each way), clipped to what the dtype holds.
    Split-K, xf32 and staging padded also get their workspaces, NaN-filled: the kernel must write every element
    it reads (staging padded: the padding's zeros too -- a NaN left there poisons every product it meets); split_k_sum
    fixup's tile counters start at zero (GemmInstance.workspace_zeroed)."""
    import torch

    m, n, k = shape
    (a, b), g = normal_draws(seed, (m, k), (k, n))  # shared: not written
    b = b / max(k, 1) ** 0.5
    if kind == "wide":
        a = a * torch.exp(torch.empty(m, 1).uniform_(-3, 3, generator=g))
        b = b * torch.exp(torch.empty(1, n).uniform_(-3, 3, generator=g))
    a_dt = torch_dtype(inst.spec_dtypes[0], run_target)
    b_dt = torch_dtype(inst.spec_dtypes[1], run_target)
    if DType(inst.spec_dtypes[0]) == DType.FP8_E4M3:
        limit = torch.finfo(a_dt).max / 2
        a, b = a.clamp(-limit, limit), (b * k**0.5).clamp(-limit, limit)  # fp8: keep B near unit scale
    a_q, b_q = a.to(a_dt, copy=True), b.to(b_dt)  # rounded inputs: the reference sees exactly what the kernel sees
    A = (a_q.t() if inst.trans_a else a_q).contiguous().to(device)
    B = (b_q.t() if inst.trans_b else b_q).contiguous().to(device)
    # NaN-filled: the kernel must write every element of its workspaces that it reads -- but the counters that
    # must be zero on entry (split_k_sum fixup's), which the kernel must leave zero (after_launch checks it)
    workspace = verify_workspaces(inst, shape, device, run_target)
    extra = {}
    f = inst.fused
    if f is not None:  # drawn after A and B, so a plain GEMM's inputs are the same draws
        if f.gate is not None:  # the up projection's weight, drawn as B
            up = (torch.randn(k, n, generator=g) / max(k, 1) ** 0.5).to(b_dt)
            extra["B_UP"] = (up.t() if inst.trans_b else up).contiguous().to(device)
        if f.bias_dtype is not None:
            extra["bias"] = torch.randn(n, generator=g).to(torch_dtype(f.bias_dtype, run_target)).to(device)
        if f.residual:
            extra["residual"] = torch.randn(m, n, generator=g).to(torch_dtype(inst.spec_dtypes[2], run_target)).to(device)
    return GemmCase(A=A, B=B, trans_a=inst.trans_a, trans_b=inst.trans_b,
                    tf32_control=product_model(inst, run_target).fp32_class, workspace=workspace, **extra)


def reference(case: GemmCase):
    """fp32 reference from the same rounded inputs, and |A|.|B| (the scale of accumulation error)."""
    import torch

    with full_fp32():
        return torch.matmul(case.A32, case.B32), torch.matmul(case.A32.abs(), case.B32.abs())


def wrong_operation(case: GemmCase):
    """Negative control: the product with B read in the other layout (A.B where A.B^T was asked,
    or vice versa) -- the classic transposition bug. Works for any shape by reinterpreting memory."""
    import torch

    k, n = case.B32.shape
    with full_fp32():
        return torch.matmul(case.A32, case.B32.t().contiguous().reshape(k, n))


def dropped_k_tile(case: GemmCase, ref, block_m: int, block_k: int):
    """Negative control: the reference with the last K tile of the first row block missing -- what a
    kernel that mishandles the K tail would produce."""
    k = case.A32.shape[1]
    k0 = max(0, ((k - 1) // block_k) * block_k)
    rows = slice(0, min(block_m, ref.shape[0]))
    bad = ref.clone()
    with full_fp32():
        bad[rows] -= case.A32[rows, k0:] @ case.B32[k0:, :]
    return bad


def ragged_m_block_dropped(ref, m: int, block_m: int, row0: int = 0):
    """Negative control of dynamic-M kernels: the reference with the rows of the last, ragged row block zeroed --
    a grid of M // block_m row blocks (floor where ceildiv was meant) over a cleared C. `ref` holds rows
    row0.. of C; identical to it (n/a) where M is a block multiple."""
    bad = ref.clone()
    bad[max(0, m // block_m * block_m - row0):] = 0
    return bad


def last_round_unwritten(inst, ref, m: int, n: int, row0: int = 0, col0: int = 0):
    """Negative control of persistent kernels: the reference with the tiles of the tile loop's last round left
    as verify's NaN-filled C holds them -- a loop of one round too few (rounds floored, or a trip count off by
    one): tiles [(rounds - 1) * workgroups, tiles) of the persistent order (GemmInstance.persistent_schedule),
    found through the same rasterisation as the kernel. `ref` holds C[row0:, col0:] (a chunk)."""
    sched = inst.persistent_schedule(m, n)
    bad = ref.clone()
    rows, cols = ref.shape
    for t in range((sched.rounds - 1) * sched.workgroups, sched.tiles):
        tm, tn = sched.tile(t)
        r, c = tm * inst.block_m - row0, tn * inst.block_n - col0
        if r < rows and c < cols and r + inst.block_m > 0 and c + inst.block_n > 0:
            bad[max(r, 0):r + inst.block_m, max(c, 0):c + inst.block_n] = float("nan")
    return bad


def epilogue_box_unstored(inst, ref, n: int, col0: int = 0):
    """Negative control of the shared epilogue (epilogue shared): the reference with the last TMA store box of
    every output tile -- its last epilogue_box_n columns (EPILOGUE_BOX_BYTES of each row), all its rows -- left
    as verify's NaN-filled C holds them: a store loop one box short, or (a tile one box wide) a tile whose store
    is never issued. Clipped to C (n/a where every such box lies past n). `ref` holds C[:, col0:] (a chunk)."""
    bad = ref.clone()
    box = inst.epilogue_box_n
    for c in range(0, n, inst.block_n):
        lo, hi = max(c + inst.block_n - box, 0) - col0, min(c + inst.block_n, n) - col0
        if hi > 0 and lo < ref.shape[1]:
            bad[:, max(lo, 0):hi] = float("nan")
    return bad


def split_range(inst, k: int) -> slice:
    """Split 0's K range [0, split_tiles * block_k) (codegen.families.gemm.rules.split_tiles), within k."""
    return slice(0, min(k, split_tiles(k, inst.block_k, inst.split_k) * inst.block_k))


def dropped_split(inst, a32, b32, ref):
    """Negative control of split-K kernels: the reference without split 0's K range in any element -- a sum of
    the partials that leaves one out (its loop starting at split 1). Split 0 always holds whole tiles."""
    ks = split_range(inst, a32.shape[1])
    with full_fp32():
        return ref - a32[:, ks] @ b32[ks, :]


def dropped_k_column(a32, b32, ref):
    """Negative control of staging padded: the reference without the product of the last K column of A and
    the last K row of B in any element -- a staging copy that stops one element of K short (its padding
    starting at K - 1), which the main kernel would then read as a zero."""
    with full_fp32():
        return ref - a32[:, -1:] @ b32[-1:, :]


def tf32_result(a32, b32):
    """Negative control of fp32-class kernels (ieee, 3xtf32): the product of the inputs rounded to TF32
    (nearest), accumulated in fp32 -- what a single-pass TF32 kernel computes."""
    with full_fp32():
        return to_tf32(a32) @ to_tf32(b32)


def wrong_operation_block(case: GemmCase, a32, cols: slice):
    """wrong_operation's columns `cols`: B^T's memory read as K x N, W[kk, j] = B[p % K, p // K] with
    p = kk*N + j, gathered from the stored B (no whole fp32 copy), times this block's rows of A."""
    import torch

    k, n = case.B.shape[::-1] if case.trans_b else case.B.shape
    j = torch.arange(n, device=case.B.device)[cols]
    p = torch.arange(k, device=case.B.device)[:, None] * n + j[None, :]
    r, c = p % k, p // k  # logical B[r, c]
    flat = c * k + r if case.trans_b else r * n + c
    return a32 @ case.B.reshape(-1)[flat].float()


# ---- fused epilogue ops and the gate (GemmInstance.fused) ----------------------------------------------------
# The reference composes the unfused ops in fp32 on the exact product P = A.B of the stored inputs:
#   C = act(scale * P + bias) + beta * residual,   or with a gate   C = act(P_gate) * P_up.
# The kernel's accumulator is P + e, |e| <= c * |A|.|B| (c = scale * (4 u_acc sqrt(K) + u_prod), the modelled
# term); the epilogue's fp32 arithmetic rounds each step (u = 2^-24) and evaluates the activation with a relative
# error of at most ACTIVATION_EVAL of its argument's magnitude; an error d of the activation's argument moves
# its value by at most LIPSCHITZ * |d|. So, per element (FusedMagnitude; Tolerance.bound):
#   plain: model = L |scale| |A|.|B|; arith = 2u L (|scale| |A|.|B| + |bias|) + ACTIVATION_EVAL |y| + 2u (|act(y)| +
#          |beta residual|); cross = (ACTIVATION_EVAL + 2u L) |scale| |A|.|B|   (y = scale * P + bias)
#   gate:  model = |act(G)| |A|.|B_UP| + L |U| |A|.|B|; model2 = L |A|.|B| |A|.|B_UP|; arith = ACTIVATION_EVAL |G| |U| +
#          u |act(G) U|; cross = ACTIVATION_EVAL |G| |A|.|B_UP|
# and the bound is u_out |ref| + eta_out + (1 + u_out) (c model + c^2 model2 + arith + c cross) + tiny.
FP32_ROUNDOFF = 2.0**-24
# max |act'(x)| over x, rounded up: silu 1.09984, gelu (erf) 1.12890, gelu (tanh) 1.12899; relu 1
LIPSCHITZ = {"relu": 1.0, "silu": 1.1, "gelu_erf": 1.13, "gelu_tanh": 1.13}
# the activation's fp32 evaluation (_epilogue.py.j2's helpers), relative to |x|: silu and gelu_tanh are x / (1 + e)
# with e = exp(t) -- expf within 2 ulp, __expf (fast math) within 2 + 1.17 |t| ulp for the |t| <= 88 where e is
# finite (past it the result is 0 or x to fp32 precision) -- the add and the divide one rounding each; with
# activation_math fast, x * rcp(1 + exp2(t log2 e)): the product t log2(e) one rounding more (|t| ulp of e at most),
# exp2 within 2 ulp, rcp.approx within 1, the add and the product one rounding each; gelu_erf's erff within 2 ulp
# of 1 and three roundings. Under 2^-16 |x| in every case (tests/test_activation_math.py); relu is exact
ACTIVATION_EVAL = {"relu": 0.0, "silu": 2.0**-16, "gelu_erf": 2.0**-16, "gelu_tanh": 2.0**-16}
# the wrong activation a negative control applies instead of each
WRONG_ACTIVATION = {"relu": "silu", "silu": "relu", "gelu_erf": "relu", "gelu_tanh": "relu"}


@dataclass(frozen=True, kw_only=True)
class FusedMagnitude:
    """The per-element magnitudes of a fused kernel's error terms (the module's comment above gemm_chunks): `model`
    and `cross` scale with the accumulation coefficient c, `model2` with c^2; `arith` is the epilogue's own fp32
    arithmetic. Tensors of the output's shape (or 0.0)."""

    model: object
    model2: object = 0.0
    arith: object = 0.0
    cross: object = 0.0


def activation(name: str, x):
    """The activation, in torch (fp32 in, fp32 out), as the reference computes it."""
    import torch.nn.functional as F

    return {"relu": F.relu, "silu": F.silu, "gelu_erf": F.gelu,
            "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[name](x)


def fused_output(f, raw, up=None, bias=None, residual=None, *, scale=True, act: str | None = None, beta=True):
    """The fused ops on the fp32 product `raw` (and the gate's up product `up`), composed unfused in fp32:
    act(raw) * up with a gate, else act(scale * raw + bias) + beta * residual -- `bias` / `residual` None leave
    them out, scale / beta False apply 1, `act` replaces the activation ("" for none)."""
    act = f.activation if act is None else act
    if f.gate is not None:
        return activation(act, raw) * up if act else raw * up
    y = raw * f.scale if (scale and f.scale is not None) else raw
    if bias is not None:
        y = y + bias
    z = activation(act, y) if act else y
    if residual is not None:
        z = z + residual * f.beta if beta else z + residual
    return z


def fused_chunk(inst, sub: GemmCase, a32, raw, mag, raw_controls: dict) -> tuple:
    """(reference, FusedMagnitude, controls) of one chunk of a fused kernel from the chunk's product `raw` and
    |A|.|B| `mag`: each product-level control (a wrong product) through the same ops, the store-level ones (zeros)
    as they are, and one control per fused op -- each op left out or changed (dropped_scale, dropped_bias,
    wrong_activation, dropped_residual, unscaled_residual; gate: wrong_activation, swapped_gate_up, ungated)."""
    f = inst.fused
    L, ev, u = LIPSCHITZ.get(f.activation, 1.0), ACTIVATION_EVAL.get(f.activation, 0.0), FP32_ROUNDOFF
    controls = {"zeros": raw_controls["zeros"]}
    with full_fp32():
        if f.gate is not None:
            up = a32 @ sub.B_UP32
            mag_up = a32.abs() @ sub.B_UP32.abs()
            ref = fused_output(f, raw, up)
            act_g = activation(f.activation, raw)
            fm = FusedMagnitude(model=act_g.abs() * mag_up + L * up.abs() * mag, model2=L * mag * mag_up,
                                arith=ev * raw.abs() * up.abs() + u * ref.abs(), cross=ev * raw.abs() * mag_up)
            for name, wrong in raw_controls.items():  # a wrong gate product (the up product right)
                if name != "zeros":
                    controls[name] = fused_output(f, wrong, up)
            controls["wrong_activation"] = fused_output(f, raw, up, act=WRONG_ACTIVATION[f.activation])
            controls["swapped_gate_up"] = fused_output(f, up, raw)
            controls["ungated"] = raw * up
            return ref, fm, controls
        bias = None if sub.bias is None else sub.bias.float()
        res = None if sub.residual is None else sub.residual.float()
        ref = fused_output(f, raw, bias=bias, residual=res)
        alpha = abs(f.scale) if f.scale is not None else 1.0
        y = raw * f.scale if f.scale is not None else raw
        y = y if bias is None else y + bias
        z = activation(f.activation, y) if f.activation else y
        b_abs = 0.0 if bias is None else bias.abs()
        r_abs = 0.0 if res is None else res.abs() * abs(f.beta)
        fm = FusedMagnitude(model=L * alpha * mag, arith=2 * u * L * (alpha * mag + b_abs) + ev * y.abs()
                            + 2 * u * (z.abs() + r_abs), cross=(ev + 2 * u * L) * alpha * mag)
        for name, wrong in raw_controls.items():
            if name != "zeros":
                controls[name] = fused_output(f, wrong, bias=bias, residual=res)
        if f.scale is not None:
            controls["dropped_scale"] = fused_output(f, raw, bias=bias, residual=res, scale=False)
        if bias is not None:
            controls["dropped_bias"] = fused_output(f, raw, residual=res)
        if f.activation is not None:
            controls["wrong_activation"] = fused_output(f, raw, bias=bias, residual=res,
                                                        act=WRONG_ACTIVATION[f.activation])
        if res is not None:
            controls["dropped_residual"] = fused_output(f, raw, bias=bias)
            if f.beta != 1.0:
                controls["unscaled_residual"] = fused_output(f, raw, bias=bias, residual=res, beta=False)
    return ref, fm, controls


def gemm_chunks(inst, case: GemmCase, max_elements: int):
    """The chunked check: blocks of C of about max_elements elements (column blocks so that K x columns
    of B in fp32 fit it, then row blocks so that rows x K of A fit it), each from its rows of A and
    columns of B; dropped_k_tile touches the first block_m rows only (elsewhere it is the reference)."""
    import torch

    k, m = case.A.shape if case.trans_a else case.A.shape[::-1]
    n = case.B.shape[0] if case.trans_b else case.B.shape[1]
    step_n = max(1, min(n, max_elements // max(k, 1)))
    step_m = max(1, min(m, max_elements // max(k, step_n, 1)))
    k0 = max(0, ((k - 1) // inst.block_k) * inst.block_k)
    for r0 in range(0, m, step_m):
        for c0 in range(0, n, step_n):
            rows, cols = slice(r0, r0 + step_m), slice(c0, c0 + step_n)
            sub = case.block(rows, cols)
            a32, b32 = sub.A32, sub.B32
            with full_fp32():
                ref = a32 @ b32
                mag = a32.abs() @ b32.abs()
                dropped = ref
                if r0 < inst.block_m:
                    dropped = ref.clone()
                    top = min(inst.block_m, r0 + step_m) - r0
                    dropped[:top] -= a32[:top, k0:] @ b32[k0:, :]
                controls = {"zeros": torch.zeros_like(ref), "wrong_operation": wrong_operation_block(case, a32, cols),
                            "dropped_k_tile": dropped}
                if inst.split_k > 1:
                    controls["dropped_split"] = dropped_split(inst, a32, b32, ref)
                if inst.padded:
                    controls["dropped_k_column"] = dropped_k_column(a32, b32, ref)
            if case.tf32_control:
                controls["tf32_result"] = tf32_result(a32, b32)
            if inst.fused is not None:  # the ops on the product, and on each product-level control
                ref, mag, controls = fused_chunk(inst, sub, a32, ref, mag, controls)
            if inst.dynamic_m is not None:
                controls["ragged_m_block_dropped"] = ragged_m_block_dropped(ref, m, inst.block_m, r0)
            if inst.persistent:
                controls["last_round_unwritten"] = last_round_unwritten(inst, ref, m, n, r0, c0)
            if inst.shared_epilogue:
                controls["epilogue_box_unstored"] = epilogue_box_unstored(inst, ref, n, c0)
            yield CheckChunk(index=(rows, cols), ref=ref, mag=mag, controls=controls)
            del a32, b32, ref, mag, dropped, controls


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    u_out: float
    eta_out: float  # half the output dtype's smallest subnormal: the rounding bound below its normal range
    u_acc: float
    u_prod: float  # relative error of each product from the inputs' representation (product_model)
    k: int
    scale: float = 1.0
    products: str = ""  # product_model's label, shown with fp32 inputs
    split_k: int = 1  # K split over this many fp32 partials (the same bound: see the module docstring)
    depth: int = 0  # the longest run of fp32 additions in one element's sum (accumulation_depth); 0: k
    fused: str = ""  # a fused kernel's ops (FusedOps.ops), whose bound takes a FusedMagnitude

    def describe(self) -> str:
        text = (f"{self.u_out:.3g}*|ref| + {self.eta_out:.3g} + {self.scale:g}*(4*{self.u_acc:.3g}*sqrt({self.terms}) "
                f"+ {self.u_prod:.3g})*|A|.|B|")
        notes = [self.products] * bool(self.products)
        notes += [f"a sum of at most {self.terms} sequential additions of the k={self.k} products"] * (self.terms != self.k)
        notes += [f"split_k {self.split_k}: fp32 partials, one rounding"] * (self.split_k > 1)
        notes += [f"fused {self.fused}: the ops' fp32 rounding and the activation's slope"] * bool(self.fused)
        return f"{text} [{'; '.join(notes)}]" if notes else text

    @property
    def terms(self) -> int:
        return self.depth or self.k

    def bound(self, ref, abs_product):
        acc = 4.0 * self.u_acc * math.sqrt(max(self.terms, 1)) + self.u_prod
        if isinstance(abs_product, FusedMagnitude):  # a fused kernel's terms (the comment above fused_chunk)
            m, c = abs_product, self.scale * acc
            err = c * m.model + c * c * m.model2 + m.arith + c * m.cross
            return self.u_out * ref.abs() + self.eta_out + (1.0 + self.u_out) * err + TINY
        return self.u_out * ref.abs() + self.eta_out + self.scale * acc * abs_product + TINY


def accumulation_depth(inst, k: int) -> int:
    """The longest chain of fp32 additions in one element of C's sum, the count the accumulation bound grows with
    (sqrt of it: the module docstring). A tiled kernel's K loop: k. A K split: one split's run of K tiles, then
    the fixed-order sum of split_k partials. The gemv structures: each lane's K steps of `vector` products, then
    the cross-lane tree of log2(lanes) levels. Only the summation order is used, never the data."""
    if inst.vector:  # gemv / gemv_n
        lanes = inst.block_k // inst.vector
        return -(-k // inst.block_k) * inst.vector + max(lanes.bit_length() - 1, 0)
    if inst.split_k > 1:
        return min(k, split_tiles(k, inst.block_k, inst.split_k) * inst.block_k) + inst.split_k
    return k


def gemm_tolerance(inst, run_target: Target, k: int, scale: float = 1.0) -> Tolerance:
    a, _, out, acc = (DType(d) for d in inst.spec_dtypes)
    cores = TARGETS[run_target]  # what the matrix cores of the GPU it runs on do to sums
    u_acc = max(UNIT_ROUNDOFF[acc], cores.mma_accumulator_roundoff.get(a, 0.0))
    model = product_model(inst, run_target)
    return Tolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_acc=u_acc, u_prod=model.u_prod, k=k, scale=scale,
                     products=model.label, split_k=inst.split_k, depth=accumulation_depth(inst, k),
                     fused="+".join(inst.fused.ops) if getattr(inst, "fused", None) else "")


def fused_baseline_fns(inst, case: GemmCase, out_dtype):
    """The unfused torch sequence of a fused kernel, as a model writes it, on the same stored inputs: eager -- the
    GEMM (addmm with the bias and alpha where there is a bias, cuBLAS's own epilogue), the activation, the residual
    add (torch.add with alpha beta); the gate: two matmuls, the activation, the product. compile: the same function
    under torch.compile (Inductor fuses the element-wise ops)."""
    import torch

    f = inst.fused
    a = case.A.t() if inst.trans_a else case.A
    b = case.B.t() if inst.trans_b else case.B
    if f.gate is not None:
        up = case.B_UP.t() if inst.trans_b else case.B_UP

        def seq(a, b, up):
            return activation(f.activation, torch.matmul(a, b)) * torch.matmul(a, up)
        args = (a, b, up)
    else:
        bias = None if case.bias is None else case.bias.to(out_dtype)  # addmm's dtype, cast before the timing
        res = case.residual
        alpha = f.scale if f.scale is not None else 1.0

        def seq(a, b, bias, res):
            y = torch.addmm(bias, a, b, alpha=alpha) if bias is not None else torch.matmul(a, b)
            if bias is None and f.scale is not None:
                y = y * alpha
            if f.activation:
                y = activation(f.activation, y)
            return torch.add(y, res, alpha=f.beta) if res is not None else y
        args = (a, b, bias, res)
    compiled = compiled_once(("gemm_fused", inst.spec_dtypes, inst.layout, tuple(sorted(vars(f).items()))), seq)
    return {"eager": lambda: seq(*args), "compile": lambda: compiled(*args)}


def gemm_baseline_fns(inst, A, B, out_dtype):
    """torch implementations of the same GEMM on the same stored operands."""
    import torch

    a = A.t() if inst.trans_a else A
    b = B.t() if inst.trans_b else B
    if DType(inst.spec_dtypes[0]) == DType.FP8_E4M3:
        one = torch.ones((), device=A.device, dtype=torch.float32)

        def op(x, y):
            return torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=out_dtype)
    elif out_dtype != A.dtype:
        def op(x, y):
            return torch.matmul(x, y).to(out_dtype)
    else:
        op = torch.matmul
    if inst.precision is None:
        compiled = compiled_once(("gemm", inst.spec_dtypes, inst.layout), op)
        return {"eager": lambda: op(a, b), "compile": lambda: compiled(a, b)}
    fns = {}
    for name, allow in FP32_BASELINES[inst.precision]:  # like with like: each named with its TF32 setting
        fn = op if name.startswith("eager") else compiled_once(("gemm", inst.spec_dtypes, inst.layout, allow), op)
        fns[name] = _with_tf32(fn, a, b, allow)
    return fns


# fp32 GEMMs: the torch baselines of each precision mode, (name, allow_tf32); "eager"/"compile" fill the
# bench table's vs-eager/vs-compile columns, any other name its "other baselines"
FP32_BASELINES = {
    "ieee": (("eager", False), ("compile", False)),
    "tf32": (("eager", True), ("compile", True)),
    "3xtf32": (("eager", False), ("compile", False), ("eager_tf32", True)),
}


def _with_tf32(fn, a, b, allow: bool):
    """fn(a, b) with torch.backends.cuda.matmul.allow_tf32 = allow for the call (restored after it, so
    a TF32 baseline never leaks into a reference)."""
    def run():
        with full_fp32(allow_tf32=allow):
            return fn(a, b)
    return run


def gemm_baseline_precision(inst) -> str:
    """What the torch baselines compute, for the bench report ('' for non-fp32 GEMMs)."""
    if inst.precision is None:
        return ""
    return ", ".join(f"{name}: allow_tf32={allow}" for name, allow in FP32_BASELINES[inst.precision])


WHOLE_TENSOR = 1 << 62  # elements a chunk may hold: the whole output in one


def gemm_reference(inst, case: GemmCase):
    """(reference, error magnitude) of the whole output: the product and |A|.|B|, or a fused kernel's ops on them
    (its one chunk: fused_chunk)."""
    if inst.fused is None:
        return reference(case)
    [chunk] = gemm_chunks(inst, case, WHOLE_TENSOR)
    return chunk.ref, chunk.mag


def controls(inst, case: GemmCase, ref) -> dict[str, object]:
    import torch

    if inst.fused is not None:  # the controls of the one whole chunk
        [chunk] = gemm_chunks(inst, case, WHOLE_TENSOR)
        return dict(chunk.controls)

    out = {"zeros": torch.zeros_like(ref), "wrong_operation": wrong_operation(case),
           "dropped_k_tile": dropped_k_tile(case, ref, inst.block_m, inst.block_k)}
    if inst.split_k > 1:
        out["dropped_split"] = dropped_split(inst, case.A32, case.B32, ref)
    if inst.padded:
        out["dropped_k_column"] = dropped_k_column(case.A32, case.B32, ref)
    if case.tf32_control:
        out["tf32_result"] = tf32_result(case.A32, case.B32)
    if inst.dynamic_m is not None:
        out["ragged_m_block_dropped"] = ragged_m_block_dropped(ref, ref.shape[0], inst.block_m)
    if inst.persistent:
        out["last_round_unwritten"] = last_round_unwritten(inst, ref, *ref.shape)
    if inst.shared_epilogue:
        out["epilogue_box_unstored"] = epilogue_box_unstored(inst, ref, ref.shape[1])
    return out


def tolerance(inst, shape, run_target: Target) -> Tolerance:
    return gemm_tolerance(inst, run_target, shape[2], inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=lambda inst, s: gemm_flops(*s, products=2 if getattr(inst, "gated", False) else 1),
    bytes=lambda inst, s: gemm_bytes(inst, *s),
    make_inputs=make_inputs,
    reference=gemm_reference,
    chunks=gemm_chunks,
    tolerance=tolerance,
    controls=controls,
    derived_shapes=gemm_derived_shapes,
    out_shape=lambda inst, s: (s[0], s[1]),
    launch=lambda kernel, case, out: kernel(case.A, case.B, *case.inputs, *case.workspace, out),
    baselines=lambda inst, case, out_dtype: (fused_baseline_fns(inst, case, out_dtype) if getattr(inst, "fused", None)
                                             else gemm_baseline_fns(inst, case.A, case.B, out_dtype)),
    baseline_precision=gemm_baseline_precision,
    baseline_bytes=fused_baseline_bytes,
    after_launch=lambda inst, case: counters_left(inst, case.workspace),  # split_k_sum fixup's tile counters
)
