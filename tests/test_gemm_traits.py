"""The GEMM options are independent traits (codegen.families.gemm.rules.TRAITS) with one table of the pairs not
supported yet (UNSUPPORTED_COMBINATIONS). Every pair of traits (and each alone) on each target that has both:
a pair in the table is refused by rule unsupported_combination, once, naming the second trait's field; any
other renders (gemm.py.j2, its partials chosen by the traits) and lowers with TileLang for gfx942 and sm_90.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from codegen.core.errors import SpecErrors
from codegen.core.hardware import Target
from codegen.families.gemm.rules import TRAITS, UNSUPPORTED_COMBINATIONS, GemmContext
from codegen.generate.instance import build_instances
from codegen.generate.render import render
from codegen.spec.load import parse_specs
from codegen.targets import TARGETS

FP32 = {"a": "fp32", "b": "fp32", "out": "fp32"}
BASE = {"name": "traits", "op": "gemm", "dtypes": {"a": "fp16", "b": "fp16", "out": "fp16"}, "layout": "nn",
        "tiling": {"block_m": 64, "block_n": 64, "block_k": 32, "threads": 128}, "pipeline": {"stages": 2},
        "tail": "predicated"}
# what turns each trait on, over BASE (a tiled fp16 nn GEMM, tail predicated, at a ragged shape)
SPEC_OF = {
    "gemv": {"structure": "gemv", "layout": "nt", "tiling": {"block_m": 16, "block_n": 16, "block_k": 64, "threads": 128}},
    "fp32": {"dtypes": FP32},
    "tf32": {"dtypes": FP32, "precision": "tf32"},
    "tf32_inline": {"dtypes": FP32, "precision": "3xtf32", "tf32_convert": "inline"},
    "tail_none": {"tail": "none"},
    "specialized": {"tail": "specialized"},
    "unroll": {"unroll": 2, "pipeline": {"stages": 1}},
    "transposed_b": {"lds_layout": "transposed_b"},
    "split_k": {"split_k": 2},
    "persistent": {"grid": "persistent"},
    "padded": {"staging": "padded"},
    "dynamic_m": {"dynamic_m": {"min": 1, "max": 512}},
    "b_eviction": {"b_eviction": "first"},
    "epilogue_shared": {"epilogue": "shared"},
    "epilogue_ops": {"epilogue_ops": {"scale": 0.5, "bias": {"dtype": "fp16"}, "activation": "gelu_erf",
                                      "residual": {"beta": 0.5}}},
    "gate": {"gate": "swiglu"},
}
ONLY_ON = {"transposed_b": {Target.GFX942}, "tf32": {Target.SM_90}, "tf32_inline": {Target.SM_90}, "b_eviction": {Target.SM_90},
           "epilogue_shared": {Target.SM_90}}  # the target-only options (and tf32: sm_90's tensor cores)
SAME_FIELD = ({"tail_none", "specialized"}, {"fp32", "tf32"}, {"fp32", "tf32_inline"}, {"tf32", "tf32_inline"})
TARGETS_UNDER_TEST = (Target.GFX942, Target.SM_90)
TABLE = {frozenset(u.traits): u for u in UNSUPPORTED_COMBINATIONS}


def test_every_trait_has_a_spec_here_and_the_table_names_only_traits():
    assert set(SPEC_OF) == set(TRAITS)
    assert all(set(u.traits) <= set(TRAITS) and len(set(u.traits)) == 2 and u.why for u in UNSUPPORTED_COMBINATIONS)
    assert len(TABLE) == len(UNSUPPORTED_COMBINATIONS), "a pair listed twice"


def shape(traits: frozenset[str]) -> dict[str, int]:
    """A shape the traits take: whole blocks for tail none; else ragged -- and for staging padded an operand whose
    rows are not 16-byte aligned (A's k, or B's n where unroll needs k in whole unrolled steps)."""
    if "gemv" in traits:
        return {"m": 4, "n": 256, "k": 512}
    if "tail_none" in traits:
        return {"m": 256, "n": 256, "k": 512}
    if "padded" in traits:
        return {"m": 200, "n": 201, "k": 256} if "unroll" in traits else {"m": 200, "n": 256, "k": 201}
    return {"m": 200, "n": 264, "k": 256}


def spec_text(traits: frozenset[str], target: Target) -> str:
    spec = dict(BASE, targets=[target.value], shapes=[shape(traits)])
    for t in sorted(traits):
        spec.update(SPEC_OF[t])
    if {"gemv", "fp32"} <= traits:  # 4-element fp32 vectors: twice the lanes along K (rule gemv_shape)
        spec["tiling"] = dict(spec["tiling"], threads=256)
    return yaml.safe_dump([spec], sort_keys=False)


def cases() -> list[tuple[Target, frozenset[str]]]:
    out = []
    for target in TARGETS_UNDER_TEST:
        have = [t for t in TRAITS if target in ONLY_ON.get(t, {target})]
        for n in (1, 2):
            for combo in itertools.combinations(have, n):
                if not any(set(combo) == same for same in SAME_FIELD):
                    out.append((target, frozenset(combo)))
    return out


CASES = cases()
SUPPORTED = [(t, c) for t, c in CASES if c not in TABLE]
REFUSED = [(t, c) for t, c in CASES if c in TABLE]


def _id(case) -> str:
    target, combo = case
    return f"{target.value}-{'+'.join(sorted(combo))}"


@pytest.mark.parametrize("case", REFUSED, ids=_id)
def test_a_pair_in_the_table_is_refused_once_by_unsupported_combination(case):
    target, combo = case
    with pytest.raises(SpecErrors) as exc:
        build_instances(parse_specs(spec_text(combo, target), "specs/traits.yaml"))
    rules = [e.rule for e in exc.value.errors]
    entry = TABLE[combo]
    first, second = (TRAITS[t] for t in entry.traits)
    assert rules.count("unsupported_combination") == 1, [str(e) for e in exc.value.errors]
    [err] = [e for e in exc.value.errors if e.rule == "unsupported_combination"]
    assert f"not with {first.name} (not supported): {entry.why}" in str(err), str(err)
    assert f": {second.field.split('.')[-1]}" in str(err) or second.field in str(err), str(err)


def _render(target: Target, combo: frozenset[str]):
    """The one kernel of the case's spec, with each of its traits seen on (a spec that missed its trait would
    test nothing)."""
    [loaded] = parse_specs(spec_text(combo, target), "specs/traits.yaml")
    [inst] = build_instances([loaded])
    tuning, origin = loaded.spec.tuning_for(target)
    ctx = GemmContext(spec=loaded.spec, target=TARGETS[target], tuning=tuning, origin=origin)
    assert all(TRAITS[t].on(ctx) for t in combo), combo
    assert inst.template == "gemm.py.j2"
    return render(inst)


@pytest.mark.parametrize("case", SUPPORTED, ids=_id)
def test_a_pair_outside_the_table_passes_every_rule_and_renders(case):
    f = _render(*case)
    compile(f.text, str(f.path), "exec")  # the module is Python


@pytest.mark.slow
@pytest.mark.parametrize("case", SUPPORTED, ids=_id)
def test_a_pair_outside_the_table_lowers(case):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = _render(*case)
    kernel = lower(f, f.instance.shapes[0], f.instance.target)
    assert "__global__" in kernel.source


# split_k_sum fixup changes how a split's partials are summed, not which traits a split combines with: every
# supported pair with a split renders and lowers with the fixup too -- and the epilogue ops, which a split takes
# with the fixup only (the table's refusal has its `unless`)
FIXUP_CASES = [(t, c) for t, c in SUPPORTED if "split_k" in c] + [
    (t, frozenset({"split_k", "epilogue_ops"})) for t in TARGETS_UNDER_TEST]


def _render_fixup(target: Target, combo: frozenset[str]):
    [spec] = yaml.safe_load(spec_text(combo, target))
    [loaded] = parse_specs(yaml.safe_dump([spec | {"split_k_sum": "fixup"}], sort_keys=False), "specs/traits.yaml")
    [inst] = build_instances([loaded])
    assert inst.fixup, combo
    return render(inst)


@pytest.mark.parametrize("case", FIXUP_CASES, ids=_id)
def test_a_split_pair_renders_with_the_fixup_sum(case):
    f = _render_fixup(*case)
    compile(f.text, str(f.path), "exec")
    assert "TILE_ARRIVALS" in f.text and f.text.count("with T.Kernel(") == 1 + 2 * bool(f.instance.workspace)


@pytest.mark.slow
@pytest.mark.parametrize("case", FIXUP_CASES, ids=_id)
def test_a_split_pair_lowers_with_the_fixup_sum(case):
    pytest.importorskip("tilelang")
    from codegen.generate.lower import lower

    f = _render_fixup(*case)
    kernel = lower(f, f.instance.shapes[0], f.instance.target)
    assert "AtomicAddRet" in kernel.source and kernel.source.count("__threadfence()") == 2


def test_docs_list_the_table_as_the_code_has_it():
    from spectext import REPO_ROOT

    docs = (REPO_ROOT / "docs" / "gemm.md").read_text(encoding="utf-8")
    for u in UNSUPPORTED_COMBINATIONS:
        first, second = (TRAITS[t] for t in u.traits)
        assert f"| {first.name} | {second.name} | {u.why} |" in docs, u.traits
    assert "`unsupported_combination`" in docs


def write_project(out: Path, target: Target) -> int:
    """A tilegen project at `out` holding one spec per supported case on `target` (each alone and each pair of its
    traits) and, for each with a split, its split_k_sum fixup twin, for `tilegen -C out gen` and `tilegen -C out
    verify --all` on a GPU of that target. Returns the count."""
    specs = []
    for t, combo in SUPPORTED:
        if t == target:
            [spec] = yaml.safe_load(spec_text(combo, t))
            specs.append(spec | {"name": "pair_" + "_".join(sorted(combo))})
    for t, combo in FIXUP_CASES:
        if t == target:
            [spec] = yaml.safe_load(spec_text(combo, t))
            specs.append(spec | {"name": "fixup_pair_" + "_".join(sorted(combo)), "split_k_sum": "fixup"})
    (out / "specs").mkdir(parents=True, exist_ok=True)
    (out / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (out / "specs" / "pairs.yaml").write_text(yaml.safe_dump(specs, sort_keys=False), encoding="utf-8")
    return len(specs)


if __name__ == "__main__":  # python tests/test_gemm_traits.py OUT_DIR [sm_90|gfx942]
    import sys

    where, tgt = Path(sys.argv[1]), Target(sys.argv[2] if len(sys.argv) > 2 else "sm_90")
    print(f"{write_project(where, tgt)} specs in {where / 'specs' / 'pairs.yaml'}")
