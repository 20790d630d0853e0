"""verify and bench over many instances: plan the cases, compile them in parallel, run each in a
contained worker, collect results that are valid JSON even when cases fail."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Self

from codegen.core.events import Event, OnEvent, ignore
from codegen.core.workers import end_processes
from codegen.families import derived_shapes
from codegen.generate.render import RenderedFile
from codegen.run.bench import BenchRow, bench_case, flush_bytes, measure_copy_gbps
from codegen.run.gpu import ContainedRunner, GpuInfo, compile_tasks, precompile, release_cached_memory, unsupported_on
from codegen.run.verify import CaseResult, verify_case

DEFAULT_TIMEOUT_S = 300.0
# verify's workers on each GPU: a case is mostly the checker's small torch launches and Python, so one
# worker leaves the GPU idle most of the time; several share it. Only verify: bench times one case at a time.
VERIFY_WORKERS_PER_GPU = 3


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


class _CompileFeed:
    """Compiles `work` into TileLang's cache in a background thread (codegen.run.gpu.precompile's process pool)
    and hands out each item's index as soon as its compile ended, so the GPU workers run cases while the CPUs
    still compile the rest. `errors` maps (uri, shape) to the compile error of the items that failed."""

    def __init__(self, work, run_target, *, workers: int, done: set[tuple[str, tuple]] | frozenset = frozenset()):
        self.total = len(work)
        self.compiled = 0  # read by the main thread for the progress bar
        self.tasks = 0  # the compiles this feed ran (items of one compile shape share one)
        self.seconds = 0.0  # how long its compile stage took, start to last compile
        self.errors: dict[tuple[str, tuple], str] = {}
        self.ok: set[tuple[str, tuple]] = set()  # the items compiled here without an error
        self._ready: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._pool: list = []  # the compile WorkerPool, once precompile made it (stop() ends its workers)
        todo = []
        for i, (f, s) in enumerate(work):  # `done`: compiled into TileLang's cache earlier in this run
            if (f.uri, tuple(s)) in done:
                self.compiled += 1
                self._ready.put(i)
            else:
                todo.append(i)
        self._thread = threading.Thread(target=self._compile, args=(work, todo, run_target, workers), daemon=True,
                                        name="compile")
        self._thread.start()

    def _compile(self, work, todo: list[int], run_target, workers: int) -> None:
        delivered: set[int] = set()
        t0 = time.monotonic()
        self.tasks = len(compile_tasks([work[i] for i in todo])) if todo else 0

        def one(j: int, error: str) -> None:
            if self._stop.is_set():
                raise _Stopped  # leaves precompile's pool by an exception: its workers are ended
            i = todo[j]
            f, s = work[i]
            if error:
                self.errors[(f.uri, tuple(s))] = error
            else:
                self.ok.add((f.uri, tuple(s)))
            self.compiled += 1
            delivered.add(i)
            self._ready.put(i)

        try:
            precompile([work[i] for i in todo], run_target, workers=workers, on_result=one, on_pool=self._pool.append)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - the items not compiled fail with it; the run goes on
            for i in todo:
                if i not in delivered:
                    f, s = work[i]
                    self.errors[(f.uri, tuple(s))] = f"compile stage failed: {type(exc).__name__}: {exc}"
                    self.compiled += 1
                    self._ready.put(i)
        finally:
            self.seconds = time.monotonic() - t0
            self._ready.put(None)

    def next(self) -> int | None:
        """The index of the next compiled item (blocking), None when every item was handed out."""
        i = self._ready.get()
        if i is None:
            self._ready.put(None)  # for the other workers
        return i

    def wait(self) -> None:
        self._thread.join()

    def stop(self) -> None:
        """Ends the compile stage (at its next finished compile) and wakes every worker waiting for an item."""
        self._stop.set()
        self._ready.put(None)
        for pool in self._pool:  # a compile that never ends must not keep the thread, or its worker, alive
            pool.terminate()
        self._thread.join(timeout=5.0)


class _Stopped(Exception):
    pass


def _contained_runs(work, gpu: GpuInfo, *, label: str, fn, jobs: int | None, timeout_s: float, on_event: OnEvent,
                    setup=None, ray: str | None = None, workers_per_gpu: int = 1, session: GpuSession | None = None):
    """Compile every (file, shape) of `work` in parallel into TileLang's cache and, as each compile ends, call
    fn(file, shape, run_target, *extra) for it in a contained worker, where extra = setup(runner) (run once
    in each worker before its cases; () without setup). One worker per GPU, or `workers_per_gpu` sharing each
    GPU (verify: correctness only; never for timing); with a `session`, its workers (kept running after this
    call) and no compile of what it compiled before. Yields (file, shape, value, error) in `work`'s order:
    exactly one of value and error is None. Progress: a "compile" stage and a `label` stage, side by side."""
    total = len(work)
    on_event(Event(stage="compile", kind="start", done=0, total=total, label="compile"))
    feed = _CompileFeed(work, gpu.run_target, workers=jobs or os.cpu_count() or 1,
                        done=session.compiled if session is not None and ray is None else frozenset())
    shown = 0

    def compile_progress() -> None:  # called from this (the main) thread only: the console is not shared
        nonlocal shown
        if feed.compiled != shown:
            shown = feed.compiled
            on_event(Event(stage="compile", kind="advance", done=shown, total=total))

    try:
        on_event(Event(stage=label, kind="start", done=0, total=total, label=label))
        if ray is not None:
            feed.wait()  # a Ray node may not share this machine's cache: compile everything first
            compile_progress()
            runs = _ray_runs(work, gpu, ray, feed.errors, fn=fn, timeout_s=timeout_s, setup=setup)
        else:
            envs = [{gpu.visible_devices_env: d} for d in gpu.devices for _ in range(max(1, workers_per_gpu))]
            runners = session.runners(envs, timeout_s) if session is not None else None
            runs = _parallel_runs(work, gpu, envs, feed, fn=fn, timeout_s=timeout_s, setup=setup,
                                  tick=compile_progress, runners=runners)
        for n, (f, shape, value, error) in enumerate(runs, 1):
            compile_progress()
            yield f, shape, value, error
            on_event(Event(stage=label, kind="advance", done=n, total=total,
                           label=f"{f.uri} {'x'.join(map(str, shape))}", status="error" if error else None,
                           error=error))
        compile_progress()
    finally:
        feed.stop()
        if session is not None:
            session.compiled |= feed.ok
            session.compile_s += feed.seconds
            session.compiles += feed.tasks


def _one_case(runner: ContainedRunner, f, shape, gpu: GpuInfo, compile_errors: dict, fn, extra: tuple):
    error = compile_errors.get((f.uri, tuple(shape)))
    value = None
    if error is None:
        ok, value, _ = runner.call(fn, f, shape, gpu.run_target, *extra)
        if not ok:
            value, error = None, value
    return f, shape, value, error


RAY_GPUS_PER_CASE = 1.0  # a verify/bench case on a Ray cluster holds one GPU (tests on a CPU cluster set 0)


def _ray_runs(work, gpu: GpuInfo, address: str, compile_errors, *, fn, timeout_s, setup):
    """Every case a Ray task holding one GPU of the cluster (codegen.core.raypool); results in `work`'s order. The
    kernels were compiled into TileLang's cache above; a node that does not share it compiles again."""
    from codegen.core.raypool import RayPool, star

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


def _parallel_runs(work, gpu: GpuInfo, envs, feed: _CompileFeed, *, fn, timeout_s, setup, tick=lambda: None,
                   runners: list[ContainedRunner] | None = None):
    """One contained worker per entry of `envs` (its visible-devices variable: one GPU each, or several
    workers sharing one), each fed by a thread of its own with the items `feed` has compiled; results come back
    in `work`'s order, so reports do not depend on which worker ran which case. A Ctrl-C (in this, the main
    thread) ends every worker process. `tick` is called while waiting (the compile stage's progress).
    `runners`: workers that outlive this call (a GpuSession's), one per entry of `envs`; else new ones,
    closed at the end."""
    done: dict[int, tuple] = {}
    failure: list[BaseException] = []
    cond = threading.Condition()
    owned = runners is None
    runners = [ContainedRunner(timeout_s, env) for env in envs] if owned else runners
    stopping = threading.Event()

    def serve(runner: ContainedRunner) -> None:
        try:
            extra = setup(runner) if setup else ()
            while not stopping.is_set():
                n = feed.next()
                if n is None:
                    return
                f, shape = work[n]
                result = _one_case(runner, f, shape, gpu, feed.errors, fn, extra)
                with cond:
                    done[n] = result
                    cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            with cond:
                failure.append(exc)
                cond.notify_all()

    names = [f"worker-{i}-{next(iter(e.values()))}" for i, e in enumerate(envs)]
    threads = [threading.Thread(target=serve, args=(r,), daemon=True, name=name) for r, name in zip(runners, names)]
    try:
        for t in threads:
            t.start()
        for n in range(len(work)):
            with cond:
                while n not in done and not failure:
                    cond.wait(0.5)
                    tick()
                if n not in done:
                    raise failure[0]
                result = done.pop(n)
            yield result
    except BaseException:
        stopping.set()
        feed.stop()
        end_processes([r.process for r in runners if r.process is not None])
        raise
    finally:
        stopping.set()
        for t in threads:
            t.join()
        if owned:
            for r in runners:
                r.close()


@dataclass
class VerifyReport:
    gpu: dict
    cases: list[dict] = field(default_factory=list)  # codegen.run.verify.CaseResult, as written to verify.json
    written: list[str] = field(default_factory=list)  # the report files (codegen.run.report.write_verify)

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
               ray: str | None = None, workers_per_gpu: int = VERIFY_WORKERS_PER_GPU,
               on_event: OnEvent = ignore, session: GpuSession | None = None) -> VerifyReport:
    """Verify every kernel at its shapes and the family's edge shapes, negative controls included. `session`:
    workers and compiles shared with other calls (their cached GPU memory released at the end)."""
    work, skipped = plan(files, gpu, derived=True, native_only=False)
    report = VerifyReport(gpu=asdict(gpu))
    for f, reason in skipped:
        report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value, run_target=gpu.run_target.value,
                                              shape=f.instance.shapes[0], seed=-1, inputs="", status="skipped", error=reason)))
    runs = _contained_runs(work, gpu, label="verify", fn=verify_case, jobs=jobs, timeout_s=timeout_s, on_event=on_event,
                           ray=ray, workers_per_gpu=workers_per_gpu, session=session)
    for f, shape, value, error in runs:
        if error is None:
            report.cases.extend(asdict(r) for r in value)
        else:
            report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value,
                                                  run_target=gpu.run_target.value, shape=tuple(shape), seed=-1,
                                                  inputs="", status="error", error=error)))
    if session is not None:
        session.release()
    return report


class GpuSession:
    """What the verify_all and bench_all calls of one run share (a tune's verification and bench rounds; every
    spec of `tune --all`): the contained workers, started once per (GPU, slot) -- verify's first worker on a GPU
    is bench's -- which keep torch, TileLang and the kernels they loaded (codegen.run.bench.loaded_kernel) from one
    call to the next; the copy bandwidth, measured once per worker; and the (uri, shape) items compiled into
    TileLang's cache, which are not compiled again. A call after the first starts no process and imports
    nothing. Closing it ends the workers. Ray runs start their own tasks."""

    def __init__(self):
        self.compiled: set[tuple[str, tuple]] = set()  # (uri, shape) compiled by this session's calls
        self.compile_s = 0.0  # the compile stages' seconds over this session's calls (they run beside the cases)
        self.compiles = 0  # ... and their compiles
        self.copy_gbps: dict[int, float] = {}  # id(runner) -> its measurement
        self._runners: dict[tuple, ContainedRunner] = {}

    def runners(self, envs: list[dict[str, str]], timeout_s: float) -> list[ContainedRunner]:
        """A worker for each entry of `envs` (its GPU): the k-th entry of one GPU is that GPU's k-th worker."""
        out, seen = [], defaultdict(int)
        for env in envs:
            gpu = tuple(sorted(env.items()))
            key = (gpu, seen[gpu])
            seen[gpu] += 1
            if key not in self._runners:
                self._runners[key] = ContainedRunner(timeout_s, env)
            out.append(self._runners[key])
        return out

    def release(self) -> None:
        """Each live worker hands its cached GPU memory back (torch's allocator), so workers waiting for the next
        call do not hold what their last cases allocated."""
        for r in self._runners.values():
            if r.process is not None and r.process.is_alive():
                r.call(release_cached_memory)

    def close(self) -> None:
        for r in self._runners.values():
            r.close()
        self._runners.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class BenchReport:
    gpu: dict
    copy_gbps: float
    flush_bytes: int
    rows: list[dict] = field(default_factory=list)  # codegen.run.bench.BenchRow, as written to bench.json
    written: list[str] = field(default_factory=list)  # the report files (codegen.run.report.write_bench)
    tuning: list[str] = field(default_factory=list)  # per tuned spec shape: tuned kernel beside the hand one

    @property
    def ok(self) -> bool:
        return all(r["status"] in ("ok", "skipped") for r in self.rows)


def baseline_sources(files) -> tuple[frozenset[str], dict[tuple[str, tuple], str]]:
    """Which kernels time torch's baselines, and which rows take them from another kernel's row of the same run:
    a row (kernel, shape) that only lockfiles asked for takes the baselines of its spec's hand kernel at that shape
    (the same computation on the same inputs: timing it again would only cost time). A kernel with a row that has
    no such hand row times its own. Returns (the kernels that time baselines, {(uri, shape): the hand kernel's uri})."""
    hand: dict[tuple, str] = {}
    for f in files:
        for r in f.specs:
            if not r.tuned_on:
                for s in r.shapes:
                    hand.setdefault((f.instance.target, r.name, tuple(s)), f.uri)
    timing, borrowed = set(), {}
    for f in files:
        mine = {}
        for s in map(tuple, f.instance.shapes):
            asking = [r for r in f.specs if s in map(tuple, r.shapes)]
            if not asking or any(not r.tuned_on for r in asking):
                timing.add(f.uri)
                break
            source = next((hand[k] for r in asking if (k := (f.instance.target, r.name, s)) in hand), None)
            if source is None:
                timing.add(f.uri)
                break
            mine[(f.uri, s)] = source
        else:
            borrowed |= mine
    return frozenset(timing), borrowed


def share_baselines(rows: list[dict], borrowed: dict[tuple[str, tuple], str]) -> None:
    """Give each borrowing row (baseline_sources) the baselines of its hand kernel's row at its shape, and its
    speed-ups on them; a row whose source row has none (an error) keeps none."""
    by_key = {(r["uri"], tuple(r["shape"])): r for r in rows}
    for r in rows:
        key = (r["uri"], tuple(r["shape"]))
        if key not in borrowed or r["status"] != "ok" or not r["kernel"]:
            continue
        src = by_key.get((borrowed[key], key[1]))
        if src is None or src["status"] != "ok" or not src["baselines"]:
            continue
        r["baselines"], r["baseline_errors"] = dict(src["baselines"]), dict(src["baseline_errors"])
        r["speedup"] = {b: t["median_ms"] / r["kernel"]["median_ms"] for b, t in r["baselines"].items()}
        r["baselines_from"] = borrowed[key]


def bench_all(files, gpu: GpuInfo, *, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              baselines_for: frozenset[str] | None = None, ray: str | None = None,
              on_event: OnEvent = ignore, session: GpuSession | None = None) -> BenchReport:
    """Time every kernel at its shapes; the torch baselines beside every row (a row only lockfiles asked for takes
    its spec's hand row's: baseline_sources), or only beside the rows of the kernels in `baselines_for`.
    `session`: workers, copy bandwidth and compiles shared with other calls."""
    borrowed: dict[tuple[str, tuple], str] = {}
    if baselines_for is None:
        baselines_for, borrowed = baseline_sources(files)
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
        if session is not None and id(runner) in session.copy_gbps:
            copy_gbps = session.copy_gbps[id(runner)]
        else:
            ok, value, _ = runner.call(measure_copy_gbps, nflush)
            copy_gbps = value if ok else 0.0
            if session is not None and ok:
                session.copy_gbps[id(runner)] = copy_gbps
        return nflush, copy_gbps, baselines_for

    runs = _contained_runs(work, gpu, label="bench", fn=bench_case, jobs=jobs, timeout_s=timeout_s,
                           on_event=on_event, setup=measure_copy, ray=ray, session=session)
    for f, shape, value, error in runs:
        if error is None:
            rows.append(asdict(value))
        else:
            i = f.instance
            rows.append(asdict(BenchRow(uri=f.uri, name=i.name, target=i.target.value, shape=tuple(shape),
                                        dtypes=i.dtype_label(), status="error", error=error)))
    share_baselines(rows, borrowed)
    return BenchReport(gpu=asdict(gpu), copy_gbps=copy_gbps, flush_bytes=nflush, rows=rows,
                       tuning=tuning_lines(files, rows, gpu.name))


def tuning_lines(files, rows: list[dict], device: str) -> list[str]:
    """For each spec that a lockfile tuned (codegen.generate.render.SpecRef.tuned_on): each of its shapes, the kernel
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
