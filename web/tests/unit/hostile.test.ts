// The hostile trace files in tests/fixtures/traces/ (repository root), read by the page's reader.
// tests/test_xray_hostile.py reads the same files with the Python reader: both must refuse each
// file with the message cases.json gives, and open the files that must open.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { buildRows } from "../../src/gantt";
import { MAX_TRACE_BYTES, parseTraceBytes, TraceError } from "../../src/trace";

const FIX = new URL("../../../tests/fixtures/traces/", import.meta.url);
interface Cases {
  limit_bytes: number;
  reject: { file: string; error: string }[];
  accept: { file: string; n: number; layers: number[]; span_ns: number }[];
}
const cases = JSON.parse(readFileSync(new URL("cases.json", FIX), "utf8")) as Cases;
const read = (f: string) => new Uint8Array(readFileSync(new URL(f, FIX)));

describe("hostile trace files (shared with the Python reader)", () => {
  for (const c of cases.reject) {
    it(`refuses ${c.file}`, async () => {
      const err = await parseTraceBytes(read(c.file), c.file).then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(TraceError);
      const msg = (err as Error).message, want = `${c.file}: ${c.error}`;
      if (c.error.endsWith(":")) expect(msg.startsWith(want)).toBe(true);
      else expect(msg).toBe(want);
    });
  }
  for (const c of cases.accept) {
    it(`opens ${c.file}`, async () => {
      const t = await parseTraceBytes(read(c.file), c.file);
      expect(t.n).toBe(c.n);
      expect(t.layers).toEqual(c.layers);
      expect(t.t1 - t.t0).toBe(Math.max(c.span_ns, 1)); // a zero-length trace still has a 1 ns window to draw
      expect(buildRows(t).length).toBe(t.smCount);
    });
  }
  it("uses the same byte limit", () => expect(cases.limit_bytes).toBe(MAX_TRACE_BYTES));
  it("refuses plain JSON past the limit before decoding it", async () => {
    const big = new Uint8Array(MAX_TRACE_BYTES + 1).fill(32);
    await expect(parseTraceBytes(big, "big.json")).rejects.toThrow(`big.json: trace is larger than ${MAX_TRACE_BYTES} bytes`);
  });
});
