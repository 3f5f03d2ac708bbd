// Types of web/public/data/manifest.json, written by xray/site.py (schema "monolith-site/1").
// The page shows only what these files say: every number on it comes from here or a trace.

/** The bandwidth the shown run's predicted µs/token divided by, as the run recorded it (xray/site.py
 * run_bandwidth): `gpu` is the GPU model the value measures, `run_gpu` the run's; `note` is the
 * table's sentence about its predicted column. */
export interface Bandwidth {
  tbs: number | null;
  status: string;
  gpu: string | null;
  run_gpu: string | null;
  source: string;
  note: string;
}

/** One trace's roofline bandwidth: the streaming read of the GPU it was recorded on (xray/site.py
 * roofline_for); `source` says where `tbs` comes from, or why there is none. */
export interface Roofline { tbs: number | null; gpu: string | null; source: string }

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
  roofline?: Roofline;        // absent in a manifest older than per-trace rooflines: no mark
}

/** One lane of the race (xray/site.py build_race): a timeline file and the rates to show beside it. */
export interface RaceEntry {
  engine: string;
  lane: "monolith" | "llamacpp" | "hf" | "reference-graph" | "variant";
  title: string;              // the lane's family, e.g. "llama.cpp"
  label: string;              // the engine as the table names it
  file: string;               // "data/timelines/<engine>.json"
  gpu: string | null;
  weights: string | null;
  synthetic_weights: boolean;
  fixture: boolean;           // test fixture, not a measurement
  extra: boolean;             // another monolith variant: shown with the toggle
  experimental: boolean;
  speed_label: string | null; // e.g. "ungated: not bitwise deterministic"
  race_tok_s: number | null;  // tokens / last timestamp of the replayed timeline
  table_tok_s: number | null; // the results table's median for this engine
  text: boolean;              // the timeline has token text (llama-bench reports none)
  method?: string | null;
}

export interface RaceAbsent { engine: string; label: string; why: string }

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

/** Both gates of a quantized row (notes/CONTRACTS.md, the final matrix). */
export interface Gates {
  implementation: { passed: boolean | null; oracle?: string; rule?: string };
  quality: {
    passed: boolean | null; reason?: string; reference?: string; ppl_ratio?: number | null; ppl_limit?: number | null;
    agreement?: number | null; agreement_min?: number | null; kl?: number | null; prompts?: number | null;
    agree_tokens?: number | null; positions?: number | null; measured_on?: string | null; file?: string;
    floor?: { engine?: string; agreement?: number | null; ppl_ratio?: number | null; kl?: number | null } | null;
  };
}

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
  quality?: { ppl?: number | null; ppl_ratio?: number | null; agreement?: number | null; kl?: number | null } | null;
  kind?: "monolith" | "baseline";
  variant?: string | null;
  gates?: Gates | null;
  speed_label?: string | null;
  runs_note?: string | null;
  source?: { file: string; created: string | null; gpu: string | null };  // without final.json: the row's run
}

/** The headline: the fastest gated monolith row against the fastest baseline, on one GPU. */
export interface Headline {
  engine: string; label: string | null; variant: string | null; tok_s: number; gpu: string | null;
  best_baseline: string | null; best_baseline_label: string | null; best_baseline_tok_s: number | null; speedup: number | null;
}

/** The page's one results table: results/final.json, or each engine's newest row until it exists. */
export interface Table {
  source: "final" | "latest";
  file: string | null;
  created: string | null;
  gpu: string | null;
  env: Record<string, unknown>;
  weights: string | null;
  synthetic_weights: boolean;
  fixture: boolean;
  quick: boolean;
  window: { start: string; end: string; span_s: number } | null;
  protocol: Record<string, unknown>;
  rows: ResultRow[];
  headline: Headline | null;
  note: string | null;        // why the rows come from separate runs (no final.json yet)
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
  default_version: string | null;  // the headline's variant: the X-ray opens on it
  headline: Headline | null;
  table: Table | null;
  race: RaceEntry[];
  race_note: string | null;        // why replayed rates differ from the table's, when they do
  race_absent: RaceAbsent[];       // engines that cannot run on the GPU machine, with the reason
  tour: TourEntry[];
  notes: string[];
  chains?: Chain[];           // absent in manifests written before the twenty-eighth session
  quality_explanation?: string | null;  // why the quality gate fails on synthetic weights (final.md's words)
}

export interface Timeline {
  engine: string;
  label: string;
  gpu?: string;
  weights?: unknown;
  prompt?: string;
  prompt_tokens?: number;
  method?: string;            // how t_us was timed (per-call events: not the headline numbers)
  tokens: number[] | null;    // null: the engine reports no per-token output (llama-bench)
  pieces: string[] | null;
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
