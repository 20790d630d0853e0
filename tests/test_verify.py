"""The checker itself, on the CPU: it must fail wrong outputs, flag vacuous tolerances, and contain
crashing or hanging kernels. (The GPU runs of real kernels are in test_kernels.py.)"""

from functools import partial

import pytest
import slowimport
import torch
import workertasks
from numcheck import check_output

from codegen.core.hardware import Target
from codegen.families.gemm.numerics import dropped_k_tile, wrong_operation
from codegen.generate.pipeline import Project
from codegen.run.gpu import ContainedRunner
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
