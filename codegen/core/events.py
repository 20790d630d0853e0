"""Progress, reported by library functions as events; codegen.cli.console draws them (a rich progress bar
on a terminal, plain lines elsewhere). A library function takes `on_event` and never a console."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class Event:
    stage: str  # "build", "compile", "verify", "bench"
    kind: Literal["start", "advance"]
    done: int  # items finished in this stage so far
    total: int
    label: str = ""  # start: what the stage does ("" = nothing to show); advance: the item just finished
    status: str | None = None  # advance: how it ended, when worth a line ("built", "failed", "error"); None: a tick
    seconds: float | None = None
    error: str | None = None
    note: str | None = None  # advance: worth saying whatever the status (why a cache entry was built again)


OnEvent = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The default `on_event`: a library call without a console shows nothing."""
