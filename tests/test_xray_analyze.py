import numpy as np
import pytest

from monolith.xray.analyze import align, analyze, gantt_png, main, phase_bytes
from monolith.xray.phases import by_name
from monolith.xray.synthetic import generate

EXTRA = {(37, 10, "bar_o"): 3000.0}
SLOW = {(64, 20, "gateup"): 4000.0}


@pytest.fixture(scope="module")
def trace():
    return generate(extra_wait_ns=EXTRA, slow_work_ns=SLOW, seed=1)


@pytest.fixture(scope="module")
def summ(trace):
    return analyze(*trace)


def test_alignment_recovers_true_times(trace):
    meta, ev = trace
    al = align(meta, ev)
    t0 = np.array(meta["truth"]["t0_ns"])
    t1 = np.array(meta["truth"]["t1_ns"])
    base = t0.min()
    # clock64 resolution after the per-SM fit: a few ns, far below the 32 ns globaltimer tick
    assert np.abs(al["start_ns"] - (t0 - base)).max() < 8
    assert np.abs(al["end_ns"] - (t1 - base)).max() < 8
    assert al["residual_ns"]["rms"] < 12 and al["residual_ns"]["max"] <= 32
    f = np.array(meta["truth"]["sm_freq_ghz"])
    for sm, fit in al["per_sm"].items():
        assert abs(fit["ghz"] / f[sm] - 1) < 20e-6  # skews are +-50 ppm; the fit sees them


def test_raw_globaltimer_is_worse(trace):
    meta, ev = trace
    g = align(meta, ev, method="globaltimer")
    t0 = np.array(meta["truth"]["t0_ns"])
    err = np.abs(g["start_ns"] - (t0 - t0.min())).max()
    assert err > 8  # the tick shows; the fit is what buys sub-32-ns resolution


def test_waits_per_block_match_truth(trace, summ):
    want = np.array(trace[0]["truth"]["wait_ns_per_block"]) / 1e3
    got = np.array(summ["waits"]["per_block_us"])
    assert np.abs(got - want).max() < 0.05  # µs, over ~150 µs of waits


def test_injected_wait_and_straggler(trace):
    meta, ev = trace
    al = align(meta, ev)
    d = al["end_ns"] - al["start_ns"]
    ph = by_name()
    m = (ev[:, 2] == ph["bar_o"].id) & (ev[:, 3] == 10)
    assert ev[m, 0][np.argmax(d[m])] == 37 and d[m].max() > 3000
    # a slow block at gateup (layer 20) makes every other block wait ~4 µs more at bar_gateup
    m = (ev[:, 2] == ph["bar_gateup"].id) & (ev[:, 3] == 20)
    others = d[m & (ev[:, 0] != 64)]
    assert np.median(others) > 4000
    assert d[m & (ev[:, 0] == 64)].max() < 1500


def test_idle_sms_and_phase_totals(trace, summ):
    truth = trace[0]["truth"]
    assert summ["idle"]["idle_sms"] == truth["idle_sms"]
    for p in summ["phases"]:
        want = truth["phase_total_ns"][p["name"]] / 1e3
        assert p.get("sum_us", 0) == pytest.approx(want, rel=1e-3, abs=0.01)
    assert summ["trace_span_us"] == pytest.approx(truth["span_ns"] / 1e3, abs=0.02)


def test_token_time_ratio_and_barrier_share(summ):
    r = summ["span_vs_token_time"]
    assert 0.95 < r["ratio"] < 1.0 and r["within_5pct"]
    bs = summ["barrier_share"]
    assert 12 < bs["layer_us"] < 18  # synthetic schedule is ~14 µs/layer
    assert 0 < bs["grid_barrier_share"] < bs["wait_share"] < 1
    assert bs["upstream"]["share"] == pytest.approx(8.8 / 28.0)


def test_byte_model():
    b = phase_bytes("bf16-upstream", 128)
    layer = sum(b[k]["bytes"] for k in ("qkv", "oproj", "gateup", "down"))
    assert layer == 15_728_640 * 2  # q,k,v,o,gate,up,down weights x 2 bytes
    assert b["lmhead"]["bytes"] == 151_936 * 1024 * 2  # 311.2 MB
    assert b["attn"]["bytes"] == 2 * 8 * 128 * 2 * 129
    assert phase_bytes("fp8", 0)["down"]["bytes"] == 1024 * 3072 + 1024 * 4
    assert phase_bytes("nvfp4", 0)["down"]["bytes"] < phase_bytes("fp8", 0)["down"]["bytes"]


def test_bandwidth_reported(summ):
    p = {x["name"]: x for x in summ["phases"]}
    assert 1.0 < p["gateup"]["eff_bw_tbs"] < 5.0
    assert "eff_bw_tbs" not in p["bar_qkv"]


def test_cli_and_png(tmp_path, trace):
    from monolith.xray.raw import save_raw
    meta, ev = trace
    meta = {k: v for k, v in meta.items() if k != "truth"}
    raw = save_raw(tmp_path / "t.raw.npz", meta, ev)
    assert main([str(raw), "--json", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").stat().st_size > 1000
    assert main([str(tmp_path / "missing.npz")]) == 2
    png = gantt_png(meta, ev, tmp_path / "g.png", width_px=600)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_kernel_style_meta_and_warnings(tmp_path):
    """meta as MegakernelEngine.record_xray writes it (sm_clock_mhz may be None, nested build info)."""
    from monolith.xray.raw import load_raw, save_raw
    meta, ev = generate(sm_count=12, blocks=10, layers=3, idle_sms=(2, 7), seed=5)
    meta.pop("truth")
    meta.update(sm_clock_mhz=None, build={"flags": ["-DMONOLITH_XRAY"]}, kernel_attributes={"regs": 128},
                xray_max_events=int(np.bincount(ev[:, 0]).max()), token_time_us=meta["token_time_us"] * 1.2)
    m2, e2 = load_raw(save_raw(tmp_path / "k.raw.npz", meta, ev))
    s = analyze(m2, e2)
    text = " ".join(s["warnings"])
    assert "truncated" in text and "more than 5%" in text
    assert not s["span_vs_token_time"]["within_5pct"]


def test_stream_trace_hops_and_wait_kinds():
    """The committed bf16-stream trace: the analyzer finds its five hops, separates dependency
    waits from ring waits, and the numbers hang together (shares in (0, 1), every hop seen by
    the first block no later than by the last, a positive token bandwidth)."""
    from pathlib import Path

    from monolith import REPO_ROOT
    from monolith.xray.raw import load_raw

    raw = Path(REPO_ROOT) / "results" / "xray" / "bf16-stream.raw.npz"
    if not raw.is_file():
        pytest.skip("no committed bf16-stream trace")
    meta, ev = load_raw(raw)
    summ = analyze(meta, ev)
    hops = {(h["producer"], h["wait"]): h for h in summ["hops"]["latency"]}
    assert set(hops) == {("s_down", "s_wait_resid"), ("s_qkv", "s_wait_qkv"), ("s_attn", "s_wait_attn"),
                         ("s_oproj", "s_wait_o"), ("s_mlp", "s_wait_act")}
    assert summ["hops"]["per_layer"] == 5
    for h in hops.values():
        assert h["first_sees_us"] <= h["last_sees_us"] and h["layers"] >= 27
    tw = summ["token_waits"]
    assert 0 < tw["ring_share"] < tw["dependency_share"] < 1
    bs = summ["barrier_share"]
    assert bs["grid_barrier_us_per_layer"] == 0  # the streaming schedule has no grid barrier
    assert abs(bs["dependency_wait_us_per_layer"] + bs["ring_wait_us_per_layer"] - bs["wait_us_per_layer"]) < 1e-6
    assert summ["grid_bandwidth_token_tbs"] > 0
    assert {"s_qkv", "s_mlp", "s_down"} <= {p["name"] for p in summ["phases"] if p.get("bytes")}


def test_hop_readiness_goes_through_s_gather():
    """A stream wait ends when thread 0 has its words; the block is ready when its s_gather (the
    rest of the wait) ends. Two consumer blocks, one producer: the *_ready_us figures come from the
    gather ends, the *_sees_us figures from the wait ends, and a trace without block ids (or
    without s_gather) has no readiness figures."""
    from monolith.xray.analyze import hop_latency
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    #          block, phase,          layer, start, end (ns)
    rows = [(2, pid["s_down"], 0, 0, 1000),
            (0, pid["s_wait_resid"], 1, 900, 1500), (0, pid["s_gather"], 1, 1500, 2500), (0, pid["s_qkv"], 1, 2500, 3000),
            (1, pid["s_wait_resid"], 1, 900, 1200), (1, pid["s_gather"], 1, 1200, 3000), (1, pid["s_qkv"], 1, 3000, 3100)]
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    h = {x["wait"]: x for x in hop_latency(s, e, ph, lay, phases, blk)}["s_wait_resid"]
    assert (h["first_sees_us"], h["last_sees_us"]) == pytest.approx((0.2, 0.5))
    assert (h["first_ready_us"], h["last_ready_us"]) == pytest.approx((1.5, 2.0))
    assert h["producer_spread_us"] == pytest.approx(0.0)  # one producer
    assert "last_ready_us" not in hop_latency(s, e, ph, lay, phases)[0]
    no_gather = ph != pid["s_gather"]
    h2 = hop_latency(s[no_gather], e[no_gather], ph[no_gather], lay[no_gather], phases, blk[no_gather])[0]
    assert "last_ready_us" not in h2 and h2["last_sees_us"] == pytest.approx(0.5)


def test_layer_milestones_split_a_layer_along_the_schedule():
    """Two layers of a two-block stream trace: each segment runs from the previous phase's last end
    (over blocks) to this phase's last end, the first phase's from the previous layer's last phase;
    work is the median over blocks of a block's time in the phase; a trace without any chain's
    phases has no milestones."""
    from monolith.xray.analyze import layer_milestones
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    names = ("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down")
    rows, t = [], 0
    for L in range(2):
        for n in names:  # block 0 works 1,000 ns, block 1 starts 200 ns later and works 1,400 ns
            rows.append((0, pid[n], L, t, t + 1000))
            rows.append((1, pid[n], L, t + 200, t + 1600))
            t += 2000  # every milestone 2,000 ns after the previous one's start: segments of 2,000 ns
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    m = layer_milestones(s, e, ph, lay, phases, blk)
    assert m["chain"] == list(names)
    seg = {x["phase"]: x for x in m["segments"]}
    assert seg["s_qkv"]["layers"] == 1  # layer 0's first phase has no previous layer
    assert all(x["segment_us"] == pytest.approx(2.0) for x in m["segments"])
    assert all(x["segment_max_us"] == pytest.approx(2.0) for x in m["segments"])
    assert all(x["work_us"] == pytest.approx(1.2) for x in m["segments"])  # median of 1.0 and 1.4
    assert m["sum_us"] == pytest.approx(10.0)
    # block 1 ends every phase last: it starts 200 ns after the median (of 0 and 200: 100) and works
    # 1,400 against the median 1,200
    assert all(x["last_late_start_us"] == pytest.approx(0.1) for x in m["segments"])
    assert all(x["last_extra_work_us"] == pytest.approx(0.2) for x in m["segments"])
    keep = ph == pid["s_wait_resid"]
    assert layer_milestones(s[keep], e[keep], ph[keep], lay[keep], phases, blk[keep]) is None


def _chain_trace(nblocks, late, extra=lambda n, b: 0):
    """Three layers of the stream chain, every phase 3,000 ns after the previous one's start: block b
    starts phase n of layer L late(n, b, L) ns late and works 1,000 + extra(n, b) ns. Returns
    (blk, ph, lay, s, e, phases) for layer_milestones."""
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    rows, t = [], 0
    for L in range(3):
        for n in ("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down"):
            for b in range(nblocks):
                st = t + late(n, b, L)
                rows.append((b, pid[n], L, st, st + 1000 + extra(n, b)))
            t += 3000
    cols = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    return (*cols, phases)


def test_milestones_tell_a_late_start_from_longer_work():
    """Five blocks; in s_mlp block 4 starts 800 ns late and works as long as the others, in s_down
    block 2 starts on time and works 600 ns longer: each shows up in its own column, and the other
    blocks' (the median's) numbers stay 0."""
    from monolith.xray.analyze import layer_milestones

    blk, ph, lay, s, e, phases = _chain_trace(5, lambda n, b, L: 800 if (n == "s_mlp" and b == 4) else 0,
                                              lambda n, b: 600 if (n == "s_down" and b == 2) else 0)
    seg = {x["phase"]: x for x in layer_milestones(s, e, ph, lay, phases, blk)["segments"]}
    assert seg["s_mlp"]["last_late_start_us"] == pytest.approx(0.8)
    assert seg["s_mlp"]["last_extra_work_us"] == pytest.approx(0.0)
    assert seg["s_down"]["last_late_start_us"] == pytest.approx(0.0)
    assert seg["s_down"]["last_extra_work_us"] == pytest.approx(0.6)
    assert seg["s_qkv"]["last_late_start_us"] == pytest.approx(0.0) and seg["s_qkv"]["last_extra_work_us"] == pytest.approx(0.0)


def test_milestones_name_the_blocks_that_start_late_every_layer():
    """Six blocks on SMs 10..15; in s_oproj block 3 starts 300 ns late in every layer and block 5
    100 ns late in one layer of three: late_blocks lists block 3 first (its SM, +0.3 µs), block 5
    after it with its mean over layers; without SM ids the SM is None."""
    from monolith.xray.analyze import layer_milestones

    blk, ph, lay, s, e, phases = _chain_trace(
        6, lambda n, b, L: (300 if (n == "s_oproj" and b == 3) else 0) + (100 if (n == "s_oproj" and b == 5 and L == 1) else 0))
    seg = {x["phase"]: x for x in layer_milestones(s, e, ph, lay, phases, blk, blk + 10, top=2)["segments"]}
    late = seg["s_oproj"]["late_blocks"]
    assert [x["block"] for x in late] == [3, 5] and [x["sm"] for x in late] == [13, 15]
    assert late[0]["late_start_us"] == pytest.approx(0.3) and late[1]["late_start_us"] == pytest.approx(0.1 / 3)
    assert all(x["late_start_us"] == pytest.approx(0.0) for x in seg["s_mlp"]["late_blocks"])
    assert layer_milestones(s, e, ph, lay, phases, blk)["segments"][0]["late_blocks"][0]["sm"] is None


def test_sub_intervals_of_a_diagnostic_trace():
    """MONOLITH_XRAY_SUB=1 traces cut x_* intervals out of the interval recorded next in the block:
    x_words out of the hop's s_gather, x_dot / x_out out of the work phase. The analyzer groups them
    by that parent, an s_gather named by the phase its hop opens, the hop's readiness still ends at
    s_gather (an x_words between the wait and its gather does not hide it), and a trace without cuts
    reports none."""
    from monolith.xray.analyze import hop_latency, sub_intervals
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    rows = [(2, pid["s_down"], 0, 0, 1000),
            (0, pid["s_wait_resid"], 1, 900, 1500), (0, pid["x_words"], 1, 1500, 2300), (0, pid["s_gather"], 1, 2300, 2500),
            (0, pid["x_dot"], 1, 2500, 2800), (0, pid["x_out"], 1, 2800, 2900), (0, pid["s_qkv"], 1, 2900, 3000),
            (1, pid["s_wait_resid"], 1, 900, 1200), (1, pid["x_words"], 1, 1200, 1400), (1, pid["s_gather"], 1, 1400, 3000),
            (1, pid["x_dot"], 1, 3000, 3500), (1, pid["x_out"], 1, 3500, 3600), (1, pid["s_qkv"], 1, 3600, 3700)]
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    h = {x["wait"]: x for x in hop_latency(s, e, ph, lay, phases, blk)}["s_wait_resid"]
    assert (h["first_ready_us"], h["last_ready_us"]) == pytest.approx((1.5, 2.0))
    subs = {(x["parent"], x["sub"]): x for x in sub_intervals(s, e, ph, blk, phases)}
    assert set(subs) == {("s_gather@s_qkv", "x_words"), ("s_qkv", "x_dot"), ("s_qkv", "x_out")}
    assert subs[("s_gather@s_qkv", "x_words")]["median_us"] == pytest.approx(0.5)  # 0.8 and 0.2 µs
    assert subs[("s_gather@s_qkv", "x_words")]["max_us"] == pytest.approx(0.8)
    assert subs[("s_qkv", "x_dot")]["max_us"] == pytest.approx(0.5)
    assert subs[("s_qkv", "x_out")]["parent_rest_median_us"] == pytest.approx(0.1)
    plain = ~np.isin(ph, [pid["x_words"], pid["x_dot"], pid["x_out"]])
    assert sub_intervals(s[plain], e[plain], ph[plain], blk[plain], phases) is None


def test_sub_intervals_name_each_gather_by_the_phase_it_opens(summ, capsys):
    """MONOLITH_XRAY_SUB=2: x_prenorm / x_slots cut from the s_gather of two different hops in the
    same block (the residual hop into qkv, the O hop into the MLP) are reported apart, each with the
    rest of its own gathers; a second block's gather with no wait before it is not labelled by the
    first block's last wait."""
    from monolith.xray.analyze import sub_intervals
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    rows = [(0, pid["s_wait_resid"], 1, 0, 100), (0, pid["x_prenorm"], 1, 100, 400), (0, pid["x_slots"], 1, 400, 500),
            (0, pid["s_gather"], 1, 500, 700), (0, pid["s_qkv"], 1, 700, 900),
            (0, pid["s_wait_o"], 1, 900, 1000), (0, pid["x_prenorm"], 1, 1000, 1100), (0, pid["x_slots"], 1, 1100, 1900),
            (0, pid["s_gather"], 1, 1900, 2000), (0, pid["s_mlp"], 1, 2000, 2100),
            (1, pid["x_prenorm"], 1, 0, 50), (1, pid["s_gather"], 1, 50, 60)]
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    subs = {(x["parent"], x["sub"]): x for x in sub_intervals(s, e, ph, blk, phases)}
    assert set(subs) == {("s_gather@s_qkv", "x_prenorm"), ("s_gather@s_qkv", "x_slots"), ("s_gather@s_mlp", "x_prenorm"),
                         ("s_gather@s_mlp", "x_slots"), ("s_gather", "x_prenorm")}
    assert subs[("s_gather@s_qkv", "x_prenorm")]["median_us"] == pytest.approx(0.3)
    assert subs[("s_gather@s_mlp", "x_slots")]["median_us"] == pytest.approx(0.8)
    assert subs[("s_gather@s_qkv", "x_slots")]["parent_rest_median_us"] == pytest.approx(0.2)
    assert subs[("s_gather@s_mlp", "x_slots")]["parent_rest_median_us"] == pytest.approx(0.1)
    assert subs[("s_gather", "x_prenorm")]["parent_rest_median_us"] == pytest.approx(0.01)
    # the report prints one group per parent, its cuts in order and its own rest once
    from monolith.xray.analyze import print_report

    print_report({**summ, "sub_intervals": sub_intervals(s, e, ph, blk, phases)})
    out = " ".join(capsys.readouterr().out.split())
    assert "s_gather@s_qkv: x_prenorm 0.30/0.30, x_slots 0.10/0.10 (rest 0.20)" in out
    assert "s_gather@s_mlp: x_prenorm 0.10/0.10, x_slots 0.80/0.80 (rest 0.10)" in out


def test_sub_intervals_split_the_landed_count_read_from_the_slot_tests(summ, capsys):
    """MONOLITH_XRAY_SUB=2 with the landed count (twenty-second session): thread 0's x_count (the
    count's read) sits between x_prenorm and x_slots in the same gather; the report gives it as its
    own cut of that gather, in time order (not by name), so a lagging count (long x_slots) and a
    costly read (long x_count) are told apart."""
    from monolith.xray.analyze import print_report, sub_intervals
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    rows = [(0, pid["s_wait_resid"], 1, 0, 100), (0, pid["x_prenorm"], 1, 100, 350), (0, pid["x_count"], 1, 350, 500),
            (0, pid["x_slots"], 1, 500, 520), (0, pid["s_gather"], 1, 520, 700), (0, pid["s_qkv"], 1, 700, 900)]
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    subs = sub_intervals(s, e, ph, blk, phases)
    got = {(x["parent"], x["sub"]): x["median_us"] for x in subs}
    assert got == pytest.approx({("s_gather@s_qkv", "x_prenorm"): 0.25, ("s_gather@s_qkv", "x_count"): 0.15,
                                 ("s_gather@s_qkv", "x_slots"): 0.02})
    print_report({**summ, "sub_intervals": subs})
    out = " ".join(capsys.readouterr().out.split())
    assert "s_gather@s_qkv: x_prenorm 0.25/0.25, x_count 0.15/0.15, x_slots 0.02/0.02 (rest 0.18)" in out


def test_steady_clock_gives_no_clock_warning_and_reports_the_sm_clock(trace, summ):
    assert not any("clock fit residual" in w for w in summ["warnings"]), summ["warnings"]
    g = summ["clock_alignment"]["sm_ghz"]
    f = np.array(trace[0]["truth"]["sm_freq_ghz"])
    assert g["sms"] > 0 and abs(g["median"] / np.median(f) - 1) < 1e-4
    assert g["min"] <= g["median"] <= g["max"]


def test_a_clock_that_drops_mid_token_is_flagged():
    """The ninth session's tensor-core build: the SM clock moved within the token, so one line per
    SM no longer fits clock64 to %globaltimer. Here every SM's clock64 runs 15 % slower after the
    token's midpoint (the cycle counts of later stamps shrink); the rms residual must exceed a
    tick and the warning must say the clock changed."""
    meta, ev = generate(seed=2)
    ev = ev.copy()
    t0 = np.array(meta["truth"]["t0_ns"])
    t1 = np.array(meta["truth"]["t1_ns"])
    mid = 0.5 * (t0.min() + t1.max())
    f = np.array(meta["truth"]["sm_freq_ghz"])[ev[:, 1]]
    for col, t in ((6, t0), (7, t1)):  # c0, c1: cycles past the midpoint count at 0.85 x the rate
        late = t > mid
        ev[late, col] -= np.round((t[late] - mid) * f[late] * 0.15).astype(np.int64)
    s = analyze(meta, ev)
    assert s["clock_alignment"]["residual_ns"]["rms"] > meta["globaltimer_tick_ns"]
    assert any("clock changed during the token" in w for w in s["warnings"]), s["warnings"]


def test_compare_shows_a_slower_phase_in_its_milestone_and_the_layer(tmp_path, capsys):
    """--compare: build B's block 64 does its gate/up 2 µs slower in every layer, so B's gate/up
    milestone segment grows by ~2 µs, its layer too, and the table says so; a metric only one
    summary has is None on the other side, never a crash."""
    from monolith.xray.analyze import compare
    from monolith.xray.raw import save_raw

    a = generate(seed=3)
    b = generate(seed=3, slow_work_ns={(64, L, "gateup"): 2000.0 for L in range(28)})
    rows = {r["metric"]: r for r in compare(analyze(*a), analyze(*b))}
    seg = rows["gateup segment, µs"]
    assert 1.5 < seg["b"] - seg["a"] < 2.5, seg
    lay = rows["layer, µs (mean)"]
    assert 1.5 < lay["b"] - lay["a"] < 2.5, lay
    assert abs(rows["qkv segment, µs"]["b"] - rows["qkv segment, µs"]["a"]) < 0.3
    assert rows["SM clock over the token, GHz"]["a"] == pytest.approx(1.98, rel=1e-3)
    # the hops: B's block 64 sees the release of the gate/up barrier 1.5 µs late in every layer
    c = generate(seed=3, extra_wait_ns={(64, L, "bar_gateup"): 1500.0 for L in range(28)})
    rows_c = {r["metric"]: r for r in compare(analyze(*a), analyze(*c))}
    hop = rows_c["hop gateup → bar_gateup: last block sees it, µs"]
    assert 1.2 < hop["b"] - hop["a"] < 1.8, hop
    other = rows_c["hop qkv → bar_qkv: last block sees it, µs"]
    assert abs(other["b"] - other["a"]) < 0.3, other
    # one slow layer: the mean and the slowest layer move, the median and the milestone medians
    # hardly (fourteenth session: an A/B whose medians moved 0.07 µs and whose mean moved 0.55)
    d = generate(seed=3, slow_work_ns={(64, 7, "gateup"): 5000.0})
    rows_d = {r["metric"]: r for r in compare(analyze(*a), analyze(*d))}
    assert 3.5 < rows_d["layer, µs (max)"]["b"] - rows_d["layer, µs (max)"]["a"] < 6.0, rows_d["layer, µs (max)"]
    assert 0.1 < rows_d["layer, µs (mean)"]["b"] - rows_d["layer, µs (mean)"]["a"] < 0.3
    assert abs(rows_d["layer, µs (median)"]["b"] - rows_d["layer, µs (median)"]["a"]) < 0.1
    assert abs(rows_d["gateup segment, µs"]["b"] - rows_d["gateup segment, µs"]["a"]) < 0.1
    slow = rows_d["gateup segment, slowest layer, µs"]
    assert 3.5 < slow["b"] - slow["a"] < 6.0, slow
    # one side without milestones: None there
    s_b = analyze(*b)
    s_b["milestones"] = None
    r = {x["metric"]: x for x in compare(analyze(*a), s_b)}
    assert r["gateup segment, µs"]["b"] is None and r["gateup segment, µs"]["a"] is not None
    # the CLI: two raw files, a table and a JSON
    pa, pb = tmp_path / "a.raw.npz", tmp_path / "b.raw.npz"
    save_raw(pa, *a)
    save_raw(pb, *b)
    assert main([str(pa), "--compare", str(pb), "--json", str(tmp_path / "ab.json")]) == 0
    out = capsys.readouterr().out
    assert "X-ray A/B" in out and "gateup segment" in out
    import json
    assert {x["metric"] for x in json.loads((tmp_path / "ab.json").read_text())["rows"]} >= {"gateup segment, µs"}


def test_token_edges_report_layer_0_and_the_lm_head_and_their_compare_rows(capsys):
    """The token's ends, which the layer medians leave out: a block whose layer-0 qkv runs 3 µs slower
    moves layer 0's first-phase end and layer 0 by ~3 µs and the median layer not at all; a block
    whose LM head runs 15 µs slower (the synthetic heads spread over ~75-82 µs) moves the head's span
    and its per-block max by 5-15 µs, its per-block median hardly. A trace without ring_head (the upstream schedule) reports no ring waits."""
    from monolith.xray.analyze import compare

    a = analyze(*generate(seed=4))
    b = analyze(*generate(seed=4, slow_work_ns={(11, 0, "qkv"): 3000.0, (40, 28, "lmhead"): 15000.0}))
    fa, fb = a["edges"]["first_layer"], b["edges"]["first_layer"]
    assert fa["first_phase"] == "qkv"
    assert 2.5 < fb["first_phase_last_end_us"] - fa["first_phase_last_end_us"] < 3.5
    assert 2.5 < fb["layer_us"] - fa["layer_us"] < 3.5
    assert fb["next_layer_start_us"] > fb["first_phase_last_end_us"]
    ha, hb = a["edges"]["lm_head"], b["edges"]["lm_head"]
    assert 5.0 < hb["per_block_max_us"] - ha["per_block_max_us"] < 15.5
    assert 5.0 < hb["span_us"] - ha["span_us"] < 15.5
    assert abs(hb["per_block_median_us"] - ha["per_block_median_us"]) < 0.3
    assert ha["ring_wait_per_block_us"] is None and abs(ha["after_last_layer_us"]) < 1.0
    assert ha["per_block_max_us"] <= ha["span_us"]
    rows = {r["metric"]: r for r in compare(a, b)}
    assert 2.5 < rows["layer 0, µs"]["b"] - rows["layer 0, µs"]["a"] < 3.5
    assert abs(rows["layer, µs (median)"]["b"] - rows["layer, µs (median)"]["a"]) < 0.2
    assert rows["LM head ring waits per block, µs"] == {"metric": "LM head ring waits per block, µs", "a": None, "b": None}
    from monolith.xray.analyze import print_report
    print_report(b)
    out = capsys.readouterr().out
    assert "layer 0:" in out and "LM head: span" in out


def test_attention_by_group_index_finds_the_block_that_runs_more_splits():
    """32 blocks in 8 KV groups of 4 (the kernel's part_begin): index 0 of each group works 3,000 ns in
    s_attn, the others 2,000 (as at 2,048 cached positions, where index 0 runs a third split); a
    MONOLITH_XRAY_SUB=3 cut (x_att_score) inside the slow blocks' phase is counted back in; layer 0 is
    left out (its block 5 is made the slowest there and must not show)."""
    from monolith.xray.analyze import attention_by_group_index
    from monolith.xray.phases import load_phases

    phases = load_phases()
    pid = {p.name: p.id for p in phases}
    rows = []
    for L in range(3):
        for b in range(32):
            t = 10_000 * L
            if b % 4 == 0 and L > 0:  # 1,000 ns of cut + 2,000 ns of the parent's rest
                rows.append((b, pid["x_att_score"], L, t, t + 1000))
                rows.append((b, pid["s_attn"], L, t + 1000, t + 3000))
            else:
                rows.append((b, pid["s_attn"], L, t, t + (9000 if (L == 0 and b == 5) else 2000)))
            rows.append((b, pid["s_oproj"], L, t + 4000, t + 5000))  # another phase: not counted
    blk, ph, lay, s, e = (np.array(c, dtype=np.float64 if i > 2 else np.int64) for i, c in enumerate(zip(*rows, strict=True)))
    a = attention_by_group_index(s, e, ph, lay, phases, blk, 32)
    assert a["per_index_us"] == pytest.approx([3.0, 2.0, 2.0, 2.0])
    assert a["slowest_index"] == 0 and a["slowest_us"] == pytest.approx(3.0)
    assert a["spread_us"] == pytest.approx(1.0)  # 3.0 against the median index's 2.0
    # 36 blocks: groups of 4 or 5 (part_begin 0, 4, 9, 13, 18, ...); index 4 exists in half of them
    a = attention_by_group_index(s, e, ph, lay, phases, blk, 36)
    assert len(a["per_index_us"]) == 5
    keep = ph == pid["s_oproj"]
    assert attention_by_group_index(s[keep], e[keep], ph[keep], lay[keep], phases, blk[keep], 32) is None
    keep = lay == 0  # attention in layer 0 only: nothing to report, no crash
    assert attention_by_group_index(s[keep], e[keep], ph[keep], lay[keep], phases, blk[keep], 32) is None
