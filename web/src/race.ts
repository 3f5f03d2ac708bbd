// The race: each engine's recorded token stream replayed at its recorded per-token times
// (t_us, cumulative µs since the first decode step). The clock is shared, so faster engines
// finish first. By default the replay runs slowed down (labelled): in real time the monolith
// lanes finish in a fraction of a second and nobody sees a race. Lanes: monolith's best,
// llama.cpp, HF transformers, the CUDA-graph reference; the other monolith variants behind a toggle.
import { fmt, h } from "./dom";
import { fetchJson, type Manifest, type RaceEntry, type Timeline } from "./manifest";

interface Lane { entry: RaceEntry; tl: Timeline; el: HTMLElement; shown: number; text: Text; count: HTMLElement; rate: HTMLElement; bar: HTMLElement }

/** Replay speeds: recorded µs per wall µs. The default is the first "slowed" one. */
export const SPEEDS: [string, string][] = [["0.05", "slowed 20×"], ["0.1", "slowed 10×"], ["0.01", "slowed 100×"], ["1", "real time"]];

export function checkTimeline(x: unknown, name: string): Timeline {
  const t = x as Timeline;
  if (!t || typeof t !== "object") throw new Error(`${name}: not an object`);
  if (!Array.isArray(t.t_us)) throw new Error(`${name}: "t_us" must be an array`);
  const n = t.t_us.length;
  if ((t.tokens == null) !== (t.pieces == null)) throw new Error(`${name}: tokens and pieces must both be arrays or both null`);
  if (t.tokens != null && (!Array.isArray(t.tokens) || !Array.isArray(t.pieces) || t.tokens.length !== n || t.pieces!.length !== n))
    throw new Error(`${name}: tokens, pieces and t_us differ in length`);
  for (let i = 1; i < n; i++) if (!(t.t_us[i] >= t.t_us[i - 1])) throw new Error(`${name}: t_us must be cumulative (non-decreasing), index ${i}`);
  return t;
}

/** Tokens ready by recorded time `us` (t_us sorted). */
export function readyAt(t_us: number[], us: number): number {
  let lo = 0, hi = t_us.length;
  while (lo < hi) { const m = (lo + hi) >>> 1; if (t_us[m] <= us) lo = m + 1; else hi = m; }
  return lo;
}

const n1 = (x: number | null) => (x == null ? "—" : x.toLocaleString("en-US", { maximumFractionDigits: 0 }));

export async function mountRace(root: HTMLElement, m: Manifest): Promise<void> {
  root.replaceChildren(h("h2", { text: "The race" }));
  if (!m.race.length) {
    root.append(h("p", { class: "empty", text: "No token streams are recorded yet." }));
    return;
  }
  const note = h("p", { class: "note" });
  if (m.race.some((r) => r.synthetic_weights))
    note.append("These streams come from synthetic weights (same shapes as Qwen3-0.6B, random values): the text is meaningless; only the timing is real. ");
  if (m.race.some((r) => r.fixture)) note.append(h("strong", { text: "Fixture data for tests, not a measurement. " }));
  const gpus = new Set(m.race.map((r) => r.gpu ?? "?"));
  note.append(gpus.size === 1 ? `All engines on one ${[...gpus][0]}.` : `Different GPUs: ${[...gpus].join(", ")} (not comparable).`);

  const play = h("button", { type: "button", id: "race-play", text: "Play" });
  const restart = h("button", { type: "button", id: "race-restart", text: "Restart" });
  const speed = h("select", { id: "race-speed", "aria-label": "replay speed" });
  for (const [v, label] of SPEEDS) speed.append(h("option", { value: v, text: label }));
  const clock = h("span", { class: "race-clock", id: "race-clock" });
  const extras = m.race.filter((r) => r.extra);
  const toggle = h("input", { type: "checkbox", id: "race-variants" });
  const controls = h("div", { class: "controls" }, play, restart, speed, clock);
  if (extras.length) controls.append(h("label", { class: "toggle" }, toggle, ` other monolith variants (${extras.length})`));
  root.append(note, controls);

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
    const head = h("div", { class: "lane-head" }, h("span", { class: "lane-title", text: entry.title }), rate, count);
    const sub = h("div", { class: "lane-sub" }, entry.label);
    if (entry.experimental) sub.append(" ", h("span", { class: "tag exp", text: "experimental" }));
    if (entry.speed_label) sub.append(" ", h("span", { class: "tag exp", text: entry.speed_label }));
    // the table's rate beside the replay's when they differ (the race note says why)
    if (entry.table_tok_s != null && entry.race_tok_s != null && Math.abs(entry.race_tok_s / entry.table_tok_s - 1) > 0.02)
      sub.append(h("span", { class: "lane-rates", text: ` · replay ${n1(entry.race_tok_s)} tok/s, table ${n1(entry.table_tok_s)} tok/s` }));
    const body = entry.text ? h("pre", { class: "stream" }, text)
      : h("p", { class: "stream nostream", text: "No token text: llama-bench reports only totals, so this lane advances at its measured median rate." });
    const el = h("div", { class: `lane lane-${entry.lane}${entry.extra ? " extra" : ""}`, "data-engine": entry.engine, "data-lane": entry.lane },
      head, sub, h("div", { class: "track" }, bar), body);
    if (entry.extra) el.hidden = true;
    lanesEl.append(el);
    lanes.push({ entry, tl: r.value, el, shown: 0, text, count, rate, bar });
  });
  for (const a of m.race_absent ?? [])
    lanesEl.append(h("div", { class: "lane absent", "data-engine": a.engine }, h("div", { class: "lane-head" }, h("span", { class: "lane-title", text: a.label })),
      h("p", { class: "lane-sub", text: a.why })));
  if (m.race_note) root.append(h("p", { class: "note race-note", text: m.race_note }));
  toggle.addEventListener("change", () => { for (const l of lanes) if (l.entry.extra) l.el.hidden = !toggle.checked; });
  const visible = () => lanes.filter((l) => !l.el.hidden);
  const endOf = () => Math.max(0, ...visible().map((l) => l.tl.t_us[l.tl.t_us.length - 1] ?? 0));

  let playing = false, simUs = 0, lastWall = 0, raf = 0;
  const render = () => {
    clock.textContent = `t = ${fmt(simUs / 1000, 3)} ms recorded`;
    for (const l of lanes) {
      const n = readyAt(l.tl.t_us, simUs);
      if (l.tl.pieces) {
        if (n < l.shown) { l.text.data = ""; l.shown = 0; }
        if (n > l.shown) { l.text.appendData(l.tl.pieces.slice(l.shown, n).join("")); l.shown = n; }
      }
      const N = l.tl.t_us.length;
      const tEnd = n > 0 ? Math.min(simUs, l.tl.t_us[N - 1]) : 0;
      l.rate.textContent = n > 0 && tEnd > 0 ? `${fmt(n / (tEnd / 1e6), 4)} tok/s` : "— tok/s";
      l.count.textContent = `${n} / ${N} tokens`;
      l.bar.style.width = `${(100 * n) / Math.max(1, N)}%`;
    }
  };
  const tick = (now: number) => {
    simUs += (now - lastWall) * 1000 * Number(speed.value);
    lastWall = now;
    const end = endOf();
    if (simUs >= end) { simUs = end; playing = false; play.textContent = "Play"; }
    render();
    if (playing) raf = requestAnimationFrame(tick);
  };
  play.addEventListener("click", () => {
    playing = !playing;
    play.textContent = playing ? "Pause" : "Play";
    if (playing) { if (simUs >= endOf()) simUs = 0; lastWall = performance.now(); raf = requestAnimationFrame(tick); }
    else cancelAnimationFrame(raf);
  });
  restart.addEventListener("click", () => { simUs = 0; render(); if (!playing) play.click(); });
  render();
}
