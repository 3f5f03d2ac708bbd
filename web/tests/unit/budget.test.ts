import { describe, expect, it } from "vitest";
import { budgetOf, categoryOf, fractions, rooflineNs } from "../../src/budget";
import { validateTrace } from "../../src/trace";
import { tinyTrace } from "./helpers";

describe("budget split", () => {
  it("categorises phases by kind, scope and name", () => {
    const c = (name: string, kind: "work" | "wait", scope: "layer" | "token") => categoryOf({ id: 0, name, kind, scope, color: "#000000" });
    expect(c("bar_qkv", "wait", "layer")).toBe("barrier");
    expect(c("flag_kv", "wait", "layer")).toBe("barrier");
    expect(c("lmhead", "work", "token")).toBe("lmhead");
    expect(c("argmax", "work", "token")).toBe("lmhead");
    expect(c("attn", "work", "layer")).toBe("attention");
    expect(c("prefetch", "work", "layer")).toBe("attention");
    expect(c("gateup", "work", "layer")).toBe("weights");
    expect(c("qkv", "work", "layer")).toBe("weights");
    expect(c("kv_append", "work", "layer")).toBe("attention");
  });
  it("averages per block and puts the unrecorded rest in 'other'", () => {
    const b = budgetOf(validateTrace(tinyTrace()));
    expect(b.spanNs).toBe(1000);
    expect(b.activeBlocks).toBe(2);
    expect(b.parts.weights).toBe(350);   // (400 + 300) / 2
    expect(b.parts.barrier).toBe(150);   // (100 + 200) / 2
    expect(b.parts.attention).toBe(100); // 200 / 2
    expect(b.parts.lmhead).toBe(350);    // (300 + 400) / 2
    expect(b.parts.other).toBe(50);      // block 1 idles 900-1000
    const sum = Object.values(b.parts).reduce((a, x) => a + x, 0);
    expect(sum).toBeCloseTo(b.spanNs, 9);
    expect(fractions(b, 2000).weights).toBeCloseTo(0.175, 9);
  });
  it("roofline = bytes / bandwidth", () => {
    expect(rooflineNs(1.19e9, 4.53)).toBeCloseTo(262_693, 0); // NOTES.md, Facts: ≈263 µs for bf16
    expect(rooflineNs(0, 4.53)).toBeNaN();
    expect(rooflineNs(1e9, 0)).toBeNaN();
  });
});
