#!/usr/bin/env bash
# Set up (tools/setup.sh) and run tilegen's main job on the bundled specs:
# validate -> gen -> build -> verify -> bench -> report (GPU steps are skipped, with the reason, without a GPU).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
.venv/bin/tilegen run "$@"
