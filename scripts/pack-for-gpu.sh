#!/usr/bin/env bash
# Packs what scripts/gpu-figures.sh needs on a GPU machine that has no Rust toolchain, into one
# folder beside the checkout's files: the release examples and test binaries (stripped, one xz
# archive whose large dictionary shares their common code: about 260 MB becomes about 20 MB) and
# the generated ONNX test data. On the GPU machine, from the same checkout,
# `scripts/pack-for-gpu.sh --unpack DIR` puts them back where the scripts look for them.
#
#   scripts/pack-for-gpu.sh DIR            build, then pack into DIR
#   scripts/pack-for-gpu.sh --unpack DIR   unpack DIR into target/
#
# Test binaries hold the checkout's absolute path (for their data files): unpack into a checkout
# at the same path, or link that path to it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --unpack ]; then
  dir=${2:?usage: scripts/pack-for-gpu.sh --unpack DIR}
  tar -xJf "$dir/binaries.tar.xz"
  tar -xJf "$dir/test-data.tar.xz"
  echo "checkout packed at $(cat "$dir/checkout-path"), unpacked at $PWD"
  exit 0
fi
dir=${1:?usage: scripts/pack-for-gpu.sh DIR}
mkdir -p "$dir"
cargo build --release --examples --bins
# The test binaries' paths, as cargo reports them (target/release/deps holds older builds too).
tests=$(cargo test --release --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
examples=$(find target/release/examples -maxdepth 1 -type f -executable ! -name '*-*')
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for f in $tests $examples target/release/wgpu-ops; do
  f=${f#"$PWD/"}
  mkdir -p "$stage/$(dirname "$f")"
  strip -o "$stage/$f" "$f"
done
tar -C "$stage" -cf - target | xz -T0 --lzma2=preset=6,dict=256MiB > "$dir/binaries.tar.xz"
for d in onnx-node-tests sklearn-models ort-differential; do
  [ -d "target/$d" ] || echo "target/$d is missing: make it with scripts/onnx_node_tests.py, sklearn_models.py, ort_differential.py" >&2
done
tar -cf - $(for d in onnx-node-tests sklearn-models ort-differential; do [ -d "target/$d" ] && echo "target/$d"; done) |
  xz -T0 > "$dir/test-data.tar.xz"
echo "$PWD" > "$dir/checkout-path"
ls -l "$dir"
