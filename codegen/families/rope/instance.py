"""The rope instance: one spec resolved for one target; every template variable is a field here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from codegen.core.hardware import DTYPE_BYTES, DType, Target
from codegen.families.base import InstanceBase, dtype_tag, tail_tag, tilelang_target
from codegen.families.rope.spec import RopeSpec, RopeTables
from codegen.families.spec import TailPolicy
from codegen.targets.base import TargetSpec

TABLE_DTYPE = DType.FP32  # cos and sin of `tables: half`: fp32, as serving stacks keep them (FlashInfer's cos_sin_cache)


@dataclass(frozen=True, kw_only=True)
class RopeInstance(InstanceBase):
    """Rotary embedding (rotate_half) of Q and K for one target: one workgroup per token; rotation items
    (one head's x1 and x2 vectors at offset j*vector) and pass-through items (vector elements past
    rotary_dim) are dealt to the threads in turn, every item loop fully unrolled."""

    name: str
    target: Target
    op: str = "rope"
    template: str = "rope.py.j2"
    spec_file: str = field(compare=False)
    shapes: tuple[tuple[int, int, int], ...]  # (tokens, heads, kv_heads)
    in_dtype: str  # TileLang dtype names
    out_dtype: str
    accum_dtype: str
    table_dtype: str  # cos, sin
    full_tables: bool | None = None  # tables: full (cos, sin [tokens, rotary_dim] in the input dtype); None: half
    spec_dtypes: tuple[str, str, str]  # input, out, accumulate as written in the spec
    head_dim: int
    rotary_dim: int
    half: int  # rotary_dim / 2
    pairs: int  # half / vector: rotation items per head
    pass_vectors: int  # (head_dim - rotary_dim) / vector: pass-through items per head
    threads: int
    vector: int
    tables_hoisted: bool  # threads % pairs == 0: a thread's items all share one j, so it loads cos/sin once
    tail: TailPolicy
    allow_spills: bool
    min_waves_per_simd: int | None
    verify_tolerance_scale: float = field(compare=False)
    lds_bytes: int  # 0: every value lives in registers
    tilelang_target: tuple[tuple[str, str], ...]

    # tables: half, the family's first form, is written to the canonical form as nothing (kernels keep their names)
    OPTIONAL_IDENTITY: ClassVar[tuple[str, ...]] = ("full_tables",)

    @property
    def tables(self) -> RopeTables:
        return RopeTables.FULL if self.full_tables else RopeTables.HALF

    def template_vars(self) -> dict[str, object]:
        return {"target_literal": repr(dict(self.tilelang_target)), "guarded": self.tail == TailPolicy.PREDICATED,
                "full_tables": bool(self.full_tables), "table_width": "ROTARY_DIM" if self.full_tables else "HALF"}

    def metadata(self, uri: str) -> dict[str, object]:
        i, o, acc = self.spec_dtypes
        return {
            "uri": uri, "name": self.name, "op": self.op, "target": self.target.value,
            "dtypes": {"input": i, "out": o, "accumulate": acc, "cos_sin": self.table_spec_dtype},
            "shapes": [dict(zip(("tokens", "heads", "kv_heads"), s, strict=True)) for s in self.shapes],
            "head_dim": self.head_dim, "rotary_dim": self.rotary_dim, "threads": self.threads,
            "vector": self.vector, "tail": self.tail.value, "allow_spills": self.allow_spills,
            "min_waves_per_simd": self.min_waves_per_simd, "lds_bytes": self.lds_bytes,
        } | ({"tables": "full"} if self.full_tables else {})

    @property
    def table_spec_dtype(self) -> str:
        """cos and sin's dtype as a spec writes it."""
        return self.spec_dtypes[0] if self.full_tables else TABLE_DTYPE.value

    def summary(self) -> dict[str, str]:
        return {"dtypes": self.dtype_label(), "layout": "thd",
                "tiling": f"1 token, d{self.head_dim} r{self.rotary_dim}, {self.vector}/thread",
                "threads": str(self.threads), "schedule": "unrolled", "tail": self.tail.value}

    def dtype_label(self) -> str:
        return "/".join(self.spec_dtypes[:2])

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """One workgroup per token (the template's `T.Kernel(NT, threads=THREADS)`)."""
        return ((shape[0], 1, 1),)

    def global_load_bytes(self) -> int | None:
        """`vector` contiguous input elements per lane: one load of vector x dtype bytes (rule: at most 16)."""
        return self.vector * DTYPE_BYTES[DType(self.spec_dtypes[0])]

    def stem(self) -> str:
        """A readable procedural name of what changes the generated code (the target and the template
        hash are added by the kernel's URI)."""
        dt = dtype_tag(*self.spec_dtypes[:2])
        tables = "_tf" if self.full_tables else ""
        return f"rope_{dt}_d{self.head_dim}_r{self.rotary_dim}{tables}_t{self.threads}_v{self.vector}{tail_tag(self.tail)}"


def make_instance(spec: RopeSpec, target: TargetSpec, spec_file: str) -> RopeInstance:
    hw = target.hw
    d = spec.dtypes
    half = spec.rotary_dim // 2
    pairs = half // spec.vector
    return RopeInstance(
        name=spec.name, target=target.target, spec_file=spec_file,
        shapes=tuple((s.tokens, s.heads, s.kv_heads) for s in spec.shapes),
        in_dtype=hw.tilelang_dtypes[d.input], out_dtype=hw.tilelang_dtypes[d.out],
        accum_dtype=hw.tilelang_dtypes[d.accumulate],
        table_dtype=hw.tilelang_dtypes[d.input if spec.tables == RopeTables.FULL else TABLE_DTYPE],
        full_tables=True if spec.tables == RopeTables.FULL else None,
        spec_dtypes=(d.input.value, d.out.value, d.accumulate.value),
        head_dim=spec.head_dim, rotary_dim=spec.rotary_dim, half=half, pairs=pairs,
        pass_vectors=(spec.head_dim - spec.rotary_dim) // spec.vector,
        threads=spec.threads, vector=spec.vector, tables_hoisted=spec.threads % pairs == 0,
        tail=spec.tail, allow_spills=spec.allow_spills, min_waves_per_simd=spec.min_waves_per_simd,
        verify_tolerance_scale=spec.verify_tolerance_scale, lds_bytes=0, tilelang_target=tilelang_target(target),
    )
