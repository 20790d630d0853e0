"""Ctrl-C ends every command: SIGINT to the whole process group (what a terminal sends) gives exit code
130, leaves no process of the group running and no half-written cache entry.

`build` is interrupted for real, many times, at seeded random moments (while the CLI imports, while
its workers import tilelang, while they lower and compile), counted from the moment the interpreter
handles SIGINT (before it, the kernel ends any program a Ctrl-C reaches, exit -2, and no program can do
otherwise); after each, every cache entry must verify and no staging folder may be left, and a final
uninterrupted build must reuse what was published and build the rest. `verify`, `bench` and `run` are
interrupted with their GPU steps replaced by ones that never end (this machine may have no GPU). Each case prints its timing (`pytest -s` shows them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from spectext import REPO_ROOT
from toolchains import GFX942_MISSING

from codegen.build.cache import BuildCache

TILEGEN = str(Path(sys.executable).with_name("tilegen"))
SPECS = ("softmax_fp16_online", "rmsnorm_fp16", "gemm_fp16_decode", "layernorm_fp16")  # ~9 s cold with -j 2
BUILD = [TILEGEN, "build", *SPECS, "--target", "gfx942", "--first-shape", "-j", "2"]
TRIALS = 8
SEED = 9
# From the signal to the exit: the limit that tells a command that never ends (a hang) from one that ends. Not
# a measure of speed: a worker stuck in native code is killed GRACE_S (5 s) after the SIGTERM it ignores, and
# on a loaded machine the interpreters' exits alone can take seconds. Each case prints its time.
EXIT_S = 120.0
GROUP_EXIT_S = 60.0  # then for the rest of the group (the resource tracker exits once the last worker has)


needs_gfx942 = pytest.mark.skipif(GFX942_MISSING is not None, reason=f"no gfx942 toolchain: {GFX942_MISSING}")


def running_in_group(pgid: int) -> list[str]:
    """The processes of group `pgid` that have not exited. A zombie has exited: one whose parent is
    gone waits for init to reap it, which this sandbox's init may never do."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, _ppid, group = stat[stat.rindex(")") + 2:].split()[:3]
        if int(group) == pgid and state != "Z":
            left.append(f"{pid} {state} {cmd[:160]}")
    return left


def handles_sigint(pid: int) -> bool:
    """Process `pid` has a handler for SIGINT (its interpreter installs Python's early in its start-up):
    /proc's SigCgt mask. Before that, a Ctrl-C ends a program by the kernel's default action."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGINT - 1) & 1)


def _default_stop_signals() -> None:
    """In the child, before exec: SIGINT, SIGTERM and SIGHUP at their default action."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def interrupt(cmd: list[str], delay_s: float, *, after: Callable[[], bool] | None = None, cwd: Path = REPO_ROOT,
              env: dict[str, str] | None = None, sig: int = signal.SIGINT, group: bool = True):
    """Start `cmd` in a new process group, send `sig` to the group (to the command's process alone without
    `group`: `kill PID`) `delay_s` after its interpreter handles SIGINT (handles_sigint; or after `after()`
    first holds); (exit code, seconds from the signal to the exit, stdout, stderr, processes of the group
    still running). Exit code None: the command had finished before the signal. The command starts with the
    stop signals at their default action, whatever this process inherited: under `nohup` SIGHUP is ignored, and
    tilegen keeps an ignored SIGHUP ignored (stop_on_signals), so a test run under nohup saw no stop."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_stop_signals)  # noqa: PLW1509 - signal.signal only, no lock
    try:
        deadline = time.monotonic() + 120
        while not handles_sigint(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        while after is not None and not after() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay_s)
        if proc.poll() is not None:
            out, err = proc.communicate()
            return None, 0.0, out, err, []
        t0 = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        try:
            out, err = proc.communicate(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            left = running_in_group(proc.pid)
            pytest.fail(f"{cmd[1]} still running {EXIT_S:.0f} s after {signal.Signals(sig).name} (at {delay_s:.2f} s): "
                        f"{left}")
        seconds = time.monotonic() - t0
        deadline = time.monotonic() + GROUP_EXIT_S
        while (left := running_in_group(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return proc.returncode, seconds, out, err, left
    finally:
        if proc.poll() is None or running_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def assert_cache_consistent(root: Path) -> list[str]:
    """Every entry verifies against its manifest; no staging folder is left. Returns the entries' keys."""
    cache = BuildCache(root)
    keys = sorted(p.name for p in (root / "entries").glob("*/*"))
    for key in keys:
        assert cache.lookup(key).path == cache.entry(key), f"{key}: {cache.lookup(key).problem}"
    staging = root / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    return keys


def check_interrupted(code: int | None, err: str, left: list[str], sig: int = signal.SIGINT) -> None:
    """Ended as a Ctrl-C ends a command: exit 128 + the signal's number, one last line, no traceback, no
    process of the group left."""
    assert not left, f"still running after the exit: {left}"
    assert code == 128 + sig, err
    last = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
    assert err.strip().splitlines()[-1] == last, err
    assert "Traceback" not in err, err


@needs_gfx942
def test_ctrl_c_ends_a_parallel_build_at_any_moment(tmp_path):
    rng = random.Random(SEED)
    interrupted = 0
    for i in range(TRIALS):
        delay = rng.uniform(0.5, 6.0)
        cache = tmp_path / f"cache{i}"
        code, seconds, _, err, left = interrupt([*BUILD, "--cache-dir", str(cache)], delay)
        keys = assert_cache_consistent(cache) if cache.exists() else []
        print(f"build trial {i}: SIGINT at {delay:.2f} s -> exit {code} after {seconds:.2f} s, "
              f"{len(keys)} of {len(SPECS)} entries published")
        if code is None:
            assert not left, f"still running after the exit: {left}"
            continue  # the build finished first: nothing to interrupt
        if before_tilegen_ran(code, err):
            assert not left and not keys, (left, keys)
            print(f"build trial {i}: the Ctrl-C came during the interpreter's start-up (site, .pth files), "
                  "before the CLI's first line: Python's own KeyboardInterrupt")
            continue
        check_interrupted(code, err, left)
        interrupted += 1
    assert interrupted >= TRIALS - 2, "the builds finished (or had not begun) before their Ctrl-C: change the delays"


def before_tilegen_ran(code: int, err: str) -> bool:
    """A KeyboardInterrupt that Python raised and printed before any line of tilegen ran: while it imports
    site and the environment's .pth files (exit 1, a traceback), compiles the console script (exit 1, no
    traceback) or runs its import of the package (-SIGINT: Python re-raises an uncaught KeyboardInterrupt of
    the main module as the signal). A traceback with a frame in codegen/ is tilegen's own and fails."""
    lines = err.strip().splitlines()
    return (code in (1, -signal.SIGINT) and bool(lines) and lines[-1] == "KeyboardInterrupt"
            and not any(ln.lstrip().startswith('File "') and "/codegen/" in ln for ln in lines))


@needs_gfx942
def test_an_interrupted_cache_is_reused_and_completed(tmp_path):
    """Ctrl-C once the first entry is published, while the others are being built; then an uninterrupted
    build reuses what was published and builds the rest."""
    cache = tmp_path / "cache"
    delay = random.Random(SEED).uniform(0.0, 0.5)

    def published_and_building() -> bool:  # an entry is published and a worker has begun another (its staging)
        staging = cache / "staging"
        return any((cache / "entries").glob("*/*")) and staging.is_dir() and any(staging.iterdir())

    code, seconds, _, err, left = interrupt([*BUILD, "--cache-dir", str(cache)], delay, after=published_and_building)
    published = assert_cache_consistent(cache)
    print(f"build: SIGINT {delay:.2f} s after the first entry -> exit {code} after {seconds:.2f} s, "
          f"{len(published)} of {len(SPECS)} entries published")
    check_interrupted(code, err, left)
    assert 0 < len(published) < len(SPECS)

    proc = subprocess.run([*BUILD, "--cache-dir", str(cache), "--json"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["gfx942"]["builds"]
    assert len(results) == len(SPECS)
    for r in results:
        assert r["status"] == ("cached" if Path(r["entry"]).name in published else "built"), r
    built = sum(r["status"] == "built" for r in results)
    assert built == len(SPECS) - len(published)
    # stderr is not a terminal: one plain progress line per kernel built
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == built and all(" built " in ln for ln in progress), proc.stderr
    assert assert_cache_consistent(cache) == sorted(Path(r["entry"]).name for r in results)
    print(f"rebuild of the interrupted cache: {built} built, {len(published)} cached")


# ---- verify, bench, run: GPU steps that never end --------------------------------------------------

FAKE_GPU = r'''
import os
import sys
import time

from codegen.run import gpu, gpucli, gpurun
from codegen.run.gpu import GpuInfo
from codegen.core.hardware import Target


def never_ends(*args, **kwargs):
    if os.environ.get("READY"):
        open(os.environ["READY"], "a").close()
    time.sleep(600)


def compiled(rendered, shape, run_target):
    return None


# Module level: runs in the CLI process and in every worker it spawns (they import this file as __mp_main__).
gpucli.require_gpu = lambda gpus=None: GpuInfo(name="Fake H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=1 << 20,
                                     torch_version="x", runtime_version="CUDA x")
if os.environ["HANG_IN"] == "compile":
    gpu.compile_kernel = never_ends
else:
    gpu.compile_kernel = compiled
    gpurun.verify_case = gpurun.bench_case = gpurun.measure_copy_gbps = never_ends

if __name__ == "__main__":
    from codegen.cli.main import main

    sys.argv = ["tilegen", *sys.argv[1:]]
    main()
'''


@pytest.mark.parametrize(("command", "hang_in"), [("verify", "compile"), ("verify", "run"), ("bench", "run")])
def test_ctrl_c_ends_verify_and_bench(tmp_path, command, hang_in):
    script = tmp_path / "fake_gpu_tilegen.py"
    script.write_text(FAKE_GPU)
    reports = tmp_path / "reports"
    cmd = [sys.executable, str(script), command, "softmax_fp16_online", "gemm_fp16_decode", "--target", "sm_90",
           "-j", "2", "--out", str(reports)]
    delay = random.Random(f"{SEED}{command}{hang_in}").uniform(2.0, 4.0)  # workers started, tasks under way
    code, seconds, _, err, left = interrupt(cmd, delay, env=dict(os.environ, HANG_IN=hang_in))
    print(f"{command} ({hang_in} never ends): SIGINT at {delay:.2f} s -> exit {code} after {seconds:.2f} s")
    check_interrupted(code, err, left)
    assert not reports.exists()  # no report, not half of one


def _one_spec_project(tmp_path: Path, name: str, next_name: str, *, gfx942_only: bool = True) -> Path:
    """A project of one spec of this checkout's specs/ (the entry `name`, up to `next_name`; `gfx942_only`:
    its targets cut to gfx942), with this checkout's toolchain."""
    project = tmp_path / "p"
    (project / "specs").mkdir(parents=True)
    (project / "tilegen.toml").write_text('specs = ["specs"]\n')
    path = next(p for p in sorted((REPO_ROOT / "specs").glob("*.yaml")) if f"- name: {name}\n" in p.read_text())
    text = path.read_text()
    entry = text[text.index(f"- name: {name}\n"):text.index(f"- name: {next_name}\n")]
    if gfx942_only:
        entry = entry.replace("targets: [gfx942, sm_90]", "targets: [gfx942]")
    (project / "specs" / "one.yaml").write_text(entry)
    (project / ".toolchain").symlink_to(REPO_ROOT / ".toolchain")
    return project


@needs_gfx942
def test_ctrl_c_ends_run_and_skips_the_steps_after(tmp_path):
    """`tilegen run` used to carry on with verify and bench after an interrupted build."""
    project = _one_spec_project(tmp_path, "softmax_fp16_online", "softmax_fp16_two_pass")
    staging = project / ".cache" / "build" / "staging"
    code, seconds, out, err, left = interrupt([TILEGEN, "run", "-j", "1"], 0.2, cwd=project,
                                              after=lambda: staging.is_dir() and any(staging.iterdir()))
    print(f"run: SIGINT while a worker builds -> exit {code} after {seconds:.2f} s")
    check_interrupted(code, err, left)
    assert "tilegen run" not in out  # the steps table: no step ran after the build
    assert_cache_consistent(project / ".cache" / "build")


# ---- SIGTERM (`kill PID`: the CLI's process alone) and SIGHUP (a hang-up: the whole group) -----------------

STOPS = [pytest.param(signal.SIGTERM, False, id="SIGTERM"), pytest.param(signal.SIGHUP, True, id="SIGHUP")]


@needs_gfx942
@pytest.mark.parametrize(("command", "sig", "group"), [  # each signal once: tune --static stops through build's pool
    pytest.param("build", signal.SIGTERM, False, id="build-SIGTERM"),
    pytest.param("tune", signal.SIGHUP, True, id="tune-SIGHUP")])
def test_sigterm_and_sighup_end_build_and_tune_as_ctrl_c_does(tmp_path, command, sig, group):
    """Sent while a worker builds (its staging folder exists): the workers are ended, the staging folders
    removed, every published entry verifies, nothing else is written."""
    project = _one_spec_project(tmp_path, "gemm_fp16_decode", "gemv_fp16_decode", gfx942_only=False)
    spec = project / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("  search:\n", "  search:\n    gfx942:\n      pipeline: {stages: [1, 2]}\n"))
    cache = tmp_path / "cache"
    cmd = {"build": [TILEGEN, "build", "--all", "--target", "gfx942", "-j", "2"],
           "tune": [TILEGEN, "tune", "gemm_fp16_decode", "--static", "--target", "gfx942", "-j", "2"]}[command]
    staging = cache / "staging"
    code, seconds, _, err, left = interrupt([*cmd, "--cache-dir", str(cache)], 0.2, cwd=project, sig=sig,
                                              group=group, after=lambda: staging.is_dir() and any(staging.iterdir()))
    print(f"{command}: {signal.Signals(sig).name} while a worker builds -> exit {code} after {seconds:.2f} s")
    check_interrupted(code, err, left, sig)
    assert_cache_consistent(cache)
    assert sorted(p.name for p in project.iterdir()) == [".toolchain", "specs", "tilegen.toml"]  # no report


@pytest.mark.parametrize(("sig", "group"), STOPS)
@pytest.mark.parametrize(("command", "hang_in"), [("verify", "compile"), ("bench", "run")])
def test_sigterm_and_sighup_end_verify_and_bench_as_ctrl_c_does(tmp_path, command, hang_in, sig, group):
    script = tmp_path / "fake_gpu_tilegen.py"
    script.write_text(FAKE_GPU)
    reports = tmp_path / "reports"
    cmd = [sys.executable, str(script), command, "softmax_fp16_online", "gemm_fp16_decode", "--target", "sm_90",
           "-j", "2", "--out", str(reports)]
    ready = tmp_path / "ready"  # the fake GPU step writes it once it runs: the workers are under way
    code, seconds, _, err, left = interrupt(cmd, 0.2, env=dict(os.environ, HANG_IN=hang_in, READY=str(ready)),
                                            sig=sig, group=group, after=ready.exists)
    print(f"{command} ({hang_in} never ends): {signal.Signals(sig).name} -> exit {code} after {seconds:.2f} s")
    check_interrupted(code, err, left, sig)
    assert not reports.exists()


def test_a_ctrl_c_while_the_cli_imports_ends_it_even_where_the_exit_would_be_swallowed():
    """The handler of a Ctrl-C during the CLI's imports ends the process itself: a SystemExit raised in the middle
    of an import was seen lost (the command printed "interrupted" and built everything, exit 0)."""
    code = ("from codegen.cli import main\n"
            "try:\n    main._interrupted_while_importing(2, None)\nexcept BaseException:\n    pass\n"
            "print('carried on')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted\n")


def test_ctrl_c_while_click_builds_the_commands_exits_130(monkeypatch, capsys):
    """A Ctrl-C after the imports but before a command runs (typer building its click group: seen at 0.54 s
    in test_ctrl_c_ends_a_parallel_build_at_any_moment on a loaded machine) exits 130 without a traceback."""
    from codegen.cli import main as cli

    def interrupted_setup():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted_setup)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 130


# ---- a worker's first moments --------------------------------------------------------------------

MASK_PROBE = r'''
import os
import threading
from pathlib import Path


def blocked() -> str:
    """This process's blocked-signal mask, as /proc shows it (hex)."""
    return next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("SigBlk"))


if __name__ != "__main__":  # a spawned worker importing this file as __mp_main__: before any code of its own runs
    with open(os.environ["MASK_OUT"], "a") as out:
        out.write(blocked() + "\n")


def target() -> None:
    from codegen.core.workers import worker_signals

    worker_signals()


if __name__ == "__main__":
    from codegen.core.workers import start_process

    start_process(target, ()).join()  # the first worker of this process: it starts the resource tracker
    start_process(target, ()).join()
    thread = threading.Thread(target=lambda: start_process(target, ()).join())  # as verify's feeding threads do
    thread.start()
    thread.join()
'''


def test_a_worker_starts_with_sigint_blocked_from_its_first_import(tmp_path):
    """A Ctrl-C (or a hang-up) that reaches a worker while it still imports (its main module, torch, codegen)
    must not print a KeyboardInterrupt traceback: every worker is spawned with SIGINT and SIGHUP blocked, the first one of a
    process too (multiprocessing's resource tracker unblocks SIGINT in the thread that starts it) and one
    started from another thread than the main one."""
    script, out = tmp_path / "probe.py", tmp_path / "masks.txt"
    script.write_text(MASK_PROBE)
    subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env=dict(os.environ, MASK_OUT=str(out)),
                   check=True, timeout=120)
    masks = out.read_text().split()
    assert len(masks) == 3, masks
    for mask in masks:
        for sig in (signal.SIGINT, signal.SIGHUP):
            assert int(mask, 16) & (1 << (sig - 1)), f"a worker started with {sig.name} deliverable: {masks}"
