"""One column definition per report. A `Column` names its header, reads its raw value from a row and
formats it; the terminal table (codegen.cli.console), the Markdown table and the CSV (codegen.run.report)
are all drawn from the same tuple, so a column is added, renamed or reformatted in one place."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal


def text(value: object) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True, kw_only=True)
class Column:
    header: str | None  # in the terminal and Markdown tables; None: a CSV-only column
    value: Callable[[Any], object]  # the raw value of a row (the CSV writes it as it is)
    fmt: Callable[[object], str] = text  # the cell's text in the terminal and Markdown tables
    csv: str | None = None  # the CSV field name; None: not in the CSV
    justify: Literal["left", "right"] = "left"
    style: Callable[[Any], str | None] | None = None  # terminal only (a rich style for the row's cell)

    def cell(self, row: object) -> str:
        return self.fmt(self.value(row))


def table_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    return tuple(c for c in columns if c.header is not None)


def markdown_table(columns: Sequence[Column], rows: Iterable[object]) -> list[str]:
    """Lines of a Markdown table: the header, the rule, one line per row."""
    cols = table_columns(columns)
    lines = ["| " + " | ".join(c.header for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.cell(r) for c in cols) + " |" for r in rows]
    return lines


def csv_text(columns: Sequence[Column], rows: Iterable[object]) -> str:
    cols = [c for c in columns if c.csv is not None]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[c.csv for c in cols])
    w.writeheader()
    for r in rows:
        w.writerow({c.csv: c.value(r) for c in cols})
    return buf.getvalue()
