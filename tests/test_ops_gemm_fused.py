"""The fused GEMM ops on the CPU: linear / gemm with epilogue ops (gemm_epilogue: bias, scale, activation, residual)
and gated_mlp -- dispatch only to the kernels of exactly the call's ops (tests/opsfakes.py computes them in float64),
M buckets with the residual padded, the unfused torch fallbacks, strict mode, the input checks, the custom ops'
fake implementations and torch.compile without graph breaks."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from opsfakes import TorchKernels

import tilegen
from codegen.core.hardware import Target
from codegen.ops import FallbackWarning, NoKernelError, OpsInputError
from codegen.ops.adapters import ADAPTERS, GatedArgs, GemmEpilogueArgs

H200 = "NVIDIA H200"
_TILE = """\
  tiling: {block_m: 16, block_n: 32, block_k: 64, threads: 128}
  pipeline: {stages: 2}
  tail: predicated
  targets: [sm_90]
"""
_NT = """\
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16, accumulate: fp32}
  layout: nt
  shapes:
    - {m: 16, n: 256, k: 128}
"""
SPECS = (f"- name: lin_plain\n{_NT}{_TILE}"
         f"- name: lin_bias_gelu\n{_NT}  epilogue_ops:\n    bias: {{dtype: bf16}}\n    activation: gelu_tanh\n{_TILE}"
         f"- name: lin_scaled_res\n{_NT}  epilogue_ops:\n    scale: 0.5\n    residual: {{beta: 0.25}}\n{_TILE}"
         f"- name: swiglu\n{_NT}  gate: swiglu\n{_TILE}")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused_gemm")
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "ops.yaml").write_text(SPECS, encoding="utf-8")
    return root


def _load(project, **kw):
    return tilegen.load(project, **({"backend": TorchKernels(), "target": Target.SM_90, "device_name": H200} | kw))


@pytest.fixture
def ops(project):
    return _load(project)


def rand(*shape, dtype=torch.bfloat16, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape))) * scale).to(dtype)


def _routes(ops):
    return {(s.op, s.want, s.shape): (s.route, s.kernel) for s in ops.stats()}


def _exact32(x, w):
    return x.double() @ w.double().t()


# ---- dispatch: exactly the call's ops ------------------------------------------------------------------------------

def test_the_kernels_are_catalogued_by_their_ops(ops):
    wants = {w.describe() for w in ops.kernels()}
    assert wants == {"gemm layout=nt dtypes=bf16/bf16/bf16",
                     "gemm layout=nt dtypes=bf16/bf16/bf16 bias=bf16 activation=gelu_tanh",
                     "gemm layout=nt dtypes=bf16/bf16/bf16 scale=0.5 residual=add beta=0.25",
                     "gemm layout=nt dtypes=bf16/bf16/bf16 gate=swiglu"}


def test_linear_with_bias_and_activation_runs_its_fused_kernel(ops):
    x, w, b = rand(16, 128), rand(256, 128, seed=1, scale=0.1), rand(256, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        y = ops.linear(x, w, b, activation="gelu_tanh")
        plain = ops.linear(x, w)
    assert y.shape == (16, 256) and y.dtype == torch.bfloat16
    want = F.gelu(_exact32(x, w) + b.double(), approximate="tanh")
    torch.testing.assert_close(y, want.to(torch.bfloat16))  # one rounding of the fp32 epilogue
    fallback = ADAPTERS["gemm_epilogue"].fallback(ops._ctx, GemmEpilogueArgs(x, w, "nt", torch.bfloat16, "", b, None,
                                                                             None, "gelu_tanh", 1.0))
    torch.testing.assert_close(y, fallback)
    torch.testing.assert_close(plain, _exact32(x, w).to(torch.bfloat16))
    routes = _routes(ops)
    assert routes[("gemm_epilogue", "layout=nt dtypes=bf16/bf16/bf16 bias=bf16 activation=gelu_tanh",
                   (16, 256, 128))][1].startswith("gemm_bf16_nt_16x32x64_t128_s2_bias_gelut")
    assert routes[("gemm", "layout=nt dtypes=bf16/bf16/bf16", (16, 256, 128))][1].startswith(
        "gemm_bf16_nt_16x32x64_t128_s2_predicated")  # the plain call: the plain kernel


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"bias": True}, "bias=bf16"),  # a bias alone: the bias+gelu kernel computes more
    ({"bias": True, "activation": "gelu_erf"}, "activation=gelu_erf"),  # another activation
    ({"residual": True, "scale": 0.5}, "beta=1"),  # beta 1, the kernel's 0.25
    ({"residual": True, "beta": 0.25}, "residual=add beta=0.25"),  # no scale, the kernel's 0.5
])
def test_a_kernel_never_serves_a_call_of_other_ops(ops, kwargs, why):
    x, w = rand(16, 128), rand(256, 128, seed=1, scale=0.1)
    b, r = rand(256, seed=2), rand(16, 256, seed=3)
    kw = dict(kwargs)
    kw["bias"] = b if kw.pop("bias", False) else None
    kw["residual"] = r if kw.pop("residual", False) else None
    with pytest.warns(FallbackWarning, match=why):
        y = ops.linear(x, w, **kw)
    fallback = ADAPTERS["gemm_epilogue"].fallback(ops._ctx, GemmEpilogueArgs(
        x, w, "nt", torch.bfloat16, "", kw["bias"], kw["residual"], kw.get("scale"), kw.get("activation") or "",
        kw.get("beta", 1.0)))
    torch.testing.assert_close(y, fallback, rtol=0, atol=0)
    assert {s.route for s in ops.stats()} == {"fallback"} and ops.backend.compiled == []


def test_scale_and_residual_with_beta_and_the_m_bucket_pads_the_residual(ops):
    w = rand(256, 128, seed=1, scale=0.1)
    for m in (16, 8, 3):
        x, r = rand(m, 128, seed=m), rand(m, 256, seed=m + 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            y = ops.linear(x, w, scale=0.5, residual=r, beta=0.25)
        assert y.shape == (m, 256)
        torch.testing.assert_close(y, (0.5 * _exact32(x, w) + 0.25 * r.double()).to(torch.bfloat16))
    routes = {s.shape: s.route for s in ops.stats()}
    assert routes == {(16, 256, 128): "spec", (8, 256, 128): "bucket", (3, 256, 128): "bucket"}
    # the bucket's kernel ran at its M = 16: A and the residual padded with zero rows (the fake kernel checks)
    assert {s for _, s in ops.backend.compiled} == {(16, 256, 128)}


def test_linear_over_leading_dims_and_gemm_with_epilogue_ops(ops):
    x, w, r = rand(2, 8, 128), rand(256, 128, seed=1, scale=0.1), rand(2, 8, 256, seed=3)
    y = ops.linear(x, w, scale=0.5, residual=r, beta=0.25)
    assert y.shape == (2, 8, 256)
    torch.testing.assert_close(y.view(16, 256), ops.linear(x.view(16, 128), w, scale=0.5, residual=r.view(16, 256),
                                                           beta=0.25), rtol=0, atol=0)
    z = ops.gemm(x.view(16, 128), w, layout="nt", scale=0.5, residual=r.view(16, 256), beta=0.25)
    torch.testing.assert_close(z, y.view(16, 256), rtol=0, atol=0)
    assert {s.op for s in ops.stats()} == {"gemm_epilogue"}


def test_the_epilogue_fallback_applies_the_ops_in_the_kernels_order_in_fp32(ops):
    x, w, b, r = rand(5, 128), rand(256, 128, seed=1, scale=0.1), rand(256, seed=2), rand(5, 256, seed=3)
    with pytest.warns(FallbackWarning, match=r"tilegen.gemm_epilogue 5x256x128 "):
        y = ops.linear(x, w, b, scale=3.0, activation="relu", residual=r, beta=-2.0)
    p = x.float() @ w.float().t()
    torch.testing.assert_close(y, (torch.relu(p * 3.0 + b.float()) + r.float() * -2.0).to(torch.bfloat16),
                               rtol=0, atol=0)
    # not the other order (bias scaled too), and not bf16 intermediates: both differ
    assert not torch.equal(y, (torch.relu((p + b.float()) * 3.0) + r.float() * -2.0).to(torch.bfloat16))


# ---- the gated MLP -------------------------------------------------------------------------------------------------

def test_gated_mlp_runs_its_kernel_on_the_two_weights(ops):
    x, wg, wu = rand(2, 8, 128), rand(256, 128, seed=1, scale=0.1), rand(256, 128, seed=2, scale=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        y = ops.gated_mlp(x, wg, wu)
    assert y.shape == (2, 8, 256) and y.dtype == torch.bfloat16
    x2 = x.view(16, 128)
    want = F.silu(_exact32(x2, wg)) * _exact32(x2, wu)
    torch.testing.assert_close(y.view(16, 256), want.to(torch.bfloat16))
    fallback = ADAPTERS["gated_mlp"].fallback(ops._ctx, GatedArgs(x2, wg, wu, "silu"))
    torch.testing.assert_close(y.view(16, 256), fallback)
    swapped = (F.silu(_exact32(x2, wu)) * _exact32(x2, wg)).to(torch.bfloat16)
    assert not torch.allclose(y.view(16, 256), swapped, atol=1e-2, rtol=1e-2)  # which weight is the gate matters
    assert _routes(ops) == {("gated_mlp", "layout=nt dtypes=bf16/bf16/bf16 gate=swiglu", (16, 256, 128)):
                            ("spec", next(u for u, _ in ops.backend.compiled))}
    assert "swiglu" in ops.backend.compiled[0][0]


def test_gated_mlp_of_another_activation_falls_back_and_strict_mode_raises(ops, project):
    x, wg, wu = rand(16, 128), rand(256, 128, seed=1, scale=0.1), rand(256, 128, seed=2, scale=0.1)
    with pytest.warns(FallbackWarning, match=r"tilegen.gated_mlp 16x256x128 .*gate=geglu_tanh"):
        y = ops.gated_mlp(x, wg, wu, activation="gelu_tanh")
    p, u = x.float() @ wg.float().t(), x.float() @ wu.float().t()
    torch.testing.assert_close(y, (F.gelu(p, approximate="tanh") * u).to(torch.bfloat16), rtol=0, atol=0)
    with pytest.warns(FallbackWarning, match=r"tilegen.gemm 16x256x128"):  # the plain GEMM of fp16: no kernel
        ops.linear(x.half(), wg.half())
    strict = _load(project, strict=True)
    with pytest.raises(NoKernelError, match=r"tilegen.gated_mlp 16x256x128 .*strict mode"):
        strict.gated_mlp(x, wg, wu, activation="gelu_erf")
    with pytest.raises(NoKernelError, match=r"tilegen.gemm_epilogue 16x256x128 .*bias=bf16\).*strict mode"):
        strict.linear(x, wg, rand(256))
    assert strict.gated_mlp(x, wg, wu).shape == (16, 256)  # the kernels still run


# ---- bad input ----------------------------------------------------------------------------------------------------

X, W, B, R = rand(16, 128), rand(256, 128, seed=1), rand(256, seed=2), rand(16, 256, seed=3)


@pytest.mark.parametrize(("call", "message"), [
    (lambda o: o.linear(X, W, rand(128)), "tilegen.gemm_epilogue: bias has 128 elements, the output 256 columns"),
    (lambda o: o.linear(X, W, rand(256, 2)), "bias must have 1 dimensions, it has 2"),
    (lambda o: o.linear(X, W, rand(512)[::2]), "bias is not contiguous"),
    (lambda o: o.linear(X, W, B.to("meta")), "bias is on meta"),
    (lambda o: o.linear(X, W, B.to(torch.int32)), "bias is torch.int32; the kernels take"),
    (lambda o: o.linear(X, W, residual=rand(16, 128)), "residual is 16x128; the output is 16x256"),
    (lambda o: o.linear(X, W, residual=R.half()), "residual is torch.float16, expected torch.bfloat16"),
    (lambda o: o.linear(X, W, residual=rand(256, 16).t()), "residual is not contiguous"),
    (lambda o: o.linear(X.view(2, 8, 128), W, residual=R), "tilegen.linear: residual is 16x256; the output is 2x8x256"),
    (lambda o: o.linear(X.view(2, 8, 128), W, residual=rand(2, 256, 8).transpose(1, 2)),
     "tilegen.linear: residual is not contiguous"),
    (lambda o: o.linear(X, W, activation="tanh"), "activation 'tanh' is not one of None, relu"),
    (lambda o: o.linear(X, W, beta=0.5), "beta scales the residual: pass residual too"),
    (lambda o: o.linear(X, W, B, beta=0.5), "beta scales the residual: pass residual too"),
    (lambda o: o.linear(X, W, scale=float("inf")), "scale must be a finite, nonzero fp32 number, not inf"),
    (lambda o: o.linear(X, W, scale=0.0), "scale must be a finite, nonzero fp32 number"),
    (lambda o: o.linear(X, W, residual=R, beta=1e-50), "beta must be a finite, nonzero fp32 number"),
    (lambda o: o.linear(X, rand(256, 64), B), "tilegen.gemm_epilogue: a (16x128) and b (256x64) do not agree on K"),
    (lambda o: o.gated_mlp(X, W, rand(128, 128)), "tilegen.gated_mlp: w_up is 128x128, w_gate 256x128"),
    (lambda o: o.gated_mlp(X, W, W.half()), "w_up is torch.float16, expected torch.bfloat16"),
    (lambda o: o.gated_mlp(X, W, rand(128, 256).t()), "w_up is not contiguous"),
    (lambda o: o.gated_mlp(X, rand(128, 256).t(), W), "w_gate is not contiguous"),
    (lambda o: o.gated_mlp(X, W, W.to("meta")), "w_up is on meta"),
    (lambda o: o.gated_mlp(X, W, None), "w_up must be a torch.Tensor"),
    (lambda o: o.gated_mlp(X, rand(256, 64), W), "x (16x128) and w_gate (256x64) do not agree on K"),
    (lambda o: o.gated_mlp(rand(128, 16).t(), W, W), "tilegen.gated_mlp: x is not contiguous"),
    (lambda o: o.gated_mlp(X, W, W, activation="relu"), "activation 'relu' is not one of silu, gelu_erf, gelu_tanh"),
])
def test_fused_gemm_inputs_the_kernels_cannot_take_are_refused(ops, call, message):
    with pytest.raises(OpsInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(ops)
    assert ops.stats() == [] and ops.backend.compiled == []


def test_linear_keeps_its_k_check_wording_for_the_fused_op(ops):
    """The fused op checks A and B as the plain GEMM does (one code path), naming its own op."""
    with pytest.raises(OpsInputError, match=r"tilegen.gemm_epilogue: a \(16x64\) and b \(256x128\)"):
        ops.linear(rand(16, 64), W, B)


# ---- the custom ops under torch.compile ----------------------------------------------------------------------------

def test_fused_gemm_custom_ops_have_fake_implementations(ops):
    torch.library.opcheck(torch.ops.tilegen.gemm_epilogue.default,
                          (X, W, B, None, "nt", torch.bfloat16, "", None, "gelu_tanh", 1.0, ops.handle),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.tilegen.gemm_epilogue.default,
                          (X, W, None, R, "nt", torch.bfloat16, "", 0.5, "", 0.25, ops.handle),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.tilegen.gated_mlp.default, (X, W, rand(256, 128, seed=5), "silu", ops.handle),
                          test_utils=("test_schema", "test_faketensor"))


def _mlp_block(ops, x, wg, wu, wd, b, r):
    p = ops.gated_mlp(x, wg, wu)  # 16x256 from K 128
    y = ops.linear(p[:, :128].contiguous(), wd, b, activation="gelu_tanh")  # 16x256x128
    z = ops.linear(x, wd, scale=0.5, residual=r, beta=0.25)
    return y.float().sum() + z.float().mean() + p.float().sum()


def test_torch_compile_traces_the_fused_gemm_ops_without_graph_breaks(ops):
    args = (rand(16, 128), rand(256, 128, seed=1, scale=0.1), rand(256, 128, seed=2, scale=0.1),
            rand(256, 128, seed=3, scale=0.1), rand(256, seed=4), rand(16, 256, seed=5))
    explained = torch._dynamo.explain(lambda *a: _mlp_block(ops, *a))(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = explained.graphs[0].code
    assert "tilegen.gated_mlp" in code and "tilegen.gemm_epilogue" in code
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        eager = _mlp_block(ops, *args)
        ops.reset_stats()
        compiled = torch.compile(lambda *a: _mlp_block(ops, *a), fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(*args), eager)
    assert sorted((s.op, s.route, s.calls) for s in ops.stats()) == [  # two epilogue kernels, one call each
        ("gated_mlp", "spec", 1), ("gemm_epilogue", "spec", 1), ("gemm_epilogue", "spec", 1)]
    torch._dynamo.reset()
