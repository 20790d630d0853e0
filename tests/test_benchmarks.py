"""The benchmark scripts' CPU-side parts: the variants they write are legal specs, and the illegal ones are
reported with the rule that rejects them (the GPU parts run on the H200 only)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_row_sweep_variants_are_legal_or_listed_with_their_rule():
    s = _load("sweep_rows_sm90")
    files, rejected = s.legal(s.variants(sorted(s.OPS), [64, 128, 256], [1, 2]))
    # 64 threads hold 8192 / 64 = 128 fp32 of a row per thread: over sm_90's budget of 127
    assert rejected == [f"| {op} | {v} | 64 | 8 | 1 | none | all | rejected by rule row_registers | | | | | |"
                        for op, v in (("layernorm", "registers"), ("rmsnorm", "registers"), ("softmax", "online"))]
    assert all(f.instance.target.value == "sm_90" for f in files)
    tails = {(f.instance.op, f.instance.variant, f.instance.tail) for f in files if f.instance.tail != "none"}
    assert tails == {(op, v, t) for op, v in (("softmax", "two_pass"), ("softmax", "online"), ("rmsnorm", "streamed"),
                                              ("rmsnorm", "registers"), ("layernorm", "streamed"),
                                              ("layernorm", "registers"))
                     for t in ("predicated", "specialized")}
    assert all(f.instance.unroll == 1 for f in files if f.instance.variant in ("online", "registers"))
