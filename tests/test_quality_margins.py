"""quant/margins.py: the margin/perturbation arithmetic on hand-made logits, the batched forward
against the reference decoder (left padding included), the command's files and refusals, and
final.md and the page's methodology printing the same paragraph."""
from __future__ import annotations

import json

import pytest
import torch

from monolith.quant import margins as M


def test_margins_deltas_and_agreement_by_hand():
    ref = torch.tensor([[3.0, 1.0, 0.0], [2.0, 1.5, 0.0], [0.5, 4.0, 1.0]])
    q = torch.tensor([[2.5, 1.5, 0.0], [1.0, 1.6, 0.0], [4.5, 4.0, 1.0]])
    r = M.margins_and_deltas(ref, q)
    assert r["m"].tolist() == pytest.approx([2.0, 0.5, 3.0])
    # d: change of (top1 - top2) of the reference's two tokens: (1.0 - 2.0), (-0.6 - 0.5), (4.0 - 3.0) - 3
    assert r["d"].tolist() == pytest.approx([-1.0, -1.1, 0.0])
    assert r["agree"].tolist() == [True, False, False]  # row 3: a third token overtakes
    s = M.summarize(r["m"], r["d"], r["agree"], r["sigma"])
    assert s["agreement_measured"] == pytest.approx(1 / 3)
    assert s["predicted_top2"] == pytest.approx(2 / 3)  # the top-2 rule misses the third-token flip
    # independent pairs: |d| in {1.0, 1.1, 0}; m = 2 -> 3/3, m = 0.5 -> 1/3, m = 3 -> 3/3
    assert s["predicted_indep_abs"] == pytest.approx(7 / 9)


def test_scale_for_reaches_the_target_and_no_less():
    g = torch.Generator().manual_seed(0)
    m = torch.rand(500, generator=g, dtype=torch.double)
    d = torch.randn(500, generator=g, dtype=torch.double)
    k = M.scale_for(m, d, 0.9)
    assert M.p_indep_abs(m, d, k) >= 0.9 > M.p_indep_abs(m, d, k * 0.99)
    assert M.scale_for(m * 10, d, 0.9) == pytest.approx(k / 10, rel=2e-3)  # margins 10x larger need 10x less
    q = M.quantiles(torch.arange(101, dtype=torch.double))
    assert q["p10"] == pytest.approx(10) and q["p50"] == pytest.approx(50) and q["p95"] == pytest.approx(95)


def test_batched_forward_matches_the_reference_decoder(ckpt2):
    from monolith.reference import ReferenceEngine

    bm = M.BatchModel(ckpt2)
    prompts = [[11, 22, 33, 44, 55], [7, 8], [100, 200, 300]]  # different lengths: left padding
    gen, glog = M.greedy(bm, prompts, 4)
    tf = M.scored_logits(bm, prompts, gen)
    assert (glog - tf).abs().max() < 1e-3  # cached decode == one teacher-forced prefill
    for b, p in enumerate(prompts):
        e = ReferenceEngine(ckpt2, dtype=torch.float32, compute_dtype=torch.float32, context_cap=16)
        ref = e._logits(torch.tensor(p + gen[b, :3].tolist()))[len(p) - 1:]
        assert ref.argmax(-1).tolist() == gen[b].tolist()
        assert (ref - tf[b]).abs().max() < 1e-3 * ref.abs().max()


def test_command_writes_json_and_md_and_refuses_bad_input(synth2, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert M.main(["--model", str(synth2), "--prompts", "2", "--tokens", "3", "--formats", "fp8", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    r = doc["result"]
    assert r["positions"] == 6 and set(r["formats"]) == {"fp8"}
    f = r["formats"]["fp8"]
    assert 0 <= f["agreement_measured"] <= 1 and f["q90_abs_d"] >= 0 and f["margin_scale_for_90"] > 0
    assert len(doc["weights"]["sha256"]) == 64 and doc["environment"]["torch"]
    assert doc["explanation"] == M.explanation(r) and "FP8" in doc["explanation"]
    assert all(x["source"].startswith("https://") for x in doc["published"])
    md = out.with_suffix(".md").read_text()
    assert doc["explanation"] in md and "| fp8 |" in md
    for bad in (["--prompts", "0"], ["--formats", "int3"]):
        assert M.main(["--model", str(synth2), "--tokens", "3", "--out", str(tmp_path / "x.json"), *bad]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")
    assert not (tmp_path / "x.json").exists()


def test_final_md_and_page_methodology_print_the_same_paragraph(tmp_path):
    from monolith import REPO_ROOT
    from monolith.bench import final
    from monolith.xray.site import build_site_data

    res = tmp_path / "results"
    res.mkdir()
    text = "On the synthetic weights the margin has median 0.5; FP8 moves it by 1.2."
    (res / M.FILE).write_text(json.dumps({"explanation": text}))
    page = build_site_data(tmp_path, out_dir=tmp_path / "out")["quality_explanation"]
    doc = json.loads((REPO_ROOT / "tests" / "fixtures" / "final_example.json").read_text())  # has quantized rows
    md = final.render_final_md(doc, results_dir=res)
    assert page == text and f"\n{text}\n" in md
    (res / M.FILE).write_text(json.dumps({"explanation": 3}))
    with pytest.raises(Exception, match="no explanation"):
        M.paragraph(res)
    assert M.paragraph(tmp_path / "nowhere") is None


def test_committed_paragraph_is_visitor_text_with_the_files_numbers():
    from monolith import REPO_ROOT
    from monolith.xray.site import DEV_TEXT

    doc = json.loads((REPO_ROOT / "results" / M.FILE).read_text())
    text = M.paragraph()
    assert text == M.explanation(doc["result"]) == doc["explanation"]  # regenerated from the file's numbers
    assert not DEV_TEXT.search(text)  # the page prints it as is
    for fmt, f in doc["result"]["formats"].items():
        assert f"{fmt.upper()} changes that difference by a median {f['abs_d_quantiles']['p50']:.2g}" in text
