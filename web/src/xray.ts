// The X-ray panel: version switcher (manifest order, bf16-upstream first; opens on the headline's variant), layer zoom, zoom
// buttons, the Gantt, legend, and "open your own trace" (drop, file picker, ?trace=URL).
import { fmt, h } from "./dom";
import { Gantt } from "./gantt";
import type { Manifest, Version } from "./manifest";
import { fetchBytes, fileBytes, HttpError } from "./bounded";
import { parseTraceBytes, type Trace } from "./trace";
import { overheadNote } from "./overhead";

export interface XrayApi { load(name: string, bytes: Uint8Array): Promise<Trace | null>; gantt: Gantt }

interface Entry { id: string; label: string; path: string | null; trace: Trace | null; version: Version | null }

const cache = new Map<string, Promise<Trace>>();

/** One fetch per path, shared by the X-ray and the budget panel. */
export function fetchTrace(path: string): Promise<Trace> {
  let p = cache.get(path);
  if (!p) { p = fetchTraceOnce(path); cache.set(path, p); p.catch(() => cache.delete(path)); }
  return p;
}

async function fetchTraceOnce(path: string): Promise<Trace> {
  // `x.json` first (served precompressed with Content-Encoding by nginx gzip_static), then the
  // raw `x.json.gz`, which parseTraceBytes inflates itself.
  const tries = path.endsWith(".gz") ? [path.slice(0, -3), path] : [path];
  let last: unknown;
  for (const url of tries) {
    try { return await parseTraceBytes(await fetchBytes(url, path), path.split("/").pop() ?? path); }
    catch (e) { if (!(e instanceof HttpError)) throw e; last = e; }
  }
  throw last;
}

export function mountXray(root: HTMLElement, m: Manifest, onTrace: (t: Trace, v: Version | null, label: string) => void): XrayApi {
  const entries: Entry[] = m.versions.map((v) => ({ id: v.id, label: v.label, path: v.trace, trace: null, version: v }));
  const select = h("select", { id: "xray-version", "aria-label": "kernel version" });
  const prev = h("button", { type: "button", id: "xray-prev", title: "previous version", text: "◀" });
  const next = h("button", { type: "button", id: "xray-next", title: "next version", text: "▶" });
  const layer = h("select", { id: "xray-layer", "aria-label": "zoom into layer" });
  const zin = h("button", { type: "button", id: "xray-zoom-in", title: "zoom in", text: "+" });
  const zout = h("button", { type: "button", id: "xray-zoom-out", title: "zoom out", text: "−" });
  const left = h("button", { type: "button", title: "pan left", text: "←" });
  const right = h("button", { type: "button", title: "pan right", text: "→" });
  const reset = h("button", { type: "button", id: "xray-reset", text: "whole token" });
  const info = h("p", { class: "xray-info", id: "xray-info" });
  const legend = h("div", { class: "legend", id: "xray-legend" });
  const canvas = h("canvas", { id: "gantt", role: "img", "aria-label": "SM by time Gantt chart of one token" });
  const tip = h("div", { class: "tip", id: "gantt-tip", role: "tooltip" });
  tip.hidden = true;
  const error = h("p", { class: "error", id: "trace-error", role: "alert" });
  error.hidden = true;
  const file = h("input", { type: "file", id: "trace-file", accept: ".json,.gz,application/json,application/gzip" });
  const drop = h("div", { class: "drop", id: "trace-drop" },
    "Open your own trace: drop a file here or ", h("label", {}, "choose one", file),
    " (", h("a", { href: "#format", text: "format" }), "; gzipped or plain JSON), or add ", h("code", { text: "?trace=URL" }), " to the address.");

  root.replaceChildren(h("h2", { text: "X-ray: one token, every block" }),
    h("div", { class: "controls" }, prev, select, next, h("span", { class: "sep" }), layer, zout, zin, left, right, reset),
    info, h("div", { class: "gantt-wrap" }, canvas, tip), legend, drop, error);
  const gantt = new Gantt(canvas, tip);

  const fill = () => {
    select.replaceChildren(...entries.map((e, i) => h("option", { value: String(i), text: e.label })));
  };
  fill();
  if (!entries.length) info.textContent = "No traces recorded yet: drop one below.";

  const show = (t: Trace, e: Entry) => {
    gantt.setTrace(t);
    layer.replaceChildren(h("option", { value: "", text: "all layers" }), ...t.layers.map((l) => h("option", { value: String(l), text: `layer ${l}` })));
    const idle = t.smCount - new Set(t.blockSm.values()).size;
    info.replaceChildren(h("strong", { text: t.variant }), ` · ${t.gpu} · ${t.blockSm.size} blocks on ${t.smCount} SMs (${idle} idle) · `,
      `traced span ${fmt((t.t1 - t.t0) / 1e3, 4)} µs`, t.tokenTimeUs != null ? ` · token ${fmt(t.tokenTimeUs, 4)} µs (CUDA events)` : "",
      ` · position ${String(t.meta.position)}`);
    if (t.synthetic) info.append(" ", h("span", { class: "tag bad", text: "synthetic trace, not measured" }));
    const ov = overheadNote(t.meta);
    if (ov) info.append(" · ", h("span", { id: "xray-overhead", class: ov.over ? "tag bad" : "", title: ov.title, text: ov.text }));
    // the legend lists the phases this trace records, not the whole phase table
    const used = new Set(t.phase);
    legend.replaceChildren(...t.phases.filter((p) => used.has(p.id)).map((p) => h("span", { class: `key ${p.kind}`, title: `${p.kind}, once per ${p.scope}` },
      h("i", { style: `--c:${p.color}` }), p.name)), h("span", { class: "key idle", title: "an SM that hosts no block" }, h("i", {}), "idle SM"));
    onTrace(t, e.version, e.label);
  };

  const pick = async (i: number) => {
    const e = entries[i];
    if (!e) return;
    select.value = String(i);
    try {
      const t = e.trace ?? (e.path ? await fetchTrace(e.path) : null);
      if (t) show(t, e);   // throws before changing anything if the trace cannot be drawn
      e.trace = t;
      error.hidden = true;
    } catch (err) { error.textContent = String((err as Error).message ?? err); error.hidden = false; }
  };
  select.addEventListener("change", () => void pick(Number(select.value)));
  prev.addEventListener("click", () => void pick((Number(select.value) - 1 + entries.length) % entries.length));
  next.addEventListener("click", () => void pick((Number(select.value) + 1) % entries.length));
  layer.addEventListener("change", () => (layer.value === "" ? gantt.reset() : gantt.zoomLayer(Number(layer.value))));
  zin.addEventListener("click", () => gantt.zoom(2));
  zout.addEventListener("click", () => gantt.zoom(0.5));
  left.addEventListener("click", () => gantt.pan(canvas.clientWidth / 4));
  right.addEventListener("click", () => gantt.pan(-canvas.clientWidth / 4));
  reset.addEventListener("click", () => { layer.value = ""; gantt.reset(); });

  const load = async (name: string, bytes: Uint8Array): Promise<Trace | null> => {
    try {
      const t = await parseTraceBytes(bytes, name);
      error.hidden = true;
      entries.push({ id: `user:${name}`, label: `your trace: ${name}`, path: null, trace: t, version: null });
      fill();
      await pick(entries.length - 1);
      return t;
    } catch (err) {
      error.textContent = `Could not open ${name}: ${String((err as Error).message ?? err)}`;
      error.hidden = false;
      return null;
    }
  };
  const readFile = (f: File) => fileBytes(f).then((b) => load(f.name, b), (err) => {
    error.textContent = `Could not open ${f.name}: ${String((err as Error).message ?? err)}`; error.hidden = false; return null;
  });
  file.addEventListener("change", () => { const f = file.files?.[0]; if (f) void readFile(f); file.value = ""; });
  for (const ev of ["dragenter", "dragover"]) drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault(); drop.classList.remove("over");
    const f = (e as DragEvent).dataTransfer?.files?.[0];
    if (f) void readFile(f);
  });

  // The committed trace first, then ?trace=URL on top of it: a URL that cannot be fetched or
  // whose file is refused leaves the committed trace on screen, with the reason in the error box.
  // (The deployed page's Content-Security-Policy, connect-src 'self', only lets it fetch from its own origin.)
  const url = new URLSearchParams(location.search).get("trace");
  // opens on the headline's variant (manifest default_version), else the first
  const first = entries.length ? pick(Math.max(0, entries.findIndex((e) => e.id === m.default_version))) : Promise.resolve();
  if (url) {
    void first.then(() => fetchBytes(url, url)).then((b) => load(url, b))  // a refused file: load() says why
      .catch((err) => { error.textContent = `Could not open ?trace=${url}: ${String((err as Error).message ?? err)}`; error.hidden = false; });
  }

  return { load, gantt };
}
