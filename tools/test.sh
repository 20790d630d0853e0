#!/usr/bin/env bash
# Set up (tools/setup.sh --dev) and run the whole test suite. This is the README's test command and
# what CI runs. GPU tests run when a GPU is present and are skipped, with the reason, otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh --dev
.venv/bin/ruff check codegen tests benchmarks
.venv/bin/tilegen gen --check
.venv/bin/tilegen tune --check   # no stale lockfile entry (searched shapes not tuned yet are listed)
# In parallel (pytest-xdist): a worker per core this process may use, at most MAX_WORKERS (each imports torch and
# TileLang); tests/conftest.py says what the workers share. `-n 0` after the command runs it in one process.
MAX_WORKERS=8
workers="$(.venv/bin/python -c "import os; print(max(1, min(len(os.sched_getaffinity(0)), $MAX_WORKERS)))")"
.venv/bin/python -m pytest -q -n "$workers" --dist loadgroup "$@"
