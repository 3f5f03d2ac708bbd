"""Hugging Face transformers baselines on the same checkpoint directory (offline, local only).

Three modes, the ones people actually use:
- hf-eager:   DynamicCache, plain forward per token.
- hf-static:  StaticCache (fixed shapes), plain forward per token.
- hf-compile: StaticCache + torch.compile(model.forward, mode="reduce-overhead") for the
              one-token decode step (prefill stays eager, as HF's own generate does).
              Whether compile worked and its warm-up time go into `info`.
- hf-parallel: DynamicCache like hf-eager, but `logits` and `teacher_forced` run ONE forward
              over the whole token list (HF's own prefill path) instead of one step per token.
              For quality work only (the sanity check of our reference against HF: 10,000
              positions at ~31 tok/s eager would take five minutes of GPU time); its decode
              is hf-eager's. Its numbers are HF's parallel path, not its decode path, and the
              results say so (`info.logits_path`).

Every mode drives the model one token per step with a device-side argmax feeding the next
step's input, so no host sync per token (the same loop as our own engines).
"""
from __future__ import annotations

import contextlib
import time

import torch

from monolith.bench.bytemodel import ByteModel
from monolith.engine import Engine
from monolith.errors import MonolithError

HF_CONTEXT_CAP = 2304  # the static caches' largest length: the sweep to 2048 + its windows
# hf-static sizes its cache the way HF's generate() does for a static cache (prompt + max_new_tokens):
# at the first call after a reset, that call's positions + STATIC_RESERVE (the protocol's decode
# length), rounded up to STATIC_ALIGN, at most the context cap. A timed run (prompt + 256) then
# holds ~320 slots instead of 2,304. hf-compile keeps one cache of HF_CONTEXT_CAP: its CUDA graphs
# hold the cache's addresses, so a new size would mean a new compile and capture.
STATIC_RESERVE = 256
STATIC_ALIGN = 64


class HFEngine(Engine):
    def __init__(self, ckpt_dir, mode: str = "eager", device="cpu", context_cap: int = HF_CONTEXT_CAP,
                 compile_warmup_steps: int = 3, compute_dtype: torch.dtype = torch.bfloat16,
                 deterministic: bool = False, fit_cache: bool | None = None):
        from transformers import Qwen3ForCausalLM

        if mode not in ("eager", "static", "compile", "parallel"):
            raise MonolithError(f"unknown HF mode {mode!r}")
        # static: sized per reset (STATIC_RESERVE above) unless fit_cache=False; compile: never
        self.fit_cache = mode == "static" if fit_cache is None else bool(fit_cache)
        if self.fit_cache and mode != "static":
            raise MonolithError(f"fit_cache is for mode 'static' only, not {mode!r}")
        self._cache_len = 0
        self.name = f"hf-{mode}" + {torch.bfloat16: "", torch.float32: "-fp32"}.get(compute_dtype, f"-{compute_dtype}")
        self.parallel = mode == "parallel"
        # torch's deterministic-algorithms switch, on around every forward of this engine only
        # (it is process-global). It tested one hypothesis for the static cache's run-to-run
        # differences (SDPA splitting the 2,304-slot key range): on the H200 the -det engines
        # stayed nondeterministic, so that is not (or not only) the cause. NOTES.md, M1.
        self.deterministic = deterministic
        if deterministic:
            self.name += "-det"
        self.mode = "eager" if self.parallel else mode
        self.device = torch.device(device)
        self.model = Qwen3ForCausalLM.from_pretrained(str(ckpt_dir), dtype=torch.bfloat16, local_files_only=True,
                                                      attn_implementation="sdpa").to(self.device).eval()
        if compute_dtype != torch.bfloat16:  # bf16 weight values, wider compute (like the gate's oracle)
            self.model = self.model.to(compute_dtype)
        self.shape_layers = self.model.config.num_hidden_layers
        self.vocab_size = self.model.config.vocab_size
        # static modes: the cache length; DynamicCache grows, so the model's own position limit
        self.context_cap = context_cap if self.mode != "eager" else self.model.config.max_position_embeddings
        self._bytes = ByteModel.bf16(_shape(self.shape_layers))
        self.position = 0
        self.info = {"mode": mode, "attn_implementation": "sdpa", "dtype": "bfloat16",
                     "compute_dtype": str(compute_dtype).removeprefix("torch."), "deterministic_algorithms": deterministic,
                     "logits_path": "one parallel forward per call" if self.parallel else "one decode step per token"}
        self.cache = None
        self._step_fn = self.model.forward
        if self.fit_cache:
            self.info["static_cache_len"] = (f"per reset: the first call's positions + {STATIC_RESERVE}, rounded up to "
                                             f"{STATIC_ALIGN}, at most {context_cap} (as generate() sizes a static cache)")
        elif self.mode != "eager":
            self.info["static_cache_len"] = context_cap
            self.info["attention_reads_positions"] = context_cap
        self.reset()
        if mode == "compile":
            self._compile(compile_warmup_steps)

    def _new_cache(self):
        from transformers import DynamicCache, StaticCache

        if self.mode == "eager":
            return DynamicCache(config=self.model.config)
        return StaticCache(config=self.model.config, max_cache_len=self.context_cap)

    def _compile(self, steps: int) -> None:
        t0 = time.perf_counter()
        errors = []
        before = compile_cache_counts()
        # fullgraph first (one graph, one cudagraph); with graph breaks if HF code needs them
        for fullgraph in (True, False):
            try:
                torch._dynamo.reset()
                self._step_fn = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=fullgraph)
                first = self.prefill([1, 2, 3])  # compile + cudagraph record happen on the first decode calls
                self.decode(first, steps)
                self._sync()
                self.info.update(compiled=True, fullgraph=fullgraph, compile_warmup_s=round(time.perf_counter() - t0, 2))
                break
            except Exception as e:  # noqa: BLE001  (record and fall back: the row says so)
                errors.append(f"fullgraph={fullgraph}: {type(e).__name__}: {str(e)[:300]}")
                self.reset()
        else:
            self._step_fn = self.model.forward
            self.info.update(compiled=False, compile_warmup_s=round(time.perf_counter() - t0, 2))
        if errors:
            self.info["compile_errors"] = errors
        # whether this compile found inductor's on-disk caches warm (bench/baselines/hf_warm.py warms
        # them in another process): hits and misses of this compile alone, and the cache's folder
        after = compile_cache_counts()
        self.info["compile_cache"] = {**{k: after[k] - before.get(k, 0) for k in after if k != "dir"},
                                      "dir": after.get("dir")}
        self.reset()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def reset(self) -> None:
        # inference_mode: the static buffers were created inside it (lazy init in prefill)
        if self.fit_cache:
            self.cache = None  # the first call after the reset allocates one of its size (_fit)
        elif self.cache is not None and self.mode != "eager":
            self.cache.reset()  # keep the static buffers: compiled graphs hold their addresses
        else:
            self.cache = self._new_cache()
        self.position = 0

    @torch.inference_mode()
    def _fit(self, n: int) -> None:
        """fit_cache: a static cache that holds `n` more positions. Allocated by the first call after
        a reset (a prefill: untimed); grown, with what it holds copied, only by a call past the
        reserve, which no run of the protocol makes (check_room has already bounded n by the cap)."""
        from transformers import StaticCache

        need = self.position + n
        if not self.fit_cache or (self.cache is not None and need <= self._cache_len):
            return
        length = min(self.context_cap, -(-(need + STATIC_RESERVE) // STATIC_ALIGN) * STATIC_ALIGN)
        new = StaticCache(config=self.model.config, max_cache_len=length)
        if self.cache is not None and self.position > 0:
            p = self.position
            for old_l, new_l in zip(self.cache.layers, new.layers, strict=True):
                new_l.lazy_initialization(old_l.keys[:, :, :0], old_l.values[:, :, :0])
                new_l.keys[:, :, :p].copy_(old_l.keys[:, :, :p])
                new_l.values[:, :, :p].copy_(old_l.values[:, :, :p])
                new_l.cumulative_length.fill_(p)
        self.cache, self._cache_len = new, length

    def _ids(self, tokens) -> torch.Tensor:
        return torch.as_tensor(tokens, dtype=torch.long).reshape(1, -1).to(self.device)

    def _forward(self, ids: torch.Tensor, step: bool) -> torch.Tensor:
        fn = self._step_fn if step else self.model.forward
        if step and self.mode == "compile":
            torch.compiler.cudagraph_mark_step_begin()
        with _deterministic(self.deterministic):
            out = fn(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1]

    # Engine's public methods check token ids and room, then call these with an int64 CPU tensor.
    @torch.inference_mode()
    def _prefill(self, tokens: torch.Tensor) -> int:
        ids = self._ids(tokens)
        self._fit(ids.numel())
        logits = self._forward(ids, step=False)  # one parallel forward: HF's own prefill path
        self.position += ids.numel()
        return int(torch.argmax(logits))

    @torch.inference_mode()
    def _decode(self, first_token: int, n: int) -> torch.Tensor:
        self._fit(n)
        out = torch.empty(n, dtype=torch.long, device=self.device)
        tok = self._ids([first_token])
        for j in range(n):
            out[j] = torch.argmax(self._forward(tok, step=True))
            tok = out[j:j + 1].view(1, 1)
        self.position += n
        return out

    @torch.inference_mode()
    def _parallel_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """All positions' logits from one forward (continuing the cache)."""
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=0)
        self.position += ids.numel()
        return out.logits[0]

    @torch.inference_mode()
    def _teacher_forced(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = self._ids(tokens)
        self._fit(ids.numel())
        if self.parallel:
            return torch.argmax(self._parallel_logits(ids), -1)
        out = torch.empty(ids.numel(), dtype=torch.long, device=self.device)
        for j in range(ids.numel()):
            out[j] = torch.argmax(self._forward(ids[:, j:j + 1], step=True))
        self.position += ids.numel()
        return out

    @torch.inference_mode()
    def _logits(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = self._ids(tokens)
        self._fit(ids.numel())
        if self.parallel:
            return self._parallel_logits(ids).float()
        out = torch.empty(ids.numel(), self.model.config.vocab_size, dtype=torch.float32, device=self.device)
        for j in range(ids.numel()):
            out[j] = self._forward(ids[:, j:j + 1], step=True).float()
        self.position += ids.numel()
        return out

    def bytes_per_token(self, position: int) -> int:
        # Necessary bytes (weights + KV up to position), not what a static cache actually
        # reads, so effective bandwidth compares engines on the same work.
        return self._bytes.bytes_per_token(position)


CACHE_COUNTERS = {"inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
                  "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass")}


def compile_cache_counts() -> dict:
    """torch's counts of FX-graph and AOT-autograd cache hits, misses and bypasses so far in this
    process, and inductor's cache folder (where the Triton kernels go too, unless TRITON_CACHE_DIR)."""
    from torch._dynamo.utils import counters

    out: dict = {k: int(counters[group][k]) for group, keys in CACHE_COUNTERS.items() for k in keys}
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        out["dir"] = cache_dir()
    except Exception as e:  # noqa: BLE001  (a torch without this helper: the counts still stand)
        out["dir"] = f"unknown ({type(e).__name__})"
    return out


@contextlib.contextmanager
def _deterministic(on: bool):
    """torch.use_deterministic_algorithms(True, warn_only=True) inside, the previous state after."""
    if not on:
        yield
        return
    prev = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])


def _shape(num_layers: int):
    from monolith.config import ModelShape

    return ModelShape(num_layers=num_layers)
