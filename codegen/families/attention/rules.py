"""Attention legality rules: named predicates over (spec, target), each yielding `Violation`s.

prefill: one workgroup per (query block, head, batch). decode: one per (KV split, K/V head and block of
its packed query rows, batch), plus the combine kernel. Both matmuls (S = Q.K^T over head_dim, O += P.V over
block_n) split the block's query rows among the waves/warps (GemmWarpPolicy.FullRow), so each
wave owns whole rows of S and the row max/sum never cross waves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from codegen.core.hardware import DTYPE_BYTES, DType
from codegen.families.attention.spec import (
    ATTENTION_HEAD_DIMS,
    AttentionSchedule,
    AttentionSpec,
    AttentionTuning,
    AttentionVariant,
    CausalMask,
    SplitKvCombine,
    TileOrder,
    VLayout,
)
from codegen.families.gemm.rules import transposed_b_rows
from codegen.families.gemm.spec import GridPolicy
from codegen.families.rules import TunedContext, Violation, target_only_value, threads_violations
from codegen.families.spec import K_PACK, TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

ATTENTION_TYPES = (DType.FP16, DType.BF16)

AttentionContext = TunedContext[AttentionSpec, AttentionTuning]


# TileLang 0.1.15's T.reduce_max / T.reduce_sum on HIP take a workspace of one fp32 per thread in LDS
# each (seen in the lowered source: two `workspace` buffers after the tiles); on CUDA they use warp
# shuffles only.
ATTENTION_REDUCE_WORKSPACES = 2


def attention_lds_bytes(spec: AttentionSpec, tuning: AttentionTuning, target: TargetSpec) -> int:
    """Shared-memory bytes of one attention workgroup: the Q tile once, the K and V tiles once per
    pipeline buffer, and the two reductions' workspaces on targets whose reductions take them
    (reduce_workspace_in_lds: gfx942). Nothing else is allocated in shared memory (S, P, O, max and
    sum are fragments; O is stored straight from registers, or with schedule fa3 through the Q tile, whose rows
    are read for the last time before O is final)."""
    t, d, nbytes = tuning.tiling, spec.head_dim, DTYPE_BYTES[spec.dtypes.input]
    tiles = (t.block_m * d + 2 * t.block_n * d * max(1, tuning.pipeline.stages)) * nbytes
    workspace = ATTENTION_REDUCE_WORKSPACES * t.threads * 4 if target.reduce_workspace_in_lds else 0
    return tiles + workspace


AttentionRule = Callable[[AttentionContext], Iterator[Violation]]


# ---- schedule ws (attention_ws.py.j2): one TMA producer warpgroup + block_m/64 consumer warpgroups -------
WS_WARPGROUP_THREADS = 128  # a Hopper warpgroup: 4 warps; wgmma runs per warpgroup
WS_ROWS_PER_CONSUMER = 64  # query rows of one consumer warpgroup: the M of one wgmma
WS_CONSUMERS = (2, 3)  # consumer warpgroups: block_m 128 (FA3's D128 tile) or 192 (FA3's D64 tile)
WS_SLOTS = 2  # K and V buffers in flight: the producer fills slot kb % 2 while the consumers read the other
WS_MAX_BLOCK_N = 256  # a TMA box holds at most 256 rows; wgmma N is at most 256
WS_PRODUCER_NREG = 24  # setmaxnreg of the producer warpgroup (it only issues TMA)
SETMAXNREG_MAX, SETMAXNREG_STEP = 240, 8  # what this template asks a consumer for: at most 240, a multiple of 8
# schedule fa3 (attention_fa3.py.j2): the same roles, K and V in a ring of `stages` slots: at least 2 (one slot
# would serialise each block's load and its GEMMs), at most the pipeline model's 4; lds_budget bounds the deeper
# rings (d128: 3 slots fit at block_n 128 only; FA3 keeps 2 at d128)
FA3_STAGES = (2, 3, 4)
# named barriers the fa3 consumers take turns on (ping-pong) and sync their O epilogue with, one each per
# consumer, counted down from the hardware's 16 (ids 0-15): TileLang numbers the ones it inserts itself up
# from 3 (0 is __syncthreads, 1 and 2 its reductions'), so ids from the top do not collide with them
NAMED_BARRIERS = 16
FA3_PRODUCER_THREADS = 32  # the producer warpgroup's one warp that issues the TMA loads (FA3's)
WARP_SPECIALIZED = (AttentionSchedule.WS, AttentionSchedule.FA3)  # the hand warp-specialized schedules
# consumer registers beyond S, P and O: row statistics (5 fp32 per 8 rows), loop and barrier indices, wgmma
# descriptors and addresses -- an estimate; build's spill count is the check
WS_REGISTER_RESERVE = 32


def ws_consumers(block_m: int) -> int:
    return block_m // WS_ROWS_PER_CONSUMER


def ws_consumer_nreg(hw, consumers: int) -> int:
    """setmaxnreg of each consumer warpgroup: the register file left after the producer's 24, shared by the
    consumers, rounded down to setmaxnreg's step of 8, at most 240 (2 consumers: 240, 3: 160)."""
    per_sm = hw.register_file_bytes_per_cu // 4 // WS_WARPGROUP_THREADS
    share = (per_sm - WS_PRODUCER_NREG) // consumers
    return min(SETMAXNREG_MAX, share - share % SETMAXNREG_STEP)


def ws_register_estimate(block_n: int, head_dim: int) -> int:
    """32-bit registers one consumer thread holds for its 64 rows: S (64 x block_n fp32), P (16-bit, half
    as many), O (64 x head_dim fp32), each over 128 threads, plus WS_REGISTER_RESERVE."""
    rows = WS_ROWS_PER_CONSUMER
    return (rows * block_n + rows * block_n // 2 + rows * head_dim) // WS_WARPGROUP_THREADS + WS_REGISTER_RESERVE


def attn_dtype_supported(c: AttentionContext) -> Iterator[Violation]:
    d = c.spec.dtypes
    if d.input not in ATTENTION_TYPES:
        yield Violation(rule="dtype_supported", path=("dtypes", "input"), value=d.input.value,
                        message="attention takes fp16 or bf16")
    if d.out != d.input:
        yield Violation(rule="dtype_supported", path=("dtypes", "out"), value=d.out.value,
                        message=f"must equal dtypes.input ({d.input.value})")
    if d.accumulate != DType.FP32:
        yield Violation(rule="dtype_supported", path=("dtypes", "accumulate"), value=d.accumulate.value,
                        message="the scores, running max and sum are kept in fp32: accumulate must be fp32")


def attn_head_dim(c: AttentionContext) -> Iterator[Violation]:
    if c.spec.head_dim not in ATTENTION_HEAD_DIMS:
        yield Violation(rule="head_dim", path=("head_dim",), value=c.spec.head_dim,
                        message=f"supported head_dim values are {', '.join(map(str, ATTENTION_HEAD_DIMS))}")


def attn_gqa_heads(c: AttentionContext) -> Iterator[Violation]:
    for i, s in enumerate(c.spec.shapes):
        if s.heads % s.kv_heads:
            yield Violation(rule="gqa_heads", path=("shapes", i, "kv_heads"), value=s.kv_heads,
                            message=f"must divide heads={s.heads} (each K/V head serves heads/kv_heads query heads)")


def attn_wave_multiple(c: AttentionContext) -> Iterator[Violation]:
    yield from threads_violations(c.tuning.tiling.threads, c.hw, c.at("tiling", "threads"))


def attn_mma_shape(c: AttentionContext) -> Iterator[Violation]:
    t, hw = c.tuning.tiling, c.hw
    mma = hw.mma_shapes[c.spec.dtypes.input][0] if c.spec.dtypes.input in ATTENTION_TYPES else None
    if mma is None:
        return  # dtype_supported reports it
    word = f"{c.spec.dtypes.input.value} MMA tile {mma} on {hw.target}"
    n_step = max(mma.n, mma.k)  # block_n is the N of Q.K^T and the K of P.V (P.V packs no MFMA ops: k_pack 1)
    if t.block_n % n_step:
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"must be a multiple of {n_step} (the N and K of the {word})")
    # head_dim is the K of Q.K^T, which packs k_pack MFMA ops per step (schedule persistent; k_pack_target
    # reports a k_pack on another target). 64 and 128 are multiples of every packed K TileLang has (16 x 2)
    k_pack = c.tuning.k_pack if c.target.supports_k_pack else 1
    if k_pack > 1 and c.spec.head_dim in ATTENTION_HEAD_DIMS and c.spec.head_dim % (mma.k * k_pack):
        yield Violation(rule="mma_shape", path=("head_dim",), value=c.spec.head_dim,
                        message=f"must be a multiple of {mma.k * k_pack} (the K of the {word} times k_pack={k_pack})")
    if t.threads % hw.wave_lanes or not hw.min_threads <= t.threads <= hw.max_threads_per_workgroup:
        return  # wave_multiple reports the thread count
    if c.tuning.schedule in WARP_SPECIALIZED:
        return  # ws_tiles / fa3_tiles: the consumer warpgroups own 64 rows each (4 warps x 16-row wgmma tiles)
    waves = t.threads // hw.wave_lanes
    if t.block_m % (waves * mma.m):
        yield Violation(rule="mma_shape", path=c.at("tiling", "block_m"), value=t.block_m,
                        message=f"must be a multiple of {waves * mma.m}: {waves} {hw.wave_word}s each own whole "
                                f"{mma.m}-row MMA tiles of the query block (the {word})")


def attn_lds_budget(c: AttentionContext) -> Iterator[Violation]:
    need, have = attention_lds_bytes(c.spec, c.tuning, c.target), c.hw.lds_bytes_per_workgroup
    if need > have:
        t, stages = c.tuning.tiling, max(1, c.tuning.pipeline.stages)
        yield Violation(
            rule="lds_budget", path=c.at("tiling"), value=None,
            message=f"Q {t.block_m}x{c.spec.head_dim} + (K + V) {t.block_n}x{c.spec.head_dim} x {stages} stage(s)"
                    f"{' + reduction workspaces' if c.target.reduce_workspace_in_lds else ''} "
                    f"need {need} B ({need / 1024:g} KiB) of {c.hw.lds_word}, over the {have} B ({have / 1024:g} KiB) "
                    f"per workgroup on {c.hw.target}")


def attn_tail_policy(c: AttentionContext) -> Iterator[Violation]:
    if c.spec.tail == TailPolicy.SPECIALIZED:
        yield Violation(rule="tail_policy", path=("tail",), value=c.spec.tail.value,
                        message="attention has no specialized edge kernels: use none or predicated")
    if c.spec.tail != TailPolicy.NONE:
        return
    t = c.tuning.tiling
    where = f" on {c.hw.target}" if c.origin["tiling"][0] == "overrides" else ""
    decode = c.spec.variant == AttentionVariant.DECODE  # decode's packed query rows are always bounds-checked
    for i, s in enumerate(c.spec.shapes):
        dims = ((() if decode else (("seq_q", s.seq_q, "block_m", t.block_m),))
                + (("seq_kv", s.seq_kv, "block_n", t.block_n),))
        ragged = [f"{d}={v} is not a multiple of {b}={bv}" for d, v, b, bv in dims if v % bv]
        if ragged:
            yield Violation(rule="tail_policy", path=("shapes", i), value=None,
                            message=f"{', '.join(ragged)}{where}: set tail: predicated")


def attention_kv_blocks(seq_kv: int, block_n: int) -> int:
    return -(-seq_kv // block_n)


# decode, split_kv auto: the workgroups per CU/SM the splits fill. Measured on the H200 (132 SMs; fp16 d128, 32/8
# heads, one query, 64 x 64 tile; benchmarks/sweep_decode_split_sm90.py, reports/h200/sweep_decode_split): at batch
# 1, 4 and 16 over 4096 and 32768 keys the fastest split was the largest whose workgroups fit one wave of one per SM
# (16, 4 and 1: 128 workgroups each); a second partial wave or more splits than that lost 0-20 %. Not measured on a
# CU of gfx942/gfx950, where the same rule applies to its CU count.
SPLIT_KV_AUTO_WAVES = 1


def auto_split_kv(workgroups_per_split: int, kv_blocks: int, wave: int) -> int:
    """split_kv auto at one shape: the most splits whose workgroups (splits x `workgroups_per_split`, i.e. K/V heads x
    row blocks x batch) fit one wave of `wave`, at least 1 and at most the `kv_blocks` (each split one KV block at
    least, rule split_kv). The template's make_kernel computes the same expression."""
    return max(1, min(kv_blocks, wave // workgroups_per_split))


def attn_split_kv(c: AttentionContext) -> Iterator[Violation]:
    """decode: split s of split_kv takes KV blocks [s*nb//split_kv, (s+1)*nb//split_kv) of the nb =
    ceil(seq_kv/block_n), so every split gets at least one block only if split_kv <= nb (auto: by construction).
    prefill has no splits."""
    split = c.tuning.split_kv
    if c.spec.variant != AttentionVariant.DECODE:
        if split != 1:
            yield Violation(rule="split_kv", path=c.at("split_kv"), value=split,
                            message="only variant: decode splits the KV sequence: leave split_kv at 1")
        return
    if split == "auto":  # at most the KV blocks of each shape (auto_split_kv)
        return
    bn = c.tuning.tiling.block_n
    where = f" on {c.hw.target}" if c.origin["split_kv"][0] == "overrides" or c.origin["tiling"][0] == "overrides" else ""
    for i, s in enumerate(c.spec.shapes):
        nb = attention_kv_blocks(s.seq_kv, bn)
        if split > nb:
            yield Violation(rule="split_kv", path=c.at("split_kv"), value=split,
                            message=f"over the {nb} KV block(s) of {bn} keys of shapes[{i}] (seq_kv={s.seq_kv}){where}: "
                                    "every split needs at least one block")


def attn_dynamic_kv(c: AttentionContext) -> Iterator[Violation]:
    """Rules dynamic_kv_*: a decode kernel compiled with seq_kv symbolic (T.dynamic) serves every KV length of
    `dynamic_kv` with one binary. dynamic_kv_variant: decode only. dynamic_kv_range: min <= max, and every shape's
    seq_kv (the workloads verify and bench run) inside. dynamic_kv_tail: tail predicated (an arbitrary length
    leaves the last KV block ragged). dynamic_kv_split: the splits are fixed when the kernel is made -- split_kv, or
    auto's at seq_kv = min -- so a fixed split_kv must give every split a KV block at min. dynamic_kv_search: no
    search block (a lockfile picks a kernel per shape; a dynamic-KV spec is one kernel for every length)."""
    r = c.spec.dynamic_kv
    if r is None:
        return
    if c.spec.variant != AttentionVariant.DECODE:
        yield Violation(rule="dynamic_kv_variant", path=("dynamic_kv",), value=None,
                        message="only variant: decode takes a symbolic KV length: remove dynamic_kv")
        return
    if r.min > r.max:
        yield Violation(rule="dynamic_kv_range", path=("dynamic_kv", "min"), value=r.min,
                        message=f"is over dynamic_kv.max={r.max}: the range is empty")
    else:
        for i, s in enumerate(c.spec.shapes):
            if not r.min <= s.seq_kv <= r.max:
                yield Violation(rule="dynamic_kv_range", path=("shapes", i, "seq_kv"), value=s.seq_kv,
                                message=f"is outside dynamic_kv [{r.min}, {r.max}], the KV lengths the kernel serves")
    if c.spec.tail != TailPolicy.PREDICATED:
        yield Violation(rule="dynamic_kv_tail", path=("tail",), value=c.spec.tail.value,
                        message="a KV length known only at run time leaves the last KV block ragged: set tail: "
                                "predicated")
    split, bn = c.tuning.split_kv, c.tuning.tiling.block_n
    if split != "auto" and split > attention_kv_blocks(r.min, bn):
        yield Violation(rule="dynamic_kv_split", path=c.at("split_kv"), value=split,
                        message=f"over the {attention_kv_blocks(r.min, bn)} KV block(s) of {bn} keys at "
                                f"dynamic_kv.min={r.min}: every split needs at least one block (raise min, or auto)")
    if c.spec.search:
        yield Violation(rule="dynamic_kv_search", path=("search",), value=None,
                        message="a dynamic-KV spec is one kernel for every KV length, and tuning picks a kernel per "
                                "shape: remove search or dynamic_kv")


def attn_combine_vec(c: AttentionContext) -> Iterator[Violation]:
    """Rule combine_vec_variant: combine_vec is how decode's combine kernel reads the splits; prefill has none.
    (threads, a multiple of the 64-lane wave, times 4 is a multiple of head_dim 64 or 128: every step of a
    4-wide combine reads whole split rows.)"""
    if c.tuning.combine_vec != 1 and c.spec.variant != AttentionVariant.DECODE:
        yield Violation(rule="combine_vec_variant", path=c.at("combine_vec"), value=c.tuning.combine_vec,
                        message=f"is how variant: decode merges its KV splits; variant {c.spec.variant.value} has no "
                                "combine: leave combine_vec at 1")


def attn_split_kv_combine(c: AttentionContext) -> Iterator[Violation]:
    """Rule split_kv_combine_variant: split_kv_combine is who merges decode's KV splits; prefill has none."""
    if c.tuning.split_kv_combine != SplitKvCombine.KERNEL and c.spec.variant != AttentionVariant.DECODE:
        yield Violation(rule="split_kv_combine_variant", path=c.at("split_kv_combine"),
                        value=c.tuning.split_kv_combine.value,
                        message=f"is who merges variant decode's KV splits; variant {c.spec.variant.value} has no "
                                "splits: leave split_kv_combine at kernel")


def attn_causal_alignment(c: AttentionContext) -> Iterator[Violation]:
    """bottom_right puts the queries at the end of the keys: with seq_q > seq_kv the first seq_q - seq_kv
    queries would see no key at all."""
    if c.spec.causal != CausalMask.BOTTOM_RIGHT:
        return
    for i, s in enumerate(c.spec.shapes):
        if s.seq_q > s.seq_kv:
            yield Violation(rule="causal_alignment", path=("shapes", i, "seq_q"), value=s.seq_q,
                            message=f"over seq_kv={s.seq_kv}: with causal: bottom_right the first "
                                    f"{s.seq_q - s.seq_kv} queries would see no key")


def attn_ws_target(c: AttentionContext) -> Iterator[Violation]:
    """Rules ws_target, fa3_target: the warp-specialized schedules are written in Hopper instructions
    (TargetSpec.warp_specialization)."""
    if c.tuning.schedule in WARP_SPECIALIZED and not c.target.warp_specialization:
        yield Violation(rule=f"{c.tuning.schedule.value}_target", path=c.at("schedule"), value=c.tuning.schedule.value,
                        message=f"not possible on {c.hw.target}: {c.target.warp_specialization_note}; use schedule: "
                                f"default there (overrides.{c.hw.target}.schedule) or drop {c.hw.target} from targets")


def attn_ws_variant(c: AttentionContext) -> Iterator[Violation]:
    """Rules ws_variant, fa3_variant: ws and fa3 schedule the prefill KV loop; decode has its own split-KV
    template."""
    if c.tuning.schedule in WARP_SPECIALIZED and c.spec.variant != AttentionVariant.PREFILL:
        yield Violation(rule=f"{c.tuning.schedule.value}_variant", path=c.at("schedule"), value=c.tuning.schedule.value,
                        message=f"schedules the prefill KV loop only: variant {c.spec.variant.value} takes schedule: default")


# TileLang 0.1.15 cannot lower schedule fa3's in-place causal mask at (block_m, block_n) (192, 64) where both the
# query and the key counts are ragged: its ThreadSync pass finds a shared-memory sync in a divergent region of 124
# threads. Lowered for sm_90: 193x193, 200x193, 385x385 failed (top_left and bottom_right); 384x385, 385x448 and
# 192x128 or 128x64 at 385x385 lowered (tests/test_attention.py lowers the refused one and expects the failure).
FA3_RAGGED_CAUSAL_UNLOWERABLE = ((192, 64),)


def attn_fa3_ragged_causal(c: AttentionContext) -> Iterator[Violation]:
    """Rule fa3_ragged_causal: tail predicated promises every shape, so a causal fa3 tile TileLang cannot lower at
    ragged shapes (FA3_RAGGED_CAUSAL_UNLOWERABLE) is refused rather than left to fail in a build."""
    if not (_ws_applies(c) and c.tuning.schedule == AttentionSchedule.FA3 and c.spec.causal != CausalMask.NONE
            and c.spec.tail == TailPolicy.PREDICATED):
        return
    t = c.tuning.tiling
    if (t.block_m, t.block_n) in FA3_RAGGED_CAUSAL_UNLOWERABLE:
        yield Violation(rule="fa3_ragged_causal", path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"schedule fa3, causal, block_m {t.block_m} x block_n {t.block_n} with tail: predicated "
                                "does not lower in TileLang 0.1.15 where seq_q and seq_kv are both ragged (a shared-"
                                "memory sync in a divergent region): take block_n 128, or tail: none at block multiples")


def _k_pack_targets() -> list[str]:
    return [t.value for t, spec in TARGETS.items() if spec.supports_k_pack]


def attn_k_pack_target(c: AttentionContext) -> Iterator[Violation]:
    """Rule k_pack_target, as the GEMM's: k_pack is an argument of TileLang's ROCm gemm only
    (TargetSpec.supports_k_pack); a target-only value (target_only_value)."""
    yield from target_only_value(c, K_PACK, lambda v: f"k_pack exists only for the ROCm MFMA gemm "
                                                      f"({', '.join(_k_pack_targets())})", "k_pack_target")


def attn_k_pack_schedule(c: AttentionContext) -> Iterator[Violation]:
    """Rule k_pack_schedule: only the persistent template passes k_pack to its gemms (the default and decode
    templates do not take it yet)."""
    if c.tuning.k_pack != 1 and c.target.supports_k_pack and c.tuning.schedule != AttentionSchedule.PERSISTENT:
        yield Violation(rule="k_pack_schedule", path=c.at("k_pack"), value=c.tuning.k_pack,
                        message=f"k_pack {c.tuning.k_pack} is taken by schedule: persistent only, not schedule: "
                                f"{c.tuning.schedule.value}")


def attn_persistent_variant(c: AttentionContext) -> Iterator[Violation]:
    """Rule persistent_variant: persistent loops over prefill query blocks; decode's grid is its KV splits."""
    if c.tuning.schedule == AttentionSchedule.PERSISTENT and c.spec.variant != AttentionVariant.PREFILL:
        yield Violation(rule="persistent_variant", path=c.at("schedule"), value=c.tuning.schedule.value,
                        message=f"loops over the query blocks of a prefill: variant {c.spec.variant.value} "
                                "takes schedule: default")


def attn_grid_schedule(c: AttentionContext) -> Iterator[Violation]:
    """Rule grid_schedule: grid persistent is schedule fa3's tile loop (schedule persistent is the default KV loop's
    own persistent grid; the others launch one workgroup per tile)."""
    if c.tuning.grid == GridPolicy.PERSISTENT and c.tuning.schedule != AttentionSchedule.FA3:
        yield Violation(rule="grid_schedule", path=c.at("grid"), value=c.tuning.grid.value,
                        message=f"grid persistent loops schedule fa3's tiles, not schedule {c.tuning.schedule.value}'s: "
                                f"take grid: tiles there (overrides.{c.hw.target}.grid where one target's schedule "
                                "differs)")


def attn_tile_order_grid(c: AttentionContext) -> Iterator[Violation]:
    """Rule tile_order_grid: tile_order deals the tiles of fa3's persistent grid; a grid of one workgroup per tile
    has no rounds to order."""
    if c.tuning.tile_order != TileOrder.STRIDED and not (c.tuning.grid == GridPolicy.PERSISTENT
                                                          and c.tuning.schedule == AttentionSchedule.FA3):
        yield Violation(rule="tile_order_grid", path=c.at("tile_order"), value=c.tuning.tile_order.value,
                        message="orders the rounds of schedule fa3's persistent grid (grid: persistent): take "
                                "tile_order: strided with grid tiles or another schedule")


VECTOR_BYTES = 16  # v_layout transposed: one 16-byte global load per lane of each key row's piece


def v_layout_rows(spec: AttentionSpec, tuning: AttentionTuning) -> int | None:
    """v_layout transposed: the consecutive keys of V's block_n x head_dim tile each thread loads (V_ROWS),
    16 bytes of head_dim from each -- the GEMM's transposed_b_rows with keys as K and head_dim as N. None where
    the tile does not split so (rule v_layout_tile)."""
    t = tuning.tiling
    return transposed_b_rows(t.block_n, spec.head_dim, t.threads, VECTOR_BYTES // DTYPE_BYTES[spec.dtypes.input])


def attn_v_layout_schedule(c: AttentionContext) -> Iterator[Violation]:
    """Rule v_layout_schedule: only the persistent template stages V transposed (the default, ws and decode
    templates are what their committed kernels were named by)."""
    if c.tuning.v_layout != VLayout.NATURAL and c.tuning.schedule != AttentionSchedule.PERSISTENT:
        yield Violation(rule="v_layout_schedule", path=c.at("v_layout"), value=c.tuning.v_layout.value,
                        message=f"v_layout {c.tuning.v_layout.value} is taken by schedule: persistent only, not "
                                f"schedule: {c.tuning.schedule.value}")


def attn_v_layout_tile(c: AttentionContext) -> Iterator[Violation]:
    """Rule v_layout_tile: v_layout transposed splits V's block_n x head_dim tile into threads x whole rows of
    16 bytes, the same number of consecutive keys for every thread (v_layout_rows)."""
    if c.tuning.v_layout != VLayout.TRANSPOSED or c.tuning.schedule != AttentionSchedule.PERSISTENT:
        return
    if c.spec.dtypes.input not in ATTENTION_TYPES:
        return  # dtype_supported reports it
    t, vec = c.tuning.tiling, VECTOR_BYTES // DTYPE_BYTES[c.spec.dtypes.input]
    if v_layout_rows(c.spec, c.tuning) is None:
        yield Violation(rule="v_layout_tile", path=c.at("v_layout"), value=c.tuning.v_layout.value,
                        message=f"the {t.block_n}x{c.spec.head_dim} tile of V (block_n x head_dim) does not split into "
                                f"{t.threads} threads x whole rows of {vec} elements ({VECTOR_BYTES} bytes): "
                                f"block_n * head_dim must be a multiple of threads * {vec}, and block_n of the keys "
                                "per thread")


def _ws_applies(c: AttentionContext) -> bool:
    """schedule ws or fa3 where it can exist (ws_target/fa3_target and ws_variant/fa3_variant report the rest
    once)."""
    return (c.tuning.schedule in WARP_SPECIALIZED and c.target.warp_specialization
            and c.spec.variant == AttentionVariant.PREFILL)


def attn_ws_tiles(c: AttentionContext) -> Iterator[Violation]:
    """Rules ws_tiles, fa3_tiles: block_m = 64 x consumer warpgroups (2 or 3), threads = 128 x (1 producer +
    consumers), block_n <= 256 (TMA box, wgmma N); ws: 2 K/V slots (pipeline.stages 2), fa3: a ring of
    FA3_STAGES slots."""
    if not _ws_applies(c):
        return
    t, rows, schedule = c.tuning.tiling, WS_ROWS_PER_CONSUMER, c.tuning.schedule.value
    rule = f"{schedule}_tiles"
    consumers = ws_consumers(t.block_m)
    if t.block_m % rows or consumers not in WS_CONSUMERS:
        yield Violation(rule=rule, path=c.at("tiling", "block_m"), value=t.block_m,
                        message=f"schedule {schedule} takes block_m {' or '.join(str(rows * n) for n in WS_CONSUMERS)}: "
                                f"{rows} query rows per consumer warpgroup, {' or '.join(map(str, WS_CONSUMERS))} of them")
    elif t.threads != WS_WARPGROUP_THREADS * (1 + consumers):
        yield Violation(rule=rule, path=c.at("tiling", "threads"), value=t.threads,
                        message=f"schedule {schedule} at block_m {t.block_m} runs {WS_WARPGROUP_THREADS * (1 + consumers)} "
                                f"threads: one producer warpgroup and {consumers} consumer warpgroups of {WS_WARPGROUP_THREADS}")
    stages = c.tuning.pipeline.stages
    if c.tuning.schedule == AttentionSchedule.WS and stages != WS_SLOTS:
        yield Violation(rule=rule, path=c.at("pipeline", "stages"), value=stages,
                        message=f"schedule ws double-buffers K and V (one full and one empty mbarrier per slot): "
                                f"stages must be {WS_SLOTS}")
    if c.tuning.schedule == AttentionSchedule.FA3 and stages not in FA3_STAGES:
        yield Violation(rule=rule, path=c.at("pipeline", "stages"), value=stages,
                        message=f"schedule fa3 keeps a ring of {FA3_STAGES[0]} to {FA3_STAGES[-1]} K/V slots (one full "
                                "and one empty mbarrier per slot): with one, a block's load cannot overlap the GEMMs of "
                                "the block before")
    if t.block_n > WS_MAX_BLOCK_N:
        yield Violation(rule=rule, path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"over {WS_MAX_BLOCK_N}: one TMA box and one wgmma N hold at most {WS_MAX_BLOCK_N} keys")


def attn_ws_registers(c: AttentionContext) -> Iterator[Violation]:
    """Rules ws_registers, fa3_registers: S, P and O of one consumer thread must fit the registers setmaxnreg
    gives it."""
    if not _ws_applies(c):
        return
    t = c.tuning.tiling
    consumers = ws_consumers(t.block_m)
    if t.block_m % WS_ROWS_PER_CONSUMER or consumers not in WS_CONSUMERS:
        return  # ws_tiles / fa3_tiles reports it
    need, have = ws_register_estimate(t.block_n, c.spec.head_dim), ws_consumer_nreg(c.hw, consumers)
    if need > have:
        yield Violation(rule=f"{c.tuning.schedule.value}_registers", path=c.at("tiling", "block_n"), value=t.block_n,
                        message=f"a consumer thread would hold about {need} registers (S, P and O of 64 x {t.block_n} "
                                f"keys at head_dim {c.spec.head_dim}, + {WS_REGISTER_RESERVE}), over the {have} setmaxnreg "
                                f"gives each of {consumers} consumer warpgroups on {c.hw.target}")


ATTENTION_RULES: tuple[AttentionRule, ...] = (
    attn_dtype_supported, attn_head_dim, attn_gqa_heads, attn_wave_multiple, attn_mma_shape, attn_lds_budget,
    attn_tail_policy, attn_split_kv, attn_dynamic_kv, attn_combine_vec, attn_split_kv_combine, attn_causal_alignment, attn_k_pack_target,
    attn_k_pack_schedule, attn_ws_target, attn_ws_variant, attn_ws_tiles, attn_ws_registers, attn_fa3_ragged_causal, attn_persistent_variant,
    attn_grid_schedule, attn_tile_order_grid, attn_v_layout_schedule, attn_v_layout_tile,
)


def check(spec: AttentionSpec, target: TargetSpec) -> list[Violation]:
    """Every attention legality rule on one target."""
    tuning, origin = spec.tuning_for(target.target)
    ctx = AttentionContext(spec=spec, target=target, tuning=tuning, origin=origin)
    return [v for rule in ATTENTION_RULES for v in rule(ctx)]
