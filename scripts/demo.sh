#!/usr/bin/env bash
# The image demo: StridedSlice, Slice, SpaceToBatch, BatchToSpace and Scan on a picture (the
# bundled one, or the PNG given), each checked against the CPU reference; writes the results as
# PNG files (docs/demo/ unless --out DIR) and prints a table. --help lists the parameters.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
exec cargo run -q -p wgpu-ops-demo --bin image-demo -- "$@"
