"""`tilegen tune --all`: every spec with a `search:` block, tuned on the GPU present under one time budget.

Resumable: a spec whose every searched shape already has a fresh entry in this device's lockfile, chosen from
the spec's search space of today, is skipped (`fresh`), and each spec's entries are written to the lockfile as
soon as it is tuned, so a run cut short by its budget, a session's end or Ctrl-C keeps what it measured and the
next run goes on from the first spec still without entries. The order: first the specs with a shape no entry
serves (never tuned on this device, or an entry gone stale), then those whose entries still serve but were chosen
from another search space than the spec's today (`research`); within each, the spec set's order (files sorted,
specs in file order): deterministic. The summary lists the specs in the spec set's order.

The budget is one figure for the whole run. A spec is started only while budget is left, and gets what is left
for its builds, the verification of its candidates and its measured rounds (codegen.tune.measure: at least one round
is always measured once a spec is started). That first part does not shrink with the budget, so a spec is not
started when this run has shown it cannot fit: each tuned spec gives the seconds its fixed part took per (kernel,
shape) -- builds, verification and the first round -- and a later spec of the same op whose kernels x shapes at that
rate need more than is left waits for the next run (a spec of an op not yet seen is measured against the cheapest
rate seen); the run goes on to the specs that do fit. The specs not started are listed as `not reached`. The
summary is one row per (spec, target).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from codegen.core.columns import Column
from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.lockfile import check_lockfiles, fam_shapes, gpu_versions, local_versions, lock_path
from codegen.spec.load import LoadedSpec

FRESH, TUNED, NOT_REACHED, FAILED = "fresh", "tuned", "not reached", "failed"


@dataclass(frozen=True, kw_only=True)
class TuneAllRow:
    """One (spec, target) of `tune --all`."""

    spec: str
    target: Target
    status: str  # FRESH | TUNED | NOT_REACHED | FAILED
    shapes: int  # searched shapes of the spec
    seconds: float = 0.0
    speedup_vs_hand: float | None = None  # geometric mean over the shapes of the winner's speed-up on the hand kernel
    vs_best_torch: float | None = None  # the same against the fastest torch baseline timed in the same run
    best_torch: str = ""  # which baselines those were (eager = cuBLAS for GEMM; sdpa_cudnn; compile ...)
    note: str = ""

    def to_json(self) -> dict[str, object]:
        return {"spec": self.spec, "target": self.target.value, "status": self.status, "shapes": self.shapes,
                "seconds": self.seconds, "speedup_vs_hand": self.speedup_vs_hand,
                "vs_best_torch": self.vs_best_torch, "best_torch": self.best_torch, "note": self.note}


TUNE_ALL_COLUMNS: tuple[Column, ...] = (
    Column(header="spec", value=lambda r: r.spec),
    Column(header="target", value=lambda r: r.target.value),
    Column(header="status", value=lambda r: r.status),
    Column(header="shapes", value=lambda r: r.shapes, justify="right"),
    Column(header="s", value=lambda r: r.seconds, fmt=lambda v: f"{v:.0f}" if v else "", justify="right"),
    Column(header="vs hand", value=lambda r: r.speedup_vs_hand, fmt=lambda v: "" if v is None else f"{v:.3f}x",
           justify="right"),
    Column(header="vs best torch", value=lambda r: r.vs_best_torch, fmt=lambda v: "" if v is None else f"{v:.3f}x",
           justify="right"),
    Column(header="best torch", value=lambda r: r.best_torch),
    Column(header="note", value=lambda r: r.note),
)


def searched(loaded: list[LoadedSpec], target: Target) -> list[LoadedSpec]:
    """The specs with a `search:` block for `target`, in the spec set's order."""
    return [ls for ls in loaded if target in getattr(ls.spec, "search", {}) and target in ls.spec.targets]


UNSERVED, RESEARCH = "unserved", "research"  # why a spec is tuned: a shape no entry serves; entries to re-search


def to_tune(root, loaded: list[LoadedSpec], target: Target, device: str, device_versions: dict[str, str]) -> dict[str, str]:
    """The searched specs to tune on `device`, each with why: UNSERVED where a shape has no fresh entry in
    `device`'s lockfile for `target` (a miss, or a stale entry: spec, code or versions changed), else RESEARCH
    where an entry was chosen from another search space than the spec's today (it still serves). Without a
    lockfile for `device`, every one is UNSERVED."""
    wanted = {ls.spec.name for ls in searched(loaded, target)}
    mine = lock_path(root, target, device)
    if not mine.is_file():
        return dict.fromkeys(wanted, UNSERVED)
    report = check_lockfiles(root, loaded, local_versions(), [target], device_versions=(device, device_versions))
    shown = mine.relative_to(root).as_posix()  # another device's lockfile says nothing of this one
    why = {f.spec: RESEARCH for f in report.research if f.spec in wanted and f.file == shown}
    why |= {f.spec: UNSERVED for f in (*report.stale, *report.misses) if f.spec in wanted and f.file == shown}
    return why


def _geomean(values: list[float]) -> float | None:
    import math

    values = [v for v in values if v]
    return round(math.exp(sum(map(math.log, values)) / len(values)), 4) if values else None


def _speedups(doc: dict | None) -> tuple[float | None, float | None, str]:
    """(vs hand, vs the fastest torch baseline, which baselines were fastest) of a measured document: geometric
    means over its shapes of the winner's speed-ups (each shape's fastest baseline: the smallest speed-up)."""
    if not doc:
        return None, None, ""
    hand = [s["speedup_vs_hand"] for s in doc["shapes"] if s.get("speedup_vs_hand")]
    best, names = [], []
    for s in doc["shapes"]:
        base = s.get("speedup_vs_baselines", {})
        if base:
            name = min(base, key=lambda k: (base[k], k))
            best.append(base[name])
            names.append(name)
    return _geomean(hand), _geomean(best), ", ".join(sorted(set(names)))


def distinct_kernels(ls: LoadedSpec, target: Target) -> int:
    """The distinct kernels of a spec's search space that pass its rules on `target` (no build: cheap)."""
    from codegen.tune.search import constrain, expand

    return len(constrain(ls, target, expand(ls.spec, target)).files)


def fixed_seconds(result, wall_s: float) -> float | None:
    """The seconds of a tuned spec that do not shrink with the budget: its builds, the verification of every
    candidate and the first bench round (a later round is started only if it fits). None without measured rounds."""
    rounds = (getattr(result, "measured", None) or {}).get("rounds") or []
    if not rounds:
        return None
    return max(0.0, wall_s - (rounds[-1]["elapsed_s"] - rounds[0]["elapsed_s"]))


def tune_all(project, targets: list[Target] | None, *, budget_s: float, tune_one, device: str,
             device_versions: dict[str, str], run_target: Target, loaded: list[LoadedSpec],
             clock=time.monotonic, kernels_of=distinct_kernels) -> list[TuneAllRow]:
    """Tune every searched spec of `run_target` (the GPU present's target; `targets` may only narrow to it) that has
    a shape without a fresh entry, in order, while budget is left and this run's rates say it fits (module doc).
    `tune_one(name, target, budget_s)` tunes one spec and returns its TuneResult (the lockfile written); a
    TilegenError of one spec is that row's `failed` and the run goes on. `kernels_of(ls, target)`: the spec's
    distinct kernels, for the estimate."""
    if targets and run_target not in targets:
        raise TilegenError(f"this GPU runs {run_target.value} kernels: --target {', '.join(t.value for t in targets)} "
                           "cannot be measured here")
    start = clock()
    pending = to_tune(project.root, loaded, run_target, device, device_versions)
    specs = searched(loaded, run_target)
    rows: dict[str, TuneAllRow] = {}
    for ls in specs:
        if ls.spec.name not in pending:
            rows[ls.spec.name] = TuneAllRow(spec=ls.spec.name, target=run_target, status=FRESH,
                                            shapes=len(fam_shapes(ls)),
                                            note=f"every shape has a fresh entry for {device}")
    rates: dict[str, float] = {}  # op -> the slowest fixed seconds per (kernel, shape) seen in this run
    for ls in sorted((ls for ls in specs if ls.spec.name in pending), key=lambda ls: pending[ls.spec.name] == RESEARCH):
        name, shapes, op = ls.spec.name, len(fam_shapes(ls)), ls.spec.op
        left = budget_s - (clock() - start)
        if left <= 0:
            rows[name] = TuneAllRow(spec=name, target=run_target, status=NOT_REACHED, shapes=shapes,
                                    note="the budget was spent: run `tilegen tune --all` again to go on")
            continue
        pairs = kernels_of(ls, run_target) * shapes if rates else 0  # no estimate before the first spec
        rate, seen = (rates[op], f"this run's {op} rate") if op in rates else (min(rates.values(), default=0.0),
                                                                                "the cheapest rate of this run")
        if pairs * rate > left:
            rows[name] = TuneAllRow(spec=name, target=run_target, status=NOT_REACHED, shapes=shapes,
                                    note=f"needs about {pairs * rate:.0f} s to verify and time its {pairs} kernel "
                                         f"shapes once ({seen}), {left:.0f} s left: run `tilegen tune --all` again")
            continue
        t0 = clock()
        try:
            result = tune_one(name, run_target, left)
        except TilegenError as exc:
            rows[name] = TuneAllRow(spec=name, target=run_target, status=FAILED, shapes=shapes,
                                    seconds=round(clock() - t0, 1), note=str(exc).splitlines()[0])
            continue
        fixed = fixed_seconds(result, clock() - t0)
        if fixed is not None:
            pairs = pairs or kernels_of(ls, run_target) * shapes
            rates[op] = max(rates.get(op, 0.0), fixed / max(1, pairs))
        hand, best, which = _speedups(result.measured)
        rows[name] = TuneAllRow(spec=name, target=run_target, status=TUNED, shapes=shapes,
                                seconds=round(clock() - t0, 1), speedup_vs_hand=hand, vs_best_torch=best,
                                best_torch=which)
    return [rows[ls.spec.name] for ls in specs]


def write_summary(root, target: Target, device: str, rows: list[TuneAllRow], budget_s: float, wall_s: float):
    """reports/tune/all_<target>.{json,md}: the summary of the latest `tune --all` on this target."""
    import json

    from codegen.core.columns import markdown_table
    from codegen.core.files import write_text_atomic

    folder = root / "reports" / "tune"
    doc = {"command": "tilegen tune --all", "device": device, "target": target.value, "budget_s": budget_s,
           "wall_s": round(wall_s, 1), "rows": [r.to_json() for r in rows]}
    md = [f"# tilegen tune --all on {device} ({target.value})", "",
          (f"Budget {budget_s:.0f} s, wall {wall_s:.0f} s. Speed-ups are geometric means over each spec's shapes, "
          "measured in one run beside the hand kernel and the torch baselines (L2 flushed)."), "",
          *markdown_table(TUNE_ALL_COLUMNS, rows), ""]
    paths = (folder / f"all_{target.value}.json", folder / f"all_{target.value}.md")
    write_text_atomic(paths[0], json.dumps(doc, indent=2, sort_keys=True) + "\n")
    write_text_atomic(paths[1], "\n".join(md))
    return paths


def run_tune_all(project, targets: list[Target] | None, *, budget: str, opts, timeout_s: float, out, err,
                 gpus: int | None = None) -> list[TuneAllRow]:
    """`tilegen tune --all`: detect the GPU, tune what is not fresh under one budget, show and write the summary."""
    from codegen.cli.console import full_width, rich_table
    from codegen.cli.tune import _loaded, run_tune
    from codegen.run.gpu import NoGpu, detect_gpu
    from codegen.run.gpurun import GpuSession
    from codegen.tune.measure import parse_budget

    budget_s = parse_budget(budget)
    try:
        gpu = detect_gpu().using(gpus)
    except NoGpu as exc:
        raise TilegenError(f"tune --all measures on a GPU ({exc}); `tilegen tune NAME --static` runs the stages "
                           "that need none") from None
    except ValueError as exc:
        raise TilegenError(str(exc)) from None
    loaded = _loaded(project)
    device, versions = gpu.name, gpu_versions(gpu)

    def tune_one(name: str, target: Target, left_s: float):
        # the spec's builds count too: its measured rounds get what is left of `left_s` once they start
        (result,) = run_tune(project, name, [target], static=False, budget=f"{max(left_s, 1.0):.0f}s", opts=opts,
                             timeout_s=timeout_s, out=out, err=err, gpus=gpus, session=session,
                             deadline=time.monotonic() + left_s)
        return result

    t0 = time.monotonic()
    # every spec's verification and bench rounds on the same GPU workers, started once for the run
    with GpuSession() as session:
        rows = tune_all(project, targets, budget_s=budget_s, tune_one=tune_one, device=device,
                        device_versions=versions, run_target=gpu.run_target, loaded=loaded)
    wall = time.monotonic() - t0
    full_width(out).print(rich_table(f"tune --all on {device} ({gpu.run_target.value}), budget {budget_s:.0f} s, "
                                     f"{wall:.0f} s", TUNE_ALL_COLUMNS, rows))
    for p in write_summary(project.root, gpu.run_target, device, rows, budget_s, wall):
        err.print(f"wrote {p.relative_to(project.root)}", markup=False)
    return rows
