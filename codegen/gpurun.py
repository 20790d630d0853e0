"""verify and bench over many instances: plan the cases, compile them in parallel, run each in a
contained worker, collect results that are valid JSON even when cases fail."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from codegen.bench import BenchRow, bench_case, flush_bytes, measure_copy_gbps
from codegen.events import Event, OnEvent, ignore
from codegen.families import derived_shapes
from codegen.gpu import ContainedRunner, GpuInfo, precompile, unsupported_on
from codegen.render import RenderedFile
from codegen.verify import CaseResult, verify_case
from codegen.workers import end_processes

DEFAULT_TIMEOUT_S = 300.0


def plan(files: list[RenderedFile], gpu: GpuInfo, *, derived: bool, native_only: bool):
    """(runnable (file, shape) pairs, skipped [(file, reason)])."""
    jobs, skipped = [], []
    for f in files:
        if native_only and f.instance.target != gpu.run_target:
            skipped.append((f, f"{f.instance.target} kernel: its speed can only be measured on a {f.instance.target} GPU"))
            continue
        reason = unsupported_on(f, gpu.run_target)
        if reason:
            skipped.append((f, reason))
            continue
        shapes = list(f.instance.shapes) + (derived_shapes(f.instance) if derived else [])
        seen = []
        for s in shapes:
            if s not in seen:
                seen.append(s)
        jobs.extend((f, s) for s in seen)
    return jobs, skipped


def _contained_runs(work, gpu: GpuInfo, *, label: str, fn, jobs: int | None, timeout_s: float, on_event: OnEvent,
                    setup=None, ray: str | None = None):
    """Compile every (file, shape) of `work` in parallel into TileLang's cache, then call
    fn(file, shape, run_target, *extra) for each in a contained worker, where extra = setup(runner)
    (run once, in the worker, before the cases; () without setup). Yields (file, shape, value, error):
    exactly one of value and error is None. Progress: a "compile" stage, then a `label` stage."""
    total = len(work)
    compiled = 0

    def tick() -> None:
        nonlocal compiled
        compiled += 1
        on_event(Event(stage="compile", kind="advance", done=compiled, total=total))

    on_event(Event(stage="compile", kind="start", done=0, total=total, label="compile"))
    compile_errors = precompile(work, gpu.run_target, workers=jobs or os.cpu_count() or 1, progress=tick)
    on_event(Event(stage=label, kind="start", done=0, total=total, label=label))
    envs = [{gpu.visible_devices_env: d} for d in gpu.devices]
    if ray is not None:
        runs = _ray_runs(work, gpu, ray, compile_errors, fn=fn, timeout_s=timeout_s, setup=setup)
    else:
        runs = (_serial_runs if len(envs) == 1 else _parallel_runs)(work, gpu, envs, compile_errors, fn=fn,
                                                                     timeout_s=timeout_s, setup=setup)
    for n, (f, shape, value, error) in enumerate(runs, 1):
        yield f, shape, value, error
        on_event(Event(stage=label, kind="advance", done=n, total=total,
                       label=f"{f.uri} {'x'.join(map(str, shape))}", status="error" if error else None,
                       error=error))


def _one_case(runner: ContainedRunner, f, shape, gpu: GpuInfo, compile_errors: dict, fn, extra: tuple):
    error = compile_errors.get((f.uri, tuple(shape)))
    value = None
    if error is None:
        ok, value, _ = runner.call(fn, f, shape, gpu.run_target, *extra)
        if not ok:
            value, error = None, value
    return f, shape, value, error


def _serial_runs(work, gpu: GpuInfo, envs, compile_errors, *, fn, timeout_s, setup):
    """One GPU: every case in one contained worker, in order."""
    with ContainedRunner(timeout_s, envs[0]) as runner:
        extra = setup(runner) if setup else ()
        for f, shape in work:
            yield _one_case(runner, f, shape, gpu, compile_errors, fn, extra)


RAY_GPUS_PER_CASE = 1.0  # a verify/bench case on a Ray cluster holds one GPU (tests on a CPU cluster set 0)


def _ray_runs(work, gpu: GpuInfo, address: str, compile_errors, *, fn, timeout_s, setup):
    """Every case a Ray task holding one GPU of the cluster (codegen.raypool); results in `work`'s order. The
    kernels were compiled into TileLang's cache above; a node that does not share it compiles again."""
    from codegen.raypool import RayPool, star

    with RayPool(address, num_cpus=1, num_gpus=RAY_GPUS_PER_CASE, timeout_s=timeout_s) as pool:
        extra = setup(pool) if setup else ()
        todo = [(i, f, s) for i, (f, s) in enumerate(work) if (f.uri, tuple(s)) not in compile_errors]
        done = {i: (f, s, None, compile_errors[(f.uri, tuple(s))]) for i, (f, s) in enumerate(work)
                if (f.uri, tuple(s)) in compile_errors}
        args = [(fn, (f, s, gpu.run_target, *extra)) for _, f, s in todo]
        for k, outcome in pool.imap_unordered(star, args):
            i, f, s = todo[k]
            done[i] = (f, s, outcome.value, None) if outcome.ok else (f, s, None, outcome.error)
    for i in range(len(work)):
        yield done[i]


def _parallel_runs(work, gpu: GpuInfo, envs, compile_errors, *, fn, timeout_s, setup):
    """Several GPUs of one model: one contained worker pinned to each (its visible-devices variable), fed
    from one queue by a thread each; results come back in `work`'s order, so reports do not depend on
    which GPU ran which case. A Ctrl-C (in this, the main thread) ends every worker process."""
    pending = iter(enumerate(work))
    done: dict[int, tuple] = {}
    failure: list[BaseException] = []
    cond = threading.Condition()
    runners = [ContainedRunner(timeout_s, env) for env in envs]
    stopping = threading.Event()

    def serve(runner: ContainedRunner) -> None:
        try:
            extra = setup(runner) if setup else ()
            while not stopping.is_set():
                with cond:
                    item = next(pending, None)
                if item is None:
                    return
                n, (f, shape) = item
                result = _one_case(runner, f, shape, gpu, compile_errors, fn, extra)
                with cond:
                    done[n] = result
                    cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            with cond:
                failure.append(exc)
                cond.notify_all()

    threads = [threading.Thread(target=serve, args=(r,), daemon=True, name=f"gpu-{e}") for r, e in zip(runners, envs)]
    try:
        for t in threads:
            t.start()
        for n in range(len(work)):
            with cond:
                while n not in done and not failure:
                    cond.wait(0.5)
                if n not in done:
                    raise failure[0]
                result = done.pop(n)
            yield result
    except BaseException:
        stopping.set()
        end_processes([r.process for r in runners if r.process is not None])
        raise
    finally:
        stopping.set()
        for t in threads:
            t.join()
        for r in runners:
            r.close()


@dataclass
class VerifyReport:
    gpu: dict
    cases: list[dict] = field(default_factory=list)  # codegen.verify.CaseResult, as written to verify.json
    written: list[str] = field(default_factory=list)  # the report files (codegen.report.write_verify)

    @property
    def ok(self) -> bool:
        return all(c["status"] in ("verified", "skipped") for c in self.cases)

    def tally(self) -> list[VerifyTally]:
        """Per kernel: cases by status and the first problem (the terminal's summary of the cases)."""
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        worst: dict[str, str] = {}
        for c in self.cases:
            counts[c["uri"]][c["status"]] += 1
            if c["status"] != "verified" and c["uri"] not in worst:
                worst[c["uri"]] = c["error"] or next((f"{k}: {v}" for k, v in c["controls"].items() if "PASSED" in v), "")
        return [VerifyTally(uri=uri, counts=dict(counts[uri]), note=worst.get(uri, "")) for uri in sorted(counts)]


@dataclass(frozen=True, kw_only=True)
class VerifyTally:
    uri: str
    counts: dict[str, int]  # status -> cases
    note: str  # the first case's error (or passing negative control) that was not "verified"


def verify_all(files, gpu: GpuInfo, *, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
               ray: str | None = None, on_event: OnEvent = ignore) -> VerifyReport:
    work, skipped = plan(files, gpu, derived=True, native_only=False)
    report = VerifyReport(gpu=asdict(gpu))
    for f, reason in skipped:
        report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value, run_target=gpu.run_target.value,
                                              shape=f.instance.shapes[0], seed=-1, inputs="", status="skipped", error=reason)))
    runs = _contained_runs(work, gpu, label="verify", fn=verify_case, jobs=jobs, timeout_s=timeout_s, on_event=on_event,
                           ray=ray)
    for f, shape, value, error in runs:
        if error is None:
            report.cases.extend(asdict(r) for r in value)
        else:
            report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value,
                                                  run_target=gpu.run_target.value, shape=tuple(shape), seed=-1,
                                                  inputs="", status="error", error=error)))
    return report


@dataclass
class BenchReport:
    gpu: dict
    copy_gbps: float
    flush_bytes: int
    rows: list[dict] = field(default_factory=list)  # codegen.bench.BenchRow, as written to bench.json
    written: list[str] = field(default_factory=list)  # the report files (codegen.report.write_bench)
    tuning: list[str] = field(default_factory=list)  # per tuned spec shape: tuned kernel beside the hand one

    @property
    def ok(self) -> bool:
        return all(r["status"] in ("ok", "skipped") for r in self.rows)


def bench_all(files, gpu: GpuInfo, *, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              baselines_for: frozenset[str] | None = None, ray: str | None = None,
              on_event: OnEvent = ignore) -> BenchReport:
    """Time every kernel at its shapes; the torch baselines beside every row, or only beside the rows of the
    kernels in `baselines_for`."""
    work, skipped = plan(files, gpu, derived=False, native_only=True)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    rows: list[dict] = []
    for f, reason in skipped:
        i = f.instance
        rows.append(asdict(BenchRow(uri=f.uri, name=i.name, target=i.target.value, shape=i.shapes[0],
                                    dtypes=i.dtype_label(), status="skipped", error=reason)))
    copy_gbps = 0.0

    def measure_copy(runner) -> tuple:
        nonlocal copy_gbps
        ok, value, _ = runner.call(measure_copy_gbps, nflush)
        copy_gbps = value if ok else 0.0
        return nflush, copy_gbps, baselines_for

    runs = _contained_runs(work, gpu, label="bench", fn=bench_case, jobs=jobs, timeout_s=timeout_s,
                           on_event=on_event, setup=measure_copy, ray=ray)
    for f, shape, value, error in runs:
        if error is None:
            rows.append(asdict(value))
        else:
            i = f.instance
            rows.append(asdict(BenchRow(uri=f.uri, name=i.name, target=i.target.value, shape=tuple(shape),
                                        dtypes=i.dtype_label(), status="error", error=error)))
    return BenchReport(gpu=asdict(gpu), copy_gbps=copy_gbps, flush_bytes=nflush, rows=rows,
                       tuning=tuning_lines(files, rows, gpu.name))


def tuning_lines(files, rows: list[dict], device: str) -> list[str]:
    """For each spec that a lockfile tuned (codegen.render.SpecRef.tuned_on): each of its shapes, the kernel
    that serves it -- the tuned one, timed beside the hand configuration in this run, or the hand one where no
    entry answers for the shape."""
    ms = {(r["uri"], tuple(r["shape"])): r["kernel"]["median_ms"] for r in rows if r["status"] == "ok" and r["kernel"]}
    hand: dict[tuple[str, str, tuple], str] = {}
    tuned: dict[tuple[str, str, tuple], tuple[str, str]] = {}
    for f in files:
        for ref in f.specs:
            for s in ref.shapes:
                key = (f.instance.target.value, ref.name, tuple(s))
                if ref.tuned_on:
                    tuned[key] = (f.uri, ref.tuned_on)
                else:
                    hand[key] = f.uri
    tuned_specs = {(t, n) for t, n, _ in tuned}

    def t(uri: str, shape: tuple) -> str:
        return f"{ms[(uri, shape)]:.4f} ms" if (uri, shape) in ms else "not timed"

    lines = []
    for key in sorted(hand):
        target, name, shape = key
        if (target, name) not in tuned_specs:
            continue
        label = f"{name} {'x'.join(map(str, shape))} ({target})"
        if key not in tuned:
            lines.append(f"{label}: hand configuration {hand[key]} {t(hand[key], shape)} (no lockfile entry)")
            continue
        uri, on = tuned[key]
        where = "" if on == device else f" (tuned on {on}, timed here on {device})"
        ratio = (f", x{ms[(hand[key], shape)] / ms[(uri, shape)]:.3f}" if (uri, shape) in ms and (hand[key], shape) in ms
                 else "")
        lines.append(f"{label}: tuned {uri} {t(uri, shape)} vs hand {hand[key]} {t(hand[key], shape)}{ratio}{where}")
    return lines
