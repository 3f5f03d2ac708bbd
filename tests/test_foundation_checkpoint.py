"""Checkpoint loader: round trip of a synthetic checkpoint and every validation error."""
import json

import pytest
import torch

from monolith.checkpoint import load_checkpoint, validate_config
from monolith.config import ModelShape
from monolith.errors import MonolithError
from monolith.synth import generate_tensors, hf_config


def test_round_trip(synth2, ckpt2):
    assert ckpt2.shape.num_layers == 2 and ckpt2.tokenizer_path is not None
    want = generate_tensors(ModelShape(num_layers=2), seed=1, progress=False)
    assert set(want) == set(ckpt2.tensors)
    for k, v in want.items():
        assert ckpt2.tensors[k].dtype == torch.bfloat16
        assert torch.equal(ckpt2.tensors[k], v), k
    d = ckpt2.describe()
    assert d["kind"] == "synthetic" and d["seed"] == 1 and d["recipe"] and len(d["sha256"]) == 64


def test_full_depth_required_by_default(synth2):
    with pytest.raises(MonolithError, match="num_hidden_layers expected 28, got 2"):
        load_checkpoint(synth2)


def test_synth_statistics(ckpt2):
    e = ckpt2.tensors["model.embed_tokens.weight"][:20000].float()
    assert 0.08 < e.std() < 0.12
    w = ckpt2.tensors["model.layers.0.mlp.up_proj.weight"].float()
    kurt = ((w - w.mean()) ** 4).mean() / w.var() ** 2
    assert kurt > 4  # heavy tails (a normal has 3)
    row_std = w.std(dim=1)
    assert row_std.max() / row_std.min() > 1.5  # per-row scale variation


# ---- fake checkpoints: a real header over a sparse data section (validation reads headers first)
def _spec(n_layers=1):
    return {k: ("BF16", list(s)) for k, s in ModelShape(num_layers=n_layers).weight_shapes().items()}


def _write(d, spec, cfg=None, cut=0):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg or hf_config(ModelShape(num_layers=1), seed=0)))
    header, off = {}, 0
    for k, (dt, shp) in spec.items():
        n = 2 if dt == "BF16" else 4
        for s in shp:
            n *= s
        header[k] = {"dtype": dt, "shape": shp, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(len(hb).to_bytes(8, "little") + hb)
        f.truncate(8 + len(hb) + off - cut)
    return header, 8 + len(hb)


def _load(d):
    return load_checkpoint(d, allow_reduced_depth=True)


def test_fake_valid_loads(tmp_path):
    _write(tmp_path, _spec())
    ck = _load(tmp_path)
    assert ck.tensors["model.norm.weight"].shape == (1024,)


def test_missing_tensor(tmp_path):
    spec = _spec()
    del spec["model.layers.0.self_attn.k_norm.weight"]
    _write(tmp_path, spec)
    with pytest.raises(MonolithError, match=r"missing tensor model\.layers\.0\.self_attn\.k_norm\.weight.*\[128\]"):
        _load(tmp_path)


def test_unexpected_tensor(tmp_path):
    _write(tmp_path, {**_spec(), "model.layers.0.self_attn.q_proj.bias": ("BF16", [2048])})
    with pytest.raises(MonolithError, match=r"unexpected tensor model\.layers\.0\.self_attn\.q_proj\.bias"):
        _load(tmp_path)


def test_wrong_shape(tmp_path):
    spec = _spec()
    spec["model.layers.0.mlp.down_proj.weight"] = ("BF16", [3072, 1024])
    _write(tmp_path, spec)
    with pytest.raises(MonolithError, match=r"down_proj\.weight: shape expected \[1024, 3072\], got \[3072, 1024\]"):
        _load(tmp_path)


def test_wrong_dtype(tmp_path):
    spec = _spec()
    spec["model.layers.0.self_attn.o_proj.weight"] = ("F32", [1024, 2048])
    _write(tmp_path, spec)
    with pytest.raises(MonolithError, match=r"o_proj\.weight: dtype expected bfloat16, got float32"):
        _load(tmp_path)


def test_truncated_file(tmp_path):
    _write(tmp_path, _spec(), cut=1)
    with pytest.raises(MonolithError, match="truncated or corrupt"):
        _load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(MonolithError, match="truncated or corrupt"):
        _load(tmp_path)


def test_missing_files(tmp_path):
    with pytest.raises(MonolithError, match="does not exist"):
        _load(tmp_path / "nope")
    with pytest.raises(MonolithError, match="config.json not found"):
        _load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(ModelShape(num_layers=1), 0)))
    with pytest.raises(MonolithError, match="model.safetensors not found"):
        _load(tmp_path)


def test_malformed_json(tmp_path):
    _write(tmp_path, _spec())
    (tmp_path / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"],')
    with pytest.raises(MonolithError, match="config.json is not valid JSON"):
        _load(tmp_path)


@pytest.mark.parametrize("key,value,msg", [
    ("architectures", ["LlamaForCausalLM"], "architectures expected"),
    ("model_type", "qwen2", "model_type expected 'qwen3', got 'qwen2'"),
    ("hidden_size", 2048, "hidden_size expected 1024, got 2048"),
    ("intermediate_size", 4096, "intermediate_size expected 3072"),
    ("num_attention_heads", 32, "num_attention_heads expected 16"),
    ("num_key_value_heads", 16, "num_key_value_heads expected 8"),
    ("head_dim", 64, "head_dim expected 128"),
    ("vocab_size", 151_669, "vocab_size expected 151936"),
    ("rms_norm_eps", 1e-5, "rms_norm_eps expected 1e-06"),
    ("rope_theta", 10_000.0, "rope_theta expected 1000000.0, got 10000.0"),
    ("tie_word_embeddings", False, "tie_word_embeddings expected True, got False"),
    ("max_position_embeddings", 32_768, "max_position_embeddings expected 40960"),
    ("num_hidden_layers", 29, "num_hidden_layers expected 28, got 29"),
    ("num_hidden_layers", "28", "num_hidden_layers expected 28, got '28'"),
    ("attention_bias", True, "attention_bias expected false"),
])
def test_bad_config_field(key, value, msg):
    cfg = hf_config(ModelShape(), 0)
    cfg[key] = value
    with pytest.raises(MonolithError, match=msg.replace("[", r"\[").replace("(", r"\(")):
        validate_config(cfg)


def test_missing_config_field():
    cfg = hf_config(ModelShape(), 0)
    del cfg["head_dim"]
    with pytest.raises(MonolithError, match="head_dim expected 128, got '<missing>'"):
        validate_config(cfg)


def test_rope_parameters_form_accepted():
    cfg = hf_config(ModelShape(), 0)
    del cfg["rope_theta"], cfg["rope_scaling"]
    cfg["rope_parameters"] = {"rope_theta": 1e6, "rope_type": "default"}
    assert validate_config(cfg).num_layers == 28


def test_lm_head_tied_accepted_untied_rejected(tmp_path):
    spec = _spec()
    spec["lm_head.weight"] = spec["model.embed_tokens.weight"]
    header, data0 = _write(tmp_path, spec)
    ck = _load(tmp_path)
    assert "lm_head.weight" not in ck.tensors  # equal to the embedding: dropped
    del ck
    with open(tmp_path / "model.safetensors", "r+b") as f:
        f.seek(data0 + header["lm_head.weight"]["data_offsets"][0] + 100)
        f.write(b"\x80\x3f")
    with pytest.raises(MonolithError, match="lm_head.weight differs from model.embed_tokens.weight"):
        _load(tmp_path)


def test_ensure_checkpoint_explicit_missing(tmp_path):
    from monolith.checkpoint import ensure_checkpoint
    with pytest.raises(MonolithError, match="not found"):
        ensure_checkpoint(tmp_path / "nope")
