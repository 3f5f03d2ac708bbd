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
# Switcher order: the upstream design first, then the optimisation path (NOTES.md, Facts: FP8, fewer
# barriers, NVFP4), then bf16 with fewer barriers beside them. Titles are the switcher's words.
VARIANT_ORDER = ("bf16-upstream", "fp8-upstream", "fp8-stream", "nvfp4-stream", "bf16-stream")
VARIANT_TITLES = {"bf16-upstream": "1 · bf16, upstream design", "fp8-upstream": "2 · FP8 weights",
                  "fp8-stream": "3 · FP8, fewer barriers", "nvfp4-stream": "4 · NVFP4 weights",
                  "bf16-stream": "beside: bf16, fewer barriers"}
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


def _absent_note(absent) -> str | None:
    """The matrix's engines that have no row in this run, by their labels (bench/final.py `absent`)."""
    if not absent:
        return None
    try:
        from monolith.bench.baselines.registry import spec
    except ImportError:
        spec = None

    def label(e: str) -> str:
        try:
            return spec(e).label if spec else e
        except Exception:  # noqa: BLE001  (an engine this checkout does not know keeps its name)
            return e

    return "Not measured in this run: " + ", ".join(label(e) for e in absent) + "."


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
        if not isinstance(t["t_us"], list) or not all(isinstance(x, int | float) and math.isfinite(x) for x in t["t_us"]):
            raise MonolithError(f"{p}: t_us must be a list of finite numbers")
        # tokens and pieces are null where the engine reports no per-token output (llama-bench)
        n = len(t["t_us"])
        if (t["tokens"] is None) != (t["pieces"] is None) or (t["tokens"] is not None and (len(t["tokens"]) != n or len(t["pieces"]) != n)):
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


# ---------------------------------------------------------------- visitor text


# Strings written for developers (paths, shell instructions, the spec's section numbers, harness
# time caps, Python exception names) never reach the page: every free-text field the manifest
# carries goes through visitor_text(), and tests/test_site_manifest.py + the browser tests check
# the built page for DEV_TEXT.
DEV_TEXT = re.compile(r"/work/|/tmp/|/home/|MISS[I]ON|§\s*\d|time cap|\bs left\b|not found: run|SDIST|\.sh\b|"
                      r"Traceback|ModuleNotFoundError|ImportError|not importable|\bsession\b|`")
VLLM_WHY = ("vLLM cannot run on the GPU machine: it is not installable there (no network access for its wheels "
            "and their pinned PyTorch), so the PyTorch reference in a CUDA graph runs in its lane.")
_REWRITES = (
    # whole reasons the harness writes for engines that did not run, as a visitor should read them
    (re.compile(r"^vllm not importable.*", re.I | re.S), VLLM_WHY),
    (re.compile(r".*time cap.*", re.I | re.S), "not measured: the run reached its time limit before this engine"),
    (re.compile(r".*\.json not found: run .*", re.I | re.S), "not measured in this run"),
)


def visitor_text(s):
    """A harness string as a visitor reads it: known developer reasons rewritten whole; otherwise
    references to the spec dropped, paths cut to their file name, shell instructions and code quotes removed."""
    if not isinstance(s, str):
        return s
    for pat, rep in _REWRITES:
        if pat.match(s.strip()):
            return rep
    s = re.sub(r"\s*\(?MISS[I]ON(\.md)?\s*(§\s*[\d.]+)?\)?", "", s)
    s = re.sub(r"\s*\(?§\s*[\d.]+\)?", "", s)
    s = re.sub(r"(?:/[\w.+-]+){2,}/([\w.+-]+)", r"\1", s)              # absolute paths -> file name
    s = re.sub(r"[;:,]?\s*run [^;.]*(first|then)[^;.]*", "", s)       # "…: run X first"
    s = re.sub(r"\((ModuleNotFoundError|ImportError)[^)]*\)\s*", "", s)
    s = s.replace("`", "")
    s = re.sub(r"\bsession\b", "run", s)
    return re.sub(r"\s{2,}", " ", s).strip(" ;,")


def _visitor(obj):
    if isinstance(obj, str):
        return visitor_text(obj)
    if isinstance(obj, list):
        return [_visitor(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _visitor(v) for k, v in obj.items()}
    return obj


# ---------------------------------------------------------------- the results table


FINAL_FILE = "final.json"
# The matrix's engines (bench/final.py: the five variants, then the baselines), plus the engines
# that could not run here. Without results/final.json, the table takes each of these engines'
# newest row from the results files: the rows come from separate runs and the page says so.
TABLE_ENGINES = ("megakernel-bf16-upstream", "megakernel-fp8-upstream", "megakernel-fp8-stream",
                 "megakernel-nvfp4-stream", "megakernel-bf16-stream", "llamacpp-bf16", "llamacpp-q8_0",
                 "hf-eager", "hf-static", "hf-compile", "reference-graph", "vllm")
QUANT_FORMATS = ("fp8", "nvfp4")
QUALITY_KEYS = ("ppl", "ref_ppl", "ppl_ratio", "agreement", "kl", "positions", "kl_positions", "prompts", "agreement_tokens")
# quality files (eval area) for the fallback: which engine they measured is in their "roles"
QUALITY_FILES = {"fp8": "m3_fp8_quality.json", "nvfp4": "m5_nvfp4_quality.json"}
# Row fields the page shows (the rest of a results row, e.g. per-run lists, stays in results/).
ROW_KEYS = ("engine", "label", "status", "reason", "experimental", "kind", "variant", "gate", "gates", "tok_s",
            "us_per_token", "predicted_us_per_token", "bytes_per_token", "eff_bw_tbs", "tok_per_joule", "energy",
            "sweep", "runs_note", "speed_label", "quality", "timeline")


def _median(r: dict) -> float | None:
    m = (r.get("tok_s") or {}).get("median") if r.get("status") == "ok" else None
    return float(m) if isinstance(m, int | float) and math.isfinite(m) and m > 0 else None


def _kind(engine: str) -> str:
    return "monolith" if engine.startswith(("megakernel-", "monolith-")) else "baseline"


def _variant_of(engine: str) -> str | None:
    return engine.split("-", 1)[1] if _kind(engine) == "monolith" else None


def _format_of(r: dict) -> str | None:
    v = r.get("variant") or _variant_of(r["engine"]) or ""
    return next((f for f in QUANT_FORMATS if v.startswith(f)), None)


def _quality_gates(results_dir: Path, fmt: str, engine: str, impl: dict) -> dict:
    """Both gates of a quantized row without final.json: the row's own gate is the implementation
    gate; the quality gate is the eval area's measurement for the format (its engine named when it
    measured another variant on the same packed weights)."""
    gates = {"implementation": impl}
    p = results_dir / QUALITY_FILES[fmt]
    q = _load_json(p) if p.is_file() else {}
    g, eng = q.get("gates") or {}, q.get("engine") or {}
    if not g:
        gates["quality"] = {"passed": None, "reason": "not measured"}
        return gates
    measured = str((q.get("roles") or {}).get("engine", "")).split(" ")[0]
    fl = g.get("floor") or {}
    gates["quality"] = {
        "passed": g.get("fixed_gates_pass"), "reference": "fp32 on the original bf16 weights",
        "ppl_ratio": g.get("ppl_ratio"), "ppl_limit": g.get("ppl_limit"), "agreement": g.get("agreement"),
        "agreement_min": g.get("agreement_min"), "kl": g.get("kl"), "positions": eng.get("kl_positions"),
        "prompts": eng.get("prompts"), "agree_tokens": eng.get("tokens_per_prompt"),
        "floor": {k: fl.get(k) for k in ("engine", "agreement", "ppl_ratio", "kl")} if fl else None,
        "measured_on": measured if measured and measured != engine else None,
        "file": _rel(p, results_dir.parent)}
    return gates


def _page_row(r: dict, source: dict | None = None) -> dict:
    out = {k: r[k] for k in ROW_KEYS if k in r}
    if isinstance(out.get("quality"), dict):  # the numbers only: a quality record's prose is for developers
        out["quality"] = {k: v for k, v in out["quality"].items() if k in QUALITY_KEYS}
    out.setdefault("kind", _kind(r["engine"]))
    out.setdefault("variant", _variant_of(r["engine"]))
    if source:
        out["source"] = source
    return out


def _headline(rows: list[dict], gpu: str | None) -> dict | None:
    """The headline by bench/final.py's rule (one definition for final.md and the page)."""
    from monolith.bench.final import headline
    return headline(rows, gpu)


def _race_plan(rows: list[dict]) -> list[dict]:
    """The race's lanes by bench/final.py's plan."""
    from monolith.bench.final import race
    return race(rows)


def load_table(results_dir: Path, root: Path) -> dict | None:
    """The page's one results table: results/final.json when it exists (one run, one GPU), else each
    matrix engine's newest row from the results files, every row naming its file and date."""
    final = results_dir / FINAL_FILE
    if final.is_file():
        doc = _load_json(final)
        f = doc.get("final")
        if doc.get("schema") != RESULTS_SCHEMA or not isinstance(f, dict) or not isinstance(doc.get("rows"), list):
            raise MonolithError(f"{final}: not a final matrix ({RESULTS_SCHEMA} with a 'final' object and rows)")
        try:
            from monolith.bench.final import validate_final
        except ImportError:
            validate_final = None
        # a test fixture (flagged, shown as not measured) carries only what the page needs
        if validate_final and not doc.get("fixture") and (problems := validate_final(doc)):
            raise MonolithError(f"{final}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        rows = [_page_row(r) for r in doc["rows"] if isinstance(r, dict) and "engine" in r]
        recorded = f.get("bandwidth") if isinstance(f.get("bandwidth"), dict) else None
        one = {"_file": FINAL_FILE, "started": doc.get("created"), "protocol": doc.get("protocol") or {}}
        bw = run_bandwidth([one], f.get("gpu"), f.get("gpu_uuid"), recorded)
        return {"bandwidth": bw,
                "source": "final", "file": _rel(final, root), "created": doc.get("created"), "gpu": f.get("gpu"),
                "env": doc.get("env") or {}, "weights": _weights_text(doc.get("weights")),
                "synthetic_weights": _is_synthetic_weights(doc.get("weights")), "fixture": bool(doc.get("fixture")),
                "quick": bool(f.get("quick")), "window": f.get("window"), "protocol": doc.get("protocol") or {},
                "rows": rows, "headline": f.get("headline"), "race_plan": f.get("race") or [],
                "note": _absent_note(f.get("absent"))}
    files = sorted(load_results(results_dir, root), key=lambda f: (str(f.get("created") or ""), f["file"]))
    if not files:
        return None
    newest: dict[str, tuple[dict, dict]] = {}
    for f in files:  # oldest first: a newer file's row replaces an older one, an ok row beats any other
        for r in f["rows"]:
            e = r["engine"]
            if e in TABLE_ENGINES and (r.get("status") == "ok" or e not in newest or newest[e][0].get("status") != "ok"):
                newest[e] = (r, f)
    rows, used = [], {}
    for e in TABLE_ENGINES:
        if e not in newest:
            continue
        r, f = newest[e]
        used[f["file"]] = f
        row = _page_row(r, {"file": f["file"], "created": f.get("created"), "gpu": (f.get("env") or {}).get("gpu")})
        if (fmt := _format_of(row)) and row["status"] == "ok":
            g = r.get("gate") or {}
            impl = {"passed": g.get("passed"), "oracle": f"fp32 reference on the {fmt} weights dequantized",
                    "rule": f"margin rule, tolerance {g['tolerance']} logits" if isinstance(g.get("tolerance"), int | float)
                    else "margin rule"}
            row["gates"] = _quality_gates(results_dir, fmt, e, impl)
        rows.append(row)
    gpus = sorted({str(r["source"]["gpu"]) for r in rows if r["source"].get("gpu")})
    dates = sorted({str(r["source"]["created"])[:10] for r in rows if r["source"].get("created")})
    src = files[-1]
    span = f"{dates[0]} to {dates[-1]}" if len(dates) > 1 else (dates[0] if dates else "unknown dates")
    note = (f"The final matrix (every engine measured in one run on one GPU) is not recorded yet. Until it is, each "
            f"row is that engine's newest measurement, from separate runs ({span}) on {', '.join(gpus) or 'one GPU model'}; "
            "each row names its run.")
    bw = run_bandwidth([{"_file": k, "started": f.get("created"), "protocol": f.get("protocol") or {}}
                        for k, f in sorted(used.items())], gpus[0] if len(gpus) == 1 else None) if used else None
    return {"bandwidth": bw,
            "source": "latest", "file": None, "created": max(str(f.get("created") or "") for f in files) or None,
            "gpu": gpus[0] if len(gpus) == 1 else None, "env": src.get("env") or {}, "weights": _weights_text(src.get("weights")),
            "synthetic_weights": _is_synthetic_weights(src.get("weights")), "fixture": any(f["fixture"] for f in files),
            "quick": False, "window": None, "protocol": {}, "rows": rows,
            "headline": _headline(rows, gpus[0] if len(gpus) == 1 else None), "race_plan": _race_plan(rows), "note": note}


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
    # the steps at the trace position first, then the same variants at other positions, generated samples last
    return (variant.startswith("synthetic-"), position != TRACE_POSITION, rank, variant, position)


def _row_for(variant: str, results: list[dict]) -> dict | None:
    """The newest ok row whose engine names this variant (engine == variant or ends with it)."""
    for f in reversed(results):
        for r in f["rows"]:
            if r.get("status") == "ok" and (r["engine"] == variant or r["engine"].endswith(f"-{variant}")
                                            or r["engine"].endswith(f":{variant}")):
                return r
    return None


# bench/bwprobe.py statuses of a value that measures the GPU model its record names
MEASURED_STATUS = ("measured", "reused", "table")


def run_bandwidth(docs: list[dict], gpu: str | None, gpu_uuid: str | None = None,
                  recorded: dict | None = None) -> dict:
    """The bandwidth the shown run's predicted µs/token divided by, as the run recorded it
    (`recorded`: final.json's final.bandwidth; else bench/final.py bandwidth_of over `docs`, each
    {"_file", "started", "protocol"}), with one line saying whose measurement it is. `gpu`: the
    run's GPU. `gpu` in the answer: the GPU model the value measures (None when not recorded)."""
    from monolith.bench import bwprobe, final

    b = recorded or final.bandwidth_of(docs, gpu_uuid)
    this = f"this run's GPU ({gpu})" if gpu else "the run's GPU"
    if not b.get("one_bandwidth"):
        per = "; ".join(f"{f}: {_tbs_text(v.get('tbs'))} ({v.get('status')})"
                        for f, v in (b.get("by_row_file") or {}).items())
        return {"tbs": None, "status": "several", "gpu": None, "run_gpu": gpu,
                "source": f"the rows' predictions used different bandwidths ({per})",
                "note": f"Predicted µs/token: the rows were predicted at different bandwidths ({per}); compare them "
                        "only within one run."}
    tbs, status = b.get("tbs"), b.get("status")
    of = b.get("gpu") if status in MEASURED_STATUS else bwprobe.LEGACY_GPU if status == "legacy" else None
    if tbs is None:
        src = ("the run does not record the bandwidth its predictions divided by" if status == "not recorded"
               else f"no streaming-read bandwidth of {this}: {str(b.get('source') or '').removeprefix('none: ')}")
        return {"tbs": None, "status": status, "gpu": None, "run_gpu": gpu, "source": src,
                "note": f"Predicted µs/token: none ({src})."}
    if status in ("measured", "reused"):
        src = f"{tbs:.3f} TB/s, the streaming read measured on the {of} at the start of the run"
        if gpu and of != gpu:
            src += f", not on {this}"
    elif status == "table":
        hit = bwprobe.MEASURED.get(of)
        src = (f"{tbs:g} TB/s, the committed streaming-read measurement of the {of}"
               + (f" ({hit.file})" if hit else "") + ": the bandwidth probe could not run in this run")
    elif status == "legacy":
        src = f"{tbs:g} TB/s, the value this run recorded: the {of}'s streaming read measured before M0"
        if gpu != of:
            src += f", not a measurement of {this}"
    else:
        src = f"{tbs:g} TB/s, the value this run recorded, with no record of the GPU it measures"
    note = f"Predicted µs/token: bytes per token / {src}."
    if of and gpu and of != gpu:
        note += (" The predicted column prices this GPU's bytes at another GPU's bandwidth; the measured columns"
                 " do not depend on it.")
    return {"tbs": tbs, "status": status, "gpu": of, "run_gpu": gpu, "source": src, "note": note}


def _tbs_text(tbs) -> str:
    return "none" if tbs is None else f"{tbs:g} TB/s"


def roofline_for(trace_gpu: str | None, synthetic: bool, run_bw: dict | None) -> dict:
    """The bandwidth of one trace's roofline mark: the streaming read of the GPU the trace was
    recorded on, never another GPU's. The shown run's own when it measured that GPU model, else
    the committed measurement of that model (bench/bwprobe.py MEASURED), else none and why."""
    from monolith.bench import bwprobe

    if synthetic or not trace_gpu:
        return {"tbs": None, "gpu": None, "source": "a generated trace ran on no GPU, so it has no roofline"}
    run = run_bw or {}
    if run.get("tbs") is not None and run.get("status") in MEASURED_STATUS and run.get("gpu") == trace_gpu:
        return {"tbs": run["tbs"], "gpu": trace_gpu, "source": run["source"]}
    hit = bwprobe.MEASURED.get(trace_gpu)
    if hit is not None:
        return {"tbs": hit.tbs, "gpu": trace_gpu,
                "source": f"{hit.tbs:g} TB/s, the committed streaming-read measurement of the {trace_gpu} ({hit.file})"}
    why = f"no streaming read of the {trace_gpu} is measured in this repository"
    if run.get("tbs") is not None and run.get("gpu") != trace_gpu:
        whose = f"the {run['gpu']}'s" if run.get("gpu") else "of no recorded GPU"
        why += f" (the run's recorded {run['tbs']:g} TB/s is {whose}, not this GPU's)"
    return {"tbs": None, "gpu": trace_gpu, "source": why}


RACE_TOKENS = 256  # the protocol's tokens per prompt: a lane built from a rate alone gets this many
LANE_TITLES = {"monolith": "monolith (fastest)", "llamacpp": "llama.cpp", "hf": "HF transformers",
               "reference-graph": "PyTorch reference, CUDA graph"}


def _uniform_timeline(plan: dict, table: dict) -> dict:
    """A lane for an engine that reports totals only (llama-bench): tokens at its median rate."""
    rate = float(plan["tok_s"])
    return {"engine": plan["engine"], "label": plan.get("label") or plan["engine"], "gpu": table.get("gpu"),
            "weights": None, "tokens": None, "pieces": None, "fixture": table["fixture"],
            "t_us": [round((i + 1) * 1e6 / rate, 3) for i in range(RACE_TOKENS)],
            "method": "uniform at the engine's median rate (llama-bench reports per-run totals, not per-token times)"}


def build_race(table: dict | None, timelines: list[dict]) -> tuple[list[dict], list[dict], str | None]:
    """The race's lanes (bench/final.py's plan: monolith's best, llama.cpp, HF, the CUDA-graph
    reference), then the other monolith variants (`extra`: behind the page's toggle). Each lane
    carries its replayed rate and the table's, so the page can say why they differ."""
    if not table:
        return [], [], None
    by_engine = {t["engine"]: t for t in timelines}
    rows = {r["engine"]: r for r in table["rows"]}
    lanes, used = [], []

    def add(engine: str, lane: str, tl: dict, plan: dict | None):
        row = rows.get(engine, {})
        n, end = len(tl["t_us"]), (tl["t_us"][-1] if tl["t_us"] else 0)
        lanes.append({"engine": engine, "lane": lane, "title": LANE_TITLES.get(lane, "monolith variant"),
                      "label": (plan or {}).get("label") or row.get("label") or tl.get("label") or engine,
                      "file": f"data/timelines/{engine}.json", "gpu": tl.get("gpu") or table.get("gpu"),
                      "weights": _weights_text(tl.get("weights")) or table.get("weights"),
                      "synthetic_weights": _is_synthetic_weights(tl.get("weights")) or bool(table.get("synthetic_weights")),
                      "fixture": bool(tl.get("fixture") or table["fixture"]), "extra": lane == "variant",
                      "experimental": bool(row.get("experimental")), "speed_label": row.get("speed_label"),
                      "race_tok_s": n / end * 1e6 if end > 0 else None, "table_tok_s": _median(row) if row else None,
                      "text": tl.get("pieces") is not None, "method": tl.get("method")})
        used.append({**tl, "engine": engine})

    plan = table.get("race_plan") or []
    for p in plan:
        tl = by_engine.get(p["engine"])
        if tl is None and p["lane"] == "llamacpp" and p.get("tok_s"):
            tl = _uniform_timeline(p, table)
        if tl is not None:
            add(p["engine"], p["lane"], tl, p)
    main = {p["engine"] for p in plan}
    for r in table["rows"]:
        if r.get("kind") == "monolith" and r["engine"] not in main and _median(r) and r["engine"] in by_engine:
            add(r["engine"], "variant", by_engine[r["engine"]], None)
    off = [x for x in lanes if x["race_tok_s"] and x["table_tok_s"] and abs(x["race_tok_s"] / x["table_tok_s"] - 1) > 0.02]
    note = None
    if off:  # the visitor's words; the timelines' own method strings stay in their files
        note = ("The lanes replay per-token times recorded around single-token calls, and each call adds its launch "
                "and synchronisation to its token; the results table times whole decode loops. So a lane replays "
                "slower than its engine's table rate: each lane shows both, and the table's is the benchmark.")
    return lanes, used, note



def _quality_explanation(results_dir: Path) -> str | None:
    from monolith.quant import margins  # torch-heavy module: imported when the page is built only

    return margins.paragraph(results_dir)


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
        title = VARIANT_TITLES.get(variant)
        label = (f"{title} ({variant})" if title else variant) + ("" if pos == TRACE_POSITION else f" @ position {pos:,}")
        versions.append({
            "id": trace_slug(variant, pos), "label": label + (" (synthetic)" if synthetic and "synthetic" not in variant else ""),
            "trace": _rel(path, page_root), "trace_bytes": path.stat().st_size, "synthetic": synthetic,
            "experimental": bool(row and row.get("experimental")), "gpu": meta.get("gpu"),
            "weights": _weights_text(meta.get("weights")), "bytes_per_token": bpt, "bytes_source": src,
            "token_time_us": meta.get("token_time_us"),
            "created": meta.get("created") if isinstance(meta.get("created"), str) else None,
        })
    table = load_table(results_dir, root)
    # the shown run's bandwidth; each trace's roofline is its own GPU's (roofline_for)
    run_bw = (table or {}).get("bandwidth")
    for v in versions:
        v["roofline"] = _visitor(roofline_for(v["gpu"], v["synthetic"], run_bw))
    race, race_timelines, race_note = build_race(table, timelines)
    fixture = bool(table and table["fixture"]) or any(t.get("fixture") for t in race_timelines)
    notes = []
    if any(v["synthetic"] for v in versions):
        notes.append("Traces marked synthetic were generated by a model of the kernel's schedule, not recorded on a GPU.")
    if not table and not race:
        notes.append("No benchmark results are recorded yet: the race and the results table are empty until GPU runs land.")
    # A synthetic sample's date is a placeholder, not a measurement: it counts only when nothing
    # measured carries a date (else it would stamp real data with a made-up, later date).
    stamps = [f["created"] for f in results if f.get("created")] + [v["created"] for v in versions
                                                                  if v.get("created") and not v["synthetic"]]
    if table and table.get("created"):
        stamps.append(table["created"])
    stamps = stamps or [v["created"] for v in versions if v.get("created")]
    head = (table or {}).get("headline")
    head_variant = _variant_of(head["engine"]) if head else None
    default = next((v["id"] for v in versions if head_variant and v["id"] == trace_slug(head_variant, TRACE_POSITION)),
                   versions[0]["id"] if versions else None)
    if table:
        table = {k: v for k, v in table.items() if k not in ("race_plan", "bandwidth")}
        if head:  # the baseline's label, for the headline's one line
            b = next((r for r in table["rows"] if r["engine"] == head.get("best_baseline")), None)
            table["headline"] = {**head, "best_baseline_label": (b or {}).get("label") or head.get("best_baseline"),
                                 "variant": head_variant}
    manifest = {
        "schema": SCHEMA,
        # newest input's date, not now(): re-exporting unchanged inputs gives an unchanged file
        "created": max(stamps) if stamps else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fixture": fixture, "bandwidth": _visitor(run_bw), "versions": versions, "default_version": default,
        "headline": table["headline"] if table else None, "table": _visitor(table), "race": _visitor(race),
        "race_note": race_note, "race_absent": [] if any(r["engine"] == "vllm" and _median(r) for r in (table or {}).get("rows", []))
        else [{"engine": "vllm", "label": "vLLM", "why": VLLM_WHY}],
        "tour": extract_tour(kernel_dir, root), "notes": notes,
        "chains": load_chains(results_dir / "chain", root),
        # the methodology's quality paragraph: the same text final.md prints (quant/margins.py)
        "quality_explanation": _quality_explanation(results_dir),
    }
    return manifest, race_timelines


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
        t = {**t, **{k: visitor_text(t[k]) for k in ("label", "method") if k in t}}
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
          f"{len((m['table'] or {}).get('rows', []))} result rows, "
          f"{sum(not e['missing'] for e in m['tour'])}/{len(m['tour'])} tour excerpts")


if __name__ == "__main__":
    main()
