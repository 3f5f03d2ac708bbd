"""Results files: results/<name>.json (schema monolith-results/1, notes/CONTRACTS.md) and a
Markdown table beside it. Written by the harness only, never by hand."""
from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

SCHEMA = "monolith-results/1"


def new_doc(env: dict, weights: dict, protocol: dict) -> dict:
    return {"schema": SCHEMA, "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "env": env, "weights": weights, "protocol": protocol, "rows": []}


def base_row(engine: str, label: str, experimental: bool = False) -> dict:
    """Every key of the contract's row, so readers never meet a missing field."""
    return {"engine": engine, "label": label, "status": "not run", "reason": None, "experimental": experimental,
            "gate": None, "tok_s": None, "us_per_token": None, "predicted_us_per_token": None,
            "bytes_per_token": None, "eff_bw_tbs": None, "tok_per_joule": None, "sweep": None, "quality": None}


def merge_rows(doc: dict, old: dict) -> dict:
    """Keep rows of `old` whose engine this run did not measure (for split GPU sessions)."""
    have = {r["engine"] for r in doc["rows"]}
    kept = [r for r in old.get("rows", []) if r["engine"] not in have]
    for r in kept:
        r.setdefault("from_earlier_run", old.get("created"))
    doc["rows"] = kept + doc["rows"]
    return doc


def _clean(o):
    # JSON has no NaN/inf; write null rather than invalid JSON.
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


def write(doc: dict, path: str | Path) -> tuple[Path, Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(doc), indent=1) + "\n")
    md = path.with_suffix(".md")
    md.write_text(render_md(doc))
    return path, md


def _f(x, fmt="{:,.1f}", dash="–"):
    return dash if x is None else fmt.format(x)


def _gate(row: dict) -> str:
    g = row.get("gate")
    if not g:
        return "–"
    if g.get("passed") is None:
        return "n/a"
    s = "pass" if g["passed"] else "FAIL"
    if "divergences" in g:
        s += f" ({g['divergences']} div, {g.get('prompts')}×{g.get('tokens_per_prompt')})"
    return s


def render_md(doc: dict) -> str:
    env, w, proto = doc.get("env", {}), doc.get("weights", {}), doc.get("protocol", {})
    lines = [f"# {proto.get('title', 'monolith results')}", ""]
    if not proto.get("headline", True):
        lines += ["> **Not headline numbers** (quick/smoke protocol).", ""]
    lines += [
        f"Written by the harness on {doc.get('created')}. GPU: {env.get('gpu')} · driver {env.get('driver')} · "
        f"CUDA {env.get('cuda')} · torch {env.get('torch')} · SM {env.get('sm_clock_mhz')} MHz · "
        f"mem {env.get('mem_clock_mhz')} MHz · power limit {env.get('power_limit_w')} W · "
        f"{env.get('temperature_c')} °C.",
        f"Weights: {w.get('kind')} ({_weights_desc(w)}).",
        "",
        "| engine | status | gate | tok/s median | min–max | µs/token | predicted µs | MB/token | eff. TB/s | tok/J | notes |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc.get("rows", []):
        ts, us = r.get("tok_s") or {}, r.get("us_per_token") or {}
        control = ""
        if "control_ok" in r:
            control = "negative control: failed as it must" if r["control_ok"] else "NEGATIVE CONTROL PASSED"
        notes = "; ".join(x for x in [control, r.get("reason") or "", r.get("reduced") or "",
                                      "experimental" if r.get("experimental") else ""] if x)
        span = f"{_f(ts.get('min'))}–{_f(ts.get('max'))}" if ts else "–"
        lines.append(
            f"| {r.get('label') or r['engine']} | {r.get('status')} | {_gate(r)} | {_f(ts.get('median'))} | "
            f"{span} | {_f(us.get('median'))} | {_f(r.get('predicted_us_per_token'))} | "
            f"{_f(r['bytes_per_token'] / 1e6 if r.get('bytes_per_token') else None)} | "
            f"{_f(r.get('eff_bw_tbs'), '{:.2f}')} | {_f(r.get('tok_per_joule'), '{:.2f}')} | {notes.replace('|', '/')} |")
    sweeps = [r for r in doc.get("rows", []) if r.get("sweep")]
    if sweeps:
        pos = sorted({int(p) for r in sweeps for p in r["sweep"]})
        lines += ["", "Position sweep (tok/s, median of windows):", "",
                  "| engine | " + " | ".join(str(p) for p in pos) + " |", "|---|" + "---:|" * len(pos)]
        for r in sweeps:
            cells = []
            for p in pos:
                s = r["sweep"].get(str(p)) or {}
                cells.append(_f((s.get("tok_s") or {}).get("median")) if s.get("status") == "ok" else "–")
            lines.append(f"| {r.get('label') or r['engine']} | " + " | ".join(cells) + " |")
    qual = [r for r in doc.get("rows", []) if r.get("quality")]
    if qual:
        lines += ["", "Quality (against the bf16 reference, same weights):", "",
                  "| engine | ppl | ref ppl | agreement | KL |", "|---|---:|---:|---:|---:|"]
        for r in qual:
            q = r["quality"]
            lines.append(f"| {r.get('label') or r['engine']} | {_f(q.get('ppl'), '{:.3f}')} | "
                         f"{_f(q.get('ref_ppl'), '{:.3f}')} | {_f(q.get('agreement'), '{:.2%}')} | "
                         f"{_f(q.get('kl'), '{:.2e}')} |")
    lines += ["", "Protocol: " + json.dumps({k: v for k, v in proto.items() if k != "title"}, default=str), ""]
    return "\n".join(lines)


def _weights_desc(w: dict) -> str:
    parts = [f"{k}={w[k]}" for k in ("seed", "name", "num_layers") if w.get(k) is not None]
    if w.get("sha256"):
        parts.append(f"sha256 {str(w['sha256'])[:12]}…")
    return ", ".join(parts)
