"""Phase fidelity (monolith.xray.fidelity; scripts/xray_overhead.py --fidelity-layer) without a GPU:
the stop-point table against the kernel sources, synthetic X-ray buffers of both schedules through
the real decoder and aligner, the pass rule, the launch protocol on a fake engine, and the script's
JSON on fakes."""

import json
import re
import sys
import types

import numpy as np
import pytest
import torch

from monolith import REPO_ROOT
from monolith.errors import MonolithError
from monolith.xray import fidelity as F
from monolith.xray.analyze import align
from monolith.xray.phases import by_name
from monolith.xray.raw import COMPACT_HEADER_WORDS, COMPACT_MAGIC, SLOT_BYTES, decode_buffer

SHIPPED = ("bf16-upstream", "fp8-upstream", "bf16-stream", "fp8-stream", "nvfp4-stream")
KERNEL = REPO_ROOT / "kernel"
ID = {n: p.id for n, p in by_name().items()}
# a whole launch's (stop_layer, stop_phase), as MegakernelEngine._launch passes it by default
FULL = (F.stop_phase_values()["kStopNever"],) * 2

# One layer of each schedule as thread 0 of every block closes its intervals (a simplified but
# faithful order: kernel/schedule_upstream.cuh, kernel/schedule_stream.cuh and its phase_*.cuh)
LAYER_RECORDS = {
    "upstream": [
        "qkv",
        "arrive",
        "bar_qkv",
        "attn",
        "flag_attn",
        "oproj",
        "arrive",
        "bar_o",
        "gateup",
        "arrive",
        "bar_gateup",
        "down",
        "arrive",
        "bar_down",
    ],
    "stream": [
        "s_wait_resid",
        "s_gather",
        "s_qkv",
        "s_wait_qkv",
        "s_gather",
        "s_attn",
        "s_wait_attn",
        "s_oproj",
        "s_wait_o",
        "s_gather",
        "s_mlp",
        "ring",
        "s_mlp",
        "s_wait_act",
        "s_gather",
        "s_down",
    ],
}
HEAD_RECORDS = {"upstream": ["lmhead", "argmax"], "stream": ["s_wait_final", "lmhead", "argmax"]}
NUM_LAYERS = 28
G0, C0 = 1_700_000_000_000, 5_000_000  # globaltimer (ns) and clock64 at the token's start; 2 cycles per ns


def synthetic_trace(schedule, blocks=4, slow=None):
    """A compact X-ray buffer of one token and the truth: {(layer, record): the latest end over blocks
    (ns from the first block's entry)} and the span. slow: {(layer, i): extra ns} on the last block (the
    latest at every record), i the index of the record in its layer's LAYER_RECORDS."""
    slots = 100  # 100 x 40 B = 500 words per block: 28 x 16 + 3 records fit
    recs = [(L, i, r) for L in range(NUM_LAYERS) for i, r in enumerate(LAYER_RECORDS[schedule])] + [
        (NUM_LAYERS, -1, r) for r in HEAD_RECORDS[schedule]
    ]
    buf, last = b"", {}
    for b in range(blocks):
        t = 10 * b  # block b enters 10 ns after block b - 1
        w = np.zeros(slots * SLOT_BYTES // 8, np.uint64)
        w[0], w[1] = COMPACT_MAGIC, (b << 32) | (b + 3)
        w[2], w[3], w[4] = G0 + t, C0 + 2 * t, (1 << 32) | 40
        for n, (L, i, r) in enumerate(recs):
            t += 50 + 7 * (len(r) % 5) + 3 * b + L % 3 + (slow or {}).get((L, i), 0) * (b == blocks - 1)
            w[COMPACT_HEADER_WORDS + n] = ((ID[r] + 1) << 48) | (L << 32) | ((C0 + 2 * t) & 0xFFFFFFFF)
            last[(L, r)] = max(last.get((L, r), 0), t)
        w[5], w[6], w[7] = G0 + t, C0 + 2 * t, (1 << 32) | 40
        buf += w.tobytes()
    span = max(last.values())
    return np.frombuffer(buf, np.uint8), slots, last, span


def decoded(schedule, **kw):
    buf, slots, truth, span = synthetic_trace(schedule, **kw)
    ev, add = decode_buffer(buf, kw.get("blocks", 4), slots)
    al = align({"sm_clock_mhz": None, **add}, ev)
    return (ev, al["start_ns"], al["end_ns"]), truth, span


def plain_samples(points, truth, span, const_us=3.0, reps=9, noise_us=0.05):
    """Stopped launches that see exactly the truth: a constant plus the milestone, with +- noise."""
    jit = [noise_us * ((i % 3) - 1) for i in range(reps)]
    out = {p.key: [const_us + truth[(p.layer, p.record)] / 1e3 + j for j in jit] for p in points}
    out["token"] = [const_us + span / 1e3 + j for j in jit]
    return out


# ---------------------------------------------------------------- the schedule and the table


def test_each_shipped_variant_has_its_schedule_from_the_variant_table():
    assert {v: F.schedule_of(v) for v in SHIPPED} == {
        "bf16-upstream": "upstream",
        "fp8-upstream": "upstream",
        "bf16-stream": "stream",
        "fp8-stream": "stream",
        "nvfp4-stream": "stream",
    }
    # the archived port guessed from the name; "upstream" contains "stream"
    assert "stream" in "bf16-upstream" and F.schedule_of("bf16-upstream") == "upstream"
    with pytest.raises(MonolithError, match="unknown kernel variant 'nope'"):
        F.schedule_of("nope")


def test_stop_points_follow_the_schedule_and_config_cuh():
    vals = F.stop_phase_values()
    assert vals["kStopQKV"] == 0 and vals["kStopDown"] == 4 and vals["kStopNever"] == 99
    up = F.stop_points("upstream", 14)
    assert [p.key for p in up] == [
        "L13.bar_down",
        "L14.bar_qkv",
        "L14.flag_attn",
        "L14.bar_o",
        "L14.bar_gateup",
        "L14.bar_down",
    ]
    assert [(p.layer, p.phase) for p in up] == [(13, 4), (14, 0), (14, 1), (14, 2), (14, 3), (14, 4)]
    st = F.stop_points("stream", 14)
    assert [p.key for p in st] == ["L13.s_down", "L14.s_qkv", "L14.s_wait_attn", "L14.s_wait_o", "L14.s_down"]
    assert [(p.layer, p.phase) for p in st] == [(13, 4), (14, 0), (14, 1), (14, 2), (14, 4)]
    for bad in (0, 28, True, 3.0):
        with pytest.raises(MonolithError, match="the layer must be in 1..27"):
            F.stop_points("stream", bad)
    with pytest.raises(MonolithError, match="unknown schedule"):
        F.stop_points("pipelined", 3)
    assert all(r in ID for recs in F.STOP_RECORDS.values() for _, r in recs)


def _expand(path, seen=()):
    """A schedule file with its phase fragments (#include "phase_*.cuh") inlined, as the compiler sees
    the consumer's body."""
    text = path.read_text()
    return re.sub(r'^\s*#include "(phase_\w+\.cuh)"\s*$', lambda m: _expand(KERNEL / m.group(1)), text, flags=re.M)


def _balanced(text, i, open_, close):
    """The index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += {open_: 1, close: -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    raise AssertionError("unbalanced")


def kernel_stop_returns(text):
    """{StopPhase name: (offset of its `if`, the last XRAY_END(<phase>, L) before it)} for every `if`
    whose condition names a kStop* stop (not a fault injection's) and whose body returns."""
    out = {}
    code = re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)  # offsets kept
    for m in re.finditer(r"\bif\s*\(", code):
        c_end = _balanced(code, m.end() - 1, "(", ")")
        cond = code[m.end() : c_end - 1]
        stops = re.findall(r"(?:stop_after\(L, |p\.stop_phase == )(kStop\w+)\b", cond)
        if not stops or "kStopNever" in stops:
            continue
        rest = code[c_end:].lstrip()
        start = len(code) - len(rest)
        body = code[start : _balanced(code, start, "{", "}")] if rest.startswith("{") else rest[: rest.index(";") + 1]
        if "return" not in body:
            continue
        ends = re.findall(r"XRAY_END\((\w+), L\)", code[: m.start()])
        for s in stops:
            assert s not in out, f"{s} returns at two places"
            out[s] = (m.start(), ends[-1])
    return out


@pytest.mark.parametrize("schedule,source", [("upstream", "schedule_upstream.cuh"), ("stream", "schedule_stream.cuh")])
def test_the_stop_record_table_is_what_the_kernel_does(schedule, source):
    """Each listed stop returns right after the XRAY_END of its record (no other XRAY_END between),
    every StopPhase of a layer is honoured, and a stop left out of the table returns at the same
    statement as a listed one (a segment of zero)."""
    found = kernel_stop_returns(_expand(KERNEL / source))
    layer_stops = {"kStopQKV", "kStopAttn", "kStopO", "kStopGateUp", "kStopDown"}
    assert set(found) == layer_stops
    table = dict(F.STOP_RECORDS[schedule])
    assert {s: found[s][1] for s in table} == table
    for s in layer_stops - set(table):
        assert any(found[s][0] == found[t][0] for t in table), (s, found)
    assert F.LAST_STOP in table


def test_the_plain_and_the_xray_build_stop_alike():
    """Both builds compile the same schedule sources; no stop test sits under a MONOLITH_XRAY
    conditional, and the X-ray macros hold no control flow."""
    files = [KERNEL / "schedule_upstream.cuh", KERNEL / "schedule_stream.cuh", *sorted(KERNEL.glob("phase_*.cuh"))]
    for f in files:
        stack = []
        for n, line in enumerate(f.read_text().splitlines(), 1):
            d = line.strip()
            if d.startswith("#if"):
                stack.append("MONOLITH_XRAY" in d)
            elif d.startswith("#endif"):
                stack.pop()
            elif any(stack):
                assert "stop_" not in line and "kStop" not in line, f"{f.name}:{n}: {line.strip()}"
    xr = re.sub(r"\\\n", " ", (KERNEL / "xray.cuh").read_text())  # continued lines joined
    macros = re.findall(r"#define (XRAY_\w+)\(.*?\)\s+(.*)", xr)
    assert {"XRAY_END", "XRAY_BEGIN", "XRAY_INIT", "XRAY_STAMP"} <= {m for m, _ in macros}
    assert any("xr.stamp(g, c)" in body for m, body in macros if m == "XRAY_STAMP")  # (joined)
    assert not [m for m, body in macros if re.search(r"\b(return|break|continue|goto)\b", body)]


def test_the_source_scan_sees_a_moved_stamp():
    text = _expand(KERNEL / "schedule_upstream.cuh").replace(
        "XRAY_END(bar_o, L);\n    if (p.stop_layer == L && p.stop_phase == kStopO) return;",
        "if (p.stop_layer == L && p.stop_phase == kStopO) return;\n    XRAY_END(bar_o, L);",
    )
    assert kernel_stop_returns(text)["kStopO"][1] == "oproj"  # a table that says bar_o would then fail


# ---------------------------------------------------------------- milestones on synthetic traces


@pytest.mark.parametrize("variant", SHIPPED)
def test_a_synthetic_trace_of_each_schedule_meets_its_stopped_launches(variant):
    """The upstream case that failed on the device ("no s_down record of layer 13") included: an
    upstream trace is read with the upstream records."""
    sched = F.schedule_of(variant)
    tr, truth, span = decoded(sched)
    pts = F.stop_points(sched, 14)
    miles = F.trace_milestones(tr[0], tr[2], pts, variant)
    assert miles == {p.key: pytest.approx(truth[(p.layer, p.record)], abs=1.0) for p in pts}
    res = F.evaluate(variant, pts, plain_samples(pts, truth, span), span / 1e3 * 1.01, [tr, tr])
    assert res["pass"] and res["failed"] == []
    assert len(res["segments"]) == len(pts) and res["segments"][-1]["what"] == "layer"
    for r in res["segments"]:
        assert abs(r["error_us"]) < 0.005 and r["trace_us"] > 0
    assert res["segments"][-1]["plain_us"] == pytest.approx(
        (truth[(14, F.STOP_RECORDS[sched][-1][1])] - truth[(13, F.STOP_RECORDS[sched][-1][1])]) / 1e3, abs=0.005
    )
    assert res["token"]["rel_error"] == pytest.approx(1 / 1.01 - 1, abs=1e-3) and res["token"]["pass"]
    assert res["token"]["plain_launch_us"] == pytest.approx(3.0 + span / 1e3, abs=1e-3)


def test_stream_records_on_an_upstream_trace_name_what_is_missing():
    tr, _, _ = decoded("upstream")
    with pytest.raises(MonolithError) as e:
        F.trace_milestones(tr[0], tr[2], F.stop_points("stream", 14), "bf16-upstream")
    msg = str(e.value)
    assert msg == (
        "fidelity: bf16-upstream: the trace has no s_down record of layer 13 (stop point kStopDown, stream schedule)"
    )


def test_a_missing_record_is_one_clear_line_naming_variant_layer_and_record():
    (ev, s, e), truth, span = decoded("upstream")
    keep = ~((ev[:, 2] == ID["bar_down"]) & (ev[:, 3] == 13))
    pts = F.stop_points("upstream", 14)
    with pytest.raises(MonolithError) as err:
        F.evaluate("fp8-upstream", pts, plain_samples(pts, truth, span), span / 1e3, [(ev[keep], s[keep], e[keep])])
    msg = str(err.value)
    assert "\n" not in msg and "fp8-upstream" in msg and "layer 13" in msg and "bar_down" in msg


def test_a_trace_that_misplaces_a_phase_fails_that_segment_and_the_next():
    """The last block's s_wait_o of layer 14 ends 400 ns later in the trace than in the plain kernel
    (the s_gather after it 400 ns shorter): the segment into it reads 0.4 µs long and the one after
    it 0.4 µs short; the whole layer is unchanged."""
    pts = F.stop_points("stream", 14)
    _, truth, span = decoded("stream")
    i = LAYER_RECORDS["stream"].index("s_wait_o")
    tr, truth_slow, _ = decoded("stream", slow={(14, i): 400, (14, i + 1): -400})
    assert truth_slow[(14, "s_wait_o")] == truth[(14, "s_wait_o")] + 400
    assert truth_slow[(14, "s_down")] == truth[(14, "s_down")]
    res = F.evaluate("bf16-stream", pts, plain_samples(pts, truth, span), span / 1e3, [tr])
    bad = {f"{r['from']}->{r['to']}": r for r in res["segments"] if not r["pass"]}
    assert set(bad) == {"L14.s_wait_attn->L14.s_wait_o", "L14.s_wait_o->L14.s_down"}
    gap = truth_slow[(14, "s_wait_o")] - truth[(14, "s_wait_o")]
    assert bad["L14.s_wait_attn->L14.s_wait_o"]["error_us"] == pytest.approx(gap / 1e3, abs=0.005)
    assert bad["L14.s_wait_o->L14.s_down"]["error_us"] == pytest.approx(-gap / 1e3, abs=0.005)
    assert res["segments"][-1]["pass"] and not res["pass"]
    assert res["failed"] == ["L14.s_wait_attn->L14.s_wait_o", "L14.s_wait_o->L14.s_down"]


# ---------------------------------------------------------------- the rule and the statistics


def test_the_pass_rule_constants_and_limits():
    assert (F.TOKEN_PCT, F.SEGMENT_PCT, F.SEGMENT_FLOOR_US) == (3.0, 3.0, 0.2)
    assert F.segment_limit_us(2.0) == pytest.approx(0.2)  # the floor
    assert F.segment_limit_us(40.0) == pytest.approx(1.2)  # 3 %
    assert F.token_check(103.0, 100.0)["pass"] and not F.token_check(103.1, 100.0)["pass"]
    assert F.token_check(97.0, 100.0)["rel_error"] == pytest.approx(-0.03)
    for bad in (float("nan"), float("inf"), 0.0, -1.0, None, True):
        with pytest.raises(MonolithError, match="finite > 0"):
            F.token_check(100.0, bad)


def test_robust_us_is_an_interquartile_mean_and_refuses_bad_samples():
    m, iqr = F.robust_us([10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])  # sorted 1..7, 10: middle 3, 4, 5, 6
    assert m == pytest.approx(4.5) and iqr == pytest.approx(7.0 - 3.0)
    assert F.robust_us([2.5])[0] == 2.5
    for bad in ([1.0, float("nan")], [1.0, 0.0], []):
        with pytest.raises(MonolithError):
            F.robust_us(bad)


def test_segments_refuse_a_non_finite_difference():
    pts = F.stop_points("stream", 3)
    plain = {p.key: float(i) for i, p in enumerate(pts)}
    tr = dict(plain)
    tr[pts[2].key] = float("nan")
    with pytest.raises(MonolithError, match="the trace difference is nan"):
        F.segments(pts, plain, [tr])


# ---------------------------------------------------------------- the protocol on a fake engine


class FakeEngine:
    """What window_launcher touches of a MegakernelEngine: a clock that each launch advances by the
    synthetic truth (a constant, then the stop point's milestone or the whole token), and an X-ray
    buffer that a full traced launch fills with the synthetic trace."""

    def __init__(self, variant, const_us=3.0):
        self.variant, self.variant_id, self.blocks, self.device = variant, 0, 4, torch.device("cpu")
        self.sched = F.schedule_of(variant)
        self.buf, slots, self.truth, self.span = synthetic_trace(self.sched)
        self.k = {"xray_max_events": slots}
        self.xray_buf = torch.zeros(len(self.buf), dtype=torch.uint8)
        self.ext, self.xray, self.position, self.clock_us, self.const_us = "own", True, 0, 0.0, const_us
        self.calls, self.checked = [], 0
        self.kpos = None  # the kernel's position (sync state)
        self.rec = {(p.layer, p.phase): p.record for p in F.stop_points(self.sched, 14)}

    def seek(self, pos):
        self.position = self.kpos = pos
        self.calls.append(("seek", pos))

    def _launch(self, in_ptr, out_ptr, pos, stop=FULL, record=True):
        assert pos == self.kpos, "a launch at another position than the kernel's"
        self.calls.append(("launch", pos, tuple(stop), record, self.ext, self.xray))
        if stop == FULL:
            self.clock_us += self.const_us + self.span / 1e3
            self.kpos += 1
            if record and self.xray:
                self.xray_buf.copy_(torch.from_numpy(self.buf.copy()))
        else:
            self.clock_us += self.const_us + self.truth[(stop[0], self.rec[stop])] / 1e3

    def check(self):
        assert self.position == self.kpos, (self.position, self.kpos)
        self.checked += 1


class FakeEvent:
    def __init__(self, mk):
        self.mk, self.t = mk, None

    def record(self):
        self.t = self.mk.clock_us

    def elapsed_time(self, other):
        return (other.t - self.t) / 1e3  # ms, as torch's


def test_the_window_protocol_on_a_fake_engine():
    mk = FakeEngine("fp8-upstream")
    builds = {"plain": ("plain-ext", False), "compact": ("compact-ext", True)}
    launch = F.window_launcher(mk, builds, 1024, event=lambda: FakeEvent(mk))
    us, tr = launch("plain", (13, 4))
    assert us == pytest.approx(3.0 + mk.truth[(13, "bar_down")] / 1e3) and tr is None
    assert mk.calls[0] == ("seek", 1024 - F.WINDOW)
    full = [c for c in mk.calls[1:] if c[0] == "launch"]
    assert [c[1] for c in full] == [1020, 1021, 1022, 1023, 1024]
    assert all(c[2] == FULL and c[3] is False and c[4] == "plain-ext" and c[5] is False for c in full[:-1])
    assert full[-1][2] == (13, 4)
    assert (mk.ext, mk.xray) == ("own", True) and mk.checked == 1  # restored; checked once per launch
    us, tr = launch("compact", None, traced=True)
    ev, start, end = tr
    assert us == pytest.approx(3.0 + mk.span / 1e3) and np.max(end) == pytest.approx(mk.span, abs=1.0)
    assert mk.calls[-1][2:] == (FULL, True, "compact-ext", True)
    with pytest.raises(MonolithError, match="a traced launch is a full launch of an X-ray build"):
        launch("plain", None, traced=True)
    # near the start of the context the window shrinks to the positions there are
    short = F.window_launcher(mk, builds, 2, event=lambda: FakeEvent(mk))
    mk.calls.clear()
    short("plain", None)
    assert mk.calls[0] == ("seek", 0) and [c[1] for c in mk.calls[1:]] == [0, 1, 2]


@pytest.mark.parametrize("variant", ["bf16-upstream", "nvfp4-stream"])
def test_measure_variant_on_a_fake_engine_interleaves_and_passes(variant, monkeypatch):
    mk = FakeEngine(variant)
    order = []
    real = F.window_launcher

    def spy(mk_, builds, pos, window=F.WINDOW, event=None):
        inner = real(mk_, builds, pos, window, event=lambda: FakeEvent(mk_))

        def launch(b, stop, traced=False):
            order.append((b, stop, traced))
            return inner(b, stop, traced)

        return launch

    builds = {"plain": ("p", False), "compact": ("c", True)}
    monkeypatch.setattr(F, "window_launcher", spy)
    pf = F.measure_variant(
        mk,
        variant,
        builds,
        ["compact"],
        [16, 2048],
        14,
        {16: mk.span / 1e3 * 1.02, 2048: mk.span / 1e3 * 1.05},
        "compact",
        reps=5,
        traces=2,
    )
    n_pts = len(F.stop_points(F.schedule_of(variant), 14))
    per_pos = 5 * 2 * (n_pts + 1) + 2
    assert len(order) == 2 * per_pos
    # rep 0: every plain point then the full step, then the X-ray build's, then its trace
    assert [o[0] for o in order[: 2 * (n_pts + 1) + 1]] == ["plain"] * (n_pts + 1) + ["compact"] * (n_pts + 2)
    assert order[2 * (n_pts + 1)][2] is True
    assert pf["schedule"] == F.schedule_of(variant) and pf["layer"] == 14
    assert pf["positions"]["16"]["compact"]["pass"] is True
    assert pf["positions"]["2048"]["compact"]["failed"] == ["token"]  # 1/1.05: 4.8 % off
    assert pf["pass"] is False
    json.dumps(pf)  # the script writes it as it is


# ---------------------------------------------------------------- the script


def _fake_script_env(monkeypatch):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import xray_overhead as X

    import monolith.checkpoint as ck
    import monolith.megakernel as M
    from monolith.xray import overhead as O

    class Ext:
        def __init__(self, name):
            self.build_info = {"tag": name}

        def attributes(self, vid, xray):
            return {"num_regs": 96, "local_size_bytes": 0, "shared_size_bytes": 32512}

        def max_coresident(self, vid, xray, dev):
            return 132

    exts = {"compact": Ext("c")}
    monkeypatch.setattr(X, "build_all", lambda alts, shipped: alts)
    monkeypatch.setattr(M, "load_extension", lambda v: exts["compact"])
    monkeypatch.setattr(ck, "ensure_checkpoint", lambda *a, **k: "ckpt")
    monkeypatch.setattr(ck, "load_checkpoint", lambda p: types.SimpleNamespace(describe=lambda: {"kind": "fake"}))
    engines = {}

    def make_engine(ckpt, v):
        engines[v] = FakeEngine(v)
        return engines[v]

    monkeypatch.setattr(X, "make_engine", make_engine)
    monkeypatch.setattr(
        O,
        "engine_timer",
        lambda mk, ext_of, tokens: lambda b, p: (mk.span / 1e9 * (1.0 if b == "plain" else 1.01), [1, 2]),
    )
    real = F.window_launcher

    def launcher(mk, builds, pos, window=F.WINDOW, event=None):
        return real(mk, builds, pos, window, event=lambda: FakeEvent(mk))

    monkeypatch.setattr(F, "window_launcher", launcher)
    return X


def test_the_script_writes_phase_fidelity_for_every_variant(tmp_path, monkeypatch, capsys):
    X = _fake_script_env(monkeypatch)
    args = [
        "--variants",
        ",".join(SHIPPED),
        "--positions",
        "16,1024,2048",
        "--alts",
        "compact",
        "--trace-position",
        "0",
        "--runs",
        "1",
        "--fidelity-layer",
        "14",
        "--fidelity-reps",
        "5",
        "--fidelity-traces",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert X.main(args) == 0
    doc = json.loads((tmp_path / "xray_overhead.json").read_text())
    assert doc["fidelity_layer"] == 14
    for v in SHIPPED:
        pf = doc["variants"][v]["phase_fidelity"]
        sched = F.schedule_of(v)
        assert pf["schedule"] == sched and pf["pass"] is True and pf["shipped"] == "compact"
        assert [p["record"] for p in pf["points"]][0] == ("bar_down" if sched == "upstream" else "s_down")
        assert set(pf["positions"]) == {"16", "1024", "2048"}
        r = pf["positions"]["1024"]["compact"]
        assert r["segments"][0]["from"] == pf["points"][0]["key"] and r["token"]["pass"]
        assert r["token"]["rel_error"] == pytest.approx(0.0, abs=1e-4)
        assert pf["rule"]["text"] == F.PASS_RULE
    out = capsys.readouterr().out
    assert "==== phase fidelity, layer 14" in out and out.count(" PASS") == len(SHIPPED)
    assert out.rstrip().splitlines()[-1].startswith("[xo] wrote")


def test_the_script_reports_a_variant_whose_trace_lacks_a_record(tmp_path, monkeypatch, capsys):
    X = _fake_script_env(monkeypatch)
    real = F.trace_milestones

    def drop(events, end_ns, points, variant):
        if variant == "fp8-upstream":
            keep = ~((events[:, 2] == ID["bar_down"]) & (events[:, 3] == 13))
            events, end_ns = events[keep], end_ns[keep]
        return real(events, end_ns, points, variant)

    monkeypatch.setattr(F, "trace_milestones", drop)
    rc = X.main(
        [
            "--variants",
            "bf16-upstream,fp8-upstream",
            "--positions",
            "16",
            "--alts",
            "compact",
            "--trace-position",
            "0",
            "--runs",
            "1",
            "--fidelity-layer",
            "14",
            "--fidelity-reps",
            "4",
            "--fidelity-traces",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 1
    doc = json.loads((tmp_path / "xray_overhead.json").read_text())
    assert doc["variants"]["bf16-upstream"]["phase_fidelity"]["pass"] is True
    err = doc["variants"]["fp8-upstream"]["phase_fidelity"]["error"]
    assert err == (
        "fidelity: fp8-upstream: the trace has no bar_down record of layer 13 (stop point kStopDown, upstream schedule)"
    )
    out = capsys.readouterr().out
    assert "FAILED: ['fp8-upstream phase fidelity']" in out


def test_the_script_refuses_bad_fidelity_arguments(capsys):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import xray_overhead as X

    assert X.main(["--fidelity-layer", "28"]) == 2
    assert "--fidelity-layer: 1..27, or 0 for none; got 28" in capsys.readouterr().err
    assert X.main(["--fidelity-layer", "14", "--fidelity-reps", "2"]) == 2
    assert X.main(["--fidelity-layer", "14", "--variants", "bf16-stream,nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[-1].startswith("error: unknown kernel variant 'nope'; known: [")
    with pytest.raises(SystemExit) as e:
        X.main(["--help"])
    assert e.value.code == 0 and "--fidelity-layer" in capsys.readouterr().out
