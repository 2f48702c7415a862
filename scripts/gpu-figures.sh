#!/usr/bin/env bash
# Takes the figures only a real GPU gives, in parts that each fit a few minutes, from release
# binaries built beforehand (`cargo build --release --examples`), and writes one file per part
# under OUT_DIR with the adapter's name at the top. On any machine it runs on whatever adapter
# wgpu picks, so it can be tried on lavapipe first.
#
#   scripts/gpu-figures.sh OUT_DIR [PART...]
#
# Parts (all when none are named): table (data movement and Scan overhead, bench/ layout),
# matmul, rnn, transfer, la-step, rnn-ort, rnn-ort-1, la-op-ort, la-expanded-ort.
# The *-ort parts need python3 with numpy, onnx and onnxruntime. BIN=DIR takes the binaries
# from DIR instead of target/release/examples; LIMIT=SECONDS bounds each part (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-figures.sh OUT_DIR [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(table matmul rnn transfer la-step rnn-ort rnn-ort-1 la-op-ort la-expanded-ort)
bin=${BIN:-target/release/examples}
limit=${LIMIT:-540}
. scripts/ensure-gpu.sh
mkdir -p "$out"
export ONNX_TIMING="$bin/onnx_timing"

run_part() {
  case "$1" in
    table) "$bin/bench" --out "$out/bench" ;;
    matmul) "$bin/bench" --matmul-only ;;
    rnn) "$bin/bench" --rnn-only ;;
    transfer) "$bin/bench" --transfer-only ;;
    la-step) "$bin/bench" --linear-attention-only ;;
    rnn-ort) python3 scripts/rnn_vs_onnxruntime.py 64 512 ;;
    rnn-ort-1) python3 scripts/rnn_vs_onnxruntime.py 1 512 ;;
    la-op-ort) python3 scripts/linear_attention_vs_onnxruntime.py --op ;;
    la-expanded-ort) python3 scripts/linear_attention_vs_onnxruntime.py --node-by-node ;;
    *) echo "unknown part '$1'" >&2; return 2 ;;
  esac
}

status=0
for part in "${parts[@]}"; do
  file="$out/$part.txt"
  echo "== $part -> $file"
  start=$(date +%s)
  { echo "# $part, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    timeout "$limit" bash -c "$(declare -f run_part); bin='$bin' out='$out' run_part '$part'" 2>&1
    rc=$?
    echo "# exit $rc after $(( $(date +%s) - start )) s"
  } > "$file"
  tail -n 1 "$file"
  grep -q '^# exit 0 ' "$file" || status=1
done
exit $status
