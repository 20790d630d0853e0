"""The rmsnorm / layernorm instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.families.norm.spec import NormSpecBase
from codegen.families.rows import RowInstance, row_fields
from codegen.targets.base import TargetSpec


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

    def _variant_tag(self) -> str:
        return self.variant

    def _family_metadata(self) -> dict[str, object]:
        return {"eps": self.eps, "variant": self.variant}

    def _schedule(self) -> str:
        if self.variant == "registers":
            return "registers, 1 read"
        return f"{3 if self.centered else 2} reads, unroll {self.unroll}"

    def template_vars(self) -> dict[str, object]:
        """The statements that differ between rmsnorm and layernorm, as finished literals."""
        params = ["X: T.Tensor((M, N), IN_DTYPE)", "W: T.Tensor((N,), IN_DTYPE)"]
        if self.has_bias:
            params.append("B: T.Tensor((N,), IN_DTYPE)")
        if self.splits:
            params.append(f"P: T.Tensor((M, SPLIT, {self.split_slots()}), ACCUM_DTYPE)")
        params.append("Y: T.Tensor((M, N), OUT_DTYPE)")
        # element v of the chunk being processed: at offset o (= chunk * VEC) of the row held in registers,
        # or of the VEC-element buffer a streamed pass loads each chunk into
        x = "xb[o + v]" if self.variant == "registers" else "xb[v]"
        if self.centered:
            formula = "Y = (X - mean) / sqrt(var + EPS) * W + B (biased variance, like F.layer_norm)"
        else:
            formula = "Y = X / sqrt(mean(X^2) + EPS) * W"
        square, out = self._terms(x, "wv[v]", "bv[v]")
        # a peeled row's head or tail element, loaded into slot 0 of the buffers
        scalar_square, scalar_out = self._terms("xb[0]", "wv[0]", "bv[0]")
        rows = super().template_vars()  # how the chunk macros address the row (X, n, row): codegen.families.rows
        return {
            **rows,
            "formula": formula,
            "param_doc": "W and B" if self.has_bias else "W",
            "last_pass_doc": "normalise, scale and shift" if self.has_bias else "normalise and scale",
            "eps_literal": repr(self.eps),
            "kernel_params": ", ".join(params),
            "store_call": self._store_call(rows["store_args"], rows["param_origin"]),
            "store_params": "X, W, B, Y, n, row, wo, c, xb, wv, bv, mu, rstd, guarded" if self.has_bias
                            else "X, W, Y, n, row, wo, c, xb, wv, mu, rstd, guarded",
            "square_term": square,
            "out_term": out,
            "scalar_square": scalar_square,
            "square_slot": str(self.split_slots() - 1),
            "split_partials_doc": "its sum, then its sum of squares about its own mean" if self.centered
                                  else "its sum of squares",  # split: the workspace slot of the sum of squares
            "scalar_out": scalar_out,
        }

    def split_slots(self) -> int:
        """rmsnorm: the segment's sum of squares; layernorm: its sum and its sum of squares about its own mean."""
        return 2 if self.centered else 1

    def _terms(self, x: str, w: str, b: str) -> tuple[str, str]:
        """The squared term of the variance sum and the output of element x with weight w (and bias b)."""
        if self.centered:
            return f"({x} - mu[0]) * ({x} - mu[0])", f"({x} - mu[0]) * rstd[0] * {w} + {b}"
        return f"{x} * {x}", f"{x} * rstd[0] * {w}"

    def _store_call(self, store_args: str, origin: str) -> str:
        """The last pass's chunk call: (X, [W, B,] Y, n, row) as the row is addressed, W's origin, the buffers."""
        x, y, n, row = (a.strip() for a in store_args.split(","))
        params = f"{x}, W, B, {y}" if self.has_bias else f"{x}, W, {y}"
        bufs = "xb, wv, bv, mu, rstd" if self.has_bias else "xb, wv, mu, rstd"
        return f"store_chunk({params}, {n}, {row}, {origin}, @C, {bufs}, @G)"


def make_instance(spec: NormSpecBase, target: TargetSpec, spec_file: str) -> NormInstance:
    layer = spec.op == "layernorm"  # centred statistics and a bias: the one difference
    return NormInstance(**row_fields(spec, target, spec_file), op=spec.op, eps=spec.eps, variant=spec.variant.value,
                        centered=layer, has_bias=layer)
