"""Numerical verification against a torch fp32 reference, with negative controls.

Tolerance (per output element, documented in README "Verification"):

    tol_ij = u_out * |ref_ij|  +  scale * (4 * u_acc * sqrt(K) + 2 * u_in) * (|A|.|B|)_ij  +  tiny

u_out: unit roundoff of the output dtype (the final rounding); u_acc: of the accumulator the matrix
cores really use (fp32: 2^-24; Hopper fp8 wgmma keeps ~14 bits: 2^-14); u_in: rounding of inputs
inside the MMA (tf32 for fp32 inputs on NVIDIA: 2^-11; fp16/bf16/fp8 enter exactly: 0); sqrt(K) is
the random-walk growth of K accumulation errors and (|A|.|B|)_ij their scale. The first term is the
exact bound of the final rounding; the second is a model, so only it is scaled: scale defaults to 1
and a spec may tighten or loosen it (verify_tolerance_scale). The check passes only if *no* element
exceeds its tolerance, and only counts as verified if every applicable negative control fails it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from codegen.hardware import DType, Target

UNIT_ROUNDOFF = {DType.FP16: 2.0**-11, DType.BF16: 2.0**-8, DType.FP32: 2.0**-24, DType.FP8_E4M3: 2.0**-4}
HOPPER_FP8_ACCUMULATOR_ROUNDOFF = 2.0**-14
TF32_ROUNDOFF = 2.0**-11
TINY = 1e-30


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
    u_acc = UNIT_ROUNDOFF[acc]
    u_in = 0.0
    if run_target == Target.SM_90 and a == DType.FP8_E4M3:
        u_acc = max(u_acc, HOPPER_FP8_ACCUMULATOR_ROUNDOFF)
    if run_target == Target.SM_90 and a == DType.FP32:
        u_in = TF32_ROUNDOFF
    return Tolerance(u_out=UNIT_ROUNDOFF[out], u_acc=u_acc, u_in=u_in, k=k, scale=scale)


@dataclass(frozen=True, kw_only=True)
class RowTolerance:
    """Row-wise families (softmax, rmsnorm, layernorm): tol_ij = u_out*|ref_ij| + eta_out + scale*u_acc*mag_ij, where
    eta_out is the output dtype's absolute rounding bound in its subnormal range (half the smallest
    subnormal: softmax outputs of long rows reach it) and the family's reference gives mag (its
    modelled fp32 error magnitude per element, see codegen.ops)."""

    u_out: float
    eta_out: float
    u_acc: float
    model: str  # mag's formula, for reports
    scale: float = 1.0

    def describe(self) -> str:
        return f"{self.u_out:.3g}*|ref| + {self.eta_out:.3g} + {self.scale:g}*{self.u_acc:.3g}*({self.model})"

    def bound(self, ref, mag):
        return self.u_out * ref.abs() + self.eta_out + self.scale * self.u_acc * mag + TINY


# half the smallest subnormal of each output dtype: the absolute rounding error below the normal range
SUBNORMAL_ROUNDOFF = {DType.FP16: 2.0**-25, DType.BF16: 2.0**-134, DType.FP32: 2.0**-150}

ROW_MODELS = {
    "softmax": "|ref|*(4*sqrt({n}) + 4*(1 + |x - max|))",
    "rmsnorm": "|ref|*(4*sqrt({n}) + 8)",
    "layernorm": "(|xhat*w| + |b|)*(4*sqrt({n}) + 8) + 4*sqrt({n})*rstd*|w|*mean|x|",
}


def row_tolerance(op: str, spec_dtypes: tuple[str, ...], cols: int, scale: float = 1.0) -> RowTolerance:
    _, out, acc = (DType(d) for d in spec_dtypes)
    return RowTolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_acc=UNIT_ROUNDOFF[acc], model=ROW_MODELS[op].format(n=cols),
                        scale=scale)


@dataclass(frozen=True, kw_only=True)
class AttentionTolerance:
    """Attention: tol_id = u_out*|ref_id| + eta_out + scale*mag_id. The first two terms bound the final
    rounding to the output dtype; mag (codegen.ops._attention_error_mag) is the modelled error of the
    kernel's arithmetic with its unit roundoffs already in: P rounded to the input dtype before P.V
    (2*u_in relative, the dominant term), fp32 sums over seq_kv keys and head_dim products, the exp2
    argument's rounding, and fp16-subnormal P values -- all carried by P.|V|. Only mag is scaled."""

    u_out: float
    eta_out: float
    u_in: float
    u_acc: float
    head_dim: int
    seq_kv: int
    scale: float = 1.0

    def describe(self) -> str:
        return (f"{self.u_out:.3g}*|ref| + {self.eta_out:.3g} + {self.scale:g}*((2*{self.u_in:.3g} + {self.u_acc:.3g}*"
                f"(4*sqrt({self.seq_kv}) + 4*sqrt({self.head_dim})*A + 4*(1 + B)))*P.|V| + eta_in*M.|V|/l)")

    def bound(self, ref, mag):
        return self.u_out * ref.abs() + self.eta_out + self.scale * mag + TINY


def attention_tolerance(spec_dtypes: tuple[str, ...], head_dim: int, seq_kv: int, scale: float = 1.0) -> AttentionTolerance:
    i, out, acc = (DType(d) for d in spec_dtypes)
    return AttentionTolerance(u_out=UNIT_ROUNDOFF[out], eta_out=SUBNORMAL_ROUNDOFF[out], u_in=UNIT_ROUNDOFF[i],
                              u_acc=UNIT_ROUNDOFF[acc], head_dim=head_dim, seq_kv=seq_kv, scale=scale)


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


def judge(out, ref, abs_product, tol: Tolerance, controls: dict[str, object]) -> tuple[str, Comparison, dict[str, str]]:
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
SEEDS = (0, 1)


def verify_case(rendered, shape: tuple[int, ...], run_target: Target, seeds=SEEDS) -> list[CaseResult]:
    """Run one kernel at one shape on every (seed, input kind); executed inside a worker process.
    Generic over the operator family (codegen.ops.OpFamily)."""
    import time

    import torch

    from codegen.gpu import compile_kernel, run_label
    from codegen.ops import INPUT_KINDS, family, torch_dtype

    inst = rendered.instance
    fam = family(inst)
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
