"""Softmax numerics: the FLOP and byte formulas, inputs (X; the additive mask), the fp32 reference and its
modelled error, the tolerance, negative controls and the torch baselines (edge shapes: codegen.families.rows).

With a scale and/or a mask the kernel's softmax is of the logits Z = X * scale + mask, in fp32; the reference
composes the same torch ops in fp32 on the same rounded inputs (the mask in the input dtype, -inf masking an
element out), and every function below reads Z where the plain softmax reads X."""

from __future__ import annotations

from dataclasses import dataclass, replace

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import Numerics
from codegen.families.numerics import compiled_once
from codegen.families.rows import (
    RowCase,
    RowTolerance,
    dropped_chunk_columns,
    peel_scalar_mask,
    row_bytes,
    row_chunks,
    row_derived_shapes,
    row_inputs,
    row_tolerance,
    split_kept_columns,
)
from codegen.targets import torch_dtype

TOLERANCE_MODEL = "|ref|*(4*sqrt({n}) + 4*(1 + |x - max|))"  # mag of softmax_reference, for reports
# with a scale or a mask: the logits' own roundings (x * scale, + mask) at the element and at the row's max
LOGITS_MODEL = "|ref|*(4*sqrt({n}) + 4*(1 + |z - max|) + 4*(|x*s| + |m| + max_row(|x*s| + |m|)))"
MASK_OUT = 0.2  # the share of mask elements that are -inf (masked out); each row keeps column 0


@dataclass(frozen=True, kw_only=True)
class SoftmaxCase(RowCase):
    """X, and with a scale or a mask the logits' other terms: MK (full: [rows, cols]; broadcast: [cols]; input
    dtype) and the fp32 scale."""

    MK: object = None
    scale: float | None = None

    def block(self, r0: int, r1: int) -> SoftmaxCase:
        full = self.MK is not None and self.MK.dim() == 2
        return replace(self, X=self.X[r0:r1], MK=self.MK[r0:r1] if full else self.MK)

    @property
    def Z32(self):
        """The fp32 logits the softmax is of: X, or X * scale (fp32) + MK."""
        import torch

        z = self.X32
        if self.scale is not None:
            z = z * torch.tensor(self.scale, dtype=torch.float32, device=z.device)
        if self.MK is not None:
            z = z + self.MK.float()
        return z

    @property
    def terms32(self):
        """|x * scale| + |mask| per element (0 where the mask is -inf: exactly 0 in the output), for the tolerance."""
        import torch

        x = self.X32
        t = (x * self.scale).abs() if self.scale is not None else x.abs()
        if self.MK is not None:
            m = self.MK.float()
            t = torch.where(torch.isinf(m), torch.zeros_like(t), t + m.abs())
        return t


def softmax_flops(rows: int, cols: int) -> float:
    """5 per element: max, subtract, exp, add to the sum, scale by 1/sum (exp counted as one)."""
    return 5.0 * rows * cols


def softmax_reference(case: RowCase):
    """fp32 softmax of the same rounded inputs, and the per-element error magnitude the tolerance
    scales by u_acc: |ref| * (4*sqrt(cols) + 4*(1 + |x - max|)) -- the normaliser's accumulation
    (random walk over cols terms) and the exp of x - max (its argument's rounding grows with it). With a scale
    or a mask (logits z = x * scale + mask): z for x, plus 4 * (|x * scale| + |mask|) at the element and the row's
    largest such term -- the roundings of the logit and of the row max's logit (its difference with the max can
    cancel: a large mask bias shared by a row)."""
    import torch

    x = case.Z32
    ref = torch.softmax(x, dim=-1)
    finite = torch.where(torch.isinf(x), x.new_zeros(()), x)
    spread = (finite - x.max(dim=-1, keepdim=True).values).abs()
    rel = 4.0 * x.shape[-1] ** 0.5 + 4.0 * (1.0 + spread)
    if isinstance(case, SoftmaxCase) and (case.scale is not None or case.MK is not None):
        t = case.terms32
        rel = rel + 4.0 * (t + t.amax(dim=-1, keepdim=True))
    return ref, ref.abs() * rel


def softmax_dropped_chunk(case: RowCase, chunk: int, dropped=None):
    """Negative control: the first row's max and sum miss its last chunk of `chunk` columns (all of a
    shorter row), or the columns `dropped` ([cols] bool: a split's last chunk of every segment) -- what a
    kernel with a wrong column trip count produces; those columns are still written."""
    import torch

    x = case.Z32
    bad = torch.softmax(x, dim=-1)
    cols = x.shape[-1]
    if dropped is None:
        dropped = torch.arange(cols, device=case.X.device) >= cols - chunk
    if bool(dropped.all()):
        bad[0] = float("inf")  # nothing left to normalise by
        return bad
    kept = x[0, ~dropped]
    m = kept.max()
    bad[0] = torch.exp(x[0] - m) / torch.exp(kept - m).sum()
    return bad


def softmax_peel_skipped(inst, case: RowCase, r0: int):
    """Negative control of peel: a peeled kernel whose scalar step is skipped -- each row's head and tail
    (peel_scalar_mask) left out of its max and sum and never written (verify's output starts as NaN). Left out
    of the statistics alone they move a long row's sum by less than the fp16 rounding, so the unwritten
    elements are what the check can see."""
    import torch

    x = case.Z32
    scalar = peel_scalar_mask(inst, *x.shape, r0=r0, device=x.device)
    body = x.masked_fill(scalar, float("-inf"))
    m = body.amax(-1, keepdim=True)
    out = torch.exp(body - m) / torch.exp(body - m).sum(-1, keepdim=True)
    return out.masked_fill(scalar, float("nan"))


def softmax_split_dropped(inst, case: RowCase, rows: int):
    """Negative control of split: the combine leaves out each row's first segment's (max, sum)
    partial; every column, that segment's too, is still normalised by the others' and written."""
    import torch

    x = case.Z32
    kept = x.masked_fill(~split_kept_columns(inst, rows, x.shape[-1], device=x.device), float("-inf"))
    m = kept.amax(-1, keepdim=True)
    return torch.exp(x - m) / torch.exp(kept - m).sum(-1, keepdim=True)


def softmax_pack_mixed(inst, case: RowCase):
    """Negative control of pack: each workgroup's `pack` rows reduced together (one max and one sum over all
    of them, the bug of reducing over the workgroup instead of each row's threads)."""
    import torch

    x = case.Z32
    rows, cols = x.shape
    return torch.softmax(x.reshape(rows // inst.pack, inst.pack * cols), dim=-1).reshape(rows, cols)


def softmax_controls(inst, case: RowCase, ref, r0: int = 0, rows: int | None = None) -> dict[str, object]:
    """zeros, wrong_axis (softmax over rows), dropped_chunk, and per option its control; with a scale or a mask:
    no_scale (the logits X + mask), mask_ignored (X * scale), mask_scaled (the mask multiplied by the scale too:
    (X + mask) * scale), mask_row0 (full: every row reads the mask's first row, as a broadcast mask is read; the
    chunked check's whole_controls give it the tensor's first row)."""
    import torch

    rows = case.X.shape[0] if rows is None else rows

    controls = {
        "zeros": torch.zeros_like(ref),
        "wrong_axis": torch.softmax(case.Z32, dim=0),  # softmax over rows instead of columns
        "dropped_chunk": softmax_dropped_chunk(case, inst.chunk, dropped_chunk_columns(inst, rows, case.X.shape[-1], device=case.X.device)),
    }
    if inst.scale is not None:
        controls["no_scale"] = torch.softmax(replace(case, scale=None).Z32, dim=-1)
    if inst.mask != "none":
        controls["mask_ignored"] = torch.softmax(replace(case, MK=None).Z32, dim=-1)
        if inst.scale is not None:
            controls["mask_scaled"] = torch.softmax((case.X32 + case.MK.float()) * inst.scale, dim=-1)
        if inst.mask == "full":
            controls["mask_row0"] = torch.softmax(replace(case, MK=case.MK[:1]).Z32, dim=-1)
    if inst.peel:
        controls["peel_skipped"] = softmax_peel_skipped(inst, case, r0)
    if inst.splits:
        controls["split_dropped"] = softmax_split_dropped(inst, case, rows)
    if inst.pack > 1:
        controls["pack_mixed"] = softmax_pack_mixed(inst, case)
    return controls


def softmax_wrong_axis_by_blocks(inst, case: RowCase, step: int):
    """The wrong_axis control for the chunked check: softmax over rows needs each column's max and sum
    over every row, gathered in one pass over the row blocks ([cols] fp32 each); a block's wrong values
    are then exp(x - colmax) / colsum."""
    import torch

    rows = case.X.shape[0]
    colmax = torch.stack([case.block(r, r + step).Z32.amax(0) for r in range(0, rows, step)]).amax(0)
    colsum = sum(torch.exp(case.block(r, r + step).Z32 - colmax).sum(0) for r in range(0, rows, step))
    mixed = {"wrong_axis": lambda sub, r0: torch.exp(sub.Z32 - colmax) / colsum}
    if getattr(inst, "mask", "none") == "full":
        first = case.MK[:1]  # the tensor's first mask row, in every block
        mixed["mask_row0"] = lambda sub, r0: torch.softmax(replace(sub, MK=first).Z32, dim=-1)
    return mixed


def softmax_chunks(inst, case: RowCase, max_elements: int):
    return row_chunks(inst, case, max_elements, lambda i, c: softmax_reference(c), softmax_controls,
                      first_row_controls=("dropped_chunk",), whole_controls=softmax_wrong_axis_by_blocks)


def softmax_baselines(inst, case: RowCase, out_dtype):
    """torch.softmax, eager and under torch.compile; with a scale or a mask, of the unfused logits X * scale + mask
    (each op in the input dtype, as a model's eager code runs them)."""
    import torch

    x, mask, scale = case.X, getattr(case, "MK", None), getattr(inst, "scale", None)

    def logits(t):
        if scale is not None:
            t = t * scale
        return t if mask is None else t + mask

    if out_dtype == x.dtype:
        def op(t):
            return torch.softmax(logits(t), dim=-1)
    else:
        def op(t):
            return torch.softmax(logits(t), dim=-1, dtype=torch.float32).to(out_dtype)
    compiled = compiled_once(("softmax", inst.spec_dtypes, scale, getattr(inst, "mask", "none")), op)
    return {"eager": lambda: op(x), "compile": lambda: compiled(x)}


def softmax_inputs(inst, shape, *, seed: int, kind: str, device, run_target: Target) -> SoftmaxCase:
    """X as row_inputs draws it; a mask (full: [rows, cols]; broadcast: [cols]) in the input dtype, each element
    -inf with probability MASK_OUT, else 0 or a bias N(0, 4) (half each; 'wide': N(0, 64)), column 0 of every mask
    row finite (a row masked out entirely is NaN, in torch as in the kernel)."""
    import torch

    row = row_inputs(inst, shape, seed=seed, kind=kind, device=device, run_target=run_target)
    mask = None
    if inst.mask != "none":
        rows, cols = shape
        g = torch.Generator(device="cpu").manual_seed(seed + 15485863)
        mrows = rows if inst.mask == "full" else 1
        u = torch.rand(mrows, cols, generator=g)
        bias = torch.randn(mrows, cols, generator=g) * (8.0 if kind == "wide" else 2.0)
        m = torch.where(u < 0.5, torch.zeros_like(bias), bias)
        m = torch.where(u < MASK_OUT, torch.full_like(m, float("-inf")), m)
        m[:, 0] = torch.where(torch.isinf(m[:, 0]), torch.zeros_like(m[:, 0]), m[:, 0])
        m = m.to(torch_dtype(inst.spec_dtypes[0], run_target))
        mask = (m if inst.mask == "full" else m[0]).to(device)
    return SoftmaxCase(X=row.X, WS=row.WS, MK=mask, scale=inst.scale)


def softmax_bytes(inst, rows: int, cols: int) -> float:
    """Read X once, write Y once; the mask read once (full: rows x cols; broadcast: one row, re-read from cache)."""
    mask = {"full": rows * cols, "broadcast": cols}.get(inst.mask, 0) * DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    return row_bytes(inst, rows, cols) + float(mask)


def softmax_baseline_bytes(inst, shape) -> dict[str, float]:
    """What the unfused eager sequence of softmax_baselines moves, with a scale or a mask: X * scale (read X, write
    it), + mask (read both, write the sum; broadcast: one mask row), the softmax (read, write Y). {} for the plain
    softmax (it moves what the kernel does); torch.compile fuses them: not counted."""
    if inst.scale is None and inst.mask == "none":
        return {}
    rows, cols = shape
    n, b = rows * cols, DTYPE_BYTES[DType(inst.spec_dtypes[0])]
    total = row_bytes(inst, rows, cols)
    if inst.scale is not None:
        total += 2 * n * b
    if inst.mask != "none":
        total += 2 * n * b + (n if inst.mask == "full" else cols) * b
    return {"eager": float(total)}


def tolerance(inst, shape, run_target: Target) -> RowTolerance:
    model = LOGITS_MODEL if inst.logits else TOLERANCE_MODEL
    return row_tolerance(model, inst.spec_dtypes, shape[1], inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=lambda inst, s: softmax_flops(*s) + float(s[0] * s[1] * ((inst.scale is not None) + (inst.mask != "none"))),
    bytes=lambda inst, s: softmax_bytes(inst, *s),
    make_inputs=softmax_inputs,
    reference=lambda inst, case: softmax_reference(case),
    chunks=softmax_chunks,
    tolerance=tolerance,
    controls=softmax_controls,
    derived_shapes=row_derived_shapes,
    out_shape=lambda inst, s: tuple(s),
    launch=lambda kernel, case, out: kernel(case.X, *(t for t in (case.MK, case.WS) if t is not None), out),
    baselines=softmax_baselines,
    baseline_bytes=softmax_baseline_bytes,
)
