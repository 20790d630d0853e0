"""`tilegen run`, the main job: validate -> gen -> build -> verify -> bench -> report, on the bundled
specs. It does every step this machine can do and says plainly what it skipped and why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from codegen.errors import TilegenError
from codegen.pipeline import Project
from codegen.targets import TARGETS


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    status: str  # ok | failed | skipped
    detail: str


def run_main_job(project: Project, *, jobs: int | None, report_dir: Path, out: Console, err: Console) -> list[Step]:
    from codegen.build import BuildOptions, build_and_report
    from codegen.gpu import NoGpu, detect_gpu
    from codegen.gpucli import run_bench, run_verify
    from codegen.targets import find_toolchain
    from codegen.toolchain import ToolchainMissing

    steps: list[Step] = []
    instances = project.instances()
    steps.append(Step(name="validate", status="ok", detail=f"{len({i.name for i in instances})} specs, "
                                                           f"{len(instances)} kernel instances"))
    gen = project.generate()
    steps.append(Step(name="gen", status="ok", detail=f"{len(gen.written)} written, {len(gen.unchanged)} unchanged, "
                                                      f"{len(gen.removed)} removed"))

    ready, missing = [], []
    for target in TARGETS:
        try:
            find_toolchain(target, project.root)
            ready.append(target)
        except ToolchainMissing as exc:
            missing.append(f"{target}: {exc}")
    if ready:
        code = build_and_report(project, BuildOptions(all_=True, targets=tuple(ready), jobs=jobs),
                                as_json=False, out=out, err=err)
        detail = f"targets {', '.join(map(str, ready))}" + (f"; skipped {'; '.join(missing)}" if missing else "")
        steps.append(Step(name="build", status="ok" if code == 0 else "failed", detail=detail))
    else:
        steps.append(Step(name="build", status="skipped", detail="; ".join(missing)))

    try:
        gpu = detect_gpu()
    except NoGpu as exc:
        reason = f"no GPU: {exc}"
        steps += [Step(name="verify", status="skipped", detail=reason), Step(name="bench", status="skipped", detail=reason)]
        return steps
    files = project.rendered()
    for name, fn in (("verify", run_verify), ("bench", run_bench)):
        try:
            ok = fn(files, out_dir=report_dir, jobs=jobs, timeout_s=300.0, as_json=False, console=err)
        except TilegenError as exc:
            steps.append(Step(name=name, status="failed", detail=str(exc)))
            continue
        steps.append(Step(name=name, status="ok" if ok else "failed",
                          detail=f"on {gpu.name}; reports in {report_dir}/"))
    return steps


def steps_table(steps: list[Step]) -> Table:
    table = Table(title="tilegen run")
    for col in ("step", "status", "detail"):
        table.add_column(col)
    for s in steps:
        table.add_row(s.name, s.status, s.detail)
    return table
