// The demo page: decodes pictures with a canvas, runs the ops through the wasm module and draws
// the results. #status gets data-done (and data-passed / data-failed, or data-error) when a run
// has finished, for the headless test.
import init, { createDemo } from "./pkg/wgpu_ops_demo.js";

const DEFAULTS = {
  strided_slice: "[24:-24, ::-1]",
  slice_start: "0, 0",
  slice_stop: "2147483647, 2147483647",
  slice_step: "3, 3",
  slice_axes: "0, 1",
  block: 2,
};
const MAX_SIDE = 512;
const $ = (id) => document.getElementById(id);
const status = $("status");
let demo = null;
let picture = null; // {width, height, rgba}
let runs = 0;

function finish(attrs, text) {
  status.textContent = text;
  for (const [k, v] of Object.entries(attrs)) status.dataset[k] = v;
  status.dataset.runs = String(runs);
  status.dataset.done = "1";
}

async function decode(src) {
  const img = new Image();
  img.src = src;
  await img.decode();
  const scale = Math.min(1, MAX_SIDE / Math.max(img.naturalWidth, img.naturalHeight));
  const width = Math.max(1, Math.round(img.naturalWidth * scale));
  const height = Math.max(1, Math.round(img.naturalHeight * scale));
  const canvas = $("source");
  canvas.width = width;
  canvas.height = height;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.clearRect(0, 0, width, height);
  ctx.drawImage(img, 0, 0, width, height);
  $("source-meta").textContent = `${width} × ${height} RGBA → u8 tensor [${height}, ${width}, 4]`;
  return { width, height, rgba: ctx.getImageData(0, 0, width, height).data };
}

function draw(canvas, pic, rows = pic.height) {
  canvas.width = pic.width;
  canvas.height = pic.height;
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, pic.width, pic.height);
  const image = new ImageData(new Uint8ClampedArray(pic.rgba), pic.width, pic.height);
  ctx.putImageData(image, 0, 0, 0, 0, pic.width, rows);
}

// The Scan's result is drawn as it evolves: row i appears after the i-th iteration's state.
function animateRows(canvas, pic, ms = 1200) {
  return new Promise((resolve) => {
    const start = performance.now();
    const step = (now) => {
      const rows = Math.min(pic.height, Math.ceil(((now - start) / ms) * pic.height));
      draw(canvas, pic, rows);
      if (rows < pic.height) requestAnimationFrame(step);
      else resolve();
    };
    requestAnimationFrame(step);
  });
}

const CAPTIONS = {
  strided_slice: "Crop, flip and subsample with StridedSlice-1.",
  slice: "Subsample with Slice-8 (stop past the end is clamped).",
  space_to_batch: "SpaceToBatch-2: the block² sub-images, side by side.",
  batch_to_space: "BatchToSpace-2 puts them back.",
  scan: "Scan-16: running sum of the rows; row i shows the mean of rows 0..i.",
  scan_f16: "The same Scan in f16, each sum rounded to nearest-even by the word kernel.",
  scan_i64: "The same Scan in i64: without 64-bit shader integers, added as u32 pairs with a carry.",
  scan_f64: "The same Scan in f64 (colours / 255): without f64 shaders, each sum rounded from the bits on u32 pairs.",
};

function card(result) {
  const div = document.createElement("div");
  div.className = "panel card";
  div.dataset.op = result.op;
  div.dataset.check = result.ok ? "pass" : "fail";
  const h = document.createElement("h2");
  h.textContent = result.op;
  const caption = document.createElement("div");
  caption.className = "meta";
  caption.textContent = CAPTIONS[result.name] ?? "";
  const params = document.createElement("code");
  params.textContent = result.params;
  div.append(h, caption, params);
  let canvas = null;
  if (result.picture) {
    canvas = document.createElement("canvas");
    div.append(canvas);
  }
  const meta = document.createElement("div");
  meta.className = "meta";
  const time = result.millis > 0 ? `${result.millis.toFixed(1)} ms` : "";
  meta.textContent = `shape [${result.shape.join(", ")}], ${result.dtype}${time ? ", " + time : ""}`;
  const check = document.createElement("div");
  check.className = "check " + (result.ok ? "pass" : "fail");
  check.textContent = (result.ok ? "✓ " : "✗ ") + result.check;
  div.append(meta, check);
  return { div, canvas };
}

function settings() {
  const s = {};
  for (const k of Object.keys(DEFAULTS)) {
    s[k] = k === "block" ? Number($(k).value) : $(k).value;
  }
  return s;
}

async function run() {
  if (!demo || !picture) return;
  runs += 1;
  delete status.dataset.done;
  status.textContent = "Running…";
  $("run").disabled = true;
  try {
    const results = await demo.run(picture.rgba, picture.width, picture.height, settings());
    const list = $("results");
    list.replaceChildren();
    const animations = [];
    for (const r of results) {
      const { div, canvas } = card(r);
      list.append(div);
      if (canvas && r.name === "scan") animations.push(animateRows(canvas, r.picture));
      else if (canvas) draw(canvas, r.picture);
    }
    await Promise.all(animations);
    const passed = results.filter((r) => r.ok).length;
    const failed = results.length - passed;
    finish(
      { passed: String(passed), failed: String(failed) },
      failed === 0
        ? `All ${passed} results match the CPU reference.`
        : `${failed} of ${results.length} results do NOT match the CPU reference.`,
    );
  } catch (e) {
    finish({ error: String(e), passed: "0", failed: "0" }, `Error: ${e}`);
  } finally {
    $("run").disabled = false;
  }
}

// wgpu gets no adapter name from the browser; the browser's own GPUAdapterInfo says more.
async function describeAdapter() {
  const parts = [demo.adapter()];
  try {
    const info = (await navigator.gpu.requestAdapter())?.info;
    if (info) {
      const text = [info.vendor, info.architecture, info.device, info.description]
        .filter((x) => x)
        .join(" ");
      parts.push(`browser: ${text || "no details given"}${info.isFallbackAdapter ? " (fallback adapter)" : ""}`);
    }
  } catch (_) {
    // Only a description; the demo has its device already.
  }
  return parts.join("; ");
}

async function main() {
  for (const [k, v] of Object.entries(DEFAULTS)) $(k).value = v;
  await init();
  if (!navigator.gpu) {
    throw new Error("WebGPU is not available in this browser (navigator.gpu is missing)");
  }
  try {
    demo = await createDemo();
  } catch (e) {
    throw new Error(`no WebGPU adapter: ${e.message ?? e}`);
  }
  $("adapter").textContent = `Adapter: ${await describeAdapter()}`;
  picture = await decode("sample.png");
  $("run").disabled = false;
  $("run").addEventListener("click", run);
  $("file").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    if (!file) return;
    const url = URL.createObjectURL(file);
    try {
      picture = await decode(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    await run();
  });
  await run();
}

main().catch((e) => {
  $("adapter").textContent = String(e.message ?? e);
  finish({ error: String(e.message ?? e), passed: "0", failed: "0" }, `Error: ${e.message ?? e}`);
});
