// Page entry: load the manifest (written by xray/site.py), then mount each panel. Everything
// numeric on the page comes from the manifest, the timelines or the traces it names.
import "./style.css";
import { mountBudget } from "./budgetview";
import { mountChain } from "./chain";
import { fmt, $, h } from "./dom";
import { fetchJson, type Manifest } from "./manifest";
import { mountRace } from "./race";
import { fmt1, mountTable } from "./table";
import { mountTour } from "./tour";
import { mountXray } from "./xray";

/** The headline as one line: tok/s, × the best baseline, on which GPU (all from the manifest). */
export function headlineLine(m: Manifest): HTMLElement | null {
  const hl = m.headline;
  if (!hl) return null;
  const p = h("p", { class: "headline", id: "headline" },
    h("strong", { class: "hl-rate", text: `${fmt1(hl.tok_s)} tok/s` }), " ",
    h("span", { class: "hl-what", text: `monolith ${hl.variant ?? hl.engine}` }));
  if (hl.speedup != null && hl.best_baseline_tok_s != null)
    p.append(" · ", h("strong", { class: "hl-x", text: `${fmt(hl.speedup, 3)}×` }), ` ${(hl.best_baseline_label ?? hl.best_baseline ?? "").replace(/\s*\([^)]*\)\s*$/, "")} (${fmt1(hl.best_baseline_tok_s)} tok/s)`);
  if (hl.gpu) p.append(` · on one ${hl.gpu}`);
  return p;
}

function headlineSub(m: Manifest): HTMLElement | null {
  const t = m.table;
  if (!t || !m.headline) return null;
  const bits = ["batch 1, greedy decoding"];
  if (t.synthetic_weights) bits.push("synthetic weights with Qwen3-0.6B's shapes");
  const row = t.rows.find((r) => r.engine === m.headline?.engine);
  const q = row?.gates?.quality;
  if (q && q.passed === false) bits.push("its quality gate fails on these weights (see Results)");
  bits.push(t.source === "final" ? `one run, ${String(t.created ?? "").slice(0, 10)}` : "from separate runs: the one-run final matrix is pending");
  return h("p", { class: "headline-sub", text: bits.join(" · ") });
}

async function main() {
  const status = $("#status");
  let m: Manifest;
  try {
    m = (await fetchJson("data/manifest.json")) as Manifest;
    if (m?.schema !== "monolith-site/1") throw new Error(`data/manifest.json: unknown schema ${JSON.stringify(m?.schema)}`);
  } catch (e) {
    status.textContent = `The page data could not be loaded: ${(e as Error).message}`;
    status.className = "error";
    return;
  }
  status.hidden = true;
  const hl = headlineLine(m);
  if (hl) $("#headline-slot").replaceWith(hl, headlineSub(m) ?? "");
  if (m.fixture) $("#banner").append(h("p", { class: "banner", text: "Test fixture data: these numbers were not measured." }));
  for (const n of m.notes) $("#banner").append(h("p", { class: "note", text: n }));
  if (m.quality_explanation) $("#method").append(h("p", { class: "quality-why", text: m.quality_explanation }));
  $("#built").textContent = `data exported ${m.created}`;

  const budget = mountBudget($("#budget"), m);
  mountXray($("#xray"), m, (t, v, label) => budget.add(t, v, label));
  mountTable($("#results"), m);
  mountChain($("#chain"), m);
  mountTour($("#tour"), m);
  await mountRace($("#race"), m);
  document.body.dataset.ready = "1";
  performance.mark("monolith-ready");
  void budget.loadAll();
}

void main();
