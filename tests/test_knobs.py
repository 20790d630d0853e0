"""A tunable is declared once (a family's Knob tuple); the tuning, override and spec models, the tunables
`search:` may list, TARGET_ONLY and the starter spec all follow that declaration."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from codegen.families import rows
from codegen.families.attention import spec as attention
from codegen.families.gemm import spec as gemm
from codegen.families.norm import spec as norm
from codegen.families.rope import spec as rope
from codegen.families.softmax import spec as softmax
from codegen.families.spec import (
    K_PACK,
    Knob,
    Model,
    int_choice,
    missing_from_starter,
    search_block_type,
    tunable_paths,
)

# tunables a family's starter spec leaves out on purpose, with the reason; every other one appears in it
STARTER_LEFT_OUT: dict[str, dict[str, str]] = {"gemm": {}, "attention": {}, "rmsnorm": {}, "layernorm": {},
                                               "softmax": {}}

# op: (its knobs, its spec model, its tuning and override models (None: the family takes no overrides), starter)
FAMILIES = {
    "gemm": (gemm.GEMM_KNOBS, gemm.GemmSpec, gemm.GemmTuning, gemm.GemmOverride, gemm.STARTER),
    "attention": (attention.ATTENTION_KNOBS, attention.AttentionSpec, attention.AttentionTuning,
                  attention.AttentionOverride, attention.STARTER),
    "rmsnorm": (rows.ROW_KNOBS, norm.RmsNormSpec, None, None, norm.RMSNORM_STARTER),
    "layernorm": (rows.ROW_KNOBS, norm.LayerNormSpec, None, None, norm.LAYERNORM_STARTER),
    "softmax": (rows.ROW_KNOBS, softmax.SoftmaxSpec, None, None, softmax.STARTER),
}


@pytest.mark.parametrize("op", sorted(FAMILIES))
def test_models_follow_the_declaration(op):
    knobs, spec, tuning, override, _ = FAMILIES[op]
    declared = [k.name for k in knobs if k.declares_field]
    fields = list(spec.model_fields)
    start = fields.index(declared[0])
    assert fields[start:start + len(declared)] == declared  # the spec's tunables: one block, in order
    if tuning is not None:
        assert list(tuning.model_fields) == declared
        assert list(override.model_fields) == declared
    for k in knobs:
        if not k.declares_field:
            assert k.name in spec.model_fields  # a searched field the spec model declares itself
            continue
        info = FieldInfo.from_annotation(k.type)
        models = [spec] if tuning is None else [spec, tuning]
        for m in models:
            f = m.model_fields[k.name]
            assert (f.annotation, f.metadata) == (info.annotation, info.metadata), (m.__name__, k.name)
            assert f.is_required() == (k.default is ...)
            if k.default is not ...:
                assert f.default == k.default
        if override is not None:
            o = override.model_fields[k.name]
            assert not o.is_required() and o.default is None  # every override is optional
    only = {k.name: k.default for k in knobs if k.takes is not None}
    assert {o.name: o.default for o in getattr(spec, "TARGET_ONLY", ())} == only
    search = search_block_type(spec)
    assert [p for p, _ in _search_paths(search)] == list(tunable_paths(knobs))


def _search_paths(search: type[BaseModel]) -> list[tuple[str, object]]:
    """The tunable paths a search model takes, in its field order."""
    out = []
    for head, f in search.model_fields.items():
        inner = next((a for a in getattr(f.annotation, "__args__", ()) if isinstance(a, type)
                      and issubclass(a, BaseModel)), None)
        out += [(f"{head}.{leaf}", None) for leaf in inner.model_fields] if inner else [(head, None)]
    return out


def test_tunables_and_their_order():
    # the search block's order is every search point's order (lockfile entries list their values in it)
    assert gemm.GEMM_TUNABLES == (
        "tiling.block_m", "tiling.block_n", "tiling.block_k", "tiling.threads", "tiling.policy", "pipeline.stages",
        "unroll", "swizzle_panel", "k_pack", "tail", "structure", "lds_layout", "split_k", "split_k_sum", "grid", "b_eviction",
        "epilogue", "staging", "tf32_convert", "activation_math")
    assert gemm.GemmSpec.TARGET_ONLY == (K_PACK, gemm.LDS_LAYOUT, gemm.B_EVICTION, gemm.EPILOGUE, gemm.ACTIVATION_MATH)
    assert [o.name for o in gemm.GemmSpec.TARGET_ONLY] == ["k_pack", "lds_layout", "b_eviction", "epilogue",
                                                           "activation_math"]
    assert attention.ATTENTION_TUNABLES == ("tiling.block_m", "tiling.block_n", "tiling.threads", "pipeline.stages",
                                            "split_kv", "combine_vec", "split_kv_combine", "schedule", "grid",
                                            "tile_order", "k_pack", "v_layout")
    assert attention.AttentionSpec.TARGET_ONLY == (K_PACK,)
    assert rows.ROW_TUNABLES == ("threads", "vector", "unroll", "variant", "tail", "peel", "split", "pack")


def test_search_paths():
    class Inner(BaseModel):
        a: int = 0
        b: int = 0

    assert Knob(name="x", type=int, default=0).search_paths() == ("x",)
    assert Knob(name="x", type=int, default=0, search=False).search_paths() == ()
    assert Knob(name="m", type=Inner).search_paths() == ("m.a", "m.b")
    assert Knob(name="m", type=Inner, search=("b",)).search_paths() == ("m.b",)
    assert tunable_paths((Knob(name="m", type=Inner, search=("a",)), Knob(name="tail", declares_field=False))) == \
        ("m.a", "tail")


@pytest.mark.parametrize("op", sorted(FAMILIES))
def test_starter_shows_every_tunable(op):
    knobs, *_, starter = FAMILIES[op]
    left_out = STARTER_LEFT_OUT[op]
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


def test_flow_mapping_keys_count():
    # attention's starter writes its tiling as a flow mapping; without it block_n is missing
    assert missing_from_starter(attention.ATTENTION_KNOBS, attention.STARTER) == []
    assert missing_from_starter(attention.ATTENTION_KNOBS, attention.STARTER.replace("block_n:", "block_x:")) == \
        ["tiling.block_n"]



def test_an_int_choice_is_written_as_an_integer():
    """pydantic's Literal takes true for 1 and 4.0 for 4 in lax mode: int_choice refuses both with a line that
    says why, and keeps the choice's own message for another integer."""
    from pydantic import ValidationError

    class M(Model):
        v: int_choice(1, 4) = 1

    assert M(v=4).v == 4
    for value, message in ((True, "not as true or false"), (4.0, "not as a decimal number"), (2, "Input should be 1 or 4")):
        with pytest.raises(ValidationError, match=message):
            M(v=value)


@pytest.mark.parametrize(("model", "field"), [(attention.AttentionTuning, "combine_vec"), (attention.AttentionTuning, "k_pack"),
                                              (gemm.GemmTuning, "k_pack"), (softmax.SoftmaxSpec, "vector"),
                                              (rope.RopeSpec, "vector")])
def test_the_integer_choices_are_int_choices(model, field):
    from pydantic import BeforeValidator

    assert any(isinstance(m, BeforeValidator) for m in model.model_fields[field].metadata), field
