"""The milestone commands m3 ... m8 (monolith/cli_milestones.py) and m1's refusal on a CPU, the M6
runner's flow on fake engines (bench/m6.py), and scripts/gpu.sh calling the commands."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from monolith import REPO_ROOT
from monolith.bench import final
from monolith.cli import app
from monolith.errors import MonolithError
from tests import m6_fakes

runner = CliRunner()
MILESTONES = ["m3", "m4", "m5", "m6", "m7", "m8"]


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("cmd", MILESTONES + ["m1"])
def test_help(cmd):
    r = runner.invoke(app, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage" in r.output


@pytest.mark.parametrize("args", [["m1"], ["m1", "--max-total", "5"], ["m3"], ["m4"], ["m5"], ["m6"],
                                  ["m6", "--quick", "--engines", "fp8-stream,hf-eager"]])
def test_gpu_milestones_refuse_without_a_gpu(no_gpu, args):
    r = runner.invoke(app, args)
    assert isinstance(r.exception, MonolithError), r.output
    assert "CUDA GPU" in str(r.exception) and "\n" not in str(r.exception)


def test_refusal_is_one_line_exit_2_from_the_shell(tmp_path):
    """Through the real entry point (no GPU on the CI machine): one line on stderr, exit 2, and
    m1 starts no oracle (it used to run 20 x 256 fp32 steps at ~3 tok/s)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO_ROOT)}
    for cmd in (["m1"], ["m6", "--quick"]):
        r = subprocess.run([sys.executable, "-m", "monolith", *cmd], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "CUDA GPU" in r.stderr
        assert "oracle" not in r.stdout


def test_bad_steps_and_quality_are_refused(no_gpu):
    r = runner.invoke(app, ["m3", "--steps", "pack,warp"])
    assert isinstance(r.exception, MonolithError) and "unknown warp" in str(r.exception)
    r = runner.invoke(app, ["m6", "--quality", "guess"])
    assert isinstance(r.exception, MonolithError) and "--quality" in str(r.exception)
    r = runner.invoke(app, ["m6", "--device", "cpu", "--engines", "fp8-stream,nonsense"])
    assert isinstance(r.exception, MonolithError) and "unknown engine 'nonsense'" in str(r.exception)


def test_m4_table_alone_runs_on_a_cpu(no_gpu):
    r = runner.invoke(app, ["m4", "--steps", "table"])
    assert r.exit_code == 0, r.output
    assert "m4_stream_bf16.json" in r.output and "summary" in r.output


def test_m6_merge_from_the_cli(tmp_path):
    m6_fakes.write_rows(tmp_path / "rows")
    out = tmp_path / "final.json"
    r = runner.invoke(app, ["m6", "--merge", str(tmp_path / "rows"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert final.validate_final(json.loads(out.read_text())) == [] and out.with_suffix(".md").is_file()
    assert "megakernel-fp8-stream" in r.output
    m6_fakes.write_rows(tmp_path / "rows", ["hf-static"], uuid="GPU-other")
    r = runner.invoke(app, ["m6", "--merge", str(tmp_path / "rows"), "--out", str(out)])
    assert isinstance(r.exception, MonolithError) and "different GPUs" in str(r.exception)


def test_m8_reports_each_check(monkeypatch, tmp_path):
    """m8's steps run and the summary names them; a missing final.json is a failed step (exit 1)."""
    from monolith import cli_milestones as M

    monkeypatch.setattr(M, "RESULTS", tmp_path)
    monkeypatch.setattr(M, "M8_TESTS", ())
    monkeypatch.setattr(M, "_run", lambda cmd, env=None: "")
    r = runner.invoke(app, ["m8"])
    assert r.exit_code == 1 and "final.json" in r.output and "summary" in r.output
    doc = json.loads((Path(__file__).parent / "fixtures" / "final_example.json").read_text())
    (tmp_path / "final.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["m8"])
    assert "valid" in r.output


# ---- the runner on fake engines (no GPU): oracle, gate, timed runs, ungated label, row files, merge


@pytest.fixture
def fake_m6(monkeypatch, ckpt2):
    from harness_fakes import FakeEngine

    from monolith.bench import suite
    from monolith.bench.baselines import registry

    monkeypatch.setattr(suite, "load_inputs", lambda model: (ckpt2, None))
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    monkeypatch.setattr(registry, "spec", lambda name: registry.Spec(name, f"label {name}"))
    monkeypatch.setattr(registry, "weights_of", lambda name: "fp8" if "fp8" in name else "bf16")
    monkeypatch.setattr(registry, "checkpoint_for", lambda fmt, ck: ck)
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: FakeEngine())
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: FakeEngine(nondeterministic=name.startswith("hf-")))


def test_m6_runner_writes_row_files_that_merge(fake_m6, tmp_path, ckpt2):
    from monolith.bench import m6

    qf = tmp_path / "q.json"
    qf.write_text(json.dumps({"weights": {"sha256": ckpt2.describe()["sha256"]}, "pairs": []}))
    cfg = m6.M6Config(engines=["megakernel-fp8-stream", "hf-static", "hf-eager"], rows_dir=tmp_path / "rows",
                      device="cpu", quick=True, xray=False, quality="file", quality_files={"fp8": qf}, log=lambda m: None)
    files = m6.run(cfg)
    assert [f.name for f in files] == ["row-megakernel-fp8-stream.json", "row-hf-static.json", "row-hf-eager.json"]
    rows = {r["engine"]: r for f in files for r in json.loads(f.read_text())["rows"]}
    mk = rows["megakernel-fp8-stream"]
    assert mk["status"] == "ok" and mk["kind"] == "monolith" and mk["variant"] == "fp8-stream"
    assert mk["gates"]["implementation"]["passed"] is True
    assert mk["gates"]["quality"]["passed"] is None and "no pair for megakernel-fp8-stream" in mk["gates"]["quality"]["reason"]
    assert mk["energy"] == {"method": "not measured", "reason": "CPU run: no GPU energy counter"}
    # HF static: gate failed on the repeat alone -> speed kept, labelled; hf-eager is not in UNGATED_OK -> failed
    st = rows["hf-static"]
    assert st["status"] == "ok" and st["speed_label"] == final.UNGATED_LABEL and st["gate"]["verdict"]["passed"] is False
    assert rows["hf-eager"]["status"] == "failed" and rows["hf-eager"]["tok_s"] is None
    assert (tmp_path / "rows" / "timelines" / "megakernel-fp8-stream.json").is_file()
    tl = json.loads((tmp_path / "rows" / "timelines" / "megakernel-fp8-stream.json").read_text())
    assert tl["t_us"][-1] > 0 and len(tl["t_us"]) == len(tl["t_us_single"]) == 64 and "scaled" in tl["method"]
    doc = final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert doc["final"]["quick"] is True and doc["final"]["headline"] is None and doc["protocol"]["headline"] is False


def test_m6_slow_engine_keeps_every_prompt_and_records_fewer_runs(fake_m6, tmp_path, monkeypatch):
    from monolith.bench import decode, m6, suite

    monkeypatch.setattr(suite, "warmup", lambda eng, p, n, clock: 40.0)  # a 40 tok/s engine
    monkeypatch.setattr(m6, "_bench_cfg", lambda quick, nvml: decode.BenchConfig(
        runs=5, tokens=8, prompts=3, warmup_tokens=2, sweep_positions=(4,), sweep_window=2, sweep_reps=2))
    cfg = m6.M6Config(engines=["reference-graph"], rows_dir=tmp_path, device="cpu", quick=True, xray=False,
                      budget_s=1.5, log=lambda m: None)
    row = json.loads(m6.run(cfg)[0].read_text())["rows"][0]
    assert row["status"] == "ok" and row["prompts_per_run"] == 3  # never fewer prompts
    assert len(row["tok_s"]["runs"]) == 2 and "2 of 5 runs: under 100 tok/s" in row["runs_note"]


def test_quality_from_the_committed_file_needs_the_same_weights():
    from monolith.bench import m6

    f = m6.QUALITY_FILES["fp8"]
    doc = json.loads(f.read_text())
    q = m6.quality_from_file(f, "megakernel-fp8-stream", doc["weights"])
    assert q["passed"] is False and q["agreement"] == pytest.approx(doc["pairs"][1]["gates"]["agreement"])
    assert q["positions"] == 10_000 and q["prompts"] == 100 and q["agree_tokens"] == 64
    assert q["floor"]["engine"] == "megakernel-bf16-stream" and "earlier run" in q["source"]
    other = m6.quality_from_file(f, "megakernel-fp8-stream", {"sha256": "f" * 64})
    assert other["passed"] is None and "other weights" in other["reason"]


def test_llamacpp_rows_and_uniform_timeline_from_a_fake_pack(tmp_path, monkeypatch):
    from monolith.bench import decode, m6

    pack = tmp_path / "pack"
    (pack / "bin").mkdir(parents=True)
    (pack / "convert_hf_to_gguf.py").write_text(
        "import sys\nout = sys.argv[sys.argv.index('--outfile') + 1]\nopen(out, 'w').write('gguf')\n")
    bench = pack / "bin" / "llama-bench"
    bench.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 1 (abc)'; exit 0; fi\n"
                     "echo '{\"n_prompt\": 0, \"n_gen\": 64, \"samples_ns\": [100000000], \"samples_ts\": [640.0],"
                     " \"avg_ts\": 640.0, \"model_size\": 1000}'\n")
    bench.chmod(0o755)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    monkeypatch.setattr("monolith.checkpoint.ensure_checkpoint", lambda model: ckpt)
    monkeypatch.setenv("LLAMACPP_WORK", str(tmp_path / "work"))
    cfg = m6.M6Config(engines=["llamacpp"], rows_dir=tmp_path / "rows", llamacpp=str(pack), log=lambda m: None)
    rows = m6.llamacpp_rows(cfg, tmp_path / "rows", decode.BenchConfig.quick_config())
    assert [r["engine"] for r in rows] == ["llamacpp-bf16", "llamacpp-q8_0"] and rows[0]["tok_s"]["median"] == 640.0
    tl = json.loads((tmp_path / "rows" / "timelines" / "llamacpp-q8_0.json").read_text())
    assert len(tl["t_us"]) == 64 and tl["t_us"][-1] == pytest.approx(64 / 640 * 1e6) and "uniform" in tl["method"]
    none = m6.llamacpp_rows(m6.M6Config(engines=["llamacpp"], rows_dir=tmp_path), tmp_path, decode.BenchConfig())
    assert none[0]["status"] == "not run" and "--llamacpp" in none[0]["reason"]


# ---- scripts/gpu.sh calls the milestone commands


def test_gpu_sh_calls_the_milestone_commands(tmp_path):
    """A fake python3 first on PATH records every call: the stages are `python3 -m monolith mN`."""
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "calls.txt"
    (fake / "python3").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (fake / "python3").chmod(0o755)
    out = tmp_path / "out"
    (tmp_path / "m6rows").mkdir()
    (tmp_path / "m6rows" / "row-x.json").write_text("{}")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OUT": str(out), "M6_QUICK": "1",
           "M6_ROWS": str(tmp_path / "m6rows"),
           "M6_ENGINES": "fp8-stream,hf-eager", "M6_LLAMACPP": ".llamacpp"}
    r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu.sh"), "m3", "m3quality", "m4", "m5", "m5quality",
                        "m5sens", "m6", "m6merge", "m7", "m8"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    want = ["-m monolith m3 --steps tests,devbench,bench,xray", "-m monolith m3 --steps quality",
            "-m monolith m4 --steps bench,xray", "-m monolith m5 --steps sensitivity,pack,tests,bench,quality,xray",
            "-m monolith m5 --steps quality", "-m monolith m5 --steps sensitivity",
            f"-m monolith m6 --rows-dir {tmp_path}/m6rows --engines fp8-stream,hf-eager --quick --llamacpp .llamacpp",
            f"-m monolith m6 --merge {tmp_path}/m6rows --out {out}/final.json", "-m monolith m7", "-m monolith m8"]
    for w in want:
        assert any(c.startswith(w) for c in calls), (w, calls)
    assert not any("scripts/xray_raw.py" in c or "eval quality" in c for c in calls)  # no stage re-implemented
    import tarfile
    with tarfile.open(out / "m6rows.tgz") as t:  # the rows come back as one file (a call returns at most 8)
        assert "m6rows/row-x.json" in t.getnames()


def test_gpu_sh_all_does_not_start_m6():
    text = (REPO_ROOT / "scripts" / "gpu.sh").read_text()
    for stage in ("m5", "m6", "m6merge", "m7", "m8"):
        assert f"only {stage} &&" in text or f"if only {stage};" in text


def test_m3_and_m5_compose_their_steps_in_order(monkeypatch):
    """The milestone wiring on a CPU: every step's function is replaced by a recorder (the GPU
    refusal patched away); the order, the real checkpoint's suffix and the summary are checked."""
    import torch

    from monolith import cli_milestones as M

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(M, "_kernel_tests", lambda v: calls.append(("tests", v)) or "")
    monkeypatch.setattr(M, "_pack", lambda fmt, model, out, map_file=None: calls.append(("pack", fmt, map_file)) or "")
    monkeypatch.setattr(M, "_bench", lambda eng, model, out, quick, title, timelines=None:
                        calls.append(("bench", eng, out.name)) or "")
    monkeypatch.setattr(M, "_quality", lambda fmt, packed, model, engines, floors, out, quick:
                        calls.append(("quality", fmt, tuple(engines), tuple(floors), out.name)) or "")
    monkeypatch.setattr(M, "_xray", lambda model, v, real: calls.append(("xray", v, real)) or "")
    monkeypatch.setattr(M, "_run", lambda cmd, env=None: calls.append(("run", cmd[3] if len(cmd) > 3 else cmd[0])) or "")
    r = runner.invoke(app, ["m3", "--model", "/data/Qwen3-0.6B", "--steps", "xray,quality,bench"])
    assert r.exit_code == 0, r.output
    assert calls == [("pack", "fp8", None), ("bench", "megakernel-bf16-upstream,megakernel-fp8-upstream",
                                             "m3_fp8_qwen3-0-6b.json"),
                     ("quality", "fp8", ("megakernel-fp8-upstream", "megakernel-fp8-stream"),
                      ("megakernel-bf16-upstream", "megakernel-bf16-stream"), "m3_fp8_quality_qwen3-0-6b.json"),
                     ("xray", "fp8-upstream", True)]
    assert "summary" in r.output
    calls.clear()
    monkeypatch.setattr(M, "_bench", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    r = runner.invoke(app, ["m5", "--steps", "bench,xray"])
    assert r.exit_code == 1 and "boom" in r.output  # a failed step: the others still run, exit 1
    assert calls == [("xray", "nvfp4-stream", False)]


def test_prebuild_starts_one_build_per_variant_at_once(monkeypatch):
    from monolith.bench import m6

    started, logs = [], []

    class P:
        def __init__(self, cmd, **kw):
            started.append(cmd[-1])
            self.returncode = 0 if cmd[-1] != "nvfp4-stream" else 1

        def communicate(self):
            assert len(started) == 2  # every build started before the first is waited on
            return ("abc123\n" if self.returncode == 0 else "nvcc: error\n"), None

    monkeypatch.setattr(m6.subprocess, "Popen", P)
    m6.prebuild(["fp8-stream", "nvfp4-stream"], logs.append)
    assert started == ["fp8-stream", "nvfp4-stream"]
    assert any("fp8-stream: ok, tag abc123" in x for x in logs) and any("exit 1: nvcc: error" in x for x in logs)


def test_m6_one_engine_crashing_is_its_row_only(fake_m6, tmp_path, monkeypatch):
    from monolith.bench import m6
    from monolith.bench.baselines import registry

    def boom(fmt, ck):
        if fmt == "fp8":
            raise RuntimeError("no fp8 pack")
        return ck
    monkeypatch.setattr(registry, "checkpoint_for", boom)
    cfg = m6.M6Config(engines=["megakernel-fp8-stream", "reference-graph"], rows_dir=tmp_path, device="cpu",
                      quick=True, xray=False, log=lambda m: None)
    rows = [json.loads(f.read_text())["rows"][0] for f in m6.run(cfg)]
    assert rows[0]["status"] == "failed" and "no fp8 pack" in rows[0]["reason"] and rows[0]["kind"] == "monolith"
    assert rows[1]["status"] == "ok"


def test_m6_a_row_refused_for_a_nan_does_not_stop_the_next_engines(fake_m6, tmp_path, monkeypatch):
    from monolith.bench import m6

    real = m6.decorate

    def nan_for_fp8(r, name):
        real(r, name)
        if name == "megakernel-fp8-stream":
            r["tok_s"]["median"] = float("nan")
    monkeypatch.setattr(m6, "decorate", nan_for_fp8)
    said = []
    cfg = m6.M6Config(engines=["megakernel-fp8-stream", "reference-graph"], rows_dir=tmp_path, device="cpu",
                      quick=True, xray=False, quality="none", log=said.append)
    files = m6.run(cfg)
    assert [f.name for f in files] == ["row-reference-graph.json"]
    assert (tmp_path / "row-megakernel-fp8-stream.invalid.json").is_file()
    assert any(m.startswith("  refused: ") and "tok_s.median is nan" in m for m in said)
