"""The family registry: built-in families, families from the `tilegen.families` entry-point group, and
the errors a broken or duplicate entry point gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Literal

import pytest

from codegen import families
from codegen.core.errors import SpecErrors, TilegenError
from codegen.core.hardware import Target
from codegen.families import ENTRY_POINT_GROUP, Family, FamilyRegistryError, Numerics, family_for_op, registry
from codegen.families.base import InstanceBase, tilelang_target
from codegen.families.rules import Violation, threads_violations
from codegen.families.spec import Identifier, Model, PositiveInt, TailPolicy
from codegen.generate.instance import build_instances
from codegen.generate.render import render_all
from codegen.spec.load import parse_specs

# ---- a family that lives outside codegen: Y = FACTOR * X -------------------------------------------

TEMPLATES = Path(__file__).parent / "data" / "family_scale"


class ScaleSpec(Model):
    name: Identifier
    op: Literal["scale"]
    shapes: list[PositiveInt]
    threads: PositiveInt
    factor: float
    targets: list[Target] = [Target.GFX942]  # noqa: RUF012 - pydantic copies it


@dataclass(frozen=True, kw_only=True)
class ScaleInstance(InstanceBase):
    name: str
    target: Target
    op: str = "scale"
    template: str = "scale.py.j2"
    spec_file: str = field(compare=False)
    shapes: tuple[int, ...]
    threads: int
    factor: float
    tail: TailPolicy = TailPolicy.NONE
    allow_spills: bool = False
    min_waves_per_simd: int | None = None
    verify_tolerance_scale: float = field(default=1.0, compare=False)
    lds_bytes: int = 0
    tilelang_target: tuple[tuple[str, str], ...]

    def template_vars(self) -> dict[str, object]:
        return {"factor_literal": repr(self.factor)}

    def metadata(self, uri: str) -> dict[str, object]:
        return {"uri": uri, "factor": self.factor}

    def launch_grids(self, shape) -> tuple[tuple[int, int, int], ...]:
        return ((1, 1, 1),)  # every family says its grids (rule grid_limit)


def _check(spec: ScaleSpec, target) -> list[Violation]:
    return list(threads_violations(spec.threads, target.hw, ("threads",)))


def _instance(spec: ScaleSpec, target, spec_file: str) -> ScaleInstance:
    return ScaleInstance(name=spec.name, target=target.target, spec_file=spec_file, shapes=tuple(spec.shapes),
                         threads=spec.threads, factor=spec.factor, tilelang_target=tilelang_target(target))


def _unused(*args, **kwargs):
    raise AssertionError("not called without a GPU")


SCALE = Family(
    name="scale", specs={"scale": ScaleSpec}, template_dir=TEMPLATES, check=_check, instance=_instance,
    numerics=Numerics(flops=_unused, bytes=_unused, make_inputs=_unused, reference=_unused, tolerance=_unused,
                      controls=_unused, chunks=_unused, derived_shapes=lambda inst: [], out_shape=_unused, launch=_unused,
                      baselines=_unused),
)
NOT_A_FAMILY = {"name": "scale"}
CLAIMS_GEMM = Family(name="gemm2", specs={"gemm": ScaleSpec}, template_dir=TEMPLATES, check=_check,
                     instance=_instance, numerics=SCALE.numerics)

SPEC = """\
- name: scale_fp32
  op: scale
  shapes: [1024, 4096]
  threads: {threads}
  factor: 0.5
  targets: [gfx942, sm_90]
"""


@pytest.fixture
def plugins(monkeypatch):
    """Install entry points `name = value` of the group in place of the installed ones; the registry is
    rebuilt before and after the test."""

    def install(*eps: tuple[str, str]) -> None:
        found = [EntryPoint(name=n, value=v, group=ENTRY_POINT_GROUP) for n, v in eps]
        monkeypatch.setattr(families, "entry_points", lambda group: found if group == ENTRY_POINT_GROUP else [])
        registry.cache_clear()

    yield install
    registry.cache_clear()


def test_builtin_families_serve_every_bundled_op():
    assert {op: f.name for op, f in registry().items()} == {
        "gemm": "gemm", "softmax": "softmax", "rmsnorm": "norm", "layernorm": "norm", "attention": "attention",
        "rope": "rope"}


def test_unknown_op_is_a_located_error():
    with pytest.raises(SpecErrors) as exc:
        parse_specs("- name: x\n  op: conv\n", "specs/x.yaml")
    assert str(exc.value) == ("specs/x.yaml:2:7: op='conv': unknown operator "
                              "(known: attention, gemm, layernorm, rmsnorm, rope, softmax) [op]")
    with pytest.raises(TilegenError, match="unknown operator 'conv'"):
        family_for_op("conv")


def test_a_family_from_an_entry_point_is_loaded_checked_and_rendered(plugins):
    plugins(("scale", f"{__name__}:SCALE"))
    assert family_for_op("scale") is SCALE
    with pytest.raises(SpecErrors, match=r"threads=96: must be a multiple of the 64-lane wavefront on gfx942"):
        build_instances(parse_specs(SPEC.format(threads=96), "specs/scale.yaml"))
    instances = build_instances(parse_specs(SPEC.format(threads=256), "specs/scale.yaml"))
    assert [(i.op, i.target) for i in instances] == [("scale", Target.GFX942), ("scale", Target.SM_90)]
    files = render_all(instances)
    assert [str(f.path.parent) for f in files] == ["generated/gfx942/scale", "generated/sm_90/scale"]
    assert files[0].text.splitlines()[0].endswith("/family_scale/scale.py.j2 — do not edit; its workloads: generated/workloads.json")
    assert "FACTOR = 0.5" in files[0].text and f'URI = "{files[0].uri}"' in files[0].text


def test_an_entry_point_that_does_not_load_names_itself(plugins):
    plugins(("broken", "tilegen_no_such_module:FAMILY"))
    with pytest.raises(FamilyRegistryError, match=r"^entry point 'broken = tilegen_no_such_module:FAMILY' \(group "
                                                  r"tilegen.families\): cannot be loaded: ModuleNotFoundError"):
        registry()
    with pytest.raises(TilegenError, match="entry point 'broken"):  # the CLI shows it as one line
        parse_specs(SPEC.format(threads=256), "specs/scale.yaml")


def test_an_entry_point_that_is_not_a_family_is_refused(plugins):
    plugins(("scale", f"{__name__}:NOT_A_FAMILY"))
    with pytest.raises(FamilyRegistryError, match=r"'scale = .*:NOT_A_FAMILY' .*: loads a dict, not a codegen.families.Family"):
        registry()


def test_an_op_claimed_twice_is_refused(plugins):
    plugins(("gemm2", f"{__name__}:CLAIMS_GEMM"))
    with pytest.raises(FamilyRegistryError, match=r"^entry point 'gemm2 = .*:CLAIMS_GEMM' \(group tilegen.families\): "
                                                  r"op 'gemm' is already provided by built-in family 'gemm'$"):
        registry()
