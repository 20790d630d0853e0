"""The rmsnorm / layernorm instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.families.norm.spec import NormSpecBase, Quant
from codegen.families.rows import RowInstance, row_fields
from codegen.targets.base import TargetSpec

# per_token, after rstd: the row's scale from its largest |Y| = rstd * max|x * w| (block_max over the row's threads),
# written by the row's first thread; inv becomes 1 / scale for the store
PER_TOKEN_SCALE = """\
            block_max(a, red)
            inv[0] = T.max(a[0] * rstd[0] / FP8_MAX, MIN_SCALE)
            if {lane} == 0:
                SC[row, 0] = inv[0]
            inv[0] = 1.0 / inv[0]"""


@dataclass(frozen=True, kw_only=True)
class NormInstance(RowInstance):
    """rmsnorm: Y = X / sqrt(mean(X^2) + eps) * W; layernorm: Y = (X - mean) / sqrt(var + eps) * W + B
    (biased variance). W and B have `cols` elements in the input dtype. variant streamed: rmsnorm reads
    the row twice (sum of squares, normalise), layernorm three times (mean, centred sum of squares,
    normalise); variant registers: the row is read once into registers and every pass runs on them."""

    op: str  # rmsnorm | layernorm
    template: str = "norm.py.j2"
    eps: float
    variant: str  # streamed | registers
    centered: bool  # subtract the mean (layernorm) -- and divide by the centred, not raw, mean square
    has_bias: bool  # add B (layernorm)
    residual: bool  # read R too, write S = X + R (input dtype) and normalise S
    quant: str  # none | per_token: Y in fp8 e4m3, scaled per row to fp8_max, the fp32 scale written to SC[row, 0]
    fp8_max: float | None  # per_token: the target's largest finite fp8 e4m3 (Hardware.fp8_e4m3_max); else None

    def _variant_tag(self) -> str:
        return self.variant

    def _fused_tags(self) -> list[str]:
        return ["add"] * self.residual + ["tok"] * (self.quant == "per_token")

    def _family_metadata(self) -> dict[str, object]:
        return {"eps": self.eps, "variant": self.variant, "residual": self.residual, "quant": self.quant}

    @property
    def per_token(self) -> bool:
        return self.quant == "per_token"

    def _schedule(self) -> str:
        if self.variant == "registers":
            return "registers, 1 read"
        return f"{3 if self.centered else 2} reads, unroll {self.unroll}"

    def template_vars(self) -> dict[str, object]:
        """The statements that differ between rmsnorm and layernorm, and those of the fused residual add and
        per-token fp8 output, as finished literals."""
        params = ["X: T.Tensor((M, N), IN_DTYPE)"]
        if self.residual:
            params.append("R: T.Tensor((M, N), IN_DTYPE)")
        params.append("W: T.Tensor((N,), IN_DTYPE)")
        if self.has_bias:
            params.append("B: T.Tensor((N,), IN_DTYPE)")
        if self.splits:
            params.append(f"P: T.Tensor((M, SPLIT, {self.split_slots()}), ACCUM_DTYPE)")
        if self.residual:
            params.append("S: T.Tensor((M, N), IN_DTYPE)")
        params.append("Y: T.Tensor((M, N), OUT_DTYPE)")
        if self.per_token:
            params.append("SC: T.Tensor((M, 1), ACCUM_DTYPE)")
        # element v of the chunk being processed: at offset o (= chunk * VEC) of the row held in registers,
        # or of the VEC-element buffer a streamed pass loads each chunk into
        x = "xb[o + v]" if self.variant == "registers" else "xb[v]"
        if self.centered:
            formula = "Y = (X - mean) / sqrt(var + EPS) * W + B (biased variance, like F.layer_norm)"
        else:
            formula = "Y = X / sqrt(mean(X^2) + EPS) * W"
        if self.residual:
            formula = formula.replace("X", "S") + "; S = X + R (in the input dtype, also written)"
        if self.per_token:
            formula += ", stored as fp8 Y * FP8_MAX / amax(|Y|) with SC = amax(|Y|) / FP8_MAX per row"
        square, out = self._terms(x, "wv[v]", "bv[v]")
        # a peeled row's head or tail element, loaded into slot 0 of the buffers
        scalar_square, scalar_out = self._terms("xb[0]", "wv[0]", "bv[0]")
        rows = super().template_vars()  # how the chunk macros address the row (X, n, row): codegen.families.rows
        # the fused residual: the row's first read loads X and R and writes S (load_sum); later passes read S back
        src = "X, R, S" if self.residual else "X"
        row_src = "S" if self.residual else "X"
        first_load = "load_sum(X, R, S, n, row, c, xb, 0, @PAD, guarded)" if self.residual \
            else "load(X, n, row, c, xb, 0, @PAD, guarded)"
        later_load = f"load({row_src}, n, row, c, xb, 0, @PAD, guarded)"
        first_args = rows["row_args"] if not self.residual else "X, R, S, N, row"
        later_args = rows["row_args"] if not self.residual else "S, N, row"
        store_args = rows["store_args"] if not self.residual else "S, Y, N, row"
        return {
            **rows,
            "formula": formula,
            "param_doc": "W and B" if self.has_bias else "W",
            "last_pass_doc": "normalise, scale and shift" if self.has_bias else "normalise and scale",
            "eps_literal": repr(self.eps),
            "fp8_max_literal": repr(self.fp8_max),
            "kernel_params": ", ".join(params),
            "store_call": self._store_call(store_args, rows["param_origin"]),
            "store_params": self._store_params(),
            "square_term": square,
            "out_term": out,
            "scalar_square": scalar_square,
            "square_slot": str(self.split_slots() - 1),
            "split_partials_doc": "its sum, then its sum of squares about its own mean" if self.centered
                                  else "its sum of squares",  # split: the workspace slot of the sum of squares
            "scalar_out": scalar_out,
            # streamed passes: the first reads the row (X, or X and R), the later ones X or S
            "sum_params": src, "sum_load": first_load.replace("@PAD", "0.0"), "sum_args": first_args,
            "square_params": row_src if self.centered else src,
            "square_load": (later_load if self.centered else first_load).replace("@PAD", "mu[0]"),
            "square_args": later_args if self.centered else first_args,
            # registers: the one read of the row
            "load_chunk_params": src,
            "load_chunk_body": ("load_sum(X, R, S, n, row, c, xr, c * VEC, 0.0, guarded)" if self.residual
                                else "load(X, n, row, c, xr, c * VEC, 0.0, guarded)"),
            "load_chunk_call": f"load_chunk({'X, R, S' if self.residual else 'X'}, N, row, @C, xb, @G)",
            "sum_call": f"sum_chunk({first_args}, @C, xb, s, @G)",
            "square_call": (f"square_chunk({later_args if self.centered else first_args}, W, @C, xb, wv, mu, s, a, @G)"
                            if self.per_token else
                            f"square_chunk({later_args if self.centered else first_args}, @C, xb, mu, s, @G)"),
            "per_token_scale": PER_TOKEN_SCALE.format(lane=self.lane_expr),
        }

    def _store_params(self) -> str:
        params = "X, W, B, Y, n, row, wo, c, xb, wv, bv, mu, rstd" if self.has_bias else "X, W, Y, n, row, wo, c, xb, wv, mu, rstd"
        if self.per_token:
            params += ", inv"
        return params + ", guarded"

    def split_slots(self) -> int:
        """rmsnorm: the segment's sum of squares; layernorm: its sum and its sum of squares about its own mean."""
        return 2 if self.centered else 1

    def _terms(self, x: str, w: str, b: str) -> tuple[str, str]:
        """The squared term of the variance sum and the output of element x with weight w (and bias b); per_token:
        the output times the row's 1/scale, clamped to the fp8 range (rounding can take the row's largest
        element a few ulps past FP8_MAX)."""
        if self.centered:
            return f"({x} - mu[0]) * ({x} - mu[0])", f"({x} - mu[0]) * rstd[0] * {w} + {b}"
        if self.per_token:
            return f"{x} * {x}", f"T.max(T.min({x} * rstd[0] * {w} * inv[0], FP8_MAX), -FP8_MAX)"
        return f"{x} * {x}", f"{x} * rstd[0] * {w}"

    def _store_call(self, store_args: str, origin: str) -> str:
        """The last pass's chunk call: (X, [W, B,] Y, n, row) as the row is addressed, W's origin, the buffers."""
        x, y, n, row = (a.strip() for a in store_args.split(","))
        params = f"{x}, W, B, {y}" if self.has_bias else f"{x}, W, {y}"
        bufs = "xb, wv, bv, mu, rstd" if self.has_bias else "xb, wv, mu, rstd"
        if self.per_token:
            bufs += ", inv"
        return f"store_chunk({params}, {n}, {row}, {origin}, @C, {bufs}, @G)"


def make_instance(spec: NormSpecBase, target: TargetSpec, spec_file: str) -> NormInstance:
    layer = spec.op == "layernorm"  # centred statistics and a bias: the one difference
    per_token = spec.quant == Quant.PER_TOKEN
    return NormInstance(**row_fields(spec, target, spec_file), op=spec.op, eps=spec.eps, variant=spec.variant.value,
                        centered=layer, has_bias=layer, residual=spec.residual, quant=spec.quant.value,
                        fp8_max=target.hw.fp8_e4m3_max if per_token else None)
