"""The M6 lease's savings (notes/m6_budget.md): one oracle per lease (bench/oracle_cache.py), the
extension builds beside the oracles, the race timeline scaled to the timed runs' own decode, HF's
static cache sized per run, the ahead work beside the oracles (hf-compile's caches warmed,
llama.cpp's GGUFs converted), and `monolith m6 --plan` (bench/m6plan.py)."""

from __future__ import annotations

import datetime as dt
import json
import sys

import pytest
from typer.testing import CliRunner

from monolith.bench import decode, final, m6plan, oracle_cache
from monolith.cli import app
from monolith.errors import MonolithError
from tests import m6_fakes

MACHINE = {"gpu_uuid": "GPU-test", "boot_id": "boot-1", "torch": "t", "cuda": "c"}


@pytest.fixture
def fake_m6(monkeypatch, ckpt2):
    """bench/m6.run on fake engines, with a machine identity (so the oracle file is used) and a
    count of the oracles computed."""
    from harness_fakes import FakeEngine

    from monolith.bench import suite
    from monolith.bench.baselines import registry

    built = []
    monkeypatch.setattr(suite, "load_inputs", lambda model: (ckpt2, None))
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    monkeypatch.setattr(registry, "spec", lambda name: registry.Spec(name, f"label {name}"))
    monkeypatch.setattr(registry, "weights_of", lambda name: "fp8" if "fp8" in name else "bf16")
    monkeypatch.setattr(registry, "checkpoint_for", lambda fmt, ck: ck)
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: built.append(dev) or FakeEngine())
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: FakeEngine())
    monkeypatch.setattr(oracle_cache, "identity", lambda uuid: dict(MACHINE))
    return built


def _cfg(tmp_path, engines, **kw):
    from monolith.bench import m6

    return m6.M6Config(
        engines=engines,
        rows_dir=tmp_path / "rows",
        device="cpu",
        quick=True,
        xray=False,
        quality="none",
        log=kw.pop("log", lambda m: None),
        **kw,
    )


def _oracle_of(path):
    return json.loads(path.read_text())["rows"][0]["gate"]["oracle"]


def test_a_second_process_of_the_lease_reads_the_oracle_instead_of_computing_it(fake_m6, tmp_path):
    from monolith.bench import m6

    first = m6.run(_cfg(tmp_path, ["megakernel-bf16-stream", "megakernel-fp8-stream"]))
    assert len(fake_m6) == 2  # bf16 and fp8, each once
    said = []
    second = m6.run(_cfg(tmp_path, ["reference-graph", "hf-eager"], log=said.append))
    assert len(fake_m6) == 2  # the baselines' bf16 oracle came from the lease's file
    assert any("read, not recomputed" in m for m in said)
    a, b = _oracle_of(first[0]), _oracle_of(second[0])
    assert "computed in this process" in a["source"] and a["seconds"] >= 0
    assert "read, not recomputed" in b["source"] and b["distinct_frac"] == a["distinct_frac"]
    assert json.loads(second[0].read_text())["rows"][0]["gate"]["passed"] is True
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "rows" / oracle_cache.ORACLE_DIR).glob("*.json")) == [
        "bf16",
        "fp8",
    ]
    final.merge(tmp_path / "rows", tmp_path / "final.json")  # the oracle files do not disturb the merge


def test_another_boot_other_prompts_or_an_old_file_compute_the_oracle_again(fake_m6, tmp_path, monkeypatch):
    from monolith.bench import m6, suite

    m6.run(_cfg(tmp_path, ["reference-graph"]))
    assert len(fake_m6) == 1
    monkeypatch.setattr(oracle_cache, "identity", lambda uuid: {**MACHINE, "boot_id": "boot-2"})  # a new machine
    m6.run(_cfg(tmp_path, ["reference-graph"]))
    assert len(fake_m6) == 2
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3], [4, 6], [6, 7, 8, 9]])
    m6.run(_cfg(tmp_path, ["reference-graph"]))
    assert len(fake_m6) == 3
    for f in (tmp_path / "rows" / oracle_cache.ORACLE_DIR).glob("*.json"):  # every file from an hour ago
        d = json.loads(f.read_text())
        d["created_unix"] -= 3600
        f.write_text(json.dumps(d))
    m6.run(_cfg(tmp_path, ["reference-graph"]))
    assert len(fake_m6) == 4
    monkeypatch.setattr(oracle_cache, "identity", lambda uuid: None)  # no GPU UUID or boot id: never cached
    m6.run(_cfg(tmp_path, ["reference-graph"]))
    m6.run(_cfg(tmp_path, ["reference-graph"]))
    assert len(fake_m6) == 6


def test_a_tampered_oracle_file_is_not_read(tmp_path):
    from harness_fakes import FakeEngine

    from monolith.eval import correctness

    prompts = [[1, 2], [3]]
    k = oracle_cache.key({"sha256": "a" * 64}, "bf16", prompts, 5, MACHINE)
    oset = correctness.oracle_runs(FakeEngine(), prompts, 5)
    p = oracle_cache.save(tmp_path, k, oset, 1.0)
    back, why = oracle_cache.load(tmp_path, k, 1800)
    assert why == "" and [r.tokens for r in back.runs] == [r.tokens for r in oset.runs]
    assert [r.margins for r in back.runs] == [r.margins for r in oset.runs]  # exact through JSON
    d = json.loads(p.read_text())
    d["runs"][1]["tokens"] = d["runs"][1]["tokens"][:-1]
    p.write_text(json.dumps(d))
    assert oracle_cache.load(tmp_path, k, 1800) == (None, "runs do not match the key's prompts and tokens")
    d["key"]["tokens"] = 6
    p.write_text(json.dumps(d))
    assert oracle_cache.load(tmp_path, k, 1800)[1] == "another oracle's key"
    assert oracle_cache.identity("GPU-x", boot_id_file=tmp_path / "none") is None
    (tmp_path / "boot").write_text("b\n")
    assert oracle_cache.identity(None, boot_id_file=tmp_path / "boot") is None
    assert oracle_cache.identity("GPU-x", boot_id_file=tmp_path / "boot")["boot_id"] == "b"


def _log_oracles(monkeypatch, events):
    """Every oracle the (fake) registry builds appends "oracle" to EVENTS, in order with the rest."""
    from monolith.bench.baselines import registry

    real = registry.oracle
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: events.append("oracle") or real(ck, dev))


def test_the_builds_run_beside_the_oracles(fake_m6, tmp_path, monkeypatch):
    """Every build starts before the first oracle and is waited on only after the last one."""
    from monolith.bench import m6

    events = []

    class P:
        def __init__(self, cmd, **kw):
            events.append(f"build {cmd[-1]}")
            self.returncode = 0

        def communicate(self):
            events.append("wait")
            return "tag\n", None

    monkeypatch.setattr(m6.subprocess, "Popen", P)
    _log_oracles(monkeypatch, events)
    _cuda_fake(monkeypatch, m6)
    cfg = _cfg(tmp_path, ["megakernel-bf16-stream", "megakernel-fp8-stream"])
    cfg.device = "cuda-fake"  # the build branch; the fake engines ignore the device
    m6.run(cfg)
    assert events[:2] == ["build bf16-stream", "build fp8-stream"]
    assert events[2:4] == ["oracle", "oracle"] and events[4:6] == ["wait", "wait"]


def test_the_packs_are_made_while_the_bf16_oracle_runs(fake_m6, tmp_path, monkeypatch):
    """The fp8 pack and the bf16 oracle meet at a barrier: done one after the other, they could not."""
    import threading

    from harness_fakes import FakeEngine

    from monolith.bench import m6
    from monolith.bench.baselines import registry

    meet = threading.Barrier(2, timeout=20)

    def pack(fmt, ck):
        meet.wait()
        return ck

    def oracle(ck, dev):
        if not fake_m6:  # the first oracle: bf16, whatever the engines' order
            meet.wait()
        fake_m6.append(dev)
        return FakeEngine()

    monkeypatch.setattr(registry, "checkpoint_for", pack)
    monkeypatch.setattr(registry, "oracle", oracle)
    files = m6.run(_cfg(tmp_path, ["megakernel-fp8-stream", "megakernel-bf16-stream"]))
    rows = [json.loads(f.read_text())["rows"][0] for f in files]
    assert [r["status"] for r in rows] == ["ok", "ok"] and len(fake_m6) == 2


def test_the_timeline_ends_where_the_timed_runs_decoded_prompt_0(monkeypatch):
    from harness_fakes import FakeEngine

    eng = FakeEngine()
    cfg = decode.BenchConfig(runs=3, tokens=6, prompts=2, warmup_tokens=2, sweep_positions=(), power=False)
    got: dict = {}
    decode.bench_engine(eng, [[1, 2], [3, 4, 5]], cfg, bw_tbs=4.5, tok_s_est=1e6, log=lambda m: None, first_prompt=got)
    assert got["prompt"] == [1, 2] and len(got["seconds"]) == 3 and len(got["tokens"]) == 6
    calls = []
    real = eng._decode
    monkeypatch.setattr(eng, "_decode", lambda first, n: calls.append(n) or real(first, n))
    tl = decode.timeline(eng, [1, 2], 6, scaled=True, one_call=got)
    assert calls == [1] * 6  # the single-token calls only: no decode(first, 6) again
    med = sorted(got["seconds"])[1]
    assert tl["t_us"][-1] == pytest.approx(med * 1e6, rel=1e-3) and "median of the timed runs' 3" in tl["method"]
    assert "scale_note" not in tl and tl["tokens"] == got["tokens"]
    calls.clear()
    tl = decode.timeline(eng, [3, 4, 5], 6, scaled=True, one_call=got)  # another prompt: decoded here, as before
    assert calls == [1] * 6 + [6] and "one decode(first, 6) call" in tl["method"]
    with pytest.raises(ValueError, match="took"):
        decode.timeline(eng, [1, 2], 6, scaled=True, one_call={**got, "seconds": [float("nan")]})


def test_hf_static_sizes_its_cache_per_run_and_matches_the_full_cache(ckpt2, monkeypatch):
    from monolith.bench.baselines import hf

    prompt = [9707, 1879, 11, 374]
    full = hf.HFEngine(ckpt2.path, mode="static", fit_cache=False, context_cap=400)
    fit = hf.HFEngine(ckpt2.path, mode="static", context_cap=400)
    assert fit.fit_cache and not full.fit_cache and "per reset" in fit.info["static_cache_len"]
    outs = []
    for e in (full, fit):
        e.reset()
        f = e.prefill(prompt)
        outs.append([f, *e.decode(f, 12).tolist()])
    assert outs[0] == outs[1]
    assert fit._cache_len == 320 and fit.cache.layers[0].keys.shape[2] == 320  # 4 + 256, rounded up to 64
    assert full.cache.layers[0].keys.shape[2] == 400
    fit.reset()
    assert fit.cache is None  # the next run's first call sizes it
    fit.prefill(list(range(100, 200)))
    assert fit._cache_len == 384  # 100 + 256 -> 384; at most the context cap:
    fit.reset()
    fit.prefill(list(range(100, 300)))
    assert fit._cache_len == 400
    # a call past the reserve grows the cache and keeps what it holds: the same tokens as without growth
    monkeypatch.setattr(hf, "STATIC_RESERVE", 2)
    monkeypatch.setattr(hf, "STATIC_ALIGN", 1)
    fit.reset()
    f = fit.prefill(prompt)
    assert fit._cache_len == 6
    got = [f, *fit.decode(f, 5).tolist()]
    got += fit.decode(got[-1], 7).tolist()
    assert got == outs[1] and fit._cache_len == 4 + 12 + 2
    with pytest.raises(MonolithError, match="mode 'static' only"):
        hf.HFEngine(ckpt2.path, mode="eager", fit_cache=True)


def _write_rows(rows_dir, engine, rows, start, seconds):
    """ENGINE's row file holding ROWS, measured from T0 + START for SECONDS (the plan reads the
    windows and the gaps between them from these times)."""
    s = m6_fakes.T0 + dt.timedelta(seconds=start)
    final.write_row_file(
        rows_dir,
        engine,
        rows,
        gpu_uuid="GPU-x",
        gpu="g",
        started=s.isoformat(),
        ended=(s + dt.timedelta(seconds=seconds)).isoformat(),
        env={},
        weights={},
        protocol={},
    )


def _row_file(rows_dir, engine, start, seconds, *, oracle=None, tok_s=None, fmt=None):
    r = m6_fakes.row(engine)
    r["gate"] = {"passed": True, **({"oracle": oracle} if oracle is not None else {})}
    if tok_s:
        r["tok_s"] = {**r["tok_s"], "median": tok_s}
        r.update(tokens_per_run=5120, prompts_per_run=20, timeline=f"timelines/{engine}.json")
    if fmt:
        r["weight_format"] = fmt
    _write_rows(rows_dir, engine, [r], start, seconds)


def test_plan_of_rows_before_the_change_takes_the_moved_work_out(tmp_path):
    """Older rows (an oracle without a "source"): the first engine of each format in each process
    (rows without a gap) carried the oracle; every timed row the timeline's extra decode."""
    rows = tmp_path / "rows"
    old = {"engine": "reference-fp32 (CUDA graph)"}
    _row_file(rows, "megakernel-bf16-stream", 0, 80, oracle=old, tok_s=1000.0)  # oracle inside
    _row_file(rows, "megakernel-fp8-stream", 80, 70, oracle=old, tok_s=2000.0, fmt="fp8")  # its own format: inside
    _row_file(rows, "megakernel-bf16-upstream", 150, 30, oracle=old, tok_s=1280.0)  # bf16 again, same process
    _row_file(rows, "reference-graph", 200, 240, oracle=old, tok_s=256.0)  # a new process (20 s gap): inside
    units = m6plan.load_units(rows)
    assert [(u.engine, u.oracle_inside) for u in units] == [
        ("megakernel-bf16-stream", True),
        ("megakernel-fp8-stream", True),
        ("megakernel-bf16-upstream", False),
        ("reference-graph", True),
    ]
    assert units[3].timeline_extra_s == pytest.approx(1.0) and units[2].timeline_extra_s == pytest.approx(0.2)
    p = m6plan.plan(
        units,
        m6plan.parse_groups("bf16-stream,fp8-stream,bf16-upstream;reference-graph,hf-eager"),
        oracle_s=40,
        build_s=30,
        process_s=10,
        start_s=300,
        lease_s=1000,
    )
    g1, g2 = p.groups
    assert [e["s"] for e in g1["engines"]] == [
        pytest.approx(80 - 40 - 0.256, abs=0.1),
        pytest.approx(70 - 40 - 0.128, abs=0.1),
        pytest.approx(30 - 0.2, abs=0.1),
    ]
    assert g1["prep_s"] == 80 and g1["oracles"] == {"bf16": 40, "fp8": 40}  # builds (30 s) hide under the oracles
    assert g2["oracles"] == {} and g2["oracles_read"] == ["bf16"] and g2["prep_s"] == 0
    assert p.unknown == ["hf-eager"] and p.fits is None
    assert any("cannot tell" in line and "hf-eager" in line for line in m6plan.render(p, "x"))
    p = m6plan.plan(
        units,
        m6plan.parse_groups("bf16-stream,fp8-stream,bf16-upstream;reference-graph,hf-eager"),
        assume={"hf-eager": 100},
        oracle_s=40,
        build_s=30,
        process_s=10,
        start_s=300,
        lease_s=1000,
    )
    want = 300 + (10 + 80 + 39.6 + 29.9 + 29.8) + (10 + 0 + 199 + 100) + m6plan.MERGE_S
    assert p.total_s == pytest.approx(want, abs=0.5) and p.fits is True
    p = m6plan.plan(units, m6plan.parse_groups("reference-graph,hf-eager"), assume={"hf-eager": 900}, lease_s=1000)
    assert p.fits is False and "DOES NOT FIT" in m6plan.render(p, "x")[-1]


def test_plan_of_present_rows_uses_their_oracle_seconds(tmp_path):
    rows = tmp_path / "rows"
    new = {"source": "computed in this process (no file)", "seconds": 25.0}
    _row_file(rows, "megakernel-bf16-stream", 0, 30, oracle=new, tok_s=1000.0)
    _row_file(rows, "reference-graph", 40, 200, oracle={**new, "source": "this lease's oracle file ..."}, tok_s=250.0)
    units = m6plan.load_units(rows)
    assert not any(u.oracle_inside or u.timeline_extra_s for u in units)
    p = m6plan.plan(units, m6plan.parse_groups("bf16-stream;reference-graph"), build_s=10, process_s=5, start_s=0)
    assert p.groups[0]["prep_s"] == 25 and p.groups[0]["s"] == 5 + 25 + 30 and p.groups[1]["s"] == 5 + 200


def test_plan_inputs_and_the_cli(tmp_path):
    assert m6plan.default_groups()[0][0] == "megakernel-bf16-upstream"  # scripts/m6_lease.sh's own line
    assert m6plan.parse_assume(["hf-static=460", "fp8-stream=20"]) == {
        "hf-static": 460.0,
        "megakernel-fp8-stream": 20.0,
    }
    for bad in (["hf-static"], ["hf-static=nan"], ["=3"], ["x=-1"]):
        with pytest.raises(MonolithError, match="ENGINE=SECONDS"):
            m6plan.parse_assume(bad)
    with pytest.raises(MonolithError, match="none empty"):
        m6plan.parse_groups("a;;")
    with pytest.raises(MonolithError, match="no such file"):
        m6plan.load_units(tmp_path / "nothing")
    m6_fakes.write_rows(tmp_path / "rows")
    r = CliRunner().invoke(app, ["m6", "--plan", str(tmp_path / "rows"), "--lease-s", "100000"])
    assert r.exit_code == 0, r.output
    assert "group 2:" in r.output and "fits" in r.output and "hf-static" in r.output
    r = CliRunner().invoke(app, ["m6", "--plan", str(tmp_path / "rows"), "--groups", "hf-static;nope-engine"])
    assert r.exit_code == 0 and "cannot tell" in r.output and "nope-engine" in r.output


def test_plan_of_the_committed_final_matrix():
    """The H100 lease of 2026-12-07 (results/final.json): every engine but hf-static measured."""
    from monolith import REPO_ROOT

    units = m6plan.load_units(REPO_ROOT / "results" / "final.json")
    assert "hf-static" not in {u.engine for u in units} and len(units) == 9
    p = m6plan.plan(units, m6plan.default_groups())
    assert p.unknown == ["hf-static"]
    assert all(e["s"] > 0 for g in p.groups for e in g["engines"] if e["s"] is not None)


# ---- the ahead work: hf-compile's caches warmed and llama.cpp's GGUFs made beside the oracles


def _cuda_fake(monkeypatch, m6):
    """m6.run's CUDA branch (builds, ahead work) on the fake engines."""
    import torch as _t

    monkeypatch.setattr(_t.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        m6,
        "_bench_cfg",
        lambda quick, nvml: decode.BenchConfig(
            runs=1, tokens=4, prompts=2, warmup_tokens=2, sweep_positions=(), power=False
        ),
    )
    monkeypatch.setattr("monolith.bench.power.gpu_uuid", lambda **k: None)
    monkeypatch.setattr("monolith.envinfo.collect", lambda dev: {"gpu": None})


def test_the_ahead_work_runs_beside_the_oracles_and_ends_before_the_first_engine(fake_m6, tmp_path, monkeypatch):
    """With the first oracle a process computes, hf-compile's warming and llama.cpp's conversions
    (its own engines' and the later processes') start; both end before the first engine's window.
    A process that computes no oracle starts none, and hf-compile's row names both compiles."""
    import time as _time

    from harness_fakes import FakeEngine

    from monolith.bench import m6
    from monolith.bench.baselines import registry

    events = []

    class P:  # the extension builds' and the ahead jobs' processes
        def __init__(self, cmd, **kw):
            self.cmd, self.returncode, self.pid = cmd, 0, 0
            joined = " ".join(cmd)
            self.tag = "warm" if "hf_warm" in joined else "convert" if "llamacpp_convert" in joined else "build"
            events.append(f"start {self.tag}")
            if self.tag != "build":
                assert cmd[:3] == ["nice", "-n", "10"]  # below the oracle's host thread and the builds

        def wait(self):
            _time.sleep(0.3)  # longer than the fake oracles: finish_ahead really waits
            if self.tag == "warm":
                rec = {
                    "status": "ok",
                    "compile_cold_s": 58.5,
                    "pid": 4242,
                    "started": "t0",
                    "ended": "t1",
                    "compile_cache": {"dir": "/tmp/ind"},
                }
                m6.warm_record(tmp_path / "rows").write_text(json.dumps(rec))
            events.append(f"end {self.tag}")
            return 0

        def poll(self):
            return 0

        def communicate(self):
            events.append("wait builds")
            return "tag\n", None

    monkeypatch.setattr(m6.subprocess, "Popen", P)
    _log_oracles(monkeypatch, events)

    def build(name, ck, dev):
        events.append(f"engine {name}")
        e = FakeEngine()
        if name == "hf-compile":
            e.info = {
                "compiled": True,
                "compile_warmup_s": 11.9,
                "compile_cache": {
                    "fxgraph_cache_hit": 1,
                    "fxgraph_cache_miss": 0,
                    "autograd_cache_hit": 1,
                    "dir": "/tmp/ind",
                },
            }
        return e

    monkeypatch.setattr(registry, "build", build)
    real_start = m6.start_ahead
    monkeypatch.setattr(m6, "start_ahead", lambda *a: events.append("ahead launched") or real_start(*a))
    _cuda_fake(monkeypatch, m6)
    monkeypatch.setenv("LLAMACPP_WORK", str(tmp_path / "llama-work"))
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "convert_hf_to_gguf.py").write_text("")
    said = []
    cfg = _cfg(
        tmp_path, ["megakernel-bf16-stream"], later=["hf-compile", "llamacpp"], llamacpp=str(pack), log=said.append
    )
    cfg.device = "cuda-fake"
    m6.run(cfg)
    assert events.index("start build") < events.index("ahead launched") < events.index("oracle")
    assert events.count("start warm") == events.count("start convert") == 1
    first = events.index("engine megakernel-bf16-stream")
    assert events.index("end warm") < first and events.index("end convert") < first
    assert any(m.startswith("beside the oracles: hf-compile") for m in said)
    assert any("hf-compile: torch.compile caches warmed" in m and "cold compile 58.5 s" in m for m in said)
    # the next process reads the oracle: nothing to hide under, and the caches are warm already
    events.clear()
    files = m6.run(_cfg(tmp_path, ["hf-compile"], llamacpp=str(pack)))
    assert "start warm" not in events and "start convert" not in events and "oracle" not in events
    info = json.loads(files[0].read_text())["rows"][0]["info"]
    assert info["compile_warmup_s"] == 11.9 and info["compile_cold_s"] == 58.5
    assert info["compile_caches"].startswith("warm: compile_warmup_s is this process's compile")
    assert "process 4242" in info["compile_caches"] and "another cache folder" not in info["compile_caches"]


def test_the_hf_compile_row_says_when_its_compile_was_not_warm(tmp_path):
    from monolith.bench import m6

    rows = tmp_path / "rows"
    cache = {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 1, "autograd_cache_hit": 0, "dir": "/a"}
    row = {"info": {"compiled": True, "compile_warmup_s": 58.0, "compile_cache": cache}}
    m6.attach_compile_warm(row, rows)
    assert row["info"]["compile_cold_s"] is None
    assert row["info"]["compile_caches"].startswith("not warmed (no warming ran in this lease)")
    (rows / m6.AHEAD_DIR).mkdir(parents=True)
    m6.warm_record(rows).write_text(json.dumps({"status": "failed", "reason": "CUDA out of memory"}))
    m6.attach_compile_warm(row, rows)
    assert row["info"]["compile_caches"].startswith("not warmed (CUDA out of memory)")
    m6.warm_record(rows).write_text(
        json.dumps({"status": "ok", "compile_cold_s": 57.0, "compile_cache": {"dir": "/b"}})
    )
    m6.attach_compile_warm(row, rows)  # warmed elsewhere, and this compile missed: said, never called warm
    assert row["info"]["compile_cold_s"] == 57.0
    assert row["info"]["compile_caches"].startswith("NOT warm (the caches missed)")
    assert "another cache folder (/b)" in row["info"]["compile_caches"]
    plain = {"info": {"mode": "eager"}}
    m6.attach_compile_warm(plain, rows)
    assert plain == {"info": {"mode": "eager"}}  # not a compiled engine: nothing added


def test_ahead_work_over_its_wait_is_stopped(tmp_path):
    """A job still running when the wait is over is killed (its process session), so it cannot run
    into the first engine's window."""
    import threading
    import time as _time

    from monolith.bench import m6

    job = m6.AheadJob(
        "hf-compile", "sleeping", [["sleep", "30"], ["touch", str(tmp_path / "never")]], tmp_path / "job.log"
    )
    job.t0 = _time.perf_counter()
    job.thread = threading.Thread(target=job.run, daemon=True)
    job.thread.start()
    said = []
    t0 = _time.perf_counter()
    m6.finish_ahead([job], said.append, limit_s=0.5)
    assert _time.perf_counter() - t0 < 10 and not job.thread.is_alive()
    assert job.proc.returncode == -9 and not (tmp_path / "never").exists()  # killed; the next step never ran
    assert any("stopped after 0 s of waiting" in m for m in said)
    bad = m6.AheadJob("llamacpp", "converting", [[str(tmp_path / "no-such-tool")]], tmp_path / "bad.log")
    bad.thread = threading.Thread(target=bad.run, daemon=True)
    bad.thread.start()
    m6.finish_ahead([bad], said.append, limit_s=10)
    assert bad.rc == 127 and "no-such-tool" in (tmp_path / "bad.log").read_text()
    assert any(m.startswith("  llamacpp: converting in") and "exit 127" in m for m in said)


def test_the_ahead_jobs_named(tmp_path, monkeypatch):
    """Which work a process starts: hf-compile only on CUDA and not once warmed in this lease;
    llama.cpp only with a pack (unpacked first, once)."""
    from monolith.bench import m6

    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "pack.tar.xz").write_bytes(b"")
    rows = tmp_path / "rows"
    cfg = m6.M6Config(
        engines=["hf-eager"], rows_dir=rows, device="cuda", later=["hf-compile", "llamacpp"], llamacpp=str(pack)
    )
    jobs = m6.ahead_jobs(cfg, tmp_path / "ckpt", rows)
    assert [j.engine for j in jobs] == ["hf-compile", "llamacpp"]
    assert jobs[1].cmds[0][:2] == ["tar", "xJf"] and jobs[1].cmds[1][0] == "touch"
    assert "llamacpp_convert.sh" in jobs[1].cmds[2][4]
    (pack / ".unpacked").touch()
    assert len(m6.ahead_jobs(cfg, tmp_path / "ckpt", rows)[1].cmds) == 1  # unpacked once
    (rows / m6.AHEAD_DIR).mkdir(parents=True)
    m6.warm_record(rows).write_text(json.dumps({"status": "ok"}))
    assert [j.engine for j in m6.ahead_jobs(cfg, tmp_path / "ckpt", rows)] == ["llamacpp"]
    cfg.device, cfg.llamacpp = "cpu", None
    m6.warm_record(rows).unlink()
    assert m6.ahead_jobs(cfg, tmp_path / "ckpt", rows) == []
    monkeypatch.setenv(m6.LATER_ENV, "bf16-stream, hf-compile")
    assert m6.later_engines() == ["megakernel-bf16-stream", "hf-compile"]
    assert m6.M6Config(engines=[], rows_dir=rows).later == ["megakernel-bf16-stream", "hf-compile"]


def test_hf_compile_counts_this_compiles_cache_hits(ckpt2, monkeypatch):
    """HFEngine records the FX-graph/AOT cache hits and misses of its own compile (torch's counters
    are per process and only grow: the row holds the difference)."""
    import torch
    from torch._dynamo.utils import counters

    from monolith.bench.baselines import hf

    def fake_compile(fn, **kw):
        counters["inductor"]["fxgraph_cache_hit"] += 1
        counters["aot_autograd"]["autograd_cache_hit"] += 1
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    counters["inductor"]["fxgraph_cache_miss"] += 5  # an earlier compile of this process
    eng = hf.HFEngine(ckpt2.path, mode="compile", device="cpu", context_cap=64)
    c = eng.info["compile_cache"]
    assert eng.info["compiled"] is True and eng.info["compile_warmup_s"] >= 0
    assert (c["fxgraph_cache_hit"], c["fxgraph_cache_miss"], c["autograd_cache_hit"]) == (1, 0, 1)
    assert c["dir"] and "unknown" not in c["dir"]


def test_hf_warm_records_the_cold_compile(ckpt2, tmp_path, monkeypatch):
    from monolith.bench.baselines import hf_warm, registry

    class E:
        info = {
            "compiled": True,
            "fullgraph": True,
            "compile_warmup_s": 58.5,
            "compile_cache": {"fxgraph_cache_miss": 1},
        }

    import torch._inductor.config as inductor_config

    built = []
    monkeypatch.setattr(inductor_config, "autotune_local_cache", True)  # restored after the test
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: built.append((name, dev)) or E())
    out = tmp_path / "ahead" / "hf-compile.json"
    doc = hf_warm.warm(str(out), str(ckpt2.path), "cuda:0")
    assert built == [("hf-compile", "cuda:0")]  # the measured row's own builder, so the cache keys agree
    back = json.loads(out.read_text())
    assert back == json.loads(json.dumps(doc)) and back["status"] == "ok" and back["compile_cold_s"] == 58.5
    assert back["compile_cache"] == {"fxgraph_cache_miss": 1} and back["process_s"] >= 0
    # its kernels' timings on the shared GPU are kept by nobody: the measured process tunes its own
    assert back["autotune_saved"] is False and inductor_config.autotune_local_cache is False
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: (_ for _ in ()).throw(RuntimeError("no GPU")))
    assert hf_warm.main([str(out), str(ckpt2.path)]) == 1
    back = json.loads(out.read_text())
    assert back["status"] == "failed" and back["reason"] == "RuntimeError: no GPU" and "compile_cold_s" not in back
    assert hf_warm.main(["--help"]) == 0 and hf_warm.main([]) == 2


def _fake_llama_pack(tmp_path):
    """A pack dir whose converter counts its calls, and a llama-bench printing one tg result."""
    pack = tmp_path / "pack"
    (pack / "bin").mkdir(parents=True)
    calls = tmp_path / "converter-calls"
    (pack / "convert_hf_to_gguf.py").write_text(
        "import sys\n"
        f"open({str(calls)!r}, 'a').write(sys.argv[sys.argv.index('--outtype') + 1] + '\\n')\n"
        "open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write('gguf')\n"
    )
    bench = pack / "bin" / "llama-bench"
    bench.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "version: 1 (abc)"; exit 0; fi\n'
        'echo \'[{"n_prompt": 0, "n_gen": 256, "avg_ts": 500.0, "samples_ts": [490.0, 500.0, 505.0],'
        ' "model_size": 1000000000}]\'\n'
    )
    bench.chmod(0o755)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"w" * 10)
    return pack, ckpt, calls


def test_llamacpp_conversion_split_from_the_benchmark(tmp_path):
    """llamacpp_convert.sh alone makes both GGUFs; llamacpp.sh then benchmarks without converting
    again and the rows say the conversion ran before (outside their window), with its seconds.
    New checkpoint files: converted again, inside. llamacpp.sh alone still converts."""
    import os
    import subprocess

    from monolith import REPO_ROOT
    from monolith.bench.baselines import llamacpp

    base = REPO_ROOT / "bench" / "baselines"
    pack, ckpt, calls = _fake_llama_pack(tmp_path)
    work = tmp_path / "work"
    env = {**os.environ, "PY": sys.executable, "WORK": str(work), "LLAMA_BENCH": str(pack / "bin" / "llama-bench")}
    r = subprocess.run(
        ["bash", str(base / "llamacpp_convert.sh"), str(pack), str(ckpt), str(work)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    conv = json.loads((work / "convert.json").read_text())
    assert sorted(conv["kinds"]) == ["bf16", "q8_0"] and all(k["status"] == "ok" for k in conv["kinds"].values())
    assert calls.read_text().split() == ["bf16", "q8_0"] and (work / "model-q8_0.gguf").read_text() == "gguf"

    def bench(out):
        r = subprocess.run(
            ["bash", str(base / "llamacpp.sh"), str(pack), str(ckpt), str(out)], capture_output=True, text=True, env=env
        )
        assert r.returncode == 0, r.stderr
        return llamacpp.rows_from_json(out)

    rows = bench(tmp_path / "a.json")
    assert calls.read_text().split() == ["bf16", "q8_0"]  # not converted again
    assert [x["status"] for x in rows] == ["ok", "ok"]
    c = rows[0]["conversion"]
    assert c["ahead"] is True and c["seconds"] == conv["kinds"]["bf16"]["seconds"] and "outside" in c["where"]
    (ckpt / "model.safetensors").write_bytes(b"v" * 11)  # other weights: the GGUFs are not theirs
    rows = bench(tmp_path / "b.json")
    assert calls.read_text().split() == ["bf16", "q8_0"] * 2
    assert rows[1]["conversion"]["ahead"] is False and "inside this row's window" in rows[1]["conversion"]["where"]
    r = subprocess.run(
        ["bash", str(base / "llamacpp_convert.sh"), str(tmp_path / "nowhere"), str(ckpt), str(work)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no convert_hf_to_gguf.py" in r.stderr


def test_llamacpp_convert_shellcheck_clean():
    import shutil
    import subprocess

    from monolith import REPO_ROOT

    sc = shutil.which("shellcheck")
    assert sc, "shellcheck is not installed: run `make deps`"
    for f in ("llamacpp_convert.sh", "llamacpp.sh"):
        r = subprocess.run([sc, str(REPO_ROOT / "bench" / "baselines" / f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


# ---- the plan with the ahead work and the gates' 3 passes


def _unit_file(rows_dir, engine, start, seconds, **extra):
    rows = [m6_fakes.row(x) for x in (["llamacpp-bf16", "llamacpp-q8_0"] if engine == "llamacpp" else [engine])]
    for r in rows:
        if engine != "llamacpp":
            r["gate"] = {"passed": True, "oracle": {"source": "computed in this process", "seconds": 30.0}}
        r.update(extra)
    _write_rows(rows_dir, engine, rows, start, seconds)


def test_plan_puts_the_ahead_work_beside_the_first_oracles_and_sizes_gates_at_3_passes(tmp_path):
    rows = tmp_path / "rows"
    _unit_file(rows, "megakernel-bf16-stream", 0, 30)
    _unit_file(rows, "hf-compile", 40, 200, info={"compiled": True, "compile_warmup_s": 58.5})  # compiled cold
    _unit_file(rows, "llamacpp", 240, 54)  # no `conversion`: converted inside its window
    old_gate = {
        "passed": True,
        "oracle": {"source": "read", "seconds": 30.0},
        "prompts": 3,
        "tokens_per_prompt": 256,
        "reduced": "3/20 prompts: time budget 90 s at ~24 tok/s",
        "determinism": [{"repeats": 3}],
    }
    _unit_file(rows, "hf-eager", 294, 400, warmup_tok_s=23.6)
    d = json.loads((rows / "row-hf-eager.json").read_text())
    d["rows"][0]["gate"] = old_gate
    (rows / "row-hf-eager.json").write_text(json.dumps(d))
    units = {u.engine: u for u in m6plan.load_units(rows)}
    assert units["hf-eager"].gate_extra_s == pytest.approx((11 - 8) * 256 / 23.6)  # 3 prompts -> 2
    assert units["hf-compile"].cold_compile_s == 58.5 and units["llamacpp"].convert_inside
    kw = dict(build_s=34, process_s=15, start_s=0, oracle_s=40)
    p = m6plan.plan(list(units.values()), m6plan.parse_groups("bf16-stream;hf-compile,llamacpp,hf-eager"), **kw)
    g1, g2 = p.groups
    assert g1["ahead"] == {"hf-compile": 58.5 + m6plan.WARM_PROCESS_S, "llamacpp": m6plan.UNPACK_S + m6plan.CONVERT_S}
    assert g1["prep_s"] == pytest.approx(58.5 + m6plan.WARM_PROCESS_S) and g2["ahead"] == {}  # over the 30 s oracle
    e = {x["engine"]: x for x in g2["engines"]}
    assert e["hf-compile"]["less"] == {"compile": 58.5 - m6plan.WARM_COMPILE_S}
    assert e["llamacpp"]["less"] == {"conversions": pytest.approx(m6plan.UNPACK_S + m6plan.CONVERT_S)}
    assert e["hf-eager"]["less"] == {"gate": pytest.approx(768 / 23.6, abs=0.05)}
    assert any("ahead work (hf-compile" in line for line in m6plan.render(p, "x"))
    # one process that computes no oracle (all read): no ahead work, nothing taken out of the windows
    p = m6plan.plan(list(units.values()), m6plan.parse_groups("bf16-stream;hf-compile;llamacpp"), **kw)
    assert p.groups[1]["ahead"] == {} and p.groups[0]["ahead"] == {"hf-compile": 70.5, "llamacpp": 33.8}
    p = m6plan.plan([units["hf-compile"]], m6plan.parse_groups("hf-compile"), **kw)  # its own process computes one
    assert p.groups[0]["engines"][0]["less"] == {"compile": 43.5}
    # rows measured with the ahead work: the warm compile stays in the window, the cold one is ahead
    _unit_file(rows, "hf-compile", 40, 160, info={"compiled": True, "compile_warmup_s": 14.0, "compile_cold_s": 57.0})
    u = next(u for u in m6plan.load_units(rows) if u.engine == "hf-compile")
    assert u.cold_compile_s is None and u.ahead_s == 57.0


def test_plan_of_the_committed_matrix_with_the_ahead_work():
    """results/final.json (2026-12-07): hf-compile's 58.5 s compile and llama.cpp's conversions move
    beside group 1's oracles (inside their 120 s), hf-eager's gate drops from 3 prompts to 2."""
    from monolith import REPO_ROOT

    units = m6plan.load_units(REPO_ROOT / "results" / "final.json")
    p = m6plan.plan(units, m6plan.default_groups(), assume={"hf-static": 446})
    g1, g2 = p.groups
    assert set(g1["ahead"]) == {"hf-compile", "llamacpp"} and g1["prep_s"] == 120
    e = {x["engine"]: x for x in g2["engines"]}
    assert e["hf-compile"]["less"]["compile"] == pytest.approx(58.5 - m6plan.WARM_COMPILE_S)
    assert "conversions" in e["llamacpp"]["less"] and e["hf-eager"]["less"]["gate"] == pytest.approx(32.5, abs=0.1)
    assert next(x for x in g1["engines"] if x["engine"] == "megakernel-nvfp4-stream")["less"]["pack"] == 20.0
