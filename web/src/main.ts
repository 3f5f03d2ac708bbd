// Page entry: load the manifest (written by xray/site.py), then mount each panel. Everything
// numeric on the page comes from the manifest, the timelines or the traces it names.
import "./style.css";
import { mountBudget } from "./budgetview";
import { mountChain } from "./chain";
import { $, h } from "./dom";
import { fetchJson, type Manifest } from "./manifest";
import { mountRace } from "./race";
import { mountTable } from "./table";
import { mountTour } from "./tour";
import { mountXray } from "./xray";

function protocolList(m: Manifest): HTMLElement | null {
  const f = m.results.find((r) => r.protocol && Object.keys(r.protocol).length);
  if (!f) return null;
  const dl = h("dl", { class: "protocol" });
  for (const [k, v] of Object.entries(f.protocol)) dl.append(h("dt", { text: k }), h("dd", { text: typeof v === "string" ? v : JSON.stringify(v) }));
  // Collapsed: the harness records a few dozen keys; the prose above is the summary.
  return h("details", { class: "protocol-wrap" }, h("summary", {}, "Protocol as recorded in ", h("code", { text: f.file })), dl);
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
  if (m.fixture) $("#banner").append(h("p", { class: "banner", text: "Test fixture data: these numbers were not measured." }));
  for (const n of m.notes) $("#banner").append(h("p", { class: "note", text: n }));
  $("#built").textContent = `data exported ${m.created}`;

  const budget = mountBudget($("#budget"), m);
  mountXray($("#xray"), m, (t, v, label) => budget.add(t, v, label));
  mountTable($("#results"), m);
  mountChain($("#chain"), m);
  mountTour($("#tour"), m);
  const proto = protocolList(m);
  if (proto) $("#method").append(proto);
  await mountRace($("#race"), m);
  document.body.dataset.ready = "1";
  performance.mark("monolith-ready");
  void budget.loadAll();
}

void main();
