#!/usr/bin/env bash
# Set up (tools/setup.sh --dev) and run the whole test suite. This is the README's test command and
# what CI runs. GPU tests run when a GPU is present and are skipped, with the reason, otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh --dev
.venv/bin/ruff check codegen tests benchmarks
.venv/bin/tilegen gen --check
.venv/bin/tilegen tune --check   # no stale lockfile entry (searched shapes not tuned yet are listed)
.venv/bin/python -m pytest -q "$@"
