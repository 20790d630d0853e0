"""The GEMM instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import InstanceBase, dtype_tag, explicit_schedule, pipelined_loop, tail_tag, tilelang_target
from codegen.families.gemm.rules import (
    b_eviction,
    fast_activation,
    gemv_vector,
    lds_bytes,
    odd_rows,
    shared_epilogue,
    tf32_converted_inline,
    transposed_b_rows,
)
from codegen.families.gemm.spec import (
    Activation,
    ActivationMath,
    Epilogue,
    Eviction,
    GemmShape,
    GemmSpec,
    GridPolicy,
    Layout,
    LdsLayout,
    Precision,
    SplitKSum,
    Staging,
    Structure,
    Tf32Convert,
    WarpPolicy,
)
from codegen.families.gemm.targets import GEMM_TARGET
from codegen.families.spec import TailPolicy
from codegen.targets import TARGETS
from codegen.targets.base import TargetSpec

_POLICY = {
    WarpPolicy.SQUARE: "T.GemmWarpPolicy.Square",
    WarpPolicy.FULL_ROW: "T.GemmWarpPolicy.FullRow",
    WarpPolicy.FULL_COL: "T.GemmWarpPolicy.FullCol",
}



VECTOR_LOAD_BYTES = 16  # TileLang's coalesced tile copies: one 16-byte load per lane

# epilogue shared: TileLang 0.1.15 stores the shared C tile (128-byte swizzled) as TMA boxes of 128 bytes of a row
# by every row of the tile -- ceil(block_n / box) tma_store calls a tile (lowered source; tests/test_tma_copies.py)
EPILOGUE_BOX_BYTES = 128
GEMV_PARTIAL = "_gemv.py.j2"  # gemm.py.j2's structure partial for structure gemv
TILED_PARTIAL = "_tiled.py.j2"  # ... and for structure tiled (composing _staging, _mainloop, _scheduler, _epilogue)
DYNAMIC_M = "m"  # the symbolic row count: its T.dynamic name, and the M of a dynamic kernel's compile shape


def as_fp32(value: float) -> float:
    """value rounded to the nearest fp32: the constant the kernel computes with, and the reference's."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


@dataclass(frozen=True, kw_only=True)
class FusedOps:
    """What a GEMM computes beyond the product, on its fp32 accumulator before the output cast, in this fixed
    order: C = act(scale * (A @ B) + bias) + beta * residual (spec epilogue_ops); or, with a gate, the gated MLP
    C = act(A @ B) * (A @ B_UP) (spec gate; `activation` is the gate's). Constants are fp32 values."""

    scale: float | None = None  # alpha; None: 1 (no multiply)
    bias_dtype: str | None = None  # the bias vector's spec dtype; None: no bias
    bias_tilelang_dtype: str | None = None  # ... its TileLang name on the instance's target
    activation: str | None = None  # Activation; None: none
    residual: bool = False
    beta: float = 1.0  # the residual's factor (1: added as is)
    gate: str | None = None  # Gate; None: one product

    @property
    def ops(self) -> tuple[str, ...]:
        """The fused operations in the order the kernel applies them (the names verify's controls use)."""
        return tuple(name for name, on in (("gate", self.gate is not None), ("scale", self.scale is not None),
                                           ("bias", self.bias_dtype is not None),
                                           ("activation", self.activation is not None and self.gate is None),
                                           ("residual", self.residual)) if on)


def fused_ops(spec: GemmSpec, hw) -> FusedOps | None:
    """The instance's FusedOps of a spec's epilogue_ops and gate; None where it asks for neither."""
    ops, gate = spec.epilogue_ops, spec.gate
    if ops is None and gate is None:
        return None
    if gate is not None:
        return FusedOps(activation=gate.activation.value, gate=gate.value)
    return FusedOps(scale=None if ops.scale is None else as_fp32(ops.scale),
                    bias_dtype=ops.bias.dtype.value if ops.bias else None,
                    bias_tilelang_dtype=hw.tilelang_dtypes[ops.bias.dtype] if ops.bias else None,
                    activation=ops.activation.value if ops.activation else None,
                    residual=ops.residual is not None, beta=as_fp32(ops.residual.beta) if ops.residual else 1.0)


# the activations' fp32 helper functions (_epilogue.py.j2), by Activation
ACTIVATION_FN = {Activation.RELU.value: "_relu", Activation.GELU_TANH.value: "_gelu_tanh",
                 Activation.GELU_ERF.value: "_gelu_erf", Activation.SILU.value: "_silu"}
# stem tags of the fused operations
ACTIVATION_TAG = {Activation.RELU.value: "relu", Activation.GELU_TANH.value: "gelut",
                  Activation.GELU_ERF.value: "gelu", Activation.SILU.value: "silu"}


@dataclass(frozen=True, kw_only=True)
class GemmInstance(InstanceBase):
    """A GEMM kernel for one target: C[M, N] = op(A) @ op(B), fully resolved."""

    # identity
    name: str
    target: Target
    op: str = "gemm"
    # every GEMM renders the one template; its partials are chosen by the fields below (template_vars)
    template: str = "gemm.py.j2"
    # provenance (not part of the configuration hash)
    spec_file: str = field(compare=False)
    # problem
    shapes: tuple[tuple[int, int, int], ...]
    a_dtype: str  # TileLang dtype names for this target
    b_dtype: str
    out_dtype: str
    accum_dtype: str
    spec_dtypes: tuple[str, str, str, str]  # a, b, out, accumulate as written in the spec
    layout: str
    trans_a: bool
    trans_b: bool
    # tiling and schedule
    structure: str  # Structure: tiled (gemm.py.j2's _tiled.py.j2) | gemv (its _gemv.py.j2)
    vector: int  # elements of one global load of the gemv structure's lanes (0: tiled, TileLang's copies)
    # tiled: workgroups each output tile's K range is split over (1: no split); with a split, the block of C
    # each workgroup of the second kernel (the fixed-order sum of the fp32 partials) serves (0 without one)
    split_k: int = 1
    reduce_block_m: int = 0
    reduce_block_n: int = 0
    block_m: int
    block_n: int
    block_k: int
    threads: int
    policy: str
    stages: int
    pipeline_order: tuple[int, ...] | None  # explicit schedule (explicit_pipeline_schedule targets); None = TileLang's num_stages
    pipeline_stage: tuple[int, ...] | None
    unroll: int
    swizzle_panel: int
    k_pack: int | None  # None on targets without k_pack
    tail: TailPolicy
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)  # how the kernel is checked, not what it is
    lds_bytes: int
    tilelang_target: tuple[tuple[str, str], ...]
    # fp32 inputs only (None otherwise): the spec's precision mode, and how its products are formed --
    # "mma" (the target's gemm_fn: fp32 MFMA for ieee on AMD; tf32 mma_sync of rounded inputs for tf32/3xtf32)
    # or "fma" (CUDA-core FMA: ieee where the target's MMA would round fp32 inputs, i.e. sm_90)
    precision: str | None = None
    fp32_product: str | None = None
    # LdsLayout: how B's K x N tile is staged in LDS ("natural" on targets without transposed_b, and for
    # layouts whose B is stored N x K)
    lds_layout: str = LdsLayout.NATURAL.value

    @property
    def transposed_b(self) -> bool:
        return self.lds_layout == LdsLayout.TRANSPOSED_B.value

    # Staging: none (tiles read from the caller's A and B) | padded (_staging.py.j2: A and B first copied into
    # zero-padded workspaces of whole blocks)
    staging: str = Staging.NONE.value

    @property
    def padded(self) -> bool:
        return self.staging == Staging.PADDED.value

    # (min, max): M is symbolic (T.dynamic) and one compiled kernel serves every M in it; None: M fixed per compile
    dynamic_m: tuple[int, int] | None = None
    # GridPolicy: "tiles" (a workgroup per output tile) | "persistent" (_scheduler.py.j2's tile loop); with persistent, the
    # workgroups the target holds at once (compute_units x TargetSpec.resident_workgroups), the most it launches
    grid: str = GridPolicy.TILES.value
    resident_workgroups: int = 0

    # sm_90's TMA copy options: Eviction, the L2 priority of B's tile loads ("normal": no hint);
    # Epilogue, "direct" (fragment -> global) or "shared" (fragment -> a shared C tile -> TMA stores)
    b_eviction: str = Eviction.NORMAL.value
    epilogue: str = Epilogue.DIRECT.value

    # the fused epilogue ops and the gate (FusedOps); None: C is the product, rounded. An optional part of the
    # identity (InstanceBase.OPTIONAL_IDENTITY): written to the canonical form only where set
    fused: FusedOps | None = None
    # SplitKSum: None -- the partials summed by a second kernel (or no K split); "fixup" -- by the last split of
    # each tile to finish (TILE_ARRIVALS: int32 counters, zero on entry and left zero). Optional identity too
    split_k_sum: str | None = None
    # Tf32Convert: None -- precision tf32 / 3xtf32 staged into TF32 workspaces (or no TF32); "inline" -- rounded
    # (3xtf32: split) in the main kernel's shared tiles each K step, no workspaces. Optional identity too
    tf32_convert: str | None = None
    # ActivationMath: None -- the activation's exp and division accurate (expf, an IEEE division); "fast" -- exp2
    # and the reciprocal's approximation (sm_90, an activation silu or gelu_tanh). Optional identity too
    activation_math: str | None = None
    OPTIONAL_IDENTITY: ClassVar[tuple[str, ...]] = ("fused", "split_k_sum", "tf32_convert", "activation_math")

    @property
    def fast_activation(self) -> bool:
        """activation_math fast: the activation's exp2 and reciprocal approximations."""
        return self.activation_math == ActivationMath.FAST.value

    @property
    def tf32_inline(self) -> bool:
        """precision tf32 / 3xtf32 converted in the main kernel's tiles (tf32_convert inline): no staging."""
        return self.tf32_convert == Tf32Convert.INLINE.value

    @property
    def fixup(self) -> bool:
        """A K split whose partials the last split of each tile sums (split_k_sum fixup): no second kernel."""
        return self.split_k_sum == SplitKSum.FIXUP.value

    @property
    def gated(self) -> bool:
        return self.fused is not None and self.fused.gate is not None

    @property
    def persistent(self) -> bool:
        return self.grid == GridPolicy.PERSISTENT.value

    @property
    def shared_epilogue(self) -> bool:
        return self.epilogue == Epilogue.SHARED.value

    @property
    def epilogue_box_n(self) -> int:
        """Columns of C one TMA store of the shared epilogue writes (block_m rows each): EPILOGUE_BOX_BYTES of a row."""
        return min(self.block_n, EPILOGUE_BOX_BYTES // DTYPE_BYTES[DType(self.spec_dtypes[2])])

    def persistent_schedule(self, m: int, n: int) -> PersistentSchedule:
        """The persistent grid at one problem size (what the template's `_schedule` computes)."""
        return PersistentSchedule(tiles_m=-(-m // self.block_m), tiles_n=-(-n // self.block_n),
                                  resident=self.resident_workgroups, panel=self.swizzle_panel)

    def compile_shape(self, shape: tuple[int | str, ...]) -> tuple[int | str, ...]:
        """A dynamic-M kernel is compiled once for every M: its compile shape is ('m', n, k)."""
        if self.dynamic_m is None:
            return tuple(shape)
        _, n, k = shape
        return (DYNAMIC_M, n, k)

    def limit_shapes(self):
        """The spec's shapes, and for a dynamic-M kernel each (n, k) at the largest M it serves."""
        yield from super().limit_shapes()
        if self.dynamic_m is not None:
            for n, k in dict.fromkeys((n, k) for _, n, k in self.shapes):
                yield ("dynamic_m", "max"), (self.dynamic_m[1], n, k)

    def uses_matrix_cores(self) -> bool:
        """The tiled structure does, but for true fp32 on a target whose MMA rounds fp32 (CUDA-core FMA);
        gemv never does."""
        return self.structure == Structure.TILED.value and self.fp32_product != "fma"

    def global_load_bytes(self) -> int | None:
        """The main loop's tile copies are laid out for 16-byte loads per lane."""
        return VECTOR_LOAD_BYTES

    def narrow_load_hint(self, shape: tuple) -> str | None:
        """An operand whose stored rows are not whole 16-byte vectors at this shape cannot be read 16 bytes at a
        time: staging padded copies it into an aligned workspace first (a tiled GEMM not staged already)."""
        if self.structure != Structure.TILED.value or self.workspace:
            return None
        if not all(isinstance(d, int) for d in shape[:3]):
            return None  # a symbolic size: no one shape to speak of
        rows = odd_rows(Layout(self.layout), DType(self.spec_dtypes[0]), GemmShape(m=shape[0], n=shape[1], k=shape[2]))
        if not rows:
            return None
        tail = "" if str(self.tail) == TailPolicy.PREDICATED.value else " with tail: predicated"
        named = " and ".join(f"{op}'s rows ({d} = {ld})" for op, (d, ld) in rows.items())
        return (f"{named} are not whole {VECTOR_LOAD_BYTES}-byte vectors: staging: padded{tail} copies them into "
                f"aligned workspaces, so the main loop loads {VECTOR_LOAD_BYTES} bytes at a time (docs/gemm.md)")

    def stem(self) -> str:
        a, _, out, _ = self.spec_dtypes
        if Structure(self.structure).is_gemv:
            prefix = "gemvn" if self.structure == Structure.GEMV_N.value else "gemv"
            parts = [f"{prefix}_{dtype_tag(a, out)}_{self.layout}", f"{self.block_m}x{self.block_n}x{self.block_k}",
                     f"t{self.threads}"] + [f"u{self.unroll}"] * (self.unroll > 1)
            return "_".join(parts) + tail_tag(self.tail)
        parts = [f"gemm_{dtype_tag(a, out)}_{self.layout}", f"{self.block_m}x{self.block_n}x{self.block_k}",
                 f"t{self.threads}", f"s{self.stages}"] + [f"sk{self.split_k}{'fx' * self.fixup}"] * (self.split_k > 1)
        parts += [f"u{self.unroll}"] * (self.unroll > 1) + [f"sw{self.swizzle_panel}"] * (self.swizzle_panel > 0)
        parts += [f"kp{self.k_pack}"] * bool(self.k_pack and self.k_pack > 1)
        parts += ["ldsbt"] * self.transposed_b + ["pad"] * self.padded
        parts += [self.policy] * (self.policy != WarpPolicy.SQUARE.value)
        if self.precision is not None:
            parts.append(self.precision + "i" * self.tf32_inline)  # tf32i / 3xtf32i: converted inline
        parts += ["dynm"] * (self.dynamic_m is not None)
        parts += ["pers"] * self.persistent
        parts += [f"ev{self.b_eviction[0]}"] * (self.b_eviction != Eviction.NORMAL.value)  # evf / evl
        parts += ["epis"] * self.shared_epilogue
        parts += self._fused_tags() + ["fm"] * self.fast_activation
        return "_".join(parts) + tail_tag(self.tail)

    def _fused_tags(self) -> list[str]:
        f = self.fused
        if f is None:
            return []
        if f.gate is not None:
            return [f.gate]
        return (["scaled"] * (f.scale is not None) + ["bias"] * (f.bias_dtype is not None)
                + ([ACTIVATION_TAG[f.activation]] if f.activation else []) + ["res"] * f.residual)

    # ---- template inputs ------------------------------------------------------------------
    @property
    def workspace(self) -> str:
        """What the staging kernels write before the main one: "" (none: tiles read from the caller's A and B),
        "padded" (staging padded: zero-padded copies of A and B) or "tf32" (precision tf32 / 3xtf32: TF32
        values, K-major)."""
        if self.precision in (Precision.TF32.value, Precision.X3TF32.value) and not self.tf32_inline:
            return "tf32"
        return "padded" if self.padded else ""

    @property
    def split(self) -> bool:
        return self.split_k > 1

    @property
    def schedule_kind(self) -> str:
        """_scheduler.py.j2's form: "persistent" (a loop over the tiles), "tiles" (a grid calling _block_tile:
        the tail policies' interior and edge kernels) or "tile" (the grid with the K loop inline: a K split,
        staged workspaces)."""
        if self.persistent:
            return "persistent"
        return "tile" if self.split or self.workspace else "tiles"

    @property
    def tma_options(self) -> bool:
        """Whether sm_90's TMA copy options are asked (b_eviction other than normal, or epilogue shared)."""
        return self.b_eviction != Eviction.NORMAL.value or self.shared_epilogue

    def template_vars(self) -> dict[str, object]:
        """Every literal the partials of gemm.py.j2 place (templates/gemm/: _gemv, or _tiled composing _staging,
        _mainloop, _scheduler and _epilogue): each chosen or computed here, none in the templates."""
        tail = self.tail.value
        frame = {"target_literal": repr(dict(self.tilelang_target)),
                 "product_expr": f"{'A^T' if self.trans_a else 'A'} @ {'B^T' if self.trans_b else 'B'}",
                 "a_shape": "(K, M)" if self.trans_a else "(M, K)", "b_shape": "(N, K)" if self.trans_b else "(K, N)",
                 "predicated": self.tail != TailPolicy.NONE}
        if Structure(self.structure).is_gemv:
            small_n = self.structure == Structure.GEMV_N.value
            return frame | {"structure_partial": GEMV_PARTIAL, "title_note": ", small N" if small_n else ", small M",
                            "kernel_args": [], "small_n": small_n, "b_k_contiguous": self.trans_b,
                            "kernel_doc": f"The prim_func for one problem size (tail policy: {tail}).",
                            "lanes_k": self.block_k // self.vector}
        return frame | self._staging_vars() | self._mainloop_vars() | self._scheduler_vars() | self._epilogue_vars() | {
            "structure_partial": TILED_PARTIAL,
            "title_note": "".join(note for note, on in (
                (", operands staged padded", self.padded), (", persistent grid", self.persistent),
                (f", K split over {self.split_k} workgroups" + (", the last one summing" if self.fixup else ""),
                 self.split), (", TMA copy options", self.tma_options))
                if on),
            "kernel_doc": ("The prim_func for one problem size (every tail policy: the padded staging makes every "
                           "block whole)." if self.workspace == "tf32" else
                           f"The prim_func for one problem size (tail policy {tail}: only the store of C is "
                           "bounds-checked)." if self.padded else f"The prim_func for one problem size (tail policy: {tail})."),
            "kernel_args": (self._input_args() + self._workspace_args()
                            + ["C_PART: T.Tensor((SPLIT_K, M, N), ACCUM_DTYPE)"] * self.split
                            + ["TILE_ARRIVALS: T.Tensor((T.ceildiv(M, BLOCK_M), T.ceildiv(N, BLOCK_N)), \"int32\")"]
                            * self.fixup),
            "shared_epilogue": self.shared_epilogue, "tma_options": self.tma_options,
            # the module's kernels as its docstring counts them: staging padded's two, the main one, split-K's sum
            "kernel_count": "four" if self.split and not self.fixup else "three",
            "split_kernels": (1 + 2 * bool(self.workspace), 2 + 2 * bool(self.workspace)),
        }

    def input_names(self) -> tuple[str, ...]:
        """The kernel's inputs after A and B, in the order of its arguments: the gate's second weight B_UP (B's
        layout and shape), the bias vector (N) and the residual (M x N), each where the kernel takes it. Then come
        the workspaces (workspace_shapes) and C."""
        f = self.fused
        if f is None:
            return ()
        return ("B_UP",) * (f.gate is not None) + ("Bias",) * (f.bias_dtype is not None) + ("Residual",) * f.residual

    def _input_args(self) -> list[str]:
        b_shape = "(N, K)" if self.trans_b else "(K, N)"
        spelled = {"B_UP": f"B_UP: T.Tensor({b_shape}, B_DTYPE)", "Bias": "Bias: T.Tensor((N,), BIAS_DTYPE)",
                   "Residual": "Residual: T.Tensor((M, N), OUT_DTYPE)"}
        return [spelled[n] for n in self.input_names()]

    def _epilogue_vars(self) -> dict[str, object]:
        """_epilogue.py.j2's fused operations: one element-wise statement (or two) on the accumulator fragment before
        the store -- scale and bias, then the activation and the residual (or the gate's act(C) * U) -- their
        constants and helpers; and the tensors _block_tile takes."""
        f = self.fused
        tensors = ", ".join(("A", "B", *self.input_names(), "C"))
        if f is None:
            return {"fused": False, "gate": False, "fast_activation": False, "bu_buf": "", "tail_bu": "", "epilogue_lines": [], "fused_constants": [], "activation_fn": "",
                    "fused_doc": "", "bias_dtype": "", "tile_tensors": tensors}
        row0, col0 = self._rows()
        # the bounds of a ragged tile: _block_tile (the tiles schedule) is a module-level macro, reading them from C
        rows, cols = ("C.shape[0]", "C.shape[1]") if self.schedule_kind == "tiles" else ("M", "N")
        guarded = self.tail != TailPolicy.NONE
        act = ACTIVATION_FN[f.activation] if f.activation else ""
        acc = "C_local[i, j]"
        constants = []
        if f.gate is not None:
            lines = [f"{acc} = {act}({acc}) * U_local[i, j]"]
        else:
            pre = acc + " * SCALE" * (f.scale is not None)
            if f.scale is not None:
                constants.append(f"SCALE = {f.scale!r}  # epilogue_ops.scale (alpha), as an fp32 value")
            if f.bias_dtype is not None:
                bias = f"Bias[{col0} + j]"
                if guarded:  # a ragged tile's columns past N read nothing (they are never stored)
                    bias = f"T.if_then_else({col0} + j < {cols}, {bias}, T.cast(0, BIAS_DTYPE))"
                pre += f" + T.cast({bias}, ACCUM_DTYPE)"
            lines = [f"{acc} = {pre}"] if pre != acc else []
            post = f"{act}({acc})" if act else acc
            if f.residual:
                res = f"Residual[{row0} + i, {col0} + j]"
                if guarded:
                    res = f"T.if_then_else({row0} + i < {rows} and {col0} + j < {cols}, {res}, T.cast(0, OUT_DTYPE))"
                beta = "BETA * " if f.beta != 1.0 else ""
                if beta:
                    constants.append(f"BETA = {f.beta!r}  # epilogue_ops.residual.beta, as an fp32 value")
                post += f" + {beta}T.cast({res}, ACCUM_DTYPE)"
            if post != acc:
                lines.append(f"{acc} = {post}")
        return {"fused": True, "gate": f.gate is not None, "bu_buf": "BU_shared" * (f.gate is not None),
                "fast_activation": self.fast_activation,
                "tail_bu": "BU_tail" * (f.gate is not None), "epilogue_lines": lines, "fused_constants": constants,
                "fused_doc": self._fused_doc(),
                "activation_fn": act, "tile_tensors": tensors,
                "bias_dtype": f.bias_tilelang_dtype or ""}

    def _fused_doc(self) -> str:
        """The module docstring's paragraph on what the kernel computes beyond the product."""
        f = self.fused
        if f.gate is not None:
            return (f"Gated ({f.gate}): C = {f.activation}(A @ B) * (A @ B_UP). B (the gate's weight) and B_UP (the up\n"
                    "projection's) have B's layout and shape; each K step loads one A tile and a tile of each into the\n"
                    "same pipeline stage and accumulates two fp32 products (C_local, U_local); the epilogue stores only\n"
                    f"{f.activation}(C_local) * U_local, rounded once.")
        y = "SCALE * (A @ B)" if f.scale is not None else "A @ B"
        y += " + Bias" if f.bias_dtype else ""
        z = f"{f.activation}({y})" if f.activation else y
        z += (" + BETA * Residual" if f.beta != 1.0 else " + Residual") if f.residual else ""
        parts = [f"Fused epilogue ops, in fp32 on the accumulator, then one rounding to the output dtype: C = {z}."]
        parts += ["Bias: N elements (BIAS_DTYPE), added to every row."] * (f.bias_dtype is not None)
        parts += ["Residual: M x N, C's dtype."] * f.residual
        parts.append(f"Arguments after B, before the workspaces and C: {', '.join(self.input_names())}.")
        return "\n".join(parts)

    def _rows(self) -> tuple[str, str]:
        """The first row and column of the output tile, as the tile's code names them."""
        if self.workspace == "tf32" and self.schedule_kind == "tile":
            return "by * BLOCK_M", "bx * BLOCK_N"
        return "row0", "col0"

    def _staging_vars(self) -> dict[str, object]:
        """_staging.py.j2: the tiles' buffers and sources, the copies of one K step, the staging kernels."""
        row0, col0 = self._rows()
        k0 = "(k_first + kk) * BLOCK_K" if self.split else "k * BLOCK_K"
        # the operands' tiles as stored (the padded staging copies these); transposed_b: B's LDS tile is N x K
        a_tile = "(BLOCK_K, BLOCK_M)" if self.trans_a else "(BLOCK_M, BLOCK_K)"
        b_stored = "(BLOCK_N, BLOCK_K)" if self.trans_b else "(BLOCK_K, BLOCK_N)"
        v: dict[str, object] = {
            "transposed_b": self.transposed_b, "workspace": self.workspace, "x3": self.precision == Precision.X3TF32.value,
            "a_buf": "A_shared", "b_buf": "B_shared", "tile_dtype": ("A_DTYPE", "B_DTYPE"),
            "a_tile": a_tile, "b_tile": "(BLOCK_N, BLOCK_K)" if self.transposed_b else b_stored,
            "a_src": "A_PAD" if self.padded else "A", "b_src": "B_PAD" if self.padded else "B",
            "a_origin": f"{k0}, {row0}" if self.trans_a else f"{row0}, {k0}",
            "b_origin": f"{col0}, {k0}" if self.trans_b else f"{k0}, {col0}",
            "k_tile": "k_first + kk" if self.split else "k",  # the K tile of one step (transposed_b's _stage_b)
            # T.copy's eviction_policy on every copy of B ('' for no hint)
            "b_hint": ", eviction_policy=B_EVICTION" if self.b_eviction != Eviction.NORMAL.value else "",
            "stage_launches": [], "tf32_inline": self.tf32_inline,
        }
        if self.transposed_b:  # elements of one 16-byte load of a row of B, and the rows (K) each thread loads
            b_vec = VECTOR_LOAD_BYTES // DTYPE_BYTES[DType(self.spec_dtypes[1])]
            v |= {"b_vec": b_vec, "b_rows": transposed_b_rows(self.block_k, self.block_n, self.threads, b_vec)}
        if self.padded:  # the workspaces' shapes (storage layout, whole blocks) and each staging tile's origin
            v["a_pad_shape"], v["b_pad_shape"] = self._pad_shapes()
            # staging grids: (K tile bx, row block by) of the operand
            a_at = "bx * BLOCK_K, by * BLOCK_M" if self.trans_a else "by * BLOCK_M, bx * BLOCK_K"
            b_at = "by * BLOCK_N, bx * BLOCK_K" if self.trans_b else "bx * BLOCK_K, by * BLOCK_N"
            v["stage_launches"] = [{"rows": "M, BLOCK_M", "args": f"A, A_PAD, {a_at}, {a_tile}, A_DTYPE"},
                                   {"rows": "N, BLOCK_N", "args": f"B, B_PAD, {b_at}, {b_stored}, B_DTYPE"}]
        if self.tf32_inline:  # the tiles as stored (A_s_raw, B_s_raw), converted each step into K-major TF32 tiles
            v |= {"a_buf": "A_s", "b_buf": "B_s", "tile_dtype": ("TF32", "TF32"),
                  "a_tile": "(BLOCK_M, BLOCK_K)", "b_tile": "(BLOCK_N, BLOCK_K)", "a_raw_tile": a_tile,
                  "b_raw_tile": b_stored, "a_k_major": not self.trans_a, "b_k_major": self.trans_b}
        if self.workspace == "tf32":  # K-major TF32 workspaces: A_hi (M x K), B_hi (N x K), and the residuals
            names = self.xf32_workspaces()
            lo = "A_lo" in names
            v |= {"a_buf": "A_s", "b_buf": "B_s", "tile_dtype": ("TF32", "TF32"), "a_src": "A_hi", "b_src": "B_hi",
                  "a_tile": "(BLOCK_M, BLOCK_K)", "b_tile": "(BLOCK_N, BLOCK_K)",
                  "a_origin": f"{row0}, {k0}", "b_origin": f"{col0}, {k0}",
                  "workspace_names": ", ".join(names), "lo_param": ", X_lo" if lo else "",
                  "stage_launches": [
                      {"rows": "M, BLOCK_M", "args": f"A, A_hi{', A_lo' * lo}, by * BLOCK_M, bx * BLOCK_K, BLOCK_M, "
                                                     f"{self.trans_a}"},
                      {"rows": "N, BLOCK_N", "args": f"B, B_hi{', B_lo' * lo}, by * BLOCK_N, bx * BLOCK_K, BLOCK_N, "
                                                     f"{not self.trans_b}"}]}
        return v

    def _pad_shapes(self) -> tuple[str, str]:
        """staging padded's workspaces A_PAD and B_PAD: the operands' storage layouts, padded to whole blocks."""
        m_pad, n_pad, k_pad = "_whole(M, BLOCK_M)", "_whole(N, BLOCK_N)", "_whole(K, BLOCK_K)"
        return (f"({k_pad}, {m_pad})" if self.trans_a else f"({m_pad}, {k_pad})",
                f"({n_pad}, {k_pad})" if self.trans_b else f"({k_pad}, {n_pad})")

    def _workspace_args(self) -> list[str]:
        """The prim_func's arguments between B and C that the staging kernels write."""
        if self.padded:
            a_pad, b_pad = self._pad_shapes()
            return [f"A_PAD: T.Tensor({a_pad}, A_DTYPE)", f"B_PAD: T.Tensor({b_pad}, B_DTYPE)"]
        return [f"{w}: T.Tensor((_whole({'M, BLOCK_M' if w[0] == 'A' else 'N, BLOCK_N'}), _whole(K, BLOCK_K)), TF32)"
                for w in self.xf32_workspaces()]

    def _mainloop_vars(self) -> dict[str, object]:
        """_mainloop.py.j2: the K loop's variable, trip count and pipeline, and the products of a step."""
        schedule = self.schedule_kind
        extent = ("split_tiles" if self.split else "T.ceildiv(K, BLOCK_K)" if schedule == "tile" else "k_tiles")
        tf32 = self.workspace == "tf32"
        # tf32 / 3xtf32: B staged (or converted inline) K-major, so the MMA reads it transposed
        gemm_args = (["transpose_B=True"] if tf32 or self.tf32_inline else
                     [f"transpose_A={self.trans_a}", f"transpose_B={self.trans_b or self.transposed_b}"])
        gemm_args.append(f"policy={_POLICY[WarpPolicy(self.policy)]}")
        if self.k_pack is not None and self.k_pack > 1:
            gemm_args.append(f"k_pack={self.k_pack}")
        return {
            "split": self.split, "unrolled": self.unroll > 1, "stages_constant": tf32,
            "k_var": "kk" if self.split else "k", "k_extent": extent,
            "k_pipeline": (f"T.Pipelined({extent}, num_stages=STAGES)" if tf32 else
                           pipelined_loop(extent, self.stages, self.pipeline_order, self.pipeline_stage)),
            "gemm_fn": TARGETS[self.target].gemm_fn, "gemm_args": ", ".join(gemm_args),
            # true fp32 (precision ieee of fp32 inputs): `_product`, the target's MMA or CUDA-core FMA ("fma"), whose
            # operands are one element of each staged tile: A_s[i, kk] / B_s[kk, j] as stored
            "product_macro": self.precision == Precision.IEEE.value, "fma_product": self.fp32_product == "fma",
            "a_elem": "A_s[kk, i]" if self.trans_a else "A_s[i, kk]", "b_elem": "B_s[j, kk]" if self.trans_b else "B_s[kk, j]",
        }

    def _scheduler_vars(self) -> dict[str, object]:
        """_scheduler.py.j2 and _epilogue.py.j2: the launches, the tile's coordinates, where C is stored."""
        row0, col0 = self._rows()
        named = self.schedule_kind == "tile" and (row0, col0) == ("row0", "col0")
        return {
            # tail specialized: the tiles grid's interior and edge kernels (other schedules take no such tail)
            "schedule": self.schedule_kind,
            "specialized": self.tail == TailPolicy.SPECIALIZED and self.schedule_kind == "tiles",
            "prelude_gap": self.workspace != "tf32",
            "tile_grid_extents": "T.ceildiv(N, BLOCK_N), T.ceildiv(M, BLOCK_M)" + ", SPLIT_K" * self.split,
            "tile_ids": "(bx, by, bz)" if self.split else "(bx, by)",
            "swizzle_note": "  # remaps (bx, by); bz is kept" if self.split else "",
            "tile_origin": ["row0 = by * BLOCK_M", "col0 = bx * BLOCK_N"] if named else [],
            "row0": row0, "col0": col0, "fixup": self.fixup,
            "c_dst": f"C_PART[bz, {row0}, {col0}]" if self.split else f"C[{row0}, {col0}]",
        }

    def xf32_workspaces(self) -> tuple[str, ...]:
        """The K-major TF32 workspaces of precision tf32 / 3xtf32 (workspace "tf32"), between B and C; else none."""
        if self.workspace != "tf32":
            return ()
        return ("A_hi", "B_hi") + ("A_lo", "B_lo") * (self.precision == Precision.X3TF32.value)

    def workspace_shapes(self, shape: tuple[int, int, int]) -> tuple[tuple[int, ...], ...]:
        """The workspaces the kernel takes between B and C, at one problem size, in the order of its arguments:
        the staging's -- staging padded's A_PAD and B_PAD in the operands' storage layouts, M or N and K padded to
        whole blocks; tf32 / 3xtf32's TF32 operands (rows, K) -- then split-K's fp32 partials C_PART
        [split_k, M, N], and with split_k_sum fixup its tiles' arrival counters [ceil(M / block_m), ceil(N /
        block_n)]. Their dtypes: workspace_dtypes; which must be zero on entry: workspace_zeroed."""
        m, n, k = shape
        rows = {"A": -(-m // self.block_m) * self.block_m, "B": -(-n // self.block_n) * self.block_n}
        k_pad = -(-k // self.block_k) * self.block_k
        staged: tuple[tuple[int, ...], ...] = tuple((rows[w[0]], k_pad) for w in self.xf32_workspaces())
        if self.padded:
            staged = ((k_pad, rows["A"]) if self.trans_a else (rows["A"], k_pad),
                      (rows["B"], k_pad) if self.trans_b else (k_pad, rows["B"]))
        return staged + ((self.split_k, m, n),) * self.split + ((-(-m // self.block_m), -(-n // self.block_n)),) * self.fixup

    def workspace_dtypes(self) -> tuple[str, ...]:
        """The spec dtype of each workspace (workspace_shapes): the inputs' own for staging padded (copies of A and
        B), fp32 for tf32 / 3xtf32's TF32 operands (fp32 storage) and for split-K's partials."""
        staged = (self.spec_dtypes[0],) * 2 if self.padded else (DType.FP32.value,) * len(self.xf32_workspaces())
        return staged + (DType.FP32.value,) * self.split + (COUNTER_DTYPE,) * self.fixup

    def workspace_zeroed(self) -> tuple[bool, ...]:
        """Per workspace (workspace_shapes): whether it must hold zeros on entry -- split_k_sum fixup's arrival
        counters, which the kernel leaves zero again (so one zeroed buffer serves every call in turn). The others
        are written before they are read: any contents."""
        return (False,) * (len(self.workspace_dtypes()) - self.fixup) + (True,) * self.fixup

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """The template's `T.Kernel(...)` grids in launch order (T.use_swizzle only remaps block indices inside
        the grid): the staging of A (ceil(K/block_k), ceil(M/block_m)) and of B (ceil(K/block_k), ceil(N/block_n))
        where a workspace is staged; then the main kernel -- persistent: min(tiles, resident) workgroups; else one
        (ceil(N/block_n), ceil(M/block_m)) grid, split along z with a K split; `specialized`: the interior
        (N//block_n, M//block_m), the bottom edge (ceil(N/block_n)) and the right edge (M//block_m), each where the
        template launches it -- and with a K split, the sum of the partials."""
        m, n, k = shape
        bm, bn = self.block_m, self.block_n
        if self.structure == Structure.GEMV.value:
            return ((-(-n // bn), 1, 1),)
        if self.structure == Structure.GEMV_N.value:
            return ((-(-m // bm), 1, 1),)
        kt = -(-k // self.block_k)
        grids = [(kt, -(-m // bm), 1), (kt, -(-n // bn), 1)] if self.workspace else []
        full_m, full_n = m // bm, n // bn
        if self.persistent:  # one workgroup per resident slot, at most one per tile
            grids.append((self.persistent_schedule(m, n).workgroups, 1, 1))
        elif self.schedule_kind == "tiles" and self.tail == TailPolicy.SPECIALIZED:
            grids += [(full_n, full_m, 1)] * (full_m > 0 and full_n > 0) + [(-(-n // bn), 1, 1)] * bool(m % bm)
            grids += [(full_m, 1, 1)] * bool(n % bn and full_m > 0)
        else:
            grids.append((-(-n // bn), -(-m // bm), self.split_k))
        if self.split and not self.fixup:  # the sum of the partials
            grids.append((-(-n // self.reduce_block_n), -(-m // self.reduce_block_m), 1))
        return tuple(grids)

    def metadata(self, uri: str) -> dict[str, object]:
        a, b, out, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"a": a, "b": b, "out": out, "accumulate": acc}, "layout": self.layout,
            **({"structure": self.structure} if self.structure != Structure.TILED.value else {}),
            **({"lds_layout": self.lds_layout} if self.transposed_b else {}),
            **({"staging": self.staging} if self.padded else {}),
            **({"split_k": self.split_k, "reduce_block": [self.reduce_block_m, self.reduce_block_n]}
               if self.split_k > 1 and not self.fixup else {}),
            **({"split_k": self.split_k, "split_k_sum": self.split_k_sum} if self.fixup else {}),
            **({"tf32_convert": self.tf32_convert} if self.tf32_inline else {}),
            "shapes": [list(s) for s in self.shapes],
            "tiling": {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                       "threads": self.threads, "policy": self.policy},
            "pipeline": {"stages": self.stages,
                         "order": list(self.pipeline_order) if self.pipeline_order else None,
                         "stage": list(self.pipeline_stage) if self.pipeline_stage else None},
            "unroll": self.unroll, "swizzle_panel": self.swizzle_panel, "k_pack": self.k_pack,
            "tail": self.tail.value, **({"precision": self.precision, "fp32_product": self.fp32_product}
                                        if self.precision is not None else {}),
            **({"dynamic_m": {"min": self.dynamic_m[0], "max": self.dynamic_m[1]}} if self.dynamic_m else {}),
            **({"grid": self.grid, "resident_workgroups": self.resident_workgroups} if self.persistent else {}),
            **({"b_eviction": self.b_eviction} if self.b_eviction != Eviction.NORMAL.value else {}),
            **({"epilogue": self.epilogue} if self.shared_epilogue else {}),
            **({"activation_math": self.activation_math} if self.fast_activation else {}),
            **({"fused": {"ops": list(self.fused.ops), **{k: v for k, v in asdict(self.fused).items()
                                                           if v not in (None, False) and k != "bias_tilelang_dtype"
                                                           and not (k == "beta" and not self.fused.residual)}}}
               if self.fused else {}),
            "allow_spills": self.allow_spills, "min_waves_per_simd": self.min_waves_per_simd, "lds_bytes": self.lds_bytes,
        }

    def summary(self) -> dict[str, str]:
        """The columns of `tilegen list`."""
        return {"dtypes": "/".join(self.spec_dtypes[:3]),
                "layout": self.layout + (f" ({self.lds_layout})" if self.transposed_b else ""),
                "tiling": f"{self.block_m}x{self.block_n}x{self.block_k}", "threads": str(self.threads),
                "schedule": f"stages {self.stages}" + (f", split_k {self.split_k}" + " fixup" * self.fixup if self.split_k > 1 else "")
                            + (f", {self.precision}" + " inline" * self.tf32_inline if self.precision else "")
                            + (f", staging {self.staging}" if self.padded else "")
                            + (f", M dynamic {self.dynamic_m[0]}..{self.dynamic_m[1]}" if self.dynamic_m else "")
                            + (f", persistent {self.resident_workgroups}" if self.persistent else "")
                            + (f", B evict {self.b_eviction}" if self.b_eviction != Eviction.NORMAL.value else "")
                            + (", C via shared" if self.shared_epilogue else "")
                            + (f", fused {'+'.join(self.fused.ops)}" if self.fused else "")
                            + (", fast activation" if self.fast_activation else ""),
                "tail": self.tail.value}

    def dtype_label(self) -> str:
        label = "/".join(self.spec_dtypes[:3])
        return f"{label} {self.precision}" if self.precision else label


@dataclass(frozen=True, kw_only=True)
class PersistentSchedule:
    """A persistent GEMM's grid at one problem size: tiles_m x tiles_n output tiles, numbered t = 0, 1, ...
    in the order T.use_swizzle(panel) rasterises a tiles grid (tl::rasterization2DRow; row-major without a
    panel); `workgroups` = min(tiles, resident); workgroup w serves tiles w, w + workgroups, ... -- round r
    of the loop is tiles [r * workgroups, (r + 1) * workgroups), the r-th wave of the tiles grid."""

    tiles_m: int
    tiles_n: int
    resident: int
    panel: int

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def workgroups(self) -> int:
        return min(self.tiles, self.resident)

    @property
    def rounds(self) -> int:
        return -(-self.tiles // self.workgroups)

    def tile(self, t: int) -> tuple[int, int]:
        """(row block, column block) of tile t."""
        if not self.panel:
            return t // self.tiles_n, t % self.tiles_n
        per_panel = self.panel * self.tiles_n
        panel, offset = divmod(t, per_panel)
        panels = -(-self.tiles_m // self.panel)
        rows = self.panel if panel + 1 < panels else self.tiles_m - (panels - 1) * self.panel
        col = offset // rows
        return offset % rows + panel * self.panel, self.tiles_n - 1 - col if panel % 2 else col


COUNTER_DTYPE = "int32"  # split_k_sum fixup's tile arrival counters (a workspace dtype beside the spec's dtypes)
REDUCE_VECTOR = 4  # fp32 partials per thread and split in the sum kernel: one 16-byte load each


def reduce_block(block_m: int, block_n: int, threads: int) -> tuple[int, int]:
    """The block of C one workgroup of the split-K sum serves: BLOCK_N columns (rows of partials read whole)
    by the most rows that divide block_m and keep it within one 16-byte vector a thread -- a divisor of
    block_m, so with tail none every shape is whole reduce blocks too."""
    cap = max(1, threads * REDUCE_VECTOR // block_n)
    return max(d for d in range(1, block_m + 1) if block_m % d == 0 and d <= cap), block_n


def make_instance(spec: GemmSpec, target: TargetSpec, spec_file: str) -> GemmInstance:
    hw = target.hw
    tuning, _ = spec.tuning_for(target.target)
    t = tuning.tiling
    gemv = tuning.structure.is_gemv
    # gemv has no LDS pipeline, MMA warp split, rasterisation or MFMA packing: those tunables do not apply
    # and are normalised, so that points differing only in them are one kernel
    stages = 0 if gemv else tuning.pipeline.stages
    d = spec.dtypes
    fp32 = d.a == DType.FP32
    # B as stored on a target without transposed_b (rule lds_layout_target refuses asking it of such a target
    # alone), and where it does not apply: a B stored N x K (rule lds_layout_applies), gemv and fp32 (rule
    # unsupported_combination)
    transposed = (tuning.lds_layout == LdsLayout.TRANSPOSED_B
                  and tuning.lds_layout.value in GEMM_TARGET[target.target].lds_layouts
                  and not (gemv or fp32 or spec.layout.trans_b))
    lds_layout = LdsLayout.TRANSPOSED_B if transposed else LdsLayout.NATURAL
    # the K loop's statements: copy A, copy B (transposed_b: load, permute, write), gemm
    # (the gate: a second B tile and a second product each step)
    gate = 0 if gemv or spec.gate is None else 1
    order, stage = (None, None) if gemv else explicit_schedule(target, stages, (4 if transposed else 2) + gate, 1 + gate)
    # ieee needs true fp32 products: the target's MMA if it takes fp32 exactly (AMD), else CUDA-core FMA
    exact_mma = target.mma_input_roundoff.get(DType.FP32, 0.0) == 0.0
    product = ("mma" if exact_mma or spec.precision != Precision.IEEE else "fma") if fp32 else None
    # gemv never splits K, loops over tiles nor stages its operands (rule unsupported_combination)
    split = 1 if gemv else tuning.split_k
    persistent = tuning.grid == GridPolicy.PERSISTENT and not gemv
    resident = (hw.compute_units * target.resident_workgroups(t.threads, lds_bytes(spec, tuning, target))
                if persistent else 0)
    padded = tuning.staging == Staging.PADDED and not gemv
    # fixup: the last split sums the partials (no sum kernel, no reduce block); normalised away without a split
    fixup = split > 1 and tuning.split_k_sum == SplitKSum.FIXUP
    reduce_m, reduce_n = reduce_block(t.block_m, t.block_n, t.threads) if split > 1 and not fixup else (0, 0)
    # the TMA copy options on a target that has them (rules b_eviction_*, epilogue_*)
    eviction = b_eviction(spec, tuning, target)
    epilogue = Epilogue.SHARED if shared_epilogue(spec, tuning, target) else Epilogue.DIRECT
    return GemmInstance(
        name=spec.name, target=target.target, spec_file=spec_file,
        shapes=tuple((s.m, s.n, s.k) for s in spec.shapes),
        a_dtype=hw.tilelang_dtypes[d.a], b_dtype=hw.tilelang_dtypes[d.b],
        out_dtype=hw.tilelang_dtypes[d.out], accum_dtype=hw.tilelang_dtypes[d.accumulate],
        spec_dtypes=(d.a.value, d.b.value, d.out.value, d.accumulate.value),
        layout=spec.layout.value, trans_a=spec.layout.trans_a, trans_b=spec.layout.trans_b,
        structure=tuning.structure.value, vector=gemv_vector(spec) if gemv else 0,
        split_k=split, reduce_block_m=reduce_m, reduce_block_n=reduce_n,
        block_m=t.block_m, block_n=t.block_n, block_k=t.block_k, threads=t.threads,
        policy=WarpPolicy.SQUARE.value if gemv else t.policy.value,
        stages=stages, pipeline_order=order, pipeline_stage=stage,
        unroll=tuning.unroll, swizzle_panel=0 if gemv else tuning.swizzle_panel,
        k_pack=tuning.k_pack if target.supports_k_pack and not gemv else None,
        tail=spec.tail, allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=lds_bytes(spec, tuning, target),
        tilelang_target=tilelang_target(target),
        precision=spec.precision.value if fp32 else None, fp32_product=product, lds_layout=lds_layout.value,
        dynamic_m=(spec.dynamic_m.min, spec.dynamic_m.max) if spec.dynamic_m else None,
        grid=GridPolicy.PERSISTENT.value if persistent else GridPolicy.TILES.value, resident_workgroups=resident,
        b_eviction=eviction.value, epilogue=epilogue.value,
        staging=(Staging.PADDED if padded else Staging.NONE).value,
        fused=fused_ops(spec, hw), split_k_sum=SplitKSum.FIXUP.value if fixup else None,
        tf32_convert=Tf32Convert.INLINE.value if tf32_converted_inline(spec, tuning) else None,
        activation_math=ActivationMath.FAST.value if fast_activation(spec, tuning, target) else None,
    )
