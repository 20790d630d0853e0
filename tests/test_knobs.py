"""A tunable is declared once (a family's Knob tuple); the tuning, override and spec models, the tunables
`search:` may list, TARGET_ONLY and the starter spec all follow that declaration."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from codegen.families.gemm import spec as gemm
from codegen.families.spec import K_PACK, Knob, missing_from_starter, tunable_paths

# tunables a family's starter spec leaves out on purpose, with the reason; every other one appears in it
STARTER_LEFT_OUT: dict[str, dict[str, str]] = {"gemm": {}}

FAMILIES = {"gemm": (gemm.GEMM_KNOBS, gemm.GemmSpec, gemm.GemmTuning, gemm.GemmOverride, gemm.STARTER)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_models_follow_the_declaration(family):
    knobs, spec, tuning, override, _ = FAMILIES[family]
    per_target = [k.name for k in knobs if k.per_target]
    assert list(tuning.model_fields) == per_target
    assert list(override.model_fields) == per_target
    fields = list(spec.model_fields)
    start = fields.index(per_target[0])
    assert fields[start:start + len(per_target)] == per_target  # the spec's tunables: one block, in order
    for k in knobs:
        if not k.per_target:
            assert k.name in spec.model_fields  # a searched spec field of the family's own
            continue
        s, t, o = spec.model_fields[k.name], tuning.model_fields[k.name], override.model_fields[k.name]
        declared = FieldInfo.from_annotation(k.type)
        assert (s.annotation, s.metadata) == (t.annotation, t.metadata) == (declared.annotation, declared.metadata)
        assert s.is_required() == t.is_required() == (k.default is ...)
        if k.default is not ...:
            assert s.default == t.default == k.default
        assert not o.is_required() and o.default is None  # every override is optional
    only = {k.name: k.default for k in knobs if k.takes is not None}
    assert {o.name: o.default for o in spec.TARGET_ONLY} == only


def test_gemm_tunables_and_their_order():
    # the search block's order is every search point's order (lockfile entries list their values in it)
    assert gemm.GEMM_TUNABLES == (
        "tiling.block_m", "tiling.block_n", "tiling.block_k", "tiling.threads", "tiling.policy", "pipeline.stages",
        "unroll", "swizzle_panel", "k_pack", "tail", "structure", "lds_layout", "split_k", "grid", "b_eviction",
        "epilogue", "staging")
    assert gemm.GemmSpec.TARGET_ONLY == (K_PACK, gemm.LDS_LAYOUT, gemm.B_EVICTION, gemm.EPILOGUE)
    assert [o.name for o in gemm.GemmSpec.TARGET_ONLY] == ["k_pack", "lds_layout", "b_eviction", "epilogue"]


def test_search_paths():
    class Inner(BaseModel):
        a: int = 0
        b: int = 0

    assert Knob(name="x", type=int, default=0).search_paths() == ("x",)
    assert Knob(name="x", type=int, default=0, search=False).search_paths() == ()
    assert Knob(name="m", type=Inner).search_paths() == ("m.a", "m.b")
    assert Knob(name="m", type=Inner, search=("b",)).search_paths() == ("m.b",)
    assert tunable_paths((Knob(name="m", type=Inner, search=("a",)), Knob(name="tail", per_target=False))) == \
        ("m.a", "tail")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_starter_shows_every_tunable(family):
    knobs, *_, starter = FAMILIES[family]
    left_out = STARTER_LEFT_OUT[family]
    assert missing_from_starter(knobs, starter) == sorted(left_out, key=[k.name for k in knobs].index)


def test_missing_from_starter_can_fail():
    knobs = (*gemm.GEMM_KNOBS, Knob(name="new_knob", type=int, default=0))
    assert missing_from_starter(knobs, gemm.STARTER) == ["new_knob"]
    # a commented line counts; a sub-field counts by its own key
    assert missing_from_starter(knobs, gemm.STARTER + "  # new_knob: 0\n") == []
    no_policy = gemm.STARTER.replace("policy:", "polic:")
    assert missing_from_starter(gemm.GEMM_KNOBS, no_policy) == ["tiling.policy"]
    no_grid = gemm.STARTER.replace("# grid:", "# gird:")
    assert missing_from_starter(gemm.GEMM_KNOBS, no_grid) == ["grid"]


def test_every_target_has_a_gemm_record():
    from codegen.families.gemm.targets import GEMM_TARGET
    from codegen.targets import TARGETS

    assert set(GEMM_TARGET) == set(TARGETS)
