"""`tilegen run`, the main job: validate -> gen -> build -> verify -> bench -> report, on the bundled
specs. It does every step this machine can do and says plainly what it skipped and why.

On a GPU it verifies and benches what that GPU runs: every hand configuration and the kernels its own lockfile
chose (tuned/<target>/<device>.json), each at the shapes those specs ask for. A kernel that only another device's
lockfile chose is that device's main job's (the tuner verified it there before choosing it); the step says how
many were left to it. `tilegen verify --all` / `bench --all` take every kernel."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from codegen.core.columns import Column
from codegen.core.errors import TilegenError
from codegen.core.events import OnEvent, ignore
from codegen.generate.pipeline import Project
from codegen.targets import TARGETS


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    status: str  # ok | failed | skipped
    detail: str
    seconds: float = 0.0  # wall time of the step


STEP_COLUMNS: tuple[Column, ...] = (
    Column(header="step", value=lambda s: s.name),
    Column(header="status", value=lambda s: s.status),
    Column(header="time", value=lambda s: f"{s.seconds:.0f} s" if s.status != "skipped" else ""),
    Column(header="detail", value=lambda s: s.detail),
)


@dataclass(frozen=True, kw_only=True)
class MainJobReport:
    steps: tuple[Step, ...]
    reports: tuple[object, ...] = field(default=())  # the BuildReport, VerifyReport, BenchReport of the steps that ran

    @property
    def ok(self) -> bool:
        return not any(s.status == "failed" for s in self.steps)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


def run_main_job(project: Project, *, jobs: int | None, report_dir: Path, gpus: int | None = None, on_event: OnEvent = ignore,
                 on_report: Callable[[object], None] = lambda report: None) -> MainJobReport:
    """Every step this machine can do. Each step's report is handed to `on_report` as soon as the step
    ends (the console shows it then) and kept in the returned report."""
    from codegen.build.compile import BuildOptions, build
    from codegen.core.toolchain import ToolchainMissing
    from codegen.run.gpu import NoGpu, detect_gpu
    from codegen.run.gpucli import run_bench, run_verify
    from codegen.targets import find_toolchain

    steps: list[Step] = []
    reports: list[object] = []
    clock = [time.perf_counter()]

    def took() -> float:  # seconds since the last step ended
        now = time.perf_counter()
        seconds, clock[0] = now - clock[0], now
        return seconds

    def done(report: object) -> None:
        reports.append(report)
        on_report(report)

    instances = project.instances()
    steps.append(Step(name="validate", status="ok", detail=f"{len({i.name for i in instances})} specs, "
                                                           f"{len(instances)} kernel instances", seconds=took()))
    gen = project.generate()
    steps.append(Step(name="gen", status="ok", detail=f"{len(gen.written)} written, {len(gen.unchanged)} unchanged, "
                                                      f"{len(gen.removed)} removed", seconds=took()))

    ready, missing = [], []
    for target in TARGETS:
        try:
            find_toolchain(target, project.root)
            ready.append(target)
        except ToolchainMissing as exc:
            missing.append(f"{target}: {exc}")
    if ready:
        built = build(project, BuildOptions(all_=True, targets=tuple(ready), jobs=jobs), on_event=on_event)
        done(built)
        detail = f"targets {', '.join(map(str, ready))}" + (f"; skipped {'; '.join(missing)}" if missing else "")
        steps.append(Step(name="build", status="ok" if built.ok else "failed", detail=detail, seconds=took()))
    else:
        steps.append(Step(name="build", status="skipped", detail="; ".join(missing)))

    try:
        gpu = detect_gpu()
    except NoGpu as exc:
        reason = f"no GPU: {exc}"
        steps += [Step(name="verify", status="skipped", detail=reason), Step(name="bench", status="skipped", detail=reason)]
        return MainJobReport(steps=tuple(steps), reports=tuple(reports))
    every = project.rendered()
    files = [g for g in (f.for_device(gpu.name) for f in every) if g is not None]
    others = len(every) - len(files)
    elsewhere = f"; {others} kernel(s) tuned for other devices only, left to their main job" if others else ""
    for name, fn in (("verify", run_verify), ("bench", run_bench)):
        try:
            report = fn(files, out_dir=report_dir, jobs=jobs, timeout_s=300.0, gpus=gpus, on_event=on_event)
        except TilegenError as exc:
            steps.append(Step(name=name, status="failed", detail=str(exc), seconds=took()))
            continue
        done(report)
        steps.append(Step(name=name, status="ok" if report.ok else "failed",
                          detail=f"on {gpu.name}; reports in {report_dir}/{elsewhere}", seconds=took()))
    return MainJobReport(steps=tuple(steps), reports=tuple(reports))
