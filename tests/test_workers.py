"""codegen.core.workers: workers started for a user's code leave the parent's main module alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A user's script without an `if __name__ == "__main__":` guard: its top level writes a line, then runs two tasks
# on spawned workers. Python's spawn runs that top level again in each worker (another line each, and a worker
# that dies starting its own pool); with run_main=False the workers run the tasks and nothing else.
SCRIPT = """\
import math, os, sys
sys.path.insert(0, {repo!r})
from codegen.core.workers import WorkerPool
with open({log!r}, "a") as f:
    f.write(f"top level in {{os.getpid()}}\\n")
with WorkerPool(2, run_main={run_main}) as pool:
    outcomes = dict(pool.imap_unordered(math.sqrt, [4.0, 9.0]))
print(sorted((i, o.value, o.error) for i, o in outcomes.items()))
"""


def _run_script(tmp_path: Path, run_main: bool) -> tuple[subprocess.CompletedProcess, int]:
    log = tmp_path / "log.txt"
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT.format(repo=str(REPO), log=str(log), run_main=run_main), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    return proc, log.read_text(encoding="utf-8").count("top level")


def test_workers_without_main_run_a_guardless_scripts_tasks_and_not_its_top_level(tmp_path):
    proc, top_levels = _run_script(tmp_path, run_main=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[(0, 2.0, None), (1, 3.0, None)]", proc.stderr[-2000:]
    assert top_levels == 1
    assert "RuntimeError" not in proc.stderr


def test_by_default_workers_run_the_main_module_as_spawn_does(tmp_path):
    """The control: spawn's own behaviour, which the test above must not see (each worker runs the script's top
    level, and dies starting a pool of its own)."""
    proc, top_levels = _run_script(tmp_path, run_main=True)
    assert top_levels > 1
    assert "worker died" in proc.stdout


def test_ops_precompile_starts_its_workers_without_the_main_module(monkeypatch):
    from codegen.core import workers
    from codegen.ops import cache as ops_cache

    seen = {}

    class Pool:
        def __init__(self, processes, **kwargs):
            seen.update(kwargs)

        def __enter__(self):
            raise _Stop

        def __exit__(self, *exc):
            return False

    class _Stop(Exception):
        pass

    class Cache:
        root = Path("/nonexistent")

        def key(self, rendered, shape, environment):
            return "k"

        def is_complete(self, key):
            return False

    class Rendered:
        uri = "u"

    monkeypatch.setattr(workers, "WorkerPool", Pool)
    with pytest.raises(_Stop):
        ops_cache.precompile(Cache(), [(Rendered(), (1,))], {}, None, workers=2)
    assert seen.get("run_main") is False
