"""The checker itself, on the CPU: it must fail wrong outputs, flag vacuous tolerances, and contain
crashing or hanging kernels. (The GPU runs of real kernels are in test_kernels.py.)"""

from dataclasses import dataclass
from functools import partial

import pytest
import slowimport
import torch
import workertasks
from numcheck import check_output

from codegen.core.hardware import Target
from codegen.families.gemm.numerics import dropped_k_tile, wrong_operation
from codegen.families.numerics import CheckChunk
from codegen.generate.instance import build_instances
from codegen.generate.pipeline import Project
from codegen.run.gpu import ContainedRunner
from codegen.run.verify import judge_chunks
from codegen.spec.load import parse_specs
from codegen.targets import torch_dtype

_check = partial(check_output, scale=1.0)  # the GEMM checker at the model's own tolerance
FILES = {f.uri: f for f in Project().rendered()}


def _instance(name, target=Target.SM_90):
    return next(f.instance for f in FILES.values() if f.instance.name == name and f.instance.target == target)


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("name", ["gemm_fp16_nt", "gemm_bf16_nn", "gemm_fp8_nt"])
def test_correct_output_verifies_and_every_control_is_rejected(name, kind):
    status, cmp, controls = _check(_instance(name), (256, 384, 512), lambda case, ref: ref, kind=kind)
    assert status == "verified", (cmp, controls)
    assert set(controls.values()) == {"rejected"}


@pytest.mark.parametrize("bug", ["one_element", "last_k_tile", "transposed_b", "unwritten_nan", "zeros"])
def test_buggy_outputs_fail(bug):
    inst = _instance("gemm_fp16_ragged_pred")

    def buggy(case, ref):
        out = ref.clone()
        if bug == "one_element":
            out[3, 5] += 0.05 * ref.abs().max()
        elif bug == "last_k_tile":
            out = dropped_k_tile(case, ref, inst.block_m, inst.block_k)
        elif bug == "transposed_b":
            out = wrong_operation(case)
        elif bug == "unwritten_nan":
            out[-1, -1] = float("nan")
        elif bug == "zeros":
            out = torch.zeros_like(ref)
        return out

    status, cmp, _ = _check(inst, (129, 127, 33), buggy)
    assert status == "failed"
    assert cmp.mismatch_ratio > 0


def test_a_loose_tolerance_is_reported_vacuous_not_verified():
    # scale 1e6 makes the bound so wide that dropping a K tile passes: the run must not count as verified
    status, _, controls = _check(_instance("gemm_fp16_nt"), (128, 256, 512), lambda case, ref: ref, scale=1e6)
    assert status == "vacuous"
    assert any("PASSED" in v for v in controls.values())


def test_controls_identical_to_the_reference_are_not_applicable():
    status, _, controls = _check(_instance("gemm_fp16_ragged_pred"), (1, 1, 1), lambda case, ref: ref)
    assert status == "verified"
    assert controls["wrong_operation"].startswith("n/a")


SPLIT_K_8 = """\
- name: gemm_bf16_nn_sk8
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16, accumulate: fp32}
  layout: nn
  shapes: [{m: 384, n: 1024, k: 196625}]
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  pipeline: {stages: 4}
  split_k: 8
  tail: predicated
  targets: [sm_90]
"""


def test_a_control_no_sound_tolerance_can_reject_is_not_applicable_not_vacuous():
    """At the derived edge shape 1 x 1 x 449 of a split-K GEMM (seen on an H100) the last K tile holds one product,
    which with seed 0 moves the bf16 output by less than one step: no tolerance that accepts a correct kernel (whose
    output may be a step off) can reject it. verify said `vacuous` for a correct kernel; it is n/a there, and at
    seed 1, where it moves the output further, it is judged -- and rejected."""
    (inst,) = build_instances(parse_specs(SPLIT_K_8, "specs/split_k_8.yaml"))
    status, _, controls = _check(inst, (1, 1, 449), lambda case, ref: ref, seed=0)
    assert status == "verified" and controls["dropped_k_tile"].startswith("n/a (within one step"), controls
    status, _, controls = _check(inst, (1, 1, 449), lambda case, ref: ref, seed=1)
    assert status == "verified" and controls["dropped_k_tile"] == "rejected", controls


@dataclass(frozen=True)
class _Flat:
    """A tolerance of one absolute bound everywhere."""

    width: float

    def bound(self, ref, mag):
        return torch.full_like(ref, self.width)


def test_one_step_controls_are_n_a_two_steps_vacuous_and_rounding_controls_judged():
    ref = torch.linspace(1.0, 1.9, 64)
    out = ref.to(torch.bfloat16)
    step = 2.0**-7  # bf16's spacing in [1, 2)
    stored = out.float()
    controls = {"one_step": stored + step, "two_steps": stored + 2 * step}

    def judged(rounding=frozenset()):
        chunk = CheckChunk(index=(...,), ref=ref, mag=torch.zeros_like(ref), controls=controls, rounding_controls=rounding)
        return judge_chunks(out, [chunk], _Flat(8 * step))  # 8 steps: accepts both, a tolerance too loose

    status, _, outcome = judged()
    assert status == "vacuous"
    assert outcome["one_step"].startswith("n/a (within one step") and "vacuous" in outcome["two_steps"]
    status, _, outcome = judged(frozenset({"one_step"}))
    assert "vacuous" in outcome["one_step"]
    # a tolerance tight enough rejects both: the rule only decides what a control that passes means
    chunk = CheckChunk(index=(...,), ref=ref, mag=torch.zeros_like(ref), controls=controls)
    status, _, outcome = judge_chunks(out, [chunk], _Flat(0.75 * step))
    assert status == "verified" and set(outcome.values()) == {"rejected"}


def test_fp8_uses_fnuz_on_gfx942_and_fn_on_sm90():
    assert torch_dtype("fp8_e4m3", Target.GFX942) == torch.float8_e4m3fnuz
    assert torch_dtype("fp8_e4m3", Target.SM_90) == torch.float8_e4m3fn


# ---------------------------------------------------------------- containment
def test_runner_contains_crash_hang_and_context_errors():
    with ContainedRunner(timeout_s=5) as runner:
        assert runner.call(workertasks.double, 21)[:2] == (True, 42)
        ok, msg, _ = runner.call(workertasks.crash)
        assert not ok and "worker died (exit code 3)" in msg
        assert runner.call(workertasks.double, 1)[:2] == (True, 2)  # a fresh worker took over
        ok, msg, _ = runner.call(workertasks.hang)
        assert not ok and "timed out after 5 s" in msg
        ok, msg, _ = runner.call(workertasks.cuda_like_error)
        assert not ok and "illegal memory access" in msg
        assert runner.call(workertasks.double, 5)[:2] == (True, 10)


def test_a_calls_time_limit_starts_once_the_worker_has_imported_it():
    """A worker imports the module of the function it is sent (torch, tilelang: seconds on a busy machine)
    before it runs it; the call's time limit is for the run."""
    assert slowimport.IMPORT_S > 1
    with ContainedRunner(timeout_s=1) as runner:
        assert runner.call(slowimport.double, 4)[:2] == (True, 8)
