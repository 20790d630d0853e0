"""rope legality rules: named predicates over (spec, target), each yielding `Violation`s.

One workgroup per token. A token's work is split into items of `vector` elements: a rotation item
(head, j) reads x1 = x[j*vector:(j+1)*vector] and x2 = x[half + j*vector:...] of one head and writes
both rotated halves; a pass-through item copies `vector` elements of x[rotary_dim:head_dim]. The
(heads + kv_heads) * half/vector rotation items, then the (heads + kv_heads) * (head_dim -
rotary_dim)/vector pass-through items, are dealt to the threads in turn (item it*threads + tx).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from codegen.core.hardware import DType, Hardware
from codegen.families.rope.spec import RopeShape, RopeSpec
from codegen.families.rules import Violation, threads_violations
from codegen.families.spec import TailPolicy
from codegen.targets.base import TargetSpec

ROPE_TYPES = (DType.FP16, DType.BF16)


@dataclass(frozen=True, kw_only=True)
class RopeContext:
    spec: RopeSpec
    target: TargetSpec

    @property
    def hw(self) -> Hardware:
        return self.target.hw


RopeRule = Callable[[RopeContext], Iterator[Violation]]


def rotation_items(spec: RopeSpec, shape: RopeShape) -> int:
    """Rotation items of one token: (heads + kv_heads) * (rotary_dim / 2) / vector."""
    return (shape.heads + shape.kv_heads) * (spec.rotary_dim // 2 // spec.vector)


def pass_items(spec: RopeSpec, shape: RopeShape) -> int:
    """Pass-through items of one token: (heads + kv_heads) * (head_dim - rotary_dim) / vector."""
    return (shape.heads + shape.kv_heads) * ((spec.head_dim - spec.rotary_dim) // spec.vector)


def _whole_items(spec: RopeSpec) -> bool:
    """Whether the head splits into whole items (rules rotary_dim and vector_width pass): what the item counts need."""
    return not (spec.rotary_dim % 2 or spec.rotary_dim > spec.head_dim or (spec.rotary_dim // 2) % spec.vector
                or (spec.head_dim - spec.rotary_dim) % spec.vector)


def rope_dtype_supported(c: RopeContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    for part in ("input", "out"):
        dt = getattr(d, part)
        if dt not in ROPE_TYPES:
            yield Violation(rule="dtype_supported", path=("dtypes", part), value=dt.value,
                            message="rope takes fp16 or bf16 (cos and sin are fp32)")
    if d.accumulate != DType.FP32:
        yield Violation(rule="dtype_supported", path=("dtypes", "accumulate"), value=d.accumulate.value,
                        message="the rotation is computed in fp32: accumulate must be fp32")


def rope_wave_multiple(c: RopeContext) -> Iterator[Violation]:
    yield from threads_violations(c.spec.threads, c.hw, ("threads",))


def rope_rotary_dim(c: RopeContext) -> Iterator[Violation]:
    r, d = c.spec.rotary_dim, c.spec.head_dim
    if r % 2:
        yield Violation(rule="rotary_dim", path=("rotary_dim",), value=r,
                        message="must be even (x1 and x2 are its two halves)")
    elif r > d:
        yield Violation(rule="rotary_dim", path=("rotary_dim",), value=r, message=f"exceeds head_dim={d}")


def rope_vector_width(c: RopeContext) -> Iterator[Violation]:
    # vector <= 8 of a 2-byte dtype is at most one 16-byte load: only the divisibility can fail
    spec = c.spec
    if spec.rotary_dim % 2 or spec.rotary_dim > spec.head_dim:
        return  # rotary_dim reports it
    half = spec.rotary_dim // 2
    if half % spec.vector:
        yield Violation(rule="vector_width", path=("vector",), value=spec.vector,
                        message=f"must divide rotary_dim/2={half} (a load never straddles x1 and x2)")
    rest = spec.head_dim - spec.rotary_dim
    if rest % spec.vector:
        yield Violation(rule="vector_width", path=("vector",), value=spec.vector,
                        message=f"must divide head_dim - rotary_dim={rest} (the pass-through part is copied in vectors)")


def rope_gqa_heads(c: RopeContext) -> Iterator[Violation]:
    for i, s in enumerate(c.spec.shapes):
        if s.heads % s.kv_heads:
            yield Violation(rule="gqa_heads", path=("shapes", i, "kv_heads"), value=s.kv_heads,
                            message=f"must divide heads={s.heads} (each K head serves heads/kv_heads query heads)")


def rope_tail_policy(c: RopeContext) -> Iterator[Violation]:
    spec = c.spec
    if spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="tail_policy", path=("tail",), value=spec.tail.value,
                        message="rope has none and predicated: its item loops are unrolled, so predicated "
                                "already checks the last iteration only")
        return
    if spec.tail != TailPolicy.NONE:
        return
    if not _whole_items(spec):
        return  # rotary_dim / vector_width report it
    for i, s in enumerate(spec.shapes):
        for what, n in (("rotation", rotation_items(spec, s)), ("pass-through", pass_items(spec, s))):
            if n % spec.threads:
                yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                                message=f"{n} {what} items per token ((heads + kv_heads) x {what} vectors per "
                                        f"head) is not a multiple of threads={spec.threads}: set tail: predicated")


# the item loops are unrolled: a thread's items are that many copies of the load, rotate and store code
MAX_ITEMS_PER_THREAD = 64


def rope_items_per_thread(c: RopeContext) -> Iterator[Violation]:
    """Rule rope_items: every item loop is fully unrolled, so a thread's items of one token are copies of the
    code, each holding its vectors in registers; past MAX_ITEMS_PER_THREAD the compile takes minutes and
    gigabytes (8192 items a thread did not finish in 5 minutes) and the kernel would not run well anyway."""
    spec = c.spec
    if not _whole_items(spec):
        return  # rotary_dim / vector_width report it
    for i, s in enumerate(spec.shapes):
        items = -(-rotation_items(spec, s) // spec.threads) + -(-pass_items(spec, s) // spec.threads)
        if items > MAX_ITEMS_PER_THREAD:
            yield Violation(rule="rope_items", path=("shapes", i), value=None,
                            message=f"{items} items per thread (rotation and pass-through vectors of "
                                    f"(heads + kv_heads) heads over threads={spec.threads}), over the "
                                    f"{MAX_ITEMS_PER_THREAD} its unrolled loops take: more threads or a wider vector")


ROPE_RULES: tuple[RopeRule, ...] = (
    rope_dtype_supported, rope_wave_multiple, rope_rotary_dim, rope_vector_width, rope_gqa_heads, rope_tail_policy,
    rope_items_per_thread,
)


def check(spec: RopeSpec, target: TargetSpec) -> list[Violation]:
    """Every rope legality rule on one target."""
    ctx = RopeContext(spec=spec, target=target)
    return [v for rule in ROPE_RULES for v in rule(ctx)]
