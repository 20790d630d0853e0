"""softmax: spec errors (expect-style), the register budget, lowering for both targets (variants and
tail policies show in the source), and the checker on the CPU (a correct output verifies, buggy
outputs fail, every negative control is rejected)."""

from __future__ import annotations

import re

import pytest
import torch
from numcheck import check_output
from spectext import FILE, edit, errors

from codegen.families import derived_shapes
from codegen.families.rows import row_register_budget
from codegen.families.softmax.numerics import NUMERICS as SOFTMAX
from codegen.families.softmax.numerics import softmax_dropped_chunk
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.targets.gfx942 import HW as GFX942
from codegen.targets.sm90 import HW as SM_90

BASE = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  variant: online
  shapes:
    - {rows: 64, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""




def test_base_spec_is_valid():
    insts = build_instances(parse_specs(BASE, FILE))
    assert [(i.op, i.target.value, i.variant, i.chunk, i.reduce_groups, i.lds_bytes) for i in insts] == [
        ("softmax", "gfx942", "online", 2048, 8, 32), ("softmax", "sm_90", "online", 2048, 8, 32)]
    assert insts[0].shapes == ((64, 4096),)


def test_unknown_variant():
    assert errors(edit(BASE, "variant: online", "variant: one_pass")) == [
        "specs/x.yaml:4:12: variant='one_pass': Input should be 'online' or 'two_pass' [enum]"]


def test_no_pipeline_field_and_no_fp8():
    assert errors(edit(BASE, "  vector: 8\n", "  vector: 8\n  pipeline: {stages: 2}\n")) == [
        "specs/x.yaml:9:3: pipeline: unknown key [unknown_key]"]
    assert errors(edit(BASE, "input: fp16, out: fp16", "input: fp8_e4m3, out: fp16")) == [
        "specs/x.yaml:3:19: dtypes.input=fp8_e4m3: softmax takes fp16, bf16 or fp32 [dtype_supported]"]


def test_threads_and_vector_width():
    # 96 threads x 8 = 768 columns per chunk: 3072 is a whole number of chunks
    assert errors(edit(edit(BASE, "threads: 256", "threads: 96"), "cols: 4096", "cols: 3072")) == [
        "specs/x.yaml:7:12: threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]"]
    assert errors(edit(edit(BASE, "input: fp16, out: fp16", "input: fp32, out: fp32"), "cols: 4096", "cols: 8192")) == [
        "specs/x.yaml:8:11: vector=8: 8 x fp32 is 32 B, over the 16-byte widest load on gfx942 [vector_width]",
        "specs/x.yaml:8:11: vector=8: 8 x fp32 is 32 B, over the 16-byte widest load on sm_90 [vector_width]"]


def test_a_ragged_row_needs_a_tail_policy():
    assert errors(edit(BASE, "cols: 4096", "cols: 5120")) == [
        ("specs/x.yaml:6:7: shapes[0]: cols=5120 is not a multiple of threads*vector=2048: "
        "set tail: predicated or specialized [tail_policy]")]
    # a row shorter than one chunk: the block is larger than the problem
    assert errors(edit(BASE, "cols: 4096", "cols: 1000")) == [
        ("specs/x.yaml:6:7: shapes[0]: cols=1000 is not a multiple of threads*vector=2048: "
        "set tail: predicated or specialized [tail_policy]")]


def test_register_budget_formula():
    # min(max registers per thread, register file / 4 B / threads) / 2
    assert row_register_budget(GFX942, 256) == 128 and row_register_budget(GFX942, 1024) == 64
    assert row_register_budget(SM_90, 256) == 127 and row_register_budget(SM_90, 1024) == 32


def test_online_row_over_the_register_budget():
    text = edit(edit(BASE, "cols: 4096", "cols: 50257"), "tail: none", "tail: predicated")
    # 25 chunks of 2048 -> 200 fp32 per thread
    assert errors(text) == [
        ("specs/x.yaml:6:24: shapes[0].cols=50257: the online variant holds the row in registers: 200 fp32 per "
        "thread with 256 threads, over the budget of 128 on gfx942 (more threads, or variant: two_pass) [row_registers]"),
        ("specs/x.yaml:6:24: shapes[0].cols=50257: the online variant holds the row in registers: 200 fp32 per "
        "thread with 256 threads, over the budget of 127 on sm_90 (more threads, or variant: two_pass) [row_registers]")]
    # two_pass streams the row: no budget
    assert build_instances(parse_specs(edit(text, "variant: online", "variant: two_pass"), FILE))


def test_unroll_is_for_two_pass():
    assert errors(edit(BASE, "  vector: 8\n", "  vector: 8\n  unroll: 2\n")) == [
        ("specs/x.yaml:9:11: unroll=2: the online variant's column loop is always fully unrolled (its row lives "
        "in registers); unroll applies to two_pass [unroll_variant]")]


def test_distinct_instances_get_distinct_uris():
    variants = [BASE, edit(BASE, "variant: online", "variant: two_pass"), edit(BASE, "vector: 8", "vector: 4"),
                edit(BASE, "threads: 256", "threads: 512"), edit(BASE, "tail: none", "tail: predicated")]
    uris = [f.uri for v in variants for f in render_all(build_instances(parse_specs(v, FILE)))]
    assert len(set(uris)) == len(uris)


# ---- lowering: what the variants and tail policies look like in device source ------------------

FILES = {(f.instance.name, f.instance.target.value): f for f in Project().rendered() if f.instance.op == "softmax"}


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_only_the_ragged_chunk_is_bounds_checked(target):
    # specialized: checks for the ragged chunk only (its load and its store); predicated: checks in
    # every chunk's code, of which TVM proves most true -- but more of them survive
    counts = {}
    for name in ("softmax_fp32_online_spec", "softmax_bf16_online_pred"):
        f = FILES[(name, target)]
        counts[name] = lower(f, (2, 3 * f.instance.chunk + 5), f.instance.target).source.count("< 5)")
    assert counts["softmax_fp32_online_spec"] == 2
    assert counts["softmax_bf16_online_pred"] > 2


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_online_reads_the_row_once_two_pass_three_times(target):
    online, two = FILES[("softmax_fp16_online", target)], FILES[("softmax_fp16_two_pass", target)]
    shape = (4, 4096)
    src_online = lower(online, shape, online.instance.target).source
    src_two = lower(two, shape, two.instance.target).source
    loads = re.compile(r"\(X \+ ")  # 16-byte vector loads of X
    assert len(loads.findall(src_online)) == 4096 // online.instance.chunk  # one pass, fully unrolled
    assert len(loads.findall(src_two)) == 3 * two.instance.unroll  # three passes, each unrolled
    assert "warp_reduce_max" in src_online and "warp_reduce_sum" in src_two


# ---- the checker, on the CPU ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("name", ["softmax_fp16_ragged_spec", "softmax_bf16_online_pred", "softmax_fp32_online_spec"])
def test_correct_output_verifies_and_every_control_is_rejected(name, kind):
    inst = FILES[(name, "sm_90")].instance
    for shape in [inst.shapes[0], *derived_shapes(inst)[1:]]:
        shape = (min(shape[0], 64), shape[1])  # a few rows are enough on the CPU
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)


@pytest.mark.parametrize("bug", ["one_element", "dropped_chunk", "wrong_axis", "unwritten_nan", "no_max_shift"])
def test_buggy_outputs_fail(bug):
    inst = FILES[("softmax_fp16_ragged_spec", "sm_90")].instance
    shape = (8, inst.chunk + 1)

    def buggy(case, ref):
        out = ref.clone()
        if bug == "one_element":
            out[3, ref[3].argmax()] *= 1.01  # 1% off on the row's largest output
        elif bug == "dropped_chunk":
            out = softmax_dropped_chunk(case, inst.chunk)
        elif bug == "wrong_axis":
            out = torch.softmax(case.X32, dim=0)
        elif bug == "unwritten_nan":
            out[-1, -1] = float("nan")
        elif bug == "no_max_shift":  # exp in fp16 without subtracting the max: overflow on 'wide' rows
            out = (torch.exp(case.X32.half()).float() / torch.exp(case.X32.half()).float().sum(-1, keepdim=True))
        return out

    status, cmp, _ = check_output(inst, shape, buggy, kind="wide")
    assert status == "failed"
    assert cmp.mismatch_ratio > 0


def test_a_loose_tolerance_is_reported_vacuous():
    inst = FILES[("softmax_fp16_two_pass", "sm_90")].instance
    status, _, controls = check_output(inst, (4, 4096), lambda case, ref: ref, scale=1e6)
    assert status == "vacuous"
    assert any("PASSED" in v for v in controls.values())


def test_flop_and_byte_formulas():
    inst = FILES[("softmax_fp16_two_pass", "sm_90")].instance
    assert SOFTMAX.flops(inst, (8192, 4096)) == 5.0 * 8192 * 4096
    assert SOFTMAX.bytes(inst, (8192, 4096)) == 8192 * 4096 * (2 + 2)
