"""`monolith synth` / `monolith generate` / `python -m monolith.parity` on CPU (small configs)."""
import pytest
from typer.testing import CliRunner

from monolith.cli import app
from monolith.errors import MonolithError

runner = CliRunner()


@pytest.mark.parametrize("cmd", ["synth", "generate"])
def test_help(cmd):
    r = runner.invoke(app, [cmd, "--help"])
    assert r.exit_code == 0 and "--help" in r.output


def test_generate_reference_cpu(synth2):
    r = runner.invoke(app, ["generate", "--prompt", "Hello world", "-n", "4", "--model", str(synth2),
                            "--device", "cpu", "--engine", "auto"])
    assert r.exit_code == 0, r.output
    assert "reference on cpu: 4 tokens" in r.output and "tok/s" in r.output


def test_generate_errors(tmp_path, synth2):
    r = runner.invoke(app, ["generate", "--prompt", "x", "--model", str(tmp_path / "nope"), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError) and "not found" in str(r.exception)
    r = runner.invoke(app, ["generate", "--prompt", "x", "--model", str(synth2), "--device", "cpu",
                            "--engine", "megakernel"])
    assert isinstance(r.exception, MonolithError) and "needs --device cuda" in str(r.exception)
    r = runner.invoke(app, ["synth", "--out", str(tmp_path / "s"), "--layers", "0"])
    assert isinstance(r.exception, MonolithError)


def test_parity_smoke_cpu(synth2, tmp_path):
    from monolith.parity import run
    doc = run(synth2, "cpu", 2, n_prompts=1, n_tokens=3, margin_tol=0.25, dtype="fp32", compute=None,
              out=tmp_path / "p.json", progress=False)
    assert (tmp_path / "p.json").is_file()
    assert doc["summary"]["passed"] and doc["summary"]["identical_rate"] == 1.0
    assert doc["weights"]["kind"] == "synthetic" and doc["env"]["torch"]
