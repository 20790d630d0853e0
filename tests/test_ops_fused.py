"""The fused row ops on the CPU (add_rmsnorm, add_layernorm, rmsnorm_fp8, add_rmsnorm_fp8, softmax with a scale and
a mask): dispatch to the fused kernels (tests/opsfakes.py), their unfused torch fallbacks, strict mode, the input
checks, torch.compile without graph breaks; the call-key cache; and a Llama-shaped decoder layer (a minimal
stand-in for transformers' own, whose forward it copies) patched with fuse=True (add_rmsnorm, the gated MLP and
down_proj + residual; the fused GEMM ops themselves: tests/test_ops_gemm_fused.py)."""

from __future__ import annotations

import collections
import copy
import warnings

import pytest
import torch
from opsfakes import TorchKernels
from torch import nn

import tilegen
from codegen.core.hardware import Target
from codegen.ops import FallbackWarning, NoKernelError, OpsInputError
from codegen.ops.adapters import ADAPTERS, RowArgs, SoftmaxArgs
from codegen.ops.llama import call_layer, patch_llama_layer

H200 = "NVIDIA H200"
SPECS = """\
- name: add_rms
  op: rmsnorm
  residual: true
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 256}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: rms
  op: rmsnorm
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 256}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: add_ln
  op: layernorm
  residual: true
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 1024}
  threads: 64
  vector: 8
  targets: [sm_90]
- name: rms_fp8
  op: rmsnorm
  quant: per_token
  dtypes: {input: bf16, out: fp8_e4m3, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 256}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: add_rms_fp8
  op: rmsnorm
  residual: true
  quant: per_token
  dtypes: {input: bf16, out: fp8_e4m3, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 256}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: sm_full
  op: softmax
  scale: 0.125
  mask: full
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  shapes:
    - {rows: 6, cols: 128}
  threads: 32
  vector: 4
  targets: [sm_90]
- name: sm_bcast
  op: softmax
  scale: 0.125
  mask: broadcast
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {rows: 6, cols: 128}
  threads: 32
  vector: 4
  targets: [sm_90]
"""


def _project(tmp_path_factory, name, specs):
    root = tmp_path_factory.mktemp(name)
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "ops.yaml").write_text(specs, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return _project(tmp_path_factory, "fused_project", SPECS)


def _load(project, **kw):
    return tilegen.load(project, **({"backend": TorchKernels(), "target": Target.SM_90, "device_name": H200} | kw))


@pytest.fixture
def ops(project):
    return _load(project)


def rand(*shape, dtype=torch.bfloat16, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape))) * scale).to(dtype)


def _routes(ops):
    return {(s.op, s.shape): s.route for s in ops.stats()}


# ---- the fused norms ---------------------------------------------------------------------------------------------

def test_add_rmsnorm_runs_its_kernel_and_matches_the_unfused_fallback(ops):
    x, r, w = rand(2, 4, 256), rand(2, 4, 256, seed=1), rand(256, seed=2, scale=0.1) + 1
    y, s = ops.add_rmsnorm(x, r, w, 1e-5)
    assert y.shape == s.shape == x.shape and y.dtype == s.dtype == torch.bfloat16
    torch.testing.assert_close(s, x + r)  # bf16 + bf16 rounds the fp32 sum once: the kernel's S
    fy, fs = ADAPTERS["add_rmsnorm"].fallback(ops._ctx, RowArgs(x, w, None, 1e-5, r))
    torch.testing.assert_close(y, fy)
    torch.testing.assert_close(s, fs, rtol=0, atol=0)
    torch.testing.assert_close(y, ops.rmsnorm(x + r, w, 1e-5))  # the unfused pair of ops
    assert _routes(ops) == {("add_rmsnorm", (8, 256)): "spec", ("rmsnorm", (8, 256)): "spec"}
    wants = {s.op: s.want for s in ops.stats()}
    assert wants["add_rmsnorm"] == "dtypes=bf16/bf16 eps=1e-05 residual=add"
    assert wants["rmsnorm"] == "dtypes=bf16/bf16 eps=1e-05"  # the plain kernel never serves the fused op


def test_add_layernorm(ops):
    x, r = rand(8, 1024, dtype=torch.float16), rand(8, 1024, dtype=torch.float16, seed=1)
    w, b = rand(1024, dtype=torch.float16, seed=2), rand(1024, dtype=torch.float16, seed=3)
    y, s = ops.add_layernorm(x, r, w, b, 1e-5)
    fy, fs = ADAPTERS["add_layernorm"].fallback(ops._ctx, RowArgs(x, w, b, 1e-5, r))
    torch.testing.assert_close(y, fy)
    torch.testing.assert_close(s, fs)
    assert _routes(ops) == {("add_layernorm", (8, 1024)): "spec"}


@pytest.mark.parametrize("op", ["rmsnorm_fp8", "add_rmsnorm_fp8"])
def test_rmsnorm_fp8_gives_rows_and_per_token_scales(ops, op):
    x, r, w = rand(8, 256, scale=3.0), rand(8, 256, seed=1), rand(256, seed=2, scale=0.1) + 1
    out = ops.rmsnorm_fp8(x, w, 1e-5) if op == "rmsnorm_fp8" else ops.add_rmsnorm_fp8(x, r, w, 1e-5)
    q, scale = out[:2]
    fp8 = ops._ctx.fp8_dtype
    assert fp8 == torch.float8_e4m3fn and torch.finfo(fp8).max == 448.0  # sm_90's e4m3
    assert q.dtype == fp8 and q.shape == x.shape and scale.shape == (8, 1) and scale.dtype == torch.float32
    fallback = ADAPTERS[op].fallback(ops._ctx, RowArgs(x, w, None, 1e-5, r if op.startswith("add") else None))
    torch.testing.assert_close(scale, fallback[1])
    torch.testing.assert_close(q.float(), fallback[0].float(), atol=0, rtol=0.07)  # one fp8 step of 2^-3
    assert float(q.float().abs().amax()) == 448.0  # each row's largest element at fp8_max
    src = x + r if op.startswith("add") else x
    torch.testing.assert_close(q.float() * scale, ops.rmsnorm(src, w, 1e-5).float(), atol=0.05, rtol=0.07)
    if op.startswith("add"):
        torch.testing.assert_close(out[2], x + r, rtol=0, atol=0)
    assert _routes(ops)[(op, (8, 256))] == "spec"


def test_a_fused_norm_without_its_kernel_falls_back_to_the_same_math(ops):
    x, r, w = rand(5, 256), rand(5, 256, seed=1), rand(256, seed=2)
    with pytest.warns(FallbackWarning, match=r"tilegen.add_rmsnorm 5x256 \(dtypes=bf16/bf16 eps=1e-05 residual=add\)"):
        y, s = ops.add_rmsnorm(x, r, w, 1e-5)
    torch.testing.assert_close(s, x + r, rtol=0, atol=0)
    with pytest.warns(FallbackWarning, match="tilegen.rmsnorm 5x256"):  # 5 rows: no plain kernel either
        torch.testing.assert_close(y, ops.rmsnorm(s, w, 1e-5))
    assert ("add_rmsnorm", (5, 256)) in {(st.op, st.shape) for st in ops.stats() if st.route == "fallback"}


def test_strict_mode_refuses_a_fused_norm_without_a_kernel(project):
    strict = _load(project, strict=True)
    with pytest.raises(NoKernelError, match="tilegen.add_rmsnorm 4x256 .*strict mode"):
        strict.add_rmsnorm(rand(4, 256), rand(4, 256), rand(256), 1e-5)
    with pytest.raises(NoKernelError, match="strict mode"):  # and again: a remembered plan raises every time
        strict.add_rmsnorm(rand(4, 256), rand(4, 256), rand(256), 1e-5)


@pytest.mark.parametrize(("call", "message"), [
    (lambda o: o.add_rmsnorm(rand(8, 256), rand(4, 256), rand(256), 1e-5), "residual is 4x256, x 8x256"),
    (lambda o: o.add_rmsnorm(rand(8, 256), rand(8, 256, dtype=torch.float16), rand(256), 1e-5),
     "residual is torch.float16, expected torch.bfloat16"),
    (lambda o: o.add_rmsnorm(rand(8, 256), rand(256, 8).t(), rand(256), 1e-5), "residual is not contiguous"),
    (lambda o: o.add_rmsnorm(rand(8, 256), rand(8, 256).to("meta"), rand(256), 1e-5), "residual is on meta"),
    (lambda o: o.add_rmsnorm(rand(8, 256), None, rand(256), 1e-5), "residual must be a torch.Tensor"),
    (lambda o: o.rmsnorm_fp8(rand(8, 256), rand(128), 1e-5), "weight has 128 elements"),
    (lambda o: o.softmax(rand(6, 128), mask=rand(6, 64)), "mask is 6x64: it must be x's shape"),
    (lambda o: o.softmax(rand(6, 128), mask=rand(6, 128, dtype=torch.float16)), "mask is torch.float16"),
    (lambda o: o.softmax(rand(6, 128), scale=float("inf")), "scale must be a finite, nonzero number"),
])
def test_fused_inputs_the_kernels_cannot_take_are_refused(ops, call, message):
    with pytest.raises(OpsInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(ops)
    assert ops.stats() == [] and ops.backend.compiled == []


# ---- softmax with a scale and a mask ----------------------------------------------------------------------------

def _mask(rows, cols, dtype, seed):
    m = torch.where(torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed)) < 0.2, float("-inf"), 0.5)
    m[:, 0] = 0.0
    return m.to(dtype)


def test_softmax_with_scale_and_mask_routes_by_mask_kind(ops):
    x, full = rand(6, 128, dtype=torch.float16), _mask(6, 128, torch.float16, 0)
    y = ops.softmax(x, scale=0.125, mask=full)
    torch.testing.assert_close(y, ADAPTERS["softmax"].fallback(ops._ctx, SoftmaxArgs(x, full, 0.125)))
    torch.testing.assert_close(y.float(), torch.softmax(x.float() * 0.125 + full.float(), -1), atol=1e-3, rtol=1e-3)
    xb, row = rand(2, 3, 128), _mask(1, 128, torch.bfloat16, 1)[0]
    yb = ops.softmax(xb, scale=0.125, mask=row)  # one mask row for every row
    torch.testing.assert_close(yb, ADAPTERS["softmax"].fallback(ops._ctx, SoftmaxArgs(xb, row, 0.125)))
    assert {s.want: s.route for s in ops.stats()} == {"dtypes=fp16/fp16 scale=0.125 mask=full": "spec",
                                                     "dtypes=bf16/bf16 scale=0.125 mask=broadcast": "spec"}
    with pytest.warns(FallbackWarning, match="no kernel serves|no kernel of the project"):
        other = ops.softmax(x, scale=0.5, mask=full)  # another scale: another kernel, none here
    torch.testing.assert_close(other.float(), torch.softmax(x.float() * 0.5 + full.float(), -1), atol=1e-3, rtol=1e-3)


# ---- the custom ops under torch.compile --------------------------------------------------------------------------

def test_fused_custom_ops_have_fake_implementations(ops):
    x, r, w = rand(8, 256), rand(8, 256, seed=1), rand(256, seed=2)
    for op, args in (("add_rmsnorm", (x, r, w, 1e-5)), ("rmsnorm_fp8", (x, w, 1e-5)),
                     ("add_rmsnorm_fp8", (x, r, w, 1e-5))):
        torch.library.opcheck(getattr(torch.ops.tilegen, op).default, (*args, ops.handle),
                              test_utils=("test_schema", "test_faketensor"))
    xs = rand(6, 128, dtype=torch.float16)
    torch.library.opcheck(torch.ops.tilegen.softmax.default, (xs, _mask(6, 128, torch.float16, 0), 0.125, ops.handle),
                          test_utils=("test_schema", "test_faketensor"))


def _fused_block(ops, x, r, w, xs, mask):
    y, s = ops.add_rmsnorm(x, r, w, 1e-5)
    q, scale = ops.rmsnorm_fp8(s, w, 1e-5)
    p = ops.softmax(xs, scale=0.125, mask=mask)
    return y.float().sum() + (q.float() * scale).sum() + s.float().mean() + p.float().sum()


def test_torch_compile_traces_the_fused_ops_without_graph_breaks(ops):
    args = (rand(8, 256), rand(8, 256, seed=1), rand(256, seed=2), rand(6, 128, dtype=torch.float16),
            _mask(6, 128, torch.float16, 0))
    explained = torch._dynamo.explain(lambda *a: _fused_block(ops, *a))(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = explained.graphs[0].code
    assert all(f"tilegen.{op}" in code for op in ("add_rmsnorm", "rmsnorm_fp8", "softmax"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        eager = _fused_block(ops, *args)
        ops.reset_stats()
        compiled = torch.compile(lambda *a: _fused_block(ops, *a), fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(*args), eager)
    assert {(s.op, s.route): s.calls for s in ops.stats()} == {
        ("add_rmsnorm", "spec"): 1, ("rmsnorm_fp8", "spec"): 1, ("softmax", "spec"): 1}
    torch._dynamo.reset()


# ---- the call-key cache -----------------------------------------------------------------------------------------

def test_a_call_key_is_checked_once_and_every_call_is_counted(ops, monkeypatch):
    x, w = rand(8, 256), rand(256, seed=2)
    checks = []
    adapter = ADAPTERS["rmsnorm"]
    real = type(adapter).call
    monkeypatch.setattr(type(adapter), "call", lambda self, ctx, args: checks.append(1) or real(self, ctx, args))
    for _ in range(5):
        ops.rmsnorm(x, w, 1e-5)
    ops.rmsnorm(rand(2, 4, 256), w, 1e-5)  # another key (3-D x), the same (want, shape): the same plan
    assert len(checks) == 2
    assert [(s.shape, s.calls) for s in ops.stats()] == [((8, 256), 6)]
    with pytest.raises(OpsInputError, match="x is not contiguous"):  # strides are in the key: a transposed view
        ops.rmsnorm(rand(256, 8).t(), w, 1e-5)
    with pytest.raises(OpsInputError, match="eps must be a positive number"):
        ops.rmsnorm(x, w, -1.0)
    with pytest.raises(OpsInputError, match="weight is torch.float16"):
        ops.rmsnorm(x, w.half(), 1e-5)
    assert len(checks) == 5 and len(ops.backend.compiled) == 1


# ---- a Llama-shaped decoder layer with fuse=True -------------------------------------------------------------------

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, TOKENS = 256, 4, 2, 64, 512, 64
LAYER_SPECS = f"""\
- name: proj
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  dynamic_m: {{min: 1, max: 4096}}
  shapes:
    - {{m: {TOKENS}, n: {HEADS * HEAD_DIM}, k: {HIDDEN}}}
    - {{m: {TOKENS}, n: {KV_HEADS * HEAD_DIM}, k: {HIDDEN}}}
    - {{m: {TOKENS}, n: {MLP}, k: {HIDDEN}}}
    - {{m: {TOKENS}, n: {HIDDEN}, k: {MLP}}}
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
- name: gate_up
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  gate: swiglu
  shapes: [{{m: {TOKENS}, n: {MLP}, k: {HIDDEN}}}]
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  targets: [sm_90]
- name: down_residual
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  epilogue_ops:
    residual: {{beta: 1.0}}
  shapes: [{{m: {TOKENS}, n: {HIDDEN}, k: {MLP}}}]
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  targets: [sm_90]
- name: norm
  op: rmsnorm
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes: [{{rows: {TOKENS}, cols: {HIDDEN}}}]
  threads: 32
  vector: 8
  targets: [sm_90]
- name: add_norm
  op: rmsnorm
  residual: true
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes: [{{rows: {TOKENS}, cols: {HIDDEN}}}]
  threads: 32
  vector: 8
  targets: [sm_90]
- name: rope
  op: rope
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes: [{{tokens: {TOKENS}, heads: {HEADS}, kv_heads: {KV_HEADS}}}]
  head_dim: {HEAD_DIM}
  rotary_dim: {HEAD_DIM}
  threads: 32
  vector: 8
  tail: predicated
  targets: [sm_90]
- name: prefill
  op: attention
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes: [{{batch: 1, heads: {HEADS}, kv_heads: {KV_HEADS}, seq_q: {TOKENS}, seq_kv: {TOKENS}}}]
  head_dim: {HEAD_DIM}
  causal: top_left
  tiling: {{block_m: 64, block_n: 64, threads: 128}}
  pipeline: {{stages: 2}}
  targets: [sm_90]
"""


class _Config:
    num_attention_heads, num_key_value_heads = HEADS, KV_HEADS


class _RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))
        self.variance_epsilon = 1e-5

    def forward(self, x):  # LlamaRMSNorm's
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(x.dtype)


class _Attention(nn.Module):
    """LlamaAttention's attributes and its prefill math (SDPA, causal, GQA) -- what the patch reads and replaces."""

    def __init__(self):
        super().__init__()
        self.config, self.layer_idx, self.head_dim, self.scaling = _Config(), 0, HEAD_DIM, HEAD_DIM**-0.5
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, **kwargs):
        b, s, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = (t[:, None] for t in position_embeddings)

        def rot(t):
            return torch.cat((-t[..., HEAD_DIM // 2:], t[..., : HEAD_DIM // 2]), -1)

        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                             scale=self.scaling)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1)), None


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, MLP, bias=False)
        self.up_proj = nn.Linear(HIDDEN, MLP, bias=False)
        self.down_proj = nn.Linear(MLP, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()  # LlamaMLP's ACT2FN["silu"]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """A stand-in for transformers' LlamaDecoderLayer (5.x): its submodule names and its forward, verbatim in
    structure (the residual adds around attention and the MLP, the layer returns the hidden states)."""

    def __init__(self):
        super().__init__()
        self.self_attn, self.mlp = _Attention(), _MLP()
        self.input_layernorm, self.post_attention_layernorm = _RMSNorm(), _RMSNorm()

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                cache_position=None, position_embeddings=None, **kwargs):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_ids=position_ids, past_key_values=past_key_values,
                                          use_cache=use_cache, cache_position=cache_position,
                                          position_embeddings=position_embeddings, **kwargs)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


@pytest.fixture(scope="module")
def layer_ops(tmp_path_factory):
    return _load(_project(tmp_path_factory, "fused_layer", LAYER_SPECS))


@pytest.fixture(scope="module")
def layer():
    torch.manual_seed(0)
    layer = LlamaDecoderLayer().to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))
    return layer


def _inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, TOKENS, HIDDEN, generator=g).to(torch.bfloat16)
    angle = torch.arange(TOKENS, dtype=torch.float32)[:, None] * 10000 ** (-torch.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angle = torch.cat((angle, angle), -1)[None]
    return x, (angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16))


def test_fused_layer_matches_the_unfused_one_and_calls_the_fused_kernels(layer_ops, layer):
    import inspect

    plain = patch_llama_layer(copy.deepcopy(layer), layer_ops)
    fused = patch_llama_layer(copy.deepcopy(layer), layer_ops, fuse=True)
    assert type(fused).__name__ == "FusedLlamaDecoderLayer" and isinstance(fused, LlamaDecoderLayer)
    assert inspect.signature(type(fused).forward) == inspect.signature(LlamaDecoderLayer.forward)
    assert patch_llama_layer(copy.deepcopy(fused), layer_ops, fuse=True).__class__ is type(fused)  # not twice
    assert fused.tilegen_mlp_activation == "silu"
    x, pe = _inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        want = call_layer(layer, x, pe)
        got_plain = call_layer(plain, x, pe)
        layer_ops.reset_stats()
        got = call_layer(fused, x, pe)
        again = fused(x, None, None, None, False, None, pe)  # positionally, as the original signature binds
    assert isinstance(got, torch.Tensor) and got.shape == x.shape
    torch.testing.assert_close(again, got, rtol=0, atol=0)
    # the fused MLP rounds fewer intermediates (the gated product once, down_proj + residual once): close, not equal
    torch.testing.assert_close(got, got_plain, atol=0.03, rtol=0.02)
    torch.testing.assert_close(got, want, atol=0.06, rtol=0.05)
    calls = collections.Counter()
    for st in layer_ops.stats():
        calls[st.op, st.route] += st.calls
    assert calls == {("add_rmsnorm", "spec"): 2, ("rmsnorm", "spec"): 2, ("gated_mlp", "spec"): 2,  # two calls
                     ("gemm_epilogue", "spec"): 2, ("gemm", "spec"): 8, ("rope", "spec"): 2, ("attention", "spec"): 2}
    wants = {s.op: s.want for s in layer_ops.stats()}
    assert wants["gated_mlp"].endswith("gate=swiglu") and wants["gemm_epilogue"].endswith("residual=add beta=1")

    # the fused layer's MLP: residual + down(silu(h Wg^T) * (h Wu^T)), in the fake kernels' float64 then one rounding
    # each -- recomputed from the layer's own add_rmsnorm outputs
    seen = {}
    real_gated, real_linear = layer_ops.gated_mlp, layer_ops.linear

    class Spy:
        def __getattr__(self, name):
            return getattr(layer_ops, name)

        def gated_mlp(self, h, wg, wu, activation="silu"):
            seen["h"] = h
            seen["p"] = real_gated(h, wg, wu, activation=activation)
            return seen["p"]

        def linear(self, x, w, bias=None, **kw):
            if "residual" in kw:
                seen["residual"] = kw["residual"]
            return real_linear(x, w, bias, **kw)

    spied = patch_llama_layer(copy.deepcopy(layer), Spy(), fuse=True)
    with torch.no_grad():
        out = call_layer(spied, x, pe)
    h = seen["h"].double()
    mlp = layer.mlp
    p = (torch.nn.functional.silu(h @ mlp.gate_proj.weight.double().t()) * (h @ mlp.up_proj.weight.double().t()))
    torch.testing.assert_close(seen["p"], p.to(torch.bfloat16), rtol=0, atol=0)
    expect = seen["p"].double() @ mlp.down_proj.weight.double().t() + seen["residual"].double()
    torch.testing.assert_close(out, expect.to(torch.bfloat16), rtol=0, atol=0)

    class NoResidual:  # add_rmsnorm that drops the residual: one fused op broken on purpose
        def __getattr__(self, name):
            return getattr(layer_ops, name)

        def add_rmsnorm(self, x, residual, weight, eps):
            return layer_ops.add_rmsnorm(x, torch.zeros_like(residual), weight, eps)

    class SwappedGateUp:  # the gated MLP with its two weights swapped: silu(h Wu^T) * (h Wg^T)
        def __getattr__(self, name):
            return getattr(layer_ops, name)

        def gated_mlp(self, h, wg, wu, activation="silu"):
            return layer_ops.gated_mlp(h, wu, wg, activation=activation)

    for broken_ops in (NoResidual(), SwappedGateUp()):
        broken = patch_llama_layer(copy.deepcopy(layer), broken_ops, fuse=True)
        with torch.no_grad():
            bad = call_layer(broken, x, pe)
        assert not torch.allclose(bad, want, atol=0.06, rtol=0.05), type(broken_ops).__name__


def test_fuse_refuses_an_mlp_the_gated_kernels_do_not_compute(layer_ops, layer):
    from codegen.ops import OpsError

    odd = copy.deepcopy(layer)
    odd.mlp.act_fn = nn.Tanh()
    with pytest.raises(OpsError, match=r"the MLP's activation \(Tanh\) is not one the gated-MLP kernels compute"):
        patch_llama_layer(odd, layer_ops, fuse=True)
    biased = copy.deepcopy(layer)
    biased.mlp.up_proj = nn.Linear(HIDDEN, MLP, bias=True).to(torch.bfloat16)
    with pytest.raises(OpsError, match="mlp.up_proj has a bias"):
        patch_llama_layer(biased, layer_ops, fuse=True)
    gelu = copy.deepcopy(layer)
    gelu.mlp.act_fn = nn.GELU(approximate="tanh")
    assert patch_llama_layer(gelu, layer_ops, fuse=True).tilegen_mlp_activation == "gelu_tanh"
    plain = patch_llama_layer(copy.deepcopy(odd), layer_ops)  # fuse=False: transformers' MLP, whatever it computes
    assert not hasattr(plain, "tilegen_mlp_activation")


def test_fused_layer_compiles_without_graph_breaks(layer_ops, layer):
    fused = patch_llama_layer(copy.deepcopy(layer), layer_ops, fuse=True)
    x, pe = _inputs()
    with torch.no_grad():
        explained = torch._dynamo.explain(fused)(x, position_embeddings=pe, attention_mask=None)
    assert explained.graph_break_count == 0
    code = "".join(g.code for g in explained.graphs)
    assert all(f"tilegen.{op}" in code for op in ("add_rmsnorm", "gated_mlp", "gemm_epilogue"))
    torch._dynamo.reset()
