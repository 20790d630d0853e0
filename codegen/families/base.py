"""What an operator family provides (`Family`), what verify and bench need of it (`Numerics`), and the
identity every family's kernel instance shares (`InstanceBase`).

A family is one folder, `codegen/families/<family>/`: its spec model (spec.py), legality rules
(rules.py), instance -- every template variable a field (instance.py) -- and numerics (numerics.py: inputs,
torch reference, tolerance, negative controls, FLOP/byte formulas, baselines, derived edge shapes),
assembled into one `Family` in its __init__.py; its Jinja templates are `templates/<family>/*.py.j2` at the
top level (`templates_dir`). The registry (`codegen.families`) maps each `op:` to its family; stage modules
look families up there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

from pydantic import BaseModel

from codegen.families.rules import Violation
from codegen.targets.base import TargetSpec

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # codegen/
SHARED_TEMPLATES = "_shared"  # the folder of templates/ holding partials several families import (_rows.j2)


def templates_dir() -> Path:
    """The one place that knows where the built-in templates live: `templates/` inside the package (the copy
    an installed wheel carries, codegen/templates/, written by setup.py's build step), else `templates/`
    beside the package (a checkout: the repository's top level). Either holds <family>/*.py.j2 and
    _shared/; the first of the two that does is it."""
    for folder in (PACKAGE_DIR / "templates", PACKAGE_DIR.parent / "templates"):
        if (folder / SHARED_TEMPLATES).is_dir():
            return folder
    raise RuntimeError(f"tilegen's templates are missing: neither {PACKAGE_DIR / 'templates'} nor "
                       f"{PACKAGE_DIR.parent / 'templates'} holds {SHARED_TEMPLATES}/ (a broken install)")


TEMPLATES_DIR = templates_dir()
SHARED_TEMPLATE_DIR = TEMPLATES_DIR / SHARED_TEMPLATES


# Instance fields that are not the kernel's identity: the workload (who asked for it, which shapes) and how
# it is checked (build and verify policies). Two specs that differ only in these get one kernel.
WORKLOAD_FIELDS = ("name", "spec_file", "shapes")
POLICY_FIELDS = ("allow_spills", "min_waves_per_simd", "verify_tolerance_scale")
# The template file an instance renders is chosen from its configuration (make_instance), so it names nothing
# the other fields do not: it stays out of the identity, and templates can be split or merged without a rename.
DERIVED_FIELDS = ("template",)
NOT_IDENTITY = WORKLOAD_FIELDS + POLICY_FIELDS + DERIVED_FIELDS
HASH_HEX = 6  # hex digits of the configuration hash in a kernel's name


class InstanceBase:
    """Identity shared by every family's instance: a frozen, keyword-only dataclass with at least the
    fields name, target, op, template, spec_file, shapes, tail, allow_spills, min_waves_per_simd,
    verify_tolerance_scale, lds_bytes, threads and tilelang_target, and the methods stem(),
    template_vars(), metadata(uri), summary(), dtype_label() and launch_grids(shape).

    A kernel is named by its resolved configuration only: `stem()` (readable: op, dtypes, layout, tiles,
    schedule, tail), the target, and a short sha256 of the canonical configuration (every field, each with
    its value, but the workload, the policies and the template file chosen from the others), e.g.
    `gemm_fp16_nt_128x256x64_t256_s3_sm90_3f2a9c`. Shapes are the workload beside it: adding one renames
    nothing. What the code is (codegen.generate.render: the sha256 of the rendered module, its header excluded) is
    recorded beside the name, never part of it."""

    def stem(self) -> str:
        """The readable part of the kernel's name; families name what changes their code (the hash after it
        keeps names unique whatever a family puts here)."""
        return self.op

    def launch_grids(self, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        """The (x, y, z) workgroup grid of each kernel the template launches for `shape`, from the same
        expressions as its `T.Kernel(...)` calls (rule grid_limit checks them against the target)."""
        raise NotImplementedError(f"{type(self).__name__} does not say its launch grids")

    def compile_shape(self, shape: tuple[int | str, ...]) -> tuple[int | str, ...]:
        """What of `shape` one compiled kernel is specific to: the shape itself, unless the kernel takes a size
        symbolically -- that size is then the symbolic variable's name (a dynamic-M GEMM: ('m', n, k)), and one
        compile serves every shape with the same compile shape. Idempotent."""
        return tuple(shape)

    def compile_shapes(self, shapes: tuple[tuple[int, ...], ...] | None = None) -> list[tuple[int | str, ...]]:
        """The distinct compile shapes of `shapes` (default: the instance's own), in order of first appearance:
        what `tilegen build` compiles and reports, once each."""
        return list(dict.fromkeys(self.compile_shape(s) for s in (self.shapes if shapes is None else shapes)))

    def limit_shapes(self) -> Iterator[tuple[tuple[str | int, ...], tuple[int, ...]]]:
        """(spec path to blame, shape) of every size the kernel must launch at, for rule grid_limit: each of
        its shapes; a family whose kernel serves a range of sizes adds the range's extremes."""
        for i, shape in enumerate(self.shapes):
            yield ("shapes", i), shape

    def uses_matrix_cores(self) -> bool:
        """Whether the kernel's products run on the MMA units (MFMA / wgmma / mma.sync); families that
        multiply matrices say so."""
        return False

    def global_load_bytes(self) -> int | None:
        """Bytes per lane the spec means each global load of the main path to move (16 for a 16-byte
        vector load); build's static analysis warns when the compiled kernel loads narrower. None: the
        family does not say (nothing is checked)."""
        return None

    def narrow_load_hint(self, shape: tuple) -> str | None:
        """Where build warns that the kernel loads narrower than global_load_bytes at `shape`: the spec option
        that would give the wide loads back, as one line; None where the family knows none."""
        return None

    # Fields of an option most kernels of the family do not have, written to the canonical form only where set
    # (not None): a whole computation beyond the family's own (GEMM's fused epilogue ops and gate), so that
    # kernels without it keep the names they had. Every other field is written always.
    OPTIONAL_IDENTITY: ClassVar[tuple[str, ...]] = ()

    def canonical(self) -> str:
        """The kernel's configuration as canonical JSON: every instance field but NOT_IDENTITY, always (a
        field at its default is written too, so the form never depends on when a field was added) -- but an
        OPTIONAL_IDENTITY field, written where set."""
        data = {k: v for k, v in asdict(self).items()
                if k not in NOT_IDENTITY and not (k in self.OPTIONAL_IDENTITY and v is None)}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def config_sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def uri(self) -> str:
        """The kernel's name: the file's stem, the kernel symbol, the key users and lockfiles refer to."""
        return f"{self.stem()}_{self.target.value.replace('_', '')}_{self.config_sha256()[:HASH_HEX]}"

    @property
    def out_dir(self) -> PurePosixPath:
        return PurePosixPath("generated") / self.target.value / self.op


def dtype_tag(*dtypes: str) -> str:
    """`fp16` for (fp16, fp16), `fp8_e4m3_bf16` for (fp8_e4m3, bf16): each dtype once, in order."""
    return "_".join(dict.fromkeys(dtypes))


def tail_tag(tail) -> str:
    """'' for no tail policy, else `_predicated` / `_specialized`."""
    return "" if str(tail) == "none" else f"_{tail}"


def tilelang_target(target: TargetSpec) -> tuple[tuple[str, str], ...]:
    """The instance field `tilelang_target`: the target's TileLang target as sorted pairs."""
    return tuple(sorted(target.hw.tilelang_target.items()))


def pipelined_loop(extent: str, stages: int, order: tuple[int, ...] | None, stage: tuple[int, ...] | None) -> str:
    """The loop header of a pipelined main loop: an explicit schedule (targets with
    explicit_pipeline_schedule), TileLang's num_stages, or a plain loop for one stage."""
    if order is not None:
        return f"T.Pipelined({extent}, order={list(order)}, stage={list(stage)})"
    if stages >= 2:
        return f"T.Pipelined({extent}, num_stages={stages})"
    return f"T.serial({extent})"


def explicit_schedule(target: TargetSpec, stages: int, copies: int,
                      compute: int) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[None, None]:
    """order/stage lists for a loop body of `copies` global->LDS copies then `compute` statements: the
    copies run in stage 0, stages-1 iterations ahead of the compute. (None, None) where the target
    schedules num_stages itself, or for fewer than 2 stages."""
    if not target.explicit_pipeline_schedule or stages < 2:
        return None, None
    return tuple(range(copies + compute)), (0,) * copies + (stages - 1,) * compute


@dataclass(frozen=True, kw_only=True)
class Output:
    """One tensor a kernel writes: its parameter name in the kernel, its shape and its spec dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # a spec dtype (codegen.core.hardware.DType value); the torch dtype is the run target's


@dataclass(frozen=True, kw_only=True)
class Numerics:
    """What verify and bench need to run and judge one family's kernels. `inst` is the family's
    instance, `shape` one of its shapes (a tuple of ints), `case` what make_inputs returned.

    A kernel writes one output (out_shape, in the spec's out dtype) unless the family's `outputs` says
    otherwise (a fused residual add writes the sum beside the normalised rows; a per-token fp8 output writes
    the rows' scales beside them): then `launch` takes every output in that order, `chunks` covers each of
    them once (each CheckChunk names its output) and `tolerances` gives each its own bound. `reference`,
    `controls` and `tolerance` are the first form's: the main output alone (a single-output kernel's output)."""

    flops: Callable[..., float]  # (inst, shape) -> useful FLOPs
    bytes: Callable[..., float]  # (inst, shape) -> compulsory DRAM bytes
    make_inputs: Callable[..., object]  # (inst, shape, *, seed, kind, device, run_target) -> case
    reference: Callable[..., tuple]  # (inst, case) -> (fp32 reference, error magnitude for the tolerance)
    # (inst, case, max_elements) -> Iterator[codegen.families.numerics.CheckChunk] covering the output once: the
    # reference, magnitude and controls of each piece, its fp32 temporaries about max_elements each
    chunks: Callable[..., Iterator]
    tolerance: Callable[..., object]  # (inst, shape, run_target) -> a tolerance with bound(ref, mag), describe()
    controls: Callable[..., dict]  # (inst, case, ref) -> {name: wrong output}: each must fail the check
    derived_shapes: Callable[..., list]  # (inst) -> edge shapes verified on top of the spec's
    out_shape: Callable[..., tuple]  # (inst, shape) -> output tensor shape
    launch: Callable[..., None]  # (kernel, case, *outs) -> None: outs as output_list orders them
    baselines: Callable[..., dict]  # (inst, case, out_dtype) -> {name: zero-argument torch fn}
    # (inst) -> what the baselines compute where that is a choice (fp32 GEMM: each one's allow_tf32); '' if not
    baseline_precision: Callable[..., str] = field(default=lambda inst: "")
    # (inst, shape) -> every Output the kernel writes, in launch order; None: one (out_shape, the spec's out dtype)
    outputs: Callable[..., tuple[Output, ...]] | None = None
    # (inst, shape, run_target) -> one tolerance per output of `outputs`; None: (tolerance,)
    tolerances: Callable[..., tuple] | None = None
    # (inst, shape) -> {baseline: compulsory DRAM bytes of what it runs} where it moves more than the kernel (the
    # unfused torch sequence of a fused kernel: each op reads and writes its tensors); {}: as `bytes`, or unknown
    baseline_bytes: Callable[..., dict] = field(default=lambda inst, shape: {})
    # (inst, case) -> '' or what a launch left wrong outside its outputs (a workspace that must be left as found:
    # split_k_sum fixup's counters); verify fails the case with it
    after_launch: Callable[..., str] = field(default=lambda inst, case: "")

    def output_list(self, inst, shape) -> tuple[Output, ...]:
        """The kernel's outputs at `shape`, in launch order."""
        if self.outputs is not None:
            return self.outputs(inst, tuple(shape))
        return (Output(name="out", shape=tuple(self.out_shape(inst, shape)), dtype=inst.spec_dtypes[-2]),)

    def tolerance_list(self, inst, shape, run_target) -> tuple:
        """One tolerance per output of output_list."""
        if self.tolerances is not None:
            return tuple(self.tolerances(inst, tuple(shape), run_target))
        return (self.tolerance(inst, shape, run_target),)

    def alloc_outputs(self, inst, shape, run_target, *, fill: float | None, device="cuda") -> tuple:
        """Tensors for every output (torch.full with `fill`, or torch.empty for None), in launch order."""
        import torch

        from codegen.targets import torch_dtype

        outs = []
        for o in self.output_list(inst, shape):
            dt = torch_dtype(o.dtype, run_target)
            if fill is None:
                outs.append(torch.empty(o.shape, dtype=dt, device=device))
            elif dt.itemsize == 1:  # fp8: filled through a conversion (every device converts; not all fill fp8)
                outs.append(torch.full(o.shape, fill, dtype=torch.float32, device=device).to(dt))
            else:
                outs.append(torch.full(o.shape, fill, dtype=dt, device=device))
        return tuple(outs)


@dataclass(frozen=True, kw_only=True)
class Family:
    """One operator family, as the registry (`codegen.families`) holds it."""

    name: str  # the folder's name: gemm, softmax, norm, attention
    specs: Mapping[str, type[BaseModel]]  # `op:` value -> its pydantic spec model (norm: rmsnorm, layernorm)
    template_dir: Path  # folder of its template(s) (built-ins: templates/<name>/); an instance's `template` names the file
    check: Callable[[BaseModel, TargetSpec], list[Violation]]  # every legality rule on one target
    instance: Callable[[BaseModel, TargetSpec, str], InstanceBase]  # (spec, target, spec file) -> instance
    numerics: Numerics
    starters: Mapping[str, str] = field(default_factory=dict)  # op -> commented starter spec (`tilegen init`)

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(self.specs)

    @property
    def template_path(self) -> tuple[Path, ...]:
        """Where its templates' names resolve: its own folder, then the shared partials."""
        return (self.template_dir, SHARED_TEMPLATE_DIR)

