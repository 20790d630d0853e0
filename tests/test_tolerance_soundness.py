"""The checker's tolerance must accept the best answer a kernel can store: the fp32 reference rounded once to
the output dtype, in the normal range and below it (subnormals). verify checks it on every case (a positive
control, `rounded_reference_rejected`); these tests check each family's tolerance model on the CPU, and that
the positive control can fail."""

from dataclasses import replace

import pytest
import torch
from numcheck import check_output

from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.gemm.numerics import Tolerance
from codegen.generate.pipeline import Project
from codegen.run.verify import UNSOUND_TOLERANCE, judge
from codegen.targets import torch_dtype

FILES = Project().rendered()


def _one_instance_per_family_and_output():
    """(family, output name, output dtype) -> the first sm_90 instance with such an output (every output of a
    kernel of several: the fused residual add's sum, the per-token fp8 rows' scales)."""
    seen = {}
    for f in FILES:
        inst = f.instance
        if inst.target == Target.SM_90:
            fam = family(inst).numerics
            for i, out in enumerate(fam.output_list(inst, inst.shapes[0])):
                seen.setdefault((family(inst).name, out.name, out.dtype), (inst, i))
    return sorted(seen.items())


CASES = _one_instance_per_family_and_output()


@pytest.mark.parametrize(("key", "case"), CASES, ids=["-".join(key) for key, _ in CASES])
def test_every_tolerance_accepts_the_correctly_rounded_reference(key, case):
    # |ref| from far below the output dtype's smallest subnormal to well inside its normal range, both signs,
    # with no accumulation error at all (mag 0): only the rounding terms of the bound are left to cover it
    inst, i = case
    out_dtype = torch_dtype(key[2], inst.target)
    top = min(1e4, torch.finfo(out_dtype).max / 2)
    mags = torch.logspace(-44, torch.log10(torch.tensor(top)).item(), 20001, dtype=torch.float64).float()
    ref = torch.cat([mags, -mags, torch.zeros(1)])
    shape = inst.shapes[0]
    tol = family(inst).numerics.tolerance_list(inst, shape, inst.target)[i]
    bound = tol.bound(ref, torch.zeros_like(ref))
    err = (ref.to(out_dtype).float() - ref).abs()
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (key, float(ref[worst]), float(err[worst]), float(bound[worst]), tol.describe())


def _persistent_sm90():
    return next(f.instance for f in FILES if f.instance.name == "gemm_fp16_nt_persistent"
                and f.instance.target == Target.SM_90)


# The case verify reported as a failure of the persistent grid on the H200: 8576 x 512 x 64 (its two-round shape),
# wide inputs, seed 0. One C element of the 4.4 million lands in fp16's subnormal range (|C| ~ 1.9e-6), where
# rounding is absolute (up to 2^-25), so a bound relative to |ref| rejected the correctly rounded answer.
PERSISTENT_CASE = {"shape": (8576, 512, 64), "kind": "wide", "seed": 0}


def test_the_correctly_rounded_output_of_the_persistent_two_round_case_verifies():
    status, cmp, controls = check_output(_persistent_sm90(), PERSISTENT_CASE["shape"], lambda case, ref: ref,
                                         kind=PERSISTENT_CASE["kind"], seed=PERSISTENT_CASE["seed"])
    assert status == "verified", (cmp, controls)
    assert cmp.rounded_reference_rejected == 0
    assert controls["last_round_unwritten"] == "rejected"


def test_a_tolerance_without_the_subnormal_term_is_reported_as_unsound_not_as_a_kernel_failure():
    # negative control of the positive control: the bound as it was before eta_out (relative only) must be caught
    inst = _persistent_sm90()
    fam = family(inst).numerics
    shape = PERSISTENT_CASE["shape"]
    case = fam.make_inputs(inst, shape, seed=PERSISTENT_CASE["seed"], kind=PERSISTENT_CASE["kind"], device="cpu",
                           run_target=inst.target)
    ref, mag = fam.reference(inst, case)
    tol = fam.tolerance(inst, shape, inst.target)
    assert isinstance(tol, Tolerance)
    relative_only = replace(tol, eta_out=0.0)
    out = ref.to(torch_dtype(inst.spec_dtypes[-2], inst.target))
    status, cmp, _ = judge(out, ref, mag, relative_only, fam.controls(inst, case, ref))
    assert status == "error"
    assert cmp.rounded_reference_rejected >= 1
    assert "correctly rounded reference" in UNSOUND_TOLERANCE.format(n=cmp.rounded_reference_rejected)


def test_the_accumulation_depth_bound_holds_for_gemv_n_order_and_still_rejects_a_tf32_result():
    """A gemv_n kernel sums each element as 32 lanes' chains of k/32 products, then a 5-level tree: its tolerance
    grows with sqrt of that depth (accumulation_depth), not sqrt(k). The kernel's order emulated in fp32 on the
    CPU passes it at a deep K, and a TF32 result -- vacuous under a sqrt(k) bound there -- is rejected."""
    from codegen.families.gemm.numerics import accumulation_depth, gemm_tolerance, tf32_result

    inst = next(f.instance for f in FILES if f.instance.target == Target.SM_90 and f.instance.op == "gemm"
                and f.instance.structure == "gemv_n"
                and f.instance.spec_dtypes[0] == "fp32")
    m, k, lanes, vec = 256, 8192, inst.block_k // inst.vector, inst.vector
    assert accumulation_depth(inst, k) == k // lanes + (lanes.bit_length() - 1) < k
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, 1, generator=g)
    ref = (a.double() @ b.double()).float()
    chains = torch.zeros(m, lanes)  # lane l takes k0 = step * block_k + l * vec + v
    a3 = a.view(m, -1, lanes, vec)
    b3 = b.view(-1, lanes, vec)
    for step in range(a3.shape[1]):
        for v in range(vec):
            chains = chains + a3[:, step, :, v] * b3[step, :, v]
    while chains.shape[1] > 1:  # the cross-lane tree
        chains = chains[:, 0::2] + chains[:, 1::2]
    out = chains
    tol = gemm_tolerance(inst, Target.SM_90, k)
    mag = a.abs() @ b.abs()
    assert bool((torch.abs(out - ref) <= tol.bound(ref, mag)).all())
    tf32 = tf32_result(a, b)
    assert not bool((torch.abs(tf32 - ref) <= tol.bound(ref, mag)).all())  # the control is rejected
    loose = replace(tol, depth=0)  # the sqrt(k) bound of a sequential K loop: the same control passes it
    assert bool((torch.abs(tf32 - ref) <= loose.bound(ref, mag)).all())
