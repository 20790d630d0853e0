"""The family registry: each `op:` value -> the `Family` that provides it.

Built-in families are the packages here (gemm, softmax, norm, attention, rope). Families outside this package
register through the entry-point group `tilegen.families`, each entry point loading a `Family`:

    [project.entry-points."tilegen.families"]
    scale = "my_package.scale:FAMILY"

An op claimed twice, an entry point that does not load, or one that is not a `Family` is an error that
names the entry point. Load, rules, render, verify and bench look families up here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from types import MappingProxyType

from pydantic import BaseModel

from codegen.core.errors import TilegenError
from codegen.families import attention, gemm, norm, rope, softmax
from codegen.families.base import Family, InstanceBase, Numerics, Output

ENTRY_POINT_GROUP = "tilegen.families"
BUILTIN: tuple[Family, ...] = (gemm.FAMILY, softmax.FAMILY, norm.FAMILY, attention.FAMILY, rope.FAMILY)


class FamilyRegistryError(TilegenError):
    """A family from an entry point cannot be registered; the message names the entry point."""


def _from_entry_points() -> list[tuple[str, Family]]:
    found = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        where = f"entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP})"
        try:
            obj = ep.load()
        except Exception as exc:
            raise FamilyRegistryError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
        if not isinstance(obj, Family):
            raise FamilyRegistryError(f"{where}: loads a {type(obj).__name__}, not a codegen.families.Family")
        found.append((where, obj))
    return found


@cache
def registry() -> Mapping[str, Family]:
    """op -> Family, built-in families first, then entry points (sorted by name). Cached per process."""
    by_op: dict[str, Family] = {}
    origin: dict[str, str] = {}
    for where, fam in [(f"built-in family '{f.name}'", f) for f in BUILTIN] + _from_entry_points():
        for op in fam.specs:
            if op in by_op:
                raise FamilyRegistryError(f"{where}: op '{op}' is already provided by {origin[op]}")
            by_op[op], origin[op] = fam, where
    return MappingProxyType(by_op)


def all_families() -> tuple[Family, ...]:
    """Every registered family once, in registry order (built-ins first)."""
    unique: list[Family] = []
    for fam in registry().values():
        if not any(fam is f for f in unique):
            unique.append(fam)
    return tuple(unique)


def ops() -> tuple[str, ...]:
    """Every known `op:` value, sorted."""
    return tuple(sorted(registry()))


def family_for_op(op: str) -> Family:
    try:
        return registry()[op]
    except KeyError:
        raise TilegenError(f"unknown operator {op!r} (known: {', '.join(ops())})") from None


def family(inst: InstanceBase) -> Family:
    """The family of a kernel instance (by its `op`)."""
    return family_for_op(inst.op)


def spec_model(op: str) -> type[BaseModel]:
    return family_for_op(op).specs[op]


def derived_shapes(inst: InstanceBase) -> list[tuple[int, ...]]:
    """Edge shapes verified on top of the spec's (the family's numerics say which)."""
    return family(inst).numerics.derived_shapes(inst)


__all__ = [
    "ENTRY_POINT_GROUP",
    "Family",
    "FamilyRegistryError",
    "Numerics",
    "Output",
    "all_families",
    "derived_shapes",
    "family",
    "family_for_op",
    "ops",
    "registry",
    "spec_model",
]
