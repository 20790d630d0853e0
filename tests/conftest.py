"""What the test modules share in one run (`bash tools/test.sh` runs them in parallel with pytest-xdist).

`build_cache`: one build cache for the whole run, every module and every xdist worker: a kernel that
several modules build (the first shape of a committed instance) is built once. The cache takes a lock per
entry, so two workers that want the same entry build it once and the other reads it. A test that needs
a cold cache (one that checks a build *happens*, or interrupts it) keeps its own tmp_path.

`lower_once`: TileLang lowering with the run's memo of lowered sources (one file per instance text, compile
shape and target, in the run's folder): test_kernels lowers every (instance, shape), test_lowering the first
shapes of the GEMMs again for their structure. Both are marked `xdist_group("lowering")`, so under
`--dist loadgroup` they run in one worker, one after the other, and a source is lowered once.

test_build marks the tests of its build of every committed instance `xdist_group("build-grid")`: under
`--dist loadgroup` they run in one worker, which builds the grid once with its own build workers. The grid's
builds lower the first shape of each hand instance of the targets whose compiler is here (tests/toolchains.py);
test_kernels leaves those to it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from codegen.core.files import write_text_atomic
from codegen.core.hardware import Target
from codegen.generate.lower import LoweredKernel, lower
from codegen.generate.render import RenderedFile


def _run_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder of this run that every xdist worker sees (each worker's basetemp is a folder of the run's)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / name
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run_folder(tmp_path_factory, "build-cache")


LowerOnce = Callable[[RenderedFile, tuple, Target], LoweredKernel]


@pytest.fixture(scope="session")
def lower_once(tmp_path_factory: pytest.TempPathFactory) -> LowerOnce:
    folder = _run_folder(tmp_path_factory, "lowered")

    def lowered(rendered: RenderedFile, shape: tuple, target: Target) -> LoweredKernel:
        target = Target(target)
        compile_shape = tuple(rendered.instance.compile_shape(shape))
        key = json.dumps([rendered.text, list(compile_shape), target.value])
        path = folder / f"{hashlib.sha256(key.encode()).hexdigest()}.src"
        if path.is_file():
            return LoweredKernel(uri=rendered.uri, target=target, shape=compile_shape,
                                 source=path.read_bytes().decode("utf-8"))
        kernel = lower(rendered, shape, target)
        write_text_atomic(path, kernel.source)
        return kernel

    return lowered
