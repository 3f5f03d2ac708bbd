"""Hostile trace files: the Python readers (xray/export.py for the page format, xray/raw.py and
the analyzer for raw traces) against tests/fixtures/traces/, the SAME files the page's reader
(web/src/trace.ts) is tested with in web/tests/unit/hostile.test.ts. Both must give the same
message for each file, and open the files that must open."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from monolith import REPO_ROOT
from monolith.errors import MonolithError
from monolith.xray import export, raw
from monolith.xray.analyze import analyze, gantt_png
from monolith.xray.phases import load_phases
from monolith.xray.synthetic import generate

FIX = REPO_ROOT / "tests" / "fixtures" / "traces"
CASES = json.loads((FIX / "cases.json").read_text())


@pytest.mark.parametrize("case", CASES["reject"], ids=lambda c: c["file"])
def test_page_reader_refuses(case):
    data = (FIX / case["file"]).read_bytes()
    with pytest.raises(MonolithError) as e:
        export.parse_page_bytes(data, case["file"])
    want = f"{case['file']}: {case['error']}"
    assert str(e.value) == want if not case["error"].endswith(":") else str(e.value).startswith(want)


@pytest.mark.parametrize("case", CASES["accept"], ids=lambda c: c["file"])
def test_page_reader_opens(case):
    t = export.parse_page_bytes((FIX / case["file"]).read_bytes(), case["file"])
    ev = t["events"]
    assert len(ev["block"]) == case["n"]
    scope = {p["id"]: p["scope"] for p in t["phases"]}
    assert sorted({int(L) for p, L in zip(ev["phase"], ev["layer"], strict=True) if scope[p] == "layer"}) == case["layers"]
    ends = [s + d for s, d in zip(ev["start_ns"], ev["dur_ns"], strict=True)]
    assert max(ends) - min(ev["start_ns"]) == case["span_ns"]


def test_fixtures_are_what_the_generator_writes(tmp_path, monkeypatch):
    """The committed fixtures are reproducible from make_hostile.py (nobody edited one by hand)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_hostile", FIX / "make_hostile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "HERE", tmp_path)
    mod.main()
    for p in tmp_path.iterdir():
        assert p.read_bytes() == (FIX / p.name).read_bytes(), p.name


def test_plain_json_past_the_limit_is_refused_before_parsing():
    with pytest.raises(MonolithError, match=f"x.json: trace is larger than {export.MAX_TRACE_BYTES} bytes"):
        export.parse_page_bytes(b" " * (export.MAX_TRACE_BYTES + 1), "x.json")
    assert CASES["limit_bytes"] == export.MAX_TRACE_BYTES


def test_the_page_reader_has_the_same_limits():
    ts = (REPO_ROOT / "web" / "src" / "trace.ts").read_text()

    def const(name):
        m = re.search(rf"export const {name} = ([^;]+);", ts)
        assert m, name
        assert re.fullmatch(r"[\d\s*_]+", m.group(1)), m.group(1)
        return eval(m.group(1))  # noqa: S307 (digits and * only, checked above)

    assert const("MAX_TRACE_BYTES") == export.MAX_TRACE_BYTES
    assert const("MAX_SM_COUNT") == raw.MAX_SM_COUNT
    assert const("MAX_BLOCKS") == raw.MAX_BLOCKS
    assert const("MAX_ID") == raw.MAX_ID


# ---------------------------------------------------------------- raw traces and the analyzer

@pytest.fixture(scope="module")
def small():
    meta, ev = generate(sm_count=12, blocks=10, layers=3, idle_sms=(2, 7), seed=3)
    meta.pop("truth")
    return meta, ev


@pytest.mark.parametrize("case", [c for c in CASES["reject"] if "raw_meta" in c], ids=lambda c: c["file"])
def test_raw_reader_refuses_the_same_meta(case, small, tmp_path):
    meta, ev = small
    bad = dict(meta, **{k: float(v) if isinstance(v, str) else v for k, v in case["raw_meta"].items()})
    key = next(iter(case["raw_meta"]))
    with pytest.raises(MonolithError, match=key):
        raw.validate_raw(bad, ev)
    with pytest.raises(MonolithError, match=key):
        analyze(bad, ev)  # refused before anything is allocated per SM or per block
    with pytest.raises(MonolithError, match=key):
        raw.save_raw(tmp_path / "x.raw.npz", bad, ev)


def test_raw_ids_past_the_meta_are_refused(small):
    meta, ev = small
    ev = ev.copy()
    ev[0, raw.COL["block"]] = meta["blocks"]
    with pytest.raises(MonolithError, match="block id 10 >= meta blocks 10"):
        raw.validate_raw(meta, ev)


def test_analyzer_handles_no_layer_phases_and_zero_time(small, tmp_path):
    meta, ev = small
    token = [p.id for p in load_phases() if p.scope == "token"]
    only = ev[np.isin(ev[:, raw.COL["phase"]], token)]
    s = analyze(meta, only)
    assert s["layers"]["count"] == 0 and s["layers"]["mean_us"] is None and s["barrier_share"]["wait_share"] is None
    flat = only.copy()
    for a, b in (("g0", "g1"), ("c0", "c1")):
        flat[:, raw.COL[b]] = flat[:, raw.COL[a]] = flat[:, raw.COL[a]].min()
    z = analyze(meta, flat, method="globaltimer")
    assert z["trace_span_us"] == 0 and z["tokens_per_s_from_trace"] is None
    assert any("zero length" in w for w in z["warnings"])
    assert gantt_png(meta, flat, tmp_path / "z.png", method="globaltimer", width_px=200).is_file()


def test_bandwidth_is_measured_from_issue_to_use(small):
    """A phase's loads are issued before the wait that precedes it: its bandwidth window runs from
    that wait's start to the phase's end (gate/up's bytes were streamed during barrier 2)."""
    meta, ev = small
    s = analyze(meta, ev, method="globaltimer")
    ph = {p["name"]: p for p in s["phases"]}
    names = {p.name: p.id for p in load_phases()}
    g0 = ev[:, raw.COL["g0"]] - ev[:, raw.COL["g0"]].min()
    g1 = ev[:, raw.COL["g1"]] - ev[:, raw.COL["g0"]].min()
    lay, pid = ev[:, raw.COL["layer"]], ev[:, raw.COL["phase"]]
    windows = [g1[(pid == names["gateup"]) & (lay == L)].max() - g0[(pid == names["bar_o"]) & (lay == L)].min()
               for L in range(3)]
    assert ph["gateup"]["issue_to_use_per_layer_us"] == pytest.approx(np.mean(windows) / 1e3, rel=1e-6)
    assert ph["gateup"]["bw_issue_to_use_tbs"] < ph["gateup"]["bw_own_span_tbs"]
    assert ph["gateup"]["eff_bw_tbs"] == ph["gateup"]["bw_issue_to_use_tbs"]
    assert "issue to use" in s["bandwidth"]["method"]["per_phase"] and s["bandwidth"]["per_layer_tbs"] > 0
    page = export.page_summary(s)
    assert page["bw_method"] == s["bandwidth"]["method"]["per_phase"]


def test_cases_file_lists_every_fixture():
    listed = {c["file"] for c in CASES["reject"] + CASES["accept"]}
    on_disk = {p.name for p in FIX.iterdir() if p.suffix in (".json", ".gz") and p.name != "cases.json"}
    assert listed == on_disk
    assert Path(FIX / "make_hostile.py").is_file()
