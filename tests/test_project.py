"""Which project tilegen works on (tilegen.toml / [tool.tilegen] / --project) and `tilegen init`."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectext import REPO_ROOT
from typer.testing import CliRunner

from codegen.cli.main import app
from codegen.generate.pipeline import Project
from codegen.spec.project import ProjectError, find_project_root, read_config, resolve_root

runner = CliRunner()


def test_this_repository_is_a_project():
    assert (REPO_ROOT / "tilegen.toml").is_file()
    assert find_project_root(REPO_ROOT / "codegen") == REPO_ROOT


def test_nearest_config_wins_and_pyproject_table_counts(tmp_path):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "a" / "inner"
    (inner / "deep").mkdir(parents=True)
    (outer / "tilegen.toml").write_text("", encoding="utf-8")
    assert find_project_root(inner / "deep") == outer.resolve()
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    assert find_project_root(inner / "deep") == outer.resolve()  # a pyproject without [tool.tilegen] is no project
    (inner / "pyproject.toml").write_text("[tool.tilegen]\nspecs = ['kernels']\n", encoding="utf-8")
    assert find_project_root(inner / "deep") == inner.resolve()
    assert read_config(inner.resolve()).specs == ["kernels"]


def test_no_config_means_the_current_folder(tmp_path):
    assert find_project_root(tmp_path) == tmp_path.resolve()
    assert read_config(tmp_path).specs == ["specs"]


@pytest.mark.parametrize("text, message", [
    ("specs = ['../elsewhere']", "specs.0: must be a path inside the project (relative, no '..') [config]"),
    ("specs = ['/etc']", "specs.0: must be a path inside the project (relative, no '..') [config]"),
    ("specs = ['a\\nb']", "specs.0: must be a non-empty path of printable ASCII characters [config]"),
    ("spec = ['x']", "spec: unknown key [config]"),
    ("specs = [", "tilegen.toml: "),
])
def test_bad_config_is_one_located_line(tmp_path, text, message):
    (tmp_path / "tilegen.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ProjectError) as info:
        read_config(tmp_path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_project_folder_is_refused(tmp_path):
    with pytest.raises(ProjectError, match="no such project folder"):
        resolve_root(tmp_path / "nope")


def test_init_writes_a_project_that_validates_and_generates(tmp_path):
    dest = tmp_path / "kernels"
    result = runner.invoke(app, ["init", str(dest)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (dest / "specs").iterdir()} == {"gemm.yaml", "softmax.yaml", "rmsnorm.yaml",
                                                            "layernorm.yaml", "attention.yaml",
                                                            "rope.yaml"}
    project = Project(root=dest.resolve())
    ops = {i.op for i in project.instances()}
    assert ops == {"gemm", "softmax", "rmsnorm", "layernorm", "attention", "rope"}
    for args in (["validate"], ["gen"], ["gen", "--check"]):
        result = runner.invoke(app, ["--project", str(dest), *args])
        assert result.exit_code == 0, (args, result.output)
    assert any((dest / "generated").rglob("*.py"))


def test_init_refuses_an_existing_project_and_writes_nothing(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "softmax.yaml").write_text("keep me", encoding="utf-8")
    result = runner.invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 1
    assert "already exists" in result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["softmax.yaml", "specs"]
    assert (tmp_path / "specs" / "softmax.yaml").read_text(encoding="utf-8") == "keep me"


def test_project_option_and_discovery_from_a_subfolder(tmp_path, monkeypatch):
    assert runner.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    sub = tmp_path / "specs"
    monkeypatch.chdir(sub)
    found = runner.invoke(app, ["validate"])
    assert found.exit_code == 0 and "6 spec(s)" in found.output
    monkeypatch.chdir(REPO_ROOT)
    named = runner.invoke(app, ["-C", str(tmp_path), "validate"])
    assert named.exit_code == 0 and "6 spec(s)" in named.output


def test_reports_and_lowered_sources_default_into_the_project(tmp_path, monkeypatch):
    assert runner.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    elsewhere = tmp_path.parent / f"{tmp_path.name}_cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = runner.invoke(app, ["-C", str(tmp_path), "lower", "softmax_fp16", "-t", "gfx942"])
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "build" / "lowered" / "gfx942").rglob("*.hip"))
    assert not any(elsewhere.iterdir())
    assert Project(root=tmp_path).reports_dir == tmp_path / "reports"


def test_a_path_inside_the_config_is_where_specs_are_read(tmp_path):
    assert runner.invoke(app, ["init", str(tmp_path)]).exit_code == 0
    (tmp_path / "specs").rename(tmp_path / "kernels")
    (tmp_path / "tilegen.toml").write_text('specs = ["kernels/softmax.yaml"]\n', encoding="utf-8")
    names = {i.name for i in Project(root=tmp_path).instances()}
    assert names == {"softmax_fp16"}
    assert Path(tmp_path / "kernels").is_dir()
