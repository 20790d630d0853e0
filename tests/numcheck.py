"""The helper the CPU numerics tests share: judge an output the way verify does, through the family's
numerics (inputs, reference, tolerance, negative controls), without a GPU."""

from __future__ import annotations

from dataclasses import replace

from codegen.families import family
from codegen.run.verify import judge, judge_chunks
from codegen.targets import torch_dtype

WHOLE = 1 << 62  # elements per chunk: the whole tensor in one block


def check_output(inst, shape, out_fn, kind: str = "normal", scale: float | None = None,
                 max_elements: int | None = None, seed: int = 0):
    """(status, comparison, controls) of `out_fn(case, ref)` judged against the family's reference;
    `scale` replaces the spec's verify_tolerance_scale when given. With `max_elements`, the chunked
    check verify runs (the family's `chunks`), else the whole-tensor one. `seed`: verify draws 0 and 1.
    A kernel of several outputs (Numerics.outputs): `ref` is the tuple of every output's reference and
    `out_fn` returns one tensor per output, each judged with its own tolerance."""
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=seed, kind=kind, device="cpu", run_target=inst.target)
    outputs = fam.output_list(inst, shape)
    if len(outputs) > 1:
        tols = fam.tolerance_list(inst, shape, inst.target)
        if scale is not None:
            tols = tuple(replace(t, scale=scale) for t in tols)
        whole = sorted(fam.chunks(inst, case, WHOLE), key=lambda c: c.output)  # one block: a chunk per output
        refs = tuple(c.ref for c in whole)
        outs = tuple(o.to(torch_dtype(spec.dtype, inst.target)) for o, spec in
                     zip(out_fn(case, refs), outputs, strict=True))
        chunks = whole if max_elements is None else fam.chunks(inst, case, max_elements)
        return judge_chunks(outs, chunks, tols, [o.name for o in outputs])
    ref, mag = fam.reference(inst, case)
    out = out_fn(case, ref).to(torch_dtype(inst.spec_dtypes[-2], inst.target))  # the output dtype
    tol = fam.tolerance(inst, shape, inst.target)
    if scale is not None:
        tol = replace(tol, scale=scale)
    if max_elements is not None:
        return judge_chunks(out, fam.chunks(inst, case, max_elements), tol)
    return judge(out, ref, mag, tol, fam.controls(inst, case, ref))
