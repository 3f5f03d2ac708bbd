// The race: each engine's recorded token stream replayed at its recorded per-token times
// (t_us, cumulative µs since the first decode step). The clock is shared, so faster engines
// finish first; the counters show tok/s in recorded time whatever the replay speed.
import { fmt, h } from "./dom";
import { fetchJson, type Manifest, type RaceEntry, type Timeline } from "./manifest";

interface Lane { entry: RaceEntry; tl: Timeline; shown: number; text: Text; count: HTMLElement; rate: HTMLElement; bar: HTMLElement }

export function checkTimeline(x: unknown, name: string): Timeline {
  const t = x as Timeline;
  if (!t || typeof t !== "object") throw new Error(`${name}: not an object`);
  for (const k of ["tokens", "pieces", "t_us"] as const) if (!Array.isArray(t[k])) throw new Error(`${name}: "${k}" must be an array`);
  if (t.pieces.length !== t.tokens.length || t.t_us.length !== t.tokens.length) throw new Error(`${name}: tokens, pieces and t_us differ in length`);
  for (let i = 1; i < t.t_us.length; i++) if (!(t.t_us[i] >= t.t_us[i - 1])) throw new Error(`${name}: t_us must be cumulative (non-decreasing), index ${i}`);
  return t;
}

/** Tokens ready by recorded time `us` (t_us sorted). */
export function readyAt(t_us: number[], us: number): number {
  let lo = 0, hi = t_us.length;
  while (lo < hi) { const m = (lo + hi) >>> 1; if (t_us[m] <= us) lo = m + 1; else hi = m; }
  return lo;
}

export async function mountRace(root: HTMLElement, m: Manifest): Promise<void> {
  root.replaceChildren(h("h2", { text: "The race" }));
  if (!m.race.length) {
    root.append(h("p", { class: "empty", text: "No token streams recorded yet (results/timelines/ is empty). Run `monolith bench` on a GPU, then `monolith export`." }));
    return;
  }
  const note = h("p", { class: "note" });
  if (m.race.some((r) => r.synthetic_weights))
    note.append("These streams come from synthetic weights (same shapes as Qwen3-0.6B, random values): the text is meaningless; only the timing is real. ");
  if (m.race.some((r) => r.fixture)) note.append(h("strong", { text: "Fixture data for tests, not a measurement. " }));
  const gpus = new Set(m.race.map((r) => r.gpu ?? "?"));
  note.append(gpus.size === 1 ? `All engines on ${[...gpus][0]}.` : `Different GPUs: ${[...gpus].join(", ")} (not comparable).`);

  const play = h("button", { type: "button", id: "race-play", text: "Play" });
  const restart = h("button", { type: "button", id: "race-restart", text: "Restart" });
  const speed = h("select", { id: "race-speed", "aria-label": "replay speed" });
  for (const [v, label] of [["1", "real time"], ["0.1", "10× slower"], ["0.01", "100× slower"]]) speed.append(h("option", { value: v, text: label }));
  const clock = h("span", { class: "race-clock", id: "race-clock" });
  root.append(note, h("div", { class: "controls" }, play, restart, speed, clock));

  const lanesEl = h("div", { class: "lanes" });
  root.append(lanesEl);
  const loaded = await Promise.allSettled(m.race.map(async (e) => checkTimeline(await fetchJson(e.file), e.file)));
  const lanes: Lane[] = [];
  loaded.forEach((r, i) => {
    const entry = m.race[i];
    if (r.status === "rejected") { lanesEl.append(h("div", { class: "lane error", text: `${entry.label}: ${String(r.reason)}` })); return; }
    const text = document.createTextNode("");
    const count = h("span", { class: "count" });
    const rate = h("span", { class: "rate", "data-engine": entry.engine });
    const bar = h("div", { class: "bar" });
    lanesEl.append(h("div", { class: "lane", "data-engine": entry.engine },
      h("div", { class: "lane-head" }, h("strong", { text: entry.label }), rate, count),
      h("div", { class: "track" }, bar), h("pre", { class: "stream" }, text)));
    lanes.push({ entry, tl: r.value, shown: 0, text, count, rate, bar });
  });
  const methods = [...new Set(lanes.map((l) => l.tl.method).filter((x): x is string => typeof x === "string" && x.length > 0))];
  if (methods.length) note.append(` Timing: ${methods.join("; ")}. Headline tok/s: see Results.`);
  const endUs = Math.max(0, ...lanes.map((l) => l.tl.t_us[l.tl.t_us.length - 1] ?? 0));

  let playing = false, simUs = 0, lastWall = 0, raf = 0;
  const render = () => {
    clock.textContent = `t = ${fmt(simUs / 1000, 3)} ms recorded`;
    for (const l of lanes) {
      const n = readyAt(l.tl.t_us, simUs);
      if (n < l.shown) { l.text.data = ""; l.shown = 0; }
      if (n > l.shown) { l.text.appendData(l.tl.pieces.slice(l.shown, n).join("")); l.shown = n; }
      const N = l.tl.tokens.length;
      const tEnd = n > 0 ? Math.min(simUs, l.tl.t_us[N - 1]) : 0;
      l.rate.textContent = n > 0 && tEnd > 0 ? `${fmt(n / (tEnd / 1e6), 4)} tok/s` : "— tok/s";
      l.count.textContent = `${n} / ${N} tokens`;
      l.bar.style.width = `${(100 * n) / Math.max(1, N)}%`;
    }
  };
  const tick = (now: number) => {
    simUs += (now - lastWall) * 1000 * Number(speed.value);
    lastWall = now;
    if (simUs >= endUs) { simUs = endUs; playing = false; play.textContent = "Play"; }
    render();
    if (playing) raf = requestAnimationFrame(tick);
  };
  play.addEventListener("click", () => {
    playing = !playing;
    play.textContent = playing ? "Pause" : "Play";
    if (playing) { if (simUs >= endUs) simUs = 0; lastWall = performance.now(); raf = requestAnimationFrame(tick); }
    else cancelAnimationFrame(raf);
  });
  restart.addEventListener("click", () => { simUs = 0; render(); if (!playing) play.click(); });
  render();
}
