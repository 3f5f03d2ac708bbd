"""Byte model and time model for one decode step (NOTES.md, Facts: bytes and time model).

Bytes/token = every layer's weights + the LM head + one embedding row + the KV cache the step
attends over. Engines that read more (e.g. HF's static cache reads its whole capacity) still
report these *necessary* bytes, so effective bandwidth is comparable across engines: it is
useful bytes per second, not a DRAM counter.

Time model: t_token = L * (bytes_layer/BW + t_sync_layer) + bytes_head/BW + t_argmax.
BW is the streaming read of the GPU the prediction sits next to: `monolith bench`, `monolith m6` and
scripts/ring_sweep.py measure it at the start of their run (bench/bwprobe.py) and pass it in; this
module holds no bandwidth of its own, so no caller can fall back to another GPU's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from monolith.config import QWEN3_0_6B, ModelShape

BF16 = 2
BARRIER_US = 0.90              # measured grid barrier, 128-132 blocks (NOTES.md, Facts)


def layer_weight_count(shape: ModelShape = QWEN3_0_6B) -> int:
    """Weights of one decoder layer: 7 projections + 4 norm vectors."""
    n = 0
    for s in shape.layer_weight_shapes().values():
        c = 1
        for d in s:
            c *= d
        n += c
    return n


def layer_bytes(shape: ModelShape = QWEN3_0_6B, bytes_per_weight: float = BF16) -> int:
    return int(layer_weight_count(shape) * bytes_per_weight)


def head_bytes(shape: ModelShape = QWEN3_0_6B, bytes_per_weight: float = BF16) -> int:
    """LM head (tied embedding) + the final RMSNorm, read once per token."""
    return int(shape.vocab * shape.hidden * bytes_per_weight + shape.hidden * BF16)


def kv_bytes_per_position(shape: ModelShape = QWEN3_0_6B) -> int:
    """K and V, every layer, every KV head, bf16: 114,688 B for Qwen3-0.6B."""
    return shape.num_layers * 2 * shape.kv_dim * BF16


@dataclass(frozen=True)
class ByteModel:
    """Bytes one decode step reads. `position` = tokens in the KV cache after this step's write."""

    shape: ModelShape = QWEN3_0_6B
    layer_bytes: int = 0
    head_bytes: int = 0
    embed_row_bytes: int = 0
    kv_per_position: int = 0

    @classmethod
    def bf16(cls, shape: ModelShape = QWEN3_0_6B) -> ByteModel:
        return cls(shape, layer_bytes(shape), head_bytes(shape), shape.hidden * BF16, kv_bytes_per_position(shape))

    @classmethod
    def fp8(cls, shape: ModelShape = QWEN3_0_6B) -> ByteModel:
        """E4M3 codes + one fp32 scale per row (quant/fp8_layout.py, scheme fp8-e4m3-rowscale) for
        every projection and the tied LM head; norms stay bf16; the embedding row is its codes + scale."""
        rows = sum(s[0] for k, s in shape.layer_weight_shapes().items() if len(s) == 2)
        norms = sum(s[0] for s in shape.layer_weight_shapes().values() if len(s) == 1)
        layer = layer_weight_count(shape) - norms + 4 * rows + BF16 * norms
        head = shape.vocab * shape.hidden + 4 * shape.vocab + shape.hidden * BF16
        return cls(shape, layer, head, shape.hidden + 4, kv_bytes_per_position(shape))

    @classmethod
    def nvfp4(cls, shape: ModelShape = QWEN3_0_6B) -> ByteModel:
        """All-NVFP4 projections (quant/nvfp4_layout.py: half a byte per weight, one E4M3 block scale
        per 16 weights, 8 fp32 tensor-scale slots per layer), bf16 norms, the FP8 LM head and
        embedding row of the fp8 byte model."""
        w = layer_weight_count(shape)
        norms = sum(s[0] for s in shape.layer_weight_shapes().values() if len(s) == 1)
        proj = w - norms
        layer = proj // 2 + proj // 16 + 4 * 8 + BF16 * norms
        f8 = cls.fp8(shape)
        return cls(shape, layer, f8.head_bytes, f8.embed_row_bytes, kv_bytes_per_position(shape))

    @classmethod
    def for_weights(cls, weights: str, shape: ModelShape = QWEN3_0_6B) -> ByteModel:
        """The byte model of a weight format ("bf16", "fp8" or "nvfp4")."""
        if weights == "fp8":
            return cls.fp8(shape)
        if weights == "nvfp4":
            return cls.nvfp4(shape)
        if weights != "bf16":
            raise ValueError(f"no byte model for weight format {weights!r}")
        return cls.bf16(shape)

    @property
    def weight_bytes(self) -> int:
        return self.shape.num_layers * self.layer_bytes + self.head_bytes + self.embed_row_bytes

    def bytes_per_token(self, position: int) -> int:
        return self.weight_bytes + max(int(position), 0) * self.kv_per_position

    def mean_bytes(self, positions) -> float:
        positions = list(positions)
        return sum(self.bytes_per_token(p) for p in positions) / max(len(positions), 1)


def decode_positions(prompt_len: int, n_tokens: int) -> range:
    """Cache lengths seen by decode steps after a prompt: step i writes position prompt_len+i."""
    return range(prompt_len + 1, prompt_len + n_tokens + 1)


def predict_us(info: dict, position: float, bw_tbs: float, model: ByteModel | None = None) -> dict:
    """Time model for one token. `info` is the engine's info dict (or its "time_model" sub-dict); keys:
    bytes_layer, bytes_head, syncs_per_layer, sync_us (default 0.9 µs barrier), t_argmax_us,
    kv_per_position. Without a sync count the result is the bandwidth floor, labelled so."""
    if not (isinstance(bw_tbs, int | float) and math.isfinite(bw_tbs) and bw_tbs > 0):
        raise ValueError(f"predict_us: bandwidth {bw_tbs!r} TB/s is not a positive finite number")
    m = model or ByteModel.bf16()
    info = {**info, **(info.get("time_model") or {})}  # the megakernel nests its numbers
    bl = float(info.get("bytes_layer", m.layer_bytes))
    bh = float(info.get("bytes_head", m.head_bytes))
    kv = float(info.get("kv_per_position", m.kv_per_position)) * position / m.shape.num_layers
    bw = bw_tbs * 1e12 / 1e6  # bytes per µs
    syncs = info.get("syncs_per_layer")
    sync_us = float(info.get("sync_us", BARRIER_US))
    t_sync = float(syncs) * sync_us if syncs is not None else 0.0
    t_argmax = float(info.get("t_argmax_us", 0.0))
    L = m.shape.num_layers
    t = L * ((bl + kv) / bw + t_sync) + bh / bw + t_argmax
    return {
        "us": t,
        "floor_us": L * (bl + kv) / bw + bh / bw,
        "sync_us_total": L * t_sync,
        "bw_tbs": bw_tbs,
        "kind": "time model" if syncs is not None else "bandwidth floor (engine gave no sync count)",
    }
