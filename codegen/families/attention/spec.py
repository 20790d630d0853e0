"""The attention spec model (`op: attention`): FlashAttention-style forward.

variant prefill: one workgroup per (query block of block_m rows, head, batch); KV blocks of block_n keys
stream through LDS/shared memory with an online softmax (running max and sum in fp32); nothing of
seq_q x seq_kv is stored. variant decode (flash-decoding): the query heads of one K/V head and all of the
few query positions are packed into the rows of one block, the KV sequence is split over split_kv
workgroups that each write a partial output and its log-sum-exp (fp32 workspace), and a second kernel
of the same module merges them.
Layout: Q and O [batch, seq_q, heads, head_dim], K and V [batch, seq_kv, kv_heads, head_dim] (docs/attention.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictInt
from pydantic_core import PydanticCustomError

from codegen.core.hardware import Target
from codegen.families.gemm.spec import GridPolicy
from codegen.families.spec import (
    K_PACK,
    MAX_SHAPES,
    DynamicRange,
    Identifier,
    Knob,
    Model,
    Pipeline,
    PositiveFp32,
    PositiveInt,
    RowDTypes,
    TailPolicy,
    TargetOnly,
    ToleranceScale,
    int_choice,
    override_model,
    resolve_tuning,
    search_entry,
    search_model,
    target_only,
    tunable_paths,
    tuning_model,
    with_knobs,
)

ATTENTION_HEAD_DIMS = (64, 128)


class SplitKvCombine(StrEnum):
    """Who merges decode's KV splits (`split_kv_combine`). kernel: a second kernel, one workgroup per (head,
    position, batch), weighs each split's output by its log-sum-exp. fixup: no second kernel -- each split, its
    output and log-sum-exp stored, counts itself in on its block of rows' int32 arrival counter (zero on entry,
    left zero); the split that arrives last merges every split's output of those rows in the same order (the
    serial combine's sums) and stores O."""

    KERNEL = "kernel"
    FIXUP = "fixup"


class CausalMask(StrEnum):
    """Which keys query i (of seq_q) may see among seq_kv. `causal: true` (the bool of earlier specs)
    means top_left, what it always meant."""

    NONE = "none"  # every key
    TOP_LEFT = "top_left"  # j <= i (SDPA's is_causal=True)
    BOTTOM_RIGHT = "bottom_right"  # j <= i + (seq_kv - seq_q): the queries are the last seq_q positions (KV cache)


def _causal(value: object) -> object:
    if value is False:
        return CausalMask.NONE
    if value is True:
        return CausalMask.TOP_LEFT
    if value in (CausalMask.TOP_LEFT.value, CausalMask.BOTTOM_RIGHT.value):
        return CausalMask(value)
    raise PydanticCustomError("causal", "must be false, top_left or bottom_right (true, as in earlier specs, "
                              "means top_left)")


Causal = Annotated[CausalMask, BeforeValidator(_causal)]


class AttentionVariant(StrEnum):
    PREFILL = "prefill"  # one workgroup per (query block, head, batch), the whole KV loop in it
    DECODE = "decode"  # split KV: GQA-packed rows, split_kv partial outputs + log-sum-exp, a combine kernel


class AttentionSchedule(StrEnum):
    """How a prefill kernel's KV loop is scheduled. default: the template TileLang pipelines itself
    (num_stages; on sm_90 its automatic producer/consumer warp specialization). ws (sm_90 only): written
    warp-specialized, FA3 style: a TMA producer warpgroup and block_m/64 consumer warpgroups of 64 query
    rows each, explicit full/empty mbarriers per K/V slot, setmaxnreg, and asynchronous wgmma so the
    softmax of KV block k runs while P.V of block k-1 is in flight. persistent: the default schedule's KV
    loop inside a persistent loop, as the gfx942 attention kernels do: a grid of one workgroup per CU/SM,
    each looping over (query block, head, batch) tiles, its LDS/shared tiles and fragments allocated once
    (rules persistent_*). fa3 (sm_90 only): FlashAttention-3's schedule -- ws's producer and consumers, plus a
    ring of `stages` K/V slots, the consumers' GEMMs taken in turn on named barriers (ping-pong: one
    warpgroup's softmax runs while another's GEMMs run), O staged through shared memory and stored by TMA,
    and causal query blocks launched longest first (rules fa3_*)."""

    DEFAULT = "default"
    WS = "ws"
    PERSISTENT = "persistent"
    FA3 = "fa3"


class TileOrder(StrEnum):
    """How fa3's persistent grid deals its tiles to its workgroups, round after round (the tile order itself --
    causal longest first, in L2 sections -- is the same). strided: workgroup w takes tiles w, w + grid, w + 2 *
    grid, ... snake: the even rounds as strided, the odd ones in reverse (workgroup w takes tile (r + 1) * grid - 1
    - w of round r), so a workgroup that took one of a round's longest causal tiles takes one of the next round's
    shortest. dynamic: workgroup w takes tile w, then the next number of a counter in global memory each time it
    is done with one (FlashAttention-3's dynamic tile scheduler): the tiles go out in order as workgroups come
    free, whatever their lengths. Rule tile_order_grid."""

    STRIDED = "strided"
    SNAKE = "snake"
    DYNAMIC = "dynamic"


class VLayout(StrEnum):
    """How the prefill stages V's BLOCK_N x head_dim tile (keys x head_dim, as stored) in LDS for P.V, whose
    B operand runs along the keys. natural: as stored (the MFMA reads B 2 bytes a lane, ds_read_u16).
    transposed: each thread loads V_ROWS consecutive key rows with 16-byte loads into registers, permutes
    them and writes a head_dim x BLOCK_N tile; P.V reads it with transpose_B, keys contiguous (as the GEMM's
    lds_layout transposed_b). schedule persistent only (rule v_layout_schedule)."""

    NATURAL = "natural"
    TRANSPOSED = "transposed"


class AttentionShape(Model):
    batch: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt  # heads share a K/V head in groups of heads // kv_heads (GQA; = heads for MHA)
    seq_q: PositiveInt
    seq_kv: PositiveInt


class AttentionTiling(Model):
    block_m: PositiveInt  # query rows per workgroup
    block_n: PositiveInt  # keys per KV block (one step of the online softmax)
    threads: PositiveInt


# The attention tunables, declared once, in order: the tuning and override models, AttentionSpec's tunable fields,
# ATTENTION_TUNABLES (what `search:` may list) and AttentionSpec.TARGET_ONLY are derived from this.
ATTENTION_KNOBS: tuple[Knob, ...] = (
    Knob(name="tiling", type=AttentionTiling, doc="query rows and keys per step of a workgroup, and its threads"),
    Knob(name="pipeline", type=Pipeline, default=Pipeline(), doc="KV-loop stages"),
    Knob(name="split_kv", type=PositiveInt | Literal["auto"], default=1,
         doc="decode: workgroups the KV sequence of one (batch, K/V head) is split over: N, or auto (per shape, "
             "the most splits whose workgroups fit one wave of the target's CUs/SMs; rules.auto_split_kv)"),
    Knob(name="combine_vec", type=int_choice(1, 4), default=1,
         doc="decode: fp32 elements of a split's output each thread of the combine kernel loads at once: 1 (one, "
             "split after split) or 4 (16-byte loads, threads * 4 // head_dim splits a step; rule combine_vec_variant)"),
    Knob(name="split_kv_combine", type=SplitKvCombine, default=SplitKvCombine.KERNEL,
         doc="decode: who merges the KV splits -- kernel (a second kernel) or fixup (the last split of each block of "
             "rows to finish, in the same order; int32 arrival counters; rule split_kv_combine_variant)"),
    Knob(name="schedule", type=AttentionSchedule, default=AttentionSchedule.DEFAULT,
         doc="prefill KV loop: default, ws or fa3 (sm_90, rules ws_*, fa3_*) or persistent (rules persistent_*)"),
    Knob(name="grid", type=GridPolicy, default=GridPolicy.TILES,
         doc="schedule fa3: one workgroup per (query block, head, batch) tile, or persistent (one per SM, each "
             "looping over tiles, causal ones longest first; rule grid_schedule)"),
    Knob(name="tile_order", type=TileOrder, default=TileOrder.STRIDED,
         doc="schedule fa3, grid persistent: the tiles dealt to the workgroups strided (w, w + grid, ...) or snake "
             "(odd rounds in reverse: each workgroup's causal loops even out) or dynamic (the next tile from a counter "
             "as a workgroup comes free); rule tile_order_grid"),
    Knob(name="k_pack", type=int_choice(1, 2), default=1, takes=K_PACK.takes,
         doc="gfx942/gfx950, schedule persistent: MFMA ops packed along K in Q.K^T (rules k_pack_target, "
             "k_pack_schedule)"),
    Knob(name="v_layout", type=VLayout, default=VLayout.NATURAL,
         doc="schedule persistent: V staged in LDS as stored or transposed (rules v_layout_schedule, v_layout_tile)"),
)

AttentionTuning = tuning_model("AttentionTuning", ATTENTION_KNOBS, module=__name__,
                               doc="The per-target tunables; `overrides.<target>` may replace any of them for one "
                                   "target.")
AttentionOverride = override_model("AttentionOverride", ATTENTION_KNOBS, module=__name__,
                                   doc="`overrides.<target>`: any of the per-target tunables, for one target.")
ATTENTION_TUNABLES = tunable_paths(ATTENTION_KNOBS)


class _AttentionSpecHead(Model):
    """AttentionSpec's fields before its tunables."""

    name: Identifier
    op: Literal["attention"]
    dtypes: RowDTypes
    shapes: Annotated[list[AttentionShape], Field(min_length=1, max_length=MAX_SHAPES)]
    head_dim: PositiveInt  # 64 or 128 (rule head_dim)
    causal: Causal = CausalMask.NONE  # false, top_left or bottom_right (true = top_left)
    variant: AttentionVariant = AttentionVariant.PREFILL
    softmax_scale: PositiveFp32 | None = None  # None: 1/sqrt(head_dim)
    # decode: seq_kv symbolic over this range, one compiled kernel for every KV length (rules dynamic_kv_*); the
    # shapes are the workloads verify and bench run, and fix batch, heads, kv_heads and seq_q
    dynamic_kv: DynamicRange | None = None


class AttentionSpec(with_knobs("AttentionSpecTunables", _AttentionSpecHead, ATTENTION_KNOBS, module=__name__)):
    """`op: attention`: the head fields, the tunables of ATTENTION_KNOBS, then these."""

    TARGET_ONLY: ClassVar[tuple[TargetOnly, ...]] = tuple(target_only(ATTENTION_KNOBS).values())

    tail: TailPolicy = TailPolicy.NONE
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]  # noqa: RUF012 - pydantic copies it
    overrides: dict[Target, AttentionOverride] = {}  # noqa: RUF012 - pydantic copies it
    # `tilegen tune`'s space per target: one block, or a list of blocks (the union of their spaces); `gen` ignores it
    search: dict[Target, search_entry(AttentionSearch)] = {}  # noqa: RUF012
    allow_spills: StrictBool = False
    verify_tolerance_scale: ToleranceScale = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None

    def tuning_for(self, target: Target) -> tuple[AttentionTuning, dict[str, tuple[str, ...]]]:
        """The effective tunables for `target` and, per field, the spec path it came from."""
        return resolve_tuning(self, AttentionTuning, target)


AttentionSearch = search_model("AttentionSearch", AttentionSpec, ATTENTION_TUNABLES)
AttentionSpec.model_rebuild()


# `tilegen init` writes this as specs/attention.yaml.
STARTER = """\
# Attention forward (FlashAttention style): Q, O [batch, seq_q, heads, head_dim], K, V [batch, seq_kv,
# kv_heads, head_dim]; online softmax over KV blocks. causal: false, top_left (query i sees keys j <= i, as
# SDPA's is_causal) or bottom_right (the queries are the last seq_q positions of the KV cache).
# Every field, its default and rules: tilegen's docs/attention.md.
- name: attn_fp16_d128
  op: attention
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  shapes:
    - {batch: 1, heads: 32, kv_heads: 8, seq_q: 2048, seq_kv: 2048}
  head_dim: 128
  causal: top_left
  tiling: {block_m: 128, block_n: 128, threads: 256}
  pipeline: {stages: 2}
  # split_kv: 1             # decode: workgroups the KV sequence of one (batch, K/V head) is split over, or auto
  # dynamic_kv: {min: 1024, max: 131072}   # decode: one compiled kernel for every seq_kv in the range
  # combine_vec: 1          # decode: fp32 a combine thread loads per split at once: 1, or 4 (16-byte loads)
  # split_kv_combine: kernel # decode: kernel (a second kernel merges the splits) | fixup (the last split does)
  # schedule: default       # prefill KV loop: default | ws | fa3 (sm_90) | persistent
  # grid: tiles             # schedule fa3: tiles (a workgroup per query block) | persistent (one per SM)
  # tile_order: strided     # grid persistent: tiles w, w + grid, ... (strided) | odd rounds reversed (snake)
  #                         # | the next tile from a counter as a workgroup comes free (dynamic)
  # k_pack: 1               # gfx942/gfx950, schedule persistent: MFMA ops packed along K in Q.K^T
  # v_layout: natural       # schedule persistent: V staged in LDS as stored (natural) or transposed
  tail: none
  targets: [gfx942, sm_90]
  overrides:
    gfx942:                 # 64 KiB of LDS: Q 128x128 plus one 128x32 K/V buffer
      tiling: {block_m: 128, block_n: 32, threads: 256}
      pipeline: {stages: 1}
"""
