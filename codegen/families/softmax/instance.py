"""The softmax instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.families.rows import RowInstance, row_fields
from codegen.families.softmax.spec import SoftmaxSpec
from codegen.targets.base import TargetSpec

COL = "c * CHUNK + tx * VEC + v"  # the column of element v of this thread's vector of chunk c (unpeeled rows)


@dataclass(frozen=True, kw_only=True)
class SoftmaxInstance(RowInstance):
    """softmax over the last dim: Y[r, :] = exp(Z[r, :] - max) / sum(exp(Z[r, :] - max)) of the logits Z = X, or
    Z = X * scale + mask in fp32 (scale: a constant; mask: [rows, cols] (full) or [cols] (broadcast), input dtype)."""

    op: str = "softmax"
    template: str = "softmax.py.j2"
    variant: str  # online | two_pass
    scale: float | None  # the fp32 constant the logits are multiplied by; None: none
    mask: str  # none | full | broadcast

    def _variant_tag(self) -> str:
        return self.variant

    def _fused_tags(self) -> list[str]:
        return ["scaled"] * (self.scale is not None) + ([f"mask{self.mask[:5]}"] if self.mask != "none" else [])

    def _family_metadata(self) -> dict[str, object]:
        return {"variant": self.variant, "scale": self.scale, "mask": self.mask}

    def split_slots(self) -> int:
        return 2  # the segment's max and its sum of exp(x - max)

    def _schedule(self) -> str:
        return self.variant if self.variant == "online" else f"{self.variant}, unroll {self.unroll}"

    @property
    def logits(self) -> bool:
        """Whether the kernel transforms X into logits (a scale, a mask) as it loads it."""
        return self.scale is not None or self.mask != "none"

    def template_vars(self) -> dict[str, object]:
        """How the passes read the row: X alone (load), or X and the mask into fp32 logits (load_logits)."""
        rows = super().template_vars()
        src = "X, MK" if self.mask != "none" else "X"
        params = ["X: T.Tensor((M, N), IN_DTYPE)"]
        if self.mask == "full":
            params.append("MK: T.Tensor((M, N), IN_DTYPE)")
        elif self.mask == "broadcast":
            params.append("MK: T.Tensor((N,), IN_DTYPE)")
        if self.splits:
            params.append("P: T.Tensor((M, SPLIT, 2), ACCUM_DTYPE)")
        params.append("Y: T.Tensor((M, N), OUT_DTYPE)")
        term = f"T.cast(X[row, {COL}], ACCUM_DTYPE)"
        doc = "X"
        if self.scale is not None:
            term, doc = f"{term} * SCALE", "X * SCALE"
        if self.mask == "full":
            term, doc = f"{term} + T.cast(MK[row, {COL}], ACCUM_DTYPE)", f"{doc} + MK[row, :]"
        elif self.mask == "broadcast":
            term, doc = f"{term} + T.cast(MK[{COL}], ACCUM_DTYPE)", f"{doc} + MK[:]"
        fused = self.logits
        return {
            **rows,
            "kernel_params": ", ".join(params),
            "src": src,
            "loader": "load_logits" if fused else "load",
            "logit_term": term,
            "logit_doc": doc,
            "scale_literal": repr(self.scale),
            "pass_args": f"{src}, N, row" if fused else rows["row_args"],
            "store_pass_args": f"{src}, Y, N, row" if fused else rows["store_args"],
        }


def make_instance(spec: SoftmaxSpec, target: TargetSpec, spec_file: str) -> SoftmaxInstance:
    return SoftmaxInstance(**row_fields(spec, target, spec_file), variant=spec.variant.value, scale=spec.scale,
                           mask=spec.mask.value)
