"""Compile once: the TileLang kernels behind the ops, cached on disk under the project (.cache/ops/).

An entry is one compiled kernel: one configuration (its uri) at one compile shape (a dynamic-M kernel: one
entry for every M), for one device and software stack. Its key is the sha256 of the key material, like the
build cache's (codegen.build.cache.cache_key): the uri, the sha256 of the rendered code (`RenderedFile.code_sha256`),
the compile shape, the run target, the TileLang version, the device compiler's fingerprint, the device name,
the torch and CUDA/HIP runtime versions, and the code of the compile path (codegen/run/gpu.py, codegen/generate/lower.py).
Any of them changing is a miss: a tune or a template edit that changes the code, a new TileLang or CUDA,
another GPU model.

Inside an entry, TileLang keeps its own kernel cache (`tilelang.compile` with TILELANG_CACHE_DIR pointed
at the entry's `tilelang/` folder for the call): a second process finds the compiled library there and
loads it without running the compiler. `entry.json` (the material and the compile time) is written last,
atomically, so an entry without it was never finished. Compiles of one key are serialised by a file lock
(two processes compile it once); TILELANG_CACHE_DIR is process-wide, so compiles in one process are
serialised by a lock too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from codegen.build.cache import BuildCache, cache_key
from codegen.core.files import write_text_atomic
from codegen.core.hardware import Target
from codegen.generate.render import RenderedFile

CACHE_SUBDIR = Path(".cache") / "ops"
ENTRY_FILE = "entry.json"
TILELANG_SUBDIR = "tilelang"
TILELANG_CACHE_ENV = "TILELANG_CACHE_DIR"
# the code a compile runs through besides the rendered module: its text is in every key
COMPILE_PATH_FILES = {"gpu.py": "codegen.run.gpu", "lower.py": "codegen.generate.lower"}

_ENV_LOCK = threading.Lock()  # TILELANG_CACHE_DIR is one variable per process


def _compile_path_sha256() -> str:
    h = hashlib.sha256()
    for name, module in COMPILE_PATH_FILES.items():  # each module's source, found without importing it
        h.update(name.encode() + b"\0" + Path(importlib.util.find_spec(module).origin).read_bytes() + b"\0")
    return h.hexdigest()


def environment_material(*, target: Target, device: str, torch_version: str, runtime_version: str,
                         tilelang_version: str, toolchain: Mapping[str, object]) -> dict[str, object]:
    """What every key of one process shares: where the kernels run and what compiles them."""
    return {"target": target.value, "device": device, "torch": torch_version, "runtime": runtime_version,
            "tilelang": tilelang_version, "toolchain": dict(toolchain), "compile_path_sha256": _compile_path_sha256()}


def local_environment(target: Target, gpu) -> dict[str, object]:
    """environment_material for the GPU present (codegen.run.gpu.GpuInfo) and the installed TileLang; the device
    compiler's fingerprint where it is found (TileLang finds nvcc / hipcc the same way), else why not."""
    from codegen.core.toolchain import ToolchainMissing, find_tilelang
    from codegen.targets import find_toolchain

    try:
        toolchain = find_toolchain(target, Path.cwd()).fingerprint()
    except ToolchainMissing as exc:
        toolchain = {"missing": str(exc)}
    return environment_material(target=target, device=gpu.name, torch_version=gpu.torch_version,
                                runtime_version=gpu.runtime_version, tilelang_version=find_tilelang().version,
                                toolchain=toolchain)


def kernel_material(rendered: RenderedFile, compile_shape: tuple, environment: Mapping[str, object]) -> dict:
    return {"kind": "ops", "uri": rendered.uri, "code_sha256": rendered.code_sha256,
            "shape": list(compile_shape), **environment}


@dataclass(frozen=True, kw_only=True)
class CacheEvent:
    """One kernel made ready in this process: loaded from a finished entry (hit) or compiled into a new one."""

    uri: str
    shape: tuple  # the compile shape
    key: str
    hit: bool
    seconds: float  # compile, or load, until the kernel object existed


CompileFn = Callable[[RenderedFile, tuple, Target], object]  # codegen.run.gpu.compile_kernel's signature


def _default_compile(rendered: RenderedFile, shape: tuple, target: Target):
    from codegen.run import gpu

    return gpu.compile_kernel(rendered, shape, target)


@dataclass(frozen=True)
class OpsCache:
    """The entries under `root` (the project's .cache/ops)."""

    root: Path

    @classmethod
    def of_project(cls, project_root: Path) -> OpsCache:
        return cls(project_root / CACHE_SUBDIR)

    @property
    def _store(self) -> BuildCache:  # its entry paths and file locks
        return BuildCache(self.root)

    def key(self, rendered: RenderedFile, compile_shape: tuple, environment: Mapping[str, object]) -> str:
        return cache_key(kernel_material(rendered, compile_shape, environment))

    def entry(self, key: str) -> Path:
        return self._store.entry(key)

    def is_complete(self, key: str) -> bool:
        return (self.entry(key) / ENTRY_FILE).is_file()

    def get(self, rendered: RenderedFile, compile_shape: tuple, environment: Mapping[str, object], target: Target,
            compile_fn: CompileFn = _default_compile) -> tuple[object, CacheEvent]:
        """The kernel of (configuration, compile shape): loaded from its entry, or compiled into it."""
        material = kernel_material(rendered, compile_shape, environment)
        key = cache_key(material)
        entry = self.entry(key)
        with self._store.lock(key):
            hit = self.is_complete(key)
            t0 = time.perf_counter()
            kernel = _compile_into(entry, rendered, compile_shape, target, compile_fn)
            seconds = time.perf_counter() - t0
            if not hit:
                _finish(entry, material, seconds)
        return kernel, CacheEvent(uri=rendered.uri, shape=tuple(compile_shape), key=key, hit=hit, seconds=seconds)


def _compile_into(entry: Path, rendered: RenderedFile, shape: tuple, target: Target, compile_fn: CompileFn):
    """compile_fn with TileLang's kernel cache in `entry` for the call (and the previous value back after it)."""
    folder = entry / TILELANG_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    with _ENV_LOCK:
        before = os.environ.get(TILELANG_CACHE_ENV)
        os.environ[TILELANG_CACHE_ENV] = str(folder)
        try:
            return compile_fn(rendered, tuple(shape), target)
        finally:
            if before is None:
                os.environ.pop(TILELANG_CACHE_ENV, None)
            else:
                os.environ[TILELANG_CACHE_ENV] = before


def _finish(entry: Path, material: Mapping[str, object], seconds: float) -> None:
    doc = {"material": dict(material), "compile_seconds": round(seconds, 3)}
    write_text_atomic(entry / ENTRY_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")


# ---- compiling many kernels in parallel (worker processes), before the first calls --------------------------

def _precompile_task(task: tuple) -> tuple[str, tuple, float, str]:
    """In a worker: compile one (kernel, compile shape) into its entry unless it is complete."""
    root, rendered, shape, environment, target = task
    cache = OpsCache(Path(root))
    t0 = time.perf_counter()
    try:
        cache.get(rendered, shape, environment, target)
    except Exception as exc:  # noqa: BLE001 - reported per kernel; the others go on
        text = str(exc).strip().splitlines()
        return rendered.uri, tuple(shape), time.perf_counter() - t0, f"{type(exc).__name__}: {text[-1] if text else ''}"
    return rendered.uri, tuple(shape), time.perf_counter() - t0, ""


@dataclass(frozen=True, kw_only=True)
class PrecompileReport:
    kernels: int  # distinct (configuration, compile shape)
    cached: int  # of them, already complete in the cache
    errors: dict[tuple[str, tuple], str]  # (uri, compile shape) -> the compile error
    seconds: float


def precompile(cache: OpsCache, jobs: list[tuple[RenderedFile, tuple]], environment: Mapping[str, object],
               target: Target, *, workers: int) -> PrecompileReport:
    """Compile every (kernel, compile shape) of `jobs` whose entry is not complete, `workers` at a time in worker
    processes (codegen.core.workers.WorkerPool, as `tilegen verify` compiles); the processes that call the kernels
    then load them from their entries."""
    from codegen.core.workers import WorkerPool, set_tilelang_log_level, tilelang_log_level

    t0 = time.perf_counter()
    unique = {(r.uri, tuple(s)): (r, tuple(s)) for r, s in jobs}
    todo = [(r, s) for r, s in unique.values() if not cache.is_complete(cache.key(r, s, environment))]
    errors: dict[tuple[str, tuple], str] = {}
    if todo:
        tasks = [(str(cache.root), r, s, dict(environment), target) for r, s in todo]
        # run_main=False: the caller's main module may be a script without a __main__ guard (workers.start_process)
        with WorkerPool(max(1, min(workers, len(tasks))), initializer=set_tilelang_log_level,
                        initargs=(tilelang_log_level(),), run_main=False) as pool:
            for i, outcome in pool.imap_unordered(_precompile_task, tasks):
                error = outcome.value[3] if outcome.ok else outcome.error
                if error:
                    errors[(todo[i][0].uri, todo[i][1])] = error
    return PrecompileReport(kernels=len(unique), cached=len(unique) - len(todo), errors=errors,
                            seconds=time.perf_counter() - t0)


def compile_seconds(cache: OpsCache, key: str) -> float | None:
    """How long the compile that made entry `key` took (its entry.json), None if it is not complete."""
    try:
        return float(json.loads((cache.entry(key) / ENTRY_FILE).read_text(encoding="utf-8"))["compile_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
