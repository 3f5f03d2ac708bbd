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
    # an old "not run" placeholder (e.g. "llamacpp") gives way to the rows that replaced it ("llamacpp-bf16")
    replaced = {r["engine"] for r in old.get("rows", [])
                if r.get("status") == "not run" and any(h.startswith(r["engine"] + "-") for h in have)}
    kept = [r for r in old.get("rows", []) if r["engine"] not in have | replaced]
    for r in kept:
        r.setdefault("from_earlier_run", old.get("created"))
        r.setdefault("earlier_run_env", old.get("env"))  # the file's env is this run's; keep theirs beside them
        r.setdefault("earlier_run_protocol", {k: v for k, v in (old.get("protocol") or {}).items()
                                               if k in ("max_total_s", "engine_budget_s", "wall_s", "tolerance_logits")})
    doc["rows"] = kept + doc["rows"]
    return doc


def _clean(o):
    # JSON has no NaN/inf. Only for the .invalid.json copy of a refused document (write() names
    # every non-finite number first): there a null is the readable stand-in.
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


STATUSES = ("ok", "not run", "failed")
_NUM = (int, float)
# Engines measured by another program (bench/baselines/llamacpp.py, vllm.py): no teacher-forced
# interface, so their rows carry eval.correctness.not_gated. No other engine may be ungated
# unless its own gate ran and agreed with the oracle (bench/suite.py's labelled determinism-only rows).
EXTERNAL_PREFIXES = ("llamacpp", "vllm")
# Ranges of a row's numbers: a batch-1 decode of this model is far from 1e6 tokens/s, a DRAM
# from 1,000 TB/s; zero and negative are never measurements.
MAX_TOK_S = 1e6
MAX_TBS = 1e3


def _is_num(x) -> bool:
    return isinstance(x, _NUM) and not isinstance(x, bool)


def non_finite(o, where: str = "") -> list[str]:
    """Every NaN/Infinity in a document, by JSON path (monolith.jsonio.non_finite)."""
    from monolith.jsonio import non_finite as nf

    return nf(o, where)


def _stats_problems(st, what: str, hi_limit: float = MAX_TOK_S) -> list[str]:
    if not isinstance(st, dict):
        return [f"{what} is not an object"]
    vals = [st.get(k) for k in ("median", "min", "max")]
    if not all(_is_num(v) and 0 < v <= hi_limit for v in vals):
        return [f"{what} needs numbers median/min/max in (0, {hi_limit:g}], got {vals}"]
    med, lo, hi = vals
    out = [] if lo <= med <= hi else [f"{what}: min {lo} <= median {med} <= max {hi} does not hold"]
    runs = st.get("runs")
    if runs:
        import statistics
        if not (isinstance(runs, list) and all(_is_num(r) and 0 < r <= hi_limit for r in runs)):
            return out + [f"{what}: runs must be numbers in (0, {hi_limit:g}]"]
        if abs(statistics.median(runs) - med) > 1e-6 * med or min(runs) != lo or max(runs) != hi:
            out.append(f"{what}: median/min/max do not match its runs")
    return out


def _verdict_problems(gate: dict, where: str) -> list[str]:
    """A gate object (eval.correctness.gate) must agree with itself: passed is true exactly when
    nothing failed it, so passed: true beside a disallowed divergence, a non-deterministic
    repeat, a free-running divergence off a near-tie or a non-finite logit is refused, and so is
    passed: false with no reason."""
    out = []
    passed = gate.get("passed")
    if not isinstance(passed, bool):
        return [f"{where}: gate passed must be true or false, got {passed!r}"]
    counts = {k: gate.get(k) for k in ("divergences", "divergences_disallowed") if k in gate}
    for k, v in counts.items():
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            out.append(f"{where}: gate {k} must be a count >= 0, got {v!r}")
    if out:
        return out
    dis = counts.get("divergences_disallowed", 0)
    if dis > counts.get("divergences", dis):
        out.append(f"{where}: gate has {dis} disallowed divergences of {counts['divergences']} in all")
    failed_by = []
    if dis:
        failed_by.append(f"{dis} disallowed divergence(s)")
    if gate.get("deterministic") is False:
        failed_by.append("deterministic: false")
    if any(isinstance(f, dict) and f.get("allowed") is False for f in gate.get("free_running") or []):
        failed_by.append("a free-running divergence that is not allowed")
    nf = gate.get("nonfinite") or {}
    if isinstance(nf, dict) and (nf.get("oracle") or nf.get("engine")):
        failed_by.append("non-finite logits")
    if passed and failed_by:
        out.append(f"{where}: gate passed: true contradicts its own {', '.join(failed_by)}")
    reasons = gate.get("reasons")
    if passed and reasons:
        out.append(f"{where}: gate passed: true but lists reasons {reasons[:2]!r}")
    if not passed and not failed_by and "reasons" in gate and not reasons:
        out.append(f"{where}: gate passed: false with no reason and nothing failed")
    return out


def _gate_problems(gate, where: str, engine) -> list[str]:
    """An `ok` row (one that reports a speed) needs a gate object that passed, or the explicit
    not-gated object of an external engine (eval.correctness.not_gated). Nothing else counts:
    not false, "FAIL", [], 0, null or an object without `passed: true`."""
    if gate is None:
        return [f"{where}: reports a speed with no gate verdict (external rows carry not_gated)"]
    if not isinstance(gate, dict):
        return [f"{where}: reports a speed but its gate is {gate!r}, not a gate object with passed: true"]
    if gate.get("applicable", True) is False:
        if gate.get("passed") is not None:
            return [f"{where}: a not-applicable gate must have passed: null, got {gate.get('passed')!r}"]
        name = engine if isinstance(engine, str) else ""
        if name.startswith(EXTERNAL_PREFIXES):
            return []
        verdict = gate.get("verdict")
        if (not name.startswith("megakernel") and isinstance(verdict, dict)
                and verdict.get("divergences_disallowed") == 0 and verdict.get("deterministic") is False):
            return []  # its own gate agreed with the oracle and failed only determinism: labelled, not gated
        return [f"{where}: only external baselines ({', '.join(EXTERNAL_PREFIXES)}) may be ungated; "
                f"{engine!r} reports a speed with applicable: false"]
    if gate.get("passed") is not True:
        return [f"{where}: reports a speed but its correctness gate did not pass (passed: {gate.get('passed')!r})"]
    return []


def _positive(r: dict, key: str, where: str, hi: float = math.inf, allow_zero: bool = False) -> list[str]:
    x = r.get(key)
    if x is None:
        return []
    if isinstance(x, dict):  # {median, min, max}: each one present in range
        bad = {k: x[k] for k in ("median", "min", "max") if k in x and not (_is_num(x[k]) and 0 < x[k] <= hi)}
        return [f"{where}: {key} {bad} outside (0, {hi:g}]"] if bad else []
    if not _is_num(x) or not ((0 <= x if allow_zero else 0 < x) and x <= hi):
        return [f"{where}: {key} {x!r} is outside {'[0' if allow_zero else '(0'}, {hi:g}]"]
    return []


def validate(doc) -> list[str]:
    """Every problem with a results document (empty list: valid). The contract is
    notes/CONTRACTS.md; the one rule that matters most: a speed only beside a passed gate."""
    if not isinstance(doc, dict):
        return ["document is not a JSON object"]
    errs = non_finite(doc)
    if doc.get("schema") != SCHEMA:
        errs.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for key, typ in (("created", str), ("env", dict), ("weights", dict), ("protocol", dict), ("rows", list)):
        if not isinstance(doc.get(key), typ):
            errs.append(f"{key!r} missing or not a {typ.__name__}")
    rows = doc.get("rows") if isinstance(doc.get("rows"), list) else []
    seen: dict = {}
    for i, r in enumerate(rows):
        where = f"row {i} ({r.get('engine') if isinstance(r, dict) else '?'})"
        if not isinstance(r, dict):
            errs.append(f"{where} is not an object")
            continue
        eng = r.get("engine")
        if not isinstance(eng, str) or not eng:
            errs.append(f"{where}: engine must be a non-empty string")
        elif eng in seen:
            errs.append(f"{where}: engine {eng!r} appears twice (rows {seen[eng]} and {i})")
        else:
            seen[eng] = i
        missing = [k for k in base_row("", "") if k not in r]
        if missing:
            errs.append(f"{where}: missing keys {missing}")
        status = r.get("status")
        if status not in STATUSES:
            errs.append(f"{where}: status {status!r} not one of {STATUSES}")
        gate = r.get("gate")
        if isinstance(gate, dict) and gate.get("applicable", True) is not False:
            errs += _verdict_problems(gate, where)
        if status == "ok":
            errs += _stats_problems(r.get("tok_s"), f"{where}: tok_s")
            errs += _gate_problems(gate, where, eng)
        else:
            if r.get("tok_s") is not None:
                errs.append(f"{where}: status {status!r} but a tok_s is reported")
            if not (isinstance(r.get("reason"), str) and r["reason"].strip()):
                errs.append(f"{where}: status {status!r} needs a reason")
        errs += _positive(r, "us_per_token", where, 1e12)
        errs += _positive(r, "predicted_us_per_token", where, 1e12)
        errs += _positive(r, "bytes_per_token", where, 1e15)
        errs += _positive(r, "eff_bw_tbs", where, MAX_TBS)
        errs += _positive(r, "tok_per_joule", where, 1e9)
        sweep = r.get("sweep") or {}
        if not isinstance(sweep, dict):
            errs.append(f"{where}: sweep is not an object")
            sweep = {}
        for pos, sw in sweep.items():
            if not str(pos).isdigit() or not isinstance(sw, dict) or sw.get("status") not in STATUSES:
                errs.append(f"{where}: sweep entry {pos!r} malformed")
            elif sw["status"] == "ok":
                st = sw.get("tok_s") or {}
                med = st.get("median") if isinstance(st, dict) else None
                lo = st.get("min", med) if isinstance(st, dict) else None
                hi = st.get("max", med) if isinstance(st, dict) else None
                if not (all(_is_num(x) for x in (med, lo, hi)) and 0 < lo <= med <= hi <= MAX_TOK_S):
                    errs.append(f"{where}: sweep {pos} tok_s needs a positive median within its min/max, got {st}")
        q = r.get("quality")
        if q is not None and not isinstance(q, dict):
            errs.append(f"{where}: quality is not an object")
        elif q and "error" not in q:
            a, kl = q.get("agreement"), q.get("kl")
            if a is not None and not (_is_num(a) and 0.0 <= a <= 1.0):
                errs.append(f"{where}: quality agreement {a!r} outside [0, 1]")
            if kl is not None and not _is_num(kl):
                errs.append(f"{where}: quality KL {kl!r} is not a number")
            elif kl is not None and kl < -1e-6:
                errs.append(f"{where}: quality KL {kl} is negative")
            for k in ("ppl", "ref_ppl"):
                x = q.get(k)
                if x is not None and not (_is_num(x) and x >= 1.0 - 1e-9):
                    errs.append(f"{where}: quality {k} {x!r} is not a perplexity (>= 1)")
    return errs


def check_path(path: str | Path) -> Path:
    """A results path must end in .json: the Markdown goes beside it with the suffix .md, so any
    other name (run.md) would have its JSON overwritten by its own table. Commands call this on
    --out before any work."""
    from monolith.errors import MonolithError

    path = Path(path)
    if path.suffix != ".json":
        raise MonolithError(f"results path {path} must end in .json (the Markdown table is written beside it as "
                            f"{path.with_suffix('.md').name})")
    return path


def write(doc: dict, path: str | Path) -> tuple[Path, Path]:
    """Validate, then write JSON + Markdown. An invalid document (a non-finite number, a name
    not ending in .json included) is still kept (as <name>.invalid.json, so a long GPU run
    loses nothing; non-finite numbers there become null) and the call fails naming the problems."""
    from monolith.errors import MonolithError

    path = Path(path)
    errs = validate(doc)
    try:
        check_path(path)
    except MonolithError as e:
        errs.insert(0, str(e))
    if errs:
        bad = path.with_suffix(".invalid.json")
        bad.parent.mkdir(parents=True, exist_ok=True)
        bad.write_text(json.dumps(_clean(doc), indent=1, allow_nan=False) + "\n")
        raise MonolithError(f"results document for {path.name} is invalid (kept as {bad}):\n  " + "\n  ".join(errs))
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    md = path.with_suffix(".md")
    md.write_text(render_md(doc))
    return path, md


def md_cell(x) -> str:
    """Text for one Markdown table cell: a `|` would end the cell and a newline the row, so a
    label or reason holding them would shift or split the table."""
    return " ".join(str(x).replace("\\", "\\\\").replace("|", "\\|").split())


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
        f"Written by the harness on {doc.get('created')}. {_env_desc(env)}.",
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
        info = r.get("info") or {}
        grid = f"{info['blocks']} blocks on {info['sm_count']} SMs" if (
            info.get("blocks") and info.get("sm_count") and info["blocks"] != info["sm_count"]) else ""
        notes = "; ".join(x for x in [control, grid, r.get("reason") or "", r.get("reduced") or "",
                                      "experimental" if r.get("experimental") else ""] if x)
        span = f"{_f(ts.get('min'))}–{_f(ts.get('max'))}" if ts else "–"
        lines.append(
            f"| {md_cell(r.get('label') or r['engine'])} | {md_cell(r.get('status'))} | {_gate(r)} | {_f(ts.get('median'))} | "
            f"{span} | {_f(us.get('median'))} | {_f(r.get('predicted_us_per_token'))} | "
            f"{_f(r['bytes_per_token'] / 1e6 if r.get('bytes_per_token') else None)} | "
            f"{_f(r.get('eff_bw_tbs'), '{:.2f}')} | {_f(r.get('tok_per_joule'), '{:.2f}')} | {md_cell(notes)} |")
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
            lines.append(f"| {md_cell(r.get('label') or r['engine'])} | " + " | ".join(cells) + " |")
    qual = [r for r in doc.get("rows", []) if r.get("quality")]
    if qual:
        lines += ["", "Quality (against the reference named in each row, same weights):", "",
                  "| engine | reference | ppl | ref ppl | agreement | KL | positions |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in qual:
            q = r["quality"]
            if q.get("error"):
                lines.append(f"| {md_cell(r.get('label') or r['engine'])} | failed: {md_cell(q['error'])} | | | | | |")
                continue
            sanity = " (sanity)" if q.get("sanity") and "sanity" not in (r.get("label") or "") else ""
            lines.append(f"| {md_cell(r.get('label') or r['engine'])}{sanity} | "
                         f"{md_cell(q.get('reference', ''))} | {_f(q.get('ppl'), '{:.3f}')} | "
                         f"{_f(q.get('ref_ppl'), '{:.3f}')} | {_f(q.get('agreement'), '{:.2%}')} | "
                         f"{_f(q.get('kl'), '{:.2e}')} | {q.get('kl_positions', '')} |")
        lines.append("")  # a blank line ends the table (GFM would read the next line as a row)
        lines.append("Perplexity here is of synthetic weights: meaningless as language modelling, "
                     "only the ratio to the reference's counts.")
    lines += ["", "Protocol: " + json.dumps({k: v for k, v in proto.items() if k != "title"}, default=str), ""]
    return "\n".join(lines)


def _env_desc(env: dict) -> str:
    """The environment line, with only the fields that were read (a CPU run has no driver,
    clocks or power: they are left out, not printed as None)."""
    fields = (("gpu", "GPU: {}"), ("cpu", "CPU: {}"), ("driver", "driver {}"), ("cuda", "CUDA {}"), ("torch", "torch {}"),
              ("sm_clock_mhz", "SM {} MHz"), ("mem_clock_mhz", "mem {} MHz"), ("power_limit_w", "power limit {} W"),
              ("temperature_c", "{} °C"))
    return " · ".join(f.format(env[k]) for k, f in fields if env.get(k) is not None) or "environment not recorded"


def _weights_desc(w: dict) -> str:
    parts = [f"{k}={w[k]}" for k in ("seed", "name", "num_layers") if w.get(k) is not None]
    if w.get("sha256"):
        parts.append(f"sha256 {str(w['sha256'])[:12]}…")
    return ", ".join(parts)


def main(argv=None) -> int:
    """`python -m monolith.results FILE...`: validate results files and re-render their Markdown
    tables from the JSON (after a renderer change; the numbers are never touched)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m monolith.results", description=main.__doc__)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--render", action="store_true", help="rewrite FILE.md from FILE (valid files only)")
    a = ap.parse_args(argv)
    from monolith import jsonio
    from monolith.errors import MonolithError

    bad = 0
    for p in a.files:
        try:
            check_path(p)  # --render writes FILE with the suffix .md: FILE itself must not be one
        except MonolithError as e:
            print(f"{p}: INVALID\n  {e}")
            bad += 1
            continue
        try:
            doc = jsonio.load(p)
        except MonolithError as e:
            print(f"{p}: INVALID\n  cannot be read as JSON: {e}")
            bad += 1
            continue
        errs = validate(doc)  # a different schema is an error too: this checks results files only
        bad += bool(errs)
        print(f"{p}: {'valid' if not errs else 'INVALID'}" + "".join(f"\n  {e}" for e in errs))
        if a.render and not errs:
            p.with_suffix(".md").write_text(render_md(doc))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
