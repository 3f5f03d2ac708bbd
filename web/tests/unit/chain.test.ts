import { describe, expect, it } from "vitest";
import { chainTotals, PIECES } from "../../src/chain";
import type { ChainPhase } from "../../src/manifest";

const phase = (name: string, hop: number, open: number, work: number): ChainPhase => ({ phase: name, hop_us: hop, open_us: open, work_us: work });

describe("chain totals", () => {
  it("adds each piece over the phases and the layer over the pieces", () => {
    const rnd = (seed: number) => () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 3;
    const r = rnd(7);
    const ps = ["s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down"].map((n) => phase(n, r(), r(), r()));
    const t = chainTotals(ps);
    for (const k of PIECES) expect(t[k]).toBeCloseTo(ps.reduce((a, p) => a + p[k], 0), 12);
    expect(t.layer).toBeCloseTo(t.hop_us + t.open_us + t.work_us, 12);
  });
  it("draws a slightly negative piece as zero (medians of different layers)", () => {
    const t = chainTotals([phase("s_qkv", 1, -0.03, 2)]);
    expect(t.open_us).toBe(0);
    expect(t.layer).toBe(3);
  });
  it("refuses a value that is not a number", () => {
    expect(() => chainTotals([phase("s_qkv", 1, Number.NaN, 2)])).toThrow(/s_qkv.*open_us/);
    expect(() => chainTotals([{ phase: "s_mlp", hop_us: 1, open_us: 0, work_us: "2" } as unknown as ChainPhase])).toThrow(/work_us/);
  });
});
