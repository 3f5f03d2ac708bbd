// "Where the time goes": one stacked bar per version (mean block's time by category) with the
// roofline minimum of the byte model marked on the same axis.
import { budgetOf, CATEGORIES, CATEGORY_LABEL, rooflineNs, type Budget } from "./budget";
import { fmt, fmtBytes, h } from "./dom";
import type { Manifest, Version } from "./manifest";
import type { Trace } from "./trace";
import { fetchTrace } from "./xray";

interface Item { label: string; budget: Budget; roofNs: number; version: Version | null; trace: Trace }

export function mountBudget(root: HTMLElement, m: Manifest) {
  const list = h("div", { class: "budget-list", id: "budget-list" });
  const key = h("div", { class: "legend" }, ...CATEGORIES.map((c) => h("span", { class: `key cat-${c}` }, h("i", {}), CATEGORY_LABEL[c])),
    h("span", { class: "key roof" }, h("i", {}), "roofline minimum"));
  root.replaceChildren(h("h2", { text: "Where the time goes" }),
    h("p", { text: "One token, averaged over the blocks that ran: what the mean block spent its time on. "
      + "The red mark is the roofline minimum: bytes per token read once at the streaming-read bandwidth of the GPU "
      + "the trace was recorded on; each row names that bandwidth, or why it has none." }),
    key, list);
  const items = new Map<string, Item>();

  const render = () => {
    const order = (i: Item) => (i.version ? m.versions.indexOf(i.version) : m.versions.length);
    const all = [...items.values()].sort((a, b) => order(a) - order(b));
    const scale = Math.max(1, ...all.map((i) => i.budget.spanNs), ...all.map((i) => (Number.isFinite(i.roofNs) ? i.roofNs : 0)));
    list.replaceChildren(...all.map((it) => {
      const bar = h("div", { class: "stack" });
      for (const c of CATEGORIES) {
        const ns = it.budget.parts[c];
        if (ns <= 0) continue;
        bar.append(h("span", { class: `seg cat-${c}`, style: `width:${(100 * ns) / scale}%`, title: `${CATEGORY_LABEL[c]}: ${fmt(ns / 1e3)} µs` }));
      }
      if (Number.isFinite(it.roofNs)) bar.append(h("b", { class: "roofmark", style: `left:${(100 * it.roofNs) / scale}%` }));
      const parts = CATEGORIES.filter((c) => it.budget.parts[c] > 0).map((c) => `${CATEGORY_LABEL[c]} ${fmt(it.budget.parts[c] / 1e3)} µs`).join(" · ");
      const rl = it.version?.roofline;
      const roof = Number.isFinite(it.roofNs)
        ? ` — roofline ${fmt(it.roofNs / 1e3)} µs (${fmtBytes(it.version?.bytes_per_token)}/token${it.version?.bytes_source ? `, ${it.version.bytes_source}` : ""}; at ${rl?.source}); roofline / traced span = ${fmt((100 * it.roofNs) / it.budget.spanNs, 3)}%`
        : !it.version?.bytes_per_token ? " — no byte count for this trace: no roofline"
        : ` — no roofline: ${rl?.source ?? "no bandwidth recorded for this trace's GPU"}`;
      return h("div", { class: "budget-row", "data-version": it.label },
        h("div", { class: "budget-label" }, h("strong", { text: it.label }), it.trace.synthetic ? h("span", { class: "tag bad", text: "synthetic" }) : null),
        bar, h("p", { class: "budget-nums", text: `${fmt(it.budget.spanNs / 1e3, 4)} µs: ${parts}${roof}` }));
    }));
  };

  const add = (t: Trace, v: Version | null, label = v?.label ?? t.name) => {
    if (items.has(label)) return;
    const bpt = v?.bytes_per_token ?? null;
    const tbs = v?.roofline?.tbs ?? null;  // the trace's own GPU's bandwidth, never another's
    items.set(label, { label, budget: budgetOf(t), roofNs: bpt && tbs ? rooflineNs(bpt, tbs) : NaN, version: v, trace: t });
    render();
  };
  // Versions load one after another after first paint: the X-ray shows the first one sooner.
  const loadAll = async () => {
    for (const v of m.versions) {
      try { add(await fetchTrace(v.trace), v); } catch (e) { list.append(h("p", { class: "error", text: String((e as Error).message) })); }
    }
  };
  return { add, loadAll };
}
