"""Worker processes that a Ctrl-C always ends, started with the parent's TileLang log level.

A Ctrl-C at a terminal sends SIGINT to every process of the foreground process group (a hang-up, SIGHUP,
reaches them all too). Workers ignore both: they are spawned with them blocked (a spawned interpreter keeps
the mask, so not even its start-up, importing tilelang or torch, can be cut half-way) and then set them to
ignored. The parent alone gets KeyboardInterrupt (SIGTERM and SIGHUP raise Stopped, a KeyboardInterrupt, in
the CLI's process: the same way out), and on its way out it ends every worker it started (`stop`): SIGTERM,
which a worker turns into an exception inside the task it is running, so that its `finally` blocks
run (a build's staging folder is removed, a compiler subprocess is killed), and then exits; SIGKILL
for one still alive GRACE_S later (native code that does not return to Python). Each worker has its
own pipe, and no queue or lock is shared between processes, so no worker can be left waiting on one
that another process held when it died."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Self

CTX = mp.get_context("spawn")
GRACE_S = 5.0  # from SIGTERM to SIGKILL

_tilelang_log_level = logging.WARNING  # INFO with `tilegen --verbose`


# ---- TileLang's logger ---------------------------------------------------------------------------

def set_tilelang_log_level(level: int) -> None:
    """The level of TileLang's logger in this process (now, if tilelang is imported) and in the
    workers it starts from now on."""
    global _tilelang_log_level
    _tilelang_log_level = level
    if "tilelang" in sys.modules:
        logging.getLogger("tilelang").setLevel(level)


def tilelang_log_level() -> int:
    return _tilelang_log_level


def load_tilelang(level: int | None = None):
    """Import tilelang and set its logger's level (tilelang sets INFO when it is imported)."""
    import tilelang

    set_tilelang_log_level(_tilelang_log_level if level is None else level)
    return tilelang


# ---- signals -------------------------------------------------------------------------------------

class Terminated(BaseException):
    """Raised inside a worker's task by SIGTERM: the parent is stopping its workers."""


_busy = False  # a worker is inside a task: SIGTERM unwinds it rather than exiting at once


def _on_sigterm(signum, frame) -> None:
    if _busy:
        raise Terminated
    os._exit(128 + signum)


# A terminal sends these to its whole foreground process group (Ctrl-C; a hang-up, forwarded by the shell):
# a worker ignores them and the parent, which gets them too, stops it.
GROUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
# What ends a command as a Ctrl-C does, in the CLI's process: these and SIGTERM (`kill`, a service manager).
STOP_SIGNALS = GROUP_SIGNALS | {signal.SIGTERM}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP in the CLI's process (stop_on_signals): unwinds exactly as a Ctrl-C does, so
    every clean-up a Ctrl-C runs (workers ended, staging folders removed, no report half-written) runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def stop_on_signals() -> None:
    """In the CLI's process, main thread: SIGTERM and SIGHUP raise Stopped (one that is ignored, as under
    nohup, stays ignored)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _raise_stopped)


def stop_message(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The CLI's last line and exit code for a stop: "interrupted", 130 for a Ctrl-C; "stopped by SIGTERM",
    143 (128 + the signal number, as a shell reports it) for the others."""
    if isinstance(exc, Stopped):
        return f"stopped by {signal.Signals(exc.signum).name}", 128 + exc.signum
    return "interrupted", 128 + signal.SIGINT


def worker_signals() -> None:
    """A worker's signal set-up, first thing in it: ignore SIGINT and SIGHUP (the parent decides), turn
    SIGTERM into Terminated."""
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)  # one held since the spawn is dropped
    signal.signal(signal.SIGTERM, _on_sigterm)


@contextmanager
def deferred_termination() -> Iterator[None]:
    """Hold SIGTERM in a worker until the block is done (publishing a cache entry: two renames that
    belong together); it is then delivered."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def _stop_held() -> Iterator[None]:
    """Hold a stop signal (STOP_SIGNALS) until the block is done, then raise it: for starting a process and
    recording it, so that a worker is never started without the parent knowing it must stop it. The group
    signals are also blocked, so the spawned process starts with them blocked (SIGTERM is not: the parent
    may end a worker that is still importing). In another thread than the main one (verify's compile and
    GPU-feeding threads) only that thread's mask is set: the process's signals then go to the main
    thread, which handles them."""
    if threading.current_thread() is not threading.main_thread():
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return
    caught: list[int] = []
    held = [signum for signum in sorted(STOP_SIGNALS) if signal.getsignal(signum) not in (signal.SIG_IGN, None)]
    old_handlers = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in held}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a held signal runs the handler above
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    if caught:
        signal.raise_signal(caught[0])  # now, to the handler it was meant for (KeyboardInterrupt, Stopped)


@contextmanager
def _main_left_alone() -> Iterator[None]:
    """While a process is spawned: a module without a file or a spec stands in for `__main__`, so the child
    does not run the parent's main module again, as multiprocessing's spawn otherwise does. For workers
    started from a user's code (`tilegen.load(...).precompile()`), whose main module may be a script without
    an `if __name__ == "__main__":` guard: spawn would run its top level -- load a model, say -- again in
    every worker, which then dies trying to spawn its own. Such workers' targets and tasks must be functions
    of importable modules (not of __main__)."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = main


def start_process(target: Callable[..., object], args: tuple, *, daemon: bool = False,
                  started: Callable[[BaseProcess], None] | None = None, run_main: bool = True) -> BaseProcess:
    """Spawn `target(*args)` with SIGINT and SIGHUP blocked; `started(process)` records it before a held
    stop signal is raised. The target must call worker_signals() first. run_main=False: the child does not
    run the parent's main module (`_main_left_alone`); by default it does, as spawn does (the CLI's main
    modules are guarded, and tests set a fake GPU up in theirs).

    multiprocessing's resource tracker is started first, outside the blocked section: the spawn of
    the first worker of a process starts it, and its start-up ends with SIG_UNBLOCK of SIGINT (not a
    restore of the caller's mask), so a worker spawned right after would start with SIGINT deliverable
    and a Ctrl-C while it imports would print a KeyboardInterrupt traceback. Once it runs, a later
    ensure_running() returns without touching the mask."""
    resource_tracker.ensure_running()
    with _stop_held():
        proc = CTX.Process(target=target, args=args, daemon=daemon)
        with nullcontext() if run_main else _main_left_alone():
            proc.start()
        if started is not None:
            started(proc)
    return proc


def end_processes(procs: Iterable[BaseProcess], *, grace_s: float = GRACE_S) -> None:
    """SIGTERM to each live process, then SIGKILL to any still alive after `grace_s` (at once on a
    second Ctrl-C); every one is reaped."""
    procs = [p for p in procs if p.pid is not None]
    for p in procs:
        if p.exitcode is None:
            p.terminate()
    try:
        deadline = time.monotonic() + grace_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
        for p in procs:
            p.join()


# ---- the pool ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one task came to: its value, or an error line (an exception it raised, or its worker's death)."""

    value: object = None
    error: str | None = None
    log: str = ""  # the traceback, for an exception

    @property
    def ok(self) -> bool:
        return self.error is None


def _pool_worker(conn: Connection, initializer, initargs: tuple) -> None:
    global _busy
    worker_signals()
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent is gone
            os._exit(0)
        if task is None:
            return
        fn, args = task
        try:
            _busy = True
            try:
                reply = Outcome(value=fn(*args))
            except Terminated:
                raise
            except BaseException as exc:  # noqa: BLE001 -- every failure goes back to the parent
                reply = Outcome(error=f"{type(exc).__name__}: {exc}".strip().splitlines()[0],
                                log=traceback.format_exc()[-4000:])
            _busy = False
        except Terminated:
            os._exit(128 + signal.SIGTERM)
        conn.send(reply)


@dataclass
class _Worker:
    proc: BaseProcess
    conn: Connection


class WorkerPool:
    """Up to `processes` spawned workers running one task at a time each. Leaving the `with` block
    normally lets the workers exit; leaving it by an exception (KeyboardInterrupt) ends them (end_processes).
    run_main=False: the workers do not run the parent's main module (start_process)."""

    def __init__(self, processes: int, *, initializer: Callable[..., None] | None = None, initargs: tuple = (),
                 run_main: bool = True):
        self.processes = max(1, processes)
        self.initializer = initializer
        self.initargs = initargs
        self.run_main = run_main
        self._workers: list[_Worker] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        procs = [w.proc for w in self._workers]
        if exc_type is None:  # every task is done: the workers exit when told
            for w in self._workers:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            deadline = time.monotonic() + GRACE_S
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        end_processes(procs)
        for w in self._workers:
            w.conn.close()
        self._workers.clear()

    def terminate(self) -> None:
        """End every worker now. For another thread than the one in imap_unordered: that one then sees each
        task's worker die (an error outcome per task) and starts new workers only for tasks still to send."""
        end_processes([w.proc for w in list(self._workers)])

    def _start(self) -> _Worker:
        parent, child = CTX.Pipe()
        workers = self._workers

        def started(proc: BaseProcess) -> None:
            workers.append(_Worker(proc=proc, conn=parent))

        start_process(_pool_worker, (child, self.initializer, self.initargs), started=started, run_main=self.run_main)
        child.close()  # the worker holds the other end: its death reads as EOF here
        return workers[-1]

    def _retire(self, w: _Worker) -> str:
        w.proc.join(GRACE_S)
        code = w.proc.exitcode
        end_processes([w.proc])
        w.conn.close()
        self._workers.remove(w)
        return f"worker died (exit code {code})"

    def imap_unordered(self, fn: Callable[[object], object], items: Iterable[object]) -> Iterator[tuple[int, Outcome]]:
        """(index of the item, Outcome of fn(item)) for each item, as tasks finish. A worker that
        dies fails its task only; the next task gets a fresh worker."""
        todo = list(enumerate(items))[::-1]
        busy: dict[Connection, tuple[_Worker, int]] = {}
        idle: list[_Worker] = []
        while todo or busy:
            while todo and (idle or len(self._workers) < self.processes):
                w = idle.pop() if idle else self._start()
                index, item = todo.pop()
                try:
                    w.conn.send((fn, (item,)))
                except OSError:
                    yield index, Outcome(error=self._retire(w))
                    continue
                busy[w.conn] = (w, index)
            ready = wait(list(busy) + [w.proc.sentinel for w, _ in busy.values()])
            for conn, (w, index) in list(busy.items()):
                if conn not in ready and w.proc.sentinel not in ready:
                    continue
                del busy[conn]
                try:
                    reply = conn.recv() if conn.poll() else None
                except (EOFError, OSError):
                    reply = None
                if reply is None:
                    yield index, Outcome(error=self._retire(w))
                    continue
                idle.append(w)
                yield index, reply
