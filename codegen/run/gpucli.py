"""What the `verify` and `bench` commands do, as library functions the CLI calls: find the GPU, run,
write the reports. They return the report; codegen.cli.console shows it."""

from __future__ import annotations

from pathlib import Path

from codegen.core.errors import TilegenError
from codegen.core.events import OnEvent, ignore
from codegen.run.gpu import NoGpu, detect_gpu
from codegen.run.gpurun import BenchReport, VerifyReport, bench_all, verify_all
from codegen.run.report import device_slug, write_bench, write_verify


def require_gpu(gpus: int | None = None):
    """The GPU present, its cases spread over its first `gpus` devices of the same model (None: all)."""
    try:
        gpu = detect_gpu()
    except NoGpu as exc:
        raise TilegenError(f"no GPU to run kernels on: {exc}. `tilegen lower`/`build` work without one") from None
    try:
        return gpu.using(gpus)
    except ValueError as exc:
        raise TilegenError(str(exc)) from None


def run_verify(files, *, out_dir: Path, jobs: int | None, timeout_s: float, gpus: int | None = None,
               on_event: OnEvent = ignore) -> VerifyReport:
    """Verify on the GPU present; the reports go to out_dir/<device>/ (report.written)."""
    gpu = require_gpu(gpus)
    report = verify_all(files, gpu, jobs=jobs, timeout_s=timeout_s, on_event=on_event)
    report.written = [str(p) for p in write_verify(report, out_dir / device_slug(gpu.name))]
    return report


def run_bench(files, *, out_dir: Path, jobs: int | None, timeout_s: float, gpus: int | None = None,
               on_event: OnEvent = ignore) -> BenchReport:
    """Benchmark on the GPU present; the reports go to out_dir/<device>/ (report.written)."""
    gpu = require_gpu(gpus)
    report = bench_all(files, gpu, jobs=jobs, timeout_s=timeout_s, on_event=on_event)
    report.written = [str(p) for p in write_bench(report, out_dir / device_slug(gpu.name))]
    return report
