"""GEMM staging padded (issue 12, odd leading dimensions): A and B copied into zero-padded workspaces of whole
blocks by two staging kernels, then a main loop of whole, aligned tiles. Its rules with the user's coordinates,
its kernel names (the default renames nothing), the rendered module and its workspaces for every layout, the
lowered code (no bounds checks in the K loop: 16-byte cp.async on gfx942, TMA on sm_90), the search axis, the
numerics on the CPU (the `dropped_k_column` control rejected, NaN-filled workspaces), and the real gfx942 ISA:
16-byte global loads in the padded main loop where the predicated kernel of the same tiles loads 2 bytes."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch
from numcheck import check_output
from spectext import FILE, REPO_ROOT, check_rule_case, edit, errors
from toolchains import GFX942_MISSING

from codegen.build.compile import BuildOptions, build_files
from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.gemm.numerics import gemm_derived_shapes
from codegen.families.gemm.rules import unaligned_operands
from codegen.families.gemm.spec import GemmShape
from codegen.families.spec import TailPolicy
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.tune.search import constrain, expand

BASE = """\
- name: p
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16}
  layout: nt
  shapes:
    - {m: 200, n: 136, k: 100}
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}
  pipeline: {stages: 2}
  staging: padded
  tail: predicated
  targets: [gfx942, sm_90]
"""
NONE = edit(BASE, "  staging: padded\n", "")
SEED = "gemm_fp16_ragged_padded_oddk"
TWIN = "gemm_fp16_ragged_pred_oddk"  # the same tiles read straight from A and B (gemm_fp16_ragged_pred's kernel)


def files(text: str = BASE):
    return {f.instance.target: f for f in render_all(build_instances(parse_specs(text, FILE)))}


# ---- rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("k: 100}", "k: 104}",
     ("specs/x.yaml:6:7: shapes[0]: every leading dimension is a multiple of 8 elements (16 bytes) (A's k=104, B's "
      "k=104), so the tiles load 16 bytes at a time unstaged and staging: padded would only add copies: use "
      "staging: none [staging_applies]")),
    # fp32 inputs are staged too: 16 bytes are 4 of them, so k=100 is aligned for fp32
    ("{a: fp16, b: fp16, out: fp16}", "{a: fp32, b: fp32, out: fp32}",
     ("specs/x.yaml:6:7: shapes[0]: every leading dimension is a multiple of 4 elements (16 bytes) (A's k=100, B's "
      "k=100), so the tiles load 16 bytes at a time unstaged and staging: padded would only add copies: use "
      "staging: none [staging_applies]")),
    ("{a: fp16, b: fp16, out: fp16}", "{a: fp32, b: fp32, out: fp32}\n  precision: tf32",
     ("specs/x.yaml:10:12: staging=padded: not with precision tf32 / 3xtf32 (staged) (not supported): tf32 / 3xtf32 "
      "stage A and B into zero-padded workspaces already: use staging none, or tf32_convert inline "
      "[unsupported_combination]")),
    ("tail: predicated", "tail: specialized",
     ("specs/x.yaml:10:9: tail=specialized: not with staging padded (not supported): the padded operands are whole "
      "blocks, so there are no edge kernels to specialize: use tail predicated [unsupported_combination]")),
    ("tail: predicated", "tail: none",
     ("specs/x.yaml:10:9: tail=none: not with staging padded (not supported): with tail none every dimension is "
      "whole blocks, so every leading dimension is 16-byte aligned and there is nothing to pad "
      "[unsupported_combination]")),
    # the padded staging composes with a K split, a dynamic M and an unrolled K loop (whole unrolled steps of k)
    ("  staging: padded\n", "  staging: padded\n  split_k: 2\n", None),
    ("  staging: padded\n", "  staging: padded\n  dynamic_m: {min: 1, max: 512}\n", None),
    ("k: 100}\n  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}\n  pipeline: {stages: 2}",
     "k: 132}\n  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}\n  pipeline: {stages: 1}\n  unroll: 2",
     ("specs/x.yaml:9:11: unroll=2: shapes[0].k=132 is not a multiple of block_k*unroll=64 [unroll_divides]")),
    ("k: 100}\n  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}\n  pipeline: {stages: 2}",
     "k: 192}\n  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}\n  pipeline: {stages: 1}\n  unroll: 2",
     ("specs/x.yaml:6:7: shapes[0]: every leading dimension is a multiple of 8 elements (16 bytes) (A's k=192, B's "
      "k=192), so the tiles load 16 bytes at a time unstaged and staging: padded would only add copies: use "
      "staging: none [staging_applies]")),
    ("  staging: padded\n", "  staging: pad\n",
     "specs/x.yaml:9:12: staging='pad': Input should be 'none' or 'padded' [enum]"),
])
def test_staging_rules(old, new, expected):
    check_rule_case(edit(BASE, old, new), expected)


def test_staging_composes_with_a_persistent_grid_the_tma_copy_options_and_transposed_b():
    """The padded staging is a part of the one template: its kernels write the workspaces, and the main kernel
    is whatever the other traits make it (here a persistent tile loop, a shared epilogue, B staged N x K)."""
    pers = files(edit(BASE, "  staging: padded\n", "  staging: padded\n  grid: persistent\n"))
    for f in pers.values():
        assert "_pad_pers_" in f.uri and "T.copy(A_PAD[" in f.text and "tile_coords(t, tiles_m, tiles_n)" in f.text
    shared = files(edit(BASE, "  staging: padded\n", "  staging: padded\n  epilogue: shared\n"))[Target.SM_90]
    assert "T.copy(C_shared, C[row0, col0])" in shared.text and "_stage(B, B_PAD" in shared.text
    nn = files(edit(edit(BASE, "layout: nt", "layout: nn"), "  staging: padded\n",
                    "  staging: padded\n  lds_layout: transposed_b\n"))[Target.GFX942]
    assert "_stage_b(B_PAD, B_shared, B_rows, B_cols, k, col0)" in nn.text


def test_gemv_has_no_tiles_to_stage():
    text = edit(edit(BASE, "{block_m: 64, block_n: 64, block_k: 32, threads: 128}",
                     "{block_m: 16, block_n: 8, block_k: 256, threads: 256}"), "  staging: padded\n",
                "  staging: padded\n  structure: gemv\n")
    found = errors(edit(text, "{m: 200, n: 136, k: 100}", "{m: 8, n: 136, k: 104}"))
    assert found == [("specs/x.yaml:9:12: staging=padded: not with structure gemv (not supported): gemv loads B "
                      "straight into registers: there are no tiles to stage [unsupported_combination]")]


def test_staging_applies_at_each_shape_and_names_the_override():
    text = edit(BASE, "    - {m: 200, n: 136, k: 100}\n", "    - {m: 200, n: 136, k: 100}\n    - {m: 64, n: 64, k: 64}\n")
    assert [e.split(": ", 2)[:2] for e in errors(text)] == [["specs/x.yaml:7:7", "shapes[1]"]]
    over = edit(NONE, "  targets: [gfx942, sm_90]\n",
                "  targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n      staging: padded\n")
    assert set(files(over)) == {Target.GFX942, Target.SM_90}  # k=100: unaligned, legal
    found = errors(edit(over, "k: 100}", "k: 96}"))
    assert len(found) == 1 and "staging: padded (overrides.sm_90.staging) would only add copies" in found[0]


@pytest.mark.parametrize(("layout", "shape", "unaligned"), [
    ("nt", (8, 8, 1001), ["A", "B"]), ("nt", (1001, 1001, 1000), []),  # nt: both rows of stride k
    ("nn", (1000, 1001, 1000), ["B"]), ("nn", (1000, 1000, 1001), ["A"]),  # A M x K (k), B K x N (n)
    ("tn", (1001, 1000, 8), ["A"]), ("tt", (1000, 8, 1001), ["B"]),  # A K x M (m), B N x K (k)
])
def test_the_leading_dimension_is_the_stored_row_stride(layout, shape, unaligned):
    (ls,) = parse_specs(edit(BASE, "layout: nt", f"layout: {layout}"), FILE)
    m, n, k = shape
    assert unaligned_operands(ls.spec, GemmShape(m=m, n=n, k=k)) == unaligned


# ---- names and the module ------------------------------------------------------------------------

def test_staging_none_is_the_plain_kernel_and_padded_is_in_the_name():
    plain = files(NONE)
    explicit = files(edit(BASE, "staging: padded", "staging: none"))
    for t, f in plain.items():
        assert explicit[t].uri == f.uri and explicit[t].text == f.text and f.instance.template == "gemm.py.j2"
        assert '"staging":"none"' in f.instance.canonical() and "A_PAD" not in f.text
    for t, f in files().items():
        assert f.instance.padded and "A_PAD: T.Tensor(" in f.text and "_s2_pad_predicated_" in f.uri
        assert f.uri.replace("_pad_", "_") != plain[t].uri  # another hash too
        assert f.instance.metadata(f.uri)["staging"] == "padded"


def test_committed_seeds_without_staging_have_no_staging_code():
    for f in Project().rendered():
        if f.instance.op == "gemm" and not f.instance.padded:
            assert "A_PAD" not in f.text and '"staging":"none"' in f.instance.canonical(), f.uri


@pytest.mark.parametrize(("layout", "a_pad", "b_pad", "a_ws", "b_ws"), [
    ("nt", "(_whole(M, BLOCK_M), _whole(K, BLOCK_K))", "(_whole(N, BLOCK_N), _whole(K, BLOCK_K))", (256, 128), (192, 128)),
    ("nn", "(_whole(M, BLOCK_M), _whole(K, BLOCK_K))", "(_whole(K, BLOCK_K), _whole(N, BLOCK_N))", (256, 128), (128, 192)),
    ("tn", "(_whole(K, BLOCK_K), _whole(M, BLOCK_M))", "(_whole(K, BLOCK_K), _whole(N, BLOCK_N))", (128, 256), (128, 192)),
    ("tt", "(_whole(K, BLOCK_K), _whole(M, BLOCK_M))", "(_whole(N, BLOCK_N), _whole(K, BLOCK_K))", (128, 256), (192, 128)),
])
def test_rendered_module_stages_both_operands_in_their_layout(layout, a_pad, b_pad, a_ws, b_ws):
    text = edit(BASE, "layout: nt", f"layout: {layout}")
    text = edit(text, "{m: 200, n: 136, k: 100}", "{m: 201, n: 137, k: 101}")  # every stride odd
    for f in files(text).values():
        src, inst = f.text, f.instance
        assert f"A_PAD: T.Tensor({a_pad}, A_DTYPE)," in src and f"B_PAD: T.Tensor({b_pad}, B_DTYPE)," in src
        assert src.count("with T.Kernel(") == 3 and src.count("_stage(") == 3  # the macro and its two calls
        assert "T.copy(A_PAD[" in src and "T.copy(B_PAD[" in src and "T.copy(A[" not in src.split("_stage(B")[1]
        assert inst.workspace_shapes((201, 137, 101)) == (a_ws, b_ws) and inst.workspace_dtypes() == ("fp16", "fp16")
        kt = -(-101 // 32)
        assert inst.launch_grids((201, 137, 101)) == ((kt, 4, 1), (kt, 3, 1), (3, 4, 1))


@pytest.mark.parametrize("target", [Target.GFX942, Target.SM_90])
def test_lowered_main_loop_reads_whole_aligned_tiles(target):
    """The main kernel (the third) reads only the workspaces, with no bounds check before its store of C:
    16-byte cp.async on gfx942, TMA on sm_90; the staging kernels read the operands bounds-checked."""
    f = files(edit(BASE, "{m: 200, n: 136, k: 100}", "{m: 200, n: 136, k: 101}"))[target]
    src = lower(f, f.instance.shapes[0], target).source
    bodies = re.split(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?', src)
    main = next(b for b in bodies if b.startswith(f"{f.uri}_kernel_2(") and "{" in b.split("\n")[0])
    stage_a = next(b for b in bodies if b.startswith(f"{f.uri}_kernel(") and "{" in b.split("\n")[0])
    assert "< 101)" in stage_a  # A's K edge, bounds-checked
    # the main kernel never sees K = 101 (no K bounds check: it runs 4 whole tiles of 32 over K_pad = 128), nor A or B
    assert not re.search(r"\b101\b", main) and "A[" not in main and "B[" not in main
    if target == Target.GFX942:
        assert "tl::cp_async_gs<16>" in main and "A_PAD[" in main and "B_PAD[" in main
    else:
        assert "tl::tma_load(A_PAD_desc" in main and "tl::tma_load(B_PAD_desc" in main
    # the store of C is bounds-checked, in 8-column runs (N = 136: 17 runs); on gfx942 it is the only condition
    assert re.search(r"< 17\)", main)
    assert target != Target.GFX942 or main.count("if (") == 1


# ---- search ---------------------------------------------------------------------------------------

def test_search_lists_it_and_an_aligned_shape_refuses_it_by_rule():
    search = "  search:\n    sm_90:\n      staging: [none, padded]\n"
    (ls,) = parse_specs(NONE + search, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert [p.same_as for p in part.points] == [part.hand.uri, None] and "_pad_" in part.points[1].uri
    (aligned,) = parse_specs(edit(NONE, "k: 100}", "k: 104}") + search, FILE)
    part = constrain(aligned, Target.SM_90, expand(aligned.spec, Target.SM_90))
    assert part.points[1].rules == ("staging_applies",)


# ---- numerics (CPU) -------------------------------------------------------------------------------

INSTANCES = [f.instance for f in Project().rendered() if SEED in f.names]


def test_the_seed_is_staged_on_both_targets_beside_its_predicated_twin():
    assert sorted(i.target.value for i in INSTANCES) == ["gfx942", "sm_90"]
    twins = [f.instance for f in Project().rendered() if TWIN in f.names]
    assert sorted(i.target.value for i in twins) == ["gfx942", "sm_90"] and not any(i.padded for i in twins)
    assert all("gemm_fp16_ragged_pred" in f.names for f in Project().rendered() if TWIN in f.names)
    specs = {ls.spec.name: ls.spec for ls in parse_specs((REPO_ROOT / "specs" / "gemm_padded.yaml").read_text(), FILE)}
    assert all(unaligned_operands(specs[SEED], s) == ["A", "B"] for s in specs[SEED].shapes)
    assert specs[SEED].shapes == specs[TWIN].shapes
    for inst in INSTANCES:
        assert (inst.block_m, inst.block_n, inst.block_k, inst.stages) == (128, 128, 32, 2)


def _staged(inst, fill: float = 0.0, short: int = 0):
    """What the kernel computes: A and B copied into their workspaces (workspace_shapes) padded with `fill`,
    `short` of K's last columns left as padding (a staging copy that stops early), multiplied whole, C cut out."""
    def out(case, ref):
        m, k = case.A32.shape
        n = case.B32.shape[1]
        (a_rows, a_cols), (b_rows, b_cols) = inst.workspace_shapes((m, n, k))
        a_pad = torch.full((a_rows, a_cols), fill)
        b_pad = torch.full((b_rows, b_cols), fill)
        a_src = case.A.float()[:, : k - short] if not inst.trans_a else case.A.float()[: k - short]
        b_src = case.B.float()[:, : k - short] if inst.trans_b else case.B.float()[: k - short]
        a_pad[: a_src.shape[0], : a_src.shape[1]] = a_src
        b_pad[: b_src.shape[0], : b_src.shape[1]] = b_src
        a_log = a_pad.t() if inst.trans_a else a_pad  # logical (M_pad, K_pad)
        b_log = b_pad.t() if inst.trans_b else b_pad  # logical (K_pad, N_pad)
        return (a_log @ b_log)[:m, :n]
    return out


@pytest.mark.parametrize("inst", INSTANCES, ids=lambda i: i.target.value)
def test_staged_emulation_verifies_and_the_dropped_k_column_is_rejected(inst):
    for shape in gemm_derived_shapes(inst):
        for kind in ("normal", "wide"):
            status, cmp, controls = check_output(inst, shape, _staged(inst), kind=kind)
            assert status == "verified", (shape, kind, cmp, controls)
            assert controls["dropped_k_column"] == "rejected", (shape, kind, controls)
            assert all(v == "rejected" or v.startswith("n/a") for v in controls.values()), controls


@pytest.mark.parametrize(("fill", "short"), [(0.0, 1), (float("nan"), 0)], ids=["drops_last_k", "padding_not_zeroed"])
def test_a_faulty_staging_copy_fails(fill, short):
    inst = INSTANCES[0]
    for shape in gemm_derived_shapes(inst) + [(1000, 1001, 1001)]:
        status, _, _ = check_output(inst, shape, _staged(inst, fill=fill, short=short))
        assert status == "failed", shape


def test_the_chunked_check_has_the_dropped_k_column_control():
    inst = INSTANCES[0]
    shape = (130, 300, 101)
    whole = check_output(inst, shape, _staged(inst))
    chunked = check_output(inst, shape, _staged(inst), max_elements=64 * 101)
    assert whole[0] == chunked[0] == "verified" and whole[2] == chunked[2]
    assert chunked[2]["dropped_k_column"] == "rejected"


def test_the_workspaces_are_nan_filled_in_the_inputs_dtype_and_passed_between_b_and_c():
    inst = next(i for i in INSTANCES if i.target == Target.SM_90)
    fam = family(inst).numerics
    case = fam.make_inputs(inst, (130, 300, 101), seed=0, kind="normal", device="cpu", run_target=Target.SM_90)
    a_ws, b_ws = case.workspace
    assert a_ws.shape == (256, 128) and b_ws.shape == (384, 128)
    assert a_ws.dtype == b_ws.dtype == torch.float16 and a_ws.isnan().all() and b_ws.isnan().all()
    seen = []
    fam.launch(lambda *args: seen.extend(args), case, "C")
    assert seen[:2] == [case.A, case.B] and seen[2] is a_ws and seen[3] is b_ws and seen[4] == "C"


# ---- the real gfx942 ISA ---------------------------------------------------------------------------------


@pytest.mark.skipif(GFX942_MISSING is not None, reason="no gfx942 toolchain")
def test_gfx942_padded_main_loop_loads_16_bytes_where_the_predicated_one_loads_2(build_cache):
    """The seed and its predicated twin at 1000x1001x1001, built together: the padded main kernel's loop loads
    only global_load_dwordx4 and spills nothing; the predicated kernel's loop loads 2 bytes (global_load_ushort)."""
    seed_file = (REPO_ROOT / "specs" / "gemm_padded.yaml").read_text()  # alone: the twin at the odd shapes only
    chosen = render_all(build_instances(parse_specs(seed_file, FILE), [Target.GFX942]))
    assert sorted(f.instance.name for f in chosen) == [SEED, TWIN]
    report = build_files(chosen, REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=2, first_shape=True))
    loops = {}
    for r in report.results:
        assert r.ok, r.error
        assert all(k.spills == 0 for k in r.kernels)
        main = max(r.kernels, key=lambda k: k.asm.symbol)  # the last kernel: the main one
        loops["padded" if "_pad_" in r.uri else "predicated"] = main.asm.isa.main_loop.global_loads
        # build warns of the predicated twin's narrow loads and names the option that gives them back
        assert (r.hint is None) == ("_pad_" in r.uri), (r.uri, r.hint)
        assert r.hint is None or "staging: padded copies them into aligned workspaces" in r.hint
    assert set(loops["padded"]) == {"global_load_dwordx4"}
    assert "global_load_ushort" in loops["predicated"] and "global_load_dwordx4" not in loops["predicated"]


def test_the_narrow_load_hint_names_the_odd_rows_and_staging_padded_where_it_applies():
    seed_file = (REPO_ROOT / "specs" / "gemm_padded.yaml").read_text()
    twin = next(f.instance for f in render_all(build_instances(parse_specs(seed_file, FILE), [Target.SM_90]))
                if "_pad_" not in f.uri)
    assert twin.layout == "nt" and twin.spec_dtypes[0] == "fp16" and str(twin.tail) == "predicated"
    assert twin.narrow_load_hint((1000, 1001, 1001)) == (
        "A's rows (k = 1001) and B's rows (k = 1001) are not whole 16-byte vectors: staging: padded copies them into "
        "aligned workspaces, so the main loop loads 16 bytes at a time (docs/gemm.md)")
    assert twin.narrow_load_hint((1001, 1001, 1000)) is None  # nt: both operands' rows run along K
    nn = replace(twin, layout="nn", trans_b=False, tail=TailPolicy.SPECIALIZED)
    assert nn.narrow_load_hint((1000, 1001, 1000)).startswith("B's rows (n = 1001) are not whole")
    assert "staging: padded with tail: predicated copies" in nn.narrow_load_hint((1000, 1001, 1000))
    assert replace(twin, staging="padded").narrow_load_hint((1000, 1001, 1001)) is None  # staged already
    assert replace(twin, structure="gemv").narrow_load_hint((1000, 1001, 1001)) is None  # no tiles to stage


def test_committed_reports_show_16_byte_loads_in_every_padded_main_loop():
    """reports/static/gfx942.json (`tilegen build --all --write-report`): each padded kernel's main loop loads
    16 bytes at a time and nothing spills; sm_90.json: its main kernel copies by TMA."""
    seen = 0
    for target in (Target.GFX942, Target.SM_90):
        doc = json.loads((REPO_ROOT / "reports" / "static" / f"{target.value}.json").read_text())
        for b in doc["builds"]:
            if "_pad_" not in b["uri"]:
                continue
            main = b["kernels"][-1]
            if target == Target.GFX942:
                assert set(main["isa"]["main_loop"]["global_loads"]) == {"global_load_dwordx4"}, b["uri"]
                assert all(k["vgpr_spills"] == 0 for k in b["kernels"]), b["uri"]
            else:
                assert main["tma"] > 0 and main["isa"]["global_load_bytes"] == {}, b["uri"]
            seen += 1
    assert seen == 4  # the seed's two shapes on each target


def test_docs_name_the_tunable_and_its_rules():
    docs = (REPO_ROOT / "docs" / "gemm.md").read_text() + (REPO_ROOT / "docs" / "verification.md").read_text()
    for word in ("`staging`", "`staging_applies`", "`unsupported_combination`", "`dropped_k_column`"):
        assert word in docs
