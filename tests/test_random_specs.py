"""tools/random_specs.py: the project it writes holds only specs the rules accept, the same for the same seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

ROOT = Path(__file__).resolve().parents[1]
ONLY = "^(gemm_fp16_nt|gemm_bf16_swiglu|attn_fp16_decode|softmax_fp16_vocab|rope_fp16_llama3_8b|rmsnorm_bf16_add)$"


def _write(out: Path, seed: int) -> str:
    subprocess.run([sys.executable, str(ROOT / "tools" / "random_specs.py"), str(out), "--seed", str(seed),
                    "--per-seed", "4", "--only", ONLY], check=True, capture_output=True, text=True)
    return (out / "specs" / "random.yaml").read_text(encoding="utf-8")


def test_random_specs_are_valid_varied_and_reproducible(tmp_path):
    text = _write(tmp_path / "a", 0)
    assert text == _write(tmp_path / "b", 0)
    assert text != _write(tmp_path / "c", 1)
    assert (tmp_path / "a" / "tilegen.toml").is_file()
    specs = yaml.safe_load(text)
    assert len(specs) >= 12  # most of 6 seeds x 4 variants pass the rules
    instances = build_instances(parse_specs(text, "specs/random.yaml"))
    assert {i.op for i in instances} >= {"gemm", "attention", "softmax", "rope", "rmsnorm"}
