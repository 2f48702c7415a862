#!/usr/bin/env bash
# Builds the demo for wasm32 + WebGPU (rustc-web, wasm-bindgen, headless Chromium), serves demo/www on
# 127.0.0.1 and drives Debian's Chromium through playwright-core:
#   1. with WebGPU (--enable-unsafe-webgpu, SwiftShader): every op's check must pass, with the
#      bundled picture, with edited parameters and with a picked file;
#   2. without it (the negative control): the page must report that it has no adapter, and the
#      runner must fail promptly rather than hang or pass.
# Installs what is missing (Debian's rustc-web + rust-web-src + lld, chromium, wasm-bindgen-cli
# matching Cargo.lock, playwright-core) and reuses what is already there.
# --update-docs writes the screenshot to docs/browser-demo.png (else target/web/).
# --serve [PORT] builds, then serves the page on 127.0.0.1:PORT (8000) for a browser of yours.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${WGPU_OPS_TOOLS:-$HOME/.cache/wgpu-ops-tools}
SHOT=$ROOT/target/web/browser-demo.png
[ "${1:-}" = "--update-docs" ] && SHOT=$ROOT/docs/browser-demo.png
SERVE=""
[ "${1:-}" = "--serve" ] && SERVE=${2:-8000}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "tools"
need_apt=()
{ [ -x /usr/bin/rustc ] && [ -d /usr/lib/rustlib/src/rust ] && [ -x /usr/bin/cargo ]; } \
  || need_apt+=(rustc-web cargo-web rust-web-src)
[ -n "$SERVE" ] || [ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  # rust-web-src must be exactly rustc-web's version: one apt command for both.
  $SUDO apt-get install -y --no-install-recommends "${need_apt[@]}"
fi
LLVM=$(/usr/bin/rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
WASM_LD=/usr/lib/llvm-$LLVM/bin/wasm-ld
if [ ! -x "$WASM_LD" ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y --no-install-recommends "lld-$LLVM"
fi
# The CLI must be the version of the wasm-bindgen crate in Cargo.lock.
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [ "$("$TOOLS/bin/wasm-bindgen" --version 2>/dev/null)" != "wasm-bindgen $WB_VERSION" ]; then
  # No --locked: its lock pins a webpki-roots release this registry lacks.
  cargo install -q wasm-bindgen-cli --version "$WB_VERSION" --root "$TOOLS"
fi
[ -f demo/node_modules/playwright-core/package.json ] \
  || (cd demo && npm ci --no-audit --no-fund --loglevel=error)

step "wasm build"
# Debian's compiler rebuilds std for wasm32 (rustup cannot fetch the target here); a target
# folder of its own keeps the native one warm.
# Warnings are errors here as in clippy: the web entry points are compiled only in this build.
RUSTFLAGS="-D warnings" RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$WASM_LD CARGO_TARGET_DIR=$ROOT/target/web \
  /usr/bin/cargo build --release -p wgpu-ops-demo --lib --target wasm32-unknown-unknown \
  -Zbuild-std=std,panic_abort
"$TOOLS/bin/wasm-bindgen" --target web --out-dir demo/www/pkg \
  target/web/wasm32-unknown-unknown/release/wgpu_ops_demo.wasm
ls -l demo/www/pkg/wgpu_ops_demo_bg.wasm

if [ -n "$SERVE" ]; then
  echo "open http://127.0.0.1:$SERVE/ in a browser with WebGPU (Ctrl-C stops)"
  exec python3 -m http.server "$SERVE" --bind 127.0.0.1 --directory demo/www
fi

step "serve"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory demo/www >/dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/index.html')" 2>/dev/null && break
  sleep 0.1
done
URL=http://127.0.0.1:$PORT/index.html

step "browser with WebGPU"
mkdir -p "$(dirname "$SHOT")"
node demo/browser-test.mjs "$URL" --screenshot "$SHOT" --upload demo/test-upload.png

step "browser without WebGPU (must fail, promptly)"
set +e
NEG=$(BROWSER_TEST_TIMEOUT_MS=60000 timeout 120 node demo/browser-test.mjs "$URL" --no-webgpu 2>&1)
RC=$?
set -e
echo "$NEG"
if [ $RC -eq 0 ]; then
  echo "error: the page passed without WebGPU"; exit 1
elif ! grep -q "WebGPU" <<<"$NEG" || grep -q "Timeout" <<<"$NEG"; then
  echo "error: without WebGPU the page did not report the missing adapter (rc $RC)"; exit 1
fi
echo "negative control: failed as it should (rc $RC, the page reported no WebGPU adapter)"
step "done"
