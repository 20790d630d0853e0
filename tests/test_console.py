"""The library computes, the console shows: library calls take no console and report progress as
events; one column definition per report feeds the terminal table, the Markdown table and the CSV."""

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from codegen.build import compile as build_mod
from codegen.build.compile import BUILD_COLUMNS, BuildOptions, BuildReport, BuildResult
from codegen.build.doctor import DOCTOR_COLUMNS, Check, DoctorReport
from codegen.cli.console import LIST_COLUMNS, UI, rich_table
from codegen.core.columns import csv_text, markdown_table, table_columns
from codegen.core.events import Event
from codegen.core.hardware import Target
from codegen.generate.pipeline import Project
from codegen.run import gpurun
from codegen.run import report as report_mod
from codegen.run.mainjob import STEP_COLUMNS, MainJobReport, Step
from tests.test_gpurun import FILES, GPU, fakes  # noqa: F401 -- the fixture

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reports" / "h200"


def _rich_cells(table) -> tuple[list[str], list[list[str]]]:
    headers = [str(c.header) for c in table.columns]
    rows = [list(r) for r in zip(*([cell.plain for cell in c._cells] for c in table.columns), strict=True)]
    return headers, rows


def _markdown_cells(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    split = [[cell.strip() for cell in line[2:-2].split(" | ")] for line in lines]
    assert set(lines[1]) == {"|", "-"}
    return split[0], split[2:]


def _same_in_rich_and_markdown(columns, rows) -> list[str]:
    headers, cells = _rich_cells(rich_table("t", columns, rows))
    md_headers, md_cells = _markdown_cells(markdown_table(columns, rows))
    assert headers == md_headers == [c.header for c in table_columns(columns)]
    assert cells == md_cells and len(cells) == len(rows)
    return headers


def _verify_doc() -> dict:
    return json.loads((H200 / "verify.json").read_text())


def _bench_doc() -> dict:
    return json.loads((H200 / "bench.json").read_text())


# ---- one column definition, every view -----------------------------------------------------------

def test_verify_cases_columns_feed_the_terminal_and_verify_md():
    cases = _verify_doc()["cases"][:20]
    headers = _same_in_rich_and_markdown(report_mod.VERIFY_COLUMNS, cases)
    assert headers[:3] == ["kernel", "run on", "shape"]


def test_verify_summary_columns_feed_the_terminal_and_markdown():
    report = gpurun.VerifyReport(gpu={"name": "H200"}, cases=_verify_doc()["cases"][:40])
    tally = report.tally()
    headers = _same_in_rich_and_markdown(report_mod.VERIFY_SUMMARY_COLUMNS, tally)
    assert headers == ["kernel", "verified", "failed", "vacuous", "error", "skipped", "note"]
    assert sum(sum(t.counts.values()) for t in tally) == 40


def test_bench_columns_feed_the_terminal_bench_md_and_bench_csv():
    report = gpurun.BenchReport(gpu={"name": "H200"}, copy_gbps=1.0, flush_bytes=1, rows=_bench_doc()["rows"])
    rows = report_mod.bench_rows(report)
    _same_in_rich_and_markdown(report_mod.BENCH_COLUMNS, rows)
    text = csv_text(report_mod.BENCH_COLUMNS, rows)
    assert tuple(text.splitlines()[0].split(",")) == report_mod.CSV_FIELDS


def test_build_columns_feed_the_terminal_and_markdown():
    rows = [BuildResult(uri="k_a", name="k", target=Target.GFX942, shape=(64, 128), status="failed", error="x"),
            BuildResult(uri="k_b", name="k", target=Target.SM_90, shape=(1, 2), status="cached", seconds=0.5)]
    headers = _same_in_rich_and_markdown(BUILD_COLUMNS, rows)
    assert headers == ["instance", "shape", "target", "kernels", "regs", "LDS", "occupancy", "spills", "MFMA/WGMMA",
                       "status", "s"]


def test_doctor_step_and_list_columns_feed_the_terminal_and_markdown():
    checks = (Check(name="Python", status="ok", detail="3.11"), Check(name="clang", status="missing", detail="no",
                                                                      fix="get it", needed_by=(Target.GFX942,)))
    assert _same_in_rich_and_markdown(DOCTOR_COLUMNS, checks) == ["check", "status", "details", "to get it"]
    steps = (Step(name="validate", status="ok", detail="1 spec"), Step(name="bench", status="skipped", detail="no GPU"))
    assert _same_in_rich_and_markdown(STEP_COLUMNS, steps) == ["step", "status", "time", "detail"]
    _same_in_rich_and_markdown(LIST_COLUMNS, Project().rendered(targets=[Target.SM_90])[:3])


def test_committed_h200_reports_are_rebuilt_byte_for_byte_from_their_json():
    """report.py writes verify.md, bench.md and bench.csv from the column definitions; the committed
    reports (written before the columns were shared) come out the same."""
    assert report_mod.verify_markdown(_verify_doc()) == (H200 / "verify.md").read_text()
    doc = _bench_doc()
    assert report_mod.bench_markdown(doc) == (H200 / "bench.md").read_text()
    report = gpurun.BenchReport(gpu=doc["gpu"], copy_gbps=doc["copy_gbps"], flush_bytes=doc["flush_bytes"], rows=doc["rows"])
    with open(H200 / "bench.csv", newline="") as f:
        assert csv_text(report_mod.BENCH_COLUMNS, report_mod.bench_rows(report)) == f.read()


# ---- library calls without a console, progress as events ------------------------------------------

def test_verify_all_without_a_console_reports_progress_events(fakes):  # noqa: F811
    events: list[Event] = []
    report = gpurun.verify_all(FILES, GPU, jobs=1, timeout_s=60, on_event=events.append)
    assert not report.ok
    by_stage = {s: [e for e in events if e.stage == s] for s in ("compile", "verify")}
    for stage, evs in by_stage.items():
        assert evs[0].kind == "start" and evs[0].label == stage
    assert [e.done for e in by_stage["verify"][1:]] == list(range(1, by_stage["verify"][0].total + 1))
    done = [e.done for e in by_stage["compile"][1:]]  # seen by the main thread while cases run: some counts merge
    assert done == sorted(set(done)) and done[-1] == by_stage["compile"][0].total
    errors = [e for e in by_stage["verify"] if e.status == "error"]
    assert errors and all(e.error for e in errors)


class _FakeToolchain:
    def fingerprint(self) -> dict:
        return {"fake": 1}

    def describe(self) -> dict:
        return {"compiler": "fake"}


def test_build_files_without_a_console_reports_progress_events(tmp_path, monkeypatch):
    def fake_pool(misses, n_jobs, cache, root, done, ray=None):
        for job, note in misses:
            worker = build_mod.WorkerResult(key=job.key, error="fake compiler said no", lower_s=0.1)
            done(job, build_mod._result(job, None, root, status="failed", seconds=0.1, worker=worker, note=note))

    monkeypatch.setattr(build_mod, "find_toolchain", lambda target, root, gfx942_env=None: _FakeToolchain())
    monkeypatch.setattr(build_mod, "_run_pool", fake_pool)
    files = [f for f in Project().rendered(targets=[Target.GFX942]) if f.instance.name == "softmax_fp16_two_pass"]
    events: list[Event] = []
    report = build_mod.build_files(files, ROOT, BuildOptions(cache_dir=tmp_path, first_shape=True), on_event=events.append)
    assert isinstance(report, BuildReport) and not report.ok
    assert events[0] == Event(stage="build", kind="start", done=0, total=len(files),
                              label=f"building {len(files)} of {len(files)} (rest cached)")
    assert [(e.done, e.status, e.error) for e in events[1:]] == [
        (n, "failed", "fake compiler said no") for n in range(1, len(files) + 1)]


# ---- the console draws events and reports -----------------------------------------------------------

def test_gpu_stages_are_plain_lines_when_not_a_terminal():
    text = StringIO()
    console = Console(file=text, width=200)
    with UI(console, console) as ui:
        ui.event(Event(stage="compile", kind="start", done=0, total=2, label="compile"))
        ui.event(Event(stage="compile", kind="advance", done=1, total=2))
        ui.event(Event(stage="verify", kind="start", done=0, total=2, label="verify"))
        ui.event(Event(stage="verify", kind="advance", done=1, total=2, label="k 1x2", status="error", error="boom"))
        ui.event(Event(stage="verify", kind="advance", done=2, total=2, label="k 3x4"))
    assert text.getvalue().splitlines() == ["compile", "verify", "[1/2] error k 1x2: boom"]


@pytest.mark.parametrize("terminal", [False, True])
def test_a_builds_note_is_shown_on_a_terminal_and_in_plain_lines(terminal):
    """Why an entry was built again (a corrupt cache entry) is said as it happens, not only in --json."""
    text = StringIO()
    console = Console(file=text, width=200, force_terminal=terminal, highlight=False, color_system=None)
    note = "rebuilt: the cache entry was corrupt (kernel.s is 10 B, manifest says 20 B)"
    with UI(console, console) as ui:
        ui.event(Event(stage="build", kind="start", done=0, total=2, label="building 1 of 2 (rest cached)"))
        ui.event(Event(stage="build", kind="advance", done=1, total=2, label="k 1x2 gfx942", status="cached"))
        ui.event(Event(stage="build", kind="advance", done=2, total=2, label="k 3x4 gfx942", status="built",
                       seconds=1.0, note=note))
    lines = [line.rsplit("\x1b[2K", 1)[-1] for line in text.getvalue().splitlines()]  # past a bar's redraws
    assert f"note: k 3x4 gfx942: {note}" in lines
    assert "k 1x2" not in text.getvalue()


@pytest.mark.parametrize("terminal", [False, True])
def test_show_returns_the_exit_code_and_draws_the_table(terminal):
    text = StringIO()
    console = Console(file=text, width=200, force_terminal=terminal, highlight=False, color_system=None)
    ui = UI(console, console)
    ok = MainJobReport(steps=(Step(name="gen", status="ok", detail="1 written"),))
    failed = MainJobReport(steps=(Step(name="build", status="failed", detail="targets gfx942"),))
    assert ui.show(ok) == 0 and ui.show(failed) == 1
    doctor = DoctorReport(targets=(Target.GFX942,), checks=(Check(name="clang", status="missing", detail="no",
                                                                  fix="get it", needed_by=(Target.GFX942,)),))
    assert ui.show(doctor) == 1
    out = text.getvalue()
    assert "tilegen run" in out and "targets gfx942" in out
    assert out.rstrip().splitlines()[-1] == "not ready to build gfx942: clang (get it)"
