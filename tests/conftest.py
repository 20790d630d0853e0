"""What the test modules share in one run (`bash tools/test.sh` runs them in parallel with pytest-xdist).

`build_cache`: one build cache for the whole run, every module and every xdist worker: a kernel that
several modules build (the first shape of a committed instance) is built once. The cache takes a lock per
entry, so two workers that want the same entry build it once and the other reads it. A test that needs
a cold cache (one that checks a build *happens*, or interrupts it) keeps its own tmp_path.

`grid` marks the tests of one expensive session fixture (test_build's build of every committed instance):
under `--dist loadgroup` they run in one worker, which builds the grid once with its own build workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GRID = pytest.mark.xdist_group("build-grid")


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp is a folder of the run's
        root = root.parent
    path = root / "build-cache"
    path.mkdir(exist_ok=True)
    return path
