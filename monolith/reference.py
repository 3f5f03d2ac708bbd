"""The reference decoder: plain PyTorch Qwen3, one token per step (the oracle).

It mirrors HF transformers' Qwen3 numerics op for op (RMSNorm in fp32 then cast back and
scaled by the weight, QK-norm before RoPE, cos/sin computed in fp32 and cast to the compute
dtype, softmax in fp32), so that with compute_dtype=bf16 it is "HF-like" and with
compute_dtype=float32 it is the correctness gate's oracle.

Static state for CUDA graphs: the KV cache [layers, 2, kv_heads, context_cap, head_dim] and
the position (`pos_t`, an int64 device scalar advanced in place) live on the device, and RoPE
rows are gathered with index_select. With graph_safe=True attention runs over the whole cache
with a position mask (fixed shapes: capturable via `step_tensor`); the default slices the
cache to the filled prefix, which is much cheaper on CPU but bakes the length into a graph.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from monolith.checkpoint import Checkpoint, load_checkpoint
from monolith.config import CONTEXT_CAP
from monolith.engine import Engine
from monolith.errors import MonolithError

_LAYER_KEYS = {
    "in_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight", "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight", "post_norm": "post_attention_layernorm.weight",
    "wg": "mlp.gate_proj.weight", "wu": "mlp.up_proj.weight", "wd": "mlp.down_proj.weight",
}


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # HF Qwen3RMSNorm: statistics in fp32, cast back to the input dtype, then times the weight.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rope_tables(theta: float, head_dim: int, cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [cap, head_dim] in fp32, rotate-half layout (frequencies repeated twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    freqs = torch.arange(cap, dtype=torch.float)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class ReferenceEngine(Engine):
    name = "reference"

    def __init__(self, ckpt: Checkpoint | str | Path, device="cpu", dtype=torch.bfloat16, compute_dtype=None,
                 context_cap: int = CONTEXT_CAP, graph_safe: bool = False):
        if not isinstance(ckpt, Checkpoint):
            ckpt = load_checkpoint(ckpt)
        self.ckpt, self.shape = ckpt, ckpt.shape
        self.device = torch.device(device)
        self.dtype = dtype
        self.compute_dtype = compute_dtype or dtype
        self.context_cap = int(context_cap)
        self.vocab_size = self.shape.vocab
        self.graph_safe = graph_safe
        cdt, dev, s = self.compute_dtype, self.device, self.shape
        # Weights rounded to `dtype` (bf16 = the checkpoint's own values), then held in the
        # compute dtype: fp32 compute upcasts once here rather than on every step.
        def w(name):
            return ckpt.tensors[name].to(dtype).to(dev, cdt)
        self.embed = w("model.embed_tokens.weight")
        self.final_norm = w("model.norm.weight")
        self.layers = [{k: w(f"model.layers.{i}.{v}") for k, v in _LAYER_KEYS.items()} for i in range(s.num_layers)]
        cos, sin = rope_tables(s.rope_theta, s.head_dim, self.context_cap)
        self.cos, self.sin = cos.to(dev, cdt), sin.to(dev, cdt)  # HF casts cos/sin to the activations' dtype
        self.kv = torch.zeros(s.num_layers, 2, s.num_kv_heads, self.context_cap, s.head_dim, dtype=cdt, device=dev)
        self.pos_t = torch.zeros((), dtype=torch.long, device=dev)
        self._slots = torch.arange(self.context_cap, device=dev)
        self.position = 0
        self.info = {"dtype": str(dtype), "compute_dtype": str(cdt), "context_cap": self.context_cap,
                     "graph_safe": graph_safe}

    # ---- one step ---------------------------------------------------------------------------
    def _forward(self, tok: torch.Tensor, capture: bool = False) -> tuple[torch.Tensor, dict | None]:
        """tok: int64 [1] on device. Writes K/V at pos_t, advances pos_t; host position untouched."""
        s, eps, cdt = self.shape, self.shape.rms_eps, self.compute_dtype
        cap = {} if capture else None
        pos = self.pos_t.view(1)
        n_rep = s.num_q_heads // s.num_kv_heads
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)  # [1, head_dim]
        if self.graph_safe:
            n = self.context_cap
            mask = torch.where(self._slots <= self.pos_t, 0.0, float("-inf")).to(torch.float32)
        else:
            n, mask = self.position + 1, None
        x = self.embed.index_select(0, tok)  # [1, hidden]
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["in_norm"], eps)
            q = rms_norm(F.linear(h, L["wq"]).view(s.num_q_heads, s.head_dim), L["q_norm"], eps)
            k = rms_norm(F.linear(h, L["wk"]).view(s.num_kv_heads, s.head_dim), L["k_norm"], eps)
            v = F.linear(h, L["wv"]).view(s.num_kv_heads, s.head_dim)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.kv[i, 0].index_copy_(1, pos, k.unsqueeze(1))
            self.kv[i, 1].index_copy_(1, pos, v.unsqueeze(1))
            K, V = self.kv[i, 0, :, :n], self.kv[i, 1, :, :n]  # [kv_heads, n, head_dim]
            # GQA: q head h reads kv head h // n_rep (HF repeat_kv order).
            scores = (q.view(s.num_kv_heads, n_rep, s.head_dim) @ K.transpose(-1, -2)) * s.head_dim ** -0.5
            if mask is not None:
                scores = scores + mask
            p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(cdt)
            a = (p @ V).reshape(1, s.q_dim)
            x = x + F.linear(a, L["wo"])
            if cap is not None:
                cap.update({f"L{i}.normed_in": h, f"L{i}.q": q, f"L{i}.k": k, f"L{i}.v": v,
                            f"L{i}.attn_out": a, f"L{i}.resid_attn": x})
            h = rms_norm(x, L["post_norm"], eps)
            m = F.silu(F.linear(h, L["wg"])) * F.linear(h, L["wu"])
            x = x + F.linear(m, L["wd"])
            if cap is not None:
                cap.update({f"L{i}.normed_post": h, f"L{i}.mlp_act": m, f"L{i}.resid_out": x})
        xf = rms_norm(x, self.final_norm, eps)
        logits = F.linear(xf, self.embed).float().view(-1)
        self.pos_t.add_(1)
        if cap is not None:
            cap.update(final_normed=xf, logits=logits)
            cap = {k: v.detach().float().reshape(v.shape if v.dim() == 2 and v.shape[0] > 1 else (-1,)).clone()
                   for k, v in cap.items()}
        return logits, cap

    @torch.inference_mode()
    def step(self, token: int, capture: bool = False) -> tuple[torch.Tensor, dict | None]:
        """Feed one token at the current position: fp32 logits [vocab] and, if capture, the
        intermediates named in notes/CONTRACTS.md (fp32)."""
        t = self.check_tokens([token]).to(self.device)
        self.check_room(1)
        out = self._forward(t, capture)
        self.position += 1
        return out

    def step_tensor(self, tok: torch.Tensor) -> torch.Tensor:
        """Device-only step for CUDA-graph capture: tok int64 [1] on device, returns fp32 logits.
        No checks and no host position update: the caller owns both (needs graph_safe=True)."""
        if not self.graph_safe:
            raise MonolithError("step_tensor needs ReferenceEngine(..., graph_safe=True)")
        return self._forward(tok)[0]

    # ---- Engine interface ---------------------------------------------------------------------
    def reset(self) -> None:
        self.kv.zero_()
        self.pos_t.zero_()
        self.position = 0

    # Engine's public methods check token ids and room, then call these with an int64 CPU tensor.
    @torch.inference_mode()
    def _prefill(self, tokens: torch.Tensor) -> int:
        t = tokens.to(self.device)
        for j in range(t.numel()):
            logits, _ = self._forward(t[j:j + 1])
            self.position += 1
        return int(torch.argmax(logits))

    @torch.inference_mode()
    def _decode(self, first_token: int, n: int) -> torch.Tensor:
        tok = torch.tensor([first_token], dtype=torch.long, device=self.device)
        out = torch.empty(n, dtype=torch.long, device=self.device)
        for j in range(n):  # no host sync: the argmax stays a device tensor
            logits, _ = self._forward(tok)
            self.position += 1
            out[j] = torch.argmax(logits)
            tok = out[j:j + 1]
        return out

    @torch.inference_mode()
    def _logits(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.to(self.device)
        out = torch.empty(t.numel(), self.shape.vocab, dtype=torch.float32, device=self.device)
        for j in range(t.numel()):
            out[j] = self._forward(t[j:j + 1])[0]
            self.position += 1
        return out

    @torch.inference_mode()
    def _teacher_forced(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.to(self.device)
        out = torch.empty(t.numel(), dtype=torch.long, device=self.device)
        for j in range(t.numel()):
            out[j] = torch.argmax(self._forward(t[j:j + 1])[0])
            self.position += 1
        return out

    def bytes_per_token(self, position: int) -> int:
        """Weights read once per step (every layer, final norm, the tied LM head = whole
        embedding, plus one embedding row) + K and V of the `position` cached positions
        (at the weights' element size: the kernels keep the cache in bf16)."""
        s = self.shape
        el = torch.empty((), dtype=self.dtype).element_size()
        layer = sum(int(torch.Size(v).numel()) for v in s.layer_weight_shapes().values())
        weights = s.num_layers * layer + s.hidden + s.vocab * s.hidden + s.hidden
        kv = s.num_layers * 2 * s.num_kv_heads * s.head_dim
        return el * (weights + int(position) * kv)
