"""patch_llama_layer on transformers' own LlamaDecoderLayer, on the CPU (skipped where transformers is not
installed): a small Llama-shaped layer run as transformers wrote it and with tilegen ops swapped in (kernels that
compute with torch, tests/opsfakes.py), prefill and one decode step over a KVCache; a broken op is caught."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from opsfakes import TorchKernels

import tilegen
from codegen.core.hardware import Target
from codegen.ops.llama import KVCache, call_layer, patch_llama_layer

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP = 256, 4, 2, 64, 512
PREFILL, BATCH, CACHE = 64, 2, 128
SPECS = f"""\
- name: proj
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  dynamic_m: {{min: 1, max: 4096}}
  shapes:
    - {{m: {PREFILL}, n: {HEADS * HEAD_DIM}, k: {HIDDEN}}}
    - {{m: {PREFILL}, n: {KV_HEADS * HEAD_DIM}, k: {HIDDEN}}}
    - {{m: {PREFILL}, n: {MLP}, k: {HIDDEN}}}
    - {{m: {PREFILL}, n: {HIDDEN}, k: {MLP}}}
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
- name: gate_up
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  gate: swiglu
  dynamic_m: {{min: 1, max: 4096}}
  shapes:
    - {{m: {PREFILL}, n: {MLP}, k: {HIDDEN}}}
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
- name: down_residual
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  epilogue_ops:
    residual: {{beta: 1.0}}
  dynamic_m: {{min: 1, max: 4096}}
  shapes:
    - {{m: {PREFILL}, n: {HIDDEN}, k: {MLP}}}
  tiling: {{block_m: 64, block_n: 64, block_k: 64, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
- name: norm
  op: rmsnorm
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes:
    - {{rows: {PREFILL}, cols: {HIDDEN}}}
    - {{rows: {BATCH}, cols: {HIDDEN}}}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: add_norm
  op: rmsnorm
  residual: true
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  eps: 1.0e-5
  shapes:
    - {{rows: {PREFILL}, cols: {HIDDEN}}}
    - {{rows: {BATCH}, cols: {HIDDEN}}}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: prefill
  op: attention
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes:
    - {{batch: 1, heads: {HEADS}, kv_heads: {KV_HEADS}, seq_q: {PREFILL}, seq_kv: {PREFILL}}}
  head_dim: {HEAD_DIM}
  causal: top_left
  tiling: {{block_m: 64, block_n: 64, threads: 128}}
  pipeline: {{stages: 2}}
  targets: [sm_90]
- name: decode
  op: attention
  variant: decode
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes:
    - {{batch: {BATCH}, heads: {HEADS}, kv_heads: {KV_HEADS}, seq_q: 1, seq_kv: {CACHE}}}
  head_dim: {HEAD_DIM}
  tiling: {{block_m: 64, block_n: 64, threads: 128}}
  pipeline: {{stages: 2}}
  split_kv: 2
  targets: [sm_90]
"""
ROPE = f"""\
- name: rope
  op: rope
  dtypes: {{input: bf16, out: bf16, accumulate: fp32}}
  shapes:
    - {{tokens: {PREFILL}, heads: {HEADS}, kv_heads: {KV_HEADS}}}
    - {{tokens: {BATCH}, heads: {HEADS}, kv_heads: {KV_HEADS}}}
  head_dim: {HEAD_DIM}
  rotary_dim: {HEAD_DIM}
  tables: half
  threads: 32
  vector: 8
  tail: predicated
  targets: [sm_90]
"""
# the same rope kernel for each table layout: fp32 half tables, and transformers' own (full)
SPECS += ROPE + ROPE.replace("name: rope\n", "name: rope_full\n").replace("tables: half", "tables: full")


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama_project")
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "layer.yaml").write_text(SPECS, encoding="utf-8")
    return tilegen.load(root, backend=TorchKernels(), target=Target.SM_90, device_name="NVIDIA H200")


@pytest.fixture(scope="module")
def layer():
    config = modeling_llama.LlamaConfig(hidden_size=HIDDEN, intermediate_size=MLP, num_attention_heads=HEADS,
                                        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, rms_norm_eps=1e-5,
                                        max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = modeling_llama.LlamaDecoderLayer(config, layer_idx=0).to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    return layer, rotary


def _pos(rotary, x, positions):
    return rotary(x, positions)


@pytest.mark.parametrize(("fuse", "tables"), [(False, "full"), (True, "full"), (False, "half")])
def test_patched_layer_matches_transformers_prefill_and_decode_and_a_broken_op_is_caught(ops, layer, fuse, tables):
    layer, rotary = layer
    ops.reset_stats()
    ours = patch_llama_layer(copy.deepcopy(layer), ops, fuse=fuse)
    assert type(ours.self_attn).__name__ == "TilegenLlamaAttention"
    assert ours.self_attn.full_tables  # the project has a rope spec of transformers' own tables at this head dim
    ours.self_attn.full_tables = tables == "full"  # "half": the fp32 half tables of the other rope spec
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, PREFILL, HIDDEN, generator=g).to(torch.bfloat16)
    pe = _pos(rotary, x, torch.arange(PREFILL)[None])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", tilegen.FallbackWarning)  # every op of the layer has its kernel
        want = call_layer(layer, x, pe)
        got = call_layer(ours, x, pe)
        torch.testing.assert_close(got, want, atol=0.06, rtol=0.05)
        # decode: one token per sequence over a cache of CACHE - 1 earlier positions
        past_k = torch.randn(BATCH, CACHE - 1, KV_HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
        past_v = torch.randn(BATCH, CACHE - 1, KV_HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
        caches = {}
        for layout in ("bhsd", "bshd"):
            caches[layout] = KVCache(batch=BATCH, kv_heads=KV_HEADS, head_dim=HEAD_DIM, max_len=CACHE, layout=layout,
                                     dtype=torch.bfloat16, device="cpu")
            caches[layout].fill(0, past_k, past_v)
        xd = torch.randn(BATCH, 1, HIDDEN, generator=g).to(torch.bfloat16)
        ped = _pos(rotary, xd, torch.full((BATCH, 1), CACHE - 1))
        want_d = call_layer(layer, xd, ped, caches["bhsd"])
        got_d = call_layer(ours, xd, ped, caches["bshd"])
        torch.testing.assert_close(got_d, want_d, atol=0.06, rtol=0.05)
        torch.testing.assert_close(caches["bshd"].k[0], caches["bhsd"].k[0].transpose(1, 2), atol=0.02, rtol=0.02)
    routes = {(s.op, s.route) for s in ops.stats()}
    assert {("tables=full" in s.want, s.kernel.startswith("rope_bf16_d64_r64_tf_")) for s in ops.stats()
            if s.op == "rope"} == {(tables == "full",) * 2}
    fused = {("add_rmsnorm", "spec"), ("gated_mlp", "spec"), ("gated_mlp", "dynamic"), ("gemm_epilogue", "spec"),
             ("gemm_epilogue", "dynamic")}
    assert routes == {("gemm", "spec"), ("gemm", "dynamic"), ("rmsnorm", "spec"), ("rope", "spec"),
                      ("attention", "spec"), ("attention_decode", "spec")} | (fused if fuse else set())

    class WrongWayRope:  # rotates the other way: one op broken on purpose
        def __getattr__(self, name):
            return getattr(ops, name)

        def rope(self, q, k, cos, sin, **tables):
            return ops.rope(q, k, cos, -sin, **tables)

    broken = patch_llama_layer(copy.deepcopy(layer), WrongWayRope(), fuse=fuse)
    with torch.no_grad():
        bad = call_layer(broken, x, pe)
    assert not torch.allclose(bad, want, atol=0.06, rtol=0.05)
