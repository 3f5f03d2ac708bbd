"""The final matrix's merge (bench/final.py): one GPU, one window, both gates named, energy on
every row; the page's fixture stays valid."""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pytest

from monolith.bench import final
from monolith.errors import MonolithError
from tests import m6_fakes

FIXTURE = Path(__file__).parent / "fixtures" / "final_example.json"


def test_fixture_is_a_valid_final_matrix():
    doc = json.loads(FIXTURE.read_text())
    assert final.validate_final(doc) == []
    engines = {r["engine"] for r in doc["rows"]}
    assert {f"megakernel-{v}" for v in final.VARIANTS} <= engines
    assert doc["final"]["headline"]["engine"] == "megakernel-fp8-stream"  # nvfp4 is experimental: not headline


def test_merge_writes_json_and_md(tmp_path):
    m6_fakes.write_rows(tmp_path / "rows")
    doc = final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert json.loads((tmp_path / "final.json").read_text())["final"]["gpu_uuid"] == m6_fakes.UUID
    md = (tmp_path / "final.md").read_text()
    assert "ungated: not bitwise deterministic" in md and "implementation gate" in md
    assert doc["final"]["window"]["span_s"] == pytest.approx(9 * 60 + 54)
    h = doc["final"]["headline"]
    assert h["best_baseline"] == "llamacpp-q8_0" and h["speedup"] == pytest.approx(2410 / 760)
    lanes = {x["lane"]: x["engine"] for x in doc["final"]["race"]}
    assert lanes == {"monolith": "megakernel-fp8-stream", "llamacpp": "llamacpp-q8_0", "hf": "hf-compile",
                     "reference-graph": "reference-graph"}


def test_merge_publishes_timelines_and_xray(tmp_path):
    rows = tmp_path / "rows"
    m6_fakes.write_rows(rows, ["megakernel-fp8-stream", "hf-eager"])
    (rows / "timelines").mkdir()
    (rows / "timelines" / "megakernel-fp8-stream.json").write_text('{"t_us": [1.0]}')
    (rows / "xray").mkdir()
    (rows / "xray" / "fp8-stream.raw.npz").write_bytes(b"x")
    root = tmp_path / "repo"
    doc = final.merge(rows, root / "results" / "final.json", publish_root=root)
    r = next(r for r in doc["rows"] if r["engine"] == "megakernel-fp8-stream")
    assert r["timeline"] == "results/timelines/megakernel-fp8-stream.json" and r["xray"] == "results/xray/fp8-stream.raw.npz"
    assert (root / r["timeline"]).read_text() == '{"t_us": [1.0]}'
    assert next(x for x in doc["rows"] if x["engine"] == "hf-eager")["timeline"] is None


def test_merge_refuses_two_gpus(tmp_path):
    m6_fakes.write_rows(tmp_path, ["megakernel-fp8-stream"])
    m6_fakes.write_rows(tmp_path, ["hf-eager"], uuid="GPU-other")
    with pytest.raises(MonolithError, match="different GPUs"):
        final.merge(tmp_path, tmp_path / "final.json")
    assert not (tmp_path / "final.json").exists()


def test_merge_refuses_a_window_over_30_minutes(tmp_path):
    m6_fakes.write_rows(tmp_path, ["megakernel-fp8-stream"])
    m6_fakes.write_rows(tmp_path, ["hf-eager"], start=m6_fakes.T0 + _dt.timedelta(minutes=31))
    with pytest.raises(MonolithError, match="more than one 1800 s lease"):
        final.merge(tmp_path, tmp_path / "final.json")


def test_merge_accepts_29_minutes(tmp_path):
    m6_fakes.write_rows(tmp_path, ["megakernel-fp8-stream"], step_s=10)
    m6_fakes.write_rows(tmp_path, ["hf-eager"], start=m6_fakes.T0 + _dt.timedelta(minutes=28), step_s=10)
    assert final.merge(tmp_path, tmp_path / "final.json")["final"]["window"]["span_s"] == pytest.approx(28 * 60 + 9)


def test_merge_refuses_quick_with_full_and_empty_and_foreign(tmp_path):
    m6_fakes.write_rows(tmp_path / "a", ["megakernel-fp8-stream"])
    m6_fakes.write_rows(tmp_path / "a", ["hf-eager"], quick=True)
    with pytest.raises(MonolithError, match="quick-trial rows and full"):
        final.merge(tmp_path / "a", tmp_path / "f.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MonolithError, match="no row-"):
        final.merge(tmp_path / "empty", tmp_path / "f.json")
    with pytest.raises(MonolithError, match="not a directory"):
        final.merge(tmp_path / "missing", tmp_path / "f.json")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "row-x.json").write_text('{"schema": "monolith-results/1", "rows": []}')
    with pytest.raises(MonolithError, match="expected 'monolith-m6-row/1'"):
        final.merge(tmp_path / "b", tmp_path / "f.json")


def test_merge_refuses_a_row_that_names_another_gpu(tmp_path):
    p = m6_fakes.write_rows(tmp_path, ["megakernel-fp8-stream"])[0]
    d = json.loads(p.read_text())
    d["rows"][0]["gpu_uuid"] = "GPU-else"
    p.write_text(json.dumps(d))
    with pytest.raises(MonolithError, match="names GPU GPU-else"):
        final.merge(tmp_path, tmp_path / "final.json")


@pytest.mark.parametrize("breakit, msg", [
    (lambda r: r.update(energy=None), "energy needs method"),
    (lambda r: r["energy"].update(method="not measured"), "needs a reason"),
    (lambda r: r.update(tok_per_joule=None), "measured energy but tok_per_joule"),
    (lambda r: r.update(sweep=None), "needs the position sweep"),
    (lambda r: r.update(gates=None), "needs gates"),
    (lambda r: r["gates"]["quality"].update(passed="FAIL"), "gates.quality needs passed"),
    (lambda r: r.update(gpu_uuid="GPU-x"), "is not the matrix's"),
])
def test_validate_final_catches(breakit, msg):
    doc = json.loads(FIXTURE.read_text())
    r = next(r for r in doc["rows"] if r["engine"] == "megakernel-fp8-stream")
    breakit(r)
    assert any(msg in e for e in final.validate_final(doc)), final.validate_final(doc)


def test_ungated_row_keeps_its_failed_verdict():
    doc = json.loads(FIXTURE.read_text())
    r = next(r for r in doc["rows"] if r["engine"] == "hf-static")
    r["gate"].pop("verdict")
    errs = final.validate_final(doc)
    assert any("keeps its measured (failed) verdict" in e or "may be ungated" in e for e in errs), errs


def test_invalid_merge_is_kept_not_written(tmp_path):
    p = m6_fakes.write_rows(tmp_path / "rows", ["megakernel-fp8-stream"])[0]
    d = json.loads(p.read_text())
    d["rows"][0]["energy"] = None
    p.write_text(json.dumps(d))
    with pytest.raises(MonolithError, match="final matrix invalid"):
        final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert not (tmp_path / "final.json").exists() and (tmp_path / "final.invalid.json").exists()


def test_a_row_with_a_nan_is_refused_kept_and_blocks_the_merge(tmp_path):
    """A non-finite number in a row is a failed measurement: the row file is not written (JSON has
    no NaN, and a null would read as 'not measured'), the rest is kept beside it as
    row-<engine>.invalid.json, and a merge of that directory refuses instead of leaving it out."""
    rows = tmp_path / "rows"
    m6_fakes.write_rows(rows, ["megakernel-bf16-stream"])
    r = m6_fakes.row("megakernel-fp8-stream")
    r["tok_s"]["median"] = float("nan")
    with pytest.raises(MonolithError, match=r"row-megakernel-fp8-stream\.json: not written .*tok_s\.median is nan"):
        final.write_row_file(rows, "megakernel-fp8-stream", [r], gpu_uuid=m6_fakes.UUID, gpu="NVIDIA H200",
                             started=m6_fakes.T0.isoformat(), ended=m6_fakes.T0.isoformat(), env=m6_fakes.ENV,
                             weights=m6_fakes.WEIGHTS, protocol={"quick": False})
    assert not (rows / "row-megakernel-fp8-stream.json").exists()
    kept = json.loads((rows / "row-megakernel-fp8-stream.invalid.json").read_text())
    assert kept["rows"][0]["tok_s"]["median"] is None and kept["rows"][0]["tok_s"]["runs"]
    with pytest.raises(MonolithError, match=r"row-megakernel-fp8-stream\.invalid\.json is a row refused"):
        final.merge(rows, tmp_path / "final.json")
    assert not (tmp_path / "final.json").exists()


def test_a_row_file_with_a_bare_nan_is_refused_in_one_line(tmp_path):
    p = m6_fakes.write_rows(tmp_path / "rows", ["megakernel-fp8-stream"])[0]
    p.write_text(p.read_text().replace('"median": 2410.0', '"median": NaN', 1))
    with pytest.raises(MonolithError, match="NaN") as e:
        final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert "\n" not in str(e.value) and not (tmp_path / "final.json").exists()


def test_a_partial_matrix_names_the_engines_it_lacks(tmp_path):
    m6_fakes.write_rows(tmp_path / "rows")
    full = final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert full["final"]["absent"] == [] and "Not in this matrix" not in (tmp_path / "final.md").read_text()
    rows = tmp_path / "part"
    m6_fakes.write_rows(rows, ["megakernel-fp8-stream", "hf-eager"])
    doc = final.merge(rows, tmp_path / "part.json")
    assert "hf-static" in doc["final"]["absent"] and "llamacpp" in doc["final"]["absent"]
    assert "megakernel-fp8-stream" not in doc["final"]["absent"] and "hf-eager" not in doc["final"]["absent"]
    assert "Not in this matrix (no row file from this lease): megakernel-bf16-upstream" in (tmp_path / "part.md").read_text()
