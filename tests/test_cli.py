"""The CLI through typer's CliRunner: exit codes, one line per error, never a traceback.

Commands that write run against a temporary copy of the project (specs/, generated/):
`codegen.cli._project` is pointed at it, so the committed tree is never touched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from spectext import REPO_ROOT
from typer.testing import CliRunner

from codegen import cli
from codegen.cli import app
from codegen.pipeline import Project

runner = CliRunner()

BAD_SPEC = """\
- name: broken
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  shapes: [{m: 256, n: 256, k: 256}]
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 96}
  pipeline: {num_stage: 2}
  tail: maybe
"""


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project's specs and generated files, and the CLI pointed at it (templates come
    with the codegen package)."""
    for d in ("specs", "generated"):
        shutil.copytree(REPO_ROOT / d, tmp_path / d)
    monkeypatch.setattr(cli, "_project", lambda: Project(root=tmp_path))
    return tmp_path


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_validate_ok():
    result = invoke("validate")
    assert result.exit_code == 0
    n = len(Project().instances())
    specs = len({i.name for i in Project().instances()})
    assert result.stdout == f"ok: {specs} spec(s), {n} kernel instance(s)\n"


def test_validate_bad_spec_prints_one_line_per_error(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_SPEC)
    result = invoke("validate", str(bad))
    assert result.exit_code == 1
    assert result.stdout == ""
    shown = bad.as_posix()  # outside the project root the path is shown as given
    assert result.stderr.splitlines() == [
        f"{shown}:6:14: pipeline.num_stage: unknown key (did you mean 'stages'?) [unknown_key]",
        f"{shown}:7:9: tail='maybe': Input should be 'none', 'predicated' or 'specialized' [enum]",
    ]


def test_validate_reports_target_rules_one_line_each(project: Path):
    (project / "specs" / "bad.yaml").write_text(
        BAD_SPEC.replace("{num_stage: 2}", "{stages: 2}").replace("tail: maybe", "targets: [gfx942, sm_90]")
    )
    result = invoke("validate")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "specs/bad.yaml:5:62: tiling.threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]",
        ("specs/bad.yaml:5:62: tiling.threads=96: 3 warps cannot share the 128 16x8x16 MMA tiles of a 128x128 block "
         "evenly on sm_90 [mma_shape]"),
    ]


def test_gen_check_is_clean_on_the_committed_tree():
    result = invoke("gen", "--check")
    assert result.exit_code == 0, result.output
    assert result.stdout == "generated/ is up to date\n"


def test_gen_writes_nothing_when_any_spec_is_bad(project: Path):
    shutil.rmtree(project / "generated")
    (project / "specs" / "zz_bad.yaml").write_text(BAD_SPEC)
    before = tree(project)
    result = invoke("gen")
    assert result.exit_code == 1
    assert "specs/zz_bad.yaml:6:14: pipeline.num_stage: unknown key" in result.stderr
    assert tree(project) == before
    assert not (project / "generated").exists()


def test_gen_leaves_existing_files_alone_when_any_spec_is_bad(project: Path):
    (project / "specs" / "zz_bad.yaml").write_text(BAD_SPEC)
    victim = next((project / "generated").rglob("*.py"))
    victim.write_text("# edited by hand\n")
    before = tree(project)
    assert invoke("gen").exit_code == 1
    assert tree(project) == before


def test_gen_into_an_empty_tree_then_check(project: Path):
    shutil.rmtree(project / "generated")
    result = invoke("gen")
    assert result.exit_code == 0, result.output
    n = len(Project().instances())
    assert result.stdout.splitlines()[-1] == f"{n + 1} written, 0 unchanged, 0 removed"  # + generated/workloads.json
    assert tree(project / "generated") == tree(REPO_ROOT / "generated")
    again = invoke("gen")
    assert again.stdout.splitlines() == [f"0 written, {n + 1} unchanged, 0 removed"]
    assert invoke("gen", "--check").exit_code == 0


def test_gen_check_names_stale_missing_and_extra_files(project: Path):
    files = sorted((project / "generated").rglob("*.py"))
    stale, missing = files[0], files[1]
    stale.write_text(stale.read_text() + "# drift\n")
    missing.unlink()
    extra = project / "generated" / "gfx942" / "gemm" / "old_kernel_gfx942_00000000.py"
    extra.write_text("# left over\n")
    before = tree(project)

    result = invoke("gen", "--check")
    assert result.exit_code == 1

    def rel(p: Path) -> str:
        return p.relative_to(project).as_posix()

    assert result.stderr.splitlines() == [
        f"{rel(stale)}: stale",
        f"{rel(missing)}: missing",
        f"{rel(extra)}: not generated by any spec",
        "error: generated/ is out of date: run `tilegen gen`",
    ]
    assert tree(project) == before  # --check writes nothing

    fixed = invoke("gen")
    assert fixed.exit_code == 0
    assert f"removed {rel(extra)}" in fixed.stdout
    assert invoke("gen", "--check").exit_code == 0


def test_list_json_has_one_row_per_instance():
    result = invoke("list", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    instances = Project().instances()
    assert len(rows) == len(instances)
    assert len({r["uri"] for r in rows}) == len(rows)
    assert {(r["name"], r["target"]) for r in rows} == {(i.name, i.target.value) for i in instances}
    for r in rows:
        assert r["file"] == f"generated/{r['target']}/{r['op']}/{r['uri']}.py"
        assert (REPO_ROOT / r["file"]).is_file()


def test_list_json_filtered_by_target():
    rows = json.loads(invoke("list", "--json", "--target", "sm_90").stdout)
    assert rows and {r["target"] for r in rows} == {"sm_90"}


def test_new_gemm_writes_a_valid_spec_and_refuses_to_overwrite(project: Path):
    result = invoke("new", "gemm", "my_gemm")
    assert result.exit_code == 0, result.output
    path = project / "specs" / "my_gemm.yaml"
    assert path.is_file()
    text = path.read_text()
    assert invoke("validate", str(path)).exit_code == 0
    assert invoke("validate").exit_code == 0  # and it sits with the other specs without a clash

    again = invoke("new", "gemm", "my_gemm")
    assert again.exit_code == 1
    assert "already exists" in again.stderr
    assert path.read_text() == text


@pytest.mark.parametrize("name", ["../x", "a/b", "class", "Gemm"])
def test_new_gemm_refuses_bad_names(project: Path, name: str):
    before = tree(project)
    result = invoke("new", "gemm", name)
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: name={name!r}: ")
    assert tree(project) == before
    assert not (project.parent / "x.yaml").exists()


@pytest.mark.parametrize(
    "args", [["frobnicate"], ["validate", "--bogus"], ["gen", "--target", "gfx90a"], ["new", "conv", "x"]],
    ids=["unknown-command", "unknown-option", "bad-choice", "unknown-subcommand"],
)
def test_usage_errors_exit_2(args):
    result = invoke(*args)
    assert result.exit_code == 2
