"""The bandwidth under every predicted µs/token (bench/bwprobe.py): the GPU in hand's streaming read
from probes/bandwidth.cu, else a committed measurement of the same GPU model, else no prediction and
the reason; never the H200's 4.53 on another GPU. With fake probes and fake engines (CPU)."""

from __future__ import annotations

import copy
import json

import pytest

from monolith import REPO_ROOT, jsonio
from monolith.bench import bwprobe, bytemodel, decode, final
from tests import m6_fakes

H100 = "NVIDIA H100 80GB HBM3"
NOT_H200 = (H100, "NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 5090")


def _probe_result() -> dict:
    """What run_probe returned for probes/bandwidth.cu on the H200 (the committed M0 run)."""
    return copy.deepcopy(jsonio.load(REPO_ROOT / "results" / "m0_probes.json")["probes"]["bandwidth"])


def _fails(device, gpu):
    raise bwprobe.ProbeFailed("nvcc not found ($NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")


def _measures(tbs):
    calls = []

    def fn(device, gpu):
        calls.append((device, gpu))
        return {"tbs": tbs, "bytes": 300_000_000, "config": "interleaved 528x256 loads 8", "probe_s": 0.7}

    fn.calls = calls
    return fn


def _numbers(o) -> list:
    """Every number in a JSON document."""
    if isinstance(o, dict):
        return [x for v in o.values() for x in _numbers(v)]
    if isinstance(o, list):
        return [x for v in o for x in _numbers(v)]
    return [o] if isinstance(o, int | float) and not isinstance(o, bool) else []


@pytest.fixture
def no_legacy():
    """The byte model offers no bandwidth of its own (the old no-GPU 4.53 of load_bw_tbs / DEFAULT_BW_TBS):
    a prediction can only divide by the bandwidth record its caller passes."""
    for gone in ("load_bw_tbs", "DEFAULT_BW_TBS"):
        assert not hasattr(bytemodel, gone), f"bench/bytemodel.py offers {gone} again: a bandwidth of no GPU in hand"


# Python files that may carry the number 4.53: bench/bwprobe.py names it once (LEGACY_TBS) so that old
# records can be labelled; everything else takes a bandwidth record (bench/bwprobe.py) or the LEGACY_TBS name.
LEGACY_OWNER = "bench/bwprobe.py"


def test_no_code_carries_the_h200s_legacy_453_but_bwprobe():
    import io
    import tokenize

    found = []
    for top in ("bench", "xray", "scripts", "monolith", "eval", "quant", "probes"):
        for f in sorted((REPO_ROOT / top).rglob("*.py")) if (REPO_ROOT / top).is_dir() else []:
            rel = f.relative_to(REPO_ROOT).as_posix()
            toks = tokenize.generate_tokens(io.StringIO(f.read_text()).readline)
            hits = [
                t.start[0] for t in toks if t.type == tokenize.NUMBER and t.string.replace("_", "") in ("4.53", "4.530")
            ]
            found += [f"{rel}:{n}" for n in hits if rel != LEGACY_OWNER]
    assert found == [], f"4.53 as a number outside {LEGACY_OWNER}: {found}"


def test_llamacpp_rows_take_the_runs_bandwidth_or_none(tmp_path):
    from monolith.bench.baselines import llamacpp

    p = tmp_path / "l.json"
    p.write_text(
        json.dumps(
            {
                "status": "ok",
                "version": "v",
                "results": {
                    "bf16": [
                        {
                            "n_prompt": 0,
                            "n_gen": 256,
                            "avg_ts": 400.0,
                            "samples_ts": [400.0],
                            "model_size": 1_200_000_000,
                        }
                    ]
                },
            }
        )
    )
    bare = llamacpp.rows_from_json(p)[0]
    assert bare["status"] == "ok" and bare["predicted_us_per_token"] is None
    assert bare["prediction"]["reason"] == llamacpp.NO_BANDWIDTH
    rec = {"tbs": 3.0, "source": "measured now on the H100"}
    row = llamacpp.rows_from_json(p, rec)[0]
    assert row["predicted_us_per_token"] == pytest.approx(400.0) and row["prediction"]["bw_tbs"] == 3.0
    none = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="u", probe_fn=_fails, log=lambda m: None)
    row = llamacpp.rows_from_json(p, none)[0]
    assert row["predicted_us_per_token"] is None and row["prediction"]["reason"] == none["reason"]


# ---- the probe's number


def test_parse_takes_the_best_streaming_read_at_the_largest_read():
    m = bwprobe.parse(_probe_result(), "NVIDIA H200")
    assert m["tbs"] == 4.2804 and m["bytes"] == 300_000_000  # not the 32 MB best (2.89): that is a short phase
    assert m["config"] == "interleaved 528x256 loads 8"


@pytest.mark.parametrize(
    "breakit, msg",
    [
        (lambda r: r.update(status="failed", reason="CUDA error: no device"), "probe failed: CUDA error"),
        (lambda r: r.update(device=H100), "ran on 'NVIDIA H100 80GB HBM3', not on 'NVIDIA H200'"),
        (lambda r: r["best"]["300000000"].update(stream_tbs=float("nan")), "not a bandwidth"),
        (lambda r: r["best"]["300000000"].update(stream_tbs=450.0 * 1000), "not a bandwidth"),
        (lambda r: r["best"]["300000000"].update(sum_ok=False), "checksum"),
        (lambda r: r.update(best={}), "no best configuration"),
    ],
)
def test_parse_refuses_a_result_it_cannot_vouch_for(breakit, msg):
    r = _probe_result()
    breakit(r)
    with pytest.raises(bwprobe.ProbeFailed, match=msg.replace("(", r"\(").replace(")", r"\)")):
        bwprobe.parse(r, "NVIDIA H200")


def test_the_fallback_table_is_what_its_source_files_say():
    assert bwprobe.MEASURED, "the table names at least the H200's M0 measurement"
    for gpu, m in bwprobe.MEASURED.items():
        doc = jsonio.load(REPO_ROOT / m.file)
        assert doc["env"]["gpu"] == gpu
        assert doc["summary"]["bandwidth_best_tbs"]["300000000"] == m.tbs
        assert bwprobe.parse(doc["probes"]["bandwidth"], gpu)["tbs"] == m.tbs  # the same path as a live probe
    assert bwprobe.MEASURED["NVIDIA H200"].tbs == pytest.approx(4.28, abs=0.005)
    assert all(m.tbs != bwprobe.LEGACY_TBS for m in bwprobe.MEASURED.values())


def test_no_nvcc_is_a_probe_failure(monkeypatch):
    monkeypatch.setattr(bwprobe, "find_nvcc", lambda: None)
    with pytest.raises(bwprobe.ProbeFailed, match="nvcc not found"):
        bwprobe.probe("cuda", H100)


# ---- resolve: probe, table, none


def test_the_probe_result_is_used_and_recorded():
    said = []
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="GPU-h100", probe_fn=_measures(3.02), log=said.append)
    assert rec["tbs"] == 3.02 and rec["status"] == "measured"
    assert rec["gpu"] == H100 and rec["gpu_uuid"] == "GPU-h100" and rec["method"] == bwprobe.METHOD
    assert "probes/bandwidth.cu" in rec["method"] and "300 MB" in rec["source"] and H100 in rec["source"]
    keys = bwprobe.protocol_keys(rec)
    assert keys["bw_tbs_for_prediction"] == 3.02 and keys["bw_measurement"] is rec and "GPU-h100" in keys["bw_source"]
    assert any("3.020 TB/s" in m for m in said)


def test_a_failed_probe_on_the_h200_falls_back_to_its_committed_measurement():
    said = []
    rec = bwprobe.resolve("cuda", gpu="NVIDIA H200", gpu_uuid="GPU-h200", probe_fn=_fails, log=said.append)
    assert rec["tbs"] == 4.2804 and rec["status"] == "table" and rec["file"] == "results/m0_probes.json"
    assert "nvcc not found" in rec["probe_error"] and "results/m0_probes.json" in rec["source"]
    assert any("could not run" in m for m in said)  # said, never silent


def test_no_probe_and_no_committed_value_is_none_with_a_reason():
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="GPU-h100", probe_fn=_fails, log=lambda m: None)
    assert rec["tbs"] is None and rec["status"] == "none"
    assert H100 in rec["reason"] and "nvcc not found" in rec["reason"] and "NVIDIA H200" in rec["reason"]
    assert bwprobe.note(rec) == rec["reason"] and bwprobe.protocol_keys(rec)["bw_tbs_for_prediction"] is None


def test_a_probe_that_returns_nonsense_falls_back_too():
    rec = bwprobe.resolve("cuda", gpu=H100, probe_fn=_measures(float("inf")), gpu_uuid="u", log=lambda m: None)
    assert rec["tbs"] is None and "inf" in rec["reason"]


def test_cpu_and_nameless_gpus_are_not_probed():
    probe = _measures(3.0)
    assert bwprobe.resolve("cpu", gpu="none (CPU)", probe_fn=probe)["tbs"] is None
    assert "name is unknown" in bwprobe.resolve("cuda", gpu=None, probe_fn=probe)["reason"]
    assert probe.calls == []


@pytest.mark.parametrize("gpu", NOT_H200)
def test_453_is_never_used_on_a_gpu_that_is_not_the_h200(gpu, no_legacy, monkeypatch):
    """Whatever fails, a GPU that is not the H200 never gets the H200's 4.53 (nor its 4.28)."""
    for probe in (_fails, _measures(float("nan")), _measures(-1.0)):
        rec = bwprobe.resolve("cuda", gpu=gpu, gpu_uuid="GPU-x", probe_fn=probe, log=lambda m: None)
        assert rec["tbs"] is None, f"{gpu}: predicted at {rec['tbs']} TB/s without a measurement of it"
    row = _bench(monkeypatch, rec)
    assert row["predicted_us_per_token"] is None and row["roofline_frac"] is None
    assert gpu in row["prediction"]["reason"]
    rec = bwprobe.resolve("cuda", gpu=gpu, gpu_uuid="GPU-x", probe_fn=_measures(3.1), log=lambda m: None)
    row = _bench(monkeypatch, rec)
    assert row["prediction"]["bw_tbs"] == 3.1 and row["predicted_us_per_token"] == pytest.approx(
        bytemodel.predict_us({}, row["mean_position"], 3.1)["us"]
    )
    assert row["predicted_us_per_token"] != pytest.approx(bytemodel.predict_us({}, row["mean_position"], 4.53)["us"])


# ---- the row: bench_engine and external rows


def _bench(monkeypatch, rec, sweep=()):
    from harness_fakes import FakeEngine, GpuLikeClock

    monkeypatch.setattr(decode, "Clock", GpuLikeClock)
    cfg = decode.BenchConfig(
        runs=1, tokens=4, prompts=1, warmup_tokens=2, sweep_positions=sweep, sweep_window=2, sweep_reps=1, power=False
    )
    return decode.bench_engine(
        FakeEngine(),
        [[1, 2, 3]],
        cfg,
        sweep_seq=list(range(1, 40)),
        bw_tbs=rec["tbs"],
        tok_s_est=1e6,
        bw_note=bwprobe.note(rec),
        log=lambda m: None,
    )


def test_a_gpu_row_without_a_bandwidth_has_no_prediction_and_says_why(monkeypatch, no_legacy):
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="GPU-h100", probe_fn=_fails, log=lambda m: None)
    row = _bench(monkeypatch, rec, sweep=(16,))
    assert row["predicted_us_per_token"] is None and row["roofline_frac"] is None
    assert row["prediction"]["kind"] == decode.NO_BW_PREDICTION and row["prediction"]["reason"] == rec["reason"]
    assert row["sweep"]["16"]["status"] == "ok" and row["sweep"]["16"]["predicted_us_per_token"] is None


def test_a_gpu_row_names_the_bandwidth_it_was_predicted_at(monkeypatch):
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="GPU-h100", probe_fn=_measures(2.9), log=lambda m: None)
    row = _bench(monkeypatch, rec, sweep=(16,))
    assert row["prediction"]["bw_tbs"] == 2.9 and row["prediction"]["bw_source"] == rec["source"]
    assert row["sweep"]["16"]["predicted_us_per_token"] > row["predicted_us_per_token"] > 0


def test_predict_us_refuses_a_bandwidth_that_is_not_one():
    for bad in (None, 0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="not a positive finite number"):
            bytemodel.predict_us({}, 16, bad)


def test_llamacpp_rows_are_repriced_at_the_runs_bandwidth():
    row = {
        "engine": "llamacpp-bf16",
        "status": "ok",
        "bytes_per_token": 1_192_230_912,
        "predicted_us_per_token": 1_192_230_912 / 4.53e12 * 1e6,
    }
    r = copy.deepcopy(row)
    bwprobe.reprice_external(r, {"tbs": 3.0, "source": "measured now"})
    assert r["predicted_us_per_token"] == pytest.approx(1_192_230_912 / 3.0e12 * 1e6)
    assert r["prediction"]["bw_tbs"] == 3.0
    none = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="u", probe_fn=_fails, log=lambda m: None)
    r = copy.deepcopy(row)
    bwprobe.reprice_external(r, none)
    assert r["predicted_us_per_token"] is None and r["prediction"]["reason"] == none["reason"]
    failed = {"engine": "llamacpp-q8_0", "status": "failed", "reason": "x"}
    bwprobe.reprice_external(failed, none)
    assert "prediction" not in failed


# ---- monolith m6: measured once per lease, used by every row


@pytest.fixture
def gpu_m6(monkeypatch, ckpt2):
    """bench/m6.run on fake engines taking the GPU path, on a fake H100 with a fake probe."""
    import torch
    from harness_fakes import FakeEngine, GpuLikeClock

    from monolith.bench import m6, oracle_cache, suite
    from monolith.bench.baselines import registry

    monkeypatch.setattr(suite, "load_inputs", lambda model: (ckpt2, None))
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3], [4, 5]])
    monkeypatch.setattr(registry, "spec", lambda name: registry.Spec(name, f"label {name}"))
    monkeypatch.setattr(registry, "weights_of", lambda name: "bf16")
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: FakeEngine())
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: FakeEngine())
    monkeypatch.setattr(oracle_cache, "identity", lambda uuid: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(decode, "Clock", GpuLikeClock)
    monkeypatch.setattr(
        m6,
        "_bench_cfg",
        lambda quick, nvml: decode.BenchConfig(
            runs=1, tokens=4, prompts=2, warmup_tokens=2, sweep_positions=(), power=False, quick=True
        ),
    )
    monkeypatch.setattr("monolith.bench.power.gpu_uuid", lambda **k: "GPU-h100")
    monkeypatch.setattr("monolith.envinfo.collect", lambda dev: {"gpu": H100})

    def cfg(tmp_path, engines, **kw):
        c = m6.M6Config(
            engines=engines,
            rows_dir=tmp_path / "rows",
            quick=True,
            xray=False,
            quality="none",
            prebuild=False,
            ahead=False,
            log=lambda m: None,
            **kw,
        )
        c.device = "cuda-fake"
        return c

    return m6, cfg


def test_m6_measures_the_gpu_once_per_lease_and_every_row_uses_it(gpu_m6, tmp_path, monkeypatch, no_legacy, ckpt2):
    m6, cfg = gpu_m6
    probe = _measures(3.05)
    monkeypatch.setattr(bwprobe, "probe", probe)
    first = m6.run(cfg(tmp_path, ["reference-graph"]))
    second = m6.run(cfg(tmp_path, ["hf-eager"]))
    assert len(probe.calls) == 1 and probe.calls[0][1] == H100  # the later process read it back
    docs = [json.loads(p.read_text()) for p in (*first, *second)]
    for d in docs:
        p = d["protocol"]
        assert p["bw_tbs_for_prediction"] == 3.05 and p["bw_measurement"]["gpu_uuid"] == "GPU-h100"
        r = d["rows"][0]
        assert r["status"] == "ok" and r["prediction"]["bw_tbs"] == 3.05
        model = bytemodel.ByteModel.bf16(ckpt2.shape)
        assert r["predicted_us_per_token"] == pytest.approx(
            bytemodel.predict_us({}, r["mean_position"], 3.05, model)["us"]
        )
    assert [d["protocol"]["bw_measurement"]["status"] for d in docs] == ["measured", "reused"]
    doc = final.merge(tmp_path / "rows", tmp_path / "final.json")
    assert doc["final"]["bandwidth"]["one_bandwidth"] and doc["final"]["bandwidth"]["tbs"] == 3.05
    assert doc["final"]["bandwidth"]["on_this_gpu"] is True
    md = (tmp_path / "final.md").read_text()
    assert "use 3.050 TB/s, measured at the start of the run on this matrix's GPU (NVIDIA H100 80GB HBM3)" in md


def test_m6_on_a_gpu_without_a_value_writes_rows_without_4_53(gpu_m6, tmp_path, monkeypatch, no_legacy):
    m6, cfg = gpu_m6
    monkeypatch.setattr(bwprobe, "probe", _fails)
    files = m6.run(cfg(tmp_path, ["reference-graph", "hf-eager"]))
    assert not (tmp_path / "rows" / bwprobe.LEASE_FILE).exists()  # nothing measured: the next process tries again
    for f in files:
        d = json.loads(f.read_text())
        assert d["protocol"]["bw_tbs_for_prediction"] is None and "nvcc not found" in d["protocol"]["bw_source"]
        r = d["rows"][0]
        assert r["status"] == "ok" and r["predicted_us_per_token"] is None and H100 in r["prediction"]["reason"]
        assert bwprobe.LEGACY_TBS not in _numbers(d) and "4.53 TB/s" not in f.read_text()
    md = final.render_final_md(final.merge(tmp_path / "rows", tmp_path / "final.json"))
    assert "**Predicted µs/token** (the byte model: bytes per token / streaming-read bandwidth): none" in md


def test_a_lease_file_of_another_gpu_or_too_old_is_not_read(tmp_path):
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="GPU-a", probe_fn=_measures(3.0), log=lambda m: None)
    bwprobe.for_lease(tmp_path, gpu_uuid="GPU-a", resolve_fn=lambda: rec, log=lambda m: None)
    assert bwprobe.for_lease(tmp_path, gpu_uuid="GPU-a", resolve_fn=None, log=lambda m: None)["status"] == "reused"
    other = {"tbs": 3.3, "status": "measured", "gpu_uuid": "GPU-b", "source": "s"}
    assert bwprobe.for_lease(tmp_path, gpu_uuid="GPU-b", resolve_fn=lambda: other, log=lambda m: None) is other
    old = json.loads((tmp_path / bwprobe.LEASE_FILE).read_text())
    old["measured_at"] = "2020-01-01T00:00:00+00:00"
    (tmp_path / bwprobe.LEASE_FILE).write_text(json.dumps(old))
    fresh = {"tbs": 3.1, "status": "measured", "gpu_uuid": "GPU-b", "source": "s"}
    assert bwprobe.for_lease(tmp_path, gpu_uuid="GPU-b", resolve_fn=lambda: fresh, log=lambda m: None) is fresh


# ---- the merge and final.md


def _rows_at(tmp_path, bws: dict) -> None:
    """One row file per engine, each with the protocol bandwidth `bws[engine]` (a record or None)."""
    for i, (e, rec) in enumerate(bws.items()):
        r = m6_fakes.row(e)
        if rec is not None and rec.get("tbs"):
            r["prediction"] = {"kind": "time model", "bw_tbs": rec["tbs"]}
        s = m6_fakes.T0.replace(minute=i)
        proto = {"runs": 5, "quick": False, **(bwprobe.protocol_keys(rec) if rec is not None else {})}
        final.write_row_file(
            tmp_path,
            e,
            [r],
            gpu_uuid=m6_fakes.UUID,
            gpu="NVIDIA H200",
            started=s.isoformat(),
            ended=s.replace(second=50).isoformat(),
            env=m6_fakes.ENV,
            weights=m6_fakes.WEIGHTS,
            protocol=proto,
        )


def _rec(tbs, uuid=m6_fakes.UUID):
    return bwprobe.resolve("cuda", gpu="NVIDIA H200", gpu_uuid=uuid, probe_fn=_measures(tbs), log=lambda m: None)


def test_merge_of_rows_at_different_bandwidths_says_so(tmp_path):
    _rows_at(tmp_path, {"megakernel-fp8-stream": _rec(4.31), "hf-eager": _rec(4.27)})
    doc = final.merge(tmp_path, tmp_path / "final.json")
    b = doc["final"]["bandwidth"]
    assert b["one_bandwidth"] is False and b["tbs"] is None and "4.31" in b["note"] and "4.27" in b["note"]
    assert doc["protocol"]["bw_tbs_for_prediction"] is None and doc["protocol"]["bw_source"].startswith("several")
    md = (tmp_path / "final.md").read_text()
    assert "are NOT at one bandwidth" in md and "row-hf-eager.json: 4.270 TB/s" in md
    assert final.validate_final(doc) == []
    doc["protocol"]["bw_tbs_for_prediction"] = 4.31
    assert "rows predicted at several bandwidths, but the protocol names one" in final.validate_final(doc)


def test_merge_of_one_bandwidth_shows_it_and_validate_catches_a_row_at_another(tmp_path):
    _rows_at(tmp_path, {"megakernel-fp8-stream": _rec(4.31), "hf-eager": _rec(4.31)})
    doc = final.merge(tmp_path, tmp_path / "final.json")
    assert doc["final"]["bandwidth"]["tbs"] == 4.31 and doc["protocol"]["bw_tbs_for_prediction"] == 4.31
    assert (
        "use 4.310 TB/s, measured at the start of the run on this matrix's GPU" in (tmp_path / "final.md").read_text()
    )
    doc["rows"][0]["prediction"]["bw_tbs"] = 4.53
    assert any("predicted at 4.53 TB/s, the matrix's bandwidth is 4.31" in e for e in final.validate_final(doc))


def test_merge_of_old_rows_names_their_4_53_as_the_h200s(tmp_path):
    old = {"tbs": 4.53, "source": "NOTES.md, Facts (4.53 TB/s measured streaming read)"}
    _rows_at(tmp_path, {"hf-eager": None})
    doc = final.merge(tmp_path, tmp_path / "final.json")
    assert doc["final"]["bandwidth"]["status"] == "not recorded"
    assert "the row files do not record the bandwidth" in (tmp_path / "final.md").read_text()
    proto = {"bw_tbs_for_prediction": old["tbs"], "bw_source": old["source"]}
    d = final.bandwidth_of([{"_file": "row-a.json", "started": "t", "protocol": proto}], "GPU-1")
    assert d["status"] == "legacy" and d["tbs"] == 4.53 and d["on_this_gpu"] is None


def test_final_md_of_the_committed_h100_matrix_labels_its_4_53_and_rewrites_nothing():
    doc = jsonio.load(REPO_ROOT / "results" / "final.json")
    kept = copy.deepcopy(doc)
    md = final.render_final_md(doc)
    assert doc == kept  # rendering re-derives nothing into the recorded fields
    assert doc["final"]["gpu"] == H100 and doc["protocol"]["bw_tbs_for_prediction"] == 4.53
    para = next(line for line in md.splitlines() if line.startswith("**Predicted µs/token**"))
    assert "4.53 TB/s is the NVIDIA H200's streaming read measured before M0" in para
    assert f"not a measurement of this matrix's GPU ({H100})" in para
    assert f"No streaming read of {H100} is measured in this repository, so no re-derived prediction" in para
    assert (REPO_ROOT / "results" / "final.md").read_text() == md  # the committed page is this rendering
    assert final.validate_final(doc) == []
