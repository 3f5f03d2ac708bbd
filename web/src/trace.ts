// Page trace format "monolith-xray" version 1 (xray/FORMAT.md): parse + validate + columnar
// typed arrays. tests/fixtures/traces/ holds hostile files that this reader and the Python one
// are both tested with (web/tests/unit/hostile.test.ts, tests/test_xray_hostile.py). The rules and their messages mirror xray/export.py's validate_page_trace one for
// one (tests/unit/trace.test.ts checks each), so a file the exporter accepts opens here and a
// file it rejects is rejected here with the same reason.

export const FORMAT = "monolith-xray";
export const VERSION = 1;
// Bounds (FORMAT.md rules 1 and 7-11), the same numbers as xray/raw.py and xray/export.py (a
// Python test reads these lines): the page allocates per SM, per block and per byte, so nothing a
// file says may be unbounded, and ids must fit the typed arrays below (Uint16 for phase and layer).
export const MAX_TRACE_BYTES = 32 * 1024 * 1024;
export const MAX_SM_COUNT = 1024;
export const MAX_BLOCKS = 65536;
export const MAX_ID = 65535;
const TOO_BIG = `larger than ${MAX_TRACE_BYTES} bytes of JSON (the reader's limit)`;
const COLUMNS = ["block", "phase", "layer", "start_ns", "dur_ns"] as const;
const COLOR = /^#[0-9a-fA-F]{6}$/;

export interface Phase { id: number; name: string; kind: "work" | "wait"; scope: "layer" | "token"; color: string }

export interface Trace {
  name: string;                       // where it came from (file name or URL)
  meta: Record<string, unknown>;
  variant: string;
  gpu: string;
  smCount: number;
  tokenTimeUs: number | null;
  synthetic: boolean;
  phases: Phase[];
  phaseById: Map<number, Phase>;
  blockSm: Map<number, number>;       // block -> SM
  summary: Record<string, unknown> | null;
  n: number;
  block: Uint32Array; phase: Uint16Array; layer: Uint16Array; start: Float64Array; dur: Float64Array;
  t0: number; t1: number;             // first start, last end (ns)
  layers: number[];                   // distinct layer values of layer-scope phases, sorted
}

export class TraceError extends Error {}

// An integer: no fractional part and exact in a double (JSON.parse reads 5.0 as 5, and 1e300 as a
// number that is integral but not exact: refused, like the Python reader does).
const isInt = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x);
const isNum = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);
const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
const typeName = (x: unknown) => (x === null ? "NoneType" : Array.isArray(x) ? "list" : isObj(x) ? "dict" : typeof x === "number" ? (Number.isInteger(x) ? "int" : "float") : typeof x === "string" ? "str" : typeof x === "boolean" ? "bool" : typeof x);
const show = (x: unknown) => (x === undefined ? "None" : JSON.stringify(x));

/** Rules 3–11: throws TraceError("<where>: <reason>") or returns the typed trace. */
export function validateTrace(obj: unknown, where = "trace"): Trace {
  const fail = (msg: string): never => { throw new TraceError(`${where}: ${msg}`); };
  if (!isObj(obj)) return fail(`top level must be a JSON object, got ${typeName(obj)}`);
  if (obj.format !== FORMAT) fail(`not a ${FORMAT} trace (format = ${show(obj.format)})`);
  if (!isInt(obj.version)) fail(`version must be an integer, got ${show(obj.version)}`);
  if (obj.version !== VERSION) fail(`unsupported version ${String(obj.version)} (this reader supports ${VERSION})`);
  for (const [key, ok, tname] of [["meta", isObj, "object"], ["phases", Array.isArray, "array"], ["blocks", Array.isArray, "array"], ["events", isObj, "object"]] as const) {
    if (!(key in obj)) fail(`missing field '${key}'`);
    if (!(ok as (x: unknown) => boolean)(obj[key])) fail(`${key} must be an ${tname}, got ${typeName(obj[key])}`);
  }
  const meta = obj.meta as Record<string, unknown>;
  const metaRules: [string, (v: unknown) => boolean, string][] = [
    ["variant", (v) => typeof v === "string" && v !== "", "a non-empty string"],
    ["gpu", (v) => typeof v === "string", "a string"],
    ["sm_count", (v) => isInt(v) && v >= 1 && v <= MAX_SM_COUNT, `an integer in [1, ${MAX_SM_COUNT}]`],
    ["blocks", (v) => isInt(v) && v >= 1 && v <= MAX_BLOCKS, `an integer in [1, ${MAX_BLOCKS}]`],
    ["position", (v) => isInt(v) && v >= 0, "an integer >= 0"],
    ["token_time_us", (v) => v === null || (isNum(v) && v > 0), "a finite number > 0 or null"],
  ];
  for (const [k, ok, want] of metaRules) {
    if (!(k in meta)) fail(`missing field meta.${k}`);
    if (!ok(meta[k])) fail(`meta.${k} must be ${want}, got ${show(meta[k])}`);
  }
  if ("summary" in obj && !isObj(obj.summary)) fail("summary must be an object when present");

  const phasesIn = obj.phases as unknown[];
  if (!phasesIn.length) fail("phases must not be empty");
  const phases: Phase[] = [];
  const ids = new Set<number>(), names = new Set<string>();
  phasesIn.forEach((p, i) => {
    const at = `phases[${i}]`;
    if (!isObj(p)) fail(`${at} must be an object`);
    const q = p as Record<string, unknown>;
    for (const k of ["id", "name", "kind", "scope", "color"]) if (!(k in q)) fail(`missing field ${at}.${k}`);
    if (!isInt(q.id) || q.id < 0 || q.id > MAX_ID) fail(`${at}.id must be an integer in [0, ${MAX_ID}], got ${show(q.id)}`);
    if (ids.has(q.id as number)) fail(`${at}.id ${String(q.id)} is a duplicate phase id`);
    if (typeof q.name !== "string" || !q.name || names.has(q.name)) fail(`${at}.name must be a unique non-empty string, got ${show(q.name)}`);
    if (q.kind !== "work" && q.kind !== "wait") fail(`${at}.kind must be "work" or "wait", got ${show(q.kind)}`);
    if (q.scope !== "layer" && q.scope !== "token") fail(`${at}.scope must be "layer" or "token", got ${show(q.scope)}`);
    if (typeof q.color !== "string" || !COLOR.test(q.color)) fail(`${at}.color must be "#rrggbb", got ${show(q.color)}`);
    ids.add(q.id as number); names.add(q.name as string);
    phases.push({ id: q.id as number, name: q.name as string, kind: q.kind as Phase["kind"], scope: q.scope as Phase["scope"], color: q.color as string });
  });

  const smCount = meta.sm_count as number, nBlocks = meta.blocks as number;
  const blockSm = new Map<number, number>();
  (obj.blocks as unknown[]).forEach((b, i) => {
    const at = `blocks[${i}]`;
    if (!isObj(b)) fail(`${at} must be an object`);
    const q = b as Record<string, unknown>;
    for (const k of ["block", "sm"]) if (!(k in q)) fail(`missing field ${at}.${k}`);
    if (!isInt(q.block) || q.block < 0 || q.block >= nBlocks || blockSm.has(q.block)) fail(`${at}.block must be a unique integer in [0, meta.blocks=${nBlocks}), got ${show(q.block)}`);
    if (!isInt(q.sm) || q.sm < 0 || q.sm >= smCount) fail(`${at}.sm must be an integer in [0, meta.sm_count=${smCount}), got ${show(q.sm)}`);
    blockSm.set(q.block as number, q.sm as number);
  });

  const evs = obj.events as Record<string, unknown>;
  for (const c of COLUMNS) {
    if (!(c in evs)) fail(`missing field events.${c}`);
    if (!Array.isArray(evs[c])) fail(`events.${c} must be an array, got ${typeName(evs[c])}`);
  }
  const col = (c: (typeof COLUMNS)[number]) => evs[c] as unknown[];
  const lens = COLUMNS.map((c) => col(c).length);
  if (new Set(lens).size !== 1) fail(`event columns differ in length: {${COLUMNS.map((c, i) => `'${c}': ${lens[i]}`).join(", ")}}`);
  const n = lens[0];
  if (n === 0) fail("events are empty");
  for (const c of COLUMNS) {
    const a = col(c);
    for (let i = 0; i < n; i++) if (!isInt(a[i])) fail(`events.${c}[${i}] must be an integer, got ${show(a[i])}`);
  }
  const checks: [(typeof COLUMNS)[number], (v: number) => boolean, string][] = [
    ["phase", (v) => ids.has(v), "unknown phase id"], ["block", (v) => blockSm.has(v), "unknown block (not in blocks)"],
    ["layer", (v) => v >= 0 && v <= MAX_ID, `layer outside [0, ${MAX_ID}]`], ["start_ns", (v) => v >= 0, "negative start"], ["dur_ns", (v) => v >= 0, "negative duration"],
  ];
  for (const [c, ok, msg] of checks) {
    const a = col(c) as number[];
    for (let i = 0; i < n; i++) if (!ok(a[i])) fail(`events.${c}[${i}]: ${msg} ${a[i]}`);
  }

  const block = Uint32Array.from(col("block") as number[]);
  const phase = Uint16Array.from(col("phase") as number[]);
  const layer = Uint16Array.from(col("layer") as number[]);
  const start = Float64Array.from(col("start_ns") as number[]);
  const dur = Float64Array.from(col("dur_ns") as number[]);
  let t0 = Infinity, t1 = -Infinity;
  for (let i = 0; i < n; i++) { t0 = Math.min(t0, start[i]); t1 = Math.max(t1, start[i] + dur[i]); }
  const phaseById = new Map(phases.map((p) => [p.id, p]));
  const layerSet = new Set<number>();
  for (let i = 0; i < n; i++) if (phaseById.get(phase[i])?.scope === "layer") layerSet.add(layer[i]);
  return {
    name: where, meta, variant: meta.variant as string, gpu: meta.gpu as string, smCount,
    tokenTimeUs: (meta.token_time_us as number | null) ?? null, synthetic: meta.synthetic === true,
    phases, phaseById, blockSm, summary: isObj(obj.summary) ? obj.summary : null,
    n, block, phase, layer, start, dur, t0, t1: Math.max(t1, t0 + 1), layers: [...layerSet].sort((a, b) => a - b),
  };
}

const TRUNCATED = "truncated gzip (the file ends before the compressed stream does)";

let crcTable: Uint32Array | null = null;
export function crc32(b: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; crcTable[n] = c >>> 0; }
  }
  let c = 0xffffffff;
  for (let i = 0; i < b.length; i++) c = crcTable[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

interface Inflated { out: Uint8Array; failed: "" | "write" | "close" | "limit"; msg: string }

// Compressed bytes handed to the inflater per write. Deflate's largest ratio is about 1032:1, so
// one slice inflates to at most ~17 MB before the reader below sees it and can stop: a file that
// inflates to gigabytes costs the page one slice's output beyond the limit, never the whole file
// (the inflater holds everything one write produces; the size is checked only between writes).
export const INFLATE_SLICE = 16 * 1024;

/** Inflate at most `limit` bytes, feeding the inflater INFLATE_SLICE bytes at a time and reading
 * its output as it comes: as soon as the output crosses `limit` the stream is cancelled and no
 * further slice is written (`failed` = "limit"). */
async function inflate(bytes: Uint8Array, limit = MAX_TRACE_BYTES): Promise<Inflated> {
  const ds = new DecompressionStream("gzip");
  const writer = ds.writable.getWriter(), reader = ds.readable.getReader();
  const parts: Uint8Array[] = [];
  let total = 0, over = false;
  const drain = (async () => {
    for (;;) {
      const r = await reader.read();
      if (r.done) return;
      total += r.value.length;
      if (total > limit) { over = true; parts.length = 0; await reader.cancel(); return; }
      parts.push(r.value);
    }
  })();
  drain.catch(() => {}); // its error is reported through write/close below
  let failed: Inflated["failed"] = "write", msg = "";
  try {
    // The inflater takes a slice only once the reader has emptied its output queue (the
    // TransformStream's backpressure), and the reader's cancel fails the pending write: no slice
    // after the one whose output crossed the limit is inflated.
    for (let i = 0; i < bytes.length && !over; i += INFLATE_SLICE) await writer.write(bytes.subarray(i, i + INFLATE_SLICE) as Uint8Array<ArrayBuffer>);
    if (!over) {
      failed = "close";
      await writer.close();
      await drain;
      failed = "";
    }
  } catch (e) { msg = String((e as Error)?.message ?? e); }
  if (over) { writer.abort().catch(() => {}); await drain.catch(() => {}); return { out: new Uint8Array(0), failed: "limit", msg: "" }; }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((n, p) => (out.set(p, n), n + p.length), 0);
  return { out, failed, msg };
}

const trailerOk = (bytes: Uint8Array, out: Uint8Array) => {
  const dv = new DataView(bytes.buffer, bytes.byteOffset + bytes.length - 8, 8);
  return dv.getUint32(4, true) === out.length >>> 0 && dv.getUint32(0, true) === crc32(out);
};

/** Rule 1: a gzip stream must inflate completely. Browsers' error texts are useless ("Failed
 * to fetch"), so FORMAT.md's two cases are told apart by behaviour: failing while data is
 * written is corrupt gzip; failing only at the end is either a cut-off stream (truncated) or
 * a damaged 8-byte trailer, which is recognised by retrying with a trailer made from the
 * inflated bytes (that retry succeeds only when everything before the trailer was intact).
 * Some inflaters accept a missing trailer, so CRC-32 and length are always checked here. */
export async function gunzip(bytes: Uint8Array, name: string): Promise<Uint8Array> {
  const fail = (m: string): never => { throw new TraceError(`${name}: ${m}`); };
  if (bytes.length < 18) fail(TRUNCATED);
  const r = await inflate(bytes);
  if (r.failed === "limit") fail(`decompressed trace is ${TOO_BIG}`);
  if (r.failed === "" && trailerOk(bytes, r.out)) return r.out;
  // When the inflater says what went wrong (zlib's words), use it.
  if (/unexpected end|truncat/i.test(r.msg)) fail(TRUNCATED);
  if (/data check|crc/i.test(r.msg)) fail("corrupt gzip: CRC check failed");
  if (r.failed === "write" || /invalid|incorrect|unknown|too (many|far)|corrupt/i.test(r.msg)) fail(`corrupt gzip: ${r.msg}`);
  const patched = bytes.slice();
  const dv = new DataView(patched.buffer, patched.length - 8, 8);
  dv.setUint32(0, crc32(r.out), true);
  dv.setUint32(4, r.out.length >>> 0, true);
  const retry = await inflate(patched);
  if (retry.failed === "" && retry.out.length === r.out.length) fail("corrupt gzip: CRC check failed");
  return fail(TRUNCATED);
}

/** Rules 1–2 then 3–11: bytes (gzip by magic number, or plain UTF-8 JSON) -> Trace. */
export async function parseTraceBytes(bytes: Uint8Array, name: string): Promise<Trace> {
  const gz = bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
  // A gzip larger than the limit holds more JSON than the limit (deflate never grows text), so
  // both kinds stop here before anything is inflated or decoded.
  if (bytes.length > MAX_TRACE_BYTES) throw new TraceError(`${name}: ${gz ? "gzip file" : "trace"} is ${TOO_BIG}`);
  const raw = gz ? await gunzip(bytes, name) : bytes;
  let obj: unknown;
  try { obj = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw)); } catch (e) {
    throw new TraceError(`${name}: not JSON: ${(e as Error).message}`);
  }
  return validateTrace(obj, name);
}
