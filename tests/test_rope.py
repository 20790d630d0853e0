"""rope: spec errors (expect-style), rendering and lowering for both targets (16-byte loads, cos/sin read
once per thread, the predicated tail checks the last item loop only, the pass-through copy), and the
checker on the CPU (a correct output verifies, buggy outputs fail, every negative control is rejected,
the fp32 reference is inside the modelled term of a float64 one, a loose tolerance is vacuous), the
output layout the launch writes, the HF baseline, and the FLOP/byte formulas."""

from __future__ import annotations

import re

import pytest
import torch
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.families import derived_shapes, family
from codegen.families.rope.numerics import NUMERICS as ROPE
from codegen.families.rope.numerics import rope32
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

BASE = """\
- name: r
  op: rope
  dtypes: {input: fp16, out: fp16}
  shapes:
    - {tokens: 16, heads: 32, kv_heads: 8}
  head_dim: 128
  rotary_dim: 128
  threads: 64
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""
# partial rotary (NeoX / Phi style), multi-head: 64 heads x 4 pairs = 256 rotation items, 64 x 8 = 512 pass-through
PARTIAL = edit(edit(edit(BASE, "rotary_dim: 128", "rotary_dim: 64"), "threads: 64", "threads: 128"),
               "kv_heads: 8", "kv_heads: 32")
# cos/sin as transformers' rotary embedding returns them: [tokens, rotary_dim] fp16, each angle twice
FULL = edit(BASE, "tail: none", "tables: full\n  tail: none")


def test_base_spec_is_valid():
    insts = build_instances(parse_specs(BASE, FILE))
    assert [(i.op, i.target.value, i.half, i.pairs, i.pass_vectors, i.tables_hoisted, i.lds_bytes) for i in insts] == [
        ("rope", "gfx942", 64, 8, 0, True, 0), ("rope", "sm_90", 64, 8, 0, True, 0)]
    assert insts[0].shapes == ((16, 32, 8),)
    assert insts[0].stem() == "rope_fp16_d128_r128_t64_v8"
    part = build_instances(parse_specs(edit(PARTIAL, "out: fp16", "out: bf16"), FILE))[0]
    assert (part.half, part.pairs, part.pass_vectors) == (32, 4, 8)
    assert part.stem() == "rope_fp16_bf16_d128_r64_t128_v8"


@pytest.mark.parametrize(("old", "new", "message"), [
    ("input: fp16, out: fp16", "input: fp32, out: fp16",
     "specs/x.yaml:3:19: dtypes.input=fp32: rope takes fp16 or bf16 (cos and sin are fp32) [dtype_supported]"),
    ("input: fp16, out: fp16", "input: fp16, out: fp16, accumulate: fp16",
     "specs/x.yaml:3:48: dtypes.accumulate=fp16: the rotation is computed in fp32: accumulate must be fp32 [dtype_supported]"),
    ("rotary_dim: 128", "rotary_dim: 127",
     "specs/x.yaml:7:15: rotary_dim=127: must be even (x1 and x2 are its two halves) [rotary_dim]"),
    ("rotary_dim: 128", "rotary_dim: 256", "specs/x.yaml:7:15: rotary_dim=256: exceeds head_dim=128 [rotary_dim]"),
    ("rotary_dim: 128", "rotary_dim: 0", "specs/x.yaml:7:15: rotary_dim=0: Input should be greater than 0 [greater_than]"),
    ("  rotary_dim: 128\n", "", "specs/x.yaml:1:3: rotary_dim: required field is missing [missing]"),
    ("kv_heads: 8", "kv_heads: 24",
     ("specs/x.yaml:5:41: shapes[0].kv_heads=24: must divide heads=32 (each K head serves heads/kv_heads query heads) "
     "[gqa_heads]")),
    ("kv_heads: 8", "kv_heads: 0",
     "specs/x.yaml:5:41: shapes[0].kv_heads=0: Input should be greater than 0 [greater_than]"),
    ("  vector: 8\n", "  vector: 8\n  pipeline: {stages: 2}\n", "specs/x.yaml:10:3: pipeline: unknown key [unknown_key]"),
    ("vector: 8", "vector: 16", "specs/x.yaml:9:11: vector=16: Input should be 1, 2, 4 or 8 [literal_error]"),
    ("tail: none", "tail: specialized",
     ("specs/x.yaml:10:9: tail=specialized: rope has none and predicated: its item loops are unrolled, so predicated "
     "already checks the last iteration only [tail_policy]")),
])
def test_spec_errors(old, new, message):
    assert errors(edit(BASE, old, new)) == [message]


def test_vector_must_divide_both_parts_of_the_head():
    # rotary 40: half 20 (vector 8 would straddle x1 and x2); head_dim - rotary_dim = 88, a multiple of 8
    assert errors(edit(BASE, "rotary_dim: 128", "rotary_dim: 40")) == [
        "specs/x.yaml:9:11: vector=8: must divide rotary_dim/2=20 (a load never straddles x1 and x2) [vector_width]"]
    # rotary 112 of 124: half 56 fine; the 12 pass-through elements are not whole vectors of 8
    assert errors(edit(edit(BASE, "rotary_dim: 128", "rotary_dim: 112"), "head_dim: 128", "head_dim: 124")) == [
        ("specs/x.yaml:9:11: vector=8: must divide head_dim - rotary_dim=12 (the pass-through part is copied in "
        "vectors) [vector_width]")]
    # NeoX-20B: head_dim 96, rotary 24 (half 12): vector 4 (40 heads x 3 pairs: predicated over 64 threads)
    neox = edit(edit(edit(BASE, "rotary_dim: 128", "rotary_dim: 24"), "head_dim: 128", "head_dim: 96"), "vector: 8", "vector: 4")
    assert build_instances(parse_specs(edit(neox, "tail: none", "tail: predicated"), FILE))


def test_a_thread_s_unrolled_items_are_bounded():
    """The item loops are unrolled: 1024 + 1024 heads of 128 rotation pairs of one element over 64 threads would be
    4096 copies of the code per thread (a compile of minutes and gigabytes): refused; 64 items per thread pass."""
    many = edit(edit(BASE, "heads: 32, kv_heads: 8", "heads: 1024, kv_heads: 1024"), "vector: 8", "vector: 1")
    assert errors(many) == [
        ("specs/x.yaml:5:7: shapes[0]: 2048 items per thread (rotation and pass-through vectors of (heads + kv_heads) "
         "heads over threads=64), over the 64 its unrolled loops take: more threads or a wider vector [rope_items]")]
    # 256 + 256 heads x 8 pairs of 8 elements = 4096 items over 64 threads: 64 each, the most taken
    assert build_instances(parse_specs(edit(BASE, "heads: 32, kv_heads: 8", "heads: 256, kv_heads: 256"), FILE))
    assert errors(edit(BASE, "heads: 32, kv_heads: 8", "heads: 264, kv_heads: 264")) == [
        ("specs/x.yaml:5:7: shapes[0]: 66 items per thread (rotation and pass-through vectors of (heads + kv_heads) "
         "heads over threads=64), over the 64 its unrolled loops take: more threads or a wider vector [rope_items]")]


def test_threads_and_tail_policy():
    assert errors(edit(BASE, "threads: 64", "threads: 96")) == [
        "specs/x.yaml:8:12: threads=96: must be a multiple of the 64-lane wavefront on gfx942 [wave_multiple]",
        ("specs/x.yaml:5:7: shapes[0]: 320 rotation items per token ((heads + kv_heads) x rotation vectors per head) "
         "is not a multiple of threads=96: set tail: predicated [tail_policy]")]
    # 40 heads x 4 pairs = 160 rotation items over 128 threads; 40 x 8 = 320 pass-through items too
    ragged = edit(PARTIAL, "kv_heads: 32", "kv_heads: 8")
    assert errors(ragged) == [
        ("specs/x.yaml:5:7: shapes[0]: 160 rotation items per token ((heads + kv_heads) x rotation vectors per head) "
         "is not a multiple of threads=128: set tail: predicated [tail_policy]"),
        ("specs/x.yaml:5:7: shapes[0]: 320 pass-through items per token ((heads + kv_heads) x pass-through vectors "
         "per head) is not a multiple of threads=128: set tail: predicated [tail_policy]")]
    assert build_instances(parse_specs(edit(ragged, "tail: none", "tail: predicated"), FILE))


def test_distinct_instances_get_distinct_uris():
    variants = [BASE, PARTIAL, edit(BASE, "input: fp16, out: fp16", "input: bf16, out: bf16"),
                edit(BASE, "vector: 8", "vector: 4"), edit(BASE, "tail: none", "tail: predicated"),
                edit(BASE, "threads: 64", "threads: 320"), FULL]
    uris = [f.uri for v in variants for f in render_all(build_instances(parse_specs(v, FILE)))]
    assert len(set(uris)) == len(uris)


# ---- rendering and lowering -----------------------------------------------------------------------

FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files() if f.instance.op == "rope"}


def _lowered(text: str, target: str, shape: tuple[int, int, int]) -> str:
    f = next(f for f in render_all(build_instances(parse_specs(text, FILE))) if f.instance.target.value == target)
    return lower(f, shape, f.instance.target).source


def test_the_template_decides_nothing():
    # every shape-independent number in the module is the instance's
    for f in FILES.values():
        i = f.instance
        for line in (f"THREADS = {i.threads}", f"VEC = {i.vector}", f"HEAD_DIM = {i.head_dim}",
                     f"ROTARY_DIM = {i.rotary_dim}", f"HALF = {i.half}", f"PAIRS = {i.pairs}"):
            assert f"\n{line}" in f.text, (f.uri, line)
        assert ("PASS = " in f.text) == (i.pass_vectors > 0)


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_lowered_kernel_loads_16_bytes_and_reads_the_tables_once(target):
    # Llama-3 8B over 64 threads: 320 rotation items, 5 per thread (unrolled): 4 Q items, 1 K item, each
    # two 16-byte loads and two 16-byte stores; cos and sin loaded once per thread (8 pairs divide 64);
    # no bounds check and no branch between Q and K (the unrolled item indices are constants)
    src = _lowered(BASE, target, (16, 32, 8))
    assert len(re.findall(r"\*\(uint4\*\)\(Q \+ ", src)) == 8
    assert len(re.findall(r"\*\(uint4\*\)\(K \+ ", src)) == 2
    assert len(re.findall(r"\*\(uint4\*\)\(Q_OUT \+ ", src)) == 8
    assert len(re.findall(r"\*\(uint4\*\)\(K_OUT \+ ", src)) == 2
    assert src.count("(COS + ") == 1 and src.count("(SIN + ") == 1  # in one 2 x float4 loop each
    assert "if (" not in src


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_predicated_checks_the_last_item_loop_only(target):
    # 320 items over 128 threads: iterations 0 and 1 are whole, the third has items for threads 0..63
    src = _lowered(edit(edit(BASE, "threads: 64", "threads: 128"), "tail: none", "tail: predicated"), target,
                   (16, 32, 8))
    assert re.findall(r"if \(([^{]*)\)", src) == ["((int)threadIdx.x) < 64"]
    assert len(re.findall(r"\*\(uint4\*\)\(K \+ ", src)) == 2


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_partial_rotary_copies_the_rest(target):
    # rotary 64 of 128 over 128 threads: 256 rotation items (2 per thread: 2 x 2 loads of Q or K) and
    # 512 pass-through items (4 per thread: one 16-byte load and store each)
    src = _lowered(PARTIAL, target, (4, 32, 32))
    assert len(re.findall(r"\*\(uint4\*\)\((?:Q|K) \+ ", src)) == 2 * 2 + 4
    assert len(re.findall(r"\*\(uint4\*\)\((?:Q_OUT|K_OUT) \+ ", src)) == 2 * 2 + 4


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_full_tables_are_read_in_the_input_dtype_at_rotary_dim_a_row(target):
    # the same item loops; each thread's cos and sin: one 16-byte load of 8 fp16 from the first half of its token's
    # row of 128 (the half tables: two of fp32 from a row of 64)
    full, half = _lowered(FULL, target, (16, 32, 8)), _lowered(BASE, target, (16, 32, 8))
    assert len(re.findall(r"\*\(uint4\*\)\(Q \+ ", full)) == 8 and len(re.findall(r"\*\(uint4\*\)\(K_OUT \+ ", full)) == 2
    assert re.findall(r"\*\(uint4\*\)\((COS|SIN) \+ \(+\(int\)blockIdx\.x\) \* 128\)", full) == ["COS", "SIN"]
    assert re.findall(r"\*\(float4\*\)\((COS|SIN) \+ \(+\(int\)blockIdx\.x\) \* 64\)", half) == ["COS", "SIN"]
    inst = build_instances(parse_specs(FULL, FILE))[0]
    assert (inst.full_tables, inst.table_dtype, inst.tables.value) == (True, "float16", "full")
    assert "_tf_" in inst.uri() and "_tf_" not in build_instances(parse_specs(BASE, FILE))[0].uri()


@pytest.mark.parametrize("kind", ["normal", "wide"])
def test_full_tables_verify_and_a_kernel_reading_half_width_rows_fails(kind):
    inst = next(i for i in build_instances(parse_specs(FULL, FILE)) if i.target.value == "sm_90")
    shape = (6, 32, 8)
    case = ROPE.make_inputs(inst, shape, seed=0, kind=kind, device="cpu", run_target=inst.target)
    assert case.COS.dtype == torch.float16 and case.COS.shape == (6, 128)
    assert torch.equal(case.COS[:, :64], case.COS[:, 64:]) and torch.equal(case.SIN[:, :64], case.SIN[:, 64:])
    status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
    assert status == "verified" and set(controls.values()) == {"rejected"}, (cmp, controls)

    def half_width_rows(case, ref):  # the tables read as [tokens, 64] rows: token t gets row t // 2's halves
        cos, sin = (x.flatten()[: 6 * 64].view(6, 64).float() for x in (case.COS, case.SIN))
        q, k = (rope32(x, cos, sin, 128) for x in (case.Q32, case.K32))
        return torch.cat((q.reshape(-1, 128), k.reshape(-1, 128)))

    assert check_output(inst, shape, half_width_rows, kind=kind)[0] != "verified"


def test_tables_reloaded_per_item_when_pairs_do_not_divide_threads():
    # head_dim 96, rotary 48, vector 8: 3 pairs; 64 threads are no multiple of 3
    text = edit(edit(edit(BASE, "rotary_dim: 128", "rotary_dim: 48"), "head_dim: 128", "head_dim: 96"),
                "tail: none", "tail: predicated")
    inst = build_instances(parse_specs(text, FILE))[0]
    assert (inst.pairs, inst.tables_hoisted) == (3, False)
    src = _lowered(text, "sm_90", (2, 32, 8))
    assert src.count("(COS + ") == -(-40 * 3 // 64)  # one table load per item loop iteration


# ---- the checker, on the CPU ----------------------------------------------------------------------

SEEDS = ["rope_fp16_llama3_8b", "rope_bf16_llama3_8b_ragged", "rope_fp16_partial_r64"]


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("name", SEEDS)
def test_correct_output_verifies_and_every_control_is_rejected(name, kind):
    inst = FILES[(name, "sm_90")].instance
    for shape in [(8, *inst.shapes[0][1:]), *derived_shapes(inst)]:
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)
        expected = {"zeros", "sin_sign_flipped", "interleaved_pairs", "k_not_rotated"}
        expected |= {"next_token_tables"} if shape[0] > 1 else set()
        expected |= {"pass_through_not_copied"} if inst.rotary_dim < inst.head_dim else set()
        assert set(controls) == expected


def test_the_fp32_reference_is_inside_the_modelled_term():
    # the fp32 reference against float64: at most 2 u_acc (|p1| + |p2|) (its own share of the model's
    # 5 u_acc (|p1| + |p2|)); the pass-through part is exact
    inst = FILES[("rope_fp16_partial_r64", "sm_90")].instance
    for kind in ("normal", "wide"):
        case = ROPE.make_inputs(inst, (64, 32, 32), seed=1, kind=kind, device="cpu", run_target=inst.target)
        ref, mag = ROPE.reference(inst, case)
        c64, s64 = case.COS.double(), case.SIN.double()
        q, k = (rope32(x.double(), c64, s64, inst.rotary_dim) for x in (case.Q32, case.K32))
        exact = torch.cat((q.reshape(-1, 128), k.reshape(-1, 128)))
        u_acc = ROPE.tolerance(inst, (64, 32, 32), inst.target).u_acc
        assert ((ref.double() - exact).abs() <= 0.4 * u_acc * mag.double()).all(), kind
        assert torch.equal(ref[:, 64:].double(), exact[:, 64:])


def test_tables_are_real_rope_angles():
    inst = FILES[("rope_fp16_llama3_8b", "sm_90")].instance
    case = ROPE.make_inputs(inst, (4, 32, 8), seed=0, kind="normal", device="cpu", run_target=inst.target)
    assert case.COS.dtype == case.SIN.dtype == torch.float32 and case.COS.shape == (4, 64)
    assert torch.allclose(case.COS.square() + case.SIN.square(), torch.ones(4, 64), atol=1e-6)
    pos = case.positions.double()[:, None]
    assert torch.allclose(case.COS[:, 1].double(), (pos[:, 0] * 10000.0 ** (-2 / 128)).cos(), atol=1e-7)


BUGS = ["one_element", "half_precision_math", "interleaved_k_only", "unwritten_nan", "last_k_head_unrotated"]


@pytest.mark.parametrize("bug", BUGS)
@pytest.mark.parametrize("name", ["rope_fp16_llama3_8b", "rope_bf16_llama3_8b_ragged"])
def test_buggy_outputs_fail(name, bug):
    inst = FILES[(name, "sm_90")].instance
    shape = (8, 32, 8)
    rd = inst.rotary_dim

    def buggy(case, ref):
        out = ref.clone()
        nq = shape[0] * shape[1]
        if bug == "one_element":
            out[5, 7] *= 1.0 + 2.0**-6  # a few ulps off on one element
        elif bug == "half_precision_math":  # HF's formulation: cos/sin and every product in the input dtype
            q, k = ROPE.baselines(inst, case, case.Q.dtype)["eager"]()
            out = torch.cat((q.reshape(-1, 128), k.reshape(-1, 128))).float()
        elif bug == "interleaved_k_only":
            out[nq:] = rope32(case.K32, case.COS, case.SIN, rd, interleaved=True).reshape(-1, 128)
        elif bug == "unwritten_nan":
            out[-1, -1] = float("nan")
        elif bug == "last_k_head_unrotated":  # a K item loop one iteration short
            out[-1] = case.K32[-1, -1]
        return out

    status, cmp, _ = check_output(inst, shape, buggy, kind="normal")
    assert status == "failed", (bug, cmp)
    assert cmp.mismatch_ratio > 0


def test_a_loose_tolerance_is_reported_vacuous():
    inst = FILES[("rope_fp16_llama3_8b", "sm_90")].instance
    status, _, controls = check_output(inst, (4, 32, 8), lambda case, ref: ref, scale=1e8)
    assert status == "vacuous"
    assert any("PASSED" in v for v in controls.values())


def test_launch_writes_q_out_and_k_out_into_the_one_output_buffer():
    # a stand-in kernel with the generated signature: the buffer verify and bench allocate must come
    # back in the reference's layout
    inst = FILES[("rope_fp16_partial_r64", "sm_90")].instance
    shape = (3, 4, 2)
    case = ROPE.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = ROPE.reference(inst, case)

    def kernel(q, k, cos, sin, q_out, k_out):
        assert q_out.is_contiguous() and k_out.is_contiguous()
        assert (q_out.shape, k_out.shape) == (q.shape, k.shape)
        q_out.copy_(rope32(q.float(), cos, sin, inst.rotary_dim))
        k_out.copy_(rope32(k.float(), cos, sin, inst.rotary_dim))

    out = torch.full(ROPE.out_shape(inst, shape), float("nan"), dtype=torch.float16)
    ROPE.launch(kernel, case, out)
    assert torch.equal(out, ref.half())


@pytest.mark.parametrize("name", ["rope_fp16_llama3_8b", "rope_fp16_partial_r64"])
def test_eager_baseline_computes_the_same_rotation(name):
    # HF's rotate_half in the input dtype: within a few fp16 ulps of the fp32 reference
    inst = FILES[(name, "sm_90")].instance
    shape = (4, *inst.shapes[0][1:])
    case = ROPE.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    ref, _ = ROPE.reference(inst, case)
    base = ROPE.baselines(inst, case, torch.float16)
    assert set(base) == {"eager", "compile"}
    q, k = base["eager"]()
    assert q.dtype == k.dtype == torch.float16 and (q.shape, k.shape) == (case.Q.shape, case.K.shape)
    got = torch.cat((q.reshape(-1, inst.head_dim), k.reshape(-1, inst.head_dim))).float()
    assert torch.allclose(got, ref, rtol=2**-8, atol=2**-8)


def test_flop_and_byte_formulas():
    full, part = FILES[("rope_fp16_llama3_8b", "sm_90")].instance, FILES[("rope_fp16_partial_r64", "sm_90")].instance
    assert ROPE.flops(full, (4096, 32, 8)) == 3.0 * 4096 * 40 * 128
    assert ROPE.flops(part, (4096, 32, 32)) == 3.0 * 4096 * 64 * 64
    # Q, K read and written in fp16, cos and sin rows in fp32
    assert ROPE.bytes(full, (4096, 32, 8)) == 4096 * 40 * 128 * (2 + 2) + 4096 * 2 * 64 * 4
    assert ROPE.bytes(part, (4096, 32, 32)) == 4096 * 64 * 128 * (2 + 2) + 4096 * 2 * 32 * 4
    assert family(full).numerics is ROPE


# ---- search ------------------------------------------------------------------------------------------

def test_threads_and_vector_are_rope_search_fields_and_illegal_points_are_counted_by_rule():
    from codegen.core.hardware import Target
    from codegen.tune.search import constrain, expand

    text = BASE + "  search:\n    sm_90:\n      threads: [32, 64, 128]\n      vector: [4, 8]\n"
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert [p.values for p in part.points] == [
        (("threads", t), ("vector", v)) for t in (32, 64, 128) for v in (4, 8)]
    # tail none: 40 heads x 64 / vector rotation items a token; 128 threads do not divide the 320 of vector 8
    assert part.rejected_by_rule == {"tail_policy": 1}
    assert not any("_t128_v8_" in p.uri for p in part.points if p.uri)
    assert len({p.uri for p in part.points if p.uri}) == 5


def test_a_rope_search_of_a_tunable_rope_does_not_have_is_refused_where_it_is():
    (line,) = errors(BASE + "  search:\n    sm_90:\n      unroll: [1, 2]\n")
    assert re.fullmatch(r"specs/x\.yaml:\d+:\d+: search\.sm_90\.unroll: unknown key.*\[unknown_key\]", line), line
