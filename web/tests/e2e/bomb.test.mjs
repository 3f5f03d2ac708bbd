// Issue 44, high item 4: a gzip bomb (8 MiB of gzip that inflates to 8 GiB of zeros) given to the
// page by URL (?trace=, raw gzip and Content-Encoding: gzip) and by the file picker and a drop.
// The page must refuse it within 2 s, stay responsive meanwhile, and keep the renderer's memory
// bounded. Runs the built dist/ (playwright-core + Debian Chromium, like page.test.mjs) behind a
// small loopback server of its own, which also serves the hostile responses; the bomb is made
// here, in memory, from one repeated deflate block (milliseconds), never written to the tree.
// BOMB_MIB sets the bomb's inflated size (default 8192); DIST= runs it against another build.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createReadStream, existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { loadavg, tmpdir } from "node:os";
import { extname, join, resolve, sep } from "node:path";
import { constants, crc32, deflateRawSync, gunzipSync } from "node:zlib";
import { chromium } from "playwright-core";

const WEB = resolve(import.meta.dirname, "../..");
const DIST = process.env.DIST ? resolve(process.env.DIST) : join(WEB, "dist");
const LIMIT = Number(/MAX_TRACE_BYTES = (\d+) \* 1024 \* 1024/.exec(readFileSync(join(WEB, "src/trace.ts"), "utf8"))[1]) * 1024 * 1024;
const BOMB_BYTES = Number(process.env.BOMB_MIB ?? 8192) * 1024 * 1024;
const BLOCK = 4 * 1024 * 1024;         // zeros per repeated deflate block
const ANSWER_MS = 2000;                // the tab answers, and the bomb is refused, within this
const RSS_PEAK_MB = 768;               // the renderer's peak resident memory (VmHWM) stays below this
const HEAP_MB = 128;                   // JS heap + ArrayBuffer backing stores after the refusal

/** CRC-32 of `len` zero bytes without touching them: the register update for one zero bit is a
 * linear map over GF(2), applied 8*len times by square-and-multiply (32x32 bit matrices). */
function crc32OfZeros(len) {
  const times = (m, v) => { let s = 0; for (let i = 0; v; i++, v >>>= 1) if (v & 1) s ^= m[i]; return s >>> 0; };
  let m = Array.from({ length: 32 }, (_, i) => (i === 0 ? 0xedb88320 : 2 ** (i - 1)));
  let v = 0xffffffff;
  for (let bits = BigInt(len) * 8n; bits; bits >>= 1n) {
    if (bits & 1n) v = times(m, v);
    m = m.map((c) => times(m, c));
  }
  return (v ^ 0xffffffff) >>> 0;
}

/** A valid gzip of `total` zero bytes (a multiple of BLOCK). A sync-flushed deflate of BLOCK zeros
 * refers back only inside itself (distance 1) and ends byte-aligned and not final, so the same bytes
 * repeated decode to BLOCK zeros each; an empty final block and the trailer close the member. */
function gzipOfZeros(total, block = BLOCK) {
  const body = deflateRawSync(Buffer.alloc(block), { level: 9, finishFlush: constants.Z_SYNC_FLUSH });
  const trailer = Buffer.alloc(8);
  trailer.writeUInt32LE(crc32OfZeros(total), 0);
  trailer.writeUInt32LE(total % 2 ** 32, 4);
  return Buffer.concat([Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]), ...Array(total / block).fill(body), Buffer.from([3, 0]), trailer]);
}

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".gz": "application/gzip", ".svg": "image/svg+xml", ".png": "image/png" };
let server, base, browser, bomb, tmp;
const served = new Map();   // path -> { at, closedEarly, sent } for the hostile responses
let gate = Promise.resolve();  // bomb/* answers wait for this (the test opens it once the page is idle)

/** dist/ as a plain static server (no gzip_static: the page falls back to x.json.gz), plus bomb/*. */
function handle(req, res) {
  const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
  if (path.startsWith("/bomb/")) return void gate.then(() => hostile(path, res));
  // /broken/: the page again, whose data/manifest.json download breaks off
  if (path === "/broken/data/manifest.json") return void hostile("/bomb/broken.json", res);
  const file = resolve(DIST, "." + (path.endsWith("/") ? path + "index.html" : path).replace(/^\/broken\//, "/"));
  if (!file.startsWith(DIST + sep) || !existsSync(file) || !statSync(file).isFile()) { res.writeHead(404); return void res.end(); }
  res.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" });
  createReadStream(file).pipe(res);
}

function hostile(path, res) {
  const rec = { at: Date.now(), closedEarly: false, sent: 0 };
  served.set(path, rec);
  res.on("close", () => { rec.closedEarly = !res.writableFinished; });
  const send = (headers, body) => { res.writeHead(200, headers); rec.sent = body.length; res.end(body); };
  switch (path) {
    case "/bomb/raw.json.gz": return send({ "Content-Type": "application/gzip", "Content-Length": bomb.length }, bomb);
    case "/bomb/encoded.json": return send({ "Content-Type": "application/json", "Content-Encoding": "gzip", "Content-Length": bomb.length }, bomb);
    case "/bomb/chunked.json.gz": {    // no Content-Length: the page learns the size only by reading
      res.writeHead(200, { "Content-Type": "application/gzip" });
      let i = 0;
      const pump = () => { while (i < bomb.length) { const ok = res.write(bomb.subarray(i, i += 65536)); rec.sent = i; if (!ok) return void res.once("drain", pump); } res.end(); };
      return pump();
    }
    case "/bomb/endless.json": {       // plain bytes without end and without Content-Length
      res.writeHead(200, { "Content-Type": "application/json" });
      const piece = Buffer.alloc(65536, 0x20);
      const pump = () => { while (!res.destroyed) { rec.sent += piece.length; if (!res.write(piece)) return void res.once("drain", pump); } };
      return pump();
    }
    case "/bomb/declared.json":        // says 1 GB up front; refused before a byte is read
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": 1e9 });
      return void res.write("{");
    case "/bomb/broken.json":          // the connection drops mid-body (the browser says "Failed to fetch")
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": 100000 });
      res.write("{\"format\": ");
      return void setTimeout(() => res.socket?.destroy(), 50);
    default: res.writeHead(404); return void res.end();
  }
}

before(async () => {
  if (!existsSync(join(DIST, "index.html"))) throw new Error("dist/ is missing: run `vite build` first");
  const t = performance.now();
  bomb = gzipOfZeros(BOMB_BYTES);
  console.log(`# bomb: ${bomb.length} bytes of gzip -> ${BOMB_BYTES} bytes, made in ${(performance.now() - t).toFixed(0)} ms`);
  tmp = mkdtempSync(join(tmpdir(), "monolith-bomb-"));
  writeFileSync(join(tmp, "bomb.json.gz"), bomb);
  writeFileSync(join(tmp, "huge.json.gz"), "");
  truncateSync(join(tmp, "huge.json.gz"), LIMIT + 1);   // sparse: refused by its size alone
  server = createServer(handle);
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  base = `http://127.0.0.1:${server.address().port}/`;
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
});
after(async () => {
  await browser?.close();
  server?.closeAllConnections();
  await new Promise((ok) => (server ? server.close(ok) : ok()));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Peak resident memory (VmHWM, MB) of the page's renderer process(es), from /proc. */
async function rendererPeakMb() {
  const cdp = await browser.newBrowserCDPSession();
  const { processInfo } = await cdp.send("SystemInfo.getProcessInfo");
  await cdp.detach();
  const peaks = processInfo.filter((p) => p.type === "renderer").map((p) => {
    try { return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${p.id}/status`, "utf8"))[1]) / 1024; } catch { return 0; }
  });
  assert.ok(peaks.length, "found the renderer process");
  return Math.max(...peaks);
}

/** Opens the page (optionally with ?trace=, whose answer is held back until the page is idle),
 * runs `trigger`, then watches until #trace-error names `name`. Measured from the moment the
 * hostile bytes are released: the delay of the refusal, the slowest answer of the page to the
 * test and the longest stall of its main thread (a 20 ms timer's longest gap), the main thread's
 * CPU time, and memory: the JS heap with its ArrayBuffers after, the renderer's peak RSS. */
async function refused(query, trigger, name) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.addInitScript(() => {
    let last = performance.now();
    window.__gap = 0;
    setInterval(() => { const t = performance.now(); window.__gap = Math.max(window.__gap, t - last); last = t; }, 20);
  });
  let open = () => {};
  if (query) gate = new Promise((r) => { open = r; });
  const cdp = await ctx.newCDPSession(page);
  await cdp.send("Performance.enable");
  const cpu = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value])).ThreadTime;
  try {
    await page.goto(base + query, { timeout: 15_000 });
    try {
      await page.waitForSelector("body[data-ready='1']", { timeout: 15_000 });
      await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0, null, { timeout: 15_000 });
    } catch (e) {
      const state = await page.evaluate(() => ["#status", "#xray-info", "#trace-error"].map((q) => `${q}: ${document.querySelector(q)?.textContent}`).join("; "));
      assert.fail(`the page did not draw its committed trace before the test (${state}; page errors ${JSON.stringify(errors)}): ${e}`);
    }
    await page.evaluate(() => { window.__gap = 0; });
    const shown = await page.locator("#xray-version").inputValue();
    const cpu0 = await cpu();
    const t0 = Date.now();
    open();
    if (trigger) await trigger(page);
    let slowest = 0, text = "";
    for (;;) {
      const t = Date.now();
      const s = await page.evaluate(() => ({ shown: !document.querySelector("#trace-error").hidden, text: document.querySelector("#trace-error").textContent }));
      slowest = Math.max(slowest, Date.now() - t);
      if (s.shown && s.text.includes(name)) { text = s.text; break; }
      if (Date.now() - t0 > 20_000) assert.fail(`no error naming ${name} after 20 s (error box: ${JSON.stringify(s.text)})`);
      await new Promise((r) => setTimeout(r, 25));
    }
    const refusedMs = Date.now() - t0;
    const cpuMs = (await cpu() - cpu0) * 1000;
    const gap = await page.evaluate(() => window.__gap);
    const heap = await cdp.send("Runtime.getHeapUsage");
    const heapMb = (heap.usedSize + (heap.backingStorageSize ?? 0)) / 2 ** 20;
    const peakMb = await rendererPeakMb();
    console.log(`# ${name}: refused after ${refusedMs} ms (main thread CPU ${cpuMs.toFixed(0)} ms); slowest page answer ${slowest} ms, `
      + `longest main-thread stall ${gap.toFixed(0)} ms; heap ${heapMb.toFixed(0)} MB after; renderer peak RSS ${peakMb.toFixed(0)} MB; load ${loadavg()[0].toFixed(1)}\n#   ${text}`);
    // The tab answers within 2 s throughout (wall clock). The refusal's own cost is bounded in
    // main-thread CPU time, which a loaded test machine does not stretch, and loosely in wall time.
    assert.ok(slowest < ANSWER_MS && gap < ANSWER_MS, `the tab stalled: answer ${slowest} ms, gap ${gap} ms`);
    assert.ok(cpuMs < ANSWER_MS, `the refusal took ${cpuMs} ms of main-thread CPU`);
    assert.ok(refusedMs < 5 * ANSWER_MS, `refused after ${refusedMs} ms`);
    assert.ok(heapMb < HEAP_MB, `JS heap + buffers ${heapMb} MB after the refusal`);
    assert.ok(peakMb < RSS_PEAK_MB, `renderer peak RSS ${peakMb} MB`);
    assert.equal(await page.locator("#xray-version").inputValue(), shown, "the committed trace stays on screen");
    assert.deepEqual(errors, []);
    return text;
  } finally {
    open();
    gate = Promise.resolve();
    await ctx.close();
  }
}

const sizeMsg = `larger than ${LIMIT} bytes`;

test("high4: gzip bomb: the generated bomb is a valid gzip of zeros (checked small)", () => {
  for (const n of [1, 3]) {
    const z = gunzipSync(gzipOfZeros(n * 65536, 65536));
    assert.equal(z.length, n * 65536);
    assert.ok(z.every((b) => b === 0));
  }
  for (const n of [0, 1, 1000, 65537]) assert.equal(crc32OfZeros(n), crc32(Buffer.alloc(n)));
  assert.ok(bomb.length < BOMB_BYTES / 900, `ratio ${BOMB_BYTES / bomb.length}`);
});

test("high4: gzip bomb by URL (?trace=, raw gzip) is refused within 2 s with bounded memory", async () => {
  const text = await refused("?trace=bomb/raw.json.gz", null, "bomb/raw.json.gz");
  assert.match(text, /bomb\/raw\.json\.gz: decompressed trace is larger than \d+ bytes/);
});

test("high4: gzip bomb by URL served with Content-Encoding: gzip is cut off while reading", async () => {
  const text = await refused("?trace=bomb/encoded.json", null, "bomb/encoded.json");
  assert.match(text, new RegExp(`bomb/encoded\\.json: inflated by the browser \\(Content-Encoding: gzip\\) to more than ${LIMIT} bytes`));
});

test("high4: gzip bomb by URL without Content-Length is refused", async () => {
  const text = await refused("?trace=bomb/chunked.json.gz", null, "bomb/chunked.json.gz");
  assert.match(text, /bomb\/chunked\.json\.gz: decompressed trace is larger than/);
});

test("high4: gzip bomb through the file picker is refused within 2 s with bounded memory", async () => {
  const text = await refused("", (page) => page.setInputFiles("#trace-file", join(tmp, "bomb.json.gz")), "bomb.json.gz");
  assert.match(text, /bomb\.json\.gz: decompressed trace is larger than \d+ bytes/);
});

test("high4: gzip bomb dropped on the page is refused within 2 s with bounded memory", async () => {
  const text = await refused("", (page) => page.evaluate(async () => {
    const blob = await (await fetch("bomb/raw.json.gz")).blob();
    const dt = new DataTransfer();
    dt.items.add(new File([blob], "dropped-bomb.json.gz"));
    document.querySelector("#trace-drop").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  }), "dropped-bomb.json.gz");
  assert.match(text, /dropped-bomb\.json\.gz: decompressed trace is larger than/);
});

test("a file over the limit is refused by its size before it is read", async () => {
  const text = await refused("", (page) => page.setInputFiles("#trace-file", join(tmp, "huge.json.gz")), "huge.json.gz");
  assert.match(text, new RegExp(`huge\\.json\\.gz: file is ${LIMIT + 1} bytes, ${sizeMsg}`));
});

test("a body without end or length is cut off at the limit and the request aborted", async () => {
  const text = await refused("?trace=bomb/endless.json", null, "bomb/endless.json");
  assert.match(text, new RegExp(`bomb/endless\\.json: ${sizeMsg}`));
  const rec = served.get("/bomb/endless.json");
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(rec.closedEarly, "the page closed the connection");
  assert.ok(rec.sent < 4 * LIMIT, `the server got to send ${rec.sent} bytes`);
});

test("a Content-Length over the limit is refused before the body is read", async () => {
  const text = await refused("?trace=bomb/declared.json", null, "bomb/declared.json");
  assert.match(text, new RegExp(`bomb/declared\\.json: the server sends 1000000000 bytes, ${sizeMsg}`));
});

test("a download that breaks off names the file (no bare 'Failed to fetch')", async () => {
  const text = await refused("?trace=bomb/broken.json", null, "bomb/broken.json");
  assert.match(text, /bomb\/broken\.json: the download broke off \(/);
});

test("a page-data download that breaks off names the file", async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${base}broken/`);
  await page.waitForFunction(() => /could not be loaded/.test(document.querySelector("#status").textContent), null, { timeout: 10_000 });
  assert.match(await page.locator("#status").innerText(), /data\/manifest\.json: the download broke off \(/);
  await ctx.close();
});
