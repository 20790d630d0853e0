"""fp32-input GEMMs and their precision modes (issue 15): the spec field and its rules, the kernels the
template writes for each mode (read from the lowered source), the per-mode tolerance models on the CPU --
each able to fail: a TF32 result fails the ieee model, a truncated one the round-to-nearest model --
and the like-with-like torch baselines. The GPU runs are `tilegen verify gemm_fp32_ieee ...` (README)."""

from __future__ import annotations

import json
import math
from typing import ClassVar

import pytest
import torch
from numcheck import check_output
from spectext import FILE, edit, errors

from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.gemm.numerics import (
    FP32_BASELINES,
    TF32_ROUNDOFF,
    _with_tf32,
    gemm_baseline_precision,
    product_model,
    tf32_result,
    to_tf32,
)
from codegen.generate.instance import build_instances
from codegen.generate.pipeline import Project
from codegen.generate.render import render
from codegen.run.verify import judge
from codegen.spec.load import parse_specs

FILES = {f.uri: f for f in Project().rendered()}


def _file(name, target=Target.SM_90):
    """The spec's hand kernel (not a tuned winner the lockfile adds beside it; the hand kernel may be a winner
    too, for the shapes where the tuner kept it)."""
    return next(f for f in FILES.values() if f.instance.name == name and f.instance.target == target and f.is_hand)


def _inst(name, target=Target.SM_90):
    return _file(name, target).instance


SPEC = """\
- name: g
  op: gemm
  dtypes: {a: fp32, b: fp32, out: fp32}
  layout: nn
  precision: tf32
  shapes:
    - {m: 256, n: 256, k: 256}
  tiling: {block_m: 128, block_n: 128, block_k: 16, threads: 256}
  targets: [gfx942, sm_90]
"""


# ---- spec field and rules ---------------------------------------------------------------------------

def test_tf32_on_gfx942_is_refused_with_the_reason():
    assert errors(SPEC) == [(
        f"{FILE}:5:14: precision=tf32: not possible on gfx942: TileLang 0.1.15's HIP gemm has no xf32 MFMA path "
        "(it emits only the true-fp32 v_mfma_f32_*f32), so only ieee is possible; drop gfx942 from targets or "
        "use ieee [precision_target]")]


def test_3xtf32_on_gfx950_is_refused():
    text = edit(edit(SPEC, "precision: tf32", "precision: 3xtf32"), "[gfx942, sm_90]", "[gfx950]")
    assert [e.rsplit(" ", 1)[-1] for e in errors(text)] == ["[precision_target]"]


def test_precision_other_than_ieee_needs_fp32_inputs():
    text = edit(edit(SPEC, "{a: fp32, b: fp32, out: fp32}", "{a: fp16, b: fp16, out: fp16}"),
                "[gfx942, sm_90]", "[sm_90]")
    assert errors(text) == [(
        f"{FILE}:5:14: precision=tf32: only for fp32 inputs (dtypes.a is fp16, whose products the MMA forms exactly): "
        "remove it or use ieee [precision_dtype]")]


def test_unknown_precision_is_an_enum_error():
    (line,) = errors(edit(SPEC, "precision: tf32", "precision: fp32"))
    assert line.startswith(f"{FILE}:5:14: precision") and "ieee" in line and "3xtf32" in line


def test_ieee_is_the_default_and_only_fp32_kernels_carry_a_precision():
    insts = build_instances(parse_specs(edit(SPEC, "  precision: tf32\n", ""), FILE))
    assert {i.target: (i.precision, i.fp32_product) for i in insts} == {
        Target.GFX942: ("ieee", "mma"), Target.SM_90: ("ieee", "fma")}
    fp16 = _inst("gemm_fp16_nt")
    assert fp16.precision is None and fp16.template == "gemm.py.j2"
    # every field is in the configuration, at its value: null for a non-fp32 kernel
    assert json.loads(fp16.canonical())["precision"] is None
    assert json.loads(_inst("gemm_fp32_tf32").canonical())["precision"] == "tf32"


def test_the_tf32_tiles_count_in_lds():
    assert _inst("gemm_fp32_ieee").lds_bytes == 2 * (128 * 16 + 16 * 128) * 4  # two stages, nothing else
    tile = (128 * 32 + 256 * 32) * 4  # one 128x256x32 A+B tile set of TF32 (fp32 storage)
    assert _inst("gemm_fp32_tf32").lds_bytes == 4 * tile  # four stages of the staged TF32 tiles
    assert _inst("gemm_fp32_3xtf32").lds_bytes == 2 * 2 * tile  # two stages of high parts and residuals
    text = edit(edit(SPEC, "precision: tf32", "precision: 3xtf32"), "[gfx942, sm_90]", "[sm_90]")
    text = edit(text, "block_k: 16", "block_k: 64")  # 64 KiB x 2 stages x 2 (hi, lo) > 227 KiB
    assert [e.split(": ", 2)[2] for e in errors(text)] == [(
        "128x128x64 tiles x 2 stage(s) x 2 (3xtf32: high parts and residuals) need 262144 B (256 KiB) of shared "
        "memory, over the 232448 B (227 KiB) per workgroup on sm_90 [lds_budget]")]


def test_tf32_modes_refuse_edge_kernels_and_take_an_unrolled_loop():
    text = edit(edit(SPEC, "[gfx942, sm_90]", "[sm_90]"), "  targets:", "  tail: specialized\n  unroll: 2\n"
                "  pipeline: {stages: 1}\n  targets:")
    assert [e.split(": ", 1)[1] for e in errors(text)] == [
        ("tail=specialized: not with precision tf32 / 3xtf32 (staged) (not supported): the TF32 workspaces are whole "
         "blocks, so there are no edge kernels to specialize: use tail predicated or none, or tf32_convert inline "
         "[unsupported_combination]")]
    [inst] = build_instances(parse_specs(edit(text, "  tail: specialized\n", ""), FILE))
    text = render(inst).text  # the staged main kernel's K loop unrolled, as any other
    assert "UNROLL = 2" in text and "STAGES" not in text and "for ko in T.serial(T.ceildiv(K, BLOCK_K) // UNROLL):" in text


def test_kernel_names_say_the_precision():
    assert "_ieee_" in _file("gemm_fp32_ieee").uri and "_ieee_" in _file("gemm_fp32_ieee", Target.GFX942).uri
    assert "_tf32_" in _file("gemm_fp32_tf32").uri and "_3xtf32_" in _file("gemm_fp32_3xtf32").uri


# ---- what the generated code does (lowered source, no GPU) ------------------------------------------

def _lowered(name, target, shape=(256, 256, 64)):
    from codegen.generate.lower import lower

    return lower(_file(name, target), shape, target).source


def test_lowered_kernels_form_products_as_their_mode_says():
    ieee = _lowered("gemm_fp32_ieee", Target.SM_90)
    assert "mma_sync" not in ieee and "wgmma" not in ieee  # CUDA-core products only
    tf32 = _lowered("gemm_fp32_tf32", Target.SM_90)
    x3 = _lowered("gemm_fp32_3xtf32", Target.SM_90)
    for src, products, copies in ((tf32, 1, 2), (x3, 3, 4)):
        # staging: rounded (+ 0x1000, & 0xFFFFE000) into K-major TF32 workspaces, zeros past the edges
        assert "(uint)4096) & (uint)4294959104" in src and "tfloat32_t* __restrict__ A_hi" in src
        main = src[src.rindex("_kernel_2("):]  # the main kernel's definition: TMA copies of TF32 tiles, wgmma
        assert main.count("wgmma_ss<tl::DataType::kTensorFloat32") == products and "mma_sync" not in main
        assert "4294959104" not in main  # no rounding left in the main loop
        assert len({ln for ln in main.splitlines() if "tma_load" in ln}) >= copies
    assert src.count("__global__") == 2 * 3  # declarations and definitions of the 3 kernels
    amd = _lowered("gemm_fp32_ieee", Target.GFX942)
    assert "__builtin_amdgcn_mfma_f32_16x16x4f32" in amd and "xf32" not in amd


def test_xf32_workspaces_are_padded_to_whole_blocks_and_launched():
    inst = _inst("gemm_fp32_3xtf32")
    assert inst.xf32_workspaces() == ("A_hi", "B_hi", "A_lo", "B_lo")
    assert inst.workspace_shapes((1000, 1500, 999)) == ((1024, 1024), (1536, 1024), (1024, 1024), (1536, 1024))
    assert inst.launch_grids((1000, 1500, 999)) == ((32, 8, 1), (32, 6, 1), (6, 8, 1))
    assert _inst("gemm_fp32_tf32").xf32_workspaces() == ("A_hi", "B_hi") and _inst("gemm_fp32_ieee").xf32_workspaces() == ()


# ---- tf32_convert inline: the conversion in the main kernel's tiles ------------------------------------

INLINE = edit(edit(SPEC, "[gfx942, sm_90]", "[sm_90]"), "  precision: tf32\n",
              "  precision: 3xtf32\n  tf32_convert: inline\n")


def _inline(text=INLINE):
    [inst] = build_instances(parse_specs(text, FILE))
    return inst


def test_tf32_convert_inline_has_no_staging_kernels_nor_workspaces_and_names_itself():
    inst = _inline()
    assert inst.tf32_inline and inst.workspace == "" and inst.xf32_workspaces() == ()
    assert inst.workspace_shapes((1000, 1500, 999)) == () and inst.launch_grids((1000, 1500, 999)) == ((12, 8, 1),)
    assert "_3xtf32i_" in render(inst).uri
    staged = _inline(edit(INLINE, "  tf32_convert: inline\n", ""))
    assert "_3xtf32_" in render(staged).uri and staged.tf32_convert is None  # the default: the identity as before
    # shared memory: the fp32 tiles of every stage, and the TF32 high and residual tiles each step writes
    tile = (128 + 128) * 16 * 4
    assert (inst.lds_bytes, staged.lds_bytes) == (tile * (2 + 2), tile * 2 * 2)


def test_tf32_convert_applies_only_to_tf32_modes():
    assert [e.split(": ", 1)[1] for e in errors(edit(INLINE, "  precision: 3xtf32\n", ""))] == [
        "tf32_convert=inline: only for precision tf32 / 3xtf32 of fp32 inputs: remove it [tf32_convert_applies]"]
    fp16 = edit(edit(INLINE, "{a: fp32, b: fp32, out: fp32}", "{a: fp16, b: fp16, out: fp16}"),
                "  precision: 3xtf32\n", "")
    assert [e.rsplit("[", 1)[1] for e in errors(fp16)] == ["tf32_convert_applies]"]


@pytest.mark.slow
def test_inline_kernels_convert_in_the_main_loop_and_read_the_callers_operands():
    from codegen.generate.lower import lower

    for text, products in ((INLINE, 3), (edit(INLINE, "precision: 3xtf32", "precision: tf32"), 1)):
        inst = _inline(edit(text, "  layout: nn\n", "  layout: nt\n"))
        src = lower(render(inst), (256, 256, 64), Target.SM_90).source
        assert src.count("__global__") == 2  # one kernel, declared and defined: no staging launches
        assert "A_hi" not in src and "4294959104" in src  # the rounding (& 0xFFFFE000) is in the main kernel
        assert src.count("wgmma_ss<tl::DataType::kTensorFloat32") == products
        assert "tma_load" in src  # the fp32 tiles of A and B, as stored


def test_the_tf32_convert_example_pairs_every_inline_spec_with_its_staged_twin():
    from pathlib import Path

    import yaml

    specs = yaml.safe_load((Path(__file__).parents[1] / "examples/tf32_convert/specs/twins.yaml").read_text())
    by_name = {s["name"]: s for s in specs}
    inline = [s for s in specs if s.get("tf32_convert") == "inline"]
    assert inline and len(inline) * 2 == len(specs)
    for s in inline:
        twin = by_name[s["name"].removesuffix("_inline") + "_staged"]
        assert {k: v for k, v in s.items() if k not in ("name", "tf32_convert")} == {
            k: v for k, v in twin.items() if k != "name"}
    insts = build_instances(parse_specs(yaml.safe_dump(specs), "examples/tf32_convert/specs/twins.yaml"))
    assert sorted(i.tf32_inline for i in insts) == [False] * len(inline) + [True] * len(inline)


# ---- the tolerance models on the CPU -----------------------------------------------------------------

def test_to_tf32_rounds_to_nearest_ties_away_from_zero():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100_000, generator=g) * torch.exp(torch.empty(100_000).uniform_(-20, 20, generator=g))
    r = to_tf32(x)
    assert ((r.view(torch.int32) & 0x1FFF) == 0).all()  # 10 mantissa bits left
    assert ((r.double() - x.double()).abs() <= TF32_ROUNDOFF * x.double().abs()).all()
    # exactly half a TF32 ulp above 1 and below -1 rounds away from zero
    one_half = torch.tensor([1.0 + 2.0**-11, -(1.0 + 2.0**-11), 1.0 + 2.0**-11 - 2.0**-23])
    assert to_tf32(one_half).tolist() == [1.0 + 2.0**-10, -(1.0 + 2.0**-10), 1.0]


def _emulate(mode):
    """The kernel's arithmetic of each mode, emulated in fp64 products over the same rounded inputs."""
    def out(case, ref):
        a, b = case.A32, case.B32
        if mode == "tf32":
            return (to_tf32(a).double() @ to_tf32(b).double()).float()
        if mode == "truncated":
            def cut(x):
                return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)
            return (cut(a).double() @ cut(b).double()).float()
        if mode == "3xtf32":
            ah, bh = to_tf32(a), to_tf32(b)
            al, bl = to_tf32(a - ah), to_tf32(b - bh)
            return (al.double() @ bh.double() + ah.double() @ bl.double() + ah.double() @ bh.double()).float()
        return (a.double() @ b.double()).float()
    return out


SHAPES = [(1, 1, 1), (129, 127, 33), (96, 80, 1000)]


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("name", "mode"), [("gemm_fp32_ieee", "ieee"), ("gemm_fp32_tf32", "tf32"),
                                            ("gemm_fp32_3xtf32", "3xtf32")])
def test_each_mode_verifies_its_own_arithmetic_with_every_control_rejected(name, mode, shape, kind):
    status, cmp, controls = check_output(_inst(name), shape, _emulate(mode), kind=kind)
    assert status == "verified", (cmp, controls)
    assert "n/a" not in "".join(controls.values()) or shape == (1, 1, 1)
    assert ("tf32_result" in controls) == (mode != "tf32")
    assert "PASSED" not in "".join(controls.values())


@pytest.mark.parametrize("shape", [(1, 1, 1), (129, 127, 33), (64, 64, 4096)])
def test_a_tf32_result_fails_the_ieee_and_3xtf32_models(shape):
    """The negative control that proves the fp32 check can fail: up to the seeds' deepest K (4096)."""
    for name in ("gemm_fp32_ieee", "gemm_fp32_3xtf32"):
        for kind in ("normal", "wide"):
            status, cmp, _ = check_output(_inst(name), shape, _emulate("tf32"), kind=kind)
            assert status == "failed", (name, shape, kind, cmp)


def test_3xtf32_stays_within_the_ieee_model():
    ieee = _inst("gemm_fp32_ieee")
    for shape in SHAPES[1:]:
        for kind in ("normal", "wide"):
            status, cmp, _ = check_output(ieee, shape, _emulate("3xtf32"), kind=kind)
            assert status == "verified", (shape, kind, cmp)


def test_truncation_fails_the_round_to_nearest_model_at_small_k():
    """Why the old sm_90 fp32 kernel (raw bits into mma_sync<kTensorFloat32>) failed at 1x1x1 and K = 32:
    truncation is up to 2^-10 per operand, twice the 2^-11 of round-to-nearest."""
    status, cmp, _ = check_output(_inst("gemm_fp32_tf32"), (64, 64, 1), _emulate("truncated"))
    assert status == "failed" and cmp.max_rel_err > 2 * TF32_ROUNDOFF


def test_the_gfx942_program_on_sm90_is_judged_as_truncated_tf32_without_the_tf32_control():
    """Its rocm_gemm lowers for CUDA to mma_sync<kTensorFloat32> of raw fp32 bits: the logic check models
    that (labelled), and a TF32 control would pass that model, so it is not applied there."""
    inst = _inst("gemm_fp32_ieee", Target.GFX942)
    on_amd, on_nv = product_model(inst, Target.GFX942), product_model(inst, Target.SM_90)
    assert (on_amd.u_prod, on_amd.fp32_class) == (0.0, True)
    assert on_nv.u_prod == 2 * 2.0**-10 + 2.0**-20 and not on_nv.fp32_class and "truncates" in on_nv.label
    fam = family(inst).numerics
    shape = (129, 127, 33)
    case = fam.make_inputs(inst, shape, seed=0, kind="wide", device="cpu", run_target=Target.SM_90)
    ref, mag = fam.reference(inst, case)
    controls = fam.controls(inst, case, ref)
    assert "tf32_result" not in controls
    out = _emulate("truncated")(case, ref)
    status, _, outcome = judge(out, ref, mag, fam.tolerance(inst, shape, Target.SM_90), controls)
    assert status == "verified" and set(outcome.values()) == {"rejected"}
    assert "truncates fp32 to tf32" in fam.tolerance(inst, shape, Target.SM_90).describe()


def test_the_tolerance_names_the_mode_and_other_gemms_keep_theirs():
    shape = (256, 256, 64)
    assert "[tf32 (inputs rounded to nearest, ties away)]" in family(_inst("gemm_fp32_tf32")).numerics.tolerance(
        _inst("gemm_fp32_tf32"), shape, Target.SM_90).describe()
    fp16 = _inst("gemm_fp16_nt")
    tol = family(fp16).numerics.tolerance(fp16, shape, Target.SM_90)
    assert tol.u_prod == 0.0 and "[" not in tol.describe()
    assert math.isclose(product_model(_inst("gemm_fp32_3xtf32"), Target.SM_90).u_prod,
                        3 * 2.0**-22 * (1 + 2.0**-11) ** 2)


def test_tf32_result_control_is_tf32_arithmetic():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert torch.equal(tf32_result(a, b), to_tf32(a) @ to_tf32(b))


# ---- benchmarks compare like with like --------------------------------------------------------------

def test_baselines_are_named_with_their_tf32_setting():
    assert gemm_baseline_precision(_inst("gemm_fp32_ieee")) == "eager: allow_tf32=False, compile: allow_tf32=False"
    assert gemm_baseline_precision(_inst("gemm_fp32_tf32")) == "eager: allow_tf32=True, compile: allow_tf32=True"
    assert gemm_baseline_precision(_inst("gemm_fp32_3xtf32")) == (
        "eager: allow_tf32=False, compile: allow_tf32=False, eager_tf32: allow_tf32=True")
    assert gemm_baseline_precision(_inst("gemm_fp16_nt")) == ""
    assert set(FP32_BASELINES) == {"ieee", "tf32", "3xtf32"}


def test_a_tf32_baseline_sets_the_flag_for_its_call_only():
    seen = []
    before = torch.backends.cuda.matmul.allow_tf32
    fn = _with_tf32(lambda a, b: seen.append(torch.backends.cuda.matmul.allow_tf32), None, None, allow=not before)
    fn()
    assert seen == [not before] and torch.backends.cuda.matmul.allow_tf32 == before


def test_bench_dtypes_cell_names_the_baselines_precision():
    from codegen.run.report import bench_rows

    class R:
        rows: ClassVar = [{"uri": "k", "name": "n", "target": "sm_90", "shape": [1, 2, 3], "dtypes": "fp32/fp32/fp32 tf32",
                 "status": "ok", "baseline_precision": "eager: allow_tf32=True, compile: allow_tf32=True"}]

    (row,) = bench_rows(R())
    assert row["dtypes"] == "fp32/fp32/fp32 tf32 (torch eager: allow_tf32=True, compile: allow_tf32=True)"


def test_unrolled_kernels_are_verified_at_whole_rounds_of_k():
    """The unrolled K loop has no remainder round (rule unroll_divides holds every shape a kernel serves to whole
    rounds): the edge shapes keep m and n ragged and round k up -- at k = 1 or 65 a 64 x 64 x 32 kernel unrolled
    twice runs no round or drops its third tile, which the H100 run of the traits project showed (every element
    wrong at 1x1x1 and 65x63x65)."""
    from codegen.families import derived_shapes

    text = edit(edit(INLINE, "  targets:", "  tail: predicated\n  unroll: 2\n  pipeline: {stages: 1}\n  targets:"),
                "block_k: 16", "block_k: 32")
    inst = _inline(text)
    shapes = derived_shapes(inst)
    assert shapes == [(1, 1, 64), (129, 127, 128), (255, 257, 192)]
    assert all(k % (inst.block_k * inst.unroll) == 0 for _, _, k in shapes)
    assert len({(m % inst.block_m, n % inst.block_n) for m, n, _ in shapes}) > 1  # still ragged in m and n
