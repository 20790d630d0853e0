"""attention forward: spec errors (expect-style), lowering for both targets (causal block skipping and
GQA show in the source), and the checker on the CPU (a correct output verifies, buggy outputs fail,
every negative control is rejected, a loose tolerance is vacuous)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.families import derived_shapes, family
from codegen.families.attention.numerics import NUMERICS as ATTENTION
from codegen.families.attention.numerics import attention_dropped_block, case_split
from codegen.generate.instance import build_instances
from codegen.generate.lower import load_module, lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import load_spec_files, parse_specs

BASE = """\
- name: a
  op: attention
  dtypes: {input: fp16, out: fp16}
  shapes:
    - {batch: 1, heads: 8, kv_heads: 2, seq_q: 512, seq_kv: 512}
  head_dim: 128
  tiling: {block_m: 128, block_n: 64, threads: 256}
  pipeline: {stages: 2}
  tail: none
  targets: [sm_90]
"""




def test_base_spec_is_valid_and_the_scale_is_resolved():
    (inst,) = build_instances(parse_specs(BASE, FILE))
    assert (inst.op, inst.head_dim, inst.causal, inst.softmax_scale, inst.lds_bytes) == (
        "attention", 128, False, 1 / math.sqrt(128), (128 * 128 + 2 * 2 * 64 * 128) * 2)
    assert inst.pipeline_order is None  # sm_90: TileLang's num_stages
    (inst,) = build_instances(parse_specs(edit(BASE, "head_dim: 128", "head_dim: 128\n  softmax_scale: 0.5"), FILE))
    assert inst.softmax_scale == 0.5


def test_gfx942_gets_an_explicit_schedule():
    text = edit(edit(BASE, "targets: [sm_90]", "targets: [gfx942]"), "block_m: 128, block_n: 64", "block_m: 64, block_n: 32")
    (inst,) = build_instances(parse_specs(text, FILE))
    assert inst.pipeline_order == tuple(range(13)) and inst.pipeline_stage == (0, 0) + (1,) * 11
    assert inst.lds_bytes == (64 * 128 + 2 * 2 * 32 * 128) * 2 + 2 * 256 * 4  # + the reductions' workspaces


@pytest.mark.parametrize(("old", "new", "message"), [
    ("head_dim: 128", "head_dim: 96",
     "specs/x.yaml:6:13: head_dim=96: supported head_dim values are 64, 128 [head_dim]"),
    ("kv_heads: 2", "kv_heads: 3",
     ("specs/x.yaml:5:38: shapes[0].kv_heads=3: must divide heads=8 (each K/V head serves heads/kv_heads query heads) "
     "[gqa_heads]")),
    ("seq_kv: 512", "seq_kv: 500",
     "specs/x.yaml:5:7: shapes[0]: seq_kv=500 is not a multiple of block_n=64: set tail: predicated [tail_policy]"),
    ("tail: none", "tail: specialized",
     ("specs/x.yaml:9:9: tail=specialized: attention has no specialized edge kernels: use none or predicated "
     "[tail_policy]")),
    ("head_dim: 128", "head_dim: 128\n  softmax_scale: -1.0",
     "specs/x.yaml:7:18: softmax_scale=-1.0: Input should be greater than 0 [greater_than]"),
])
def test_spec_errors(old, new, message):
    assert errors(edit(BASE, old, new)) == [message]


def test_lds_overflow_on_gfx942():
    text = edit(BASE, "targets: [sm_90]", "targets: [gfx942, sm_90]")
    assert errors(text) == [
        ("specs/x.yaml:7:11: tiling: Q 128x128 + (K + V) 64x128 x 2 stage(s) + reduction workspaces need 100352 B "
        "(98 KiB) of LDS, over the 65536 B (64 KiB) per workgroup on gfx942 [lds_budget]")]


def test_threads_and_block_sizes():
    text = edit(edit(BASE, "targets: [sm_90]", "targets: [gfx942]"), "block_m: 128, block_n: 64, threads: 256",
                "block_m: 32, block_n: 40, threads: 96").replace("tail: none", "tail: predicated")
    assert errors(text) == [
        "specs/x.yaml:7:47: tiling.threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]",
        ("specs/x.yaml:7:34: tiling.block_n=40: must be a multiple of 16 (the N and K of the fp16 MMA tile 16x16x16 on "
        "gfx942) [mma_shape]")]


def test_distinct_instances_get_distinct_uris():
    variants = [BASE, edit(BASE, "tail: none", "tail: predicated"), edit(BASE, "head_dim: 128", "head_dim: 64"),
                edit(BASE, "tail: none", "tail: none\n  causal: true"),
                edit(BASE, "head_dim: 128", "head_dim: 128\n  softmax_scale: 0.125")]
    uris = [f.uri for v in variants for f in render_all(build_instances(parse_specs(v, FILE)))]
    assert len(set(uris)) == len(uris)


# ---- lowering -------------------------------------------------------------------------------------

FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files() if f.instance.op == "attention"}


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_causal_skips_the_blocks_above_the_diagonal(target):
    # the KV loop's trip count depends on the query block (blockIdx.x) only when causal
    shape = (1, 4, 2, 512, 512)
    causal = lower(FILES[("attn_fp16_d128_causal", target)], shape, target).source
    full = lower(FILES[("attn_fp16_d128", target)], shape, target).source
    loop = re.compile(r"for \(int kb = 0; kb < ([^;]*);")
    assert any("blockIdx.x" in bound for bound in loop.findall(causal)), loop.findall(causal)
    assert not any("blockIdx.x" in bound for bound in loop.findall(full)), loop.findall(full)
    # GQA: the K/V head is blockIdx.y // 2 (4 query heads on 2 K/V heads)
    assert "((int)blockIdx.y) >> 1" in causal
    assert ("__builtin_amdgcn_mfma" if target == "gfx942" else "wgmma") in causal


# ---- the checker, on the CPU ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted({n for n, t in FILES if t == "gfx942"}))
def test_gfx942_program_lowers_for_the_sm90_logiccheck_output(name):
    # `tilegen verify` on the H200 also runs each gfx942 program (CUDA target) as a check of its logic;
    # a 64-row query block over 256 threads lowered for HIP but not for CUDA (8 rows per 32-lane warp, under one 16-row MMA tile)
    f = FILES[(name, "gfx942")]
    shape = derived_shapes(f.instance)[0]
    assert lower(f, shape, "sm_90").source


def test_a_block_of_fewer_rows_than_the_sm90_warps_need_does_not_lower_for_cuda():
    # the negative control of the test above: the old gfx942 tiling of the d128 seeds
    text = edit(edit(BASE, "block_m: 128, block_n: 64", "block_m: 64, block_n: 32"), "targets: [sm_90]",
                "targets: [gfx942]")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    assert lower(f, (1, 2, 1, 128, 128), "gfx942").source
    with pytest.raises(Exception, match="Layout infer conflict"):
        lower(f, (1, 2, 1, 128, 128), "sm_90")



NAMES = ["attn_fp16_d128", "attn_fp16_d128_causal", "attn_bf16_gqa_causal", "attn_fp16_ragged", "attn_fp16_d64_causal",
         "attn_fp16_decode", "attn_bf16_decode_causal", "attn_fp16_decode_auto"]


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("name", NAMES)
def test_correct_output_verifies_and_every_control_is_rejected(name, kind):
    inst = FILES[(name, "sm_90")].instance
    for shape in derived_shapes(inst):
        if shape[3] == 1 and shape[4] == 1:
            continue  # one key: every row's output is v_0 whatever the mask -- the controls equal the reference
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)


def test_the_fp32_reference_is_inside_the_modelled_error():
    # the fp32 reference against float64 math: the modelled term must cover it with a wide margin
    for name in ("attn_fp16_d128_causal", "attn_bf16_gqa_causal"):
        inst = FILES[(name, "sm_90")].instance
        fam = family(inst).numerics
        shape = (1, 2, 1, 300, 300)
        for kind in ("normal", "wide"):
            case = fam.make_inputs(inst, shape, seed=1, kind=kind, device="cpu", run_target=inst.target)
            ref, mag = fam.reference(inst, case)
            q, k, v = (t.double()[0].transpose(0, 1) for t in (case.Q32, case.K32, case.V32))
            k, v = k.repeat_interleave(2, 0), v.repeat_interleave(2, 0)
            s = inst.softmax_scale * q @ k.transpose(1, 2)
            s = s.masked_fill(torch.ones(300, 300, dtype=torch.bool).triu(1), float("-inf"))
            exact = (torch.softmax(s, -1) @ v).transpose(0, 1)[None]
            assert ((ref.double() - exact).abs() <= 0.25 * mag).all(), (name, kind)


BUGS = ["one_element", "dropped_kv_block", "unwritten_nan", "wrong_scale", "p_not_renormalised", "wrong_kv_head"]


@pytest.mark.parametrize("bug", BUGS)
def test_buggy_outputs_fail(bug):
    inst = FILES[("attn_fp16_ragged", "sm_90")].instance
    shape = (1, 4, 2, 2 * inst.block_m + 1, 2 * inst.block_n + 3)

    def buggy(case, ref):
        out = ref.clone()
        if bug == "one_element":
            idx = ref[0, 5, 1].abs().argmax()
            out[0, 5, 1, idx] *= 1.02  # 2% off on one output
        elif bug == "dropped_kv_block":
            out = attention_dropped_block(inst, case, ref)
        elif bug == "unwritten_nan":
            out[0, -1, -1, -1] = float("nan")
        elif bug == "wrong_scale":  # the default scale's log2(e) factor applied twice
            out = ATTENTION.reference(replace(inst, softmax_scale=inst.softmax_scale * 1.4426950408889634), case)[0]
        elif bug == "p_not_renormalised":  # the last row sum misses one block's rescale: ~1% off
            out[0, :, :] *= 1.01
        elif bug == "wrong_kv_head":  # heads 0,1 -> K/V head 0 and 2,3 -> 1 swapped for 0,2 -> 0 and 1,3 -> 1
            wrong = replace(case, K=case.K[:, :, [1, 0]], V=case.V[:, :, [1, 0]])
            out = ATTENTION.reference(inst, wrong)[0]
        return out

    status, cmp, _ = check_output(inst, shape, buggy, kind="wide")
    assert status == "failed", (bug, cmp)
    assert cmp.mismatch_ratio > 0


@pytest.mark.parametrize("name", ["attn_fp16_d128", "attn_bf16_gqa_causal"])
def test_a_loose_tolerance_is_reported_vacuous(name):
    inst = FILES[(name, "sm_90")].instance
    status, _, controls = check_output(inst, (1, 2, 1, 256, 256), lambda case, ref: ref, scale=1e6)
    assert status == "vacuous"
    assert any("PASSED" in v for v in controls.values())


def test_flop_and_byte_formulas():
    full, causal = FILES[("attn_fp16_d128", "sm_90")].instance, FILES[("attn_bf16_gqa_causal", "sm_90")].instance
    assert ATTENTION.flops(full, (4, 32, 32, 4096, 4096)) == 4.0 * 4 * 32 * 4096 * 4096 * 128
    assert ATTENTION.flops(causal, (4, 32, 8, 4096, 4096)) == 2.0 * 4 * 32 * 4096 * 4096 * 128
    # seq_q != seq_kv: the visible pairs, query i sees i + 1 keys (top_left)
    assert ATTENTION.flops(causal, (1, 2, 1, 100, 300)) == 4.0 * 2 * (100 * 101 // 2) * 128
    # Q and O: 4*4096*32*128 elements each; K and V: 4*4096*8*128 each; 2 bytes apiece
    assert ATTENTION.bytes(causal, (4, 32, 8, 4096, 4096)) == 2.0 * 4 * 4096 * 128 * (32 + 8 + 8 + 32)


# ---- causal alignment and decode (split KV) -------------------------------------------------------

DECODE = """\
- name: d
  op: attention
  variant: decode
  dtypes: {input: fp16, out: fp16}
  shapes:
    - {batch: 8, heads: 32, kv_heads: 8, seq_q: 4, seq_kv: 4096}
  head_dim: 128
  causal: bottom_right
  tiling: {block_m: 64, block_n: 64, threads: 128}
  split_kv: 16
  tail: none
  targets: [sm_90]
"""


def test_causal_true_still_means_top_left_and_is_the_same_kernel():
    old, new = (render_all(build_instances(parse_specs(edit(BASE, "tail: none", f"tail: none\n  causal: {c}"), FILE)))
                for c in ("true", "top_left"))
    assert old[0].instance.mask == "top_left" and old[0].uri == new[0].uri
    (false,) = build_instances(parse_specs(edit(BASE, "tail: none", "tail: none\n  causal: false"), FILE))
    assert not false.causal and false.mask == "none"


@pytest.mark.parametrize(("text", "message"), [
    (edit(BASE, "tail: none", "tail: none\n  causal: yes"),
     ("specs/x.yaml:10:11: causal='yes': must be false, top_left or bottom_right (true, as in earlier specs, means top_left) "
     "[causal]")),
    (edit(edit(BASE, "tail: none", "tail: none\n  causal: bottom_right"), "seq_q: 512, seq_kv: 512",
          "seq_q: 1024, seq_kv: 512"),
     ("specs/x.yaml:5:48: shapes[0].seq_q=1024: over seq_kv=512: with causal: bottom_right the first 512 queries would "
     "see no key [causal_alignment]")),
    (edit(DECODE, "split_kv: 16", "split_kv: 65"),
     ("specs/x.yaml:10:13: split_kv=65: over the 64 KV block(s) of 64 keys of shapes[0] (seq_kv=4096): every split needs "
     "at least one block [split_kv]")),
    (edit(BASE, "tail: none", "tail: none\n  split_kv: 4"),
     "specs/x.yaml:10:13: split_kv=4: only variant: decode splits the KV sequence: leave split_kv at 1 [split_kv]"),
    (edit(DECODE, "seq_kv: 4096", "seq_kv: 4000"),
     "specs/x.yaml:6:7: shapes[0]: seq_kv=4000 is not a multiple of block_n=64: set tail: predicated [tail_policy]"),
])
def test_alignment_and_split_errors(text, message):
    assert errors(text) == [message]


def test_decode_needs_no_block_multiple_of_queries_and_takes_a_128k_cache():
    # 4 queries x 4 heads = 16 packed rows of a 64-row block; 131072 keys = 2048 blocks over 64 splits
    text = edit(edit(DECODE, "seq_kv: 4096}", "seq_kv: 4096}\n    - {batch: 1, heads: 8, kv_heads: 1, seq_q: 16, seq_kv: 131072}"),
                "split_kv: 16", "split_kv: 64")
    (inst,) = build_instances(parse_specs(text, FILE))
    assert (inst.variant, inst.split_kv, inst.mask) == ("decode", 64, "bottom_right")
    assert inst.template == "attention_decode.py.j2" and inst.stem().endswith("_k64")
    # the splits' grid (split, K/V heads x row blocks, batch), then the combine's (heads, seq_q, batch)
    assert inst.launch_grids((1, 8, 1, 16, 131072)) == ((64, 2, 1), (8, 16, 1))  # 8 x 16 = 128 rows: 2 blocks
    assert inst.launch_grids((8, 32, 8, 4, 4096)) == ((64, 8, 8), (32, 4, 8))


def test_search_space_takes_split_kv():
    from codegen.tune.search import space_of

    text = DECODE + "  search:\n    sm_90:\n      split_kv: [4, 8, 16, 32]\n      tiling: {block_n: [32, 64]}\n"
    (loaded,) = parse_specs(text, FILE)
    assert ("split_kv", [4, 8, 16, 32]) in space_of(loaded.spec, loaded.spec.targets[0])
    assert errors(text.replace("[4, 8, 16, 32]", "[4, 0]")) == [  # one line, though 0 fails both int and 'auto'
        "specs/x.yaml:15:21: search.sm_90.split_kv[1]=0: Input should be greater than 0 [greater_than]"]
    assert ("split_kv", [4, "auto"]) in space_of(parse_specs(text.replace("[4, 8, 16, 32]", "[4, auto]"), FILE)[0].spec,
                                                 "sm_90")


DECODE_FILES = {n: FILES[(n, t)] for n, t in FILES if n.startswith("attn_") and "decode" in n and t == "sm_90"}


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_decode_lowers_to_a_split_kernel_and_a_combine_kernel(target):
    f = FILES[("attn_bf16_decode_causal", target)]
    src = lower(f, (2, 32, 8, 4, 1024), target).source
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", src))
    assert len(kernels) == 2, kernels  # the splits and the combine
    assert ("__builtin_amdgcn_mfma" if target == "gfx942" else "wgmma") in src
    assert "log2f" in src and "exp2f" in src  # the split's log-sum-exp and the combine's weights
    assert not FLOAT4_SPLIT_LOAD.search(src)  # combine_vec 1: one fp32 a thread


FLOAT4_SPLIT_LOAD = re.compile(r"= \*\(float4\*\)\(O_PART")  # the combine reading 16 bytes of a split's output


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_combine_vec_4_reads_the_splits_16_bytes_a_thread(target):
    """combine_vec 4: the combine loads the split outputs as float4, 4 splits a step (128 threads, head_dim 128),
    also where the splits are no multiple of 4 (6: the last step's two extra split indices read the last split,
    weighted 0). combine_vec 1 keeps its kernel's name and identity."""
    text = edit(edit(edit(DECODE, "targets: [sm_90]", f"targets: [{target}]"), "block_n: 64", "block_n: 32"),
                "split_kv: 16", "split_kv: 6")
    (vec,) = render_all(build_instances(parse_specs(edit(text, "split_kv: 6", "split_kv: 6\n  combine_vec: 4"), FILE)))
    (one,) = build_instances(parse_specs(edit(text, "split_kv: 6", "split_kv: 6\n  combine_vec: 1"), FILE))
    (default,) = build_instances(parse_specs(text, FILE))
    assert one.uri() == default.uri() and "combine_vec" not in one.canonical()
    assert vec.instance.stem() == one.stem().replace("_k6", "_k6_cv4") and vec.instance.combine_vec == 4
    assert "COMBINE_SPLITS = THREADS * 4 // HEAD_DIM" in vec.text
    src = lower(vec, (2, 32, 8, 4, 1024), target).source
    assert len(FLOAT4_SPLIT_LOAD.findall(src)) == 1, src[src.rindex("__global__"):]
    assert "min(" in src  # the split index clamped: every load in bounds


def test_combine_vec_is_decodes_only():
    assert errors(edit(BASE, "tail: none", "tail: none\n  combine_vec: 4")) == [
        ("specs/x.yaml:10:16: combine_vec=4: is how variant: decode merges its KV splits; variant prefill has no "
         "combine: leave combine_vec at 1 [combine_vec_variant]")]


# ---- split_kv_combine fixup: the last split of each block of rows merges the splits (no combine kernel) --------

def _fixup_text(target: str, extra: str = "") -> str:
    text = edit(edit(DECODE, "targets: [sm_90]", f"targets: [{target}]"), "block_n: 64", "block_n: 32")
    return edit(text, "split_kv: 16", f"split_kv: 6\n  split_kv_combine: fixup{extra}")


def test_the_decode_fixup_is_its_own_kernel_and_the_combine_kernel_keeps_its_name():
    (kernel,) = build_instances(parse_specs(edit(DECODE, "split_kv: 16", "split_kv: 16\n  split_kv_combine: kernel"), FILE))
    (default,) = build_instances(parse_specs(DECODE, FILE))
    assert kernel.uri() == default.uri() and "combine" not in kernel.canonical().replace("combine_vec", "")
    (fx,) = build_instances(parse_specs(_fixup_text("sm_90", "\n  combine_vec: 4"), FILE))
    assert fx.fixup and fx.combine_vec is None and "_k6_fx_" in fx.uri()  # no combine kernel: no combine_vec
    shape = (8, 32, 8, 4, 4096)
    assert fx.launch_grids(shape) == ((6, 8, 8),)  # 4 heads x 4 positions: 16 packed rows, one block a K/V head
    assert fx.workspace_shapes(shape) == ((8, 4, 32, 6, 128), (8, 4, 32, 6), (8, 8))
    assert fx.workspace_dtypes() == ("fp32", "fp32", "int32") and fx.workspace_zeroed() == (False, False, True)
    assert fx.metadata(fx.uri())["split_kv_combine"] == "fixup"


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_the_decode_fixup_lowers_to_one_kernel_that_counts_and_merges(target):
    (f,) = render_all(build_instances(parse_specs(_fixup_text(target), FILE)))
    assert f.text.count("with T.Kernel(") == 1 and 'SPLIT_ARRIVALS: T.Tensor((batch, kv_heads * row_blocks), "int32")' in f.text
    src = lower(f, (2, 32, 8, 4, 1024), target).source
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", src))
    assert len(kernels) == 1, kernels
    assert "AtomicAddRet" in src and src.count("__threadfence()") == 2 and "exp2f" in src


def test_decode_fixup_counters_start_at_zero_and_a_launch_that_leaves_them_set_fails():
    (inst,) = build_instances(parse_specs(_fixup_text("sm_90"), FILE))
    case = ATTENTION.make_inputs(inst, (2, 32, 8, 4, 1024), seed=0, kind="normal", device="cpu", run_target=inst.target)
    o_part, lse, counters = case.workspace
    assert o_part.isnan().all() and lse.isnan().all() and counters.dtype == torch.int32 and not counters.any()
    assert ATTENTION.after_launch(inst, case) == ""
    counters[1, 3] = 6
    assert "1 of 16 counters (zero on entry) left non-zero" in ATTENTION.after_launch(inst, case)


def test_split_kv_combine_is_decodes_only():
    assert errors(edit(BASE, "tail: none", "tail: none\n  split_kv_combine: fixup")) == [
        ("specs/x.yaml:10:21: split_kv_combine=fixup: is who merges variant decode's KV splits; variant prefill has "
         "no splits: leave split_kv_combine at kernel [split_kv_combine_variant]")]


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_bottom_right_prefill_skips_by_the_shifted_diagonal(target):
    text = edit(edit(BASE, "tail: none", "tail: none\n  causal: bottom_right"), "targets: [sm_90]", f"targets: [{target}]")
    if target == "gfx942":
        text = edit(text, "block_m: 128, block_n: 64", "block_m: 128, block_n: 16")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    src = lower(f, (1, 4, 2, 256, 1024), target).source  # shift 768: query block bx sees keys < (bx + 1) * 128 + 768
    assert "768" in src, "the bottom-right shift does not reach the mask"


def _naive_attention64(q, k, v, scale, allowed):
    """float64 attention of [b, s, h, d] tensors (GQA by repeating K/V heads) under a [sq, skv] mask."""
    group = q.shape[2] // k.shape[2]
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


@pytest.mark.parametrize("mask", ["top_left", "bottom_right"])
def test_the_reference_against_naive_float64_with_an_explicit_mask(mask):
    # the mask built here from its definition: bottom_right, query i sees keys j <= i + (seq_kv - seq_q)
    text = edit(BASE, "tail: none", f"tail: none\n  causal: {mask}")
    (inst,) = build_instances(parse_specs(text, FILE))
    fam = family(inst).numerics
    sq, skv = 37, 300
    i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
    allowed = j <= i + (skv - sq if mask == "bottom_right" else 0)
    for kind in ("normal", "wide"):
        case = fam.make_inputs(inst, (2, 4, 2, sq, skv), seed=3, kind=kind, device="cpu", run_target=inst.target)
        ref, mag = fam.reference(inst, case)
        exact = _naive_attention64(case.Q, case.K, case.V, inst.softmax_scale, allowed)
        assert ((ref.double() - exact).abs() <= 0.25 * mag).all(), kind
        # and the chunked reference (rows at an offset) is the same
        status, cmp, _ = check_output(inst, (2, 4, 2, sq, skv), lambda c, r: r, kind=kind, max_elements=4 * 300 * 8)
        assert status == "verified", cmp


def test_sdpa_baseline_mask_is_the_kernels_alignment():
    # the bench baseline's mask, run by SDPA on the CPU (math backend), against the reference
    import torch.nn.functional as F

    from codegen.families.attention.numerics import sdpa_mask

    text = edit(BASE, "tail: none", "tail: none\n  causal: bottom_right")
    (inst,) = build_instances(parse_specs(text, FILE))
    fam = family(inst).numerics
    for sq, skv in ((4, 96), (1, 96), (96, 96)):
        case = fam.make_inputs(inst, (1, 4, 2, sq, skv), seed=0, kind="normal", device="cpu", run_target=inst.target)
        ref, _mag = fam.reference(inst, case)
        q, k, v = (t.float().transpose(1, 2) for t in (case.Q, case.K, case.V))
        out = F.scaled_dot_product_attention(q, k, v, scale=inst.softmax_scale, enable_gqa=True,
                                             **sdpa_mask(inst.mask, sq, skv)).transpose(1, 2)
        assert ((out - ref).abs() <= 1e-5 + 1e-4 * ref.abs()).all(), (sq, skv)
    # is_causal (top-left) is not it at seq_q < seq_kv
    case = fam.make_inputs(inst, (1, 4, 2, 4, 96), seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = fam.reference(inst, case)
    q, k, v = (t.float().transpose(1, 2) for t in (case.Q, case.K, case.V))
    wrong = F.scaled_dot_product_attention(q, k, v, scale=inst.softmax_scale, enable_gqa=True, is_causal=True)
    assert not torch.allclose(wrong.transpose(1, 2), ref, atol=1e-3)


def _emulate_decode(inst, case, *, mask=None, drop_split=None):
    """The decode kernel's arithmetic on the CPU, split by split as the template computes it: split s
    takes KV blocks [s*nb//S, (s+1)*nb//S); per split the max, exp2 of SCALE_LOG2*(s - m), P rounded to
    the input dtype for P.V, the output over its own sum and lse = log2(sum) + m*SCALE_LOG2 (-inf where a
    row saw no key); then the combine. drop_split: the combine skips that split (the control's bug)."""
    from codegen.families.attention.numerics import allowed_keys
    from codegen.families.attention.spec import CausalMask

    log2e = 1.4426950408889634
    q, k, v = case.Q32, case.K32, case.V32
    _b, sq, h, _d = q.shape
    skv, kvh = k.shape[1], k.shape[2]
    group, nb, splits = h // kvh, math.ceil(skv / inst.block_n), case_split(inst, case)
    rows, cols = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
    allowed = allowed_keys(CausalMask(mask or inst.mask), rows, cols, skv - sq)
    qh = q.transpose(1, 2)
    kh, vh = (t.transpose(1, 2).repeat_interleave(group, 1) for t in (k, v))
    s = (qh @ kh.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))  # [b, h, sq, skv], unscaled
    parts, lses = [], []
    for si in range(splits):
        lo, hi = si * nb // splits * inst.block_n, min(skv, (si + 1) * nb // splits * inst.block_n)
        ss = s[..., lo:hi]
        m = ss.amax(-1, keepdim=True)
        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp2(ss * inst.softmax_scale * log2e - m_safe * inst.softmax_scale * log2e)
        tot = e.sum(-1, keepdim=True)
        o = e.to(case.Q.dtype).float() @ vh[..., lo:hi, :]
        parts.append(torch.where(tot > 0, o / tot, torch.zeros_like(o)))
        lses.append(torch.where(tot > 0, torch.log2(tot) + m * inst.softmax_scale * log2e, torch.full_like(tot, -math.inf)))
    keep = [i for i in range(splits) if i != drop_split]
    lse = torch.cat([lses[i] for i in keep], -1)
    w = torch.exp2(lse - lse.amax(-1, keepdim=True))
    out = sum(w[..., n:n + 1] * parts[i] for n, i in enumerate(keep)) / w.sum(-1, keepdim=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize("name", ["attn_fp16_decode", "attn_bf16_decode_causal", "attn_fp16_decode_auto"])
def test_decode_arithmetic_verifies_and_its_controls_are_rejected(name):
    # the kernel's split-and-combine arithmetic on the CPU (a model, not the kernel) passes on every
    # derived shape with every control rejected; dropping one split, or the other causal alignment, fails
    inst = FILES[(name, "sm_90")].instance
    for shape in derived_shapes(inst):
        for kind in ("normal", "wide"):
            status, cmp, controls = check_output(inst, shape, lambda case, ref: _emulate_decode(inst, case), kind=kind)
            assert status == "verified", (shape, kind, cmp)
            assert "dropped_split" in controls and set(controls.values()) == {"rejected"}, (shape, controls)
            for drop in sorted({0, inst.split_for(shape) - 1}):
                status, cmp, _ = check_output(inst, shape, lambda case, ref, d=drop: _emulate_decode(inst, case, drop_split=d),
                                              kind=kind)
                assert status == "failed", (shape, drop)
        if inst.causal and shape[3] > 1:
            status, _, _ = check_output(inst, shape, lambda case, ref: _emulate_decode(inst, case, mask="top_left"))
            assert status == "failed", shape


def test_bottom_right_output_fails_a_top_left_spec_and_back():
    for mine, other in (("top_left", "bottom_right"), ("bottom_right", "top_left")):
        inst = build_instances(parse_specs(edit(BASE, "tail: none", f"tail: none\n  causal: {mine}"), FILE))[0]
        twin = replace(inst, mask=type(inst.mask)(other))
        status, cmp, controls = check_output(inst, (1, 4, 2, 128, 320), lambda case, ref, t=twin: ATTENTION.reference(t, case)[0])
        assert status == "failed" and cmp.mismatch_ratio > 0, (mine, cmp)
        assert controls["causal_other_alignment"] == "rejected"


def test_visible_pairs_count_the_mask():
    from codegen.families.attention.numerics import allowed_keys, visible_pairs
    from codegen.families.attention.spec import CausalMask

    for mask in CausalMask:
        for sq, skv in ((1, 7), (4, 7), (7, 7), (9, 7), (5, 300)):
            if mask == CausalMask.BOTTOM_RIGHT and sq > skv:
                continue  # rule causal_alignment
            exact = allowed_keys(mask, torch.arange(sq)[:, None], torch.arange(skv)[None, :], skv - sq).sum().item()
            assert visible_pairs(mask, sq, skv) == exact, (mask, sq, skv)


def test_decode_bytes_are_the_kv_cache():
    inst = FILES[("attn_fp16_decode", "sm_90")].instance
    kv = 2 * 8 * 32768 * 8 * 128 * 2  # K and V: batch 8, 32768 keys, 8 K/V heads, d128, fp16
    qo = 2 * 8 * 1 * 32 * 128 * 2
    assert ATTENTION.bytes(inst, (8, 32, 8, 1, 32768)) == kv + qo
    assert ATTENTION.flops(inst, (8, 32, 8, 1, 32768)) == 4.0 * 8 * 32 * 32768 * 128


# ---- schedule ws (attention_ws.py.j2, sm_90) ---------------------------------------------------------

WS = edit(edit(BASE, "threads: 256", "threads: 384"), "tail: none", "tail: none\n  schedule: ws")


def test_ws_instance_and_default_keeps_its_name():
    (inst,) = build_instances(parse_specs(WS, FILE))
    assert (inst.template, inst.schedule, inst.ws_consumers, inst.ws_producer_nreg, inst.ws_consumer_nreg) == (
        "attention_ws.py.j2", "ws", 2, 24, 240)
    assert inst.stem() == "attn_fp16_d128_128x64_t384_s2_ws" and inst.launch_grids((1, 8, 2, 512, 512)) == ((4, 8, 1),)
    assert inst.metadata("u")["ws"] == {"consumer_warpgroups": 2, "producer_max_nreg": 24, "consumer_max_nreg": 240}
    # schedule: default is the kernel of a spec without the field: same name, same metadata (no schedule key)
    plain, default = (render_all(build_instances(parse_specs(t, FILE)))[0]
                      for t in (BASE, edit(BASE, "tail: none", "tail: none\n  schedule: default")))
    assert plain.uri == default.uri and plain.text == default.text and "schedule" not in plain.instance.metadata("u")
    # three consumer warpgroups (block_m 192, 512 threads) share what the producer leaves: 160 registers each
    (three,) = build_instances(parse_specs(edit(edit(WS, "block_m: 128", "block_m: 192"), "threads: 384", "threads: 512")
                                           .replace("seq_q: 512", "seq_q: 576").replace("head_dim: 128", "head_dim: 64"), FILE))
    assert (three.ws_consumers, three.ws_consumer_nreg) == (3, 160)


@pytest.mark.parametrize(("text", "message"), [
    (edit(WS, "targets: [sm_90]", "targets: [gfx942]").replace("block_n: 64", "block_n: 16"),
     ("specs/x.yaml:10:13: schedule=ws: not possible on gfx942: it needs TMA, mbarrier transactions, setmaxnreg and "
      "asynchronous wgmma (Hopper instructions; the HIP backend has none of them); use schedule: default there "
      "(overrides.gfx942.schedule) or drop gfx942 from targets [ws_target]")),
    (edit(WS, "threads: 384", "threads: 256"),
     ("specs/x.yaml:7:48: tiling.threads=256: schedule ws at block_m 128 runs 384 threads: one producer warpgroup and "
      "2 consumer warpgroups of 128 [ws_tiles]")),
    (edit(WS, "block_m: 128", "block_m: 256"),
     ("specs/x.yaml:7:21: tiling.block_m=256: schedule ws takes block_m 128 or 192: 64 query rows per consumer "
      "warpgroup, 2 or 3 of them [ws_tiles]")),
    (edit(WS, "stages: 2", "stages: 3"),
     ("specs/x.yaml:8:22: pipeline.stages=3: schedule ws double-buffers K and V (one full and one empty mbarrier per "
      "slot): stages must be 2 [ws_tiles]")),
    (edit(edit(WS, "block_n: 64", "block_n: 256"), "head_dim: 128", "head_dim: 64"),
     ("specs/x.yaml:7:35: tiling.block_n=256: a consumer thread would hold about 256 registers (S, P and O of 64 x 256 "
      "keys at head_dim 64, + 32), over the 240 setmaxnreg gives each of 2 consumer warpgroups on sm_90 [ws_registers]")),
])
def test_ws_rules(text, message):
    assert errors(text) == [message]


def test_ws_refuses_decode():
    text = edit(edit(DECODE, "threads: 128", "threads: 384"), "split_kv: 16", "split_kv: 16\n  schedule: ws")
    assert errors(text) == [("specs/x.yaml:11:13: schedule=ws: schedules the prefill KV loop only: variant decode takes "
                             "schedule: default [ws_variant]")]


def test_ws_override_keeps_gfx942_on_the_default_schedule():
    text = edit(WS, "targets: [sm_90]", "targets: [gfx942, sm_90]\n  overrides:\n    gfx942:\n      schedule: default\n"
                "      tiling: {block_m: 64, block_n: 16, threads: 256}")
    by_target = {i.target.value: i for i in build_instances(parse_specs(text, FILE))}
    assert (by_target["gfx942"].schedule, by_target["sm_90"].schedule) == ("default", "ws")
    assert by_target["gfx942"].template == "attention.py.j2" and by_target["sm_90"].template == "attention_ws.py.j2"


def test_search_space_takes_the_schedule():
    from codegen.tune.search import space_of

    text = WS + "  search:\n    sm_90:\n      schedule: [default, ws]\n"
    (loaded,) = parse_specs(text, FILE)
    assert ("schedule", ["default", "ws"]) in space_of(loaded.spec, loaded.spec.targets[0])


WS_NAMES = sorted(n for n, t in FILES if t == "sm_90" and n.endswith("_ws"))


def test_the_ws_seeds_are_sm90_only():
    assert WS_NAMES == ["attn_bf16_gqa_causal_ws", "attn_fp16_d128_causal_ws", "attn_fp16_d128_ws", "attn_fp16_d64_causal_ws"]
    assert not [n for n, t in FILES if t != "sm_90" and n.endswith("_ws")]


@pytest.mark.parametrize(("name", "shape"), [("attn_fp16_d128_causal_ws", (1, 4, 2, 512, 512)),
                                             ("attn_fp16_d128_ws", (1, 4, 4, 256, 384))])
def test_ws_lowers_to_a_producer_and_two_consumers(name, shape):
    src = lower(FILES[(name, "sm_90")], shape, "sm_90").source
    assert "__launch_bounds__(384, 1)" in src
    assert src.count("tl::warpgroup_reg_dealloc<24>()") == 1 and src.count("tl::warpgroup_reg_alloc<240>()") == 2
    assert "if (((int)threadIdx.x) < 128)" in src and "if (((int)threadIdx.x) < 256)" in src
    # empty barriers wait for both consumer warpgroups; S is waited for with P.V still in flight
    assert src.count(".init(256);") == 4 and src.count(".init(128);") == 6
    assert src.count("tl::wait_wgmma<1>()") == 2 and "wgmma_rs" in src and "wgmma_ss" in src
    assert src.count("__syncthreads()") == 1  # once, after the barriers' init: none inside a role
    if "causal" in name:  # the mask (an if_then_else: `condval`) sits behind each consumer's diagonal test
        assert src.count("float condval") == 2 and src.count("- kb_1) < 1)") == 1 and src.count("- kb_2) < 1)") == 1
    else:
        assert "condval" not in src  # a block multiple without a causal mask: no mask at all


def test_ws_ragged_tail_lowers():
    text = edit(WS, "tail: none", "tail: predicated").replace("seq_q: 512, seq_kv: 512", "seq_q: 500, seq_kv: 500")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    src = lower(f, (1, 8, 2, 500, 500), "sm_90").source
    assert "tl::wait_wgmma<1>()" in src and "CUDART_INF_F" in src


# ---- schedule fa3 (attention_fa3.py.j2, sm_90) ---------------------------------------------------------

FA3 = edit(WS, "schedule: ws", "schedule: fa3")


def test_fa3_instance_and_the_other_schedules_keep_their_names():
    (inst,) = build_instances(parse_specs(FA3, FILE))
    assert (inst.template, inst.schedule, inst.ws_consumers, inst.ws_producer_nreg, inst.ws_consumer_nreg) == (
        "attention_fa3.py.j2", "fa3", 2, 24, 240)
    assert inst.stem() == "attn_fp16_d128_128x64_t384_s2_fa3" and inst.launch_grids((1, 8, 2, 512, 512)) == ((4, 8, 1),)
    assert inst.metadata("u")["fa3"] == {"consumer_warpgroups": 2, "producer_max_nreg": 24, "consumer_max_nreg": 240}
    assert "ws" not in inst.metadata("u")
    # named barriers from the top of the 16: ping-pong gates 15, 14, then the epilogues' 13, 12
    assert inst.fa3_vars() == {"gate_ids": (15, 14), "epilogue_ids": (13, 12), "producer_threads": 32, "in_bytes": 2}
    (ws,) = build_instances(parse_specs(WS, FILE))
    assert ws.stem() == "attn_fp16_d128_128x64_t384_s2_ws" and ws.uri() != inst.uri()
    # three consumers (block_m 192, 512 threads), a ring of 4 slots at d64
    (three,) = build_instances(parse_specs(edit(edit(edit(FA3, "block_m: 128", "block_m: 192"), "threads: 384", "threads: 512"),
                                                "stages: 2", "stages: 4")
                                           .replace("seq_q: 512", "seq_q: 576").replace("head_dim: 128", "head_dim: 64"), FILE))
    assert (three.ws_consumers, three.ws_consumer_nreg, three.stages) == (3, 160, 4)
    assert three.fa3_vars() == {"gate_ids": (15, 14, 13), "epilogue_ids": (12, 11, 10), "producer_threads": 32,
                                "in_bytes": 2}


@pytest.mark.parametrize(("text", "message"), [
    (edit(FA3, "targets: [sm_90]", "targets: [gfx942]").replace("block_n: 64", "block_n: 16"),
     ("specs/x.yaml:10:13: schedule=fa3: not possible on gfx942: it needs TMA, mbarrier transactions, setmaxnreg and "
      "asynchronous wgmma (Hopper instructions; the HIP backend has none of them); use schedule: default there "
      "(overrides.gfx942.schedule) or drop gfx942 from targets [fa3_target]")),
    (edit(FA3, "targets: [sm_90]", "targets: [gfx950]"),
     ("specs/x.yaml:10:13: schedule=fa3: not possible on gfx950: it needs TMA, mbarrier transactions, setmaxnreg and "
      "asynchronous wgmma (Hopper instructions; the HIP backend has none of them); use schedule: default there "
      "(overrides.gfx950.schedule) or drop gfx950 from targets [fa3_target]")),
    (edit(FA3, "threads: 384", "threads: 256"),
     ("specs/x.yaml:7:48: tiling.threads=256: schedule fa3 at block_m 128 runs 384 threads: one producer warpgroup and "
      "2 consumer warpgroups of 128 [fa3_tiles]")),
    (edit(FA3, "block_m: 128", "block_m: 256"),
     ("specs/x.yaml:7:21: tiling.block_m=256: schedule fa3 takes block_m 128 or 192: 64 query rows per consumer "
      "warpgroup, 2 or 3 of them [fa3_tiles]")),
    (edit(FA3, "stages: 2", "stages: 1"),
     ("specs/x.yaml:8:22: pipeline.stages=1: schedule fa3 keeps a ring of 2 to 4 K/V slots (one full and one empty "
      "mbarrier per slot): with one, a block's load cannot overlap the GEMMs of the block before [fa3_tiles]")),
    (edit(edit(FA3, "block_n: 64", "block_n: 256"), "head_dim: 128", "head_dim: 64"),
     ("specs/x.yaml:7:35: tiling.block_n=256: a consumer thread would hold about 256 registers (S, P and O of 64 x 256 "
      "keys at head_dim 64, + 32), over the 240 setmaxnreg gives each of 2 consumer warpgroups on sm_90 [fa3_registers]")),
    # FA3's non-causal d128 tile 128 x 176 takes two slots of K and V: three are over the 227 KiB of shared memory
    (edit(edit(FA3, "block_n: 64", "block_n: 176"), "stages: 2", "stages: 3").replace("tail: none", "tail: predicated"),
     ("specs/x.yaml:7:11: tiling: Q 128x128 + (K + V) 176x128 x 3 stage(s) need 303104 B (296 KiB) of shared memory, "
      "over the 232448 B (227 KiB) per workgroup on sm_90 [lds_budget]")),
])
def test_fa3_rules(text, message):
    assert errors(text) == [message]


# d64, three consumers, 64 keys a block, causal, predicated: the tile TileLang 0.1.15 cannot lower at ragged shapes
FA3_192X64 = (edit(edit(edit(edit(FA3, "block_m: 128", "block_m: 192"), "threads: 384", "threads: 512"),
                        "head_dim: 128", "head_dim: 64\n  causal: top_left"), "tail: none", "tail: predicated")
              .replace("seq_q: 512", "seq_q: 576"))


def test_fa3_ragged_causal_rule():
    assert errors(FA3_192X64) == [
        ("specs/x.yaml:8:35: tiling.block_n=64: schedule fa3, causal, block_m 192 x block_n 64 with tail: predicated does "
        "not lower in TileLang 0.1.15 where seq_q and seq_kv are both ragged (a shared-memory sync in a divergent "
        "region): take block_n 128, or tail: none at block multiples [fa3_ragged_causal]")]
    for legal in (edit(FA3_192X64, "block_n: 64", "block_n: 128"), edit(FA3_192X64, "tail: predicated", "tail: none"),
                  edit(FA3_192X64, "causal: top_left", "causal: false")):
        build_instances(parse_specs(legal, FILE))


@pytest.mark.slow
def test_the_refused_fa3_tile_still_fails_to_lower_at_ragged_shapes():
    # the evidence of rule fa3_ragged_causal, kept: the tile, rendered past the rules, lowers where only one of
    # seq_q, seq_kv is ragged and fails where both are. A TileLang that lowers it fails this test: drop the rule then.
    from codegen.core.errors import TilegenError
    from codegen.families.attention.instance import make_instance
    from codegen.generate.render import render
    from codegen.targets import TARGETS

    (loaded,) = parse_specs(FA3_192X64, FILE)
    f = render(make_instance(loaded.spec, TARGETS[loaded.spec.targets[0]], FILE))
    lower(f, (1, 2, 1, 385, 448), "sm_90")
    with pytest.raises(TilegenError, match="divergent region"):
        lower(f, (1, 2, 1, 193, 193), "sm_90")


def test_fa3_refuses_decode_and_gfx942_keeps_the_default_by_override():
    text = edit(edit(DECODE, "threads: 128", "threads: 384"), "split_kv: 16", "split_kv: 16\n  schedule: fa3")
    assert errors(text) == [("specs/x.yaml:11:13: schedule=fa3: schedules the prefill KV loop only: variant decode takes "
                             "schedule: default [fa3_variant]")]
    text = edit(FA3, "targets: [sm_90]", "targets: [gfx942, sm_90]\n  overrides:\n    gfx942:\n      schedule: default\n"
                "      tiling: {block_m: 64, block_n: 16, threads: 256}")
    by_target = {i.target.value: i for i in build_instances(parse_specs(text, FILE))}
    assert (by_target["gfx942"].template, by_target["sm_90"].template) == ("attention.py.j2", "attention_fa3.py.j2")


FA3_NAMES = sorted(n for n, t in FILES if n.endswith("_fa3"))


def test_the_fa3_seeds_are_sm90_only_and_search_small_spaces():
    from codegen.tune.search import space_size

    assert FA3_NAMES == ["attn_bf16_gqa_causal_fa3", "attn_fp16_d128_causal_fa3", "attn_fp16_d128_fa3",
                         "attn_fp16_d64_causal_fa3", "attn_fp16_gqa_chunked_prefill_fa3"]
    assert not [n for n, t in FILES if t != "sm_90" and n.endswith("_fa3")]
    by_name = {n: FILES[(n, "sm_90")].instance for n in FA3_NAMES}
    # FA3's tiles: d128 128 x 176 non-causal, 128 x 128 causal, d64 192 x 128 over three consumers
    assert [(by_name[n].block_m, by_name[n].block_n, by_name[n].threads) for n in FA3_NAMES] == [
        (128, 128, 384), (128, 128, 384), (128, 176, 384), (192, 128, 512), (128, 128, 384)]
    project = Project()
    specs = {s.spec.name: s.spec for s in load_spec_files(project.spec_paths(None), project.root) if s.spec.name in by_name}
    assert {n: space_size(spec, spec.targets[0]) for n, spec in specs.items() if spec.search} == {
        "attn_bf16_gqa_causal_fa3": 24, "attn_fp16_d128_causal_fa3": 24, "attn_fp16_d128_fa3": 16, "attn_fp16_d64_causal_fa3": 24}


def _fa3_source(name: str, shape: tuple[int, ...]) -> str:
    return lower(FILES[(name, "sm_90")], shape, "sm_90").source


def test_fa3_lowers_to_a_producer_two_ping_ponging_consumers_and_a_tma_store():
    src = _fa3_source("attn_fp16_d128_causal_fa3", (1, 4, 2, 512, 512))
    assert "__launch_bounds__(384, 1)" in src
    assert src.count("tl::warpgroup_reg_dealloc<24>()") == 1 and src.count("tl::warpgroup_reg_alloc<240>()") == 2
    # ping-pong: consumer 0 takes its first turn on gate 15 itself; each turn is a sync on its own gate (block 0
    # and the loop) and an arrive on the other's
    assert src.count("tl::__named_barrier_arrive(15, 256)") == 3 and src.count("tl::__sync_thread_partial(15, 256)") == 2
    assert src.count("tl::__named_barrier_arrive(14, 256)") == 2 and src.count("tl::__sync_thread_partial(14, 256)") == 2
    # S waited for with P.V in flight, once per consumer loop; the ring's slot picked by a descriptor offset
    assert src.count("tl::wait_wgmma<1>()") == 2 and "wgmma_rs" in src and "wgmma_ss" in src
    assert "increase_descriptor_offset" in src
    # O: registers -> the consumer's Q tile (stmatrix) -> fence -> its epilogue barrier -> one TMA store
    assert src.count("tl::fence_proxy_async()") == 2 and src.count("tl::tma_store_wait<0, true>()") == 2
    assert "tl::__sync_thread_partial(13, 128)" in src and "tl::__sync_thread_partial(12, 128)" in src
    assert "ptx_stmatrix" in src and "*(uint1*)(O +" not in src
    # causal: the query blocks in reverse (the longest KV loops launch first), the mask behind each diagonal test
    # (4 query blocks of 512: block bx loads and stores rows (3 - bx) * 128 ..)
    assert re.search(r"tma_load\(Q_desc, q_full\[0\], .*\(384 - \(\(\(int\)blockIdx\.x\) \* 128\)\)", src)
    assert re.search(r"tma_store\(O_desc, .*Q_1.*\(448 - \(\(\(int\)blockIdx\.x\) \* 128\)\)", src)
    assert src.count("float condval") == 4  # block 0 and the loop, per consumer


def test_fa3_three_consumers_at_d64_and_the_176_key_tile_lower():
    src = _fa3_source("attn_fp16_d64_causal_fa3", (1, 4, 4, 400, 400))  # ragged: 400 = 2 x 192 + 16
    assert "__launch_bounds__(512, 1)" in src and src.count("tl::warpgroup_reg_alloc<160>()") == 3
    for gate in (15, 14, 13):
        assert src.count(f"tl::__sync_thread_partial({gate}, 256)") == 2
    assert src.count("tl::tma_store_wait<0, true>()") == 3
    src = _fa3_source("attn_fp16_d128_fa3", (1, 2, 2, 300, 300))
    assert "64, 176, 16" in src  # Q.K^T as one wgmma of N 176 per k-step (tilelang picks N = block_n)
    assert src.count("tl::wait_wgmma<1>()") == 2 and "CUDART_INF_F" in src  # keys past seq_kv masked


# ---- fa3 on a persistent grid (grid: persistent) ---------------------------------------------------------

FA3_PERS = edit(FA3, "schedule: fa3", "schedule: fa3\n  grid: persistent")


def test_fa3_persistent_grid_instance_and_grid_tiles_keeps_the_name():
    (inst,) = build_instances(parse_specs(FA3_PERS, FILE))
    assert inst.stem() == "attn_fp16_d128_128x64_t384_s2_fa3_pers" and inst.persistent_workgroups == 132
    assert inst.l2_kv_bytes is None  # no causal mask: the query blocks of one (batch, head) go together
    # one workgroup per SM, or one per tile where there are fewer
    assert inst.launch_grids((4, 32, 32, 4096, 4096)) == ((132, 1, 1),) and inst.launch_grids((1, 8, 2, 512, 512)) == ((32, 1, 1),)
    assert inst.metadata("u")["fa3"] == {"consumer_warpgroups": 2, "producer_max_nreg": 24, "consumer_max_nreg": 240,
                                         "grid": "persistent", "workgroups": 132}
    assert "persistent grid" in inst.summary()["schedule"]
    # grid: tiles is the kernel of a spec without the field: same name, same text
    plain = render_all(build_instances(parse_specs(FA3, FILE)))[0]
    spelled = render_all(build_instances(parse_specs(edit(FA3, "schedule: fa3", "schedule: fa3\n  grid: tiles"), FILE)))[0]
    assert plain.uri == spelled.uri and plain.text == spelled.text and "WORKGROUPS" not in plain.text
    (causal,) = build_instances(parse_specs(edit(FA3_PERS, "head_dim: 128", "head_dim: 128\n  causal: top_left"), FILE))
    assert causal.l2_kv_bytes == 25 << 20  # half the 50 MB L2 of an H100 / H200
    # fp16 K and V of 4096 keys at d128: 2 MiB a K/V head, 12 of them fit; sections divide the 128 (batch, head)
    # pairs: 8 K/V heads (MHA), or 8 K/V heads of 4 query heads each (GQA 4:1)
    assert causal.kv_section((4, 32, 32, 4096, 4096)) == 8 and causal.kv_section((4, 32, 8, 4096, 4096)) == 32
    assert causal.kv_section((1, 32, 8, 2048, 2048)) == 32  # the whole problem in one section
    assert causal.kv_section((1, 4, 4, 1, 1 << 24)) == 1  # one K/V head over the budget: a section of its own


@pytest.mark.parametrize(("text", "message"), [
    (edit(WS, "schedule: ws", "schedule: ws\n  grid: persistent"),
     ("specs/x.yaml:11:9: grid=persistent: grid persistent loops schedule fa3's tiles, not schedule ws's: take grid: tiles "
      "there (overrides.sm_90.grid where one target's schedule differs) [grid_schedule]")),
    (edit(BASE, "tail: none", "tail: none\n  grid: persistent"),
     ("specs/x.yaml:10:9: grid=persistent: grid persistent loops schedule fa3's tiles, not schedule default's: take grid: "
      "tiles there (overrides.sm_90.grid where one target's schedule differs) [grid_schedule]")),
])
def test_grid_persistent_is_fa3s(text, message):
    assert errors(text) == [message]


def test_fa3_persistent_tile_order_is_the_templates_and_keeps_sections_in_l2():
    # instance.persistent_tile (the numerics' map, the negative control's) against the rendered template's lines
    for causal, kv_heads in (("false", 2), ("top_left", 2), ("top_left", 6), ("bottom_right", 1)):
        text = edit(edit(FA3_PERS, "head_dim: 128", f"head_dim: 128\n  causal: {causal}"), "kv_heads: 2", f"kv_heads: {kv_heads}")
        f = render_all(build_instances(parse_specs(text.replace("heads: 8,", "heads: 6,"), FILE)))[0]
        names = ("qb", "pair", "by", "bz") if causal != "false" else ("qb", "by", "bz")
        lines = {m[0]: m[1] for m in re.findall(r"^\s+(\w+) = (.+?)(?:\s+#.*)?$", f.text, re.MULTILINE) if m[0] in names}
        assert set(lines) == set(names), lines
        batch, heads, q_blocks, seq_kv = 3, 6, 5, 12800  # K and V of 6.25 MiB a K/V head: 4 per section
        shape = (batch, heads, kv_heads, q_blocks * 128, seq_kv)
        if causal != "false":
            scope = {k: int(v) for k, v in re.findall(r"^(L2_KV_BYTES|IN_BYTES|HEAD_DIM) = (\d+)", f.text, re.MULTILINE)}
            scope.update(heads=heads, batch=batch, kv_heads=kv_heads, seq_kv=seq_kv)
            for v in ("group", "fit", "section"):  # make_kernel's lines
                (line,) = re.findall(rf"^    {v} = (.+)$", f.text, re.MULTILINE)
                scope[v] = eval(line, dict(scope))  # as globals: the generator expression reads them
            section = scope["section"]
            # 4 K/V heads fit; the most of them (times the query heads of each) that divides the 18 pairs
            assert section == f.instance.kv_section(shape) == {6: 3, 2: 9, 1: 18}[kv_heads], kv_heads
        seen = []
        for tile in range(f.instance.persistent_tiles(shape)):
            scope = {"tile": tile, "q_blocks": q_blocks, "heads": heads, "batch": batch}
            if causal != "false":
                scope["section"] = section
            for v in names:
                scope[v] = eval(lines[v], {}, scope)  # our own template
            assert (scope["qb"], scope["by"], scope["bz"]) == f.instance.persistent_tile(tile, shape), (causal, tile)
            seen.append((scope["qb"], scope["by"], scope["bz"]))
        assert sorted(seen) == sorted((q, h, b) for q in range(q_blocks) for h in range(heads) for b in range(batch))
        if causal != "false":  # in each section, the last query blocks first, over `section` (batch, head) pairs
            for s0 in range(0, len(seen), section * q_blocks):
                part = seen[s0:s0 + section * q_blocks]
                assert [q for q, _, _ in part] == sorted((q for q, _, _ in part), reverse=True)
                assert len({(h, b) for _, h, b in part}) == section


FA3_SNAKE = edit(edit(FA3_PERS, "grid: persistent", "grid: persistent\n  tile_order: snake"), "head_dim: 128",
                 "head_dim: 128\n  causal: top_left")


def _if_then_else(cond, a, b):  # T.if_then_else on Python values: the template's tile-loop lines run here
    return a if cond else b


def test_fa3_persistent_snake_deals_the_odd_rounds_in_reverse_as_the_template_does():
    (inst,) = build_instances(parse_specs(FA3_SNAKE, FILE))
    assert inst.stem() == "attn_fp16_d128_causal_128x64_t384_s2_fa3_pers_snake" and inst.snake
    assert "persistent grid, snake" in inst.summary()["schedule"]
    # tile_order strided is the kernel of a spec without the field: same name, same text
    causal = edit(FA3_PERS, "head_dim: 128", "head_dim: 128\n  causal: top_left")
    plain = render_all(build_instances(parse_specs(causal, FILE)))[0]
    spelled = render_all(build_instances(parse_specs(edit(causal, "grid: persistent", "grid: persistent\n  tile_order: strided"), FILE)))[0]
    assert plain.uri == spelled.uri and plain.text == spelled.text and "in reverse" not in plain.text
    f = render_all(build_instances(parse_specs(FA3_SNAKE, FILE)))[0]
    (tile_line,) = {m for m in re.findall(r"^\s+tile = (.+?)(?:\s+#.*)?$", f.text, re.MULTILINE)}  # producer, consumers
    (rounds_line,) = re.findall(r"^\s+rounds = (.+?)(?:\s+#.*)?$", f.text, re.MULTILINE)
    rounds_line = rounds_line.replace("T.if_then_else", "_if_then_else").replace("T.ceildiv", "_ceildiv")
    tile_line = tile_line.replace("T.if_then_else", "_if_then_else")
    for tiles, grid in ((12, 5), (10, 5), (14, 5), (7, 7), (17, 4), (512, 132), (160, 132), (288, 132)):
        heads, q_blocks = tiles, 1  # (1, tiles, tiles, 128, 128): one query block of each head, `tiles` tiles
        shape = (1, heads, heads, q_blocks * 128, 128)
        inst_g = replace(inst, persistent_workgroups=grid)
        dealt = []
        for wg in range(grid):
            scope = {"_if_then_else": _if_then_else, "_ceildiv": lambda a, b: -(-a // b), "q_blocks": q_blocks,
                     "heads": heads, "batch": 1, "grid": grid, "wg": wg}
            rounds = eval(rounds_line, scope)  # our own template
            mine = [eval(tile_line, scope | {"r": r}) for r in range(rounds)]
            assert mine == inst_g.persistent_tiles_of(wg, shape), (tiles, grid, wg)
            assert [t // grid for t in mine] == list(range(rounds))  # one a round
            assert all(t % grid == (grid - 1 - wg if (t // grid) % 2 else wg) for t in mine)  # odd rounds reversed
            dealt += mine
        assert sorted(dealt) == list(range(tiles)), (tiles, grid)  # every tile once
        assert sorted(inst_g.persistent_last_tiles(shape)) == sorted(t[-1] for t in (inst_g.persistent_tiles_of(w, shape)
                                                                                    for w in range(grid)))
    # Llama-3-8B prefill (1x32x8x2048, 512 causal tiles on 132 SMs): dealt strided, the workgroup of the first
    # longest tile also takes the longest of every later round; snake evens the KV blocks each workgroup loops over
    llama = (1, 32, 8, 2048, 2048)
    inst_r = replace(inst, tile_order=None)
    blocks = {t: inst.persistent_tile(t, llama)[0] + 1 for t in range(512)}  # a query block's causal 128-key blocks
    strided = max(sum(blocks[t] for t in inst_r.persistent_tiles_of(w, llama)) for w in range(132))
    snake = max(sum(blocks[t] for t in inst.persistent_tiles_of(w, llama)) for w in range(132))
    assert (strided, snake) == (40, 34) and sum(blocks.values()) / 132 > 32
    # verify adds a rounds shape whose last round is dealt forward after a reversed one
    *_, one, two = derived_shapes(inst)
    assert inst.persistent_tiles(one) // 132 == 1 and inst.persistent_tiles(two) // 132 == 2


@pytest.mark.parametrize(("text", "message"), [
    (edit(FA3, "schedule: fa3", "schedule: fa3\n  tile_order: snake"),
     ("specs/x.yaml:11:15: tile_order=snake: orders the rounds of schedule fa3's persistent grid (grid: persistent): "
      "take tile_order: strided with grid tiles or another schedule [tile_order_grid]")),
    (edit(FA3, "schedule: fa3", "schedule: fa3\n  tile_order: dynamic"),
     ("specs/x.yaml:11:15: tile_order=dynamic: orders the rounds of schedule fa3's persistent grid (grid: persistent): "
      "take tile_order: strided with grid tiles or another schedule [tile_order_grid]")),
])
def test_tile_order_is_the_persistent_grids(text, message):
    assert errors(text) == [message]


def test_fa3_persistent_snake_control_leaves_each_workgroups_last_tile():
    from codegen.families.attention.numerics import persistent_last_round_skipped

    text = edit(FA3_SNAKE, "block_n: 64", "block_n: 128")
    (inst,) = build_instances(parse_specs(text, FILE))
    shape = (1, 4, 2, 3 * 128, 256)  # 12 tiles
    inst = replace(inst, persistent_workgroups=5, l2_kv_bytes=2 * 256 * 128 * 2)
    # rounds of 5: 0-4 forward, 5-9 reversed, 10-11 forward: the last tiles are 10, 11 (workgroups 0, 1) and 7, 6, 5
    # (workgroups 2, 3, 4)
    assert sorted(inst.persistent_last_tiles(shape)) == [5, 6, 7, 10, 11]
    order = [inst.persistent_tile(t, shape)[:2] for t in range(12)]
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = fam.reference(inst, case)
    bad = persistent_last_round_skipped(inst, case, ref)
    unwritten = {(qb, h) for qb in range(3) for h in range(4) if bad[0, qb * 128:(qb + 1) * 128, h].isnan().all()}
    assert unwritten == {order[t] for t in (5, 6, 7, 10, 11)}
    status, _cmp, controls = check_output(inst, shape, lambda c, r: r)
    assert status == "verified" and controls["persistent_last_round_skipped"] == "rejected", controls


def test_fa3_persistent_snake_lowers_to_the_reversed_rounds():
    text = edit(FA3_SNAKE, "block_n: 64", "block_n: 128")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    src = lower(f, (1, 16, 4, 1280, 1280), "sm_90").source  # 160 tiles on 132 workgroups: 28 in a reversed round
    # every role's loop runs 1 round, or 2 for the last 28 workgroups
    # (the partial round is odd, dealt in reverse): ceil((160 - (131 - wg)) / 132), 2 from workgroup 104 on
    assert len(re.findall(r"for \(int r(_\d+)? = 0; r(_\d+)? < \(\(\(\(int\)blockIdx\.x\) \+ 160\) / 132\);", src)) == 3
    assert "131 - ((int)blockIdx.x)" in src  # a reversed round's workgroup
    assert src.count("kv_done[0] = ") == 4


FA3_DYNAMIC = edit(FA3_SNAKE, "tile_order: snake", "tile_order: dynamic")


def test_fa3_persistent_dynamic_takes_its_tiles_from_a_zeroed_counter():
    (inst,) = build_instances(parse_specs(FA3_DYNAMIC, FILE))
    assert inst.stem() == "attn_fp16_d128_causal_128x64_t384_s2_fa3_pers_dyn" and inst.dynamic and not inst.snake
    assert "persistent grid, dynamic" in inst.summary()["schedule"]
    shape = (1, 16, 4, 1280, 1280)  # 160 tiles on 132 workgroups
    assert inst.workspace_shapes(shape) == ((1,),) and inst.workspace_dtypes() == ("int32",)
    assert inst.workspace_zeroed() == (True,)
    # which tiles a workgroup computes is decided as the grid runs: the control leaves every tile past the first
    assert inst.persistent_last_tiles(shape) == list(range(132, 160))
    with pytest.raises(ValueError, match="decided as the grid runs"):
        inst.persistent_tiles_of(0, shape)
    # verify adds shapes where workgroups take one and two tiles from the counter
    *_, one, two = derived_shapes(inst)
    assert inst.persistent_tiles(one) // 132 == 1 and inst.persistent_tiles(two) // 132 == 2
    case = ATTENTION.make_inputs(inst, one, seed=0, kind="normal", device="cpu", run_target=inst.target)
    (counter,) = case.workspace
    assert counter.dtype == torch.int32 and counter.shape == (1,) and not counter.any()
    assert ATTENTION.after_launch(inst, case) == ""
    counter[0] = 160
    assert "1 of 1 counters (zero on entry) left non-zero" in ATTENTION.after_launch(inst, case)
    # strided and snake take no workspace
    assert build_instances(parse_specs(FA3_SNAKE, FILE))[0].workspace_shapes(shape) == ()


def test_fa3_persistent_dynamic_hands_out_every_tile_once_and_leaves_the_counter_zero():
    """The template's fetch (`cur[0] = T.shfl_sync(fetched[0], 0) + ...`, the reset at the launch's last number)
    run here on the workgroups in random orders: every tile is computed once and the counter ends at zero."""
    import random

    f = render_all(build_instances(parse_specs(FA3_DYNAMIC, FILE)))[0]
    (step,) = re.findall(r"^\s+cur\[0\] = T\.shfl_sync\(fetched\[0\], 0\) (.+?)(?:\s+#.*)?$", f.text, re.MULTILINE)
    (last,) = re.findall(r"^\s+if fetched\[0\] == (.+?):$", f.text, re.MULTILINE)
    (first,) = re.findall(r"^\s+cur\[0\] = (wg)\b", f.text, re.MULTILINE)
    rng = random.Random(0)
    for tiles, grid in ((12, 5), (5, 5), (160, 132), (512, 132), (133, 132)):
        counter, done = [0], []
        cur = {wg: eval(first, {"wg": wg}) for wg in range(grid)}  # our own template
        while cur:
            wg = rng.choice(sorted(cur))  # whichever workgroup comes free next
            done.append(cur[wg])
            fetched = counter[0]
            counter[0] += 1
            if fetched == eval(last, {"tiles": tiles}):
                counter[0] = 0
            cur[wg] = eval(f"fetched {step}", {"fetched": fetched, "grid": grid})
            if cur[wg] >= tiles:
                del cur[wg]
        assert sorted(done) == list(range(tiles)) and counter == [0], (tiles, grid)


def test_fa3_persistent_dynamic_control_and_verify():
    text = edit(FA3_DYNAMIC, "block_n: 64", "block_n: 128")
    (inst,) = build_instances(parse_specs(text, FILE))
    shape = (1, 4, 2, 3 * 128, 256)  # 12 tiles on 5 workgroups: tiles 5-11 come from the counter
    inst = replace(inst, persistent_workgroups=5, l2_kv_bytes=2 * 256 * 128 * 2)
    status, _cmp, controls = check_output(inst, shape, lambda c, r: r)
    assert status == "verified" and controls["persistent_fetch_skipped"] == "rejected", controls
    assert "persistent_last_round_skipped" not in controls


def test_fa3_persistent_dynamic_lowers_to_a_counter_the_producer_warp_shares():
    text = edit(FA3_DYNAMIC, "block_n: 64", "block_n: 128")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    assert 'TILE_COUNTER: T.Tensor((1,), "int32"),' in f.text
    src = lower(f, (1, 16, 4, 1280, 1280), "sm_90").source  # 160 tiles on 132 workgroups
    # one lane takes a number, the last number of the launch sets the counter back to zero, the warp shares it
    assert re.search(r"if \(\(\(int\)threadIdx\.x\) == 0\) \{\s*fetched\[0\] = AtomicAddRet\(\(&\(TILE_COUNTER\[0\]\)\), 1\);"
                     r"\s*if \(fetched\[0\] == 159\) \{\s*TILE_COUNTER\[0\] = 0;", src)
    assert "cur[0] = (__shfl_sync((uint)4294967295, fetched[0], 0, 32) + 132);" in src
    # the producer and each consumer loop until a tile number past the tiles; a round's number in slot r % 2
    assert src.count("if (!((cur[0] < 160))) { break; }") == 3
    assert "((int*)tile_ids)[(r & 1)] = tile;" in src and "((int*)tile_ids)[(cur[1] & 1)] = 160;" in src
    assert src.count("cur[0] = ((int*)tile_ids)[(cur[1] & 1)];") == 2 and "for (int r = " not in src


def test_fa3_persistent_lowers_to_tile_loops_that_refill_q_once_o_has_left():
    text = edit(edit(FA3_PERS, "head_dim: 128", "head_dim: 128\n  causal: top_left"), "block_n: 64", "block_n: 128")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    src = lower(f, (1, 16, 4, 1280, 1280), "sm_90").source  # 160 tiles on 132 workgroups: some run two
    assert "__launch_bounds__(384, 1)" in src and src.count("tl::warpgroup_reg_alloc<240>()") == 2
    # the producer and each consumer loop over the workgroup's tiles, counting the rings' blocks on (kv_done)
    assert len(re.findall(r"for \(int r(_\d+)? = 0; r(_\d+)? < \(\(291 - \(\(int\)blockIdx\.x\)\) / 132\)", src)) == 3
    assert src.count("kv_done[0] = ") == 4 and "k_empty[((kb0 + kb) & 1)].wait(((((kb0 + kb) >> 1) + 1) & 1))" in src
    # Q: each consumer's tile refilled once its O has been stored (q_empty, 128 arrivals: the warpgroup's threads),
    # which the consumer signals after its TMA store's wait and a warpgroup barrier
    assert src.count(".init(128);") == 2 and "q_empty[0].wait(((r + 1) & 1))" in src and "q_empty[1].wait(((r + 1) & 1))" in src
    for c, bar in ((0, 13), (1, 12)):
        assert re.search(rf"tma_store_wait<0, true>\(\);\s*}}\s*tl::__sync_thread_partial\({bar}, 128\);\s*q_empty\[{c}\]\.arrive\(\);", src)
    # ping-pong: consumer 0 takes the first turn once, before its tile loop
    assert src.count("tl::__named_barrier_arrive(15, 256)") == 3

# ---- schedule persistent and k_pack (attention_persistent.py.j2, issue 13 part 4) -------------------------

PERSISTENT = edit(edit(edit(BASE, "targets: [sm_90]", "targets: [gfx942]"), "block_m: 128, block_n: 64", "block_m: 128, block_n: 32"),
                  "tail: none", "tail: none\n  schedule: persistent\n  k_pack: 2").replace("stages: 2", "stages: 1")


def test_persistent_instance_and_the_default_keeps_its_name():
    (inst,) = build_instances(parse_specs(PERSISTENT, FILE))
    assert (inst.template, inst.schedule, inst.k_pack, inst.persistent_workgroups) == (
        "attention_persistent.py.j2", "persistent", 2, 304)  # gfx942: 304 CUs, one workgroup each
    assert inst.stem() == "attn_fp16_d128_128x32_t256_s1_kp2_persistent"
    assert inst.metadata("u")["persistent"] == {"workgroups": 304} and inst.metadata("u")["k_pack"] == 2
    # the grid: one workgroup per CU, or one per tile where there are fewer tiles
    assert inst.launch_grids((4, 32, 32, 4096, 4096)) == ((304, 1, 1),)
    assert inst.launch_grids((1, 8, 2, 512, 512)) == ((32, 1, 1),)
    # k_pack 1 and schedule default are the kernel of a spec without the fields: same name, same text
    plain = render_all(build_instances(parse_specs(edit(BASE, "targets: [sm_90]", "targets: [gfx942]")
                                                   .replace("block_n: 64", "block_n: 16"), FILE)))[0]
    spelled = render_all(build_instances(parse_specs(edit(BASE, "targets: [sm_90]", "targets: [gfx942]")
                                                     .replace("block_n: 64", "block_n: 16")
                                                     .replace("tail: none", "tail: none\n  k_pack: 1\n  schedule: default"),
                                                     FILE)))[0]
    assert plain.uri == spelled.uri and plain.text == spelled.text
    assert "k_pack" not in plain.instance.metadata("u") and "persistent" not in plain.instance.metadata("u")
    # sm_90 takes no k_pack: a spec naming both targets packs on gfx942 only
    both = edit(PERSISTENT, "targets: [gfx942]", "targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n"
                "      tiling: {block_m: 128, block_n: 64, threads: 256}")
    by_target = {i.target.value: i for i in build_instances(parse_specs(both, FILE))}
    assert (by_target["gfx942"].k_pack, by_target["sm_90"].k_pack) == (2, 1)
    assert by_target["sm_90"].persistent_workgroups == 132


def test_persistent_tile_order_covers_every_tile_once_and_is_the_templates():
    # instance.persistent_tile (the numerics' map) against the bx/by/bz lines of the rendered template
    for causal in ("false", "top_left"):
        f = render_all(build_instances(parse_specs(edit(PERSISTENT, "tail: none", f"tail: none\n  causal: {causal}"), FILE)))[0]
        lines = {m[0]: m[1] for m in re.findall(r"^\s+(bx|by|bz) = (.+?)(?:\s+#.*)?$", f.text, re.MULTILINE)}
        assert set(lines) == {"bx", "by", "bz"}, lines
        shape = (3, 4, 2, 5 * 128, 5 * 128)
        seen = set()
        for tile in range(f.instance.persistent_tiles(shape)):
            scope = {"tile": tile, "q_blocks": 5, "heads": 4, "batch": 3}
            mine = tuple(eval(lines[v], {}, scope) for v in ("bx", "by", "bz"))  # our own template
            assert mine == f.instance.persistent_tile(tile, shape), (causal, tile)
            seen.add(mine)
        assert seen == {(q, h, b) for q in range(5) for h in range(4) for b in range(3)}
        if causal != "false":  # the longest KV loops first: the first round's tiles are the last query blocks
            assert f.instance.persistent_tile(0, shape)[0] == 4 and f.instance.persistent_tile(59, shape)[0] == 0


@pytest.mark.parametrize(("text", "message"), [
    (edit(PERSISTENT, "k_pack: 2", "k_pack: 2").replace("schedule: persistent", "schedule: default"),
     "specs/x.yaml:11:11: k_pack=2: k_pack 2 is taken by schedule: persistent only, not schedule: default [k_pack_schedule]"),
    (edit(PERSISTENT, "targets: [gfx942]", "targets: [sm_90]").replace("block_n: 32", "block_n: 64"),
     ("specs/x.yaml:11:11: k_pack=2: k_pack exists only for the ROCm MFMA gemm (gfx942, gfx950), and no such target "
      "here uses this value [k_pack_target]")),
    (edit(edit(PERSISTENT, "  k_pack: 2\n", ""), "targets: [gfx942]",
          "targets: [gfx942, sm_90]\n  overrides:\n    sm_90:\n      k_pack: 2"),
     "specs/x.yaml:14:15: overrides.sm_90.k_pack=2: k_pack exists only for the ROCm MFMA gemm (gfx942, gfx950), not sm_90 [k_pack_target]"),
    (edit(PERSISTENT, "k_pack: 2", "k_pack: 4"),
     "specs/x.yaml:11:11: k_pack=4: Input should be 1 or 2 [literal_error]"),
])
def test_persistent_and_k_pack_rules(text, message):
    assert errors(text) == [message]


def test_persistent_refuses_decode():
    text = edit(edit(DECODE, "split_kv: 16", "split_kv: 16\n  schedule: persistent"), "targets: [sm_90]", "targets: [gfx942]")
    text = text.replace("block_n: 64", "block_n: 32")
    assert errors(text) == [("specs/x.yaml:11:13: schedule=persistent: loops over the query blocks of a prefill: variant "
                             "decode takes schedule: default [persistent_variant]")]


def test_search_space_takes_k_pack_and_the_persistent_schedule():
    from codegen.tune.search import space_of

    text = PERSISTENT + "  search:\n    gfx942:\n      schedule: [default, persistent]\n      k_pack: [1, 2]\n"
    (loaded,) = parse_specs(text, FILE)
    space = space_of(loaded.spec, loaded.spec.targets[0])
    assert ("schedule", ["default", "persistent"]) in space and ("k_pack", [1, 2]) in space


def test_the_persistent_seed_is_gfx942_with_k_pack_2():
    names = sorted((n, t) for n, t in FILES if n.endswith("_persistent"))
    assert names == [("attn_fp16_d128_persistent", "gfx942")]
    inst = FILES[names[0]].instance
    assert (inst.k_pack, inst.schedule, inst.block_m, inst.block_n, inst.stages, inst.v_layout) == (
        2, "persistent", 128, 32, 1, "transposed")


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_persistent_lowers_to_a_loop_over_tiles_with_k_pack_on_q_k_only(target):
    # the gfx942 program, lowered for HIP and as verify's logic check for CUDA, at the rounds shape (320 tiles
    # over 304 workgroups): each workgroup loops ceil((320 - wg) / 304) times
    f = FILES[("attn_fp16_d128_persistent", "gfx942")]
    shape = derived_shapes(f.instance)[-1]
    assert shape == (1, 16, 4, 2560, 2560)
    src = lower(f, shape, target).source
    assert "for (int r = 0; r < ((623 - ((int)blockIdx.x)) / 304); ++r)" in src
    assert "blockIdx.y" not in src and "blockIdx.z" not in src
    if target == "gfx942":  # Q.K^T steps K by two MFMA ops (kp); P.V by one
        assert "for (int kp = 0; kp < 2; ++kp)" in src and src.count("kp < 2") == 1
        assert src.count("__builtin_amdgcn_mfma_f32_16x16x16f16") == 2


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
@pytest.mark.parametrize(("causal", "tail"), [("top_left", "none"), ("bottom_right", "predicated"), ("false", "predicated")])
def test_persistent_causal_and_ragged_lower(target, causal, tail):
    # 512 tiles over 304 workgroups; causal: the KV loop's trip count follows the tile's query block
    shape = (4, 16, 4, 1000, 1200) if tail == "predicated" else (4, 16, 4, 1024, 1024)
    sizes = f"seq_q: {shape[3]}, seq_kv: {shape[4]}"
    text = edit(PERSISTENT, "tail: none", f"tail: {tail}\n  causal: {causal}").replace("seq_q: 512, seq_kv: 512", sizes)
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    src = lower(f, shape, target).source
    assert "for (int r = 0; r < ((815 - ((int)blockIdx.x)) / 304); ++r)" in src
    bounds = re.findall(r"for \(int kb = 0; kb < ([^;]*);", src)
    assert len(bounds) == 1 and (("blockIdx.x" in bounds[0]) == (causal != "false")), bounds
    if causal == "bottom_right":  # bx = 7 - q (q = tile // 64, the round's query block from the last) sees
        # ceil(((bx + 1) * 128 + 200) / 32) = 39 - 4q KV blocks of 38: the shift seq_kv - seq_q = 200 is in
        assert bounds[0].startswith("min(38, (39 - "), bounds
    if tail == "predicated":
        assert ("HUGE_VALF" if target == "gfx942" else "CUDART_INF_F") in src  # keys past seq_kv get -inf


def test_persistent_control_is_the_last_round_unwritten():
    # a grid of 5 workgroups over (1, 4, 2, 3 * 128, 256): 12 tiles, so workgroups 0 and 1 run 3 tiles and the
    # rest 2; one round short leaves the last 5 tiles (the control) unwritten
    from codegen.families.attention.numerics import persistent_last_round_skipped

    (inst,) = build_instances(parse_specs(PERSISTENT, FILE))
    inst = replace(inst, persistent_workgroups=5)
    shape = (1, 4, 2, 3 * 128, 256)
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = fam.reference(inst, case)
    bad = persistent_last_round_skipped(inst, case, ref)
    unwritten = {(qb, h) for qb in range(3) for h in range(4) if bad[0, qb * 128:(qb + 1) * 128, h].isnan().all()}
    assert unwritten == {inst.persistent_tile(t, shape)[:2] for t in range(7, 12)} and bad.isnan().sum() == 5 * 128 * 128
    # the whole-tensor and the chunked checks reject it; a correct output verifies
    for max_elements in (None, 2 * 128 * 256):
        status, _cmp, controls = check_output(inst, shape, lambda c, r: r, max_elements=max_elements)
        assert status == "verified" and controls["persistent_last_round_skipped"] == "rejected", (max_elements, controls)
        status, _, _ = check_output(inst, shape, lambda c, r: persistent_last_round_skipped(inst, c, r), max_elements=max_elements)
        assert status == "failed"


def test_fa3_persistent_control_is_the_last_round_unwritten_in_section_order():
    # fa3's persistent grid of 5 workgroups, causal, sections of one K/V head (2 query heads) over (1, 4, 2, 3 * 128,
    # 256): 12 tiles; one round short leaves the last 5 tiles of the section order unwritten
    from codegen.families.attention.numerics import persistent_last_round_skipped

    text = edit(edit(FA3_PERS, "head_dim: 128", "head_dim: 128\n  causal: top_left"), "block_n: 64", "block_n: 128")
    (inst,) = build_instances(parse_specs(text, FILE))
    shape = (1, 4, 2, 3 * 128, 256)
    inst = replace(inst, persistent_workgroups=5, l2_kv_bytes=2 * 256 * 128 * 2)
    assert inst.kv_section(shape) == 2
    order = [inst.persistent_tile(t, shape)[:2] for t in range(12)]
    assert order[:6] == [(2, 0), (2, 1), (1, 0), (1, 1), (0, 0), (0, 1)]  # heads 0-1 (K/V head 0), longest first
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = fam.reference(inst, case)
    bad = persistent_last_round_skipped(inst, case, ref)
    unwritten = {(qb, h) for qb in range(3) for h in range(4) if bad[0, qb * 128:(qb + 1) * 128, h].isnan().all()}
    assert unwritten == set(order[7:]) and bad.isnan().sum() == 5 * 128 * 128
    status, _cmp, controls = check_output(inst, shape, lambda c, r: r)
    assert status == "verified" and controls["persistent_last_round_skipped"] == "rejected", controls
    # the rounds shape verify adds: more tiles than the grid's 132 workgroups
    (inst,) = build_instances(parse_specs(text, FILE))
    rounds = derived_shapes(inst)[-1]
    assert inst.persistent_workgroups < inst.persistent_tiles(rounds) < 2 * inst.persistent_workgroups, rounds

def test_persistent_rounds_shape_has_more_tiles_than_workgroups():
    for causal in ("false", "top_left", "bottom_right"):
        for tail in ("none", "predicated"):
            (inst,) = build_instances(parse_specs(edit(PERSISTENT, "tail: none", f"tail: {tail}\n  causal: {causal}"), FILE))
            shape = derived_shapes(inst)[-1]
            assert inst.persistent_workgroups < inst.persistent_tiles(shape) < 2 * inst.persistent_workgroups, shape
            assert tail == "predicated" or (shape[3] % inst.block_m == 0 and shape[4] % inst.block_n == 0)


# ---- v_layout transposed (attention_persistent.py.j2): V staged head_dim x block_n for P.V ----------------

TRANSPOSED = edit(PERSISTENT, "k_pack: 2", "k_pack: 2\n  v_layout: transposed")


def test_v_layout_transposed_instance_name_and_natural_renames_nothing():
    (inst,) = build_instances(parse_specs(TRANSPOSED, FILE))
    assert inst.v_transposed and inst.stem() == "attn_fp16_d128_128x32_t256_s1_kp2_persistent_vt"
    assert inst.metadata("u")["v_layout"] == "transposed" and inst.lds_bytes == build_instances(
        parse_specs(PERSISTENT, FILE))[0].lds_bytes  # the same V tile, transposed
    plain = render_all(build_instances(parse_specs(PERSISTENT, FILE)))[0]
    spelled = render_all(build_instances(parse_specs(edit(PERSISTENT, "k_pack: 2", "k_pack: 2\n  v_layout: natural"), FILE)))[0]
    assert plain.uri == spelled.uri and plain.text == spelled.text and "V_shared_T" not in plain.text
    assert "v_layout" not in plain.instance.metadata("u")


@pytest.mark.parametrize(("text", "message"), [
    (edit(edit(TRANSPOSED, "  k_pack: 2\n", ""), "schedule: persistent", "schedule: default"),
     ("specs/x.yaml:11:13: v_layout=transposed: v_layout transposed is taken by schedule: persistent only, not "
      "schedule: default [v_layout_schedule]")),
    (edit(TRANSPOSED, "block_n: 32, threads: 256", "block_n: 16, threads: 512"),
     ("specs/x.yaml:12:13: v_layout=transposed: the 16x128 tile of V (block_n x head_dim) does not split into 512 "
      "threads x whole rows of 8 elements (16 bytes): block_n * head_dim must be a multiple of threads * 8, and "
      "block_n of the keys per thread [v_layout_tile]")),
    (edit(TRANSPOSED, "v_layout: transposed", "v_layout: swizzled"),
     "specs/x.yaml:12:13: v_layout='swizzled': Input should be 'natural' or 'transposed' [enum]"),
])
def test_v_layout_rules(text, message):
    assert errors(text) == [message]


def _v_index_functions(f):
    """The rendered module's V staging functions and constants (plain Python over ints)."""
    scope: dict[str, object] = {}
    exec(compile(f.text, f.uri, "exec"), scope)  # noqa: S102 - our own rendered template
    return scope


@pytest.mark.parametrize(("block_n", "head_dim", "threads"), [(32, 128, 256), (16, 128, 256), (64, 64, 256), (32, 64, 128)])
def test_v_transposed_staging_is_a_permutation(block_n, head_dim, threads):
    # every element of V's block_n x head_dim tile has one (thread, register), every (thread, register) one
    # element, by rows and by columns; a 16-byte load takes V_VEC consecutive registers along head_dim, a
    # write V_ROWS consecutive registers along the keys
    text = edit(TRANSPOSED, "block_n: 32, threads: 256", f"block_n: {block_n}, threads: {threads}")
    text = text.replace("head_dim: 128", f"head_dim: {head_dim}")
    f = render_all(build_instances(parse_specs(text, FILE)))[0]
    s = _v_index_functions(f)
    vec, rows = s["V_VEC"], s["V_ROWS"]
    assert vec == 8 and rows * vec * threads == block_n * head_dim
    for index in (s["_v_row_index"], s["_v_col_index"]):
        placed = {(s["_v_thread"](i, j), index(i, j)) for i in range(block_n) for j in range(head_dim)}
        assert placed == {(t, r) for t in range(threads) for r in range(rows * vec)}
    for i in range(block_n):
        for j in range(0, head_dim, vec):
            t, r = s["_v_thread"](i, j), s["_v_row_index"](i, j)
            assert [(s["_v_thread"](i, j + e), s["_v_row_index"](i, j + e)) for e in range(vec)] == [(t, r + e) for e in range(vec)]
    for i in range(0, block_n, rows):
        for j in range(head_dim):
            t, r = s["_v_thread"](i, j), s["_v_col_index"](i, j)
            assert [(s["_v_thread"](i + e, j), s["_v_col_index"](i + e, j)) for e in range(rows)] == [(t, r + e) for e in range(rows)]


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_v_transposed_lowers_with_the_transposed_tile_on_p_v(target):
    f = FILES[("attn_fp16_d128_persistent", "gfx942")]
    assert "gemm(P, V_shared_T, acc_o, transpose_B=True" in f.text
    assert "V_shared_T = T.alloc_shared((HEAD_DIM, BLOCK_N), IN_DTYPE)" in f.text
    src = lower(f, derived_shapes(f.instance)[-1], target).source
    assert "V_shared_T" in src and "V_shared[" not in src


def test_v_transposed_control_is_rejected():
    (inst,) = build_instances(parse_specs(TRANSPOSED, FILE))
    shape = (1, 8, 2, 256, 256)
    for max_elements in (None, 2 * 128 * 256):
        status, _cmp, controls = check_output(inst, shape, lambda c, r: r, max_elements=max_elements)
        assert status == "verified" and controls["v_transposed_keys_reversed"] == "rejected", (max_elements, controls)
    (natural,) = build_instances(parse_specs(PERSISTENT, FILE))
    assert "v_transposed_keys_reversed" not in check_output(natural, shape, lambda c, r: r)[2]


def test_v_transposed_seed_builds_for_gfx942_with_wide_v_reads_and_no_spills(build_cache):
    from spectext import REPO_ROOT

    from codegen.build.compile import BuildOptions, build_files
    from codegen.core.toolchain import ToolchainMissing
    from codegen.targets.gfx942 import find_gfx942

    try:
        find_gfx942(REPO_ROOT)
    except ToolchainMissing as exc:
        pytest.skip(str(exc))
    f = FILES[("attn_fp16_d128_persistent", "gfx942")]
    report = build_files([f], REPO_ROOT, BuildOptions(cache_dir=build_cache, jobs=1, first_shape=True))
    (r,) = report.results
    assert r.ok, r.error
    (k,) = r.kernels
    reads = k.asm.isa.main_loop.lds_reads
    assert k.spills == 0 and "ds_read_u16" not in reads and set(reads) <= {
        "ds_read_b128", "ds_read_b64", "ds_read2st64_b64", "ds_read2_b64", "ds_read_b32"}, reads


def test_search_space_takes_v_layout():
    from codegen.tune.search import space_of

    text = TRANSPOSED + "  search:\n    gfx942:\n      v_layout: [natural, transposed]\n"
    (loaded,) = parse_specs(text, FILE)
    assert ("v_layout", ["natural", "transposed"]) in space_of(loaded.spec, loaded.spec.targets[0])


# ---- split_kv auto: the splits chosen per shape ----------------------------------------------------------

def test_split_kv_auto_picks_a_split_the_h200_sweep_measured_fastest():
    # the rule against the committed sweep of its tile (benchmarks/sweep_decode_split_sm90.py, 132 SMs): at every
    # swept (batch, seq_kv) the split it picks ran within 3 % of the fastest split (4 and 8 at batch 4, 0.3 % apart,
    # may swap places from one run to the next)
    import json

    from codegen.spec.project import find_project_root

    sweep = json.loads((find_project_root(Project().root) / "reports/h200/sweep_decode_split/sweep.json").read_text())
    inst = FILES[("attn_fp16_decode_auto", "sm_90")].instance
    assert (inst.block_m, inst.block_n, inst.split_wave) == (64, 64, sweep["sms"])
    by_shape: dict[tuple[int, int], dict[int, float]] = {}
    for r in sweep["rows"]:
        by_shape.setdefault((r["batch"], r["seq_kv"]), {})[r["split_kv"]] = r["ms"]
    assert len(by_shape) == 6
    for (batch, seq_kv), times in by_shape.items():
        split = inst.split_for((batch, 32, 8, 1, seq_kv))
        assert split in times and times[split] <= 1.03 * min(times.values()), (batch, seq_kv, split, times)
    picked = {key: inst.split_for((key[0], 32, 8, 1, key[1])) for key in by_shape}
    assert sorted(set(picked.values())) == [1, 4, 16]  # one rule, three answers: it is not a constant


# (shape, splits at 132 SMs): the wave binds; the KV blocks bind; more workgroups than a wave; GQA 8 x 8 queries in
# one row block; 4 x 17 packed rows in two row blocks
AUTO_SPLITS = [((1, 32, 8, 1, 32768), 16), ((1, 32, 8, 1, 256), 4), ((16, 32, 8, 1, 4096), 1),
               ((200, 32, 8, 1, 4096), 1), ((2, 64, 8, 8, 1000), 8), ((3, 32, 8, 17, 999), 2)]


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_split_kv_auto_in_the_generated_module_is_the_instances(target):
    # make_kernel computes SPLIT_KV from the shape; the host allocates the workspaces and checks the kernel from
    # AttentionInstance.split_for: both must agree at every shape (the prim_func's O_PART and LSE say what it took)
    f = FILES[("attn_fp16_decode_auto", target)]
    inst, module = f.instance, load_module(f)
    assert "_kauto" in f.uri and inst.metadata(f.uri)["split_kv"] == "auto"
    for shape, splits_sm90 in AUTO_SPLITS:
        func = module.make_kernel(*shape)
        o_part, lse = (func.buffer_map[func.params[i]] for i in (3, 4))
        got = (tuple(int(x) for x in o_part.shape), tuple(int(x) for x in lse.shape))
        assert got == inst.workspace_shapes(shape), (shape, got)
        assert inst.launch_grids(shape)[0][0] == inst.split_for(shape)
        if target == "sm_90":
            assert inst.split_for(shape) == splits_sm90, shape
        else:  # 304 CUs: at least as many splits, never more than the KV blocks
            assert splits_sm90 <= inst.split_for(shape) <= math.ceil(shape[4] / inst.block_n), shape


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_split_kv_auto_at_one_split_writes_o_without_a_combine_kernel(target):
    f = FILES[("attn_fp16_decode_auto", target)]
    for shape, kernels in (((64, 32, 8, 1, 640), 1), ((1, 32, 8, 1, 640), 2)):
        src = lower(f, shape, target).source
        found = set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", src))
        assert len(found) == kernels == len(f.instance.launch_grids(shape)), (shape, found)
        assert (f.instance.split_for(shape) == 1) == (kernels == 1)


def test_split_kv_auto_names_and_rules():
    auto = edit(DECODE, "split_kv: 16", "split_kv: auto")
    (inst,) = build_instances(parse_specs(auto, FILE))
    fixed = FILES[("attn_fp16_decode", "sm_90")].instance
    assert inst.stem().endswith("_kauto") and inst.split_wave == 132 and fixed.split_wave is None
    assert "split_wave" not in fixed.canonical()  # a fixed split's name does not change with the field
    # auto satisfies rule split_kv at any cache length (a split per block at most); a fixed 16 over 2 blocks does not
    short = "seq_kv: 100}"
    (short_inst,) = build_instances(parse_specs(edit(edit(auto, "seq_kv: 4096}", short), "tail: none", "tail: predicated"), FILE))
    assert short_inst.split_for((8, 32, 8, 4, 100)) == 2  # its two KV blocks
    assert [e for e in errors(edit(edit(DECODE, "seq_kv: 4096}", short), "tail: none", "tail: predicated"))
            if "[split_kv]" in e]
    assert errors(edit(DECODE, "split_kv: 16", "split_kv: automatic"))
    prefill = edit(edit(auto, "variant: decode", "variant: prefill"), "seq_q: 4,", "seq_q: 4096,")
    assert any("split_kv=auto: only variant: decode splits the KV sequence" in e for e in errors(prefill)), errors(prefill)


def test_split_kv_auto_derived_shapes_split_some_blocks_unevenly():
    # the checker's shapes for auto: a split per block where the splits fill little of the wave, and half a wave of
    # batches over five blocks -- two splits, of two and three blocks (the dropped-split control's boundary)
    inst = FILES[("attn_fp16_decode_auto", "sm_90")].instance
    splits = [(s, inst.split_for(s), math.ceil(s[4] / inst.block_n)) for s in derived_shapes(inst)]
    assert any(n > 1 and blocks > n for _, n, blocks in splits), splits
    assert all(1 <= n <= blocks for _, n, blocks in splits), splits


# ---- dynamic_kv: one decode kernel for every KV length ---------------------------------------------------

DYNAMIC = edit(edit(DECODE, "tail: none", "tail: predicated\n  dynamic_kv: {min: 1024, max: 65536}"),
               "split_kv: 16", "split_kv: auto")


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_dynamic_kv_is_one_kernel_for_every_length_with_the_splits_of_the_shortest(target):
    f = FILES[("attn_bf16_decode_dynamic", target)]
    inst, module = f.instance, load_module(f)
    assert "_dynkv" in f.uri and inst.metadata(f.uri)["dynamic_kv"] == {"min": 1024, "max": 131072}
    lo, hi = inst.dynamic_kv
    head = (1, 32, 8, 1)
    assert inst.compile_shape((*head, 32785)) == inst.compile_shape((*head, hi)) == (*head, "seq_kv")
    assert inst.compile_shapes() == [(*head, "seq_kv"), (16, 32, 8, 1, "seq_kv")]  # one build per head
    # the splits are auto's at the shortest length served, whatever the length
    splits = inst.split_for((*head, lo))
    assert splits == inst.split_for((*head, hi)) == inst.split_for((*head, 32785)) > 1
    if target == "sm_90":
        assert splits == 16 and inst.split_for((16, 32, 8, 1, 4097)) == 1
    func = module.make_dynamic_kernel(*head, "seq_kv")
    k, o_part = (func.buffer_map[func.params[i]] for i in (1, 3))
    assert str(k.shape[1]) == "seq_kv"  # symbolic, not a number
    assert tuple(int(x) for x in o_part.shape) == inst.workspace_shapes((*head, 5000))[0]
    for n in (lo, 5000, hi):  # make_kernel at any length served takes the same splits as the dynamic kernel
        fixed = module.make_kernel(*head, n)
        assert tuple(int(x) for x in fixed.buffer_map[fixed.params[3]].shape) == tuple(int(x) for x in o_part.shape)
    src = lower(f, (*head, 32785), target).source  # lowered at its compile shape: seq_kv is a kernel argument
    assert re.search(r"int\s+seq_kv\b", src), src[:2000]
    assert ("dynamic_kv", "max") in {path for path, _ in inst.limit_shapes()}  # the grid at the longest is checked


def test_dynamic_kv_checks_lengths_across_its_range():
    inst = FILES[("attn_bf16_decode_dynamic", "sm_90")].instance
    lo, hi = inst.dynamic_kv
    shapes = derived_shapes(inst)
    assert {s[:4] for s in shapes} == {s[:4] for s in inst.shapes}
    assert all(lo <= s[4] <= hi for s in shapes) and {s[4] for s in shapes if s[0] == 1} >= {lo, lo + 1}
    assert any(s[4] % inst.block_n for s in shapes)  # a ragged last block
    assert max(s[4] for s in shapes if s[0] == 16) < hi  # capped: K and V at 16 x 131072 would be 2 x 4 GiB of fp32
    assert all(inst.split_for(s) <= math.ceil(s[4] / inst.block_n) for s in shapes)  # a KV block every split


@pytest.mark.parametrize(("text", "message"), [
    (edit(edit(DYNAMIC, "variant: decode", "variant: prefill"), "split_kv: auto", "split_kv: 1"),
     "specs/x.yaml:12:15: dynamic_kv: only variant: decode takes a symbolic KV length: remove dynamic_kv [dynamic_kv_variant]"),
    (edit(DYNAMIC, "{min: 1024, max: 65536}", "{min: 8192, max: 4096}"),
     "dynamic_kv.min=8192: is over dynamic_kv.max=4096: the range is empty [dynamic_kv_range]"),
    (edit(DYNAMIC, "seq_kv: 4096}", "seq_kv: 512}"),
     "shapes[0].seq_kv=512: is outside dynamic_kv [1024, 65536], the KV lengths the kernel serves [dynamic_kv_range]"),
    (edit(DYNAMIC, "tail: predicated", "tail: none"),
     ("tail=none: a KV length known only at run time leaves the last KV block ragged: set tail: predicated "
     "[dynamic_kv_tail]")),
    (edit(DYNAMIC, "split_kv: auto", "split_kv: 32"),
     ("split_kv=32: over the 16 KV block(s) of 64 keys at dynamic_kv.min=1024: every split needs at least one block "
     "(raise min, or auto) [dynamic_kv_split]")),
    (DYNAMIC + "  search:\n    sm_90:\n      split_kv: [auto, 4]\n",
     ("search: a dynamic-KV spec is one kernel for every KV length, and tuning picks a kernel per shape: remove search "
     "or dynamic_kv [dynamic_kv_search]")),
])
def test_dynamic_kv_rules(text, message):
    assert any(message in e for e in errors(text)), errors(text)


def test_dynamic_kv_is_part_of_the_name_and_fixed_kernels_keep_theirs():
    (dyn,) = build_instances(parse_specs(DYNAMIC, FILE))
    (auto,) = build_instances(parse_specs(edit(DYNAMIC, "\n  dynamic_kv: {min: 1024, max: 65536}", ""), FILE))
    assert dyn.stem() == auto.stem().replace("_kauto", "_kauto_dynkv") and dyn.uri != auto.uri
    assert "dynamic_kv" not in auto.canonical()  # the field is in the identity only where set


def test_dynamic_kv_splits_are_the_shortest_lengths_even_where_a_longer_one_would_take_more():
    # min 128 keys = 2 blocks of 64: auto takes 2 splits at every length, where a fixed-length kernel at 65536 keys
    # would take 16 at batch 1 on 132 SMs -- the instance (host workspaces) and the module (kernel) must agree
    text = edit(edit(DYNAMIC, "{min: 1024, max: 65536}", "{min: 128, max: 65536}"), "batch: 8,", "batch: 1,")
    (f,) = render_all(build_instances(parse_specs(text, FILE)))
    (fixed,) = build_instances(parse_specs(edit(text, "\n  dynamic_kv: {min: 128, max: 65536}", ""), FILE))
    assert fixed.split_for((1, 32, 8, 4, 65536)) == 16
    assert f.instance.split_for((1, 32, 8, 4, 65536)) == f.instance.split_for((1, 32, 8, 4, 128)) == 2
    module = load_module(f)
    for func in (module.make_dynamic_kernel(1, 32, 8, 4, "seq_kv"), module.make_kernel(1, 32, 8, 4, 65536)):
        assert int(func.buffer_map[func.params[3]].shape[3]) == 2


def test_decode_dropped_block_is_rejected_over_a_long_bf16_cache():
    # one dropped block of 64 keys over 32785 moves a near-uniform softmax's output under bf16's tolerance:
    # and the last of 32 splits is a random 1/32 of the keys, whose V rows' mean is close to all keys': both
    # controls were vacuous on the H200 until the blocks they drop got hot V rows (attention_inputs)
    for target in ("sm_90", "gfx942"):
        inst = FILES[("attn_bf16_decode_dynamic", target)].instance
        shape = (1, 8, 2, 1, 32785)
        assert inst.split_for(shape) > 1
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind="normal", max_elements=1 << 24)
        assert status == "verified" and set(controls.values()) == {"rejected"}, (target, cmp, controls)


def test_the_blocks_the_split_controls_drop_are_hot():
    from codegen.families.attention.numerics import _dropped_block_keep, _dropped_split_keep, _split_control_keys

    inst = FILES[("attn_fp16_decode", "sm_90")].instance
    bn = inst.block_n
    cols = torch.arange(20 * bn + 5)[None]
    for seq_kv, split in ((4 * bn + 5, 2), (4 * bn + 5, 1), (20 * bn, 16), (20 * bn + 5, 7), (3, 4)):
        hot = _split_control_keys(inst, seq_kv, split)
        c = cols[:, :seq_kv]
        block = ~_dropped_block_keep(inst, 1, seq_kv, 0, split)(torch.zeros(1, 1), c)[0]
        lost = ~_dropped_split_keep(inst, seq_kv, split)(torch.zeros(1, 1), c)[0]
        assert torch.equal(hot & block, block), (seq_kv, split)  # every key dropped_kv_block drops is hot
        assert (hot & lost).any(), (seq_kv, split)  # and some of the last split's
        assert hot.sum() <= 2 * bn
    assert _split_control_keys(inst, 4 * bn + 5, 2).nonzero().flatten().tolist() == list(range(bn, 3 * bn))
    assert _split_control_keys(inst, 4 * bn + 5, 1).nonzero().flatten().tolist() == [
        *range(bn), *range(4 * bn, 4 * bn + 5)]  # one split: its first block and its ragged last
