"""rmsnorm / layernorm numerics: FLOP and byte formulas, inputs (X, weight, bias), the fp32 reference and
its modelled error, the tolerance, negative controls and the torch baselines (edge shapes:
codegen.families.rows). The two ops differ in `inst.centered` / `inst.has_bias` only."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.families.base import Numerics
from codegen.families.rows import (
    RowTolerance,
    dropped_chunk_columns,
    peel_scalar_mask,
    row_bytes,
    row_chunks,
    row_derived_shapes,
    row_inputs,
    row_tolerance,
    row_workspace,
    split_kept_columns,
)
from codegen.hardware import DTYPE_BYTES, DType, Target
from codegen.numerics import compiled_once
from codegen.targets import torch_dtype

# mag of norm_reference per op, for reports
TOLERANCE_MODELS = {
    "rmsnorm": "|ref|*(4*sqrt({n}) + 8)",
    "layernorm": "(|xhat*w| + |b|)*(4*sqrt({n}) + 8) + 4*sqrt({n})*rstd*|w|*mean|x|",
}


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
    WS: object = None  # split: the fp32 partials workspace [rows, SPLIT, slots] (device)

    # the same rounded values in fp32, made on use (a chunk's rows only, in the chunked check)
    @property
    def X32(self):
        return self.X.float()

    @property
    def W32(self):
        return self.W.float()

    @property
    def B32(self):
        return None if self.B is None else self.B.float()


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
                    WS=row_workspace(inst, shape, device))


def _rms_norm32(x, w, eps: float):
    import torch
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * (1.0 if w is None else w)


def norm_reference(inst, case: NormCase):
    """fp32 reference of the same rounded inputs, and the per-element error magnitude the tolerance
    scales by u_acc (docs/verification.md), with n = cols and xhat = the normalised x:
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


def norm_dropped_chunk(inst, case: NormCase, chunk: int, dropped=None):
    """Negative control: the first row's statistics miss its last chunk of `chunk` columns (all of a
    shorter row), or the columns `dropped` ([cols] bool: a split's last chunk of every segment), while still
    dividing by cols -- what a kernel with a wrong column trip count produces; every column is still
    normalised and written."""
    import torch

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    bad = norm_reference(inst, case)[0].clone()
    kept = x[0, : max(0, n - chunk)] if dropped is None else x[0, ~dropped]
    if inst.centered:
        mean = kept.sum() / n
        var = (kept - mean).square().sum() / n
        bad[0] = (x[0] - mean) * torch.rsqrt(var + eps) * case.W32 + case.B32
    else:
        bad[0] = x[0] * torch.rsqrt(kept.square().sum() / n + eps) * case.W32
    return bad


def norm_peel_skipped(inst, case: NormCase, r0: int):
    """Negative control of peel: a peeled kernel whose scalar step is skipped -- each row's head and tail
    (peel_scalar_mask) left out of its statistics (still divided by cols) and never written (verify's output
    starts as NaN; left out of the statistics alone they move a long row's rstd by less than the rounding)."""
    import torch

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    scalar = peel_scalar_mask(inst, *x.shape, r0=r0, device=x.device)
    body = x.masked_fill(scalar, 0.0)
    if inst.centered:
        mean = body.sum(-1, keepdim=True) / n
        var = (body - mean).masked_fill(scalar, 0.0).square().sum(-1, keepdim=True) / n
        out = (x - mean) * torch.rsqrt(var + eps) * case.W32 + case.B32
    else:
        out = x * torch.rsqrt(body.square().sum(-1, keepdim=True) / n + eps) * case.W32
    return out.masked_fill(scalar, float("nan"))


def norm_split_dropped(inst, case: NormCase, rows: int):
    """Negative control of split: the combine leaves out each row's first segment's partial(s)
    (still dividing by cols); every column, that segment's too, is still normalised and written."""
    import torch

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    dropped = ~split_kept_columns(inst, rows, x.shape[-1], device=x.device)
    kept = x.masked_fill(dropped, 0.0)
    if inst.centered:
        mean = kept.sum(-1, keepdim=True) / n
        var = (x - mean).masked_fill(dropped, 0.0).square().sum(-1, keepdim=True) / n
        return (x - mean) * torch.rsqrt(var + eps) * case.W32 + case.B32
    return x * torch.rsqrt(kept.square().sum(-1, keepdim=True) / n + eps) * case.W32


def norm_pack_mixed(inst, case: NormCase):
    """Negative control of pack: each workgroup's `pack` rows share one set of statistics (their sums added
    together, still divided by cols: reducing over the workgroup instead of each row's threads)."""
    import torch

    x, n, eps, p = case.X32, case.X32.shape[-1], inst.eps, inst.pack
    blocks = x.reshape(x.shape[0] // p, p * n)
    if inst.centered:
        mean = blocks.sum(-1, keepdim=True) / n
        var = (blocks - mean).square().sum(-1, keepdim=True) / n
        out = (blocks - mean) * torch.rsqrt(var + eps)
        return out.reshape(x.shape) * case.W32 + case.B32
    out = blocks * torch.rsqrt(blocks.square().sum(-1, keepdim=True) / n + eps)
    return out.reshape(x.shape) * case.W32


def norm_controls(inst, case: NormCase, ref, r0: int = 0, rows: int | None = None) -> dict[str, object]:
    import torch
    import torch.nn.functional as F

    x, n, eps = case.X32, case.X32.shape[-1], inst.eps
    controls = {"zeros": torch.zeros_like(ref)}
    if inst.centered:
        controls["no_bias"] = F.layer_norm(x, (n,), case.W32, None, eps)
        controls["rms_not_layer"] = _rms_norm32(x, case.W32, eps) + case.B32  # no mean subtraction
    else:
        controls["no_weight"] = _rms_norm32(x, None, eps)
    rows = case.X.shape[0] if rows is None else rows
    controls["dropped_chunk"] = norm_dropped_chunk(inst, case, inst.chunk, dropped_chunk_columns(inst, rows, n, device=case.X.device))
    if inst.peel:
        controls["peel_skipped"] = norm_peel_skipped(inst, case, r0)
    if inst.splits:
        controls["split_dropped"] = norm_split_dropped(inst, case, rows)
    if inst.pack > 1:
        controls["pack_mixed"] = norm_pack_mixed(inst, case)
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
    params = [t for t in (case.B, case.WS) if t is not None]  # layernorm's bias, split's workspace
    kernel(case.X, case.W, *params, out)


def tolerance(inst, shape, run_target: Target) -> RowTolerance:
    return row_tolerance(TOLERANCE_MODELS[inst.op], inst.spec_dtypes, shape[1], inst.verify_tolerance_scale)


def norm_flops(inst, shape) -> float:
    return (layernorm_flops if inst.centered else rmsnorm_flops)(*shape)


NUMERICS = Numerics(
    flops=norm_flops,
    bytes=lambda inst, s: norm_bytes(inst, *s),
    make_inputs=norm_inputs,
    reference=norm_reference,
    chunks=lambda inst, case, max_elements: row_chunks(inst, case, max_elements, norm_reference, norm_controls,
                                                       first_row_controls=("dropped_chunk",)),
    tolerance=tolerance,
    controls=norm_controls,
    derived_shapes=row_derived_shapes,
    out_shape=lambda inst, s: tuple(s),
    launch=_norm_launch,
    baselines=norm_baselines,
)
