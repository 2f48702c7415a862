#!/usr/bin/env bash
# Takes the figures only a real GPU gives, in parts that each fit a few minutes, from release
# binaries built beforehand (`cargo build --release --examples`), and writes one file per part
# under OUT_DIR with the adapter's name at the top. On any machine it runs on whatever adapter
# wgpu picks, so it can be tried on lavapipe first.
#
#   scripts/gpu-figures.sh OUT_DIR [PART...]
#
# Parts (all figures when none are named): table (data movement and Scan overhead, bench/
# layout), dtypes (element-wise Add per dtype, with f16's built-in conversions and without), broadcast (f32 Add against a broadcast row or
# column), reduce (f32 ReduceSum over rows, from 4 of a million to a million of 4), pad (ONNX
# Pad), gather (Gather and GatherElements at indices on the GPU, checked and not), scatter
# (TensorScatter's KV cache writes against ScatterElements' walk in order), lines (f32 CumSum
# and TopK, each line walked against split across invocations, one line of millions to
# thousands of lines), matmul,
# rnn, transfer, la-step, rnn-ort,
# rnn-ort-1, replay (one step per run, replayed against planned), lstm-ort, gru-ort, la-op-ort, la-expanded-ort, gpr-ort (a scikit-learn Gaussian
# process written beforehand where scikit-learn is installed:
# `scripts/sklearn_gpr_vs_onnxruntime.py --export .devbin/gpr`, or GPR_MODEL=DIR), forest-ort
# (a scikit-learn random forest likewise: `scripts/sklearn_forest_vs_onnxruntime.py --export
# .devbin/forest`, or FOREST_MODEL=DIR), pools-ort (three pools and a 155 MB padded Conv),
# spectral-ort (STFTs and long DFTs, accuracy against numpy's f64 FFT), decoder-ort (a
# GPT-2-like decode step whose caches grow, so every token is planned: host time planned and
# replayed, dispatches per token).
# Also, by name only: tests-gpu-kernels and tests-cpu-kernels (every test binary of
# `cargo test --release --no-run` in target/release/deps, each bounded by TEST_LIMIT seconds,
# default 240, with WGPU_OPS_CPU_KERNELS=0 or 1), fuzz (the fuzzer, `--max-memory 4 GiB`),
# test-times (each test of the binary TEST, default fusion, run alone with its seconds, slowest
# first, each bounded by TEST_LIMIT seconds, default 60: finds a slow or stuck test) and
# data-movement (the data-movement table from 16 MiB up, warm and cold, no Scan part).
# scripts/pack-for-gpu.sh packs the binaries and test data for a machine without Rust.
# The *-ort parts need python3 with numpy, onnx and onnxruntime. BIN=DIR takes the binaries
# from DIR instead of target/release/examples; LIMIT=SECONDS bounds each part (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-figures.sh OUT_DIR [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(table dtypes broadcast reduce matmul rnn transfer la-step rnn-ort rnn-ort-1 lstm-ort gru-ort la-op-ort la-expanded-ort gpr-ort forest-ort pools-ort spectral-ort decoder-ort)
bin=${BIN:-target/release/examples}
limit=${LIMIT:-540}
. scripts/ensure-gpu.sh
mkdir -p "$out"
export ONNX_TIMING="$bin/onnx_timing"
# Each model's report ends with the GPU time of one run by kernel (Context::start_profile).
export ONNX_TIMING_FLAGS="${ONNX_TIMING_FLAGS---profile}"

# Runs the test binaries (all, or those named after the first argument) with
# WGPU_OPS_CPU_KERNELS set to the first argument (unset when empty).
run_tests() {
  local kernels=$1; shift
  local failed=0
  for t in $(ls tests/*.rs | xargs -n1 basename | sed 's/\.rs$//'); do
    if [ $# -gt 0 ] && [ "$t" != "$1" ]; then continue; fi
    local exe
    exe=$(ls -t target/release/deps/"$t"-* 2>/dev/null | grep -v '\.d$' | head -n 1)
    [ -x "$exe" ] || { echo "$t: no binary (cargo test --release --no-run)"; failed=1; continue; }
    local log line
    if [ -n "$kernels" ]; then
      log=$(WGPU_OPS_CPU_KERNELS=$kernels timeout "${TEST_LIMIT:-240}" "$exe" 2>&1)
      line=$(grep -E '^test result' <<<"$log" | tail -n 1)
    else
      log=$(timeout "${TEST_LIMIT:-240}" "$exe" --nocapture 2>&1)
      line=$(grep -E '^test result|runs:' <<<"$log" | tail -n 12)
    fi
    echo "$t: ${line:-no result (timed out or crashed)}"
    # A failure keeps its messages: the summary line alone does not say what broke.
    case "$line" in *"test result: ok"*) ;; *) failed=1; grep -E -A6 'panicked|FAILED' <<<"$log" | head -n 60 ;; esac
  done
  return $failed
}

# Runs each test of the binary named by the first argument alone, timed, slowest first.
test_times() {
  local exe
  exe=$(ls -t target/release/deps/"$1"-* 2>/dev/null | grep -v '\.d$' | head -n 1)
  [ -x "$exe" ] || { echo "$1: no binary (cargo test --release --no-run)"; return 1; }
  local failed=0 t start rc ms lines=""
  for t in $("$exe" --list 2>/dev/null | sed -n 's/: test$//p'); do
    start=$(date +%s%N)
    timeout "${TEST_LIMIT:-60}" "$exe" --exact "$t" -q >/dev/null 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=1
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    lines+=$(printf '%6d.%03d s  exit %3d  %s' $((ms / 1000)) $((ms % 1000)) "$rc" "$t")$'\n'
  done
  printf '%s' "$lines" | sort -rn
  return $failed
}

run_part() {
  case "$1" in
    table) "$bin/bench" --out "$out/bench" ;;
    data-movement) "$bin/bench" --no-scan --min-mib 16 --out "$out/data-movement" ;;
    test-times) test_times "${TEST:-fusion}" ;;
    # Twice: f16 converted by the built-ins where exact (the header says which), then by
    # integer arithmetic.
    dtypes) "$bin/bench" --dtypes-only && "$bin/bench" --dtypes-only --f16-conversions integer ;;
    broadcast) "$bin/bench" --broadcast-only --out "$out/broadcast" ;;
    reduce) "$bin/bench" --reduce-only --out "$out/reduce" ;;
    pad) "$bin/bench" --pad-only --out "$out/pad" ;;
    gather) "$bin/bench" --gather-only --out "$out/gather" ;;
    scatter) "$bin/bench" --scatter-only --out "$out/scatter" ;;
    lines) "$bin/bench" --lines-only --out "$out/lines" ;;
    matmul) "$bin/bench" --matmul-only ;;
    rnn) "$bin/bench" --rnn-only ;;
    transfer) "$bin/bench" --transfer-only ;;
    la-step) "$bin/bench" --linear-attention-only ;;
    rnn-ort) python3 scripts/rnn_vs_onnxruntime.py 64 512 ;;
    rnn-ort-1) python3 scripts/rnn_vs_onnxruntime.py 1 512 ;;
    # One step per run (token by token): runs replayed against planned, host time of each.
    replay) for a in "1 1" "64 1"; do python3 scripts/rnn_vs_onnxruntime.py $a --runs 300; done
            python3 scripts/recurrent_vs_onnxruntime.py LSTM 1 1 --runs 300
            python3 scripts/linear_attention_vs_onnxruntime.py 1 1 16 128 --runs 300 ;;
    lstm-ort) python3 scripts/recurrent_vs_onnxruntime.py LSTM 64 512 ;;
    gru-ort) python3 scripts/recurrent_vs_onnxruntime.py GRU 64 512 ;;
    la-op-ort) python3 scripts/linear_attention_vs_onnxruntime.py --op ;;
    la-expanded-ort) python3 scripts/linear_attention_vs_onnxruntime.py --iterated ;;
    gpr-ort) python3 scripts/sklearn_gpr_vs_onnxruntime.py --model "${GPR_MODEL:-.devbin/gpr}" --copied-elements ;;
    forest-ort) python3 scripts/sklearn_forest_vs_onnxruntime.py --model "${FOREST_MODEL:-.devbin/forest}" ;;
    pools-ort) python3 scripts/pools_vs_onnxruntime.py ;;
    spectral-ort) python3 scripts/spectral_vs_onnxruntime.py ;;
    decoder-ort) python3 scripts/decoder_vs_onnxruntime.py --runs 100 ;;
    tests-gpu-kernels) run_tests 0 ;;
    tests-cpu-kernels) run_tests 1 ;;
    fuzz) run_tests "" fuzz ;;
    *) echo "unknown part '$1'" >&2; return 2 ;;
  esac
}

# Where nvidia-smi is present, each part's clocks, power and the driver's reasons for holding
# clocks down are logged beside it (PART.clocks.csv, every 200 ms): the same copy has run at
# 1.4 to 3.2 TB/s within one run of the table on the H200, and only the clocks can say why.
clock_fields="timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu="$clock_fields" --format=csv >/dev/null 2>&1 || clock_fields="timestamp,clocks.sm,clocks.mem,power.draw"
fi

status=0
for part in "${parts[@]}"; do
  file="$out/$part.txt"
  echo "== $part -> $file"
  start=$(date +%s)
  clock_log=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu="$clock_fields" --format=csv -lms 200 > "$out/$part.clocks.csv" 2>&1 &
    clock_log=$!
  fi
  { echo "# $part, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    timeout "$limit" bash -c "$(declare -f run_tests test_times run_part); bin='$bin' out='$out' run_part '$part'" 2>&1
    rc=$?
    echo "# exit $rc after $(( $(date +%s) - start )) s"
  } > "$file"
  [ -n "$clock_log" ] && kill "$clock_log" 2>/dev/null
  tail -n 1 "$file"
  grep -q '^# exit 0 ' "$file" || status=1
done
exit $status
