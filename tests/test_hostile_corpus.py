"""A hostile corpus (issue 20): spec files, tilegen.toml, lockfiles, project paths and CLI arguments, most of it
generated from tables here. Each case runs the real command in-process (typer's CliRunner) on a small project in
a temporary folder and must be refused in one line naming the file and the rule, with exit code 1 and nothing
written (the project's tree is compared before and after). A hang guard stops a case that never ends; memory is
checked with tracemalloc, as a generous guard only, for the inputs that were unbounded before. No timing.

Each table has a negative control: the unedited input is accepted by the same command.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from codegen.cli.main import app
from codegen.core.hardware import Target
from codegen.families.gemm.spec import GemmDTypes, GemmOverride, GemmSearch, GemmShape, GemmSpec, Tiling
from codegen.families.spec import MAX_POINTS, Pipeline
from codegen.generate import scaffold
from codegen.generate.lockfile import (
    Candidate,
    LockEntry,
    LockFile,
    check_lockfiles,
    hand_hash,
    local_versions,
    lock_path,
    write_lockfile,
)
from codegen.generate.pipeline import Project
from codegen.run import gpu as gpu_module
from codegen.spec.load import parse_specs
from codegen.spec.project import TOML_LIMITS, ProjectError
from codegen.tune.search import constrain

runner = CliRunner()
HANG_SECONDS = 120  # a guard against a case that never ends, not a speed target
PEAK_BYTES = 200 * 2**20  # tracemalloc peak: a guard against unbounded memory, far above what a case needs

SPEC = {
    "name": "g", "op": "gemm", "dtypes": {"a": "fp16", "b": "fp16", "out": "fp16"}, "layout": "nt",
    "shapes": [{"m": 256, "n": 256, "k": 256}],
    "tiling": {"block_m": 64, "block_n": 64, "block_k": 32, "threads": 256},
    "pipeline": {"stages": 2}, "targets": ["gfx942", "sm_90"],
    "overrides": {"gfx942": {"tiling": {"block_m": 64, "block_n": 64, "block_k": 32, "threads": 256}}},
    "search": {"sm_90": {"tiling": {"block_m": [64, 128]}, "pipeline": {"stages": [2, 3]}}},
}
NORM = {"name": "n", "op": "rmsnorm", "dtypes": {"input": "fp16", "out": "fp16"}, "eps": 1.0e-6,
        "shapes": [{"rows": 64, "cols": 4096}], "threads": 256}
ATTENTION = {"name": "a", "op": "attention", "dtypes": {"input": "fp16", "out": "fp16"},
             "shapes": [{"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 512, "seq_kv": 512}], "head_dim": 128,
             "softmax_scale": 0.125, "tiling": {"block_m": 128, "block_n": 128, "threads": 256}, "targets": ["sm_90"]}


def dump(*entries: dict) -> str:
    return yaml.safe_dump(list(entries), sort_keys=False, allow_unicode=False, width=2**16)


@contextmanager
def hang_guard(seconds: int = HANG_SECONDS):
    def fire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under `root` (symlinks not followed) with its kind and, for a file or link, its size and
    modification time (a folder's own times change when a temporary entry comes and goes)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[p.relative_to(root).as_posix()] = ((st.st_mode,) if p.is_dir() and not p.is_symlink()
                                                   else (st.st_mode, st.st_size, st.st_mtime_ns))
    return out


def invoke(root: Path, *args: str):
    with hang_guard():
        return runner.invoke(app, ["-C", str(root), *args])


def refused(root: Path, *args: str, file: str, rule: str | None, summary: str | None = None,
            watch: Path | None = None) -> str:
    """Run `tilegen -C root ARGS`; assert exit 1, no traceback, no stdout, exactly one error line (and the
    command's `summary` line after it, where it has one) that names `file` and ends in `[rule]`, and no change
    under `root` (or `watch`). Returns the line."""
    before = tree(watch or root)
    result = invoke(root, *args)
    assert result.exit_code == 1, (args, result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    expected_count = 2 if summary else 1
    assert len(lines) == expected_count, lines
    if summary:
        assert lines[1] == summary, lines
    line = lines[0]
    assert file in line, (file, line)
    if rule is not None:
        assert line.endswith(f"[{rule}]"), line
    assert line.isprintable() and line.isascii(), line
    assert tree(watch or root) == before, "the refused command wrote or removed something"
    return line


def project(tmp_path: Path, spec_text: str | None = None) -> Path:
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs" / "x.yaml").write_text(spec_text if spec_text is not None else dump(SPEC), encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch):
    """The same answers on a GPU machine: `tune --check` sees no GPU here (the GPU checks have their own test)."""
    def detect():
        raise gpu_module.NoGpu("no GPU in this test")

    monkeypatch.setattr(gpu_module, "detect_gpu", detect)


# ---- spec files: keys spelt like pydantic's own location tags, escapes, brackets ---------------------------------

HOSTILE_KEYS = ["a[0]", "\x1b[31m", "x[", "]", "function-after[x]", "[key]", "list[int]", "tiling", "a.b", " ",
                "\u00e9", "\u202e", "k" * 100, "blok", "0", "<key>", "Tiling"]
# where a key is added, and the model whose fields a "did you mean" may offer there
PLACES = {
    (): GemmSpec, ("tiling",): Tiling, ("dtypes",): GemmDTypes, ("pipeline",): Pipeline, ("shapes", 0): GemmShape,
    ("overrides", "gfx942"): GemmOverride, ("overrides", "gfx942", "tiling"): Tiling, ("search", "sm_90"): GemmSearch,
    ("search", "sm_90", "tiling"): GemmSearch.model_fields["tiling"].annotation.__args__[0],
}


def _shown_path(path: tuple) -> str:
    from codegen.core.yamlsrc import format_path

    return format_path(path)


def test_the_spec_corpus_base_is_accepted(tmp_path: Path):
    root = project(tmp_path)
    result = invoke(root, "validate")
    assert result.exit_code == 0, result.output
    for text in (dump(NORM), dump(ATTENTION)):
        (root / "specs" / "x.yaml").write_text(text, encoding="utf-8")
        assert invoke(root, "validate").exit_code == 0


@pytest.mark.parametrize("place", list(PLACES), ids=lambda p: ".".join(map(str, p)) or "top")
@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=ascii)
def test_an_unknown_key_is_blamed_where_it_is(tmp_path: Path, place: tuple, key: str):
    doc = copy.deepcopy(SPEC)
    holder = doc
    for part in place:
        holder = holder[part]
    if key in holder:
        pytest.skip("a real field here")
    holder[key] = 1
    root = project(tmp_path, dump(doc))
    line = refused(root, "gen", file="specs/x.yaml", rule="unknown_key")
    expected = _shown_path(place + (key,))
    m = re.fullmatch(r"specs/x\.yaml:\d+:\d+: (.*): unknown key(?: \(did you mean '(\w+)'\?\))? \[unknown_key\]", line)
    assert m, line
    assert m.group(1) == expected, (m.group(1), expected)
    if m.group(2):  # a suggestion comes from the fields of the model that holds the key
        assert m.group(2) in PLACES[place].model_fields, (place, m.group(2))


# ---- spec files: floats that become fp32 kernel constants; sizes that are not int32 -----------------------------

FLOATS = [(5e-324, "fp32_range"), (1e-46, "fp32_range"), (1e-300, "fp32_range"), (1e-39, "fp32_range"),
          (1.1e-38, "fp32_range"), (3.5e38, "fp32_range"), (1e39, "fp32_range"), (1e308, "fp32_range"),
          (-1e-300, "greater_than"), (0.0, "greater_than"), (-0.0, "greater_than"), (-1.0, "greater_than"),
          (float("inf"), "finite_number"), (float("nan"), "finite_number"), ("0.001", "float_type"),
          (True, "float_type")]


@pytest.mark.parametrize(("value", "rule"), FLOATS, ids=repr)
@pytest.mark.parametrize("base, field", [(NORM, "eps"), (ATTENTION, "softmax_scale")], ids=["eps", "softmax_scale"])
def test_a_kernel_constant_must_be_a_normal_fp32(tmp_path: Path, base, field, value, rule):
    root = project(tmp_path, dump({**base, field: value}))
    line = refused(root, "gen", file="specs/x.yaml", rule=rule)
    assert f": {field}=" in line
    if rule == "fp32_range":
        assert "must be a normal fp32, from 1.175494e-38 to 3.402823e+38" in line


@pytest.mark.parametrize("value", [1.2e-38, 3.4e38, 1e-6, 2.5])
def test_a_normal_fp32_is_accepted(value):
    for base, field in ((NORM, "eps"), (ATTENTION, "softmax_scale")):
        assert parse_specs(dump({**base, field: value}), "x.yaml")


SIZES = [(1.9, "int_type"), (True, "int_type"), (float("inf"), "int_type"), (2**31, "int32"), (10**30, "int32"),
         (0, "greater_than"), (-1, "greater_than"), ("256", "int_type"), (None, "int_type"), ([256], "int_type")]


@pytest.mark.parametrize(("value", "rule"), SIZES, ids=repr)
def test_a_shape_size_must_be_an_int32(tmp_path: Path, value, rule):
    doc = copy.deepcopy(SPEC)
    doc["shapes"][0]["m"] = value
    line = refused(project(tmp_path, dump(doc)), "gen", file="specs/x.yaml", rule=rule)
    assert "shapes[0].m" in line


# ---- search spaces: sized from the list lengths, refused before anything is expanded ----------------------------

def _space(lengths: list[int]) -> dict:
    """A search block for sm_90 whose lists have these lengths (distinct legal-typed values)."""
    fields = ["block_m", "block_n", "block_k", "threads"]
    tiling = {f: [16 * (i + 1) for i in range(n)] for f, n in zip(fields, lengths[:4], strict=False)}
    block = {"tiling": tiling}
    if len(lengths) > 4:
        block["pipeline"] = {"stages": list(range(lengths[4]))}
    if len(lengths) > 5:
        block["unroll"] = list(range(1, lengths[5] + 1))
    return {"sm_90": block}


@pytest.mark.parametrize(("lengths", "max_points"), [
    ([1025], None), ([33, 32], None), ([10, 10, 10, 10, 5, 4], None), ([200, 200, 200, 200, 5, 10], None),
    ([2, 2, 2], 7), ([2, 2], 3), ([4], 1), ([1000, 1000, 1000, 1000], 10**9),
], ids=str)
def test_a_search_space_over_the_limit_is_refused_before_expansion(tmp_path: Path, lengths, max_points):
    import math

    doc = {**copy.deepcopy(SPEC), "search": _space(lengths)}
    root = project(tmp_path, dump(doc))
    args = ["tune", "g", "--static", "-t", "sm_90", *(["--max-points", str(max_points)] if max_points else [])]
    tracemalloc.start()
    try:
        line = refused(root, *args, file="specs/x.yaml", rule="search_points")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = math.prod(lengths)
    assert f"search.sm_90: {size} points (" in line
    assert f"over the limit of {max_points or MAX_POINTS}" in line
    assert peak < PEAK_BYTES


def test_a_space_at_the_limit_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The negative control: the same command takes a space of exactly --max-points points past the check, to the
    stages (stopped there: they build for real)."""
    from codegen.cli import tune as tunecli
    from codegen.core.errors import TilegenError

    def stages(ls, target, *args, max_points, **kwargs):
        raise TilegenError(f"the stages of {ls.spec.name} on {target.value}, at most {max_points} points")

    monkeypatch.setattr(tunecli, "tune_static", stages)
    doc = {**copy.deepcopy(SPEC), "search": _space([2, 2])}
    result = invoke(project(tmp_path, dump(doc)), "tune", "g", "--static", "-t", "sm_90", "--max-points", "4")
    assert result.stderr.splitlines()[-1] == "error: the stages of g on sm_90, at most 4 points"


def test_expansion_streams():
    """`expand` yields points one at a time: the first of a 10**12-point space comes at once (a list would not)."""
    from codegen.tune.search import expand

    (ls,) = parse_specs(dump({**copy.deepcopy(SPEC), "search": _space([1000, 1000, 1000, 1000])}), "x.yaml")
    points = expand(ls.spec, Target.SM_90)
    assert next(points) == (("tiling.block_m", 16), ("tiling.block_n", 16), ("tiling.block_k", 16),
                            ("tiling.threads", 16))
    assert len(next(points)) == 4


# ---- tilegen.toml and pyproject.toml --------------------------------------------------------------------------

def _deep(n: int, opener: str = "[", closer: str = "]") -> str:
    return f"specs = {opener * n}{closer * n}\n"


TOMLS = [
    ("specs = " + "[" * 100_000 + "]" * 100_000 + "\n", "config_limit", "over the 65536-byte limit"),
    (_deep(TOML_LIMITS.max_depth + 1), "config_limit", "nests deeper than 16"),
    ("specs = " + "{a = " * 17 + "1" + "}" * 17 + "\n", "config_limit", "nests deeper than 16"),
    ("a = [" + "[" * 20 + "]" * 21 + "\n", "config_limit", "nests deeper"),
    ("specs = ['../elsewhere']\n", "config", "specs.0: must be a path inside the project"),
    ("specs = ['/etc']\n", "config", "specs.0: must be a path inside the project"),
    ("specs = ['a\\nb']\n", "config", "printable ASCII"),
    ("specs = ['a\\u0000b']\n", "config", "printable ASCII"),
    ("specs = ['']\n", "config", "printable ASCII"),
    ("specs = []\n", "config", "specs:"),
    ("specs = 'specs'\n", "config", "specs:"),
    ("specs = [1]\n", "config", "specs.0:"),
    ("spec = ['x']\n", "config", "spec: unknown key"),
    ('"a\\nb" = 1\n', "config", "a\\nb: unknown key"),
    ('"\\u001b[31m" = 1\n', "config", "\\x1b[31m: unknown key"),
    ("a." * 20_000 + "a = 1\n", "config_limit", "tilegen.toml:1:1: a dotted key or table name of more than 16 parts"),
    ("[" + "t." * 5_000 + "t]\n", "config_limit", "tilegen.toml:1:2: a dotted key or table name of more than 16 parts"),
    ("x = {" + "a." * 16 + "a = 1}\n", "config_limit", "tilegen.toml:1:6: a dotted key"),
    ("a." * 15 + "a = 1\n", "config", "a: unknown key"),
    ("specs = [\n", "config", "tilegen.toml: "),
    ("specs = ['specs']\nspecs = ['specs']\n", "config", "tilegen.toml: "),
    ("specs = ['specs'] # ]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\nx = '[[[[[[[[[[[[[[[[[[[[[['\n", "config", "x: unknown key"),
    ("specs = " + "[" * 40 + "'specs'" + "]" * 40 + "\n", "config_limit", "nests deeper than 16"),
]


@pytest.mark.parametrize(("text", "rule", "message"), TOMLS, ids=lambda v: ascii(v)[:30] if isinstance(v, str) else v)
def test_a_bad_tilegen_toml_is_one_line(tmp_path: Path, text, rule, message):
    root = project(tmp_path)
    (root / "tilegen.toml").write_text(text, encoding="utf-8")
    line = refused(root, "validate", file="tilegen.toml", rule=rule)
    assert message in line, line


def test_brackets_inside_strings_and_comments_do_not_count(tmp_path: Path):
    root = project(tmp_path)
    (root / "tilegen.toml").write_text("specs = ['specs'] # " + "[" * 50 + "\n", encoding="utf-8")
    assert invoke(root, "validate").exit_code == 0
    (root / "tilegen.toml").write_text('specs = ["specs"]\nx = """' + "[" * 50 + '\n"""\n', encoding="utf-8")
    assert "x: unknown key" in invoke(root, "validate").stderr  # the value is text, not 50 levels


def test_a_50_mb_tilegen_toml_is_refused_unread(tmp_path: Path):
    root = project(tmp_path)
    with (root / "tilegen.toml").open("wb") as f:  # sparse: the disk holds nothing of it
        f.truncate(50 * 2**20)
    tracemalloc.start()
    try:
        line = refused(root, "validate", file="tilegen.toml", rule="config_limit")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "over the 65536-byte limit" in line
    assert peak < 16 * 2**20  # one read of 64 KiB + 1, not 50 MB


def test_a_hostile_pyproject_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.tilegen]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n",
                                         encoding="utf-8")
    monkeypatch.chdir(root)
    with hang_guard():
        result = runner.invoke(app, ["validate"])
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith("error: ") and "pyproject.toml:2:21: nests deeper than 16" in result.stderr
    assert result.stderr.rstrip().endswith("[config_limit]")


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling"])
def test_a_tilegen_toml_that_is_not_a_file(tmp_path: Path, kind):
    root = project(tmp_path)
    (root / "tilegen.toml").unlink()
    if kind == "fifo":
        os.mkfifo(root / "tilegen.toml")  # reading it would block forever
    elif kind == "folder":
        (root / "tilegen.toml").mkdir()
    else:
        (root / "tilegen.toml").symlink_to(root / "nowhere.toml")
    assert "not a regular file" in refused(root, "validate", file="tilegen.toml", rule="config")


# ---- paths: every path the project reads or writes stays inside it -------------------------------------------

@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "specs").mkdir(parents=True)
    (out / "specs" / "y.yaml").write_text(dump({**SPEC, "name": "y"}), encoding="utf-8")
    (out / "gen").mkdir()
    (out / "secret.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    return out


SYMLINKS = {
    # name: (link inside the project, its target outside, the command, the path named in the error)
    "config-spec-path": ("elsewhere", "specs", ["validate"], "elsewhere"),
    "specs-folder": ("specs", "specs", ["validate"], "specs"),
    "spec-file": ("specs/y.yaml", "specs/y.yaml", ["validate"], "specs/y.yaml"),
    "generated": ("generated", "gen", ["gen"], "generated/"),
    "generated-target": ("generated/sm_90", "gen", ["gen"], "generated/sm_90/"),
    "generated-check": ("generated", "gen", ["gen", "--check"], "generated/"),
    "tilegen.toml": ("tilegen.toml", "secret.toml", ["validate"], "tilegen.toml"),
    "lowered": ("build", "gen", ["lower", "g", "-t", "gfx942"], "build/lowered"),
}


@pytest.mark.parametrize("case", list(SYMLINKS))
def test_a_symlink_out_of_the_project_is_refused(tmp_path: Path, outside: Path, case: str):
    link, target, args, named = SYMLINKS[case]
    root = project(tmp_path)
    if case == "config-spec-path":
        (root / "tilegen.toml").write_text('specs = ["elsewhere"]\n', encoding="utf-8")
    if case == "specs-folder":
        for p in (root / "specs").iterdir():
            p.unlink()
        (root / "specs").rmdir()
    if case == "tilegen.toml":
        (root / "tilegen.toml").unlink()
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(outside / target)
    before = tree(outside)
    rule = "outside_project"
    line = refused(root, *args, file=named, rule=rule)
    assert "outside the project" in line
    assert tree(outside) == before


def test_a_symlink_inside_the_project_is_fine(tmp_path: Path):
    root = project(tmp_path)
    (root / "kernels").mkdir()
    (root / "specs" / "x.yaml").rename(root / "kernels" / "x.yaml")
    (root / "specs" / "x.yaml").symlink_to(root / "kernels" / "x.yaml")
    assert invoke(root, "validate").exit_code == 0
    assert invoke(root, "gen").exit_code == 0


def test_project_paths_are_confined(tmp_path: Path, outside: Path):
    root = project(tmp_path)
    for name in ("reports", ".cache"):
        (root / name).symlink_to(outside / "gen")
    with pytest.raises(ProjectError, match=r"^reports: resolves to .* \[outside_project\]$"):
        _ = Project(root=root).reports_dir
    with pytest.raises(ProjectError, match=r"^\.cache: resolves to .* \[outside_project\]$"):
        _ = Project(root=root).cache_dir


# ---- lockfiles ----------------------------------------------------------------------------------------------

LOCK = "tuned/sm_90/NVIDIA_H200.json"
INVALID = "error: 1 invalid lockfile(s): fix or remove them"


@pytest.fixture
def tuned(tmp_path: Path):
    """A project whose spec `g` has an sm_90 search block, and a valid lockfile of an NVIDIA H200 for its one
    shape; (root, the lockfile's document)."""
    root = project(tmp_path, dump({**copy.deepcopy(SPEC), "search": {"sm_90": {"pipeline": {"stages": [2, 3]}}}}))
    (ls,) = parse_specs((root / "specs" / "x.yaml").read_text(encoding="utf-8"), "specs/x.yaml")
    part = constrain(ls, Target.SM_90, [(("pipeline.stages", 3),)])
    winner = Candidate(uri=part.points[0].uri, tunables={"pipeline.stages": 3}, time_ms=0.01,
                       code_sha256=part.files[part.points[0].uri].code_sha256)
    entry = LockEntry(spec="g", hand_hash=hand_hash(ls, Target.SM_90), shape=(256, 256, 256), device="NVIDIA H200",
                      versions=local_versions() | {"torch": "2.8.0", "runtime": "CUDA 12.8", "driver": "570.1"},
                      winner=winner, runner_up=Candidate(uri=part.hand.uri, tunables={"pipeline.stages": 2},
                                                         time_ms=0.02, code_sha256=part.files[part.hand.uri].code_sha256),
                      strategy="test")
    write_lockfile(lock_path(root, Target.SM_90, "NVIDIA H200"),
                   LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(entry,)))
    return root, json.loads((root / LOCK).read_text(encoding="utf-8"))


RAW = "@raw:"  # a string value "@raw:NaN" is written as the JSON token NaN


def write_doc(root: Path, doc, name: str = LOCK) -> None:
    text = json.dumps(doc, indent=1)
    text = re.sub(r'"@raw:([^"]*)"', r"\1", text)
    (root / name).write_text(text, encoding="utf-8")


def _set(doc, path: tuple, value):
    doc = copy.deepcopy(doc)
    holder = doc
    for part in path[:-1]:
        holder = holder[part]
    if value is DELETE:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return doc


DELETE = object()
E, W, R = ("entries", 0), ("entries", 0, "winner"), ("entries", 0, "runner_up")
FIELD_CASES = [
    # (path, value, the field named, the rule)
    (("format",), 2, "format=2", "lockfile_format"), (("format",), "1", 'format="1"', "lockfile_format"),
    (("format",), True, "format=true", "lockfile_format"), (("format",), 1.0, "format=1.0", "lockfile_format"),
    (("target",), "gfx942", 'target="gfx942"', "lockfile_device"), (("target",), "sm_91", "target", "lockfile_schema"),
    (("target",), None, "target", "lockfile_schema"),
    (("device",), "NVIDIA H100", 'device="NVIDIA H100"', "lockfile_device"),
    (("device",), "", "device", "lockfile_schema"), (("device",), "NVIDIA H200\x1b[31m", "device", "lockfile_schema"),
    (("device",), "x" * 200, "device", "lockfile_schema"), (("device",), 5, "device=5", "lockfile_schema"),
    (("entries",), {}, "entries", "lockfile_schema"), (("entries",), "x", "entries", "lockfile_schema"),
    (("entries",), None, "entries", "lockfile_schema"), (("entries",), [1], "entries[0]", "lockfile_schema"),
    ((*E, "spec"), "Bad-Name", "entries[0].spec", "lockfile_schema"), ((*E, "spec"), "", "entries[0].spec", "lockfile_schema"),
    ((*E, "spec"), 1, "entries[0].spec=1", "lockfile_schema"), ((*E, "spec"), "\ud800", "entries[0].spec", "lockfile_schema"),
    ((*E, "hand_hash"), "0" * 63, "entries[0].hand_hash", "lockfile_schema"),
    ((*E, "hand_hash"), "G" * 64, "entries[0].hand_hash", "lockfile_schema"),
    ((*E, "shape"), [1.9, 256, 256], "entries[0].shape[0]=1.9", "lockfile_schema"),
    ((*E, "shape"), [True, 256, 256], "entries[0].shape[0]=true", "lockfile_schema"),
    ((*E, "shape"), ["@raw:1e400", 256, 256], "entries[0].shape[0]=inf", "lockfile_schema"),
    ((*E, "shape"), [0, 256, 256], "entries[0].shape[0]=0", "lockfile_schema"),
    ((*E, "shape"), [-1, 256, 256], "entries[0].shape[0]=-1", "lockfile_schema"),
    ((*E, "shape"), [2**31, 256, 256], "entries[0].shape[0]=2147483648", "lockfile_schema"),
    ((*E, "shape"), [], "entries[0].shape", "lockfile_schema"),
    ((*E, "shape"), [1] * 9, "entries[0].shape", "lockfile_schema"),
    ((*E, "shape"), "256", 'entries[0].shape="256"', "lockfile_schema"),
    ((*E, "shape"), [[256], 256, 256], "entries[0].shape[0]", "lockfile_schema"),
    ((*E, "shape"), None, "entries[0].shape", "lockfile_schema"),
    ((*E, "device"), "NVIDIA H100", 'entries[0].device="NVIDIA H100"', "lockfile_device"),
    ((*E, "device"), 1, "entries[0].device=1", "lockfile_schema"),
    ((*E, "versions"), {"tilelang": 1}, "entries[0].versions.tilelang=1", "lockfile_schema"),
    ((*E, "versions"), {"cuda": "12"}, "entries[0].versions.cuda", "lockfile_schema"),
    ((*E, "versions"), [], "entries[0].versions", "lockfile_schema"),
    ((*E, "versions"), {"tilelang": "0.1\n"}, "entries[0].versions.tilelang", "lockfile_schema"),
    ((*W, "uri"), "a b", "entries[0].winner.uri", "lockfile_schema"),
    ((*W, "code_sha256"), "0" * 63, "entries[0].winner.code_sha256", "lockfile_schema"),
    ((*R, "code_sha256"), 1, "entries[0].runner_up.code_sha256=1", "lockfile_schema"),
    ((*W, "uri"), "", "entries[0].winner.uri", "lockfile_schema"),
    ((*W, "uri"), "x" * 300, "entries[0].winner.uri", "lockfile_schema"),
    ((*W, "tunables"), {"a b": 1}, "entries[0].winner.tunables", "lockfile_schema"),
    ((*W, "tunables"), {"x": 1.5}, "entries[0].winner.tunables.x=1.5", "lockfile_schema"),
    ((*W, "tunables"), {"x": None}, "entries[0].winner.tunables.x=null", "lockfile_schema"),
    ((*W, "tunables"), {"x": []}, "entries[0].winner.tunables.x", "lockfile_schema"),
    ((*W, "tunables"), [], "entries[0].winner.tunables", "lockfile_schema"),
    ((*W, "tunables"), {f"k{i}": 1 for i in range(65)}, "entries[0].winner.tunables", "lockfile_schema"),
    ((*W, "time_ms"), "@raw:NaN", "entries[0].winner.time_ms=nan", "lockfile_schema"),
    ((*W, "time_ms"), "@raw:Infinity", "entries[0].winner.time_ms=inf", "lockfile_schema"),
    ((*W, "time_ms"), "@raw:-Infinity", "entries[0].winner.time_ms=-inf", "lockfile_schema"),
    ((*W, "time_ms"), "@raw:1e400", "entries[0].winner.time_ms=inf", "lockfile_schema"),
    ((*W, "time_ms"), 0, "entries[0].winner.time_ms=0", "lockfile_schema"),
    ((*W, "time_ms"), -1.0, "entries[0].winner.time_ms=-1.0", "lockfile_schema"),
    ((*W, "time_ms"), "0.1", 'entries[0].winner.time_ms="0.1"', "lockfile_schema"),
    ((*W, "time_ms"), True, "entries[0].winner.time_ms=true", "lockfile_schema"),
    ((*W, "time_ms"), None, "entries[0].winner.time_ms=null", "lockfile_schema"),
    ((*R,), 5, "entries[0].runner_up=5", "lockfile_schema"), ((*R,), [], "entries[0].runner_up", "lockfile_schema"),
    ((*R, "time_ms"), "@raw:NaN", "entries[0].runner_up.time_ms=nan", "lockfile_schema"),
    ((*R, "time_ms"), 0.0, "entries[0].runner_up.time_ms=0.0", "lockfile_schema"),
    ((*E, "strategy"), 1, "entries[0].strategy=1", "lockfile_schema"),
    ((*E, "strategy"), "a\nb", "entries[0].strategy", "lockfile_schema"),
    ((*E, "strategy"), "x" * 600, "entries[0].strategy", "lockfile_schema"),
]
FIELD_CASES += [((*where, key), 1, ".".join(map(str, where)).replace(".0", "[0]") + ("." if where else "")
                 + (key if re.fullmatch(r"\w+", key) else json.dumps(key)), "lockfile_schema")
                for where in ((), E, W, R) for key in ("extra", "a[0]", "\x1b[31m", "")]
FIELD_CASES += [((*where, key), DELETE, ".".join(map(str, where)).replace(".0", "[0]") + ("." if where else "") + key,
                 "lockfile_schema")
                for where, keys in (((), ("format", "target", "device", "entries")),
                                    (E, ("spec", "hand_hash", "shape", "device", "versions", "winner")),
                                    (W, ("uri", "tunables", "time_ms", "code_sha256")))
                for key in keys]


def test_the_lockfile_corpus_base_is_accepted(tuned):
    root, doc = tuned
    result = invoke(root, "tune", "--check")
    assert result.exit_code == 0, result.output
    assert "tuned/ is up to date: 1 entry" in result.stdout
    write_doc(root, doc)  # the corpus's own writer gives an accepted file too
    assert invoke(root, "tune", "--check").exit_code == 0


@pytest.mark.parametrize(("path", "value", "where", "rule"), FIELD_CASES,
                         ids=[f"{'.'.join(map(str, c[0]))}={ascii(c[1])[:20]}" for c in FIELD_CASES])
def test_a_bad_lockfile_field_is_one_line(tuned, path, value, where, rule):
    root, doc = tuned
    write_doc(root, _set(doc, path, value))
    line = refused(root, "tune", "--check", file=LOCK, rule=rule, summary=INVALID)
    assert line.startswith(f"{LOCK}: {where}"), (line, where)


def _text_cases(doc) -> dict[str, tuple[str | bytes, str, str]]:
    base = json.dumps(doc)
    entry = json.dumps(doc["entries"][0])
    return {
        "duplicate-key-top": ('{"format": 1, ' + base[1:], "format", "lockfile_json"),
        "duplicate-key-entry": (base.replace('"shape":', '"shape": [1, 1, 1], "shape":', 1), "shape", "lockfile_json"),
        "duplicate-entry": (base.replace(entry, entry + ", " + entry.replace('"time_ms": 0.01', '"time_ms": 0.5'))
                            if entry in base else json.dumps({**doc, "entries": doc["entries"] * 2}),
                            "entries[1]: a second entry for g 256x256x256", "lockfile_duplicate"),
        "truncated": (base[: len(base) // 2], "not valid JSON", "lockfile_json"),
        "depth-100000": ("[" * 100_000 + "]" * 100_000, "nests deeper than 8", "lockfile_limit"),
        "depth-in-an-entry": (base.replace('"strategy": "test"', '"strategy": ' + "[" * 9 + "]" * 9),
                              "nests deeper than 8", "lockfile_limit"),
        "over-4-MiB": (base[:-1] + " " * (4 * 2**20) + "}", "over the 4194304-byte limit", "lockfile_limit"),
        "not-utf8": (base.encode().replace(b'"test"', b'"\xff\xfe"'), "not UTF-8", "lockfile_json"),
        "an-array": ("[]", "the document must be a JSON object", "lockfile_schema"),
        "a-number": ("1", "the document must be a JSON object", "lockfile_schema"),
        "null": ("null", "the document must be a JSON object", "lockfile_schema"),
        "empty": ("", "not valid JSON", "lockfile_json"),
        "30-digit-int": (base.replace("256, 256, 256", "1" + "0" * 29 + ", 256, 256", 1), "an integer of 30 digits",
                         "lockfile_json"),
        "5000-digit-int": (base.replace("256, 256, 256", "9" * 5000 + ", 256, 256", 1), "an integer of 5000 digits",
                           "lockfile_json"),
        "bare-word": (base.replace('"test"', "test"), "not valid JSON", "lockfile_json"),
        "trailing-junk": (base + "]", "not valid JSON", "lockfile_json"),
        "lone-surrogate": (base.replace('"test"', '"\\ud800"'), "entries[0].strategy", "lockfile_schema"),
    }


TEXT_CASES = list(_text_cases({"entries": [{"time_ms": 0}]}))  # the names; the texts are made from the fixture


@pytest.mark.parametrize("case", TEXT_CASES)
def test_a_bad_lockfile_text_is_one_line(tuned, case):
    root, doc = tuned
    text, message, rule = _text_cases(doc)[case]
    path = root / LOCK
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    tracemalloc.start()
    try:
        line = refused(root, "tune", "--check", file=LOCK, rule=rule, summary=INVALID)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message in line, line
    assert peak < PEAK_BYTES


def _fifo(root: Path, name: str) -> None:
    os.mkfifo(root / name)  # reading it would block forever


LOCK_FILES = {
    # name: (make it, the file named, the rule, a part of the message)
    "named-for-another-device": (lambda root, doc: (root / LOCK).rename(root / "tuned/sm_90/NVIDIA_H100.json"),
                                 "tuned/sm_90/NVIDIA_H100.json", "lockfile_device", "is NVIDIA_H200.json"),
    "header-and-entries-edited": (lambda root, doc: write_doc(root, _set(_set(doc, ("device",), "NVIDIA H100"),
                                                                         (*E, "device"), "NVIDIA H100")),
                                  LOCK, "lockfile_device", "the lockfile of NVIDIA H100 is NVIDIA_H100.json"),
    "in-another-target-folder": (lambda root, doc: (root / "tuned/gfx942").mkdir() or (root / LOCK).rename(
                                 root / "tuned/gfx942/NVIDIA_H200.json"), "tuned/gfx942/NVIDIA_H200.json",
                                 "lockfile_device", "holds gfx942 entries"),
    "a-fifo": (lambda root, doc: _fifo(root, "tuned/sm_90/NVIDIA_H100.json"), "tuned/sm_90/NVIDIA_H100.json",
               "lockfile_io", "not a regular file"),
    "a-folder": (lambda root, doc: (root / "tuned/sm_90/NVIDIA_H100.json").mkdir(), "tuned/sm_90/NVIDIA_H100.json",
                 "lockfile_io", "not a regular file"),
    "a-symlink-out": (lambda root, doc: (root / "tuned/sm_90/NVIDIA_H100.json").symlink_to(root.parent / "x.json"),
                      "tuned/sm_90/NVIDIA_H100.json", "outside_project", "outside the project"),
    "a-control-character-in-its-name": (lambda root, doc: (root / LOCK).rename(root / "tuned/sm_90/a\x1b.json"),
                                        "tuned/sm_90/a\\x1b.json", "lockfile_device", "is NVIDIA_H200.json"),
}


@pytest.mark.parametrize("case", list(LOCK_FILES))
def test_a_lockfile_in_the_wrong_place_is_one_line(tuned, case):
    root, doc = tuned
    make, named, rule, message = LOCK_FILES[case]
    (root.parent / "x.json").write_text(json.dumps(doc), encoding="utf-8")
    make(root, doc)
    before = tree(root)
    result = invoke(root, "tune", "--check")
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    bad = [line for line in lines if line.startswith(named + ":")]
    assert len(bad) == 1 and bad[0].endswith(f"[{rule}]") and message in bad[0], lines
    assert "Traceback" not in result.output and tree(root) == before


def test_gen_names_an_invalid_lockfile_and_uses_none_of_it(tuned):
    root, doc = tuned
    assert invoke(root, "gen").exit_code == 0  # the negative control: the valid lockfile's winner is generated
    tuned_kernel = doc["entries"][0]["winner"]["uri"]
    assert list((root / "generated").rglob(f"{tuned_kernel}.py"))
    write_doc(root, _set(doc, (*E, "shape"), [1.9, 256, 256]))
    result = invoke(root, "gen")
    assert result.exit_code == 0, result.output
    assert (f"{LOCK}: entries[0].shape[0]=1.9: must be an integer [lockfile_schema]: none of its entries is used; "
            "the hand configurations serve its shapes") in result.stderr.splitlines()
    assert not list((root / "generated").rglob(f"{tuned_kernel}.py"))  # removed: no entry of the file is used
    assert list((root / "generated").rglob("*.py"))


def test_the_gpu_present_must_agree_with_a_lockfile(tuned):
    root, _doc = tuned
    (ls,) = parse_specs((root / "specs" / "x.yaml").read_text(encoding="utf-8"), "specs/x.yaml")
    ok = check_lockfiles(root, [ls], local_versions(), [Target.SM_90], gpu_present=("NVIDIA H200", Target.SM_90))
    assert ok.clean, ok
    other = check_lockfiles(root, [ls], local_versions(), [Target.SM_90], gpu_present=("NVIDIA H100", Target.SM_90))
    assert other.clean  # an H200's lockfile on an H100 machine is fine: it answers for the H200 only
    amd = check_lockfiles(root, [ls], local_versions(), [Target.SM_90], gpu_present=("NVIDIA H200", Target.GFX942))
    assert amd.invalid == ((f'{LOCK}: device="NVIDIA H200": the NVIDIA H200 of this machine runs gfx942 kernels, not '
                           "sm_90 [lockfile_device]"),)
    alias = check_lockfiles(root, [ls], local_versions(), [Target.SM_90], gpu_present=("NVIDIA-H200", Target.SM_90))
    assert alias.invalid == ((f'{LOCK}: device="NVIDIA H200": the GPU here is "NVIDIA-H200", whose lockfile this '
                             "file's name says it is [lockfile_device]"),)
    assert not amd.fresh and not alias.fresh  # none of the file's entries is used


def test_a_measured_tune_refuses_an_invalid_lockfile_before_measuring(tuned):
    """The lockfile a measured tune merges into is read (and checked against the GPU) before anything runs."""
    from types import SimpleNamespace

    from codegen.cli.tune import _lock_to_merge
    from codegen.generate.lockfile import LockfileError

    root, doc = tuned
    h200 = SimpleNamespace(name="NVIDIA H200", run_target=Target.SM_90)
    path, lock = _lock_to_merge(Project(root=root), Target.SM_90, h200)
    assert path == root / LOCK and len(lock.entries) == 1  # the negative control: a valid one is merged into
    write_doc(root, _set(doc, (*W, "time_ms"), "@raw:NaN"))
    with pytest.raises(LockfileError, match=r"entries\[0\]\.winner\.time_ms=nan: .* \[lockfile_schema\]$"):
        _lock_to_merge(Project(root=root), Target.SM_90, h200)
    write_doc(root, doc)
    with pytest.raises(LockfileError, match=r"runs gfx942 kernels, not sm_90 \[lockfile_device\]$"):
        _lock_to_merge(Project(root=root), Target.SM_90, SimpleNamespace(name="NVIDIA H200", run_target=Target.GFX942))


def test_tilegen_never_writes_a_lockfile_it_would_refuse(tmp_path: Path):
    from dataclasses import replace

    from codegen.generate.lockfile import LockfileError, read_lockfile

    good = LockEntry(spec="g", hand_hash="0" * 64, shape=(256, 256, 256), device="NVIDIA H200",
                     versions={"tilelang": "0.1.15"},
                     winner=Candidate(uri="k", tunables={"unroll": 2}, time_ms=0.01, code_sha256="0" * 64),
                     runner_up=None)
    path = lock_path(tmp_path, Target.SM_90, "NVIDIA H200")
    assert write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(good,)))
    assert read_lockfile(path, target=Target.SM_90).entries == (good,)
    before = path.read_text(encoding="utf-8")
    nan = replace(good, winner=replace(good.winner, time_ms=float("nan")))
    with pytest.raises(LockfileError, match=r"time_ms=nan"):
        write_lockfile(path, LockFile(target=Target.SM_90, device="NVIDIA H200", entries=(nan,)))
    assert path.read_text(encoding="utf-8") == before


# ---- tilegen init: the whole project or nothing ---------------------------------------------------------------

def _init(dest: Path):
    with hang_guard():
        return runner.invoke(app, ["init", str(dest)])


INITS = {
    "tilegen.toml-exists": (lambda d: d.mkdir() or (d / "tilegen.toml").write_text("keep"), "tilegen.toml",
                            "already exists"),
    "a-spec-exists": (lambda d: (d / "specs").mkdir(parents=True) or (d / "specs" / "gemm.yaml").write_text("keep"),
                      "specs/gemm.yaml", "already exists"),
    "specs-is-a-file": (lambda d: d.mkdir() or (d / "specs").write_text("keep"), "specs", "exists and is not a folder"),
    "specs-is-a-symlink": (lambda d: d.mkdir() or (d / "specs").symlink_to(d.parent), "specs", "is a symlink"),
    "a-dangling-readme": (lambda d: d.mkdir() or (d / "README.md").symlink_to(d / "nowhere"), "README.md",
                          "is a symlink"),
    "dest-is-a-file": (lambda d: d.write_text("keep"), "", "exists and is not a folder"),
    "a-parent-is-a-file": (lambda d: d.parent.write_text("keep"), "", "is not a folder"),
}


@pytest.mark.parametrize("case", list(INITS))
def test_init_refuses_in_one_line_and_writes_nothing(tmp_path: Path, case):
    make, named, message = INITS[case]
    dest = tmp_path / "p" if case != "a-parent-is-a-file" else tmp_path / "f" / "p"
    make(dest)
    before = tree(tmp_path)
    result = _init(dest)
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("[init]") and message in line, line
    assert named in line
    assert tree(tmp_path) == before


def test_init_into_an_unwritable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(scaffold.tempfile, "mkdtemp", denied)  # root may write anywhere: the refusal is simulated
    result = _init(tmp_path / "p")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [(f"error: {tmp_path.as_posix()}: cannot write here (Permission denied); "
                                          "`tilegen init` writes a new project and overwrites nothing [init]")]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_init_into_a_read_only_folder(tmp_path: Path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        result = _init(ro / "p")
        assert result.exit_code == 1 and "cannot write here" in result.stderr
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("fail_at", [1, 3, 6])
def test_init_undoes_every_move_when_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at):
    """Into an existing folder the files are moved one by one: a failure part-way (the disk full, a file
    appearing meanwhile) undoes the moves already made."""
    dest = tmp_path / "p"
    (dest / "specs").mkdir(parents=True)  # an existing, empty specs/: each spec is moved on its own
    calls = []
    real_link = os.link

    def link(src, dst):
        calls.append(dst)
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device", str(dst))
        return real_link(src, dst)

    monkeypatch.setattr(scaffold.os, "link", link)
    before = tree(tmp_path)
    result = _init(dest)
    assert result.exit_code == 1 and "No space left on device" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert tree(tmp_path) == before


def test_init_creates_the_whole_project_at_once(tmp_path: Path):
    dest = tmp_path / "a" / "b"
    result = _init(dest)
    assert result.exit_code == 0, result.output
    assert (dest / "tilegen.toml").is_file() and len(list((dest / "specs").iterdir())) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no temporary folder left beside it
    assert invoke(dest, "validate").exit_code == 0


# ---- CLI arguments ---------------------------------------------------------------------------------------------

CLI = {
    # name: (arguments after `-C root`, a part of the one line, the rule or None)
    "no-such-spec-path": (["validate", "nope.yaml"], "nope.yaml: no such spec file or folder", "io"),
    "tune-unknown-spec": (["tune", "nope", "--static"], "no spec named 'nope'", None),
    "tune-a-target-not-in-the-spec": (["tune", "g", "--static", "-t", "gfx950"], "gfx950", None),
    "tune-a-bad-budget": (["tune", "g", "--budget", "soon"], "--budget 'soon'", None),
    "tune-static-profile": (["tune", "g", "--static", "--profile-top", "2"], "--profile-top", None),
    "new-a-bad-name": (["new", "gemm", "Bad-Name"], "Bad-Name", None),
    "new-an-existing-name": (["new", "gemm", "g"], "g", None),
    "lower-an-unknown-kernel": (["lower", "nope"], "no kernel named 'nope'", None),
}


@pytest.mark.parametrize("case", list(CLI))
def test_a_bad_argument_is_one_line(tmp_path: Path, case):
    args, message, rule = CLI[case]
    root = project(tmp_path)
    line = refused(root, *args, file="", rule=rule)
    assert message in line, line


def test_cli_paths_that_are_not_files(tmp_path: Path):
    root = project(tmp_path)
    os.mkfifo(root / "pipe.yaml")  # reading it would block forever
    line = refused(root, "validate", str(root / "pipe.yaml"), file="pipe.yaml", rule="io")
    assert "not a regular file or folder" in line
    (root / 'we"ird.yaml').write_text(dump(SPEC), encoding="utf-8")
    refused(root, "validate", str(root / 'we"ird.yaml'), file="we", rule="file_name")
    with hang_guard():
        result = runner.invoke(app, ["-C", str(root / "nope"), "validate"])
    assert result.exit_code == 1 and result.stderr.splitlines() == [
        f"error: {(root / 'nope').as_posix()}: no such project folder [project]"]


def test_the_corpus_has_at_least_150_cases():
    spec = len(HOSTILE_KEYS) * len(PLACES) + 2 * len(FLOATS) + len(SIZES) + 8
    lock = len(FIELD_CASES) + len(TEXT_CASES) + len(LOCK_FILES) + 2
    project_cases = len(TOMLS) + 3 + 2 + len(SYMLINKS) + len(INITS) + 5 + len(CLI) + 3
    assert spec + lock + project_cases >= 150, (spec, lock, project_cases)
