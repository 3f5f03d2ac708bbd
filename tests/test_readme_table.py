"""README's results table is generated from results files (monolith/readme_table.py): the
committed table must be exactly what its named files render, every README number in the table
traces to a file, and the renderer keeps its rules (one row per engine, newest run wins, both
gates named on quantized rows, no speed without a passed gate)."""
import copy
import json
import re

import pytest

from monolith import REPO_ROOT
from monolith import readme_table as rt
from monolith.errors import MonolithError
from monolith.results import SCHEMA, base_row

README = REPO_ROOT / "README.md"


def test_readme_table_is_what_its_results_files_render(capsys):
    """Fails when a results file or the renderer changed and README was not regenerated
    (`python -m monolith.readme_table --write`), or when the table was edited by hand."""
    assert rt.main(["--check"]) == 0, capsys.readouterr().err


def test_readme_names_existing_results_files_and_the_headline_rows():
    text = README.read_text()
    _, _, files, qfiles = rt.find_block(text, README)
    assert files, "the begin marker names no results file"
    for f in files + qfiles:
        assert (REPO_ROOT / f).is_file(), f
        assert f"`{f}`" in text or f in text
    table = text[text.index(rt.BEGIN):text.index(rt.END)]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| monolith `([\w-]+)`.*$", table, re.M)}
    assert set(rows) >= {"bf16-upstream", "fp8-upstream", "bf16-stream", "fp8-stream", "nvfp4-stream"}, sorted(rows)
    for v in ("fp8-upstream", "fp8-stream", "nvfp4-stream"):  # quantized: both gates, by name
        assert "implementation: pass" in rows[v] and "FAIL: agreement" in rows[v], rows[v]
    for v in ("bf16-upstream", "bf16-stream"):
        assert "implementation" not in rows[v]


def test_readme_prose_quality_numbers_match_the_quality_files():
    text = README.read_text()
    for fmt, f in (("FP8", "results/m3_fp8_quality.json"), ("NVFP4", "results/m5_nvfp4_quality.json")):
        q = json.loads((REPO_ROOT / f).read_text())
        assert not q["gates"]["agreement_pass"], f"{f} passes now: README's prose says it fails"
        assert f"{100 * q['gates']['agreement']:.1f} %" in text, (fmt, q["gates"]["agreement"])
        assert f in text


# ---------------------------------------------------------------- the renderer's rules

def _row(engine, tok=None, status="ok", **kw):
    r = base_row(engine, kw.pop("label", engine))
    r["status"] = status
    if status == "ok":
        r["tok_s"] = {"median": tok, "min": tok - 1, "max": tok + 1}
        r["us_per_token"] = {"median": 1e6 / tok}
        r["gate"] = kw.pop("gate", {"passed": True, "prompts": 20, "tokens_per_prompt": 256, "tolerance": 0.5})
    else:
        r["reason"] = kw.pop("reason", "did not run")
        r["gate"] = kw.pop("gate", None)
    r.update(kw)
    return r


def _doc(created, rows):
    return {"schema": SCHEMA, "created": created, "env": {}, "weights": {}, "protocol": {}, "rows": rows}


def _quality(fmt, agreement, ppl_ratio=0.99):
    return {"format": fmt, "engine": {"engine": f"megakernel-{fmt}-upstream on {fmt} weights"},
            "gates": {"agreement": agreement, "agreement_min": 0.9, "agreement_pass": agreement >= 0.9,
                      "ppl_ratio": ppl_ratio, "ppl_limit": 1.02, "ppl_pass": ppl_ratio <= 1.02, "kl": 1.5}}


def _lines(table):
    return [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| engine")]


def test_one_row_per_engine_the_newest_run_wins():
    old = _doc("2026-01-01T00:00:00+00:00", [_row("megakernel-bf16-upstream", 1000.0), _row("hf-eager", 30.0)])
    new = _doc("2026-02-01T00:00:00+00:00", [_row("megakernel-bf16-upstream", 1300.0)])
    for order in ([("old.json", old), ("new.json", new)], [("new.json", new), ("old.json", old)]):
        lines = _lines(rt.render_table(order))
        up = [ln for ln in lines if "bf16-upstream" in ln]
        assert len(up) == 1 and "1,300.0" in up[0] and "`new.json`" in up[0], up
        assert any(ln.startswith("| hf-eager | 30.0 (29.0–31.0)") and "`old.json`" in ln for ln in lines), lines
    # a row merged from an earlier run carries its own time: it loses to a newer file
    merged = _doc("2026-03-01T00:00:00+00:00",
                  [_row("megakernel-bf16-upstream", 900.0, from_earlier_run="2025-12-01T00:00:00+00:00")])
    lines = _lines(rt.render_table([("new.json", new), ("merged.json", merged)]))
    assert [ln for ln in lines if "bf16-upstream" in ln][0].count("1,300.0") == 1


def test_controls_and_quality_only_rows_are_not_engines_and_order_is_by_speed():
    doc = _doc("2026-01-01T00:00:00+00:00", [
        _row("mutant-rope10k", status="failed", control_ok=True, reason="negative control"),
        _row("hf-parallel-fp32", status="not run", reason="quality only", quality={"agreement": 1.0}),
        _row("reference", 20.0), _row("megakernel-bf16-stream", 2000.0),
        _row("vllm", status="not run", reason="vllm not importable (ModuleNotFoundError: x); not installable offline"),
    ])
    lines = _lines(rt.render_table([("a.json", doc)]))
    assert [ln.split("|")[1].strip() for ln in lines] == ["monolith `bf16-stream`", "reference", "vllm"]
    assert "not installable offline" in lines[2] and "ModuleNotFoundError" not in lines[2]
    assert lines[2].split("|")[2].strip() == "–"  # no speed without a run


def test_quantized_rows_name_both_gates_as_measured():
    oracle = {"weights": {"kind": "fp8-dequantized"}}
    fp8 = _row("megakernel-fp8-stream", 2400.0, weight_format="fp8",
               gate={"passed": True, "prompts": 20, "tokens_per_prompt": 256, "tolerance": 0.5, "oracle": oracle})
    doc = _doc("2026-01-01T00:00:00+00:00", [fp8, _row("megakernel-bf16-stream", 2100.0)])
    no_q = _lines(rt.render_table([("a.json", doc)]))[0]
    assert "implementation: pass" in no_q and "dequantized" in no_q and "not measured" in no_q
    failing = _lines(rt.render_table([("a.json", doc)], {"fp8": ("q.json", _quality("fp8", 0.411))}))[0]
    assert "FAIL: agreement 41.1 % (gate ≥ 90 %: fail)" in failing and "measured on `fp8-upstream`" in failing
    assert "ppl ratio 0.990 (gate ≤ 1.02: pass)" in failing and "(`q.json`" in failing
    # a quality run with several (engine, floor) pairs judges each row by its own pair
    q = _quality("fp8", 0.411)
    q["pairs"] = [{"engine": {"engine": "megakernel-fp8-upstream on fp8 weights"}, "gates": _quality("fp8", 0.411)["gates"]},
                  {"engine": {"engine": "megakernel-fp8-stream on fp8 weights"}, "gates": _quality("fp8", 0.412)["gates"]}]
    own_pair = _lines(rt.render_table([("a.json", doc)], {"fp8": ("q.json", q)}))[0]
    assert "agreement 41.2 %" in own_pair and "measured on" not in own_pair, own_pair
    passing = _lines(rt.render_table([("a.json", doc)], {"fp8": ("q.json", _quality("fp8", 0.95))}))[0]
    assert "| pass: agreement 95 %" in passing
    # the row's own gates win over a file's
    own = copy.deepcopy(doc)
    own["rows"][0]["quality"] = {"agreement": 0.5, "gates": _quality("fp8", 0.5)["gates"]}
    assert "agreement 50 %" in _lines(rt.render_table([("a.json", own)], {"fp8": ("q.json", _quality("fp8", 0.95))}))[0]
    bf16 = _lines(rt.render_table([("a.json", doc)]))[1]
    assert "implementation" not in bf16 and "n/a (bf16 weights)" in bf16


def test_failed_gate_rows_show_no_speed_and_say_why():
    det = {"passed": False, "deterministic": False, "prompts": 1, "tokens_per_prompt": 256, "tolerance": 2.0}
    doc = _doc("2026-01-01T00:00:00+00:00", [_row("hf-static", status="failed", gate=det, reason="gate failed")])
    line = _lines(rt.render_table([("a.json", doc)]))[0]
    assert "FAIL: not bitwise deterministic" in line and line.split("|")[2].strip() == "–"


def _write_readme(tmp_path, rows_doc, body_table="stale\n"):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text(json.dumps(rows_doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{rt.BEGIN} results/r.json -->\n{body_table}{rt.END}\n\nafter\n")
    return readme


def test_write_then_check_round_trip_and_drift_is_caught(tmp_path, capsys):
    doc = _doc("2026-01-01T00:00:00+00:00", [_row("megakernel-bf16-stream", 2000.0)])
    readme = _write_readme(tmp_path, doc)
    assert rt.main(["--check", "--readme", str(readme)]) == 1
    assert "differs" in capsys.readouterr().err
    assert rt.main(["--write", "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n") and text.endswith(f"{rt.END}\n\nafter\n") and "2,000.0" in text
    assert rt.main(["--check", "--readme", str(readme)]) == 0
    assert rt.main(["--write", "--readme", str(readme)]) == 0 and readme.read_text() == text  # idempotent
    # a changed result makes the committed table stale
    doc["rows"][0]["tok_s"] = {"median": 2100.0, "min": 2099.0, "max": 2101.0}
    (tmp_path / "results" / "r.json").write_text(json.dumps(doc))
    assert rt.main(["--check", "--readme", str(readme)]) == 1


@pytest.mark.parametrize("content, msg", [
    (None, "no such results file"),
    ("{not json", "cannot be read as JSON"),
    (json.dumps({"schema": "other/1", "rows": []}), "not a results file"),
    (json.dumps(_doc("2026-01-01T00:00:00+00:00", [dict(_row("x", 10.0), gate={"passed": False})])), "invalid results file"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, content, msg):
    readme = _write_readme(tmp_path, {})
    if content is None:
        (tmp_path / "results" / "r.json").unlink()
    else:
        (tmp_path / "results" / "r.json").write_text(content)
    before = readme.read_text()
    assert rt.main(["--write", "--readme", str(readme)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and len(err.splitlines()) == 1
    assert readme.read_text() == before  # nothing lost


def test_markers_must_be_there_once(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    assert rt.main(["--check", "--readme", str(readme)]) == 2
    assert "needs exactly one" in capsys.readouterr().err
    readme.write_text(f"{rt.BEGIN} a.json -->\n{rt.END}\n{rt.BEGIN} b.json -->\n{rt.END}\n")
    assert rt.main(["--check", "--readme", str(readme)]) == 2
    p = tmp_path / "q.json"
    p.write_text(json.dumps({"format": "fp8"}))
    with pytest.raises(MonolithError, match="not a quality file"):
        rt.load_quality(p)
    bad_pair = _quality("fp8", 0.4)
    bad_pair["pairs"] = [{"engine": {}, "gates": {"agreement": 0.4}}]
    p.write_text(json.dumps(bad_pair))
    with pytest.raises(MonolithError, match=r"pairs\[0\]\.gates has no 'agreement_min'"):
        rt.load_quality(p)


def test_help_and_stdout_render(capsys):
    with pytest.raises(SystemExit) as e:
        rt.main(["--help"])
    assert e.value.code == 0 and "--write" in capsys.readouterr().out
    assert rt.main([str(REPO_ROOT / "results" / "m5_nvfp4.json")]) == 0
    out = capsys.readouterr().out
    assert "monolith `fp8-stream`" in out and out.count(rt.BEGIN) == 1


def test_final_matrix_rows_are_read_as_bench_final_writes_them():
    """results/final.json (bench/final.py): gates.implementation / gates.quality on quantized rows,
    speed_label on the HF rows whose gate failed on determinism alone."""
    q_fail = {"passed": False, "agreement": 0.411, "agreement_min": 0.9, "ppl_ratio": 0.988, "ppl_limit": 1.02,
              "kl": 1.43, "source": "results/m3_fp8_quality.json"}
    fp8 = _row("megakernel-fp8-stream", 2400.0, weight_format="fp8",
               gates={"implementation": {"passed": True, "oracle": "fp32 reference on the fp8 weights dequantized"},
                      "quality": q_fail})
    nv = _row("megakernel-nvfp4-stream", 2300.0, weight_format="nvfp4", experimental=True,
              gates={"implementation": {"passed": True}, "quality": {"passed": None, "reason": "--quality none"}})
    hf = _row("hf-static", 240.0, speed_label="ungated: not bitwise deterministic",
              gate={"passed": None, "applicable": False, "verdict": {"passed": False, "deterministic": False}})
    lines = _lines(rt.render_table([("final.json", _doc("2026-12-08T00:00:00+00:00", [fp8, nv, hf]))]))
    assert "implementation: pass" in lines[0] and "FAIL: agreement 41.1 % (gate ≥ 90 %: fail)" in lines[0], lines[0]
    assert "implementation: pass" in lines[1] and "not measured: --quality none" in lines[1], lines[1]
    assert "| 240.0 (239.0–241.0) |" in lines[2] and "ungated: not bitwise deterministic" in lines[2], lines[2]
