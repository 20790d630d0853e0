"""rmsnorm / layernorm numerics: FLOP and byte formulas, inputs (X, weight, bias; the residual R), the fp32
reference and its modelled error, the tolerances, negative controls and the torch baselines (edge shapes:
codegen.families.rows). The two ops differ in `inst.centered` / `inst.has_bias` only.

The fused kernels write more than one output (Numerics.outputs): with `residual`, the sum S = X + R (input dtype)
before Y; with `quant: per_token`, the fp8 rows Y and their fp32 scales SC ([rows, 1]). The reference composes the
unfused torch ops in fp32: S = X + R in fp32 (exact for two fp16/bf16 values but where their exponents are far
apart), and Y = norm(S rounded once to the input dtype) -- the value stored and passed on as the next residual, which
is what the unfused sequence in the input dtype normalises; per_token, Q = clamp(Y / SC, +-fp8_max) and
SC = max(amax(|Y|) / fp8_max, 2^-126) per row. Each output has its own tolerance (norm_tolerances)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import Numerics, Output
from codegen.families.numerics import SUBNORMAL_ROUNDOFF, UNIT_ROUNDOFF, compiled_once
from codegen.families.rows import (
    RowTolerance,
    dropped_chunk_columns,
    peel_scalar_mask,
    row_bytes,
    row_chunks,
    row_derived_shapes,
    row_inputs,
    row_output_chunks,
    row_tolerance,
    row_workspace,
    split_kept_columns,
)
from codegen.families.spec import MIN_NORMAL_FP32
from codegen.targets import torch_dtype

# mag of norm_reference per op, for reports (per_token: of the fp8 rows Q, in fp8 units)
TOLERANCE_MODELS = {
    "rmsnorm": "|ref|*(4*sqrt({n}) + 8)",
    "layernorm": "(|xhat*w| + |b|)*(4*sqrt({n}) + 8) + 4*sqrt({n})*rstd*|w|*mean|x|",
    "per_token": "|ref|*(2*(4*sqrt({n}) + 8) + 4)",
}
SUM_MODEL = "|ref| (the fp32 sum X + R, one rounding)"
SCALE_MODEL = "|ref|*(4*sqrt({n}) + 10)"
MIN_SCALE = MIN_NORMAL_FP32  # per_token: the least scale a row gets (the template's MIN_SCALE)
# residual: the rounding controls (sum_truncated, sum_unrounded) err by about one rounding of the sum, which the
# tolerance -- itself one rounding, u*|ref| -- tells apart only at some of the elements where they differ from the
# reference (truncation errs by more than u*|ref| where the sum was rounded up and its significand is small). Where
# they differ at fewer elements than this (a derived edge shape of 1 x 1 or a row of 3; wide inputs, whose sums of
# opposite signs are mostly exact), they are left out of that block of rows, not judged: an undetected one there
# says nothing of the tolerance. (Over 1 x 1 to 3 x 1000 rows and 200 draws each, no run at or above it was vacuous)
ROUNDING_CONTROLS_MIN_DIFFERING = 32
# the residual norms' controls of one rounding step: judged where they are within one step of the correctly rounded
# output too (codegen.run.verify.judge_chunks leaves other controls out there)
ROUNDING_CONTROLS = frozenset({"sum_truncated", "sum_unrounded"})


def rmsnorm_flops(rows: int, cols: int) -> float:
    """4 per element: square, add to the sum, scale by 1/rms, multiply by the weight (the per-row
    sqrt and division are not counted)."""
    return 4.0 * rows * cols


def layernorm_flops(rows: int, cols: int) -> float:
    """8 per element: add to the sum (mean); subtract the mean, square, add (variance); subtract the
    mean, scale by 1/std, multiply by the weight, add the bias (output)."""
    return 8.0 * rows * cols


def norm_bytes(inst, rows: int, cols: int) -> float:
    """Compulsory DRAM traffic: read X once, write Y once (fp8 per_token: 1 byte an element, and a 4-byte scale a
    row), read the weight (and bias) once; residual: read R and write S too (input dtype)."""
    params = 2 if inst.has_bias else 1
    in_bytes = DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    extra = 2 * rows * cols * in_bytes if inst.residual else 0
    scales = 4 * rows if inst.per_token else 0
    return row_bytes(inst, rows, cols) + float(params * cols * in_bytes + extra + scales)


def norm_baseline_bytes(inst, shape) -> dict[str, float]:
    """What the unfused torch sequence of a fused kernel moves (eager: each op reads its inputs and writes its
    output; `norm_baselines` runs it): residual, the add reads X and R and writes S, then the norm reads S and
    writes Y; per_token, the norm writes Y in the input dtype, then |Y| (read, write), its row max (read), Y / scale
    in fp32 (read Y, write 4 bytes), the clamp (read and write 4 bytes) and the fp8 cast (read 4, write 1).
    {} for the plain ops (they move what the kernel does). torch.compile fuses them: not counted."""
    if not (inst.residual or inst.per_token):
        return {}
    rows, cols = shape
    n, b = rows * cols, DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    params = (2 if inst.has_bias else 1) * cols * b
    total = params + 2 * n * b  # the norm: read its input, write Y (input dtype unfused)
    if inst.residual:
        total += 3 * n * b  # the add
    if inst.per_token:
        total += 2 * n * b + n * b + (n * b + 4 * n) + 8 * n + (4 * n + n) + 8 * rows
    return {"eager": float(total)}


@dataclass(frozen=True, kw_only=True)
class NormCase:
    X: object  # stored input (device, input dtype)
    W: object  # weight [cols], input dtype
    B: object  # bias [cols], input dtype; None for rmsnorm
    WS: object = None  # split: the fp32 partials workspace [rows, SPLIT, slots] (device)
    R: object = None  # residual: the residual [rows, cols], input dtype

    def block(self, r0: int, r1: int) -> NormCase:
        """Rows r0 .. r1 of the case (the chunked check's block)."""
        return replace(self, X=self.X[r0:r1], R=None if self.R is None else self.R[r0:r1])

    # the same rounded values in fp32, made on use (a chunk's rows only, in the chunked check)
    @property
    def X32(self):
        return self.X.float()

    @property
    def sum32(self):
        """residual: X + R in fp32 (the reference of S)."""
        return self.X.float() + self.R.float()

    @property
    def normed32(self):
        """The rows the norm reads, in fp32: X, or S = X + R rounded once to the input dtype (as stored)."""
        return self.X32 if self.R is None else self.sum32.to(self.X.dtype).float()

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
    # residual: R drawn as X is, from its own seed (a residual stream of the same spread as the block's output)
    r = row_inputs(inst, shape, seed=seed + 104729, kind=kind, device=device, run_target=run_target).X \
        if inst.residual else None
    return NormCase(X=row.X.to(device), W=w.to(device), B=None if b is None else b.to(device),
                    WS=row_workspace(inst, shape, device), R=r)


def _rms_norm32(x, w, eps: float):
    import torch
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * (1.0 if w is None else w)


def normalised_reference(inst, case: NormCase):
    """fp32 reference of the norm of the same rounded inputs (residual: of the sum as stored), and the per-element
    error magnitude the tolerance scales by u_acc (docs/verification.md), with n = cols and xhat = the normalised x:
    rmsnorm:   |ref| * (4*sqrt(n) + 8) -- the fp32 sum of squares (random walk over n terms) and a
               few roundings in rsqrt and the two products, all relative to the output;
    layernorm: (|xhat*w| + |b|) * (4*sqrt(n) + 8) + 4*sqrt(n) * rstd * |w| * mean(|x|) -- the same
               relative terms on the output before the bias is added (the sum can cancel), plus the
               mean's absolute error, ~u*sqrt(n)*mean|x|, carried through the subtraction x - mean
               (large when a row is shifted far from 0: the cancellation term)."""
    import torch
    import torch.nn.functional as F

    x, n, eps = case.normed32, case.X.shape[-1], inst.eps
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


def quantised(inst, y):
    """per_token: (Q, SC) of fp32 rows y as the kernel defines them -- SC = max(amax(|y|) / fp8_max, 2^-126) per row
    ([rows, 1]) and Q = clamp(y / SC, +-fp8_max), in fp32 (the clamp as the kernel's: the row's largest element
    can round a few ulps past fp8_max)."""
    import torch

    scale = torch.clamp(y.abs().amax(-1, keepdim=True) / inst.fp8_max, min=MIN_SCALE)
    return torch.clamp(y / scale, -inst.fp8_max, inst.fp8_max), scale


def norm_references(inst, case: NormCase) -> tuple:
    """(ref, mag) of every output, in norm_outputs' order: S (residual) -- the fp32 sum, mag |S| (the kernel's fp32
    addition rounds at most once); Y -- normalised_reference; per_token, Y is Q, mag |Q| * (2 * rel + 4) with rel =
    4*sqrt(n) + 8 (the normalised rows' relative error, twice: y and the row's amax, plus the division and the
    scaling), and SC, mag |SC| * (rel + 2)."""
    y, mag = normalised_reference(inst, case)
    refs = []
    if inst.residual:
        s32 = case.sum32
        refs.append((s32, s32.abs()))
    if inst.per_token:
        rel = 4.0 * case.X.shape[-1] ** 0.5 + 8.0
        q, scale = quantised(inst, y)
        refs += [(q, q.abs() * (2 * rel + 4)), (scale, scale * (rel + 2))]
    else:
        refs.append((y, mag))
    return tuple(refs)


def norm_reference(inst, case: NormCase):
    """(ref, mag) of the main output Y (per_token: the fp8 rows Q), as norm_references gives it."""
    refs = norm_references(inst, case)
    return refs[1 if inst.residual else 0]


def norm_dropped_chunk(inst, case: NormCase, chunk: int, dropped=None):
    """Negative control: the first row's statistics miss its last chunk of `chunk` columns (all of a
    shorter row), or the columns `dropped` ([cols] bool: a split's last chunk of every segment), while still
    dividing by cols -- what a kernel with a wrong column trip count produces; every column is still
    normalised and written."""
    import torch

    x, n, eps = case.normed32, case.X.shape[-1], inst.eps
    bad = normalised_reference(inst, case)[0].clone()
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

    x, n, eps = case.normed32, case.X.shape[-1], inst.eps
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

    x, n, eps = case.normed32, case.X.shape[-1], inst.eps
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

    x, n, eps, p = case.normed32, case.X.shape[-1], inst.eps, inst.pack
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

    x, n, eps = case.normed32, case.X.shape[-1], inst.eps
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
    """The op in torch, eager and under torch.compile; a fused kernel's the unfused sequence: residual, S = X + R
    (input dtype) then the norm of S (both returned); per_token, the norm in the input dtype, then its rows' scales
    (amax(|Y|) / fp8_max, at least 2^-126) and Q = clamp(Y / scale, +-fp8_max) cast to fp8."""
    import torch.nn.functional as F

    x, r, w, b, eps, n = case.X, case.R, case.W, case.B, inst.eps, case.X.shape[-1]
    if inst.centered:
        def norm(t):
            return F.layer_norm(t, (n,), w, b, eps)
    elif hasattr(F, "rms_norm"):
        def norm(t):
            return F.rms_norm(t, (n,), w, eps)
    else:
        def norm(t):
            t32 = t.float()
            return (t32 * (t32.square().mean(-1, keepdim=True) + eps).rsqrt() * w.float()).to(t.dtype)

    def finish(y):
        if not inst.per_token:
            return y.to(out_dtype)
        scale = (y.abs().amax(-1, keepdim=True).float() / inst.fp8_max).clamp_min(MIN_SCALE)
        return (y / scale).clamp(-inst.fp8_max, inst.fp8_max).to(out_dtype), scale

    if inst.residual:
        def op(t, res):
            s = t + res
            return s, finish(norm(s))
    else:
        def op(t, res):
            return finish(norm(t))
    compiled = compiled_once((inst.op, inst.spec_dtypes, eps, n, inst.residual, inst.quant, inst.fp8_max), op)
    return {"eager": lambda: op(x, r), "compile": lambda: compiled(x, r)}


def norm_outputs(inst, shape) -> tuple[Output, ...]:
    """In launch order: S = X + R (residual; input dtype), Y, SC (per_token; fp32 [rows, 1])."""
    rows, cols = shape
    outs = [Output(name="S", shape=(rows, cols), dtype=inst.spec_dtypes[0])] if inst.residual else []
    outs.append(Output(name="Y", shape=(rows, cols), dtype=inst.spec_dtypes[1]))
    if inst.per_token:
        outs.append(Output(name="SC", shape=(rows, 1), dtype=DType.FP32.value))
    return tuple(outs)


def truncated(x32, dtype):
    """x32 stored in `dtype` with its low bits dropped (rounded toward zero) instead of rounded to nearest: where
    rounding went up in magnitude, one step down -- the stored bits, sign and magnitude, less 1 (integer arithmetic,
    which every device has for every float width)."""
    import torch

    r = x32.to(dtype)
    bits = r.view({2: torch.int16, 4: torch.int32}[r.element_size()])
    down = (bits - 1).view(dtype)
    return torch.where(r.float().abs() > x32.abs(), down, r).float()


def fused_controls(inst, case: NormCase, refs, r0: int = 0, rows: int | None = None) -> dict[str, tuple]:
    """Negative controls of a fused kernel, each as its wrong value of every output (the reference where it is
    right): the plain op's controls on the normalised rows (per_token: quantised, so Q and SC are both what such a
    kernel writes); residual -- no_residual (S = X, Y = norm(X)), sum_unwritten (S left NaN), sum_truncated (S's low
    bits dropped instead of rounded), sum_unrounded (Y normalised from the fp32 sum, not the stored one; stored in
    Y's dtype; not per_token, whose fp8 rounding hides it) -- these two only where
    they differ from the reference at ROUNDING_CONTROLS_MIN_DIFFERING elements or more; per_token -- scale_of_input (the scale of the rows
    before the norm), scale_reciprocal (SC written as 1 / scale), scale_unwritten (SC left NaN), unscaled (Y cast to
    fp8 unscaled, SC = 1) and other_fp8_max (the other fp8 flavour's maximum: 448 for 240 and back)."""
    import torch

    names = [o.name for o in norm_outputs(inst, tuple(case.X.shape))]
    base = dict(zip(names, (r for r, _ in refs), strict=True))

    def outs(**wrong) -> tuple:
        return tuple(wrong.get(n, base[n]) for n in names)

    def normed(y) -> tuple:  # a wrong normalised output, as the kernel would write Y (and SC)
        if not inst.per_token:
            return outs(Y=y)
        q, scale = quantised(inst, y)
        return outs(Y=q, SC=scale)

    y_ref = normalised_reference(inst, case)[0]
    controls = {name: normed(y) for name, y in norm_controls(inst, case, y_ref, r0=r0, rows=rows).items()}
    if inst.residual:
        plain = normed(normalised_reference(inst, replace(case, R=None))[0])  # Y (and SC) of norm(X)
        controls["no_residual"] = tuple(case.X32 if n == "S" else v for n, v in zip(names, plain, strict=True))
        controls["sum_unwritten"] = outs(S=torch.full_like(base["S"], float("nan")))
        # the rounding controls, each beside the correctly rounded output it replaces: judged only where the two
        # differ at enough elements (ROUNDING_CONTROLS_MIN_DIFFERING)
        s_trunc = truncated(case.sum32, case.X.dtype)
        rounding = {"sum_truncated": (s_trunc, case.normed32, outs(S=s_trunc))}
        if not inst.per_token:
            y_dtype = torch_dtype(inst.spec_dtypes[1], inst.target)
            exact = replace(case, X=case.sum32, R=None)  # normalise the fp32 sum itself
            y_unrounded = normalised_reference(inst, exact)[0].to(y_dtype).float()
            rounding["sum_unrounded"] = (y_unrounded, base["Y"].to(y_dtype).float(), outs(Y=y_unrounded))
        for name, (wrong, right, wrong_outs) in rounding.items():
            if int((wrong != right).sum()) >= ROUNDING_CONTROLS_MIN_DIFFERING:
                controls[name] = wrong_outs
    if inst.per_token:
        m, y, scale = inst.fp8_max, y_ref, base["SC"]
        before = torch.clamp(case.normed32.abs().amax(-1, keepdim=True) / m, min=MIN_SCALE)
        other = 448.0 if m != 448.0 else 240.0
        scale_other = torch.clamp(y.abs().amax(-1, keepdim=True) / other, min=MIN_SCALE)
        controls["scale_of_input"] = outs(Y=torch.clamp(y / before, -m, m), SC=before)
        controls["scale_reciprocal"] = outs(SC=1.0 / scale)
        controls["scale_unwritten"] = outs(SC=torch.full_like(scale, float("nan")))
        controls["unscaled"] = outs(Y=torch.clamp(y, -m, m), SC=torch.ones_like(scale))
        controls["other_fp8_max"] = outs(Y=torch.clamp(y / scale_other, -m, m), SC=scale_other)
    return controls


def _norm_launch(kernel, case: NormCase, *outs) -> None:
    # residual's R, layernorm's bias, split's workspace; then the outputs (norm_outputs)
    params = [t for t in (case.R, case.W, case.B, case.WS) if t is not None]
    kernel(case.X, *params, *outs)


def tolerance(inst, shape, run_target: Target) -> RowTolerance:
    """The main output's: Y (per_token: the fp8 rows Q, in fp8 units)."""
    model = TOLERANCE_MODELS["per_token" if inst.per_token else inst.op]
    return row_tolerance(model, inst.spec_dtypes, shape[1], inst.verify_tolerance_scale)


def norm_tolerances(inst, shape, run_target: Target) -> tuple[RowTolerance, ...]:
    """One per output: S -- the input dtype's rounding of the fp32 sum (stored once) plus u_fp32 * |S|; Y as
    `tolerance`; SC -- fp32's rounding plus u_fp32 * |SC| * (4*sqrt(n) + 10)."""
    scale = inst.verify_tolerance_scale
    u32, inp = UNIT_ROUNDOFF[DType.FP32], DType(inst.spec_dtypes[0])
    tols = []
    if inst.residual:
        tols.append(RowTolerance(u_out=UNIT_ROUNDOFF[inp], eta_out=SUBNORMAL_ROUNDOFF[inp], u_acc=u32, model=SUM_MODEL,
                                 scale=scale))
    tols.append(tolerance(inst, shape, run_target))
    if inst.per_token:
        tols.append(RowTolerance(u_out=u32, eta_out=SUBNORMAL_ROUNDOFF[DType.FP32], u_acc=u32,
                                 model=SCALE_MODEL.format(n=shape[1]), scale=scale))
    return tuple(tols)


def norm_chunks(inst, case: NormCase, max_elements: int):
    if not (inst.residual or inst.per_token):
        return row_chunks(inst, case, max_elements, norm_reference, norm_controls, first_row_controls=("dropped_chunk",))
    return row_output_chunks(inst, case, max_elements, norm_outputs, norm_references, fused_controls,
                             first_row_controls=("dropped_chunk",), rounding_controls=ROUNDING_CONTROLS)


def norm_flops(inst, shape) -> float:
    """The norm's (norm_flops per element); residual adds one per element, per_token three (|y|, max, scale)."""
    rows, cols = shape
    return (layernorm_flops if inst.centered else rmsnorm_flops)(rows, cols) + float(
        rows * cols * (inst.residual + 3 * inst.per_token))


NUMERICS = Numerics(
    flops=norm_flops,
    bytes=lambda inst, s: norm_bytes(inst, *s),
    make_inputs=norm_inputs,
    reference=norm_reference,
    chunks=norm_chunks,
    tolerance=tolerance,
    controls=norm_controls,
    derived_shapes=row_derived_shapes,
    out_shape=lambda inst, s: tuple(s),
    launch=_norm_launch,
    baselines=norm_baselines,
    outputs=norm_outputs,
    tolerances=norm_tolerances,
    baseline_bytes=norm_baseline_bytes,
)
