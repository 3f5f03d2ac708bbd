"""The probe runner without a GPU: the no-GPU error, probe-output parsing, summaries, the CLI."""
import json
import stat
import sys

import pytest

from monolith.errors import MonolithError
from monolith.probes import run as pr

# Recorded-style outputs (shape of what the probes print with --json; numbers illustrative).
BANDWIDTH_ROW = {"pattern": "interleaved", "blocks": 528, "threads": 512, "loads": 4, "regs": 32,
                 "bytes": 300000000, "stream_us": 66.2, "stream_us_min": 66.0, "stream_us_max": 66.9,
                 "stream_tbs": 4.53, "single_us": 77.7, "single_tbs": 3.86, "sum_ok": True}
OBPS_ROW = dict(BANDWIDTH_ROW, blocks=132, loads=8, stream_tbs=4.42, single_us=79.0)
SAMPLE = {
    "bandwidth": {"probe": "bandwidth", "ok": True, "sm_count": 132, "l2_bytes": 62914560,
                  "best": {"300000000": BANDWIDTH_ROW}, "best_one_block_per_sm": {"300000000": OBPS_ROW},
                  "results": [BANDWIDTH_ROW, OBPS_ROW]},
    "barrier": {"probe": "barrier", "ok": True, "sm_count": 132, "results": [
        {"blocks": 8, "status": "ok", "reason": "", "us_per_barrier": 0.8, "us_per_barrier_slope": 0.82},
        {"blocks": 132, "status": "ok", "reason": "", "us_per_barrier": 0.9, "us_per_barrier_slope": 0.91},
        {"blocks": 264, "status": "refused", "reason": "not co-resident", "us_per_barrier": 0,
         "us_per_barrier_slope": 0}]},
    "timers": {"probe": "timers", "ok": True, "globaltimer": {"min_delta_ns": 32, "mean_update_ns": 32.0},
               "clock64": {"cycles_per_ns_median": 1.98}, "cross_sm": {"globaltimer_spread_ns_median": 480.0}},
    "cvt": {"probe": "cvt", "ok": True, "e4m3": {"ok": True, "mismatches": 0},
            "e2m1": {"ok": True, "path": "bit trick (f16 = e2m1 * 2^-14)"},
            "throughput": {"blocks": 528, "e4m3": {"weight_tbs": 20.1}, "e2m1": {"weight_tbs": 9.5}}},
    "ncu": {"probe": "ncu", "ok": True, "status": "permission denied", "counters_available": False},
}


def test_parse_probe_output_takes_last_json_line():
    text = "warming up\n{not json}\n" + json.dumps({"probe": "x", "ok": True}) + "\n"
    assert pr.parse_probe_output(text) == {"probe": "x", "ok": True}
    for name, obj in SAMPLE.items():
        assert pr.parse_probe_output("progress...\n" + json.dumps(obj))["probe"] == name


def test_parse_probe_output_without_json():
    with pytest.raises(ValueError):
        pr.parse_probe_output("CUDA error cudaErrorNoDevice\n")


def test_summarize_sample():
    s = pr.summarize(SAMPLE)
    assert s["bandwidth_best_tbs"] == {"300000000": 4.53}
    assert s["bandwidth_one_block_per_sm_tbs"] == {"300000000": 4.42}
    assert "528x512 loads 4" in s["bandwidth_best_config"]["300000000"]
    assert s["barrier_us"] == {"8": 0.8, "132": 0.9}
    assert s["barrier_us_one_block_per_sm"] == 0.9
    assert s["globaltimer_tick_ns"] == 32 and s["clock64_ghz"] == 1.98
    assert s["cvt_ok"] is True and s["decode_weight_tbs"]["e2m1"] == 9.5
    assert s["ncu_counters"] is False
    md = pr.markdown({"env": {"gpu": "NVIDIA H200"}, "summary": s, "created": "now",
                      "probes": {k: dict(v, status="ok") for k, v in SAMPLE.items()}})
    assert "| bandwidth | ok |" in md


def _fake_probe(tmp_path, body: str):
    exe = tmp_path / "fake_probe"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_run_probe_ok_and_failures(tmp_path):
    exe = _fake_probe(tmp_path, "import sys, json\nassert '--json' in sys.argv\n"
                                "print('noise'); print(json.dumps({'probe': 'cvt', 'ok': True}))")
    res = pr.run_probe(exe, [], timeout=30)
    assert res["status"] == "ok" and res["exit_code"] == 0
    bad = _fake_probe(tmp_path, "import sys\nprint('CUDA error', file=sys.stderr); sys.exit(1)")
    res = pr.run_probe(bad, [], timeout=30)
    assert res["status"] == "failed" and "no JSON" in res["reason"]
    nonzero = _fake_probe(tmp_path, "import sys, json\nprint(json.dumps({'probe': 'b', 'ok': False})); sys.exit(2)")
    assert pr.run_probe(nonzero, [], timeout=30)["status"] == "failed"
    slow = _fake_probe(tmp_path, "import time\ntime.sleep(30)")
    assert pr.run_probe(slow, [], timeout=1)["status"] == "timeout"


def test_arch_mapping():
    assert pr.arch_for_cc(9, 0) == "sm_90a"
    assert pr.arch_for_cc(12, 0) == "sm_120a"
    assert pr.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"


@pytest.fixture
def no_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pr.shutil, "which", lambda name: None)


def test_no_gpu_is_a_clear_error(no_gpu, tmp_path):
    with pytest.raises(MonolithError, match="no CUDA GPU"):
        pr.detect_gpu()
    out = tmp_path / "m0.json"
    with pytest.raises(MonolithError):
        pr.run_all(out)
    assert not out.exists()
    assert pr.main(["--out", str(out)]) == 2


def test_cli_probe_no_gpu(no_gpu, tmp_path):
    from typer.testing import CliRunner

    from monolith.cli import app
    r = CliRunner().invoke(app, ["probe", "--out", str(tmp_path / "x.json")])
    assert r.exit_code != 0
    assert isinstance(r.exception, MonolithError)  # main() prints it and exits 2


def test_cli_help_lists_probe_and_m0():
    from typer.testing import CliRunner

    from monolith.cli import app
    for cmd in ("probe", "m0"):
        r = CliRunner().invoke(app, [cmd, "--help"])
        assert r.exit_code == 0, r.output


def test_run_all_flow_with_fake_probes(monkeypatch, tmp_path):
    """run_all end to end with the GPU and nvcc faked: builds, runs, summarises, writes JSON + .md."""
    monkeypatch.setattr(pr, "detect_gpu", lambda: {"name": "Fake H200", "cc": "9.0", "arch": "sm_90a"})
    monkeypatch.setattr(pr, "collect_env", lambda gpu, nvcc: {"gpu": gpu["name"], "arch": gpu["arch"]})
    monkeypatch.setattr(pr.shutil, "which", lambda name: "/usr/bin/true")

    def fake_build(name, arch, nvcc, build_dir):
        if name == "barrier":
            raise RuntimeError("nvcc failed: simulated")
        obj = SAMPLE.get(name, {"probe": name, "ok": True})
        exe = _fake_probe_named(tmp_path, name, f"import json\nprint(json.dumps({obj!r}))")
        return exe, "ptxas info    : Compiling entry function '_Zk' for 'sm_90a'\nptxas info    : Used 40 registers"

    monkeypatch.setattr(pr, "build_probe", fake_build)
    monkeypatch.setattr(pr, "run_ncu_check", lambda exe, arch: SAMPLE["ncu"])
    out = tmp_path / "res" / "m0_probes.json"
    res = pr.run_all(out)
    saved = json.loads(out.read_text())
    assert saved["schema"] == pr.SCHEMA and out.with_suffix(".md").exists()
    assert saved["probes"]["barrier"]["status"] == "build failed"
    assert saved["probes"]["cvt"]["status"] == "ok"
    assert saved["probes"]["cvt"]["ptxas_registers"] == {"_Zk": 40}
    assert res["ok"] is False and saved["summary"]["bandwidth_best_tbs"] == {"300000000": 4.53}


def _fake_probe_named(tmp_path, name, body):
    exe = tmp_path / f"fake_{name}"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe
