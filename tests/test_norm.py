"""rmsnorm and layernorm: spec errors (expect-style), lowering for both targets (the passes over the
row and the tail policies show in the source), and the checker on the CPU (a correct output
verifies, buggy outputs fail, every negative control is rejected, a loose tolerance is vacuous)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.families import derived_shapes, family
from codegen.families.norm.numerics import NUMERICS as NORM
from codegen.families.norm.numerics import norm_dropped_chunk
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

BASE = """\
- name: n
  op: rmsnorm
  dtypes: {input: fp16, out: fp16}
  eps: 1.0e-6
  shapes:
    - {rows: 64, cols: 4096}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""
LAYER = BASE.replace("op: rmsnorm", "op: layernorm")




@pytest.mark.parametrize("text", [BASE, LAYER], ids=["rmsnorm", "layernorm"])
def test_base_spec_is_valid(text):
    insts = build_instances(parse_specs(text, FILE))
    op = "layernorm" if text is LAYER else "rmsnorm"
    assert [(i.op, i.target.value, i.eps, i.centered, i.has_bias, i.chunk, i.lds_bytes) for i in insts] == [
        (op, "gfx942", 1e-6, op == "layernorm", op == "layernorm", 2048, 32),
        (op, "sm_90", 1e-6, op == "layernorm", op == "layernorm", 2048, 32)]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("eps: 1.0e-6", "eps: 0.0", "specs/x.yaml:4:8: eps=0.0: Input should be greater than 0 [greater_than]"),
    ("eps: 1.0e-6", "eps: -1.0e-5", "specs/x.yaml:4:8: eps=-1e-05: Input should be greater than 0 [greater_than]"),
    ("eps: 1.0e-6", "eps: '1e-6'", "specs/x.yaml:4:8: eps='1e-6': Input should be a valid number [float_type]"),
    ("  eps: 1.0e-6\n", "", "specs/x.yaml:1:3: eps: required field is missing [missing]"),
])
def test_eps(old, new, message):
    assert errors(edit(BASE, old, new)) == [message]
    assert errors(edit(LAYER, old, new)) == [message]


def test_unknown_key():
    assert errors(edit(BASE, "  vector: 8\n", "  vector: 8\n  pipeline: {stages: 2}\n")) == [
        "specs/x.yaml:9:3: pipeline: unknown key [unknown_key]"]


def test_variant_errors():
    assert errors(edit(BASE, "  vector: 8\n", "  vector: 8\n  variant: online\n")) == [
        "specs/x.yaml:9:12: variant='online': Input should be 'streamed' or 'registers' [enum]"]
    assert errors(edit(BASE, "  vector: 8\n", "  vector: 8\n  variant: registers\n  unroll: 2\n")) == [
        ("specs/x.yaml:10:11: unroll=2: the registers variant's column loop is always fully unrolled (its row "
        "lives in registers); unroll applies to streamed [unroll_variant]")]
    # 65536 columns over 256 threads: 256 fp32 per thread, over either target's budget
    held = edit(edit(LAYER, "  vector: 8\n", "  vector: 8\n  variant: registers\n"), "cols: 4096", "cols: 65536")
    assert errors(held) == [
        f"specs/x.yaml:6:24: shapes[0].cols=65536: the registers variant holds the row in registers: 256 fp32 per "
        f"thread with 256 threads, over the budget of {budget} on {target} (more threads, or variant: streamed) "
        "[row_registers]" for target, budget in (("gfx942", 128), ("sm_90", 127))]
    assert build_instances(parse_specs(edit(held, "  variant: registers\n", ""), FILE))  # streamed: any length


def test_a_ragged_row_needs_a_tail_policy():
    assert errors(edit(LAYER, "cols: 4096", "cols: 5120")) == [
        ("specs/x.yaml:6:7: shapes[0]: cols=5120 is not a multiple of threads*vector=2048: "
         "set tail: predicated or specialized [tail_policy]")]


def test_threads_not_a_wave_multiple_on_gfx942():
    # 96 threads x 8 = 768 columns per chunk: 3072 is a whole number of chunks; sm_90's warp is 32
    assert errors(edit(edit(BASE, "threads: 256", "threads: 96"), "cols: 4096", "cols: 3072")) == [
        "specs/x.yaml:7:12: threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]"]


def test_distinct_instances_get_distinct_uris():
    variants = [BASE, LAYER, edit(BASE, "eps: 1.0e-6", "eps: 1.0e-5"), edit(BASE, "vector: 8", "vector: 4"),
                edit(BASE, "tail: none", "tail: predicated")]
    uris = [f.uri for v in variants for f in render_all(build_instances(parse_specs(v, FILE)))]
    assert len(set(uris)) == len(uris)


# ---- lowering: what the passes and tail policies look like in device source ----------------------

FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files()
         if f.instance.op in ("rmsnorm", "layernorm")}


def _lowered(text: str, target: str, shape: tuple[int, int]) -> str:
    f = next(f for f in render_all(build_instances(parse_specs(text, FILE))) if f.instance.target.value == target)
    return lower(f, shape, f.instance.target).source


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_streamed_reads_the_row_per_pass_registers_once(target):
    # 8192 columns = 4 chunks of 2048. streamed: one (rolled) load of X per pass -- rmsnorm 2 passes,
    # layernorm 3; registers: one unrolled load per chunk, all of them before the first reduction
    loads = re.compile(r"\(X \+ ")  # 16-byte vector loads of X
    shape = (4, 8192)
    for text, passes in ((BASE, 2), (LAYER, 3)):
        streamed = _lowered(text, target, shape)
        held = _lowered(edit(text, "  vector: 8\n", "  vector: 8\n  variant: registers\n"), target, shape)
        assert len(loads.findall(streamed)) == passes
        assert len(loads.findall(held)) == 4
        first_reduce = held.index("warp_reduce_sum")
        assert len(loads.findall(held[:first_reduce])) == 4, "a load of X after the statistics started"
        assert held.count("warp_reduce_sum") == streamed.count("warp_reduce_sum") == passes - 1
        assert ("(B + " in held) == (text is LAYER)  # the bias is read by layernorm only


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_only_the_ragged_chunk_is_bounds_checked(target):
    # specialized: the checks compare the ragged chunk's column with the 5 columns left over (8 of them:
    # two per guarded load -- sum of squares, X, W -- and two for the store); predicated, streamed: every
    # chunk's column c*CHUNK + ... is compared with N, inside the chunk loops
    spec = FILES[("rmsnorm_fp16_ragged", target)]
    pred = next(f for f in render_all(build_instances(parse_specs(edit(LAYER, "tail: none", "tail: predicated"), FILE)))
                if f.instance.target.value == target)
    for f, remainder, whole in ((spec, 8, 0), (pred, 0, 12)):
        n = 3 * f.instance.chunk + 5
        src = lower(f, (2, n), f.instance.target).source
        assert (src.count("< 5)"), src.count(f"< {n})")) == (remainder, whole), f.uri


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_predicated_registers_is_checked_on_the_ragged_chunk_only(target):
    # the registers variant's loops are unrolled, so each chunk index is a constant and the compiler
    # proves the whole chunks in range: `predicated` lowers to what `specialized` is (the sweep timed
    # them equal); the streamed loops keep a check per chunk (test above)
    f = FILES[("layernorm_bf16_ragged", target)]
    assert (f.instance.tail, f.instance.variant) == ("predicated", "registers")
    n = 3 * f.instance.chunk + 5
    src = lower(f, (2, n), f.instance.target).source
    assert src.count(f"< {n})") == 0 and src.count("< 5)") >= 8


# ---- the checker, on the CPU ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("name", ["rmsnorm_bf16", "rmsnorm_bf16_vocab", "layernorm_fp16", "layernorm_fp16_vocab"])
def test_correct_output_verifies_and_every_control_is_rejected(name, kind):
    inst = FILES[(name, "sm_90")].instance
    for shape in [inst.shapes[0], *derived_shapes(inst)]:
        shape = (min(shape[0], 32), shape[1])  # a few rows are enough on the CPU
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)


def test_the_fp32_reference_is_inside_the_modelled_accumulation_term():
    # the fp32 reference against float64: the u_acc term must cover it with a wide margin
    for name in ("rmsnorm_fp16_ragged", "layernorm_bf16_ragged"):
        inst = FILES[(name, "sm_90")].instance
        fam = family(inst).numerics
        for kind in ("normal", "wide"):
            case = fam.make_inputs(inst, (16, 5120), seed=1, kind=kind, device="cpu", run_target=inst.target)
            ref, mag = fam.reference(inst, case)
            x = case.X32.double()
            if inst.centered:
                exact = F.layer_norm(x, (5120,), case.W32.double(), case.B32.double(), inst.eps)
            else:
                exact = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + inst.eps) * case.W32.double()
            acc = fam.tolerance(inst, (16, 5120), inst.target).u_acc * mag
            assert ((ref.double() - exact).abs() <= 0.25 * acc).all(), (name, kind)


RMS_BUGS = ["one_element", "dropped_chunk", "no_weight", "unwritten_nan", "wrong_eps"]
LAYER_BUGS = ["one_element", "dropped_chunk", "no_bias", "no_centering", "unwritten_nan"]


@pytest.mark.parametrize(("name", "bug"), [("rmsnorm_fp16_ragged", b) for b in RMS_BUGS]
                         + [("layernorm_bf16_ragged", b) for b in LAYER_BUGS])
def test_buggy_outputs_fail(name, bug):
    inst = FILES[(name, "sm_90")].instance
    shape = (8, inst.chunk + 1)

    def buggy(case, ref):
        x, n, out = case.X32, shape[1], ref.clone()
        if bug == "one_element":
            out[3, ref[3].abs().argmax()] *= 1.02  # 2% off on the row's largest output
        elif bug == "dropped_chunk":
            out = norm_dropped_chunk(inst, case, inst.chunk)
        elif bug == "no_weight":
            out = F.rms_norm(x, (n,), None, inst.eps)
        elif bug == "no_bias":
            out = F.layer_norm(x, (n,), case.W32, None, inst.eps)
        elif bug == "no_centering":
            out = F.rms_norm(x, (n,), case.W32, inst.eps) + case.B32
        elif bug == "wrong_eps":  # 1e-3 for the spec's 1e-6: noticeable on the scaled-down 'wide' rows
            out = F.rms_norm(x, (n,), case.W32, 1e-3)
        elif bug == "unwritten_nan":
            out[-1, -1] = float("nan")
        return out

    status, cmp, _ = check_output(inst, shape, buggy, kind="wide")
    assert status == "failed", (bug, cmp)
    assert cmp.mismatch_ratio > 0


@pytest.mark.parametrize("name", ["rmsnorm_fp16", "layernorm_fp16"])
def test_a_loose_tolerance_is_reported_vacuous(name):
    inst = FILES[(name, "sm_90")].instance
    status, _, controls = check_output(inst, (4, 4096), lambda case, ref: ref, scale=1e6)
    assert status == "vacuous"
    assert any("PASSED" in v for v in controls.values())


def test_flop_and_byte_formulas():
    rms, layer = FILES[("rmsnorm_fp16", "sm_90")].instance, FILES[("layernorm_fp16", "sm_90")].instance
    assert NORM.flops(rms, (8192, 4096)) == 4.0 * 8192 * 4096
    assert NORM.flops(layer, (8192, 4096)) == 8.0 * 8192 * 4096
    assert NORM.bytes(rms, (8192, 4096)) == 8192 * 4096 * (2 + 2) + 4096 * 2  # X, Y, weight
    assert NORM.bytes(layer, (8192, 4096)) == 8192 * 4096 * (2 + 2) + 2 * 4096 * 2  # X, Y, weight, bias
