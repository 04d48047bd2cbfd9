// Opens ringdump serve's own page in headless Chromium (Debian's chromium, driven over the
// DevTools protocol), waits until it has drawn frames of TOPIC, takes a screenshot of that
// channel's canvas and checks its pixels: they must be the rgb8 test pattern of one frame
// (recovered from its first word), exactly, pixel for pixel.
//
//   node check_page.mjs URL TOPIC WIDTH HEIGHT WORK_DIR [CHROMIUM]
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import WebSocket from "ws";
import { firstPatternMismatch, originSequence } from "./pattern.mjs";

const [url, topic, widthText, heightText, work, chromiumPath = "chromium"] = process.argv.slice(2);
const canvasSelector = `canvas[data-topic="${topic}"]`;
const width = Number(widthText), height = Number(heightText);
let browser;
function fail(what) {
  console.error(`check_page: FAIL: ${what}`);
  browser?.kill("SIGKILL");
  process.exit(1);
}
setTimeout(() => fail("timed out"), 90000).unref();

// ---- Chromium and the DevTools protocol ------------------------------------------------------
const profile = mkdtempSync(path.join(work, "chromium-"));
browser = spawn(chromiumPath, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--remote-debugging-port=0", `--user-data-dir=${profile}`, "--window-size=800,600",
  "--force-device-scale-factor=1", "--force-color-profile=srgb", "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });
browser.on("error", (e) => fail(`cannot start ${chromiumPath}: ${e.message}`));
const endpoint = await new Promise((resolve) => {
  let text = "";
  browser.stderr.on("data", (chunk) => {
    text += chunk;
    const m = text.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) resolve(m[1]);
  });
  browser.on("exit", (code) => fail(`${chromiumPath} exited ${code}: ${text.slice(-500)}`));
});
const cdp = new WebSocket(endpoint);
await new Promise((resolve, reject) => { cdp.on("open", resolve); cdp.on("error", reject); });
let nextId = 1;
const pending = new Map();
cdp.on("message", (data) => {
  const m = JSON.parse(data.toString());
  if (m.id && pending.has(m.id)) {
    const { resolve, reject } = pending.get(m.id);
    pending.delete(m.id);
    if (m.error) reject(new Error(`${m.error.message}`)); else resolve(m.result);
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  cdp.send(JSON.stringify({ id, method, params, sessionId }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

const { targetId } = await send("Target.createTarget", { url });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
async function evaluate(expression) {
  const r = await send("Runtime.evaluate", { expression, returnByValue: true }, sessionId);
  return r.result.value;
}
let drawn = 0;
const framesOf = `Number(document.querySelector('${canvasSelector}')?.dataset.frames ?? 0)`;
for (let i = 0; i < 300 && drawn < 5; i++) {
  drawn = (await evaluate(framesOf)) ?? 0;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
if (drawn < 5) fail(`the page drew ${drawn} frames of ${topic} in 30 s`);
// Where the canvas is now: the page lays out again as channels are advertised, so this is asked
// before every screenshot.
async function canvasBox() {
  const rect = await evaluate(
    `JSON.stringify(document.querySelector('${canvasSelector}').getBoundingClientRect())`);
  const box = JSON.parse(rect);
  if (Math.round(box.width) !== width || Math.round(box.height) !== height) {
    fail(`the canvas of ${topic} is ${box.width}x${box.height}, want ${width}x${height}`);
  }
  return box;
}
// A screenshot of one colour is a canvas not composited yet (Chromium may capture before the
// latest putImageData reached the screen) or one that moved: look again, up to 10 times. Anything else must be one
// frame's pattern, exactly: a torn or wrong picture fails at once.
let png, w, h, rgb;
for (let attempt = 0; ; attempt++) {
  const box = await canvasBox();
  const shot = await send("Page.captureScreenshot", {
    format: "png",
    clip: { x: box.x, y: box.y, width, height, scale: 1 },
  }, sessionId);
  png = Buffer.from(shot.data, "base64");
  writeFileSync(path.join(work, "page.png"), png);
  ({ w, h, rgb } = decodePng(png));
  if (!rgb.every((v) => v === rgb[0])) break;
  if (attempt === 9) fail(`10 screenshots of ${topic}'s canvas are one colour (${rgb[0]}): nothing drawn`);
  await new Promise((resolve) => setTimeout(resolve, 200));
}
browser.kill("SIGKILL");
try {
  rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
} catch {
  // Chromium's helpers may still be writing to it as they exit: serve_test.sh clears the rest.
}

// ---- PNG (8-bit RGB or RGBA) to RGB bytes -----------------------------------------------------
function decodePng(buf) {
  let at = 8, w = 0, h = 0, type = 0, depth = 0;
  const idat = [];
  while (at < buf.length) {
    const n = buf.readUInt32BE(at);
    const kind = buf.toString("latin1", at + 4, at + 8);
    const body = buf.subarray(at + 8, at + 8 + n);
    if (kind === "IHDR") {
      w = body.readUInt32BE(0); h = body.readUInt32BE(4); depth = body[8]; type = body[9];
    } else if (kind === "IDAT") {
      idat.push(body);
    }
    at += 12 + n;
  }
  if (depth !== 8 || (type !== 2 && type !== 6)) fail(`PNG depth ${depth} colour type ${type}`);
  const bpp = type === 6 ? 4 : 3;
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = w * bpp;
  const out = new Uint8Array(w * h * bpp);
  for (let y = 0; y < h; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? out[y * stride + x - bpp] : 0;
      const b = y > 0 ? out[(y - 1) * stride + x] : 0;
      const c = x >= bpp && y > 0 ? out[(y - 1) * stride + x - bpp] : 0;
      let v = line[x];
      if (filter === 1) v += a;
      else if (filter === 2) v += b;
      else if (filter === 3) v += (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      out[y * stride + x] = v & 255;
    }
  }
  const rgb = new Uint8Array(w * h * 3);
  for (let i = 0; i < w * h; i++) {
    rgb[i * 3] = out[i * bpp]; rgb[i * 3 + 1] = out[i * bpp + 1]; rgb[i * 3 + 2] = out[i * bpp + 2];
  }
  return { w, h, rgb };
}
if (w !== width || h !== height) fail(`screenshot is ${w}x${h}`);
const sequence = originSequence(rgb);
const bad = firstPatternMismatch(rgb, sequence);
if (bad !== -1) {
  fail(`screenshot pixel word ${bad} (pixel ${Math.floor(bad * 8 / 3)}) is not the pattern of ` +
       `frame ${sequence} (saved as ${path.join(work, "page.png")})`);
}
console.log(`check_page: ok: ${drawn}+ frames of ${topic} drawn; the ${w}x${h} screenshot is frame ` +
            `${sequence}'s pattern, every pixel`);
process.exit(0);
