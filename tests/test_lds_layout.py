"""GEMM lds_layout (issue 12): B stored K x N staged in LDS as N x K on the AMD targets (transposed_b).
Its rules with the user's coordinates, its kernel names (the default renames nothing), its rendered and
lowered code (HIP, and the same gfx942 program lowered for sm_90, as verify's logic check compiles it), its
search axis, and what the real gfx942 ISA reads from LDS: ds_read_b128 / ds_read_b64 where the natural
layout reads 2 bytes a lane (ds_read_u16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectext import FILE, REPO_ROOT, edit, errors
from toolchains import GFX942_MISSING

from codegen.build.compile import BuildOptions, build_files
from codegen.core.hardware import Target
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.tune.search import constrain, expand

BASE = """\
- name: g
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nn
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 128, block_n: 128, block_k: 32, threads: 256}
  pipeline: {stages: 2}
  lds_layout: transposed_b
  tail: none
  targets: [gfx942, sm_90]
"""
NATURAL = edit(BASE, "  lds_layout: transposed_b\n", "")
SM90_OVERRIDE = "  overrides:\n    sm_90:\n      lds_layout: transposed_b\n"


def files(text: str = BASE) -> dict[Target, object]:
    return {f.instance.target: f for f in render_all(build_instances(parse_specs(text, FILE)))}


# ---- rules ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("layout: nn", "layout: nt",
     ("specs/x.yaml:9:15: lds_layout=transposed_b: layout nt stores B as N x K, K contiguous already: use natural "
      "[lds_layout_applies]")),
    ("layout: nn", "layout: tt",
     ("specs/x.yaml:9:15: lds_layout=transposed_b: layout tt stores B as N x K, K contiguous already: use natural "
      "[lds_layout_applies]")),
    ("{a: fp16, b: fp16, out: fp16}", "{a: fp32, b: fp32, out: fp32}",
     ("specs/x.yaml:9:15: lds_layout=transposed_b: not with fp32 inputs (precision ieee) (not supported): "
      "transposed_b is built for 16-bit B tiles; fp32 tiles are staged as stored: use natural "
      "[unsupported_combination]")),
    ("[gfx942, sm_90]", "[sm_90]",
     ("specs/x.yaml:9:15: lds_layout=transposed_b: transposed_b is only for gfx942, gfx950, and no such target "
      "here uses this value [lds_layout_target]")),
    ("block_n: 128, block_k: 32", "block_n: 16, block_k: 16",
     ("specs/x.yaml:9:15: lds_layout=transposed_b: the 16x16 tile of B (block_k x block_n) does not split into 256 "
      "threads x whole rows of 8 elements (16 bytes): block_k * block_n must be a multiple of threads * 8, and "
      "block_k of the rows per thread [lds_layout_tile]")),
    ("lds_layout: transposed_b", "lds_layout: transposed",
     "specs/x.yaml:9:15: lds_layout='transposed': Input should be 'natural' or 'transposed_b' [enum]"),
])
def test_lds_layout_rules(old, new, expected):
    assert errors(edit(BASE, old, new)) == [expected]


def test_an_sm_90_override_is_refused_where_it_is_written():
    assert errors(NATURAL + SM90_OVERRIDE) == [
        ("specs/x.yaml:13:19: overrides.sm_90.lds_layout=transposed_b: transposed_b is only for gfx942, gfx950, "
         "not sm_90 [lds_layout_target]")]


def test_gemv_has_no_b_tile_to_transpose():
    text = edit(edit(edit(BASE, "layout: nn", "layout: nt"), "  tail: none\n", "  structure: gemv\n  tail: none\n"),
                "{block_m: 128, block_n: 128, block_k: 32, threads: 256}", "{block_m: 16, block_n: 8, block_k: 256, threads: 256}")
    text = edit(text, "{m: 256, n: 256, k: 256}", "{m: 4, n: 256, k: 256}")
    assert errors(text) == [("specs/x.yaml:9:15: lds_layout=transposed_b: not with structure gemv (not supported): "
                             "gemv stages no B tile in LDS [unsupported_combination]")]


def test_an_amd_override_points_into_the_override():
    text = edit(NATURAL, "layout: nn", "layout: nt") + "  overrides:\n    gfx942:\n      lds_layout: transposed_b\n"
    assert errors(text) == [
        ("specs/x.yaml:13:19: overrides.gfx942.lds_layout=transposed_b: layout nt stores B as N x K, K contiguous "
         "already: use natural [lds_layout_applies]")]


# ---- names and instances ----------------------------------------------------------------------------

def test_the_default_renames_nothing_and_sm_90_stages_b_as_stored():
    natural, transposed = files(NATURAL), files(BASE)
    explicit = files(edit(BASE, "lds_layout: transposed_b", "lds_layout: natural"))
    assert {t: f.uri for t, f in explicit.items()} == {t: f.uri for t, f in natural.items()}
    assert "_ldsbt" not in natural[Target.GFX942].uri and "lds_layout" not in natural[Target.GFX942].text
    # gfx942: another kernel, named so; sm_90 (no transposed_b): the same kernel as without the field
    g = transposed[Target.GFX942]
    assert g.uri.startswith("gemm_fp16_nn_128x128x32_t256_s2_ldsbt_gfx942_")
    assert g.instance.lds_layout == "transposed_b" and "def _stage_b(B, B_s, B_rows, B_cols, k, col0):" in g.text
    assert transposed[Target.SM_90].uri == natural[Target.SM_90].uri
    assert transposed[Target.SM_90].text == natural[Target.SM_90].text
    # an override for gfx942 alone is the same kernel as the top-level field
    assert files(NATURAL + "  overrides:\n    gfx942:\n      lds_layout: transposed_b\n")[Target.GFX942].uri == g.uri


def test_committed_nn_seeds_use_it_on_the_amd_targets_only():
    from codegen.generate.pipeline import Project

    for f in Project(root=REPO_ROOT).rendered():
        inst = f.instance
        if (inst.op != "gemm" or inst.structure != "tiled" or inst.layout != "nn" or inst.precision is not None
                or inst.split_k > 1):  # the split-K seeds stage B as stored (their twins are the natural kernels)
            continue
        assert inst.transposed_b == (inst.target != Target.SM_90), f.uri
        assert ("_ldsbt_" in f.uri) == inst.transposed_b


# ---- rendered and lowered code ------------------------------------------------------------------------

def test_rendered_module_stages_b_as_n_by_k_and_reads_it_as_the_nt_kernel():
    text = files(edit(BASE, "  tail: none\n", "  k_pack: 2\n  tail: none\n"))[Target.GFX942].text
    assert "B: T.Tensor((K, N), B_DTYPE)" in text  # stored as written
    assert "B_shared = T.alloc_shared((BLOCK_N, BLOCK_K), B_DTYPE)" in text  # staged N x K
    assert "B_VEC, B_ROWS = 8, 2" in text  # 32x128 tile over 256 threads: 2 rows of 16 bytes each
    assert "T.annotate_layout({B_rows: _b_by_rows(), B_cols: _b_by_cols()})" in text
    # copy A, the three statements that stage B, then the gemm (one stage later)
    assert "T.Pipelined(k_tiles, order=[0, 1, 2, 3, 4], stage=[0, 0, 0, 0, 1])" in text
    assert text.count("transpose_A=False, transpose_B=True, policy=T.GemmWarpPolicy.Square, k_pack=2)") == 3
    assert "'lds_layout': 'transposed_b'" in text


@pytest.mark.parametrize("edits", [
    [],
    [("tail: none", "tail: predicated"), ("{m: 256, n: 256, k: 256}", "{m: 200, n: 136, k: 100}")],
    [("tail: none", "tail: specialized"), ("layout: nn", "layout: tn"), ("{m: 256, n: 256, k: 256}", "{m: 200, n: 136, k: 100}")],
    [("stages: 2", "stages: 1"), ("  tail: none\n", "  unroll: 2\n  tail: none\n")],
], ids=["none", "predicated", "tn_specialized", "unrolled"])
@pytest.mark.parametrize("run", [Target.GFX942, Target.SM_90])
def test_lowers_for_hip_and_as_verify_s_logic_check_on_sm_90(edits, run):
    """The gfx942 program lowered for its own target and for sm_90 (what `tilegen verify` on an NVIDIA GPU
    compiles): wide global loads of B into registers, writes along K into the N x K tile."""
    text = BASE
    for old, new in edits:
        text = edit(text, old, new)
    f = files(text)[Target.GFX942]
    src = lower(f, f.instance.shapes[0], run).source
    assert "half_t B_rows[16]" in src and "half_t B_cols[16]" in src  # 32x128 / 256 threads, two images
    assert "*(uint4*)(B_rows" in src  # 16-byte loads of B's rows (bounds-checked ones keep the width)
    assert "*(uint1*)(((half_t*)B_shared)" in src or "*(uint1*)(((half_t*)B_tail)" in src  # 2 rows = 4 bytes
    assert ("__builtin_amdgcn_mfma" if run == Target.GFX942 else "wgmma") in src


# ---- search ---------------------------------------------------------------------------------------------

def test_search_lists_it_and_the_sm_90_point_is_refused_by_rule():
    search = "  search:\n    gfx942:\n      lds_layout: [natural, transposed_b]\n    sm_90:\n      lds_layout: [natural, transposed_b]\n"
    (loaded,) = parse_specs(NATURAL + search, FILE)
    gfx = constrain(loaded, Target.GFX942, expand(loaded.spec, Target.GFX942))
    assert [p.same_as for p in gfx.points] == [gfx.hand.uri, None] and "_ldsbt_" in gfx.points[1].uri
    sm = constrain(loaded, Target.SM_90, expand(loaded.spec, Target.SM_90))
    assert sm.points[1].rules == ("lds_layout_target",)


# ---- the real gfx942 ISA ---------------------------------------------------------------------------------


@pytest.mark.skipif(GFX942_MISSING is not None, reason="no gfx942 toolchain")
def test_gfx942_isa_reads_b_from_lds_as_wide_as_the_nt_kernel(build_cache):
    """One 128x128x64 fp16 block, k_pack 2, built three ways: nn natural reads B 2 bytes a lane (ds_read_u16),
    nn transposed_b reads only ds_read_b128 -- as many as nt -- with no spill and no fewer waves per SIMD."""
    tile = edit(edit(NATURAL, "block_k: 32", "block_k: 64"), "  tail: none\n", "  k_pack: 2\n  tail: none\n")
    tile = edit(tile, "{m: 256, n: 256, k: 256}", "{m: 4096, n: 4096, k: 4096}")  # a K loop TileLang keeps
    text = (tile.replace("name: g", "name: nat") + tile.replace("name: g", "name: bt").replace("  k_pack", "  lds_layout: transposed_b\n  k_pack")
            + tile.replace("name: g", "name: nt").replace("layout: nn", "layout: nt"))
    built = render_all(build_instances(parse_specs(text, FILE), [Target.GFX942]))
    report = build_files(built, REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=2))
    loops = {}
    for r in report.results:
        assert r.ok, r.error
        (k,) = r.kernels
        assert k.spills == 0
        loops[r.name] = (k.asm.isa.main_loop.lds_reads, k.waves_per_simd)
    (nat, nat_waves), (bt, bt_waves), (nt, _) = loops["nat"], loops["bt"], loops["nt"]
    assert nat.get("ds_read_u16", 0) > 0
    assert set(bt) == {"ds_read_b128"} and bt == nt
    assert sum(bt.values()) < sum(nat.values()) and bt_waves >= nat_waves


def test_committed_reports_show_wide_lds_reads_for_every_transposed_b_kernel():
    """reports/static/gfx942.json and gfx950.json (`tilegen build --all --write-report`): every transposed_b
    kernel reads LDS in its main loop with 8- or 16-byte reads only, and spills nothing."""
    seen = 0
    for target in (Target.GFX942, Target.GFX950):
        doc = json.loads((REPO_ROOT / "reports" / "static" / f"{target.value}.json").read_text())
        for b in doc["builds"]:
            if "_ldsbt_" not in b["uri"]:
                continue
            for k in b["kernels"]:
                reads = k["isa"]["main_loop"]["lds_reads"]
                assert reads and set(reads) <= {"ds_read_b128", "ds_read_b64", "ds_read2st64_b64", "ds_read2_b64"}, b["uri"]
                assert k["vgpr_spills"] == 0 and k["sgpr_spills"] == 0, b["uri"]
                seen += 1
    assert seen >= 4  # the nn seeds: fp16 and bf16 on gfx942, bf16 on gfx950, the unrolled bf16 on gfx942


def test_docs_name_the_tunable_and_its_rules():
    page = Path(REPO_ROOT / "docs" / "gemm.md").read_text()
    for word in ("`lds_layout`", "`lds_layout_target`", "`lds_layout_applies`", "`lds_layout_tile`"):
        assert word in page
