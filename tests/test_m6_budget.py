"""The M6 lease's savings (notes/m6_budget.md): one oracle per lease (bench/oracle_cache.py), the
extension builds beside the oracles, the race timeline scaled to the timed runs' own decode, HF's
static cache sized per run, and `monolith m6 --plan` (bench/m6plan.py)."""

from __future__ import annotations

import datetime as dt
import json

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


def test_the_builds_run_beside_the_oracles(fake_m6, tmp_path, monkeypatch):
    """Every build starts before the first oracle and is waited on only after the last one."""
    from monolith.bench import m6
    from monolith.bench.baselines import registry

    events = []

    class P:
        def __init__(self, cmd, **kw):
            events.append(f"build {cmd[-1]}")
            self.returncode = 0

        def communicate(self):
            events.append("wait")
            return "tag\n", None

    monkeypatch.setattr(m6.subprocess, "Popen", P)
    real = registry.oracle
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: events.append("oracle") or real(ck, dev))
    import torch as _t

    monkeypatch.setattr(_t.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        m6,
        "_bench_cfg",
        lambda quick, nvml: decode.BenchConfig(
            runs=1, tokens=4, prompts=2, warmup_tokens=2, sweep_positions=(), power=False
        ),
    )
    cfg = _cfg(tmp_path, ["megakernel-bf16-stream", "megakernel-fp8-stream"])
    cfg.device = "cuda-fake"  # the build branch; the fake engines ignore the device
    monkeypatch.setattr("monolith.bench.power.gpu_uuid", lambda **k: None)
    monkeypatch.setattr("monolith.envinfo.collect", lambda dev: {"gpu": None})
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


def _row_file(rows_dir, engine, start, seconds, *, oracle=None, tok_s=None, fmt=None):
    r = m6_fakes.row(engine)
    r["gate"] = {"passed": True, **({"oracle": oracle} if oracle is not None else {})}
    if tok_s:
        r["tok_s"] = {**r["tok_s"], "median": tok_s}
        r.update(tokens_per_run=5120, prompts_per_run=20, timeline=f"timelines/{engine}.json")
    if fmt:
        r["weight_format"] = fmt
    s = m6_fakes.T0 + dt.timedelta(seconds=start)
    final.write_row_file(
        rows_dir,
        engine,
        [r],
        gpu_uuid="GPU-x",
        gpu="g",
        started=s.isoformat(),
        ended=(s + dt.timedelta(seconds=seconds)).isoformat(),
        env={},
        weights={},
        protocol={},
    )


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
