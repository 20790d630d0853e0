"""Which kernel serves a call: data (the project's kernels, their specs' shapes, the lockfile's entries) and one
function, `resolve`, whose answer -- a `Route` -- says what it chose and why.

In order, for a call whose kernels must be `want` (codegen.ops.adapters.Want) at `shape`:

1. tuned    a lockfile entry of this device for exactly this shape: the configuration the tuner chose (where
            several specs' entries answer -- a gemv spec and a tiled one tuned at one decode shape -- the one
            whose winner measured fastest, each time from its own tune run on this device);
2. spec     a spec that lists this shape: its hand configuration;
3. GEMM only, by M (N and K as a spec lists them):
   bucket   a lockfile entry of this device at the same N, K and the smallest tuned M at or above the call's:
            its kernel runs at the tuned M on A padded with zero rows (C's extra rows are dropped), provided
            that is at most BUCKET_MAX_BLOCK_RATIO times the row blocks the call itself needs;
   dynamic  a dynamic_m kernel whose range holds M (one compiled binary for every M);
   bucket   as above, from the shapes the specs list (hand configurations);
   attention (decode) by seq_kv, batch, heads, kv_heads and seq_q as a spec lists them:
   dynamic  a dynamic_kv kernel whose range holds seq_kv (one compiled binary for every KV length);
4. fallback the op's torch implementation, with the reason no kernel serves the call.

An entry tuned on another device never answers (a lockfile only speaks for its own device).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from codegen.core.hardware import Target
from codegen.generate.render import RenderedFile
from codegen.ops.adapters import ADAPTERS, Want

# a bucket's kernel runs at most this many times the row blocks (block_m rows) the call's own M needs: the waste
# of padding is bounded, and a block's worth of padding (M = 1 on a 16-row tile) is free
BUCKET_MAX_BLOCK_RATIO = 2
ROUTES = ("tuned", "spec", "bucket", "dynamic", "fallback")
MAX_SHAPES_SHOWN = 6


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One kernel and one spec that asked for it: the shapes it was asked for, and the device whose lockfile
    chose it for them ('' for the spec's hand configuration)."""

    rendered: RenderedFile
    spec: str
    shapes: tuple[tuple[int, ...], ...]
    tuned_on: str
    tuned_ms: tuple[tuple[tuple[int, ...], float], ...] = ()  # (shape, the winner's median ms) from the lockfile

    @property
    def instance(self):
        return self.rendered.instance

    def time_at(self, shape: tuple) -> float:
        """What the lockfile measured this kernel at `shape` (inf where it records nothing)."""
        return next((ms for s, ms in self.tuned_ms if s == shape), math.inf)


@dataclass(frozen=True, kw_only=True)
class Route:
    """How one (want, shape) is served: `route` (one of ROUTES), the kernel (None: the torch fallback), the spec
    that asked for it, the shape it runs at (a bucket: the padded M) and, in words, why."""

    route: str
    want: Want
    shape: tuple
    rendered: RenderedFile | None = None
    spec: str = ""
    run_shape: tuple = ()
    detail: str = ""

    @property
    def kernel(self) -> str:
        return self.rendered.uri if self.rendered is not None else "torch"


def catalog(files: Iterable[RenderedFile], target: Target,
            times: Mapping[tuple[str, tuple[int, ...]], float] | None = None) -> dict[Want, list[Candidate]]:
    """Every kernel of `target` that an op can call, by the Want it serves, in the files' (sorted) order.
    `times`: (spec, shape) -> the median ms its lockfile entry's winner measured (the tuned candidates' times)."""
    times = times or {}
    out: dict[Want, list[Candidate]] = {}
    for f in files:
        inst = f.instance
        if inst.target != target:
            continue
        for adapter in ADAPTERS.values():
            if adapter.op != inst.op:
                continue
            want = adapter.want_of(inst)
            if want is None:
                continue
            for ref in f.specs:
                shapes = tuple(tuple(s) for s in ref.shapes)
                tuned_ms = tuple((s, times[ref.name, s]) for s in shapes if ref.tuned_on and (ref.name, s) in times)
                out.setdefault(want, []).append(Candidate(rendered=f, spec=ref.name, shapes=shapes,
                                                          tuned_on=ref.tuned_on, tuned_ms=tuned_ms))
    return out


def _x(shape) -> str:
    return "x".join(str(d) for d in shape)


def resolve(want: Want, shape: tuple, candidates: list[Candidate], device: str) -> Route:
    shape = tuple(shape)
    tuned = [c for c in candidates if c.tuned_on == device]
    hand = [c for c in candidates if not c.tuned_on]

    def route(kind: str, c: Candidate, run_shape: tuple, detail: str) -> Route:
        return Route(route=kind, want=want, shape=shape, rendered=c.rendered, spec=c.spec, run_shape=run_shape,
                     detail=detail)

    answering = [c for c in tuned if shape in c.shapes]
    if answering:
        c = min(answering, key=lambda c: c.time_at(shape))  # min() keeps the first of equal times: the files' order
        detail = f"lockfile entry of {c.spec} on {device}"
        if len(answering) > 1:
            others = ", ".join(f"{o.spec} {o.time_at(shape):.4g} ms" for o in answering if o is not c)
            detail += f": the fastest tuned entry at this shape ({c.time_at(shape):.4g} ms; {others})"
        return route("tuned", c, shape, detail)
    for c in hand:
        if shape in c.shapes:
            return route("spec", c, shape, f"a shape of spec {c.spec}")
    if want.op == "gemm" and len(shape) == 3:
        m, n, k = shape
        found = _bucket(tuned, m, n, k)
        if found:
            c, mi = found
            return route("bucket", c, (mi, n, k), f"m={m} run at m={mi}: lockfile entry of {c.spec} at "
                                                  f"{_x((mi, n, k))} on {device}")
        for c in hand:
            r = c.instance.dynamic_m
            if r is not None and r[0] <= m <= r[1] and (n, k) in {(s[1], s[2]) for s in c.shapes}:
                return route("dynamic", c, shape, f"dynamic_m [{r[0]}, {r[1]}] of spec {c.spec}")
        found = _bucket(hand, m, n, k)
        if found:
            c, mi = found
            return route("bucket", c, (mi, n, k), f"m={m} run at m={mi}: a shape of spec {c.spec}")
    if want.op == "attention" and len(shape) == 5:
        for c in hand:
            r = c.instance.dynamic_kv
            if r is not None and r[0] <= shape[4] <= r[1] and shape[:4] in {s[:4] for s in c.shapes}:
                return route("dynamic", c, shape, f"dynamic_kv [{r[0]}, {r[1]}] of spec {c.spec}")
    return Route(route="fallback", want=want, shape=shape, detail=_why(want, shape, candidates, device))


def _bucket(candidates: list[Candidate], m: int, n: int, k: int) -> tuple[Candidate, int] | None:
    """The static kernel and tuned/listed M of the smallest M >= m at (n, k) within BUCKET_MAX_BLOCK_RATIO (of
    kernels tuned at that M, the one measured fastest)."""
    best = None
    for c in candidates:
        if c.instance.dynamic_m is not None:
            continue
        bm = c.instance.block_m
        for mi, ni, ki in c.shapes:
            if (ni, ki) != (n, k) or mi < m or -(-mi // bm) > BUCKET_MAX_BLOCK_RATIO * -(-m // bm):
                continue
            if best is None or (mi, c.time_at((mi, n, k))) < (best[1], best[0].time_at((best[1], n, k))):
                best = (c, mi)  # the smallest M; of two kernels tuned there, the faster
    return best


def _why(want: Want, shape: tuple, candidates: list[Candidate], device: str) -> str:
    if not candidates:
        return f"no kernel of the project is {want.describe()}"
    served: list[str] = []
    for c in candidates:
        if c.tuned_on and c.tuned_on != device:
            continue
        r = c.instance.dynamic_m if want.op == "gemm" else None
        if r is not None:
            served += [f"m {r[0]}..{r[1]} x {n}x{k}" for n, k in dict.fromkeys((s[1], s[2]) for s in c.shapes)]
        r = c.instance.dynamic_kv if want.op == "attention" else None
        if r is not None:
            served += [f"{_x(head)}x{r[0]}..{r[1]}" for head in dict.fromkeys(s[:4] for s in c.shapes)]
        served += [_x(s) for s in c.shapes]
    served = list(dict.fromkeys(served))
    shown = ", ".join(served[:MAX_SHAPES_SHOWN]) + (f" (+{len(served) - MAX_SHAPES_SHOWN} more)"
                                                     if len(served) > MAX_SHAPES_SHOWN else "")
    other = sorted({c.tuned_on for c in candidates if c.tuned_on and c.tuned_on != device})
    note = f"; lockfile entries of {', '.join(other)} do not answer on {device}" if other else ""
    return f"no kernel serves {_x(shape)}: the {want.describe()} kernels serve {shown or 'nothing here'}{note}"
