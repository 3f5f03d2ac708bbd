// Time-axis maths for the Gantt: a view is a window [t0, t1] (ns) mapped onto a pixel width.
// Pure functions, unit-tested (tests/unit/timeaxis.test.ts); the canvas code only calls these.

export interface View { t0: number; t1: number }

/** Shortest window allowed (ns): below the %globaltimer tick there is nothing to see. */
export const MIN_SPAN_NS = 20;

export const toX = (v: View, t: number, width: number): number => ((t - v.t0) / (v.t1 - v.t0)) * width;
export const toT = (v: View, x: number, width: number): number => v.t0 + (x / width) * (v.t1 - v.t0);

/** Keep the window inside [lo, hi] (the whole trace) and no shorter than MIN_SPAN_NS. */
export function clampView(v: View, lo: number, hi: number): View {
  const full = Math.max(hi - lo, MIN_SPAN_NS);
  let span = Math.min(Math.max(v.t1 - v.t0, MIN_SPAN_NS), full);
  let t0 = Math.min(Math.max(v.t0, lo), Math.max(lo, hi - span));
  if (!Number.isFinite(t0)) t0 = lo;
  if (!Number.isFinite(span)) span = full;
  return { t0, t1: t0 + span };
}

/** Zoom by `factor` (>1 = in) keeping time `anchor` under the same pixel. */
export function zoomAt(v: View, anchor: number, factor: number, lo: number, hi: number): View {
  const t0 = anchor - (anchor - v.t0) / factor;
  const t1 = anchor + (v.t1 - anchor) / factor;
  return clampView({ t0, t1 }, lo, hi);
}

/** Pan by a pixel distance (positive dx moves the content right, i.e. earlier times). */
export function panBy(v: View, dx: number, width: number, lo: number, hi: number): View {
  const dt = (dx / width) * (v.t1 - v.t0);
  return clampView({ t0: v.t0 - dt, t1: v.t1 - dt }, lo, hi);
}

/** Tick positions at a 1-2-5 step giving about `target` ticks across the window. */
export function ticks(v: View, target = 8): { step: number; values: number[] } {
  const span = v.t1 - v.t0;
  if (!(span > 0)) return { step: 0, values: [] };
  const raw = span / Math.max(1, target);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const values: number[] = [];
  for (let t = Math.ceil(v.t0 / step) * step; t <= v.t1 + step * 1e-9; t += step) values.push(Math.round(t * 1e6) / 1e6);
  return { step, values };
}

/** Human time from ns: "850 ns", "12.4 µs", "1.25 ms". */
export function fmtNs(ns: number): string {
  const a = Math.abs(ns);
  if (a < 1e3) return `${trim(ns, a < 10 ? 1 : 0)} ns`;
  if (a < 1e6) return `${trim(ns / 1e3, a < 1e4 ? 2 : a < 1e5 ? 1 : 0)} µs`;
  if (a < 1e9) return `${trim(ns / 1e6, 2)} ms`;
  return `${trim(ns / 1e9, 2)} s`;
}

function trim(x: number, digits: number): string {
  return Number(x.toFixed(digits)).toString();
}

/** First index i in the sorted array `a` (length n) with a[i] >= x. */
export function lowerBound(a: ArrayLike<number>, x: number, lo = 0, hi = a.length): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}
