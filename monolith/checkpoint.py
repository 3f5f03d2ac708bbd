"""Load and validate a Hugging Face Qwen3-0.6B checkpoint directory (real or synthetic).

A directory holds config.json, model.safetensors and optionally tokenizer.json. Every
config field the decoders depend on and every tensor's name, shape and dtype is checked
before anything runs: a kernel fed a wrong shape would read garbage silently, so a
mismatch is a MonolithError that names the field/tensor with expected vs got.

lm_head.weight: Qwen3-0.6B ties the LM head to the embedding. Some exports still store
lm_head.weight; we accept it only if it is bitwise equal to model.embed_tokens.weight
(then drop it), and reject it otherwise, because every engine here reads the embedding
as the LM head and would silently compute a different model.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from monolith import REPO_ROOT
from monolith.config import QWEN3_0_6B, ModelShape
from monolith.errors import MonolithError

DEFAULT_CKPT = REPO_ROOT / "checkpoints" / "synth-seed0"
WEIGHTS_FILE = "model.safetensors"
DTYPE = torch.bfloat16
_SAFETENSORS_DTYPE = "BF16"

# config.json field -> expected value for Qwen3-0.6B (num_hidden_layers handled separately).
_EXPECTED_CONFIG = {
    "model_type": "qwen3",
    "hidden_size": QWEN3_0_6B.hidden,
    "intermediate_size": QWEN3_0_6B.intermediate,
    "num_attention_heads": QWEN3_0_6B.num_q_heads,
    "num_key_value_heads": QWEN3_0_6B.num_kv_heads,
    "head_dim": QWEN3_0_6B.head_dim,
    "vocab_size": QWEN3_0_6B.vocab,
    "rms_norm_eps": QWEN3_0_6B.rms_eps,
    "rope_theta": QWEN3_0_6B.rope_theta,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40_960,
    "hidden_act": "silu",
}


def default_checkpoint_dir() -> Path:
    env = os.environ.get("MONOLITH_CKPT")
    return Path(env) if env else DEFAULT_CKPT


@dataclass
class Checkpoint:
    path: Path
    shape: ModelShape
    config: dict
    tensors: dict[str, torch.Tensor]
    tokenizer_path: Path | None
    _sha256: str | None = field(default=None, repr=False)

    @property
    def synthetic(self) -> dict | None:
        return self.config.get("monolith_synthetic")

    def sha256(self) -> str:
        # Hashing 1.2 GB takes a second or two: done once, on demand.
        if self._sha256 is None:
            h = hashlib.sha256()
            with open(self.path / WEIGHTS_FILE, "rb") as f:
                while chunk := f.read(1 << 24):
                    h.update(chunk)
            self._sha256 = h.hexdigest()
        return self._sha256

    def describe(self) -> dict:
        """What every result records as "weights used"."""
        out = {"path": str(self.path), "num_layers": self.shape.num_layers, "sha256": self.sha256()}
        syn = self.synthetic
        if syn:
            out.update(kind="synthetic", seed=syn.get("seed"), recipe=syn.get("recipe"))
        else:
            out.update(kind="hf", name=self.config.get("_name_or_path") or self.path.name)
        return out


def _read_config(path: Path) -> dict:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise MonolithError(f"checkpoint {path}: config.json not found")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MonolithError(f"checkpoint {path}: config.json is not valid JSON ({e})") from e
    if not isinstance(cfg, dict):
        raise MonolithError(f"checkpoint {path}: config.json must be a JSON object, got {type(cfg).__name__}")
    return cfg


def _rope_theta(cfg: dict):
    # transformers >= 5 writes rope_parameters.rope_theta; older exports a top-level rope_theta.
    if "rope_theta" in cfg:
        return cfg["rope_theta"]
    rp = cfg.get("rope_parameters") or {}
    return rp.get("rope_theta")


def _matches(got, want) -> bool:
    # JSON has no int/float/bool distinction we can trust (true == 1 in Python): compare by kind.
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, float):
        return isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-9)
    return type(got) is type(want) and got == want


def validate_config(cfg: dict, *, allow_reduced_depth: bool = False) -> ModelShape:
    """Check every field that matters; returns the shape (num_layers may be < 28 if allowed)."""
    arch = cfg.get("architectures")
    if arch != ["Qwen3ForCausalLM"]:
        raise MonolithError(f"config.json: architectures expected ['Qwen3ForCausalLM'], got {arch!r}")
    for key, want in _EXPECTED_CONFIG.items():
        got = _rope_theta(cfg) if key == "rope_theta" else cfg.get(key, "<missing>")
        if not _matches(got, want):
            raise MonolithError(f"config.json: {key} expected {want!r}, got {got!r}")
    for key in ("attention_bias", "use_sliding_window"):
        if cfg.get(key, False):
            raise MonolithError(f"config.json: {key} expected false, got {cfg[key]!r}")
    scaling = cfg.get("rope_scaling") or (cfg.get("rope_parameters") or {}).get("rope_type", "default")
    if scaling not in (None, "default"):
        raise MonolithError(f"config.json: rope scaling expected none/default, got {scaling!r}")
    n = cfg.get("num_hidden_layers", "<missing>")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n > QWEN3_0_6B.num_layers:
        raise MonolithError(f"config.json: num_hidden_layers expected {QWEN3_0_6B.num_layers}, got {n!r}")
    if n != QWEN3_0_6B.num_layers and not allow_reduced_depth:
        raise MonolithError(
            f"config.json: num_hidden_layers expected {QWEN3_0_6B.num_layers}, got {n} "
            "(reduced depth is allowed only with allow_reduced_depth=True, for tests)")
    return ModelShape(num_layers=n)


def _open_safetensors(wfile: Path):
    from safetensors import safe_open
    if not wfile.is_file():
        raise MonolithError(f"checkpoint {wfile.parent}: {WEIGHTS_FILE} not found")
    # safetensors checks the header but not the data length; a truncated file would only
    # fail (or read short) at load time, so compare the header's extent with the file size.
    size = wfile.stat().st_size
    try:
        with open(wfile, "rb") as f:
            hlen = int.from_bytes(f.read(8), "little")
            if size < 8 or hlen <= 0 or 8 + hlen > size:
                raise ValueError("header length exceeds file size")
            header = json.loads(f.read(hlen))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + hlen + end != size:
            raise ValueError(f"data section is {size - 8 - hlen} bytes, header describes {end}")
        return safe_open(str(wfile), framework="pt"), header
    except Exception as e:  # noqa: BLE001  (any parse failure is the same user error)
        raise MonolithError(f"{wfile}: not a valid/complete safetensors file (truncated or corrupt?): {e}") from e


def _dtype_name(st_dtype: str) -> str:
    return {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F8_E4M3": "float8_e4m3fn"}.get(st_dtype, st_dtype)


def validate_tensors(header: dict, shape: ModelShape) -> None:
    """Names, shapes and dtypes from the safetensors header (before any data is read)."""
    want = shape.weight_shapes()
    have = {k: v for k, v in header.items() if k != "__metadata__"}
    missing = [k for k in want if k not in have]
    if missing:
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        raise MonolithError(f"missing tensor {missing[0]} (expected shape {list(want[missing[0]])}, bfloat16){more}")
    extra = [k for k in have if k not in want and k != "lm_head.weight"]
    if extra:
        raise MonolithError(f"unexpected tensor {extra[0]} (shape {have[extra[0]]['shape']}) in a Qwen3-0.6B checkpoint"
                            f" with {shape.num_layers} layers")
    if "lm_head.weight" in have:
        want = {**want, "lm_head.weight": want["model.embed_tokens.weight"]}
    for name, exp in want.items():
        got = have[name]
        if tuple(got["shape"]) != tuple(exp):
            raise MonolithError(f"tensor {name}: shape expected {list(exp)}, got {got['shape']}")
        if got["dtype"] != _SAFETENSORS_DTYPE:
            raise MonolithError(f"tensor {name}: dtype expected bfloat16, got {_dtype_name(got['dtype'])}")


def check_finite(tensors: dict[str, torch.Tensor]) -> None:
    """Every weight must be a finite number: a NaN or Inf would run silently through every
    engine and make the whole output garbage. One min/max pass per tensor (NaN propagates
    into both, +-Inf shows as one of them): ~0.5 s for the whole model on two cores."""
    for name, t in tensors.items():
        if t.numel() == 0 or not t.is_floating_point():
            continue
        lo, hi = torch.aminmax(t)
        if torch.isfinite(lo) and torch.isfinite(hi):
            continue
        bad = ~torch.isfinite(t.reshape(-1))
        first = int(bad.nonzero()[0])
        idx = list(torch.unravel_index(torch.tensor(first), t.shape)) if t.dim() > 1 else [first]
        raise MonolithError(f"tensor {name} has {int(bad.sum())} non-finite values (NaN/Inf); the first is "
                            f"{float(t.reshape(-1)[first])} at index {[int(i) for i in idx]}: the checkpoint is corrupt")


def load_checkpoint(path, *, device="cpu", allow_reduced_depth: bool = False) -> Checkpoint:
    path = Path(path)
    if not path.is_dir():
        raise MonolithError(f"checkpoint directory {path} does not exist")
    cfg = _read_config(path)
    shape = validate_config(cfg, allow_reduced_depth=allow_reduced_depth)
    handle, header = _open_safetensors(path / WEIGHTS_FILE)
    validate_tensors(header, shape)
    with handle as f:
        tensors = {k: f.get_tensor(k) for k in header if k != "__metadata__"}
    check_finite(tensors)
    head = tensors.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, tensors["model.embed_tokens.weight"]):
        raise MonolithError("tensor lm_head.weight differs from model.embed_tokens.weight: this checkpoint is not "
                            "tied (tie_word_embeddings), and monolith's engines use the embedding as the LM head")
    if str(device) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    tok = path / "tokenizer.json"
    return Checkpoint(path=path, shape=shape, config=cfg, tensors=tensors,
                      tokenizer_path=tok if tok.is_file() else None)


def ensure_checkpoint(path=None, *, progress: bool = True) -> Path:
    """An existing checkpoint dir; None -> the default dir, written (synthetic, seed 0) if absent.

    MONOLITH_CKPT, when set, replaces the default location (and is auto-written like it).
    """
    if path is not None:
        p = Path(path)
        if not (p / "config.json").is_file():
            raise MonolithError(f"checkpoint {p} not found (expected config.json + {WEIGHTS_FILE}); "
                                "omit --model to use the synthetic default, or run `monolith synth --out DIR`")
        return p
    p = default_checkpoint_dir()
    if (p / "config.json").is_file() and (p / WEIGHTS_FILE).is_file():
        return p
    from monolith.synth import write_synthetic
    if p.exists() and any(p.iterdir()):
        raise MonolithError(f"default checkpoint dir {p} exists but is incomplete; remove it to regenerate")
    if progress:
        import sys
        print(f"writing the synthetic checkpoint (seed 0) to {p} ...", file=sys.stderr)
    return write_synthetic(p, seed=0, num_layers=QWEN3_0_6B.num_layers, progress=progress)
