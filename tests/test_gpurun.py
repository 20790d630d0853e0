"""verify_all / bench_all orchestration on the CPU: fake GPU, fake kernels. Checks that a compile
error, a crash and a normal result each land in the report, and that the report is valid JSON."""

import json
import os
from dataclasses import asdict, replace

import pytest

from codegen.core.hardware import Target
from codegen.generate.pipeline import Project
from codegen.run import gpurun
from codegen.run.bench import BenchRow, Timing
from codegen.run.gpu import GpuInfo
from codegen.run.verify import CaseResult

GPU = GpuInfo(name="Fake H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=1 << 20,
              torch_version="x", runtime_version="CUDA x")
# the two specs' hand kernels (not the tuned winners the lockfile adds beside them)
FILES = [f for f in Project().rendered(targets=[Target.SM_90]) if f.instance.name in ("gemm_fp16_nt", "gemm_fp16_decode")
         and f.is_hand]


def fake_verify(rendered, shape, run_target):
    if shape[0] == 1:
        os._exit(7)  # a kernel that takes its process down
    return [CaseResult(uri=rendered.uri, target=rendered.instance.target.value, run_target=run_target.value,
                       shape=tuple(shape), seed=0, inputs="normal", status="verified")]


def fake_bench(rendered, shape, run_target, nflush, copy_gbps, baselines_for=None):
    t = Timing(median_ms=1.0, p10_ms=0.9, p90_ms=1.1, iters=10)
    return BenchRow(uri=rendered.uri, name=rendered.instance.name, target=rendered.instance.target.value,
                    shape=tuple(shape), dtypes="fp16", status="ok", kernel=t, baselines={"eager": t},
                    speedup={"eager": 1.0, "compile": copy_gbps})


def fake_copy(nbytes):
    return 1234.0


def fake_precompile(work, run_target, *, workers, progress=None, on_result=None, on_pool=None):
    bad = next(((f.uri, tuple(s)) for f, s in work if f.instance.name == "gemm_fp16_nt"), None)
    for i, (f, s) in enumerate(work[::-1]):  # finishing in another order than asked: reports keep work's order
        if progress:
            progress()
        if on_result:
            on_result(len(work) - 1 - i, "CompileError: nvcc said no" if (f.uri, tuple(s)) == bad else "")
    return {bad: "CompileError: nvcc said no"}


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(gpurun, "precompile", fake_precompile)
    monkeypatch.setattr(gpurun, "verify_case", fake_verify)
    monkeypatch.setattr(gpurun, "bench_case", fake_bench)
    monkeypatch.setattr(gpurun, "measure_copy_gbps", fake_copy)


def test_verify_all_reports_compile_errors_crashes_and_results(fakes):
    report = gpurun.verify_all(FILES, GPU, jobs=1, timeout_s=60)
    names = {f.uri: f.instance.name for f in FILES}
    statuses = [(names[c["uri"]], tuple(c["shape"]), c["status"]) for c in report.cases]
    assert ("gemm_fp16_nt", (4096, 4096, 4096), "error") in statuses
    assert any(s[0] == "gemm_fp16_decode" and s[1][0] == 1 and s[2] == "error" for s in statuses)
    assert any(s[0] == "gemm_fp16_decode" and s[1][0] == 16 and s[2] == "verified" for s in statuses)
    crash = next(c for c in report.cases if c["shape"][0] == 1 and names[c["uri"]] == "gemm_fp16_decode")
    assert "worker died (exit code 7)" in crash["error"]
    assert not report.ok
    json.loads(json.dumps(asdict(report)))


def test_bench_all_measures_copy_once_and_skips_other_targets(fakes):
    files = FILES + [f for f in Project().rendered(targets=[Target.GFX942]) if f.instance.name == "gemm_fp16_decode"]
    report = gpurun.bench_all(files, GPU, jobs=1, timeout_s=60)
    assert report.copy_gbps == 1234.0
    by_status = {}
    for r in report.rows:
        by_status.setdefault(r["status"], []).append(r)
    assert all(r["speedup"]["compile"] == 1234.0 for r in by_status["ok"])  # setup's result reached the cases
    assert [r["target"] for r in by_status["skipped"]] == ["gfx942"]
    assert by_status["error"][0]["error"] == "CompileError: nvcc said no"
    json.loads(json.dumps(asdict(report)))


def fake_verify_where(rendered, shape, run_target):
    if shape[0] == 1:
        os._exit(7)  # a crash on one GPU takes only its worker down
    return [CaseResult(uri=rendered.uri, target=rendered.instance.target.value, run_target=run_target.value,
                       shape=tuple(shape), seed=0, inputs=os.environ["CUDA_VISIBLE_DEVICES"], status="verified")]


def test_cases_spread_over_every_gpu_in_a_fixed_order(fakes, monkeypatch):
    monkeypatch.setattr(gpurun, "verify_case", fake_verify_where)
    two = replace(GPU, devices=("3", "5"))  # a parent pinned to GPUs 3 and 5: each worker pinned to one of them
    one = gpurun.verify_all(FILES, replace(GPU, devices=("3",)), jobs=1, timeout_s=60)
    both = gpurun.verify_all(FILES, two, jobs=1, timeout_s=60)
    key = [(c["uri"], c["shape"], c["status"], "died" in c["error"]) for c in both.cases]
    assert key == [(c["uri"], c["shape"], c["status"], "died" in c["error"]) for c in one.cases]  # same order
    assert {c["inputs"] for c in one.cases if c["status"] == "verified"} == {"3"}
    assert {c["inputs"] for c in both.cases if c["status"] == "verified"} == {"3", "5"}
    assert any("worker died (exit code 7)" in c["error"] for c in both.cases)


def test_gpus_option_takes_the_first_devices():
    two = replace(GPU, devices=("0", "1"))
    assert two.using(None) is two and two.using(1).devices == ("0",)
    with pytest.raises(ValueError, match="--gpus 3: this machine has 2 Fake H200"):
        two.using(3)


def fake_verify_marking(rendered, shape, run_target):
    open(os.environ["TILEGEN_TEST_MARKER"], "a").close()  # this case ran
    return fake_verify_where(rendered, shape, run_target)


def test_cases_run_while_the_rest_still_compiles(fakes, monkeypatch, tmp_path):
    """The first compiled item runs before the compile stage ends: a compile stage that waits for a case
    to have run would otherwise never finish (and the test times out)."""
    import time

    marker = tmp_path / "ran"
    monkeypatch.setenv("TILEGEN_TEST_MARKER", str(marker))
    monkeypatch.setattr(gpurun, "verify_case", fake_verify_marking)
    waited = []

    def slow_precompile(work, run_target, *, workers, progress=None, on_result=None, on_pool=None):
        on_result(len(work) - 1, "")
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        waited.append(marker.exists())
        for i in range(len(work) - 1):
            on_result(i, "")
        return {}

    monkeypatch.setattr(gpurun, "precompile", slow_precompile)
    files = [f for f in FILES if f.instance.name == "gemm_fp16_decode"]
    report = gpurun.verify_all(files, replace(GPU, devices=("0",)), jobs=1, timeout_s=60, workers_per_gpu=1)
    assert waited == [True]
    planned = [tuple(s) for _, s in gpurun.plan(files, GPU, derived=True, native_only=False)[0]]
    assert [tuple(c["shape"]) for c in report.cases if c["status"] == "verified"] == \
        [s for s in planned if s[0] != 1]  # in the planned order, though the last item compiled first


def test_workers_share_a_gpu_for_verify(fakes, monkeypatch):
    monkeypatch.setattr(gpurun, "verify_case", fake_verify_where)
    shared = gpurun.verify_all(FILES, replace(GPU, devices=("3", "5")), jobs=1, timeout_s=60, workers_per_gpu=2)
    alone = gpurun.verify_all(FILES, replace(GPU, devices=("3",)), jobs=1, timeout_s=60, workers_per_gpu=1)
    assert [(c["uri"], c["shape"], c["status"]) for c in shared.cases] == \
        [(c["uri"], c["shape"], c["status"]) for c in alone.cases]
    assert {c["inputs"] for c in shared.cases if c["status"] == "verified"} <= {"3", "5"}


def fake_bench_pid(rendered, shape, run_target, nflush, copy_gbps, baselines_for=None):
    row = fake_bench(rendered, shape, run_target, nflush, copy_gbps, baselines_for)
    row.seconds = float(os.getpid())  # which worker process timed it
    return row


def fake_copy_counted(nbytes):
    with open(os.environ["TILEGEN_TEST_COPIES"], "a") as f:
        f.write("copy\n")
    return 1234.0


def counting_precompile(monkeypatch) -> list:
    """precompile replaced by one that compiles everything at once and lists each (uri, shape) it was asked for."""
    compiled = []

    def precompile(work, run_target, *, workers, progress=None, on_result=None, on_pool=None):
        compiled.extend((f.uri, tuple(s)) for f, s in work)
        for i in range(len(work)):
            on_result(i, "")
        return {}

    monkeypatch.setattr(gpurun, "precompile", precompile)
    return compiled


def test_a_bench_session_keeps_one_worker_and_compiles_nothing_twice(fakes, monkeypatch, tmp_path):
    """The tuner's rounds: two bench_all calls in one session run on the same worker process, measure the copy
    bandwidth once and compile each item once (none that the session was told verify compiled); without a
    session each call starts its own worker."""
    copies = tmp_path / "copies"
    monkeypatch.setenv("TILEGEN_TEST_COPIES", str(copies))
    monkeypatch.setattr(gpurun, "bench_case", fake_bench_pid)
    monkeypatch.setattr(gpurun, "measure_copy_gbps", fake_copy_counted)
    compiled = counting_precompile(monkeypatch)
    files = [f for f in FILES if f.instance.name == "gemm_fp16_decode"]
    items = [(f.uri, tuple(s)) for f in files for s in f.instance.shapes]
    assert len(items) >= 2
    one = replace(GPU, devices=("0",))
    with gpurun.GpuSession() as session:
        session.compiled.add(items[0])  # as if an earlier call (a verify) of the session had compiled it
        first = gpurun.bench_all(files, one, jobs=1, timeout_s=60, session=session)
        second = gpurun.bench_all(files, one, jobs=1, timeout_s=60, session=session)
    assert sorted(compiled) == sorted(items[1:])  # each once, the one verify compiled never
    pids = {r["seconds"] for r in first.rows + second.rows}
    assert len(pids) == 1 and os.getpid() not in pids
    assert copies.read_text().count("copy") == 1 and second.copy_gbps == 1234.0
    with pytest.raises(ProcessLookupError):  # closing the session ended its worker
        os.kill(int(pids.pop()), 0)
    # the control: without a session, every call starts (and ends) a worker of its own and compiles again
    compiled.clear()
    a = gpurun.bench_all(files, one, jobs=1, timeout_s=60)
    b = gpurun.bench_all(files, one, jobs=1, timeout_s=60)
    assert {r["seconds"] for r in a.rows}.isdisjoint({r["seconds"] for r in b.rows})
    assert sorted(compiled) == sorted(items + items)


def test_a_worker_loads_each_kernel_once(monkeypatch):
    from codegen.run import bench, gpu

    loads = []
    monkeypatch.setattr(gpu, "compile_kernel", lambda r, s, t: loads.append((r.uri, r.code_sha256, s)) or object())
    monkeypatch.setattr(bench, "_LOADED", {})
    f = next(f for f in FILES if f.instance.name == "gemm_fp16_nt")
    shape = tuple(f.instance.shapes[0])
    k = bench.loaded_kernel(f, shape, Target.SM_90)
    assert bench.loaded_kernel(f, shape, Target.SM_90) is k and len(loads) == 1
    edited = replace(f, code_sha256="0" * 64)  # other code under the same name: loaded again
    assert bench.loaded_kernel(edited, shape, Target.SM_90) is not k and len(loads) == 2
    monkeypatch.setattr(bench, "LOADED_MAX", 2)
    bench.loaded_kernel(f, (1, 2, 3), Target.SM_90)  # a third kernel: the oldest goes
    assert len(bench._LOADED) == 2
    bench.loaded_kernel(f, shape, Target.SM_90)
    assert len(loads) == 4


def fake_verify_pid(rendered, shape, run_target):
    return [CaseResult(uri=rendered.uri, target=rendered.instance.target.value, run_target=run_target.value,
                       shape=tuple(shape), seed=0, inputs=str(os.getpid()), status="verified")]


def fake_release():
    with open(os.environ["TILEGEN_TEST_RELEASES"], "a") as f:
        f.write(f"{os.getpid()}\n")


def test_a_session_s_verify_and_bench_share_workers_and_compiles(fakes, monkeypatch, tmp_path):
    """`tune --all`'s session: verify's first worker on a GPU is bench's, bench compiles nothing verify compiled,
    and after verify every live worker hands its cached GPU memory back. Without a session, bench starts a worker
    of its own."""
    releases = tmp_path / "releases"
    monkeypatch.setenv("TILEGEN_TEST_RELEASES", str(releases))
    monkeypatch.setattr(gpurun, "verify_case", fake_verify_pid)
    monkeypatch.setattr(gpurun, "bench_case", fake_bench_pid)
    monkeypatch.setattr(gpurun, "release_cached_memory", fake_release)
    compiled = counting_precompile(monkeypatch)
    files = [f for f in FILES if f.instance.name == "gemm_fp16_decode"]
    one = replace(GPU, devices=("0",))
    with gpurun.GpuSession() as session:
        v = gpurun.verify_all(files, one, jobs=1, timeout_s=60, workers_per_gpu=2, session=session)
        verified = len(compiled)
        b = gpurun.bench_all(files, one, jobs=1, timeout_s=60, session=session)
    verify_pids = {int(c["inputs"]) for c in v.cases}
    bench_pids = {int(r["seconds"]) for r in b.rows}
    assert len(verify_pids | bench_pids) <= 2 and len(bench_pids) == 1  # two verify workers, the first also bench's
    assert len(compiled) == verified  # bench compiled nothing: verify had compiled every spec shape
    assert {int(p) for p in releases.read_text().split()} == verify_pids  # each live worker released its memory
    # the control: without a session, bench starts (and ends) a worker of its own
    v = gpurun.verify_all(files, one, jobs=1, timeout_s=60, workers_per_gpu=2)
    b = gpurun.bench_all(files, one, jobs=1, timeout_s=60)
    assert {int(r["seconds"]) for r in b.rows}.isdisjoint({int(c["inputs"]) for c in v.cases})


def test_a_row_only_a_lockfile_asked_for_takes_the_baselines_its_hand_kernel_timed_in_the_same_run():
    """bench times torch's baselines once per (spec, shape): beside the hand kernel; a tuned kernel's row at that
    shape takes them (and its speed-ups on them). A kernel that is also some spec's hand kernel, or has a row with
    no hand row of its spec beside it, times its own."""
    from types import SimpleNamespace

    from codegen.generate.render import SpecRef

    def kernel(uri, *refs):
        shapes = tuple(dict.fromkeys(s for r in refs for s in r.shapes))
        return SimpleNamespace(uri=uri, specs=refs, instance=SimpleNamespace(target=Target.SM_90, shapes=shapes))

    a, b = (64, 64, 64), (128, 128, 128)
    hand = kernel("hand", SpecRef(file="f", name="g", shapes=(a, b)))
    tuned = kernel("tuned", SpecRef(file="f", name="g", shapes=(a, b), tuned_on="NVIDIA H200"))
    both = kernel("both", SpecRef(file="f", name="g", shapes=(b,), tuned_on="NVIDIA H200"),
                  SpecRef(file="f", name="h", shapes=(b,)))  # the hand kernel of spec h
    alone = kernel("alone", SpecRef(file="f", name="x", shapes=(a,), tuned_on="NVIDIA H200"))  # x's hand is not here
    timing, borrowed = gpurun.baseline_sources([hand, tuned, both, alone])
    assert timing == {"hand", "both", "alone"}
    assert borrowed == {("tuned", a): "hand", ("tuned", b): "hand"}

    def row(uri, shape, ms, baselines=None, status="ok"):
        r = BenchRow(uri=uri, name="g", target="sm_90", shape=shape, dtypes="fp16", status=status,
                     kernel=Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, iters=10) if status == "ok" else None)
        for name, t in (baselines or {}).items():
            r.baselines[name] = Timing(median_ms=t, p10_ms=t, p90_ms=t, iters=10)
            r.speedup[name] = t / ms
        return asdict(r)

    rows = [row("hand", a, 1.0, {"eager": 0.9, "compile": 1.2}), row("tuned", a, 0.8),
            row("hand", b, 2.0, status="error"), row("tuned", b, 1.5)]
    gpurun.share_baselines(rows, borrowed)
    assert rows[1]["baselines"] == rows[0]["baselines"] and rows[1]["baselines_from"] == "hand"
    assert rows[1]["speedup"] == pytest.approx({"eager": 0.9 / 0.8, "compile": 1.2 / 0.8})
    assert rows[0]["baselines_from"] == ""  # its own
    assert rows[3]["baselines"] == {} and rows[3]["speedup"] == {} and rows[3]["baselines_from"] == ""  # source failed
