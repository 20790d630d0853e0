"""Hostile and extreme input (issue 9): each is refused with one located line naming the rule, fast and
in little memory — never a traceback, a MemoryError or a kernel that fails later at lowering.

Every hostile file is built here, in the test; none is committed. The YAML cases run twice: with the
libyaml pre-scan (the fast refusal) and without it (PyYAML's composer enforces the same limits itself).
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from spectext import FILE, edit, errors
from typer.testing import CliRunner

from codegen.cli.main import app
from codegen.core import yamlsrc
from codegen.core.errors import SpecError, SpecErrors
from codegen.core.yamlsrc import LIMITS
from codegen.families.spec import MAX_INSTANCES, MAX_INT32, MAX_SHAPES
from codegen.generate.instance import build_instances
from codegen.spec import load
from codegen.spec.load import load_spec_files, parse_specs

# A guard against unbounded work, not a speed target (the README gives the measured figures: about a
# millisecond with the libyaml pre-scan, 0.6 s with PyYAML alone; the unbounded loader took 19-48 s on these
# inputs): generous enough for a loaded 2-core CI machine.
FAST_SECONDS = 5.0
SMALL_PEAK_BYTES = 4 * 2**20
# a document refused at the node limit by PyYAML alone (no libyaml pre-scan), or refused only after it was
# loaded because it is inside every YAML limit, has been composed first: ~20,000 nodes
AT_LIMIT_PEAK_BYTES = 16 * 2**20

GEMM = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256}
  targets: [gfx942]
"""
NORM = """\
- name: n
  op: rmsnorm
  dtypes: {input: fp16, out: fp16}
  eps: 1.0e-6
  shapes:
    - {rows: 64, cols: 4096}
  threads: 256
"""
ATTENTION = """\
- name: a
  op: attention
  dtypes: {input: fp16, out: fp16}
  shapes:
    - {batch: 1, heads: 8, kv_heads: 2, seq_q: 512, seq_kv: 512}
  head_dim: 128
  softmax_scale: 0.125
  tiling: {block_m: 128, block_n: 128, threads: 256}
  targets: [sm_90]
"""

# The classic "billion laughs": 9 aliases on each of 9 levels, 9**9 = 387,420,489 strings once expanded.
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def measured(fn):
    """(error lines, seconds, tracemalloc peak bytes) of `fn()`, which must raise SpecError(s)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        fn()
    except SpecErrors as exc:
        lines = [str(e) for e in exc.errors]
    except SpecError as exc:
        lines = [str(exc)]
    else:
        raise AssertionError("accepted, but an error was expected")
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return lines, seconds, peak


def refused_fast(text: str, peak_bytes: int = SMALL_PEAK_BYTES) -> list[str]:
    """The error lines of `text`, asserted to come within FAST_SECONDS (timed without tracemalloc, which slows
    Python ~3x) and `peak_bytes` (a second run, traced)."""
    start = time.perf_counter()
    with pytest.raises((SpecError, SpecErrors)):
        build_instances(parse_specs(text, FILE))
    seconds = time.perf_counter() - start
    lines, _, peak = measured(lambda: build_instances(parse_specs(text, FILE)))
    assert seconds < FAST_SECONDS, seconds
    assert peak < peak_bytes, peak
    return lines


@pytest.fixture(params=["libyaml-prescan", "pyyaml-only"])
def scan(request, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pyyaml-only":
        monkeypatch.setattr(yamlsrc, "_prescan", lambda text, file: None)
    elif not yamlsrc.yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml")
    return request.param


# ---- YAML bombs and limits -----------------------------------------------------------------------------------------


def test_alias_bomb_is_refused_before_it_expands(scan):
    assert len(BOMB.encode()) == 342
    # *d stands for 7,381 nodes: its 2nd use is over the 20,000 budget, long before 9**9
    assert refused_fast(BOMB) == ["specs/x.yaml:5:11: alias *d takes the document past 20000 nodes [yaml_limit]"]


def test_deep_nesting_is_refused_without_recursion(scan):
    assert refused_fast("[" * 1000) == ["specs/x.yaml:1:33: this list nests deeper than 32 levels [yaml_limit]"]
    assert refused_fast("{a: " * 1000) == ["specs/x.yaml:1:129: this mapping nests deeper than 32 levels [yaml_limit]"]
    block = "".join(" " * i + "- \n" for i in range(0, 200, 2))
    assert refused_fast(block) == ["specs/x.yaml:33:65: this list nests deeper than 32 levels [yaml_limit]"]


def test_depth_counts_what_an_alias_brings(scan):
    deep = "[" * 30 + "1" + "]" * 30
    assert yamlsrc.load_yaml(f"a: &a {deep}\nb: [*a]\n", FILE).value["b"]  # the mapping, the list, 30 more: 32
    assert refused_fast(f"a: &a {deep}\nb: [[[*a]]]\n") == [
        "specs/x.yaml:2:7: alias *a nests deeper than 32 levels [yaml_limit]"
    ]


def test_node_alias_and_recursion_limits(scan):
    flat = "[" + ",".join(["1"] * LIMITS.max_nodes) + "]"
    assert refused_fast(flat, AT_LIMIT_PEAK_BYTES if scan == "pyyaml-only" else SMALL_PEAK_BYTES) == [
        f"specs/x.yaml:1:{2 * LIMITS.max_nodes}: this value takes the document past {LIMITS.max_nodes} nodes [yaml_limit]"
    ]
    aliases = "a: &x 1\nb: [" + ", ".join(["*x"] * (LIMITS.max_aliases + 1)) + "]\n"
    assert refused_fast(aliases) == [
        f"specs/x.yaml:2:{5 + 4 * LIMITS.max_aliases}: alias *x: more than {LIMITS.max_aliases} aliases [yaml_limit]"
    ]
    assert refused_fast("a: &x [1, *x]\n") == ["specs/x.yaml:1:11: alias *x refers to a node that contains it [yaml]"]


def test_a_spec_using_aliases_within_the_limits_is_fine(scan):
    shapes = "shapes: &s [{m: 256, n: 256, k: 256}]\n"
    text = GEMM.replace("  shapes:\n    - {m: 256, n: 256, k: 256}\n", "  " + shapes)
    text += GEMM.replace("name: g", "name: h").replace("  shapes:\n    - {m: 256, n: 256, k: 256}\n", "  shapes: *s\n")
    assert [i.name for i in build_instances(parse_specs(text, FILE))] == ["g", "h"]


def test_huge_text_is_refused_before_parsing():
    shapes = "".join("    - {m: 256, n: 256, k: 256}\n" for _ in range(150_000))
    text = GEMM.replace("    - {m: 256, n: 256, k: 256}\n", shapes)
    assert len(text) > 4_000_000
    assert refused_fast(text) == [f"specs/x.yaml:1:1: spec file is over the {LIMITS.max_bytes}-byte limit [yaml_limit]"]


def test_huge_file_is_refused_unread(tmp_path: Path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # 8 GiB, sparse: reading it whole would take the machine down
        f.truncate(8 * 2**30)
    (tmp_path / "ok.yaml").write_text(GEMM)
    lines, seconds, peak = measured(lambda: load_spec_files([tmp_path], tmp_path))
    assert lines == [f"big.yaml:1:1: spec file is over the {LIMITS.max_bytes}-byte limit [yaml_limit]"]
    assert seconds < FAST_SECONDS
    assert peak < 2 * LIMITS.max_bytes + SMALL_PEAK_BYTES


def test_control_characters_are_located():
    assert errors(edit(GEMM, "name: g", "name: g\x01")) == [
        "specs/x.yaml:1:10: YAML syntax error: character U+0001 is not allowed [yaml]"
    ]
    assert errors(edit(GEMM, "op: gemm", "op: ge\x00mm")) == [
        "specs/x.yaml:2:9: YAML syntax error: character U+0000 is not allowed [yaml]"
    ]


def test_a_key_with_a_newline_stays_on_one_line():
    assert errors(edit(GEMM, "  targets: [gfx942]\n", '  "tar\\ngets": [gfx942]\n')) == [
        "specs/x.yaml:7:3: ['tar\\ngets']: unknown key (did you mean 'targets'?) [unknown_key]"
    ]


# ---- workload ceilings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("m: 256,", f"m: {2**64},",
         (f"specs/x.yaml:5:11: shapes[0].m=18446744073709551616: must be at most {MAX_INT32} (2**31 - 1): TileLang "
         "sizes are int32 [int32]")),
        ("k: 256}", f"k: {2**31}}}",
         (f"specs/x.yaml:5:27: shapes[0].k=2147483648: must be at most {MAX_INT32} (2**31 - 1): TileLang sizes are "
         "int32 [int32]")),
        ("threads: 256", f"threads: {10**30}",
         (f"specs/x.yaml:6:62: tiling.threads=1000000000000000000000000000000: must be at most {MAX_INT32} (2**31 - 1): "
         "TileLang sizes are int32 [int32]")),
    ],
    ids=["m-2**64", "k-2**31", "threads-1e30"],
)
def test_sizes_past_int32_are_refused(old, new, message):
    assert errors(edit(GEMM, old, new)) == [message]


def test_int32_max_itself_is_a_valid_size():
    # along k, which no grid dimension counts (m and n are bounded by the launch grid too: tests/test_limits.py)
    text = edit(edit(GEMM, "k: 256}", f"k: {MAX_INT32}}}"), "  targets:", "  tail: predicated\n  targets:")
    [inst] = build_instances(parse_specs(text, FILE))
    assert inst.shapes[0][2] == MAX_INT32


def test_too_many_shapes():
    shapes = "".join(f"    - {{m: 256, n: 256, k: {256 * (i + 1)}}}\n" for i in range(MAX_SHAPES + 1))
    text = GEMM.replace("    - {m: 256, n: 256, k: 256}\n", shapes)
    assert refused_fast(text) == [
        (f"specs/x.yaml:5:5: shapes: List should have at most {MAX_SHAPES} items after validation, not "
        f"{MAX_SHAPES + 1} [too_long]")
    ]
    build_instances(parse_specs(GEMM.replace("    - {m: 256, n: 256, k: 256}\n", "".join(shapes.splitlines(True)[:-1])),
                                FILE))


def test_too_many_entries_in_one_file():
    text = "".join(f"- {{name: g{i}, op: gemm}}\n" for i in range(MAX_INSTANCES + 1))
    assert refused_fast(text, AT_LIMIT_PEAK_BYTES) == [
        (f"specs/x.yaml:{MAX_INSTANCES + 1}:3: [{MAX_INSTANCES}]: more than {MAX_INSTANCES} spec entries in one file (a spec set may "
        f"have at most {MAX_INSTANCES} kernel instances) [instance_limit]")
    ]


def test_too_many_kernel_instances_across_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the count is entries x targets over every file; a ceiling of 8 shows it without loading 1,024 specs
    ceiling = 8
    monkeypatch.setattr(load, "MAX_INSTANCES", ceiling)
    two = GEMM.replace("[gfx942]", "[gfx942, sm_90]")
    (tmp_path / "a.yaml").write_text("".join(two.replace("name: g", f"name: a{i}") for i in range(ceiling // 2)))
    (tmp_path / "b.yaml").write_text(GEMM.replace("name: g", "name: b"))
    with pytest.raises(SpecErrors) as exc:
        load_spec_files([tmp_path], tmp_path)
    assert [str(e) for e in exc.value.errors] == [
        (f"b.yaml:1:9: name='b': the spec set has more than {ceiling} kernel instances (spec entries x "
        "targets) up to here [instance_limit]")
    ]
    (tmp_path / "b.yaml").unlink()
    assert len(load_spec_files([tmp_path], tmp_path)) == ceiling // 2  # exactly at the ceiling is fine


# ---- finite floats ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "old", "new", "message"),
    [
        (NORM, "eps: 1.0e-6", "eps: .inf", "specs/x.yaml:4:8: eps=inf: Input should be a finite number [finite_number]"),
        (NORM, "eps: 1.0e-6", "eps: .nan", "specs/x.yaml:4:8: eps=nan: Input should be a finite number [finite_number]"),
        (NORM, "eps: 1.0e-6", "eps: 1.0e39",
         ("specs/x.yaml:4:8: eps=1e+39: must be a normal fp32, from 1.175494e-38 to 3.402823e+38: the kernel computes "
          "with it in fp32 [fp32_range]")),
        (ATTENTION, "softmax_scale: 0.125", "softmax_scale: .inf",
         "specs/x.yaml:7:18: softmax_scale=inf: Input should be a finite number [finite_number]"),
        (ATTENTION, "softmax_scale: 0.125", "softmax_scale: -.nan",
         "specs/x.yaml:7:18: softmax_scale='-.nan': Input should be a valid number [float_type]"),
        (ATTENTION, "softmax_scale: 0.125", "softmax_scale: 1.0e308",
         ("specs/x.yaml:7:18: softmax_scale=1e+308: must be a normal fp32, from 1.175494e-38 to 3.402823e+38: the "
          "kernel computes with it in fp32 [fp32_range]")),
        (GEMM, "  targets:", "  verify_tolerance_scale: .nan\n  targets:",
         "specs/x.yaml:7:27: verify_tolerance_scale=nan: Input should be a finite number [finite_number]"),
    ],
    ids=["eps-inf", "eps-nan", "eps-past-fp32", "scale-inf", "scale-minus-nan-is-text", "scale-past-fp32",
         "tolerance-nan"],
)
def test_floats_must_be_finite(base, old, new, message):
    assert errors(edit(base, old, new)) == [message]


# ---- k_pack on a spec that no gfx942 target uses ---------------------------------------------------------------


def test_top_level_k_pack_without_a_gfx942_target():
    text = edit(edit(GEMM, "[gfx942]", "[sm_90]"), "  targets:", "  k_pack: 2\n  targets:")
    assert errors(text) == [
        ("specs/x.yaml:7:11: k_pack=2: k_pack exists only for the ROCm MFMA gemm (gfx942, gfx950), and no such "
         "target here uses this value [k_pack_target]")
    ]
    # also when the one gfx942 target overrides it away
    overridden = edit(text, "[sm_90]", "[gfx942, sm_90]") + "  overrides:\n    gfx942:\n      k_pack: 1\n"
    assert errors(overridden)[0].startswith("specs/x.yaml:7:11: k_pack=2: ")
    # a gfx942 target that takes it makes it fine
    build_instances(parse_specs(edit(text, "[sm_90]", "[gfx942, sm_90]"), FILE))


# ---- the CLI -----------------------------------------------------------------------------------------------------


def test_cli_refuses_the_alias_bomb_in_one_line(tmp_path: Path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    start = time.perf_counter()
    result = CliRunner().invoke(app, ["validate", str(bomb)])
    assert time.perf_counter() - start < FAST_SECONDS
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{bomb.as_posix()}:5:11: alias *d takes the document past 20000 nodes [yaml_limit]"
    ]
