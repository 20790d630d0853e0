"""Ray as the engine for more than one machine (`tilegen tune --ray ADDRESS|auto`, extra `tilegen[ray]`).

`RayPool` has the interface of codegen.core.workers.WorkerPool that the stages use (`imap_unordered`, a context
manager), so a build or a GPU case runs as a Ray task instead of in a local worker process: one CPU per build,
one GPU per verify/bench case (Ray pins each GPU task with CUDA_/HIP_VISIBLE_DEVICES). A task that raises or
whose worker dies fails its item only, as in the local pool.

What every node needs: tilegen installed with the same versions (`pip install 'tilegen[ray]'`), and the
project folder on a filesystem every node sees at the same path (builds publish into the project's build
cache, `.cache/build`, which the driver reads back; GPU cases load the kernels TileLang compiled there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Self

from codegen.core.errors import TilegenError
from codegen.core.workers import Outcome

_initialised: set[tuple] = set()  # in a Ray worker process: the initializers already run there


def _task(fn: Callable[[object], object], item: object, initializer, initargs: tuple) -> object:
    key = (initializer, initargs)
    if initializer is not None and key not in _initialised:
        initializer(*initargs)
        _initialised.add(key)
    return fn(item)


def _ray():
    try:
        import ray
    except ImportError:
        raise TilegenError("--ray needs Ray on this machine and every node: pip install 'tilegen[ray]'") from None
    return ray


def connect(address: str) -> None:
    """Join the Ray cluster at `address` ("auto": the one this machine runs, or RAY_ADDRESS)."""
    ray = _ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise TilegenError(f"--ray {address}: no Ray cluster to join ({str(exc).strip().splitlines()[0]}); "
                           "start one with `ray start --head`") from None


class RayPool:
    """Ray tasks with `num_cpus`/`num_gpus` each; `initializer(*initargs)` once per Ray worker process."""

    def __init__(self, address: str, *, num_cpus: float = 1, num_gpus: float = 0, initializer=None,
                 initargs: tuple = (), timeout_s: float | None = None):
        self.address = address
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.initializer, self.initargs = initializer, initargs
        self.timeout_s = timeout_s  # a task's result waited for at most this long after the one before it
        self._pending: list = []

    def __enter__(self) -> Self:
        connect(self.address)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._pending:  # Ctrl-C or an error: nothing of ours goes on running on the cluster
            ray = _ray()
            for ref in self._pending:
                ray.cancel(ref, force=True)
            self._pending = []

    def imap_unordered(self, fn: Callable[[object], object], items: Iterable[object]) -> Iterator[tuple[int, Outcome]]:
        """(index of the item, Outcome of fn(item)) for each item, as tasks finish."""
        ray = _ray()
        remote = ray.remote(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=0)(_task)
        refs = {remote.remote(fn, item, self.initializer, self.initargs): i for i, item in enumerate(items)}
        self._pending = list(refs)
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=self.timeout_s)
            if not ready:  # the slowest task outlived the timeout: every one still running is stopped
                for ref, i in list(refs.items()):
                    ray.cancel(ref, force=True)
                    yield refs.pop(ref), Outcome(error=f"timed out after {self.timeout_s:.0f} s (Ray task cancelled)")
                break
            for ref in ready:
                i = refs.pop(ref)
                self._pending.remove(ref)
                yield i, _outcome(ray, ref)
        self._pending = []

    def call(self, fn: Callable[..., object], *args) -> tuple[bool, object, str]:
        """One task, waited for: the (ok, value-or-error-line, log) of codegen.run.gpu.ContainedRunner.call."""
        ((_, outcome),) = list(self.imap_unordered(star, [(fn, args)]))
        return (True, outcome.value, "") if outcome.ok else (False, outcome.error, outcome.log)


def star(fn_args: tuple) -> object:
    fn, args = fn_args
    return fn(*args)


def _outcome(ray, ref) -> Outcome:
    try:
        return Outcome(value=ray.get(ref))
    except Exception as exc:  # noqa: BLE001 - a task's failure is its item's, never the run's
        cause = getattr(exc, "cause", None) or exc
        lines = [ln for ln in str(cause).strip().splitlines() if ln.strip()]
        return Outcome(error=f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300])
