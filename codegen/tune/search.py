"""`tilegen tune`: enumerate a spec's search space, constrain it by the named rules and by real builds,
then select -- by static figures (AMD targets: "static rank, not measured") or by measurement on the GPU
present (verify every candidate, then successive halving of bench rounds under a time budget).

Three separate steps (STYLE.md "Enumerate, constrain, select"):
  expand      the cartesian product of the spec's `search.<target>` values, applied to the spec's hand
              configuration for that target with `model_copy(update=...)` -- never through YAML text;
  constrain   every point through the family's rules (each rejected point counted under each rule it breaks,
              read from `Violation.rule`), then every legal point built for real through the build cache
              (pruned: build_failed, spills, lds_exceeded, min_waves_per_simd);
  select      static rank (`--static`, AMD targets) or measured (codegen.tune.measure).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel

from codegen.build.compile import BuildOptions, BuildReport, build_files
from codegen.core.columns import Column, markdown_table
from codegen.core.errors import SpecError, TilegenError
from codegen.core.events import OnEvent, ignore
from codegen.core.files import dump_json, write_text_atomic
from codegen.core.hardware import Target
from codegen.families import family_for_op
from codegen.families.spec import MAX_POINTS, Values, apply_point, hand_spec, search_blocks, search_values
from codegen.generate.instance import grid_limit
from codegen.generate.render import RenderedFile, render_all
from codegen.spec.load import LoadedSpec
from codegen.spec.project import confined
from codegen.targets import TARGETS

REPORT_DIR = Path("reports") / "tune"
STATIC_LABEL = "static rank, not measured"
SAME_KERNEL = "same_kernel"  # a point whose kernel equals an earlier point's (a tunable the target ignores)



def _plain(value: object) -> object:
    return getattr(value, "value", value)  # enums as their YAML value


# ---- expand -----------------------------------------------------------------------------------------

def blocks_of(spec: BaseModel, target: Target) -> list[list[tuple[str, list]]]:
    """The axes (tunable path, values) of each block of the spec's `search.<target>`: one block, or the blocks of
    a list (codegen.families.spec.search_blocks)."""
    search = getattr(spec, "search", {}).get(target)
    if search is None:
        raise TilegenError(f"{spec.name}: no `search.{target.value}` block: nothing to tune for {target.value}")
    return [search_values(block) for block in search_blocks(search)]


def space_of(spec: BaseModel, target: Target) -> list[tuple[str, list]]:
    """Every tunable the search lists, in the order first listed, with the values its points take (one block: its
    axes): those the blocks list, and the hand configuration's where a block leaves the tunable out. A point of
    the space sets each of these tunables (expand)."""
    blocks = blocks_of(spec, target)
    merged: dict[str, list] = {}
    for axes in blocks:
        for path, values in axes:
            seen = merged.setdefault(path, [])
            seen.extend(v for v in values if v not in seen)
    base = hand_spec(spec, target)
    for path, seen in merged.items():
        if any(path not in dict(axes) for axes in blocks) and (v := _value_at(base, path)) not in seen:
            seen.append(v)
    return list(merged.items())


def _value_at(spec: BaseModel, path: str) -> object:
    value: object = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value


def space_size(spec: BaseModel, target: Target) -> int:
    """How many points the spec's search space for `target` has: the product of each block's lists' lengths,
    summed over the blocks, computed from the lengths alone (nothing is expanded)."""
    return sum(math.prod(len(values) for _, values in axes) for axes in blocks_of(spec, target))


def check_space(loaded: LoadedSpec, target: Target, max_points: int = MAX_POINTS) -> int:
    """The size of the search space, refused [search_points] at its `search.<target>` block when it is over
    `max_points` -- before any point is expanded, so a space of 10**30 points costs what one of 10 does."""
    size = space_size(loaded.spec, target)
    if size > max_points:
        product = " + ".join(" x ".join(f"{len(values)} {name}" for name, values in axes)
                             for axes in blocks_of(loaded.spec, target))
        raise SpecError(loaded.locate(("search", target.value), key=True),
                        f"search.{target.value}: {size} points ({product}) is over the limit of {max_points} a "
                        "tune expands: list fewer values, or raise the limit with `tilegen tune --max-points`",
                        "search_points")
    return size


def expand(spec: BaseModel, target: Target) -> Iterator[Values]:
    """Every point of the spec's search space for `target`, one at a time (itertools.product: memory does not
    grow with the number of points): block after block, the cartesian product of the block's lists, each
    tunable's values in the order written (deterministic). Each point sets every tunable of space_of, in its
    order: those its block leaves out keep the hand configuration's value."""
    hand = dict(hand_values(spec, target))  # a target without a search block is refused here, not when iterated
    blocks = blocks_of(spec, target)

    def points() -> Iterator[Values]:
        for axes in blocks:
            names = [name for name, _ in axes]
            for combo in itertools.product(*(vals for _, vals in axes)):
                yield tuple((hand | dict(zip(names, combo))).items())

    return points()


def hand_values(spec: BaseModel, target: Target) -> Values:
    """The hand configuration's value of each tunable the search lists (space_of's order)."""
    base = hand_spec(spec, target)
    return tuple((path, _value_at(base, path)) for path, _ in space_of(spec, target))


# ---- constrain ----------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Point:
    index: int  # -1: the hand configuration
    values: Values
    uri: str | None = None  # the kernel's name, for a point that passed the rules
    rules: tuple[str, ...] = ()  # rules it breaks (sorted, once each)
    same_as: str | None = None  # the uri of an earlier point with the same kernel
    pruned: tuple[str, ...] = ()  # why a build pruned it: build_failed, spills, lds_exceeded, min_waves_per_simd
    detail: str = ""  # the first build error or rule message
    summary: dict[str, object] = field(default_factory=dict)  # worst case over its builds' kernels
    rank: int | None = None

    @property
    def label(self) -> str:
        return "hand" if self.index < 0 else str(self.index)

    @property
    def survived(self) -> bool:
        return self.uri is not None and not self.rules and self.same_as is None and not self.pruned

    def tunables(self) -> dict[str, object]:
        return {k: _plain(v) for k, v in self.values}


@dataclass(frozen=True, kw_only=True)
class Partition:
    """The points of one (spec, target) after the rules: legal ones with their rendered files."""

    spec_name: str
    target: Target
    hand: Point
    points: tuple[Point, ...]
    files: dict[str, RenderedFile]  # uri -> rendered, legal and distinct points (hand included)

    @property
    def rejected_by_rule(self) -> dict[str, int]:
        return dict(sorted(Counter(r for p in self.points for r in p.rules).items()))


def constrain(loaded: LoadedSpec, target: Target, points: Iterable[Values]) -> Partition:
    """Run every rule of the spec's family on each point (the hand configuration first); a point that breaks
    any is counted under each rule it breaks; a legal point whose kernel equals an earlier one's is marked
    same_kernel. Nothing is dropped: every point comes back with its fate."""
    spec = loaded.spec
    fam = family_for_op(spec.op)
    tspec = TARGETS[target]
    base = hand_spec(spec, target)
    files: dict[str, RenderedFile] = {}
    out: list[Point] = []
    for index, values in itertools.chain([(-1, hand_values(spec, target))], enumerate(points)):
        candidate = apply_point(base, values)
        violations = fam.check(candidate, tspec)
        inst = fam.instance(candidate, tspec, loaded.doc.file)
        if not violations:
            violations = grid_limit(inst)
        if violations:
            out.append(Point(index=index, values=values, rules=tuple(sorted({v.rule for v in violations})),
                             detail=violations[0].message))
            continue
        (rendered,) = render_all([inst])
        if rendered.uri in files:
            out.append(Point(index=index, values=values, uri=rendered.uri, same_as=rendered.uri))
            continue
        files[rendered.uri] = rendered
        out.append(Point(index=index, values=values, uri=rendered.uri))
    hand, *rest = out
    if hand.rules:
        raise TilegenError(f"{spec.name}: the hand configuration breaks {', '.join(hand.rules)} on {target.value}: "
                           "`tilegen validate` says where")
    return Partition(spec_name=spec.name, target=target, hand=hand, points=tuple(rest), files=files)


PruneReasons = Callable[[RenderedFile, BuildReport], tuple[tuple[str, ...], str, dict[str, object]]]


def prune_reasons(rendered: RenderedFile, report: BuildReport) -> tuple[tuple[str, ...], str, dict[str, object]]:
    """(reasons, first error, worst-case summary) of one candidate over its builds (every shape): a build
    that failed without kernels is build_failed; a kernel that spills (unless allow_spills), uses more
    LDS/shared memory than a workgroup may, or runs fewer waves per SIMD than min_waves_per_simd prunes it.
    Read from the kernels themselves, never from the build's message."""
    inst = rendered.instance
    tspec = TARGETS[inst.target]
    results = [r for r in report.results if r.uri == rendered.uri]
    reasons: set[str] = set()
    detail = ""
    kernels = []
    for r in results:
        if not r.kernels:
            reasons.add("build_failed")
            detail = detail or (r.error or "")
            continue
        kernels.extend(r.kernels)
        for k in r.kernels:
            if k.spills and not inst.allow_spills:
                reasons.add("spills")
                detail = detail or k.spill_text()
            if inst.min_waves_per_simd is not None and k.occupancy_problem(inst.min_waves_per_simd):
                reasons.add("min_waves_per_simd")
                detail = detail or k.occupancy_problem(inst.min_waves_per_simd)
    summary = tspec.summarize(tuple(kernels)) if kernels else {}
    limit = tspec.hw.lds_bytes_per_workgroup
    if summary and int(summary[tspec.lds_summary_key]) > limit:
        reasons.add("lds_exceeded")
        detail = detail or f"{summary[tspec.lds_summary_key]} B of LDS/shared memory > {limit} B per workgroup"
    return tuple(sorted(reasons)), detail, summary


def prune(part: Partition, root: Path, opts: BuildOptions, *, build: Callable[..., BuildReport] = build_files,
          on_event: OnEvent = ignore) -> tuple[Partition, BuildReport]:
    """Build every legal, distinct point (and the hand configuration) for real at every shape, in parallel
    through the build cache, and mark the points that a build prunes."""
    files = [part.files[u] for u in sorted(part.files)]
    report = build(files, root, opts, on_event=on_event)
    fates = {u: prune_reasons(f, report) for u, f in part.files.items()}

    def judged(p: Point) -> Point:
        if p.uri is None or p.same_as is not None:
            return p
        reasons, detail, summary = fates[p.uri]
        return Point(index=p.index, values=p.values, uri=p.uri, pruned=reasons, detail=detail, summary=summary)

    return Partition(spec_name=part.spec_name, target=part.target, hand=judged(part.hand),
                     points=tuple(judged(p) for p in part.points), files=part.files), report


# ---- select (static) ----------------------------------------------------------------------------------

def static_rank(part: Partition) -> tuple[Point, ...] | None:
    """The survivors (hand configuration included when it survives) ordered by the target's static figures,
    ranked from 1; None where the target has no static order (sm_90: measure on the GPU)."""
    key = TARGETS[part.target].static_rank
    if key is None:
        return None
    alive = [p for p in (part.hand, *part.points) if p.survived]
    ordered = sorted(alive, key=lambda p: (key(p.summary), p.uri))
    return tuple(replace(p, rank=i + 1) for i, p in enumerate(ordered))


# ---- the report ---------------------------------------------------------------------------------------

RESOURCE_HEADERS = ("regs", "LDS", "occupancy", "spills", "MMA")  # the cells of a target's table_cells


def survivor_columns(target: Target) -> tuple[Column, ...]:
    """The survivors table (ranked or not) of one target: the terminal table (tilegen tune) and the
    report's Markdown are drawn from these."""
    def resource(i: int) -> Column:
        return Column(header=RESOURCE_HEADERS[i],
                      value=lambda p: TARGETS[target].table_cells(p.summary)[i] if p.summary else "-")

    return (
        Column(header="rank", value=lambda p: p.rank or "-"),
        Column(header="point", value=lambda p: p.label),
        Column(header="kernel", value=lambda p: p.uri or "-"),
        Column(header="tunables", value=lambda p: ", ".join(f"{k}={v}" for k, v in p.tunables().items())),
        *(resource(i) for i in range(len(RESOURCE_HEADERS))),
    )


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    spec_name: str
    spec_file: str
    target: Target
    loaded: LoadedSpec = field(compare=False, repr=False)
    space: tuple[tuple[str, tuple], ...]
    part: Partition
    ranked: tuple[Point, ...] | None  # static rank (AMD), or None
    measured: dict[str, object] | None = None  # codegen.tune.measure's document, when measured
    written: tuple[Path, ...] = ()

    def survivors(self) -> tuple[Point, ...]:
        return tuple(p for p in (self.part.hand, *self.part.points) if p.survived)

    def shown(self) -> tuple[str, tuple[Point, ...]]:
        """The title and rows of the survivors table: ranked on a target with a static order, else unranked."""
        if self.ranked is not None:
            return STATIC_LABEL, self.ranked
        return "survivors (not ranked: measure on the GPU)", self.survivors()

    def pruned_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(r for p in self.part.points for r in p.pruned).items()))

    def document(self) -> dict[str, object]:
        pts = self.part.points

        def row(p: Point) -> dict[str, object]:
            d: dict[str, object] = {"point": p.label, "tunables": p.tunables(), "uri": p.uri}
            if p.rules:
                d["rules"] = list(p.rules)
            if p.same_as:
                d["same_kernel_as"] = p.same_as
            if p.pruned:
                d["pruned"] = list(p.pruned)
            if p.detail:
                d["detail"] = p.detail
            if p.summary:
                d["resources"] = p.summary
            if p.rank is not None:
                d["rank"] = p.rank
            return d

        selection = (STATIC_LABEL if self.ranked is not None else
                     "measured" if self.measured is not None else "none: no static order for this target; measure on its GPU")
        return {
            "spec": self.spec_name, "spec_file": self.spec_file, "target": self.target.value,
            "space": {k: [_plain(v) for v in vals] for k, vals in self.space},
            # a search of several blocks: each block's own space (the space above merges them)
            **({"blocks": [{k: [_plain(v) for v in vals] for k, vals in axes} for axes in blocks]}
               if len(blocks := blocks_of(self.loaded.spec, self.target)) > 1 else {}),
            "hand": row(self.part.hand),
            "counts": {"expanded": len(pts), "rejected": sum(1 for p in pts if p.rules),
                       SAME_KERNEL: sum(1 for p in pts if p.same_as), "pruned": sum(1 for p in pts if p.pruned),
                       "survivors": sum(1 for p in pts if p.survived)},
            "rejected_by_rule": self.part.rejected_by_rule,
            "pruned_by_reason": self.pruned_by_reason(),
            "selection": selection,
            "ranked": [row(p) for p in self.ranked] if self.ranked is not None else None,
            "points": [row(p) for p in pts],
            "measured": self.measured,
            # where the measured rounds ran, in the keys every measured report uses (tools/results_page.py)
            **({"environment": {k: self.measured[k] for k in ("device", "command", "git_commit") if k in self.measured}}
               if self.measured is not None else {}),
        }

    def markdown(self) -> str:
        doc = self.document()
        c = doc["counts"]
        lines = [f"# tune {self.spec_name} on {self.target.value}", "",
                 f"Spec `{self.spec_file}`; selection: **{doc['selection']}**.", "",
                 (f"{c['expanded']} points expanded: {c['rejected']} rejected by rules, {c[SAME_KERNEL]} the same "
                  f"kernel as an earlier point, {c['pruned']} pruned by their builds, {c['survivors']} survive "
                  "(the hand configuration besides)."), "", "| rule / reason | points |", "|---|---|"]
        lines += [f"| rule `{k}` | {v} |" for k, v in doc["rejected_by_rule"].items()]
        lines += [f"| pruned: `{k}` | {v} |" for k, v in doc["pruned_by_reason"].items()]
        title, shown = self.shown()
        lines += ["", f"## {title}", "", *markdown_table(survivor_columns(self.target), shown)]
        if self.measured is not None:
            lines += ["", *measured_markdown(self.measured, f"{self.spec_name}_{self.target.value}.png"),
                      "", "### the measured document", "", "```json", json.dumps(self.measured, indent=1), "```"]
        return "\n".join(lines) + "\n"


def measured_markdown(m: dict[str, object], plot_name: str) -> list[str]:
    """Per shape: the winner and runner-up beside the hand configuration and torch's baselines, all timed in
    the same run; what could not be selected; the plot."""
    base = sorted({k for s in m["shapes"] for k in s["baselines_ms"]})
    lines = [f"## measured on {m['device']} ({m['gpus']} GPU{'s' if m['gpus'] != 1 else ''}, {m['wall_s']} s)", "",
             (f"Strategy: {m['strategy']}; budget {m['budget_s']:.0f} s; {len(m['verified'])} candidates verified "
              f"(every case and negative control), {len(m['not_selectable'])} not selectable. Times: medians, L2 "
              "flushed, all in this run."), "",
             "| shape | winner | ms | runner-up | ms | hand ms | " + " | ".join(f"{b} ms" for b in base)
             + " | vs hand | " + " | ".join(f"vs {b}" for b in base) + " |",
             "|" + "---|" * (6 + 2 * len(base) + 1)]
    for s in m["shapes"]:
        ru = s["runner_up"] or {}
        cells = ["x".join(map(str, s["shape"])), f"`{s['winner']['uri']}`", f"{s['winner']['time_ms']:.4f}",
                 f"`{ru.get('uri', '-')}`", f"{ru['time_ms']:.4f}" if ru else "-",
                 f"{s['hand_ms']:.4f}" if s["hand_ms"] else "-",
                 *(f"{s['baselines_ms'][b]:.4f}" if b in s["baselines_ms"] else "-" for b in base),
                 f"{s['speedup_vs_hand']:.3f}x" if s["speedup_vs_hand"] else "-",
                 *(f"{s['speedup_vs_baselines'][b]:.3f}x" if b in s.get("speedup_vs_baselines", {}) else "-"
                   for b in base)]
        lines.append("| " + " | ".join(cells) + " |")
    for d in m["not_selectable"]:
        lines.append(f"- not selectable: `{d['uri']}` {d['statuses']} {d['error']}")
    if m.get("candidates"):
        lines += ["", f"![every candidate's time against the tunables]({plot_name})"]
    return lines


def plot_candidates(measured: dict[str, object], path: Path) -> bool:
    """The measured candidates' times against each tunable of the space, one panel a tunable: each point a
    candidate at one shape, its time over the best time at that shape (1.0 = the winner); the hand
    configuration marked. False where matplotlib is missing (the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cands = measured.get("candidates") or {}
    shapes = sorted({s for c in cands.values() for s in c["median_ms"]})
    best = {s: min(c["median_ms"][s] for c in cands.values() if s in c["median_ms"]) for s in shapes}
    names = sorted({k for c in cands.values() for k in c["tunables"]})
    if not cands or not names:
        return False
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        raw = {c["tunables"].get(name) for c in cands.values()}
        values = [str(v) for v in sorted(raw, key=lambda v: (not isinstance(v, int | float), v if isinstance(v, int | float) else 0, str(v)))]
        for j, s in enumerate(shapes):
            pts = [(values.index(str(c["tunables"].get(name))), c["median_ms"][s] / best[s], c["hand"])
                   for c in cands.values() if s in c["median_ms"]]
            offset = (j - (len(shapes) - 1) / 2) * 0.08
            ax.scatter([x + offset for x, _, _ in pts], [y for _, y, _ in pts], s=18, label=s, alpha=0.8)
            ax.scatter([x + offset for x, _, h in pts if h], [y for _, y, h in pts if h], s=90, facecolors="none",
                       edgecolors="black")
        ax.set_xticks(range(len(values)), values)
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("time / best time at the shape (circled: hand configuration)")
    axes[0][-1].legend(fontsize=7, title="shape")
    fig.suptitle(f"measured on {measured.get('device')}: every verified candidate, median of its rounds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report_stem(root: Path, result: TuneResult) -> Path:
    """reports/tune/<spec>_<target> for a measured tune, <spec>_<target>_static for a static one: a static rank
    run on a machine without a GPU never replaces what a GPU measured."""
    static = "_static" if result.measured is None else ""
    return confined(root, root / REPORT_DIR / f"{result.spec_name}_{result.target.value}{static}")


def write_report(root: Path, result: TuneResult) -> tuple[Path, ...]:
    """report_stem's .json and .md (and .png, the measured candidates' plot), written only when the content
    changed."""
    stem = report_stem(root, result)
    written = []
    if result.measured is not None and plot_candidates(result.measured, stem.with_suffix(".png")):
        written.append(stem.with_suffix(".png"))
    for path, text in ((stem.with_suffix(".json"), dump_json(result.document())),
                       (stem.with_suffix(".md"), result.markdown())):
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            write_text_atomic(path, text)
            written.append(path)
    return tuple(written)


def tune_static(loaded: LoadedSpec, target: Target, root: Path, opts: BuildOptions, *,
                build: Callable[..., BuildReport] = build_files, on_stage=None,
                on_event: OnEvent = ignore, max_points: int = MAX_POINTS) -> TuneResult:
    """expand -> constrain -> build/prune -> static rank (where the target has one). A space of more than
    `max_points` points is refused before anything is expanded (check_space)."""
    spec = loaded.spec
    if target not in spec.targets:
        raise TilegenError(f"{spec.name}: {target.value} is not in its targets")
    stage = on_stage or (lambda *_: None)
    size = check_space(loaded, target, max_points)
    blocks = [math.prod(len(values) for _, values in axes) for axes in blocks_of(spec, target)]
    stage("expand", f"{size} points" + (f" ({' + '.join(map(str, blocks))} in {len(blocks)} blocks)"
                                        if len(blocks) > 1 else ""))
    part = constrain(loaded, target, expand(spec, target))
    stage("constrain", f"{sum(1 for p in part.points if p.rules)} rejected by rules, {len(part.files)} distinct kernels")
    part, _ = prune(part, root, opts, build=build, on_event=on_event)
    stage("build", f"{sum(1 for p in part.points if p.pruned)} pruned")
    return TuneResult(spec_name=spec.name, spec_file=loaded.doc.file, target=target, loaded=loaded,
                      space=tuple((k, tuple(v)) for k, v in space_of(spec, target)), part=part,
                      ranked=static_rank(part))
