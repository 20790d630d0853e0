"""Helpers the spec-error tests share: edit a spec text in one place, collect its validation errors."""

from __future__ import annotations

from pathlib import Path

from codegen.core.errors import SpecError, SpecErrors
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

FILE = "specs/x.yaml"
REPO_ROOT = Path(__file__).resolve().parents[1]  # this repository: a tilegen project (tilegen.toml)


def edit(text: str, old: str, new: str) -> str:
    """`text` with the one occurrence of `old` replaced, so a typo in a test cannot pass silently."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def errors(text: str, file: str = FILE) -> list[str]:
    """The error lines of validating `text` for every target it names; fails if it is valid."""
    try:
        build_instances(parse_specs(text, file))
    except SpecErrors as exc:
        lines = [str(e) for e in exc.errors]
    except SpecError as exc:
        lines = [str(exc)]
    else:
        raise AssertionError("the spec validated, but an error was expected")
    assert all("\n" not in line for line in lines)
    return lines


def check_rule_case(text: str, expected: str | None) -> None:
    """One row of a rule table: `expected` None -- the spec is legal (it builds instances); else `expected` is
    among its error lines."""
    if expected is None:
        assert build_instances(parse_specs(text, FILE))
        return
    found = errors(text)
    assert expected in found, found
