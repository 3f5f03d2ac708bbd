"""xray/site.py: the page manifest built from fixture results, timelines, traces and kernel markers."""
import json

import pytest

from monolith.errors import MonolithError
from monolith.xray.export import to_page, write_page
from monolith.xray.site import build_site_data, bytes_per_token, extract_tour, trace_slug
from monolith.xray.synthetic import generate

CREATED = "2026-12-02T10:00:00Z"


def _trace(dirpath, name, variant, position=128):
    meta, ev = generate(variant=variant, layers=2, blocks=6, sm_count=8, idle_sms=(3,), seed=1, position=position)
    write_page(to_page(meta, ev), dirpath / name)


def _tree(tmp_path):
    res, tr, ker = tmp_path / "results", tmp_path / "web" / "public" / "traces", tmp_path / "kernel"
    (res / "timelines").mkdir(parents=True)
    tr.mkdir(parents=True)
    ker.mkdir()
    rows = [
        {"engine": "monolith-fp8", "label": "monolith fp8", "status": "ok", "experimental": False,
         "tok_s": {"median": 100.0, "min": 99.0, "max": 101.0}, "bytes_per_token": 123_456},
        {"engine": "monolith-nvfp4", "label": "nvfp4", "status": "ok", "experimental": True},
        {"engine": "vllm", "label": "vLLM", "status": "not run", "reason": "offline"},
    ]
    (res / "m1_bench.json").write_text(json.dumps({"schema": "monolith-results/1", "created": CREATED, "env": {"gpu": "G"},
                                                    "weights": {"kind": "synthetic", "seed": 0}, "protocol": {"n": 1}, "rows": rows}))
    (res / "m0_probe_dump.json").write_text(json.dumps({"something": "else"}))  # not a results table: skipped
    for eng, dt in (("slow", 10.0), ("fast", 1.0)):
        (res / "timelines" / f"{eng}.json").write_text(json.dumps({
            "engine": eng, "label": eng.upper(), "gpu": "G", "weights": {"kind": "synthetic", "seed": 0},
            "tokens": [1, 2, 3], "pieces": ["a", "b", "c"], "t_us": [dt, 2 * dt, 3 * dt]}))
    _trace(tr, "fp8.json.gz", "fp8")
    _trace(tr, "bf16.json.gz", "bf16-upstream")
    _trace(tr, "other.json.gz", "my-kernel")
    (ker / "megakernel.cu").write_text("int a;\n  // tour:begin dequant\n    x = cvt(w);\n    acc += x;\n  // tour:end dequant\n"
                                       "// tour:begin extra\ny();\n// tour:end extra\n")
    return res, tr, ker


def test_trace_at_another_position_is_its_own_version(tmp_path):
    """A trace away from position 128 (the wide-attention kernel's at 2,060) is a version of its own:
    its own id and label, after every position-128 step in the switcher, and bytes from the model at its position
    (the results row's bytes are for positions 1-256), even where a row exists."""
    res, tr, ker = _tree(tmp_path)
    _trace(tr, "fp8-p2060.json.gz", "fp8", position=2060)
    m = build_site_data(tmp_path, out_dir=tmp_path / "out")
    assert [v["id"] for v in m["versions"]] == ["bf16-upstream", "fp8", "my-kernel", "fp8-p2060"]
    long = m["versions"][3]
    assert long["label"] == "fp8 @ position 2,060 (synthetic)" and long["trace"] == "traces/fp8-p2060.json.gz"
    assert long["bytes_per_token"] == bytes_per_token("fp8", 2060)[0] != m["versions"][1]["bytes_per_token"]
    assert trace_slug("bf16-stream", 128) == "bf16-stream" and trace_slug("a b", 2060) == "a_b-p2060"


def test_manifest_from_fixture_tree(tmp_path):
    res, tr, ker = _tree(tmp_path)
    out = tmp_path / "web" / "public" / "data"
    (out / "timelines").mkdir(parents=True)
    (out / "timelines" / "stale.json").write_text("{}")
    m = build_site_data(tmp_path, out_dir=out)
    assert m == json.loads((out / "manifest.json").read_text())
    assert m["schema"] == "monolith-site/1" and m["fixture"] is False
    # bf16-upstream first, then fp8, then unknown variants; paths relative to the page
    assert [v["id"] for v in m["versions"]] == ["bf16-upstream", "fp8", "my-kernel"]
    assert m["versions"][0]["trace"] == "traces/bf16.json.gz"
    fp8 = m["versions"][1]
    assert fp8["bytes_per_token"] == 123_456 and fp8["bytes_source"] == "results row"  # the measured row wins
    assert m["versions"][0]["bytes_per_token"] == bytes_per_token("bf16-upstream", 128)[0]  # model at the trace position
    assert m["versions"][2]["bytes_per_token"] is None  # unknown scheme: no roofline, no guess
    # the run records no bandwidth (protocol {"n": 1}): none, said so; a generated trace has no roofline
    assert m["bandwidth"]["tbs"] is None and m["bandwidth"]["status"] == "not recorded" and m["bandwidth"]["note"]
    assert all(v["roofline"]["tbs"] is None and v["roofline"]["source"] for v in m["versions"])
    # race: the plan's lanes only (engines outside the matrix's families get none); stale files removed
    assert m["race"] == [] and sorted(p.name for p in (out / "timelines").iterdir()) == []
    # the one table (no final.json): only the matrix's engines, each naming its run; vLLM's reason for visitors
    assert [r["engine"] for r in m["table"]["rows"]] == ["vllm"] and m["table"]["source"] == "latest"
    assert m["table"]["rows"][0]["source"]["file"] == "results/m1_bench.json"
    assert m["table"]["rows"][0]["reason"] == "offline"
    assert m["created"] >= CREATED
    # tour: present markers cut and dedented, required missing ones say so, unknown ones appended
    tour = {t["id"]: t for t in m["tour"]}
    assert tour["dequant"]["code"] == "x = cvt(w);\nacc += x;" and tour["dequant"]["line_start"] == 3
    assert tour["counter-wait"]["missing"] and "tour:begin counter-wait" in tour["counter-wait"]["note"]
    assert "gemv" not in tour  # optional and absent: not listed
    assert m["tour"][-1]["id"] == "extra"


def test_bad_timeline_is_a_clear_error(tmp_path):
    res, tr, ker = _tree(tmp_path)
    (res / "timelines" / "bad.json").write_text(json.dumps({"engine": "bad", "tokens": [1], "pieces": [], "t_us": [1.0]}))
    with pytest.raises(MonolithError, match="bad.json: tokens, pieces and t_us differ"):
        build_site_data(tmp_path, out_dir=tmp_path / "o")


def test_empty_repo_builds_an_empty_manifest(tmp_path):
    m = build_site_data(tmp_path, out_dir=tmp_path / "o")
    assert m["versions"] == [] and m["race"] == [] and m["table"] is None and m["headline"] is None
    assert all(t["missing"] for t in m["tour"])
    assert any("No benchmark results" in n for n in m["notes"])


def test_unclosed_marker_is_not_an_excerpt(tmp_path):
    (tmp_path / "k.cuh").write_text("// tour:begin dequant\nx();\n")
    assert next(t for t in extract_tour(tmp_path, tmp_path) if t["id"] == "dequant")["missing"]


def test_byte_model_orders_schemes():
    b, f, n = (bytes_per_token(v, 128)[0] for v in ("bf16-upstream", "fp8-sync", "nvfp4"))
    assert b > f > n > 0
    assert bytes_per_token("synthetic-bf16-upstream", 0)[0] < b  # KV cache counted
    assert bytes_per_token("mystery", 0) is None


def test_synthetic_trace_date_does_not_stamp_measured_data(tmp_path):
    # The synthetic sample carries a fixed placeholder date (2026-12-01): an older measured
    # results file must still give the manifest its own date, not the placeholder.
    res, tr = tmp_path / "results", tmp_path / "web" / "public" / "traces"
    res.mkdir(parents=True)
    tr.mkdir(parents=True)
    (res / "m1.json").write_text(json.dumps({"schema": "monolith-results/1", "created": "2026-11-30T00:54:00+00:00",
                                             "rows": [{"engine": "x", "status": "not run", "reason": "r"}]}))
    _trace(tr, "sample.json.gz", "synthetic-bf16-upstream")
    assert build_site_data(tmp_path, out_dir=tmp_path / "o")["created"] == "2026-11-30T00:54:00+00:00"
    (res / "m1.json").unlink()
    assert build_site_data(tmp_path, out_dir=tmp_path / "o")["created"] == "2026-12-01T00:00:00Z"  # nothing else dated


def test_packed_weights_name_their_source_and_scheme():
    """An fp8 variant's trace carries the packed weights' description (monolith pack): the page
    names the checkpoint they came from and the scheme, and still flags synthetic weights."""
    from monolith.xray import site

    packed = {"kind": "fp8-packed", "scheme": "fp8-e4m3-rowscale", "layout": "rowmajor-v1",
              "source": {"kind": "synthetic", "seed": 0, "num_layers": 28}}
    assert site._weights_text(packed) == "synthetic (seed 0), fp8-e4m3-rowscale"
    assert site._is_synthetic_weights(packed)
    assert site._weights_text({"kind": "synthetic", "seed": 3}) == "synthetic (seed 3)"
    assert not site._is_synthetic_weights({"kind": "fp8-packed", "source": {"kind": "hf", "name": "Qwen3-0.6B"}})


def _chain_json(variant, rng, **over):
    def phases():
        return [{"phase": p, "hop_us": rng.uniform(0.2, 1), "open_us": rng.uniform(0, 1), "work_us": rng.uniform(0.3, 2),
                 "segment_us": 0.0} for p in ("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down")]

    d = {"variant": variant, "position": 128, "blocks": 128, "format": "bf16",
         "measured": {"phases": phases(), "token_mean_us": 466.0, "trace_token_us": 466.5},
         "floor": {"phases": phases(), "token_us": 301.7}, "targets": []}
    d.update(over)
    return d


def test_chain_models_reach_the_manifest_and_bad_ones_are_clear_errors(tmp_path):
    import random

    from monolith.xray.site import load_chains

    rng = random.Random(3)
    assert load_chains(tmp_path / "none", tmp_path) == []  # no results/chain/: the page says so
    d = tmp_path / "chain"
    d.mkdir()
    want = {v: _chain_json(v, rng) for v in ("nvfp4-stream", "bf16-stream", "fp8-stream")}
    for v, c in want.items():
        (d / f"{v}.json").write_text(json.dumps(c))
    got = load_chains(d, tmp_path)
    assert [c["variant"] for c in got] == ["fp8-stream", "nvfp4-stream", "bf16-stream"]  # the page's version order
    for c in got:
        src = want[c["variant"]]
        assert c["file"] == f"chain/{c['variant']}.json"
        assert [p["phase"] for p in c["measured"]] == [p["phase"] for p in src["measured"]["phases"]]
        assert c["measured"][2]["work_us"] == src["measured"]["phases"][2]["work_us"]
        assert c["floor_token_us"] == 301.7 and c["traced_token_us"] == 466.5
        assert set(c["measured"][0]) == {"phase", "hop_us", "open_us", "work_us"}  # only what the page draws
    bad = _chain_json("bf16-stream", rng)
    bad["floor"]["phases"][1]["hop_us"] = float("nan")
    (d / "bf16-stream.json").write_text(json.dumps(bad))
    with pytest.raises(MonolithError, match=r"bf16-stream.json(: not a chain model| is not acceptable JSON)"):
        load_chains(d, tmp_path)
    (d / "bf16-stream.json").write_text(json.dumps(_chain_json("bf16-stream", rng, measured={"phases": []})))
    with pytest.raises(MonolithError, match="not a chain model"):
        load_chains(d, tmp_path)


def _final_tree(tmp_path):
    """results/final.json (the fixture of notes/CONTRACTS.md) and two of its race timelines."""
    from pathlib import Path
    res = tmp_path / "results"
    (res / "timelines").mkdir(parents=True)
    doc = json.loads((Path(__file__).parent / "fixtures" / "final_example.json").read_text())
    (res / "final.json").write_text(json.dumps(doc))
    for eng, dt in (("megakernel-fp8-stream", 1e6 / 2410.0), ("reference-graph", 1e6 / 150.0)):
        (res / "timelines" / f"{eng}.json").write_text(json.dumps({
            "engine": eng, "label": eng, "gpu": "NVIDIA H200", "weights": {"kind": "synthetic", "seed": 0},
            "tokens": [1] * 8, "pieces": ["a"] * 8, "t_us": [dt * (i + 1) for i in range(8)]}))
    (res / "m1_old.json").write_text(json.dumps({"schema": "monolith-results/1", "created": "2026-11-30T00:00:00Z",
                                                 "rows": [{"engine": "hf-eager", "status": "ok", "tok_s": {"median": 1.0}}]}))
    return res, doc


def test_final_json_is_the_one_table_headline_and_race(tmp_path):
    res, doc = _final_tree(tmp_path)
    m = build_site_data(tmp_path, out_dir=tmp_path / "out")
    t = m["table"]
    assert t["source"] == "final" and t["file"] == "results/final.json"
    assert [r["engine"] for r in t["rows"]] == [r["engine"] for r in doc["rows"]]  # superseded files stay off the page
    assert m["headline"]["tok_s"] == doc["final"]["headline"]["tok_s"] and m["headline"]["variant"] == "fp8-stream"
    assert m["headline"]["best_baseline_label"] == "llama.cpp Q8_0 (llama-bench tg256)"
    q = next(r for r in t["rows"] if r["engine"] == "megakernel-fp8-stream")["gates"]
    assert q["implementation"]["passed"] is True and q["quality"]["passed"] is False
    lanes = {r["lane"]: r for r in m["race"]}
    # monolith: the recorded timeline; llama.cpp: no per-token times -> uniform at its median, no text;
    # HF's plan lane has no timeline here -> absent; the reference: replay slower than the table -> both shown
    assert set(lanes) == {"monolith", "llamacpp", "reference-graph"}
    assert lanes["llamacpp"]["text"] is False and abs(lanes["llamacpp"]["race_tok_s"] - 760.0) < 0.5
    assert abs(lanes["monolith"]["race_tok_s"] - lanes["monolith"]["table_tok_s"]) < 1
    assert lanes["reference-graph"]["race_tok_s"] < lanes["reference-graph"]["table_tok_s"] and m["race_note"]
    assert m["race_absent"][0]["engine"] == "vllm" and "cannot run on the GPU machine" in m["race_absent"][0]["why"]
    tl = json.loads((tmp_path / "out" / "timelines" / "llamacpp-q8_0.json").read_text())
    assert tl["tokens"] is None and len(tl["t_us"]) == 256


def test_a_partial_matrix_says_on_the_page_which_engines_it_lacks(tmp_path):
    res, doc = _final_tree(tmp_path)
    assert build_site_data(tmp_path, out_dir=tmp_path / "out")["table"]["note"] is None
    doc["final"]["absent"] = ["hf-static", "engine-this-checkout-does-not-know"]
    (res / "final.json").write_text(json.dumps(doc))
    note = build_site_data(tmp_path, out_dir=tmp_path / "out2")["table"]["note"]
    assert note == "Not measured in this run: HF transformers, static cache, engine-this-checkout-does-not-know."


def test_a_final_json_that_breaks_the_contract_is_a_clear_error(tmp_path):
    res, doc = _final_tree(tmp_path)
    del doc["final"]
    (res / "final.json").write_text(json.dumps(doc))
    with pytest.raises(MonolithError, match="final.json: not a final matrix"):
        build_site_data(tmp_path, out_dir=tmp_path / "out")


def test_without_final_json_the_newest_row_per_engine_and_both_gates(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    def doc(created, rows):
        return json.dumps({"schema": "monolith-results/1", "created": created, "env": {"gpu": "G"},
                           "weights": {"kind": "synthetic", "seed": 0}, "rows": rows})
    ok = lambda e, v: {"engine": e, "status": "ok", "gate": {"passed": True, "tolerance": 0.5}, "tok_s": {"median": v}}  # noqa: E731
    (res / "a.json").write_text(doc("2026-11-01T00:00:00Z", [ok("megakernel-fp8-stream", 100.0), ok("llamacpp-q8_0", 50.0)]))
    (res / "b.json").write_text(doc("2026-11-02T00:00:00Z", [ok("megakernel-fp8-stream", 200.0),
                                                             {"engine": "llamacpp-q8_0", "status": "not run", "reason": "x"}]))
    (res / "m3_fp8_quality.json").write_text(json.dumps({"roles": {"engine": "megakernel-fp8-upstream on fp8 weights"},
        "engine": {"prompts": 100, "tokens_per_prompt": 64, "kl_positions": 10000},
        "gates": {"fixed_gates_pass": False, "agreement": 0.41, "agreement_min": 0.9, "ppl_ratio": 0.99, "ppl_limit": 1.02, "kl": 1.4}}))
    m = build_site_data(tmp_path, out_dir=tmp_path / "out")
    rows = {r["engine"]: r for r in m["table"]["rows"]}
    assert rows["megakernel-fp8-stream"]["tok_s"]["median"] == 200.0 and rows["megakernel-fp8-stream"]["source"]["file"] == "results/b.json"
    assert rows["llamacpp-q8_0"]["status"] == "ok"  # an ok row is not replaced by a later not-run one
    g = rows["megakernel-fp8-stream"]["gates"]
    assert g["implementation"] == {"passed": True, "oracle": "fp32 reference on the fp8 weights dequantized",
                                   "rule": "margin rule, tolerance 0.5 logits"}
    assert g["quality"]["passed"] is False and g["quality"]["measured_on"] == "megakernel-fp8-upstream"
    assert m["headline"]["speedup"] == 4.0 and "separate runs" in m["table"]["note"]
    assert m["race"][0]["lane"] == "llamacpp"  # no monolith timeline recorded: only the rate-built lane


@pytest.mark.parametrize("dev, visitor", [
    ("vllm not importable (ModuleNotFoundError: No module named 'vllm'); not installable offline on the GPU machine (MISS" "ION \u00a76)",
     "vLLM cannot run on the GPU machine"),
    ("/work/main/results/llamacpp.json not found: run bench/baselines/llamacpp.sh SDIST first", "not measured in this run"),
    ("session time cap: -58 s left", "not measured: the run reached its time limit"),
    ("bandwidth from MISS" "ION \u00a71 (4.53 TB/s) in /work/main/results/m0.json", "bandwidth from (4.53 TB/s) in m0.json"),
])
def test_developer_text_is_rewritten_for_visitors(dev, visitor):
    from monolith.xray.site import DEV_TEXT, visitor_text
    out = visitor_text(dev)
    assert out.startswith(visitor) and not DEV_TEXT.search(out), out


def test_the_committed_page_data_has_no_developer_text():
    from pathlib import Path

    from monolith.xray.site import DEV_TEXT
    data = Path(__file__).resolve().parent.parent / "web" / "public" / "data"
    m = json.loads((data / "manifest.json").read_text())
    shown = {k: m[k] for k in ("headline", "table", "race", "race_note", "race_absent", "notes", "versions")}
    hit = DEV_TEXT.search(json.dumps(shown, ensure_ascii=False))
    assert hit is None, f"developer text in web/public/data/manifest.json: {hit and hit.group()!r}"
