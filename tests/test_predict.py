"""bench/predict.py: predictions for the sm_120 cards from the H200's measured pieces (CPU only)."""
import dataclasses
import json
import re

import pytest

from monolith import REPO_ROOT
from monolith.bench import predict as P


def _chain(variant="fp8-stream"):
    return json.loads((REPO_ROOT / "results" / "chain" / f"{variant}.json").read_text())


def test_ring_budget_of_sm120():
    assert P.ring_slots_that_fit(99) == 4          # 4 x 16 + 32 = 96 <= 99; 5 slots would need 112
    assert P.ring_slots_that_fit(227) == 12
    with pytest.raises(ValueError, match="do not fit 99 KB"):
        P.predict("rtx5090", REPO_ROOT, ring_slots=5)


def test_bandwidth_bound_layer_scales_with_bandwidth():
    chain = _chain("bf16-stream")
    slow = dataclasses.replace(P.GPUS["rtx5090"], bw_tbs=0.4)
    slower = dataclasses.replace(slow, bw_tbs=0.2)
    a = P.stream_model(chain, slow, 4, 128, 421.0)
    b = P.stream_model(chain, slower, 4, 128, 421.0)
    assert a["bound"] == b["bound"] == "bandwidth"
    assert b["layer_us"] == pytest.approx(2 * a["layer_us"], rel=1e-9)
    h = P.measured_h200(REPO_ROOT, "bf16-upstream")
    x = P.barrier_model(h, h, slow, P.GPUS["h200"], 0.97)
    y = P.barrier_model(h, h, slower, P.GPUS["h200"], 0.97)
    assert x["bound"] == "bandwidth"
    assert y["layer_us"] - y["syncs_us_per_layer"] == pytest.approx(2 * (x["layer_us"] - x["syncs_us_per_layer"]))


def test_a_latency_bound_chain_does_not_get_faster_with_bandwidth():
    chain = _chain("fp8-stream")
    fast = dataclasses.replace(P.GPUS["rtx5090"], bw_tbs=50.0)
    faster = dataclasses.replace(fast, bw_tbs=100.0)
    a, b = (P.stream_model(chain, g, 4, 128, 421.0) for g in (fast, faster))
    assert a["bound"] == "chain" and a["layer_us"] == pytest.approx(b["layer_us"])


def test_a_ring_too_small_for_the_latency_caps_the_bandwidth():
    chain = _chain("bf16-stream")
    g = P.GPUS["rtx5090"]
    ok = P.stream_model(chain, g, 4, 128, 421.0)
    assert ok["effective_bw_tbs"] == g.bw_tbs     # 64 KB per SM >> 4 KB needed
    capped = P.stream_model(chain, g, 1, 128, 100_000.0)
    assert capped["effective_bw_tbs"] < g.bw_tbs and capped["layer_us"] > ok["layer_us"]


def test_the_model_on_the_h200_reproduces_the_h200():
    r = P.predict("h200", REPO_ROOT)
    for row in r["rows"]:
        assert row["us_per_token"] == pytest.approx(row["h200_measured"]["us"], rel=1e-9), row["variant"]
        assert row["launches_today"] and row["status"] == "predicted"


@pytest.mark.parametrize("built", [False, True])
def test_streaming_rows_need_the_sm120_configuration_until_it_exists(built):
    r = P.predict("rtx5090", REPO_ROOT, sm120_built=built)
    assert [x["variant"] for x in r["rows"]] == list(P.VARIANTS)
    for x in r["rows"]:
        assert x["label"] == "predicted" and x["tok_s"] > 0
        lo, hi = x["tok_s_range"]
        assert lo <= x["tok_s"] <= hi
        stream = x["variant"].endswith("-stream")
        assert (P.STREAM_NEEDS in x["status"]) == (stream and not built)
        assert x["launches_today"] == (not stream or built)
    assert r["ring"]["slots"] == 4 and r["ring"]["bytes_in_flight_per_sm_needed"] < 64 * 1024


def test_sm120_configuration_is_detected_from_config_cuh(tmp_path):
    (tmp_path / "kernel").mkdir()
    cfg = tmp_path / "kernel" / "config.cuh"
    cfg.write_text('static_assert(kRingBytes + 32 * 1024 <= 227 * 1024, "sm_90");\n')
    assert not P.sm120_config_built(tmp_path)
    (tmp_path / "kernel" / "other.cuh").write_text('// 99 * 1024 in a comment is not a budget\n')
    assert not P.sm120_config_built(tmp_path)
    for line in ('static_assert(kRingBytes120 + 32 * 1024 <= 99 * 1024, "ring");',
                 'static_assert(Sm120Policy::kRingBytes + kState <= kSmemOptin, "fits");',
                 'static_assert(kRing + kState <= 101376, "fits");'):
        cfg.write_text(line + "\n")
        assert P.sm120_config_built(tmp_path), line


def test_cli_writes_json_and_md(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert P.main(["--gpu", "rtx5090", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert set(d["gpus"]) == {"rtx5090"} and d["gpus"]["rtx5090"]["upstream_published_5090"]["tok_s"] == 1033.0
    md = out.with_suffix(".md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| `")]
    assert len(rows) == len(P.VARIANTS) and all(ln.split(" | ")[1] == "predicted" for ln in rows)
    assert "1,033" in md
    assert P.main(["--gpu", "rtx5090", "--ring-slots", "9", "--out", str(out)]) == 2
    assert "do not fit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        P.main(["--gpu", "mi300x"])
    assert e.value.code == 2


def test_readme_gpu_table_matches_the_predictions_file():
    """README's GPUs x variants table: each sm_120 cell's predicted tok/s is the file's, and a
    streaming cell says 'does not launch' exactly while the file says it cannot launch today."""
    readme = (REPO_ROOT / "README.md").read_text()
    pred = json.loads((REPO_ROOT / "results" / "predictions_sm120.json").read_text())["gpus"]
    rows = {m.group(1): m.group(0) for m in
            re.finditer(r"^\| `([\w-]+)` \| runs; measured .*$", readme, re.M)}
    assert set(rows) == set(P.VARIANTS)
    for v, line in rows.items():
        cells = [c.strip() for c in line.strip("|").split("|")]
        for cell, gpu in zip(cells[2:], ("rtx5090", "rtxpro6000"), strict=True):
            row = next(x for x in pred[gpu]["rows"] if x["variant"] == v)
            assert cell.endswith(f"predicted {row['tok_s']:,.0f}"), (v, gpu, cell)
            assert cell.startswith("does not launch") == (not row["launches_today"]), (v, gpu, cell)


def test_monolith_predict_command(tmp_path):
    from typer.testing import CliRunner

    from monolith.cli import app

    r = CliRunner().invoke(app, ["predict", "--help"])
    assert r.exit_code == 0 and "--gpu" in r.output
    out = tmp_path / "p.json"
    r = CliRunner().invoke(app, ["predict", "--gpu", "rtxpro6000", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["gpus"]["rtxpro6000"]["gpu"]["sms"] == 188
    r = CliRunner().invoke(app, ["predict", "--gpu", "rtx4090", "--out", str(out)])
    assert r.exit_code != 0


def test_the_committed_predictions_are_what_the_model_writes_now(tmp_path):
    """results/predictions_sm120.json is regenerated from the committed inputs (H200 results, chain
    files, probes, kernel/config.cuh's sm_120 budget); when they change, rerun `monolith predict`
    and update README's GPU table (the test above checks it against the file)."""
    out = tmp_path / "p.json"
    assert P.main(["--out", str(out)]) == 0
    committed = json.loads((REPO_ROOT / "results" / "predictions_sm120.json").read_text())
    assert json.loads(out.read_text()) == committed, \
        "results/predictions_sm120.json is stale: run `monolith predict` and update README's GPU table"
