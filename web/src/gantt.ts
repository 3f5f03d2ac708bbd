// SM × time Gantt of one token on a Canvas 2D: one row per block, rows grouped by SM in SM
// order, SMs without a block drawn as labelled idle rows; one colour per phase, waits hatched.
// Fast path for ~132 rows × ~260 events: per-row events sorted by time, binary search to the
// visible window, sub-pixel events collapsed to one pixel column, one redraw per frame.
import { clampView, fmtNs, lowerBound, panBy, ticks, toT, toX, zoomAt, type View } from "./timeaxis";
import type { Phase, Trace } from "./trace";

const GUTTER = 58, AXIS = 22;

export interface Row { sm: number; block: number | null; idx: Int32Array; start: Float64Array; end: Float64Array }

/** Rows in SM order; a block's events sorted by start. Exported for tests. */
export function buildRows(t: Trace): Row[] {
  const perBlock = new Map<number, number[]>();
  for (let i = 0; i < t.n; i++) {
    const b = t.block[i];
    let a = perBlock.get(b);
    if (!a) perBlock.set(b, (a = []));
    a.push(i);
  }
  const bySm = new Map<number, number[]>();
  for (const [b, sm] of t.blockSm) { let a = bySm.get(sm); if (!a) bySm.set(sm, (a = [])); a.push(b); }
  const rows: Row[] = [];
  const empty = new Int32Array(0), none = new Float64Array(0);
  const smCount = Math.max(t.smCount, ...[...bySm.keys()].map((s) => s + 1));
  for (let sm = 0; sm < smCount; sm++) {
    const blocks = (bySm.get(sm) ?? []).sort((a, b) => a - b);
    if (!blocks.length) { rows.push({ sm, block: null, idx: empty, start: none, end: none }); continue; }
    for (const b of blocks) {
      const ix = (perBlock.get(b) ?? []).sort((i, j) => t.start[i] - t.start[j]);
      const idx = Int32Array.from(ix);
      const start = Float64Array.from(ix, (i) => t.start[i]);
      // Running max of ends: sorted even if a record overlaps the next, so the search stays valid.
      const end = new Float64Array(ix.length);
      let m = -Infinity;
      ix.forEach((i, k) => { m = Math.max(m, t.start[i] + t.dur[i]); end[k] = m; });
      rows.push({ sm, block: b, idx, start, end });
    }
  }
  return rows;
}

export interface Hit { i: number; phase: Phase | undefined; layer: number; block: number; sm: number; start: number; dur: number }

export class Gantt {
  private ctx: CanvasRenderingContext2D;
  private trace: Trace | null = null;
  private rows: Row[] = [];
  private view: View = { t0: 0, t1: 1 };
  private patterns = new Map<number, CanvasPattern | string>();
  private pending = 0;
  draws = 0;
  onView: (v: View) => void = () => {};

  constructor(private canvas: HTMLCanvasElement, private tip: HTMLElement) {
    const ctx = canvas.getContext("2d", { alpha: false });
    if (!ctx) throw new Error("Canvas 2D is not available");
    this.ctx = ctx;
    this.bindInput();
    new ResizeObserver(() => this.request()).observe(canvas);
  }

  setTrace(t: Trace): void {
    const rows = buildRows(t); // first: if this throws, the previous trace stays on screen
    this.trace = t;
    this.rows = rows;
    this.patterns.clear();
    this.view = { t0: t.t0, t1: t.t1 };
    this.canvas.style.height = `${Math.min(640, Math.max(260, AXIS + this.rows.length * 4))}px`;
    this.canvas.dataset.version = t.variant;
    this.request();
  }

  get bounds(): [number, number] { return this.trace ? [this.trace.t0, this.trace.t1] : [0, 1]; }
  getView(): View { return this.view; }
  setView(v: View): void { this.view = clampView(v, ...this.bounds); this.request(); this.onView(this.view); }
  zoom(factor: number, anchor?: number): void {
    this.setView(zoomAt(this.view, anchor ?? (this.view.t0 + this.view.t1) / 2, factor, ...this.bounds));
  }
  pan(dxPx: number): void { this.setView(panBy(this.view, dxPx, this.plotW(), ...this.bounds)); }
  reset(): void { this.setView({ t0: this.bounds[0], t1: this.bounds[1] }); }
  /** Window around one layer's events (a 3% margin each side). */
  zoomLayer(layer: number): void {
    const t = this.trace;
    if (!t) return;
    let a = Infinity, b = -Infinity;
    for (let i = 0; i < t.n; i++) if (t.layer[i] === layer) { a = Math.min(a, t.start[i]); b = Math.max(b, t.start[i] + t.dur[i]); }
    if (a < b) { const m = (b - a) * 0.03; this.setView({ t0: a - m, t1: b + m }); }
  }

  private plotW(): number { return Math.max(1, this.canvas.clientWidth - GUTTER); }
  private rowH(): number { return (this.canvas.clientHeight - AXIS) / Math.max(1, this.rows.length); }

  request(): void {
    if (!this.pending) this.pending = requestAnimationFrame(() => { this.pending = 0; this.draw(); });
  }

  private fillFor(p: Phase | undefined, id: number): CanvasPattern | string {
    let f = this.patterns.get(id);
    if (f) return f;
    const color = p?.color ?? "#777";
    if (p?.kind !== "wait") f = color;
    else {
      // Hatch: the phase colour on a light ground, so waits read as "not working".
      const c = document.createElement("canvas");
      c.width = c.height = 6;
      const g = c.getContext("2d")!;
      g.fillStyle = "#f4f4f4"; g.fillRect(0, 0, 6, 6);
      g.strokeStyle = color; g.lineWidth = 1.6;
      g.beginPath(); g.moveTo(-1, 7); g.lineTo(7, -1); g.moveTo(-1, 1); g.lineTo(1, -1); g.moveTo(5, 7); g.lineTo(7, 5); g.stroke();
      f = this.ctx.createPattern(c, "repeat") ?? color;
    }
    this.patterns.set(id, f);
    return f;
  }

  draw(): void {
    const { canvas, ctx } = this;
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth, H = canvas.clientHeight;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      this.patterns.clear(); // patterns belong to the old backing store's context state
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    const t = this.trace;
    if (!t || W <= GUTTER) return;
    const v = this.view, pw = W - GUTTER, rh = this.rowH();
    // Axis.
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    ctx.strokeStyle = "#e3e3e3"; ctx.lineWidth = 1;
    for (const tv of ticks(v, Math.max(2, Math.floor(pw / 90))).values) {
      const x = GUTTER + toX(v, tv, pw);
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS - 4); ctx.lineTo(x + 0.5, H); ctx.stroke();
      ctx.fillText(fmtNs(tv - t.t0), x + 3, AXIS / 2);
    }
    // Rows.
    ctx.save();
    ctx.beginPath(); ctx.rect(GUTTER, AXIS, pw, H - AXIS); ctx.clip();
    const gap = rh >= 4 ? 1 : 0;
    for (let r = 0; r < this.rows.length; r++) {
      const row = this.rows[r], y = AXIS + r * rh;
      if (row.block == null) { ctx.fillStyle = "#d9d3c3"; ctx.fillRect(GUTTER, y, pw, Math.max(1, rh - gap)); continue; } // idle SM: no block
      let k = lowerBound(row.end, v.t0);
      let lastCol = -1, lastPhase = -1;
      for (; k < row.idx.length && row.start[k] <= v.t1; k++) {
        const i = row.idx[k];
        const x0 = toX(v, t.start[i], pw), x1 = toX(v, t.start[i] + t.dur[i], pw);
        const col = Math.floor(x0);
        if (x1 - x0 < 1 && col === lastCol) continue; // sub-pixel: one event per pixel column
        lastCol = col;
        if (t.phase[i] !== lastPhase) { lastPhase = t.phase[i]; ctx.fillStyle = this.fillFor(t.phaseById.get(lastPhase), lastPhase); }
        ctx.fillRect(GUTTER + x0, y, Math.max(1, x1 - x0), Math.max(1, rh - gap));
      }
    }
    ctx.restore();
    // Gutter labels: one per SM, as often as the row height allows.
    ctx.fillStyle = "#555"; ctx.font = "10px system-ui, sans-serif";
    const every = Math.max(1, Math.ceil(12 / Math.max(rh, 0.1)));
    let lastSm = -1;
    this.rows.forEach((row, r) => {
      if (row.sm === lastSm) return;
      lastSm = row.sm;
      if (row.sm % every !== 0 && row.block != null) return;
      if (row.block == null && rh < 6 && row.sm % every !== 0) return;
      ctx.fillText(row.block == null ? `SM ${row.sm} idle` : `SM ${row.sm}`, 2, AXIS + (r + 0.5) * rh);
    });
    this.draws++;
    canvas.dataset.draws = String(this.draws);
    canvas.dataset.span = String(v.t1 - v.t0); // read by the browser tests (zoom, pinch)
  }

  /** What is under canvas point (x, y): the event of that row covering the time, ±2 px. */
  hitTest(x: number, y: number): Hit | null {
    const t = this.trace;
    if (!t || x < GUTTER || y < AXIS) return null;
    const row = this.rows[Math.floor((y - AXIS) / this.rowH())];
    if (!row || row.block == null) return null;
    const pw = this.plotW(), tm = toT(this.view, x - GUTTER, pw), tol = (2 / pw) * (this.view.t1 - this.view.t0);
    let best = -1, bestD = Infinity;
    for (let k = Math.max(0, lowerBound(row.end, tm - tol)); k < row.idx.length && row.start[k] <= tm + tol; k++) {
      const i = row.idx[k], a = t.start[i], b = a + t.dur[i];
      const d = tm < a ? a - tm : tm > b ? tm - b : 0;
      if (d < bestD) { bestD = d; best = i; }
    }
    if (best < 0) return null;
    return { i: best, phase: t.phaseById.get(t.phase[best]), layer: t.layer[best], block: row.block, sm: row.sm, start: t.start[best] - t.t0, dur: t.dur[best] };
  }

  private showTip(cx: number, cy: number): void {
    const r = this.canvas.getBoundingClientRect();
    const hit = this.hitTest(cx - r.left, cy - r.top);
    const tip = this.tip;
    if (!hit) { tip.hidden = true; return; }
    const p = hit.phase;
    const layer = p?.scope === "token" ? "— (once per token)" : String(hit.layer);
    tip.replaceChildren();
    const rows: [string, string][] = [["phase", `${p?.name ?? `#${this.trace!.phase[hit.i]}`} (${p?.kind ?? "?"})`], ["layer", layer],
      ["block", String(hit.block)], ["SM", String(hit.sm)], ["start", fmtNs(hit.start)], ["duration", fmtNs(hit.dur)]];
    for (const [k, val] of rows) { const d = document.createElement("div"); d.innerHTML = `<b></b> `; d.firstChild!.textContent = k; d.append(val); tip.append(d); }
    tip.hidden = false;
    const host = tip.offsetParent?.getBoundingClientRect() ?? { left: 0, top: 0, width: innerWidth };
    const left = Math.min(cx - host.left + 12, host.width - tip.offsetWidth - 4);
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${cy - host.top + 14}px`;
  }

  private bindInput(): void {
    const c = this.canvas;
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      if (Math.abs(e.deltaX) > Math.abs(e.deltaY) || e.shiftKey) { this.pan(-(e.deltaX || e.deltaY)); return; }
      const anchor = toT(this.view, Math.max(0, e.clientX - r.left - GUTTER), this.plotW());
      this.zoom(Math.exp(-e.deltaY * 0.0015), anchor);
    }, { passive: false });
    // Pointer events: one pointer drags (pan), two pinch (zoom about their midpoint); a tap
    // or hover shows the tooltip.
    const pts = new Map<number, { x: number; y: number }>();
    let moved = false, pinchD = 0;
    c.addEventListener("pointerdown", (e) => { c.setPointerCapture(e.pointerId); pts.set(e.pointerId, { x: e.clientX, y: e.clientY }); moved = false; pinchD = 0; });
    c.addEventListener("pointermove", (e) => {
      const prev = pts.get(e.pointerId);
      if (!prev) { if (e.pointerType === "mouse") this.showTip(e.clientX, e.clientY); return; }
      const cur = { x: e.clientX, y: e.clientY };
      if (pts.size === 1) {
        if (Math.abs(cur.x - prev.x) > 0 || Math.abs(cur.y - prev.y) > 0) moved = true;
        this.pan(cur.x - prev.x);
        this.tip.hidden = true;
      } else if (pts.size === 2) {
        pts.set(e.pointerId, cur);
        const [a, b] = [...pts.values()];
        const d = Math.hypot(a.x - b.x, a.y - b.y);
        if (pinchD > 0 && d > 0) {
          const r = c.getBoundingClientRect();
          const anchor = toT(this.view, (a.x + b.x) / 2 - r.left - GUTTER, this.plotW());
          this.zoom(d / pinchD, anchor);
        }
        pinchD = d; moved = true;
      }
      pts.set(e.pointerId, cur);
    });
    const end = (e: PointerEvent) => {
      if (pts.delete(e.pointerId) && !moved && pts.size === 0) this.showTip(e.clientX, e.clientY);
      pinchD = 0;
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", end);
    c.addEventListener("pointerleave", (e) => { if (e.pointerType === "mouse" && !pts.size) this.tip.hidden = true; });
  }
}
