"""README's results table, rendered from results files (schema monolith-results/1,
notes/CONTRACTS.md) and never typed by hand.

`python -m monolith.readme_table FILE.json... [--quality Q.json...]` prints the table;
`--write` puts it between README.md's markers, `--check` exits 1 when README's table is not what
the files give. The begin marker names the files, so `--check` and `--write` without files
re-render from the same sources (tests/test_readme_table.py runs that check).

Rules, so that one table can be stitched from several runs and stay honest:
- one row per engine; where files disagree, the newest run's row wins (the row's own
  `from_earlier_run` / `created`, else its file's `created`; on a tie, the later file named);
- negative controls (rows with `control_ok`) and quality-only rows (not run, quality present) are
  not engines a user can run, and are left out;
- a quantized row names both gates: the implementation gate (the row's correctness gate, whose
  oracle is fp32 on the dequantized weights) and the quality gate against bf16 (perplexity ratio
  and 64-token agreement, from the row's `quality.gates` or a `--quality` file of that weight
  format), each with its verdict as measured;
- every row names the file it came from.

Quality verdicts are read, in this order, from: the final matrix's `gates.quality` (bench/final.py:
passed, agreement, agreement_min, ppl_ratio, ppl_limit, kl, or passed null with a reason); a row's
`quality.gates` (the keys of `monolith eval quality`'s `gates`: agreement, agreement_min,
agreement_pass, ppl_ratio, ppl_limit, ppl_pass, kl); a `--quality` file of the row's weight format,
the pair whose engine is the row's when it has `pairs`. A row with `speed_label` (the final
matrix's "ungated: not bitwise deterministic") shows that label in place of a gate.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

from monolith.errors import MonolithError
from monolith.results import SCHEMA, validate

BEGIN = "<!-- results:begin"
END = "<!-- results:end -->"
_BEGIN_RE = re.compile(r"<!-- results:begin(?P<args>[^\n]*?)-->\n", re.S)
HEADER = ("| engine | tok/s median (min–max) | µs/token | eff. TB/s | tok/J | tok/s 2,048 / 16 "
          "| correctness gate | quality gate vs bf16 | run |")
ALIGN = "|---|---:|---:|---:|---:|---:|---|---|---|"


def _num(x, fmt="{:,.1f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return fmt.format(x)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if round(100 * x, 1) != round(100 * x) else f"{100 * x:.0f} %"


def _cell(s: str) -> str:
    return " ".join(str(s).replace("|", "/").split())


def _load(path: Path) -> dict:
    from monolith import jsonio

    if not Path(path).exists():
        raise MonolithError(f"{path}: no such results file")
    try:
        return jsonio.load(path)
    except jsonio.NotJSON as e:
        raise MonolithError(f"{path}: cannot be read as JSON ({e.detail})") from None


def load_results(path: Path) -> dict:
    doc = _load(path)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise MonolithError(f"{path}: not a results file (schema {got!r}, expected {SCHEMA!r})")
    errs = validate(doc)
    if errs:
        raise MonolithError(f"{path}: invalid results file: {errs[0]}" + (f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""))
    return doc


def load_quality(path: Path) -> dict:
    """A quality run (`monolith eval quality`: keys format, engine, floor, gates)."""
    q = _load(path)
    if not (isinstance(q, dict) and isinstance(q.get("format"), str) and isinstance(q.get("gates"), dict)
            and isinstance(q.get("engine"), dict)):
        raise MonolithError(f"{path}: not a quality file (needs 'format', 'engine' and 'gates')")
    for where, gates in [("gates", q["gates"])] + [(f"pairs[{i}].gates", (p or {}).get("gates"))
                                                   for i, p in enumerate(q.get("pairs") or [])]:
        for k in ("agreement", "agreement_min", "agreement_pass", "ppl_ratio", "ppl_limit", "ppl_pass"):
            if not isinstance(gates, dict) or k not in gates:
                raise MonolithError(f"{path}: {where} has no {k!r}")
    return q


def weight_format(row: dict) -> str:
    """bf16, fp8 or nvfp4 (the packed format the engine reads), from the row itself."""
    fmt = row.get("weight_format")
    if isinstance(fmt, str) and fmt:
        return fmt
    m = re.match(r"megakernel-(bf16|fp8|nvfp4)-", row.get("engine", ""))
    if m:
        return m.group(1)
    m = re.search(r"-(q\d\w*)$", row.get("engine", ""))  # llama.cpp's quantized formats (llamacpp-q8_0)
    return m.group(1) if m else "bf16"


def _when(row: dict, doc: dict) -> str:
    return row.get("from_earlier_run") or row.get("created") or doc.get("created") or ""


def select_rows(sources: list[tuple[str, dict]]) -> list[tuple[dict, str, str]]:
    """(row, source name, run time) per engine, the newest run's row; controls and
    quality-only rows left out."""
    best: dict[str, tuple[dict, str, str, int]] = {}
    for order, (name, doc) in enumerate(sources):
        for r in doc["rows"]:
            if "control_ok" in r or (r.get("status") == "not run" and r.get("quality")):
                continue
            when = _when(r, doc)
            old = best.get(r["engine"])
            if old is None or (when, order) >= (old[2], old[3]):
                best[r["engine"]] = (r, name, when, order)
    rows = [(r, n, w) for r, n, w, _ in best.values()]

    def key(item):
        r = item[0]
        ts = (r.get("tok_s") or {}).get("median") if r.get("status") == "ok" else None
        return (ts is None, -(ts or 0.0), {"failed": 0, "not run": 1}.get(r.get("status"), 2), r["engine"])
    return sorted(rows, key=key)


def engine_name(row: dict) -> str:
    m = re.match(r"megakernel-(.+)$", row["engine"])
    if m:
        return f"monolith `{m.group(1)}`" + (" (experimental)" if row.get("experimental") else "")
    label = row.get("label") or row["engine"]
    return re.sub(r"\s*\((?:gpt-fast style, )?bf16\)$", "", label)


def gate_cell(row: dict) -> str:
    g = row.get("gate")
    if row.get("status") == "not run":
        return "not run"
    if row.get("speed_label"):  # the final matrix: a speed shown although its gate failed (labelled)
        return str(row["speed_label"])
    if not isinstance(g, dict):
        return "–"
    if g.get("applicable") is False:
        return "not gated (external)"
    verdict = "pass" if g.get("passed") else "FAIL"
    size = f"{g.get('prompts')}×{g.get('tokens_per_prompt')}" if g.get("prompts") else ""
    tol = f"tol {g['tolerance']:g}" if isinstance(g.get("tolerance"), int | float) else ""
    detail = ", ".join(x for x in (size, tol) if x)
    oracle = g.get("oracle") if isinstance(g.get("oracle"), dict) else {}
    dequant = str((oracle.get("weights") or {}).get("kind", "")).endswith("-dequantized") or isinstance(
        (row.get("gates") or {}).get("implementation"), dict)
    if dequant:
        return f"implementation: {verdict} ({detail}; oracle fp32 on the dequantized weights)"
    if g.get("passed") is False and g.get("deterministic") is False:
        return f"FAIL: not bitwise deterministic ({detail})"
    return f"{verdict} ({detail})" if detail else verdict


def quality_cell(row: dict, quality: dict[str, tuple[str, dict]]) -> str:
    fmt = weight_format(row)
    if row.get("status") != "ok":
        return ""
    if fmt == "bf16":
        return "n/a (bf16 weights)"
    q = row.get("quality") if isinstance(row.get("quality"), dict) else None
    gates, where, measured_on = (q or {}).get("gates"), None, None
    fq = (row.get("gates") or {}).get("quality") if isinstance(row.get("gates"), dict) else None
    if isinstance(fq, dict):  # the final matrix (bench/final.py): gates.quality with its verdict
        if fq.get("passed") is None or fq.get("agreement") is None:
            return f"not measured: {fq.get('reason') or 'no reason recorded'}"
        gates = {"agreement": fq["agreement"], "agreement_min": fq.get("agreement_min", 0.9),
                 "ppl_ratio": fq.get("ppl_ratio"), "ppl_limit": fq.get("ppl_limit", 1.02), "kl": fq.get("kl"),
                 "verdict": fq["passed"]}
        gates["agreement_pass"] = gates["agreement"] >= gates["agreement_min"]
        gates["ppl_pass"] = gates["ppl_ratio"] is not None and gates["ppl_ratio"] <= gates["ppl_limit"]
    if not isinstance(gates, dict) and fmt in quality:
        where, qdoc = quality[fmt]
        gates, measured_on = qdoc["gates"], (qdoc.get("engine") or {}).get("engine", "")
        for pair in qdoc.get("pairs") or []:  # one reference pass, several (engine, floor) pairs
            on = ((pair.get("engine") or {}).get("engine") or "").split(" ")[0]
            if on == row["engine"] and isinstance(pair.get("gates"), dict):
                gates, measured_on = pair["gates"], on
                break
    if not isinstance(gates, dict):
        if not row["engine"].startswith("megakernel-"):
            return "not measured"
        if q and q.get("agreement") is not None:
            return f"not judged: agreement {_pct(q['agreement'])}, no gate verdict recorded"
        return "not measured"
    ok = gates["verdict"] if "verdict" in gates else bool(gates["agreement_pass"]) and bool(gates["ppl_pass"])
    parts = [f"agreement {_pct(gates['agreement'])} (gate ≥ {_pct(gates['agreement_min'])}: "
             f"{'pass' if gates['agreement_pass'] else 'fail'})",
             f"ppl ratio {_num(gates['ppl_ratio'], '{:.3f}')} (gate ≤ {gates['ppl_limit']:g}: "
             f"{'pass' if gates['ppl_pass'] else 'fail'})"]
    if gates.get("kl") is not None:
        parts.append(f"KL {gates['kl']:.2f}")
    text = f"{'pass' if ok else 'FAIL'}: " + ", ".join(parts)
    if where:
        engine = re.match(r"megakernel-(\S+)", measured_on or "")
        on = f", measured on `{engine.group(1)}`" if engine and f"megakernel-{engine.group(1)}" != row["engine"] else ""
        text += f" (`{where}`{on})"
    return text


def _notes(row: dict) -> list[str]:
    out = []
    reason = row.get("reason") or ""
    g = row.get("gate") if isinstance(row.get("gate"), dict) else {}
    if row.get("status") != "ok" and not (g.get("passed") is False and g.get("deterministic") is False):
        out.append(re.sub(r"\s*\([^()]*\)", "", reason).strip() or row.get("status"))
    else:
        m = re.match(r"(\d+/\d+) prompts per run", row.get("reduced") or "")
        if m:
            out.append(f"timed on {m.group(1)} prompts per run")
    return out


def ratio_cell(row: dict) -> str:
    sw = row.get("sweep") or {}
    a, b = sw.get("2048") or {}, sw.get("16") or {}
    if a.get("status") == "ok" and b.get("status") == "ok":
        return f"{a['tok_s']['median'] / b['tok_s']['median']:.3f}"
    return "–"


def render_table(sources: list[tuple[str, dict]], quality: dict[str, tuple[str, dict]] | None = None) -> str:
    quality = quality or {}
    lines = [HEADER, ALIGN]
    for row, name, when in select_rows(sources):
        ok = row.get("status") == "ok"
        ts, us = (row.get("tok_s") or {}) if ok else {}, (row.get("us_per_token") or {}) if ok else {}
        speed = f"{_num(ts.get('median'))} ({_num(ts.get('min'))}–{_num(ts.get('max'))})" if ts else "–"
        gate = gate_cell(row)
        notes = _notes(row)
        if notes:
            gate = f"{gate}; {'; '.join(notes)}" if gate not in ("not run", "–") or ok else "; ".join(notes)
        cells = [engine_name(row), speed, _num(us.get("median")), _num(row.get("eff_bw_tbs") if ok else None, "{:.2f}"),
                 _num(row.get("tok_per_joule") if ok else None, "{:.2f}"), ratio_cell(row) if ok else "–",
                 gate, quality_cell(row, quality), f"`{name}` ({when[:10]})"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _args_line(files: list[str], qfiles: list[str]) -> str:
    return " ".join(files) + (" --quality " + " ".join(qfiles) if qfiles else "")


def block(files: list[str], qfiles: list[str], root: Path) -> str:
    sources = [(f, load_results(root / f)) for f in files]
    quality = {}
    for f in qfiles:
        q = load_quality(root / f)
        quality[q["format"]] = (f, q)
    return (f"{BEGIN} {_args_line(files, qfiles)} -->\n"
            "<!-- generated by `python -m monolith.readme_table --write`: edit the sources, not this table -->\n"
            + render_table(sources, quality) + END)


def find_block(text: str, readme: Path) -> tuple[int, int, list[str], list[str]]:
    m = _BEGIN_RE.search(text)
    end = text.find(END)
    if not m or end < m.end() or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise MonolithError(f"{readme}: needs exactly one '{BEGIN} FILES... -->' line and one '{END}' after it")
    words = m.group("args").split()
    files, qfiles, cur = [], [], None
    for w in words:
        if w == "--quality":
            cur = qfiles
        else:
            (cur if cur is not None else files).append(w)
    return m.start(), end + len(END), files, qfiles


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m monolith.readme_table",
        description="Render README's results table from results files (one row per engine, the newest run's "
                    "row; quantized rows name the implementation and quality gates). Without FILEs, "
                    "--check/--write use the files named in README's begin marker.")
    ap.add_argument("files", nargs="*", help="results files (schema monolith-results/1), paths relative to the repository")
    ap.add_argument("--quality", nargs="+", default=None, metavar="Q.json",
                    help="quality runs (monolith eval quality) whose gates judge the rows of their weight format")
    ap.add_argument("--readme", type=Path, default=None, help="the README to check or rewrite (default: README.md)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table between the README's markers")
    mode.add_argument("--check", action="store_true", help="exit 1 when the README's table differs from the render")
    a = ap.parse_args(argv)
    from monolith import REPO_ROOT

    readme = a.readme or REPO_ROOT / "README.md"
    root = readme.resolve().parent
    try:
        files, qfiles = list(a.files), list(a.quality or [])
        if a.write or a.check:
            if not readme.is_file():
                raise MonolithError(f"{readme}: no such file")
            text = readme.read_text()
            start, stop, mfiles, mq = find_block(text, readme)
            if not files:
                files, qfiles = mfiles, (qfiles or mq)
            if not files:
                raise MonolithError(f"{readme}: its begin marker names no results file; name them on the command line")
            new = block(files, qfiles, root)
            if a.check:
                if text[start:stop] != new:
                    print(f"{readme}: the results table differs from what {_args_line(files, qfiles)} give; "
                          "run python -m monolith.readme_table --write", file=sys.stderr)
                    return 1
                print(f"{readme}: results table matches {_args_line(files, qfiles)}")
                return 0
            readme.write_text(text[:start] + new + text[stop:])
            print(f"{readme}: results table rewritten from {_args_line(files, qfiles)}")
            return 0
        if not files:
            raise MonolithError("name at least one results file (or use --check / --write with README's marker)")
        print(block(files, qfiles, Path.cwd()), end="\n")
        return 0
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
