"""What `tilegen tune` shows: the stages with their progress, the counts by rule and reason, the ranked or
measured survivors, the reports and the lockfile written; and `tune --check`."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from codegen.build.compile import BuildOptions
from codegen.cli.console import UI, full_width, rich_table
from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.instance import build_instances
from codegen.generate.lockfile import (
    LockFile,
    check_lockfiles,
    check_present,
    gpu_versions,
    local_versions,
    lock_path,
    read_lockfile,
    write_lockfile,
)
from codegen.generate.pipeline import Project
from codegen.spec.load import LoadedSpec, load_spec_files
from codegen.tune.search import MAX_POINTS, TuneResult, check_space, survivor_columns, tune_static, write_report


def _loaded(project: Project) -> list[LoadedSpec]:
    loaded = load_spec_files(project.spec_paths(None), project.root)
    build_instances(loaded)  # every rule on the hand configurations: a tuned spec set is a valid one
    return loaded


def run_tune(project: Project, name: str, targets: list[Target] | None, *, static: bool, budget: str,
             opts: BuildOptions, timeout_s: float, out: Console, err: Console,
             gpus: int | None = None, ray: str | None = None, profile_top: int = 0,
             max_points: int = MAX_POINTS, session=None, deadline: float | None = None) -> list[TuneResult]:
    """`tilegen tune NAME`: for each target of the spec with a `search:` block (or those asked for), the
    static stages, then measured selection on the GPU present unless `static`; writes
    reports/tune/<spec>_<target>.{json,md} (<spec>_<target>_static when static) and, when measured,
    tuned/<target>/<device>.json. Before anything runs: every search space is within `max_points`
    (codegen.tune.search.check_space) and the lockfile to be merged into, if any, is a valid one of this GPU.
    `session` (codegen.run.gpurun.GpuSession): GPU workers shared with the run's other tunes (`tune --all`);
    `deadline` (time.monotonic): where the budget ends, builds included (`tune --all`); else the budget is the
    measured stage's own."""
    if profile_top and static:
        raise TilegenError("--profile-top profiles the best measured candidates: it needs measured selection, not --static")
    loaded = _loaded(project)
    hits = [ls for ls in loaded if ls.spec.name == name]
    if not hits:
        raise TilegenError(f"no spec named '{name}' (see `tilegen list`)")
    (ls,) = hits
    search = getattr(ls.spec, "search", {})
    chosen = list(targets) if targets else [t for t in ls.spec.targets if t in search]
    if not chosen:
        raise TilegenError(f"{name}: no `search:` block in its spec ({ls.doc.file}): nothing to tune")
    budget_s = None
    gpu = None
    if not static:
        from codegen.run.gpu import NoGpu, detect_gpu
        from codegen.tune.measure import parse_budget

        budget_s = parse_budget(budget)
        try:
            gpu = detect_gpu() if ray is None else cluster_gpu(ray)
        except NoGpu as exc:
            raise TilegenError(f"measuring needs a GPU ({exc}); `tilegen tune {name} --static` runs the stages "
                               "that need none") from None
        try:
            gpu = gpu.using(gpus)
        except ValueError as exc:
            raise TilegenError(str(exc)) from None
    for target in chosen:  # every target refused or sized before anything runs
        if target not in ls.spec.targets:
            raise TilegenError(f"{name}: {target.value} is not in its targets")
        check_space(ls, target, max_points)
    locks = {t: _lock_to_merge(project, t, gpu) for t in chosen} if gpu is not None else {}
    if ray is not None:
        opts = replace(opts, ray=ray)
        err.print(f"Ray cluster {ray}: builds one CPU each{', cases one GPU each' if gpu else ''}", markup=False)
    results = []
    for target in chosen:
        err.print(f"[bold]tune {name} on {target.value}[/]")
        with UI(out, err) as ui:
            result = tune_static(ls, target, project.root, opts, on_event=ui.event, max_points=max_points,
                                 on_stage=lambda stage, what: err.print(f"  {stage}: {what}", markup=False))
        if gpu is not None:
            from codegen.tune.measure import measure

            with UI(out, err) as ui:
                left_s = budget_s if deadline is None else max(1.0, deadline - time.monotonic())
                doc, entries = measure(result, gpu, budget_s=left_s, jobs=opts.jobs, timeout_s=timeout_s,
                                       ray=ray, on_event=ui.event, session=session)
            if profile_top:
                doc = _profile_top(result, doc, profile_top, gpu, project, timeout_s, out, err)
            result = replace(result, measured=doc)
            path, lock = locks[target]
            if write_lockfile(path, lock.merged(entries)):
                err.print(f"wrote {path.relative_to(project.root)}", markup=False)
            for s in doc["shapes"]:
                err.print(f"  {'x'.join(map(str, s['shape']))}: winner {s['winner']['uri']} {s['winner']['time_ms']:.4f} ms"
                          f" (hand {s['hand_ms']}, x{s['speedup_vs_hand']})", markup=False)
        written = write_report(project.root, result)
        title, shown = result.shown()
        full_width(out).print(rich_table(f"{result.spec_name} on {result.target.value}: {title}",
                                   survivor_columns(result.target), shown))
        doc = result.document()
        err.print(f"  {doc['counts']} rejected by rule {doc['rejected_by_rule']} pruned {doc['pruned_by_reason']}",
                  markup=False)
        for p in written:
            err.print(f"wrote {p.relative_to(project.root)}", markup=False)
        results.append(replace(result, written=written))
    return results


def run_merge(project: Project, files: list[Path], *, err: Console) -> list[Path]:
    """`tilegen tune --merge FILE...`: lockfiles measured elsewhere (another machine, a copy of the project)
    merged into this project's lockfile of the same target and device, tuned/<target>/<device>.json. Every file
    is read and validated first (a refused one stops the merge before anything is written); an entry replaces
    this project's entry of the same spec, hand configuration and shape, the later file winning, except where
    the project's entry (or an earlier file's) records a later measurement (LockEntry.measured_before): that one
    stays, and is counted. Each lockfile is written atomically. Returns the lockfiles written."""
    incoming = [read_lockfile(f, shown=f.as_posix()) for f in files]
    # (target, device) -> path, lockfile, entries merged, entries kept because they were measured later, entries
    # superseded
    merged: dict[tuple[Target, str], tuple[Path, LockFile, int, int, int]] = {}
    for lock in incoming:
        key = (lock.target, lock.device)
        path, mine, n, kept, superseded = merged[key] if key in merged else (*_project_lock(project, *key), 0, 0, 0)
        result = mine.merged(list(lock.entries), keep_later=True)
        now = {e.key: e for e in result.entries}
        # the merge kept the one it held (measured later), or dropped the file's: superseded by a later entry of
        # the same spec and shape under another hand configuration
        later = sum(1 for e in lock.entries if now.get(e.key, e) is not e)
        gone = sum(1 for e in lock.entries if e.key not in now)
        merged[key] = (path, result, n + len(lock.entries), kept + later, superseded + gone)
    written = []
    for path, lock, n, kept, superseded in merged.values():
        changed = write_lockfile(path, lock)
        kept_note = f" ({kept} kept: measured later than the merged file's)" if kept else ""
        if superseded:
            kept_note += f" ({superseded} superseded: the spec's hand configuration changed and was tuned later)"
        err.print(f"{path.relative_to(project.root).as_posix()}: {n} entries merged{kept_note}, {len(lock.entries)} "
                  "in all" + ("" if changed else " (unchanged)") + "; `tilegen gen` emits the tuned kernels",
                  markup=False)
        if changed:
            written.append(path)
    return written


def _project_lock(project: Project, target: Target, device: str) -> tuple[Path, LockFile]:
    """(path, lockfile) of the project's lockfile of `target` and `device`: the existing one, validated, or a new,
    empty one."""
    path = project.path(lock_path(project.root, target, device).relative_to(project.root))
    if not path.exists() and not path.is_symlink():
        return path, LockFile(target=target, device=device)
    return path, read_lockfile(path, shown=path.relative_to(project.root).as_posix(), target=target)


def _lock_to_merge(project: Project, target: Target, gpu) -> tuple[Path, LockFile]:
    """(path, lockfile) that a measured tune of `target` on `gpu` merges its entries into (_project_lock), checked
    against this GPU: a file that is not a valid lockfile of it is refused before anything is measured."""
    path, lock = _project_lock(project, target, gpu.name)
    if path.exists() or path.is_symlink():  # a new, empty one has nothing to check
        check_present(lock, path.relative_to(project.root).as_posix(), (gpu.name, gpu.run_target))
    return path, lock


def cluster_gpu(address: str):
    """The GPU a Ray cluster's GPU tasks get (detected inside one such task): the model the cases run on."""
    from codegen.core.raypool import RayPool
    from codegen.run.gpu import NoGpu, detect_gpu
    from codegen.run.gpurun import RAY_GPUS_PER_CASE

    with RayPool(address, num_gpus=RAY_GPUS_PER_CASE) as pool:
        ok, value, _ = pool.call(detect_gpu)
    if not ok:
        raise NoGpu(f"a GPU task on the Ray cluster {address} found none: {value}")
    return value


def _profile_top(result: TuneResult, doc: dict, top: int, gpu, project: Project, timeout_s: float, out: Console,
                 err: Console) -> dict:
    """`--profile-top N`: the N best measured candidates under the profiler (codegen.run.profile.profile_candidates);
    their counters go into the measured document as `profiled` and are shown beside their times."""
    from codegen.run.profile import PROFILE_TIMEOUT_S, candidate_columns, profile_candidates

    err.print(f"  profile: the {top} best candidates under the profiler", markup=False)
    rows = profile_candidates(result.part.files, doc, top, gpu, project.root, timeout_s=max(timeout_s, PROFILE_TIMEOUT_S))
    full_width(out).print(rich_table(f"{result.spec_name} on {result.target.value}: the {top} best, profiled",
                                     candidate_columns(), rows))
    return {**doc, "profiled": [r.to_json() for r in rows]}


def run_check(project: Project, targets: list[Target] | None, *, out: Console, err: Console,
              strict: bool = False) -> bool:
    """`tilegen tune --check`: stale entries, misses and entries to search again, one line each. False (exit 1) on
    any stale entry -- a lockfile that no longer answers for the spec set -- and, with `strict`, on any miss or
    entry to search again too; alone, a miss (a searched shape not tuned yet on some device: its hand
    configuration serves it) or an entry chosen from another search space than the spec's today (it still
    serves) is listed, not an error."""
    from codegen.run.gpu import NoGpu, detect_gpu

    versions = local_versions()
    try:
        gpu = detect_gpu()
        device_versions = (gpu.name, gpu_versions(gpu))
    except NoGpu:
        gpu = device_versions = None
    report = check_lockfiles(project.root, _loaded(project), versions, targets, device_versions=device_versions,
                             gpu_present=(gpu.name, gpu.run_target) if gpu else None)
    for line in report.invalid:
        err.print(line, markup=False)
    for f in (*report.stale, *report.misses, *report.research):
        err.print(f.line(), markup=False)
    if report.not_compared:
        where = f"only {gpu.name}'s lockfile is compared with this {gpu.name}" if gpu else "no GPU here"
        err.print(f"not compared ({where}): {', '.join(report.not_compared)}", markup=False)
    if not report.stale and not report.invalid and (report.misses or report.research) and not strict:
        n = len(report.research)
        todo = [f"{len(report.misses)} searched shape(s) not tuned yet, served by their hand configurations"
                ] if report.misses else []
        again = f"{n} entr{'y' if n == 1 else 'ies'} chosen from another search space than the spec's today, still serving"
        todo += [again] if n else []
        out.print(f"tuned/ has no stale entry ({report.entries} entr{'y' if report.entries == 1 else 'ies'}); "
                  f"{'; '.join(todo)} (`tilegen tune --all` on the device tunes them; --strict makes this an error)",
                  markup=False)
        return True
    if report.clean:
        out.print(f"tuned/ is up to date: {report.entries} entr{'y' if report.entries == 1 else 'ies'} "
                  f"(versions compared: {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}"
                  f"{f'; on {gpu.name} also ' + ', '.join(f'{k} {v}' for k, v in sorted(device_versions[1].items())) if gpu else ''})",
                  markup=False)
        return True
    parts = [f"{len(report.invalid)} invalid lockfile(s): fix or remove them"] if report.invalid else []
    if report.stale or report.misses or report.research:
        parts.append(f"{len(report.stale)} stale, {len(report.misses)} missing"
                     f"{f', {len(report.research)} to search again' if report.research else ''}: run "
                     "`tilegen tune NAME` on the device")
    err.print(f"error: {'; '.join(parts)}", markup=False)
    return False

