"""Qwen3-0.6B shapes and the project's fixed limits, mirrored from kernel/config.cuh.

kernel/config.cuh is the single source for the CUDA side; tests/test_kernel_host.py parses it
and asserts every constant here matches, so the two cannot drift apart.
"""
from dataclasses import dataclass

HIDDEN = 1024
INTERMEDIATE = 3072
NUM_LAYERS = 28
NUM_Q_HEADS = 16
NUM_KV_HEADS = 8
HEAD_DIM = 128
VOCAB = 151_936
RMS_EPS = 1e-6
ROPE_THETA = 1_000_000.0
MAX_POSITION = 40_960          # the model's own limit (config.json max_position_embeddings)
CONTEXT_CAP = 4096             # monolith's KV-cache capacity (positions): >= 2048 (NOTES.md, facts)

Q_DIM = NUM_Q_HEADS * HEAD_DIM     # 2048
KV_DIM = NUM_KV_HEADS * HEAD_DIM   # 1024


@dataclass(frozen=True)
class ModelShape:
    """Shapes a checkpoint must have. `num_layers` may be reduced for tests only."""

    hidden: int = HIDDEN
    intermediate: int = INTERMEDIATE
    num_layers: int = NUM_LAYERS
    num_q_heads: int = NUM_Q_HEADS
    num_kv_heads: int = NUM_KV_HEADS
    head_dim: int = HEAD_DIM
    vocab: int = VOCAB
    rms_eps: float = RMS_EPS
    rope_theta: float = ROPE_THETA

    @property
    def q_dim(self) -> int:
        return self.num_q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """HF tensor-name suffix (after `model.layers.{i}.`) -> shape."""
        h, i, q, kv, d = self.hidden, self.intermediate, self.q_dim, self.kv_dim, self.head_dim
        return {
            "input_layernorm.weight": (h,),
            "self_attn.q_proj.weight": (q, h),
            "self_attn.k_proj.weight": (kv, h),
            "self_attn.v_proj.weight": (kv, h),
            "self_attn.o_proj.weight": (h, q),
            "self_attn.q_norm.weight": (d,),
            "self_attn.k_norm.weight": (d,),
            "post_attention_layernorm.weight": (h,),
            "mlp.gate_proj.weight": (i, h),
            "mlp.up_proj.weight": (i, h),
            "mlp.down_proj.weight": (h, i),
        }

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of a tied-embedding Qwen3 checkpoint, by full HF name."""
        out = {"model.embed_tokens.weight": (self.vocab, self.hidden), "model.norm.weight": (self.hidden,)}
        for layer in range(self.num_layers):
            for k, s in self.layer_weight_shapes().items():
                out[f"model.layers.{layer}.{k}"] = s
        return out


QWEN3_0_6B = ModelShape()
