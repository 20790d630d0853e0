"""Softmax numerics: the FLOP formula, the fp32 reference and its modelled error, the tolerance,
negative controls and the torch baselines (inputs, bytes and edge shapes: codegen.families.rows)."""

from __future__ import annotations

from codegen.families.base import Numerics
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
from codegen.hardware import Target
from codegen.numerics import compiled_once

TOLERANCE_MODEL = "|ref|*(4*sqrt({n}) + 4*(1 + |x - max|))"  # mag of softmax_reference, for reports


def softmax_flops(rows: int, cols: int) -> float:
    """5 per element: max, subtract, exp, add to the sum, scale by 1/sum (exp counted as one)."""
    return 5.0 * rows * cols


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


def softmax_dropped_chunk(case: RowCase, chunk: int, dropped=None):
    """Negative control: the first row's max and sum miss its last chunk of `chunk` columns (all of a
    shorter row), or the columns `dropped` ([cols] bool: a split's last chunk of every segment) -- what a
    kernel with a wrong column trip count produces; those columns are still written."""
    import torch

    x = case.X32
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

    x = case.X32
    scalar = peel_scalar_mask(inst, *x.shape, r0=r0, device=x.device)
    body = x.masked_fill(scalar, float("-inf"))
    m = body.amax(-1, keepdim=True)
    out = torch.exp(body - m) / torch.exp(body - m).sum(-1, keepdim=True)
    return out.masked_fill(scalar, float("nan"))


def softmax_split_dropped(inst, case: RowCase, rows: int):
    """Negative control of split: the combine leaves out each row's first segment's (max, sum)
    partial; every column, that segment's too, is still normalised by the others' and written."""
    import torch

    x = case.X32
    kept = x.masked_fill(~split_kept_columns(inst, rows, x.shape[-1], device=x.device), float("-inf"))
    m = kept.amax(-1, keepdim=True)
    return torch.exp(x - m) / torch.exp(kept - m).sum(-1, keepdim=True)


def softmax_pack_mixed(inst, case: RowCase):
    """Negative control of pack: each workgroup's `pack` rows reduced together (one max and one sum over all
    of them, the bug of reducing over the workgroup instead of each row's threads)."""
    import torch

    x = case.X32
    rows, cols = x.shape
    return torch.softmax(x.reshape(rows // inst.pack, inst.pack * cols), dim=-1).reshape(rows, cols)


def softmax_controls(inst, case: RowCase, ref, r0: int = 0, rows: int | None = None) -> dict[str, object]:
    import torch

    rows = case.X.shape[0] if rows is None else rows

    controls = {
        "zeros": torch.zeros_like(ref),
        "wrong_axis": torch.softmax(case.X32, dim=0),  # softmax over rows instead of columns
        "dropped_chunk": softmax_dropped_chunk(case, inst.chunk, dropped_chunk_columns(inst, rows, case.X.shape[-1], device=case.X.device)),
    }
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
    colmax = torch.stack([case.X[r:r + step].float().amax(0) for r in range(0, rows, step)]).amax(0)
    colsum = sum(torch.exp(case.X[r:r + step].float() - colmax).sum(0) for r in range(0, rows, step))
    return {"wrong_axis": lambda sub, r0: torch.exp(sub.X32 - colmax) / colsum}


def softmax_chunks(inst, case: RowCase, max_elements: int):
    return row_chunks(inst, case, max_elements, lambda i, c: softmax_reference(c), softmax_controls,
                      first_row_controls=("dropped_chunk",), whole_controls=softmax_wrong_axis_by_blocks)


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


def tolerance(inst, shape, run_target: Target) -> RowTolerance:
    return row_tolerance(TOLERANCE_MODEL, inst.spec_dtypes, shape[1], inst.verify_tolerance_scale)


NUMERICS = Numerics(
    flops=lambda inst, s: softmax_flops(*s),
    bytes=lambda inst, s: row_bytes(inst, *s),
    make_inputs=row_inputs,
    reference=lambda inst, case: softmax_reference(case),
    chunks=softmax_chunks,
    tolerance=tolerance,
    controls=softmax_controls,
    derived_shapes=row_derived_shapes,
    out_shape=lambda inst, s: tuple(s),
    launch=lambda kernel, case, out: kernel(case.X, out) if case.WS is None else kernel(case.X, case.WS, out),
    baselines=softmax_baselines,
)
