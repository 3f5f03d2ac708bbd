// Playwright (playwright-core + Debian Chromium) tests of the built page. Run by run.mjs with
// BASE_URL and SERVER ("preview" | "nginx"). Fixture data (tests/fixtures/site/: marked as not
// measured) is routed in place of data/ for the tests that need a race and several versions.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { get } from "node:http";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const BASE = process.env.BASE_URL ?? "http://127.0.0.1:4173/";
const SERVER = process.env.SERVER ?? "preview";
const WEB = resolve(import.meta.dirname, "../..");
const FIX = join(WEB, "tests/fixtures/site");
// Screenshots go to test-results/ (ignored by git): `make test` leaves the tree as it found it.
const SHOTS = join(WEB, "test-results/screenshots");
let browser;

before(async () => {
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
});
after(async () => { await browser?.close(); });

/** A page whose data/ and fixture traces come from tests/fixtures/site/. */
async function openFixture(opts = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...opts });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.route(/\/(data|traces)\/[^?]*$/, async (route) => {
    const path = new URL(route.request().url()).pathname.replace(/^.*?\/(data|traces)\//, "$1/");
    for (const p of [path, `${path}.gz`]) {
      const f = join(FIX, p);
      if (existsSync(f) && statSync(f).isFile()) return route.fulfill({ body: readFileSync(f), contentType: p.endsWith(".gz") ? "application/gzip" : "application/json" });
    }
    if (path.startsWith("traces/fixture-")) return route.fulfill({ status: 404, body: "" });
    return route.continue();
  });
  await page.goto(BASE);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10_000 });
  return { ctx, page, errors };
}

test("the page loads its own committed data without errors", async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(BASE);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10_000 });
  assert.match(await page.title(), /monolith/);
  assert.equal(await page.locator("#status").isHidden(), true, "manifest loaded");
  await page.waitForFunction(() => Number(document.querySelector("#gantt")?.dataset.draws ?? 0) > 0);
  assert.match(await page.locator("footer").innerText(), /not affiliated with Qwen, NVIDIA, or AlpinDale/);
  // One layer's chain: a row per committed chain model, two bars each, no error line
  const manifest = JSON.parse(readFileSync(join(WEB, "public/data/manifest.json"), "utf8"));
  assert.ok((manifest.chains ?? []).length >= 1, "the committed data carries results/chain/");
  assert.equal(await page.locator("#chain .chain-row").count(), manifest.chains.length);
  assert.equal(await page.locator("#chain .chain-stack").count(), 2 * manifest.chains.length);
  assert.equal(await page.locator("#chain .error").count(), 0);
  assert.ok(await page.locator("#chain .seg").first().evaluate((e) => parseFloat(e.style.width) > 0));
  assert.deepEqual(errors, []);
  await ctx.close();
});

test("the chain panel says so when its data has no chain model", async () => {
  const { ctx, page, errors } = await openFixture();
  assert.match(await page.locator("#chain").innerText(), /No chain model is recorded/);
  assert.equal(await page.locator("#chain .chain-row").count(), 0);
  assert.deepEqual(errors, []);
  await ctx.close();
});

test("the race plays and its counters move", async () => {
  const { ctx, page, errors } = await openFixture();
  assert.match(await page.locator("#race .note").first().innerText(), /meaningless/);
  const lanes = page.locator("#race .lane");
  assert.ok((await lanes.count()) >= 2);
  await page.selectOption("#race-speed", "0.1"); // slow enough that no lane ends mid-test
  await page.click("#race-play");
  await page.waitForTimeout(300);
  const count = (sel) => page.locator(sel).evaluateAll((els) => els.map((e) => Number(e.textContent.split("/")[0])));
  const a = await count("#race .lane .count");
  await page.waitForTimeout(600);
  const b = await count("#race .lane .count");
  assert.ok(b.some((x, i) => x > a[i]) || b.every((x, i) => x >= a[i] && x > 0), `counts moved: ${a} -> ${b}`);
  const rates = await page.locator("#race .rate").allInnerTexts();
  assert.ok(rates.some((r) => /^[\d,.]+ tok\/s$/.test(r)), `rates show tok/s: ${rates}`);
  assert.ok((await page.locator("#race .stream").first().innerText()).length > 0, "tokens shown as text");
  await page.click("#race-play"); // pause
  const c = await count("#race .lane .count");
  await page.waitForTimeout(300);
  assert.deepEqual(await count("#race .lane .count"), c, "paused");
  await page.click("#race-restart");
  assert.deepEqual(errors, []);
  await ctx.close();
});

test("switching X-ray versions redraws the Gantt", async () => {
  const { ctx, page } = await openFixture();
  const canvas = page.locator("#gantt");
  await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0);
  const v0 = await canvas.getAttribute("data-version");
  const d0 = Number(await canvas.getAttribute("data-draws"));
  const px0 = await canvas.evaluate((c) => c.toDataURL());
  await page.click("#xray-next");
  await page.waitForFunction((v) => document.querySelector("#gantt").dataset.version !== v, v0);
  await page.waitForFunction((d) => Number(document.querySelector("#gantt").dataset.draws) > d, d0);
  assert.notEqual(await canvas.evaluate((c) => c.toDataURL()), px0, "pixels changed");
  // The budget panel lists every version.
  await page.waitForFunction(() => document.querySelectorAll("#budget .budget-row").length >= 2);
  await ctx.close();
});

async function hoverSomething(page) {
  await page.locator("#gantt").scrollIntoViewIfNeeded();
  const box = await page.locator("#gantt").boundingBox();
  for (let fy = 0.1; fy < 0.95; fy += 0.037) {
    await page.mouse.move(box.x + box.width * 0.4, box.y + 22 + (box.height - 22) * fy);
    if (await page.locator("#gantt-tip").isVisible()) return true;
  }
  return false;
}

test("hovering a block shows phase, layer, block, SM, start and duration", async () => {
  const { ctx, page } = await openFixture();
  await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0);
  assert.ok(await hoverSomething(page), "a tooltip appeared");
  const tip = await page.locator("#gantt-tip").innerText();
  for (const k of ["phase", "layer", "block", "SM", "start", "duration"]) assert.match(tip, new RegExp(k));
  // Wheel zooms (the window shrinks), the layer select zooms into one layer.
  const d0 = Number(await page.locator("#gantt").getAttribute("data-draws"));
  await page.mouse.wheel(0, -400);
  await page.waitForFunction((d) => Number(document.querySelector("#gantt").dataset.draws) > d, d0);
  await page.selectOption("#xray-layer", "3");
  await page.waitForFunction((d) => Number(document.querySelector("#gantt").dataset.draws) > d + 1, d0);
  await ctx.close();
});

test("a malformed dropped file shows an error and the page keeps working", async () => {
  const { ctx, page } = await openFixture();
  const drop = async (name, bytes) => page.evaluate(([n, b]) => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(b)], n));
    document.querySelector("#trace-drop").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, [name, [...bytes]]);
  const expectError = async (re) => {
    try { await page.waitForFunction((src) => new RegExp(src).test(document.querySelector("#trace-error").textContent), re.source, { timeout: 5000 }); }
    catch { assert.fail(`error box shows ${JSON.stringify(await page.locator("#trace-error").textContent())}, expected ${re}`); }
  };
  await drop("bad.json", Buffer.from('{"format": "nope"}'));
  await page.waitForSelector("#trace-error:not([hidden])");
  assert.match(await page.locator("#trace-error").innerText(), /bad\.json: not a monolith-xray trace/);
  const gz = readFileSync(join(FIX, "traces/fixture-fp8.json.gz"));
  await drop("cut.json.gz", gz.subarray(0, gz.length >> 1));
  await expectError(/cut\.json\.gz: truncated gzip/);
  const bad = Buffer.from(gz); bad[2000] ^= 0xff;
  await drop("bad.json.gz", bad);
  await expectError(/bad\.json\.gz: corrupt gzip/);
  const crc = Buffer.from(gz); crc[crc.length - 6] ^= 0xff;
  await drop("crc.json.gz", crc);
  await expectError(/crc\.json\.gz: corrupt gzip: CRC check failed/);
  await page.setInputFiles("#trace-file", { name: "junk.json", mimeType: "application/json", buffer: Buffer.from("{not json") });
  await expectError(/junk\.json: not JSON/);
  // A valid plain-JSON trace (the fixture, inflated) opens as "your trace".
  const plain = (await import("node:zlib")).gunzipSync(readFileSync(join(FIX, "traces/fixture-fp8.json.gz")));
  await page.setInputFiles("#trace-file", { name: "mine.json", mimeType: "application/json", buffer: plain });
  await page.waitForFunction(() => document.querySelector("#xray-version").selectedOptions[0]?.textContent.includes("mine.json"));
  assert.equal(await page.locator("#trace-error").isHidden(), true);
  assert.equal(await page.locator("#xray-overhead").count(), 0, "a trace with no measured overhead shows none");
  // a trace whose X-ray build lost more than 3 % of the plain build's tok/s says so beside it
  const over = JSON.parse(plain.toString());
  over.meta.xray_overhead = { pct: { "16": 1.1, "2048": 5.8 }, limit_pct: 3 };
  await page.setInputFiles("#trace-file", { name: "over.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(over)) });
  await page.waitForFunction(() => document.querySelector("#xray-version").selectedOptions[0]?.textContent.includes("over.json"));
  assert.match(await page.locator("#xray-overhead").innerText(), /above 3 % at position 2048 \(worst 5\.8 %\)/);
  assert.equal(await page.locator("#xray-overhead").getAttribute("class"), "tag bad");
  await ctx.close();
});

// Hostile trace files shared with the Python reader (tests/fixtures/traces/, cases.json).
const HOSTILE = join(WEB, "../tests/fixtures/traces");
const hostile = JSON.parse(readFileSync(join(HOSTILE, "cases.json"), "utf8"));

test("a hostile dropped trace is refused and the previous one stays on screen", async () => {
  const { ctx, page, errors } = await openFixture();
  await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0);
  const version = await page.locator("#gantt").getAttribute("data-version");
  const choice = await page.locator("#xray-version").inputValue();
  for (const c of hostile.reject) {
    await page.setInputFiles("#trace-file", { name: c.file, mimeType: "application/json", buffer: readFileSync(join(HOSTILE, c.file)) });
    await page.waitForFunction((want) => document.querySelector("#trace-error").textContent.includes(want), `${c.file}: ${c.error}`, { timeout: 10_000 });
    assert.equal(await page.locator("#gantt").getAttribute("data-version"), version, c.file);
    assert.equal(await page.locator("#xray-version").inputValue(), choice, c.file);
  }
  // the files that must open do open, the empty layer set and the zero-length trace included
  for (const c of hostile.accept) {
    await page.setInputFiles("#trace-file", { name: c.file, mimeType: "application/json", buffer: readFileSync(join(HOSTILE, c.file)) });
    await page.waitForFunction((f) => document.querySelector("#xray-version").selectedOptions[0]?.textContent.includes(f), c.file);
    assert.equal(await page.locator("#trace-error").isHidden(), true, c.file);
    assert.equal(await page.locator("#xray-layer option").count(), 1 + c.layers.length, c.file);
  }
  assert.deepEqual(errors, []);
  await ctx.close();
});

test("?trace= with a refused file leaves the committed trace on screen", async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.route(/\/hostile\/[^/?]+$/, (route) => route.fulfill({
    body: readFileSync(join(HOSTILE, new URL(route.request().url()).pathname.split("/").pop())), contentType: "application/json" }));
  const bad = hostile.reject.find((c) => c.file === "sm_count_huge.json");
  await page.goto(`${BASE}?trace=hostile/${bad.file}`);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10_000 });
  await page.waitForFunction((want) => document.querySelector("#trace-error")?.textContent.includes(want), bad.error, { timeout: 10_000 });
  await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0);
  const manifest = JSON.parse(readFileSync(join(WEB, "public/data/manifest.json"), "utf8"));
  const want = String(Math.max(0, manifest.versions.findIndex((v) => v.id === manifest.default_version)));
  assert.equal(await page.locator("#xray-version").inputValue(), want, "the committed trace is shown");
  assert.deepEqual(errors, []);
  await ctx.close();
});

test("a phone-sized viewport stacks the panels; pinch zooms the Gantt", async () => {
  const { ctx, page } = await openFixture({ viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true, deviceScaleFactor: 2 });
  const boxes = await Promise.all(["#race", "#xray", "#budget", "#method", "#results", "#tour", "#format"].map((s) => page.locator(s).boundingBox()));
  for (let i = 1; i < boxes.length; i++) {
    assert.ok(Math.abs(boxes[i].x - boxes[0].x) < 2, "same column");
    assert.ok(boxes[i].y >= boxes[i - 1].y + boxes[i - 1].height - 1, "stacked");
    assert.ok(boxes[i].width <= 390, "fits the screen");
  }
  await page.waitForFunction(() => Number(document.querySelector("#gantt").dataset.draws) > 0);
  const canvas = page.locator("#gantt");
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const span = () => canvas.evaluate((c) => Number(c.dataset.span));
  const s0 = await span();
  const cdp = await ctx.newCDPSession(page);
  const y = box.y + box.height / 2, cx = box.x + box.width / 2;
  const touch = (type, dx) => cdp.send("Input.dispatchTouchEvent", { type, touchPoints: type === "touchEnd" ? [] : [{ x: cx - dx, y, id: 1 }, { x: cx + dx, y, id: 2 }] });
  await touch("touchStart", 20);
  for (let dx = 30; dx <= 120; dx += 15) await touch("touchMove", dx);
  await touch("touchEnd", 0);
  await page.waitForFunction((s) => Number(document.querySelector("#gantt").dataset.span) < s * 0.8, s0);
  if (SERVER === "preview") {
    await page.click("#xray-reset");
    await page.click("#race-play");
    await page.waitForTimeout(1200);
    await page.evaluate(() => window.scrollTo(0, 0));
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, "mobile.png"), fullPage: true });
  }
  await ctx.close();
});

test("desktop screenshot", { skip: SERVER !== "preview" }, async () => {
  const { ctx, page } = await openFixture();
  await page.click("#race-play");
  await page.waitForFunction(() => document.querySelectorAll("#budget .budget-row").length >= 2);
  await page.waitForTimeout(1500);
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, "desktop.png"), fullPage: true });
  await ctx.close();
});

test("all committed traces together are at most 5 MB gzipped", () => {
  const dir = join(WEB, "public/traces");
  const total = readdirSync(dir).filter((f) => f.endsWith(".gz")).reduce((s, f) => s + statSync(join(dir, f)).size, 0);
  console.log(`# committed traces: ${total} bytes gzipped`);
  assert.ok(total <= 5 * 1024 * 1024, `${total} bytes`);
});

const raw = (path, headers = {}) => new Promise((ok, bad) => {
  get(new URL(path, BASE), { headers }, (res) => {
    const chunks = [];
    res.on("data", (c) => chunks.push(c));
    res.on("end", () => ok({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
  }).on("error", bad);
});

test("nginx serves the .gz traces precompressed with the right types", { skip: SERVER !== "nginx" }, async () => {
  const name = readdirSync(join(WEB, "dist/traces")).find((f) => f.endsWith(".json.gz"));
  const onDisk = readFileSync(join(WEB, "dist/traces", name));
  const r = await raw(`traces/${name.slice(0, -3)}`, { "Accept-Encoding": "gzip" });
  assert.equal(r.status, 200);
  assert.equal(r.headers["content-encoding"], "gzip");
  assert.match(r.headers["content-type"], /^application\/json/);
  assert.ok(r.body.equals(onDisk), "bytes are the precompressed file (gzip_static), not a fresh compression");
  const direct = await raw(`traces/${name}`);
  assert.equal(direct.status, 200);
  assert.match(direct.headers["content-type"], /^application\/gzip/);
  assert.equal(direct.headers["content-encoding"], undefined);
  const index = await raw("");
  assert.match(index.headers["content-type"], /^text\/html/);
  const js = readdirSync(join(WEB, "dist/assets")).find((f) => f.endsWith(".js"));
  assert.match((await raw(`assets/${js}`)).headers["content-type"], /javascript/);
  assert.match((await raw("data/manifest.json")).headers["content-type"], /^application\/json/);
  assert.equal((await raw("nope.html")).status, 404);
});

// deploy/nginx.conf's headers, on every kind of path: nginx drops inherited add_header lines in a
// location that has its own, so each path is checked, error responses included.
const SECURITY = {
  "content-security-policy": (v) => /default-src 'none'/.test(v) && /connect-src 'self'/.test(v) && /frame-ancestors 'none'/.test(v)
    && /script-src 'self'/.test(v) && !/unsafe-inline|unsafe-eval/.test(v),
  "x-frame-options": (v) => v === "DENY",
  "x-content-type-options": (v) => v === "nosniff",
  "referrer-policy": (v) => v === "no-referrer",
  "cross-origin-opener-policy": (v) => v === "same-origin",
};

test("nginx sends the security headers on every path", { skip: SERVER !== "nginx" }, async () => {
  const js = readdirSync(join(WEB, "dist/assets")).find((f) => f.endsWith(".js"));
  const trace = readdirSync(join(WEB, "dist/traces")).find((f) => f.endsWith(".json.gz"));
  const timeline = readdirSync(join(WEB, "dist/data/timelines"))[0];
  const paths = [["", 200], ["index.html", 200], [`assets/${js}`, 200], [`traces/${trace.slice(0, -3)}`, 200],
    [`traces/${trace}`, 200], ["data/manifest.json", 200], [`data/timelines/${timeline}`, 200], ["nope.html", 404],
    ["traces/nope.json", 404], ["data/nope.json", 404]];
  for (const [path, status] of paths) {
    const r = await raw(path, { "Accept-Encoding": "gzip" });
    assert.equal(r.status, status, path);
    for (const [h, ok] of Object.entries(SECURITY)) assert.ok(r.headers[h] !== undefined && ok(r.headers[h]), `${path || "/"}: ${h} = ${r.headers[h]}`);
  }
  assert.match((await raw(`assets/${js}`)).headers["cache-control"], /immutable/);
  assert.equal((await raw("data/manifest.json")).headers["cache-control"], "no-cache");
  assert.match((await raw(`traces/${trace}`)).headers["cache-control"], /max-age=3600/);
});

test("the page runs under its Content-Security-Policy", { skip: SERVER !== "nginx" }, async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error" || /Content Security Policy/i.test(m.text())) problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  await page.goto(BASE);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10_000 });
  await page.waitForFunction(() => Number(document.querySelector("#gantt")?.dataset.draws ?? 0) > 0);
  await page.waitForFunction(() => document.querySelectorAll("#budget .seg").length > 0);
  // styles set by script reach the elements (they would be refused as inline style attributes)
  assert.ok(await page.locator("#budget .seg").first().evaluate((e) => e.style.width !== ""));
  assert.deepEqual(problems, []);
  await ctx.close();
});

test("first meaningful paint is under 2 s from the local nginx", { skip: SERVER !== "nginx" }, async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(BASE, { waitUntil: "commit" });
  // Meaningful = manifest loaded, panels mounted and the first Gantt frame drawn.
  await page.waitForFunction(() => document.body.dataset.ready === "1" && Number(document.querySelector("#gantt")?.dataset.draws ?? 0) > 0, null, { timeout: 10_000 });
  const ms = await page.evaluate(() => performance.now());
  const fcp = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null);
  console.log(`# first meaningful paint ${ms.toFixed(0)} ms (first contentful paint ${fcp?.toFixed(0)} ms)`);
  mkdirSync(join(WEB, "test-results"), { recursive: true });
  writeFileSync(join(WEB, "test-results/paint.json"), JSON.stringify({ meaningful_ms: ms, fcp_ms: fcp, server: SERVER }) + "\n");
  assert.ok(ms < 2000, `${ms} ms`);
  await ctx.close();
});

// ---------------------------------------------------------------- as a visitor sees it (committed data)

// Developer text that must never reach a visitor: the same list as xray/site.py DEV_TEXT.
const DEV_TEXT = /\/work\/|\/tmp\/|\/home\/|MISS[I]ON|§\s*\d|time cap|\bs left\b|not found: run|SDIST|\.sh\b|Traceback|ModuleNotFoundError|ImportError|not importable|\bsession\b|`/;
const MANIFEST = () => JSON.parse(readFileSync(join(WEB, "public/data/manifest.json"), "utf8"));

async function openReal(viewport, extra = {}) {
  const ctx = await browser.newContext({ viewport, ...extra });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(BASE);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10_000 });
  await page.waitForFunction(() => Number(document.querySelector("#gantt")?.dataset.draws ?? 0) > 0);
  return { ctx, page, errors };
}

const PHONE = [{ width: 390, height: 844 }, { isMobile: true, hasTouch: true }];
const DESKTOP = [{ width: 1280, height: 900 }, {}];

for (const [name, [vp, extra]] of [["desktop", DESKTOP], ["phone", PHONE]]) {
  test(`${name}: the headline (tok/s, × the best baseline, GPU) is above the fold and the page is no wider than the screen`, { skip: SERVER !== "preview" }, async () => {
    const { ctx, page, errors } = await openReal(vp, extra);
    const m = MANIFEST();
    const hl = page.locator("#headline");
    const text = await hl.innerText();
    assert.match(text, /^[\d,.]+ tok\/s .+ · [\d.]+× .+ \([\d,.]+ tok\/s\) · on one .+$/, text);
    assert.ok(text.includes(m.headline.tok_s.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })), "the manifest's number");
    assert.ok(text.includes(m.headline.gpu), "the GPU");
    const box = await hl.boundingBox();
    assert.ok(box.y + box.height <= vp.height, `headline bottom ${box.y + box.height} within the first ${vp.height} px`);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= vp.width, "no sideways scroll");
    assert.deepEqual(errors, []);
    await ctx.close();
  });
}

/** The page's prose (the tour's kernel excerpts are code, shown as code, and are left out). */
const visibleProse = (page) => page.evaluate(() => {
  const code = [...document.querySelectorAll("#tour pre.code")];
  for (const c of code) c.hidden = true;
  const t = document.body.innerText + [...document.querySelectorAll("[title]")].map((e) => e.title).join("\n");
  for (const c of code) c.hidden = false;
  return t;
});

test("no developer text reaches the page, even from inputs that carry it", { skip: SERVER !== "preview" }, async () => {
  // the fixture's vLLM row says "vllm not importable (ModuleNotFoundError ...) (a spec section)"
  const raw = readFileSync(join(WEB, "tests/fixtures/results/final.json"), "utf8");
  assert.match(raw, DEV_TEXT, "the fixture input carries developer text");
  const fx = await openFixture();
  const ft = await visibleProse(fx.page);
  assert.match(ft, /vLLM cannot run on the GPU machine/);
  assert.equal(ft.match(DEV_TEXT), null, `developer text on the fixture page: ${ft.match(DEV_TEXT)}`);
  await fx.ctx.close();
  const { ctx, page } = await openReal(...DESKTOP);
  await page.check("#race-variants");
  for (const d of await page.locator("details").all()) await d.evaluate((e) => { e.open = true; });
  const text = await visibleProse(page);
  const hit = text.match(DEV_TEXT);
  assert.equal(hit, null, `developer text on the page: ${hit && text.slice(Math.max(0, hit.index - 80), hit.index + 80)}`);
  await ctx.close();
});

test("phone: engine and tok/s stay visible when the results table scrolls sideways", { skip: SERVER !== "preview" }, async () => {
  const { ctx, page } = await openReal(...PHONE);
  const wrap = page.locator("#results .table-wrap").first();
  await wrap.scrollIntoViewIfNeeded();
  await wrap.evaluate((e) => { e.scrollLeft = e.scrollWidth; });
  await page.waitForTimeout(100);
  const row = page.locator("#results table.results:not(.sweep) tbody tr").first();
  for (const sel of ["td.engine", "td.speed"]) {
    const b = await row.locator(sel).boundingBox();
    assert.ok(b.x >= 0 && b.x + b.width <= 390, `${sel} on screen after scrolling: x ${b.x}, width ${b.width}`);
  }
  const e = await row.locator("td.engine").boundingBox(), s = await row.locator("td.speed").boundingBox();
  assert.ok(s.x >= e.x + e.width - 1, "tok/s beside the engine, not under it");
  assert.match(await row.locator("td.speed").innerText(), /[\d,]+\.\d/);
  await ctx.close();
});

test("the X-ray opens on the headline's variant; its legend lists the trace's phases, each its own colour", { skip: SERVER !== "preview" }, async () => {
  const { ctx, page } = await openReal(...DESKTOP);
  const m = MANIFEST();
  assert.ok(m.headline.variant, "the committed data has a headline variant");
  assert.equal(m.default_version, m.headline.variant);
  assert.match(await page.locator("#xray-version").evaluate((s) => s.selectedOptions[0].textContent), new RegExp(`\\(${m.headline.variant}\\)$`));
  assert.match(await page.locator("#xray-info").innerText(), new RegExp(`^${m.headline.variant} `));
  const keys = await page.locator("#xray-legend .key:not(.idle)").evaluateAll((els) => els.map((e) => ({ name: e.textContent, c: e.querySelector("i").style.getPropertyValue("--c") })));
  // the trace's phases: the same file, read here with Node's gunzip
  const v = m.versions.find((x) => x.id === m.default_version);
  const tr = JSON.parse((await import("node:zlib")).gunzipSync(readFileSync(join(WEB, "public", v.trace))).toString());
  const used = new Set(tr.events.phase);
  assert.deepEqual(keys.map((k) => k.name), tr.phases.filter((p) => used.has(p.id)).map((p) => p.name));
  assert.ok(keys.length < tr.phases.length, "fewer keys than the phase table");
  assert.equal(new Set(keys.map((k) => k.c)).size, keys.length, `colours repeat: ${JSON.stringify(keys)}`);
  await ctx.close();
});

test("the code tour's lines are not cut off at the right", { skip: SERVER !== "preview" }, async () => {
  for (const [vp, extra] of [DESKTOP, PHONE]) {
    const { ctx, page } = await openReal(vp, extra);
    const cut = await page.locator("#tour pre.code").evaluateAll((els) => els.filter((e) => e.scrollWidth > e.clientWidth + 1).length);
    assert.ok((await page.locator("#tour pre.code").count()) > 0);
    assert.equal(cut, 0, `${vp.width} px: ${cut} excerpt(s) wider than their box`);
    await ctx.close();
  }
});

test("the race defaults to a labelled slowed speed where the lanes visibly race; the variants toggle", { skip: SERVER !== "preview" }, async () => {
  const { ctx, page } = await openReal(...DESKTOP);
  const m = MANIFEST();
  assert.match(await page.locator("#race-speed").evaluate((s) => s.selectedOptions[0].textContent), /^slowed \d+×$/);
  assert.deepEqual(await page.locator("#race .lane[data-lane]:not([hidden])").evaluateAll((els) => els.map((e) => e.dataset.lane)),
    m.race.filter((r) => !r.extra).map((r) => r.lane));
  assert.match(await page.locator("#race .lane.absent").innerText(), /vLLM[\s\S]*cannot run on the GPU machine/);
  await page.click("#race-play");
  await page.waitForTimeout(1000);
  await page.click("#race-play");
  const counts = await page.locator("#race .lane[data-lane]:not([hidden]) .count").evaluateAll((els) => els.map((e) => (e.textContent.match(/\d+/g) ?? []).map(Number)));
  const [mono, ...others] = counts;
  assert.ok(mono[0] > 0 && mono[0] < mono[1], `after 1 s monolith's lane is mid-race: ${mono}`);
  assert.ok(others.every(([n]) => n < mono[0]), `the others trail: ${JSON.stringify(counts)}`);
  // a lane whose replayed rate differs from the table's shows both, and the page says why
  for (const r of m.race.filter((x) => !x.extra && x.race_tok_s && x.table_tok_s && Math.abs(x.race_tok_s / x.table_tok_s - 1) > 0.02)) {
    assert.match(await page.locator(`#race .lane[data-engine="${r.engine}"] .lane-rates`).innerText(), /replay [\d,]+ tok\/s, table [\d,]+ tok\/s/);
    assert.match(await page.locator("#race .race-note").innerText(), /table times whole decode loops/);
  }
  const extras = m.race.filter((r) => r.extra).length;
  if (extras) {
    await page.check("#race-variants");
    assert.equal(await page.locator("#race .lane.extra:not([hidden])").count(), extras);
  }
  await ctx.close();
});

test("one results table: quantized rows name both gates, experimental rows are marked", { skip: SERVER !== "preview" }, async () => {
  const { ctx, page } = await openReal(...DESKTOP);
  const m = MANIFEST();
  assert.equal(await page.locator("#results table.results:not(.sweep)").count(), 1);
  assert.equal(await page.locator("#results table.results:not(.sweep) tbody tr").count(), m.table.rows.length);
  for (const r of m.table.rows.filter((x) => x.gates)) {
    const cell = await page.locator(`#results tr[data-engine="${r.engine}"] td.gates`).innerText();
    assert.match(cell, new RegExp(`implementation ${r.gates.implementation.passed ? "pass" : "FAIL"}`));
    assert.match(cell, new RegExp(`quality ${r.gates.quality.passed === true ? "pass" : r.gates.quality.passed === false ? "FAIL" : "not measured"}`));
  }
  for (const r of m.table.rows.filter((x) => x.experimental))
    assert.match(await page.locator(`#results tr[data-engine="${r.engine}"] td.engine`).innerText(), /experimental/);
  await ctx.close();
});
