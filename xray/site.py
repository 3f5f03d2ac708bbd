"""Build the demo page's data: web/public/data/manifest.json (+ data/timelines/*.json).

Inputs are only committed files: results/*.json (schema monolith-results/1),
results/timelines/<engine>.json (race streams) and web/public/traces/*.json.gz (page traces,
xray/FORMAT.md), plus code-tour excerpts cut from kernel sources between
`// tour:begin NAME` and `// tour:end NAME`. The page never hard-codes a number: anything it
shows is in the manifest or in a file the manifest names. `monolith export` calls
`build_site_data()`; `python -m monolith.xray.site` does the same by hand.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

from monolith import REPO_ROOT
from monolith.config import QWEN3_0_6B, ModelShape
from monolith.errors import MonolithError

SCHEMA = "monolith-site/1"
RESULTS_SCHEMA = "monolith-results/1"
# Switcher order: the upstream design first, then the optimisation path (NOTES.md, Facts: FP8, fewer barriers, NVFP4).
VARIANT_ORDER = ("bf16-upstream", "fp8", "fp8-sync", "nvfp4")
# Tour entries in page order: (marker name, title, why it matters, required). A required entry
# whose markers are missing is still listed, saying so (NOTES.md, Facts: the page's tour names the dequant inner
# loop and the counter wait); the others appear only when the kernel has their markers.
TOUR = (
    ("gemv", "The GEMV inner loop",
     "Every load of several rows is issued before the first FMA: the bytes in flight per SM are what reach the roofline.", False),
    ("dequant", "The dequant inner loop",
     "8 fp8 (e4m3) weights become fp32 FMAs in registers through the hardware cvt: no dequantized copy ever "
     "touches memory. probes/cvt.cu checks it for all 256 codes; fp8-upstream and fp8-stream run it in every "
     "GEMV and the LM head (16 codes per 16-byte load).", True),
    ("flagwait", "The flag wait",
     "The second query head of a KV pair waits only for the block that wrote its K/V, not for the whole grid.", False),
    ("counter-wait", "The counter wait",
     "Every wait in the kernel (grid barrier, K/V flag, attention-done counter) is this acquire spin, bounded "
     "by clock64: past its budget it records which wait failed and every block leaves, so the host reports an "
     "error instead of a hung GPU.", True),
    ("grid-barrier", "The grid barrier",
     "One release-add per block and an acquire spin: paid several times per layer, it is most of what FP8 saves.", False),
    ("xray-stamp", "The X-ray stamp",
     "Lane 0 of warp 0 writes start/end stamps per phase; without -DMONOLITH_XRAY it compiles to nothing.", False),
)
TOUR_MAX_LINES = 60
_BEGIN = re.compile(r"//\s*tour:begin\s+([\w.-]+)")
_END = re.compile(r"//\s*tour:end\s+([\w.-]+)")
KERNEL_GLOBS = ("*.cu", "*.cuh", "*.h", "*.cpp")


# ---------------------------------------------------------------- byte model


def bytes_per_token(variant: str, position: int, shape: ModelShape = QWEN3_0_6B) -> tuple[int, str] | None:
    """Bytes one decode step reads at `position`, from the harness's byte model
    (monolith.bench.bytemodel) when it has the variant's scheme; otherwise a local estimate:
    fp8 = 1 B/weight + one fp32 scale per row, nvfp4 = 4.5 bits/weight in the layers + fp8 LM head."""
    from monolith.bench.bytemodel import ByteModel, kv_bytes_per_position

    base = variant.removeprefix("synthetic-")
    scheme = next((k for k in ("bf16", "fp8", "nvfp4") if base.startswith(k)), None)
    if scheme is None:
        return None
    if hasattr(ByteModel, scheme):
        return int(getattr(ByteModel, scheme)(shape).bytes_per_token(position)), f"byte model ({scheme}), position {position}"
    mats = [s for s in shape.layer_weight_shapes().values() if len(s) == 2]
    w, rows = sum(r * c for r, c in mats), sum(r for r, _ in mats)
    layer = w + rows * 4 if scheme == "fp8" else w * 9 // 16
    head = shape.vocab * shape.hidden + shape.vocab * 4
    total = shape.num_layers * layer + head + position * kv_bytes_per_position(shape)
    return int(total), f"site.py estimate ({scheme}, weights only + KV), position {position}"


# ---------------------------------------------------------------- inputs


def _load_json(path: Path) -> dict:
    from monolith import jsonio

    return jsonio.load_object(path)


def _weights_text(w) -> str | None:
    """One line for the page: the checkpoint, and for packed weights their scheme after it
    (an fp8 variant's weights are the synthetic checkpoint packed: `monolith pack`)."""
    if w is None:
        return None
    if isinstance(w, str):
        return w
    kind = w.get("kind", "?")
    if kind == "synthetic":
        return f"synthetic (seed {w.get('seed', '?')})"
    src = w.get("source")
    if isinstance(src, dict) and src.get("kind"):
        return f"{_weights_text(src)}, {w.get('scheme') or kind}"
    return f"{kind} {w.get('name', '')}".strip()


def _is_synthetic_weights(w) -> bool:
    if isinstance(w, dict) and isinstance(w.get("source"), dict):
        return _is_synthetic_weights(w["source"])
    return (isinstance(w, dict) and w.get("kind") == "synthetic") or (isinstance(w, str) and "synth" in w.lower())


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def load_results(results_dir: Path, root: Path) -> list[dict]:
    out = []
    for p in sorted(results_dir.glob("*.json")):
        obj = _load_json(p)
        if obj.get("schema") != RESULTS_SCHEMA:
            continue  # other committed JSON (probe dumps, ...) is not a results table
        rows = obj.get("rows")
        if not isinstance(rows, list):
            raise MonolithError(f"{p}: 'rows' must be a list")
        for i, r in enumerate(rows):
            if not isinstance(r, dict) or "engine" not in r or r.get("status") not in ("ok", "not run", "failed"):
                raise MonolithError(f"{p}: rows[{i}] needs 'engine' and status ok|not run|failed")
        out.append({"file": _rel(p, root), "created": obj.get("created"), "env": obj.get("env") or {},
                    "weights": obj.get("weights"), "protocol": obj.get("protocol") or {},
                    "fixture": bool(obj.get("fixture")), "rows": rows})
    return out


def load_timelines(tl_dir: Path) -> list[dict]:
    out = []
    for p in sorted(tl_dir.glob("*.json")) if tl_dir.is_dir() else []:
        t = _load_json(p)
        for k in ("engine", "tokens", "pieces", "t_us"):
            if k not in t:
                raise MonolithError(f"{p}: timeline needs {k!r}")
        n = len(t["tokens"])
        if len(t["pieces"]) != n or len(t["t_us"]) != n:
            raise MonolithError(f"{p}: tokens, pieces and t_us differ in length")
        if any(b < a for a, b in zip(t["t_us"], t["t_us"][1:], strict=False)):
            raise MonolithError(f"{p}: t_us must be cumulative (non-decreasing)")
        out.append(t)
    return out


CHAIN_KEYS = ("hop_us", "open_us", "work_us")


def _chain_phases(d: dict, key: str) -> list[dict]:
    rows = [{"phase": str(x["phase"]), **{k: float(x[k]) for k in CHAIN_KEYS}} for x in d[key]["phases"]]
    if not rows or any(not math.isfinite(r[k]) for r in rows for k in CHAIN_KEYS):
        raise ValueError(f"{key}: no phases, or a value that is not a finite number")
    return rows


def load_chains(chain_dir: Path, root: Path) -> list[dict]:
    """results/chain/<variant>.json (bench/chainmodel.py --json): one layer's chain as its X-ray measured
    it and the probes' floor, cut to what the page draws (per phase: hop, opening, work, µs)."""
    out = []
    for p in sorted(chain_dir.glob("*.json")) if chain_dir.is_dir() else []:
        d = _load_json(p)
        try:
            out.append({"variant": str(d["variant"]), "position": int(d["position"]), "blocks": int(d["blocks"]),
                        "file": _rel(p, root), "measured": _chain_phases(d, "measured"), "floor": _chain_phases(d, "floor"),
                        "measured_token_us": float(d["measured"]["token_mean_us"]),
                        "traced_token_us": float(d["measured"]["trace_token_us"]),
                        "floor_token_us": float(d["floor"]["token_us"])})
        except (KeyError, TypeError, ValueError) as e:
            raise MonolithError(f"{p}: not a chain model from bench/chainmodel.py ({type(e).__name__}: {e})") from e
    return sorted(out, key=lambda c: _variant_rank(c["variant"], c["position"]))


def load_traces(traces_dir: Path) -> list[tuple[Path, dict]]:
    from monolith.xray.export import read_page  # the xray area's validator: FORMAT.md's rules

    return [(p, read_page(p)) for p in sorted(traces_dir.glob("*.json.gz"))]


# ---------------------------------------------------------------- tour


def extract_tour(kernel_dir: Path, root: Path) -> list[dict]:
    found: dict[str, dict] = {}
    files = sorted({f for g in KERNEL_GLOBS for f in kernel_dir.glob(g)}) if kernel_dir.is_dir() else []
    for f in files:
        lines = f.read_text(errors="replace").splitlines()
        open_at: dict[str, int] = {}
        for n, line in enumerate(lines, 1):
            if m := _BEGIN.search(line):
                open_at[m[1]] = n
            elif (m := _END.search(line)) and m[1] in open_at:
                a = open_at.pop(m[1])
                body = lines[a:n - 1]
                note = None
                if len(body) > TOUR_MAX_LINES:
                    note = f"first {TOUR_MAX_LINES} of {len(body)} lines"
                    body = body[:TOUR_MAX_LINES]
                found.setdefault(m[1], {"file": _rel(f, root), "line_start": a + 1, "line_end": a + len(body),
                                        "code": textwrap.dedent("\n".join(body)).strip("\n"), "note": note})
    entries = []
    for name, title, why, required in TOUR:
        hit = found.pop(name, None)
        if hit:
            entries.append({"id": name, "title": title, "why": why, "missing": False, **hit})
        elif required:
            entries.append({"id": name, "title": title, "why": why, "missing": True, "file": None, "line_start": None,
                            "line_end": None, "code": None,
                            "note": f"Not in the kernel yet: no `// tour:begin {name}` … `// tour:end {name}` markers in kernel/."})
    for name, hit in sorted(found.items()):  # markers the list does not know: shown after the known ones
        entries.append({"id": name, "title": name, "why": "", "missing": False, **hit})
    return entries


# ---------------------------------------------------------------- manifest


# The position every variant's page trace is recorded at (`monolith xray --position`'s default). A
# trace at another position (e.g. the wide-attention kernel's, which runs only from 1,024 on) is a
# version of its own: id and file name carry "-p<position>", its label says the position, and its
# byte budget comes from the model at that position, not from the results row (positions 1-256).
TRACE_POSITION = 128


def trace_slug(variant: str, position: int) -> str:
    """The page trace's id and file stem: the variant, plus -p<position> away from TRACE_POSITION."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", variant)
    return slug if position == TRACE_POSITION else f"{slug}-p{position}"


def _variant_rank(variant: str, position: int = TRACE_POSITION) -> tuple:
    base = variant.removeprefix("synthetic-")
    rank = VARIANT_ORDER.index(base) if base in VARIANT_ORDER else len(VARIANT_ORDER)
    return (rank, variant.startswith("synthetic-"), variant, position)


def _row_for(variant: str, results: list[dict]) -> dict | None:
    """The newest ok row whose engine names this variant (engine == variant or ends with it)."""
    for f in reversed(results):
        for r in f["rows"]:
            if r.get("status") == "ok" and (r["engine"] == variant or r["engine"].endswith(f"-{variant}")
                                            or r["engine"].endswith(f":{variant}")):
                return r
    return None


def _bandwidth(root: Path) -> dict:
    """The harness's choice (results/m0_probes.json when the probes wrote it, else NOTES.md, Facts)."""
    from monolith.bench.bytemodel import load_bw_tbs

    tbs, source = load_bw_tbs(root)
    return {"tbs": float(tbs), "source": source}


def build_manifest(root: Path, results_dir: Path, traces_dir: Path, kernel_dir: Path, page_root: Path) -> tuple[dict, list[dict]]:
    results = load_results(results_dir, root)
    timelines = load_timelines(results_dir / "timelines")
    versions = []
    def rank(x):
        return _variant_rank(x[1]["meta"]["variant"], int(x[1]["meta"]["position"]))

    for path, page in sorted(load_traces(traces_dir), key=rank):
        meta = page["meta"]
        variant, synthetic, pos = meta["variant"], bool(meta.get("synthetic")), int(meta["position"])
        row = _row_for(variant, results)
        bpt, src = None, None
        if pos == TRACE_POSITION and row and row.get("bytes_per_token"):  # the row's bytes: positions 1-256
            bpt, src = row["bytes_per_token"], "results row"
        if bpt is None and (model := bytes_per_token(variant, pos)):
            bpt, src = model
        label = variant + ("" if pos == TRACE_POSITION else f" @ position {pos:,}")
        versions.append({
            "id": trace_slug(variant, pos), "label": label + (" (synthetic)" if synthetic and "synthetic" not in variant else ""),
            "trace": _rel(path, page_root), "trace_bytes": path.stat().st_size, "synthetic": synthetic,
            "experimental": bool(row and row.get("experimental")), "gpu": meta.get("gpu"),
            "weights": _weights_text(meta.get("weights")), "bytes_per_token": bpt, "bytes_source": src,
            "token_time_us": meta.get("token_time_us"),
            "created": meta.get("created") if isinstance(meta.get("created"), str) else None,
        })
    fixture = any(f["fixture"] for f in results) or any(t.get("fixture") for t in timelines)

    def speed(t):
        return len(t["t_us"]) / t["t_us"][-1] if t["t_us"] and t["t_us"][-1] > 0 else 0.0

    race = [{"engine": t["engine"], "label": t.get("label") or t["engine"], "file": f"data/timelines/{t['engine']}.json",
             "gpu": t.get("gpu"), "weights": _weights_text(t.get("weights")),
             "synthetic_weights": _is_synthetic_weights(t.get("weights")), "fixture": bool(t.get("fixture"))}
            for t in sorted(timelines, key=speed, reverse=True)]
    notes = []
    if any(v["synthetic"] for v in versions):
        notes.append("Traces marked synthetic were generated by a model of the kernel's schedule, not recorded on a GPU.")
    if not results and not timelines:
        notes.append("No benchmark results are recorded yet: the race and the results table are empty until GPU runs land.")
    # A synthetic sample's date is a placeholder, not a measurement: it counts only when nothing
    # measured carries a date (else it would stamp real data with a made-up, later date).
    stamps = [f["created"] for f in results if f.get("created")] + [v["created"] for v in versions
                                                                  if v.get("created") and not v["synthetic"]]
    stamps = stamps or [v["created"] for v in versions if v.get("created")]
    manifest = {
        "schema": SCHEMA,
        # newest input's date, not now(): re-exporting unchanged inputs gives an unchanged file
        "created": max(stamps) if stamps else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fixture": fixture, "bandwidth": _bandwidth(root), "versions": versions, "race": race,
        "results": results, "tour": extract_tour(kernel_dir, root), "notes": notes,
        "chains": load_chains(results_dir / "chain", root),
    }
    return manifest, timelines


def build_site_data(root: Path | str | None = None, *, results_dir: Path | str | None = None,
                    traces_dir: Path | str | None = None, kernel_dir: Path | str | None = None,
                    out_dir: Path | str | None = None) -> dict:
    """Write <out_dir>/manifest.json and <out_dir>/timelines/*.json; return the manifest.
    Defaults: results/, web/public/traces/, kernel/ and web/public/data/ under `root` (the repo)."""
    root = Path(root) if root else REPO_ROOT
    results_dir = Path(results_dir) if results_dir else root / "results"
    traces_dir = Path(traces_dir) if traces_dir else root / "web" / "public" / "traces"
    kernel_dir = Path(kernel_dir) if kernel_dir else root / "kernel"
    out_dir = Path(out_dir) if out_dir else root / "web" / "public" / "data"
    manifest, timelines = build_manifest(root, results_dir, traces_dir, kernel_dir, traces_dir.parent)
    tl_out = out_dir / "timelines"
    tl_out.mkdir(parents=True, exist_ok=True)
    keep = set()
    for t in timelines:
        name = f"{t['engine']}.json"
        if not re.fullmatch(r"[\w.+-]+\.json", name):
            raise MonolithError(f"timeline engine name {t['engine']!r} is not a safe file name")
        keep.add(name)
        (tl_out / name).write_text(json.dumps(t, ensure_ascii=False, separators=(",", ":")) + "\n")
    for stale in tl_out.glob("*.json"):
        if stale.name not in keep:
            stale.unlink()
    (out_dir / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=None, help="results dir (default <root>/results)")
    ap.add_argument("--traces", type=Path, default=None, help="page traces dir (default <root>/web/public/traces)")
    ap.add_argument("--kernel", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="output data dir (default <root>/web/public/data)")
    a = ap.parse_args(argv)
    try:
        m = build_site_data(a.root, results_dir=a.results, traces_dir=a.traces, kernel_dir=a.kernel, out_dir=a.out)
    except MonolithError as e:  # one line, exit 2, like the monolith command
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"manifest: {len(m['versions'])} versions, {len(m['race'])} race streams, "
          f"{sum(len(f['rows']) for f in m['results'])} result rows, "
          f"{sum(not e['missing'] for e in m['tour'])}/{len(m['tour'])} tour excerpts")


if __name__ == "__main__":
    main()
