"""The attention instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.attention.rules import (
    FA3_PRODUCER_THREADS,
    NAMED_BARRIERS,
    SPLIT_KV_AUTO_WAVES,
    VECTOR_BYTES,
    WARP_SPECIALIZED,
    WS_PRODUCER_NREG,
    WS_ROWS_PER_CONSUMER,
    WS_WARPGROUP_THREADS,
    attention_kv_blocks,
    attention_lds_bytes,
    auto_split_kv,
    v_layout_rows,
    ws_consumer_nreg,
    ws_consumers,
)
from codegen.families.attention.spec import (
    AttentionSchedule,
    AttentionSpec,
    AttentionVariant,
    CausalMask,
    SplitKvCombine,
    TileOrder,
    VLayout,
)
from codegen.families.base import InstanceBase, dtype_tag, explicit_schedule, pipelined_loop, tail_tag, tilelang_target
from codegen.families.gemm.rules import transposed_b_rows
from codegen.families.gemm.spec import GridPolicy
from codegen.families.spec import TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

# Statements of the attention template's KV loop body, in order: the K and V copies (global -> LDS),
# then the compute (mask/clear S, S = Q.K^T, the online-softmax update in 8 statements, O += P.V).
# An explicit schedule (explicit_pipeline_schedule targets) puts the copies in stage 0 and the compute in stage stages-1.
ATTENTION_LOOP_COPIES = 2
# v_layout transposed (persistent): V's copy is three statements -- load into registers, permute, write transposed
V_TRANSPOSED_COPIES = 4
ATTENTION_LOOP_COMPUTE = 11
# The decode template's KV loop: the same two copies, then the mask, S = Q.K^T and the online-softmax
# update with its -inf guards (a row of a split may see no key yet), O += P.V: 12 statements.
DECODE_LOOP_COMPUTE = 12
TEMPLATES = {AttentionVariant.PREFILL: "attention.py.j2", AttentionVariant.DECODE: "attention_decode.py.j2"}
# schedules ws and fa3, prefill only (rules ws_variant, fa3_variant)
WS_TEMPLATES = {AttentionSchedule.WS: "attention_ws.py.j2", AttentionSchedule.FA3: "attention_fa3.py.j2"}
PERSISTENT_TEMPLATE = "attention_persistent.py.j2"  # schedule persistent, prefill only (rule persistent_variant)
# schedule persistent: workgroups of the grid per CU/SM. One: the gfx942 tiles that fit 64 KiB of LDS leave room
# for one workgroup per CU (build reports its waves per SIMD), and a persistent workgroup that waits for a free
# CU only runs its tiles later; fa3's K/V rings and Q tiles (grid persistent) take most of an SM's shared memory
PERSISTENT_WORKGROUPS_PER_CU = 1
# where query row i's last visible key sits relative to i, as an expression of make_kernel's arguments
DYNAMIC_KV = "seq_kv"  # the symbolic KV length: its T.dynamic name, and the seq_kv of a dynamic kernel's compile shape
CAUSAL_SHIFT = {CausalMask.TOP_LEFT: "0", CausalMask.BOTTOM_RIGHT: "seq_kv - seq_q"}
LOG2E = 1.4426950408889634


VECTOR_LOAD_BYTES = 16  # TileLang's coalesced tile copies: one 16-byte load per lane


@dataclass(frozen=True, kw_only=True)
class AttentionInstance(InstanceBase):
    """FlashAttention-style forward for one target: O = softmax(scale * Q.K^T [masked]) . V, KV blocks
    streamed with an online softmax. prefill: one workgroup per (query block, head, batch); decode: one
    per (KV split, K/V head's packed rows, batch), then a combine kernel over the splits."""

    name: str
    target: Target
    op: str = "attention"
    template: str = "attention.py.j2"
    spec_file: str = field(compare=False)
    shapes: tuple[tuple[int, int, int, int, int], ...]  # (batch, heads, kv_heads, seq_q, seq_kv)
    in_dtype: str  # TileLang dtype names
    out_dtype: str
    accum_dtype: str
    spec_dtypes: tuple[str, str, str]  # input, out, accumulate as written in the spec
    head_dim: int
    mask: CausalMask  # none, top_left (query i sees keys j <= i), bottom_right (j <= i + seq_kv - seq_q)
    variant: AttentionVariant
    split_kv: int  # decode: splits of the KV sequence when fixed (1 for prefill); see split_wave
    softmax_scale: float  # resolved: the spec's, or 1/sqrt(head_dim)
    block_m: int
    block_n: int
    threads: int
    stages: int
    pipeline_order: tuple[int, ...] | None  # explicit schedule (explicit_pipeline_schedule); None = num_stages
    pipeline_stage: tuple[int, ...] | None
    schedule: AttentionSchedule  # default (TileLang's pipeline), ws or fa3 (sm_90), persistent
    ws_consumers: int  # ws, fa3: consumer warpgroups of 64 query rows (block_m / 64); 0 for the others
    ws_producer_nreg: int  # ws, fa3: setmaxnreg of the producer warpgroup / of each consumer warpgroup; 0 for the others
    ws_consumer_nreg: int
    # schedule persistent, and fa3 with grid persistent: the most workgroups of the grid (CUs x
    # PERSISTENT_WORKGROUPS_PER_CU), each looping over (query block, head, batch) tiles; 0 for one workgroup per tile
    persistent_workgroups: int
    k_pack: int  # MFMA ops packed along K in Q.K^T (rocm_gemm's k_pack; P.V packs none); 1 on targets without it
    # persistent: V's LDS tile as stored (natural, BLOCK_N x HEAD_DIM) or transposed (HEAD_DIM x BLOCK_N, P.V with
    # transpose_B); natural for the other schedules
    v_layout: str = VLayout.NATURAL.value
    tail: TailPolicy
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]
    uses_rocm_gemm: bool  # the target's gemm_fn is tilelang.rocm.language.gemm, not T.gemm
    # decode, split_kv auto: the workgroups of one wave (the target's CUs/SMs, one workgroup each) that the splits
    # fill per shape (split_for); None for a fixed split (identity only where set: fixed kernels keep their names)
    split_wave: int | None = None
    # decode, dynamic_kv: the KV lengths (min, max) one kernel serves, seq_kv symbolic (T.dynamic); None: fixed
    dynamic_kv: tuple[int, int] | None = None
    # decode, combine_vec 4: the fp32 each combine thread loads of a split's output at once (THREADS * 4 // HEAD_DIM
    # splits a step); None: one, split after split (identity only where set)
    combine_vec: int | None = None
    # fa3 with grid persistent, causal: the bytes of K and V the tile order keeps in L2 at once (half the target's
    # L2): the tiles go in sections of (batch, query head) pairs whose K and V fit them (kv_section); None otherwise
    l2_kv_bytes: int | None = None
    # fa3 with grid persistent: "snake" -- odd rounds deal their tiles in reverse (persistent_tiles_of); "dynamic" --
    # each workgroup's tiles after its first from TILE_COUNTER (int32, zero on entry and left zero); None: strided,
    # tiles w, w + grid, ... (identity only where set)
    tile_order: str | None = None
    # decode, split_kv_combine fixup: "fixup" -- the last split of each block of rows merges the splits (SPLIT_ARRIVALS:
    # int32 counters, zero on entry and left zero; no combine kernel); None: the combine kernel (identity only where set)
    combine: str | None = None

    OPTIONAL_IDENTITY: ClassVar[tuple[str, ...]] = ("split_wave", "dynamic_kv", "combine_vec", "combine", "l2_kv_bytes",
                                                    "tile_order")

    @property
    def fixup(self) -> bool:
        """decode, split_kv_combine fixup: the splits merged by the last of them to finish, no combine kernel."""
        return self.combine == SplitKvCombine.FIXUP.value

    def uses_matrix_cores(self) -> bool:
        return True  # Q.K^T and P.V

    @property
    def persistent_grid(self) -> bool:
        """A grid of at most persistent_workgroups workgroups looping over the tiles (schedule persistent, or
        schedule fa3 with grid persistent)."""
        return self.persistent_workgroups > 0

    @property
    def snake(self) -> bool:
        """fa3's persistent grid deals the odd rounds' tiles in reverse (tile_order snake)."""
        return self.tile_order == TileOrder.SNAKE.value

    @property
    def dynamic(self) -> bool:
        """fa3's persistent grid takes its tiles from a counter as its workgroups come free (tile_order dynamic)."""
        return self.tile_order == TileOrder.DYNAMIC.value

    @property
    def v_transposed(self) -> bool:
        return self.v_layout == VLayout.TRANSPOSED.value

    @property
    def causal(self) -> bool:
        return self.mask != CausalMask.NONE

    def global_load_bytes(self) -> int | None:
        """The main loop's tile copies are laid out for 16-byte loads per lane."""
        return VECTOR_LOAD_BYTES

    @property
    def combine_load_bytes(self) -> int | None:
        """decode with a combine kernel: the fp32 partials each of its threads loads at once (combine_vec, 1 by
        default: 4 bytes); None where no combine kernel follows (prefill, split_kv_combine fixup)."""
        if self.variant != AttentionVariant.DECODE or self.fixup:
            return None
        return 4 * (self.combine_vec or 1)

    def stem(self) -> str:
        causal = {CausalMask.NONE: "", CausalMask.TOP_LEFT: "_causal", CausalMask.BOTTOM_RIGHT: "_causalbr"}[self.mask]
        decode = "decode_" if self.variant == AttentionVariant.DECODE else ""
        split = f"_k{self.split_label}" if self.variant == AttentionVariant.DECODE else ""
        schedule = {AttentionSchedule.WS: "_ws", AttentionSchedule.PERSISTENT: "_persistent",
                    AttentionSchedule.FA3: ("_fa3_pers" + ("_snake" if self.snake else "_dyn" if self.dynamic else "")) if self.persistent_grid
                    else "_fa3"}.get(self.schedule, "")
        kp = f"_kp{self.k_pack}" if self.k_pack > 1 else ""
        vt = "_vt" if self.v_transposed else ""
        dyn = "_dynkv" if self.dynamic_kv is not None else ""
        cv = f"_cv{self.combine_vec}" if self.combine_vec is not None else "_fx" if self.fixup else ""
        return (f"attn_{decode}{dtype_tag(*self.spec_dtypes[:2])}_d{self.head_dim}{causal}_{self.block_m}x{self.block_n}"
                f"_t{self.threads}_s{self.stages}{kp}{split}{cv}{dyn}{schedule}{vt}{tail_tag(self.tail)}")

    def template_vars(self) -> dict[str, object]:
        loop = pipelined_loop("kv_blocks", self.stages, self.pipeline_order, self.pipeline_stage)
        # v_layout transposed: elements of one 16-byte load of a key row of V, and the consecutive keys per thread
        vec = VECTOR_BYTES // DTYPE_BYTES[DType(self.spec_dtypes[0])]
        v_staging = ({"v_vec": vec, "v_rows": transposed_b_rows(self.block_n, self.head_dim, self.threads, vec)}
                     if self.v_transposed else {})
        return {
            **v_staging,
            "target_literal": repr(dict(self.tilelang_target)),
            "kv_loop": loop,
            "gemm_fn": TARGETS[self.target].gemm_fn,
            "k_pack_arg": ", k_pack=K_PACK" if self.k_pack > 1 else "",  # the last argument of Q.K^T (persistent)
            "workgroups_per_cu": PERSISTENT_WORKGROUPS_PER_CU,
            # persistent's docstring and WORKGROUPS comment: the target's compute unit (the ROCm gemm's targets: CUs)
            "compute_unit": "CU" if self.uses_rocm_gemm else "SM",
            "compute_units": "CUs" if self.uses_rocm_gemm else "SMs",
            "scale_literal": repr(self.softmax_scale),
            "scale_log2_literal": repr(self.softmax_scale * LOG2E),
            "causal_shift": CAUSAL_SHIFT.get(self.mask, "0"),
            "consumers": tuple(range(self.ws_consumers)),
            "warpgroup_threads": WS_WARPGROUP_THREADS,
            "rows_per_consumer": WS_ROWS_PER_CONSUMER,
            **(self.fa3_vars() if self.schedule == AttentionSchedule.FA3 else {}),
            **self.frame_vars(),
            **self.ws_vars(),
            **self.mask_vars(),
        }

    def frame_vars(self) -> dict[str, object]:
        """The literals of _frame.py.j2's title line: what the kernel computes, the causal term of the product,
        what is kept in ACCUM_DTYPE, and the schedule (none for the default)."""
        decode = self.variant == AttentionVariant.DECODE
        return {
            "kernel_what": ("attention decode with the KV sequence split over workgroups (flash-decoding)" if decode
                            else "attention forward"),
            "causal_term": " + causal mask" if self.causal else "",
            "statistics_what": "scores, statistics and partial outputs" if decode else "scores and softmax statistics",
            "schedule_note": "" if self.schedule == AttentionSchedule.DEFAULT or decode else f", schedule {self.schedule.value}",
        }

    def mask_vars(self) -> dict[str, object]:
        """The literals of _masks.py.j2 and _kv_loop.py.j2: whether the last KV block is masked (tail predicated);
        the KV loop's variable, its block's rows of K and V and first key, the query position of mask row i
        (decode: packed rows, a KV split's blocks from kv_first); the causal in-place mask's test for keys past
        seq_kv (ws, fa3)."""
        predicated = self.tail == TailPolicy.PREDICATED
        if self.variant == AttentionVariant.DECODE:
            kv = {"kv_var": "kk", "kv_rows": "(kv_first + kk) * BLOCK_N:(kv_first + kk + 1) * BLOCK_N",
                  "kv_key0": "(kv_first + kk) * BLOCK_N", "mask_row": "(row0 + i) // group",
                  "mask_note": "packed row i (position (row0 + i) // group) may see key (kv_first + kk) * BLOCK_N + j"}
        else:
            kv = {"kv_var": "kb", "kv_rows": "kb * BLOCK_N:(kb + 1) * BLOCK_N", "kv_key0": "kb * BLOCK_N",
                  "mask_row": "bx * BLOCK_M + i",
                  "mask_note": "query bx*BLOCK_M+i may see key kb*BLOCK_N+j (j <= i + causal_shift, j < seq_kv)"}
        return {**kv, "predicated": predicated,
                # ws, fa3: K and V arrive by TMA, which zero-fills the keys past seq_kv
                "ragged_note": (" (TMA zero-fills them)" if self.schedule in WARP_SPECIALIZED
                                and self.variant == AttentionVariant.PREFILL else ""),
                "past_end_note": " (or past seq_kv)" if predicated else "",
                "past_end_test": " or (kb + 1) * BLOCK_N > seq_kv" if predicated else ""}

    def ws_vars(self) -> dict[str, object]:
        """The literals of _warpgroups.py.j2 (schedules ws and fa3): the consumers' Q tiles handed to the producer,
        the shared K and V tiles every macro takes (ws: two slots of each; fa3: the rings), the query block's
        index (fa3 launches the causal blocks in reverse: qb), the producer's thread argument (fa3: one warp issues),
        the Q barriers and each role's tile arguments (fa3's persistent grid: q_empty, and the tile loop's state) and
        each consumer's branch of the dispatch."""
        fa3 = self.schedule == AttentionSchedule.FA3
        n = self.ws_consumers
        block = "qb" if fa3 else "bx"
        # fa3, grid persistent: each role loops over the workgroup's tiles (dynamic: cur, the role's tile and round;
        # tile_ids, the tile of a round in slot round % 2; TILE_COUNTER, where the producer takes the next one)
        loop = ("kv_done, cur, fetched, tile_ids, TILE_COUNTER, wg, grid, tiles, q_blocks, group, kv_all" if self.dynamic
                else "kv_done, wg, grid, q_blocks, rounds, group, kv_all")
        pers = fa3 and self.persistent_grid
        return {"q_parts": ", ".join(f"Q_{c}" for c in range(n)),
                "ws_tiles": "K_ring, V_ring" if fa3 else "K0, K1, V0, V1",
                "ws_block": block, "producer_tx": "tx, " if fa3 else "",
                "q_barriers": "q_full, q_empty" if pers else "q_full",
                "producer_tile": loop if pers else f"{block}, by, bz, kv_head, kv_blocks",
                "consumer_tile": loop if pers else f"{block}, by, bz, kv_blocks",
                "consumer_branches": tuple((c, f"elif tx < {c + 2} * WARPGROUP" if c < n - 1 else "else")
                                           for c in range(n))}

    def fa3_vars(self) -> dict[str, object]:
        """schedule fa3's named barriers, counted down from the top of the hardware's NAMED_BARRIERS (TileLang
        numbers the ones it inserts up from 3): consumer c's ping-pong gate, then its O epilogue's; and the
        producer threads that issue the TMA loads."""
        n, top = self.ws_consumers, NAMED_BARRIERS - 1
        return {"gate_ids": tuple(top - c for c in range(n)), "epilogue_ids": tuple(top - n - c for c in range(n)),
                "producer_threads": FA3_PRODUCER_THREADS, "in_bytes": DTYPE_BYTES[DType(self.spec_dtypes[0])]}

    @property
    def split_label(self) -> str:
        """split_kv as the spec says it: N, or auto."""
        return "auto" if self.split_wave is not None else str(self.split_kv)

    def split_for(self, shape: tuple[int, ...]) -> int:
        """decode: the KV splits of one problem size, as the template's make_kernel computes SPLIT_KV -- the fixed
        split_kv, or split_kv auto's (auto_split_kv over the shape's workgroups per split); 1 for prefill."""
        if self.variant != AttentionVariant.DECODE:
            return 1
        if self.split_wave is None:
            return self.split_kv
        batch, heads, kv_heads, seq_q, seq_kv = shape
        if self.dynamic_kv is not None:  # fixed when the kernel is made: the splits of the shortest length it serves
            seq_kv = self.dynamic_kv[0]
        return auto_split_kv(kv_heads * self.row_blocks(heads // kv_heads * seq_q) * batch,
                             attention_kv_blocks(seq_kv, self.block_n), self.split_wave)

    def compile_shape(self, shape: tuple[int | str, ...]) -> tuple[int | str, ...]:
        """A dynamic-KV kernel is compiled once for every KV length: its compile shape is
        (batch, heads, kv_heads, seq_q, 'seq_kv')."""
        if self.dynamic_kv is None:
            return tuple(shape)
        return (*tuple(shape)[:4], DYNAMIC_KV)

    def limit_shapes(self):
        """The spec's shapes, and for a dynamic-KV kernel each (batch, heads, kv_heads, seq_q) at the longest KV
        length it serves."""
        yield from super().limit_shapes()
        if self.dynamic_kv is not None:
            for head in dict.fromkeys(s[:4] for s in self.shapes):
                yield ("dynamic_kv", "max"), (*head, self.dynamic_kv[1])

    def row_blocks(self, rows: int) -> int:
        """decode: blocks of BLOCK_M packed query rows per K/V head (rows = heads // kv_heads * seq_q)."""
        return -(-rows // self.block_m)

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """prefill `T.Kernel(ceildiv(seq_q, BLOCK_M), heads, batch)`: one workgroup per (query block, head,
        batch). decode: `T.Kernel(SPLIT_KV, kv_heads * row_blocks, batch)` for the splits (row_blocks =
        ceil(heads/kv_heads * seq_q / BLOCK_M) blocks of packed rows per K/V head), then the combine's
        `T.Kernel(heads, seq_q, batch)` -- which split_kv auto leaves out where it takes one split, and
        split_kv_combine fixup always."""
        batch, heads, kv_heads, seq_q, _ = shape
        if self.variant == AttentionVariant.DECODE:
            split = self.split_for(shape)
            splits = ((split, kv_heads * self.row_blocks(heads // kv_heads * seq_q), batch),)
            one = (split == 1 and self.split_wave is not None) or self.fixup
            return splits if one else (*splits, (heads, seq_q, batch))
        if self.persistent_grid:
            return ((min(self.persistent_workgroups, self.persistent_tiles(shape)), 1, 1),)
        return ((-(-seq_q // self.block_m), heads, batch),)

    def workspace_shapes(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The fp32 workspaces the kernel takes between K/V and O, at one problem size: decode's partial outputs
        O_PART [batch, seq_q, heads, split_kv, head_dim] and their log-sum-exp LSE [batch, seq_q, heads, split_kv]
        -- and with split_kv_combine fixup the int32 arrival counters SPLIT_ARRIVALS [batch, kv_heads * row_blocks],
        one per workgroup row of the split grid (workspace_dtypes, workspace_zeroed). Prefill: with tile_order dynamic
        the tile counter TILE_COUNTER [1] (int32, zero on entry and left zero), else none."""
        if self.variant != AttentionVariant.DECODE:
            return ((1,),) if self.dynamic else ()
        batch, heads, kv_heads, seq_q, _ = shape
        split = self.split_for(shape)
        parts = ((batch, seq_q, heads, split, self.head_dim), (batch, seq_q, heads, split))
        return parts + ((batch, kv_heads * self.row_blocks(heads // kv_heads * seq_q)),) * self.fixup

    def workspace_dtypes(self) -> tuple[str, ...]:
        """The dtype of each workspace (workspace_shapes): fp32, the counters int32."""
        if self.variant != AttentionVariant.DECODE:
            return ("int32",) if self.dynamic else ()
        return ("fp32", "fp32") + ("int32",) * self.fixup

    def workspace_zeroed(self) -> tuple[bool, ...]:
        """Per workspace: whether it must hold zeros on entry (the counters, left zero by the kernel); the others
        are written before they are read."""
        return tuple(d == "int32" for d in self.workspace_dtypes())

    def persistent_tiles(self, shape: tuple[int, ...]) -> int:
        """persistent: the (query block, head, batch) tiles of `shape` the grid loops over."""
        batch, heads, _, seq_q, _ = shape
        return -(-seq_q // self.block_m) * heads * batch

    def kv_section(self, shape: tuple[int, ...]) -> int:
        """fa3, grid persistent, causal: the (batch, query head) pairs of one section of the tile order -- the
        most whole K/V heads whose K and V (seq_kv keys each) fit l2_kv_bytes, at least one, times the query heads
        sharing each, as a divisor of the pairs (every section holds as many: TileLang 0.1.15 cannot lower the
        causal mask behind a tile index divided by a run-time section size). The template's make_kernel computes
        the same `section`."""
        batch, heads, kv_heads, _, seq_kv = shape
        group = heads // kv_heads
        fit = max(1, self.l2_kv_bytes // (2 * seq_kv * self.head_dim * DTYPE_BYTES[DType(self.spec_dtypes[0])])) * group
        return max(s for s in range(group, min(fit, heads * batch) + 1, group) if heads * batch % s == 0)

    def persistent_tile(self, tile: int, shape: tuple[int, ...]) -> tuple[int, int, int]:
        """(query block, head, batch) of tile `tile` in the template's order: causal, the last query block (the
        longest KV loop) of every (batch, head) first, so that each workgroup's tiles go from long to short --
        with fa3's persistent grid, section by section (kv_section: the K and V a section reads fit L2), the last
        query blocks of a section's pairs first; otherwise the query blocks of one (batch, head) next to each
        other (they read the same K and V)."""
        batch, heads, _, seq_q, _ = shape
        q_blocks = -(-seq_q // self.block_m)
        if self.causal and self.l2_kv_bytes is not None:
            section = self.kv_section(shape)
            pair = tile // (section * q_blocks) * section + tile % section
            return q_blocks - 1 - tile % (section * q_blocks) // section, pair % heads, pair // heads
        if self.causal:
            return q_blocks - 1 - tile // (heads * batch), tile % heads, tile // heads % batch
        return tile % q_blocks, tile // q_blocks % heads, tile // (q_blocks * heads) % batch

    def persistent_tiles_of(self, wg: int, shape: tuple[int, ...]) -> list[int]:
        """Persistent grid: the tiles (persistent_tile's numbers) workgroup `wg` computes, in order, as the template's
        tile loop deals them -- round r's tile r * grid + wg, or with tile_order snake r * grid + grid - 1 - wg in
        the odd rounds; grid = min(persistent_workgroups, tiles), and a last round's numbers past the tiles are
        nobody's. Not for tile_order dynamic: there only the first tile, wg, is dealt before the grid runs."""
        if self.dynamic:
            raise ValueError("tile_order dynamic: a workgroup's tiles after its first are decided as the grid runs")
        tiles = self.persistent_tiles(shape)
        grid = min(self.persistent_workgroups, tiles)
        dealt = (r * grid + (grid - 1 - wg if self.snake and r % 2 else wg) for r in range(-(-tiles // grid)))
        return [t for t in dealt if t < tiles]

    def persistent_last_tiles(self, shape: tuple[int, ...]) -> list[int]:
        """The tiles the persistent grid's negative control leaves unwritten: the last tile of each workgroup (a
        loop one round short) -- with tile_order dynamic, which tiles a workgroup computes is decided as the grid
        runs, so every tile past each workgroup's first (a counter that never hands one out)."""
        tiles = self.persistent_tiles(shape)
        grid = min(self.persistent_workgroups, tiles)
        if self.dynamic:
            return list(range(grid, tiles))
        return [self.persistent_tiles_of(wg, shape)[-1] for wg in range(grid)]

    def metadata(self, uri: str) -> dict[str, object]:
        i, o, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"input": i, "out": o, "accumulate": acc},
            "shapes": [dict(zip(("batch", "heads", "kv_heads", "seq_q", "seq_kv"), s, strict=True)) for s in self.shapes],
            "head_dim": self.head_dim, "causal": self.mask.value if self.causal else False,
            "variant": self.variant.value, "split_kv": self.split_kv if self.split_wave is None else "auto",
            **({"split_wave": self.split_wave} if self.split_wave is not None else {}),
            **({"dynamic_kv": {"min": self.dynamic_kv[0], "max": self.dynamic_kv[1]}} if self.dynamic_kv else {}),
            **({"combine_vec": self.combine_vec} if self.combine_vec is not None else {}),
            **({"split_kv_combine": self.combine} if self.fixup else {}),
            "softmax_scale": self.softmax_scale,
            "tiling": {"block_m": self.block_m, "block_n": self.block_n, "threads": self.threads},
            "pipeline": {"stages": self.stages,
                         "order": list(self.pipeline_order) if self.pipeline_order else None,
                         "stage": list(self.pipeline_stage) if self.pipeline_stage else None},
            **({"schedule": self.schedule.value,
                self.schedule.value: {"consumer_warpgroups": self.ws_consumers, "producer_max_nreg": self.ws_producer_nreg,
                                      "consumer_max_nreg": self.ws_consumer_nreg,
                                      **({"grid": "persistent", "workgroups": self.persistent_workgroups}
                                         if self.persistent_grid else {})}}
               if self.schedule in WARP_SPECIALIZED else {}),
            **({"schedule": self.schedule.value, "persistent": {"workgroups": self.persistent_workgroups}}
               if self.schedule == AttentionSchedule.PERSISTENT else {}),
            **({"k_pack": self.k_pack} if self.k_pack > 1 else {}),
            **({"v_layout": self.v_layout} if self.v_transposed else {}),
            "tail": self.tail.value, "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd,
            "lds_bytes": self.lds_bytes,
        }

    def summary(self) -> dict[str, str]:
        split = f"decode, split_kv {self.split_label}, " if self.variant == AttentionVariant.DECODE else ""
        split += f"combine {self.combine_vec}-wide, " if self.combine_vec is not None else ""
        split += "combine fixup, " if self.fixup else ""
        return {"dtypes": self.dtype_label(), "layout": "bshd" + (f" causal {self.mask.value}" if self.causal else ""),
                "tiling": f"{self.block_m}x{self.block_n} d{self.head_dim}", "threads": str(self.threads),
                "schedule": (f"{split}{'' if self.schedule == AttentionSchedule.DEFAULT else self.schedule.value + ', '}"
                             f"{'persistent grid, ' if self.persistent_grid and self.schedule == AttentionSchedule.FA3 else ''}{f'{self.tile_order}, ' if self.tile_order else ''}"
                             f"{f'k_pack {self.k_pack}, ' if self.k_pack > 1 else ''}"
                             f"{'V transposed, ' if self.v_transposed else ''}stages {self.stages}"),
                "tail": self.tail.value}

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])


def make_instance(spec: AttentionSpec, target: TargetSpec, spec_file: str) -> AttentionInstance:
    hw = target.hw
    tuning, _ = spec.tuning_for(target.target)
    t, stages = tuning.tiling, tuning.pipeline.stages
    decode = spec.variant == AttentionVariant.DECODE
    compute = DECODE_LOOP_COMPUTE if decode else ATTENTION_LOOP_COMPUTE
    prefill = spec.variant == AttentionVariant.PREFILL
    persistent = tuning.schedule == AttentionSchedule.PERSISTENT and prefill  # decode + persistent: never rendered
    # fa3's persistent grid (rule grid_schedule refuses it for the other schedules: never rendered)
    fa3_persistent = (tuning.schedule == AttentionSchedule.FA3 and tuning.grid == GridPolicy.PERSISTENT and prefill
                      and target.warp_specialization)
    # v_layout transposed where its rules pass (v_layout_schedule, v_layout_tile report the rest; never rendered)
    v_transposed = (persistent and tuning.v_layout == VLayout.TRANSPOSED and v_layout_rows(spec, tuning) is not None)
    copies = V_TRANSPOSED_COPIES if v_transposed else ATTENTION_LOOP_COPIES
    order, stage = explicit_schedule(target, stages, copies, compute)
    d = spec.dtypes
    scale = spec.softmax_scale if spec.softmax_scale is not None else 1.0 / math.sqrt(spec.head_dim)
    ws = tuning.schedule in WARP_SPECIALIZED
    consumers = ws_consumers(t.block_m) if ws else 0
    # build_instances makes the instance before it reports the rules: decode + ws (refused by ws_variant) or a
    # block_m under 64 (ws_tiles) still gets one, never rendered
    template = WS_TEMPLATES[tuning.schedule] if ws and prefill else PERSISTENT_TEMPLATE if persistent else TEMPLATES[spec.variant]
    return AttentionInstance(
        name=spec.name, target=target.target, spec_file=spec_file, template=template,
        shapes=tuple((s.batch, s.heads, s.kv_heads, s.seq_q, s.seq_kv) for s in spec.shapes),
        in_dtype=hw.tilelang_dtypes[d.input], out_dtype=hw.tilelang_dtypes[d.out],
        accum_dtype=hw.tilelang_dtypes[d.accumulate], spec_dtypes=(d.input.value, d.out.value, d.accumulate.value),
        head_dim=spec.head_dim, mask=spec.causal, variant=spec.variant,
        split_kv=tuning.split_kv if isinstance(tuning.split_kv, int) else 1,
        split_wave=None if isinstance(tuning.split_kv, int) or not decode else hw.compute_units * SPLIT_KV_AUTO_WAVES,
        dynamic_kv=(spec.dynamic_kv.min, spec.dynamic_kv.max) if spec.dynamic_kv and decode else None,
        # the fixup merges in the split workgroups: no combine kernel, so no combine_vec (normalised away)
        combine_vec=(tuning.combine_vec if decode and tuning.combine_vec > 1
                     and tuning.split_kv_combine != SplitKvCombine.FIXUP else None),
        # (normalised away with one fixed split: nothing to merge)
        l2_kv_bytes=hw.l2_bytes // 2 if fa3_persistent and spec.causal != CausalMask.NONE and hw.l2_bytes else None,
        tile_order=tuning.tile_order.value if fa3_persistent and tuning.tile_order != TileOrder.STRIDED else None,
        combine=(SplitKvCombine.FIXUP.value if decode and tuning.split_kv_combine == SplitKvCombine.FIXUP
                 and tuning.split_kv != 1 else None),
        softmax_scale=scale,
        block_m=t.block_m, block_n=t.block_n, threads=t.threads, stages=stages,
        pipeline_order=order, pipeline_stage=stage, schedule=tuning.schedule, ws_consumers=consumers,
        ws_producer_nreg=WS_PRODUCER_NREG if ws else 0, ws_consumer_nreg=ws_consumer_nreg(hw, consumers) if consumers else 0,
        persistent_workgroups=hw.compute_units * PERSISTENT_WORKGROUPS_PER_CU if persistent or fa3_persistent else 0,
        k_pack=tuning.k_pack if target.supports_k_pack else 1,
        v_layout=(VLayout.TRANSPOSED if v_transposed else VLayout.NATURAL).value,
        tail=spec.tail,
        allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=attention_lds_bytes(spec, tuning, target),
        tilelang_target=tilelang_target(target), uses_rocm_gemm=target.gemm_fn == "rocm_gemm",
    )
