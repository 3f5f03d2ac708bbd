"""Energy from NVML's total-energy counter (bench/power.py), with a fake NVML: the timed loop's
joules, tok/J on a harness row and on llama.cpp's rows, and a clear 'not measured' without NVML."""
from __future__ import annotations

import json
import time

import pytest

from monolith.bench import decode, power
from monolith.bench.baselines import llamacpp, llamacpp_run


class FakeNVML:
    """The three NVML calls the harness uses. The counter grows at `watts` with wall time."""

    def __init__(self, watts=400.0, broken=False):
        self.watts, self.broken, self.t0, self.inits = watts, broken, time.perf_counter(), 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-fake-uuid"

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if self.broken:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 5_000_000 + (time.perf_counter() - self.t0) * self.watts * 1e3  # mJ


def test_energy_row_arithmetic():
    e = power.energy_row(1_000_000, 5_000_000, window_s=10.0, decode_s=8.0, tokens=25600)
    assert e["joules"] == pytest.approx(4000) and e["mean_w"] == pytest.approx(400)
    assert e["tok_per_joule"] == pytest.approx(25600 / (400 * 8.0))
    bad = power.energy_row(1_000, 1_000, 10.0, 8.0, 100)  # a counter that did not move is no reading
    assert bad["method"] == "not measured" and "0.000 J" in bad["reason"]


def test_energy_between_interpolates_and_refuses_gaps():
    s = [(0.0, 0.0), (1.0, 300_000.0), (2.0, 700_000.0)]  # mJ
    assert power.energy_between(s, 0.5, 1.5) == pytest.approx(150 + 200)
    assert power.energy_between(s, 0.0, 2.0) == pytest.approx(700)
    assert power.energy_between(s, -1.0, 1.0) is None and power.energy_between(s, 1.0, 3.0) is None


def test_meter_without_nvml_says_why(monkeypatch):
    monkeypatch.setattr(power, "nvml_module", lambda: (None, "NVML not available (pynvml not importable: x)"))
    with power.EnergyMeter(0) as m:
        assert not m.available and "pynvml not importable" in m.error
    with power.EnergyMeter(0, nvml=FakeNVML(broken=True)) as m:
        assert not m.available and "NOT_SUPPORTED" in m.error


def test_meter_poll_records_the_counter():
    nv = FakeNVML(watts=500.0)
    with power.EnergyMeter(0, nvml=nv) as m:
        m.poll(0.005)
        t0 = time.perf_counter()
        time.sleep(0.2)
        t1 = time.perf_counter()
    assert nv.inits == 0 and len(m.samples) > 10
    assert power.energy_between(m.samples, t0, t1) == pytest.approx(500 * (t1 - t0), rel=0.05)


def test_gpu_uuid_from_nvml():
    assert power.gpu_uuid(0, nvml=FakeNVML()) == "GPU-fake-uuid"


def _bench(monkeypatch, nvml, power_on=True):
    from harness_fakes import FakeEngine, GpuLikeClock

    monkeypatch.setattr(decode, "Clock", GpuLikeClock)
    monkeypatch.setattr(decode, "_gpu_index", lambda e: 0)
    cfg = decode.BenchConfig(runs=3, tokens=8, prompts=2, warmup_tokens=4, sweep_positions=(), power=power_on, nvml=nvml)
    return decode.bench_engine(FakeEngine(), [[1, 2, 3], [4, 5]], cfg, bw_tbs=4.5, tok_s_est=1e6)


def test_bench_engine_reads_the_counter_around_the_timed_loop(monkeypatch):
    row = _bench(monkeypatch, FakeNVML(watts=300.0))
    e = row["energy"]
    assert e["method"] == power.NVML_METHOD and e["tokens"] == 3 * 2 * 8
    assert e["mean_w"] == pytest.approx(300.0, rel=0.02)  # the fake's power, recovered from the counter
    assert e["decode_s"] <= e["window_s"]
    assert row["tok_per_joule"] == pytest.approx(e["tokens"] / (e["mean_w"] * e["decode_s"]))


def test_bench_engine_without_nvml_is_not_measured(monkeypatch):
    monkeypatch.setattr(power, "nvml_module", lambda: (None, "NVML not available (pynvml not importable: x)"))
    row = _bench(monkeypatch, None)
    assert row["energy"] == {"method": "not measured", "reason": "NVML not available (pynvml not importable: x)"}
    assert row["tok_per_joule"] is None
    assert _bench(monkeypatch, FakeNVML(), power_on=False)["energy"]["method"] == "not measured"


def test_cpu_run_is_not_measured():
    from harness_fakes import FakeEngine

    cfg = decode.BenchConfig(runs=1, tokens=4, prompts=1, warmup_tokens=2, sweep_positions=())
    row = decode.bench_engine(FakeEngine(), [[1, 2]], cfg, bw_tbs=4.5, tok_s_est=1e6)
    assert row["energy"]["method"] == "not measured" and "CPU" in row["energy"]["reason"]


def test_llamacpp_run_cuts_the_repetitions_out_of_the_polled_counter(tmp_path):
    """A fake llama-bench that sleeps (its 'repetitions') and prints a jsonl tg line: the joules are
    the fake NVML's watts x the repetitions' summed samples_ns, and the row carries tok/J."""
    bench = tmp_path / "llama-bench"
    bench.write_text("#!/bin/sh\nsleep 0.3\n"
                     "echo '{\"n_prompt\": 0, \"n_gen\": 256, \"samples_ns\": [100000000, 100000000], "
                     "\"samples_ts\": [2560.0, 2560.0], \"avg_ts\": 2560.0, \"model_size\": 1000}'\nsleep 0.1\n")
    bench.chmod(0o755)
    out = tmp_path / "bench.json"
    assert llamacpp_run.run(str(bench), "m.gguf", 256, 2, str(out), nvml=FakeNVML(watts=250.0)) == 0
    t = json.loads(out.read_text())[0]
    e = t["monolith_energy"]
    assert e["method"] == power.NVML_METHOD and e["tokens"] == 512 and e["decode_s"] == pytest.approx(0.2)
    assert e["joules"] == pytest.approx(250 * 0.2, rel=0.1) and e["line_before_exit_s"] >= 0.05
    doc = {"status": "ok", "results": {"q8_0": [t]}}
    p = tmp_path / "llamacpp.json"
    p.write_text(json.dumps(doc))
    row = llamacpp.rows_from_json(p)[0]
    assert row["tok_per_joule"] == pytest.approx(512 / e["joules"]) and row["energy"]["method"] == power.NVML_METHOD


def test_llamacpp_run_without_nvml_and_json_array_output(tmp_path):
    out = [(1.0, '[{"n_prompt": 0, "n_gen": 8, "samples_ns": [1000]},\n'), (2.0, ' {"n_prompt": 512, "n_gen": 0}]\n')]
    tests = llamacpp_run.parse_output(out)
    assert [t for t, _ in tests] == [2.0, 2.0] and tests[1][1]["n_prompt"] == 512
    e = llamacpp_run.energy_of_test(tests[0][1], 2.0, 2.1, [], "NVML not available (x)")
    assert e == {"method": "not measured", "reason": "NVML not available (x)"}
    row = llamacpp.rows_from_json(_write(tmp_path, {"status": "ok", "results": {"bf16": [
        {"n_prompt": 0, "n_gen": 8, "samples_ts": [5.0]}]}}))[0]
    assert row["tok_per_joule"] is None and "llamacpp_run" in row["energy"]["reason"]


def _write(tmp_path, doc):
    p = tmp_path / "l.json"
    p.write_text(json.dumps(doc))
    return p
