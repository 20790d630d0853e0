"""Fused row kernels (specs/fused_rows.yaml): residual add + rmsnorm / layernorm, rmsnorm with a per-token fp8
output, softmax with a scale and an additive mask. Spec errors (expect-style), names, lowering for both targets
(what each fused operation reads and writes shows in the device source), the numerics contract for kernels of
several outputs, and the checker on the CPU: the reference rounded once verifies, an emulation of the kernel's own
arithmetic verifies, every negative control is rejected, and each bug the fused operations invite fails."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.core.hardware import DType, Target
from codegen.families import derived_shapes, family
from codegen.families.norm.numerics import MIN_SCALE, normalised_reference, quantised, truncated
from codegen.families.numerics import SUBNORMAL_ROUNDOFF, UNIT_ROUNDOFF
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render, render_all
from codegen.run.verify import judge_chunks
from codegen.spec.load import parse_specs
from codegen.targets import torch_dtype

ADD = """\
- name: n
  op: rmsnorm
  residual: true
  dtypes: {input: bf16, out: bf16}
  eps: 1.0e-5
  variant: registers
  shapes:
    - {rows: 64, cols: 8192}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""
FP8 = edit(edit(ADD, "  residual: true\n", "  quant: per_token\n"), "out: bf16", "out: fp8_e4m3")
SOFTMAX = """\
- name: s
  op: softmax
  scale: 0.125
  mask: full
  dtypes: {input: fp16, out: fp16}
  variant: online
  shapes:
    - {rows: 64, cols: 8192}
  threads: 256
  vector: 8
  tail: none
  targets: [gfx942, sm_90]
"""

FUSED = ("rmsnorm_bf16_add", "rmsnorm_fp16_add", "layernorm_bf16_add", "layernorm_fp16_add", "rmsnorm_bf16_fp8",
         "rmsnorm_bf16_add_fp8", "softmax_fp16_scale_mask", "softmax_bf16_scale_bcast")
FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files() if f.instance.name in FUSED}


def _files(text: str):
    return {f.instance.target.value: f for f in render_all(build_instances(parse_specs(text, FILE)))}


# ---- spec ----------------------------------------------------------------------------------------------

def test_every_fused_seed_is_generated_for_both_targets():
    assert sorted(FILES) == sorted((n, t) for n in FUSED for t in ("gfx942", "sm_90"))


def test_fused_options_are_named_and_part_of_the_identity():
    add, fp8, sm = _files(ADD)["sm_90"], _files(FP8)["sm_90"], _files(SOFTMAX)["sm_90"]
    assert add.uri.startswith("rmsnorm_bf16_add_registers_t256_v8_sm90_")
    assert fp8.uri.startswith("rmsnorm_bf16_fp8_e4m3_tok_registers_t256_v8_sm90_")
    assert sm.uri.startswith("softmax_fp16_scaled_maskfull_online_t256_v8_sm90_")
    both = _files(edit(FP8, "  quant: per_token\n", "  quant: per_token\n  residual: true\n"))["sm_90"]
    assert both.uri.startswith("rmsnorm_bf16_fp8_e4m3_add_tok_registers_")
    plain = _files(edit(ADD, "  residual: true\n", ""))["sm_90"]
    bcast = _files(edit(SOFTMAX, "mask: full", "mask: broadcast"))["sm_90"]
    other_scale = _files(edit(SOFTMAX, "scale: 0.125", "scale: 0.25"))["sm_90"]
    uris = [f.uri for f in (add, fp8, sm, both, plain, bcast, other_scale)]
    assert len(set(uris)) == len(uris)
    # the options are fields of the configuration: the plain op's values are written too
    assert '"residual":false' in plain.instance.canonical() and '"quant":"none"' in plain.instance.canonical()
    assert '"residual":true' in add.instance.canonical() and '"scale":0.125' in sm.instance.canonical()
    assert '"fp8_max":448.0' in fp8.instance.canonical() and '"mask":"broadcast"' in bcast.instance.canonical()


def test_the_fp8_flavour_and_its_maximum_come_from_the_target():
    files = _files(FP8)
    assert (files["gfx942"].instance.out_dtype, files["gfx942"].instance.fp8_max) == ("float8_e4m3fnuz", 240.0)
    assert (files["sm_90"].instance.out_dtype, files["sm_90"].instance.fp8_max) == ("float8_e4m3fn", 448.0)
    assert "FP8_MAX = 240.0" in files["gfx942"].text and "FP8_MAX = 448.0" in files["sm_90"].text


@pytest.mark.parametrize(("text", "old", "new", "message"), [
    (ADD, "residual: true", "residual: 'yes'",
     "specs/x.yaml:3:13: residual='yes': Input should be a valid boolean [bool_type]"),
    (FP8, "quant: per_token", "quant: per_row",
     "specs/x.yaml:3:10: quant='per_row': Input should be 'none' or 'per_token' [enum]"),
    (FP8, "out: fp8_e4m3", "out: bf16",
     ("specs/x.yaml:3:10: quant=per_token: per_token writes fp8 e4m3 and a per-row scale: set dtypes.out: fp8_e4m3 "
     "(not bf16) [quant_dtype]")),
    (FP8, "  quant: per_token\n", "",
     ("specs/x.yaml:3:30: dtypes.out=fp8_e4m3: an fp8 e4m3 output needs its per-row scale: set quant: per_token "
     "[quant_dtype]")),
    (edit(FP8, "out: fp8_e4m3", "out: bf16"), "op: rmsnorm", "op: layernorm",
     "specs/x.yaml:3:10: quant=per_token: the per-token fp8 output is written by rmsnorm only [quant_op]"),
    (SOFTMAX, "scale: 0.125", "scale: 0.0",
     ("specs/x.yaml:3:10: scale=0.0: must be a normal fp32, from 1.175494e-38 to 3.402823e+38: the kernel "
     "computes with it in fp32 [fp32_range]")),
    (SOFTMAX, "scale: 0.125", "scale: 1.0e-40",
     ("specs/x.yaml:3:10: scale=1e-40: must be a normal fp32, from 1.175494e-38 to 3.402823e+38: the kernel "
     "computes with it in fp32 [fp32_range]")),
    (SOFTMAX, "scale: 0.125", "scale: 1.0e+39",
     ("specs/x.yaml:3:10: scale=1e+39: must be a normal fp32, from 1.175494e-38 to 3.402823e+38: the kernel "
     "computes with it in fp32 [fp32_range]")),
    (SOFTMAX, "scale: 0.125", "scale: .inf",
     "specs/x.yaml:3:10: scale=inf: Input should be a finite number [finite_number]"),
    (SOFTMAX, "scale: 0.125", "scale: '0.125'",
     "specs/x.yaml:3:10: scale='0.125': Input should be a valid number [float_type]"),
    (SOFTMAX, "mask: full", "mask: causal",
     "specs/x.yaml:4:9: mask='causal': Input should be 'none', 'full' or 'broadcast' [enum]"),
])
def test_fused_option_errors(text, old, new, message):
    assert message in errors(edit(text, old, new))


def test_a_negative_scale_is_a_scale():
    assert build_instances(parse_specs(edit(SOFTMAX, "scale: 0.125", "scale: -0.5"), FILE))


def test_layernorm_does_not_write_fp8():
    lines = errors(edit(edit(FP8, "op: rmsnorm", "op: layernorm"), "  quant: per_token\n", ""))
    assert lines == ["specs/x.yaml:3:30: dtypes.out=fp8_e4m3: layernorm takes fp16, bf16 or fp32 [dtype_supported]"]
    assert errors(edit(ADD, "out: bf16", "out: fp8_e4m3"))[0] == (
        "specs/x.yaml:4:30: dtypes.out=fp8_e4m3: an fp8 e4m3 output needs its per-row scale: set quant: per_token "
        "[quant_dtype]")


@pytest.mark.parametrize(("text", "field"), [(ADD, "residual=True"), (FP8, "quant=per_token"),
                                              (SOFTMAX, "scale=0.125"), (SOFTMAX, "mask=full")])
def test_fused_options_are_refused_beside_split_and_peel(text, field):
    streamed = edit(text, "variant: registers", "variant: streamed") if "registers" in text else \
        edit(text, "variant: online", "variant: two_pass")
    split = edit(streamed, "  tail: none\n", "  tail: none\n  split: 4\n")
    assert any(e.endswith(f"{field}: not with split: a split row's second kernel writes from the first one's "
                          "partials alone [fused_combination]") for e in errors(split)), errors(split)
    peel = edit(edit(streamed, "tail: none", "tail: specialized\n  peel: true"), "cols: 8192", "cols: 50257")
    assert any(e.endswith(f"{field}: not with peel: peeled rows are addressed through flat views of X and Y alone "
                          "[fused_combination]") for e in errors(peel)), errors(peel)


def test_the_fused_combination_error_names_the_fused_field():
    text = edit(edit(ADD, "variant: registers", "variant: streamed"), "  tail: none\n", "  tail: none\n  split: 4\n")
    assert errors(text) == [
        ("specs/x.yaml:3:13: residual=True: not with split: a split row's second kernel writes from the first one's "
        "partials alone [fused_combination]")]


# ---- lowering ------------------------------------------------------------------------------------------

def _source(text: str, target: str, shape=(4, 8192)) -> str:
    f = _files(text)[target]
    return lower(f, shape, f.instance.target).source


def _vector(tensor: str) -> re.Pattern:
    """A 16-byte access of `tensor` (a load or a store: CUDA uint4, HIP uint4 alike)."""
    return re.compile(rf"\*\(uint4\*\)\({tensor} \+ ")


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_the_residual_is_read_once_and_the_sum_written_once(target):
    # 8192 columns = 4 chunks of 2048: registers -- X and R loaded once per chunk, S stored once per chunk and
    # never read back; streamed rmsnorm -- X and R read in the first (rolled) pass, S written there and read back
    # by the second; layernorm streamed reads S back in its second and third passes
    held = _source(ADD, target)
    assert [len(_vector(t).findall(held)) for t in ("X", "R", "S")] == [4, 4, 4]
    assert "S + " in held and not re.search(r"= \*\(uint4\*\)\(S \+ ", held)
    streamed = _source(edit(ADD, "variant: registers", "variant: streamed"), target)
    assert [len(_vector(t).findall(streamed)) for t in ("X", "R", "S")] == [1, 1, 2]
    assert len(re.findall(r"= \*\(uint4\*\)\(S \+ ", streamed)) == 1  # the second pass's load
    layer = _source(edit(edit(ADD, "op: rmsnorm", "op: layernorm"), "variant: registers", "variant: streamed"), target)
    assert len(re.findall(r"= \*\(uint4\*\)\(S \+ ", layer)) == 2
    assert "(B + " in layer


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_the_fp8_rows_are_stored_8_bytes_a_thread_and_the_scale_once_a_row(target):
    src = _source(FP8, target)
    assert len(re.findall(r"\*\(fp8_e4_8_t\*\)\(Y \+ ", src)) == 4  # 8 fp8 = 8 bytes a thread, each chunk
    assert len(re.findall(r"SC\[", src)) == 1
    assert src.count("warp_reduce_max") == 1 and src.count("warp_reduce_sum") == 1
    if target == "sm_90":  # the cast saturates; the clamp before it keeps the row's largest element in range
        assert "__NV_SATFINITE, __NV_E4M3" in src


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_the_mask_is_read_with_x_and_the_broadcast_mask_by_column_alone(target):
    full = _source(SOFTMAX, target)
    assert len(_vector("MK").findall(full)) == len(_vector("X").findall(full)) == 4
    bcast = _source(edit(SOFTMAX, "mask: full", "mask: broadcast"), target)
    assert len(_vector("MK").findall(bcast)) == 4
    mk = [line for line in bcast.splitlines() if "(MK + " in line]
    assert mk and not any("blockIdx.x" in m for m in mk), mk  # the same mask row for every row
    assert all("blockIdx.x" in line for line in full.splitlines() if "(MK + " in line)
    two_pass = _source(edit(SOFTMAX, "variant: online", "variant: two_pass"), target)
    assert len(_vector("MK").findall(two_pass)) == 3  # each pass's logits read the mask with X


# ---- the numerics contract for several outputs --------------------------------------------------------

def test_outputs_and_tolerances_name_every_output():
    fam = family(FILES[("rmsnorm_bf16_add_fp8", "sm_90")].instance).numerics
    inst = FILES[("rmsnorm_bf16_add_fp8", "sm_90")].instance
    outs = fam.output_list(inst, (8, 4096))
    assert [(o.name, o.shape, o.dtype) for o in outs] == [
        ("S", (8, 4096), "bf16"), ("Y", (8, 4096), "fp8_e4m3"), ("SC", (8, 1), "fp32")]
    tols = fam.tolerance_list(inst, (8, 4096), Target.SM_90)
    assert [(t.u_out, t.eta_out) for t in tols] == [
        (UNIT_ROUNDOFF[DType.BF16], SUBNORMAL_ROUNDOFF[DType.BF16]),
        (UNIT_ROUNDOFF[DType.FP8_E4M3], SUBNORMAL_ROUNDOFF[DType.FP8_E4M3]),
        (UNIT_ROUNDOFF[DType.FP32], SUBNORMAL_ROUNDOFF[DType.FP32])]
    tensors = fam.alloc_outputs(inst, (8, 4096), Target.SM_90, fill=float("nan"), device="cpu")
    assert [(tuple(t.shape), t.dtype) for t in tensors] == [
        ((8, 4096), torch.bfloat16), ((8, 4096), torch.float8_e4m3fn), ((8, 1), torch.float32)]
    assert all(bool(t.float().isnan().all()) for t in tensors)
    plain = FILES[("softmax_fp16_scale_mask", "sm_90")].instance  # one output: the default
    assert [o.name for o in family(plain).numerics.output_list(plain, (2, 4096))] == ["out"]


@pytest.mark.parametrize("name", ["rmsnorm_bf16_add", "layernorm_fp16_add", "rmsnorm_bf16_add_fp8",
                                  "softmax_fp16_scale_mask", "softmax_bf16_scale_bcast"])
def test_launch_passes_the_inputs_then_every_output_in_the_kernels_order(name):
    f = FILES[(name, "sm_90")]
    inst, fam = f.instance, family(f.instance).numerics
    case = fam.make_inputs(inst, (4, 4096), seed=0, kind="normal", device="cpu", run_target=inst.target)
    outs = tuple(o.name for o in fam.output_list(inst, (4, 4096)))
    seen = []
    fam.launch(lambda *args: seen.extend(args), case, *outs)
    params = re.search(rf"def {f.uri}\((.*)\):", f.text).group(1)
    names = [p.split(":")[0].strip() for p in params.split(", ") if ":" in p]
    by_name = {"X": case.X, "R": getattr(case, "R", None), "W": getattr(case, "W", None),
               "B": getattr(case, "B", None), "MK": getattr(case, "MK", None)}
    expected = [by_name.get(n, n if n in outs else "out") for n in names]
    assert len(seen) == len(expected) and all(a is b or a == b for a, b in zip(seen, expected, strict=True)), names


@pytest.mark.parametrize("name", ["rmsnorm_bf16_add", "rmsnorm_bf16_add_fp8"])
def test_chunks_cover_every_output_once_and_agree_with_the_whole_check(name):
    inst = FILES[(name, "sm_90")].instance
    fam = family(inst).numerics
    shape, budget = (13, 4096), 3 * 4096
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    outs = fam.output_list(inst, shape)
    seen = [torch.zeros(o.shape, dtype=torch.int32) for o in outs]
    chunks = list(fam.chunks(inst, case, budget))
    for c in chunks:
        seen[c.output][c.index] += 1
        assert c.ref.shape == seen[c.output][c.index].shape == c.mag.shape
        assert all(w.shape == c.ref.shape for w in c.controls.values())
    assert all(bool((s == 1).all()) for s in seen)
    assert len({repr(c.index) for c in chunks}) > 1  # several blocks
    whole = check_output(inst, shape, lambda case, refs: refs)
    parts = check_output(inst, shape, lambda case, refs: refs, max_elements=budget)
    assert whole[0] == parts[0] == "verified" and whole[2] == parts[2]
    assert set(whole[1].outputs) == {o.name for o in outs}


def test_an_error_in_one_output_alone_fails_and_is_reported_for_that_output():
    inst = FILES[("rmsnorm_bf16_add", "sm_90")].instance

    def wrong_sum(case, refs):
        s, y = (r.clone() for r in refs)
        s[2, 7] += 0.05 * s.abs().max()
        return s, y

    status, cmp, _ = check_output(inst, (4, 4096), wrong_sum)
    assert status == "failed"
    assert cmp.outputs["S"]["mismatch_ratio"] > 0 and cmp.outputs["Y"]["mismatch_ratio"] == 0


def test_the_positive_control_is_checked_for_every_output():
    # a tolerance of the sum without its rounding term rejects the correctly rounded sum: an error of the check
    inst = FILES[("rmsnorm_bf16_add", "sm_90")].instance
    fam = family(inst).numerics
    shape = (4, 4096)
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    chunks = list(fam.chunks(inst, case, 1 << 30))
    tols = list(fam.tolerance_list(inst, shape, inst.target))
    outs = tuple(c.ref.to(torch.bfloat16) for c in sorted(chunks, key=lambda c: c.output))
    assert judge_chunks(outs, chunks, tols)[0] == "verified"
    tols[0] = replace(tols[0], u_out=0.0, eta_out=0.0)
    status, cmp, _ = judge_chunks(outs, chunks, tols)
    assert status == "error" and cmp.rounded_reference_rejected > 0


def test_the_fnuz_fp8_tolerance_accepts_the_correctly_rounded_reference():
    inst = FILES[("rmsnorm_bf16_fp8", "gfx942")].instance
    tol = family(inst).numerics.tolerance_list(inst, inst.shapes[0], Target.GFX942)[0]
    mags = torch.logspace(-44, torch.log10(torch.tensor(inst.fp8_max)).item(), 20001, dtype=torch.float64).float()
    ref = torch.cat([mags, -mags, torch.zeros(1)])
    err = (ref.to(torch_dtype("fp8_e4m3", Target.GFX942)).float() - ref).abs()
    assert torch_dtype("fp8_e4m3", Target.GFX942) == torch.float8_e4m3fnuz
    assert bool((err <= tol.bound(ref, torch.zeros_like(ref))).all())


# ---- the checker, on the CPU -------------------------------------------------------------------------

def _shapes(inst):
    return [(min(inst.shapes[0][0], 16), inst.shapes[0][1]), *derived_shapes(inst)]


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
@pytest.mark.parametrize("name", FUSED)
def test_the_rounded_reference_verifies_and_every_control_is_rejected(name, target, kind):
    inst = FILES[(name, target)].instance
    for shape in _shapes(inst):
        for seed in (0, 1):
            status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind, seed=seed)
            assert status == "verified", (shape, seed, cmp, controls)
            # a full mask's row-0 control says nothing on a tensor of one row (reported n/a, not vacuous)
            left = {k: v for k, v in controls.items() if v != "rejected"}
            assert set(left) <= ({"mask_row0"} if shape[0] == 1 else set()), (shape, seed, left)


def _kernel_rms(inst, x, w):
    """The kernel's arithmetic for rmsnorm, in fp32: each thread's sum of squares over its VEC columns of every chunk,
    then the 32-lane groups and the groups summed in turn; y = x * rstd * w; per_token: amax = max|x * w| * rstd."""
    rows, n = x.shape
    lanes = inst.threads * inst.vector
    per_thread = x.square().reshape(rows, -1, inst.threads, inst.vector).sum(-1).sum(1)  # [rows, threads]
    s = per_thread.reshape(rows, -1, 32).sum(-1).cumsum(-1)[:, -1:]
    assert n % lanes == 0
    rstd = 1.0 / torch.sqrt(s * (1.0 / n) + inst.eps)
    y = x * rstd * w
    if not inst.per_token:
        return y, None
    scale = torch.clamp((x * w).abs().amax(-1, keepdim=True) * rstd / inst.fp8_max, min=MIN_SCALE)
    return torch.clamp(y * (1.0 / scale), -inst.fp8_max, inst.fp8_max), scale


@pytest.mark.parametrize("name", ["rmsnorm_bf16_add", "rmsnorm_fp16_add", "rmsnorm_bf16_fp8", "rmsnorm_bf16_add_fp8"])
@pytest.mark.parametrize("kind", ["normal", "wide"])
def test_the_kernels_own_arithmetic_verifies(name, kind):
    inst = FILES[(name, "sm_90")].instance
    shape = (16, inst.shapes[0][1])

    def kernel(case, refs):
        x = case.normed32 if inst.residual else case.X32  # the sum as stored: X + R in fp32, rounded once
        y, scale = _kernel_rms(inst, x, case.W32)
        outs = ((x,) if inst.residual else ()) + (y,) + ((scale,) if inst.per_token else ())
        return outs

    status, cmp, controls = check_output(inst, shape, kernel, kind=kind)
    assert status == "verified", (cmp, controls)


NORM_BUGS = ["no_residual", "sum_unwritten", "sum_truncated", "no_weight", "sum_not_normalised"]
FP8_BUGS = ["scale_times_1.01", "scale_of_bf16_y", "q_unscaled", "scale_unwritten"]


@pytest.mark.parametrize("bug", NORM_BUGS)
@pytest.mark.parametrize("name", ["rmsnorm_bf16_add", "rmsnorm_fp16_add"])
def test_residual_bugs_fail(name, bug):
    inst = FILES[(name, "sm_90")].instance
    eps, n = inst.eps, 4096

    def buggy(case, refs):
        s, y = (r.clone() for r in refs)
        x, w = case.X32, case.W32
        if bug == "no_residual":  # R never read
            s, y = x, torch.nn.functional.rms_norm(x, (n,), w, eps)
        elif bug == "sum_unwritten":
            s = torch.full_like(s, float("nan"))
        elif bug == "sum_truncated":  # the fp32 sum's low bits chopped on the store
            s = truncated(case.X.float() + case.R.float(), case.X.dtype)
        elif bug == "no_weight":
            y = torch.nn.functional.rms_norm(case.normed32, (n,), None, eps)
        elif bug == "sum_not_normalised":  # Y from X alone, S right
            y = torch.nn.functional.rms_norm(x, (n,), w, eps)
        return s, y

    status, cmp, _ = check_output(inst, (8, n), buggy, kind="wide")
    assert status == "failed" and cmp.mismatch_ratio > 0, (bug, cmp)


@pytest.mark.parametrize("bug", ["no_residual", "no_bias", "sum_unwritten"])
def test_layernorm_residual_bugs_fail(bug):
    inst = FILES[("layernorm_bf16_add", "sm_90")].instance
    n = 4096

    def buggy(case, refs):
        s, y = (r.clone() for r in refs)
        if bug == "no_residual":
            s, y = case.X32, normalised_reference(inst, replace(case, R=None))[0]
        elif bug == "no_bias":
            y = torch.nn.functional.layer_norm(case.normed32, (n,), case.W32, None, inst.eps)
        elif bug == "sum_unwritten":
            s = torch.full_like(s, float("nan"))
        return s, y

    status, cmp, _ = check_output(inst, (8, n), buggy, kind="wide")
    assert status == "failed" and cmp.mismatch_ratio > 0, (bug, cmp)


@pytest.mark.parametrize("bug", FP8_BUGS)
@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_fp8_scale_bugs_fail(target, bug):
    inst = FILES[("rmsnorm_bf16_fp8", target)].instance

    def buggy(case, refs):
        q, scale = (r.clone() for r in refs)
        y = normalised_reference(inst, case)[0]
        if bug == "scale_times_1.01":  # the scale 1 % off, Q consistent with it
            scale = scale * 1.01
            q = torch.clamp(y / scale, -inst.fp8_max, inst.fp8_max)
        elif bug == "scale_of_bf16_y":  # amax taken after rounding Y to the input dtype (the unfused sequence's)
            q, scale = quantised(inst, y.to(torch.bfloat16).float())
        elif bug == "q_unscaled":
            q = torch.clamp(y, -inst.fp8_max, inst.fp8_max)
        elif bug == "scale_unwritten":
            scale = torch.full_like(scale, float("nan"))
        return q, scale

    status, cmp, _ = check_output(inst, (8, 4096), buggy)
    assert status == "failed" and cmp.mismatch_ratio > 0, (bug, cmp)


SOFTMAX_BUGS = ["no_scale", "scale_squared", "mask_ignored", "mask_scaled", "mask_sign"]


@pytest.mark.parametrize("bug", SOFTMAX_BUGS)
@pytest.mark.parametrize("name", ["softmax_fp16_scale_mask", "softmax_bf16_scale_bcast"])
def test_softmax_scale_and_mask_bugs_fail(name, bug):
    inst = FILES[(name, "sm_90")].instance

    def buggy(case, ref):
        x, m, s = case.X32, case.MK.float(), inst.scale
        z = {"no_scale": x + m, "scale_squared": x * s * s + m, "mask_ignored": x * s,
             "mask_scaled": (x + m) * s, "mask_sign": x * s - torch.where(torch.isinf(m), -m, m)}[bug]
        return torch.softmax(z, dim=-1)

    status, cmp, _ = check_output(inst, (8, 4096), buggy, kind="wide")
    assert status == "failed" and cmp.mismatch_ratio > 0, (bug, cmp)


@pytest.mark.parametrize("name", ["softmax_fp16_scale_mask", "softmax_bf16_scale_bcast"])
def test_softmax_with_the_kernels_fused_logit_verifies(name):
    # the kernel may contract x * scale + mask into one fma (one rounding, not two): inside the model
    inst = FILES[(name, "sm_90")].instance

    def fma(case, ref):
        x, m = case.X32.double(), case.MK.double()
        z = (x * inst.scale + m).float()  # one rounding of the exact x * scale + mask
        return torch.softmax(z, dim=-1)

    for kind in ("normal", "wide"):
        status, cmp, controls = check_output(inst, (8, 4096), fma, kind=kind)
        assert status == "verified", (kind, cmp, controls)


def test_a_row_masked_out_entirely_is_nan_as_in_torch():
    inst = FILES[("softmax_fp16_scale_mask", "sm_90")].instance
    case = family(inst).numerics.make_inputs(inst, (4, 4096), seed=0, kind="normal", device="cpu",
                                             run_target=inst.target)
    assert bool(torch.isfinite(case.MK[:, 0]).all()) and bool(torch.isinf(case.MK).any())  # inputs never do it
    z = replace(case, MK=torch.full_like(case.MK, float("-inf"))).Z32
    assert bool(torch.softmax(z, dim=-1).isnan().all())


# ---- benchmarks ----------------------------------------------------------------------------------------

def test_byte_formulas_count_what_the_kernel_and_the_unfused_sequence_move():
    fam = family(FILES[("rmsnorm_bf16_add", "sm_90")].instance).numerics
    rows, cols = 8192, 4096
    n = rows * cols
    add = FILES[("rmsnorm_bf16_add", "sm_90")].instance
    assert fam.bytes(add, (rows, cols)) == 2 * n * 2 + 2 * n * 2 + cols * 2  # X, R read; S, Y written; W
    assert fam.baseline_bytes(add, (rows, cols)) == {"eager": 3 * n * 2 + 2 * n * 2 + cols * 2}  # add, then norm
    layer = FILES[("layernorm_bf16_add", "sm_90")].instance
    assert fam.bytes(layer, (rows, cols)) == 4 * n * 2 + 2 * cols * 2
    fp8 = FILES[("rmsnorm_bf16_fp8", "sm_90")].instance
    assert fam.bytes(fp8, (rows, cols)) == n * 2 + n * 1 + cols * 2 + 4 * rows  # X; Q (1 byte); W; SC
    assert fam.baseline_bytes(fp8, (rows, cols))["eager"] > 4 * fam.bytes(fp8, (rows, cols))
    sm = FILES[("softmax_fp16_scale_mask", "sm_90")].instance
    bc = FILES[("softmax_bf16_scale_bcast", "sm_90")].instance
    sfam = family(sm).numerics
    assert sfam.bytes(sm, (rows, cols)) == 3 * n * 2  # X and the mask read, Y written
    assert sfam.bytes(bc, (rows, cols)) == 2 * n * 2 + cols * 2
    assert sfam.baseline_bytes(sm, (rows, cols)) == {"eager": (2 + 2 + 3) * n * 2}  # * scale, + mask, softmax
    plain = next(f.instance for f in hand_files() if f.instance.name == "rmsnorm_bf16")
    assert fam.baseline_bytes(plain, (rows, cols)) == {}


@pytest.mark.parametrize("name", ["rmsnorm_bf16_add", "layernorm_fp16_add"])
def test_the_unfused_eager_sequence_is_what_the_reference_composes(name):
    # the eager baseline (on the CPU) computes what the kernel is checked against: it verifies
    inst = FILES[(name, "sm_90")].instance
    fam = family(inst).numerics

    def eager(case, refs):
        s, y = fam.baselines(inst, case, case.X.dtype)["eager"]()
        return s, y

    status, cmp, controls = check_output(inst, (8, 4096), eager)
    assert status == "verified", (cmp, controls)


def test_the_fused_seeds_render_their_fused_literals():
    sm = FILES[("softmax_fp16_scale_mask", "sm_90")]
    assert "SCALE = 0.08838834764831845" in sm.text and "MK: T.Tensor((M, N), IN_DTYPE)" in sm.text
    assert "MK: T.Tensor((N,), IN_DTYPE)" in FILES[("softmax_bf16_scale_bcast", "sm_90")].text
    both = FILES[("rmsnorm_bf16_add_fp8", "gfx942")]
    assert ("X: T.Tensor((M, N), IN_DTYPE), R: T.Tensor((M, N), IN_DTYPE), W: T.Tensor((N,), IN_DTYPE), "
            "S: T.Tensor((M, N), IN_DTYPE), Y: T.Tensor((M, N), OUT_DTYPE), SC: T.Tensor((M, 1), ACCUM_DTYPE)") in both.text
    assert render(both.instance).text == both.text


@pytest.mark.parametrize("name", ["layernorm_fp16_add", "rmsnorm_bf16_add"])
def test_the_rounding_controls_are_judged_only_where_they_differ_at_enough_elements(name):
    """A residual kernel at a derived edge shape of one element (wide inputs, draw 1: an H100 verify run found
    layernorm_fp16_add's sum_truncated within the tolerance there -- one element that truncation moved by less than
    u*|S|) verifies, the rounding controls left out; at a row of 4096 both are judged and rejected."""
    inst = FILES[(name, "sm_90")].instance
    status, _, controls = check_output(inst, (1, 1), lambda case, refs: refs, kind="wide", seed=1)
    assert status == "verified" and "sum_truncated" not in controls and "sum_unrounded" not in controls, controls
    status, _, controls = check_output(inst, (2, 4096), lambda case, refs: refs, kind="wide", seed=1)
    assert status == "verified", controls
    assert controls["sum_truncated"] == controls["sum_unrounded"] == "rejected", controls
