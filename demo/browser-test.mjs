// Drives Debian's Chromium (headless, through playwright-core) on the demo page and asserts that
// every op's check passed, first with the bundled picture and default parameters, then with
// edited parameters and a picked file. Exits 0 when all passed, 1 otherwise (printing why).
//
// usage: node browser-test.mjs URL [--screenshot FILE] [--upload FILE] [--no-webgpu]
// --no-webgpu leaves out --enable-unsafe-webgpu: the page must then report that it has no
// adapter (the negative control); this script exits 1 in that case too.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const argv = process.argv.slice(2);
const url = argv[0];
const opt = (name) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const webgpu = !argv.includes("--no-webgpu");
const screenshot = opt("--screenshot");
const upload = opt("--upload");
const TIMEOUT_MS = Number(process.env.BROWSER_TEST_TIMEOUT_MS ?? 180000);
const EXPECTED_OPS = ["StridedSlice", "Slice", "SpaceToBatch", "BatchToSpace", "Scan", "Scan f16", "Scan i64", "Scan f64"];

const profile = mkdtempSync(join(tmpdir(), "wgpu-ops-chromium-"));
const args = [
  "--no-sandbox",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];
if (webgpu) args.push("--enable-unsafe-webgpu");

let failures = 0;
const fail = (msg) => {
  console.log(`FAIL: ${msg}`);
  failures += 1;
};

const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args,
  viewport: { width: 1320, height: 900 },
});
try {
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") console.log(`page ${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
  await page.goto(url);

  // Waits for run number `n` to finish and checks its results.
  const checkRun = async (n, label, expect = {}) => {
    await page.waitForSelector(`#status[data-done][data-runs="${n}"], #status[data-error]`, {
      timeout: TIMEOUT_MS,
    });
    const status = await page.$eval("#status", (s) => ({ ...s.dataset, text: s.textContent }));
    const adapter = await page.$eval("#adapter", (a) => a.textContent);
    console.log(`[${label}] ${adapter}`);
    if (status.error) {
      fail(`${label}: the page reports an error: ${status.error}`);
      return;
    }
    const cards = await page.$$eval(".card", (cs) =>
      cs.map((c) => ({
        op: c.dataset.op,
        check: c.dataset.check,
        meta: c.querySelectorAll(".meta")[1]?.textContent ?? "",
        text: c.querySelector(".check").textContent,
        params: c.querySelector("code").textContent,
      })),
    );
    for (const c of cards) {
      console.log(`[${label}] ${c.check === "pass" ? "ok  " : "FAIL"} ${c.op.padEnd(13)} ${c.meta}`);
      console.log(`[${label}]      ${c.params}`);
      console.log(`[${label}]      ${c.text}`);
    }
    const ops = cards.map((c) => c.op).join(",");
    if (ops !== EXPECTED_OPS.join(",")) fail(`${label}: ops on the page are ${ops}`);
    for (const c of cards) if (c.check !== "pass") fail(`${label}: ${c.op}: ${c.text}`);
    if (status.failed !== "0" || status.passed !== String(EXPECTED_OPS.length)) {
      fail(`${label}: status says ${status.passed} passed, ${status.failed} failed`);
    }
    for (const [op, want] of Object.entries(expect)) {
      const html = await page.$eval(`.card[data-op="${op}"]`, (c) => c.textContent);
      if (!html.includes(want)) fail(`${label}: ${op} should show '${want}'`);
    }
  };

  await checkRun(1, "bundled picture, defaults", {
    StridedSlice: "shape [208, 384, 4], u8",
    SpaceToBatch: "shape [4, 128, 192, 4], u8",
  });
  if (failures === 0 && screenshot) {
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`screenshot: ${screenshot}`);
  }
  if (failures === 0) {
    // Parameters edited on the page: channel 0 of every other row, mirrored; 3x3 blocks (the
    // sample's 256 rows need padding then).
    await page.fill("#strided_slice", "[::2, ::-1, 0]");
    await page.fill("#slice_axes", "-3, -2");
    await page.fill("#block", "3");
    await page.click("#run");
    await checkRun(2, "edited parameters", {
      StridedSlice: "shape [128, 384], u8",
      SpaceToBatch: "pads_end=[0, 2, 0, 0]",
    });
  }
  if (failures === 0 && upload) {
    await page.setInputFiles("#file", upload);
    await checkRun(3, "picked file");
  }
} catch (e) {
  fail(`${e.message ?? e}`);
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(failures === 0 ? "browser test passed" : `browser test FAILED (${failures})`);
process.exit(failures === 0 ? 0 : 1);
