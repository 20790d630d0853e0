"""`activation_math` of the fused GEMMs: the activation's exp and division accurate (expf, an IEEE division) or fast
(sm_90: exp2 and rcp.approx). Its rules with the user's coordinates, unchanged names and code at the default, the
fast helpers in the generated module and in the lowered CUDA, and the tolerance's model of them."""

from __future__ import annotations

import math

import pytest
import torch
from spectext import FILE, check_rule_case, edit, errors

from codegen.core.hardware import Target
from codegen.families.gemm.numerics import ACTIVATION_EVAL
from codegen.generate.instance import build_instances
from codegen.generate.lower import lower
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

BASE = """\
- name: t
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16, accumulate: fp32}
  layout: nt
  shapes:
    - {m: 256, n: 256, k: 256}
  epilogue_ops:
    bias: {dtype: bf16}
    activation: silu
  tiling: {block_m: 128, block_n: 128, block_k: 64, threads: 256}
  activation_math: fast
  targets: [gfx942, sm_90]
"""


def files(text: str = BASE):
    return {f.instance.target: f for f in render_all(build_instances(parse_specs(text, FILE)))}


def test_fast_is_sm_90s_and_in_the_name_and_the_default_is_the_kernel_it_was():
    fast = files()
    accurate = files(edit(BASE, "  activation_math: fast\n", ""))
    spelled = files(edit(BASE, "activation_math: fast", "activation_math: accurate"))
    assert {t: f.uri for t, f in accurate.items()} == {t: f.uri for t, f in spelled.items()}
    assert '"activation_math"' not in accurate[Target.SM_90].instance.canonical()  # no field: the names stay
    # gfx942 has no fast reciprocal in TileLang's HIP code: a top-level fast is sm_90's, gfx942 keeps accurate
    assert fast[Target.GFX942].uri == accurate[Target.GFX942].uri
    f = fast[Target.SM_90]
    assert "_bias_silu_fm_sm90_" in f.uri and f.uri != accurate[Target.SM_90].uri
    assert f.instance.metadata(f.uri)["activation_math"] == "fast"
    assert "return x * T.fast_rcp(1.0 + T.exp2(x * -LOG2E))" in f.text and "T.exp(" not in f.text
    assert "return x / (1.0 + T.exp(-x))" in accurate[Target.SM_90].text and "fast_rcp" not in accurate[Target.SM_90].text


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("  activation_math: fast\n", "  overrides:\n    gfx942:\n      activation_math: fast\n",
     ("specs/x.yaml:13:24: overrides.gfx942.activation_math=fast: activation_math fast is the hardware's exp2 and "
     "reciprocal approximations, only for sm_90, not gfx942 [activation_math_target]")),
    ("activation: silu", "activation: relu",
     ("specs/x.yaml:11:20: activation_math=fast: relu has no exponential to approximate: activation_math fast applies "
     "to silu and gelu_tanh (in epilogue_ops or a gate's); use accurate [activation_math_applies]")),
    ("activation: silu", "activation: gelu_erf",
     ("specs/x.yaml:11:20: activation_math=fast: gelu_erf has no exponential to approximate: activation_math fast "
     "applies to silu and gelu_tanh (in epilogue_ops or a gate's); use accurate [activation_math_applies]")),
    ("    activation: silu\n", "",
     ("specs/x.yaml:10:20: activation_math=fast: the kernel has no activation: activation_math fast applies to silu "
     "and gelu_tanh (in epilogue_ops or a gate's); use accurate [activation_math_applies]")),
    ("activation: silu", "activation: gelu_tanh", None),
])
def test_the_rules_name_the_line_and_the_rule(old, new, expected):
    check_rule_case(edit(BASE, old, new), expected)


def test_a_gate_takes_it_too():
    gated = edit(edit(BASE, "  epilogue_ops:\n    bias: {dtype: bf16}\n    activation: silu\n", "  gate: swiglu\n"),
                 "targets: [gfx942, sm_90]", "targets: [sm_90]")
    f = files(gated)[Target.SM_90]
    assert "_swiglu_fm_sm90_" in f.uri and "T.fast_rcp(" in f.text
    tanh = files(edit(gated, "gate: swiglu", "gate: geglu_tanh"))[Target.SM_90]
    assert "GELU_TANH_K2 = -2.302208198144325" in tanh.text and "T.fast_rcp(" in tanh.text
    assert any("[activation_math_applies]" in e for e in errors(edit(gated, "gate: swiglu", "gate: geglu")))


def test_the_lowered_cuda_calls_the_approximations():
    f = files()[Target.SM_90]
    source = lower(f, (256, 256, 256), Target.SM_90).source
    assert "tl::fast_rcp(" in source and "exp2f(" in source and "expf(" not in source.replace("exp2f(", "")


def test_the_fast_evaluation_is_inside_the_modelled_error():
    # the fast helpers' arithmetic, emulated in fp32 (exp2 and 1/x each within their ulps: here rounded exactly,
    # their approximation error of 2 and 1 ulp added as a relative error), against float64: the evaluation error
    # the tolerance models (ACTIVATION_EVAL, relative to |x|) holds with a wide margin for every |x| a kernel meets
    x = torch.cat([torch.linspace(-120.0, 120.0, 200001), torch.logspace(-30, 2, 2001)]).float()
    ulp = 2.0**-23
    for name, k2, cubic in (("silu", -math.log2(math.e), 0.0), ("gelu_tanh", -2.302208198144325, 0.044715)):
        arg = (torch.tensor(k2, dtype=torch.float32) * (x + cubic * x * x * x)).float()
        e = torch.exp2(arg.double()) * (1 + 2 * ulp)
        fast = x.double() * (1 / (1 + e)) * (1 + ulp) * (1 + ulp)
        xd = x.double()
        exact = xd * torch.sigmoid(-(k2 / math.log2(math.e)) * (xd + cubic * xd**3))
        worst = float(((fast - exact).abs() / xd.abs().clamp_min(1e-30)).max())
        assert worst < ACTIVATION_EVAL[name] / 4, (name, worst)
