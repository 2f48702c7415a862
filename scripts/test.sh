#!/usr/bin/env bash
# The whole test suite. GPU tests run on whatever adapter wgpu finds (lavapipe without a GPU);
# the numpy cross-check needs python3 with numpy, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "installing numpy for the numpy cross-check test" >&2
  python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --break-system-packages numpy
fi
exec cargo test "$@"
