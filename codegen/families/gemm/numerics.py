"""GEMM numerics: FLOP and byte formulas, inputs, the fp32 reference, the tolerance, negative controls,
derived edge shapes and the torch baselines.

Tolerance (per output element, documented in README "Verification"):

    tol_ij = u_out * |ref_ij|  +  scale * (4 * u_acc * sqrt(K) + 2 * u_in) * (|A|.|B|)_ij  +  tiny

u_out: unit roundoff of the output dtype (the final rounding); u_acc: of the accumulator the matrix
cores really use (fp32: 2^-24; Hopper fp8 wgmma keeps ~14 bits: 2^-14); u_in: rounding of inputs
inside the MMA (tf32 for fp32 inputs on NVIDIA: 2^-11; fp16/bf16/fp8 enter exactly: 0) -- both read from
the record of the target the kernel runs on (mma_accumulator_roundoff, mma_input_roundoff); sqrt(K) is
the random-walk growth of K accumulation errors and (|A|.|B|)_ij their scale. The first term is the
exact bound of the final rounding; the second is a model, so only it is scaled: scale defaults to 1
and a spec may tighten or loosen it (verify_tolerance_scale). The check passes only if *no* element
exceeds its tolerance, and only counts as verified if every applicable negative control fails it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.families.base import Numerics
from codegen.hardware import DTYPE_BYTES, DType, Target
from codegen.numerics import TINY, UNIT_ROUNDOFF, compiled_once
from codegen.spec import TailPolicy
from codegen.targets import TARGETS, torch_dtype


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_bytes(inst, m: int, n: int, k: int) -> float:
    """Compulsory DRAM traffic: read A and B once, write C once."""
    a, b, out, _ = (DType(d) for d in inst.spec_dtypes)
    return float(m * k * DTYPE_BYTES[a] + k * n * DTYPE_BYTES[b] + m * n * DTYPE_BYTES[out])


def gemm_derived_shapes(inst) -> list[tuple[int, int, int]]:
    """GEMM: the smallest legal size, and sizes one above and one below a block multiple where the
    tail policy allows ragged sizes."""
    bm, bn, bk = inst.block_m, inst.block_n, inst.block_k * inst.unroll
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

    @property
    def A32(self):
        return (self.A.t() if self.trans_a else self.A).float()

    @property
    def B32(self):
        return (self.B.t() if self.trans_b else self.B).float()

    def block(self, rows: slice, cols: slice) -> GemmCase:
        """The case of C[rows, cols]: A's rows and B's columns, still in their storage layout."""
        a = self.A[:, rows] if self.trans_a else self.A[rows]
        b = self.B[cols] if self.trans_b else self.B[:, cols]
        return GemmCase(A=a, B=b, trans_a=self.trans_a, trans_b=self.trans_b)


def make_inputs(inst, shape: tuple[int, int, int], *, seed: int, kind: str, device, run_target: Target) -> GemmCase:
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
    return GemmCase(A=A, B=B, trans_a=inst.trans_a, trans_b=inst.trans_b)


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


def gemm_chunks(inst, case: GemmCase, max_elements: int):
    """The chunked check: blocks of C of about max_elements elements (column blocks so that K x columns
    of B in fp32 fit it, then row blocks so that rows x K of A fit it), each from its rows of A and
    columns of B; dropped_k_tile touches the first block_m rows only (elsewhere it is the reference)."""
    import torch

    from codegen.verify import CheckChunk

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
            ref = a32 @ b32
            mag = a32.abs() @ b32.abs()
            dropped = ref
            if r0 < inst.block_m:
                dropped = ref.clone()
                top = min(inst.block_m, r0 + step_m) - r0
                dropped[:top] -= a32[:top, k0:] @ b32[k0:, :]
            controls = {"zeros": torch.zeros_like(ref), "wrong_operation": wrong_operation_block(case, a32, cols),
                        "dropped_k_tile": dropped}
            yield CheckChunk(index=(rows, cols), ref=ref, mag=mag, controls=controls)
            del a32, b32, ref, mag, dropped, controls


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    u_out: float
    u_acc: float
    u_in: float
    k: int
    scale: float = 1.0

    def describe(self) -> str:
        return (f"{self.u_out:.3g}*|ref| + {self.scale:g}*(4*{self.u_acc:.3g}*sqrt({self.k}) + 2*{self.u_in:.3g})"
                f"*|A|.|B|")

    def bound(self, ref, abs_product):
        acc = 4.0 * self.u_acc * math.sqrt(max(self.k, 1)) + 2.0 * self.u_in
        return self.u_out * ref.abs() + self.scale * acc * abs_product + TINY


def gemm_tolerance(spec_dtypes: tuple[str, ...], run_target: Target, k: int, scale: float = 1.0) -> Tolerance:
    a, _, out, acc = (DType(d) for d in spec_dtypes)
    cores = TARGETS[run_target]  # what the matrix cores of the GPU it runs on do to inputs and sums
    u_acc = max(UNIT_ROUNDOFF[acc], cores.mma_accumulator_roundoff.get(a, 0.0))
    u_in = cores.mma_input_roundoff.get(a, 0.0)
    return Tolerance(u_out=UNIT_ROUNDOFF[out], u_acc=u_acc, u_in=u_in, k=k, scale=scale)


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
    compiled = compiled_once(("gemm", inst.spec_dtypes, inst.layout), op)
    return {"eager": lambda: op(a, b), "compile": lambda: compiled(a, b)}


def controls(inst, case: GemmCase, ref) -> dict[str, object]:
    import torch

    return {"zeros": torch.zeros_like(ref), "wrong_operation": wrong_operation(case),
            "dropped_k_tile": dropped_k_tile(case, ref, inst.block_m, inst.block_k)}


def tolerance(inst, shape, run_target: Target) -> Tolerance:
    return gemm_tolerance(inst.spec_dtypes, run_target, shape[2], inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=lambda inst, s: gemm_flops(*s),
    bytes=lambda inst, s: gemm_bytes(inst, *s),
    make_inputs=make_inputs,
    reference=lambda inst, case: reference(case),
    chunks=gemm_chunks,
    tolerance=tolerance,
    controls=controls,
    derived_shapes=gemm_derived_shapes,
    out_shape=lambda inst, s: (s[0], s[1]),
    launch=lambda kernel, case, out: kernel(case.A, case.B, out),
    baselines=lambda inst, case, out_dtype: gemm_baseline_fns(inst, case.A, case.B, out_dtype),
)
