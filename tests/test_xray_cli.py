import json

import pytest
from typer.testing import CliRunner

from monolith.cli import app
from monolith.errors import MonolithError
from monolith.xray.raw import save_raw
from monolith.xray.synthetic import generate

runner = CliRunner()


@pytest.mark.parametrize("cmd", ["xray", "export", "m2"])
def test_help(cmd):
    r = runner.invoke(app, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    assert "--out-dir" in r.output


def test_module_help():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "monolith.xray.analyze", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--png" in r.stdout


def test_export_from_raw(tmp_path):
    meta, ev = generate(sm_count=12, blocks=10, layers=3, idle_sms=(2, 7), seed=4, variant="tiny-test")
    meta.pop("truth")
    out, page = tmp_path / "xray", tmp_path / "traces"
    save_raw(out / "tiny-test.raw.npz", meta, ev)
    r = runner.invoke(app, ["export", "--out-dir", str(out), "--page-dir", str(page), "--no-synthetic", "--no-site"])
    assert r.exit_code == 0, r.output
    assert (page / "tiny-test.json.gz").is_file()
    assert (out / "tiny-test.perfetto.json.gz").is_file()
    s = json.loads((out / "tiny-test.summary.json").read_text())
    assert s["idle"]["idle_sms"] == [2, 7]
    assert "traces:" in r.output


def test_xray_without_gpu_is_a_clear_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = runner.invoke(app, ["xray", "--out-dir", str(tmp_path)])
    assert isinstance(r.exception, MonolithError)
    assert "CUDA GPU" in str(r.exception)
