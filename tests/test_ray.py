"""`tilegen tune --ray`: the expand / build / prune stages through a local Ray cluster on the CPU (started here
with `ray start --head`, as a cluster would be), giving what the local worker pool gives; GPU cases as Ray
tasks, with the GPU work replaced (no GPU here) and the GPU request set to 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray  # the dev extra brings it: a missing Ray fails this test rather than skipping it
from spectext import FILE, REPO_ROOT

from codegen.build import compile as build_mod
from codegen.build.compile import BuildOptions
from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.pipeline import Project
from codegen.run import gpurun
from codegen.run.gpu import GpuInfo
from codegen.spec.load import parse_specs
from codegen.tune.search import tune_static

# one local Ray cluster for the module (the machine's default port): its tests in one xdist worker
pytestmark = pytest.mark.xdist_group("ray")

RAY = Path(sys.executable).with_name("ray")
SPEC = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 256}
  targets: [gfx942]
  search:
    gfx942:
      tiling: {block_k: [32, 64, 1024]}
"""  # block_k 1024: 256 KiB of LDS for 64x64x1024 fp16 tiles (lds_budget), past k (tail_policy); 32 is the hand one


@pytest.fixture(scope="module")
def cluster():
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([str(RAY), "start", "--head", "--num-cpus", "2", "--num-gpus", "0", "--include-dashboard=false",
                    "--disable-usage-stats"], check=True, env=env, capture_output=True, timeout=180)
    tests = str(Path(__file__).resolve().parent)
    ray.init(address="auto", log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([tests, str(REPO_ROOT)])}})
    yield "auto"
    ray.shutdown()
    subprocess.run([str(RAY), "stop", "--force"], check=False, env=env, capture_output=True, timeout=120)


def test_static_stages_through_ray_match_the_local_pool(cluster, tmp_path, monkeypatch):
    (ls,) = parse_specs(SPEC, FILE)
    local = tune_static(ls, Target.GFX942, REPO_ROOT, BuildOptions(cache_dir=tmp_path / "local", jobs=2))

    def no_local_pool(*args, **kwargs):
        raise AssertionError("a local worker pool was started although --ray was given")

    monkeypatch.setattr(build_mod, "WorkerPool", no_local_pool)
    via_ray = tune_static(ls, Target.GFX942, REPO_ROOT, BuildOptions(cache_dir=tmp_path / "ray", ray=cluster))
    doc = via_ray.document()
    assert doc == local.document()
    assert doc["counts"] == {"expanded": 3, "rejected": 1, "same_kernel": 1, "pruned": 0, "survivors": 1}
    assert doc["rejected_by_rule"] == {"lds_budget": 1, "tail_policy": 1}  # 1024 > k = 256 too
    assert all(r["resources"]["spills"] == 0 for r in doc["ranked"])  # built for real: resources read from ISA
    assert len(list((tmp_path / "ray").rglob("*.s"))) == 2  # the hand configuration and block_k 64, built on Ray


def test_gpu_cases_as_ray_tasks_are_contained_and_ordered(cluster, monkeypatch):
    import rayfakes

    monkeypatch.setattr(gpurun, "RAY_GPUS_PER_CASE", 0.0)  # a CPU cluster: the fake cases hold no GPU
    monkeypatch.setattr(gpurun, "verify_case", rayfakes.verify_case)
    monkeypatch.setattr(gpurun, "precompile", rayfakes.no_precompile)
    files = [f for f in Project().rendered(targets=[Target.SM_90]) if f.instance.name == "gemm_fp16_decode"]
    gpu = GpuInfo(name="Fake H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=1 << 20,
                  torch_version="x", runtime_version="CUDA x")
    local = gpurun.verify_all(files, gpu, jobs=1, timeout_s=60)
    remote = gpurun.verify_all(files, gpu, jobs=1, timeout_s=60, ray=cluster)
    assert [(c["uri"], c["shape"], c["status"]) for c in remote.cases] == \
        [(c["uri"], c["shape"], c["status"]) for c in local.cases]
    crashed = [c for c in remote.cases if c["shape"][0] == 1]
    assert crashed and all(c["status"] == "error" for c in crashed)
    assert {c["inputs"] for c in remote.cases if c["status"] == "verified"} - {f"pid {os.getpid()}"}  # not here


def test_ray_missing_is_one_line(monkeypatch):
    import builtins

    from codegen.core import raypool

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(TilegenError, match=r"--ray needs Ray on this machine and every node: pip install 'tilegen\[ray\]'"):
        raypool.connect("auto")


def test_ray_cli_is_on_the_path():
    assert RAY.is_file() or shutil.which("ray"), "the dev extra installs Ray's command (ray start --head)"
