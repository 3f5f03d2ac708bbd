"""Benchmark protocol pieces: statistics, power arithmetic, byte model, refusal on a failed gate."""
import json

import pytest
import torch
from harness_fakes import FakeEngine, swap_top2_when

from monolith import results
from monolith.bench import bytemodel, decode, suite
from monolith.bench.baselines import registry
from monolith.errors import MonolithError
from monolith.eval import correctness


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


def test_byte_model_numbers():
    m = bytemodel.ByteModel.bf16()
    assert m.layer_bytes * 28 / 1e6 == pytest.approx(880.9, abs=0.05)
    assert m.head_bytes / 1e6 == pytest.approx(311.2, abs=0.05)
    assert m.kv_per_position == 114_688
    assert m.bytes_per_token(256) - m.bytes_per_token(0) == 256 * 114_688   # 29 MB at 256
    assert list(bytemodel.decode_positions(10, 3)) == [11, 12, 13]
    p = bytemodel.predict_us({}, 0, 4.53)
    assert p["us"] == pytest.approx(263, abs=1) and "floor" in p["kind"]
    # four 0.9 µs barriers per layer: +100.8 µs (NOTES.md, Facts)
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
        assert row["bytes_per_token"] > 1000 and row["predicted_us_per_token"] is None  # CPU: no GPU time model
    else:
        assert row["status"] == "failed" and row["tok_s"] is None and "gate failed" in row["reason"]


class _Counting(FakeEngine):
    """Counts every position the engine computes (prefill, decode, teacher-forced, logits)."""

    steps = 0

    def _step(self, tok, in_decode=False):
        self.steps += 1
        return super()._step(tok, in_decode)


@pytest.mark.parametrize("prompts,det_prompts,det_repeats", [(3, 1, 3), (2, 2, 3), (4, 1, 2), (1, 3, 4)])
def test_gate_steps_count_what_the_gate_runs(prompts, det_prompts, det_repeats):
    """The slow gates' sizing counts correctness.gate_steps; this counts the gate's own work on
    one-token prompts (every pass then exactly n positions): a pass added to the gate without
    GATE_PASSES following fails here."""
    n = 7
    oset = _oracle([[i + 1] for i in range(prompts)], n)
    eng = _Counting()
    correctness.gate(eng, oset, det_prompts=det_prompts, det_repeats=det_repeats)
    assert eng.steps == correctness.gate_steps(prompts, n, det_prompts, det_repeats)


def test_slow_gate_keeps_to_its_budget(monkeypatch):
    """hf-eager's last lease: ~23.6 tok/s, 90 s: 2 prompts (3 passes each), not the 3 that took
    134 s. The sizing is the largest gate inside the budget, and the verdict says what it cut."""
    assert suite.gate_prompts_within(90, 23.6, 256, 20, 1, 3) == 2
    assert suite.gate_prompts_within(90, 18.0, 256, 20, 1, 3) == 1  # hf-static
    assert suite.gate_prompts_within(90, 229.0, 256, 20, 1, 3) == 20  # reference-graph: every prompt
    assert suite.gate_prompts_within(None, 1.0, 256, 20, 1, 3) == 20
    assert suite.gate_prompts_within(1, 1.0, 256, 20, 1, 3) == 1  # never fewer than one
    with pytest.raises(ValueError, match="warm-up rate"):
        suite.gate_prompts_within(90, float("nan"), 256, 20, 1, 3)
    for est in (15.0, 23.6, 40.0, 77.0):
        k = suite.gate_prompts_within(90, est, 256, 20, 1, 3)
        assert correctness.gate_steps(k, 256, 1, 3) / est <= 90 < correctness.gate_steps(k + 1, 256, 1, 3) / est
    monkeypatch.setattr(registry, "build", lambda name, ckpt, dev: _Counting())
    monkeypatch.setattr(suite, "warmup", lambda eng, p, n, clock: 10.0)  # 10 tok/s
    prompts = [[1], [2], [3], [4]]

    class Ck:
        shape = bytemodel.QWEN3_0_6B

    cfg = suite.SuiteConfig(engines=["reference"], device="cpu", gate_tokens=8, bench=decode.BenchConfig(
        runs=1, tokens=4, prompts=1, warmup_tokens=2, sweep_positions=(), power=False))
    # 6 s at 10 tok/s: 60 steps; 2 prompts take (2 x 3 + 2) x 8 = 64, 1 prompt (3 + 2) x 8 = 40
    row = suite.measure("reference", registry.spec("reference"), Ck(), None, prompts, list(range(1, 30)),
                        _oracle(prompts, 8), cfg, 6.0, 4.53)
    g = row["gate"]
    assert g["prompts"] == 1 and g["passed"] is True
    assert g["reduced"].startswith("1/4 prompts (prompt 0 of the oracle's 4): gate budget 6 s at ~10.0 tok/s")
    assert "3 passes x 8 tokens per prompt + 2 determinism repeat(s) = 40 steps, ~4 s predicted" in g["reduced"]


def test_results_json_and_markdown(tmp_path):
    doc = results.new_doc({"gpu": "NVIDIA H200", "driver": "580"}, {"kind": "synthetic", "seed": 0, "sha256": "ab" * 32},
                          {"title": "t", "headline": False})
    ok = results.base_row("reference-graph", "graph")
    ok.update(status="ok", gate={"passed": True, "divergences": 2, "prompts": 20, "tokens_per_prompt": 256},
              tok_s={"median": 500.0, "min": 490.0, "max": 510.0, "runs": [490.0, 500.0, 510.0]}, us_per_token={"median": 2000.0},
              predicted_us_per_token=300.0, bytes_per_token=1_200_000_000, eff_bw_tbs=0.6, tok_per_joule=1.5,
              sweep={"16": {"status": "ok", "tok_s": {"median": 520.0}}, "2048": {"status": "not run"}},
              quality={"ppl": 10.0, "ref_ppl": 10.0, "agreement": 1.0, "kl": 0.0})
    bad = results.base_row("hf-static", "static")
    bad.update(status="failed", reason="correctness gate failed: x", gate={"passed": False, "divergences": 9})
    doc["rows"] = [ok, bad, results.base_row("vllm", "vLLM")]
    doc["rows"][2]["reason"] = "vllm not importable"
    doc["rows"][0]["nan"] = float("nan")  # JSON has no NaN: the writer refuses it (a null could hide a failure)
    with pytest.raises(MonolithError, match=r"rows\[0\]\.nan is nan"):
        results.write(doc, tmp_path / "m1.json")
    del doc["rows"][0]["nan"]
    j, md = results.write(doc, tmp_path / "m1.json")
    back = json.loads(j.read_text())
    assert back["schema"] == results.SCHEMA
    text = md.read_text()
    assert "Not headline" in text and "| graph | ok | pass (2 div, 20×256) | 500.0 | 490.0–510.0 |" in text
    assert "| vLLM | not run | – | – | – |" in text
    assert "FAIL" in text and "vllm not importable" in text and "520.0" in text and "Quality" in text
    old = {"created": "x", "rows": [dict(results.base_row("llamacpp-bf16", "l"), status="ok")]}
    merged = results.merge_rows({"rows": [ok]}, old)
    assert [r["engine"] for r in merged["rows"]] == ["llamacpp-bf16", "reference-graph"]
    assert merged["rows"][0]["from_earlier_run"] == "x"
    # a placeholder row gives way to the rows that replaced it; a measured "reference" stays
    old = {"created": "y", "rows": [results.base_row("llamacpp", "l"), dict(results.base_row("reference", "r"), status="ok")]}
    new = {"rows": [dict(results.base_row("llamacpp-bf16", "l"), status="ok"), dict(results.base_row("reference-graph", "g"))]}
    assert [r["engine"] for r in results.merge_rows(new, old)["rows"]] == ["reference", "llamacpp-bf16", "reference-graph"]


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


def _valid_doc():
    doc = results.new_doc({"gpu": "H200"}, {"kind": "synthetic"}, {"title": "t"})
    ok = results.base_row("reference-graph", "graph")
    ok.update(status="ok", gate={"passed": True}, tok_s={"median": 5.0, "min": 4.0, "max": 6.0, "runs": [4.0, 5.0, 6.0]},
              sweep={"16": {"status": "ok", "tok_s": {"median": 5.0, "min": 5.0, "max": 5.0}}},
              quality={"agreement": 0.99, "kl": 1e-4})
    ext = results.base_row("llamacpp-bf16", "llama.cpp")
    ext.update(status="ok", gate={"passed": None, "applicable": False}, tok_s={"median": 9.0, "min": 8.0, "max": 9.5})
    skipped = dict(results.base_row("vllm", "vLLM"), reason="not installed")
    doc["rows"] = [ok, ext, skipped]
    return doc


@pytest.mark.parametrize("breakage, needle", [
    (lambda d: d.update(schema="other/1"), "schema"),
    (lambda d: d.pop("env"), "'env'"),
    (lambda d: d["rows"][0]["gate"].update(passed=False), "gate did not pass"),
    (lambda d: d["rows"][0].update(gate=None), "no gate verdict"),
    (lambda d: d["rows"][0]["tok_s"].update(min=5.5), "min 5.5 <= median"),
    (lambda d: d["rows"][0]["tok_s"].update(runs=[4.0, 4.5, 6.0]), "do not match its runs"),
    (lambda d: d["rows"][0].update(status="fast"), "status 'fast'"),
    (lambda d: d["rows"][2].update(tok_s={"median": 1.0, "min": 1.0, "max": 1.0}), "but a tok_s is reported"),
    (lambda d: d["rows"][2].update(reason=""), "needs a reason"),
    (lambda d: d["rows"][0].pop("bytes_per_token"), "missing keys ['bytes_per_token']"),
    (lambda d: d["rows"][0]["sweep"].update({"x": {}}), "sweep entry 'x'"),
    (lambda d: d["rows"][0]["quality"].update(agreement=1.5), "outside [0, 1]"),
    (lambda d: d["rows"][0]["quality"].update(kl=-0.1), "KL -0.1 is negative"),
    # an ok row's gate must be an object that passed: none of these is one (issue 13, item 6)
    (lambda d: d["rows"][0].update(gate=False), "its gate is False"),
    (lambda d: d["rows"][0].update(gate="FAIL"), "its gate is 'FAIL'"),
    (lambda d: d["rows"][0].update(gate=[]), "its gate is []"),
    (lambda d: d["rows"][0].update(gate=0), "its gate is 0"),
    (lambda d: d["rows"][0].update(gate={}), "gate did not pass (passed: None)"),
    (lambda d: d["rows"][0].update(gate={"passed": "true"}), "gate did not pass (passed: 'true')"),
    (lambda d: d["rows"][0].update(gate={"passed": 1}), "gate did not pass (passed: 1)"),
    (lambda d: d["rows"][1].update(gate={"applicable": False, "passed": False}), "not-applicable gate must have passed: null"),
])
def test_results_validation_catches(breakage, needle):
    assert results.validate(_valid_doc()) == []
    doc = _valid_doc()
    breakage(doc)
    errs = results.validate(doc)
    assert any(needle in e for e in errs), errs


def test_invalid_results_are_kept_and_refused(tmp_path):
    from monolith.errors import MonolithError

    doc = _valid_doc()
    doc["rows"][0]["gate"]["passed"] = False
    with pytest.raises(MonolithError, match="gate did not pass"):
        results.write(doc, tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()
    assert json.loads((tmp_path / "m.invalid.json").read_text())["rows"][0]["engine"] == "reference-graph"


def test_committed_results_validate():
    from monolith import REPO_ROOT

    files = [p for p in (REPO_ROOT / "results").glob("*.json")
             if json.loads(p.read_text()).get("schema") == results.SCHEMA]
    assert files, "no monolith-results/1 files committed"
    for p in files:
        assert results.validate(json.loads(p.read_text())) == [], p.name


def test_llamacpp_script_end_to_end_with_fakes(tmp_path):
    """llamacpp.sh's flow without a GPU: a packed dir (fake converter), a fake prebuilt
    llama-bench printing llama-bench's JSON shape; the rows come out of its JSON. And the
    not-run path: a missing sdist is a JSON row with the reason, exit status 0."""
    import os
    import subprocess

    from monolith import REPO_ROOT
    from monolith.bench.baselines import llamacpp

    script = REPO_ROOT / "bench" / "baselines" / "llamacpp.sh"
    out = tmp_path / "none.json"
    r = subprocess.run(["bash", str(script), str(tmp_path / "missing.tar.gz"), str(tmp_path), str(out)],
                       capture_output=True, text=True, env={**os.environ, "WORK": str(tmp_path / "w0")})
    assert r.returncode == 0 and json.loads(out.read_text())["status"] == "not run"
    assert "sdist not found" in llamacpp.rows_from_json(out)[0]["reason"]

    pack = tmp_path / "pack"
    (pack / "bin").mkdir(parents=True)
    (pack / "convert_hf_to_gguf.py").write_text(
        "import sys\nout = sys.argv[sys.argv.index('--outfile') + 1]\nopen(out, 'w').write('gguf')\n")
    (pack / "BUILD-INFO.txt").write_text("llama-cpp-python 9.9; built elsewhere\n")
    bench = pack / "bin" / "llama-bench"
    bench.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "version: 1 (abc)"; exit 0; fi\n'
                     'echo \'[{"n_prompt": 0, "n_gen": 256, "avg_ts": 500.0, "samples_ts": [490.0, 500.0, 505.0],'
                     ' "model_size": 1000000000}]\'\n')
    bench.chmod(0o755)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    out = tmp_path / "l.json"
    r = subprocess.run(["bash", str(script), str(pack), str(ckpt), str(out)], capture_output=True, text=True,
                       env={**os.environ, "WORK": str(tmp_path / "w1"), "LLAMA_BENCH": str(bench)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "ok" and "prebuilt: llama-cpp-python 9.9" in doc["version"]
    rows = llamacpp.rows_from_json(out, {"tbs": 2.0, "source": "the run's measurement"})
    assert [x["engine"] for x in rows] == ["llamacpp-bf16", "llamacpp-q8_0"]
    assert rows[0]["tok_s"] == {"median": 500.0, "min": 490.0, "max": 505.0, "runs": [490.0, 500.0, 505.0]}
    assert rows[0]["eff_bw_tbs"] == pytest.approx(0.5) and rows[0]["predicted_us_per_token"] == pytest.approx(500.0)


def test_results_cli_validates_and_renders(tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_valid_doc()))
    broken = _valid_doc()
    broken["rows"][0]["gate"]["passed"] = False
    bad.write_text(json.dumps(broken))
    assert results.main([str(good), "--render"]) == 0 and "| graph | ok |" in (tmp_path / "good.md").read_text()
    assert results.main([str(good), str(bad), "--render"]) == 1
    assert not (tmp_path / "bad.md").exists() and "gate did not pass" in capsys.readouterr().out


def test_results_cli_fails_on_any_problem(tmp_path, capsys):
    """A file of another schema, one that is not JSON and one that is missing each make the
    check fail (it used to print "skipped" and exit 0 on a schema mismatch)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_valid_doc()))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(_valid_doc(), schema="monolith-results/0")))
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\xff{not json")
    assert results.main([str(good)]) == 0
    for p in (other, junk, tmp_path / "missing.json"):
        assert results.main([str(good), str(p)]) == 1, p
    out = capsys.readouterr().out
    assert "schema is 'monolith-results/0'" in out and "cannot be read as JSON" in out
