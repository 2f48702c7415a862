#!/usr/bin/env bash
# The whole test suite: the Rust tests of the crate and the demo on whatever adapter wgpu finds
# (lavapipe without a GPU; the numpy cross-check needs numpy, installed here when missing), then
# the demo page in headless Chromium (scripts/browser-test.sh, which installs its tools).
# --no-browser skips the browser part; other arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "installing numpy for the numpy cross-check test" >&2
  python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --break-system-packages numpy
fi
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
