import { describe, expect, it } from "vitest";
import { checkTimeline, readyAt, SPEEDS } from "../../src/race";

describe("race timelines", () => {
  it("accept a lane without token text (llama-bench: tokens and pieces null)", () => {
    const t = checkTimeline({ engine: "llamacpp-q8_0", label: "x", tokens: null, pieces: null, t_us: [1, 2, 3] }, "l.json");
    expect(readyAt(t.t_us, 2.5)).toBe(2);
  });
  it("refuse half a text, mismatched lengths and time running backwards", () => {
    expect(() => checkTimeline({ tokens: [1], pieces: null, t_us: [1] }, "a.json")).toThrow(/a.json: tokens and pieces must both/);
    expect(() => checkTimeline({ tokens: [1, 2], pieces: ["a"], t_us: [1, 2] }, "b.json")).toThrow(/differ in length/);
    expect(() => checkTimeline({ tokens: null, pieces: null, t_us: [2, 1] }, "c.json")).toThrow(/non-decreasing/);
    expect(() => checkTimeline({ tokens: null, pieces: null }, "d.json")).toThrow(/"t_us" must be an array/);
  });
  it("default to a labelled slowed speed (real time is over in a fraction of a second)", () => {
    const [value, label] = SPEEDS[0];
    expect(Number(value)).toBeLessThan(1);
    expect(label).toMatch(/^slowed \d+×$/);
    expect(SPEEDS.some(([v, l]) => v === "1" && l === "real time")).toBe(true);
  });
});
