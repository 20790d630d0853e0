"""KernelInstance: one spec resolved for one target. Every template variable is a field of it.

Each family defines its instance in its folder (`codegen/families/<family>/instance.py`); this module
checks every family's rules on every target across a whole spec set and builds the instances.
"""

from __future__ import annotations

from codegen.core.errors import SpecError, SpecErrors
from codegen.core.hardware import Target
from codegen.families import family_for_op
from codegen.families.base import InstanceBase
from codegen.families.rules import Violation, grid_violations
from codegen.spec.load import LoadedSpec, format_path
from codegen.targets import TARGETS

KernelInstance = InstanceBase  # every family's instance derives from it


def make_instance(loaded: LoadedSpec, target: Target) -> KernelInstance:
    """The instance of one loaded spec for one target, by its family (rules not checked)."""
    return family_for_op(loaded.spec.op).instance(loaded.spec, TARGETS[target], loaded.doc.file)


def grid_limit(inst: KernelInstance) -> list[Violation]:
    """Rule grid_limit over every shape one instance launches at (`limit_shapes`: its shapes, and the largest M
    of a dynamic-M GEMM): its launch grids (the family's `launch_grids`) within its target's limits
    (codegen.families.rules.grid_violations)."""
    hw = TARGETS[inst.target].hw
    return [v for path, shape in inst.limit_shapes()
            for v in grid_violations(inst.launch_grids(shape), inst.threads, hw, path)]


def build_instances(loaded: list[LoadedSpec], targets: list[Target] | None = None) -> list[KernelInstance]:
    """Check every rule on every (spec, target) and across the whole set; return sorted instances.

    All errors of the set are collected and raised together, so nothing is generated from a set
    that has any error.
    """
    errors: list[SpecError] = []
    first_by_name: dict[str, LoadedSpec] = {}
    instances: list[KernelInstance] = []
    for ls in loaded:
        spec = ls.spec
        if spec.name in first_by_name:
            first = first_by_name[spec.name]
            errors.append(SpecError(ls.locate(("name",)),
                                    f"name='{spec.name}': duplicate name (first defined at {first.locate(('name',))})",
                                    "duplicate_name"))
            continue
        first_by_name[spec.name] = ls
        for i, tgt in enumerate(spec.targets):
            if tgt in spec.targets[:i]:
                errors.append(SpecError(ls.locate(("targets", i)), f"targets[{i}]={tgt.value}: listed twice",
                                        "duplicate_target"))
        for tgt in getattr(spec, "overrides", {}):
            if tgt not in spec.targets:
                errors.append(SpecError(ls.locate(("overrides", tgt.value), key=True),
                                        f"overrides.{tgt.value}: {tgt.value} is not in targets", "override_target"))
        for tgt in getattr(spec, "search", {}):
            if tgt not in spec.targets:
                errors.append(SpecError(ls.locate(("search", tgt.value), key=True),
                                        f"search.{tgt.value}: {tgt.value} is not in targets", "search_target"))
        floor = getattr(spec, "min_waves_per_simd", None)
        if floor is not None and not any(TARGETS[t].hw.vendor == "amd" for t in spec.targets):
            errors.append(SpecError(ls.locate(("min_waves_per_simd",)),
                                    f"min_waves_per_simd={floor}: an occupancy floor of the AMD targets (waves per "
                                    f"SIMD); none of {', '.join(t.value for t in spec.targets)} has one",
                                    "min_waves_per_simd_target"))
        fam = family_for_op(spec.op)
        for tgt in sorted(set(spec.targets)):
            violations = fam.check(spec, TARGETS[tgt])
            inst = fam.instance(spec, TARGETS[tgt], ls.doc.file)
            if not violations:  # a grid from an illegal tiling would only repeat its error
                violations = grid_limit(inst)
            for v in violations:
                shown = format_path(v.path)
                if v.value is not None:
                    shown += f"={v.value}"
                errors.append(SpecError(ls.locate(v.path), f"{shown}: {v.message}", v.rule))
            if targets is None or tgt in targets:
                instances.append(inst)
    if errors:
        # a rule that does not depend on the target fails alike on each one: report it once
        raise SpecErrors(list({str(e): e for e in errors}.values()))
    return sorted(instances, key=lambda i: (i.target.value, i.op, i.name))
