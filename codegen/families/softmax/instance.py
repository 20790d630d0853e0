"""The softmax instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.families.rows import RowInstance, row_fields
from codegen.families.softmax.spec import SoftmaxSpec
from codegen.targets.base import TargetSpec


@dataclass(frozen=True, kw_only=True)
class SoftmaxInstance(RowInstance):
    """softmax over the last dim: Y[r, :] = exp(X[r, :] - max) / sum(exp(X[r, :] - max))."""

    op: str = "softmax"
    template: str = "softmax.py.j2"
    variant: str  # online | two_pass

    def _variant_tag(self) -> str:
        return self.variant

    def _family_metadata(self) -> dict[str, object]:
        return {"variant": self.variant}

    def split_slots(self) -> int:
        return 2  # the segment's max and its sum of exp(x - max)

    def _schedule(self) -> str:
        return self.variant if self.variant == "online" else f"{self.variant}, unroll {self.unroll}"


def make_instance(spec: SoftmaxSpec, target: TargetSpec, spec_file: str) -> SoftmaxInstance:
    return SoftmaxInstance(**row_fields(spec, target, spec_file), variant=spec.variant.value)
