"""Benchmark protocol pieces: statistics, power arithmetic, byte model, refusal on a failed gate."""
import json

import pytest
import torch
from harness_fakes import FakeEngine, swap_top2_when
from monolith.bench import bytemodel, decode, power, suite
from monolith.bench.baselines import registry
from monolith.eval import correctness

from monolith import results


def test_stats_median_min_max():
    s = decode.stats([300.0, 100.0, 200.0, 500.0, 400.0])
    assert (s["median"], s["min"], s["max"]) == (300.0, 100.0, 500.0)
    u = decode.us_stats(s)
    assert u["median"] == pytest.approx(1e6 / 300) and u["min"] == pytest.approx(2000) and u["max"] == pytest.approx(1e4)


def test_prompt_budget():
    assert decode.prompts_within(None, 10, 5, 256, 20) == 20
    assert decode.prompts_within(24, 34, 5, 256, 20) == 1           # HF eager: one prompt per run
    assert decode.prompts_within(24, 3000, 5, 256, 20) == 20         # fast engines: everything
    assert decode.prompts_within(24, 600, 5, 256, 20) == 11


def test_power_arithmetic_from_synthetic_samples():
    samples = [(t * 0.05, 300.0) for t in range(201)]  # 10 s at 300 W
    assert power.energy_joules(samples) == pytest.approx(3000.0)
    assert power.mean_power(samples) == pytest.approx(300.0)
    ramp = [(0.0, 100.0), (1.0, 300.0), (2.0, 300.0), (3.0, 100.0)]
    assert power.energy_joules(ramp) == pytest.approx(200 + 300 + 200)
    assert power.mean_power(ramp, 1.0, 2.0) == pytest.approx(300.0)
    assert power.tokens_per_joule(25600, 300.0, 10.0) == pytest.approx(25600 / 3000)
    assert power.tokens_per_joule(100, None, 1.0) is None


def test_byte_model_numbers():
    m = bytemodel.ByteModel.bf16()
    assert m.layer_bytes * 28 / 1e6 == pytest.approx(880.9, abs=0.05)
    assert m.head_bytes / 1e6 == pytest.approx(311.2, abs=0.05)
    assert m.kv_per_position == 114_688
    assert m.bytes_per_token(256) - m.bytes_per_token(0) == 256 * 114_688   # 29 MB at 256
    assert list(bytemodel.decode_positions(10, 3)) == [11, 12, 13]
    p = bytemodel.predict_us({}, 0, 4.53)
    assert p["us"] == pytest.approx(263, abs=1) and "floor" in p["kind"]
    # four 0.9 µs barriers per layer: +100.8 µs (MISSION §2)
    p4 = bytemodel.predict_us({"time_model": {"syncs_per_layer": 4}}, 0, 4.53)
    assert p4["us"] - p["us"] == pytest.approx(28 * 4 * 0.9)


def _oracle(prompts, n):
    return correctness.oracle_runs(FakeEngine(), prompts, n)


@pytest.mark.parametrize("flip,ok", [(None, True), (swap_top2_when(lambda pos, m: pos == 6 and m > 0.5), False)])
def test_bench_refuses_speed_on_failed_gate(monkeypatch, flip, ok):
    monkeypatch.setattr(registry, "build", lambda name, ckpt, dev: FakeEngine(flip=flip))
    prompts = [[1, 2, 3], [4, 5, 6]]

    class Ck:
        shape = bytemodel.QWEN3_0_6B

    cfg = suite.SuiteConfig(engines=["reference"], device="cpu", tolerance=0.1, bench=decode.BenchConfig(
        runs=3, tokens=8, prompts=2, warmup_tokens=4, sweep_positions=(4,), sweep_window=2, sweep_reps=2, power=False))
    row = suite.measure("reference", registry.spec("reference"), Ck(), None, prompts, list(range(1, 30)),
                        _oracle(prompts, 12), cfg, None, 4.53)
    assert row["gate"]["passed"] is ok
    if ok:
        assert row["status"] == "ok" and row["tok_s"]["median"] > 0 and len(row["tok_s"]["runs"]) == 3
        assert row["timer"].startswith("perf_counter") and row["sweep"]["4"]["status"] == "ok"
        assert row["bytes_per_token"] > 1000 and row["predicted_us_per_token"] > 0
    else:
        assert row["status"] == "failed" and row["tok_s"] is None and "gate failed" in row["reason"]


def test_results_json_and_markdown(tmp_path):
    doc = results.new_doc({"gpu": "NVIDIA H200", "driver": "580"}, {"kind": "synthetic", "seed": 0, "sha256": "ab" * 32},
                          {"title": "t", "headline": False})
    ok = results.base_row("reference-graph", "graph")
    ok.update(status="ok", gate={"passed": True, "divergences": 2, "prompts": 20, "tokens_per_prompt": 256},
              tok_s={"median": 500.0, "min": 490.0, "max": 510.0, "runs": [500.0]}, us_per_token={"median": 2000.0},
              predicted_us_per_token=300.0, bytes_per_token=1_200_000_000, eff_bw_tbs=0.6, tok_per_joule=1.5,
              sweep={"16": {"status": "ok", "tok_s": {"median": 520.0}}, "2048": {"status": "not run"}},
              quality={"ppl": 10.0, "ref_ppl": 10.0, "agreement": 1.0, "kl": 0.0})
    bad = results.base_row("hf-static", "static")
    bad.update(status="failed", reason="correctness gate failed: x", gate={"passed": False, "divergences": 9})
    doc["rows"] = [ok, bad, results.base_row("vllm", "vLLM")]
    doc["rows"][2]["reason"] = "vllm not importable"
    doc["rows"][0]["nan"] = float("nan")
    j, md = results.write(doc, tmp_path / "m1.json")
    back = json.loads(j.read_text())
    assert back["schema"] == results.SCHEMA and back["rows"][0]["nan"] is None
    text = md.read_text()
    assert "Not headline" in text and "| graph | ok | pass (2 div, 20×256) | 500.0 | 490.0–510.0 |" in text
    assert "| vLLM | not run | – | – | – |" in text
    assert "FAIL" in text and "vllm not importable" in text and "520.0" in text and "Quality" in text
    old = {"created": "x", "rows": [dict(results.base_row("llamacpp-bf16", "l"), status="ok")]}
    merged = results.merge_rows({"rows": [ok]}, old)
    assert [r["engine"] for r in merged["rows"]] == ["llamacpp-bf16", "reference-graph"]


def test_llamacpp_rows(tmp_path):
    from monolith.bench.baselines import llamacpp
    assert llamacpp.rows_from_json(tmp_path / "none.json")[0]["status"] == "not run"
    p = tmp_path / "l.json"
    p.write_text(json.dumps({"status": "not run", "reason": "nvcc not found on PATH"}))
    assert "nvcc" in llamacpp.rows_from_json(p)[0]["reason"]
    p.write_text(json.dumps({"status": "ok", "version": "v", "results": {"bf16": [
        {"n_prompt": 0, "n_gen": 256, "avg_ts": 400.0, "samples_ts": [390.0, 400.0, 410.0], "model_size": 1_500_000_000}]}}))
    r = llamacpp.rows_from_json(p)[0]
    assert r["status"] == "ok" and r["tok_s"]["median"] == 400.0 and r["gate"]["passed"] is None


def test_vllm_not_run_row():
    from monolith.bench.baselines import vllm
    try:
        import vllm as _v  # noqa: F401
        pytest.skip("vllm installed")
    except ImportError:
        pass
    r = vllm.run("/nonexistent", decode.BenchConfig())
    assert r["status"] == "not run" and "not importable" in r["reason"]


def test_timeline_shape():
    tl = decode.timeline(FakeEngine(), [1, 2], 6)
    assert len(tl["tokens"]) == len(tl["t_us"]) == 6 and tl["t_us"] == sorted(tl["t_us"])
    assert torch.tensor(tl["tokens"]).dtype == torch.long
