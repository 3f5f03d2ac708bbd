// Screenshots of the built page WITH THE COMMITTED DATA (web/public/data + web/public/traces,
// i.e. whatever `monolith export` last wrote; no fixture routing): desktop 1280x900 and phone
// 390x844, written to tests/screenshots/real-{desktop,mobile}.png. Not part of `make test`
// (what it shows depends on the committed results). Usage, after `make -C web build`:
//   node tests/e2e/real_screenshots.mjs
// Both shots are the first screen (what a visitor sees before scrolling), after the race played
// a moment.
// Prints a short summary of what the page shows (race lanes, versions, table rows) and fails
// on page errors. Uses playwright-core + Debian Chromium (CHROMIUM overrides the path).
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const WEB = resolve(import.meta.dirname, "../..");
const SHOTS = join(WEB, "tests/screenshots");
const MAX_BYTES = 1.5e6;

const freePort = () => new Promise((ok, bad) => {
  const s = createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }).on("error", bad);
});

async function waitUp(url, proc) {
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error(`vite preview exited with ${proc.exitCode}`);
    try { if ((await fetch(url)).ok) return; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`vite preview did not answer at ${url}`);
}

async function shoot(browser, base, name, viewport, fullPage, extra = {}) {
  const ctx = await browser.newContext({ viewport, ...extra });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(base);
  await page.waitForSelector("body[data-ready='1']", { timeout: 15_000 });
  await page.waitForFunction(() => Number(document.querySelector("#gantt")?.dataset.draws ?? 0) > 0, null, { timeout: 15_000 });
  // Budget bars load one version after another after first paint.
  const nVersions = await page.locator("#xray-version option").count();
  await page.waitForFunction((n) => document.querySelectorAll("#budget .budget-row").length >= n, nVersions, { timeout: 15_000 }).catch(() => {});
  // Race: play in real time long enough for the fastest lane to finish and the others to be
  // mid-way, then pause so the shot shows moving counters frozen at one instant.
  if (await page.locator("#race-play").count()) {
    await page.click("#race-play");
    await page.waitForTimeout(700);
    await page.click("#race-play");
  }
  const summary = await page.evaluate(() => ({
    lanes: [...document.querySelectorAll("#race .lane")].map((l) => `${l.dataset.engine}: ${l.querySelector(".rate")?.textContent} (${l.querySelector(".count")?.textContent})`),
    versions: [...document.querySelectorAll("#xray-version option")].map((o) => o.textContent),
    xray: document.querySelector("#xray .xray-info, #xray .meta")?.textContent ?? "",
    rows: [...document.querySelectorAll("#results tbody tr")].map((r) => r.textContent.replace(/\s+/g, " ").trim().slice(0, 140)),
    budget: [...document.querySelectorAll("#budget .budget-row")].map((r) => r.dataset.version),
    footer: document.querySelector("footer")?.textContent.replace(/\s+/g, " ").trim().slice(0, 100),
  }));
  const path = join(SHOTS, `real-${name}.png`);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path, fullPage });
  if (fullPage && statSync(path).size > MAX_BYTES) await page.screenshot({ path, fullPage: false });
  await ctx.close();
  return { path, summary, errors };
}

async function main() {
  if (!existsSync(join(WEB, "dist/index.html"))) throw new Error("dist/ is missing: run `make -C web build` first");
  mkdirSync(SHOTS, { recursive: true });
  const port = await freePort();
  const base = `http://127.0.0.1:${port}/`;
  const server = spawn(join(WEB, "node_modules/.bin/vite"), ["preview", "--host", "127.0.0.1", "--port", String(port), "--strictPort", "--bypass-lock"], { cwd: WEB, stdio: "ignore" });
  let browser, failed = false;
  try {
    await waitUp(base, server);
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
    const shots = [
      // the first screen, as a visitor sees it (what is above the fold is what these shots check)
      await shoot(browser, base, "desktop", { width: 1280, height: 900 }, false),
      await shoot(browser, base, "mobile", { width: 390, height: 844 }, false, { deviceScaleFactor: 1, isMobile: true, hasTouch: true }),
    ];
    for (const s of shots) {
      console.log(`${s.path}\n${JSON.stringify(s.summary, null, 1)}`);
      if (s.errors.length) { failed = true; console.error(`page errors: ${s.errors.join("\n")}`); }
    }
  } finally {
    await browser?.close();
    server.kill();
  }
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(1); });
