#!/usr/bin/env bash
# Runs the benchmark (release build) and writes bench/results.json, bench/throughput.png and
# bench/scan.json. Extra arguments go to the benchmark (--quick, --max-mib N, --case TEXT).
# A run of selected cases (--case, --no-scan) writes to target/bench-subset instead, so the
# committed full results are not replaced by partial ones.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
out=bench
for a in "$@"; do
  case "$a" in --case|--widths|--no-scan) out=target/bench-subset ;; esac
done
mkdir -p "$out"
cargo run --release --example bench -- --out "$out" "$@" | tee "$out/table.txt"
