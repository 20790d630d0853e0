"""The rope spec model (`op: rope`): rotary position embedding, GPT-NeoX / Llama style ("rotate_half",
non-interleaved), applied to Q and K in one launch, out of place.

For the first `rotary_dim` elements of every head vector, with half = rotary_dim / 2,
x1 = x[:half], x2 = x[half:rotary_dim]: out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin; elements
rotary_dim..head_dim are copied unchanged. Q [tokens, heads, head_dim], K [tokens, kv_heads, head_dim]
in the input dtype; cos, sin one row per token, already gathered by position: [tokens, rotary_dim/2] in fp32
(`tables: half`), or [tokens, rotary_dim] in the input dtype with each angle twice, as transformers' rotary
embeddings return them (`tables: full`: the kernel reads the first half of each row); Q_out, K_out like Q, K in
the output dtype. One workgroup per token (docs/rope.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from codegen.core.hardware import Target
from codegen.families.spec import (
    Identifier,
    Model,
    PositiveInt,
    RowDTypes,
    TailPolicy,
    int_choice,
    search_entry,
    search_model,
)


class RopeTables(StrEnum):
    """The cos and sin tables' layout. half: [tokens, rotary_dim/2] fp32, each angle once (serving stacks'
    cos_sin caches). full: [tokens, rotary_dim] in the input dtype, each angle twice ([c, c]), as transformers'
    rotary embedding modules return them (the kernel reads the first half of each row; no conversion)."""

    HALF = "half"
    FULL = "full"


class RopeShape(Model):
    tokens: PositiveInt  # rows of Q, K, cos and sin: one workgroup each
    heads: PositiveInt  # query heads
    kv_heads: PositiveInt  # key heads; must divide heads (GQA; = heads for MHA) (rule gqa_heads)


Vector = int_choice(1, 2, 4, 8)


class RopeSpec(Model):
    name: Identifier
    op: Literal["rope"]
    dtypes: RowDTypes  # input: Q, K; out: Q_out, K_out; accumulate: the rotation's math (fp32)
    shapes: Annotated[list[RopeShape], Field(min_length=1)]
    head_dim: PositiveInt
    rotary_dim: PositiveInt  # even, <= head_dim (rule rotary_dim); no default: models differ (Llama all, NeoX/Phi part)
    threads: PositiveInt  # workgroup size per token
    vector: Vector = 8  # elements per thread per load/store; divides rotary_dim/2 and head_dim - rotary_dim
    tail: TailPolicy = TailPolicy.NONE
    tables: RopeTables = RopeTables.HALF  # cos/sin: [tokens, rotary_dim/2] fp32, or transformers' [tokens, rotary_dim]
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]  # noqa: RUF012 - pydantic copies it
    allow_spills: StrictBool = False
    verify_tolerance_scale: Annotated[StrictFloat, Field(gt=0, le=100)] = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None
    # `tilegen tune`'s space per target: one block, or a list of blocks (the union of their spaces); `gen` ignores it
    search: dict[Target, search_entry(RopeSearch)] = {}  # noqa: RUF012


# what a rope spec's `search:` may list: the workgroup size and the elements one thread loads (the tail policy is
# the spec's choice of kernel, as in the row families)
ROPE_TUNABLES = ("threads", "vector")
RopeSearch = search_model("RopeSearch", RopeSpec, ROPE_TUNABLES)
RopeSpec.model_rebuild()


# `tilegen init` writes this as specs/rope.yaml.
STARTER = """\
# rope: rotary position embedding (NeoX/Llama rotate_half) on Q [tokens, heads, head_dim] and
# K [tokens, kv_heads, head_dim] in one launch, out of place; cos/sin [tokens, rotary_dim/2] in fp32.
# Every field, its default and rules: tilegen's docs/rope.md.
- name: rope_fp16
  op: rope
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  shapes:
    - {tokens: 4096, heads: 32, kv_heads: 8}
  head_dim: 128
  rotary_dim: 128           # even, <= head_dim; the rest of each head vector is copied
  threads: 64               # a multiple of 64 on gfx942, of 32 on sm_90
  vector: 8                 # elements per thread per load (8 x fp16 = one 16-byte load)
  tail: none                # none | predicated ((heads + kv_heads) x rotary_dim/2/vector not a multiple of threads)
  tables: half              # half: cos/sin [tokens, rotary_dim/2] fp32 | full: [tokens, rotary_dim], input dtype
  targets: [gfx942, sm_90]
"""
