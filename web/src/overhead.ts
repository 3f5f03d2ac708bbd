// The X-ray build's measured cost beside its trace (meta.xray_overhead, written by
// monolith/xray/overhead.py): plain vs X-ray tok/s at each position. The page says the worst
// position's number and flags the trace when any position is above the limit (3 % by default).

export interface OverheadNote { text: string; over: boolean; title: string }

const num = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);

/** null when the trace carries no usable overhead (older traces, synthetic ones). */
export function overheadNote(meta: Record<string, unknown>): OverheadNote | null {
  const o = meta.xray_overhead;
  if (typeof o !== "object" || o === null || Array.isArray(o)) return null;
  const rec = o as Record<string, unknown>;
  const pct = rec.pct;
  if (typeof pct !== "object" || pct === null || Array.isArray(pct)) return null;
  const rows = Object.entries(pct as Record<string, unknown>).filter((e): e is [string, number] => num(e[1]));
  if (!rows.length) return null;
  const limit = num(rec.limit_pct) && rec.limit_pct > 0 ? rec.limit_pct : 3;
  rows.sort((a, b) => Number(a[0]) - Number(b[0]));
  const worst = rows.reduce((a, b) => (b[1] > a[1] ? b : a));
  const over = rows.filter(([, v]) => v > limit).map(([p]) => p);
  const pcts = rows.map(([p, v]) => `${p}: ${v.toFixed(1)} %`).join(", ");
  const text = over.length
    ? `X-ray overhead above ${limit} % at position ${over.join(", ")} (worst ${worst[1].toFixed(1)} %): this trace may not show the plain kernel's schedule`
    : `X-ray overhead ≤ ${Math.max(worst[1], 0).toFixed(1)} % of plain tok/s`;
  return { text, over: over.length > 0, title: `instrumented vs plain build, tok/s lost by position: ${pcts}` };
}
