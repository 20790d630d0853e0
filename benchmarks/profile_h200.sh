#!/usr/bin/env bash
# tilegen profile on an H200, one kernel of every family (the same kernels and shapes as the 9ed4c1d run in
# reports/h200/profile/README.md), attention twice (a smaller shape with its baselines, then the spec shape
# alone), then the SASS of every sm_90 kernel if cuobjdump is there. Everything goes to "$OUT" one folder
# deep: $OUT/<step>/<kernel>_<shape>.{json,md,png} and $OUT/<step>.log (the log's last line: rc=N).
#
#   source .gpu/setup.sh && bash benchmarks/profile_h200.sh attn attn_full gemm            # <= 315 s
#   source .gpu/setup.sh && bash benchmarks/profile_h200.sh rmsnorm layernorm softmax rope sass   # <= 420 s
#   (no arguments: every step, up to 735 s: more than one 10-minute device command)
#
# Each step is bounded by `timeout` (STEP_S, default 75 s; attn 150 s, attn_full 90 s, sass 120 s); a step
# that runs out writes rc=124 to its log and the next one starts.
set -u
OUT=${OUT:-$PWD/profile-out}
mkdir -p "$OUT"
STEP_S=${STEP_S:-75}
cd "$(dirname "$0")/.."

step() {  # step NAME SECONDS tilegen-arguments...
  local name=$1 secs=$2
  shift 2
  echo "== $name (timeout $secs s): tilegen $*"
  local t0=$SECONDS
  timeout "$secs" python3 -m codegen "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc seconds=$((SECONDS - t0))" >>"$OUT/$name.log"
  tail -n 3 "$OUT/$name.log"
}

profile() {  # profile NAME SECONDS URI SHAPE [extra options]
  local name=$1 secs=$2 uri=$3 shape=$4
  shift 4
  step "$name" "$secs" profile "$uri" --shape "$shape" --out "$OUT/$name" --timeout "$secs" "$@"
}

run_step() {
  case $1 in
    attn) profile attn 150 attn_fp16_d128_128x128_t256_s2_sm90_e6ec80 1x32x32x2048x2048 ;;
    attn_full) profile attn_full 90 attn_fp16_d128_128x128_t256_s2_sm90_e6ec80 4x32x32x4096x4096 --no-baselines ;;
    gemm) profile gemm "$STEP_S" gemm_fp16_nt_128x256x64_t256_s4_sw8_sm90_2a809f 8192x8192x8192 ;;
    rmsnorm) profile rmsnorm "$STEP_S" rmsnorm_fp16_streamed_t256_v8_u2_sm90_c075a4 16384x8192 ;;
    layernorm) profile layernorm "$STEP_S" layernorm_fp16_registers_t256_v8_sm90_9ae7c8 16384x8192 ;;
    softmax) profile softmax "$STEP_S" softmax_fp16_online_t256_v8_sm90_a776e4 16384x8192 ;;
    rope) profile rope "$STEP_S" rope_fp16_d128_r128_t64_v8_sm90_118424 16384x32x8 ;;
    sass)
      if command -v cuobjdump >/dev/null || [ -x "$(dirname "$(command -v nvcc)")/cuobjdump" ]; then
        step sass 120 sass --all --out "$OUT/sass_sm_90.json"
      else
        echo "== sass: cuobjdump not on PATH nor next to nvcc: skipped" | tee "$OUT/sass.log"
      fi ;;
    *) echo "unknown step $1 (attn attn_full gemm rmsnorm layernorm softmax rope sass)"; return 2 ;;
  esac
}

echo "tilegen $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); ncu: $(command -v ncu || echo missing); cuobjdump: $(command -v cuobjdump || echo 'not on PATH')"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(attn attn_full gemm rmsnorm layernorm softmax rope sass)
for s in "${steps[@]}"; do run_step "$s"; done
echo "== verdicts"
grep -h -E "bound|rc=" "$OUT"/*.log
