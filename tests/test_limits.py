"""Limits from the hardware table: launch grids (rule grid_limit), 64-bit index arithmetic for tensors of
2**31 elements or more (read in the lowered CUDA and HIP source; rule index_width where TileLang fails).

The grid tests are expect tests of the one-line errors; the launch grids the rule checks are compared with
the grids TileLang itself records while lowering, so the families' `launch_grids` cannot drift from
their templates unnoticed.
"""

from __future__ import annotations

import re

import pytest
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.core.errors import TilegenError
from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

GEMM = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
    - {m: 8388736, n: 256, k: 256}
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256}
  targets: [sm_90]
"""

SOFTMAX = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  shapes:
    - {rows: 4096, cols: 4096}
    - {rows: 1099511627776, cols: 1024}
  threads: 128
  targets: [sm_90]
"""

ATTENTION = """\
- name: a
  op: attention
  dtypes: {input: fp16, out: fp16}
  head_dim: 128
  shapes:
    - {batch: 65536, heads: 2, kv_heads: 2, seq_q: 128, seq_kv: 128}
  tiling: {block_m: 64, block_n: 64, threads: 128}
  pipeline: {stages: 1}
  targets: [sm_90]
"""


def _valid(text: str) -> bool:
    build_instances(parse_specs(text, FILE))
    return True


# ---- grid_limit ----------------------------------------------------------------------------------

def test_gemm_grid_y_past_cudas_65535_is_refused_on_sm90():
    # ceil(8388736 / 128) = 65537 row blocks along grid y: it lowered and "built" before, failing only at launch
    assert errors(GEMM) == ["specs/x.yaml:7:7: shapes[1]: grid y = 65537 exceeds sm_90's limit 65535 [grid_limit]"]


def test_gemm_grid_y_boundary_per_target():
    # 65535 row blocks of 128: the largest m sm_90 launches; 8388608 is 65536 blocks, one too many on
    # sm_90 and exactly HIP's maxGridSize[1] on gfx942
    assert _valid(edit(GEMM, "m: 8388736", "m: 8388480"))
    assert errors(edit(GEMM, "m: 8388736", "m: 8388608")) == [
        "specs/x.yaml:7:7: shapes[1]: grid y = 65536 exceeds sm_90's limit 65535 [grid_limit]"]
    on_amd = edit(GEMM, "targets: [sm_90]", "targets: [gfx942]")
    assert _valid(edit(on_amd, "m: 8388736", "m: 8388608"))
    assert errors(on_amd) == ["specs/x.yaml:7:7: shapes[1]: grid y = 65537 exceeds gfx942's limit 65536 [grid_limit]"]


def test_2_to_the_40_rows_is_refused_on_both_targets():
    # a size past int32 is refused by the spec model before any grid is computed (the grid it would make,
    # 2**40 workgroups along x, is past both targets' 2**31 - 1 too)
    both = edit(SOFTMAX, "targets: [sm_90]", "targets: [gfx942, sm_90]")
    assert errors(both) == [("specs/x.yaml:6:14: shapes[1].rows=1099511627776: must be at most 2147483647 "
                            "(2**31 - 1): TileLang sizes are int32 [int32]")]


def test_gemm_2_to_the_40_rows_is_refused():
    lines = errors(edit(GEMM, "m: 8388736", "m: 1099511627776"))
    assert len(lines) == 1 and lines[0].endswith("[int32]"), lines
    # the largest m the spec model takes still makes too tall a grid for sm_90: the grid rule refuses it
    lines = errors(edit(GEMM, "m: 8388736", "m: 2147483520"))  # 2**31 - 128: a block multiple
    assert "specs/x.yaml:7:7: shapes[1]: grid y = 16777215 exceeds sm_90's limit 65535 [grid_limit]" in lines


def test_gfx942_counts_work_items_along_x():
    # one 128-thread workgroup per row: 2**25 rows are 2**32 work-items along x, one past the uint32
    # grid size of the AQL dispatch packet; sm_90 counts blocks and takes them
    amd = edit(edit(SOFTMAX, "targets: [sm_90]", "targets: [gfx942]"), "rows: 1099511627776", "rows: 33554432")
    assert errors(amd) == [
        ("specs/x.yaml:6:7: shapes[1]: grid x = 33554432 workgroups x 128 threads = 4294967296 work-items "
        "exceeds gfx942's limit 4294967295 per dimension [grid_limit]")]
    assert _valid(edit(amd, "rows: 33554432", "rows: 33554431"))
    assert _valid(edit(SOFTMAX, "rows: 1099511627776", "rows: 33554432"))


def test_attention_batch_is_grid_z():
    assert errors(ATTENTION) == ["specs/x.yaml:6:7: shapes[0]: grid z = 65536 exceeds sm_90's limit 65535 [grid_limit]"]
    assert _valid(edit(ATTENTION, "targets: [sm_90]", "targets: [gfx942]"))
    assert _valid(edit(ATTENTION, "batch: 65536", "batch: 65535"))


def test_gemm_specialized_edge_grids_are_checked():
    spec = edit(edit(GEMM, "targets: [sm_90]", "targets: [sm_90]\n  tail: specialized"),
                "m: 8388736, n: 256, k: 256", "m: 8388609, n: 128, k: 128")
    # interior 65536 row blocks along y; the bottom edge launches along x, the right edge has none (n whole)
    assert errors(spec) == ["specs/x.yaml:7:7: shapes[1]: grid y = 65536 exceeds sm_90's limit 65535 [grid_limit]"]


# ---- the launch grids are TileLang's -----------------------------------------------------------

LAUNCH_PROBES = """\
- name: pg
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes: [{m: 300, n: 200, k: 64}]
  tiling: {block_m: 128, block_n: 64, block_k: 32, threads: 128}
  swizzle_panel: 4
  tail: predicated
  targets: [gfx942, sm_90]
- name: ps
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes: [{m: 300, n: 200, k: 64}]
  tiling: {block_m: 128, block_n: 64, block_k: 32, threads: 128}
  tail: specialized
  targets: [gfx942, sm_90]
- name: pr
  op: rmsnorm
  eps: 1.0e-6
  dtypes: {input: fp16, out: fp16}
  shapes: [{rows: 37, cols: 1024}]
  threads: 128
  targets: [gfx942, sm_90]
- name: pa
  op: attention
  dtypes: {input: fp16, out: fp16}
  head_dim: 64
  shapes: [{batch: 3, heads: 4, kv_heads: 2, seq_q: 200, seq_kv: 64}]
  tiling: {block_m: 64, block_n: 64, threads: 128}
  tail: predicated
  targets: [gfx942, sm_90]
- name: psk
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes: [{m: 200, n: 250, k: 1100}]
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  split_k: 4
  tail: predicated
  targets: [gfx942, sm_90]
- name: pd
  op: attention
  variant: decode
  dtypes: {input: fp16, out: fp16}
  head_dim: 64
  shapes: [{batch: 3, heads: 16, kv_heads: 2, seq_q: 9, seq_kv: 200}]
  tiling: {block_m: 64, block_n: 32, threads: 128}
  split_kv: 5
  causal: bottom_right
  tail: predicated
  targets: [gfx942, sm_90]
"""


@pytest.mark.parametrize("f", render_all(build_instances(parse_specs(LAUNCH_PROBES, "tests/launch_probes.yaml"))),
                         ids=lambda f: f"{f.instance.name}-{f.instance.target.value}")
def test_launch_grids_match_what_tilelang_launches(f):
    pytest.importorskip("tilelang")
    from codegen.build.compile import _lower_recording_launches

    shape = f.instance.shapes[0]
    _, launches = _lower_recording_launches(f, shape)
    assert sorted(tuple(k["grid"]) for k in launches) == sorted(f.instance.launch_grids(shape))


# ---- 64-bit indices ------------------------------------------------------------------------------

def _indices(source: str, buffer: str) -> list[str]:
    """Every index expression of a global buffer in lowered source: `buffer + (...)` and `buffer[...]`."""
    out = []
    for m in re.finditer(rf"(?<![\w.]){buffer}(?:\s*\+\s*(?=\()|(?=\[))", source):
        i, depth = m.end(), 0
        for j in range(i, len(source)):
            depth += source[j] in "([" and 1 or 0
            depth -= source[j] in ")]" and 1 or 0
            if depth == 0:
                out.append(source[i:j + 1])
                break
    return out


# (spec name, buffers of 2**31 elements or more at the big shape, big shape, small shape)
INDEX_CASES = [
    ("softmax_fp16_two_pass", ("X", "Y"), (524289, 4096), (4096, 4096)),  # 2**31 + 4096 elements
    ("rmsnorm_fp16", ("X", "Y"), (524289, 4096), (4096, 4096)),
    ("gemm_fp16_nt", ("C",), (65664, 32768, 256), (4096, 4096, 256)),  # C: 2**31 + 2**22 elements
    ("gemm_fp16_ragged_pred", ("C",), (65539, 32769, 255), (4097, 4095, 255)),
    ("attn_fp16_d128", ("O",), (257, 16, 16, 4096, 256), (1, 16, 16, 4096, 256)),  # O: 257 * 2**23
]


@pytest.fixture(scope="module")
def committed():

    return {(f.instance.name, f.instance.target.value): f for f in hand_files()}


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
@pytest.mark.parametrize(("name", "buffers", "big", "small"), INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_tensors_of_2_to_the_31_elements_index_in_int64(committed, name, buffers, big, small, target):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = committed[(name, target)]
    big_src = lower(f, big, f.instance.target).source
    small_src = lower(f, small, f.instance.target).source
    for buf in buffers:
        wide, narrow = _indices(big_src, buf), _indices(small_src, buf)
        assert wide and narrow, f"no index of {buf} found in the lowered source"
        assert all("(int64_t)" in e for e in wide), [e for e in wide if "(int64_t)" not in e][:2]
        assert not any("int64_t" in e for e in narrow), [e for e in narrow if "int64_t" in e][:2]


SPECIALIZED = """\
- name: sp
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 32771, n: 65536, k: 255}
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256}
  tail: specialized
  targets: [gfx942, sm_90]
"""


def test_specialized_gemm_edge_offset_past_int32_is_refused():
    assert errors(SPECIALIZED) == [
        ("specs/x.yaml:6:7: shapes[0]: the specialized bottom-edge kernel starts at element 2147483648 of C "
        "((m // block_m * block_m) * n), past the int32 literals TileLang lowers: use tail: predicated [index_width]")]
    assert _valid(edit(SPECIALIZED, "m: 32771", "m: 32767"))  # 255 whole blocks: the edge starts at 2139095040
    assert _valid(edit(SPECIALIZED, "m: 32771", "m: 65536"))  # no bottom edge at all
    assert _valid(edit(SPECIALIZED, "tail: specialized", "tail: predicated"))


@pytest.mark.parametrize(("layout", "shape", "message", "valid_layout"), [
    ("nt", "{m: 65537, n: 256, k: 65600}", "bottom-edge kernel starts at element 4299161600 of A ((m // block_m * block_m) * k)",
     "tn"),
    ("nt", "{m: 256, n: 65537, k: 65600}", "right-edge kernel starts at element 4299161600 of B ((n // block_n * block_n) * k)",
     "nn"),
    ("nn", "{m: 256, n: 65536, k: 32801}", ("interior kernel starts at element 2149580800 of B ((k // block_k * block_k) * n, "
                                           "its last K tile)"), "nt"),
    ("tn", "{m: 65536, n: 256, k: 32801}", ("interior kernel starts at element 2149580800 of A ((k // block_k * block_k) * m, "
                                           "its last K tile)"), "nt"),
], ids=["nt-A-bottom", "nt-B-right", "nn-B-last-k", "tn-A-last-k"])
def test_specialized_operand_edge_offsets_past_int32_are_refused(layout, shape, message, valid_layout):
    """The edges of A and B as well as C's: with `tail: specialized` each of these shapes fails to lower (TileLang's
    int32 literal check: the first two and the nn one were lowered to see it); the same shape in a layout where
    that edge's offset is a column index is valid."""
    def spec(layout):
        return edit(edit(SPECIALIZED, "layout: nt", f"layout: {layout}"), "{m: 32771, n: 65536, k: 255}", shape)

    assert errors(spec(layout)) == [(f"specs/x.yaml:6:7: shapes[0]: the specialized {message}, past the int32 literals "
                                    "TileLang lowers: use tail: predicated [index_width]")]
    assert _valid(spec(valid_layout))


def test_the_index_width_rule_is_what_tilelang_fails_on():
    """If TileLang learns to widen the literal, this fails: drop rule index_width then."""
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    text = edit(SPECIALIZED, "targets: [gfx942, sm_90]", "targets: [sm_90]")
    [f] = render_all(build_instances(parse_specs(edit(text, "m: 32771", "m: 32767"), FILE)))
    with pytest.raises(TilegenError, match="exceeds maximum of int32"):
        lower(f, (32771, 65536, 255), f.instance.target)
    lower(f, (32767, 65536, 255), f.instance.target)
