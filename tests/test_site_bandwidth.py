"""xray/site.py: the page's bandwidths. The table's predicted column is described by the bandwidth the
shown run recorded (final.bandwidth, else its protocol), labelled for what it is; each trace's
roofline mark uses the streaming read of the GPU that trace was recorded on, never another GPU's."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from monolith.bench import bwprobe
from monolith.xray.export import to_page, write_page
from monolith.xray.site import DEV_TEXT, build_site_data, roofline_for, run_bandwidth
from monolith.xray.synthetic import generate

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
DATA = Path(__file__).resolve().parent.parent / "web" / "public" / "data"
LEGACY_SOURCE = "NOTES.md, Facts (4.53 TB/s measured streaming read)"


def _doc(protocol: dict) -> list[dict]:
    return [{"_file": "final.json", "started": "2026-12-07T00:00:00Z", "protocol": protocol}]


def _measured(tbs: float, gpu: str, status: str = "measured") -> dict:
    return {"tbs": tbs, "status": status, "gpu": gpu, "gpu_uuid": "GPU-1", "source": f"measured now on {gpu}"}


def _trace(dirpath: Path, name: str, variant: str, gpu: str | None, position: int = 128) -> None:
    meta, ev = generate(variant=variant, layers=2, blocks=6, sm_count=8, idle_sms=(3,), seed=1, position=position)
    if gpu:  # a recorded trace: the GPU it ran on, not generated
        meta.update(gpu=gpu, synthetic=False)
    write_page(to_page(meta, ev), dirpath / name)


def _final_tree(tmp_path: Path, gpu: str, protocol: dict, bandwidth: dict | None = None) -> Path:
    """results/final.json (tests/fixtures/final_example.json, on `gpu`) and traces of the run's GPU, of
    the H200 and a generated one."""
    res, tr = tmp_path / "results", tmp_path / "web" / "public" / "traces"
    (res / "timelines").mkdir(parents=True)
    tr.mkdir(parents=True)
    doc = json.loads((Path(__file__).parent / "fixtures" / "final_example.json").read_text())
    doc["final"]["gpu"] = doc["env"]["gpu"] = gpu
    doc["protocol"].update(protocol)
    if bandwidth is not None:
        doc["final"]["bandwidth"] = bandwidth
    (res / "final.json").write_text(json.dumps(doc))
    _trace(tr, "fp8-stream.json.gz", "fp8-stream", gpu)
    _trace(tr, "bf16-stream-p2060.json.gz", "bf16-stream", H200, position=2060)
    _trace(tr, "sample.json.gz", "bf16-upstream", None)
    return tmp_path


def _rooflines(m: dict) -> dict:
    return {v["id"]: v["roofline"] for v in m["versions"]}


# ---- the run's recorded bandwidth


def test_a_legacy_453_on_an_h100_run_is_named_the_h200s():
    b = run_bandwidth(_doc({"bw_tbs_for_prediction": 4.53, "bw_source": LEGACY_SOURCE}), H100)
    assert b["tbs"] == 4.53 and b["status"] == "legacy" and b["gpu"] == H200 and b["run_gpu"] == H100
    assert "the NVIDIA H200's streaming read measured before M0" in b["source"]
    assert f"not a measurement of this run's GPU ({H100})" in b["source"]
    assert "another GPU's bandwidth" in b["note"] and b["note"].startswith("Predicted µs/token: bytes per token / 4.53")


def test_a_legacy_453_on_an_h200_run_is_not_called_another_gpus():
    b = run_bandwidth(_doc({"bw_tbs_for_prediction": 4.53, "bw_source": LEGACY_SOURCE}), H200)
    assert b["gpu"] == H200 and "measured before M0" in b["source"]
    assert "not a measurement" not in b["source"] and "another GPU" not in b["note"]


def test_a_measurement_of_the_runs_gpu_is_shown_as_measured():
    rec = _measured(3.1234, H100)
    b = run_bandwidth(_doc(bwprobe.protocol_keys(rec)), H100, "GPU-1")
    assert b["tbs"] == 3.1234 and b["status"] == "measured" and b["gpu"] == H100
    assert b["source"] == f"3.123 TB/s, the streaming read measured on the {H100} at the start of the run"
    # final.json's own record (bench/final.py bandwidth_of) is taken over the protocol
    recorded = {"one_bandwidth": True, "tbs": 2.5, "status": "reused", "gpu": H100, "source": "lease file"}
    assert run_bandwidth(_doc(bwprobe.protocol_keys(rec)), H100, "GPU-1", recorded)["tbs"] == 2.5


def test_a_committed_measurement_names_its_file():
    rec = bwprobe.resolve("cuda", gpu=H200, gpu_uuid="u", probe_fn=_no_probe, log=lambda m: None)
    b = run_bandwidth(_doc(bwprobe.protocol_keys(rec)), H200)
    assert b["tbs"] == bwprobe.MEASURED[H200].tbs and b["status"] == "table" and b["gpu"] == H200
    assert "results/m0_probes.json" in b["source"] and "probe could not run" in b["source"]


def _no_probe(device, gpu):
    raise bwprobe.ProbeFailed("nvcc not found")


def test_no_bandwidth_and_several_bandwidths_give_no_value():
    rec = bwprobe.resolve("cuda", gpu=H100, gpu_uuid="u", probe_fn=_no_probe, log=lambda m: None)
    b = run_bandwidth(_doc(bwprobe.protocol_keys(rec)), H100)
    assert b["tbs"] is None and b["status"] == "none" and "nvcc not found" in b["note"]
    assert run_bandwidth(_doc({}), H100)["status"] == "not recorded"
    two = _doc({"bw_tbs_for_prediction": 4.53}) + [{"_file": "b.json", "started": "z", "protocol": {}}]
    b = run_bandwidth(two, None)
    assert b["tbs"] is None and b["status"] == "several" and "final.json: 4.53 TB/s (legacy)" in b["note"]


# ---- each trace's roofline


@pytest.mark.parametrize("status", ["legacy", "unlabelled", "none", "not recorded"])
def test_an_h100_trace_gets_no_roofline_without_an_h100_measurement(status):
    run = {
        "tbs": None if status in ("none", "not recorded") else 4.53,
        "status": status,
        "gpu": H200 if status == "legacy" else None,
        "source": "x",
    }
    r = roofline_for(H100, False, run)
    assert r["tbs"] is None and r["gpu"] == H100 and f"no streaming read of the {H100}" in r["source"]
    if status == "legacy":
        assert "4.53 TB/s is the NVIDIA H200's, not this GPU's" in r["source"]


def test_a_trace_takes_its_own_gpus_bandwidth():
    run = {"tbs": 3.2, "status": "measured", "gpu": H100, "source": "3.200 TB/s, measured"}
    assert roofline_for(H100, False, run) == {"tbs": 3.2, "gpu": H100, "source": "3.200 TB/s, measured"}
    # an H200 trace beside an H100 run: the H200's committed measurement, not the run's value
    h200 = roofline_for(H200, False, run)
    assert h200["tbs"] == bwprobe.MEASURED[H200].tbs and "results/m0_probes.json" in h200["source"]
    # an H200 run that recorded only the legacy 4.53: its traces still get the measured 4.28
    assert roofline_for(H200, False, {"tbs": 4.53, "status": "legacy", "gpu": H200})["tbs"] == 4.2804
    assert roofline_for(H200, True, run)["tbs"] is None and roofline_for(None, False, run)["tbs"] is None


# ---- the manifest


def test_the_manifest_of_a_legacy_h100_run(tmp_path):
    root = _final_tree(tmp_path, H100, {"bw_tbs_for_prediction": 4.53, "bw_source": LEGACY_SOURCE})
    m = build_site_data(root, out_dir=tmp_path / "out")
    assert m["bandwidth"]["tbs"] == 4.53 and m["bandwidth"]["gpu"] == H200 and m["bandwidth"]["run_gpu"] == H100
    assert "bandwidth" not in m["table"]  # once, at the manifest's top
    r = _rooflines(m)
    assert r["fp8-stream"]["tbs"] is None and r["fp8-stream"]["gpu"] == H100
    assert r["bf16-stream-p2060"]["tbs"] == 4.2804 and r["bf16-upstream"]["tbs"] is None
    assert not DEV_TEXT.search(json.dumps([m["bandwidth"], r], ensure_ascii=False))


def test_the_manifest_of_a_measured_h100_run(tmp_path):
    rec = _measured(3.05, H100)
    b = {
        "one_bandwidth": True,
        "tbs": 3.05,
        "status": "measured",
        "source": rec["source"],
        "gpu": H100,
        "gpu_uuid": "GPU-1",
        "on_this_gpu": True,
        "by_row_file": {},
    }
    root = _final_tree(tmp_path, H100, bwprobe.protocol_keys(rec), b)
    m = build_site_data(root, out_dir=tmp_path / "out")
    r = _rooflines(m)
    assert m["bandwidth"]["tbs"] == 3.05 and r["fp8-stream"]["tbs"] == 3.05 and r["bf16-stream-p2060"]["tbs"] == 4.2804
    assert "another GPU" not in m["bandwidth"]["note"]


def test_the_manifest_without_final_json_reads_the_row_files(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    row = {"engine": "megakernel-fp8-stream", "status": "ok", "gate": {"passed": True}, "tok_s": {"median": 9.0}}
    for name, bw in (("a.json", 4.53), ("b.json", None)):
        proto = {"bw_tbs_for_prediction": bw} if bw else {}
        (res / name).write_text(
            json.dumps(
                {
                    "schema": "monolith-results/1",
                    "created": "2026-11-01T00:00:00Z",
                    "env": {"gpu": H100},
                    "protocol": proto,
                    "rows": [copy.deepcopy(row)],
                }
            )
        )
    m = build_site_data(tmp_path, out_dir=tmp_path / "out")
    # b.json's row is the newest (file order at equal dates): its protocol records no bandwidth
    assert m["table"]["rows"][0]["source"]["file"] == "results/b.json"
    assert m["bandwidth"]["tbs"] is None and m["bandwidth"]["status"] == "not recorded"


def test_the_committed_page_data_never_shows_the_h200s_453_as_an_h100_roofline():
    m = json.loads((DATA / "manifest.json").read_text())
    final = json.loads((DATA.parent.parent.parent / "results" / "final.json").read_text())
    assert m["bandwidth"]["tbs"] == final["protocol"]["bw_tbs_for_prediction"]  # the run's own record
    if m["bandwidth"]["status"] == "legacy":
        assert "the NVIDIA H200's streaming read measured before M0" in m["bandwidth"]["note"]
    for v in m["versions"]:
        rl = v["roofline"]
        assert rl["tbs"] != bwprobe.LEGACY_TBS, v["id"]
        if rl["tbs"] is not None:
            assert rl["gpu"] == v["gpu"] and rl["tbs"] in (m["bandwidth"]["tbs"], bwprobe.MEASURED[v["gpu"]].tbs)
    assert not DEV_TEXT.search(json.dumps(m["bandwidth"], ensure_ascii=False))
