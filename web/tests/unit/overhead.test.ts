import { describe, expect, it } from "vitest";
import { overheadNote } from "../../src/overhead";

describe("X-ray overhead note", () => {
  it("gives the worst position and flags a trace above the limit", () => {
    const ok = overheadNote({ xray_overhead: { pct: { "16": 0.4, "1024": 1.2, "2048": -0.3 }, limit_pct: 3 } });
    expect(ok).not.toBeNull();
    expect(ok!.over).toBe(false);
    expect(ok!.text).toBe("X-ray overhead ≤ 1.2 % of plain tok/s");
    expect(ok!.title).toContain("16: 0.4 %, 1024: 1.2 %, 2048: -0.3 %");
    const bad = overheadNote({ xray_overhead: { pct: { "2048": 17.9, "16": 11, "128": 2.5 }, limit_pct: 3 } });
    expect(bad!.over).toBe(true);
    expect(bad!.text).toContain("above 3 % at position 16, 2048 (worst 17.9 %)");
  });
  it("says nothing for traces without a usable measurement", () => {
    expect(overheadNote({})).toBeNull();
    expect(overheadNote({ xray_overhead: null })).toBeNull();
    expect(overheadNote({ xray_overhead: { pct: [] } })).toBeNull();
    expect(overheadNote({ xray_overhead: { pct: { "16": "1.0", "128": null } } })).toBeNull();
    // a missing or bad limit is the bar's 3 %
    expect(overheadNote({ xray_overhead: { pct: { "16": 3.5 }, limit_pct: "x" } })!.over).toBe(true);
  });
});
