"""What each op takes and gives, per family: the checks of its tensors, what a kernel must be to serve a call
(`Want`) and the call's shape in the family's terms, the launch through the family's own numerics (the same
`launch` verify and bench use, with the inputs put in the family's case record), the torch fallback, and the
output's metadata for torch.compile (register_fake).

Every check reads metadata only (dtype, device, sizes, strides) and the call's scalar arguments, so the same code
runs on real tensors and on torch.compile's fake ones, and its verdict holds for every later call of the same
metadata (`call_key`): the ops check a call once per key and remember the answer (codegen.ops.api). A call the
kernels cannot take is an OpsInputError before anything is computed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar, NamedTuple

import torch

from codegen.core.hardware import DType, Target
from codegen.families.rope.spec import RopeTables
from codegen.ops.errors import OpsInputError
from codegen.targets import TARGETS, torch_dtype

ACCUMULATE = DType.FP32.value  # the ops serve kernels that accumulate in fp32 (every family's default)
LAYOUTS = {"nn": (False, False), "nt": (False, True), "tn": (True, False), "tt": (True, True)}  # (trans_a, trans_b)
MASKS = ("none", "top_left", "bottom_right")
PRECISIONS = ("ieee", "tf32", "3xtf32")  # fp32 GEMM inputs (codegen.families.gemm.spec.Precision)


def as_fp32(value: float) -> float:
    """`value` rounded to fp32: the kernels add eps and scale by softmax_scale in fp32, so two values that round
    alike are the same kernel parameter."""
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


@dataclass(frozen=True)
class Want:
    """What a kernel must be to serve a call, besides its shape: the family op and its parameters, each
    (name, value) -- a kernel instance and a call that give equal Wants match."""

    op: str
    params: tuple[tuple[str, object], ...]

    def describe(self) -> str:
        return f"{self.op} {self.params_text()}"

    def params_text(self) -> str:
        """The parameters as `name=value` words (floats with fp32's 7 significant digits)."""
        return " ".join(f"{k}={v:.7g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params)


@dataclass(frozen=True, kw_only=True)
class Ctx:
    """Where the kernels of one Ops object run: the tilegen target (dtype names) and torch's device type."""

    target: Target
    device_type: str

    @property
    def fp8_dtype(self):
        """The torch dtype of the target's fp8 e4m3 (the per-token rmsnorm's output)."""
        return TARGETS[self.target].torch_dtype(DType.FP8_E4M3)

    def dtype_name(self, op: str, name: str, dtype) -> str:
        names = _dtype_names(self.target)
        if dtype not in names:
            raise OpsInputError(f"tilegen.{op}: {name} is {dtype}; the kernels take "
                                f"{', '.join(str(d) for d in names)}")
        return names[dtype]


@cache
def _dtype_names(target: Target) -> dict:
    """torch dtype -> spec dtype name on `target` (fp8 e4m3 is fnuz on gfx942)."""
    return {TARGETS[target].torch_dtype(d): d.value for d in DType}


def _shape(t) -> str:
    return "x".join(str(d) for d in t.shape) or "scalar"


def check_tensor(ctx: Ctx, op: str, name: str, t, *, ndim: int | None = None, dtype=None, like=None) -> None:
    """One input: a tensor on the kernels' device (and on `like`'s device), of `ndim` dimensions and `dtype`,
    contiguous (the kernels read row-major storage; a strided view is refused, never copied behind the caller's
    back)."""
    if not isinstance(t, torch.Tensor):
        raise OpsInputError(f"tilegen.{op}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != ctx.device_type:
        raise OpsInputError(f"tilegen.{op}: {name} is on {t.device}; the kernels run on {ctx.device_type}")
    if like is not None and t.device != like.device:
        raise OpsInputError(f"tilegen.{op}: {name} is on {t.device}, the other inputs on {like.device}")
    if ndim is not None and t.dim() != ndim:
        raise OpsInputError(f"tilegen.{op}: {name} must have {ndim} dimensions, it has {t.dim()} ({_shape(t)})")
    if dtype is not None and t.dtype != dtype:
        raise OpsInputError(f"tilegen.{op}: {name} is {t.dtype}, expected {dtype}")
    if not t.is_contiguous():
        raise OpsInputError(f"tilegen.{op}: {name} is not contiguous (shape {_shape(t)}, strides {tuple(t.stride())}):"
                            " pass .contiguous(); the kernels read row-major storage")


def _require(cond: bool, op: str, message) -> None:
    """`message`: a function giving the text (formatted only when the check fails: calls are hot)."""
    if not cond:
        raise OpsInputError(f"tilegen.{op}: {message()}")


def _empty(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


_TENSOR = torch.Tensor


def call_key(args: tuple) -> tuple:
    """What an adapter's `call` reads of an argument record: each tensor's sizes, strides, dtype and device, and
    every other argument as it is. Two calls of equal keys pass or fail the same checks and take the same route;
    an argument that cannot be hashed raises TypeError (the call is then checked in full, and refused)."""
    return tuple([(v.shape, v.stride(), v.dtype, v.device) if isinstance(v, _TENSOR) else v for v in args])


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What launching one kernel at one shape needs, worked out once (the first call of a route): the family's
    launch (its numerics', as verify and bench launch), the output's shape and the workspaces' (shape, dtype,
    zeroed)."""

    inst: object
    launch: object  # (kernel, case, *outs) -> None
    out_shape: tuple
    workspaces: tuple = ()  # (shape, torch dtype, zeroed) of each: zeroed -- zero on entry, left zero by the kernel
    case: object = None  # the family's case record (GemmCase, NormCase, ...), which the launch reads
    outputs: tuple = ()  # kernels of several outputs: (shape, torch dtype) of each, in launch order
    # the zeroed workspaces, made once per (workspace, device, stream): (index, device, stream) -> tensor
    kept: dict = field(default_factory=dict, compare=False)

    def alloc_workspaces(self, device) -> tuple:
        """Fresh workspaces from torch's allocator (each kernel writes every element it reads: verify's NaN-filled
        workspaces prove it) -- but those that must be zero on entry (split_k_sum fixup's tile counters): the
        kernel leaves them zero, so one buffer, zeroed when first made, serves every call on one stream in turn
        (calls on two streams at once each have their own)."""
        if not self.workspaces:
            return ()
        return tuple(self._kept(i, shape, dtype, device) if zeroed else torch.empty(shape, dtype=dtype, device=device)
                     for i, (shape, dtype, zeroed) in enumerate(self.workspaces))

    def _kept(self, i: int, shape, dtype, device):
        device = torch.device(device)
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (i, device, stream)
        buf = self.kept.get(key)
        if buf is None:
            buf = self.kept[key] = torch.zeros(shape, dtype=dtype, device=device)
        return buf

    def alloc_outputs(self, device) -> tuple:
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.outputs]


def launch_order(prep: Prepared, inputs: tuple[str, ...], outputs: int, *, tuples: dict[str, int] | None = None,
                 **fixed) -> tuple[int, ...] | None:
    """How the family's launch passes a case's `inputs` (case fields, in this order) and `outputs` outputs to the
    kernel: the position in (*inputs, *outputs) of each argument the kernel gets -- a field named in `tuples` is a
    tuple of that many tensors (the workspaces), counted one position each. Found by calling the launch once with
    a kernel that records its arguments, stand-in objects for the tensors and the `fixed` case fields as given;
    None where the launch gives the kernel anything else (a value it derives, a field not among `inputs`) or
    cannot run on stand-ins. A plan's direct launch (`Adapter.launcher`) is taken only where this is known, so it
    makes the very call the family's launch -- verify's and bench's -- would make."""
    tuples = tuples or {}
    stand_ins = {name: tuple(object() for _ in range(tuples[name])) if name in tuples else object()
                 for name in inputs}
    pool = [x for v in stand_ins.values() for x in (v if isinstance(v, tuple) else (v,))]
    outs = [object() for _ in range(outputs)]
    where = {id(x): i for i, x in enumerate(pool + outs)}
    seen: list = []
    try:
        prep.launch(lambda *args: seen.extend(args), prep.case(**fixed, **stand_ins), *outs)
    except Exception:  # noqa: BLE001 - a launch that reads its tensors (shapes, dtypes): no direct launch
        return None
    order = tuple(where.get(id(x), -1) for x in seen)
    return None if -1 in order else order


class Adapter:
    """One family op as a callable: subclasses say its checks, Want, shape, launch and fallback."""

    op: ClassVar[str]

    def want_of(self, inst) -> Want | None:
        """The Want this kernel instance serves, or None when the ops do not call it (e.g. not fp32-accumulating)."""
        raise NotImplementedError

    def call(self, ctx: Ctx, args) -> tuple[Want, tuple]:
        """Check the inputs; the Want and the family shape of the call."""
        raise NotImplementedError

    def prepare(self, inst, shape: tuple, run_shape: tuple) -> Prepared:
        """The launch of `inst`'s kernel for calls of `shape` (run at run_shape)."""
        from codegen.families import family

        numerics = family(inst).numerics
        outputs = ()
        if numerics.outputs is not None:
            outputs = tuple((tuple(o.shape), torch_dtype(o.dtype, inst.target)) for o in numerics.outputs(inst, run_shape))
        return Prepared(inst=inst, launch=numerics.launch, out_shape=tuple(numerics.out_shape(inst, run_shape)),
                        workspaces=self.workspaces(inst, run_shape), case=self.case_type(), outputs=outputs)

    def case_type(self):
        """The family's case record the launch reads (imported when a kernel is first prepared)."""
        raise NotImplementedError

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return ()

    def run(self, kernel, prep: Prepared, args, shape: tuple, run_shape: tuple):
        """Launch `kernel` (compiled for run_shape) on the call; its output."""
        raise NotImplementedError

    def launcher(self, kernel, prep: Prepared, shape: tuple, run_shape: tuple):
        """`args -> outputs`: `run` with what is fixed per plan bound once (the plan's hot path). An adapter whose
        calls can skip the case record overrides it (GEMM, rows, RoPE, attention), falling back to this one where
        `launch_order` cannot vouch for the direct call."""
        run = self.run
        return lambda args: run(kernel, prep, args, shape, run_shape)

    def fallback(self, ctx: Ctx, args):
        """The op in torch: the kernels' arithmetic, unfused."""
        raise NotImplementedError

    def fake(self, ctx: Ctx, args):
        """Empty outputs of the call's shapes, dtypes and device (no kernel runs)."""
        raise NotImplementedError


# ---- GEMM: C[M, N] = op(A) @ op(B) ---------------------------------------------------------------------------

class GemmArgs(NamedTuple):
    a: object
    b: object
    layout: str
    out_dtype: object  # torch.dtype
    precision: str  # fp32 inputs: ieee | tf32 | 3xtf32; '' otherwise


def gemm_mnk(layout: str, a, b) -> tuple[int, int, int, int]:
    """(M, N, K of A, K of B) of A, B stored as `layout` says (t: stored transposed: A as K x M, B as N x K)."""
    ta, tb = LAYOUTS[layout]
    m, ka = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
    n, kb = (b.shape[0], b.shape[1]) if tb else (b.shape[1], b.shape[0])
    return m, n, ka, kb


class GemmAdapter(Adapter):
    op = "gemm"

    def want_of(self, inst) -> Want | None:
        a, b, out, acc = inst.spec_dtypes
        if acc != ACCUMULATE or inst.fused is not None:  # a fused kernel computes more than tilegen.gemm's product
            return None
        return self._want(inst.layout, a, b, out, inst.precision or "")

    @staticmethod
    def _want(layout, a, b, out, precision) -> Want:
        params = (("layout", layout), ("dtypes", f"{a}/{b}/{out}"))
        return Want("gemm", params + ((("precision", precision),) if precision else ()))

    def call(self, ctx: Ctx, args: GemmArgs, *, op: str = "gemm", names: tuple[str, str] = ("a", "b")) -> tuple[Want, tuple]:
        """`op` and `names`: the op and the two inputs as the messages name them (the fused GEMMs check A and B
        here too)."""
        na, nb = names
        _require(args.layout in LAYOUTS, op, lambda: f"layout {args.layout!r} is not one of {', '.join(LAYOUTS)}")
        check_tensor(ctx, op, na, args.a, ndim=2)
        check_tensor(ctx, op, nb, args.b, ndim=2, dtype=args.a.dtype, like=args.a)
        m, n, ka, kb = gemm_mnk(args.layout, args.a, args.b)
        _require(ka == kb, op, lambda: f"{na} ({_shape(args.a)}) and {nb} ({_shape(args.b)}) do not agree on K for "
                               f"layout {args.layout} ({ka} vs {kb})")
        a_name = ctx.dtype_name(op, na, args.a.dtype)
        out_name = ctx.dtype_name(op, "out_dtype", args.out_dtype)
        fp32 = a_name == DType.FP32.value
        if fp32:
            _require(args.precision in PRECISIONS, op, lambda: f"precision {args.precision!r} is not one of "
                                                       f"{', '.join(PRECISIONS)} (fp32 inputs)")
        else:
            _require(args.precision in ("", "ieee"), op, lambda: "precision applies to fp32 inputs only")
        return self._want(args.layout, a_name, a_name, out_name, args.precision if fp32 else ""), (m, n, ka)

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return tuple((tuple(s), torch_dtype(d, inst.target), zeroed)
                     for s, d, zeroed in zip(inst.workspace_shapes(run_shape), inst.workspace_dtypes(),
                                             inst.workspace_zeroed(), strict=True))

    def case_type(self):
        from codegen.families.gemm.numerics import GemmCase

        return GemmCase

    def run(self, kernel, prep: Prepared, args: GemmArgs, shape, run_shape):
        inst, m, rm = prep.inst, shape[0], run_shape[0]
        a = args.a if rm == m else _pad_m(args.a, rm, inst.trans_a)
        case = prep.case(A=a, B=args.b, trans_a=inst.trans_a, trans_b=inst.trans_b,
                         workspace=prep.alloc_workspaces(a.device))
        out = _empty(prep.out_shape, args.out_dtype, a.device)
        prep.launch(kernel, case, out)
        return out if rm == m else out[:m]

    def launcher(self, kernel, prep: Prepared, shape, run_shape):
        """Where the call runs at its own M (no bucket padding), takes no workspace and the family's launch passes
        the kernel just (A, B, C) (`launch_order`), the kernel is called on the inputs and a new output directly,
        without the case record `run` builds for the launch."""
        inst = prep.inst
        if (shape[0] != run_shape[0] or prep.workspaces
                or launch_order(prep, ("A", "B"), 1, trans_a=inst.trans_a, trans_b=inst.trans_b) != (0, 1, 2)):
            return super().launcher(kernel, prep, shape, run_shape)
        out_shape, empty = prep.out_shape, torch.empty

        def launch(args: GemmArgs):
            a = args.a
            out = empty(out_shape, dtype=args.out_dtype, device=a.device)
            kernel(a, args.b, out)
            return out

        return launch

    def fallback(self, ctx: Ctx, args: GemmArgs):
        from codegen.families.gemm.numerics import full_fp32

        ta, tb = LAYOUTS[args.layout]
        a = args.a.t() if ta else args.a
        b = args.b.t() if tb else args.b
        if args.a.dtype in (torch.float16, torch.bfloat16):
            if args.out_dtype == args.a.dtype:  # fp32 accumulation, one rounding to the inputs' dtype
                return torch.matmul(a, b)
            return torch.matmul(a.float(), b.float()).to(args.out_dtype)  # the fp32 product, rounded once
        if args.a.dtype == torch.float32:
            with full_fp32(allow_tf32=args.precision == "tf32"):
                return torch.matmul(a, b).to(args.out_dtype)
        return torch.matmul(a.float(), b.float()).to(args.out_dtype)  # fp8: no eager matmul of its own

    def fake(self, ctx: Ctx, args: GemmArgs):
        m, n, _, _ = gemm_mnk(args.layout, args.a, args.b)
        return args.a.new_empty((m, n), dtype=args.out_dtype)


# ---- GEMM with fused epilogue ops, and the gated MLP (GemmInstance.fused) -----------------------------------------

ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu")  # codegen.families.gemm.spec.Activation
GATES = {"silu": "swiglu", "gelu_erf": "geglu", "gelu_tanh": "geglu_tanh"}  # the gated MLP's activation -> spec gate


class GemmEpilogueArgs(NamedTuple):
    """C = act(scale * op(A) @ op(B) + bias) + beta * residual: bias [N] (its own dtype) or None, residual [M, N]
    (C's dtype) or None, scale None or a number, activation '' (none) or one of ACTIVATIONS, beta the residual's
    factor."""

    a: object
    b: object
    layout: str
    out_dtype: object
    precision: str
    bias: object = None
    residual: object = None
    scale: float | None = None
    activation: str = ""
    beta: float = 1.0


class GatedArgs(NamedTuple):
    """The gated MLP act(x @ w_gate^T) * (x @ w_up^T): x [M, K], w_gate and w_up [N, K] (nn.Linear's weights)."""

    x: object
    w_gate: object
    w_up: object
    activation: str


def _fp32_factor(op: str, name: str, value) -> float:
    """A scale or beta as the kernels hold it: a finite, nonzero fp32 (the spec's NormalFp32)."""
    value = float(value)
    fp = as_fp32(value) if math.isfinite(value) else value
    _require(math.isfinite(fp) and abs(fp) >= 2.0**-126, op,
             lambda: f"{name} must be a finite, nonzero fp32 number, not {value}")
    return fp


def _product32(a, b, layout: str, precision: str):
    """op(A) @ op(B) in fp32 from the stored inputs (TF32 only where precision says tf32): the product the fused
    kernels' epilogue reads."""
    from codegen.families.gemm.numerics import full_fp32

    ta, tb = LAYOUTS[layout]
    a = a.t() if ta else a
    b = b.t() if tb else b
    with full_fp32(allow_tf32=precision == "tf32"):
        return torch.matmul(a.float(), b.float())


def _activation(name: str, y):
    from codegen.families.gemm.numerics import activation

    return activation(name, y)


class GemmEpilogueAdapter(Adapter):
    """The GEMM with epilogue ops (spec `epilogue_ops`): served only by the kernels whose ops are exactly the call's
    (their Want names each op and its constant; the plain GEMM's names none, a gated kernel's its gate)."""

    op = "gemm"
    name = "gemm_epilogue"

    def want_of(self, inst) -> Want | None:
        a, b, out, acc = inst.spec_dtypes
        f = inst.fused
        if acc != ACCUMULATE or f is None or f.gate is not None:
            return None
        return self._want(GemmAdapter._want(inst.layout, a, b, out, inst.precision or ""), f.scale, f.bias_dtype,
                          f.activation or "", f.residual, f.beta)

    @staticmethod
    def _want(base: Want, scale, bias_dtype, activation: str, residual: bool, beta: float) -> Want:
        params = (("scale", scale),) * (scale is not None) + (("bias", bias_dtype),) * (bias_dtype is not None)
        params += (("activation", activation),) * bool(activation)
        params += ((("residual", "add"), ("beta", beta)) if residual else ())
        return Want(base.op, base.params + params)

    def call(self, ctx: Ctx, args: GemmEpilogueArgs) -> tuple[Want, tuple]:
        op = self.name
        base, shape = ADAPTERS["gemm"].call(ctx, GemmArgs(args.a, args.b, args.layout, args.out_dtype, args.precision),
                                            op=op)
        m, n, _ = shape
        bias_name = None
        if args.bias is not None:
            check_tensor(ctx, op, "bias", args.bias, ndim=1, like=args.a)
            _require(args.bias.shape[0] == n, op, lambda: f"bias has {args.bias.shape[0]} elements, the output "
                                                          f"{n} columns")
            bias_name = ctx.dtype_name(op, "bias", args.bias.dtype)
        if args.residual is not None:
            check_tensor(ctx, op, "residual", args.residual, ndim=2, dtype=args.out_dtype, like=args.a)
            _require(tuple(args.residual.shape) == (m, n), op,
                     lambda: f"residual is {_shape(args.residual)}; the output is {m}x{n}")
        _require(args.activation in ("", *ACTIVATIONS), op,
                 lambda: f"activation {args.activation!r} is not one of None, {', '.join(ACTIVATIONS)}")
        scale = None if args.scale is None else _fp32_factor(op, "scale", args.scale)
        beta = _fp32_factor(op, "beta", args.beta)
        _require(args.residual is not None or beta == 1.0, op, lambda: "beta scales the residual: pass residual too")
        _require(args.bias is not None or args.residual is not None or scale is not None or bool(args.activation), op,
                 lambda: "no epilogue op given (bias, residual, scale, activation): that is the plain gemm")
        return self._want(base, scale, bias_name, args.activation, args.residual is not None, beta), shape

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return ADAPTERS["gemm"].workspaces(inst, run_shape)

    def case_type(self):
        from codegen.families.gemm.numerics import GemmCase

        return GemmCase

    def run(self, kernel, prep: Prepared, args: GemmEpilogueArgs, shape, run_shape):
        inst, m, rm = prep.inst, shape[0], run_shape[0]
        a = args.a if rm == m else _pad_m(args.a, rm, inst.trans_a)
        r = args.residual if (args.residual is None or rm == m) else _pad_m(args.residual, rm, False)
        case = prep.case(A=a, B=args.b, trans_a=inst.trans_a, trans_b=inst.trans_b,
                         workspace=prep.alloc_workspaces(a.device), bias=args.bias, residual=r)
        out = _empty(prep.out_shape, args.out_dtype, a.device)
        prep.launch(kernel, case, out)
        return out if rm == m else out[:m]

    def fallback(self, ctx: Ctx, args: GemmEpilogueArgs):
        """The kernels' arithmetic, unfused: the product in fp32 from the stored inputs, then in fp32 and in this
        order the scale (as fp32), the bias, the activation, beta * residual; one rounding to the output dtype."""
        y = _product32(args.a, args.b, args.layout, args.precision)
        if args.scale is not None:
            y = y * as_fp32(args.scale)
        if args.bias is not None:
            y = y + args.bias.float()
        if args.activation:
            y = _activation(args.activation, y)
        if args.residual is not None:
            y = y + args.residual.float() * as_fp32(args.beta)
        return y.to(args.out_dtype)

    def fake(self, ctx: Ctx, args: GemmEpilogueArgs):
        m, n, _, _ = gemm_mnk(args.layout, args.a, args.b)
        return args.a.new_empty((m, n), dtype=args.out_dtype)


class GatedMlpAdapter(Adapter):
    """The gated MLP (spec `gate`, layout nt): one kernel computes act(x @ w_gate^T) * (x @ w_up^T) from the two
    weights as they are; served only by the gated kernels of the call's activation."""

    op = "gemm"
    name = "gated_mlp"

    def want_of(self, inst) -> Want | None:
        a, b, out, acc = inst.spec_dtypes
        f = inst.fused
        if acc != ACCUMULATE or f is None or f.gate is None:
            return None
        return self._want(GemmAdapter._want(inst.layout, a, b, out, inst.precision or ""), f.gate)

    @staticmethod
    def _want(base: Want, gate: str) -> Want:
        return Want(base.op, base.params + (("gate", gate),))

    def call(self, ctx: Ctx, args: GatedArgs) -> tuple[Want, tuple]:
        op = self.name
        _require(args.activation in GATES, op,
                 lambda: f"activation {args.activation!r} is not one of {', '.join(GATES)} (the gated kernels')")
        dtype = args.x.dtype if isinstance(args.x, torch.Tensor) else None  # not a tensor: refused by the checks
        base, shape = ADAPTERS["gemm"].call(ctx, GemmArgs(args.x, args.w_gate, "nt", dtype,
                                                          "ieee" if dtype == torch.float32 else ""),
                                            op=op, names=("x", "w_gate"))
        check_tensor(ctx, op, "w_up", args.w_up, ndim=2, dtype=args.x.dtype, like=args.x)
        _require(tuple(args.w_up.shape) == tuple(args.w_gate.shape), op,
                 lambda: f"w_up is {_shape(args.w_up)}, w_gate {_shape(args.w_gate)}: the two weights must be the "
                         "same shape [out, in]")
        return self._want(base, GATES[args.activation]), shape

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return ADAPTERS["gemm"].workspaces(inst, run_shape)

    def case_type(self):
        from codegen.families.gemm.numerics import GemmCase

        return GemmCase

    def run(self, kernel, prep: Prepared, args: GatedArgs, shape, run_shape):
        m, rm = shape[0], run_shape[0]
        x = args.x if rm == m else _pad_m(args.x, rm, False)
        case = prep.case(A=x, B=args.w_gate, trans_a=False, trans_b=True, workspace=prep.alloc_workspaces(x.device),
                         B_UP=args.w_up)
        out = _empty(prep.out_shape, args.x.dtype, x.device)
        prep.launch(kernel, case, out)
        return out if rm == m else out[:m]

    def fallback(self, ctx: Ctx, args: GatedArgs):
        """The kernels' arithmetic, unfused: both products in fp32 from the stored inputs, act(gate) * up in fp32,
        one rounding to x's dtype."""
        g = _product32(args.x, args.w_gate, "nt", "ieee")
        u = _product32(args.x, args.w_up, "nt", "ieee")
        return (_activation(args.activation, g) * u).to(args.x.dtype)

    def fake(self, ctx: Ctx, args: GatedArgs):
        return args.x.new_empty((args.x.shape[0], args.w_gate.shape[0]))


def _pad_m(a, rows: int, trans: bool):
    """A with its M extent padded to `rows` with zeros (an M bucket's kernel runs at its tuned M; rows of C past
    the call's M are computed from the zero rows and dropped)."""
    if trans:  # K x M
        padded = a.new_zeros((a.shape[0], rows))
        padded[:, : a.shape[1]].copy_(a)
    else:
        padded = a.new_zeros((rows, a.shape[1]))
        padded[: a.shape[0]].copy_(a)
    return padded


# ---- rows: softmax, rmsnorm, layernorm over the last dimension ---------------------------------------------------

class RowArgs(NamedTuple):
    """A norm's call: x [..., cols]; weight (and bias) [cols]; eps; the residual (x's shape) of the fused add."""

    x: object
    weight: object = None
    bias: object = None
    eps: float = 0.0
    residual: object = None


class SoftmaxArgs(NamedTuple):
    """softmax(x * scale + mask): mask None, x's shape (full) or [cols] (broadcast), x's dtype; scale None or a
    finite number (applied in fp32)."""

    x: object
    mask: object = None
    scale: float | None = None


def _row_workspaces(inst, shape: tuple) -> tuple:
    """A split row kernel's fp32 partials (codegen.families.rows.RowInstance.workspace_shape), or none."""
    ws = inst.workspace_shape(tuple(shape))
    return () if ws is None else ((tuple(ws), torch.float32, False),)


def _as_rows(x, shape):
    """x as the kernel's [rows, cols] (a view; x itself when it is that already)."""
    return x if x.dim() == 2 else x.view(shape)


def _rows(x) -> tuple[int, int]:
    """x viewed as [rows, last dim]: the product of the leading sizes (0 columns keep their rows)."""
    return math.prod(x.shape[:-1]), x.shape[-1]


def _fp32_scale(op: str, scale) -> float | None:
    if scale is None:
        return None
    scale = float(scale)
    _require(math.isfinite(scale) and scale != 0.0, op, lambda: f"scale must be a finite, nonzero number, not {scale}")
    return as_fp32(scale)


class SoftmaxAdapter(Adapter):
    """softmax, and with a scale and/or an additive mask the fused logits softmax(x * scale + mask) of the
    kernels with `scale` / `mask` (their Want names both; the plain softmax's names neither)."""

    op = "softmax"

    def want_of(self, inst) -> Want | None:
        i, o, acc = inst.spec_dtypes
        if acc != ACCUMULATE:
            return None
        return self._want(f"{i}/{o}", None if inst.scale is None else as_fp32(inst.scale), inst.mask)

    @staticmethod
    def _want(dtypes: str, scale, mask: str) -> Want:
        params = (("dtypes", dtypes),)
        if scale is not None:
            params += (("scale", scale),)
        if mask != "none":
            params += (("mask", mask),)
        return Want("softmax", params)

    @staticmethod
    def mask_kind(x, mask) -> str:
        """none | full (x's shape) | broadcast ([cols], one mask row for every row)."""
        if mask is None:
            return "none"
        if tuple(mask.shape) == tuple(x.shape):
            return "full"
        return "broadcast" if mask.dim() == 1 and mask.shape[0] == x.shape[-1] else "other"

    def call(self, ctx: Ctx, args: SoftmaxArgs) -> tuple[Want, tuple]:
        op = "softmax"
        check_tensor(ctx, op, "x", args.x)
        _require(args.x.dim() >= 1, op, lambda: "x must have at least one dimension")
        d = ctx.dtype_name(op, "x", args.x.dtype)
        kind = "none"
        if args.mask is not None:
            check_tensor(ctx, op, "mask", args.mask, dtype=args.x.dtype, like=args.x)
            kind = self.mask_kind(args.x, args.mask)
            _require(kind != "other", op, lambda: f"mask is {_shape(args.mask)}: it must be x's shape ({_shape(args.x)}) "
                                                  f"or [cols] = [{args.x.shape[-1]}] (one mask row for every row)")
        return self._want(f"{d}/{d}", _fp32_scale(op, args.scale), kind), _rows(args.x)

    def case_type(self):
        from codegen.families.softmax.numerics import SoftmaxCase

        return SoftmaxCase

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return _row_workspaces(inst, run_shape)

    def run(self, kernel, prep: Prepared, args: SoftmaxArgs, shape, run_shape):
        x = _as_rows(args.x, shape)
        mask = args.mask
        if mask is not None and mask.dim() > 1:
            mask = _as_rows(mask, shape)
        out = _empty(prep.out_shape, args.x.dtype, x.device)
        ws = prep.alloc_workspaces(x.device)
        prep.launch(kernel, prep.case(X=x, WS=ws[0] if ws else None, MK=mask, scale=prep.inst.scale), out)
        return out if out.dim() == args.x.dim() else out.view(args.x.shape)

    def fallback(self, ctx: Ctx, args: SoftmaxArgs):
        """softmax of the fp32 logits x * scale + mask (the scale rounded to fp32, as the kernels hold it)."""
        z = args.x.float()
        if args.scale is not None:
            z = z * as_fp32(args.scale)
        if args.mask is not None:
            z = z + args.mask.float()
        return torch.softmax(z, dim=-1).to(args.x.dtype)

    def fake(self, ctx: Ctx, args: SoftmaxArgs):
        return args.x.new_empty(args.x.shape)


class NormAdapter(Adapter):
    """rmsnorm and layernorm (`op`, the family's op: the bias is the difference) and their fused kernels:
    `residual` -- S = x + residual (x's dtype) and norm(S); `quant` -- the normalised rows in the target's fp8
    e4m3 with one fp32 scale a row (rmsnorm). `name` is the op's name in the API (add_rmsnorm, rmsnorm_fp8, ...)."""

    def __init__(self, op: str, *, residual: bool = False, quant: bool = False):
        self.op = op
        self.bias = op == "layernorm"
        self.residual, self.quant = residual, quant
        self.name = ("add_" if residual else "") + op + ("_fp8" if quant else "")

    def want_of(self, inst) -> Want | None:
        i, o, acc = inst.spec_dtypes
        if inst.residual != self.residual or inst.per_token != self.quant or acc != ACCUMULATE:
            return None
        return self._want(f"{i}/{o}", as_fp32(inst.eps))

    def _want(self, dtypes: str, eps: float) -> Want:
        params = (("dtypes", dtypes), ("eps", eps))
        params += (("residual", "add"),) * self.residual + (("quant", "per_token"),) * self.quant
        return Want(self.op, params)

    def call(self, ctx: Ctx, args: RowArgs) -> tuple[Want, tuple]:
        op = self.name
        check_tensor(ctx, op, "x", args.x)
        _require(args.x.dim() >= 1, op, lambda: "x must have at least one dimension")
        if self.residual:
            check_tensor(ctx, op, "residual", args.residual, dtype=args.x.dtype, like=args.x)
            _require(tuple(args.residual.shape) == tuple(args.x.shape), op,
                     lambda: f"residual is {_shape(args.residual)}, x {_shape(args.x)}: they must be the same shape")
        check_tensor(ctx, op, "weight", args.weight, ndim=1, dtype=args.x.dtype, like=args.x)
        _require(args.weight.shape[0] == args.x.shape[-1], op,
                 lambda: f"weight has {args.weight.shape[0]} elements, x's rows {args.x.shape[-1]}")
        if self.bias:
            check_tensor(ctx, op, "bias", args.bias, ndim=1, dtype=args.x.dtype, like=args.x)
            _require(args.bias.shape[0] == args.x.shape[-1], op,
                     lambda: f"bias has {args.bias.shape[0]} elements, x's rows {args.x.shape[-1]}")
        _require(math.isfinite(args.eps) and args.eps > 0, op, lambda: f"eps must be a positive number, not {args.eps}")
        d = ctx.dtype_name(op, "x", args.x.dtype)
        out = DType.FP8_E4M3.value if self.quant else d
        return self._want(f"{d}/{out}", as_fp32(args.eps)), _rows(args.x)

    def case_type(self):
        from codegen.families.norm.numerics import NormCase

        return NormCase

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return _row_workspaces(inst, run_shape)

    def run(self, kernel, prep: Prepared, args: RowArgs, shape, run_shape):
        x = args.x
        flat = x.dim() == 2
        x2 = x if flat else x.view(shape)
        r = args.residual
        if r is not None and not flat:
            r = r.view(shape)
        ws = prep.alloc_workspaces(x.device)
        case = prep.case(X=x2, W=args.weight, B=args.bias if self.bias else None, WS=ws[0] if ws else None, R=r)
        outs = prep.alloc_outputs(x.device)  # the family's outputs in launch order: S (residual), Y, SC (quant)
        prep.launch(kernel, case, *outs)
        if not flat:
            outs = tuple(o.view(*x.shape[:-1], o.shape[-1]) for o in outs)
        return self._order(outs)

    def launcher(self, kernel, prep: Prepared, shape, run_shape):
        """A kernel without a workspace (no row split) whose family launch passes it the call's tensors and the
        outputs (`launch_order`): called on them directly for rows given as a matrix (other calls: `run`)."""
        names = ("X", "W") + (("B",) if self.bias else ()) + (("R",) if self.residual else ())
        absent = {} if self.bias else {"B": None}
        order = None if prep.workspaces else launch_order(prep, names, len(prep.outputs), **absent)
        slow = super().launcher(kernel, prep, shape, run_shape)
        if order is None:
            return slow
        bias, residual, outputs, finish, empty = self.bias, self.residual, prep.outputs, self._order, torch.empty

        def launch(args: RowArgs):
            x = args.x
            if x.dim() != 2:
                return slow(args)
            device = x.device
            outs = [empty(s, dtype=d, device=device) for s, d in outputs]
            given = (x, args.weight, *((args.bias,) if bias else ()), *((args.residual,) if residual else ()), *outs)
            kernel(*[given[i] for i in order])
            return finish(outs)

        return launch

    def _order(self, outs: tuple):
        """The launch's outputs (S, Y, SC) as the op returns them: Y; (Y, S); (Y, SC); (Y, SC, S)."""
        if not (self.residual or self.quant):
            return outs[0]
        if not self.residual:
            return outs[0], outs[1]
        return (outs[1], outs[0]) if not self.quant else (outs[1], outs[2], outs[0])

    def fallback(self, ctx: Ctx, args: RowArgs):
        """The kernels' arithmetic, unfused: S = x + residual rounded to x's dtype (the fused kernels store it and
        normalise the stored sum); fp32 statistics, x * rstd * w (+ b) in fp32; one rounding to the output, or the
        per-token fp8 rows: scale = max(amax|y| / fp8_max, 2^-126) per row, q = clamp(y / scale, +-fp8_max)."""
        import torch.nn.functional as F

        x, n = args.x, (args.x.shape[-1],)
        s = (x.float() + args.residual.float()).to(x.dtype) if self.residual else None
        src = (s if self.residual else x).float()
        if self.bias:
            y = F.layer_norm(src, n, args.weight.float(), args.bias.float(), args.eps)
        else:
            y = F.rms_norm(src, n, args.weight.float(), args.eps)
        if not self.quant:
            y = y.to(x.dtype)
            return (y, s) if self.residual else y
        from codegen.families.norm.numerics import MIN_SCALE

        fp8 = ctx.fp8_dtype
        top = torch.finfo(fp8).max
        scale = (y.abs().amax(-1, keepdim=True) / top).clamp_min(MIN_SCALE)
        q = (y / scale).clamp(-top, top).to(fp8)
        return (q, scale, s) if self.residual else (q, scale)

    def fake(self, ctx: Ctx, args: RowArgs):
        x = args.x
        y = x.new_empty(x.shape, dtype=ctx.fp8_dtype if self.quant else x.dtype)
        outs = (x.new_empty(x.shape),) * self.residual + (y,)
        if self.quant:
            outs += (x.new_empty((*x.shape[:-1], 1), dtype=torch.float32),)
        return self._order(outs)


# ---- rope: rotate_half of Q [tokens, heads, d] and K [tokens, kv_heads, d] ---------------------------------------

class RopeArgs(NamedTuple):
    q: object
    k: object
    cos: object  # [tokens, rotary_dim / 2] fp32; tables "full": [tokens, rotary_dim] in q's dtype, each angle twice
    sin: object
    tables: str = "half"


ROPE_TABLES = tuple(t.value for t in RopeTables)  # the cos/sin layouts a rope spec's `tables` names


class RopeAdapter(Adapter):
    """Two outputs, Q_out and K_out, of q's and k's shapes (the rope numerics' launch takes them apart or as the
    two parts of one buffer)."""

    op = "rope"

    def want_of(self, inst) -> Want | None:
        i, o, acc = inst.spec_dtypes
        if acc != ACCUMULATE:
            return None
        tables = (("tables", RopeTables.FULL.value),) if inst.full_tables else ()  # half: the Want it always had
        return Want("rope", (("dtypes", f"{i}/{o}"), ("head_dim", inst.head_dim), ("rotary_dim", inst.rotary_dim),
                             *tables))

    def call(self, ctx: Ctx, args: RopeArgs) -> tuple[Want, tuple]:
        op = "rope"
        _require(args.tables in ROPE_TABLES, op, lambda: f"tables={args.tables!r}: one of {', '.join(ROPE_TABLES)}")
        full = args.tables == RopeTables.FULL
        check_tensor(ctx, op, "q", args.q, ndim=3)
        check_tensor(ctx, op, "k", args.k, ndim=3, dtype=args.q.dtype, like=args.q)
        for name, t in (("cos", args.cos), ("sin", args.sin)):
            check_tensor(ctx, op, name, t, ndim=2, dtype=args.q.dtype if full else torch.float32, like=args.q)
        t, h, d = args.q.shape
        _require(args.k.shape[0] == t and args.k.shape[2] == d, op,
                 lambda: f"q ({_shape(args.q)}) and k ({_shape(args.k)}) must share tokens and head_dim")
        _require(tuple(args.sin.shape) == tuple(args.cos.shape), op, lambda: f"cos ({_shape(args.cos)}) and sin "
                                                                     f"({_shape(args.sin)}) differ")
        rotary = args.cos.shape[1] if full else 2 * args.cos.shape[1]
        layout = "rotary_dim (tables='full': each angle twice)" if full else "rotary_dim/2"
        _require(args.cos.shape[0] == t and 0 < rotary <= d and rotary % 2 == 0, op,
                 lambda: f"cos/sin must be [tokens={t}, {layout}] with an even rotary_dim <= head_dim={d}, not "
                         f"{_shape(args.cos)}")
        dt = ctx.dtype_name(op, "q", args.q.dtype)
        tables = (("tables", RopeTables.FULL.value),) if full else ()
        want = Want(op, (("dtypes", f"{dt}/{dt}"), ("head_dim", d), ("rotary_dim", rotary), *tables))
        return want, (t, h, args.k.shape[1])

    def case_type(self):
        from codegen.families.rope.numerics import RopeCase

        return RopeCase

    def run(self, kernel, prep: Prepared, args: RopeArgs, shape, run_shape):
        case = prep.case(Q=args.q, K=args.k, COS=args.cos, SIN=args.sin, Q32=None, K32=None, positions=None)
        q_out, k_out = torch.empty_like(args.q), torch.empty_like(args.k)  # contiguous: the inputs are
        prep.launch(kernel, case, q_out, k_out)
        return q_out, k_out

    def launcher(self, kernel, prep: Prepared, shape, run_shape):
        """Where the family's launch passes the kernel the call's tensors and the two outputs (`launch_order`):
        called on them directly."""
        order = launch_order(prep, ("Q", "K", "COS", "SIN"), 2, Q32=None, K32=None, positions=None)
        if order is None:
            return super().launcher(kernel, prep, shape, run_shape)
        empty_like = torch.empty_like

        def launch(args: RopeArgs):
            q, k = args.q, args.k
            q_out, k_out = empty_like(q), empty_like(k)  # contiguous: the inputs are
            given = (q, k, args.cos, args.sin, q_out, k_out)
            kernel(*[given[i] for i in order])
            return q_out, k_out

        return launch

    def fallback(self, ctx: Ctx, args: RopeArgs):
        from codegen.families.rope.numerics import rope32

        full = args.tables == RopeTables.FULL
        r = args.cos.shape[1] if full else 2 * args.cos.shape[1]
        cos, sin = (args.cos[:, : r // 2].float(), args.sin[:, : r // 2].float()) if full else (args.cos, args.sin)
        q = rope32(args.q.float(), cos, sin, r).to(args.q.dtype)
        k = rope32(args.k.float(), cos, sin, r).to(args.k.dtype)
        return q.contiguous(), k.contiguous()

    def fake(self, ctx: Ctx, args: RopeArgs):
        return args.q.new_empty(args.q.shape), args.k.new_empty(args.k.shape)


# ---- attention: Q, O [batch, seq_q, heads, d]; K, V [batch, seq_kv, kv_heads, d] --------------------------------

class AttentionArgs(NamedTuple):
    q: object
    k: object
    v: object
    mask: str  # none | top_left | bottom_right
    scale: float | None  # None: 1/sqrt(head_dim)


class AttentionAdapter(Adapter):
    """attention (variant prefill kernels) and attention_decode (variant decode: split KV, fp32 workspaces from
    torch's allocator); one torch fallback for both (SDPA)."""

    op = "attention"

    def __init__(self, variant: str):
        self.variant = variant
        self.name = "attention" if variant == "prefill" else "attention_decode"

    def want_of(self, inst) -> Want | None:
        i, o, acc = inst.spec_dtypes
        if acc != ACCUMULATE or inst.variant.value != self.variant:
            return None
        return self._want(f"{i}/{o}", inst.head_dim, inst.mask.value, inst.softmax_scale)

    def _want(self, dtypes, head_dim, mask, scale) -> Want:
        return Want("attention", (("variant", self.variant), ("dtypes", dtypes), ("head_dim", head_dim),
                                  ("mask", mask), ("scale", as_fp32(scale))))

    def call(self, ctx: Ctx, args: AttentionArgs) -> tuple[Want, tuple]:
        op = self.name
        check_tensor(ctx, op, "q", args.q, ndim=4)
        check_tensor(ctx, op, "k", args.k, ndim=4, dtype=args.q.dtype, like=args.q)
        check_tensor(ctx, op, "v", args.v, ndim=4, dtype=args.q.dtype, like=args.q)
        b, sq, h, d = args.q.shape
        _require(tuple(args.k.shape) == tuple(args.v.shape), op, lambda: f"k ({_shape(args.k)}) and v ({_shape(args.v)}) differ")
        _, skv, kvh, dk = args.k.shape
        _require(args.k.shape[0] == b and dk == d, op, lambda: f"q ({_shape(args.q)}) is [batch, seq_q, heads, head_dim] and "
                                                       f"k ({_shape(args.k)}) [batch, seq_kv, kv_heads, head_dim]: "
                                                       "batch and head_dim differ")
        _require(kvh > 0 and h % kvh == 0, op, lambda: f"heads={h} is not a multiple of kv_heads={kvh}")
        _require(d > 0, op, lambda: f"head_dim is 0 (q is {_shape(args.q)})")
        _require(args.mask in MASKS, op, lambda: f"causal={args.mask!r} is not one of False, True, {', '.join(MASKS[1:])}")
        _require(args.mask != "bottom_right" or sq <= skv, op,
                 lambda: f"causal bottom_right with seq_q={sq} over seq_kv={skv}: the first queries would see no key")
        scale = 1.0 / math.sqrt(d) if args.scale is None else args.scale
        _require(math.isfinite(scale) and scale > 0, op, lambda: f"scale must be a positive number, not {scale}")
        dt = ctx.dtype_name(op, "q", args.q.dtype)
        return self._want(f"{dt}/{dt}", d, args.mask, scale), (b, h, kvh, sq, skv)

    def workspaces(self, inst, run_shape: tuple) -> tuple:
        return tuple((tuple(s), torch_dtype(d, inst.target), zeroed)
                     for s, d, zeroed in zip(inst.workspace_shapes(run_shape), inst.workspace_dtypes(),
                                             inst.workspace_zeroed(), strict=True))

    def case_type(self):
        from codegen.families.attention.numerics import AttentionCase

        return AttentionCase

    def run(self, kernel, prep: Prepared, args: AttentionArgs, shape, run_shape):
        case = prep.case(Q=args.q, K=args.k, V=args.v, workspace=prep.alloc_workspaces(args.q.device))
        out = _empty(prep.out_shape, args.q.dtype, args.q.device)
        prep.launch(kernel, case, out)
        return out

    def launcher(self, kernel, prep: Prepared, shape, run_shape):
        """Where the family's launch passes the kernel Q, K, V, the workspaces and O (`launch_order`): called on
        them directly, the workspaces from `alloc_workspaces` as `run` takes them."""
        order = launch_order(prep, ("Q", "K", "V", "workspace"), 1, tuples={"workspace": len(prep.workspaces)})
        if order is None:
            return super().launcher(kernel, prep, shape, run_shape)
        out_shape, alloc, empty = prep.out_shape, prep.alloc_workspaces, torch.empty

        def launch(args: AttentionArgs):
            q = args.q
            device = q.device
            out = empty(out_shape, dtype=q.dtype, device=device)
            given = (q, args.k, args.v, *alloc(device), out)
            kernel(*[given[i] for i in order])
            return out

        return launch

    def fallback(self, ctx: Ctx, args: AttentionArgs):
        import torch.nn.functional as F

        from codegen.families.attention.numerics import sdpa_mask
        from codegen.families.attention.spec import CausalMask

        q, k, v = (t.transpose(1, 2) for t in (args.q, args.k, args.v))
        scale = 1.0 / math.sqrt(q.shape[-1]) if args.scale is None else args.scale
        masking = sdpa_mask(CausalMask(args.mask), q.shape[2], k.shape[2])
        o = F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=q.shape[1] != k.shape[1], **masking)
        return o.transpose(1, 2).contiguous()

    def fake(self, ctx: Ctx, args: AttentionArgs):
        return args.q.new_empty(args.q.shape)


ADAPTERS: dict[str, Adapter] = {
    "gemm": GemmAdapter(),
    "gemm_epilogue": GemmEpilogueAdapter(),
    "gated_mlp": GatedMlpAdapter(),
    "softmax": SoftmaxAdapter(),
    "rmsnorm": NormAdapter("rmsnorm"),
    "layernorm": NormAdapter("layernorm"),
    "add_rmsnorm": NormAdapter("rmsnorm", residual=True),
    "add_layernorm": NormAdapter("layernorm", residual=True),
    "rmsnorm_fp8": NormAdapter("rmsnorm", quant=True),
    "add_rmsnorm_fp8": NormAdapter("rmsnorm", residual=True, quant=True),
    "rope": RopeAdapter(),
    "attention": AttentionAdapter("prefill"),
    "attention_decode": AttentionAdapter("decode"),
}


def mask_name(causal) -> str:
    """The mask of `causal=`: False / 'none', True / 'top_left' (SDPA's is_causal), or 'bottom_right'."""
    if causal is False or causal is None:
        return "none"
    if causal is True:
        return "top_left"
    return str(causal)
