// Results table: speed and quality side by side, from results/*.json rows via the manifest.
import { fmt, fmtBytes, h } from "./dom";
import type { Manifest, ResultFile, ResultRow } from "./manifest";

const pct = (x: number | null | undefined) => (x == null || !Number.isFinite(x) ? "—" : `${fmt(100 * x, 3)}%`);

function weightsText(w: ResultFile["weights"]): string {
  if (w == null) return "unknown weights";
  if (typeof w === "string") return w;
  const kind = String(w.kind ?? "?");
  return kind === "synthetic" ? `synthetic weights (seed ${String(w.seed ?? "?")}; text meaningless)` : `${kind} weights${w.name ? ` ${String(w.name)}` : ""}`;
}

function rowEl(r: ResultRow): HTMLTableRowElement {
  const cells: (string | Node)[] = [];
  const name = h("td", {}, r.label || r.engine);
  if (r.experimental) name.append(" ", h("span", { class: "tag exp", text: "experimental" }));
  if (r.gate && r.gate.passed === false) name.append(" ", h("span", { class: "tag bad", text: "gate failed" }));
  if (r.status !== "ok") {
    const tr = h("tr", { class: "not-run" }, name);
    tr.append(h("td", { colspan: "7" }, h("span", { class: "tag", text: r.status }), ` ${r.reason ?? "no reason recorded"}`));
    return tr;
  }
  const ts = r.tok_s;
  cells.push(ts ? `${fmt(ts.median, 4)}` : "—", ts ? `${fmt(ts.min, 4)}–${fmt(ts.max, 4)}` : "—");
  cells.push(fmtBytes(r.bytes_per_token), r.eff_bw_tbs != null ? `${fmt(r.eff_bw_tbs)} TB/s` : "—", fmt(r.tok_per_joule));
  const q = r.quality;
  cells.push(q ? `${fmt(q.ppl, 4)} · ${pct(q.agreement)} · ${fmt(q.kl, 2)}` : "—");
  return h("tr", {}, name, ...cells.map((c) => h("td", { class: "num" }, c)), h("td", { text: r.predicted_us_per_token != null ? `${fmt(r.predicted_us_per_token)} µs` : "—", class: "num" }));
}

export function mountTable(root: HTMLElement, m: Manifest): void {
  root.replaceChildren(h("h2", { text: "Results" }));
  if (!m.results.length) { root.append(h("p", { class: "empty", text: "No results recorded yet (results/*.json is empty)." })); return; }
  for (const f of m.results) {
    const env = f.env ?? {};
    const head = h("thead", {}, h("tr", {}, ...["engine", "tok/s median", "min–max", "bytes/token", "eff. bandwidth", "tok/J", "ppl · agreement · KL", "predicted"].map((c) => h("th", { text: c }))));
    const body = h("tbody", {}, ...f.rows.map(rowEl));
    const cap = h("caption", {}, h("code", { text: f.file }), ` — ${String(env.gpu ?? "unknown GPU")}`, env.driver ? `, driver ${String(env.driver)}` : "", ` — ${weightsText(f.weights)}`);
    if (f.fixture) cap.append(" ", h("strong", { class: "tag bad", text: "fixture, not measured" }));
    root.append(h("div", { class: "table-wrap" }, h("table", { class: "results" }, cap, head, body)));
  }
}
