"""Issue 44's high items (the Python side): nothing passes on garbage, nothing overwrites what it
was not asked to. Each test feeds the hostile input and asserts the refusal and that nothing
was lost."""
import json
import shutil

import pytest
import torch
from harness_fakes import FakeEngine
from typer.testing import CliRunner

from monolith import results
from monolith.checkpoint import load_checkpoint
from monolith.cli import app
from monolith.errors import MonolithError
from monolith.eval import correctness as C

runner = CliRunner()


def _nan_from(pos0):
    def f(pos, lg):
        return torch.full_like(lg, float("nan")) if pos >= pos0 else lg
    return f


# ---- high 1: the gate, packs and checkpoints ---------------------------------------------------
def test_high1_gate_fails_on_nan_logits():
    prompts = [[1, 2, 3], [4, 5]]
    # both sides NaN from position 6: both argmax 0, every token agrees, and the gate must still fail
    oset = C.oracle_runs(FakeEngine(flip=_nan_from(6)), prompts, 8)
    assert oset.nonfinite == {"prompt": 0, "step": 4, "position": 6, "token": 0, "value": "nan"}
    v = C.gate(FakeEngine(flip=_nan_from(6)), oset, tolerance=0.1)
    assert not v["passed"] and v["divergences"] == 0
    assert any("oracle's logits are non-finite" in r and "step 4 (position 6)" in r for r in v["reasons"])
    assert any(r.startswith("prompt 0: the engine's logits are non-finite") and "step 4 (position 6)" in r
               for r in v["reasons"])
    assert v["nonfinite"]["engine"][0]["step"] == 4
    # the engine alone: a finite oracle, an engine with one Inf logit at a prompt position and one in a step
    oset = C.oracle_runs(FakeEngine(), prompts, 8)
    assert oset.nonfinite is None

    def one_inf(pos, lg):
        if pos in (1, 9):
            lg = lg.clone()
            lg[3] = float("inf") if pos == 1 else float("-inf")
        return lg
    v = C.gate(FakeEngine(flip=one_inf), oset, tolerance=0.1)
    assert not v["passed"]
    assert "prompt 0: the engine's logits are non-finite (inf for token 3) at a prompt token (position 1)" in v["reasons"]
    assert "prompt 1: the engine's logits are non-finite (-inf for token 3) at step 8 (position 9)" not in v["reasons"]
    # the verdict itself is finite JSON (the writer refuses NaN)
    json.dumps(v, allow_nan=False)


def _resave(src, dst, edit):
    """Copy a packed safetensors file with `edit(tensors)` applied, keeping its metadata."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k).clone() for k in f.keys()}  # noqa: SIM118
    edit(tensors)
    dst.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst), metadata=meta)
    return dst


@pytest.mark.parametrize("how", ["nan_scale", "huge_scale", "code_7f", "code_ff", "nan_norm"])
def test_high1_fp8_pack_with_non_finite_values_is_refused(fp8pack2, synth2, tmp_path, how):
    from monolith.quant import fp8_layout as L
    from monolith.quant.pack_fp8 import load_packed_fp8

    good = load_packed_fp8(fp8pack2)
    f = good.meta["formats"]["model.layers.1.mlp.down_proj.weight"]

    def edit(t):
        if how in ("nan_scale", "huge_scale"):
            t[L.T_LAYER_SCALES][1, f["scale_offset"] + 5 * f["scale_stride"]] = float("nan") if how == "nan_scale" else 3e38
        elif how == "nan_norm":
            t[L.T_FINAL_NORM][17] = float("nan")
        else:
            t[L.T_LAYER_CODES][1, f["byte_offset"] + 5 * f["row_stride_bytes"] + 9] = 0x7F if how == "code_7f" else 0xFF

    bad = _resave(fp8pack2 / L.FILE, tmp_path / "bad" / L.FILE, edit)
    want = {"nan_scale": r"down_proj.weight has a non-finite row scale nan at row 5",
            "huge_scale": r"tensor model.layers.1.mlp.down_proj.weight \(largest \|weight\| 1.34e\+41\) lets layer 1's "
                          r"down projection reach 5.61e\+54, beyond bfloat16's range",
            "code_7f": r"down_proj.weight holds the E4M3 NaN code 0x7F at row 5, column 9",
            "code_ff": r"down_proj.weight holds the E4M3 NaN code 0xFF at row 5, column 9",
            "nan_norm": r"model.norm.weight has a non-finite value nan at index \[17\]"}[how]
    with pytest.raises(MonolithError, match=want):
        load_packed_fp8(bad.parent)
    # through the CLI: exit 2, one line, and no "PASSED"
    r = runner.invoke(app, ["eval", "correctness", "--engine", "reference", "--fp8", str(bad.parent),
                            "--model", str(synth2), "--device", "cpu", "--prompts", "1", "--tokens", "2"])
    assert r.exit_code != 0 and "PASSED" not in r.output
    assert isinstance(r.exception, MonolithError) or "error" in r.output


@pytest.mark.parametrize("how", ["nan_block_scale", "nan_tensor_scale", "huge_tensor_scale"])
def test_high1_nvfp4_pack_with_non_finite_values_is_refused(synth2, tmp_path, how):
    from monolith.quant import nvfp4_layout as L
    from monolith.quant.pack_nvfp4 import load_packed_nvfp4, pack_nvfp4

    out = tmp_path / "nv"
    pack_nvfp4(synth2, out, search=False, progress=False)
    good = load_packed_nvfp4(out)
    name = "model.layers.0.self_attn.o_proj.weight"
    f = good.meta["formats"][name]

    def edit(t):
        if how == "nan_block_scale":
            t[L.T_LAYER_BSCALES][0, f["bscale_offset"] + 2 * f["bscale_row_stride"] + 3] = 0xFF
        else:
            t[L.T_LAYER_TSCALES][0, f["tscale_index"]] = float("nan") if how == "nan_tensor_scale" else 3e38

    bad = _resave(out / L.FILE, tmp_path / "bad" / L.FILE, edit)
    want = {"nan_block_scale": rf"{name} holds the E4M3 NaN code 0xFF in its block scales at row 2, block 3",
            "nan_tensor_scale": rf"{name} has a non-finite tensor scale nan",
            "huge_tensor_scale": rf"tensor {name} .* lets layer 0's o projection reach"}[how]
    with pytest.raises(MonolithError, match=want):
        load_packed_nvfp4(bad.parent)


def _ckpt_with(synth2, ckpt2, tmp_path, name, edit):
    from safetensors.torch import save_file

    d = tmp_path / "ck"
    d.mkdir()
    for f in ("config.json", "tokenizer.json"):
        shutil.copyfile(synth2 / f, d / f)
    tensors = dict(ckpt2.tensors)
    w = tensors[name].clone()
    edit(w)
    tensors[name] = w
    save_file(tensors, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("name", ["model.norm.weight", "model.layers.1.post_attention_layernorm.weight",
                                  "model.layers.0.self_attn.q_norm.weight"])
def test_high1_huge_but_finite_norm_gain_is_refused(synth2, ckpt2, tmp_path, name):
    def edit(w):
        w[3] = 1e38
    d = _ckpt_with(synth2, ckpt2, tmp_path, name, edit)
    with pytest.raises(MonolithError, match=rf"tensor {name} \(largest \|weight\| 9.97e\+37\) lets .* beyond bfloat16's "
                                            "range .* cannot produce finite activations"):
        load_checkpoint(d, allow_reduced_depth=True)
    r = runner.invoke(app, ["generate", "--model", str(d), "--prompt", "Hi", "-n", "2", "--device", "cpu"])
    assert r.exit_code != 0 and isinstance(r.exception, MonolithError) and name in str(r.exception)


def test_high1_ordinary_weights_sit_far_below_the_activation_limit(ckpt2):
    from monolith.checkpoint import ACTIVATION_LIMIT, activation_bounds, check_finite

    worst = max(b for _, b, _ in activation_bounds(check_finite(ckpt2.tensors), ckpt2.shape))
    assert worst < ACTIVATION_LIMIT * 1e-15  # 28 layers add at most 14x the 2 layers' residual


def test_high1_results_writer_refuses_non_finite_numbers(tmp_path):
    doc = results.new_doc({}, {}, {})
    row = results.base_row("e", "e")
    row.update(status="failed", reason="broken", quality={"kl": float("nan"), "agreement": 0.5})
    doc["rows"].append(row)
    with pytest.raises(MonolithError, match=r"rows\[0\]\.quality\.kl is nan"):
        results.write(doc, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()
    kept = tmp_path / "r.invalid.json"
    assert json.loads(kept.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in {kept}"))


# ---- high 2: a results path ending in .md ------------------------------------------------------
def _valid_doc():
    doc = results.new_doc({}, {"kind": "synthetic"}, {"title": "t"})
    row = results.base_row("e", "a | b\nc")
    row.update(status="not run", reason="x")
    doc["rows"].append(row)
    return doc


def test_high2_md_results_path_keeps_json(tmp_path):
    with pytest.raises(MonolithError, match=r"must end in \.json"):
        results.write(_valid_doc(), tmp_path / "run.md")
    assert not (tmp_path / "run.md").exists()
    assert json.loads((tmp_path / "run.invalid.json").read_text())["rows"][0]["engine"] == "e"  # kept, not lost
    j, md = results.write(_valid_doc(), tmp_path / "run.json")
    assert j.suffix == ".json" and md.suffix == ".md" and json.loads(j.read_text())["schema"] == results.SCHEMA
    # a command checks --out before any work
    r = runner.invoke(app, ["bench", "--engine", "reference", "--out", str(tmp_path / "x.md"), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError) and "must end in .json" in str(r.exception)


def test_high2_render_never_overwrites_its_input(tmp_path, capsys):
    keep = tmp_path / "keep.md"
    keep.write_text(json.dumps(_valid_doc()))
    before = keep.read_text()
    assert results.main([str(keep), "--render"]) != 0
    assert keep.read_text() == before
    assert "must end in .json" in capsys.readouterr().out
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(_valid_doc()))
    assert results.main([str(ok), "--render"]) == 0 and (tmp_path / "ok.md").is_file()


# ---- high 3: pack --stats ----------------------------------------------------------------------
def test_high3_pack_stats_refuses_foreign_path(synth2, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(synth2, ck)
    weights = (ck / "model.safetensors").read_bytes()
    out = tmp_path / "p"
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    for target, why in ((ck / "model.safetensors", "inside the model directory"),
                        (ck / "stats.json", "inside the model directory"),
                        (out / "stats.json", "inside the output directory"),
                        (other, "exists and is not a pack statistics file")):
        r = runner.invoke(app, ["pack", "--format", "fp8", "--model", str(ck), "--out", str(out), "--stats", str(target)])
        assert isinstance(r.exception, MonolithError) and why in str(r.exception), (target, r.output)
        assert not out.exists()  # refused before any packing
    assert (ck / "model.safetensors").read_bytes() == weights and other.read_text() == "mine"
    # its own earlier stats file is replaced
    st = tmp_path / "stats.json"
    r = runner.invoke(app, ["pack", "--format", "fp8", "--model", str(ck), "--out", str(out), "--stats", str(st)])
    assert r.exit_code == 0, r.output
    first = json.loads(st.read_text())
    assert first["kind"] == "monolith-pack-stats"
    r = runner.invoke(app, ["pack", "--format", "fp8", "--model", str(ck), "--out", str(out), "--stats", str(st)])
    assert r.exit_code == 0, r.output
