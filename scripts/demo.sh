#!/usr/bin/env bash
# Runs each op on the default adapter and checks it against the CPU reference.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
exec cargo run --example demo "$@"
