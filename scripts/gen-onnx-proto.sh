#!/usr/bin/env bash
# Regenerates src/onnx/proto.rs (the ONNX protobuf types, committed so that building needs no
# protoc) from the onnx-data.proto (which imports onnx.proto) shipped in the `onnx` pip package:
# models, and the sequences and optionals of test data files.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import onnx" 2>/dev/null || python3 -m pip install -q onnx
proto="$(python3 -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "onnx-data.proto"))')"
cargo run -q --release --manifest-path tools/onnx-proto/Cargo.toml -- "$proto" src/onnx/proto.rs
rustfmt --edition 2021 src/onnx/proto.rs
echo "wrote src/onnx/proto.rs from $proto"
