"""transformers' own LlamaDecoderLayer with its projections, RMSNorms, RoPE and attention routed through tilegen
ops (`patch_llama_layer`), and the preallocated KV cache (`KVCache`) the patched attention reads in the kernels'
layout.

What is swapped, and what stays:
- q/k/v/o_proj and the MLP's gate/up/down_proj: `TilegenLinear` (ops.linear; a bias, where the config has one,
  is added by torch after the kernel);
- input_layernorm and post_attention_layernorm: `TilegenRMSNorm` (ops.rmsnorm with the module's eps);
- self_attn: `TilegenLlamaAttention` -- the four projections, ops.rope on the cos/sin transformers computes
  (position_embeddings; rotate_half, the first half of each table row), and ops.attention (causal top-left
  over the tokens of the call) or, with a KVCache and one query token, ops.attention_decode over the cache;
- the residual adds, the SiLU and the gate product stay transformers' torch code.
The layer's forward is transformers' own, unchanged. Works with the forward signatures of transformers that
pass position_embeddings=(cos, sin) to the layer (4.48 and later: cache passed as `cache`, `past_key_values`
or `past_key_value`).
"""

from __future__ import annotations

import inspect
import re

import torch
from torch import nn

from codegen.ops.errors import OpsError, OpsInputError

CACHE_KWARGS = ("cache", "past_key_values", "past_key_value")  # the cache's name across transformers versions
LAYOUTS = ("bhsd", "bshd")  # transformers' attention: [batch, kv_heads, seq, d]; the tilegen kernels': [batch, seq, kv_heads, d]


class KVCache:
    """A preallocated K/V cache of `max_len` positions per layer, `length` of them filled. layout 'bhsd' is what
    transformers' attention reads ([batch, kv_heads, seq, head_dim]; its `update` is the one transformers calls),
    'bshd' what the tilegen attention kernels read ([batch, seq, kv_heads, head_dim], `update_bshd`).

    An update writes the new keys and values at positions [length, length + new) and returns positions
    [0, length + new); it does not move `length` (call `advance`), so a decode step can be repeated (timed)
    on the same cache. The tilegen kernels take the returned K/V as one contiguous tensor: fill the cache to
    max_len with the step (length + new == max_len), or its view is strided and refused."""

    def __init__(self, *, batch: int, kv_heads: int, head_dim: int, max_len: int, layout: str, dtype, device,
                 layers: tuple[int, ...] = (0,)):
        if layout not in LAYOUTS:
            raise OpsInputError(f"KVCache: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        shape = (batch, kv_heads, max_len, head_dim) if layout == "bhsd" else (batch, max_len, kv_heads, head_dim)
        self.layout, self.max_len, self.length = layout, max_len, 0
        self.k = {i: torch.zeros(shape, dtype=dtype, device=device) for i in layers}
        self.v = {i: torch.zeros(shape, dtype=dtype, device=device) for i in layers}

    def fill(self, layer_idx: int, k_bshd, v_bshd) -> None:
        """Positions [0, n) of layer `layer_idx` from K, V [batch, n, kv_heads, head_dim]; length = n."""
        n = k_bshd.shape[1]
        self._write(layer_idx, k_bshd, v_bshd, 0)
        self.length = n

    def advance(self, n: int) -> None:
        self.length += n

    def _write(self, layer_idx: int, k_bshd, v_bshd, start: int):
        n = k_bshd.shape[1]
        if start + n > self.max_len:
            raise OpsInputError(f"KVCache: {start} + {n} positions over max_len={self.max_len}")
        if self.layout == "bhsd":
            self.k[layer_idx][:, :, start:start + n] = k_bshd.transpose(1, 2)
            self.v[layer_idx][:, :, start:start + n] = v_bshd.transpose(1, 2)
            return self.k[layer_idx][:, :, :start + n], self.v[layer_idx][:, :, :start + n]
        self.k[layer_idx][:, start:start + n] = k_bshd
        self.v[layer_idx][:, start:start + n] = v_bshd
        return self.k[layer_idx][:, :start + n], self.v[layer_idx][:, :start + n]

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        """transformers' Cache.update: key/value states [batch, kv_heads, new, head_dim]; the filled K, V in
        this cache's layout."""
        return self._write(layer_idx, key_states.transpose(1, 2), value_states.transpose(1, 2), self.length)

    def update_bshd(self, k, v, layer_idx: int):
        """The same for k, v [batch, new, kv_heads, head_dim] (the tilegen attention's layout)."""
        return self._write(layer_idx, k, v, self.length)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


class TilegenLinear(nn.Module):
    """nn.Linear's forward as ops.linear, on the same weight (and bias) Parameters."""

    def __init__(self, linear: nn.Linear, ops):
        super().__init__()
        self.ops = ops
        self.weight = linear.weight
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x):
        return self.ops.linear(x, self.weight, self.bias)


class TilegenRMSNorm(nn.Module):
    """LlamaRMSNorm's forward as ops.rmsnorm (fp32 statistics and products, one rounding to the output)."""

    def __init__(self, norm: nn.Module, ops):
        super().__init__()
        self.ops = ops
        self.weight = norm.weight
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        if eps is None:
            raise OpsError(f"{type(norm).__name__} has no variance_epsilon: not a LlamaRMSNorm")
        self.variance_epsilon = float(eps)

    def forward(self, x):
        return self.ops.rmsnorm(x, self.weight, self.variance_epsilon)


class TilegenLlamaAttention(nn.Module):
    """LlamaAttention's forward on tilegen ops (the module docstring says which); returns what the original
    returned to the layer: (output, None) or, for layers that unpack three values, (output, None, cache)."""

    def __init__(self, attn: nn.Module, ops, *, returns: int = 2):
        super().__init__()
        config = attn.config
        self.ops = ops
        self.config = config
        self.layer_idx = attn.layer_idx
        self.head_dim = attn.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.scaling = float(attn.scaling)
        self.is_causal = True
        self.returns = returns
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, TilegenLinear(getattr(attn, name), ops))

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        if position_embeddings is None:
            raise OpsError("TilegenLlamaAttention needs position_embeddings=(cos, sin), as LlamaDecoderLayer passes "
                           "them in transformers 4.48 and later")
        if attention_mask is not None:
            raise OpsInputError("TilegenLlamaAttention: attention_mask must be None (the kernels apply the causal "
                                "mask themselves; padding masks are not supported)")
        cache = next((kwargs[k] for k in CACHE_KWARGS if kwargs.get(k) is not None), None)
        if cache is not None and not (isinstance(cache, KVCache) and cache.layout == "bshd"):
            raise OpsInputError(f"TilegenLlamaAttention: the cache must be a codegen.ops.llama.KVCache of layout bshd,"
                                f" not {type(cache).__name__}")
        b, s, hidden = hidden_states.shape
        h, kvh, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = hidden_states.reshape(b * s, hidden)
        q = self.q_proj(x).view(b * s, h, d)
        k = self.k_proj(x).view(b * s, kvh, d)
        v = self.v_proj(x).view(b, s, kvh, d)
        cos, sin = position_embeddings
        if cos.shape[-1] != d:
            raise OpsInputError(f"TilegenLlamaAttention: cos/sin rows of {cos.shape[-1]}, head_dim {d}: "
                                "partial rotary embeddings are not wired here")
        half = d // 2  # rotate_half tables hold each angle twice: the first half is the rope op's table
        cos_t = cos[..., :half].float().expand(b, s, half).reshape(b * s, half).contiguous()
        sin_t = sin[..., :half].float().expand(b, s, half).reshape(b * s, half).contiguous()
        q, k = self.ops.rope(q, k, cos_t, sin_t)
        q, k = q.view(b, s, h, d), k.view(b, s, kvh, d)
        if cache is None:
            o = self.ops.attention(q, k, v, causal=s > 1, scale=self.scaling)
        else:
            k_all, v_all = cache.update_bshd(k, v, self.layer_idx)
            if s == 1:
                o = self.ops.attention_decode(q, k_all, v_all, causal=False, scale=self.scaling)
            else:
                o = self.ops.attention(q, k_all, v_all, causal="bottom_right", scale=self.scaling)
        out = self.o_proj(o.view(b * s, h * d)).view(b, s, hidden)
        return (out, None) if self.returns == 2 else (out, None, cache)


def _attention_returns(layer: nn.Module) -> int:
    """How many values the layer's forward unpacks from self.self_attn(...): 2 (transformers 4.48 and later)
    or 3 (earlier), read from its source; 2 when the source cannot be read."""
    try:
        source = inspect.getsource(type(layer).forward)
    except (OSError, TypeError):
        return 2
    found = re.search(r"^\s*([\w\s,]+?)\s*=\s*self\.self_attn\(", source, re.MULTILINE)
    return len([t for t in found.group(1).split(",") if t.strip()]) if found else 2


def patch_llama_layer(layer: nn.Module, ops) -> nn.Module:
    """Route `layer`'s projections, RMSNorms, RoPE and attention through `ops`, in place (the same weight
    Parameters; the module docstring lists the swaps); `layer` back. Eval only: attention dropout is refused."""
    for name in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"):
        if not hasattr(layer, name):
            raise OpsError(f"{type(layer).__name__} has no {name}: not a LlamaDecoderLayer")
    attn = layer.self_attn
    if getattr(attn, "attention_dropout", 0.0) and layer.training:
        raise OpsError("patch_llama_layer: the layer is in training mode with attention dropout; call .eval() first")
    if "position_embeddings" not in inspect.signature(type(layer).forward).parameters:
        raise OpsError(f"{type(layer).__module__}.{type(layer).__name__}.forward takes no position_embeddings: "
                       "transformers 4.48 or later is needed")
    layer.self_attn = TilegenLlamaAttention(attn, ops, returns=_attention_returns(layer))
    layer.input_layernorm = TilegenRMSNorm(layer.input_layernorm, ops)
    layer.post_attention_layernorm = TilegenRMSNorm(layer.post_attention_layernorm, ops)
    for name in ("gate_proj", "up_proj", "down_proj"):
        setattr(layer.mlp, name, TilegenLinear(getattr(layer.mlp, name), ops))
    return layer


def cache_kwarg(layer: nn.Module) -> str:
    """The name under which `layer`'s forward takes its cache (`cache`, `past_key_values` or `past_key_value`)."""
    layer = getattr(layer, "_orig_mod", layer)  # a torch.compile'd module: the module it wraps
    params = inspect.signature(type(layer).forward).parameters
    for name in CACHE_KWARGS:
        if name in params:
            return name
    raise OpsError(f"{type(layer).__name__}.forward takes none of {', '.join(CACHE_KWARGS)}")


def call_layer(layer: nn.Module, hidden_states, position_embeddings, cache=None):
    """`layer(hidden_states, ...)` as its transformers version takes it (the cache under its own keyword, no
    attention mask: causal over the call's tokens, or every cached key for one new token); the hidden states out
    (older layers return them in a tuple)."""
    kwargs = {"position_embeddings": position_embeddings, "attention_mask": None}
    if cache is not None:
        kwargs[cache_kwarg(layer)] = cache
        kwargs["use_cache"] = True
    out = layer(hidden_states, **kwargs)
    return out[0] if isinstance(out, tuple) else out
