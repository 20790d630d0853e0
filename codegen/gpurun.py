"""verify and bench over many instances: plan the cases, compile them in parallel, run each in a
contained worker, collect results that are valid JSON even when cases fail."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codegen.bench import BenchRow, bench_case, flush_bytes, measure_copy_gbps
from codegen.gpu import ContainedRunner, GpuInfo, precompile, unsupported_on
from codegen.ops import derived_shapes
from codegen.render import RenderedFile
from codegen.verify import CaseResult, verify_case

DEFAULT_TIMEOUT_S = 300.0


def _progress(console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


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


@dataclass
class VerifyReport:
    gpu: dict
    cases: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["status"] in ("verified", "skipped") for c in self.cases)


def verify_all(files, gpu: GpuInfo, *, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
               console=None) -> VerifyReport:
    work, skipped = plan(files, gpu, derived=True, native_only=False)
    report = VerifyReport(gpu=asdict(gpu))
    for f, reason in skipped:
        report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value, run_target=gpu.run_target.value,
                                              shape=f.instance.shapes[0], seed=-1, inputs="", status="skipped", error=reason)))
    with _progress(console) as progress:
        task = progress.add_task("compile", total=len(work))
        compile_errors = precompile(work, gpu.run_target, workers=jobs or os.cpu_count() or 1,
                                    progress=lambda: progress.advance(task))
        task = progress.add_task("verify", total=len(work))
        with ContainedRunner(timeout_s) as runner:
            for f, shape in work:
                error = compile_errors.get((f.uri, tuple(shape)))
                if error is None:
                    ok, value, _ = runner.call(verify_case, f, shape, gpu.run_target)
                    if ok:
                        report.cases.extend(asdict(r) for r in value)
                    else:
                        error = value
                if error is not None:
                    report.cases.append(asdict(CaseResult(uri=f.uri, target=f.instance.target.value,
                                                          run_target=gpu.run_target.value, shape=tuple(shape), seed=-1,
                                                          inputs="", status="error", error=error)))
                progress.advance(task)
    return report


@dataclass
class BenchReport:
    gpu: dict
    copy_gbps: float
    flush_bytes: int
    rows: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r["status"] in ("ok", "skipped") for r in self.rows)


def _copy_bw(nbytes: int) -> float:
    return measure_copy_gbps(nbytes)


def bench_all(files, gpu: GpuInfo, *, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
              console=None) -> BenchReport:
    work, skipped = plan(files, gpu, derived=False, native_only=True)
    nflush = flush_bytes(gpu.l2_bytes, gpu.vendor)
    rows: list[dict] = []
    for f, reason in skipped:
        i = f.instance
        rows.append(asdict(BenchRow(uri=f.uri, name=i.name, target=i.target.value, shape=i.shapes[0],
                                    dtypes=i.dtype_label(), status="skipped", error=reason)))
    with _progress(console) as progress:
        task = progress.add_task("compile", total=len(work))
        compile_errors = precompile(work, gpu.run_target, workers=jobs or os.cpu_count() or 1,
                                    progress=lambda: progress.advance(task))
        task = progress.add_task("bench", total=len(work))
        with ContainedRunner(timeout_s) as runner:
            ok, copy_gbps, _ = runner.call(_copy_bw, nflush)
            copy_gbps = copy_gbps if ok else 0.0
            for f, shape in work:
                error = compile_errors.get((f.uri, tuple(shape)))
                if error is None:
                    ok, value, _ = runner.call(bench_case, f, shape, gpu.run_target, nflush, copy_gbps)
                    if ok:
                        rows.append(asdict(value))
                    else:
                        error = value
                if error is not None:
                    i = f.instance
                    rows.append(asdict(BenchRow(uri=f.uri, name=i.name, target=i.target.value, shape=tuple(shape),
                                                dtypes=i.dtype_label(), status="error", error=error)))
                progress.advance(task)
    return BenchReport(gpu=asdict(gpu), copy_gbps=copy_gbps, flush_bytes=nflush, rows=rows)
