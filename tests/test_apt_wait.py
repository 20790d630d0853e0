"""The AMD toolchain fetch's apt-get (codegen/targets/data/apt-wait.sh): a package-manager lock that another
process holds is waited for, up to APT_LOCK_TIMEOUT_S, then one line and exit 1 -- not "E: Could not get
lock". A stand-in apt-get on PATH plays the lock holder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from spectext import REPO_ROOT

APT_WAIT = REPO_ROOT / "codegen" / "targets" / "data" / "apt-wait.sh"
LOCKED = ["E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)",
          "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?"]

# fails as a held lock does for the first LOCKED_CALLS calls, then runs; records each call's arguments
FAKE_APT_GET = f"""#!/usr/bin/env bash
n=$(( $(cat "$CALLS" 2>/dev/null | wc -l) + 1 ))
echo "$*" >> "$CALLS"
if [ "$n" -le "$LOCKED_CALLS" ]; then printf '%s\\n' {" ".join(repr(line) for line in LOCKED)} >&2; exit 100; fi
if [ -n "${{OTHER_ERROR:-}}" ]; then echo "E: Unable to locate package clang-99" >&2; exit 100; fi
echo "installed $*"
"""


def run_apt_get(tmp_path: Path, *, locked_calls: int, timeout_s: int, other_error: bool = False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", CALLS=str(calls), LOCKED_CALLS=str(locked_calls),
               APT_LOCK_TIMEOUT_S=str(timeout_s), APT_LOCK_POLL_S="0.2", OTHER_ERROR="1" if other_error else "")
    proc = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{APT_WAIT}"; apt_get install -y clang-19'],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    return proc, calls.read_text().splitlines()


def test_a_held_lock_is_waited_for(tmp_path):
    proc, calls = run_apt_get(tmp_path, locked_calls=2, timeout_s=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("install -y clang-19")
    assert len(calls) == 3  # two attempts while the lock was held, then the one that ran
    assert set(calls) == {"install -y clang-19"}
    assert proc.stderr.strip().splitlines() == [
        ("waiting up to 600 s for the package manager, which another process holds (Could not get lock "
         "/var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get))")]


def test_a_lock_held_past_the_timeout_is_one_line_and_exit_1(tmp_path):
    # 3 s of 0.2 s polls: room for a second attempt however slowly a loaded machine starts the first
    proc, calls = run_apt_get(tmp_path, locked_calls=10**6, timeout_s=3)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the package manager is still locked after 3 s (Could not get lock /var/lib/dpkg/lock-frontend. It is "
        "held by process 4242 (apt-get)): let the other apt-get or dpkg finish and run this again, or set "
        "APT_LOCK_TIMEOUT_S to wait longer")
    assert "E: Could not get lock" not in proc.stderr
    assert len(calls) > 1


def test_another_apt_error_is_not_retried(tmp_path):
    proc, calls = run_apt_get(tmp_path, locked_calls=0, timeout_s=600, other_error=True)
    assert proc.returncode == 100
    assert len(calls) == 1
    assert proc.stderr.strip() == "E: Unable to locate package clang-99"


def test_the_fetch_script_runs_every_apt_get_through_the_wait():
    text = (REPO_ROOT / "codegen" / "targets" / "data" / "fetch-amd-toolchain.sh").read_text()
    commands = [line.split("#")[0] for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert any("apt_get " in c for c in commands)
    assert not any("apt-get " in c for c in commands), [c for c in commands if "apt-get " in c]
