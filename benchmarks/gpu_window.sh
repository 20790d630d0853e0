#!/usr/bin/env bash
# One GPU window of a fixed length, spent step by step in the order given: each step is bounded by `timeout` to
# what is left of WINDOW_S (and its own cap), a step that cannot fit its minimum is skipped with a line saying so,
# and everything measured comes back under "$OUT" as a few archives, whatever was cut short (they are rewritten
# after every step, so a call the device ends early still returns the steps it finished).
#
#   source .gpu/setup.sh && WINDOW_S=560 OUT=$PWD/window bash benchmarks/gpu_window.sh STEP...
#
# Steps (run in the order given):
#   fa3               examples/fa3_grid: verify, then bench (each at most 130 s)
#   layer             examples/llama_layer/run.py: the Llama-3-8B decoder layer (at most 170 s, needs 140 s)
#   classes           benchmarks/gemm_classes.py: the GEMM classes through dispatch (at most 150 s, needs 90 s)
#   tail              benchmarks/gemm_tail_sm90.py: ragged GEMMs, the tail policies and a one-launch form (at most 150 s)
#   main              `tilegen run`, the main job, timed (needs 540 s: a window of its own)
#   tune:DIR:SPEC     `tilegen -C DIR tune SPEC` with a measured budget of TUNE_S (default 40 s), at most 240 s
#   all[:DIR]         `tilegen -C DIR tune --all` (default: this project) with the rest of the window
# e.g. on an H200:  bash benchmarks/gpu_window.sh layer tune:examples/llama_layer:llama_attn_prefill all
#
# Out: $OUT/window.log (every step's command and output; each step's last line `rc=N seconds=S left=L`),
# $OUT/results.tgz (the steps' reports), $OUT/tuned.tgz (the lockfiles and tune reports of this project and of
# every project a step tuned: merge them with `tilegen tune --merge FILE`, run in the project).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/window-out}
WINDOW_S=${WINDOW_S:-560}
TUNE_S=${TUNE_S:-40}
R="$OUT/results"
LOG="$OUT/window.log"
mkdir -p "$R"
t0=$SECONDS
left() { echo $((WINDOW_S - (SECONDS - t0))); }
cap() { local a=$1 b=$(($(left) - 15)); [ "$a" -lt "$b" ] && echo "$a" || echo "$b"; }

step() {  # step NAME MIN_SECONDS SECONDS command...: run it if MIN_SECONDS fit in what is left
  local name=$1 need=$2 secs=$3
  shift 3
  if [ "$secs" -lt "$need" ]; then
    echo "== $name skipped: needs $need s, $(left) s left" | tee -a "$LOG"
    return
  fi
  echo "== $name (timeout $secs s): $*" | tee -a "$LOG"
  local s=$SECONDS rc packer
  # and every 30 s during the step (tune's lockfile grows spec by spec), away from the step's output
  (while sleep 30 && kill -0 $$ 2>/dev/null; do pack; done) </dev/null >/dev/null 2>&1 &
  packer=$!
  timeout -k 10 "$secs" "$@" >>"$LOG" 2>&1
  rc=$?
  pkill -P "$packer" sleep 2>/dev/null
  kill "$packer" 2>/dev/null
  wait "$packer" 2>/dev/null
  echo "rc=$rc seconds=$((SECONDS - s)) left=$(left)" | tee -a "$LOG"
  pack
}

pack() {  # the archives of what is measured so far: a call cut off by the device's own limit still returns them
  find "$R" \( -name '*.png' -o -name '*.csv' \) -delete
  tar -czf "$OUT/results.tgz.part" -C "$OUT" results && mv "$OUT/results.tgz.part" "$OUT/results.tgz"
  local paths=() d p
  for d in $(printf '%s\n' "${projects[@]}" | sort -u); do
    for p in "$d/tuned" "$d/reports/tune"; do [ -e "$p" ] && paths+=("$p"); done
  done
  tar -czf "$OUT/tuned.tgz.part" "${paths[@]}" && mv "$OUT/tuned.tgz.part" "$OUT/tuned.tgz"
}

nvidia-smi -L 2>&1 | tee -a "$LOG"
projects=(.)
for s in "$@"; do
  case "$s" in
    fa3)
      step fa3_verify 60 "$(cap 130)" python3 -m codegen -C examples/fa3_grid verify --all -t sm_90 --out "$R/fa3_grid"
      step fa3_bench 60 "$(cap 130)" python3 -m codegen -C examples/fa3_grid bench --all -t sm_90 --out "$R/fa3_grid" ;;
    layer)
      step layer 140 "$(cap 170)" python3 examples/llama_layer/run.py --reports "$R/llama_layer" ;;
    classes)
      step classes 90 "$(cap 150)" python3 benchmarks/gemm_classes.py --out "$R/gemm_classes" ;;
    tail)
      step tail 60 "$(cap 150)" python3 benchmarks/gemm_tail_sm90.py run --out "$R/gemm_tail" ;;
    main)
      step main 540 "$(cap 100000)" python3 -m codegen run --out "$R/run" ;;
    tune:*:*)
      IFS=: read -r _ dir spec <<<"$s"
      projects+=("$dir")
      step "tune $spec in $dir" 60 "$(cap 240)" python3 -m codegen -C "$dir" tune "$spec" -t sm_90 --budget "${TUNE_S}s" ;;
    all | all:*)
      dir=${s#all}; dir=${dir#:}; dir=${dir:-.}
      projects+=("$dir")
      secs=$(cap 100000)
      step "tune --all in $dir" 90 "$secs" python3 -m codegen -C "$dir" tune --all -t sm_90 --budget "$((secs - 45))s" ;;
    *)
      echo "== $s: not a step (fa3, layer, classes, tail, main, tune:DIR:SPEC, all[:DIR])" | tee -a "$LOG" ;;
  esac
done
pack && rm -rf "$R"
ls -la "$OUT"
