// Results table: speed and quality side by side, from results/*.json rows via the manifest
// (schema monolith-results/1, written by monolith/results.py; the columns follow its Markdown
// table: status, gate, speed, bytes, energy, quality, notes).
import { fmt, fmtBytes, h } from "./dom";
import type { Gate, Gates, Manifest, ResultRow, Sweep } from "./manifest";

const pct = (x: number | null | undefined) => (x == null || !Number.isFinite(x) ? "—" : `${fmt(100 * x, 3)}%`);
/** Fixed one decimal, thousands separated (the harness's {:,.1f}): 1,359.8. */
export const fmt1 = (x: number | null | undefined) =>
  x == null || !Number.isFinite(x) ? "—" : x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });

/** The gate cell: pass/FAIL, then divergences, prompts × tokens and the tolerance in logits. */
export function gateCell(g: Gate | null | undefined, gates?: Gates | null): HTMLElement {
  if (gates) return gatesCell(gates);
  const td = h("td", { class: "gate" });
  if (!g) { td.textContent = "—"; return td; }
  if (g.passed == null) {
    const why = Array.isArray(g.reasons) ? g.reasons.filter((x) => typeof x === "string").join("; ") : "";
    td.append(h("span", { class: "tag", text: "not gated" }), why ? h("span", { class: "sub", text: ` ${why}` }) : "");
    return td;
  }
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

/** A quantized row's two gates by name: implementation (gates the speed) and quality (as measured). */
export function gatesCell(g: Gates): HTMLElement {
  const td = h("td", { class: "gate gates" });
  const tag = (ok: boolean | null) => h("span", { class: `tag ${ok === true ? "ok" : ok === false ? "bad" : ""}`, text: ok === true ? "pass" : ok === false ? "FAIL" : "not measured" });
  const impl = h("span", { class: "gate-line" }, "implementation ", tag(g.implementation.passed));
  if (g.implementation.oracle) impl.title = [g.implementation.oracle, g.implementation.rule].filter(Boolean).join("; ");
  const q = g.quality;
  const ql = h("span", { class: "gate-line" }, "quality ", tag(q.passed));
  const bits: string[] = [];
  if (q.agreement != null) bits.push(`agreement ${pct(q.agreement)}${q.agreement_min != null ? ` (needs ${pct(q.agreement_min)})` : ""}`);
  if (q.ppl_ratio != null) bits.push(`ppl ratio ${fmt(q.ppl_ratio, 4)}${q.ppl_limit != null ? ` (≤ ${fmt(q.ppl_limit)})` : ""}`);
  if (q.kl != null) bits.push(`KL ${fmt(q.kl, 3)}`);
  if (q.measured_on) bits.push(`measured on ${q.measured_on}, same packed weights`);
  if (q.reason) bits.push(q.reason);
  td.append(impl, ql);
  if (bits.length) td.append(h("span", { class: "sub", text: bits.join(" · ") }));
  return td;
}

function notesOf(r: ResultRow): string[] {
  const out: string[] = [];
  // an ok row's reason names its gate's state, which the gate cell already shows
  if (r.status === "ok" && r.reason && r.reason !== r.speed_label && r.gate?.applicable !== false) out.push(r.reason);
  if (r.reduced) out.push(r.reduced);
  if (r.runs_note) out.push(r.runs_note);
  return out;
}

// engine and tok/s first: on a phone both stay pinned while the rest scrolls
const COLS = ["engine", "tok/s median (min–max)", "gate", "µs/token", "predicted µs/token", "bytes/token", "eff. bandwidth", "tok/J", "quality: ppl ratio · agr. · KL", "run"];

function rowEl(r: ResultRow, latest: boolean): HTMLTableRowElement {
  const name = h("td", { class: "engine" }, r.label || r.engine);
  if (r.experimental) name.append(" ", h("span", { class: "tag exp", text: "experimental" }));
  if (r.speed_label) name.append(" ", h("span", { class: "tag exp", text: r.speed_label }));
  const notes = notesOf(r);
  if (notes.length) name.append(h("span", { class: "row-note", text: notes.join("; ") }));
  const run = h("td", { class: "run" }, r.source ? `${r.source.file.replace(/^results\//, "")}, ${String(r.source.created ?? "").slice(0, 10)}` : "");
  if (r.status !== "ok") {
    const tr = h("tr", { class: r.status === "failed" ? "not-run failed" : "not-run", "data-engine": r.engine }, name,
      h("td", { class: "num" }, h("span", { class: `tag status ${r.status === "failed" ? "bad" : ""}`, text: r.status })));
    tr.append(h("td", { class: "reason", colspan: String(COLS.length - 3) }, r.reason ?? "no reason recorded"));
    if (latest) tr.append(run);
    return tr;
  }
  const ts = r.tok_s, us = r.us_per_token;
  const q = r.quality;
  const gq = r.gates?.quality;
  const speed = ts ? h("td", { class: "num speed" }, h("strong", { text: fmt1(ts.median) }), h("span", { class: "row-note", text: `${fmt1(ts.min)}–${fmt1(ts.max)}` })) : h("td", { class: "num speed", text: "—" });
  const quality = gq && gq.agreement != null ? `${fmt(gq.ppl_ratio, 4)} · ${pct(gq.agreement)} · ${fmt(gq.kl, 3)}`
    : q && (q.ppl_ratio != null || q.agreement != null) ? `${fmt(q.ppl_ratio, 4)} · ${pct(q.agreement)} · ${fmt(q.kl, 3)}` : "—";
  const cells = [
    us ? fmt1(us.median) : "—", r.predicted_us_per_token != null ? fmt1(r.predicted_us_per_token) : "—",
    fmtBytes(r.bytes_per_token), r.eff_bw_tbs != null ? `${fmt(r.eff_bw_tbs)} TB/s` : "—", fmt(r.tok_per_joule), quality,
  ];
  const tr = h("tr", { "data-engine": r.engine }, name, speed, gateCell(r.gate, r.gates), ...cells.map((c) => h("td", { class: "num" }, c)));
  if (latest) tr.append(run);
  return tr;
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
  const t = m.table;
  if (!t || !t.rows.length) { root.append(h("p", { class: "empty", text: "No results are recorded yet." })); return; }
  const latest = t.source === "latest";
  const cols = latest ? COLS : COLS.slice(0, -1);
  const head = h("thead", {}, h("tr", {}, ...cols.map((c, i) => h("th", { class: i === 1 || (i >= 3 && i < 9) ? "num" : "", text: c }))));
  const body = h("tbody", {}, ...t.rows.map((r) => rowEl(r, latest)));
  // A paragraph, not a <caption>: it wraps in the viewport while a wide table scrolls.
  const cap = h("p", { class: "table-caption" });
  cap.append(t.source === "final" ? `One run on one ${t.gpu ?? "GPU"}${t.window ? `, ${String(t.window.start).slice(0, 16).replace("T", " ")} UTC, ${fmt(t.window.span_s / 60, 2)} minutes` : ""}`
    : `Newest measurement of each engine on ${t.gpu ?? "the GPUs named per row"}`);
  cap.append(` · ${t.weights ?? "unknown weights"}${t.synthetic_weights ? " (text meaningless; speed and gates are real)" : ""}`);
  if (t.file) cap.append(" · ", h("code", { text: t.file }));
  if (t.fixture) cap.append(" ", h("strong", { class: "tag bad", text: "fixture, not measured" }));
  if (t.quick) cap.append(" ", h("strong", { class: "tag exp", text: "quick trial, not headline" }));
  root.append(cap);
  if (t.note) root.append(h("p", { class: "note table-note", text: t.note }));
  if (m.bandwidth?.note) root.append(h("p", { class: "note table-note bw-note", text: m.bandwidth.note }));
  root.append(h("div", { class: "table-wrap" }, h("table", { class: "results" }, head, body)));
  const sw = sweepTable(t.rows);
  if (sw) root.append(sw);
}
