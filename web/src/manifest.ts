// Types of web/public/data/manifest.json, written by xray/site.py (schema "monolith-site/1").
// The page shows only what these files say: every number on it comes from here or a trace.

export interface Bandwidth { tbs: number; source: string }

export interface Version {
  id: string;                 // kernel variant, e.g. "bf16-upstream"
  label: string;
  trace: string;              // path relative to the page, e.g. "traces/bf16-upstream.json.gz"
  trace_bytes: number;        // gzipped size on disk
  synthetic: boolean;         // trace generated, not recorded on a GPU
  experimental: boolean;
  gpu: string | null;
  weights: string | null;
  bytes_per_token: number | null;
  bytes_source: string | null;
  token_time_us: number | null;
}

export interface RaceEntry {
  engine: string;
  label: string;
  file: string;               // "data/timelines/<engine>.json"
  gpu: string | null;
  weights: string | null;
  synthetic_weights: boolean;
  fixture: boolean;           // test fixture, not a measurement
}

export interface Stat { median: number; min: number; max: number; runs?: number[] }

/** The correctness gate of one row (monolith/results.py; only `passed` is always there). */
export interface Gate {
  passed: boolean | null;
  reasons?: string[];
  tolerance?: number;         // logits: a divergence is allowed where the oracle's top-2 margin is below it
  prompts?: number;
  tokens_per_prompt?: number;
  divergences?: number;
  divergences_disallowed?: number;
  oracle?: { engine?: string; [k: string]: unknown };
  [k: string]: unknown;
}

/** One sweep point, keyed by its starting position as a string ("16", "128", …). */
export interface SweepPoint { status: string; reason?: string | null; tok_s?: Stat | null; us_per_token?: number | null; [k: string]: unknown }
export type Sweep = Record<string, SweepPoint>;

export interface ResultRow {
  engine: string;
  label: string;
  status: "ok" | "not run" | "failed";
  reason?: string | null;
  experimental?: boolean;
  gate?: Gate | null;
  tok_s?: Stat | null;
  us_per_token?: Stat | null;
  sweep?: Sweep | null;
  reduced?: string | null;    // why a run used fewer prompts than the protocol
  control_ok?: boolean;       // negative controls only: true when the gate failed, as it must
  expected?: string;
  from_earlier_run?: string;
  predicted_us_per_token?: number | null;
  bytes_per_token?: number | null;
  eff_bw_tbs?: number | null;
  tok_per_joule?: number | null;
  quality?: { ppl?: number | null; agreement?: number | null; kl?: number | null } | null;
}

export interface ResultFile {
  file: string;
  created: string | null;
  env: Record<string, unknown>;
  weights: Record<string, unknown> | string | null;
  protocol: Record<string, unknown>;
  fixture: boolean;
  rows: ResultRow[];
}

export interface TourEntry {
  id: string;
  title: string;
  why: string;
  file: string | null;
  line_start: number | null;
  line_end: number | null;
  code: string | null;
  missing: boolean;
  note: string | null;
}

/** One phase of a layer's chain (bench/chainmodel.py): µs from the previous phase's end, in three pieces. */
export interface ChainPhase { phase: string; hop_us: number; open_us: number; work_us: number }

/** One variant's chain at one position: as its X-ray measured it, and the probes' floor (results/chain/). */
export interface Chain {
  variant: string;
  position: number;
  blocks: number;
  file: string;
  measured: ChainPhase[];
  floor: ChainPhase[];
  measured_token_us: number;  // layer 0 + 27 mean layers + LM head, from the trace
  traced_token_us: number;    // the traced launch (CUDA events)
  floor_token_us: number;
}

export interface Manifest {
  schema: string;
  created: string;
  fixture: boolean;
  bandwidth: Bandwidth | null;
  versions: Version[];
  race: RaceEntry[];
  results: ResultFile[];
  tour: TourEntry[];
  notes: string[];
  chains?: Chain[];           // absent in manifests written before the twenty-eighth session
}

export interface Timeline {
  engine: string;
  label: string;
  gpu?: string;
  weights?: unknown;
  prompt?: string;
  prompt_tokens?: number;
  method?: string;            // how t_us was timed (per-call events: not the headline numbers)
  tokens: number[];
  pieces: string[];
  t_us: number[];
}

/** Fetch JSON that may be gzipped. Tries `x.json` first (nginx gzip_static / our vite plugin
 * serve `x.json.gz` with Content-Encoding, the browser inflates), then `x.json.gz` itself,
 * which we inflate here when the server sent the raw gzip bytes. */
export async function fetchJson(path: string): Promise<unknown> {
  const candidates = path.endsWith(".gz") ? [path.slice(0, -3), path] : [path];
  let lastErr = "";
  for (const url of candidates) {
    let res: Response;
    try { res = await fetch(url); } catch (e) { lastErr = `${url}: ${String(e)}`; continue; }
    if (!res.ok) { lastErr = `${url}: HTTP ${res.status}`; continue; }
    let body: ArrayBuffer;  // a body that breaks off rejects with a bare "Failed to fetch": name the file
    try { body = await res.arrayBuffer(); } catch (e) { throw new Error(`${url}: the download broke off (${String((e as Error)?.message ?? e)})`); }
    return parseBytes(new Uint8Array(body), url);
  }
  throw new Error(`could not load ${path} (${lastErr})`);
}

/** Bytes -> JSON value; gzip is recognised by its magic number, not by the name. */
export async function parseBytes(bytes: Uint8Array, name: string): Promise<unknown> {
  let text: string;
  if (bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) {
    try {
      const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new DecompressionStream("gzip"));
      text = await new Response(stream).text();
    } catch (e) {
      throw new Error(`${name}: looks gzipped but does not decompress (${String(e)})`);
    }
  } else {
    text = new TextDecoder().decode(bytes);
  }
  try { return JSON.parse(text); } catch (e) {
    throw new Error(`${name}: not valid JSON (${(e as Error).message})`);
  }
}
