"""The fp8 gate's oracle and fp8 quality against bf16 on CPU (issue 12, items 4-5), on the 2-layer
synthetic checkpoint: fast stand-ins for the GPU runs, with the same code paths."""
import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from monolith.bench.baselines import registry
from monolith.cli import app
from monolith.errors import MonolithError
from monolith.eval import correctness
from monolith.eval import quality as Q
from monolith.quant.fp8_quality import fp8_quality
from monolith.quant.pack_fp8 import dequantized_checkpoint, load_packed_fp8

PROMPTS = [[9707, 1879, 374], [785, 6722, 315, 9625], [750, 75698]]


@pytest.fixture(scope="module")
def dq2(fp8pack2, ckpt2):
    return dequantized_checkpoint(fp8pack2, ckpt2)


@pytest.fixture(scope="module")
def fp8_oracle_runs(dq2):
    return correctness.oracle_runs(registry.oracle(dq2, "cpu"), PROMPTS[:2], 8)


def test_dequantized_checkpoint_is_the_packed_numbers(dq2, fp8pack2, ckpt2):
    p = load_packed_fp8(fp8pack2)
    assert set(dq2.tensors) == set(ckpt2.tensors)
    for name in ("model.layers.1.self_attn.v_proj.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert dq2.tensors[name].dtype == torch.float32
        assert torch.equal(dq2.tensors[name], p.dequantized(name)), name
    d = dq2.describe()
    assert d["kind"] == "fp8-dequantized" and d["scheme"] == "fp8-e4m3-rowscale" and d["layout"] == "rowmajor-v1"
    assert d["source"]["sha256"] == ckpt2.sha256() and d["sha256"] != ckpt2.sha256()
    assert dq2.tokenizer_path == ckpt2.tokenizer_path and dq2.shape == ckpt2.shape


def test_dequantized_checkpoint_refuses_other_weights(fp8pack2, ckpt2):
    other = dataclasses.replace(ckpt2, _sha256="0" * 64)
    with pytest.raises(MonolithError, match="packed from a different checkpoint"):
        dequantized_checkpoint(fp8pack2, other)
    with pytest.raises(MonolithError, match="packed from a different checkpoint"):
        dequantized_checkpoint(load_packed_fp8(fp8pack2), other)


def test_oracle_keeps_the_dequantized_weights_in_fp32(dq2, ckpt2):
    orc = registry.oracle(dq2, "cpu")
    wq = dq2.tensors["model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(orc.layers[0]["wq"], wq) and torch.equal(orc.embed, dq2.tensors["model.embed_tokens.weight"])
    # teeth: the dequantized values are not bf16 numbers, so a bf16 copy would be a different model
    assert not torch.equal(wq.bfloat16().float(), wq)
    # the bf16 checkpoint's oracle is unchanged: bf16 weights, fp32 compute
    plain = registry.oracle(ckpt2, "cpu")
    assert torch.equal(plain.layers[0]["wq"], ckpt2.tensors["model.layers.0.self_attn.q_proj.weight"].float())


def test_fp8_gate_passes_the_fp8_model_and_fails_the_unquantized_one(fp8_oracle_runs, dq2, ckpt2):
    oset = fp8_oracle_runs
    assert oset.desc["info"]["dtype"] == "torch.float32"
    # the numbers the kernel multiplies, computed in fp32 like the kernel: passes, exactly
    v = correctness.gate(registry.build("reference-fp32", dq2, "cpu"), oset, tolerance=0.5, det_repeats=2)
    assert v["passed"] and v["divergences"] == 0
    # a kernel that forgot to quantize (fp32 on the original bf16 weights) is a different model: caught
    # at the megakernel's tolerance (0.5 logits; measured here: 5 divergences at margins 0.55-1.6)
    v = correctness.gate(registry.oracle(ckpt2, "cpu"), oset, tolerance=0.5, det_prompts=0)
    assert not v["passed"] and v["divergences_disallowed"] > 0
    # a packer/kernel mix-up (gate and up rows exchanged in layer 0): caught
    t = dict(dq2.tensors)
    t["model.layers.0.mlp.gate_proj.weight"], t["model.layers.0.mlp.up_proj.weight"] = (
        t["model.layers.0.mlp.up_proj.weight"], t["model.layers.0.mlp.gate_proj.weight"])
    v = correctness.gate(registry.oracle(dataclasses.replace(dq2, tensors=t), "cpu"), oset, tolerance=0.5,
                         det_prompts=0)
    assert not v["passed"] and v["divergences_disallowed"] > 0


def test_quantized_gates_verdicts():
    base = {"ppl_ratio": 1.01, "agreement": 0.93, "kl": 0.02}
    g = Q.quantized_gates(base, {"agreement": 0.90, "ppl_ratio": 1.0002, "kl": 0.025, "engine": "bf16"})
    assert g["fixed_gates_pass"] and g["floor_gate_pass"] and g["kl_over_floor"] == pytest.approx(0.8)
    assert "fixed gates PASS" in g["summary"] and "against the bf16 floor PASS" in g["summary"]
    g = Q.quantized_gates({**base, "ppl_ratio": 1.021}, None)
    assert not g["ppl_pass"] and g["agreement_pass"] and not g["fixed_gates_pass"] and g["floor_gate_pass"] is None
    g = Q.quantized_gates({**base, "agreement": 0.899}, {"agreement": 0.88, "ppl_ratio": 1.0, "kl": 0.03})
    assert not g["fixed_gates_pass"] and g["floor_gate_pass"]          # below 90 %, above the floor
    assert "fixed gates FAIL" in g["summary"] and "floor PASS" in g["summary"]
    g = Q.quantized_gates(base, {"agreement": 0.95, "ppl_ratio": 1.0, "kl": 0.01})
    assert g["fixed_gates_pass"] and not g["floor_gate_pass"]          # above 90 %, below the floor
    assert g["agreement_minus_floor"] == pytest.approx(-0.02)
    g = Q.quantized_gates({**base, "ppl_ratio": 1.015}, {"agreement": 0.9, "ppl_ratio": 0.99, "kl": 0.01})
    assert not g["floor_gate_pass"]                                     # +2.5 % over the floor's perplexity


def test_fp8_quality_cpu_path(ckpt2, fp8pack2):
    from monolith.tokenizer import load_tokenizer
    tok = load_tokenizer(ckpt2.path)
    text = tok.encode("The history of the city begins with a small settlement on the river. " * 3)
    res = fp8_quality(ckpt2, tok, fp8pack2, "cpu", text_tokens=text, positions=16, context=8, stride=8,
                      prompts=2, agree_tokens=4, free_running=False, quality_prompts=PROMPTS)
    e, f = res["engine"], res["floor"]
    assert res["roles"]["floor"] == "reference on the original bf16 weights"     # CPU default floor
    assert "on fp8 weights" in res["roles"]["engine"] and e["engine_info"]["dtype"] == "torch.float32"
    assert e["positions"] == f["positions"] == 16 and e["agreement_tokens"] == 8
    assert e["ref_ppl"] == f["ref_ppl"]                  # one reference (fp32 on bf16 weights) for both
    assert e["kl"] > 0 and f["kl"] > 0                  # fp8 and bf16 rounding both move the distribution
    assert e["ppl_ratio"] == pytest.approx(e["ppl"] / e["ref_ppl"], rel=1e-4) and e["ppl_ratio"] != 1.0
    assert res["gates"]["floor"]["agreement"] == f["agreement"] and isinstance(res["gates"]["fixed_gates_pass"], bool)
    assert res["fp8_weights"]["kind"] == "fp8-dequantized" and res["weights"]["kind"] == "synthetic"
    # the protocol's parameters (NOTES.md, Facts: protocols) are recorded with the figures
    p = res["protocol"]
    assert (p["context"], p["stride"], p["positions"], p["kl_positions"], p["prompts"], p["agree_tokens"]) == (
        8, 8, 16, 16, 2, 4)
    assert p["text"]["tokens"] == len(text) and p["gates"]["ppl_ratio_max"] == 1.02 and p["gates"]["agreement_min"] == 0.9
    g = res["gates"]
    assert g["floor_gate_pass"] == (g["floor_agreement_pass"] and g["floor_ppl_pass"])
    assert g["floor"]["ppl"] == f["ppl"] and g["ppl_over_floor"] == pytest.approx(e["ppl_ratio"] / f["ppl_ratio"])
    with pytest.raises(MonolithError, match="computes in bf16"):
        fp8_quality(ckpt2, tok, fp8pack2, "cpu", engine="reference", text_tokens=text, quality_prompts=PROMPTS)


@pytest.mark.parametrize("engine,floor,device,match", [
    ("hf-parallel-fp32", None, "cpu", "loads the original weights"),       # HF would read the bf16 files
    ("megakernel-bf16-upstream", None, "cuda", "does not read fp8 weights"),
    ("reference-fp32", "megakernel-fp8-upstream", "cuda", "floor is a bf16 engine"),
    ("megakernel-fp8-upstream", None, "cpu", "--engine megakernel-fp8-upstream needs a CUDA device"),
    ("reference-fp32", "megakernel-bf16-upstream", "cpu", "--floor megakernel-bf16-upstream needs a CUDA device"),
])
def test_fp8_quality_refuses_roles_before_any_work(ckpt2, engine, floor, device, match, tmp_path):
    """The pack given does not exist: a refusal must come before the dequantization (and before any
    engine or the text is loaded)."""
    with pytest.raises(MonolithError, match=match):
        fp8_quality(ckpt2, None, tmp_path / "no-pack", device, engine=engine, floor=floor, text_tokens=[1, 2],
                    quality_prompts=PROMPTS)


def test_fp8_kernel_variant_is_accepted_for_the_quality_run():
    """What scripts/gpu.sh m3quality runs: megakernel-fp8-upstream on the fp8 weights, the bf16
    megakernel as the floor (checked up to the GPU work)."""
    from monolith.quant.fp8_quality import check_roles

    check_roles("megakernel-fp8-upstream", "reference-fp32", "megakernel-bf16-upstream", "cuda")
    assert registry.weights_of("megakernel-fp8-upstream") == "fp8"
    assert registry.weights_of("megakernel-bf16-upstream") == "bf16"


def test_pack_and_eval_quality_cli(synth2, fp8pack2, tmp_path):
    r = CliRunner().invoke(app, ["pack", "--help"])
    assert r.exit_code == 0 and "--format" in r.output and "--head" in r.output
    r = CliRunner().invoke(app, ["pack", "--format", "int3", "--model", str(synth2), "--out", str(tmp_path / "x")])
    assert isinstance(r.exception, MonolithError) and "not supported" in str(r.exception)
    assert not (tmp_path / "x").exists()  # refused before anything is written
    r = CliRunner().invoke(app, ["pack", "--format", "fp8", "--model", str(tmp_path / "nope"), "--out", str(tmp_path)])
    assert isinstance(r.exception, MonolithError) and "not a checkpoint dir" in str(r.exception)
    out = tmp_path / "p"
    r = CliRunner().invoke(app, ["pack", "--format", "fp8", "--model", str(synth2), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "rowmajor-v1" in r.output
    a, b = load_packed_fp8(out, model=synth2), load_packed_fp8(fp8pack2)
    assert all(torch.equal(a.tensors[k], b.tensors[k]) for k in b.tensors)  # same bytes as the library call
    txt = tmp_path / "t.txt"
    txt.write_text("The river rises in the hills and runs to the sea past the old town. " * 2)
    res = tmp_path / "q.json"
    r = CliRunner().invoke(app, ["eval", "quality", "--fp8", str(fp8pack2), "--model", str(synth2), "--device", "cpu",
                                 "--floor", "none", "--text", str(txt), "--positions", "8", "--context", "8",
                                 "--stride", "8", "--prompts", "1", "--agree-tokens", "2", "--no-free-running",
                                 "--out", str(res)])
    assert r.exit_code == 0, r.output
    doc = json.loads(res.read_text())
    assert "floor" not in doc and doc["gates"]["floor"] is None and "fixed gates" in r.output
    assert doc["engine"]["positions"] == 8 and doc["fp8_weights"]["source"]["sha256"] == doc["weights"]["sha256"]


def test_fp8_quality_gives_the_engine_the_dequantized_weights_and_the_floor_the_original(ckpt2, fp8pack2, fake_registry):
    """Who runs on what: the reference and the floor on the original bf16 checkpoint, the engine on
    the dequantized one (a megakernel fp8 variant takes that checkpoint's own pack)."""
    built = fake_registry
    res = fp8_quality(ckpt2, None, fp8pack2, "cuda", engine="megakernel-fp8-upstream", ref="reference-fp32",
                      floor="megakernel-bf16-upstream", text_tokens=[5, 6, 7, 8, 9, 10], positions=4, context=3,
                      stride=3, prompts=2, agree_tokens=3, free_running=False, quality_prompts=[[1, 2], [3]])
    assert built["reference-fp32"] is ckpt2 and built["megakernel-bf16-upstream"] is ckpt2
    dq = built["megakernel-fp8-upstream"]
    assert dq.weight_dtype == torch.float32 and dq.packed.source_sha256 == ckpt2.sha256()
    assert str(dq.packed.path).startswith(str(fp8pack2))
    assert set(res) >= {"engine", "floor", "gates", "protocol", "roles"}
    assert res["roles"]["floor"] == "megakernel-bf16-upstream on the original bf16 weights"


def _counting(monkeypatch, build=None):
    """registry.build (or `build`) and evaluate_many wrapped: (name, checkpoint) per build, engine
    names per pass."""
    builds, passes = [], []
    build, many = build or registry.build, Q.evaluate_many

    def counting_build(name, ck, device):
        builds.append((name, ck))
        return build(name, ck, device)

    def counting_many(ref, engines, *a, **kw):
        passes.append([getattr(e, "name", "?") for e in engines])
        return many(ref, engines, *a, **kw)

    monkeypatch.setattr(registry, "build", counting_build)
    monkeypatch.setattr(Q, "evaluate_many", counting_many)
    return builds, passes


def test_fp8_quality_several_pairs_share_one_reference_pass(ckpt2, fp8pack2, monkeypatch):
    """Pairs (engine i, floor i) measured in one reference pass (scripts/gpu.sh m3quality: both
    schedules' fp8 engines); each distinct engine and floor built and measured once; the top level
    is the first pair, as a one-pair run writes it."""
    from monolith.tokenizer import load_tokenizer
    tok = load_tokenizer(ckpt2.path)
    text = tok.encode("The history of the city begins with a small settlement on the river. " * 3)
    builds, passes = _counting(monkeypatch)
    res = fp8_quality(ckpt2, tok, fp8pack2, "cpu", engine=["reference-fp32", "reference-fp32"],
                      floor=["reference", "none"], text_tokens=text, positions=16, context=8, stride=8, prompts=2,
                      agree_tokens=4, free_running=False, quality_prompts=PROMPTS)
    assert len(passes) == 1 and len(passes[0]) == 2             # one pass: the fp8 engine and the floor, once each
    names = [n for n, _ in builds]
    assert names.count("reference-fp32") == 2 and names.count("reference") == 1  # the reference, the fp8 engine
    assert [ck is ckpt2 for n, ck in builds] == [True, False, True]  # reference, engine (dequantized), floor
    p0, p1 = res["pairs"]
    assert p0["roles"]["floor"] == "reference on the original bf16 weights" and p1["roles"]["floor"] is None
    assert "on fp8 weights" in p0["roles"]["engine"] and p0["roles"]["engine"] == p1["roles"]["engine"]
    assert "floor" in p0 and "floor" not in p1 and p1["gates"]["floor"] is None
    assert p0["engine"] == p1["engine"] and p0["engine"] is not p1["engine"]  # same figures, not one shared dict
    assert p0["gates"]["floor"]["agreement"] == p0["floor"]["agreement"]
    for k in ("engine", "floor", "gates", "roles"):                  # one-pair readers see the first pair
        assert res[k] == p0[k], k
    assert set(res) >= {"protocol", "weights", "fp8_weights", "seconds"} and res["protocol"]["positions"] == 16


def test_fp8_quality_pairs_of_both_schedules_on_one_reference(ckpt2, fp8pack2, monkeypatch):
    """The m3quality pairs, cuda path faked: the reference built and run once, each fp8 schedule on
    the dequantized weights, each bf16 floor on the original; a floor shared by two engines once."""
    from harness_fakes import FakeEngine

    built, passes = _counting(monkeypatch, lambda name, ck, device: FakeEngine())
    monkeypatch.setattr(registry, "spec", lambda name: registry.Spec(name, name))  # no CUDA needed here
    kw = dict(text_tokens=[5, 6, 7, 8, 9, 10], positions=4, context=3, stride=3, prompts=2, agree_tokens=3,
              free_running=False, quality_prompts=[[1, 2], [3]])
    res = fp8_quality(ckpt2, None, fp8pack2, "cuda", engine="megakernel-fp8-upstream,megakernel-fp8-stream",
                      floor="megakernel-bf16-upstream,megakernel-bf16-stream", **kw)
    assert [n for n, _ in built] == ["reference-fp32", "megakernel-fp8-upstream", "megakernel-bf16-upstream",
                                     "megakernel-fp8-stream", "megakernel-bf16-stream"]
    assert [ck is ckpt2 for _, ck in built] == [True, False, True, False, True]
    assert built[1][1] is built[3][1]                                 # one dequantized checkpoint for both
    assert len(passes) == 1 and len(passes[0]) == 4
    assert [(p["roles"]["engine"].split()[0], p["roles"]["floor"].split()[0]) for p in res["pairs"]] == [
        ("megakernel-fp8-upstream", "megakernel-bf16-upstream"), ("megakernel-fp8-stream", "megakernel-bf16-stream")]
    assert res["roles"] == res["pairs"][0]["roles"] and res["gates"] == res["pairs"][0]["gates"]
    built.clear()
    passes.clear()
    res = fp8_quality(ckpt2, None, fp8pack2, "cuda", engine=["megakernel-fp8-upstream", "megakernel-fp8-stream"],
                      floor="megakernel-bf16-upstream", **kw)               # one floor for both engines
    assert [n for n, _ in built].count("megakernel-bf16-upstream") == 1 and len(passes[0]) == 3
    assert [p["roles"]["floor"] for p in res["pairs"]] == ["megakernel-bf16-upstream on the original bf16 weights"] * 2


@pytest.mark.parametrize("engine,floor,match", [
    ("megakernel-fp8-upstream,megakernel-fp8-stream", "megakernel-bf16-upstream,megakernel-bf16-stream,none",
     "2 engines and --floor 3 floors"),
    ("megakernel-fp8-upstream,megakernel-fp8-stream,reference-fp32", "megakernel-bf16-upstream,none",
     "3 engines and --floor 2 floors"),
    ("megakernel-fp8-upstream,megakernel-bf16-stream", "megakernel-bf16-upstream", "bf16-stream does not read fp8"),
    ("megakernel-fp8-upstream,megakernel-fp8-stream", "megakernel-bf16-upstream,megakernel-fp8-stream",
     "floor is a bf16 engine"),
])
def test_fp8_quality_refuses_bad_pairs_before_any_work(ckpt2, engine, floor, match, tmp_path, monkeypatch):
    """Mismatched lists, or a bad role in the second pair: refused before the dequantization (the
    pack does not exist) and before any engine is built, in the library and in the CLI."""
    builds, passes = _counting(monkeypatch)
    with pytest.raises(MonolithError, match=match):
        fp8_quality(ckpt2, None, tmp_path / "no-pack", "cuda", engine=engine, floor=floor, text_tokens=[1, 2],
                    quality_prompts=PROMPTS)
    r = CliRunner().invoke(app, ["eval", "quality", "--fp8", str(tmp_path / "no-pack"), "--device", "cuda",
                                 "--model", str(tmp_path / "no-model"), "--engine", engine, "--floor", floor])
    assert isinstance(r.exception, MonolithError) and match in str(r.exception)   # not the missing checkpoint's error
    assert builds == [] and passes == []


def test_gpu_sh_m3quality_pairs_are_accepted(tmp_path, monkeypatch):
    """The pairs scripts/gpu.sh m3quality measures (its `monolith m3 --steps quality` run through the
    CLI, the measurement stood in), checked as the CLI does before the GPU work: each fp8 schedule
    on the pack the step wrote, beside its bf16 schedule, against fp32."""
    from test_nvcc_defines import _gpu_sh, _milestone_steps, _monolith_calls

    from monolith.quant.fp8_quality import quality_pairs

    r, calls, _ = _gpu_sh(tmp_path, "m3quality")
    assert r.returncode == 0, r.stdout + r.stderr
    (m3,) = _monolith_calls(calls)
    assert m3[:3] == ["m3", "--steps", "quality"]
    got = _milestone_steps(monkeypatch, m3, tmp_path / "results")
    q = got["quality"]
    assert got["pack"] == ("fp8", q["packed"]) and q["fmt"] == "fp8" and q["device"] == "cuda"
    assert quality_pairs(q["engine"], q["floor"], q["ref"], q["device"], q["fmt"]) == [
        ("megakernel-fp8-upstream", "megakernel-bf16-upstream"), ("megakernel-fp8-stream", "megakernel-bf16-stream")]
    assert q["ref"] == "reference-fp32" and got["quality_file"] == ["m3_fp8_quality.json"]


def test_variants_of_lists_only_runnable_one_token_engines():
    """Quality compares one token per pass: the sm_120 twins and the k-vector builds stay out."""
    from monolith import kernel_spec
    from monolith.quant.fp8_quality import variants_of

    names = variants_of("fp8")
    by_name = {v["name"]: v for v in kernel_spec.variants()["variants"]}
    assert "megakernel-fp8-stream" in names and "megakernel-fp8-upstream" in names
    ks = [n for n, v in by_name.items() if v.get("weights") == "fp8" and v.get("vectors", 1) > 1]
    assert ks, "variants.json has k-vector fp8 builds"
    for n in names:
        v = by_name[n.removeprefix("megakernel-")]
        assert v.get("config") != "sm120" and v.get("vectors", 1) == 1, n
