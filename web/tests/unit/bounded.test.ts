// src/bounded.ts: a trace's bytes from a URL or a file, bounded before and while reading, every
// error naming the file (issue 44: high item 4 and the "Failed to fetch" low item).
import { afterEach, describe, expect, it, vi } from "vitest";
import { fetchBytes, fileBytes, HttpError } from "../../src/bounded";
import { TraceError } from "../../src/trace";

/** A body of `pieces` chunks of `size` bytes (endless when pieces is Infinity); counts the pulls. */
function body(size: number, pieces: number) {
  const seen = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(c) { if (seen.pulled++ >= pieces) c.close(); else c.enqueue(new Uint8Array(size).fill(32)); },
    cancel() { seen.cancelled = true; },
  }, { highWaterMark: 0 });
  return { stream, seen };
}

const stubFetch = (res: Response | Error) => {
  const calls: { url: string; signal: AbortSignal }[] = [];
  vi.stubGlobal("fetch", async (url: string, init: RequestInit) => {
    calls.push({ url, signal: init.signal! });
    if (res instanceof Error) throw res;
    return res;
  });
  return calls;
};
afterEach(() => vi.unstubAllGlobals());

describe("fetchBytes", () => {
  it("returns a body within the limit", async () => {
    const { stream } = body(1000, 3);
    stubFetch(new Response(stream));
    expect((await fetchBytes("t/x.json", "x.json", 5000)).length).toBe(3000);
  });
  it("stops reading and aborts the request once the body crosses the limit", async () => {
    const { stream, seen } = body(1000, Infinity);
    const calls = stubFetch(new Response(stream));
    await expect(fetchBytes("t/x.json", "x.json", 5000)).rejects.toThrow("x.json: larger than 5000 bytes (the reader's limit)");
    expect(seen.pulled).toBeLessThanOrEqual(7);
    expect(calls[0].signal.aborted).toBe(true);
  });
  it("says when the browser inflated it (Content-Encoding)", async () => {
    const { stream } = body(1000, Infinity);
    stubFetch(new Response(stream, { headers: { "Content-Encoding": "gzip" } }));
    await expect(fetchBytes("x.json", "x.json", 5000)).rejects.toThrow("x.json: inflated by the browser (Content-Encoding: gzip) to more than 5000 bytes");
  });
  it("refuses a Content-Length over the limit before reading", async () => {
    const { stream, seen } = body(1000, 3);
    stubFetch(new Response(stream, { headers: { "Content-Length": "3000" } }));
    await expect(fetchBytes("x.json", "x.json", 2999)).rejects.toThrow("x.json: the server sends 3000 bytes, larger than 2999 bytes");
    expect(seen.pulled).toBe(0);
  });
  it("names the file on a network error, an HTTP error and a broken body", async () => {
    stubFetch(new TypeError("Failed to fetch"));
    await expect(fetchBytes("t/x.json", "x.json")).rejects.toThrow("x.json: could not be fetched from t/x.json (Failed to fetch)");
    stubFetch(new Response("", { status: 404 }));
    const e = await fetchBytes("x.json", "x.json").catch((err: unknown) => err);
    expect(e).toBeInstanceOf(HttpError);
    expect(String(e)).toContain("x.json: could not be fetched (HTTP 404)");
    stubFetch(new Response(new ReadableStream({ pull(c) { c.error(new TypeError("network error")); } })));
    await expect(fetchBytes("x.json", "x.json")).rejects.toThrow("x.json: the download broke off (network error)");
  });
});

describe("fileBytes", () => {
  it("refuses a file by its size without reading it", async () => {
    const f = new File([new Uint8Array(10)], "big.json.gz");
    const read = vi.spyOn(f, "arrayBuffer");
    const e = await fileBytes(f, 9).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(TraceError);
    expect(String(e)).toContain("big.json.gz: file is 10 bytes, larger than 9 bytes");
    expect(read).not.toHaveBeenCalled();
    expect((await fileBytes(f, 10)).length).toBe(10);
  });
});

describe("parseTraceBytes", () => {
  it("refuses a gzip file larger than the limit before inflating it", async () => {
    const { MAX_TRACE_BYTES, parseTraceBytes } = await import("../../src/trace");
    const gz = new Uint8Array(MAX_TRACE_BYTES + 1);
    gz.set([0x1f, 0x8b, 8]);
    await expect(parseTraceBytes(gz, "big.json.gz")).rejects.toThrow(`big.json.gz: gzip file is larger than ${MAX_TRACE_BYTES} bytes`);
  });
});
