"""Write a project of random valid specs made from the seeds: what a new user tries, at shapes no seed has.

    python tools/random_specs.py OUT [--seed 3] [--per-seed 2] [--only REGEX]
    tilegen -C OUT build --all          # here: lowering and the real compilers
    tilegen -C OUT verify --all         # on a GPU machine

For every seed spec of specs/*.yaml, `--per-seed` variants: the even ones take a random point of the seed's
`search:` block (the first target's; the spec is then for that target only), the odd ones keep the hand
configuration and every target. Each variant gets one shape near the seed's first, scaled by 1/4 to 2 and moved
off the powers of two (GEMM M/N/K, rows and columns, tokens; attention batch, heads, query group and lengths,
decode lengths kept short). A variant whose tail policy the odd shape refuses is given `tail: predicated`; one the
spec's rules still refuse is left out and counted under its rule. Deterministic for a seed and the seeds' text.
"""

from __future__ import annotations

import argparse
import collections
import copy
import random
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codegen.core.errors import SpecError, SpecErrors
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

SCALES = (0.25, 0.5, 0.75, 1, 1.25, 1.5, 2)
OFFSETS = (-3, -1, 0, 1, 5, 17)  # off the powers of two, or not


def pick(block, rng: random.Random):
    """A random point of one search block (nested mappings of value lists)."""
    if isinstance(block, list):
        return rng.choice(block)
    return {k: pick(v, rng) for k, v in block.items()}


def merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v


def near(v: int, rng: random.Random) -> int:
    return max(1, int(v * rng.choice(SCALES)) + rng.choice(OFFSETS))


def shape_near(s: dict, rng: random.Random) -> dict:
    s = dict(s)
    if "m" in s:  # GEMM (a dynamic M is left as written)
        for k in ("m", "n", "k"):
            if isinstance(s.get(k), int):
                s[k] = near(s[k], rng)
    elif "seq_kv" in s:  # attention
        kv_heads = rng.choice((1, 2, 3, 4, 8)) if s["kv_heads"] > 1 else 1
        s["kv_heads"], s["heads"] = kv_heads, kv_heads * rng.choice((1, 2, 3, 4, s["heads"] // s["kv_heads"]))
        s["batch"] = rng.choice((1, 2, 3))
        if s["seq_q"] <= 8:  # decode
            s["seq_q"] = rng.choice((1, 2, 3, 4))
            s["seq_kv"] = near(s["seq_kv"] // 4, rng)
        else:
            s["seq_q"] = near(min(s["seq_q"], 2048) // 2, rng)
            s["seq_kv"] = near(min(s["seq_kv"], 2048) // 2, rng) if rng.random() < 0.5 else s["seq_q"]
    elif "cols" in s:  # softmax, norms
        s["rows"] = near(min(s["rows"], 4096) // 4, rng)
        s["cols"] = near(s["cols"], rng)
    elif "tokens" in s:  # rope
        s["tokens"] = near(min(s["tokens"], 4096) // 4, rng)
        kv_heads = rng.choice((1, 2, 4))
        s["kv_heads"], s["heads"] = kv_heads, kv_heads * rng.choice((1, 3, 4))
    return s


def _accepted(spec: dict) -> None:
    build_instances(parse_specs(yaml.safe_dump([spec], sort_keys=False), "specs/random.yaml"))


def variants(seed_spec: dict, per_seed: int, rng: random.Random, refused: collections.Counter) -> list[dict]:
    out = []
    search = seed_spec.get("search") or {}
    for i in range(per_seed):
        s = {k: copy.deepcopy(v) for k, v in seed_spec.items() if k != "search"}
        s["name"] = f"{seed_spec['name'][:40]}_r{i}"
        if i % 2 == 0 and search:
            target, block = next(iter(search.items()))
            merge(s, pick(rng.choice(block if isinstance(block, list) else [block]), rng))
            s["targets"] = [target]  # (another target's overrides are then refused: override_target)
        s["shapes"] = [shape_near(s["shapes"][0], rng)]
        try:
            try:
                _accepted(s)
            except (SpecError, SpecErrors) as exc:
                if "[tail_policy]" not in str(exc):
                    raise
                s["tail"] = "predicated"
                _accepted(s)
        except (SpecError, SpecErrors) as exc:
            for line in str(exc).splitlines():
                m = re.search(r"\[([a-z_0-9]+)\]\s*$", line)
                refused[m.group(1) if m else "?"] += 1
            continue
        out.append(s)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the project folder to write (tilegen.toml, specs/random.yaml)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--per-seed", type=int, default=2)
    ap.add_argument("--only", default="", help="only the seeds whose name matches this regular expression")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    refused: collections.Counter = collections.Counter()
    specs = []
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        for seed_spec in yaml.safe_load(path.read_text(encoding="utf-8")):
            if not args.only or re.search(args.only, seed_spec["name"]):
                specs += variants(seed_spec, args.per_seed, rng, refused)
    (args.out / "specs").mkdir(parents=True, exist_ok=True)
    (args.out / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (args.out / "specs" / "random.yaml").write_text(yaml.safe_dump(specs, sort_keys=False), encoding="utf-8")
    print(f"{len(specs)} specs written to {args.out / 'specs' / 'random.yaml'}; "
          f"{sum(refused.values())} variants refused by the rules: "
          + ", ".join(f"{rule} {n}" for rule, n in refused.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
