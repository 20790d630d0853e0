"""Numerical verification against a torch fp32 reference, with negative controls.

Each family's numerics (codegen/families/<family>/numerics.py) give the inputs, the fp32 reference
with a modelled error magnitude per element, and the tolerance (documented in docs/verification.md):
a bound per output element from the output dtype's rounding plus a model of the kernel's arithmetic
error, only the model scaled by the spec's verify_tolerance_scale. The check passes only if *no*
element exceeds its tolerance, and only counts as verified if every applicable negative control (a
plausible wrong output: zeros, a transposition, a dropped tile, a missing mask) fails it. The check is
itself checked: the reference rounded once to the output dtype -- the best answer a kernel can store -- must
pass it (a positive control); a tolerance that rejects it is a defect of the tolerance
model, reported as an error of the case (neither verified nor failed), never blamed on the kernel.

The reference, the tolerance and the controls are computed chunk by chunk (`Numerics.chunks`: row blocks
for the row families, row x column blocks of C for GEMM, (batch, K/V-head group, query block) for
attention), each chunk's fp32 temporaries at most about VERIFY_CHUNK_ELEMENTS elements, so the checker's
extra GPU memory is bounded by the chunk size, not the problem: a problem whose own inputs and output fit
on the GPU can be verified. The figures are exact over chunks (maxima and counts add up); a control is
rejected when any chunk rejects it, n/a only when it equals the reference in every chunk -- or when, stored in
the output's dtype, it is nowhere more than one step (one ulp) from the correctly rounded reference: a correct
kernel's stored output may be one step off too, so no sound tolerance can reject such a control, and its passing
says nothing of the tolerance (a dropped K tail of one product at 1 x 1 x 449; a dropped chunk of a row whose
mass lies elsewhere). Controls that model a rounding step themselves (CheckChunk.rounding_controls) are judged
even there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.numerics import INPUT_KINDS, CheckChunk


@dataclass(frozen=True, kw_only=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    mismatch_ratio: float
    passed: bool
    rounded_reference_rejected: int = 0  # elements where the bound rejects the reference rounded to the output dtype
    # a kernel of several outputs: each one's own figures, by name (the figures above are over all of them)
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)


# fp32 elements of one verification chunk's largest temporary (64 MiB); a chunk keeps about a dozen
# such temporaries alive (reference, error magnitude, bound, controls, the comparison's difference and
# mask), so the checker's extra memory stays under 1 GiB whatever the problem size.
VERIFY_CHUNK_ELEMENTS = 1 << 24


@dataclass
class _Tally:
    """Comparison figures summed over chunks."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: int = 0
    n: int = 0

    def add(self, out, ref, bound) -> int:
        import torch

        diff = (out.float() - ref).abs()
        bad = int((~(diff <= bound)).sum().item())  # NaN counts as a mismatch
        if diff.numel():
            rel = diff / ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
            self.max_abs = max(self.max_abs, float(diff.nan_to_num(nan=float("inf")).max().item()))
            self.max_rel = max(self.max_rel, float(rel.nan_to_num(nan=float("inf")).max().item()))
        self.mismatches += bad
        self.n += diff.numel()
        return bad

    def result(self) -> Comparison:
        return Comparison(max_abs_err=self.max_abs, max_rel_err=self.max_rel,
                          mismatch_ratio=self.mismatches / max(self.n, 1), passed=self.mismatches == 0)

    @staticmethod
    def combined(tallies: Sequence[_Tally]) -> Comparison:
        """The figures over several outputs' tallies: the largest errors, the mismatches over all elements."""
        total = _Tally(max_abs=max(t.max_abs for t in tallies), max_rel=max(t.max_rel for t in tallies),
                       mismatches=sum(t.mismatches for t in tallies), n=sum(t.n for t in tallies))
        return total.result()


def compare(out, ref, bound) -> Comparison:
    tally = _Tally()
    tally.add(out, ref, bound)
    return tally.result()


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
    outputs: dict[str, dict[str, float]] = field(default_factory=dict)  # several outputs: each one's figures


def judge(out, ref, abs_product, tol, controls: dict[str, object]) -> tuple[str, Comparison, dict[str, str]]:
    """Compare the kernel output with the whole reference; then require every negative control to fail
    the same check (one chunk of judge_chunks)."""
    return judge_chunks(out, [CheckChunk(index=(...,), ref=ref, mag=abs_product, controls=controls)], tol)


def _steps_apart(a, b):
    """Elementwise distance in representable values of their (common) float dtype: 0 equal, 1 neighbours; a NaN
    on one side only counts as far apart."""
    import torch

    bits = torch.finfo(a.dtype).bits
    ints = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]

    def key(x):  # sign-magnitude bits -> one monotonic integer line (-0 and +0 both 0)
        i = x.view(ints).to(torch.int64)
        mag = i & ((1 << (bits - 1)) - 1)
        return torch.where(i < 0, -mag, mag)

    steps = (key(a) - key(b)).abs()
    return torch.where(a.isnan() != b.isnan(), torch.full_like(steps, 1 << 40), steps)


def beyond_one_step(wrong, ref, dtype) -> bool:
    """Whether `wrong`, stored in `dtype`, is somewhere more than one step from `ref` stored in `dtype` (the
    correctly rounded output): only then can a sound tolerance tell it from a correct kernel's output."""
    import torch

    if not dtype.is_floating_point:
        return not torch.equal(wrong.to(dtype), ref.to(dtype))
    return bool((_steps_apart(wrong.to(dtype), ref.to(dtype)) > 1).any())


UNSOUND_TOLERANCE = ("the tolerance rejects the correctly rounded reference at {n} element(s): a defect of the "
                     "tolerance model, not a verdict on the kernel")


def judge_chunks(out, chunks: Iterable[CheckChunk], tol, names: Sequence[str] = ()) -> tuple[str, Comparison, dict[str, str]]:
    """judge, chunk by chunk: the output's figures summed over the chunks; a control is rejected as soon as
    one chunk rejects it (later chunks skip it), n/a if it equals the reference in every chunk or, stored in
    the output's dtype, is nowhere more than one step from the correctly rounded reference (beyond_one_step; a
    chunk's rounding_controls are exempt), and vacuous if it is further than that somewhere yet no chunk
    rejects it. The positive control (the reference rounded once to the output's dtype) must pass in every
    chunk; where it does not, the status is "error" and `rounded_reference_rejected` counts the elements: the
    bound is unsound there, so the kernel's figures say nothing.

    A kernel of several outputs: `out` and `tol` are sequences (one tensor and one tolerance per output, in
    launch order) and each chunk names its output; a control is rejected when any output rejects it, the
    figures are over every output, and `names` (the outputs' names) labels each one's own in `outputs`."""
    import torch

    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    tols = tuple(tol) if isinstance(tol, (tuple, list)) else (tol,)
    tallies = [_Tally() for _ in outs]
    rounded_rejected = 0
    # control -> "identical" | "one step" (differs, within one step of the output's dtype) | "differs" | "rejected"
    state: dict[str, str] = {}
    rank = {"identical": 0, "one step": 1, "differs": 2, "rejected": 3}
    for chunk in chunks:
        o = outs[chunk.output]
        bound = tols[chunk.output].bound(chunk.ref, chunk.mag)
        tallies[chunk.output].add(o[chunk.index], chunk.ref, bound)
        rounded_rejected += _Tally().add(chunk.ref.to(o.dtype), chunk.ref, bound)
        for name, wrong in chunk.controls.items():
            seen = state.setdefault(name, "identical")
            if seen == "rejected" or torch.equal(wrong, chunk.ref):
                continue
            if _Tally().add(wrong, chunk.ref, bound):
                now = "rejected"
            elif name in chunk.rounding_controls or beyond_one_step(wrong, chunk.ref, o.dtype):
                now = "differs"
            else:
                now = "one step"
            state[name] = max(seen, now, key=rank.__getitem__)
        del bound, chunk
    result = _Tally.combined(tallies)
    result = replace(result, rounded_reference_rejected=rounded_rejected)
    if len(outs) > 1:
        labels = list(names) or [str(i) for i in range(len(outs))]
        result = replace(result, outputs={labels[i]: {"max_abs_err": c.max_abs_err, "max_rel_err": c.max_rel_err,
                                                      "mismatch_ratio": c.mismatch_ratio}
                                          for i, c in enumerate(t.result() for t in tallies)})
    outcome: dict[str, str] = {}
    vacuous = False
    for name, seen in state.items():
        if seen == "identical":
            outcome[name] = "n/a (identical to the reference for this shape)"
        elif seen == "one step":
            outcome[name] = "n/a (within one step of the output dtype of the correctly rounded output for this shape)"
        elif seen == "differs":
            outcome[name] = "PASSED (tolerance is vacuous)"
            vacuous = True
        else:
            outcome[name] = "rejected"
    if rounded_rejected:
        status = "error"
    elif not result.passed:
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

    from codegen.run.gpu import compile_kernel, run_label

    inst = rendered.instance
    if seeds is None:
        seeds = SPEC_SHAPE_SEEDS if tuple(shape) in {tuple(s) for s in inst.shapes} else SEEDS
    fam = family(inst).numerics
    kernel = compile_kernel(rendered, shape, run_target)
    tols = fam.tolerance_list(inst, shape, run_target)
    names = [o.name for o in fam.output_list(inst, shape)]
    described = tols[0].describe() if len(tols) == 1 else "; ".join(
        f"{n}: {t.describe()}" for n, t in zip(names, tols, strict=True))
    results = []
    for seed in seeds:
        for kind in INPUT_KINDS:
            t0 = time.perf_counter()
            case = fam.make_inputs(inst, shape, seed=seed, kind=kind, device="cuda", run_target=run_target)
            outs = fam.alloc_outputs(inst, shape, run_target, fill=float("nan"))  # unwritten fails
            fam.launch(kernel, case, *outs)
            torch.cuda.synchronize()
            status, cmp, outcome = judge_chunks(outs, fam.chunks(inst, case, VERIFY_CHUNK_ELEMENTS), tols, names)
            left = fam.after_launch(inst, case)
            if left:  # the output may be right this once, and the next call's wrong
                status = "failed"
            results.append(CaseResult(
                uri=rendered.uri, target=inst.target.value, run_target=run_target.value, shape=tuple(shape), seed=seed,
                inputs=kind, status=status, label=run_label(inst.target, run_target), tolerance=described,
                max_abs_err=cmp.max_abs_err, max_rel_err=cmp.max_rel_err, mismatch_ratio=cmp.mismatch_ratio,
                controls=outcome, seconds=time.perf_counter() - t0, outputs=cmp.outputs,
                error=(UNSOUND_TOLERANCE.format(n=cmp.rounded_reference_rejected) if status == "error" else left),
            ))
            del case, outs
    return results
