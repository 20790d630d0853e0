"""Numerics every family's verify and bench code shares: unit roundoffs, the input kinds, the chunk a check
is made of (CheckChunk), and
torch.compile'd baselines kept once per process. Each family's own numerics (inputs, reference,
tolerance, negative controls, FLOP/byte formulas, baselines) live in its folder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from codegen.core.hardware import DType

UNIT_ROUNDOFF = {DType.FP16: 2.0**-11, DType.BF16: 2.0**-8, DType.FP32: 2.0**-24, DType.FP8_E4M3: 2.0**-4}
# half the smallest subnormal of each output dtype: the absolute rounding error below the normal range
# (fp8 e4m3: e4m3fn's, 2^-9 / 2; e4m3fnuz's smallest subnormal is 2^-10, so the bound holds for both flavours)
SUBNORMAL_ROUNDOFF = {DType.FP16: 2.0**-25, DType.BF16: 2.0**-134, DType.FP32: 2.0**-150, DType.FP8_E4M3: 2.0**-10}
TINY = 1e-30

INPUT_KINDS = ("normal", "wide")


@dataclass(frozen=True, kw_only=True)
class CheckChunk:
    """One piece of a check: the output elements `out[index]` and, for them, the fp32 reference, the
    modelled error magnitude and each negative control's wrong values."""

    index: tuple  # indexes the output tensor (slices, in the output's own dimensions)
    ref: object
    mag: object
    controls: Mapping[str, object]
    output: int = 0  # which of the kernel's outputs (Numerics.output_list) `index` indexes


_COMPILED: dict[tuple, object] = {}


def compiled_once(key, op):
    """torch.compile(op), once per key and process (the bench worker keeps it across cases)."""
    if key not in _COMPILED:
        import torch
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _COMPILED[key] = torch.compile(op, dynamic=False)
    return _COMPILED[key]
