"""Tuned kernels called from PyTorch (`import tilegen`; docs/python-api.md).

`load(project_dir)` gives an `Ops` object whose callables (linear and gemm, with fused epilogue ops, gated_mlp, softmax, rmsnorm, layernorm, the fused
add_rmsnorm, add_layernorm, rmsnorm_fp8 and add_rmsnorm_fp8, rope, attention, attention_decode) take and return
torch tensors; each is a torch.library custom op that dispatches
per shape to the project's tuned or spec'd kernels (codegen.ops.dispatch), counts every call's route
(`Ops.stats`), and compiles each kernel once into the project's cache (codegen.ops.cache).
"""

from codegen.ops.api import Backend, Ops, StatRow, TileLangBackend, load, stats_table
from codegen.ops.errors import FallbackWarning, NoKernelError, OpsError, OpsInputError

__all__ = ["Backend", "FallbackWarning", "NoKernelError", "Ops", "OpsError", "OpsInputError", "StatRow",
           "TileLangBackend", "load", "patch_llama_layer", "stats_table"]


def patch_llama_layer(layer, ops, **kwargs):
    """transformers' LlamaDecoderLayer with its projections, RMSNorms, RoPE and attention routed through `ops`;
    fuse=True: and its forward replaced by one with the residual add + post_attention_layernorm fused, the gated
    MLP in one kernel and down_proj + residual in another (codegen.ops.llama; transformers is not imported)."""
    from codegen.ops.llama import patch_llama_layer as patch

    return patch(layer, ops, **kwargs)
