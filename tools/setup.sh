#!/usr/bin/env bash
# Set up a fresh machine for tilegen: a project venv (.venv) with tilegen and its dependencies, and
# the offline gfx942 device toolchain (.toolchain/). Idempotent.
#   bash tools/setup.sh          # what `tilegen run` needs
#   bash tools/setup.sh --dev    # + pytest, ruff, hypothesis and transformers (the test dependencies)
# torch: a torch the system Python already has is kept (the venv sees system site-packages);
# otherwise the CPU-only torch 2.13.0 is installed -- never a multi-GB CUDA build on a machine
# that has no NVIDIA GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" torch            # a GPU machine: PyPI's default (CUDA) build
  else
    "${pip[@]}" "torch==2.13.0"  # no GPU: CPU build
  fi
fi
"${pip[@]}" -e ".${extras}"
bash tools/fetch-gfx942-toolchain.sh
.venv/bin/tilegen doctor || true   # says what is present; verify/bench need a GPU
