// Reading a trace's bytes from a URL or a local file with a size bound (MAX_TRACE_BYTES). The
// bound is checked before anything is read where the size is known (Content-Length, File.size)
// and while reading where it is not: a response with Content-Encoding: gzip is inflated by the
// browser's network stack, which knows no limit, so its body is read in the pieces the stream
// delivers and the request is aborted as soon as the count crosses the bound. Every error is a
// TraceError that starts with the file's name.
import { MAX_TRACE_BYTES, TraceError } from "./trace";

const why = (e: unknown) => String((e as Error)?.message ?? e);

/** The server answered with an error status (a caller may try another URL). */
export class HttpError extends TraceError {}

/** At most `limit` bytes of `url`'s body; TraceError("<name>: <reason>") otherwise. */
export async function fetchBytes(url: string, name: string, limit = MAX_TRACE_BYTES): Promise<Uint8Array> {
  const fail = (m: string): never => { throw new TraceError(`${name}: ${m}`); };
  const from = name === url ? "" : ` from ${url}`;
  const ctl = new AbortController();
  let res: Response;
  try { res = await fetch(url, { signal: ctl.signal }); } catch (e) {
    // The browser says only "Failed to fetch" (TypeError): refused connection, a blocked origin
    // (connect-src), a broken response. The name and the URL are what the reader can act on.
    return fail(`could not be fetched${from} (${why(e)})`);
  }
  if (!res.ok) { ctl.abort(); throw new HttpError(`${name}: could not be fetched${from} (HTTP ${res.status})`); }
  const encoding = res.headers.get("content-encoding");
  const declared = Number(res.headers.get("content-length") ?? NaN);
  // With Content-Encoding the length is the encoded size, a lower bound worth refusing early too.
  if (declared > limit) { ctl.abort(); return fail(`the server sends ${declared} bytes, larger than ${limit} bytes (the reader's limit)`); }
  if (!res.body) return fail(`the response${from} has no body`);
  const over = encoding
    ? `inflated by the browser (Content-Encoding: ${encoding}) to more than ${limit} bytes (the reader's limit)`
    : `larger than ${limit} bytes (the reader's limit)`;
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    let r: ReadableStreamReadResult<Uint8Array>;
    try { r = await reader.read(); } catch (e) { return fail(`the download${from} broke off (${why(e)})`); }
    if (r.done) break;
    total += r.value.length;
    if (total > limit) { ctl.abort(); parts.length = 0; reader.cancel().catch(() => {}); return fail(over); }
    parts.push(r.value);
  }
  const out = new Uint8Array(total);
  parts.reduce((n, p) => (out.set(p, n), n + p.length), 0);
  return out;
}

/** A picked or dropped file's bytes, refused by its size before it is read. */
export async function fileBytes(f: File, limit = MAX_TRACE_BYTES): Promise<Uint8Array> {
  if (f.size > limit) throw new TraceError(`${f.name}: file is ${f.size} bytes, larger than ${limit} bytes (the reader's limit)`);
  try { return new Uint8Array(await f.arrayBuffer()); } catch (e) {
    throw new TraceError(`${f.name}: could not be read (${why(e)})`);
  }
}
