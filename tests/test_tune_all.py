"""`tilegen tune --all` without a GPU: which specs it tunes (fresh ones skipped, every one on a device without a
lockfile), the order, one budget for the run (specs past it `not reached`), a failing spec that does not stop the
run, the summary it writes; and `tune --check`'s exit status on misses and stale entries."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_tune import SM90, _candidate, _entry, loaded

from codegen.cli.tuneall import FAILED, FRESH, NOT_REACHED, RESEARCH, TUNED, UNSERVED, to_tune, tune_all, write_summary
from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.lockfile import LockFile, lock_path, write_lockfile

VERSIONS = {"torch": "2.8.0", "runtime": "CUDA 12.8", "driver": "570.1"}  # what _entry records


def _named(text: str, name: str) -> str:
    return text.replace("- name: g\n", f"- name: {name}\n")


def _fresh_lock(root, ls):
    e = _entry(ls, spec=ls.spec.name, winner=_candidate(ls, 3, 0.01))
    write_lockfile(lock_path(root, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(e,)))


def test_fresh_specs_are_skipped_and_a_device_without_a_lockfile_tunes_every_searched_spec(tmp_path):
    ls = loaded(SM90)
    _fresh_lock(tmp_path, ls)
    assert to_tune(tmp_path, [ls], Target.SM_90, "NVIDIA H200", VERSIONS) == {}
    assert to_tune(tmp_path, [ls], Target.SM_90, "NVIDIA H100", VERSIONS) == {"g": UNSERVED}  # no H100 lockfile
    # another torch on the same device: the entry is stale, so the spec is tuned again
    assert to_tune(tmp_path, [ls], Target.SM_90, "NVIDIA H200", VERSIONS | {"torch": "2.9.0"}) == {"g": UNSERVED}
    # a spec without an sm_90 search block is never tuned on sm_90
    assert to_tune(tmp_path, [loaded()], Target.SM_90, "NVIDIA H100", VERSIONS) == {}


def test_an_entry_chosen_from_another_search_space_still_serves_and_is_searched_again(tmp_path):
    from codegen.generate.lockfile import canonical_space, check_lockfiles, space_sha256

    ls = loaded(SM90)  # sm_90 searches pipeline.stages [2, 3]
    wider = loaded(SM90.replace("pipeline: {stages: [2, 3]}", "pipeline: {stages: [2, 3, 4]}"))
    assert space_sha256(ls, Target.SM_90) == canonical_space({"pipeline.stages": [3, 2]})  # order does not count
    assert space_sha256(ls, Target.SM_90) != space_sha256(wider, Target.SM_90)
    e = _entry(ls, winner=_candidate(ls, 3, 0.01), space_sha256=space_sha256(ls, Target.SM_90))
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(e,)))
    assert to_tune(tmp_path, [ls], Target.SM_90, "NVIDIA H200", VERSIONS) == {}
    assert to_tune(tmp_path, [wider], Target.SM_90, "NVIDIA H200", VERSIONS) == {"g": RESEARCH}  # the space grew
    report = check_lockfiles(tmp_path, [wider], {"tilelang": "0.1.15"}, [Target.SM_90])
    assert [f.reason for f in report.research] == [
        "research: chosen from another search space than the spec's today (the entry still serves)"]
    assert [fe.shape for _, fe, _ in report.fresh] == [e.shape] and not report.stale and not report.clean
    # an entry that does not record its space (tuned before entries did) is not searched again for it
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(replace(e, space_sha256=None),)))
    assert to_tune(tmp_path, [wider], Target.SM_90, "NVIDIA H200", VERSIONS) == {}


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_one_budget_for_the_run_in_spec_order_and_a_failure_does_not_stop_it(tmp_path):
    specs = [loaded(_named(SM90, n)) for n in ("a", "b", "c", "d")]
    clock = _Clock()
    calls = []

    def tune_one(name, target, left_s):
        calls.append((name, left_s))
        clock.t += 40.0  # each spec takes 40 s of the 100 s budget
        if name == "b":
            raise TilegenError("b: every candidate failed verification on NVIDIA H200\nsecond line")
        shapes = [{"speedup_vs_hand": 1.21, "speedup_vs_baselines": {"eager": 1.02, "compile": 1.10}}]
        return SimpleNamespace(measured={"shapes": shapes})

    project = SimpleNamespace(root=tmp_path)
    rows = tune_all(project, None, budget_s=100.0, tune_one=tune_one, device="NVIDIA H200", device_versions=VERSIONS,
                    run_target=Target.SM_90, loaded=specs, clock=clock)
    assert [(r.spec, r.status) for r in rows] == [("a", TUNED), ("b", FAILED), ("c", TUNED), ("d", NOT_REACHED)]
    assert calls == [("a", 100.0), ("b", 60.0), ("c", 20.0)]  # each spec gets what is left of the one budget
    assert rows[0].speedup_vs_hand == 1.21 and rows[0].vs_best_torch == 1.02 and rows[0].best_torch == "eager"
    assert rows[1].note == "b: every candidate failed verification on NVIDIA H200"
    assert "again" in rows[3].note

    # resumable: with a fresh entry for "a", a second run starts at "b"
    _fresh_lock(tmp_path, specs[0])
    calls.clear()
    clock.t = 0.0
    rows = tune_all(project, None, budget_s=1000.0, tune_one=tune_one, device="NVIDIA H200", device_versions=VERSIONS,
                    run_target=Target.SM_90, loaded=specs, clock=clock)
    assert rows[0].status == FRESH and [c[0] for c in calls] == ["b", "c", "d"]


def test_a_spec_this_run_shows_cannot_fit_is_not_started_and_a_smaller_one_after_it_is():
    """A started spec builds, verifies every candidate and times one round whatever the budget: the run learns from
    each tuned spec what that fixed part costs per (kernel, shape), and starts a later spec only if it fits."""
    from codegen.cli.tune import _loaded
    from codegen.generate.lockfile import fam_shapes
    from codegen.generate.pipeline import Project

    softmax = next(ls for ls in _loaded(Project()) if ls.spec.name == "softmax_fp16_online")  # its 2 shapes
    assert softmax.spec.op == "softmax" and len(fam_shapes(softmax)) == 2
    specs = [*(loaded(_named(SM90, n)) for n in ("a", "b", "c", "d")), softmax]
    kernels = {"a": 5, "b": 20, "c": 2, "d": 4, "softmax_fp16_online": 3}
    clock, calls = _Clock(), []

    def tune_one(name, target, left_s):
        calls.append((name, left_s))
        clock.t += 5.0 * kernels[name] + 15.0
        # the first round ended 10 s into the measured stage, the last 25 s in: 15 s of later rounds, the rest
        # (5 s a kernel) is fixed
        return SimpleNamespace(measured={"shapes": [], "rounds": [{"elapsed_s": 10.0}, {"elapsed_s": 25.0}]})

    rows = tune_all(SimpleNamespace(root=Path("/nonexistent")), None, budget_s=100.0, tune_one=tune_one,
                    device="NVIDIA H200", device_versions=VERSIONS, run_target=Target.SM_90, loaded=specs,
                    clock=clock, kernels_of=lambda ls, target: kernels[ls.spec.name])
    # a takes 40 s; b's 20 kernels at 5 s need 100 s of the 60 left; c takes 25 s; d needs 20 s of the 35 left
    assert [c[0] for c in calls] == ["a", "c", "d"]
    assert [(r.spec, r.status) for r in rows] == [("a", TUNED), ("b", NOT_REACHED), ("c", TUNED), ("d", TUNED),
                                                  ("softmax_fp16_online", NOT_REACHED)]
    assert rows[1].note == ("needs about 100 s to verify and time its 20 kernel shapes once (this run's gemm rate), "
                            "60 s left: run `tilegen tune --all` again")
    # without measured rounds (a failure, a fake) nothing is learnt and every spec is started while budget is left
    calls.clear()
    clock.t = 0.0
    rows = tune_all(SimpleNamespace(root=Path("/nonexistent")), None, budget_s=150.0,
                    tune_one=lambda n, t, left: (calls.append(n), setattr(clock, "t", clock.t + 30.0),
                                                 SimpleNamespace(measured={"shapes": []}))[-1],
                    device="NVIDIA H200", device_versions=VERSIONS, run_target=Target.SM_90, loaded=specs,
                    clock=clock, kernels_of=lambda ls, target: kernels[ls.spec.name])
    assert calls == ["a", "b", "c", "d", "softmax_fp16_online"]
    # an op not seen yet is held to the cheapest rate of the run: softmax's 3 kernels x 2 shapes at 5 s need 30 s
    calls.clear()
    clock.t = 0.0
    rows = tune_all(SimpleNamespace(root=Path("/nonexistent")), None, budget_s=69.0, tune_one=tune_one,
                    device="NVIDIA H200", device_versions=VERSIONS, run_target=Target.SM_90,
                    loaded=[specs[0], softmax], clock=clock, kernels_of=lambda ls, target: kernels[ls.spec.name])
    assert calls == [("a", 69.0)] and rows[1].status == NOT_REACHED
    assert "needs about 30 s to verify and time its 6 kernel shapes once (the cheapest rate of this run)" in rows[1].note


def test_specs_no_entry_serves_are_tuned_before_those_whose_entries_are_searched_again(tmp_path):
    """A short window goes first to shapes that run their hand configuration: a spec with a fresh entry chosen from
    an older search space (research: it still serves) waits until every spec without one is tuned."""
    from codegen.generate.lockfile import space_sha256

    narrow = loaded(_named(SM90, "a"))
    specs = [loaded(_named(SM90.replace("pipeline: {stages: [2, 3]}", "pipeline: {stages: [2, 3, 4]}"), "a")),
             *(loaded(_named(SM90, n)) for n in ("b", "c"))]
    e = _entry(narrow, spec="a", winner=_candidate(narrow, 3, 0.01), space_sha256=space_sha256(narrow, Target.SM_90))
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(e,)))
    assert to_tune(tmp_path, specs, Target.SM_90, "NVIDIA H200", VERSIONS) == {"a": RESEARCH, "b": UNSERVED,
                                                                               "c": UNSERVED}
    clock, calls = _Clock(), []

    def tune_one(name, target, left_s):
        calls.append(name)
        clock.t += 40.0
        return SimpleNamespace(measured={"shapes": []})

    rows = tune_all(SimpleNamespace(root=tmp_path), None, budget_s=100.0, tune_one=tune_one, device="NVIDIA H200",
                    device_versions=VERSIONS, run_target=Target.SM_90, loaded=specs, clock=clock)
    assert calls == ["b", "c", "a"]
    assert [(r.spec, r.status) for r in rows] == [("a", TUNED), ("b", TUNED), ("c", TUNED)]  # the spec set's order
    calls.clear()
    clock.t = 0.0
    rows = tune_all(SimpleNamespace(root=tmp_path), None, budget_s=50.0, tune_one=tune_one, device="NVIDIA H200",
                    device_versions=VERSIONS, run_target=Target.SM_90, loaded=specs, clock=clock)
    assert calls == ["b", "c"] and rows[0].status == NOT_REACHED


def test_a_target_the_gpu_does_not_run_is_refused(tmp_path):
    with pytest.raises(TilegenError, match="cannot be measured here"):
        tune_all(SimpleNamespace(root=tmp_path), [Target.GFX942], budget_s=10, tune_one=None, device="NVIDIA H200",
                 device_versions=VERSIONS, run_target=Target.SM_90, loaded=[])


def test_the_summary_is_written_as_json_and_markdown(tmp_path):
    from codegen.cli.tuneall import TuneAllRow

    rows = [TuneAllRow(spec="a", target=Target.SM_90, status=TUNED, shapes=2, seconds=12.0, speedup_vs_hand=1.1,
                       vs_best_torch=0.98, best_torch="eager")]
    paths = write_summary(tmp_path, Target.SM_90, "NVIDIA H200", rows, 600.0, 12.3)
    doc = json.loads(paths[0].read_text())
    assert doc["rows"][0]["status"] == "tuned" and doc["device"] == "NVIDIA H200"
    md = paths[1].read_text()
    assert "| a | sm_90 | tuned | 2 | 12 | 1.100x | 0.980x | eager |" in md


def test_tune_check_lists_untuned_shapes_and_fails_only_on_stale_entries_or_with_strict(tmp_path):
    from typer.testing import CliRunner

    from codegen.cli.main import app

    (tmp_path / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "x.yaml").write_text(SM90, encoding="utf-8")
    runner = CliRunner()

    def check(*extra):
        return runner.invoke(app, ["--project", str(tmp_path), "tune", "--check", *extra])

    untuned = check()  # searched on gfx942 and sm_90, tuned on neither: listed, not an error
    assert untuned.exit_code == 0, untuned.output
    assert "miss: no lockfile for this target" in untuned.output and "not tuned yet" in untuned.output
    assert check("--strict").exit_code == 1
    ls = loaded(SM90)
    stale = _entry(ls, spec="g", versions={"tilelang": "0.0.1"}, winner=_candidate(ls, 3, 0.01))
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(stale,)))
    result = check()
    assert result.exit_code == 1 and "stale: versions changed: tilelang 0.0.1" in result.output
    # an entry chosen from a space the spec no longer searches: listed, not an error unless --strict
    moved = _entry(ls, spec="g", winner=_candidate(ls, 3, 0.01), space_sha256="0" * 64)
    write_lockfile(lock_path(tmp_path, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(moved,)))
    result = check()
    assert result.exit_code == 0 and "research: chosen from another search space" in result.output, result.output
    assert "1 entry chosen from another search space than the spec's today, still serving" in result.output
    assert check("--strict").exit_code == 1


def test_tune_merge_brings_a_lockfile_measured_elsewhere_into_the_project(tmp_path):
    """Two runs measured apart (two machines, two copies of the project): --merge unions their entries into the
    project's lockfile of their target and device, the later file winning a shape both have; a file that is not
    a valid lockfile stops the merge before anything is written."""
    import json
    from dataclasses import replace

    from typer.testing import CliRunner

    from codegen.cli.main import app
    from codegen.generate.lockfile import read_lockfile

    (tmp_path / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "x.yaml").write_text(SM90, encoding="utf-8")
    ls = loaded(SM90)
    a = _entry(ls, spec="g", winner=_candidate(ls, 3, 0.02))
    b = replace(a, shape=(512, 256, 256))
    a_faster = replace(a, winner=_candidate(ls, 3, 0.01))
    first, second, bad = tmp_path / "run1.json", tmp_path / "run2.json", tmp_path / "bad.json"
    write_lockfile(first, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(a, b)))
    write_lockfile(second, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(a_faster,)))
    bad.write_text(json.dumps({"format": 1}), encoding="utf-8")
    runner = CliRunner()

    def merge(*files):
        return runner.invoke(app, ["--project", str(tmp_path), "tune", *(x for f in files for x in ("--merge", str(f)))])

    mine = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    refused = merge(first, bad)
    assert refused.exit_code == 1 and "bad.json" in refused.output and not mine.exists()
    result = merge(first, second)
    assert result.exit_code == 0, result.output
    lock = read_lockfile(mine, target=Target.SM_90)
    assert sorted((e.shape, e.winner.time_ms) for e in lock.entries) == [(a.shape, 0.01), (b.shape, 0.02)]
    assert "3 entries merged, 2 in all" in result.output
    again = merge(second)
    assert again.exit_code == 0 and "(unchanged)" in again.output
    assert runner.invoke(app, ["--project", str(tmp_path), "tune", "g", "--merge", str(first)]).exit_code == 2


def test_tune_merge_keeps_the_later_measurement(tmp_path):
    """Two copies of the project each tuned one spec and each carries the other's entries as they were when it
    was copied: merged in either order, every shape keeps its latest measurement. An entry that records no time
    (a lockfile from before `measured_at`) gives way to one that does; two that record none: the later file's."""
    from dataclasses import replace

    from typer.testing import CliRunner

    from codegen.cli.main import app
    from codegen.generate.lockfile import read_lockfile

    (tmp_path / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "x.yaml").write_text(SM90, encoding="utf-8")
    ls = loaded(SM90)
    old_a = _entry(ls, spec="g", winner=_candidate(ls, 3, 0.03))
    old_b = replace(old_a, shape=(512, 256, 256))
    new_a = replace(old_a, winner=_candidate(ls, 3, 0.01), measured_at="2026-12-03T19:02:11Z")
    new_b = replace(old_b, winner=_candidate(ls, 3, 0.02), measured_at="2026-12-03T19:20:05Z")
    copy_a, copy_b = tmp_path / "a.json", tmp_path / "b.json"
    write_lockfile(copy_a, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(new_a, old_b)))
    write_lockfile(copy_b, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(old_a, new_b)))
    runner = CliRunner()
    mine = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    for order in ((copy_a, copy_b), (copy_b, copy_a)):
        mine.unlink(missing_ok=True)
        for f in order:  # one command per file, as they come back from the device
            result = runner.invoke(app, ["--project", str(tmp_path), "tune", "--merge", str(f)])
            assert result.exit_code == 0, result.output
        assert "1 kept: measured later than the merged file's" in result.output
        lock = read_lockfile(mine, target=Target.SM_90)
        assert sorted((e.shape, e.winner.time_ms, e.measured_at) for e in lock.entries) == [
            (new_a.shape, 0.01, new_a.measured_at), (new_b.shape, 0.02, new_b.measured_at)]
    # a later measurement of the same shape still replaces an earlier one
    newest = replace(new_a, winner=_candidate(ls, 3, 0.015), measured_at="2026-12-04T08:00:00Z")
    write_lockfile(copy_a, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(newest,)))
    assert runner.invoke(app, ["--project", str(tmp_path), "tune", "--merge", str(copy_a)]).exit_code == 0
    assert {e.shape: e.winner.time_ms for e in read_lockfile(mine, target=Target.SM_90).entries}[newest.shape] == 0.015


def test_a_retune_after_the_hand_configuration_changed_supersedes_the_old_entry(tmp_path):
    """The spec's hand configuration changed and the spec was tuned again: the entry of the old hand (which
    `tune --check` would only report stale) is dropped, by the tuner's write and by --merge, in either order of
    the files; without times to order them, both stay (the old one reported stale)."""
    from dataclasses import replace

    from typer.testing import CliRunner

    from codegen.cli.main import app
    from codegen.generate.lockfile import read_lockfile

    (tmp_path / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "x.yaml").write_text(SM90, encoding="utf-8")
    ls = loaded(SM90)
    now = _entry(ls, spec="g", measured_at="2026-12-07T03:32:48Z")
    before = replace(now, hand_hash="0" * 64, winner=_candidate(ls, 2, 0.03), measured_at="2026-12-06T21:44:53Z")
    other_shape = replace(before, shape=(512, 256, 256))  # another shape of the old hand: not superseded
    lock = LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(before, other_shape))
    def keys(lockfile):
        return sorted(e.key for e in lockfile.entries)

    assert keys(lock.merged([now])) == sorted([now.key, other_shape.key])  # what `tilegen tune` writes
    assert keys(lock.merged([now]).merged([before], keep_later=True)) == sorted([now.key, other_shape.key])
    both = tmp_path / "both.json"  # a device's copy carries the old entry beside the new one
    write_lockfile(both, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(before, now)))
    mine = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    result = CliRunner().invoke(app, ["--project", str(tmp_path), "tune", "--merge", str(both)])
    assert result.exit_code == 0, result.output
    assert "2 entries merged (1 superseded: the spec's hand configuration changed and was tuned later), 1 in all" \
        in result.output
    assert read_lockfile(mine, target=Target.SM_90).entries == (now,)
    untimed = replace(before, measured_at=None), replace(now, measured_at=None)
    assert keys(LockFile(target=Target.SM_90, device="NVIDIA H200").merged(list(untimed))) == sorted(e.key for e in untimed)


def test_a_lockfile_time_that_is_not_utc_is_refused(tmp_path):
    import json

    from codegen.generate.lockfile import read_lockfile

    ls = loaded(SM90)
    path = tmp_path / "x.json"
    write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200",
                                  entries=(_entry(ls, spec="g", measured_at="2026-12-03T19:02:11Z"),)))
    assert read_lockfile(path).entries[0].measured_at == "2026-12-03T19:02:11Z"
    doc = json.loads(path.read_text())
    doc["entries"][0]["measured_at"] = "2026-12-03 19:02:11+01:00"
    path.write_text(json.dumps(doc))
    with pytest.raises(TilegenError, match=r"entries\[0\]\.measured_at=.*must be a UTC time written "
                                           r"YYYY-MM-DDTHH:MM:SSZ \[lockfile_schema\]"):
        read_lockfile(path)
