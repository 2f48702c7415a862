#!/usr/bin/env bash
# The whole test suite: the Rust tests of the crate and the demo on whatever adapter wgpu finds
# (lavapipe without a GPU; the numpy cross-check needs numpy and the ONNX node tests the `onnx`
# package, installed here when missing), then
# the demo page in headless Chromium (scripts/browser-test.sh, which installs its tools).
# --no-browser skips the browser part; other arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "installing numpy for the numpy cross-check test" >&2
  python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --break-system-packages numpy
fi
if ! python3 -c "import onnx" 2>/dev/null; then
  echo "installing onnx for the ONNX node tests" >&2
  python3 -m pip install -q onnx 2>/dev/null || python3 -m pip install -q --break-system-packages onnx
fi
# The node tests are exported afresh, so they follow the installed onnx version.
rm -rf target/onnx-node-tests
python3 scripts/onnx_node_tests.py target/onnx-node-tests
browser=1
args=()
for a in "$@"; do
  if [ "$a" = "--no-browser" ]; then browser=0; else args+=("$a"); fi
done
cargo test --workspace "${args[@]}"
if [ $browser = 1 ]; then
  scripts/browser-test.sh
else
  echo "note: the browser test was skipped (--no-browser)" >&2
fi
