#!/usr/bin/env bash
# The tuner's GPU-free stages (expand, rules, real builds, prune) over wide search spaces of shapes no seed has:
# softmax, layernorm, rmsnorm, attention and GEMM on gfx942 and sm_90. It checks that every legal point lowers
# and compiles (a point either breaks a named rule or builds; spills are pruned with their reason).
# Usage: bash benchmarks/static_sweep.sh [DIR]   (DIR: a scratch project, default a new temporary folder)
# Needs the gfx942 toolchain (.toolchain/ of this checkout) and nvcc for sm_90. Reports: DIR/reports/tune/.
# Session 6 ran it on a 2-core machine in about 50 minutes (README "Tuning", "What has run where").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir/specs"
echo 'specs = ["specs"]' > "$dir/tilegen.toml"
cp "$here"/benchmarks/static_sweep/sweep_*.yaml "$dir/specs/"
[ -e "$dir/.toolchain" ] || ln -s "$here/.toolchain" "$dir/.toolchain"
tilegen="$here/.venv/bin/tilegen"
"$tilegen" -C "$dir" gen >/dev/null
for spec in sw_softmax_bf16 sw_layernorm_fp16 sw_rmsnorm_fp32 sw_attn_bf16 sw_gemm_bf16; do
  "$tilegen" -C "$dir" tune "$spec" --static -t gfx942 -t sm_90 | grep -E "^tune |expand:|constrain:|rejected by rule"
done
echo "reports: $dir/reports/tune/"
