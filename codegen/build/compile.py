"""`tilegen build`: compile every selected kernel instance, at each of its shapes, for real.

Each target's module (codegen/targets/<target>.py) says how: gfx942 and gfx950 (codegen/targets/amdgcn.py)
compile TileLang's HIP source with clang -S (.s) to a code object (.co) and reads a resource report per kernel symbol from the
assembly; sm_90 compiles TileLang's CUDA source with nvcc -arch=sm_90a (.cubin, .ptx) and reads ptxas -v
and the PTX. Builds run in worker processes (`jobs`); results
land in a content-addressed cache (codegen.build.cache) whose key is computed without lowering or
importing tilelang, so a warm rebuild only hashes and parses files.

A source can hold several kernels (tail: specialized emits an interior kernel and edge kernels).
Each is reported under its symbol; a build's summary is the worst case over its kernels (most
registers, most LDS, fewest waves per SIMD, all spills and MMA instructions added up). The build
rules apply to every kernel: a spill fails the build unless the spec sets allow_spills (VGPR/SGPR
spills on the AMD targets, ptxas spill bytes on sm_90); on the AMD targets, fewer waves per SIMD than the spec's
min_waves_per_simd fails it too (occupancy: codegen.targets.amdgcn.waves_per_simd).

LDS / shared memory = the compiler's static amount + the dynamic amount TileLang launches the
kernel with (its `dyn_shared_memory_buf` attribute, recorded while lowering); should that attribute
ever be missing, the instance's own estimate is used and the report says "tilegen-estimate".
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from codegen.build.cache import BuildCache, cache_key
from codegen.core.columns import Column
from codegen.core.errors import TilegenError
from codegen.core.events import Event, OnEvent, ignore
from codegen.core.files import dump_json, write_text_atomic
from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing, find_tilelang
from codegen.core.workers import WorkerPool, deferred_termination, load_tilelang, tilelang_log_level
from codegen.families.spec import TailPolicy
from codegen.generate.instance import KernelInstance
from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile
from codegen.spec.project import confined
from codegen.targets import TARGETS, find_toolchain
from codegen.targets.base import CompileError, Kernel, ReportParseError, Toolchain, symbol_order

# Bump when what a worker stores in an entry changes (file names, launch.json fields); the compiler
# commands and TileLang's version are in the key already.
RECIPE = 1
REPORT_DIR = Path("reports") / "static"
Shape = tuple[int | str, ...]  # a compile shape: a size the kernel takes symbolically is its name ('m')


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    names: tuple[str, ...] = ()
    all_: bool = False
    targets: tuple[Target, ...] | None = None
    jobs: int | None = None  # worker processes; None = every core this process may use
    first_shape: bool = False
    cache_dir: Path | None = None  # None = <project>/.cache/build
    gfx942_env: Path | None = None  # None = /opt/rocm if installed, else <project>/.toolchain/env.json
    write_report: bool = False  # rewrite reports/static/<target>.json (needs all_, every shape)
    ray: str | None = None  # build as Ray tasks on the cluster at this address ("auto"), not local workers


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ---- what one build produced --------------------------------------------------------------------
# Each kernel symbol is reported as its target reads it (codegen/targets/<target>.py `read_kernels`).

Status = Literal["built", "cached", "failed"]


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    uri: str
    name: str
    target: Target
    shape: Shape
    status: Status
    kernels: tuple[Kernel, ...] = ()
    error: str | None = None
    log: str | None = None  # relative to the project root when inside it
    entry: str | None = None  # the cache entry folder holding the source, .s/.co or .ptx/.cubin
    note: str | None = None  # e.g. why a cache entry was rebuilt
    hint: str | None = None  # with narrow-load warnings: the spec option that gives the wide loads back
    lower_s: float = 0.0
    compile_s: float = 0.0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def summary(self) -> dict[str, object]:
        """The worst case over the build's kernels."""
        if not self.kernels:
            return {}
        return TARGETS[self.target].summarize(self.kernels)

    def to_json(self, *, volatile: bool) -> dict[str, object]:
        """`volatile=False`: only what the sources and compilers determine (for committed reports)."""
        out: dict[str, object] = {
            "uri": self.uri, "name": self.name, "shape": list(self.shape),
            "status": self.status if volatile else ("ok" if self.ok else "failed"),
            "error": self.error, "summary": self.summary(), "kernels": [k.to_json() for k in self.kernels],
        }
        if volatile:
            out |= {"entry": self.entry, "log": self.log, "note": self.note, "hint": self.hint,
                    "seconds": round(self.seconds, 3),
                    "lower_s": round(self.lower_s, 3), "compile_s": round(self.compile_s, 3)}
        return out


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    results: tuple[BuildResult, ...]
    toolchains: dict[Target, dict[str, str]]  # target -> versions (Toolchain.describe + tilelang)
    wall_s: float
    jobs: int
    written: tuple[Path, ...] = ()

    @property
    def failed(self) -> tuple[BuildResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> Counter[str]:
        return Counter(r.status for r in self.results)

    def sorted_results(self) -> list[BuildResult]:
        """The summary table's order: target, name, URI, shape."""
        return sorted(self.results, key=lambda r: (r.target.value, r.name, r.uri, r.shape))

    def documents(self, *, volatile: bool) -> dict[str, dict[str, object]]:
        """`tilegen build --json`: one document per target built."""
        return {t.value: self.document(t, volatile=volatile) for t in sorted(self.toolchains)}

    def document(self, target: Target, *, volatile: bool) -> dict[str, object]:
        rows = sorted((r for r in self.results if r.target == target), key=lambda r: (r.name, r.uri, r.shape))
        return {"target": target.value, "toolchain": self.toolchains[target],
                "builds": [r.to_json(volatile=volatile) for r in rows]}


# ---- planning: cache keys without lowering -------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class BuildJob:
    """One (instance, shape): everything a worker needs; picklable."""

    key: str
    material: dict[str, object]
    rendered: RenderedFile
    shape: Shape
    toolchain: Toolchain
    cache_root: Path

    @property
    def instance(self) -> KernelInstance:
        return self.rendered.instance

    @property
    def cost(self) -> int:  # for scheduling the slowest first
        return (self.instance.tail == TailPolicy.SPECIALIZED) * 2 + TARGETS[self.instance.target].build_cost


def _lower_py_sha256() -> str:
    """The lowering code's own hash (part of every cache key), read without importing it (nor TileLang)."""
    return hashlib.sha256(Path(importlib.util.find_spec("codegen.generate.lower").origin).read_bytes()).hexdigest()


def plan(files: list[RenderedFile], toolchains: dict[Target, Toolchain], cache: BuildCache, *,
         first_shape: bool) -> list[BuildJob]:
    tilelang_version = find_tilelang().version
    lower_sha = _lower_py_sha256()
    jobs = []
    for f in files:
        inst = f.instance
        shapes = inst.compile_shapes()  # a dynamic-M kernel: one build for every M, at ('m', n, k)
        for shape in shapes[:1] if first_shape else shapes:
            material = {
                # the name is the configuration; the code hash is what is compiled (the module without its
                # header, which names the specs that asked for it: a spec moved to another file rebuilds nothing)
                "uri": f.uri, "code_sha256": f.code_sha256,
                "shape": list(shape), "target": inst.target.value, "tilelang": tilelang_version,
                "toolchain": toolchains[inst.target].fingerprint(), "lower_py_sha256": lower_sha, "recipe": RECIPE,
            }
            jobs.append(BuildJob(key=cache_key(material), material=material, rendered=f, shape=tuple(shape),
                                 toolchain=toolchains[inst.target], cache_root=cache.root))
    return jobs


# ---- the worker: lower, compile, publish ---------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class WorkerResult:
    key: str
    error: str | None = None
    log: Path | None = None  # where a failed build's log was kept
    lower_s: float = 0.0
    compile_s: float = 0.0
    built: bool = True  # False: another process published the entry while this one waited


def _worker_init(log_level: int) -> None:
    """Silence the worker (TVM prints warnings on fd 2; each job captures into its own log) and pay
    tilelang's import once, outside any job's timing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    load_tilelang(log_level)


@contextmanager
def _captured(log: Path) -> Iterator[None]:
    """Send this process's stdout/stderr (Python and C++ alike) into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _extent(value) -> int | str:
    """A launch extent: its value, or the text of its expression where it depends on a symbolic size."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def _lower_recording_launches(rendered: RenderedFile, shape: Shape) -> tuple[str, list[dict[str, object]]]:
    """codegen.generate.lower.lower, plus each kernel's launch attributes (threads, grid, dynamic shared
    memory) as TileLang's device codegen sees them, through TileLang's instrumentation hook."""
    from tilelang.instrumentation import PassInstrumentationTool, compile_pass_instrumentation

    from codegen.generate.lower import lower

    launches: dict[str, dict[str, object]] = {}

    class LaunchRecorder(PassInstrumentationTool):
        def run_codegen(self, event, next_call):
            for gvar, func in event.mod.functions.items():
                attrs = func.attrs
                if attrs is None or "thread_extent" not in attrs:
                    continue
                # a symbolic extent (a dynamic-M kernel's row blocks) is kept as TileLang's expression text
                extent = {str(k): _extent(v) for k, v in attrs["thread_extent"].items()}
                symbol = str(attrs["global_symbol"]) if "global_symbol" in attrs else gvar.name_hint
                threads = 1
                for axis in "xyz":
                    threads *= extent.get(f"threadIdx.{axis}", 1)
                launches[symbol] = {
                    "symbol": symbol, "threads": threads,
                    "grid": [extent.get(f"blockIdx.{axis}", 1) for axis in "xyz"],
                    "dynamic_shared_bytes": int(attrs["dyn_shared_memory_buf"]) if "dyn_shared_memory_buf" in attrs else 0,
                }
            return next_call()

    with compile_pass_instrumentation("tilegen-build", tools=[LaunchRecorder()]):
        kernel = lower(rendered, shape, rendered.instance.target)
    return kernel.source, [launches[s] for s in sorted(launches, key=symbol_order)]


def run_job(job: BuildJob) -> WorkerResult:
    """Build one entry under its lock (in a worker process); never raises for a failed build. A
    worker stopped mid-way (codegen.core.workers.Terminated) unwinds: its staging folder is removed, a
    compiler it ran is killed; publishing is not cut in two."""
    cache = BuildCache(job.cache_root)
    with cache.lock(job.key):
        if cache.lookup(job.key).path is not None:
            return WorkerResult(key=job.key, built=False)
        with cache.staging(job.key) as stage:
            log = stage / "build.log"
            lower_s = compile_s = 0.0
            error = None
            with _captured(log):
                try:
                    t0 = time.perf_counter()
                    source, launches = _lower_recording_launches(job.rendered, job.shape)
                    (stage / "launch.json").write_text(json.dumps({"kernels": launches}, indent=1) + "\n", encoding="utf-8")
                    lower_s = time.perf_counter() - t0
                    t1 = time.perf_counter()
                    TARGETS[job.instance.target].compile(job.toolchain, stage, source, log)
                    compile_s = time.perf_counter() - t1
                except (TilegenError, CompileError) as exc:
                    error = str(exc).splitlines()[0]
                    traceback.print_exc()
                except Exception as exc:  # noqa: BLE001 -- a bug in TileLang or here: one build fails, its traceback in the log
                    error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                    traceback.print_exc()
            with deferred_termination():
                if error is not None:
                    kept = cache.log_path(job.key)
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(log, kept)
                    return WorkerResult(key=job.key, error=error, log=kept, lower_s=lower_s, compile_s=compile_s)
                cache.publish(job.key, stage, job.material)
    return WorkerResult(key=job.key, lower_s=lower_s, compile_s=compile_s)


# ---- reading an entry ----------------------------------------------------------------------------

def read_entry(entry: Path, inst: KernelInstance) -> tuple[Kernel, ...]:
    """The kernels of a cache entry, as the instance's target reads its compiler's report."""
    kernels = TARGETS[inst.target].read_kernels(entry, inst)
    return tuple(sorted(kernels, key=lambda k: symbol_order(k.symbol)))


def check_rules(inst: KernelInstance, kernels: tuple[Kernel, ...], shape: tuple | None = None) -> str | None:
    """The first violated build rule (spills, occupancy floor), as one line, or None. `shape`: the build's, for
    the remedies that depend on it."""
    for k in kernels:
        if k.spills and not inst.allow_spills:
            # a predicated GEMM at a ragged K (rows not a whole number of vectors) checks every element of every
            # tile; the specialized tail runs the interior tiles unchecked (seen: the gfx942 seed at 5125 x 6145 x
            # 3069 spills 47 SGPRs predicated, none specialized), and staging padded gives the main loop whole
            # aligned tiles where an operand's rows are not whole 16-byte vectors
            hint = ""
            if inst.op == "gemm" and str(inst.tail) == "predicated":
                hint = "tail: specialized runs the interior tiles unpredicated (fewer registers); or "
                if shape is not None and inst.narrow_load_hint(shape):
                    hint += "staging: padded reads whole aligned tiles (its operands' rows are not whole 16-byte vectors); or "
            return f"{k.symbol}: {k.spill_text()}; {hint}set allow_spills: true in {inst.spec_file} to accept [spills]"
        floor = inst.min_waves_per_simd
        problem = k.occupancy_problem(floor) if floor is not None else None
        if problem is not None:
            return f"{k.symbol}: {problem} of {inst.spec_file} [min_waves_per_simd]"
    return None


# ---- the build ----------------------------------------------------------------------------------

def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _result(job: BuildJob, entry: Path | None, root: Path, *, status: Status, seconds: float,
            worker: WorkerResult | None = None, note: str | None = None) -> BuildResult:
    inst = job.instance
    base = {"uri": job.rendered.uri, "name": inst.name, "target": inst.target, "shape": job.shape, "note": note,
            "lower_s": worker.lower_s if worker else 0.0, "compile_s": worker.compile_s if worker else 0.0}
    if entry is None:
        error = (worker.error if worker else None) or "no cache entry after the build"
        error = error.replace(str(root.resolve()) + "/", "")
        log = _rel(worker.log, root) if worker and worker.log else None
        return BuildResult(**base, status="failed", error=error, log=log, seconds=seconds)
    base |= {"log": _rel(entry / "build.log", root), "entry": _rel(entry, root)}
    t0 = time.perf_counter()
    try:
        kernels = read_entry(entry, inst)
    except (ReportParseError, OSError, ValueError, KeyError) as exc:
        return BuildResult(**base, status="failed", error=f"reading the compiler's report: {exc}",
                           seconds=seconds + time.perf_counter() - t0)
    seconds += time.perf_counter() - t0
    violation = check_rules(inst, kernels, job.shape)
    narrow = any(k.warnings for k in kernels)
    return BuildResult(**base, status="failed" if violation else status, kernels=kernels, error=violation,
                       seconds=seconds, hint=inst.narrow_load_hint(job.shape) if narrow else None)


def build(project: Project, opts: BuildOptions, *, on_event: OnEvent = ignore) -> BuildReport:
    """Build the selected instances; one failure does not stop the others. Raises TilegenError only
    for what stops every build (a bad selection, a missing toolchain)."""
    t_start = time.perf_counter()
    if opts.write_report and opts.first_shape:
        raise TilegenError("--write-report writes the builds of every shape of the instances it names: "
                           "use it without --first-shape")
    files = project.select(list(opts.names), all_=opts.all_, targets=list(opts.targets) if opts.targets else None)
    report = build_files(files, project.root, opts, on_event=on_event)
    written = ()
    if opts.write_report:
        written = write_reports(project.root, report) if opts.all_ else update_reports(project.root, report)
    return replace(report, written=written, wall_s=time.perf_counter() - t_start)


def _toolchain(target: Target, root: Path, opts: BuildOptions, targets: list[Target]):
    """The target's toolchain; where it is missing and the selection has other targets, the error says how to
    build those alone."""
    try:
        return find_toolchain(target, root, gfx942_env=opts.gfx942_env)
    except ToolchainMissing as exc:
        others = [t.value for t in targets if t != target]
        if not others:
            raise
        raise ToolchainMissing(f"{exc}; or build the other targets alone: "
                               f"{' '.join(f'-t {t}' for t in others)}") from None


def build_files(files: list[RenderedFile], root: Path, opts: BuildOptions, *,
                on_event: OnEvent = ignore) -> BuildReport:
    """Build rendered files (the project's, or specs written in memory by a sweep) with the toolchains
    found from `root`; `opts` gives the cache, the jobs, the gfx942 toolchain and first_shape.
    Progress: a "start" event once the plan is known (its label empty when every build is cached),
    then an "advance" event per build as it finishes (status "cached" for a hit)."""
    t_start = time.perf_counter()
    targets = sorted({f.instance.target for f in files})
    toolchains = {t: _toolchain(t, root, opts, targets) for t in targets}
    cache = BuildCache(opts.cache_dir or confined(root, root / ".cache" / "build"))
    cache.open()
    cache.sweep_staging()
    jobs = plan(files, toolchains, cache, first_shape=opts.first_shape)
    results: dict[str, BuildResult] = {}

    def done(job: BuildJob, r: BuildResult) -> None:
        results[job.key] = r
        on_event(Event(stage="build", kind="advance", done=len(results), total=len(jobs),
                       label=f"{r.uri} {'x'.join(map(str, r.shape))} {r.target}", status=r.status,
                       seconds=r.seconds, error=r.error, note=r.note))

    hits, misses = [], []
    for job in jobs:
        t0 = time.perf_counter()
        hit = cache.lookup(job.key)
        if hit.path is not None:
            hits.append((job, hit.path, time.perf_counter() - t0))
        else:
            misses.append((job, f"rebuilt: the cache entry was corrupt ({hit.problem})" if hit.problem else None))
    on_event(Event(stage="build", kind="start", done=0, total=len(jobs),
                   label=f"building {len(misses)} of {len(jobs)} (rest cached)" if misses else ""))
    for job, entry, seconds in hits:
        done(job, _result(job, entry, root, status="cached", seconds=seconds))
    n_jobs = max(1, opts.jobs or default_jobs())
    if misses:
        _run_pool(misses, n_jobs, cache, root, done, ray=opts.ray)
    return BuildReport(results=tuple(results[j.key] for j in jobs), toolchains=_describe(toolchains),
                       wall_s=time.perf_counter() - t_start, jobs=n_jobs)


def _describe(toolchains: dict[Target, Toolchain]) -> dict[Target, dict[str, str]]:
    tilelang = find_tilelang().version
    return {t: {**tc.describe(), "tilelang": tilelang} for t, tc in toolchains.items()}


def _run_pool(misses: list[tuple[BuildJob, str | None]], n_jobs: int, cache: BuildCache, root: Path,
              done: Callable[[BuildJob, BuildResult], None], *, ray: str | None = None) -> None:
    order = sorted(misses, key=lambda m: -m[0].cost)
    if ray is not None:  # one Ray task (one CPU) a build, on the cluster; the cache is the project's, shared
        from codegen.core.raypool import RayPool

        pool_of = RayPool(ray, num_cpus=1, initializer=_worker_init, initargs=(tilelang_log_level(),))
    else:
        pool_of = WorkerPool(min(n_jobs, len(order)), initializer=_worker_init, initargs=(tilelang_log_level(),))
    try:
        with pool_of as pool:
            for i, outcome in pool.imap_unordered(run_job, [job for job, _ in order]):
                job, note = order[i]
                # a worker that died (out of memory, a native crash) fails its build only
                w = outcome.value if outcome.ok else WorkerResult(key=job.key, error=f"worker failed: {outcome.error}")
                seconds = w.lower_s + w.compile_s
                if w.error is not None:
                    done(job, _result(job, None, root, status="failed", seconds=seconds, worker=w, note=note))
                    continue
                hit = cache.lookup(job.key)
                status: Status = "built" if w.built else "cached"
                done(job, _result(job, hit.path, root, status=status, seconds=seconds, worker=w,
                                  note=note if hit.path else f"entry unreadable after the build ({hit.problem})"))
    except BaseException:
        # Ctrl-C: the pool has stopped every worker; one killed before it could clean up left its
        # staging folder, whose lock is free now
        cache.sweep_staging()
        raise


# ---- reports ------------------------------------------------------------------------------------

def write_reports(root: Path, report: BuildReport) -> tuple[Path, ...]:
    """reports/static/<target>.json for each target built, written only when the content changed."""
    written = []
    for target in sorted({r.target for r in report.results}):
        path = confined(root, root / REPORT_DIR / f"{target.value}.json")
        if _write_if_changed(path, report.document(target, volatile=False)):
            written.append(path)
    return tuple(written)


def _write_if_changed(path: Path, doc: dict) -> bool:
    text = dump_json(doc)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def update_reports(root: Path, report: BuildReport) -> tuple[Path, ...]:
    """reports/static/<target>.json with the rows of the instances built replaced or added and every other row kept
    (`tilegen build NAMES --write-report`: a few new instances, such as tuned winners, without building all);
    refused where the committed report was built by another toolchain. Rows of instances no longer rendered are
    dropped only by `--all`."""
    written = []
    for target in sorted({r.target for r in report.results}):
        path = confined(root, root / REPORT_DIR / f"{target.value}.json")
        new = report.document(target, volatile=False)
        if not path.is_file():
            raise TilegenError(f"{path.relative_to(root)} does not exist: write it with `tilegen build --all "
                               "--write-report`")
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("toolchain") != new["toolchain"]:
            raise TilegenError(f"{path.relative_to(root)} was built with {old.get('toolchain')}, these builds with "
                               f"{new['toolchain']}: rewrite it whole with `tilegen build --all --write-report`")
        built = {(b["uri"], tuple(b["shape"])) for b in new["builds"]}
        rows = [b for b in old["builds"] if (b["uri"], tuple(b["shape"])) not in built] + new["builds"]
        rows.sort(key=lambda b: (b["name"], b["uri"], tuple(b["shape"])))  # BuildReport.document's order
        if _write_if_changed(path, new | {"builds": rows}):
            written.append(path)
    return tuple(written)


def _resource_cell(i: int) -> Callable[[BuildResult], str]:
    """The i-th of the worst case's regs, LDS, occupancy, spills, MMA cells, as the target writes them."""
    def cell(r: BuildResult) -> str:
        s = r.summary()
        return TARGETS[r.target].table_cells(s)[i] if s else "-"
    return cell


_STATUS_STYLE = {"built": "green", "cached": "dim", "failed": "bold red"}

# the summary table of `tilegen build` (codegen.cli.console draws it)
BUILD_COLUMNS: tuple[Column, ...] = (
    Column(header="instance", value=lambda r: r.uri),
    Column(header="shape", value=lambda r: "x".join(map(str, r.shape))),
    Column(header="target", value=lambda r: r.target.value),
    Column(header="kernels", value=lambda r: str(len(r.kernels) or "-"), justify="right"),
    *(Column(header=h, value=_resource_cell(i)) for i, h in enumerate(("regs", "LDS", "occupancy", "spills", "MFMA/WGMMA"))),
    Column(header="status", value=lambda r: r.status, style=lambda r: _STATUS_STYLE[r.status]),
    Column(header="s", value=lambda r: r.seconds, fmt=lambda v: f"{v:.2f}", justify="right"),
)
