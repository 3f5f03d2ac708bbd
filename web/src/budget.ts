// "Where the time goes": one token split into weight reads, barrier waits, attention and the
// LM head, for the average block, next to the roofline minimum of the byte model.
// Pure functions over a parsed Trace (tests/unit/budget.test.ts).
import type { Phase, Trace } from "./trace";

export const CATEGORIES = ["weights", "barrier", "attention", "lmhead", "other"] as const;
export type Category = (typeof CATEGORIES)[number];

export const CATEGORY_LABEL: Record<Category, string> = {
  weights: "weight reads",
  barrier: "barrier waits",
  attention: "attention",
  lmhead: "LM head",
  other: "untraced / idle",
};

/** Which budget slice a phase belongs to. Kind and scope come from the trace's phase table;
 * the attention test is by name because attention-side work (RoPE, KV append, the L2
 * prefetch the other blocks do meanwhile) has no kind of its own. */
export function categoryOf(p: Phase): Category {
  if (p.kind === "wait") return "barrier";
  if (p.scope === "token") return "lmhead";
  if (/(^|_)(attn|attention|rope|prefetch|kv|kv_append)($|_)/i.test(p.name)) return "attention"; // not "qkv"
  return "weights";
}

export interface Budget {
  spanNs: number;                        // first start to last end over all blocks
  parts: Record<Category, number>;       // ns, mean over the blocks that recorded anything
  activeBlocks: number;
}

export function budgetOf(t: Trace): Budget {
  const parts: Record<Category, number> = { weights: 0, barrier: 0, attention: 0, lmhead: 0, other: 0 };
  const cat = new Map<number, Category>(t.phases.map((p) => [p.id, categoryOf(p)]));
  const seen = new Set<number>();
  for (let i = 0; i < t.n; i++) {
    seen.add(t.block[i]);
    parts[cat.get(t.phase[i]) ?? "other"] += t.dur[i];
  }
  const active = Math.max(1, seen.size);
  let traced = 0;
  for (const c of CATEGORIES) { parts[c] /= active; if (c !== "other") traced += parts[c]; }
  const spanNs = t.t1 - t.t0;
  // "other" is what the average block did not record: launch ramp, idle tail after its last phase.
  parts.other += Math.max(0, spanNs - traced);
  return { spanNs, parts, activeBlocks: seen.size };
}

/** Roofline minimum for one token: every byte read once at the measured streaming bandwidth.
 * TB/s = 1e12 B/s = 1e3 B/ns. */
export function rooflineNs(bytesPerToken: number, tbs: number): number {
  if (!(bytesPerToken > 0) || !(tbs > 0)) return NaN;
  return bytesPerToken / (tbs * 1e3);
}

/** Fractions of `scaleNs` (the longest bar on screen) for drawing; sums to span/scale. */
export function fractions(b: Budget, scaleNs: number): Record<Category, number> {
  const out = {} as Record<Category, number>;
  for (const c of CATEGORIES) out[c] = scaleNs > 0 ? b.parts[c] / scaleNs : 0;
  return out;
}
