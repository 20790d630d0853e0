"""`tilegen`: a thin typer CLI. Each command parses options and calls one library function;
domain errors become one line on stderr and exit code 1 (usage errors: 2; Ctrl-C: 130)."""

from __future__ import annotations

import _signal  # `signal` without its enums, whose import takes milliseconds of the start-up window below
import os
import sys
import threading


def _interrupted_while_importing(signum, frame) -> None:
    # os._exit, not sys.exit: a SystemExit raised in the middle of an import can be lost on its way out (a Ctrl-C
    # while Python compiled one of this package's modules: the command printed this line and carried on). Nothing
    # has been started or written yet, so there is nothing to clean up. os.write, not sys.stderr: the handler may
    # run in the middle of a write of sys.stderr's buffer, whose text a CI run saw lost.
    os.write(2, b"interrupted\n")
    os._exit(130)


# A Ctrl-C while this module is still being imported (typer, rich, pydantic: a few hundred ms) exits
# 130 as well, without a traceback; Python's handler is put back at the end of the module.
_SIGINT_HANDLER = (
    _signal.signal(_signal.SIGINT, _interrupted_while_importing)
    if threading.current_thread() is threading.main_thread()
    and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler else None
)

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperGroup

from codegen.core.errors import SpecError, SpecErrors, TilegenError
from codegen.core.files import write_text_atomic
from codegen.core.hardware import Target
from codegen.core.workers import load_tilelang, set_tilelang_log_level, stop_message, stop_on_signals
from codegen.families.spec import MAX_POINTS
from codegen.generate.pipeline import Project
from codegen.generate.starter import starter_spec


class _Commands(TyperGroup):
    """Ctrl-C ends any command with one line and exit code 130 (click would print "Aborted!" and
    exit 1); SIGTERM and SIGHUP the same way, with 143 and 129. Worker processes were stopped on the way
    out (codegen.core.workers). A file-system error no command turned into its own message (an --out that is a
    file, a folder that cannot be written) is one line and exit code 1, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            line, code = stop_message(exc)
            err.print(line, markup=False)
            raise typer.Exit(code) from None
        except OSError as exc:  # a path the command was given or keeps that cannot be read or written: one line
            where = f": {exc.filename}" if exc.filename else ""
            err.print(f"error: {exc.strerror or exc}{where}", markup=False)
            raise typer.Exit(1) from None


# add_completion: typer's own --install-completion / --show-completion (bash, zsh, fish, PowerShell)
app = typer.Typer(cls=_Commands, add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="tilegen: declarative TileLang kernels for gfx942 (MI300X), gfx950 (MI355X) and sm_90 "
                       "(H100/H200).")
new_app = typer.Typer(no_args_is_help=True, help="Write a commented starter spec.")
app.add_typer(new_app, name="new")
toolchain_app = typer.Typer(no_args_is_help=True, help="The device toolchains `tilegen build` uses.")
app.add_typer(toolchain_app, name="toolchain")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

SpecPaths = Annotated[list[Path] | None, typer.Argument(help="Spec files or folders (default: specs/).", show_default=False)]
TargetOpt = Annotated[list[Target] | None, typer.Option("--target", "-t", help="Only this target (repeatable).")]
NamesArg = Annotated[list[str] | None, typer.Argument(help="Spec names or URIs.", show_default=False)]
AllOpt = Annotated[bool, typer.Option("--all", help="Every instance.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


def _fail(exc: TilegenError) -> None:
    for line in str(exc).splitlines():
        # spec errors already start with file:line:col; everything else is marked as an error
        err.print(line if isinstance(exc, (SpecError, SpecErrors)) else f"error: {line}", markup=False)
    raise typer.Exit(1)


def _run(fn):
    try:
        return fn()
    except TilegenError as exc:
        _fail(exc)


_PROJECT_DIR: list[Path | None] = [None]  # set by the --project option of the app callback


def _project() -> Project:
    from codegen.spec.project import resolve_root

    return Project(root=_run(lambda: resolve_root(_PROJECT_DIR[0])))


def _show_version(value: bool) -> None:
    if value:
        from codegen import __version__

        out.print(f"tilegen {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True, help="Print tilegen's version and exit.")] = False,
    project: Annotated[Path | None, typer.Option(
        "--project", "-C", help="The tilegen project to work on (default: the nearest folder above the current "
                                "one holding tilegen.toml, else the current folder).", show_default=False)] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show TileLang's log lines (INFO and up; default: warnings and errors).")] = False,
) -> None:
    """tilegen: declarative TileLang kernels for gfx942 (MI300X), gfx950 (MI355X) and sm_90 (H100/H200)."""
    _PROJECT_DIR[0] = project
    set_tilelang_log_level(logging.INFO if verbose else logging.WARNING)


def _require_selection(names: list[str] | None, all_: bool) -> None:
    """Neither a kernel named nor --all is a usage error: one line, exit 2."""
    if not names and not all_:
        err.print("error: name a kernel (spec name or URI) or pass --all", markup=False)
        raise typer.Exit(2)


@app.command()
def validate(paths: SpecPaths = None) -> None:
    """Validate specs against every target's hardware rules."""
    instances = _run(lambda: _project().instances(paths))
    specs = len({i.name for i in instances})
    out.print(f"ok: {specs} spec(s), {len(instances)} kernel instance(s)")


def _ui():
    """The console module (imported here: rich's progress and tables only load for commands that draw them)."""
    from codegen.cli.console import UI

    return UI(out, err)


@app.command("list")
def list_(
    paths: SpecPaths = None,
    target: TargetOpt = None,
    as_json: JsonOpt = False,
    names: Annotated[bool, typer.Option(
        "--names", help="Only the kernel names (what build, verify and bench take), one a line.")] = False,
) -> None:
    """List kernels: name, op, target, dtypes, layout, tiling, threads, schedule, tail, LDS, shapes."""
    files = _run(lambda: _project().rendered(paths, target))
    _ui().show_list(files, as_json=as_json, names_only=names)


@app.command()
def gen(
    paths: SpecPaths = None,
    target: TargetOpt = None,
    check: Annotated[bool, typer.Option("--check", help="Regenerate in memory; exit 1 naming stale/missing files.")] = False,
) -> None:
    """Generate TileLang modules under generated/<target>/<op>/."""
    project = _project()
    if check:
        result = _run(lambda: project.check(paths, target))
        for kind, items in (("stale", result.stale), ("missing", result.missing), ("not generated by any spec", result.extra),
                            ("temporary file left by an interrupted write", result.leftover)):
            for p in items:
                err.print(f"{p}: {kind}", markup=False)
        if not result.clean:
            err.print("error: generated/ is out of date: run `tilegen gen`", markup=False)
            raise typer.Exit(1)
        out.print("generated/ is up to date")
        return
    result = _run(lambda: project.generate(paths, target))
    for p in result.written:
        out.print(f"wrote {p}", markup=False)
    for p in result.removed:
        out.print(f"removed {p}", markup=False)
    for line in result.tuning:  # which shapes tuned configurations serve: said, not output
        err.print(line, markup=False)
    out.print(f"{len(result.written)} written, {len(result.unchanged)} unchanged, {len(result.removed)} removed")


@app.command()
def lower(
    names: NamesArg = None,
    all_: AllOpt = False,
    target: TargetOpt = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Where device sources are written (default: <project>/build/lowered).", show_default=False)] = None,
    first_shape: Annotated[bool, typer.Option("--first-shape", help="Only the first shape of each spec.")] = False,
) -> None:
    """Lower kernels through TileLang to device source (HIP C++ for gfx942/gfx950, CUDA C++ for sm_90). No GPU needed."""
    _require_selection(names, all_)
    project = _project()
    files = _run(lambda: project.select(names or [], all_=all_, targets=target))
    out_dir = out_dir or _run(lambda: project.path("build/lowered"))
    load_tilelang()  # its logger at the level --verbose chose
    kernels = _run(lambda: project.lower(files, all_shapes=not first_shape))
    for k in kernels:
        dest = out_dir / k.relpath
        write_text_atomic(dest, k.source)
        out.print(f"{dest}", markup=False)
    out.print(f"lowered {len(kernels)} kernel(s)")


@app.command()
def init(
    dest: Annotated[Path, typer.Argument(help="Folder of the new project (created if absent).")] = Path("."),
) -> None:
    """Write a starter project: tilegen.toml, one spec per operator family, a README stub."""
    from codegen.generate.scaffold import init_project

    written = _run(lambda: init_project(dest))
    for p in written:
        out.print(f"wrote {p}", markup=False)
    out.print(f"initialised a tilegen project in {dest}: `tilegen -C {dest} validate` checks it", markup=False)


@toolchain_app.command("fetch")
def toolchain_fetch(
    dest: Annotated[Path | None, typer.Option(
        "--dest", help="Where to unpack it (default: the user cache, shared by every project).",
        show_default=False)] = None,
) -> None:
    """Fetch the offline AMD device toolchain for gfx942 and gfx950.

    Debian's clang/lld via apt (needs root), HIP headers and ROCm device libraries unpacked into DEST,
    described in DEST/env.json."""
    import subprocess

    from codegen.targets.amdgcn import FETCH_SCRIPT, user_toolchain_dir

    target = dest or user_toolchain_dir()
    proc = subprocess.run(["bash", str(FETCH_SCRIPT), str(target)], check=False,
                          env={**os.environ, "PYTHON": sys.executable})
    raise typer.Exit(0 if proc.returncode == 0 else 1)


@new_app.command("gemm")
def new_gemm(
    name: Annotated[str, typer.Argument(help="Kernel name (lower-case identifier).")],
    dest: Annotated[Path | None, typer.Option("--out", help="Spec file to write (default: specs/NAME.yaml).")] = None,
) -> None:
    """Write a commented starter GEMM spec."""
    project = _project()
    path = _run(lambda: starter_spec(name, dest, project))
    out.print(f"wrote {path}", markup=False)


Jobs = Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Parallel compile processes (default: all cores).")]


def _seconds(value: float) -> float:
    """A --timeout: a finite number of seconds > 0 (0, a negative number or nan would kill every case at once or
    none ever)."""
    if not (value > 0 and value != float("inf")):
        raise typer.BadParameter(f"{value}: must be a finite number of seconds > 0")
    return value


Timeout = Annotated[float, typer.Option("--timeout", callback=_seconds,
                                        help="Seconds one kernel case may take before its worker is killed.")]
Gpus = Annotated[int | None, typer.Option(
    "--gpus", min=1, help="Spread the cases over this many GPUs of the model present, one worker each (default: all).",
    show_default=False)]
ReportDir = Annotated[Path | None, typer.Option(
    "--out", help="Reports go to OUT/<device>/ (default: <project>/reports).", show_default=False)]


@app.command()
def verify(names: NamesArg = None, all_: AllOpt = False, target: TargetOpt = None, as_json: JsonOpt = False,
           jobs: Jobs = None, timeout: Timeout = 300.0, gpus: Gpus = None, out_dir: ReportDir = None) -> None:
    """Run kernels on the GPU present and compare with torch (fp32 reference, negative controls)."""
    from codegen.run.gpucli import run_verify

    _require_selection(names, all_)
    project = _project()
    files = _run(lambda: project.select(names or [], all_=all_, targets=target))
    with _ui() as ui:
        report = _run(lambda: run_verify(files, out_dir=out_dir or project.reports_dir, jobs=jobs, timeout_s=timeout, gpus=gpus,
                                         on_event=ui.event))
        raise typer.Exit(ui.show_verify(report, as_json=as_json))


@app.command()
def bench(names: NamesArg = None, all_: AllOpt = False, target: TargetOpt = None, as_json: JsonOpt = False,
          jobs: Jobs = None, timeout: Timeout = 300.0, gpus: Gpus = None, out_dir: ReportDir = None) -> None:
    """Time kernels on the GPU present beside torch eager and torch.compile (same run, L2 flushed)."""
    from codegen.run.gpucli import run_bench

    _require_selection(names, all_)
    project = _project()
    files = _run(lambda: project.select(names or [], all_=all_, targets=target))
    with _ui() as ui:
        report = _run(lambda: run_bench(files, out_dir=out_dir or project.reports_dir, jobs=jobs, timeout_s=timeout, gpus=gpus,
                                        on_event=ui.event))
        raise typer.Exit(ui.show_bench(report, as_json=as_json))


@app.command()
def profile(
    name: Annotated[str, typer.Argument(help="Spec name or kernel URI (one kernel).", show_default=False)],
    shape: Annotated[str | None, typer.Option("--shape", help="Sizes joined by 'x' (default: the spec's first shape).")] = None,
    folder: Annotated[Path | None, typer.Option(
        "--out", help="Write the report files into this folder itself (default: <project>/reports/<device>/profile/).",
        show_default=False)] = None,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Profile the torch baselines too.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", callback=_seconds, help="Seconds one profiler run may take.")] = 900.0,
) -> None:
    """Profile one kernel and its torch baselines on the GPU present (ncu on NVIDIA, rocprofv3 on AMD).

    Reports DRAM bandwidth, L2 hit rate, occupancy, tensor pipe and stalls with a verdict, under
    reports/<gpu>/profile/."""
    from codegen.run.profile import run_profile

    project = _project()
    report, paths = _run(lambda: run_profile(project, name, shape, folder=folder, baselines=baselines, timeout_s=timeout))
    out.print(report.verdict + (f" — knobs: {', '.join(report.knobs)}" if report.knobs else ""), markup=False)
    for p in paths:
        out.print(f"wrote {p}", markup=False)


@app.command()
def sass(
    names: NamesArg = None,
    all_: AllOpt = False,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="The report file (default: <project>/reports/static/sm_90_sass.json).", show_default=False)] = None,
    jobs: Jobs = None,
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", help="Build cache (default: <project>/.cache/build).")] = None,
) -> None:
    """Read the sm_90 SASS of the built cubins (cuobjdump -sass): LDG/STG widths, LDGSTS, TMA, HGMMA, LDL/STL.

    A kernel whose global loads are narrower than its spec meant gets a vector_loads warning."""
    import json

    from codegen.build.sass import run_sass

    _require_selection(names, all_)
    project = _project()
    doc, builds = _run(lambda: run_sass(project, names or [], all_, cache_dir=cache_dir, jobs=jobs))
    path = out_file or _run(lambda: project.path("reports/static/sm_90_sass.json"))
    from codegen.core.files import dump_json

    write_text_atomic(path, dump_json(json.loads(json.dumps(doc))))
    for b in builds:
        for k, warnings in b.kernels:
            loads = ", ".join(f"{n} x {w} B" for w, n in k.global_loads.items()) or "none"
            out.print(f"{k.symbol} {'x'.join(map(str, b.shape))}: LDG {loads}; LDGSTS {sum(k.ldgsts.values())}, "
                      f"UTMALDG {k.tma_loads}, HGMMA {sum(k.hgmma.values())}, LDL/STL {k.local_loads}/{k.local_stores}",
                      markup=False)
            for w in warnings:
                err.print(f"warning: {k.symbol}: {w}", markup=False)
    out.print(f"wrote {path}", markup=False)


@app.command()
def build(
    names: NamesArg = None,
    all_: AllOpt = False,
    target: TargetOpt = None,
    jobs: Jobs = None,
    first_shape: Annotated[bool, typer.Option("--first-shape", help="Only the first shape of each spec.")] = False,
    write_report: Annotated[bool, typer.Option(
        "--write-report", help="Write the builds into the committed reports/static/<target>.json: the whole "
        "report with --all, else the named instances' rows.")] = False,
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", help="Build cache (default: <project>/.cache/build).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compile kernels for real: gfx942/gfx950 .s/.co with a resource report, sm_90 cubins; in parallel, cached."""
    from codegen.build.compile import BuildOptions
    from codegen.build.compile import build as build_kernels

    _require_selection(names, all_)
    opts = BuildOptions(names=tuple(names or ()), all_=all_, targets=tuple(target) if target else None, jobs=jobs,
                        first_shape=first_shape, cache_dir=cache_dir, write_report=write_report)
    project = _project()
    # a Ctrl-C stops every worker: finished entries are cached, none is left half-written
    with _ui() as ui:
        report = _run(lambda: build_kernels(project, opts, on_event=ui.event))
        raise typer.Exit(ui.show_build(report, as_json=as_json, root=project.root))


@app.command()
def tune(
    name: Annotated[str | None, typer.Argument(help="The spec to tune (its `search:` block).", show_default=False)] = None,
    target: TargetOpt = None,
    static: Annotated[bool, typer.Option(
        "--static", help="Only the stages that need no GPU: expand, rules, build and prune, static rank (AMD).")] = False,
    budget: Annotated[str, typer.Option("--budget", help="Time for the measured rounds (20m, 90s, 1h).")] = "20m",
    check: Annotated[bool, typer.Option(
        "--check", help="List stale lockfile entries and untuned searched shapes; exit 1 on a stale entry.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="With --check: exit 1 on an untuned shape too.")] = False,
    all_: Annotated[bool, typer.Option(
        "--all", help="Every spec with a `search:` block not yet fresh in this GPU's lockfile, under one --budget "
        "(resumable: fresh specs are skipped).")] = False,
    jobs: Jobs = None,
    timeout: Timeout = 300.0,
    gpus: Gpus = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", help="Run builds and GPU cases as Ray tasks on the cluster at ADDRESS (or `auto`); needs the ray extra of tilegen.",
        show_default=False)] = None,
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", help="Build cache (default: <project>/.cache/build).")] = None,
    profile_top: Annotated[int, typer.Option(
        "--profile-top", min=0, help="After measured selection, profile the N best candidates (ncu / rocprofv3).")] = 0,
    max_points: Annotated[int, typer.Option(
        "--max-points", min=1, help="Refuse a search space of more points than this, before expanding it "
                                    "(docs/limits.md).")] = MAX_POINTS,
    merge: Annotated[list[Path] | None, typer.Option(
        "--merge", help="Merge this lockfile, measured elsewhere, into the project's of its target and device "
                        "(repeatable; the later file wins a shape both have).", show_default=False)] = None,
) -> None:
    """Search a spec's `search:` space (rules, real builds, static rank or measured selection) into the lockfile."""
    from codegen.build.compile import BuildOptions
    from codegen.cli.tune import run_check, run_merge, run_tune

    project = _project()
    if merge:
        if name or check or all_ or static:
            err.print("error: --merge only merges lockfiles: give no NAME, --check, --all or --static with it",
                      markup=False)
            raise typer.Exit(2)
        _run(lambda: run_merge(project, list(merge), err=err))
        return
    if check:
        if not _run(lambda: run_check(project, target, out=out, err=err, strict=strict)):
            raise typer.Exit(1)
        return
    opts = BuildOptions(jobs=jobs, cache_dir=cache_dir)
    if all_:
        if name or static or ray or profile_top:
            err.print("error: --all tunes every searched spec on the GPU present: give no NAME, --static, --ray or "
                      "--profile-top with it", markup=False)
            raise typer.Exit(2)
        from codegen.cli.tuneall import FAILED, run_tune_all

        rows = _run(lambda: run_tune_all(project, target, budget=budget, opts=opts, timeout_s=timeout, out=out,
                                         err=err, gpus=gpus))
        raise typer.Exit(1 if any(r.status == FAILED for r in rows) else 0)
    if not name:
        err.print("error: name a spec to tune, pass --all, or pass --check", markup=False)
        raise typer.Exit(2)
    _run(lambda: run_tune(project, name, target, static=static, budget=budget, opts=opts, timeout_s=timeout,
                          gpus=gpus, ray=ray, out=out, err=err, profile_top=profile_top, max_points=max_points))


@app.command()
def doctor(target: TargetOpt = None) -> None:
    """What `build` needs for each target: present, missing, and the command to get it."""
    from codegen.build.doctor import doctor as diagnose

    report = _run(lambda: diagnose(_project().root, tuple(target) if target else None))
    raise typer.Exit(_ui().show_doctor(report))


@app.command("run")
def run_(jobs: Jobs = None, gpus: Gpus = None, out_dir: ReportDir = None) -> None:
    """The main job on the bundled specs: validate, gen, build, verify, bench, report (skips what cannot run here)."""
    from codegen.run.mainjob import run_main_job

    project = _project()
    with _ui() as ui:
        report = _run(lambda: run_main_job(project, jobs=jobs, gpus=gpus, report_dir=out_dir or project.reports_dir,
                                           on_event=ui.event, on_report=ui.show))
        raise typer.Exit(ui.show_main_job(report))


def main() -> None:
    stop_on_signals()
    try:
        app()
    except KeyboardInterrupt as exc:  # Ctrl-C while click builds the commands, before _Commands.invoke is reached
        line, code = stop_message(exc)
        err.print(line, markup=False)
        raise SystemExit(code) from None


if _SIGINT_HANDLER is not None:
    _signal.signal(_signal.SIGINT, _SIGINT_HANDLER)
