"""Numerical verification against a torch fp32 reference, with negative controls.

Each family's numerics (codegen/families/<family>/numerics.py) give the inputs, the fp32 reference
with a modelled error magnitude per element, and the tolerance (documented in README "Verification"):
a bound per output element from the output dtype's rounding plus a model of the kernel's arithmetic
error, only the model scaled by the spec's verify_tolerance_scale. The check passes only if *no*
element exceeds its tolerance, and only counts as verified if every applicable negative control (a
plausible wrong output: zeros, a transposition, a dropped tile, a missing mask) fails it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codegen.families import family
from codegen.hardware import Target
from codegen.numerics import INPUT_KINDS
from codegen.targets import torch_dtype


@dataclass(frozen=True, kw_only=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    mismatch_ratio: float
    passed: bool


def compare(out, ref, bound) -> Comparison:
    import torch

    diff = (out.float() - ref).abs()
    bad = ~(diff <= bound)  # NaN counts as a mismatch
    rel = diff / ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
    n = max(diff.numel(), 1)
    mismatches = int(bad.sum().item())
    return Comparison(
        max_abs_err=float(diff.nan_to_num(nan=float("inf")).max().item()) if diff.numel() else 0.0,
        max_rel_err=float(rel.nan_to_num(nan=float("inf")).max().item()) if diff.numel() else 0.0,
        mismatch_ratio=mismatches / n,
        passed=mismatches == 0,
    )


@dataclass(kw_only=True)
class CaseResult:
    """One (instance, shape, seed, input kind) check, as reported."""

    uri: str
    target: str
    run_target: str
    shape: tuple[int, ...]
    seed: int
    inputs: str
    status: str  # verified | failed | vacuous | error | skipped
    label: str = ""  # e.g. "logic check on NVIDIA" for a gfx942 program run on sm_90
    tolerance: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch_ratio: float | None = None
    controls: dict[str, str] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


def judge(out, ref, abs_product, tol, controls: dict[str, object]) -> tuple[str, Comparison, dict[str, str]]:
    """Compare the kernel output; then require every negative control to fail the same check."""
    import torch

    bound = tol.bound(ref, abs_product)
    result = compare(out, ref, bound)
    outcome: dict[str, str] = {}
    vacuous = False
    for name, wrong in controls.items():
        if torch.equal(wrong, ref):
            outcome[name] = "n/a (identical to the reference for this shape)"
            continue
        if compare(wrong, ref, bound).passed:
            outcome[name] = "PASSED (tolerance is vacuous)"
            vacuous = True
        else:
            outcome[name] = "rejected"
    if not result.passed:
        status = "failed"
    elif vacuous:
        status = "vacuous"
    else:
        status = "verified"
    return status, result, outcome


# ---------------------------------------------------------------- on the GPU (runs in a worker)
SEEDS = (0, 1)  # the derived edge shapes: small, where a second draw of the inputs can still find something
SPEC_SHAPE_SEEDS = (0,)  # the spec's own shapes: millions of elements per draw; a second draw doubled verify's time


def verify_case(rendered, shape: tuple[int, ...], run_target: Target, seeds=None) -> list[CaseResult]:
    """Run one kernel at one shape on every (seed, input kind); executed inside a worker process.
    Generic over the operator family (its `Numerics`, from the registry codegen.families). Without
    `seeds`: SPEC_SHAPE_SEEDS on a shape of the spec, SEEDS on a derived edge shape."""
    import time

    import torch

    from codegen.gpu import compile_kernel, run_label

    inst = rendered.instance
    if seeds is None:
        seeds = SPEC_SHAPE_SEEDS if tuple(shape) in {tuple(s) for s in inst.shapes} else SEEDS
    fam = family(inst).numerics
    kernel = compile_kernel(rendered, shape, run_target)
    tol = fam.tolerance(inst, shape, run_target)
    out_dtype = torch_dtype(inst.spec_dtypes[-2], run_target)
    results = []
    for seed in seeds:
        for kind in INPUT_KINDS:
            t0 = time.perf_counter()
            case = fam.make_inputs(inst, shape, seed=seed, kind=kind, device="cuda", run_target=run_target)
            c = torch.full(fam.out_shape(inst, shape), float("nan"), dtype=out_dtype, device="cuda")  # unwritten fails
            fam.launch(kernel, case, c)
            torch.cuda.synchronize()
            ref, abs_product = fam.reference(inst, case)
            controls = fam.controls(inst, case, ref)
            status, cmp, outcome = judge(c, ref, abs_product, tol, controls)
            results.append(CaseResult(
                uri=rendered.uri, target=inst.target.value, run_target=run_target.value, shape=tuple(shape), seed=seed,
                inputs=kind, status=status, label=run_label(inst.target, run_target), tolerance=tol.describe(),
                max_abs_err=cmp.max_abs_err, max_rel_err=cmp.max_rel_err, mismatch_ratio=cmp.mismatch_ratio,
                controls=outcome, seconds=time.perf_counter() - t0,
            ))
            del case, c, ref, abs_product, controls
    return results
