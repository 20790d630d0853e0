"""The console: every table and progress bar tilegen shows, drawn from the typed reports the library
returns (BuildReport, VerifyReport, BenchReport, DoctorReport, MainJobReport) and the progress events
it reports (codegen.core.events). Tables come from each report's column definition (codegen.core.columns),
the same one codegen.run.report writes Markdown and CSV from. Nothing here computes a result."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Self

from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from codegen.build.compile import BUILD_COLUMNS, BuildReport
from codegen.build.doctor import DOCTOR_COLUMNS, DoctorReport
from codegen.core.columns import Column, table_columns
from codegen.core.events import Event
from codegen.core.files import dump_json
from codegen.generate.render import RenderedFile
from codegen.run.gpurun import BenchReport, VerifyReport
from codegen.run.mainjob import STEP_COLUMNS, MainJobReport
from codegen.run.report import BENCH_COLUMNS, VERIFY_SUMMARY_COLUMNS, bench_rows

TABLE_WIDTH = 200  # a table's width when its stream is not a terminal (CI logs): not wrapped at 80 columns
UNBOUNDED = 1 << 20  # the width a table is measured at to see whether it fits the terminal unwrapped
LIST_INDENT = 4  # `tilegen list` on a narrow terminal: a kernel's details under its name


def _summary_cell(key: str) -> Column:
    return Column(header=key, value=lambda f: f.instance.summary()[key])


# the columns of `tilegen list` (a RenderedFile per row): the terminal table and the plain lines
LIST_COLUMNS: tuple[Column, ...] = (
    Column(header="uri", value=lambda f: f.uri),
    Column(header="op", value=lambda f: f.instance.op),
    Column(header="target", value=lambda f: f.instance.target.value),
    *(_summary_cell(key) for key in ("dtypes", "layout", "tiling", "threads", "schedule", "tail")),
    Column(header="LDS B", value=lambda f: f.instance.lds_bytes),
    Column(header="shapes", value=lambda f: len(f.instance.shapes)),
)


def rich_table(title: str, columns: Sequence[Column], rows: Iterable[object], *, fold: bool = False) -> Table:
    """The terminal table of a report: the columns with a header, cells as Markdown writes them."""
    cols = table_columns(columns)
    table = Table(title=title)
    for c in cols:
        table.add_column(c.header, justify=c.justify, overflow="fold" if fold else "ellipsis")
    for r in rows:
        table.add_row(*(Text(c.cell(r), style=(c.style(r) or "") if c.style else "") for c in cols))
    return table


def full_width(console: Console) -> Console:
    """Tables at full width in logs: a console that is not a terminal would wrap them at 80 columns."""
    return console if console.is_terminal else Console(file=console.file, width=TABLE_WIDTH, highlight=False)


class UI:
    """Draws on `out` (tables, results) and `err` (progress, failures, notes). `event` is the
    `on_event` callback of library calls: a progress bar on a terminal (gone when the report is
    shown), elsewhere plain lines: a stage's start, then one line per item that ended other than
    cached or fine. Failures and notes (why a cache entry was built again) are printed as they happen
    either way. Use it as a context manager: a bar left by an interrupted call is stopped on the way out."""

    def __init__(self, out: Console, err: Console):
        self.out = out
        self.err = err
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_progress()

    def stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.progress = None
        self.tasks = {}

    # ---- progress ----
    def event(self, e: Event) -> None:
        if e.kind == "start":
            if not e.label:
                return
            if not self.err.is_terminal:
                self.err.print(e.label, markup=False)
                return
            if self.progress is None:
                self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                         MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                         TimeRemainingColumn(), console=self.err, transient=True)
                self.progress.start()
            self.tasks[e.stage] = self.progress.add_task(e.label, total=e.total)
            return
        if self.progress is not None and e.stage in self.tasks:
            self.progress.update(self.tasks[e.stage], completed=e.done)
        if not self.err.is_terminal:
            if e.status not in (None, "cached"):
                line = f"[{e.done}/{e.total}] {e.status} {e.label}"
                line += f" ({e.seconds:.1f} s)" if e.seconds is not None else ""
                self.err.print(line + (f": {e.error}" if e.error else ""), markup=False)
        elif e.status in ("failed", "error"):
            self.err.print(f"{e.status}: {e.label}", markup=False)
        if e.note:  # on a terminal too, above the bar: why a cache entry was built again
            self.err.print(f"note: {e.label}: {e.note}", markup=False)

    # ---- reports ----
    def show(self, report: object, **kw) -> int:
        """Any report; returns the exit code it calls for."""
        for kind, method in ((BuildReport, self.show_build), (VerifyReport, self.show_verify),
                             (BenchReport, self.show_bench), (DoctorReport, self.show_doctor),
                             (MainJobReport, self.show_main_job)):
            if isinstance(report, kind):
                return method(report, **kw)
        raise TypeError(f"no view of {type(report).__name__}")

    def show_build(self, report: BuildReport, *, as_json: bool = False, root: Path | None = None) -> int:
        self.stop_progress()
        if as_json:
            sys.stdout.write(dump_json(report.documents(volatile=True)))
        else:
            title = f"{len(report.results)} build(s), {report.jobs} job(s), {report.wall_s:.1f} s"
            full_width(self.out).print(rich_table(title, BUILD_COLUMNS, report.sorted_results()))
        for r in report.results:  # the static analysis' findings ([vector_loads]): warnings, never failures
            for w in r.summary().get("warnings", []):
                self.err.print(f"warning: {r.uri} {'x'.join(map(str, r.shape))} {r.target}: {w}", markup=False)
            if r.hint:
                self.err.print(f"hint: {r.uri} {'x'.join(map(str, r.shape))}: {r.hint}", markup=False)
        for r in report.failed:
            self.err.print(f"error: {r.uri} {'x'.join(map(str, r.shape))} {r.target}: {r.error}"
                           + (f" (log: {r.log})" if r.log else ""), markup=False)
        for p in report.written:
            self.err.print(f"wrote {_rel(p, root)}", markup=False)
        counts = report.counts()
        self.err.print(f"{counts['built']} built, {counts['cached']} cached, {counts['failed']} failed "
                       f"in {report.wall_s:.1f} s", markup=False)
        return 0 if report.ok else 1

    def show_verify(self, report: VerifyReport, *, as_json: bool = False) -> int:
        self.stop_progress()
        if as_json:
            sys.stdout.write(json.dumps({"gpu": report.gpu, "cases": report.cases}, indent=1, sort_keys=True) + "\n")
        full_width(self.err).print(rich_table(f"verify on {report.gpu['name']}", VERIFY_SUMMARY_COLUMNS, report.tally()))
        self._written(report.written)
        return 0 if report.ok else 1

    def show_bench(self, report: BenchReport, *, as_json: bool = False) -> int:
        self.stop_progress()
        if as_json:
            sys.stdout.write(json.dumps({"gpu": report.gpu, "copy_gbps": report.copy_gbps, "rows": report.rows},
                                        indent=1, sort_keys=True) + "\n")
        title = f"bench on {report.gpu['name']} (copy {report.copy_gbps:.0f} GB/s)"
        full_width(self.err).print(rich_table(title, BENCH_COLUMNS, bench_rows(report)))
        for line in report.tuning:
            self.err.print(line, markup=False)
        self._written(report.written)
        return 0 if report.ok else 1

    def _written(self, paths: list[str]) -> None:
        if paths:
            self.err.print("reports: " + ", ".join(paths), markup=False)

    def show_doctor(self, report: DoctorReport) -> int:
        title = f"tilegen doctor: {', '.join(t.value for t in report.targets)}"
        self.out.print(rich_table(title, DOCTOR_COLUMNS, report.checks, fold=True))
        self.out.print(report.verdict(), markup=False)
        return 0 if report.ok else 1

    def show_main_job(self, report: MainJobReport) -> int:
        """The steps table (each step's own report was shown as it ended: `show` is run_main_job's on_report)."""
        self.stop_progress()
        full_width(self.out).print(rich_table(f"tilegen run ({report.seconds:.0f} s)", STEP_COLUMNS, report.steps))
        return 0 if report.ok else 1

    def show_list(self, files: list[RenderedFile], *, as_json: bool = False, names_only: bool = False) -> None:
        if as_json:
            rows = [f.instance.metadata(f.uri) | {"file": str(f.path)} for f in files]
            sys.stdout.write(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        elif names_only:  # what build, verify and bench take: whole, one a line, at any width
            sys.stdout.write("".join(f"{f.uri}\n" for f in files))
        elif not self.out.is_terminal:  # a pipe or a file: every cell in full, tab-separated, a header line first
            rows = [[c.header for c in LIST_COLUMNS]] + [[c.cell(f) for c in LIST_COLUMNS] for f in files]
            sys.stdout.write("".join("\t".join(row) + "\n" for row in rows))
        else:
            table = rich_table(f"{len(files)} kernel(s)", LIST_COLUMNS, files)
            if Measurement.get(self.out, self.out.options.update_width(UNBOUNDED), table).maximum <= self.out.width:
                self.out.print(table)
                return
            # too narrow for the table: each kernel's whole name on a line of its own (never cut; the terminal
            # wraps a name longer than the line), its other columns below it, indented and wrapped
            name, *rest = table_columns(LIST_COLUMNS)
            for f in files:
                self.out.print(Text(name.cell(f), style="bold"), soft_wrap=True)
                details = Text(", ".join(f"{c.header} {c.cell(f)}" for c in rest))
                self.out.print(Padding(details, (0, 0, 0, LIST_INDENT)), soft_wrap=False)


def _rel(path: Path, root: Path | None) -> str:
    if root is None:
        return str(path)
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
