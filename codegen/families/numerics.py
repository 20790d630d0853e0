"""Numerics every family's verify and bench code shares: unit roundoffs, the input kinds, the chunk a check
is made of (CheckChunk), and
torch.compile'd baselines kept once per process. Each family's own numerics (inputs, reference,
tolerance, negative controls, FLOP/byte formulas, baselines) live in its folder."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from codegen.core.hardware import DType

UNIT_ROUNDOFF = {DType.FP16: 2.0**-11, DType.BF16: 2.0**-8, DType.FP32: 2.0**-24, DType.FP8_E4M3: 2.0**-4}
# half the smallest subnormal of each output dtype: the absolute rounding error below the normal range
# (fp8 e4m3: e4m3fn's, 2^-9 / 2; e4m3fnuz's smallest subnormal is 2^-10, so the bound holds for both flavours)
SUBNORMAL_ROUNDOFF = {DType.FP16: 2.0**-25, DType.BF16: 2.0**-134, DType.FP32: 2.0**-150, DType.FP8_E4M3: 2.0**-10}
TINY = 1e-30

INPUT_KINDS = ("normal", "wide")

# host memory one process may keep of normal_draws (the least of this and a sixteenth of the machine's memory)
DRAWS_MAX_BYTES = 4 << 30
_DRAWS: OrderedDict[tuple, tuple[tuple, object, int]] = OrderedDict()  # key -> (tensors, generator state, bytes)


def _draws_budget() -> int:
    import os

    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return DRAWS_MAX_BYTES
    return min(DRAWS_MAX_BYTES, phys // 16)


def normal_draws(seed: int, *shapes: tuple[int, ...]):
    """(tensors, generator): `torch.randn` of each shape in turn from a CPU generator seeded `seed`, and a
    generator standing where those draws leave it (a family draws what else it needs from it, as it would have
    from the one generator).

    The draws of one (seed, shapes) are the same in every call, so a process keeps the latest ones (least
    recently used first out, DRAWS_MAX_BYTES at most) and hands out the same tensors again: a tune verifies and
    times every candidate at the same shapes, and the CPU draws 200 M normals a second on one thread (an
    attention decode case over 32k keys spent about 3 s drawing K and V). The tensors are shared: never write to
    them (derive new ones)."""
    import torch

    key = (seed, tuple(tuple(int(d) for d in s) for s in shapes))
    if key in _DRAWS:
        _DRAWS.move_to_end(key)
        tensors, state, _ = _DRAWS[key]
    else:
        g = torch.Generator(device="cpu").manual_seed(seed)
        tensors = tuple(torch.randn(*s, generator=g) for s in key[1])
        state = g.get_state()
        nbytes, budget = sum(t.numel() * t.element_size() for t in tensors), _draws_budget()
        if nbytes <= budget:
            _DRAWS[key] = (tensors, state, nbytes)
            while sum(n for _, _, n in _DRAWS.values()) > budget:  # a few entries: summed, not tracked
                _DRAWS.popitem(last=False)
    g = torch.Generator(device="cpu")
    g.set_state(state)
    return tensors, g


def verify_workspaces(inst, shape, device, run_target) -> tuple:
    """The workspaces of a launch on `run_target` as verify makes them (an instance's workspace_shapes, _dtypes and
    _zeroed; the dtypes as the device running it has them):
    NaN-filled, so that a kernel reading an element it did not write fails -- but the counters that must be zero
    on entry (the split fixups' arrival counters), zeros."""
    import torch

    from codegen.targets import torch_dtype

    return tuple(torch.zeros(s, dtype=torch_dtype(d, run_target), device=device) if zeroed else
                 torch.full(s, float("nan"), dtype=torch_dtype(d, run_target), device=device)
                 for s, d, zeroed in zip(inst.workspace_shapes(shape), inst.workspace_dtypes(),
                                         inst.workspace_zeroed(), strict=True))


def counters_left(inst, workspace) -> str:
    """'' or what a launch left in the workspaces that must be zero on entry: the split fixups' arrival counters
    and a dynamic tile order's tile counter must be zero again (a counter left set makes the next call's last
    split miss its turn, or its workgroups take no tile past their first, and the output be left unwritten).
    Numerics.after_launch of the families that have them."""
    for w, zeroed in zip(workspace, inst.workspace_zeroed(), strict=True):
        if zeroed:
            left = int((w != 0).sum().item())
            if left:
                return (f"{left} of {w.numel()} counters (zero on entry) left non-zero after the launch (max "
                        f"{int(w.max().item())}): the next call would count from there")
    return ""


@dataclass(frozen=True, kw_only=True)
class CheckChunk:
    """One piece of a check: the output elements `out[index]` and, for them, the fp32 reference, the
    modelled error magnitude and each negative control's wrong values."""

    index: tuple  # indexes the output tensor (slices, in the output's own dimensions)
    ref: object
    mag: object
    controls: Mapping[str, object]
    output: int = 0  # which of the kernel's outputs (Numerics.output_list) `index` indexes
    # controls that model one rounding step (a sum truncated instead of rounded): judged even where they are within
    # one step of the correctly rounded output, which judge_chunks leaves the others out of (n/a)
    rounding_controls: frozenset[str] = frozenset()


_COMPILED: dict[tuple, object] = {}


def compiled_once(key, op):
    """torch.compile(op), once per key and process (the bench worker keeps it across cases)."""
    if key not in _COMPILED:
        import torch
        import torch._dynamo

        # one compile per shape and dtype of the op's code (dynamic=False): a bench worker that serves a whole
        # `tune --all` (codegen.run.gpurun.GpuSession) meets every shape of a family, and past dynamo's limits
        # the op would run eager, uncompiled, under the name torch.compile
        cfg = torch._dynamo.config
        for name, floor in (("cache_size_limit", 1024), ("accumulated_cache_size_limit", 4096)):
            if hasattr(cfg, name):
                setattr(cfg, name, max(getattr(cfg, name), floor))
        _COMPILED[key] = torch.compile(op, dynamic=False)
    return _COMPILED[key]
