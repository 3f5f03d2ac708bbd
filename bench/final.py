"""The final matrix (M6): per-engine row files measured on one GPU within one lease, merged into
results/final.json + results/final.md. The schema is notes/CONTRACTS.md ("The final matrix").

A device call may last 10 minutes and the whole matrix does not fit one, so each call writes one
file per engine into a rows directory (`write_row_file`), stamped with the GPU's UUID and the
row's start and end; `merge` proves the rows share one GPU and one <= 30-minute window before it
writes anything, then renders the table.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import shutil
from pathlib import Path

from monolith import jsonio, results
from monolith.errors import MonolithError

ROW_SCHEMA = "monolith-m6-row/1"
FINAL_VERSION = 1
WINDOW_LIMIT_S = 1800.0
UNGATED_LABEL = "ungated: not bitwise deterministic"

# the matrix: the five kernel variants (nvfp4-stream experimental), then the baselines
VARIANTS = ("bf16-upstream", "fp8-upstream", "bf16-stream", "fp8-stream", "nvfp4-stream")
BASELINES = ("llamacpp", "hf-eager", "hf-static", "hf-compile", "reference-graph")
# HF modes whose gate fails on determinism alone: their speed is shown, labelled ungated
UNGATED_OK = ("hf-static", "hf-compile")
# lanes of the page's race: the best of each family
RACE_LANES = (("monolith", ("megakernel-", "monolith-")), ("llamacpp", "llamacpp-"), ("hf", "hf-"), ("reference-graph", "reference-graph"))


def engine_name(name: str) -> str:
    """m6's short names (fp8-stream, hf-eager, llamacpp) -> the registry's engine names."""
    name = name.strip()
    if name in VARIANTS:
        return f"megakernel-{name}"
    return name


def all_engines() -> list[str]:
    return [engine_name(v) for v in VARIANTS] + list(BASELINES)


def absent_engines(rows: list[dict]) -> list[str]:
    """The matrix's engines with no row in these files (llama.cpp counts as present with any of its
    formats): a merge of part of the matrix says which engines it lacks instead of dropping them."""
    names = {r.get("engine", "") for r in rows}
    return [e for e in all_engines() if e not in names and not any(n.startswith(f"{e}-") for n in names)]


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


def _parse_iso(s, where: str) -> _dt.datetime:
    try:
        t = _dt.datetime.fromisoformat(str(s))
    except ValueError:
        raise MonolithError(f"{where}: timestamp {s!r} is not ISO 8601") from None
    if t.tzinfo is None:
        raise MonolithError(f"{where}: timestamp {s!r} has no time zone")
    return t


def row_file_name(engine: str) -> str:
    return f"row-{engine}.json"


def write_row_file(rows_dir: Path, engine: str, rows: list[dict], *, gpu_uuid: str | None, gpu: str | None,
                   started: str, ended: str, env: dict, weights: dict, protocol: dict) -> Path:
    """One engine's rows (llama.cpp: two) with the lease's proof: GPU UUID, start and end."""
    rows_dir = Path(rows_dir)
    rows_dir.mkdir(parents=True, exist_ok=True)
    for r in rows:
        r.setdefault("gpu_uuid", gpu_uuid)
        r.setdefault("started", started)
        r.setdefault("ended", ended)
    doc = {"schema": ROW_SCHEMA, "engine": engine, "gpu_uuid": gpu_uuid, "gpu": gpu, "started": started,
           "ended": ended, "env": env, "weights": weights, "protocol": protocol, "rows": rows}
    path = rows_dir / row_file_name(engine)
    bad = jsonio.non_finite(doc)
    if bad:  # a NaN is a failed measurement, never a null in the matrix; the copy keeps the rest readable
        kept = path.with_suffix(".invalid.json")
        kept.write_text(json.dumps(results._clean(doc), indent=1, allow_nan=False) + "\n")
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise MonolithError(f"{path}: not written (kept as {kept.name}): {bad[0]}{more}")
    return jsonio.write(path, doc)


def load_row_files(rows_dir: Path) -> list[dict]:
    rows_dir = Path(rows_dir)
    if not rows_dir.is_dir():
        raise MonolithError(f"--merge {rows_dir}: not a directory (write rows with `monolith m6 --rows-dir DIR`)")
    refused = sorted(rows_dir.glob("row-*.invalid.json"))
    if refused:
        raise MonolithError(f"--merge {rows_dir}: {refused[0].name} is a row refused for non-finite numbers; "
                            "measure that engine again (or remove the file) before merging")
    files = sorted(rows_dir.glob("row-*.json"))
    if not files:
        raise MonolithError(f"--merge {rows_dir}: no row-*.json files (write them with `monolith m6 --rows-dir DIR`)")
    docs = []
    for f in files:
        d = jsonio.load(f)
        if not isinstance(d, dict) or d.get("schema") != ROW_SCHEMA:
            raise MonolithError(f"{f}: schema {d.get('schema') if isinstance(d, dict) else None!r}, "
                                f"expected {ROW_SCHEMA!r}")
        if not isinstance(d.get("rows"), list) or not d["rows"]:
            raise MonolithError(f"{f}: no rows")
        d["_file"] = f.name
        docs.append(d)
    return docs


def check_lease(docs: list[dict], limit_s: float = WINDOW_LIMIT_S) -> dict:
    """One GPU, one window: every file names the same GPU UUID, and the first start and the last
    end lie within `limit_s`. A file without a UUID (no GPU: a CPU rehearsal) can only be merged
    with others that have none."""
    uuids = {d.get("gpu_uuid") for d in docs}
    if len(uuids) != 1:
        names = ", ".join(f"{d['_file']}: {d.get('gpu_uuid')}" for d in docs)
        raise MonolithError(f"rows come from different GPUs ({names}): the matrix is one GPU's; re-measure on one")
    for d in docs:
        for r in d["rows"]:
            if r.get("gpu_uuid", d.get("gpu_uuid")) != d.get("gpu_uuid"):
                raise MonolithError(f"{d['_file']}: row {r.get('engine')} names GPU {r.get('gpu_uuid')}, "
                                    f"its file {d.get('gpu_uuid')}")
    starts = [_parse_iso(d.get("started"), d["_file"]) for d in docs]
    ends = [_parse_iso(d.get("ended"), d["_file"]) for d in docs]
    for d, s, e in zip(docs, starts, ends, strict=True):
        if e < s:
            raise MonolithError(f"{d['_file']}: ends ({d['ended']}) before it starts ({d['started']})")
    span = (max(ends) - min(starts)).total_seconds()
    if span > limit_s:
        raise MonolithError(f"rows span {span:.0f} s (from {min(starts).isoformat()} to {max(ends).isoformat()}), "
                            f"more than one {limit_s:.0f} s lease: re-measure the oldest rows")
    quick = {bool((d.get("protocol") or {}).get("quick")) for d in docs}
    if len(quick) != 1:
        raise MonolithError("quick-trial rows and full-protocol rows cannot be merged into one matrix")
    return {"gpu_uuid": uuids.pop(), "start": min(starts).isoformat(), "end": max(ends).isoformat(),
            "span_s": round(span, 1), "limit_s": limit_s}


def _median(r: dict) -> float | None:
    """An ok row's median tok/s, or None (also for a value that is not a finite positive number)."""
    m = (r.get("tok_s") or {}).get("median") if r.get("status") == "ok" else None
    return float(m) if isinstance(m, int | float) and not isinstance(m, bool) and math.isfinite(m) and m > 0 else None


def headline(rows: list[dict], gpu: str | None) -> dict | None:
    """The fastest gated monolith row (not experimental) against the fastest baseline with a speed."""
    mono = [r for r in rows if r.get("kind") == "monolith" and _median(r) and not r.get("experimental")
            and (r.get("gate") or {}).get("passed") is True]
    base = [r for r in rows if r.get("kind") == "baseline" and _median(r)]
    if not mono:
        return None
    best = max(mono, key=_median)
    out = {"engine": best["engine"], "label": best.get("label"), "tok_s": _median(best), "gpu": gpu,
           "best_baseline": None, "best_baseline_tok_s": None, "speedup": None}
    if base:
        b = max(base, key=_median)
        out.update(best_baseline=b["engine"], best_baseline_tok_s=_median(b), speedup=_median(best) / _median(b))
    return out


def race(rows: list[dict]) -> list[dict]:
    """The race's lanes: per family, the fastest row that has a speed (its timeline if recorded)."""
    lanes = []
    for lane, prefix in RACE_LANES:
        cands = [r for r in rows if r["engine"].startswith(prefix) and _median(r)
                 and not (lane == "monolith" and r.get("experimental"))]
        if cands:
            b = max(cands, key=_median)
            lanes.append({"lane": lane, "engine": b["engine"], "label": b.get("label"), "tok_s": _median(b),
                          "speed_label": b.get("speed_label"), "timeline": b.get("timeline")})
    return lanes


def _bw_status(p: dict) -> tuple[str, dict]:
    """(status, measurement record) of one protocol's bandwidth: bench/bwprobe.py's status, or for
    a protocol written before it, "legacy" (the H200's pre-M0 4.53 of NOTES.md) or "unlabelled"."""
    from monolith.bench import bwprobe

    m = p.get("bw_measurement") if isinstance(p.get("bw_measurement"), dict) else {}
    tbs = p.get("bw_tbs_for_prediction")
    if m.get("status"):
        return m["status"], m
    if tbs is None:
        return "not recorded", m
    return ("legacy" if tbs == bwprobe.LEGACY_TBS else "unlabelled"), m


def bandwidth_of(docs: list[dict], gpu_uuid: str | None = None) -> dict:
    """The bandwidth each row file's predictions divided by (its protocol's), and whether the
    matrix has one: rows predicted at different bandwidths are said to be, file by file."""
    per = {}
    for d in sorted(docs, key=lambda d: str(d.get("started"))):
        p = d.get("protocol") or {}
        status, m = _bw_status(p)
        tbs = p.get("bw_tbs_for_prediction")
        per[d["_file"]] = {"tbs": tbs, "status": status, "source": p.get("bw_source") or "not recorded",
                           "gpu": m.get("gpu"), "gpu_uuid": m.get("gpu_uuid"),
                           "on_this_gpu": None if not m.get("gpu_uuid") else m.get("gpu_uuid") == gpu_uuid}
    values = list(dict.fromkeys(v["tbs"] for v in per.values()))
    first = next(iter(per.values()))
    out = {"one_bandwidth": len(values) == 1, "tbs": values[0] if len(values) == 1 else None, "by_row_file": per}
    if out["one_bandwidth"]:
        out.update({k: first[k] for k in ("status", "source", "gpu", "gpu_uuid", "on_this_gpu")})
    else:
        out["note"] = "rows predicted at different bandwidths: " + "; ".join(
            f"{f}: {v['tbs']} TB/s ({v['status']})" for f, v in per.items())
    return out


def _order(rows: list[dict]) -> list[dict]:
    order = {e: i for i, e in enumerate(all_engines())}

    def key(r):
        e = r["engine"]
        base = "llamacpp" if e.startswith("llamacpp-") else e
        return (order.get(base, len(order)), e)
    return sorted(rows, key=key)


def merge(rows_dir: Path, out: Path, publish_root: Path | None = None, limit_s: float = WINDOW_LIMIT_S) -> dict:
    """Check the lease, then write `out` (final.json) and final.md beside it. With publish_root
    (the repository root), the rows' timelines go to results/timelines/ and the X-ray raws to
    results/xray/, and the rows name those paths."""
    docs = load_row_files(rows_dir)
    lease = check_lease(docs, limit_s)
    first = min(docs, key=lambda d: d["started"])
    rows = [r for d in docs for r in d["rows"]]
    seen = set()
    for r in rows:
        if r["engine"] in seen:
            raise MonolithError(f"engine {r['engine']} appears in two row files: keep one")
        seen.add(r["engine"])
    rows_dir = Path(rows_dir)
    xray = {}
    for raw in sorted((rows_dir / "xray").glob("*.raw.npz")):
        variant = raw.name.removesuffix(".raw.npz")
        xray[variant] = str(raw)
        if publish_root is not None:
            dst = Path(publish_root) / "results" / "xray" / raw.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(raw, dst)
            xray[variant] = str(dst.relative_to(publish_root))
    for r in rows:
        tl = rows_dir / "timelines" / f"{r['engine']}.json"
        if tl.is_file():
            r["timeline"] = str(tl)
            if publish_root is not None:
                dst = Path(publish_root) / "results" / "timelines" / tl.name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tl, dst)
                r["timeline"] = str(dst.relative_to(publish_root))
        else:
            r.setdefault("timeline", None)
        if r.get("kind") == "monolith":
            r["xray"] = xray.get(r.get("variant"))
    rows = _order(rows)
    quick = bool((first.get("protocol") or {}).get("quick"))
    protocol = {**(first.get("protocol") or {}), "title": "M6: the final matrix" + (" (quick trial: not headline)"
                                                                                     if quick else ""),
                "headline": not quick}
    bandwidth = bandwidth_of(docs, lease["gpu_uuid"])
    if not bandwidth["one_bandwidth"]:  # the first file's value would stand for rows it does not describe
        protocol.update(bw_tbs_for_prediction=None, bw_measurement=None,
                        bw_source="several: final.bandwidth.by_row_file (" + bandwidth["note"] + ")")
    doc = results.new_doc(first.get("env") or {}, first.get("weights") or {}, protocol)
    doc["rows"] = rows
    gpu = first.get("gpu")
    doc["final"] = {"version": FINAL_VERSION, "gpu_uuid": lease["gpu_uuid"], "gpu": gpu,
                    "window": {k: lease[k] for k in ("start", "end", "span_s", "limit_s")},
                    "row_files": [d["_file"] for d in docs], "headline": None if quick else headline(rows, gpu),
                    "race": race(rows), "xray": xray, "quick": quick, "absent": absent_engines(rows),
                    "bandwidth": bandwidth}
    errs = validate_final(doc)
    if errs:
        bad = Path(out).with_suffix(".invalid.json")
        bad.parent.mkdir(parents=True, exist_ok=True)
        bad.write_text(json.dumps(results._clean(doc), indent=1) + "\n")
        raise MonolithError(f"final matrix invalid (kept as {bad}): " + "; ".join(errs[:6]))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    jsonio.write(out, doc, "the final matrix")
    out.with_suffix(".md").write_text(render_final_md(doc))
    return doc


def _gates_problems(r: dict, where: str) -> list[str]:
    g = r.get("gates")
    if not isinstance(g, dict):
        return [f"{where}: a quantized row needs gates {{implementation, quality}}"]
    errs = []
    for name in ("implementation", "quality"):
        v = g.get(name)
        if not isinstance(v, dict) or "passed" not in v or v["passed"] not in (True, False, None):
            errs.append(f"{where}: gates.{name} needs passed true/false/null")
        elif v["passed"] is None and not v.get("reason"):
            errs.append(f"{where}: gates.{name} not measured needs a reason")
    return errs


def validate_final(doc) -> list[str]:
    """Every problem with a final.json (empty: valid): the results schema, then the matrix's own rules."""
    errs = results.validate(doc)
    if errs or not isinstance(doc, dict):
        return errs
    f = doc.get("final")
    if not isinstance(f, dict) or f.get("version") != FINAL_VERSION:
        return errs + [f"'final' missing or not version {FINAL_VERSION}"]
    w = f.get("window") or {}
    if not isinstance(w.get("span_s"), int | float) or w["span_s"] > w.get("limit_s", WINDOW_LIMIT_S):
        errs.append(f"window span {w.get('span_s')} s is over the {w.get('limit_s', WINDOW_LIMIT_S)} s limit")
    errs += _bandwidth_problems(doc)
    for i, r in enumerate(doc["rows"]):
        where = f"row {i} ({r.get('engine')})"
        if r.get("kind") not in ("monolith", "baseline"):
            errs.append(f"{where}: kind {r.get('kind')!r} not monolith/baseline")
        if r.get("gpu_uuid") != f.get("gpu_uuid"):
            errs.append(f"{where}: GPU {r.get('gpu_uuid')} is not the matrix's {f.get('gpu_uuid')}")
        if r.get("status") == "ok":
            e = r.get("energy")
            if not isinstance(e, dict) or e.get("method") not in ("nvml-total-energy", "not measured"):
                errs.append(f"{where}: energy needs method nvml-total-energy or not measured")
            elif e["method"] == "not measured" and not e.get("reason"):
                errs.append(f"{where}: energy not measured needs a reason")
            elif e["method"] == "nvml-total-energy" and not (isinstance(r.get("tok_per_joule"), int | float)
                                                             and r["tok_per_joule"] > 0):
                errs.append(f"{where}: measured energy but tok_per_joule {r.get('tok_per_joule')!r}")
            if r.get("kind") == "monolith" and not f.get("quick") and not r.get("sweep"):
                errs.append(f"{where}: a monolith row needs the position sweep")
        gate = r.get("gate") or {}
        if r.get("speed_label") == UNGATED_LABEL:
            v = gate.get("verdict") or {}
            if gate.get("applicable") is not False or v.get("passed") is not False:
                errs.append(f"{where}: an ungated row keeps its measured (failed) verdict under gate.verdict")
        elif r.get("status") == "ok" and gate.get("applicable") is False and r.get("kind") == "monolith":
            errs.append(f"{where}: a monolith row's speed must be gated")
        if r.get("weight_format") in ("fp8", "nvfp4"):
            errs += _gates_problems(r, where)
    return errs


def _bandwidth_problems(doc: dict) -> list[str]:
    """A matrix that records its bandwidth (final.bandwidth) names one value only when every row's
    prediction used it; matrices merged before that record are checked by nothing here."""
    b = doc["final"].get("bandwidth")
    if b is None:
        return []
    if not isinstance(b, dict) or b.get("one_bandwidth") not in (True, False):
        return ["final.bandwidth needs one_bandwidth true/false"]
    if not b["one_bandwidth"]:
        return [] if doc["protocol"].get("bw_tbs_for_prediction") is None else \
            ["rows predicted at several bandwidths, but the protocol names one"]
    errs = []
    for i, r in enumerate(doc["rows"]):
        used = (r.get("prediction") or {}).get("bw_tbs") if isinstance(r.get("prediction"), dict) else None
        if used is not None and used != b.get("tbs"):
            errs.append(f"row {i} ({r.get('engine')}): predicted at {used} TB/s, the matrix's bandwidth is {b.get('tbs')}")
        if b.get("status") == "none" and r.get("predicted_us_per_token") is not None and r.get("status") == "ok":
            errs.append(f"row {i} ({r.get('engine')}): a predicted µs/token without a bandwidth")
    return errs


def bandwidth_lines(doc: dict) -> list[str]:
    """final.md's paragraph on the predicted column: the bandwidth it divides by and where that
    came from; for a matrix merged before final.bandwidth existed, the protocol's recorded value,
    named for what it is. Never a re-derived number: the recorded fields are shown as recorded."""
    from monolith.bench import bwprobe

    f = doc["final"]
    gpu = f.get("gpu") or "this GPU"
    b = f.get("bandwidth")
    if b is None:
        p = doc.get("protocol") or {}
        status, m = _bw_status(p)
        b = {"one_bandwidth": True, "tbs": p.get("bw_tbs_for_prediction"), "status": status,
             "source": p.get("bw_source") or "not recorded", "gpu": m.get("gpu"),
             "on_this_gpu": None if not m.get("gpu_uuid") else m.get("gpu_uuid") == f.get("gpu_uuid")}
    head = "**Predicted µs/token** (the byte model: bytes per token / streaming-read bandwidth)"
    if not b["one_bandwidth"]:
        per = "; ".join(f"{name}: {_f(v['tbs'], '{:.3f}')} TB/s ({v['status']}: {v['source']})"
                        for name, v in b["by_row_file"].items())
        return [f"{head} are NOT at one bandwidth; compare them across rows only within a file. By row file: {per}.", ""]
    tbs = b.get("tbs")
    if tbs is None and b.get("status") == "not recorded":
        return [f"{head}: the row files do not record the bandwidth their predictions divided by, nor the GPU "
                "it was measured on.", ""]
    if tbs is None:
        return [f"{head}: none in this matrix ({b.get('source')}).", ""]
    if b["status"] == "table":
        return [f"{head} use {tbs:g} TB/s, a committed measurement of the {b.get('gpu') or gpu} model, because the "
                f"probe could not run on this matrix's GPU: {b.get('source')}.", ""]
    if b["status"] in ("measured", "reused"):
        if b.get("on_this_gpu"):
            where = f"this matrix's GPU ({gpu})"
        elif b.get("gpu") != f.get("gpu"):
            where = f"{b.get('gpu')}, NOT this matrix's GPU ({gpu})"
        else:
            where = f"{gpu} (the UUIDs do not show it was this matrix's)"
        return [f"{head} use {tbs:.3f} TB/s, measured at the start of the run on {where}: {b.get('source')}.", ""]
    text = f"{head} use {tbs:g} TB/s, the value recorded in this matrix's protocol (`bw_tbs_for_prediction`; " \
           f"source: {b.get('source')}); the run recorded no measurement of its own GPU."
    if b["status"] == "legacy":
        text += f" {bwprobe.LEGACY_TBS:g} TB/s is the {bwprobe.LEGACY_GPU}'s streaming read measured before M0"
        if f.get("gpu") == bwprobe.LEGACY_GPU:
            hit = bwprobe.MEASURED.get(bwprobe.LEGACY_GPU)
            text += (f"; this repository's probe later measured {hit.tbs:g} TB/s on it ({hit.file})" if hit else "") + "."
        else:
            hit = bwprobe.MEASURED.get(f.get("gpu"))
            text += (f", not a measurement of this matrix's GPU ({gpu}): the predicted column prices this GPU's "
                     "bytes at another GPU's bandwidth (optimistic on a GPU with slower memory, as the H100's HBM3 is "
                     "against the H200's HBM3e). ")
            text += (f"A committed measurement of {gpu} is {hit.tbs:g} TB/s ({hit.file}); the rows are not re-priced "
                     "here." if hit else
                     f"No streaming read of {gpu} is measured in this repository, so no re-derived prediction is "
                     "given.")
            text += " The measured columns do not depend on it; later runs measure their own GPU's (bench/bwprobe.py)."
    return [text, ""]


def _f(x, fmt="{:,.1f}"):
    return "–" if x is None else fmt.format(x)


def _pf(v) -> str:
    return {True: "pass", False: "FAIL", None: "not measured"}[v]


def render_final_md(doc: dict, results_dir=None) -> str:
    """The results table (results.render_md) plus the matrix's own sections: provenance, energy,
    both gates of each quantized row (and why the quality gate fails on synthetic weights: the
    paragraph of results/quality_margins.json that the page's methodology prints too), the race's
    lanes."""
    from monolith.quant import margins

    f = doc["final"]
    w = f["window"]
    head = results.render_md(doc).rstrip("\n").split("\n")
    lines = head[:2]
    lines += [f"One GPU ({f.get('gpu')}, UUID {f['gpu_uuid']}), one window: {w['start']} to {w['end']} "
              f"({w['span_s']:.0f} s of at most {w['limit_s']:.0f} s); {len(f['row_files'])} row files merged.", ""]
    h = f.get("headline")
    if h:
        sp = f", {h['speedup']:.2f}× {h['best_baseline']} ({h['best_baseline_tok_s']:,.1f} tok/s)" if h.get("speedup") else ""
        lines += [f"**Headline:** {h['label'] or h['engine']}: {h['tok_s']:,.1f} tok/s{sp}, on {h.get('gpu')}.", ""]
    lines += bandwidth_lines(doc)
    lines += head[2:]
    if f.get("absent"):
        lines += ["", "Not in this matrix (no row file from this lease): " + ", ".join(f["absent"]) + "."]
    lines += ["", "The table's gate column is each engine's correctness gate against the fp32 oracle on the "
              "weights it multiplies (for FP8 and NVFP4 rows: the dequantized weights, i.e. the implementation "
              "gate). Whether quantization keeps the model's quality is the quality gate, listed by name for "
              "every quantized row below, pass or fail as measured."]
    lines += ["", "Energy (NVML total-energy counter around each row's timed runs):", "",
              "| engine | tok/J | joules | mean W | decode s | method |", "|---|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        e = r.get("energy") or {}
        if r.get("status") != "ok":
            continue
        meth = e.get("method", "not measured")
        if meth == "not measured":
            meth += f": {e.get('reason')}"
        lines.append(f"| {r.get('label') or r['engine']} | {_f(r.get('tok_per_joule'), '{:.2f}')} | "
                     f"{_f(e.get('joules'), '{:.1f}')} | {_f(e.get('mean_w'), '{:.0f}')} | "
                     f"{_f(e.get('decode_s'), '{:.2f}')} | {meth.replace('|', '/')} |")
    quant = [r for r in doc["rows"] if r.get("gates")]
    if quant:
        lines += ["", "Quantized rows, both gates by name (implementation: fp32 on the dequantized weights, "
                  "margin rule; quality: against fp32 on the original bf16 weights):", "",
                  "| engine | implementation gate | quality gate | ppl ratio | agreement | KL | bf16 floor agreement |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for r in quant:
            g = r["gates"]
            q = g.get("quality") or {}
            fl = q.get("floor") or {}
            lines.append(f"| {r.get('label') or r['engine']} | {_pf(g['implementation'].get('passed'))} | "
                         f"{_pf(q.get('passed'))}{' (' + q['reason'] + ')' if q.get('reason') else ''} | "
                         f"{_f(q.get('ppl_ratio'), '{:.4f}')} | {_f(q.get('agreement'), '{:.2%}')} | "
                         f"{_f(q.get('kl'), '{:.3g}')} | {_f(fl.get('agreement'), '{:.2%}')} |")
        why = margins.paragraph(results_dir)
        if why:
            lines += ["", why]
    ung = [r for r in doc["rows"] if r.get("speed_label")]
    if ung:
        lines += ["", "Rows marked *" + UNGATED_LABEL + "*: their gate ran, agreed with the oracle, and failed only "
                  "the bitwise repeat; their speed is shown and never counted as gated: "
                  + ", ".join(r["engine"] for r in ung) + "."]
    if f.get("race"):
        lines += ["", "Race lanes: " + "; ".join(f"{x['lane']}: {x['engine']} ({x['tok_s']:,.1f} tok/s)" for x in f["race"])
                  + "."]
    return "\n".join(lines) + "\n"
