"""NVFP4 quality against bf16 on CPU (issue 14; `eval quality --nvfp4`), on the 2-layer synthetic
checkpoint: the fp8 protocol's code (quant/fp8_quality.py) with the format read from the pack, the
roles checked against that format, and scripts/gpu.sh m5quality's command."""
import json
import subprocess

import pytest
from typer.testing import CliRunner

from monolith import REPO_ROOT
from monolith.bench.baselines import registry
from monolith.cli import app
from monolith.errors import MonolithError
from monolith.quant import nvfp4_layout
from monolith.quant.fp8_quality import check_roles, pack_format, packed_quality, quality_pairs
from monolith.quant.pack_nvfp4 import load_packed_nvfp4, pack_nvfp4
from monolith.quant.packfile import sha256_file

PROMPTS = [[9707, 1879, 374], [785, 6722, 315, 9625], [750, 75698]]
SMALL = dict(positions=16, context=8, stride=8, prompts=2, agree_tokens=4, free_running=False, quality_prompts=PROMPTS)


@pytest.fixture(scope="module")
def nvpack(synth2, tmp_path_factory):
    out = tmp_path_factory.mktemp("nvfp4q") / "pack"
    pack_nvfp4(synth2, out, progress=False)
    return out


@pytest.fixture(scope="module")
def tok_text(ckpt2):
    from monolith.tokenizer import load_tokenizer
    tok = load_tokenizer(ckpt2.path)
    return tok, tok.encode("The history of the city begins with a small settlement on the river. " * 3)


@pytest.fixture
def no_builds(monkeypatch):
    """registry.build refused: a test using it asserts a refusal came before any engine."""
    def refuse(name, ck, device):
        raise AssertionError(f"built {name} before the refusal")
    monkeypatch.setattr(registry, "build", refuse)


def test_nvfp4_quality_cpu_path_names_the_format(ckpt2, nvpack, fp8pack2, tok_text):
    """The format from the pack's metadata (no fmt given); the engine on the dequantized nvfp4
    weights, which move the distribution far more than fp8 on the same protocol."""
    tok, text = tok_text
    res = packed_quality(ckpt2, tok, nvpack, "cpu", text_tokens=text, **SMALL)
    e, f = res["engine"], res["floor"]
    assert res["format"] == "nvfp4" and "fp8_weights" not in res
    assert res["roles"]["engine"] == "reference-fp32 on nvfp4 weights (nvfp4-e2m1-b16-e4m3, head fp8)"
    assert res["roles"]["floor"] == "reference on the original bf16 weights"     # CPU default floor
    pw = res["packed_weights"]
    assert pw["kind"] == "nvfp4-dequantized" and pw["scheme"] == nvfp4_layout.SCHEME and pw["layout_version"] == 1
    assert pw["search"] is True and pw["sha256"] == sha256_file(nvpack / nvfp4_layout.FILE)
    assert pw["source"]["sha256"] == res["weights"]["sha256"] == ckpt2.sha256()
    assert e["positions"] == f["positions"] == 16 and e["ref_ppl"] == f["ref_ppl"]  # one reference for both
    assert e["engine_info"]["dtype"] == "torch.float32"
    assert res["pairs"][0]["roles"] == res["roles"] and res["protocol"]["positions"] == 16
    # the same protocol on the fp8 pack: fp8 keeps its M3 key; NVFP4's 4-bit elements cost far more KL
    # (measured: 1.42 against 0.086 nats), so the nvfp4 run did measure other weights
    r8 = packed_quality(ckpt2, tok, fp8pack2, "cpu", text_tokens=text, **SMALL)
    assert r8["format"] == "fp8" and r8["fp8_weights"] == r8["packed_weights"]
    assert r8["packed_weights"]["kind"] == "fp8-dequantized" and "on fp8 weights" in r8["roles"]["engine"]
    assert e["kl"] > 5 * r8["engine"]["kl"] > 0 and r8["floor"]["kl"] == pytest.approx(f["kl"])


def test_pack_format_reads_the_metadata(nvpack, fp8pack2, tmp_path):
    import torch
    from safetensors.torch import save_file

    assert pack_format(nvpack) == "nvfp4" and pack_format(nvpack / nvfp4_layout.FILE) == "nvfp4"
    assert pack_format(fp8pack2) == "fp8" and pack_format(load_packed_nvfp4(nvpack)) == "nvfp4"
    with pytest.raises(MonolithError, match="packed weights not found"):
        pack_format(tmp_path)
    both = tmp_path / "both"
    both.mkdir()
    for p in (nvpack, fp8pack2):
        f = next(p.glob("*.safetensors"))
        (both / f.name).symlink_to(f)
    with pytest.raises(MonolithError, match="holds both model.fp8.safetensors and model.nvfp4.safetensors"):
        pack_format(both)
    other = tmp_path / "x.safetensors"
    save_file({"a": torch.zeros(1)}, str(other), metadata={"monolith.pack": json.dumps({"format": "packed-int3"})})
    with pytest.raises(MonolithError, match="format 'packed-int3' is not a packed format this measures"):
        pack_format(other)


@pytest.mark.parametrize("pack,engine,match", [
    ("nvpack", "megakernel-fp8-upstream", r"--engine megakernel-fp8-upstream does not read nvfp4 weights \(it reads "
     r"fp8, kernel/variants.json\); use reference-fp32 \(the quantizer alone\) or an nvfp4 kernel variant "
     r"\(megakernel-nvfp4-stream\)"),
    ("nvpack", "megakernel-fp8-stream", "does not read nvfp4 weights"),
    ("fp8pack2", "megakernel-nvfp4-stream", r"--engine megakernel-nvfp4-stream does not read fp8 weights \(it reads "
     r"nvfp4, .*an fp8 kernel variant \(megakernel-fp8-upstream, megakernel-fp8-stream(, [a-z0-9-]+)*\)"),
    ("nvpack", "megakernel-bf16-stream", "does not read nvfp4 weights .it reads bf16"),
    ("nvpack", "reference", "would round the dequantized nvfp4 weights to bf16"),
    ("nvpack", "hf-parallel-fp32", "loads the original weights"),
])
def test_roles_refuse_an_engine_of_another_format(ckpt2, pack, engine, match, request, no_builds):
    """The format read from the pack, then the engine checked against it, before any engine is
    built or the weights dequantized (the check of weights comes before the CUDA one: cpu here)."""
    with pytest.raises(MonolithError, match=match):
        packed_quality(ckpt2, None, request.getfixturevalue(pack), "cpu", engine=engine, text_tokens=[1, 2],
                       quality_prompts=PROMPTS)


def test_a_pack_of_the_other_format_is_refused(ckpt2, nvpack, fp8pack2, no_builds):
    with pytest.raises(MonolithError, match=r"holds fp8 weights, not nvfp4: measure it with `eval quality --fp8`"):
        packed_quality(ckpt2, None, fp8pack2, "cpu", fmt="nvfp4", text_tokens=[1, 2], quality_prompts=PROMPTS)
    with pytest.raises(MonolithError, match=r"holds nvfp4 weights, not fp8: .*megakernel-nvfp4-stream"):
        packed_quality(ckpt2, None, load_packed_nvfp4(nvpack), "cpu", fmt="fp8", text_tokens=[1, 2],
                       quality_prompts=PROMPTS)
    with pytest.raises(MonolithError, match="weights format 'int4' is not one this measures"):
        check_roles("reference-fp32", "reference-fp32", "reference", "cpu", "int4")


def _m5quality_roles(tmp_path, monkeypatch) -> dict:
    """What scripts/gpu.sh m5quality's `monolith m5 --steps quality` hands packed_quality (the CLI
    run on a CPU, the pack and the measurement stood in), and what the step packed."""
    from test_nvcc_defines import _gpu_sh, _milestone_steps, _monolith_calls

    r, calls, _ = _gpu_sh(tmp_path, "m5quality")
    assert r.returncode == 0, r.stdout + r.stderr
    (m5,) = _monolith_calls(calls)
    assert m5[:3] == ["m5", "--steps", "quality"]
    return _milestone_steps(monkeypatch, m5, tmp_path / "results")


def test_the_nvfp4_kernel_gets_the_dequantized_pack_and_the_floor_the_original(ckpt2, nvpack, fake_registry, tmp_path,
                                                                                monkeypatch):
    """scripts/gpu.sh m5quality's roles, cuda path faked: nvfp4-stream built on the dequantized
    nvfp4 checkpoint (the megakernel then runs on its own pack, not an in-memory re-pack), the
    reference and the bf16-stream floor on the original; refused for an fp8 pack's format."""
    from monolith.quant.pack_nvfp4 import PackedNVFP4

    q = _m5quality_roles(tmp_path, monkeypatch)["quality"]
    assert q["fmt"] == "nvfp4" and q["device"] == "cuda"
    (engine,), (floor,), ref = q["engine"], q["floor"], q["ref"]  # one pair: the nvfp4 kernel and its bf16 floor
    assert quality_pairs(engine, floor, ref, "cuda", "nvfp4") == [("megakernel-nvfp4-stream", "megakernel-bf16-stream")]
    with pytest.raises(MonolithError, match="does not read fp8 weights"):
        quality_pairs(engine, floor, ref, "cuda", "fp8")
    built = fake_registry
    res = packed_quality(ckpt2, None, nvpack, "cuda", fmt="nvfp4", engine=engine, ref=ref, floor=floor,
                         text_tokens=[5, 6, 7, 8, 9, 10], positions=4, context=3, stride=3, prompts=2, agree_tokens=3,
                         free_running=False, quality_prompts=[[1, 2], [3]])
    assert list(built) == [ref, engine, floor] and built[ref] is ckpt2 and built[floor] is ckpt2
    dq = built[engine]
    assert isinstance(dq.packed, PackedNVFP4) and str(dq.packed.path) == str(nvpack)
    assert dq.packed.source_sha256 == ckpt2.sha256()
    assert res["format"] == "nvfp4" and res["roles"]["engine"].startswith("megakernel-nvfp4-stream on nvfp4 weights")
    assert res["roles"]["floor"] == "megakernel-bf16-stream on the original bf16 weights"


def test_eval_quality_cli_nvfp4(synth2, nvpack, fp8pack2, tmp_path):
    run = CliRunner().invoke
    r = run(app, ["eval", "quality", "--help"])
    assert r.exit_code == 0 and "--nvfp4" in r.output and "--fp8" in r.output
    # refused before anything is read: neither dir nor the checkpoint exists
    r = run(app, ["eval", "quality", "--fp8", str(tmp_path / "a"), "--nvfp4", str(tmp_path / "b"),
                  "--model", str(tmp_path / "no-model"), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError) and "--fp8 and --nvfp4 are exclusive" in str(r.exception)
    # the pack's format checked before the checkpoint is loaded (its error would differ)
    r = run(app, ["eval", "quality", "--nvfp4", str(fp8pack2), "--model", str(tmp_path / "no-model"), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError) and "holds fp8 weights, not nvfp4" in str(r.exception)
    r = run(app, ["eval", "quality", "--fp8", str(nvpack), "--model", str(tmp_path / "no-model"), "--device", "cpu"])
    assert isinstance(r.exception, MonolithError) and "holds nvfp4 weights, not fp8" in str(r.exception)
    r = run(app, ["eval", "quality", "--nvfp4", str(nvpack), "--model", str(tmp_path / "no-model"), "--device", "cpu",
                  "--engine", "megakernel-fp8-stream"])
    assert isinstance(r.exception, MonolithError) and "does not read nvfp4 weights" in str(r.exception)
    txt = tmp_path / "t.txt"
    txt.write_text("The river rises in the hills and runs to the sea past the old town. " * 2)
    res = tmp_path / "q.json"
    r = run(app, ["eval", "quality", "--nvfp4", str(nvpack), "--model", str(synth2), "--device", "cpu",
                  "--floor", "none", "--text", str(txt), "--positions", "8", "--context", "8", "--stride", "8",
                  "--prompts", "1", "--agree-tokens", "2", "--no-free-running", "--out", str(res)])
    assert r.exit_code == 0, r.output
    assert "reference-fp32 on nvfp4 weights (nvfp4-e2m1-b16-e4m3, head fp8) | floor None" in r.output
    doc = json.loads(res.read_text())
    assert doc["format"] == "nvfp4" and doc["packed_weights"]["kind"] == "nvfp4-dequantized"
    assert "fp8_weights" not in doc and "floor" not in doc and doc["engine"]["positions"] == 8
    assert doc["packed_weights"]["source"]["sha256"] == doc["weights"]["sha256"]


def test_gpu_sh_m5quality_packs_then_measures(tmp_path, monkeypatch):
    """The stage, python3 stood in: the synthetic checkpoint, then `monolith m5 --steps quality`,
    whose steps (run here through the CLI) pack nvfp4 into the dir the quality run reads and measure
    with M3's full protocol into results/m5_nvfp4_quality.json."""
    from test_nvcc_defines import _gpu_sh, _milestone_steps, _monolith_calls

    r, calls, _ = _gpu_sh(tmp_path, "m5quality")
    assert r.returncode == 0, r.stdout + r.stderr
    cmds = [c.split(" | ")[0] for c in calls]
    assert len(cmds) == 2 and "ensure_checkpoint" in cmds[0]
    assert cmds[1] == "python3 -m monolith m5 --steps quality"
    table = r.stdout.split("==== summary")[1]
    assert "m5-quality" in table
    m5 = _milestone_steps(monkeypatch, _monolith_calls(calls)[0], tmp_path / "r5")
    fmt, pack_dir = m5["pack"]
    assert fmt == "nvfp4" and m5["quality"]["packed"] == pack_dir and m5["quality"]["fmt"] == "nvfp4"
    assert m5["quality_file"] == ["m5_nvfp4_quality.json"]
    r, calls, _ = _gpu_sh(tmp_path / "m3", "m3quality")
    m3 = _milestone_steps(monkeypatch, _monolith_calls(calls)[0], tmp_path / "r3")
    proto = ("positions", "context", "stride", "prompts", "agree_tokens", "free_running", "device")
    assert {k: m5["quality"][k] for k in proto} == {k: m3["quality"][k] for k in proto}  # M3's protocol
    assert {k: m5["quality"][k] for k in proto} == dict(positions=10_000, context=512, stride=512, prompts=100,
                                                        agree_tokens=64, free_running=True, device="cuda")
    h = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu.sh"), "--help"], capture_output=True, text=True)
    assert "[m3quality] [m5quality]" in h.stdout
