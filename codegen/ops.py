"""Per-operator facts used by verify and bench, in one place: FLOP and byte formulas, torch
reference, input generation, derived edge shapes and the 'wrong operation' negative control."""

from __future__ import annotations

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


def derived_shapes(inst: KernelInstance) -> list[tuple[int, int, int]]:
    """Edge shapes verified on top of the spec's: the smallest legal size, and sizes one above and
    one below a block multiple where the tail policy allows ragged sizes."""
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
