"""The helper the CPU numerics tests share: judge an output the way verify does, through the family's
numerics (inputs, reference, tolerance, negative controls), without a GPU."""

from __future__ import annotations

from dataclasses import replace

from codegen.families import family
from codegen.targets import torch_dtype
from codegen.verify import judge, judge_chunks


def check_output(inst, shape, out_fn, kind: str = "normal", scale: float | None = None,
                 max_elements: int | None = None, seed: int = 0):
    """(status, comparison, controls) of `out_fn(case, ref)` judged against the family's reference;
    `scale` replaces the spec's verify_tolerance_scale when given. With `max_elements`, the chunked
    check verify runs (the family's `chunks`), else the whole-tensor one. `seed`: verify draws 0 and 1."""
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=seed, kind=kind, device="cpu", run_target=inst.target)
    ref, mag = fam.reference(inst, case)
    out = out_fn(case, ref).to(torch_dtype(inst.spec_dtypes[-2], inst.target))  # the output dtype
    tol = fam.tolerance(inst, shape, inst.target)
    if scale is not None:
        tol = replace(tol, scale=scale)
    if max_elements is not None:
        return judge_chunks(out, fam.chunks(inst, case, max_elements), tol)
    return judge(out, ref, mag, tol, fam.controls(inst, case, ref))
