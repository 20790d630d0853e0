"""tilegen from Python: the kernels of a tilegen project as PyTorch ops.

    import tilegen
    ops = tilegen.load("path/to/project")      # or tilegen.load(): the project of the current folder
    y = ops.linear(x, weight)                  # dispatched per shape; ops.stats() says how

The implementation lives in codegen.ops (docs/python-api.md).
"""

from codegen.ops import (
    FallbackWarning,
    NoKernelError,
    Ops,
    OpsError,
    OpsInputError,
    StatRow,
    load,
    patch_llama_layer,
    stats_table,
)

__all__ = ["FallbackWarning", "NoKernelError", "Ops", "OpsError", "OpsInputError", "StatRow", "load",
           "patch_llama_layer", "stats_table"]
