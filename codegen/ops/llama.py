"""transformers' own LlamaDecoderLayer with its projections, RMSNorms, RoPE and attention routed through tilegen
ops (`patch_llama_layer`), and the preallocated KV cache (`KVCache`) the patched attention reads in the kernels'
layout.

What is swapped, and what stays:
- q/k/v/o_proj and the MLP's gate/up/down_proj: `TilegenLinear` (ops.linear; a bias, where the config has one,
  is added by torch after the kernel);
- input_layernorm and post_attention_layernorm: `TilegenRMSNorm` (ops.rmsnorm with the module's eps);
- self_attn: `TilegenLlamaAttention` -- the four projections, ops.rope on the cos/sin transformers computes
  (position_embeddings, as they are where the project has a rope spec of `tables: full` at the head dim; else the
  first half of each row, as fp32 tables), and ops.attention (causal top-left
  over the tokens of the call) or, with a KVCache and one query token, ops.attention_decode over the cache;
- the residual adds, the SiLU and the gate product stay transformers' torch code.
The layer's forward is transformers' own, unchanged -- unless `fuse=True`: then the layer's forward is replaced
by `fused_forward`, the same computation with three fused kernels: the residual add after attention and
post_attention_layernorm as one ops.add_rmsnorm (the sum is written for the MLP's residual and normalised in one
pass), gate_proj, up_proj, the activation and the product as one ops.gated_mlp (the two weights as they are), and
down_proj with the closing residual add in its epilogue (ops.linear(..., residual=)). The layer's class becomes a
subclass of its own (`Fused<name>`) whose forward has the original's signature and returns what it returned (a
tensor, or a 1-tuple where the layer of the installed transformers returns one).
Works with the forward signatures of transformers that pass position_embeddings=(cos, sin) to the layer (4.48
and later: cache passed as `cache`, `past_key_values` or `past_key_value`).
"""

from __future__ import annotations

import inspect
import re
from typing import ClassVar

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
        y = self.ops.linear(x, self.weight)  # the plain GEMM kernel; a bias is torch's add (ops.linear with a bias
        return y if self.bias is None else y + self.bias  # would ask for a kernel with the bias in its epilogue)


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

    def add(self, x, residual):
        """The residual add before this norm and the norm, fused: (rmsnorm(x + residual), x + residual)."""
        return self.ops.add_rmsnorm(x, residual, self.weight, self.variance_epsilon)


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
        # RoPE on transformers' own cos/sin ([b, s, head_dim], each angle twice) where the project has a rope kernel
        # of full tables at this head_dim; else the first half of each row as fp32 tables (two conversions a call)
        self.full_tables = any(w.op == "rope" and dict(w.params).get("tables") == "full"
                               and dict(w.params).get("rotary_dim") == self.head_dim for w in ops.kernels())

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
        if self.full_tables and cos.dtype == q.dtype and cos.shape[0] == b:
            q, k = self.ops.rope(q, k, cos.reshape(b * s, d), sin.reshape(b * s, d), tables="full")
        else:
            half = d // 2  # rotate_half tables hold each angle twice: the first half is the half tables' row
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


def patch_llama_layer(layer: nn.Module, ops, *, fuse: bool = False) -> nn.Module:
    """Route `layer`'s projections, RMSNorms, RoPE and attention through `ops`, in place (the same weight
    Parameters; the module docstring lists the swaps); `layer` back. Eval only: attention dropout is refused.
    fuse: the layer's forward becomes `fused_forward` (the residual add after attention fused into
    post_attention_layernorm: ops.add_rmsnorm; the MLP as ops.gated_mlp and down_proj with the residual add in its
    epilogue); the MLP must have no biases and a SiLU or GELU activation (mlp_activation)."""
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
    if fuse:
        layer.tilegen_mlp_activation = mlp_activation(layer.mlp)
        if not getattr(type(layer), "tilegen_fused", False):
            layer.__class__ = _fused_class(type(layer))
    return layer


# transformers' hidden_act names -> the gated kernels' activation (codegen.ops.adapters.GATES)
HIDDEN_ACTS = {"silu": "silu", "swish": "silu", "gelu": "gelu_erf", "gelu_pytorch_tanh": "gelu_tanh"}


def mlp_activation(mlp: nn.Module) -> str:
    """The activation of a gated MLP (gate_proj, up_proj, down_proj, act_fn) as ops.gated_mlp names it, from its
    config's hidden_act or its act_fn module; an OpsError where the fused MLP cannot compute it (another
    activation, biases on the projections)."""
    for name in ("gate_proj", "up_proj", "down_proj"):
        if getattr(getattr(mlp, name), "bias", None) is not None:
            raise OpsError(f"patch_llama_layer(fuse=True): mlp.{name} has a bias, which the gated-MLP kernel does not "
                           "add; patch with fuse=False")
    act = getattr(getattr(mlp, "config", None), "hidden_act", None)
    if isinstance(act, str):
        if act not in HIDDEN_ACTS:
            raise OpsError(f"patch_llama_layer(fuse=True): hidden_act {act!r} has no gated-MLP kernel (they compute "
                           f"{', '.join(HIDDEN_ACTS)}); patch with fuse=False")
        return HIDDEN_ACTS[act]
    fn = getattr(mlp, "act_fn", None)
    if isinstance(fn, nn.SiLU):
        return "silu"
    if isinstance(fn, nn.GELU):
        return "gelu_tanh" if fn.approximate == "tanh" else "gelu_erf"
    raise OpsError(f"patch_llama_layer(fuse=True): the MLP's activation ({type(fn).__name__}) is not one the gated-MLP "
                   "kernels compute (SiLU, GELU); patch with fuse=False")


class _FusedLayer:
    """What the fused subclass of a decoder layer class adds (see `_fused_class`)."""

    tilegen_fused: ClassVar[bool] = True
    tilegen_returns_tuple: ClassVar[bool] = False  # the original forward returns (hidden_states,)
    tilegen_signature: ClassVar[inspect.Signature]


def fused_forward(layer: nn.Module, hidden_states, *args, **kwargs):
    """transformers' LlamaDecoderLayer.forward (4.48 and later) with the residual add after attention and
    post_attention_layernorm fused into one ops.add_rmsnorm, and the MLP with its closing residual add in two
    fused GEMMs:

        residual = h;  h = input_layernorm(h);  h = self_attn(h, ...)
        h, residual = add_rmsnorm(h, residual)     # transformers: h = residual + h; residual = h; h = norm(h)
        h = residual + mlp(h)                      # _mlp_residual: gated_mlp, then down_proj + residual

    The keyword arguments go to self_attn as transformers passes them (positional ones are bound to the original
    signature's names first)."""
    if args:
        bound = layer.tilegen_signature.bind(layer, hidden_states, *args, **kwargs)
        kwargs = {k: v for k, v in bound.arguments.items() if k not in ("self", "hidden_states")}
        for name, p in layer.tilegen_signature.parameters.items():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update(kwargs.pop(name, {}))
    residual = hidden_states
    h = layer.input_layernorm(hidden_states)
    h = layer.self_attn(hidden_states=h, **kwargs)[0]
    h, residual = layer.post_attention_layernorm.add(h, residual)
    h = _mlp_residual(layer, h, residual)
    if not layer.tilegen_returns_tuple:
        return h
    return (h, None) if kwargs.get("output_attentions") else (h,)


def _mlp_residual(layer: nn.Module, h, residual):
    """The MLP and the residual add that closes the layer, residual + down_proj(act(gate_proj(h)) * up_proj(h)), in
    two fused kernels: ops.gated_mlp (both products, the activation and their product; only the product is written)
    and ops.linear with the residual in down_proj's epilogue (the sum in fp32, rounded once)."""
    mlp = layer.mlp
    ops = mlp.down_proj.ops
    p = ops.gated_mlp(h, mlp.gate_proj.weight, mlp.up_proj.weight, activation=layer.tilegen_mlp_activation)
    return ops.linear(p, mlp.down_proj.weight, residual=residual)


_FUSED_CLASSES: dict[type, type] = {}


def _fused_class(cls: type) -> type:
    """`Fused<cls>`: cls with `fused_forward` as its forward, under the original forward's signature (what
    inspect, cache_kwarg and callers read) and returning what it returned; one per class."""
    found = _FUSED_CLASSES.get(cls)
    if found is not None:
        return found
    signature = inspect.signature(cls.forward)

    def forward(self, hidden_states, *args, **kwargs):
        return fused_forward(self, hidden_states, *args, **kwargs)

    forward.__signature__ = signature
    forward.__doc__ = fused_forward.__doc__
    found = type(f"Fused{cls.__name__}", (_FusedLayer, cls),
                 {"forward": forward, "__module__": __name__, "tilegen_signature": signature,
                  "tilegen_returns_tuple": _returns_tuple(cls)})
    _FUSED_CLASSES[cls] = found
    return found


def _returns_tuple(cls: type) -> bool:
    """Whether cls.forward returns a tuple (`return outputs`, as older transformers do) rather than the hidden
    states, read from its source; False (the tensor) when the source cannot be read."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return re.search(r"^\s*return\s+outputs\b", source, re.MULTILINE) is not None


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
