"""Every generated kernel at every spec shape and derived edge shape: one test id per (instance, shape).

A tuned winner (a kernel only a lockfile asks for) is lowered on the CPU at its first shape only: the tuner
verified it on its GPU at every spec and edge shape, and `tilegen tune --check` fails once its code changes, so
its other shapes would lower the template paths its hand configuration's grid already lowers. On a GPU every
kernel runs at every shape.

Static checks (TileLang lowering for the instance's own target) always run. GPU checks run when a
GPU is present and are skipped with the reason otherwise; a session fixture compiles the whole grid
once, in parallel, before the first GPU test, and kernels run in a contained worker process.
"""

import os

import pytest
from toolchains import AVAILABLE

from codegen.families import derived_shapes
from codegen.generate.pipeline import Project
from codegen.run.gpu import ContainedRunner, NoGpu, detect_gpu, precompile, unsupported_on
from codegen.run.verify import verify_case
from codegen.targets import HARDWARE

FILES = Project().rendered()


def _shapes(inst):
    out = []
    for s in list(inst.shapes) + derived_shapes(inst):
        if s not in out:
            out.append(s)
    return out


GRID = [(f, s) for f in FILES for s in _shapes(f.instance)]
IDS = [f"{f.uri}-{'x'.join(map(str, s))}" for f, s in GRID]
# every hand (kernel, shape) and each tuned kernel's first shape -- less the first shapes of the hand kernels that
# test_build's grid builds on this machine (lowered there, then compiled: tests/toolchains.py)
LOWER_GRID = [(f, s) for f, s in GRID if (f.is_hand or s == _shapes(f.instance)[0])
              and not (f.is_hand and s == f.instance.shapes[0] and f.instance.target in AVAILABLE)]


# in test_lowering's xdist worker: both lower through the run's lower_once, so a (kernel, shape) is lowered once
@pytest.mark.xdist_group("lowering")
@pytest.mark.parametrize(("rendered", "shape"), LOWER_GRID, ids=[f"{f.uri}-{'x'.join(map(str, s))}" for f, s in LOWER_GRID])
def test_lowers_for_its_target(rendered, shape, lower_once):
    kernel = lower_once(rendered, shape, rendered.instance.target)
    mma_on_amd = rendered.instance.uses_matrix_cores() and HARDWARE[rendered.instance.target].vendor == "amd"
    marker = "__builtin_amdgcn_mfma" if mma_on_amd else "__global__"
    assert marker in kernel.source


@pytest.fixture(scope="session")
def gpu():
    try:
        return detect_gpu()
    except NoGpu as exc:
        pytest.skip(f"GPU checks need a GPU: {exc}")


@pytest.fixture(scope="session")
def compiled(gpu):
    """Compile every runnable (kernel, shape) once, in parallel, into TileLang's cache."""
    jobs = [(f, s) for f, s in GRID if unsupported_on(f, gpu.run_target) is None]
    return precompile(jobs, gpu.run_target, workers=os.cpu_count() or 1)


@pytest.fixture(scope="session")
def runner(gpu):
    with ContainedRunner(timeout_s=300) as r:
        yield r


@pytest.mark.parametrize(("rendered", "shape"), GRID, ids=IDS)
def test_matches_torch_on_gpu(rendered, shape, gpu, compiled, runner):
    reason = unsupported_on(rendered, gpu.run_target)
    if reason:
        pytest.skip(reason)
    error = compiled.get((rendered.uri, tuple(shape)))
    assert error is None, f"compile failed: {error}"
    ok, value, log = runner.call(verify_case, rendered, shape, gpu.run_target)
    assert ok, f"{value}\n{log}"
    bad = [(r.inputs, r.seed, r.status, r.max_abs_err, r.controls) for r in value if r.status != "verified"]
    assert not bad, bad
