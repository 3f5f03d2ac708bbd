import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { buildRows } from "../../src/gantt";
import { crc32, parseTraceBytes, validateTrace } from "../../src/trace";
import { tinyTrace } from "./helpers";

const enc = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));
const bad = (mut: (t: Record<string, any>) => void) => { const t = tinyTrace(); mut(t); return t; };

describe("trace validation (FORMAT.md rules 3-11, same messages as xray/export.py)", () => {
  it("accepts a valid trace and builds typed columns", () => {
    const t = validateTrace(tinyTrace());
    expect(t.n).toBe(7);
    expect(t.t0).toBe(0);
    expect(t.t1).toBe(1000);
    expect(t.layers).toEqual([0]); // lmhead is token-scoped
    expect(t.blockSm.get(0)).toBe(2);
  });
  const cases: [string, unknown, string][] = [
    ["rule 3", [1, 2], "trace: top level must be a JSON object, got list"],
    ["rule 4", bad((t) => (t.format = "x")), 'trace: not a monolith-xray trace (format = "x")'],
    ["rule 5a", bad((t) => (t.version = "1")), 'trace: version must be an integer, got "1"'],
    ["rule 5b", bad((t) => (t.version = 2)), "trace: unsupported version 2 (this reader supports 1)"],
    ["rule 6a", bad((t) => delete t.blocks), "trace: missing field 'blocks'"],
    ["rule 6b", bad((t) => (t.events = [])), "trace: events must be an object, got list"],
    ["rule 7a", bad((t) => delete t.meta.gpu), "trace: missing field meta.gpu"],
    ["rule 7b", bad((t) => (t.meta.sm_count = 0)), "trace: meta.sm_count must be an integer in [1, 1024], got 0"],
    ["rule 7c", bad((t) => (t.meta.token_time_us = -1)), "trace: meta.token_time_us must be a finite number > 0 or null, got -1"],
    ["rule 7d", bad((t) => (t.summary = 3)), "trace: summary must be an object when present"],
    ["rule 8a", bad((t) => (t.phases = [])), "trace: phases must not be empty"],
    ["rule 8b", bad((t) => (t.phases[1].id = 0)), "trace: phases[1].id 0 is a duplicate phase id"],
    ["rule 8c", bad((t) => (t.phases[0].kind = "busy")), 'trace: phases[0].kind must be "work" or "wait", got "busy"'],
    ["rule 8d", bad((t) => (t.phases[0].color = "red")), 'trace: phases[0].color must be "#rrggbb", got "red"'],
    ["rule 8e", bad((t) => delete t.phases[2].scope), "trace: missing field phases[2].scope"],
    ["rule 9a", bad((t) => (t.blocks[1].block = 0)), "trace: blocks[1].block must be a unique integer in [0, meta.blocks=2), got 0"],
    ["rule 9b", bad((t) => (t.blocks[0].sm = 4)), "trace: blocks[0].sm must be an integer in [0, meta.sm_count=4), got 4"],
    ["rule 10a", bad((t) => delete t.events.dur_ns), "trace: missing field events.dur_ns"],
    ["rule 10b", bad((t) => t.events.layer.pop()), "trace: event columns differ in length: {'block': 7, 'phase': 7, 'layer': 6, 'start_ns': 7, 'dur_ns': 7}"],
    ["rule 10c", bad((t) => { for (const k of Object.keys(t.events)) t.events[k] = []; }), "trace: events are empty"],
    ["rule 10d", bad((t) => (t.events.start_ns[2] = 1.5)), "trace: events.start_ns[2] must be an integer, got 1.5"],
    ["rule 10e", bad((t) => (t.events.block[0] = true)), "trace: events.block[0] must be an integer, got true"],
    ["rule 11a", bad((t) => (t.events.phase[3] = 9)), "trace: events.phase[3]: unknown phase id 9"],
    ["rule 11b", bad((t) => (t.events.block[1] = 5)), "trace: events.block[1]: unknown block (not in blocks) 5"],
    ["rule 11c", bad((t) => (t.events.dur_ns[6] = -3)), "trace: events.dur_ns[6]: negative duration -3"],
  ];
  for (const [name, obj, msg] of cases) it(name, () => expect(() => validateTrace(obj)).toThrow(msg));
  it("checks columns in rule-11 order (phase before duration)", () => {
    const t = bad((x) => { x.events.dur_ns[0] = -1; x.events.phase[5] = 77; });
    expect(() => validateTrace(t)).toThrow("events.phase[5]: unknown phase id 77");
  });
});

describe("trace bytes (rules 1-2)", () => {
  it("reads plain and gzipped JSON", async () => {
    expect((await parseTraceBytes(enc(tinyTrace()), "a.json")).n).toBe(7);
    expect((await parseTraceBytes(gzipSync(enc(tinyTrace())), "a.json.gz")).n).toBe(7);
  });
  it("names truncated and corrupt gzip and bad JSON", async () => {
    const gz = gzipSync(enc({ ...tinyTrace(), pad: "y".repeat(20000).split("").map((_, i) => i % 97) }));
    await expect(parseTraceBytes(gz.subarray(0, gz.length >> 1), "cut.gz")).rejects.toThrow("cut.gz: truncated gzip");
    await expect(parseTraceBytes(gz.subarray(0, gz.length - 3), "tail.gz")).rejects.toThrow("tail.gz: truncated gzip");
    const c = Buffer.from(gz); c[c.length - 6] ^= 0xff; // CRC byte
    await expect(parseTraceBytes(c, "crc.gz")).rejects.toThrow("crc.gz: corrupt gzip");
    await expect(parseTraceBytes(new TextEncoder().encode("{nope"), "x.json")).rejects.toThrow("x.json: not JSON:");
    await expect(parseTraceBytes(new Uint8Array(), "empty.json")).rejects.toThrow("empty.json: not JSON:");
  });
  it("crc32 matches zlib's", () => {
    expect(crc32(new TextEncoder().encode("123456789"))).toBe(0xcbf43926);
  });
  it("opens the committed synthetic sample", async () => {
    const t = await parseTraceBytes(readFileSync(new URL("../../public/traces/sample-synthetic.json.gz", import.meta.url)), "sample");
    expect(t.smCount).toBeGreaterThan(0);
    const rows = buildRows(t);
    expect(rows.length).toBe(t.smCount);            // one row per block; idle SMs get one row each
    expect(rows.filter((r) => r.block == null).length).toBe(t.smCount - new Set(t.blockSm.values()).size);
    for (const r of rows) for (let k = 1; k < r.start.length; k++) expect(r.start[k]).toBeGreaterThanOrEqual(r.start[k - 1]);
  });
});
