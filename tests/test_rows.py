"""The row families' shared variants (codegen.families.rows, _rows.j2): peeled rows (peel: true) -- spec errors
(expect-style), the generated index arithmetic covering every column exactly once, 16-byte loads in the lowered
source of an odd row, and the checker on the CPU (the peel control, a kernel skipping its scalars fails)."""

from __future__ import annotations

import re

import pytest
from numcheck import check_output
from spectext import FILE, edit, errors

from codegen.core.hardware import Target
from codegen.families import derived_shapes
from codegen.families.rows import peel_scalar_mask
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.pipeline import Project
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

PEEL = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  variant: two_pass
  shapes:
    - {rows: 64, cols: 50257}
  threads: 256
  vector: 8
  tail: specialized
  peel: true
  targets: [gfx942, sm_90]
"""
NORM_PEEL = edit(edit(PEEL, "op: softmax", "op: rmsnorm\n  eps: 1.0e-6"), "variant: two_pass", "variant: streamed")


# ---- spec rules -----------------------------------------------------------------------------------

def test_peel_is_valid_and_named():
    insts = build_instances(parse_specs(PEEL, FILE))
    assert [i.peel for i in insts] == [True, True]
    uris = [f.uri for f in render_all(insts)]
    assert all("_v8_peel_specialized_" in u for u in uris)
    plain = [f.uri for f in render_all(build_instances(parse_specs(edit(PEEL, "  peel: true\n", ""), FILE)))]
    assert not set(uris) & set(plain)


def test_the_narrow_load_hint_names_peel_where_rows_are_not_whole_vectors():
    """build's vector_loads warning on a row kernel says why at that shape: a row under one vector (no wide load is
    possible), or rows off the vector boundary (peel aligns them); peeled or whole-vector rows get no hint."""
    plain = build_instances(parse_specs(edit(PEEL, "  peel: true\n", ""), FILE))[0]
    peeled = build_instances(parse_specs(PEEL, FILE))[0]
    assert plain.narrow_load_hint((64, 50257)) == (
        "rows of 50257 columns are not whole vectors of 8, so most rows start off a 16-byte boundary: peel: true "
        "(a streamed variant) aligns each row's loads between a scalar head and tail")
    assert plain.narrow_load_hint((64, 5)) == "a row of 5 column(s) is less than one vector of 8: no load can be 16 bytes wide"
    assert plain.narrow_load_hint((64, 50256)) is None and peeled.narrow_load_hint((64, 50257)) is None


def test_peel_rules():
    lines = errors(edit(PEEL, "variant: two_pass", "variant: online"))
    assert [ln for ln in lines if "[peel_variant]" in ln] == [
        ("specs/x.yaml:10:9: peel=True: the online variant holds the row in registers by chunk; peeled rows are "
        "streamed: variant: two_pass [peel_variant]")]
    assert errors(edit(PEEL, "tail: specialized", "tail: none"))[1:] == [
        ("specs/x.yaml:9:9: tail=none: peel moves each row's vector body by its head, so its last chunk is ragged "
        "in some rows: set tail: specialized or predicated [peel_tail]")]
    assert errors(edit(PEEL, "vector: 8", "vector: 1")) == [
        "specs/x.yaml:8:11: vector=1: peel aligns vector loads; with vector 1 there is nothing to align [peel_vector]"]
    assert errors(edit(PEEL, "rows: 64,", "rows: 50000,")) == [
        ("specs/x.yaml:6:7: shapes[0]: peel indexes the rows as one flat int32 array: rows*cols=2512850000 is over "
        "2147483647 [index_width]")]
    assert errors(edit(NORM_PEEL, "variant: streamed", "variant: registers"))[1] == (
        "specs/x.yaml:11:9: peel=True: the registers variant holds the row in registers by chunk; peeled rows are "
        "streamed: variant: streamed [peel_variant]")


# ---- the generated index arithmetic, evaluated in Python -------------------------------------------

def _peel_model(text: str, cols: int):
    """The chunk counts and per-row expressions as the generated module writes them (chunk_counts and
    peel_setup of _rows.j2), evaluated with Python ints for one row length."""
    consts = {k: int(re.search(rf"^{k} = (\d+)", text, re.MULTILINE).group(1)) for k in ("THREADS", "VEC")}
    env = {**consts, "N": cols, "max": max, "int": int}
    for name in ("FULL", "RAGGED"):
        env[name] = eval(re.search(rf"^    {name} = (.+?)  #", text, re.MULTILINE).group(1), env)
    exprs = {name: re.search(rf"^ +{name} = (.+?)  #", text, re.MULTILINE).group(1)
             for name in ("base", "a0", "head", "nvec", "tail0", "scol")}
    exprs["has_scalar"] = re.search(r"^ +has_scalar = (.+)$", text, re.MULTILINE).group(1)
    return env, exprs


def _covered(env, exprs, row: int, cols: int) -> list[int]:
    """How many times each column of `row` is read by the generated chunks (whole and ragged) and scalars."""
    class TNS:
        @staticmethod
        def min(a, b):
            return min(a, b)

        @staticmethod
        def if_then_else(c, a, b):
            return a if c else b

    hits = [0] * cols
    threads, vec, chunk = env["THREADS"], env["VEC"], env["THREADS"] * env["VEC"]
    for tx in range(threads):
        local = {**env, "T": TNS, "row": row, "tx": tx}
        for name in ("base", "a0", "head", "nvec", "tail0", "scol", "has_scalar"):
            local[name] = eval(exprs[name], local)
        for c in range(env["FULL"] + env["RAGGED"]):
            whole = c < env["FULL"]
            if whole:
                assert c * threads + tx < local["nvec"], (row, c, tx)  # an unchecked chunk is inside the row
            if whole or c * threads + tx < local["nvec"]:
                for v in range(vec):
                    flat = local["a0"] + c * chunk + tx * vec + v
                    assert flat % vec == v  # the vector starts on a VEC boundary of the flat buffer
                    hits[flat - local["base"]] += 1
        if local["has_scalar"]:
            hits[local["scol"]] += 1
    return hits


@pytest.mark.parametrize("cols", [1, 7, 8, 9, 2047, 2048 + 7, 4096 + 1, 50257, 3 * 2048 + 15])
def test_every_column_is_read_once(cols):
    f = next(f for f in render_all(build_instances(parse_specs(PEEL, FILE))) if f.instance.target.value == "sm_90")
    env, exprs = _peel_model(f.text, cols)
    for row in range(9):  # every head 0..7 for an odd length
        hits = _covered(env, exprs, row, cols)
        assert hits == [1] * cols, (row, [i for i, h in enumerate(hits) if h != 1][:10])
        # the scalars the kernel reads are the ones the negative control leaves out
        mask = peel_scalar_mask(f.instance, 1, cols, r0=row)[0]
        base = row * cols
        head = min((-base) % 8, cols)
        assert int(mask.sum()) == head + (cols - head) % 8


# ---- lowering: 16-byte loads of an odd row ---------------------------------------------------------

ROW_FILES = [f for f in Project().rendered() if f.instance.op in ("softmax", "rmsnorm", "layernorm")]
# the hand configurations (a lockfile's tuned ones are other kernels of the same spec name)
FILES = {(f.instance.name, f.instance.target.value): f for f in ROW_FILES
         if not any(ref.tuned_on for ref in f.specs)}


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_an_odd_row_streams_in_16_byte_vectors(target):
    files = [f for f in ROW_FILES if f.instance.name == "softmax_fp16_vocab" and f.instance.target.value == target]
    assert files
    for f in files:  # the hand kernel and any tuned one
        src = lower(f, (4, 50257), f.instance.target).source
        vec_loads = re.findall(r"\*\(uint4\*\)\(Xf \+", src)
        vec_stores = re.findall(r"\*\(uint4\*\)\(Yf \+", src)
        # three passes, each its whole chunks (`unroll` copies of the loop body) and its ragged chunk; one store pass
        u = f.instance.unroll
        assert (len(vec_loads), len(vec_stores)) == (3 * (u + 1), u + 1), f.uri
        assert "warp_reduce_max" in src


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_a_peeled_norm_reads_its_weight_in_16_byte_vectors_too(target):
    # the head misaligns the weight's columns: whole chunks read the two aligned vectors around them and shift
    # by the head (one compile-time shift per head value), the ragged chunk element by element
    f = FILES[("rmsnorm_bf16_vocab", target)]
    src = lower(f, (4, 50257), f.instance.target).source
    assert len(re.findall(r"\*\(uint4\*\)\((lo|hi) \+ 0\) = \*\(uint4\*\)\(W \+", src)) == 2
    assert len(re.findall(r"\*\(uint4\*\)\(Xf \+", src)) == 2 * 2  # two passes, whole and ragged chunks
    assert "wv[7] = ((float)hi[6]);" in src  # the last of the 8 shifts


# ---- the checker, on the CPU ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax_fp16_vocab", "rmsnorm_bf16_vocab", "layernorm_fp16_vocab"])
def test_peeled_output_verifies_and_every_control_is_rejected(name):
    inst = FILES[(name, "sm_90")].instance
    for shape in [(16, inst.shapes[0][1]), *derived_shapes(inst)[1:]]:
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind="wide")
        assert status == "verified", (shape, cmp, controls)
        assert controls["peel_skipped"] == "rejected", (shape, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)


@pytest.mark.parametrize("name", ["softmax_fp16_vocab", "rmsnorm_bf16_vocab"])
def test_a_kernel_that_skips_its_scalars_fails(name):
    inst = FILES[(name, "sm_90")].instance
    shape = (8, 50257)

    def skipped(case, ref):  # the scalar head and tail never written: the NaN the output starts as
        return ref.masked_fill(peel_scalar_mask(inst, *shape), float("nan"))

    status, cmp, _ = check_output(inst, shape, skipped)
    assert status == "failed" and cmp.mismatch_ratio > 0


# ---- split rows -----------------------------------------------------------------------------------

SPLIT = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  variant: two_pass
  shapes:
    - {rows: 4, cols: 1048576}
  threads: 256
  vector: 8
  tail: none
  split: auto
  targets: [gfx942, sm_90]
"""
NORM_SPLIT = edit(edit(SPLIT, "op: softmax", "op: layernorm\n  eps: 1.0e-5"), "variant: two_pass", "variant: streamed")


def test_split_auto_resolves_per_target_and_shape():
    gfx, sm = build_instances(parse_specs(SPLIT, FILE))
    # 2 workgroups per CU/SM over all rows: 608 / 4 rows on gfx942's 304 CUs, 264 / 4 on sm_90's 132 SMs
    assert gfx.split_layout(4, 1 << 20) == (152, 4 * 2048) and sm.split_layout(4, 1 << 20) == (66, 8 * 2048)
    assert sm.launch_grids((4, 1 << 20)) == ((66, 4, 1), (66, 4, 1))
    assert sm.split_layout(1, 1 << 22) == (264, 8 * 2048)
    assert sm.split_layout(10000, 4096) == (1, 4096)  # many rows: one workgroup each, still two kernels
    assert sm.split_layout(1, 3000) == (2, 2048)  # never more workgroups than chunks
    assert sm.workspace_shape((4, 1 << 20)) == (4, 66, 2)
    fixed = build_instances(parse_specs(edit(SPLIT, "split: auto", "split: 16"), FILE))[1]
    assert fixed.split_layout(4, 1 << 20) == (16, 32 * 2048) and "_s16_" in render_all([fixed])[0].uri
    assert "_sauto_" in render_all([sm])[0].uri


def test_split_rules():
    assert errors(edit(SPLIT, "variant: two_pass", "variant: online"))[1] == (
        "specs/x.yaml:10:10: split=auto: the online variant keeps one row in one workgroup's registers; split "
        "rows are streamed: variant: two_pass [split_variant]")
    assert errors(edit(edit(SPLIT, "tail: none", "tail: specialized\n  peel: true"), "cols: 1048576", "cols: 1048577")) == [
        ("specs/x.yaml:11:10: split=auto: split segments start at chunk boundaries of the row, which peel moves by "
         "each row's head: use one of split or peel [split_peel]")]
    assert errors(edit(SPLIT, "vector: 8", "vector: 8\n  unroll: 2")) == [
        ("specs/x.yaml:9:11: unroll=2: a split row's segment loop is not unrolled (its trip count differs per "
         "workgroup): unroll 1 [split_unroll]")]
    assert errors(edit(SPLIT, "split: auto", "split: 600")) == [
        ("specs/x.yaml:6:23: shapes[0].cols=1048576: split=600 workgroups for 512 chunk(s) of 2048 columns: some "
         "workgroups would get no columns (split at most 512, or auto) [split_segments]")]
    assert errors(edit(SPLIT, "split: auto", "split: 0"))[0].endswith("[greater_than_equal]")
    assert errors(edit(NORM_SPLIT, "variant: streamed", "variant: registers"))[1].endswith(
        "variant: streamed [split_variant]")
    # rows are grid y of both kernels: CUDA's 65535 on sm_90
    assert errors(edit(SPLIT, "rows: 4,", "rows: 65536,")) == [
        "specs/x.yaml:6:7: shapes[0]: grid y = 65536 exceeds sm_90's limit 65535 [grid_limit]"]


PROBES = [f for text in (SPLIT, NORM_SPLIT, edit(NORM_SPLIT, "op: layernorm", "op: rmsnorm"))
          for f in render_all(build_instances(parse_specs(
              edit(edit(text, "rows: 4, cols: 1048576", "rows: 3, cols: 20000"), "tail: none", "tail: specialized"),
              FILE)))]


@pytest.mark.parametrize("f", PROBES, ids=lambda f: f"{f.instance.op}-{f.instance.target.value}")
def test_split_launches_two_kernels_of_the_grid_it_says(f):
    from codegen.build.compile import _lower_recording_launches

    shape = f.instance.shapes[0]
    _, launches = _lower_recording_launches(f, shape)
    assert sorted(tuple(k["grid"]) for k in launches) == sorted(f.instance.launch_grids(shape))
    assert len(launches) == 2


@pytest.mark.parametrize(("name", "target"), [
    ("softmax_fp16_long", "sm_90"), ("rmsnorm_fp16_long", "sm_90"), ("layernorm_bf16_long", "sm_90"),
    # 608 workgroups over 4194304 columns, the last segment one chunk: vacuous on the H200 while the control
    # dropped the last segment (7bdd0e0)
    ("softmax_fp32_long", "gfx942")])
def test_split_output_verifies_and_every_control_is_rejected(name, target):
    inst = FILES[(name, target)].instance
    for shape in [inst.shapes[0], *derived_shapes(inst)]:
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind="wide")
        assert status == "verified", (shape, cmp, controls)
        assert set(controls.values()) == {"rejected"}, (shape, controls)


# ---- the tuning space ---------------------------------------------------------------------------------

def test_peel_and_split_are_row_search_fields():
    from codegen.tune.search import constrain, expand

    text = SPLIT + "  search:\n    sm_90:\n      split: [1, auto, 64]\n      variant: [two_pass, online]\n"
    (ls,) = parse_specs(text, FILE)
    part = constrain(ls, Target.SM_90, expand(ls.spec, Target.SM_90))
    assert [p.values for p in part.points] == [
        (("variant", v), ("split", s)) for v in ("two_pass", "online") for s in (1, "auto", 64)]
    # online holds the row in registers: over the budget at 2^20 columns, and it never splits
    assert part.rejected_by_rule == {"row_registers": 3, "split_variant": 2}
    assert [("_sauto_" in p.uri, "_s64_" in p.uri) for p in part.points if p.uri] == [
        (False, False), (True, False), (False, True)]
    peel = PEEL + "  search:\n    gfx942:\n      peel: [false, true]\n"
    (ls,) = parse_specs(peel, FILE)
    assert len(constrain(ls, Target.GFX942, expand(ls.spec, Target.GFX942)).files) == 2


# ---- packed rows ----------------------------------------------------------------------------------

PACK = """\
- name: s
  op: softmax
  dtypes: {input: fp16, out: fp16}
  variant: online
  shapes:
    - {rows: 4096, cols: 1024}
  threads: 256
  vector: 8
  tail: none
  pack: 4
  targets: [gfx942, sm_90]
"""


def test_pack_shares_the_workgroup_between_rows():
    _gfx, sm = build_instances(parse_specs(PACK, FILE))
    assert (sm.pack, sm.row_threads, sm.chunk, sm.reduce_groups, sm.row_groups) == (4, 64, 512, 8, 2)
    assert sm.launch_grids((4096, 1024)) == ((1024, 1, 1),)
    assert derived_shapes(sm) == [(4, 512), (12, 1024)]  # whole blocks of 4 rows
    assert "_p4_" in render_all([sm])[0].uri


def test_pack_rules():
    assert errors(edit(PACK, "pack: 4", "pack: 16")) == [
        ("specs/x.yaml:10:9: pack=16: 256 threads for 16 rows is 16 per row: each row needs a multiple of 32 "
         "threads (its own warp reductions) [pack_threads]")]
    assert errors(edit(PACK, "pack: 4", "pack: 3"))[0].endswith("[pack_threads]")
    assert errors(edit(PACK, "rows: 4096,", "rows: 4098,")) == [
        "specs/x.yaml:6:14: shapes[0].rows=4098: not a multiple of pack=4 (each workgroup takes 4 whole rows) [pack_rows]"]
    split = edit(edit(PACK, "variant: online", "variant: two_pass"), "pack: 4", "pack: 4\n  split: 2")
    assert errors(split) == [
        ("specs/x.yaml:10:9: pack=4: pack puts several rows in one workgroup, split one row in several: use one "
         "[pack_split]")]
    # the row, not the workgroup, is what one chunk covers: cols must be whole chunks of 64 threads x 8
    assert errors(edit(PACK, "cols: 1024", "cols: 1000"))[0].endswith(
        "cols=1000 is not a multiple of threads/pack*vector=512: set tail: predicated or specialized [tail_policy]")


PACK_PROBES = [f for text in (PACK, edit(edit(PACK, "op: softmax", "op: layernorm\n  eps: 1.0e-5"),
                                          "variant: online", "variant: streamed"))
               for f in render_all(build_instances(parse_specs(
                   edit(edit(text, "rows: 4096, cols: 1024", "rows: 8, cols: 1000"), "tail: none", "tail: specialized"),
                   FILE)))]


@pytest.mark.parametrize("f", PACK_PROBES, ids=lambda f: f"{f.instance.op}-{f.instance.target.value}")
def test_pack_launches_rows_over_pack_workgroups_each_row_its_lanes(f):
    from codegen.build.compile import _lower_recording_launches

    shape = f.instance.shapes[0]
    src, launches = _lower_recording_launches(f, shape)
    assert [tuple(k["grid"]) for k in launches] == list(f.instance.launch_grids(shape)) == [(2, 1, 1)]
    assert ">> 6" in src and "& 63" in src  # the row is threadIdx / 64, the lane threadIdx % 64


LAYER_PACK = """\
- name: layernorm_bf16_short
  op: layernorm
  dtypes: {input: bf16, out: bf16}
  eps: 1.0e-5
  variant: registers
  shapes:
    - {rows: 65536, cols: 768}
  threads: 256
  vector: 8
  pack: 8
  targets: [sm_90]
"""


@pytest.mark.parametrize("name", ["softmax_fp16_short", "rmsnorm_fp16_packed", "layernorm_bf16_short"])
def test_packed_output_verifies_and_every_control_is_rejected(name):
    if name == "layernorm_bf16_short":
        (inst,) = build_instances(parse_specs(LAYER_PACK, FILE))
    else:
        inst = FILES[(name, "sm_90")].instance
    for shape in [(64, inst.shapes[0][1]), *derived_shapes(inst)]:
        for kind in ("normal", "wide"):
            status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
            assert status == "verified", (shape, cmp, controls)
            assert controls["pack_mixed"] == "rejected" and set(controls.values()) == {"rejected"}, (shape, controls)
    # the chunked check keeps a workgroup's rows together (the control mixes them)
    status, _, controls = check_output(inst, (64, inst.shapes[0][1]), lambda case, ref: ref, kind="wide",
                                       max_elements=3 * inst.shapes[0][1])
    assert status == "verified" and controls["pack_mixed"] == "rejected"
