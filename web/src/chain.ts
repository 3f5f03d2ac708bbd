// "One layer's chain": per streaming variant, the layer's five phases as one bar of hop, opening and
// work (bench/chainmodel.py, from the variant's X-ray), above the bar the standalone probes give for
// the same chain (its floor). Both on one axis, so the eye sees which pieces the floor does not have.
import { fmt, h } from "./dom";
import type { Chain, ChainPhase, Manifest } from "./manifest";

export const PIECES = ["hop_us", "open_us", "work_us"] as const;
export type Piece = (typeof PIECES)[number];
export const PIECE_LABEL: Record<Piece, string> = {
  hop_us: "hop (measured: to thread 0's words; floor: every word)",
  open_us: "opening (the other threads' words, bookkeeping)",
  work_us: "work (dot products, stores)",
};

/** Sums of one bar: per piece and in all (µs). Throws on a value that is not a finite number >= 0,
 * so a malformed manifest shows an error instead of a wrong bar. */
export function chainTotals(phases: ChainPhase[]): Record<Piece, number> & { layer: number } {
  const t = { hop_us: 0, open_us: 0, work_us: 0, layer: 0 };
  for (const p of phases) {
    for (const k of PIECES) {
      const v = p[k];
      if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`chain phase ${JSON.stringify(p.phase)}: ${k} is not a number`);
      const w = Math.max(0, v);  // a piece can come out a few ns negative (medians of different layers)
      t[k] += w;
      t.layer += w;
    }
  }
  return t;
}

function bar(phases: ChainPhase[], scale: number): HTMLElement {
  const el = h("div", { class: "stack chain-stack" });
  for (const p of phases) {
    for (const k of PIECES) {
      const w = Math.max(0, p[k]);
      if (w <= 0) continue;
      el.append(h("span", { class: `seg chain-${k.replace("_us", "")}`, style: `width:${(100 * w) / scale}%`,
        title: `${p.phase.replace(/^s_/, "")}: ${PIECE_LABEL[k].split(" (")[0]} ${fmt(w, 3)} µs` }));
    }
  }
  return el;
}

export function mountChain(root: HTMLElement, m: Manifest) {
  const chains: Chain[] = m.chains ?? [];
  root.replaceChildren(h("h2", { text: "One layer's chain" }),
    h("p", { text: "The streaming schedule waits for its chain, not for bytes: per layer, five phases (qkv, attention, O, "
      + "MLP, down), each entered through a hop. Upper bar: one median layer as the X-ray measured it. Lower bar: the same "
      + "chain with every piece at the time a standalone probe measured for it alone (hop, GEMV round, attention split): "
      + "the floor this schedule could reach by tuning. Every bar is on one time axis. From bench/chainmodel.py (results/chain/)." }),
    h("div", { class: "legend" }, ...PIECES.map((k) => h("span", { class: `key chain-${k.replace("_us", "")}` }, h("i", {}), PIECE_LABEL[k]))));
  if (!chains.length) {
    root.append(h("p", { class: "note", text: "No chain model is recorded in this data." }));
    return;
  }
  const list = h("div", { class: "chain-list", id: "chain-list" });
  root.append(list);
  // each row's sums once (or the error its row reports), then one axis for every variant: bars
  // compare across rows as well as within one
  const rows = chains.map((c) => {
    try { return { c, a: chainTotals(c.measured), f: chainTotals(c.floor) }; } catch (e) { return { c, err: e as Error }; }
  });
  const scale = Math.max(1e-9, ...rows.flatMap((r) => ("err" in r ? [] : [r.a.layer, r.f.layer])));
  for (const r of rows) {
    const c = r.c;
    try {
      if ("err" in r) throw r.err;
      const { a, f } = r;
      list.append(h("div", { class: "chain-row", "data-variant": c.variant },
        h("div", { class: "budget-label" }, h("strong", { text: `${c.variant} at position ${c.position.toLocaleString("en-US")}` }),
          h("span", { class: "muted", text: ` · ${c.blocks} blocks` })),
        bar(c.measured, scale), bar(c.floor, scale),
        h("p", { class: "budget-nums", text: `measured ${fmt(a.layer, 4)} µs per layer (hop ${fmt(a.hop_us, 3)}, opening ${fmt(a.open_us, 3)}, `
          + `work ${fmt(a.work_us, 3)}) · floor ${fmt(f.layer, 4)} µs (hop ${fmt(f.hop_us, 3)}, work ${fmt(f.work_us, 3)}) · token: `
          + `chain ${fmt(c.measured_token_us, 4)} µs against the traced launch's ${fmt(c.traced_token_us, 4)}; floor ${fmt(c.floor_token_us, 4)} µs `
          + `= ${Math.round(1e6 / c.floor_token_us).toLocaleString("en-US")} tok/s (${c.file})` })));
    } catch (e) {
      list.append(h("p", { class: "error", text: `${c.file ?? c.variant}: ${(e as Error).message}` }));
    }
  }
}
