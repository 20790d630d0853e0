"""examples/llama_layer/run.py end to end on the CPU, in its hidden --smoke mode (the Llama layer at small sizes;
tilegen.load given the tests' kernels that compute with torch; no torch.compile or CUDA-graph rows): the script's
agreement checks pass, its three broken ops are each caught, and it writes the report its docstring names. What
runs on the GPU is the same code at Llama-3-8B sizes. Skipped where transformers is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
DRIVER = """\
import sys
sys.path[:0] = [{example!r}, {root!r}, {tests!r}]
import tilegen
from codegen.core.hardware import Target
from opsfakes import TorchKernels
load = tilegen.load
tilegen.load = lambda root, **kw: load(root, backend=TorchKernels(), target=Target.SM_90, device_name="NVIDIA H200")
import run
sys.exit(run.main(["--smoke", "--reports", {out!r}, "--iters", "1", "--no-compile", "--no-graphs"]))
"""


def test_the_llama_example_runs_its_checks_and_catches_its_broken_ops(tmp_path):
    driver = tmp_path / "smoke.py"
    driver.write_text(DRIVER.format(example=str(ROOT / "examples" / "llama_layer"), root=str(ROOT),
                                    tests=str(ROOT / "tests"), out=str(tmp_path / "out")), encoding="utf-8")
    done = subprocess.run([sys.executable, str(driver)], check=False, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASS: the checks agree with the tolerance model" in done.stdout
    report = json.loads((tmp_path / "out" / "llama_layer_cpu_smoke_run.json").read_text(encoding="utf-8"))
    assert report["passed"]
    checks = {(c["phase"], c["name"]): c for c in report["checks"]}
    controls = ("rope_wrong_way", "down_proj_k_tile_dropped", "fused_mlp_gate_up_swapped")
    for phase in ("prefill", "decode"):
        for name in ("transformers (bf16)", "tilegen (bf16)", "tilegen fused (bf16)"):
            assert checks[(phase, name)]["passed"], (phase, name)
        for control in controls:
            c = checks[(phase, f"control: {control}")]
            assert c["caught"] and not c["passed"], (phase, control)
    assert {(t["phase"], t["mode"]) for t in report["timings"]} == {("prefill", "eager"), ("decode", "eager")}
    # the fused layer's other ops, each timed beside the torch code it replaces
    assert "other_ops_error" not in report
    assert {(r["phase"], r["op"]) for r in report["other_ops"]} == {
        ("prefill", "attention"), ("prefill", "rmsnorm"), ("prefill", "add_rmsnorm"), ("prefill", "rope"),
        ("decode", "attention_decode"), ("decode", "rmsnorm"), ("decode", "add_rmsnorm"), ("decode", "rope")}
    assert all(r["tilegen_ms"] > 0 and r["torch_ms"] > 0 for r in report["other_ops"])
    assert (tmp_path / "out" / "llama_layer_cpu_smoke_run.md").is_file()
