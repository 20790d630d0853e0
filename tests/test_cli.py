"""The CLI through typer's CliRunner: exit codes, one line per error, never a traceback.

Commands that write run against a temporary copy of the project (specs/, generated/):
`codegen.cli.main._project` is pointed at it, so the committed tree is never touched.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from spectext import REPO_ROOT
from typer.testing import CliRunner

from codegen.cli import main as cli
from codegen.cli.main import app
from codegen.core import workers
from codegen.core.hardware import Target
from codegen.generate.pipeline import Project
from codegen.generate.starter import GEMM_STARTER
from codegen.run.gpu import precompile

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
    for d in ("specs", "generated", "tuned"):  # tuned/: the lockfiles gen reads
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


@pytest.mark.parametrize("blocked", ["workloads_folder", "generated_file", "module_folder"])
def test_gen_refuses_a_blocked_output_layout_before_writing_anything(project: Path, blocked):
    """A folder where gen writes a file, or a file where it writes a folder: one line naming it, exit 1, and the
    tree as it was (no module written before the refusal); a folder named like a stale module is not pruned."""
    shutil.rmtree(project / "generated")
    if blocked == "workloads_folder":
        (project / "generated" / "workloads.json").mkdir(parents=True)
        line = "error: cannot write generated/workloads.json: it is a folder (move it away; gen writes a file there)"
    elif blocked == "generated_file":
        (project / "generated").write_text("x\n")
        line = "error: cannot write generated/gfx942/attention: generated is not a folder (move it away; gen writes its files under it)"
    else:
        module = Project().rendered()[0].path
        (project / module).mkdir(parents=True)
        line = f"error: cannot write {module}: it is a folder (move it away; gen writes a file there)"
    before = tree(project)
    result = invoke("gen")
    assert (result.exit_code, result.stderr.splitlines()) == (1, [line])
    assert tree(project) == before
    if blocked == "module_folder":
        shutil.rmtree(project / module)
        stray = project / module.parent / "not_a_module.py"
        stray.mkdir()
        assert invoke("gen").exit_code == 0 and stray.is_dir()


def test_a_kernel_named_twice_is_selected_once_with_the_shapes_asked():
    """build/lower/verify NAME...: a name repeated, or a kernel named by its URI and by a spec, is one kernel (its
    shapes those of every spec named, or all of them where its URI is named)."""
    from codegen.core.hardware import Target

    p = Project()
    shared = next(f for f in p.rendered(targets=[Target.SM_90]) if len(set(f.names)) > 1)
    first, second = sorted(set(shared.names))[:2]

    def picked(*names):
        return [(f.uri, f.instance.shapes) for f in p.select(list(names), all_=False, targets=[Target.SM_90])
                if f.uri == shared.uri]

    one = picked(first)
    assert picked(first, first) == one and len(one) == 1
    assert picked(first, second) == [(shared.uri, shared.for_specs({first, second}).instance.shapes)]
    assert picked(first, shared.uri) == picked(shared.uri) == [(shared.uri, shared.instance.shapes)]


def test_a_name_of_other_targets_says_so(project: Path):
    result = invoke("build", "rope_fp16_llama3_8b", "-t", "gfx950")
    assert (result.exit_code, result.stderr.strip()) == (
        1, "error: 'rope_fp16_llama3_8b' has no kernel for gfx950 (its targets: gfx942, sm_90)")
    result = invoke("build", "no_such_kernel", "-t", "sm_90")
    assert result.stderr.strip() == "error: no kernel named 'no_such_kernel' (see `tilegen list`)"


@pytest.mark.parametrize("command", ["verify", "bench", "tune", "profile"])
def test_timeout_is_a_finite_number_of_seconds(project: Path, command):
    for value in ("0", "-1", "nan", "inf"):
        result = invoke(command, "rope_fp16_llama3_8b", "--timeout", value)
        assert result.exit_code == 2 and "must be a finite number of seconds > 0" in result.output, (value, result.output)


def test_a_file_system_error_is_one_line(project: Path, tmp_path: Path):
    """An --out that is a file: the OS error in one line, exit 1, never a traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    result = invoke("lower", "rope_fp16_llama3_8b", "-t", "sm_90", "--out", str(blocker))
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: Not a directory: {blocker}/sm_90/rope_fp16_d128"), line


def test_gen_into_an_empty_tree_then_check(project: Path):
    shutil.rmtree(project / "generated")
    result = invoke("gen")
    assert result.exit_code == 0, result.output
    n = len(Project().rendered())  # the hand configurations and the tuned ones (tuned/)
    assert result.stdout.splitlines()[-1] == f"{n + 1} written, 0 unchanged, 0 removed"  # + generated/workloads.json
    assert tree(project / "generated") == tree(REPO_ROOT / "generated")
    again = invoke("gen")
    assert again.stdout.splitlines() == [f"0 written, {n + 1} unchanged, 0 removed"]
    assert ("gemv_fp16_decode 1x4096x4096 on sm_90: tuned on NVIDIA H200 -> gemv_fp16_nt_16x8x256_t256_u8_sm90_3d9e5b"
            in again.stderr.splitlines())  # the committed lockfile's winner, said beside the output
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
    kernels = Project().rendered()  # the hand configurations and the tuned ones (tuned/)
    assert len(rows) == len(kernels) >= len(instances)
    assert len({r["uri"] for r in rows}) == len(rows)
    # one row per kernel: a kernel two specs ask for (gemm_fp16_ragged_pred and gemm_fp16_ragged_pred_oddk) is one
    # row, named by the first; every instance is one of some kernel's specs
    named = {(s.name, f.instance.target.value) for f in kernels for s in f.specs}
    assert {(r["name"], r["target"]) for r in rows} <= named == {(i.name, i.target.value) for i in instances}
    assert len(named) > len({(r["name"], r["target"]) for r in rows})  # the shared kernel is listed once
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


@pytest.mark.parametrize("command", ["build", "lower", "verify", "bench"])
def test_no_kernel_named_is_a_usage_error(command):
    result = invoke(command)
    assert result.exit_code == 2
    assert result.stderr == "error: name a kernel (spec name or URI) or pass --all\n"


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_project", interrupted)
    result = invoke("validate")
    assert (result.exit_code, result.stdout, result.stderr) == (130, "", "interrupted\n")


# ---- hostile input ------------------------------------------------------------------------------

def test_a_spec_file_name_holding_code_is_refused_by_every_command(project: Path, monkeypatch):
    """The file name that once went into the generated header unescaped, where line 2 ran on `lower`."""
    monkeypatch.chdir(project)  # where the injected code would create PWNED
    (project / "specs" / 'zz_x\nopen("PWNED","w")\n#.yaml').write_text(GEMM_STARTER.format(name="zz_x"))
    before = tree(project)
    shown = 'specs/zz_x\\nopen("PWNED","w")\\n#.yaml'  # the file name as errors show it: escaped
    for args in (["validate"], ["gen"], ["gen", "--check"], ["lower", "zz_x", "--first-shape"],
                 ["build", "zz_x", "--first-shape"]):
        result = invoke(*args)
        assert result.exit_code == 1, args
        assert result.stderr.splitlines() == [shown + ": spec file name holds '\\n' (no control or non-printable "
                                              "character, quote or backslash may appear in one): rename the file "
                                              "[file_name]"], args
    assert tree(project) == before
    assert not (project / "PWNED").exists()


def test_gen_removes_and_check_reports_what_an_interrupted_write_left(project: Path):
    folder = project / "generated" / "gfx942" / "gemm"
    module = next(folder.glob("*.py"))
    left = folder / f".{module.name}.k3x9q_1a.tmp"  # the name codegen.core.files.write_text_atomic gives its temp file
    left.write_bytes(b"")
    rel = left.relative_to(project).as_posix()

    check = invoke("gen", "--check")
    assert check.exit_code == 1
    assert check.stderr.splitlines() == [f"{rel}: temporary file left by an interrupted write",
                                         "error: generated/ is out of date: run `tilegen gen`"]
    assert left.exists()  # --check writes nothing

    fixed = invoke("gen")
    assert fixed.exit_code == 0
    assert fixed.stdout.splitlines()[-2:] == [f"removed {rel}", f"0 written, {len(Project().rendered()) + 1} unchanged, 1 removed"]
    assert not left.exists()
    assert invoke("gen", "--check").exit_code == 0


def test_new_gemm_refuses_a_name_the_spec_set_already_has(project: Path, tmp_path: Path):
    before = tree(project)
    result = invoke("new", "gemm", "gemm_fp16_nt")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: name='gemm_fp16_nt': already used by the spec at specs/gemm_llm.yaml:")
    assert line.endswith("; pick another name [duplicate_name]")
    elsewhere = invoke("new", "gemm", "softmax_fp16_online", "--out", str(tmp_path / "elsewhere.yaml"))
    assert elsewhere.exit_code == 1 and "already used by the spec at specs/softmax.yaml:" in elsewhere.stderr
    assert not (tmp_path / "elsewhere.yaml").exists()
    # a file with other errors still holds its names
    (project / "specs" / "zz_bad.yaml").write_text(BAD_SPEC)
    broken = invoke("new", "gemm", "broken")
    assert broken.exit_code == 1
    assert broken.stderr == ("error: name='broken': already used by the spec at specs/zz_bad.yaml:1:9; "
                             "pick another name [duplicate_name]\n")
    (project / "specs" / "zz_bad.yaml").unlink()
    assert tree(project) == before


def test_list_into_a_pipe_prints_every_cell_in_full():
    result = invoke("list")  # CliRunner's stdout is not a terminal
    assert result.exit_code == 0
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert rows[0] == ["uri", "op", "target", "dtypes", "layout", "tiling", "threads", "schedule", "tail", "LDS B",
                       "shapes"]
    files = Project().rendered()
    assert [r[0] for r in rows[1:]] == [f.uri for f in files]
    for row, f in zip(rows[1:], files, strict=True):
        assert row[1:4] == [f.instance.op, f.instance.target.value, f.instance.summary()["dtypes"]]
        assert row[9:] == [str(f.instance.lds_bytes), str(len(f.instance.shapes))]
    assert "…" not in result.stdout


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
def test_tilelang_log_lines_only_with_verbose(verbose: bool, tmp_path: Path, monkeypatch, capfd):
    """`--verbose` sets TileLang's log level for the commands and the workers they start; TileLang
    logs at INFO when it compiles (a cold kernel cache here) and would print it on stdout."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    try:
        assert invoke(*(["--verbose"] if verbose else []), "validate").exit_code == 0
        assert workers.tilelang_log_level() == (logging.INFO if verbose else logging.WARNING)
        f = next(f for f in Project().rendered(targets=[Target.SM_90]) if f.instance.name == "softmax_fp16_online")
        capfd.readouterr()
        precompile([(f, f.instance.shapes[0])], Target.SM_90, workers=1)  # what verify and bench do first
        out = capfd.readouterr().out
    finally:
        workers.set_tilelang_log_level(logging.WARNING)
    assert ("[TileLang:" in out) == verbose, out


# ---- CLI habits: version, completion, whole names in `list`, help text as written -----------------------

def test_version_is_the_package_version():
    import tomllib

    import codegen

    result = runner.invoke(app, ["--version"], prog_name="tilegen")
    assert result.exit_code == 0 and result.stdout == f"tilegen {codegen.__version__}\n"
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in pyproject["project"]["dynamic"]  # the wheel's version is the same attribute
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "codegen.__version__"}


def test_shell_completion_is_typers_own(monkeypatch):
    # typer detects the shell from the process tree unless told not to (its own tests' switch); the shell is then
    # the option's value -- the test runs the same under bash, sh, a CI runner or no shell at all
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = runner.invoke(app, ["--show-completion", "bash"], prog_name="tilegen")
    assert result.exit_code == 0, result.output
    assert "_TILEGEN_COMPLETE=complete_bash" in result.stdout and "complete -o default -F" in result.stdout
    helptext = runner.invoke(app, ["--help"], prog_name="tilegen", env={"COLUMNS": "200"}).stdout
    assert "--install-completion" in helptext and "--show-completion" in helptext and "--version" in helptext


def _terminal_list(monkeypatch, columns: int, *args: str) -> list[str]:
    """`tilegen list` on a terminal `columns` wide (COLUMNS, as a shell sets it): its lines."""
    import io

    from rich.console import Console

    monkeypatch.setenv("COLUMNS", str(columns))
    buf = io.StringIO()
    terminal = Console(file=buf, force_terminal=True, color_system=None, highlight=False, soft_wrap=True)
    assert terminal.width == columns and terminal.is_terminal
    monkeypatch.setattr(cli, "out", terminal)
    assert invoke("list", *args).exit_code == 0
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("columns", [60, 100, 400])
def test_list_on_a_terminal_shows_whole_kernel_names(monkeypatch, columns):
    uris = [f.uri for f in Project().rendered()]
    assert max(map(len, uris)) > 60  # a name longer than the narrowest terminal here
    lines = _terminal_list(monkeypatch, columns)
    assert not any("…" in line for line in lines)
    cells = [cell.strip() for line in lines for cell in line.strip("│┃ ").split("│")]
    for uri in uris:  # each name whole in one cell of the table, or on a line of its own
        assert uri in cells, (columns, uri)
    if columns == 60:  # too narrow for the table: a name a line, its other columns under it
        assert [line for line in lines if not line.startswith(" ")] == uris
        assert all(len(line.rstrip()) <= columns for line in lines if line.startswith(" "))


def test_list_names_prints_only_the_names():
    result = invoke("list", "--names", "--target", "sm_90")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f.uri for f in Project().rendered(targets=[Target.SM_90])]


def _commands(command, path=()):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


def test_every_help_text_is_shown_as_written():
    """Every command's and option's help appears in its --help as written (rich markup would eat a `[word]`
    and leave `; .`), with no stray punctuation."""
    import re

    import typer

    def flat(text: str) -> str:
        return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())

    for path, command in _commands(typer.main.get_command(app)):
        shown = flat(runner.invoke(app, [*path, "--help"], prog_name="tilegen", env={"COLUMNS": "400"}).stdout)
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in filter(None, texts):
            assert flat(text) in shown, (path, text)
            assert not re.search(r"[;,:]\s*\.(\s|$)|\s[;,]|\s\.(\s|$)", text), (path, text)
