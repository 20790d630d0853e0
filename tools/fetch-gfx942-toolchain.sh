#!/usr/bin/env bash
# The AMD device toolchain (gfx942, gfx950) for this checkout, in <repo>/.toolchain/: runs the script the
# tilegen package ships (codegen/targets/data/fetch-amd-toolchain.sh; `tilegen toolchain fetch` runs the
# same one for an installed tilegen). The name is historical: gfx942 came first.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
PYTHON="$PY" bash "$REPO/codegen/targets/data/fetch-amd-toolchain.sh" "$REPO/.toolchain"
touch "$REPO/.gitignore"
grep -qxE '/\.toolchain/?' "$REPO/.gitignore" || echo '/.toolchain' >> "$REPO/.gitignore"
