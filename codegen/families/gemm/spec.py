"""The GEMM spec model: C[M, N] = op(A) @ op(B), what the user writes under `op: gemm`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, StrictInt

from codegen.core.hardware import DType, Target
from codegen.families.gemm.targets import GEMM_TARGET
from codegen.families.spec import (
    K_PACK,
    MAX_SHAPES,
    DynamicRange,
    Identifier,
    Knob,
    Model,
    NonNegativeInt,
    NormalFp32,
    Pipeline,
    PositiveInt,
    TailPolicy,
    TargetOnly,
    ToleranceScale,
    Unroll,
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


class WarpPolicy(StrEnum):
    """How TileLang splits a block's tile among its waves/warps (tilelang.GemmWarpPolicy)."""

    SQUARE = "square"
    FULL_ROW = "full_row"
    FULL_COL = "full_col"


class Layout(StrEnum):
    """BLAS-style: first letter A, second B. 'n' = stored as written (A: MxK, B: KxN); 't' = stored
    transposed (A: KxM, B: NxK). 'nt' is nn.Linear's A @ W^T."""

    NN = "nn"
    NT = "nt"
    TN = "tn"
    TT = "tt"

    @property
    def trans_a(self) -> bool:
        return self.value[0] == "t"

    @property
    def trans_b(self) -> bool:
        return self.value[1] == "t"


class Structure(StrEnum):
    """How the product is laid over workgroups. tiled: MMA tiles of block_m x block_n, the K loop through
    LDS/shared memory. gemv: the small-M path (M <= 16, layout nt) -- no matrix cores; each workgroup owns
    block_n columns of C, its lanes stream B's rows along K in 16-byte vectors (block_k elements of K per
    step across the lanes of a column), every row of A is applied to each vector, and the lanes of a column
    sum their partials with a cross-lane reduction: B, the large operand, is read once. gemv_n: the same with
    the operands' roles swapped, the small-N path (N <= 16: a matrix-vector product A @ x, a narrow head) --
    each workgroup owns block_m rows of C, its lanes stream A's rows, and every column of B is applied to each
    vector: A is read once."""

    TILED = "tiled"
    GEMV = "gemv"
    GEMV_N = "gemv_n"

    @property
    def is_gemv(self) -> bool:
        """No MMA tiles and no LDS pipeline: one of the two matrix-vector structures."""
        return self is not Structure.TILED


class GridPolicy(StrEnum):
    """How a tiled GEMM's output tiles meet its workgroups. tiles: one workgroup per output tile (a grid of
    ceil(N/block_n) x ceil(M/block_m)). persistent: min(tiles, resident) workgroups, resident = the CUs/SMs
    times the workgroups of this size one of them holds at once (TargetSpec.resident_workgroups, from LDS /
    shared memory and wave slots); workgroup w serves tiles w, w + grid, w + 2 * grid, ... in the order the
    swizzle_panel rasterisation gives (data-parallel: every tile whole in one workgroup, no stream-K)."""

    TILES = "tiles"
    PERSISTENT = "persistent"


class SplitKSum(StrEnum):
    """How a K split's fp32 partials are summed (`split_k_sum`, split_k > 1). kernel: a second kernel sums each
    element's split_k partials in the order s = 0, 1, ..., split_k - 1 and rounds once. fixup: no second kernel --
    each split, its partial stored, counts itself in on its tile's arrival counter (a workspace of int32, zero on
    entry and left zero), and the split that arrives last sums the tile's partials in the same order (the same
    bits as kernel) and stores C. Fewer launches and no second pass over C; the counters are its cost."""

    KERNEL = "kernel"
    FIXUP = "fixup"


class Tf32Convert(StrEnum):
    """Where precision tf32 / 3xtf32 turn the fp32 inputs into TF32 (`tf32_convert`, sm_90). staged: small
    staging kernels of the same module first write A and B rounded to TF32 (3xtf32: and their residuals) into
    K-major workspaces of whole blocks, which the main kernel's tiles copy as they are. inline: the main kernel
    copies the fp32 tiles of A and B as stored and rounds (3xtf32: splits) them into K-major TF32 tiles in shared
    memory at each K step -- no staging launches and no workspaces, each operand read once from memory; the
    elementwise pass is the main loop's cost. The same values reach the tensor cores: numerics unchanged."""

    STAGED = "staged"
    INLINE = "inline"


class Eviction(StrEnum):
    """The L2 eviction priority of a tiled GEMM's B tile loads on sm_90 (`b_eviction`): TileLang's
    `T.copy(..., eviction_policy="evict_<value>")`, a cache hint on the TMA load (cp.async.bulk.tensor with
    .L2::cache_hint). normal: no hint (TileLang's default). first: B's lines are the first to leave L2 --
    for a weight each of whose tiles is read by few row blocks (at most ~2, ceil(M / block_m)), so that it
    does not push A and C out. last: they are kept longest. A hint only: the results are the same bits."""

    NORMAL = "normal"
    FIRST = "first"
    LAST = "last"


class Epilogue(StrEnum):
    """How a tiled GEMM writes its C tile (`epilogue`). direct: from the accumulator registers to global
    memory (TileLang's fragment store). shared: rounded to the output dtype into a C tile in shared memory,
    then copied to global memory as a whole -- on sm_90 TileLang lowers that copy to TMA stores
    (cp.async.bulk.tensor, one per 128-byte-wide column box) where C's rows are a multiple of 16 bytes."""

    DIRECT = "direct"
    SHARED = "shared"


class Activation(StrEnum):
    """The element-wise activation of `epilogue_ops.activation`, evaluated in fp32 on the accumulator (after the
    scale and the bias). relu: max(x, 0). gelu_tanh: x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)), i.e.
    0.5 x (1 + tanh(...)) -- torch's gelu(approximate="tanh"). gelu_erf: 0.5 x (1 + erf(x / sqrt(2))) -- torch's
    gelu. silu: x * sigmoid(x) = x / (1 + exp(-x))."""

    RELU = "relu"
    GELU_TANH = "gelu_tanh"
    GELU_ERF = "gelu_erf"
    SILU = "silu"


class ActivationMath(StrEnum):
    """How the activation's exponential and division are evaluated (`activation_math`; silu and gelu_tanh, also as
    a gate's). accurate: expf (within 2 ulp) and an IEEE division -- a few dozen instructions an element, run after
    the K loop, where nothing hides them. fast (sm_90): exp2 of the argument scaled by log2(e) and the reciprocal's
    approximation (rcp.approx, within 1 ulp), multiplied -- less than half the instructions. Both stay far inside
    the fp32 evaluation error the verification models (docs/verification.md); neither changes what is computed."""

    ACCURATE = "accurate"
    FAST = "fast"


class Gate(StrEnum):
    """The gated MLP (`gate`): C = act(A @ Wg^T) * (A @ Wu^T), two products of one A tile per K step, only their
    gated product stored. swiglu: act silu (Llama's MLP). geglu: act gelu_erf (torch's gelu). geglu_tanh: act
    gelu_tanh (torch's gelu(approximate="tanh"), Gemma's MLP)."""

    SWIGLU = "swiglu"
    GEGLU = "geglu"
    GEGLU_TANH = "geglu_tanh"

    @property
    def activation(self) -> Activation:
        return {Gate.SWIGLU: Activation.SILU, Gate.GEGLU: Activation.GELU_ERF,
                Gate.GEGLU_TANH: Activation.GELU_TANH}[self]


class BiasOp(Model):
    """`epilogue_ops.bias`: a vector of N elements added to every row of C, stored in its own dtype."""

    dtype: DType


class ResidualOp(Model):
    """`epilogue_ops.residual`: a tensor of C's shape and dtype added last, times beta."""

    beta: NormalFp32 = 1.0


class EpilogueOps(Model):
    """`epilogue_ops`: what the kernel computes on the fp32 accumulator before it rounds it to the output dtype,
    always in this order: C = act(scale * (A @ B) + bias) + beta * residual. Each is optional; at least one is
    given [epilogue_ops_empty]."""

    scale: NormalFp32 | None = None  # alpha, an fp32 constant
    bias: BiasOp | None = None
    activation: Activation | None = None
    residual: ResidualOp | None = None


MAX_SPLIT_K = 64  # rule split_k_limit: workgroups one output tile's K range is split over


class Precision(StrEnum):
    """How an fp32-input GEMM forms its products (docs/gemm.md, `precision`).
    ieee: true fp32 products (CUDA-core FMA on sm_90, fp32 MFMA on gfx942/gfx950) -- torch's default;
    tf32: one tensor-core product of the inputs rounded to TF32 (nearest, ties away from zero);
    3xtf32: each input split into a TF32 high part and a TF32 residual, three tensor-core products
    a_hi*b_hi + a_hi*b_lo + a_lo*b_hi, fp32 accumulation (CUTLASS's 3xTF32)."""

    IEEE = "ieee"
    TF32 = "tf32"
    X3TF32 = "3xtf32"


class LdsLayout(StrEnum):
    """How a tiled GEMM stages B (stored K x N, N contiguous: layouts nn and tn) in LDS on the AMD targets.
    natural: as stored, a K x N tile; the MFMA operand wants consecutive K of one column, so each lane reads
    B from LDS 2 bytes at a time (ds_read_u16). transposed_b: each thread loads B_ROWS whole rows of the tile
    with 16-byte global loads, permutes its registers and writes the tile into LDS as N x K (K contiguous,
    B_ROWS elements a write), then the gemm reads it as the nt kernels do (transpose_B): ds_read_b64 with
    k_pack 1, ds_read_b128 with k_pack 2. The same products in the same order: numerics unchanged."""

    NATURAL = "natural"
    TRANSPOSED_B = "transposed_b"


class Staging(StrEnum):
    """How a tiled GEMM reads A and B (docs/gemm.md, `staging`). none: straight from the caller's
    tensors, tiles bounds-checked where a shape is ragged (tail). padded: for shapes where an operand's leading
    dimension (the stride of its rows as stored) is not a multiple of 16 bytes -- which stops 16-byte and TMA
    loads of its tiles -- small staging kernels in the same module first copy A and B into zero-padded
    workspaces of whole blocks (rows to block_m / block_n, K to block_k), then the main kernel reads whole tiles
    with no bounds checks; only its store of C is bounds-checked. The same products: numerics unchanged."""

    NONE = "none"
    PADDED = "padded"


class GemmDTypes(Model):
    a: DType
    b: DType
    out: DType
    accumulate: DType = DType.FP32


class GemmShape(Model):
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt


class Tiling(Model):
    block_m: PositiveInt
    block_n: PositiveInt
    block_k: PositiveInt
    threads: PositiveInt
    policy: WarpPolicy = WarpPolicy.SQUARE


# The GEMM's tunables, declared once, in order: the tuning and override models, GemmSpec's tunable fields,
# GEMM_TUNABLES (what `search:` may list) and GemmSpec.TARGET_ONLY are derived from this.
GEMM_KNOBS: tuple[Knob, ...] = (
    Knob(name="tiling", type=Tiling, doc="the block tile (block_m x block_n x block_k), its threads and warp policy"),
    Knob(name="pipeline", type=Pipeline, default=Pipeline(), doc="K-loop stages: 0/1 one LDS buffer, 2+ overlapped"),
    Knob(name="unroll", type=Unroll, default=1, doc="K-loop unroll factor (only with stages <= 1)"),
    Knob(name="swizzle_panel", type=NonNegativeInt, default=0,
         doc="0 = off; else a power of two: the block rasterization panel for L2 reuse"),
    Knob(name="k_pack", type=int_choice(1, 2), default=1, takes=K_PACK.takes,
         doc="MFMA ops packed along K: the ROCm gemm only (TargetSpec.supports_k_pack)"),
    Knob(name="tail", declares_field=False),  # the spec's tail policy: searched, the same on every target
    Knob(name="structure", type=Structure, default=Structure.TILED,
         doc="tiled | gemv (M <= 16, layout nt: B read once) | gemv_n (N <= 16: A read once)"),
    Knob(name="lds_layout", type=LdsLayout, default=LdsLayout.NATURAL,
         takes=lambda t, v: v.value in GEMM_TARGET[t.target].lds_layouts,
         doc="B's LDS tile on gfx942/gfx950, layouts nn/tn (GemmTarget.lds_layouts; rules lds_layout_*)"),
    Knob(name="split_k", type=PositiveInt, default=1,
         doc="tiled: workgroups the K range of each output tile is split over (1 = off): fp32 partials in a "
             "workspace [split_k, M, N], summed in a fixed order by a second kernel (rules split_k_*)"),
    Knob(name="split_k_sum", type=SplitKSum, default=SplitKSum.KERNEL,
         doc="tiled, split_k > 1: kernel (a second kernel sums the partials) | fixup (the last split of each tile "
             "to finish sums them, in the same fixed order; int32 arrival counters)"),
    Knob(name="grid", type=GridPolicy, default=GridPolicy.TILES,
         doc="tiled: one workgroup per output tile, or a persistent grid of min(tiles, CUs/SMs x resident) "
             "workgroups looping over the tiles in swizzle_panel order (rules persistent_*)"),
    Knob(name="b_eviction", type=Eviction, default=Eviction.NORMAL,
         takes=lambda t, v: v == Eviction.NORMAL or GEMM_TARGET[t.target].tma_copies,
         doc="sm_90, tiled: the L2 eviction priority of B's TMA loads (GemmTarget.tma_copies; rules b_eviction_*)"),
    Knob(name="epilogue", type=Epilogue, default=Epilogue.DIRECT,
         takes=lambda t, v: v == Epilogue.DIRECT or GEMM_TARGET[t.target].tma_copies,
         doc="sm_90, tiled: C written directly or through a shared-memory tile and TMA stores (rules epilogue_*)"),
    Knob(name="staging", type=Staging, default=Staging.NONE,
         doc="tiled: none | padded -- A and B copied into zero-padded workspaces of whole blocks before the main "
             "kernel, for operands whose leading dimensions are not 16-byte multiples (rules staging_*)"),
    Knob(name="tf32_convert", type=Tf32Convert, default=Tf32Convert.STAGED,
         doc="precision tf32 / 3xtf32: staged (staging kernels write TF32 workspaces first) | inline (the main "
             "kernel rounds / splits its fp32 tiles in shared memory; rule tf32_convert_applies)"),
    Knob(name="activation_math", type=ActivationMath, default=ActivationMath.ACCURATE,
         takes=lambda t, v: v == ActivationMath.ACCURATE or GEMM_TARGET[t.target].fast_activation,
         doc="sm_90: the activation's exp and division accurate, or fast (exp2 and rcp.approx; rules "
             "activation_math_*)"),
)

GemmTuning = tuning_model("GemmTuning", GEMM_KNOBS, module=__name__,
                          doc="The per-target tunables; `overrides.<target>` may replace any of them for one target.")
GemmOverride = override_model("GemmOverride", GEMM_KNOBS, module=__name__,
                              doc="`overrides.<target>`: any of the per-target tunables, for one target.")
GEMM_TUNABLES = tunable_paths(GEMM_KNOBS)
_TARGET_ONLY = target_only(GEMM_KNOBS)
# the GEMM's target-only tunables beside k_pack: B's LDS layout where the target's template was built for it
# (GemmTarget.lds_layouts: gfx942, gfx950), and sm_90's TMA copy options (GemmTarget.tma_copies)
LDS_LAYOUT, B_EVICTION, EPILOGUE = _TARGET_ONLY["lds_layout"], _TARGET_ONLY["b_eviction"], _TARGET_ONLY["epilogue"]
ACTIVATION_MATH = _TARGET_ONLY["activation_math"]  # sm_90's fast activation (GemmTarget.fast_activation)


class _GemmSpecHead(Model):
    """GemmSpec's fields before its tunables."""

    name: Identifier
    op: Literal["gemm"]
    dtypes: GemmDTypes
    layout: Layout = Layout.NN
    shapes: Annotated[list[GemmShape], Field(min_length=1, max_length=MAX_SHAPES)]
    # M symbolic over this range (rules dynamic_m_*); the shapes are then the workloads verify and bench run
    dynamic_m: DynamicRange | None = None  # the rows one kernel serves; N and K fixed (one compile per (n, k))


class GemmSpec(with_knobs("GemmSpecTunables", _GemmSpecHead, GEMM_KNOBS, module=__name__)):
    """`op: gemm`: the head fields, the tunables of GEMM_KNOBS, then these."""

    TARGET_ONLY: ClassVar[tuple[TargetOnly, ...]] = tuple(_TARGET_ONLY.values())

    precision: Precision = Precision.IEEE  # fp32 inputs only: ieee | tf32 | 3xtf32 (rules precision_*)
    # what is computed beyond the product: element-wise ops on the accumulator before the output cast (scale,
    # bias, activation, residual; rules epilogue_ops_*), and the gated MLP act(A @ B^T) * (A @ B_UP^T) (rules gate_*)
    epilogue_ops: EpilogueOps | None = None
    gate: Gate | None = None
    tail: TailPolicy = TailPolicy.NONE
    targets: Annotated[list[Target], Field(min_length=1)] = [Target.GFX942]  # noqa: RUF012 - pydantic copies it
    overrides: dict[Target, GemmOverride] = {}  # noqa: RUF012 - pydantic copies it
    # `tilegen tune`'s space per target: one block, or a list of blocks (the union of their spaces); `gen` ignores it
    search: dict[Target, search_entry(GemmSearch)] = {}  # noqa: RUF012
    allow_spills: StrictBool = False  # a build with register spills fails unless this is true
    # multiplies verify's tolerance (docs/verification.md); < 1 tightens, > 1 loosens; reported with results
    verify_tolerance_scale: ToleranceScale = 1.0
    min_waves_per_simd: Annotated[StrictInt, Field(ge=1, le=8)] | None = None  # gfx942 occupancy floor for `build`

    def tuning_for(self, target: Target) -> tuple[GemmTuning, dict[str, tuple[str, ...]]]:
        """The effective tunables for `target` and, per field, the spec path it came from."""
        return resolve_tuning(self, GemmTuning, target)


GemmSearch = search_model("GemmSearch", GemmSpec, GEMM_TUNABLES)
GemmSpec.model_rebuild()


# `tilegen new gemm NAME` and `tilegen init` write this, with {name} filled in.
STARTER = """\
# tilegen GEMM spec: C[M, N] = op(A) @ op(B). Every field, its default and rules: tilegen's docs/gemm.md.
- name: {name}              # lower-case identifier: file, kernel and report name
  op: gemm
  dtypes: {{a: fp16, b: fp16, out: fp16, accumulate: fp32}}   # fp16 | bf16 | fp32 | fp8_e4m3 (a == b)
  layout: nt                # nn | nt | tn | tt (first letter A, second B; t = stored transposed; nt = nn.Linear)
  shapes:                   # concrete problem sizes; ragged sizes need a tail policy
    - {{m: 4096, n: 4096, k: 4096}}
  # dynamic_m: {{min: 1, max: 8192}}   # one compiled kernel for every M in the range (tail: predicated)
  tiling:
    block_m: 128            # multiples of the MMA tile (gfx942 fp16: 16x16x16)
    block_n: 128
    block_k: 32
    threads: 256            # multiple of 64 on gfx942 (wavefront), of 32 on sm_90 (warp)
    policy: square          # square | full_row | full_col: how waves split the block
  pipeline:
    stages: 2               # 0/1: one LDS buffer; 2+: double/triple-buffered (explicit order/stage on gfx942)
  unroll: 1                 # K-loop unroll factor (only with stages <= 1)
  swizzle_panel: 0          # 0 = off; else a power of two: block rasterization panel for L2 reuse
  k_pack: 1                 # gfx942 only: 1 or 2 MFMA ops packed along K
  # lds_layout: natural     # gfx942/gfx950, layouts nn/tn: natural | transposed_b (B written into LDS as N x K)
  structure: tiled          # tiled | gemv (M <= 16, layout nt: B read once) | gemv_n (N <= 16: A read once)
  # grid: tiles             # tiled: tiles (a workgroup per output tile) | persistent (one per CU/SM slot, looping)
  # b_eviction: normal      # sm_90: normal | first | last -- L2 priority of B's TMA loads (first: a weight read <= 2x)
  # epilogue: direct        # sm_90: direct | shared -- C through a shared-memory tile and TMA stores
  # activation_math: accurate # sm_90: accurate | fast -- the activation's exp and division (exp2, rcp.approx)
  split_k: 1                # tiled: K split over this many workgroups (fp32 workspace + a fixed-order sum); 1 = off
  # split_k_sum: kernel      # split_k > 1: kernel (a second kernel sums the partials) | fixup (the tile's last split does)
  # staging: none           # tiled: none | padded (odd leading dimensions: A, B copied into zero-padded workspaces)
  # precision: ieee         # fp32 inputs only: ieee (true fp32, default) | tf32 | 3xtf32 (sm_90 only)
  # tf32_convert: staged    # tf32 / 3xtf32: staged (TF32 workspaces first) | inline (in the main kernel's tiles)
  # epilogue_ops:           # on the fp32 accumulator, in this order: act(scale * (A @ B) + bias) + beta * residual
  #   scale: 0.5            # alpha, an fp32 constant
  #   bias: {{dtype: fp16}}   # a vector of N elements (kernel argument Bias)
  #   activation: silu      # relu | gelu_tanh | gelu_erf | silu
  #   residual: {{beta: 1.0}} # a tensor of C's shape and dtype (kernel argument Residual)
  # gate: swiglu            # swiglu | geglu | geglu_tanh: C = act(A @ B^T) * (A @ B_UP^T), two weights (layout nt)
  tail: none                # none | predicated | specialized
  targets: [gfx942, sm_90]
  overrides:                # per-target replacements of tiling / pipeline / unroll / swizzle_panel / k_pack
    sm_90:                  # a wgmma tile of two consumer warpgroups, a deeper TMA ring, rasterised in panels
      tiling: {{block_m: 128, block_n: 256, block_k: 64, threads: 256}}
      pipeline: {{stages: 4}}
      swizzle_panel: 16
  search:                   # `tilegen tune {name}`: every point verified, then timed on the GPU (docs/tuning.md)
    sm_90:
      pipeline: {{stages: [3, 4]}}
      swizzle_panel: [8, 16]
      epilogue: [direct, shared]
      b_eviction: [normal, first]
"""
