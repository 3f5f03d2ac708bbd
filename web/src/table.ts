// Results table: speed and quality side by side, from results/*.json rows via the manifest
// (schema monolith-results/1, written by monolith/results.py; the columns follow its Markdown
// table: status, gate, speed, bytes, energy, quality, notes).
import { fmt, fmtBytes, h } from "./dom";
import type { Gate, Manifest, ResultFile, ResultRow, Sweep } from "./manifest";

const pct = (x: number | null | undefined) => (x == null || !Number.isFinite(x) ? "—" : `${fmt(100 * x, 3)}%`);
/** Fixed one decimal, thousands separated (the harness's {:,.1f}): 1,359.8. */
export const fmt1 = (x: number | null | undefined) =>
  x == null || !Number.isFinite(x) ? "—" : x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });

function weightsText(w: ResultFile["weights"]): string {
  if (w == null) return "unknown weights";
  if (typeof w === "string") return w;
  const kind = String(w.kind ?? "?");
  return kind === "synthetic" ? `synthetic weights (seed ${String(w.seed ?? "?")}; text meaningless)` : `${kind} weights${w.name ? ` ${String(w.name)}` : ""}`;
}

/** The gate cell: pass/FAIL, then divergences, prompts × tokens and the tolerance in logits. */
export function gateCell(g: Gate | null | undefined): HTMLElement {
  const td = h("td", { class: "gate" });
  if (!g) { td.textContent = "—"; return td; }
  if (g.passed == null) { td.textContent = "n/a"; return td; }
  td.append(h("span", { class: `tag ${g.passed ? "ok" : "bad"}`, text: g.passed ? "pass" : "FAIL" }));
  const bits: string[] = [];
  if (typeof g.divergences === "number") bits.push(`${g.divergences} div.${typeof g.divergences_disallowed === "number" && g.divergences_disallowed ? ` (${g.divergences_disallowed} over tol.)` : ""}`);
  if (typeof g.prompts === "number" && typeof g.tokens_per_prompt === "number") bits.push(`${g.prompts}×${g.tokens_per_prompt}`);
  if (typeof g.tolerance === "number") bits.push(`tol. ${fmt(g.tolerance)} logits`);
  if (bits.length) td.append(" ", h("span", { class: "sub", text: bits.join(" · ") }));
  const why = Array.isArray(g.reasons) ? g.reasons.filter((x) => typeof x === "string").join("; ") : "";
  const oracle = typeof g.oracle?.engine === "string" ? `oracle: ${g.oracle.engine}` : "";
  const title = [why, oracle].filter(Boolean).join("\n");
  if (title) td.title = title;
  return td;
}

function notesOf(r: ResultRow): string[] {
  const out: string[] = [];
  if (r.status === "ok" && r.reason) out.push(r.reason);
  if (r.reduced) out.push(r.reduced);
  if (r.from_earlier_run) out.push(`kept from an earlier run (${r.from_earlier_run})`);
  return out;
}

const COLS = ["engine", "status", "gate", "tok/s median (min–max)", "µs/token", "predicted µs/token", "bytes/token", "eff. bandwidth", "tok/J", "ppl · agr. · KL"];

function rowEl(r: ResultRow): HTMLTableRowElement {
  const name = h("td", { class: "engine" }, r.label || r.engine);
  if (r.experimental) name.append(" ", h("span", { class: "tag exp", text: "experimental" }));
  if ("control_ok" in r) {
    name.append(" ", r.control_ok ? h("span", { class: "tag ok", text: "negative control: failed as it must" })
      : h("span", { class: "tag bad", text: "NEGATIVE CONTROL PASSED" }));
  }
  const notes = notesOf(r);
  if (notes.length) name.append(h("span", { class: "row-note", text: notes.join("; ") }));
  const status = h("td", {}, h("span", { class: `tag status ${r.status === "ok" ? "ok" : r.status === "failed" ? "bad" : ""}`, text: r.status }));
  if (r.status !== "ok") {
    const tr = h("tr", { class: r.status === "failed" ? "not-run failed" : "not-run", "data-engine": r.engine }, name, status, gateCell(r.gate));
    tr.append(h("td", { class: "reason", colspan: String(COLS.length - 3) }, r.reason ?? "no reason recorded"));
    return tr;
  }
  const ts = r.tok_s, us = r.us_per_token;
  const q = r.quality;
  const speed = ts ? h("td", { class: "num" }, h("strong", { text: fmt1(ts.median) }), h("span", { class: "row-note", text: `${fmt1(ts.min)}–${fmt1(ts.max)}` })) : h("td", { class: "num", text: "—" });
  const cells = [
    us ? fmt1(us.median) : "—", r.predicted_us_per_token != null ? fmt1(r.predicted_us_per_token) : "—",
    fmtBytes(r.bytes_per_token), r.eff_bw_tbs != null ? `${fmt(r.eff_bw_tbs)} TB/s` : "—", fmt(r.tok_per_joule),
    q ? `${fmt(q.ppl, 4)} · ${pct(q.agreement)} · ${fmt(q.kl, 2)}` : "—",
  ];
  return h("tr", { "data-engine": r.engine }, name, status, gateCell(r.gate), speed, ...cells.map((c) => h("td", { class: "num" }, c)));
}

/** Positions (numeric order) and one row per engine with a non-empty sweep. */
function sweepTable(rows: ResultRow[]): HTMLElement | null {
  const withSweep = rows.filter((r) => r.sweep && typeof r.sweep === "object" && Object.keys(r.sweep).length);
  if (!withSweep.length) return null;
  const pos = [...new Set(withSweep.flatMap((r) => Object.keys(r.sweep as Sweep)))].sort((a, b) => Number(a) - Number(b));
  const head = h("thead", {}, h("tr", {}, h("th", { text: "engine" }), ...pos.map((p) => h("th", { class: "num", text: `pos. ${p}` }))));
  const body = h("tbody", {}, ...withSweep.map((r) => h("tr", {}, h("td", { text: r.label || r.engine }), ...pos.map((p) => {
    const s = (r.sweep as Sweep)[p];
    const ok = s && s.status === "ok" && s.tok_s;
    return h("td", { class: "num", title: ok && s.us_per_token != null ? `${fmt1(s.us_per_token)} µs/token` : (s?.reason ?? "") }, ok ? fmt1(s.tok_s!.median) : "—");
  }))));
  return h("div", {}, h("p", { class: "table-caption", text: "Position sweep: tok/s (median of windows) at each starting context position" }),
    h("div", { class: "table-wrap" }, h("table", { class: "results sweep" }, head, body)));
}

export function mountTable(root: HTMLElement, m: Manifest): void {
  root.replaceChildren(h("h2", { text: "Results" }));
  if (!m.results.length) { root.append(h("p", { class: "empty", text: "No results recorded yet (results/*.json is empty)." })); return; }
  // Files with identical rows (the harness writes the same session under two names) are shown once.
  const seen = new Map<string, HTMLElement>();
  for (const f of m.results) {
    const key = JSON.stringify(f.rows);
    const earlier = seen.get(key);
    if (earlier) { earlier.append(` (same rows: ${f.file})`); continue; }
    const env = f.env ?? {};
    const head = h("thead", {}, h("tr", {}, ...COLS.map((c, i) => h("th", { class: i >= 3 ? "num" : "", text: c }))));
    const body = h("tbody", {}, ...f.rows.map(rowEl));
    // A paragraph, not a <caption>: it wraps in the viewport while a wide table scrolls.
    const cap = h("p", { class: "table-caption" }, h("code", { text: f.file }), ` — ${String(env.gpu ?? "unknown GPU")}`, env.driver ? `, driver ${String(env.driver)}` : "", ` — ${weightsText(f.weights)}`);
    if (f.created) cap.append(` — ${f.created}`);
    if (f.fixture) cap.append(" ", h("strong", { class: "tag bad", text: "fixture, not measured" }));
    if (f.protocol && f.protocol.headline === false) cap.append(" ", h("strong", { class: "tag exp", text: "not headline (quick protocol)" }));
    const also = h("span", { class: "also" });
    cap.append(also);
    seen.set(key, also);
    root.append(cap, h("div", { class: "table-wrap" }, h("table", { class: "results" }, head, body)));
    const sw = sweepTable(f.rows);
    if (sw) root.append(sw);
    // a string (older files) or one entry per skipped quality measure
    const qs = f.protocol?.quality_skipped;
    const skipped = typeof qs === "string" ? [qs] : Array.isArray(qs) ? qs.filter((x): x is string => typeof x === "string") : [];
    if (skipped.length) root.append(h("p", { class: "note", text: `Quality (ppl, agreement, KL) not measured in this run: ${skipped.join("; ")}.` }));
  }
}
