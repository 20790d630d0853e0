#!/usr/bin/env bash
# schedule fa3 on an H200, one device command: `tilegen verify` of the fa3 seeds (fp32 reference, the family's
# tolerance and its negative controls, at the spec shapes and the derived edge shapes), then `tilegen bench` of the
# fa3 seeds and of the default-schedule seeds at the same shapes. bench times every kernel beside its baselines in
# the same run, L2 flushed before every timed launch: cuDNN SDPA (sdpa_cudnn), FlashAttention-2 SDPA (sdpa_flash),
# the memory-efficient SDPA and torch.compile; bench.md gives TFLOP/s and each baseline's time / the kernel's.
#
#   source .gpu/setup.sh && OUT=$PWD/fa3-out bash benchmarks/attention_fa3_h200.sh        # <= 290 s
#
# Reports: $OUT/verify/<device>/verify.{json,md}, $OUT/fa3/<device>/bench.{json,md} and $OUT/default/<device>/
# bench.{json,md}; the log of every step in $OUT/run.log (each step's last line: rc=N). At most 7 files, two
# folders down (the CSV copies and the plots are removed). Each step is bounded by `timeout`, and each case by
# --timeout (a verify case of the ws kernels at these shapes took under 5 s on the H200), so a kernel that hangs
# costs its cases' timeouts, not the run.
set -u
OUT=${OUT:-$PWD/fa3-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

FA3=(attn_fp16_d128_fa3 attn_fp16_d128_causal_fa3 attn_bf16_gqa_causal_fa3 attn_fp16_d64_causal_fa3
     attn_fp16_gqa_chunked_prefill_fa3)
DEFAULT=(attn_fp16_d128 attn_fp16_d128_causal attn_bf16_gqa_causal attn_fp16_d64_causal attn_fp16_gqa_chunked_prefill)

step() {  # step NAME SECONDS tilegen-arguments...
  local name=$1 secs=$2
  shift 2
  echo "== $name (timeout $secs s): tilegen $*" | tee -a "$OUT/run.log"
  local t0=$SECONDS
  timeout "$secs" python3 -m codegen "$@" >>"$OUT/run.log" 2>&1
  echo "rc=$? seconds=$((SECONDS - t0))" | tee -a "$OUT/run.log"
}

step verify 150 verify "${FA3[@]}" -t sm_90 --timeout 20 --out "$OUT/verify"
step bench_fa3 75 bench "${FA3[@]}" -t sm_90 --timeout 40 --out "$OUT/fa3"
step bench_default 60 bench "${DEFAULT[@]}" -t sm_90 --timeout 40 --out "$OUT/default"
rm -f "$OUT"/*/*/*.png "$OUT"/*/*/*.csv
find "$OUT" -type f | sort
