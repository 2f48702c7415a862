#!/usr/bin/env bash
# Runs the benchmark (release build) and writes bench/results.json, bench/throughput.png and
# bench/scan.json. Extra arguments go to the benchmark (--quick, --max-mib N, --case TEXT).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
mkdir -p bench
cargo run --release --example bench -- --out bench "$@" | tee bench/table.txt
