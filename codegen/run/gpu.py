"""Running generated kernels on the GPU that is present, contained in worker processes.

A kernel that faults (illegal address, device assert) kills its CUDA context; one that hangs never
returns. So kernels run in a worker process that is restarted after any CUDA error, death or
timeout, and the parent carries on with the next instance. Compilation is done first, in
parallel, into TileLang's on-disk kernel cache, so each worker only loads compiled kernels. A Ctrl-C
reaches the parent only, which stops every worker (codegen.core.workers).
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.reduction import ForkingPickler

from codegen.core.hardware import DType, Target
from codegen.core.workers import (
    CTX,
    WorkerPool,
    end_processes,
    load_tilelang,
    set_tilelang_log_level,
    start_process,
    tilelang_log_level,
    worker_signals,
)
from codegen.generate.render import RenderedFile
from codegen.targets import HARDWARE, TARGETS
from codegen.targets.base import DeviceMatch


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    name: str
    vendor: str  # "nvidia" | "amd"
    run_target: Target  # the tilegen target whose TileLang target compiles for this GPU
    l2_bytes: int
    torch_version: str
    runtime_version: str  # CUDA or HIP version of torch
    # the GPUs of this model that verify/bench/tune spread their cases over, one worker process each, as
    # `visible_devices_env` names them (a parent already pinned to "2,3" gives ("2", "3"))
    devices: tuple[str, ...] = ("0",)
    visible_devices_env: str = "CUDA_VISIBLE_DEVICES"

    def using(self, count: int | None) -> GpuInfo:
        """This GPU with its cases spread over the first `count` devices only (None: all of them)."""
        if count is None:
            return self
        if not 1 <= count <= len(self.devices):
            raise ValueError(f"--gpus {count}: this machine has {len(self.devices)} {self.name}")
        return replace(self, devices=self.devices[:count])


class NoGpu(Exception):
    """No usable GPU: the message says why (no torch GPU build, no device, unsupported arch)."""


def detect_gpu() -> GpuInfo:
    try:
        import torch
    except ImportError as exc:
        raise NoGpu(f"torch is not importable ({exc})") from None
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        raise NoGpu(f"torch {torch.__version__} is a CPU-only build (no CUDA/ROCm)")
    if not torch.cuda.is_available():
        raise NoGpu(f"torch {torch.__version__} sees no GPU")
    props = torch.cuda.get_device_properties(0)
    reasons = []
    for spec in TARGETS.values():  # each target module recognises its own devices
        match = spec.match_device(torch, props)
        if isinstance(match, DeviceMatch):
            return GpuInfo(name=props.name, vendor=match.vendor, run_target=spec.target, l2_bytes=props.L2_cache_size,
                           torch_version=torch.__version__, runtime_version=match.runtime_version,
                           devices=same_model_devices(torch, props.name, os.environ.get(match.visible_devices_env)),
                           visible_devices_env=match.visible_devices_env)
        if match is not None:
            reasons.append(match)
    raise NoGpu(reasons[0] if reasons else f"{props.name} is not a device of any target "
                                           f"({', '.join(t.value for t in TARGETS)})")


def same_model_devices(torch, name: str, visible: str | None) -> tuple[str, ...]:
    """The ids (as the visible-devices variable names them) of the GPUs torch sees that are `name`: torch's
    device i is the i-th entry of an inherited CUDA_/HIP_VISIBLE_DEVICES, or GPU i where it is unset."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    out = []
    for i in range(torch.cuda.device_count()):
        if torch.cuda.get_device_properties(i).name == name:
            out.append(ids[i] if ids and i < len(ids) else str(i))
    return tuple(out) or ("0",)


def run_label(inst_target: Target, run_target: Target) -> str:
    if inst_target == run_target:
        return ""
    return f"logic check: the {inst_target} program run on {run_target}, not {inst_target} performance"


def unsupported_on(rendered: RenderedFile, run_target: Target) -> str | None:
    """Why this instance cannot run on `run_target` at all, or None."""
    inst = rendered.instance
    if inst.target == run_target:
        return None
    ours, theirs = HARDWARE[inst.target].tilelang_dtypes, HARDWARE[run_target].tilelang_dtypes
    for d in dict.fromkeys(DType(x) for x in inst.spec_dtypes):
        if ours[d] != theirs[d]:  # e.g. fp8 e4m3: fnuz on gfx942, fn on sm_90
            return f"{ours[d]} has no {run_target} type (TileLang's {HARDWARE[run_target].tilelang_target['kind'].upper()} codegen rejects it)"
    return None


# ---------------------------------------------------------------- compilation (parallel, cached)
def compile_kernel(rendered: RenderedFile, shape: tuple[int | str, ...], run_target: Target):
    """Compile (or load from TileLang's cache) one kernel for the GPU present, at the compile shape of `shape`
    (InstanceBase.compile_shape): a dynamic-M kernel is one compile -- one TileLang cache entry, its prim_func
    the same whatever M -- that launches at any M of its range."""
    tilelang = load_tilelang()
    from tvm.target import Target as TvmTarget

    from codegen.generate.lower import load_module, prim_func

    module = load_module(rendered)
    tl_target = dict(HARDWARE[run_target].tilelang_target)
    with TvmTarget(tl_target):
        return tilelang.compile(prim_func(module, rendered.instance.compile_shape(shape)), target=tl_target)


def _compile_job(rendered: RenderedFile, shape, run_target: Target) -> tuple[str, tuple, float, str]:
    t0 = time.perf_counter()
    try:
        compile_kernel(rendered, shape, run_target)
        return rendered.uri, tuple(shape), time.perf_counter() - t0, ""
    except Exception as exc:  # noqa: BLE001 - reported per kernel; the run goes on
        return rendered.uri, tuple(shape), time.perf_counter() - t0, f"{type(exc).__name__}: {_first_line(exc)}"


def _compile_worker_init(log_level: int) -> None:
    set_tilelang_log_level(log_level)  # applied when compile_kernel imports tilelang


def _compile_task(task: tuple[RenderedFile, tuple, Target]) -> tuple[str, tuple, float, str]:
    return _compile_job(*task)


def compile_tasks(jobs: list[tuple[RenderedFile, tuple]]) -> dict[tuple[str, tuple], list[int]]:
    """The jobs grouped by what one compilation serves, (uri, compile shape) -> the indices of its jobs in
    order: one group per job, except that a dynamic-M kernel's shapes share one compile."""
    groups: dict[tuple[str, tuple], list[int]] = {}
    for i, (r, s) in enumerate(jobs):
        groups.setdefault((r.uri, r.instance.compile_shape(s)), []).append(i)
    return groups


def precompile(jobs: list[tuple[RenderedFile, tuple]], run_target: Target, *, workers: int, progress=None,
               on_result=None, on_pool=None) -> dict:
    """Compile every (kernel, shape) into TileLang's disk cache in parallel, once per compile shape (a dynamic-M
    kernel once for all its M); {(uri, shape): error} for every job of a failed compile. As each compile
    ends, for each of its jobs: progress() and on_result(index into jobs, error or ""). on_pool(pool) is
    called with the WorkerPool once it exists (a caller in another thread may end it: WorkerPool.terminate)."""
    errors: dict[tuple[str, tuple], str] = {}
    if not jobs:
        return errors
    groups = list(compile_tasks(jobs).values())
    tasks = [(jobs[group[0]][0], tuple(jobs[group[0]][1]), run_target) for group in groups]
    with WorkerPool(min(workers, len(tasks)), initializer=_compile_worker_init,
                    initargs=(tilelang_log_level(),)) as pool:
        if on_pool is not None:
            on_pool(pool)
        for g, outcome in pool.imap_unordered(_compile_task, tasks):
            error = outcome.value[3] if outcome.ok else outcome.error  # a dead worker fails its kernel only
            for i in groups[g]:
                r, shape = jobs[i]
                if error:
                    errors[(r.uri, tuple(shape))] = error
                if progress is not None:
                    progress()
                if on_result is not None:
                    on_result(i, error)
    return errors


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TileLang/nvcc errors put the useful line last; tracebacks put it first
    for ln in reversed(lines):
        if "error" in ln.lower():
            return ln.strip()[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def release_cached_memory() -> None:
    """In a worker: hand torch's cached GPU memory back to the driver (nothing where torch never started CUDA)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- contained execution
def _is_context_fatal(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("CUDA error", "AcceleratorError", "illegal", "device-side assert", "HIP error",
                                   "launch failure"))


def _worker_main(conn, log_level: int, env: dict[str, str] | None = None) -> None:
    worker_signals()
    os.environ.update(env or {})  # before anything in this process starts the GPU runtime
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    set_tilelang_log_level(log_level)  # applied when compile_kernel imports tilelang
    conn.send(("ready",))
    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        try:
            task = ForkingPickler.loads(data)  # imports the modules of the task's function and arguments
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", f"cannot load the task: {type(exc).__name__}: {_first_line(exc)}", False,
                       traceback.format_exc()[-4000:]))
            continue
        if task is None:
            return
        conn.send(("started",))  # the call's time limit starts now
        fn, args = task
        try:
            conn.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
            conn.send(("error", f"{type(exc).__name__}: {_first_line(exc)}", _is_context_fatal(exc),
                       traceback.format_exc()[-4000:]))
            if _is_context_fatal(exc):
                return


class ContainedRunner:
    """Runs functions in a worker process; restarts it after a crash, a CUDA error or a timeout."""

    # a spawned worker re-imports torch/tilelang, and the first call of a function imports its module: slow on
    # a busy machine, and not part of a call's time limit
    STARTUP_TIMEOUT_S = 300.0

    def __init__(self, timeout_s: float, env: dict[str, str] | None = None):
        self.timeout_s = timeout_s  # per call, counted from when the worker has loaded the call and starts it
        self.env = dict(env or {})  # set in the worker first thing (the GPU it is pinned to)
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        parent, child = CTX.Pipe()

        def started(proc) -> None:
            self._proc, self._conn = proc, parent

        start_process(_worker_main, (child, tilelang_log_level(), self.env), daemon=True, started=started)
        child.close()
        if not parent.poll(self.STARTUP_TIMEOUT_S) or parent.recv() != ("ready",):
            self._stop(kill=True)
            raise RuntimeError(f"worker did not start within {self.STARTUP_TIMEOUT_S:.0f} s")

    def _stop(self, kill: bool) -> None:
        if self._proc is None:
            return
        if kill:
            self._proc.kill()
        else:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._proc = self._conn = None

    def call(self, fn, *args) -> tuple[bool, object, str]:
        """(ok, value-or-error-line, log)."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((fn, args))
        try:
            if not self._conn.poll(self.STARTUP_TIMEOUT_S):
                self._stop(kill=True)
                return False, f"the worker did not load the call within {self.STARTUP_TIMEOUT_S:.0f} s", ""
            reply = self._conn.recv()
            if reply == ("started",):
                if not self._conn.poll(self.timeout_s):
                    self._stop(kill=True)
                    return False, f"timed out after {self.timeout_s:.0f} s (worker killed)", ""
                reply = self._conn.recv()
        except EOFError:
            self._proc.join(timeout=10)
            code = self._proc.exitcode
            self._stop(kill=True)
            return False, f"worker died (exit code {code})", ""
        if reply[0] == "ok":
            return True, reply[1], ""
        _, line, fatal, log = reply
        if fatal:
            self._stop(kill=True)
        return False, line, log

    @property
    def process(self):
        """The worker process now running, if any."""
        return self._proc

    def close(self) -> None:
        self._stop(kill=False)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        elif self._proc is not None:  # Ctrl-C: no waiting for the kernel that is running
            end_processes([self._proc])
            self._proc = self._conn = None
