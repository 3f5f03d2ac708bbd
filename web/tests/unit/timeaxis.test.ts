import { describe, expect, it } from "vitest";
import { clampView, fmtNs, lowerBound, MIN_SPAN_NS, panBy, ticks, toT, toX, zoomAt } from "../../src/timeaxis";

describe("time axis", () => {
  const v = { t0: 1000, t1: 3000 };
  it("maps time to pixels and back", () => {
    expect(toX(v, 2000, 400)).toBe(200);
    expect(toT(v, 100, 400)).toBe(1500);
    for (const t of [1000, 1234.5, 3000]) expect(toT(v, toX(v, t, 777), 777)).toBeCloseTo(t, 9);
  });
  it("zooms about the anchor, which stays under the same pixel", () => {
    const z = zoomAt(v, 1500, 2, 0, 10_000);
    expect(z).toEqual({ t0: 1250, t1: 2250 });
    expect(toX(z, 1500, 400)).toBeCloseTo(toX(v, 1500, 400), 9);
  });
  it("clamps to the trace and to the minimum span", () => {
    expect(zoomAt(v, 2000, 0.01, 0, 5000)).toEqual({ t0: 0, t1: 5000 });
    const tiny = zoomAt(v, 2000, 1e9, 0, 5000);
    expect(tiny.t1 - tiny.t0).toBe(MIN_SPAN_NS);
    expect(clampView({ t0: -500, t1: 500 }, 0, 5000)).toEqual({ t0: 0, t1: 1000 });
    expect(clampView({ t0: 4800, t1: 5800 }, 0, 5000)).toEqual({ t0: 4000, t1: 5000 });
  });
  it("pans by pixels without changing the span", () => {
    const p = panBy(v, 100, 400, 0, 10_000); // content right = earlier times
    expect(p).toEqual({ t0: 500, t1: 2500 });
    expect(panBy(v, 10_000, 400, 0, 10_000)).toEqual({ t0: 0, t1: 2000 });
  });
  it("ticks at 1-2-5 steps inside the window", () => {
    const t = ticks({ t0: 0, t1: 500_000 }, 8);
    expect(t.step).toBe(100_000);
    expect(t.values).toEqual([0, 100_000, 200_000, 300_000, 400_000, 500_000]);
    const u = ticks({ t0: 1234, t1: 1334 }, 5);
    expect(u.step).toBe(20);
    expect(u.values[0]).toBe(1240);
    expect(ticks({ t0: 5, t1: 5 }).values).toEqual([]);
  });
  it("formats durations", () => {
    expect(fmtNs(850)).toBe("850 ns");
    expect(fmtNs(12_400)).toBe("12.4 µs");
    expect(fmtNs(1_250_000)).toBe("1.25 ms");
    expect(fmtNs(0)).toBe("0 ns");
  });
  it("binary searches", () => {
    const a = [1, 3, 3, 7];
    expect([0, 1, 2, 3, 7, 8].map((x) => lowerBound(a, x))).toEqual([0, 0, 1, 1, 3, 4]);
  });
});
