"""Numerics every family's verify and bench code shares: unit roundoffs, the input kinds, and
torch.compile'd baselines kept once per process. Each family's own numerics (inputs, reference,
tolerance, negative controls, FLOP/byte formulas, baselines) live in its folder."""

from __future__ import annotations

from codegen.hardware import DType

UNIT_ROUNDOFF = {DType.FP16: 2.0**-11, DType.BF16: 2.0**-8, DType.FP32: 2.0**-24, DType.FP8_E4M3: 2.0**-4}
# half the smallest subnormal of each output dtype: the absolute rounding error below the normal range
# (fp8 e4m3: e4m3fn's, 2^-9 / 2; e4m3fnuz's smallest subnormal is 2^-10, so the bound holds for both flavours)
SUBNORMAL_ROUNDOFF = {DType.FP16: 2.0**-25, DType.BF16: 2.0**-134, DType.FP32: 2.0**-150, DType.FP8_E4M3: 2.0**-10}
TINY = 1e-30

INPUT_KINDS = ("normal", "wide")

_COMPILED: dict[tuple, object] = {}


def compiled_once(key, op):
    """torch.compile(op), once per key and process (the bench worker keeps it across cases)."""
    if key not in _COMPILED:
        import torch
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _COMPILED[key] = torch.compile(op, dynamic=False)
    return _COMPILED[key]
