"""verify's derived edge shapes are shapes the spec itself could hold: every one passes the spec's own rules.

A derived shape that breaks a rule is a case the kernel was never meant to serve, and verify then reports the
checker's failure as the kernel's (a bottom_right mask over more queries than keys leaves rows with no key at
all: the reference is undefined there, and verify said `error` for a correct kernel). Checked over the committed
specs, the examples' and the tiles where it went wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codegen.core.errors import SpecError, SpecErrors
from codegen.families import derived_shapes
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = sorted((ROOT / "specs").glob("*.yaml")) + sorted(ROOT.glob("examples/*/specs/*.yaml"))

# split_segments is a rule of the spec's own shapes (a workgroup with no columns is a launch slot wasted): the
# derived shapes of a split row kernel go below it on purpose -- one and two chunks with every split launched --
# so that verify sees the empty segments computed right
ALLOWED = {"split_segments"}

# 128 query rows over 32-key blocks, predicated, bottom_right: the derived shape one query short of a block
# had 2 blocks + 1 = 65 keys for 127 queries
REGRESSION = """\
- name: attn_br_tall_tile
  op: attention
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  shapes: [{batch: 1, heads: 8, kv_heads: 2, seq_q: 200, seq_kv: 300}]
  head_dim: 128
  causal: bottom_right
  tiling: {block_m: 128, block_n: 32, threads: 256}
  pipeline: {stages: 1}
  tail: predicated
  targets: [gfx942, sm_90]
"""


def _entries() -> list[tuple[str, dict]]:
    out = [(f"regression:{d['name']}", d) for d in yaml.safe_load(REGRESSION)]
    for path in SPEC_FILES:
        out += [(f"{path.relative_to(ROOT)}:{d['name']}", d) for d in yaml.safe_load(path.read_text(encoding="utf-8"))]
    return out


ENTRIES = _entries()


def _rules_broken(entry: dict, shapes: list[tuple[int, ...]], target: str, fields: list[str]) -> list[str]:
    """The spec's rules that `shapes` break on `target` (the spec restricted to that target; a rule that a knob
    exists only for another target is no rule of the shapes)."""
    one = {k: v for k, v in entry.items() if k != "search"}
    one["targets"] = [target]
    if one.get("overrides"):
        one["overrides"] = {t: v for t, v in one["overrides"].items() if t == target}
    one["shapes"] = [dict(zip(fields, s, strict=True)) for s in shapes]
    try:
        build_instances(parse_specs(yaml.safe_dump([one], sort_keys=False), "derived.yaml"))
    except (SpecError, SpecErrors) as exc:
        ruled = [(line, line.rsplit("[", 1)[-1].rstrip("]")) for line in str(exc).splitlines() if line.endswith("]")]
        return [line for line, rule in ruled if not rule.endswith("_target") and rule not in ALLOWED]
    return []


@pytest.mark.parametrize(("where", "entry"), ENTRIES, ids=[w for w, _ in ENTRIES])
def test_every_derived_shape_passes_the_spec_s_own_rules(where, entry):
    if "dynamic_m" in entry or "dynamic_kv" in entry:
        pytest.skip("a dynamic size is a range of the compiled kernel, not a shape of the spec")
    loaded = parse_specs(yaml.safe_dump([{k: v for k, v in entry.items() if k != "search"}]), "spec.yaml")
    fields = list(type(loaded[0].spec.shapes[0]).model_fields)
    for inst in build_instances(loaded):
        shapes = derived_shapes(inst)
        assert not _rules_broken(entry, shapes, inst.target.value, fields), (inst.target.value, shapes)


def test_the_check_can_fail():
    """The regression's derived shapes before the fix (127 queries over 65 keys) are refused by the spec's rules."""
    (entry,) = yaml.safe_load(REGRESSION)
    broken = _rules_broken(entry, [(1, 2, 1, 127, 65)], "gfx942", ["batch", "heads", "kv_heads", "seq_q", "seq_kv"])
    assert broken and "[causal_alignment]" in broken[0]
