"""Domain errors. Each carries a one-line message naming file:line:col, the field path and the rule."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Location:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class TilegenError(Exception):
    """Any error caused by user input or a failed check; the CLI prints it as one line, exit 1."""


class SpecError(TilegenError):
    def __init__(self, location: Location | str, message: str, rule: str | None = None):
        self.location = location
        self.rule = rule
        suffix = f" [{rule}]" if rule else ""
        super().__init__(f"{location}: {message}{suffix}")


class SpecErrors(TilegenError):
    """Several independent spec errors, reported together (one line each)."""

    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))
