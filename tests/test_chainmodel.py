import json
import random

import pytest

from monolith.bench import chainmodel as cm
from monolith.config import QWEN3_0_6B as M

PHASES = [c[0] for c in cm.CHAIN]


def fake_summary(rng, variant="bf16-stream", gather=True):
    """An analyze() summary with random milestone segments and hops (only the keys the model reads)."""
    segs, hops, want = [], [], {}
    for name, prod, wait, _w, _x in cm.CHAIN:
        sees = rng.uniform(0.2, 1.0)
        ready = sees + rng.uniform(0.0, 0.9) if gather else None
        seg = (ready or sees) + rng.uniform(0.5, 2.5)
        segs.append({"phase": name, "segment_us": seg, "work_us": rng.uniform(0.5, 2.0)})
        hops.append({"producer": prod, "wait": wait, "last_sees_us": sees, "last_ready_us": ready})
        want[name] = (sees, (ready or sees) - sees, seg - (ready or sees), seg)
    layer = sum(v[3] for v in want.values())
    summ = {"meta": {"variant": variant, "position": 128, "blocks": 128},
            "milestones": {"segments": segs}, "hops": {"latency": hops},
            "layers": {"count": 28, "mean_us": layer * 1.02},
            "edges": {"first_layer": {"layer_us": layer + 4.0}, "lm_head": {"span_us": 70.0, "after_last_layer_us": 0.5}},
            "token_time_us": 470.0}
    return summ, want, layer


def test_measured_splits_each_segment_into_hop_open_work():
    rng = random.Random(11)
    for gather in (True, False):
        summ, want, layer = fake_summary(rng, gather=gather)
        m = cm.measured(summ)
        assert [p["phase"] for p in m["phases"]] == PHASES
        for p in m["phases"]:
            sees, opn, work, seg = want[p["phase"]]
            assert p["hop_us"] == pytest.approx(sees)
            assert p["open_us"] == pytest.approx(opn)
            assert p["work_us"] == pytest.approx(work)
            assert p["hop_us"] + p["open_us"] + p["work_us"] == pytest.approx(p["segment_us"])
            if not gather:
                assert p["open_us"] == 0.0
        assert m["layer_us"] == pytest.approx(layer)
        # layer 0 as measured, 27 median layers, the LM head with its gap after the last layer
        assert m["token_us"] == pytest.approx(layer + 4.0 + 27 * layer + 70.5)
        assert m["token_mean_us"] == pytest.approx(layer + 4.0 + 27 * layer * 1.02 + 70.5)


def test_measured_refuses_a_trace_without_the_stream_chain():
    rng = random.Random(3)
    summ, _, _ = fake_summary(rng)
    summ["milestones"]["segments"] = summ["milestones"]["segments"][:3]
    with pytest.raises(ValueError, match="s_mlp"):
        cm.measured(summ)
    summ, _, _ = fake_summary(rng)
    summ["hops"]["latency"] = [h for h in summ["hops"]["latency"] if h["wait"] != "s_wait_act"]
    with pytest.raises(ValueError, match="s_wait_act"):
        cm.measured(summ)


def fake_probes(rng):
    hop = {n: rng.uniform(0.4, 1.2) for n in (1024, 3072)}
    rows = [{"strategy": "S0 every thread polls", "load": False, "delay_ns": 0, "words": n, "ok": True,
             "ready_last_us": v} for n, v in hop.items()]
    # decoys the floor must not pick: loaded, delayed, another strategy, a failed row
    rows += [{"strategy": "S0 every thread polls", "load": True, "delay_ns": 0, "words": 1024, "ok": True, "ready_last_us": 0.01},
             {"strategy": "S0 every thread polls", "load": False, "delay_ns": 1500, "words": 1024, "ok": True, "ready_last_us": 0.01},
             {"strategy": "S2 counter + release", "load": False, "delay_ns": 0, "words": 1024, "ok": True, "ready_last_us": 0.01},
             {"strategy": "S0 every thread polls", "load": False, "delay_ns": 0, "words": 1024, "ok": False, "ready_last_us": 0.01}]
    dots = {"x-perm": rng.uniform(0.4, 0.8), "e4m3-kernel": rng.uniform(0.8, 1.4)}
    rnd = [{"shape": s, "loader": "idle", "ok": True, "dots_us": v} for s, v in dots.items()]
    rnd += [{"shape": "x-perm", "loader": "stream", "ok": True, "dots_us": 0.01}]
    a3 = {64: rng.uniform(1.5, 2.0), 16: rng.uniform(1.2, 1.6)}
    attn = [{"shape": "A3", "cached": c, "ok": True, "median_us": v} for c, v in a3.items()]
    attn += [{"shape": "A4", "cached": 64, "ok": True, "median_us": 0.01}]
    bw = rng.uniform(3.5, 4.5)
    probes = {"hop": {"rows": rows}, "round": {"rows": rnd}, "attn": {"rows": attn},
              "bandwidth": {"probes": {"bandwidth": {"results": [{"stream_tbs": bw, "sum_ok": True},
                                                                 {"stream_tbs": 9.9, "sum_ok": False}]}}}}
    return probes, hop, dots, a3, bw


def test_floor_prices_each_piece_from_its_probe():
    rng = random.Random(5)
    probes, hop, dots, a3, bw = fake_probes(rng)
    for fmt, shape, per_round in (("bf16", "x-perm", 32 * 1024), ("fp8", "e4m3-kernel", 64 * 1024), ("nvfp4", "e4m3-kernel", 64 * 1024)):
        blocks = rng.choice([112, 120, 128, 132])
        f = cm.floor(probes, fmt, 128, blocks, layer0_extra_us=3.0)
        rate = per_round / dots[shape]
        by = {p["phase"]: p for p in f["phases"]}
        assert by["s_down"]["hop_us"] == pytest.approx(hop[3072])  # 3,072 activations
        assert all(by[n]["hop_us"] == pytest.approx(hop[1024]) for n in PHASES if n != "s_down")
        assert by["s_attn"]["work_us"] == pytest.approx(a3[64])
        assert by["s_qkv"]["work_us"] == pytest.approx(M.hidden * (M.num_q_heads + 2 * M.num_kv_heads) * M.head_dim / blocks / rate)
        assert by["s_mlp"]["work_us"] == pytest.approx(2 * M.intermediate * M.hidden / blocks / rate)
        head = M.vocab * M.hidden * (2 if fmt == "bf16" else 1) + (0 if fmt == "bf16" else 4 * M.vocab)
        assert f["head_us"] == pytest.approx(head / (bw * 1e6))
        assert f["token_us"] == pytest.approx(28 * f["layer_us"] + 3.0 + f["head_us"])
    # few cached positions: the 16-position row is a valid (smaller) bound
    assert cm.floor(probes, "bf16", 10, 128, 0.0)["phases"][1]["work_us"] == pytest.approx(min(a3.values()))


def test_floor_refuses_missing_probe_rows():
    rng = random.Random(8)
    probes, *_ = fake_probes(rng)
    probes["hop"]["rows"] = [r for r in probes["hop"]["rows"] if r["words"] != 3072]
    with pytest.raises(ValueError, match="3072"):
        cm.floor(probes, "bf16", 128, 128, 0.0)


def test_targets_against_the_floor():
    rng = random.Random(2)
    summ, _, _ = fake_summary(rng)
    probes, *_ = fake_probes(rng)
    r = cm.report(summ, probes, [100.0, 1e5])
    fl = r["floor"]
    slow, fast = r["targets"]
    assert slow["reachable_at_floor"] and not fast["reachable_at_floor"]
    for t in r["targets"]:
        assert t["layer_budget_us"] == pytest.approx((1e6 / t["tok_s"] - fl["head_us"] - (r["measured"]["layer0_us"] - r["measured"]["layer_us"])) / 28)
    assert fast["hops_that_fit"] == 0.0
    json.dumps(r)  # the --json output


def test_png(tmp_path):
    rng = random.Random(4)
    summ, _, _ = fake_summary(rng)
    probes, *_ = fake_probes(rng)
    out = cm.chain_png(cm.report(summ, probes, []), tmp_path / "d" / "chain.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def real():
    from monolith.xray.analyze import analyze
    from monolith.xray.raw import load_raw

    path = cm.REPO / "results/xray/bf16-stream.raw.npz"
    if not path.exists():
        pytest.skip("no committed bf16-stream X-ray")
    return analyze(*load_raw(path))


def test_real_trace_reproduces_its_token_and_sits_above_the_floor(real):
    r = cm.report(real, cm.load_probes(), [3150.0])
    m, f = r["measured"], r["floor"]
    # the chain of the mean layer accounts for the traced launch within 5 %
    assert abs(m["token_mean_us"] / m["trace_token_us"] - 1) < 0.05
    assert f["token_us"] < m["token_us"]
    for a, b in zip(m["phases"], f["phases"], strict=True):
        assert b["segment_us"] < a["segment_us"], a["phase"]


def test_cli(tmp_path, capsys):
    bad = tmp_path / "bad.raw.npz"
    bad.write_bytes(b"not a zip")
    assert cm.main([str(bad)]) == 2
    assert "error" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cm.main(["--help"])
    assert e.value.code == 0


def test_what_if_prices_a_changed_chain():
    rng = random.Random(9)
    probes, hop, *_ = fake_probes(rng)
    fl = cm.floor(probes, "bf16", 128, 128, layer0_extra_us=2.5)
    w = cm.what_if(fl, ["s_down.hop=0", "s_mlp.work=+0.43", "s_down.work=0", "s_qkv.hop=2.05"])
    by, old = {p["phase"]: p for p in w["phases"]}, {p["phase"]: p for p in fl["phases"]}
    assert by["s_down"]["hop_us"] == 0 and by["s_down"]["work_us"] == 0 and by["s_qkv"]["hop_us"] == 2.05
    assert by["s_mlp"]["work_us"] == pytest.approx(old["s_mlp"]["work_us"] + 0.43)
    assert by["s_attn"] == {**old["s_attn"], "segment_us": old["s_attn"]["hop_us"] + old["s_attn"]["work_us"]}
    assert fl["phases"][0]["hop_us"] == pytest.approx(hop[1024])  # the floor itself is not changed
    layer = sum(p["hop_us"] + p["open_us"] + p["work_us"] for p in w["phases"])
    assert w["layer_us"] == pytest.approx(layer)
    assert w["token_us"] == pytest.approx(28 * layer + 2.5 + fl["head_us"])
    assert cm.what_if(fl, ["s_mlp.open=-0"])["layer_us"] == pytest.approx(fl["layer_us"])
    for bad, why in (("s_foo.hop=1", "phases are"), ("s_qkv.bytes=1", "pieces are"), ("s_qkv.hop", "expected"),
                     ("s_qkv.hop=fast", "expected"), ("s_qkv.hop=-9", "negative")):
        with pytest.raises(ValueError, match=why):
            cm.what_if(fl, [bad])
    summ, _, _ = fake_summary(rng)
    r = cm.report(summ, probes, [], ["s_down.hop=0"])
    assert r["what_if"]["layer_us"] == pytest.approx(r["floor"]["layer_us"] - r["floor"]["phases"][4]["hop_us"])
    assert "what_if" not in cm.report(summ, probes, [])
