"""GEMM epilogue ops (scale, bias, activation, residual) and the gated MLP (specs/fused_gemm.yaml): the spec and its
errors, names (a plain GEMM's name unchanged), the kernel arguments and the launch, lowering for sm_90, gfx942 and
gfx950, and the checker on the CPU: the rounded reference and an emulation of the kernel's own arithmetic verify,
every negative control -- a dropped bias, a wrong activation, a missing residual, a swapped gate and up -- is
rejected."""

from __future__ import annotations

import re

import pytest
import torch
from numcheck import check_output
from seeds import hand_files
from spectext import FILE, edit, errors

from codegen.core.hardware import Target
from codegen.families import family
from codegen.families.gemm.numerics import FusedMagnitude, activation
from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs
from codegen.targets import torch_dtype

OPS = """\
- name: g
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16}
  layout: nt
  shapes:
    - {m: 200, n: 264, k: 256}
  epilogue_ops:
    scale: 0.5
    bias: {dtype: fp16}
    activation: silu
    residual: {beta: 0.5}
  tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}
  pipeline: {stages: 2}
  tail: predicated
  targets: [gfx942, gfx950, sm_90]
"""
GATE = edit(OPS, """  epilogue_ops:
    scale: 0.5
    bias: {dtype: fp16}
    activation: silu
    residual: {beta: 0.5}
""", "  gate: swiglu\n")
PLAIN = edit(OPS, """  epilogue_ops:
    scale: 0.5
    bias: {dtype: fp16}
    activation: silu
    residual: {beta: 0.5}
""", "")
SEEDS = ("gemm_bf16_bias_gelu", "gemm_bf16_bias_silu", "gemm_bf16_down_residual", "gemm_bf16_swiglu")
FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files() if f.instance.name in SEEDS}


def _files(text: str):
    return {f.instance.target.value: f for f in render_all(build_instances(parse_specs(text, FILE)))}


def test_every_seed_is_generated_for_each_target():
    assert sorted(FILES) == sorted((n, t) for n in SEEDS for t in ("gfx942", "gfx950", "sm_90"))


def test_the_ops_are_named_and_part_of_the_identity_and_a_plain_gemm_is_unchanged():
    plain, ops, gate = _files(PLAIN)["sm_90"], _files(OPS)["sm_90"], _files(GATE)["sm_90"]
    assert "_scaled_bias_silu_res_" in ops.uri and "_swiglu_" in gate.uri
    assert '"fused"' not in plain.instance.canonical() and '"fused"' in ops.instance.canonical()
    assert len({plain.uri, ops.uri, gate.uri}) == 3
    relu = _files(edit(OPS, "activation: silu", "activation: relu"))["sm_90"]
    assert relu.uri != ops.uri and "_relu_" in relu.uri


@pytest.mark.parametrize(("old", "new", "message"), [
    ("scale: 0.5", "scale: .inf", "epilogue_ops.scale"),
    ("bias: {dtype: fp16}", "bias: {dtype: fp8_e4m3}", "[epilogue_ops_dtype]"),
    ("activation: silu", "activation: tanh", "epilogue_ops.activation"),
    ("residual: {beta: 0.5}", "residual: {beta: .nan}", "epilogue_ops.residual.beta"),
])
def test_op_errors_name_the_field(old, new, message):
    errs = errors(edit(OPS, old, new))  # a rule of each target, or the spec's one field error
    assert errs and all(message in e and e.startswith("specs/x.yaml:") for e in errs), errs


def test_an_empty_epilogue_ops_block_is_refused():
    text = PLAIN.replace("  tiling:", "  epilogue_ops: {}\n  tiling:")
    assert any("[epilogue_ops_empty]" in e for e in errors(text))


@pytest.mark.parametrize(("spec", "field", "value"), [
    (OPS, "split_k", "2"), (GATE, "split_k", "2"), (GATE, "staging", "padded"),
])
def test_unsupported_combinations_are_refused(spec, field, value):
    text = spec.replace("  tail: predicated", f"  tail: predicated\n  {field}: {value}")
    errs = errors(text)
    assert any("[unsupported_combination]" in e for e in errs), errs


def test_the_gate_counts_two_b_tiles_a_stage_against_shared_memory():
    big = edit(GATE, "tiling: {block_m: 64, block_n: 64, block_k: 32, threads: 128}",
               "tiling: {block_m: 128, block_n: 256, block_k: 64, threads: 256}")
    big = edit(big, "stages: 2", "stages: 3")
    errs = errors(edit(big, "targets: [gfx942, gfx950, sm_90]", "targets: [sm_90]"))
    assert any("[lds_budget]" in e and "gate: two B tiles a stage" in e for e in errs), errs
    [seed] = [f for (n, t), f in FILES.items() if n == "gemm_bf16_swiglu" and t == "sm_90"]
    assert seed.instance.lds_bytes == 4 * (128 * 64 * 2 + 2 * 128 * 64 * 2)


def test_the_kernel_takes_its_inputs_after_b_in_the_documented_order_and_launch_passes_them():
    for text, names in ((OPS, ["A", "B", "Bias", "Residual", "C"]), (GATE, ["A", "B", "B_UP", "C"])):
        f = _files(text)["sm_90"]
        params = re.search(rf"def {f.uri}\((.*?)\):", f.text, re.DOTALL).group(1)
        assert re.findall(r"(\w+): T\.Tensor", params) == names
        inst = f.instance
        case = family(inst).numerics.make_inputs(inst, (8, 16, 32), seed=0, kind="normal", device="cpu",
                                                run_target=inst.target)
        seen = []
        family(inst).numerics.launch(lambda *args, seen=seen: seen.extend(args), case, "OUT")
        assert len(seen) == len(names) and seen[-1] == "OUT"
        assert tuple(seen[2:-1]) == case.inputs


def test_the_plain_gemm_op_never_dispatches_to_a_fused_kernel():
    from codegen.ops.adapters import GemmAdapter

    assert GemmAdapter().want_of(_files(OPS)["sm_90"].instance) is None
    assert GemmAdapter().want_of(_files(PLAIN)["sm_90"].instance) is not None


# ---- lowering -----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm_90", "gfx942", "gfx950"])
@pytest.mark.parametrize("name", SEEDS)
def test_every_seed_lowers(name, target):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = FILES[(name, target)]
    src = lower(f, (256, 512, 512), f.instance.target).source
    assert "__global__" in src
    if f.instance.fused.bias_dtype:
        assert "Bias" in src
    if f.instance.fused.residual:
        assert "Residual" in src
    if f.instance.gated:
        assert "B_UP" in src


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("text", [OPS, GATE], ids=["ops", "gate"])
def test_the_ragged_kernels_lower_with_the_ops_in_the_device_source(text, target):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = _files(text)[target]
    src = lower(f, (200, 264, 256), f.instance.target).source
    assert "exp" in src  # silu's exp
    for tensor in f.instance.input_names():
        assert tensor in src, tensor


# ---- the checker, on the CPU --------------------------------------------------------------------------

CONTROLS = {"ops": {"zeros", "wrong_operation", "dropped_k_tile", "dropped_scale", "dropped_bias", "wrong_activation",
                    "dropped_residual", "unscaled_residual"},
            "gate": {"zeros", "wrong_operation", "dropped_k_tile", "wrong_activation", "swapped_gate_up", "ungated"}}


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("text", [OPS, GATE], ids=["ops", "gate"])
def test_the_rounded_reference_verifies_and_every_fused_control_is_rejected(text, kind):
    inst = _files(text)["sm_90"].instance
    for shape in [(200, 264, 256), (1, 1, 1), (65, 63, 4096)]:
        status, cmp, controls = check_output(inst, shape, lambda case, ref: ref, kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls) == CONTROLS["gate" if inst.gated else "ops"]
        assert all(v == "rejected" for v in controls.values()) or shape == (1, 1, 1), (shape, controls)
        # chunked: blocks of C whose K-deep operand slices fit the budget (8 x 8 blocks at K = 4096, 16 x 16 at 256)
        chunked, _, _ = check_output(inst, shape, lambda case, ref: ref, kind=kind,
                                     max_elements=max(4096, 8 * shape[2]))
        assert chunked == "verified"


def _emulated(inst, case, *, act_name=None, drop=()):
    """The kernel's arithmetic on the CPU: the stored operands' products summed in fp32 in K tiles of 32 (another order
    than the reference's), the ops in fp32 one rounding each, silu as x / (1 + exp(-x)), one rounding to bf16."""
    f = inst.fused
    a, b = case.A32, case.B32

    def product(w):
        acc = torch.zeros(a.shape[0], w.shape[1])
        for k0 in range(0, a.shape[1], 32):
            acc = acc + a[:, k0:k0 + 32] @ w[k0:k0 + 32]
        return acc

    act_name = act_name or f.activation

    def act(x):
        return x / (1.0 + torch.exp(-x)) if act_name == "silu" else activation(act_name, x)

    g = product(b)
    if f.gate is not None:
        up = product(case.B_UP32)
        return (up * act(g) if "swap" not in drop else g * act(up)).to(torch.bfloat16)
    y = g * f.scale
    if "bias" not in drop:
        y = y + case.bias.float()
    z = act(y)
    if "residual" not in drop:
        z = z + f.beta * case.residual.float()
    return z.to(torch.bfloat16)


@pytest.mark.parametrize("kind", ["normal", "wide"])
@pytest.mark.parametrize("text", [OPS, GATE], ids=["ops", "gate"])
def test_the_kernels_own_arithmetic_verifies(text, kind):
    inst = _files(text)["sm_90"].instance
    status, cmp, _ = check_output(inst, (96, 80, 1024), lambda case, ref: _emulated(inst, case), kind=kind)
    assert status == "verified", cmp


@pytest.mark.parametrize(("text", "bug"), [
    (OPS, {"drop": ("bias",)}), (OPS, {"act_name": "relu"}), (OPS, {"drop": ("residual",)}),
    (GATE, {"drop": ("swap",)}), (GATE, {"act_name": "relu"}),
], ids=["dropped_bias", "relu_for_silu", "missing_residual", "swapped_gate_up", "gate_relu_for_silu"])
def test_each_fused_bug_fails(text, bug):
    inst = _files(text)["sm_90"].instance
    status, _, _ = check_output(inst, (96, 80, 1024), lambda case, ref: _emulated(inst, case, **bug))
    assert status == "failed"


def test_the_fused_tolerance_accepts_the_correctly_rounded_reference_without_any_product_error():
    inst = _files(OPS)["sm_90"].instance
    tol = family(inst).numerics.tolerance(inst, inst.shapes[0], Target.SM_90)
    mags = torch.logspace(-44, 4, 20001, dtype=torch.float64).float()
    ref = torch.cat([mags, -mags, torch.zeros(1)])
    out_dtype = torch_dtype("bf16", Target.SM_90)
    err = (ref.to(out_dtype).float() - ref).abs()
    zero = torch.zeros_like(ref)
    assert bool((err <= tol.bound(ref, FusedMagnitude(model=zero))).all())
    assert bool((err <= tol.bound(ref, zero)).all())
    assert "fused scale+bias+activation+residual" in tol.describe()


def test_byte_formulas_count_the_fused_inputs_and_the_unfused_sequence():
    num = family(_files(OPS)["sm_90"].instance).numerics
    ops, gate, plain = (_files(t)["sm_90"].instance for t in (OPS, GATE, PLAIN))
    m, n, k = 64, 128, 256
    assert num.bytes(ops, (m, n, k)) == num.bytes(plain, (m, n, k)) + n * 2 + m * n * 2
    assert num.bytes(gate, (m, n, k)) == num.bytes(plain, (m, n, k)) + n * k * 2
    assert num.flops(gate, (m, n, k)) == 2 * num.flops(plain, (m, n, k))
    eager, compiled = num.baseline_bytes(gate, (m, n, k))["eager"], num.baseline_bytes(gate, (m, n, k))["compile"]
    assert eager > compiled > num.bytes(gate, (m, n, k))
    assert num.baseline_bytes(plain, (m, n, k)) == {}


def test_the_unfused_eager_sequence_is_what_the_reference_composes():
    for text in (OPS, GATE):
        inst = _files(text)["sm_90"].instance
        num = family(inst).numerics

        def eager(case, ref, num=num, inst=inst):
            fns = num.baselines(inst, case, torch.bfloat16)
            assert set(fns) == {"eager", "compile"}
            return fns["eager"]().float()

        # torch's own bf16 sequence rounds after the GEMM and after each op: close to the reference, not exact
        case = num.make_inputs(inst, (64, 48, 256), seed=0, kind="normal", device="cpu", run_target=inst.target)
        ref, _ = num.reference(inst, case)
        got = eager(case, ref)
        assert got.shape == ref.shape and torch.allclose(got, ref, rtol=0.05, atol=0.05)


# ---- the ops with a K split: split_k_sum fixup, the tile's last split applies them to the sum -------------------

SPLIT_OPS = edit(OPS, "  tail: predicated", "  tail: predicated\n  split_k: 4\n  split_k_sum: fixup")


def _split_emulated(inst, case, *, ops_on_partials=False):
    """The fixup's arithmetic: each split's fp32 partial over its run of K, summed in order, then the ops once;
    ops_on_partials: the bug of applying them to every partial before the sum."""
    from codegen.families.gemm.rules import split_tiles

    f, a, b = inst.fused, case.A32, case.B32
    run = split_tiles(a.shape[1], inst.block_k, inst.split_k) * inst.block_k

    def ops(y):
        y = y * f.scale + case.bias.float()
        return y / (1.0 + torch.exp(-y)) + f.beta * case.residual.float()

    parts = [a[:, s * run:(s + 1) * run] @ b[s * run:(s + 1) * run] for s in range(inst.split_k)]
    if ops_on_partials:
        return sum(ops(p) for p in parts).to(torch.bfloat16)
    acc = torch.zeros_like(parts[0])
    for p in parts:
        acc = acc + p
    return ops(acc).to(torch.bfloat16)


def test_the_ops_take_a_split_with_the_fixup_sum_only():
    assert any("[unsupported_combination]" in e and "use split_k_sum fixup" in e
               for e in errors(edit(SPLIT_OPS, "  split_k_sum: fixup\n", "")))
    build_instances(parse_specs(SPLIT_OPS, FILE))  # valid on every target it names
    assert any("[unsupported_combination]" in e for e in errors(edit(GATE, "  tail: predicated", "  tail: predicated\n"
                                                                      "  split_k: 4\n  split_k_sum: fixup")))


def test_the_fixup_applies_the_ops_once_to_the_sum_never_to_a_partial():
    for target, f in _files(SPLIT_OPS).items():
        if target == "gfx950":
            continue
        body = f.text.split("with T.Kernel(")[1]
        partial, last = body.split("if arrived[0] == SPLIT_K - 1:")
        assert "SCALE" not in partial and "Residual[" not in partial and "_silu(" not in partial
        assert last.index("for s in T.serial(SPLIT_K):") < last.index("_silu(") < last.index("T.copy(C_local, C[")


@pytest.mark.parametrize("kind", ["normal", "wide"])
def test_a_split_fused_kernel_verifies_with_every_control_rejected_and_ops_on_partials_fail(kind):
    inst = _files(SPLIT_OPS)["sm_90"].instance
    for shape in [(200, 264, 256), (65, 63, 4096)]:
        status, cmp, controls = check_output(inst, shape, lambda case, ref: _split_emulated(inst, case), kind=kind)
        assert status == "verified", (shape, cmp, controls)
        assert set(controls) == CONTROLS["ops"] | {"dropped_split"} and all(v == "rejected" for v in controls.values())
        bad, _, _ = check_output(inst, shape, lambda case, ref: _split_emulated(inst, case, ops_on_partials=True),
                                 kind=kind)
        assert bad == "failed", shape


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_a_split_fused_kernel_lowers_in_one_launch(target):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = _files(SPLIT_OPS)[target]
    src = lower(f, (200, 264, 256), f.instance.target).source
    assert "AtomicAddRet" in src and "exp" in src and "Residual" in src and "Bias" in src
    assert f"{f.uri}_kernel_1" not in src
