"""What `tilegen tune` shows: the stages with their progress, the counts by rule and reason, the ranked or
measured survivors, the reports and the lockfile written; and `tune --check`."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from codegen.build import BuildOptions
from codegen.console import UI, full_width, rich_table
from codegen.errors import TilegenError
from codegen.hardware import Target
from codegen.instance import build_instances
from codegen.load import LoadedSpec, load_spec_files
from codegen.lockfile import LockFile, check_lockfiles, local_versions, lock_path, read_lockfile, write_lockfile
from codegen.pipeline import Project
from codegen.tune import TuneResult, survivor_columns, tune_static, write_report


def _loaded(project: Project) -> list[LoadedSpec]:
    loaded = load_spec_files(project.spec_paths(None), project.root)
    build_instances(loaded)  # every rule on the hand configurations: a tuned spec set is a valid one
    return loaded


def run_tune(project: Project, name: str, targets: list[Target] | None, *, static: bool, budget: str,
             opts: BuildOptions, timeout_s: float, out: Console, err: Console, profile_top: int = 0) -> list[TuneResult]:
    """`tilegen tune NAME`: for each target of the spec with a `search:` block (or those asked for), the
    static stages, then measured selection on the GPU present unless `static`; writes
    reports/tune/<spec>_<target>.{json,md} and, when measured, tuned/<target>/<device>.json."""
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
        from codegen.gpu import NoGpu, detect_gpu
        from codegen.tune_measure import parse_budget

        budget_s = parse_budget(budget)
        try:
            gpu = detect_gpu()
        except NoGpu as exc:
            raise TilegenError(f"measuring needs a GPU ({exc}); `tilegen tune {name} --static` runs the stages "
                               "that need none") from None
    results = []
    for target in chosen:
        err.print(f"[bold]tune {name} on {target.value}[/]")
        with UI(out, err) as ui:
            result = tune_static(ls, target, project.root, opts, on_event=ui.event,
                                 on_stage=lambda stage, what: err.print(f"  {stage}: {what}", markup=False))
        if gpu is not None:
            from codegen.tune_measure import measure

            with UI(out, err) as ui:
                doc, entries = measure(result, gpu, budget_s=budget_s, jobs=opts.jobs, timeout_s=timeout_s,
                                       on_event=ui.event)
            if profile_top:
                doc = _profile_top(result, doc, profile_top, gpu, project, timeout_s, out, err)
            result = replace(result, measured=doc)
            path = lock_path(project.root, target, gpu.name)
            lock = read_lockfile(path) if path.is_file() else LockFile(target=target, device=gpu.name)
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


def _profile_top(result: TuneResult, doc: dict, top: int, gpu, project: Project, timeout_s: float, out: Console,
                 err: Console) -> dict:
    """`--profile-top N`: the N best measured candidates under the profiler (codegen.profile.profile_candidates);
    their counters go into the measured document as `profiled` and are shown beside their times."""
    from codegen.profile import PROFILE_TIMEOUT_S, candidate_columns, profile_candidates

    err.print(f"  profile: the {top} best candidates under the profiler", markup=False)
    rows = profile_candidates(result.part.files, doc, top, gpu, project.root, timeout_s=max(timeout_s, PROFILE_TIMEOUT_S))
    full_width(out).print(rich_table(f"{result.spec_name} on {result.target.value}: the {top} best, profiled",
                                     candidate_columns(), rows))
    return {**doc, "profiled": [r.to_json() for r in rows]}


def run_check(project: Project, targets: list[Target] | None, *, out: Console, err: Console) -> bool:
    """`tilegen tune --check`: stale entries and misses, one line each; True when there are none."""
    versions = local_versions()
    report = check_lockfiles(project.root, _loaded(project), versions, targets)
    for f in (*report.stale, *report.misses):
        err.print(f.line(), markup=False)
    if report.not_compared:
        err.print(f"not compared here (no GPU): {', '.join(report.not_compared)}", markup=False)
    if report.clean:
        out.print(f"tuned/ is up to date: {report.entries} entr{'y' if report.entries == 1 else 'ies'} "
                  f"(versions compared: {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))})", markup=False)
        return True
    err.print(f"error: {len(report.stale)} stale, {len(report.misses)} missing: run `tilegen tune NAME` on the device",
              markup=False)
    return False

