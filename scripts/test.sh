#!/usr/bin/env bash
# The whole test suite: the Rust tests of the crate and the demo on whatever adapter wgpu finds
# (three times: with its own kernel choice, with the GPU kernel variants, and with those
# within WebGPU's default limits)
# (lavapipe without a GPU; the numpy cross-check needs numpy, the ONNX node tests the `onnx`
# package and the scikit-learn model test onnxruntime, scikit-learn and skl2onnx, installed here
# when missing), then
# the demo page in headless Chromium (scripts/browser-test.sh, which installs its tools).
# --no-browser skips the browser part; other arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-gpu.sh
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "installing numpy for the numpy cross-check test" >&2
  python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --break-system-packages numpy
fi
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}
if ! python3 -c "import onnx" 2>/dev/null; then
  echo "installing onnx for the ONNX node tests" >&2
  pip_install onnx
fi
# ml_dtypes 0.7 casts floats beyond int4's and int2's range to 0 (0.6 and before wrap them, as
# onnxruntime does), and the onnx package's Cast node tests take their expected outputs from
# it: keep the wrapping one (docs/spec-decisions.md 25).
if ! python3 -c "import ml_dtypes, sys; sys.exit(tuple(map(int, ml_dtypes.__version__.split('.')[:2])) >= (0, 7))" 2>/dev/null; then
  pip_install "ml_dtypes<0.7"
fi
if ! python3 -c "import onnxruntime, sklearn, skl2onnx" 2>/dev/null; then
  echo "installing onnxruntime, scikit-learn and skl2onnx for the scikit-learn model test" >&2
  pip_install onnxruntime scikit-learn skl2onnx
fi
# The node tests are exported afresh, so they follow the installed onnx version.
rm -rf target/onnx-node-tests
python3 scripts/onnx_node_tests.py target/onnx-node-tests
rm -rf target/sklearn-models target/ort-differential
python3 scripts/sklearn_models.py target/sklearn-models
python3 scripts/ort_differential.py target/ort-differential
browser=1
args=()
for a in "$@"; do
  if [ "$a" = "--no-browser" ]; then browser=0; else args+=("$a"); fi
done
cargo test --workspace "${args[@]}"
# Again with the kernels meant for GPUs (MatMul tiles, the copy kernel, Scan iterations inside
# the compute pass), which a CPU adapter would not pick: lavapipe checks them too.
echo "== the suite again with WGPU_OPS_CPU_KERNELS=0 (the GPU kernel variants)" >&2
WGPU_OPS_CPU_KERNELS=0 cargo test --workspace "${args[@]}"
# And those kernels within WebGPU's default limits, as browsers give them (lavapipe offers
# more): buffers bound at offsets aligned to 256 bytes (lavapipe: 32), 8 storage buffers per
# kernel, buffers of 256 MiB; with f16 converted by integer arithmetic, as on adapters whose
# built-in conversions are not exact (lavapipe's are: the passes above use them).
echo "== the suite again with WGPU_OPS_CPU_KERNELS=0, WGPU_OPS_WEBGPU_LIMITS=1 and WGPU_OPS_NATIVE_F16=0" >&2
WGPU_OPS_CPU_KERNELS=0 WGPU_OPS_WEBGPU_LIMITS=1 WGPU_OPS_NATIVE_F16=0 cargo test --workspace "${args[@]}"
# The README's example of every data-movement op on many dtypes (built by the passes above),
# which exits non-zero where a result differs from the CPU reference.
echo "== cargo run --example demo" >&2
cargo run -q --example demo >/dev/null
if [ $browser = 1 ]; then
  scripts/browser-test.sh
else
  echo "note: the browser test was skipped (--no-browser)" >&2
fi
