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

import errno
import hashlib
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
    from monolith import jsonio

    cfg_file = path / "config.json"
    if not cfg_file.exists() and not cfg_file.is_symlink():
        raise MonolithError(f"checkpoint {path}: config.json not found")
    return jsonio.load_object(cfg_file, f"checkpoint {path}: config.json", max_bytes=1 << 20)


def _rope_theta(cfg: dict):
    # transformers >= 5 writes rope_parameters.rope_theta; older exports a top-level rope_theta.
    if "rope_theta" in cfg:
        return cfg["rope_theta"]
    rp = cfg.get("rope_parameters") or {}
    return rp.get("rope_theta") if isinstance(rp, dict) else rp


def _rope_type(cfg: dict):
    """The RoPE scaling a config asks for: None or "default" mean none. `rope_scaling` may be
    null, a type name, or an object {"rope_type": ...} (older exports spell it "type");
    transformers >= 5 writes rope_parameters.rope_type. Anything else is returned as is, to be refused."""
    rs = cfg.get("rope_scaling")
    if rs is None or rs == "default":
        rp = cfg.get("rope_parameters")
        if rp is None:
            return rs
        if not isinstance(rp, dict):
            return rp
        return rp.get("rope_type", "default")
    if isinstance(rs, dict):
        extra = {k: v for k, v in rs.items() if k not in ("rope_type", "type", "rope_theta")}
        kind = rs.get("rope_type", rs.get("type", "default"))
        return kind if not extra or kind != "default" else rs
    return rs


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
    scaling = _rope_type(cfg)
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


def _readable_file(p: Path, what: str) -> int:
    """The size of a regular file we may read; one line naming why not (not found, a symbolic
    link loop, permission denied, a directory) rather than one catch-all."""
    from monolith.jsonio import read_bytes

    try:
        st = p.stat()
    except FileNotFoundError:
        raise MonolithError(f"{what} not found") from None
    except OSError:
        read_bytes(p, what, max_bytes=0)  # raises the precise reason (ELOOP, EACCES, ...)
        raise
    if not p.is_file():
        raise MonolithError(f"{what} is not a regular file")
    if not os.access(p, os.R_OK):
        raise MonolithError(f"{what}: permission denied")
    return st.st_size


def read_header(wfile: Path) -> dict:
    """The safetensors header of `wfile`, with its data extent checked against the file size
    (safetensors checks the header but not the data length: a truncated file would only fail, or
    read short, at load time)."""
    from monolith import jsonio

    size = _readable_file(wfile, f"checkpoint {wfile.parent}: {WEIGHTS_FILE}")
    bad = f"{wfile}: not a valid/complete safetensors file (truncated or corrupt?)"
    try:
        with open(wfile, "rb") as f:
            hlen = int.from_bytes(f.read(8), "little")
            if size < 8 or hlen <= 0 or 8 + hlen > size:
                raise MonolithError(f"{bad}: header length exceeds file size")
            header = jsonio.loads(f.read(hlen), "its header")
    except OSError as e:
        raise MonolithError(f"{wfile}: cannot be read ({e.strerror or e})") from None
    except MonolithError as e:
        raise MonolithError(str(e) if str(e).startswith(bad) else f"{bad}: {e}") from None
    if not isinstance(header, dict):
        raise MonolithError(f"{bad}: its header is not a JSON object")
    ends = []
    for k, v in header.items():
        if k == "__metadata__":
            continue
        offs = v.get("data_offsets") if isinstance(v, dict) else None
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise MonolithError(f"{bad}: tensor {k} has no valid data_offsets")
        ends.append(offs[1])
    end = max(ends, default=0)
    if 8 + hlen + end != size:
        raise MonolithError(f"{bad}: data section is {size - 8 - hlen} bytes, header describes {end}")
    return header


def _open_safetensors(wfile: Path, header: dict):
    from safetensors import safe_open

    try:
        return safe_open(str(wfile), framework="pt")
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
        if not isinstance(got, dict) or not isinstance(got.get("shape"), list):
            raise MonolithError(f"tensor {name}: its header entry has no shape")
        if tuple(got["shape"]) != tuple(exp):
            raise MonolithError(f"tensor {name}: shape expected {list(exp)}, got {got['shape']}")
        if got["dtype"] != _SAFETENSORS_DTYPE:
            raise MonolithError(f"tensor {name}: dtype expected bfloat16, got {_dtype_name(got['dtype'])}")


def check_finite(tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    """Every weight must be a finite number: a NaN or Inf would run silently through every
    engine and make the whole output garbage. One min/max pass per tensor (NaN propagates
    into both, +-Inf shows as one of them): ~0.5 s for the whole model on two cores.
    Returns each tensor's largest magnitude (for check_activation_bounds)."""
    out = {}
    for name, t in tensors.items():
        if t.numel() == 0 or not t.is_floating_point():
            continue
        lo, hi = torch.aminmax(t)
        if torch.isfinite(lo) and torch.isfinite(hi):
            out[name] = max(abs(float(lo)), abs(float(hi)))
            continue
        bad = ~torch.isfinite(t.reshape(-1))
        first = int(bad.nonzero()[0])
        idx = list(torch.unravel_index(torch.tensor(first), t.shape)) if t.dim() > 1 else [first]
        raise MonolithError(f"tensor {name} has {int(bad.sum())} non-finite values (NaN/Inf); the first is "
                            f"{float(t.reshape(-1)[first])} at index {[int(i) for i in idx]}: the checkpoint is corrupt")
    return out


# Activations are bf16 (or fp32, the same exponent range) in every engine. A stage whose
# worst-case magnitude reaches half of bf16's largest finite value may round or add to +-Inf;
# the factor 2 leaves room for one rounding up and one addition of two such terms.
ACTIVATION_LIMIT = float(torch.finfo(torch.bfloat16).max) / 2


def activation_bounds(maxabs: dict[str, float], shape: ModelShape) -> list[tuple[str, float, list[str]]]:
    """Worst-case magnitude of every activation of one decode step, from each tensor's largest
    |weight| alone, as (stage, bound, tensors it depends on), in forward order. The bounds hold
    for any input and position: an RMSNorm output element is at most sqrt(n) times its gain
    (the squares of n normalised elements sum to n); a dot product of k terms is at most k times
    the largest |weight| times the largest |input|; |silu(g) u| <= |g| |u|; attention output is
    a convex combination of values; the residual stream is the embedding plus every layer's two
    additions. The real checkpoints' bounds sit ~20 orders of magnitude below the limit, so
    only weights that cannot be computed in range are refused."""
    h, inter, q_dim, d = shape.hidden, shape.intermediate, shape.q_dim, shape.head_dim
    rt_h, rt_d = math.sqrt(h), math.sqrt(d)
    emb = "model.embed_tokens.weight"
    out: list[tuple[str, float, list[str]]] = []
    resid = maxabs[emb]
    out.append(("the embedding", resid, [emb]))
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        w = {k: maxabs[p + k] for k in shape.layer_weight_shapes()}
        n_in, n_post = p + "input_layernorm.weight", p + "post_attention_layernorm.weight"
        x = rt_h * w["input_layernorm.weight"]
        q = h * w["self_attn.q_proj.weight"] * x
        k = h * w["self_attn.k_proj.weight"] * x
        v = h * w["self_attn.v_proj.weight"] * x
        qn, kn = rt_d * w["self_attn.q_norm.weight"], rt_d * w["self_attn.k_norm.weight"]
        o = q_dim * w["self_attn.o_proj.weight"] * v
        out += [(f"layer {i}'s input norm", x, [n_in]),
                (f"layer {i}'s q projection", q, [n_in, p + "self_attn.q_proj.weight"]),
                (f"layer {i}'s k projection", k, [n_in, p + "self_attn.k_proj.weight"]),
                (f"layer {i}'s v projection", v, [n_in, p + "self_attn.v_proj.weight"]),
                (f"layer {i}'s attention scores", d * qn * kn / rt_d, [p + "self_attn.q_norm.weight",
                                                                        p + "self_attn.k_norm.weight"]),
                (f"layer {i}'s o projection", o, [n_in, p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight"])]
        resid += o
        out.append((f"layer {i}'s residual stream after attention", resid, [p + "self_attn.o_proj.weight"]))
        x2 = rt_h * w["post_attention_layernorm.weight"]
        g = h * w["mlp.gate_proj.weight"] * x2
        u = h * w["mlp.up_proj.weight"] * x2
        dn = inter * w["mlp.down_proj.weight"] * g * u
        out += [(f"layer {i}'s post-attention norm", x2, [n_post]),
                (f"layer {i}'s gate projection", g, [n_post, p + "mlp.gate_proj.weight"]),
                (f"layer {i}'s up projection", u, [n_post, p + "mlp.up_proj.weight"]),
                (f"layer {i}'s down projection", dn, [n_post, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                                                     p + "mlp.down_proj.weight"])]
        resid += dn
        out.append((f"layer {i}'s residual stream after the MLP", resid, [p + "mlp.down_proj.weight"]))
    fin = rt_h * maxabs["model.norm.weight"]
    out += [("the final norm", fin, ["model.norm.weight"]),
            ("the logits", h * maxabs[emb] * fin, ["model.norm.weight", emb])]
    return out


def check_activation_bounds(maxabs: dict[str, float], shape: ModelShape, where: str = "checkpoint") -> None:
    """Refuse weights that are finite but whose activations can leave bf16's range (a norm gain
    of 1e38 passes check_finite and turns every logit into NaN). Names the first stage that
    can overflow and, of the tensors it depends on, the one with the largest |weight|."""
    for stage, bound, names in activation_bounds(maxabs, shape):
        if not bound <= ACTIVATION_LIMIT:  # also catches NaN and inf
            worst = max(names, key=lambda n: maxabs[n] if math.isfinite(maxabs[n]) else math.inf)
            raise MonolithError(f"{where}: tensor {worst} (largest |weight| {maxabs[worst]:.3g}) lets {stage} reach "
                                f"{bound:.3g}, beyond bfloat16's range ({ACTIVATION_LIMIT * 2:.3g}): these weights "
                                "cannot produce finite activations")


def load_checkpoint(path, *, device="cpu", allow_reduced_depth: bool = False) -> Checkpoint:
    path = Path(path)
    if not path.is_dir():
        try:
            path.stat()
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise MonolithError(f"checkpoint directory {path}: a symbolic link loop") from None
            if isinstance(e, PermissionError):
                raise MonolithError(f"checkpoint directory {path}: permission denied") from None
            raise MonolithError(f"checkpoint directory {path} does not exist") from None
        raise MonolithError(f"checkpoint {path} is not a directory")
    cfg = _read_config(path)
    shape = validate_config(cfg, allow_reduced_depth=allow_reduced_depth)
    header = read_header(path / WEIGHTS_FILE)
    validate_tensors(header, shape)  # names first: a tensor cut out of the file is "missing", not a bad offset
    with _open_safetensors(path / WEIGHTS_FILE, header) as f:
        tensors = {k: f.get_tensor(k) for k in header if k != "__metadata__"}
    maxabs = check_finite(tensors)
    check_activation_bounds(maxabs, shape, where=f"checkpoint {path}")
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
        try:
            found = (p / "config.json").stat() is not None
        except FileNotFoundError:
            found = False
        except OSError:  # a symbolic link loop, permission denied: load_checkpoint names it
            found = True
        if not found:
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
