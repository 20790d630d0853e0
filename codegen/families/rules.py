"""What every family's legality rules share: the `Violation` a rule yields, the context of a family
with per-target tunables, and the thread-count rule. Each family's rules live in its folder
(`codegen/families/<family>/rules.py`).

A rule gets the spec, the target's record and the effective tunables for that target, and yields
`Violation`s whose `path` is the spec field to blame (an override's field when the value came from
`overrides.<target>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from codegen.core.hardware import Hardware
from codegen.families.spec import TargetOnly
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True, kw_only=True)
class Violation:
    rule: str
    path: FieldPath
    value: object
    message: str


S = TypeVar("S")
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class TunedContext(Generic[S, T]):
    """What a rule of a family with per-target tunables sees: the spec, the target's record, the
    effective tunables there and, per tunable, the spec path it came from."""

    spec: S
    target: TargetSpec
    tuning: T
    origin: dict[str, tuple[str, ...]]  # tuning field -> spec path it came from

    @property
    def hw(self) -> Hardware:
        return self.target.hw

    def at(self, field: str, *rest: str | int) -> FieldPath:
        return self.origin[field] + rest


def target_only_value(c: TunedContext, only: TargetOnly, what: Callable[[object], str], rule: str
                      ) -> Iterator[Violation]:
    """A tunable only some targets take (codegen.families.spec.TargetOnly: k_pack, lds_layout, sm_90's TMA copy options):
    a top-level value is used by the targets that take it and the others keep its default. Asking it of
    another target's override is an error, and so is a top-level value that no target here uses (none takes
    it, or each that does overrides it) -- it would be silently ignored. `what(value)` opens the message."""
    name, default, takes = only.name, only.default, only.takes
    override = c.spec.overrides.get(c.hw.target)
    asked = getattr(override, name) if override is not None else None
    if asked is not None and not takes(c.target, asked):
        yield Violation(rule=rule, path=("overrides", c.hw.target.value, name), value=getattr(asked, "value", asked),
                        message=f"{what(asked)}, not {c.hw.target}")
    # every target finds such a top-level value alike; build_instances reports identical lines once
    top = getattr(c.spec, name)
    if top != default and not any(takes(TARGETS[t], top) and c.spec.tuning_for(t)[1][name] == (name,)
                                  for t in c.spec.targets):
        yield Violation(rule=rule, path=(name,), value=getattr(top, "value", top),
                        message=f"{what(top)}, and no such target here uses this value")


def threads_violations(threads: int, hw: Hardware, path: FieldPath) -> Iterator[Violation]:
    """Rule wave_multiple, for every family: whole waves/warps, within the workgroup limit."""
    if threads % hw.wave_lanes or threads < hw.min_threads:
        yield Violation(rule="wave_multiple", path=path, value=threads,
                        message=f"must be a multiple of the {hw.wave_lanes}-lane {hw.wave_word} on {hw.target}")
    elif threads > hw.max_threads_per_workgroup:
        yield Violation(rule="wave_multiple", path=path, value=threads,
                        message=f"exceeds {hw.max_threads_per_workgroup} threads per workgroup on {hw.target}")


Grid = tuple[int, int, int]  # workgroups along x, y, z of one kernel launch
GRID_AXES = ("x", "y", "z")


def grid_violations(grids: tuple[Grid, ...], threads: int, hw: Hardware, path: FieldPath) -> Iterator[Violation]:
    """Rule grid_limit, for every family: each launch grid of one shape (the family's instance says
    them: `launch_grids(shape)`) within the target's workgroups per dimension and, where the runtime
    counts work-items (gfx942), workgroups x workgroup size per dimension (TileLang's workgroups are
    (threads, 1, 1)). One violation per dimension: the largest extent over the shape's launches."""
    block = (threads, 1, 1)
    for axis, name in enumerate(GRID_AXES):
        extent = max((g[axis] for g in grids), default=0)
        limit = hw.max_grid_workgroups[axis]
        items = extent * block[axis]
        if extent > limit:
            yield Violation(rule="grid_limit", path=path, value=None,
                            message=f"grid {name} = {extent} exceeds {hw.target}'s limit {limit}")
        elif hw.max_grid_work_items is not None and items > hw.max_grid_work_items:
            yield Violation(rule="grid_limit", path=path, value=None,
                            message=f"grid {name} = {extent} workgroups x {block[axis]} threads = {items} "
                                    f"work-items exceeds {hw.target}'s limit {hw.max_grid_work_items} per dimension")
