import copy
import gzip
import json

import numpy as np
import pytest

from monolith import REPO_ROOT
from monolith.errors import MonolithError
from monolith.xray.analyze import align, analyze
from monolith.xray.export import (
    dumps_page,
    parse_page_bytes,
    read_page,
    to_page,
    to_perfetto,
    validate_page_trace,
    write_page,
    write_perfetto,
)
from monolith.xray.phases import load_phases
from monolith.xray.synthetic import generate


@pytest.fixture(scope="module")
def trace():
    return generate(sm_count=20, blocks=16, layers=4, idle_sms=(3, 11, 19, 0), seed=2)


@pytest.fixture(scope="module")
def page(trace):
    return to_page(*trace, summary=analyze(*trace))


def test_roundtrip_raw_page_parsed(tmp_path, trace, page):
    meta, ev = trace
    p = write_page(page, tmp_path / "v.json.gz")
    back = read_page(p)
    assert back == json.loads(json.dumps(page))
    # the page's intervals are the raw intervals, aligned and rounded to ns
    al = align(meta, ev)
    want = sorted(zip(ev[:, 0].tolist(), ev[:, 2].tolist(), ev[:, 3].tolist(),
                      np.rint(al["start_ns"]).astype(int).tolist(), np.rint(al["end_ns"]).astype(int).tolist(), strict=True))
    e = back["events"]
    got = sorted(zip(e["block"], e["phase"], e["layer"], e["start_ns"],
                     [s + d for s, d in zip(e["start_ns"], e["dur_ns"], strict=True)], strict=True))
    assert got == want
    assert min(e["start_ns"]) == 0
    assert {b["block"]: b["sm"] for b in back["blocks"]} == {int(b): int(s) for b, s in zip(ev[:, 0], ev[:, 1], strict=True)}
    assert back["phases"] == [p.as_dict() for p in load_phases()]
    assert back["meta"]["clock_alignment"]["method"].startswith("per-SM")
    assert "truth" not in back["meta"] and back["meta"]["synthetic"] is True


def test_gzip_is_deterministic(page):
    assert dumps_page(page) == dumps_page(copy.deepcopy(page))


def test_plain_json_accepted(page):
    assert parse_page_bytes(json.dumps(page).encode())["format"] == "monolith-xray"


def test_truncated_gzip_and_not_json(page):
    data = dumps_page(page)
    with pytest.raises(MonolithError, match="truncated gzip"):
        parse_page_bytes(data[: len(data) // 2])
    with pytest.raises(MonolithError, match="not JSON"):
        parse_page_bytes(b"{not json")
    with pytest.raises(MonolithError, match="not JSON"):
        parse_page_bytes(gzip.compress(b"[1, 2"))


def _set(path, value):
    def f(o):
        *head, last = path
        for k in head:
            o = o[k]
        if value is _DEL:
            del o[last]
        else:
            o[last] = value
    return f


_DEL = object()

# one mutation per rule of FORMAT.md, with the message it must produce
CASES = [
    (lambda o: o.clear() or o.update({"x": 1}), "not a monolith-xray trace"),
    (_set(["format"], "chrome-trace"), "not a monolith-xray trace"),
    (_set(["version"], "1"), "version must be an integer"),
    (_set(["version"], 2), "unsupported version 2"),
    (_set(["meta"], _DEL), "missing field 'meta'"),
    (_set(["events"], []), "events must be an object"),
    (_set(["phases"], {}), "phases must be an array"),
    (_set(["meta", "variant"], _DEL), "missing field meta.variant"),
    (_set(["meta", "sm_count"], 0), r"meta.sm_count must be an integer in \[1, 1024\], got 0"),
    (_set(["meta", "token_time_us"], -1), "meta.token_time_us must be a finite number > 0 or null, got -1"),
    (_set(["summary"], []), "summary must be an object"),
    (_set(["phases"], []), "phases must not be empty"),
    (_set(["phases", 1, "id"], 0), "duplicate phase id"),
    (_set(["phases", 0, "kind"], "busy"), r"phases\[0\].kind"),
    (_set(["phases", 0, "scope"], "block"), r"phases\[0\].scope"),
    (_set(["phases", 0, "color"], "red"), r"phases\[0\].color"),
    (_set(["phases", 2, "name"], _DEL), r"missing field phases\[2\].name"),
    (_set(["blocks", 0, "sm"], 20), r"blocks\[0\].sm"),
    (_set(["blocks", 1, "block"], 0), r"blocks\[1\].block"),
    (_set(["events", "dur_ns"], _DEL), "missing field events.dur_ns"),
    (lambda o: o["events"]["layer"].pop(), "event columns differ in length"),
    (lambda o: [o["events"][c].clear() for c in o["events"]], "events are empty"),
    (_set(["events", "start_ns", 5], 1.5), r"events.start_ns\[5\] must be an integer"),
    (_set(["events", "block", 5], True), r"events.block\[5\] must be an integer"),
    (_set(["events", "phase", 7], 99), r"events.phase\[7\]: unknown phase id 99"),
    (_set(["events", "block", 3], 999), r"events.block\[3\]: unknown block"),
    (_set(["events", "layer", 3], -1), r"events.layer\[3\]: layer outside \[0, 65535\] -1"),
    (_set(["events", "start_ns", 3], -4), r"events.start_ns\[3\]: negative start"),
    (_set(["events", "dur_ns", 17], -3), r"events.dur_ns\[17\]: negative duration -3"),
]


@pytest.mark.parametrize("mutate,msg", CASES)
def test_validation_rules(page, mutate, msg):
    bad = copy.deepcopy(page)
    mutate(bad)
    with pytest.raises(MonolithError, match=msg):
        validate_page_trace(bad)


def test_top_level_not_object():
    with pytest.raises(MonolithError, match="must be a JSON object"):
        validate_page_trace([1, 2])


def test_extra_fields_allowed(page):
    ok = copy.deepcopy(page)
    ok["future"] = {"x": 1}
    ok["meta"]["new_key"] = 3
    validate_page_trace(ok)


def test_perfetto_structure(tmp_path, trace):
    meta, ev = trace
    pf = to_perfetto(meta, ev)
    assert pf["displayTimeUnit"] == "ns"
    evs = pf["traceEvents"]
    x = [e for e in evs if e["ph"] == "X"]
    idle = [e for e in x if e["cat"] == "idle"]
    assert len(x) - len(idle) == len(ev)
    assert sorted(e["pid"] for e in idle) == sorted(meta["truth"]["idle_sms"])
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(procs) == set(range(meta["sm_count"]))
    assert all("idle" in procs[s] for s in meta["truth"]["idle_sms"])
    threads = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(int(s), int(b)) for b, s in zip(ev[:, 0], ev[:, 1], strict=True)}
    names = {p.name for p in load_phases()}
    for e in x:
        assert e["ts"] >= 0 and e["dur"] >= 0
        if e["cat"] != "idle":
            assert e["name"] in names and e["cat"] in ("work", "wait") and "layer" in e["args"]
    p = write_perfetto(pf, tmp_path / "t.perfetto.json.gz")
    assert json.loads(gzip.decompress(p.read_bytes()))["traceEvents"][0]["ph"] == "M"
    q = write_perfetto(pf, tmp_path / "t.json")
    assert json.loads(q.read_text())["displayTimeUnit"] == "ns"


def test_committed_sample_is_valid_and_small():
    p = REPO_ROOT / "web" / "public" / "traces" / "sample-synthetic.json.gz"
    page = read_page(p)
    assert page["meta"]["synthetic"] is True
    assert page["meta"]["sm_count"] == 132 and page["meta"]["blocks"] == 128
    assert len({b["sm"] for b in page["blocks"]}) == 128
    # it models the bf16-upstream schedule: every one of that schedule's phases, and only phases of
    # the table (which also lists the streaming schedule's, absent here)
    used, ids = set(page["events"]["phase"]), {p.name: p.id for p in load_phases()}
    upstream = ("qkv", "bar_qkv", "attn", "prefetch", "flag_kv", "flag_attn", "oproj", "bar_o", "gateup", "bar_gateup",
                "down", "bar_down", "lmhead", "argmax")
    assert used == {ids[n] for n in upstream}
    assert p.stat().st_size < 400_000
