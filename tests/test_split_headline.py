"""scripts/split_headline.py: one harness run of the four headline engines into the two headline
files, NVFP4's quality carried with a sentence saying why."""
import importlib.util
import json
import sys

import pytest

from monolith import REPO_ROOT


def _mod():
    spec = importlib.util.spec_from_file_location("split_headline_under_test", REPO_ROOT / "scripts" / "split_headline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(engines):
    return {"schema": "monolith-results/1", "env": {"gpu": "G"}, "protocol": {"runs": 5}, "weights": {"seed": 0},
            "rows": [{"engine": e, "tok_s": {"median": float(i)}, "quality": None} for i, e in enumerate(engines)]}


PREV = {"rows": [{"engine": "megakernel-nvfp4-stream", "quality": {"ppl": 3.0, "source": "old run; this row's gate lists 122"}}]}


def test_split_writes_both_files_and_carries_the_quality(tmp_path, monkeypatch):
    mod = _mod()
    run = _run(["megakernel-bf16-upstream", "megakernel-bf16-stream", "megakernel-fp8-stream", "megakernel-nvfp4-stream"])
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "prev.json").write_text(json.dumps(PREV))
    b, n = tmp_path / "b.json", tmp_path / "n.json"
    monkeypatch.setattr(sys, "argv", ["split_headline.py", str(tmp_path / "run.json"), "--previous-nvfp4",
                                      str(tmp_path / "prev.json"), "--label", "L", "--quality-why", "same SASS",
                                      "--about", "A", "--out-bf16", str(b), "--out-nvfp4", str(n)])
    mod.main()
    bd, nd = json.loads(b.read_text()), json.loads(n.read_text())
    assert [r["engine"] for r in bd["rows"]] == ["megakernel-bf16-upstream", "megakernel-bf16-stream"]
    assert [r["engine"] for r in nd["rows"]] == ["megakernel-fp8-stream", "megakernel-nvfp4-stream"]
    assert bd["env"] == run["env"] and nd["protocol"] == run["protocol"] and "rows" in bd
    assert bd["note"].startswith("L: rows taken from ") and bd["note"].endswith(". A")
    assert nd["note"] == bd["note"] + "; nvfp4's quality carried with its source"
    assert nd["rows"][1]["quality"] == {"ppl": 3.0, "source": "old run; same SASS; this row's gate lists 122"}
    assert nd["rows"][0]["quality"] is None  # only nvfp4's is carried


def test_split_refuses_a_missing_engine_or_a_source_without_the_mark():
    mod = _mod()
    with pytest.raises(SystemExit, match="megakernel-nvfp4-stream"):
        mod.split(_run(["megakernel-bf16-upstream", "megakernel-bf16-stream", "megakernel-fp8-stream"]), "r", PREV, "L", "w")
    full = _run(["megakernel-bf16-upstream", "megakernel-bf16-stream", "megakernel-fp8-stream", "megakernel-nvfp4-stream"])
    bad = {"rows": [{"engine": "megakernel-nvfp4-stream", "quality": {"source": "no mark here"}}]}
    with pytest.raises(SystemExit, match="gate lists"):
        mod.split(full, "r", bad, "L", "w")
