"""TileLang lowering of generated modules to device source (HIP C++ for gfx942/gfx950, CUDA C++ for sm_90).

Works on a machine without a GPU: lowering stops at device source and needs no driver.
"""

from __future__ import annotations

import linecache
import sys
import types
from dataclasses import dataclass
from pathlib import PurePosixPath

from codegen.core.errors import TilegenError
from codegen.core.hardware import Target
from codegen.generate.render import RenderedFile
from codegen.targets import HARDWARE, TARGETS


@dataclass(frozen=True, kw_only=True)
class LoweredKernel:
    uri: str
    target: Target
    shape: tuple[int, ...]
    source: str

    @property
    def suffix(self) -> str:
        return TARGETS[self.target].source_suffix

    @property
    def relpath(self) -> PurePosixPath:
        return PurePosixPath(self.target.value) / self.uri / ("x".join(map(str, self.shape)) + self.suffix)


def load_module(rendered: RenderedFile) -> types.ModuleType:
    """Import a rendered module from its text (no file needed). TileLang reads the source of
    decorated functions, so the text is registered with linecache under the module's path."""
    filename = f"<tilegen>/{rendered.path}"
    linecache.cache[filename] = (len(rendered.text), None, rendered.text.splitlines(True), filename)
    module = types.ModuleType(rendered.uri)
    module.__file__ = filename
    sys.modules[rendered.uri] = module
    exec(compile(rendered.text, filename, "exec"), module.__dict__)  # noqa: S102 - our own rendered module
    return module


def prim_func(module: types.ModuleType, shape: tuple[int | str, ...]):
    """A generated module's prim_func at one compile shape (InstanceBase.compile_shape): make_kernel(*sizes);
    where a size is symbolic (given by its name, a dynamic-M GEMM's 'm'), make_dynamic_kernel(*shape)."""
    if any(isinstance(d, str) for d in shape):
        return module.make_dynamic_kernel(*shape)
    return module.make_kernel(*shape)


def lower(rendered: RenderedFile, shape: tuple[int | str, ...], target: Target) -> LoweredKernel:
    """Lower one generated kernel at one problem size for `target` (at its compile shape: a dynamic-M kernel
    is lowered once for every M)."""
    import tilelang
    from tvm.target import Target as TvmTarget

    module = load_module(rendered)
    tl_target = dict(HARDWARE[target].tilelang_target)
    shape = rendered.instance.compile_shape(shape)
    try:
        func = prim_func(module, shape)
        with TvmTarget(tl_target):
            artifact = tilelang.lower(func, target=tl_target)
    except Exception as exc:  # TileLang raises many types; report them as one line per kernel
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TilegenError(f"{rendered.path}: lowering {shape} for {target} failed: {type(exc).__name__}: {first}") from exc
    source = artifact.kernel_source
    return LoweredKernel(uri=rendered.uri, target=target, shape=tuple(shape), source=source)

