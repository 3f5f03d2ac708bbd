"""FP8 packed layout `rowmajor-v1`, scheme `fp8-e4m3-rowscale`: the contract between the CPU
packer (quant/pack_fp8.py) and the CUDA kernel. Every number the kernel needs is a constant
below; tests/test_quant_fp8.py checks them against the bf16 packer in monolith/megakernel.py
and against the packed bytes themselves.

Scheme `fp8-e4m3-rowscale`
--------------------------
- Element: E4M3 with torch.float8_e4m3fn semantics (bias 7, no infinities, 0x7F/0xFF = NaN,
  max finite 448, subnormals m * 2^-9). One byte per weight. The packer never writes a NaN code.
- One scale per output row, fp32, symmetric (no zero point):
      scale[r] = amax_r / 448   (amax_r = max |w[r, :]| of the bf16 weights, computed in fp32)
      code[r, k] = e4m3_rn(clamp(w[r, k] / scale[r], -448, 448))   (IEEE division, fp32;
                   round to nearest, ties to even; the clamp only matters at +-448 itself)
  An all-zero row gets scale 1.0 (codes all 0); a row whose amax / 448 would underflow below
  the smallest normal fp32 (amax < ~5.3e-36) gets scale = 2^-126, so nothing ever divides by 0.
- The dequantized weight, the number the kernel multiplies and the fp8 gate's oracle uses:
      w_dq[r, k] = float32(e4m3(code[r, k])) * scale[r]       (one fp32 multiply, RN)
- What the kernel computes for one row (the operation order the CPU model in
  quant/fp8_kernel_model.py reproduces):
      acc = 0 (fp32);  for each k: acc = fmaf(f32(f16(code[r, k])), x[k], acc)
      y[r] = acc * scale[r]
  e4m3 -> f16 is exact (`cvt.rn.f16x2.e4m3x2`), f16 -> f32 is exact, so only the fp32
  summation order and the final multiply differ from the oracle's w_dq @ x.
- Why fp32 scales: the kernel applies the scale once per row (1024-3072 weights), so its cost is
  nil, and fp32 keeps scale = amax / 448 exact to 24 bits, so no row ever saturates because its
  scale was rounded down. bf16 scales would save 2 bytes per row (24 KB of 15.7 MB per layer)
  and risk that; E4M3 scales cannot hold them at all (amax / 448 is ~1e-4..1e-3 on Qwen3-sized
  rows, below E4M3's subnormal range unless a second per-tensor scale is added).

Layout `rowmajor-v1` (one layout for both schedules; rows in the bf16 packer's order)
-----------------------------------------------------------------------------------
Per layer, one uint8 buffer of LAYER_BYTES = 15,728,640 bytes, layers back to back in
`layers.codes` [num_layers, LAYER_BYTES] (layer i starts at i * LAYER_BYTES):

    segment  rows   K (bytes/row)  byte offset   bytes       rows are
    qkv      4096   1024                   0    4,194,304   q 0..2047, k 2048..3071, v 3072..4095
    o        1024   2048           4,194,304    2,097,152   o_proj rows
    gateup   6144   1024           6,291,456    6,291,456   2r = gate row r, 2r+1 = up row r
    down     1024   3072          12,582,912    3,145,728   down_proj rows
    (end)                         15,728,640

Row r of a segment occupies bytes [off + r * K, off + (r + 1) * K); weight k of the row is byte
k (element order = the matrix's input index). Every K is a multiple of 1024, so every row starts
16-byte aligned (relative to the buffer; torch allocations are 256-byte aligned).

Per layer, LAYER_SCALES = 12,288 fp32 scales in `layers.scales` [num_layers, LAYER_SCALES], in
the same row order (the scale of segment row r is at scale offset + r):

    segment  scales  scale index   byte offset (x4)
    qkv      4096          0             0
    o        1024       4096        16,384
    gateup   6144       5120        20,480      (2r = gate r, 2r+1 = up r)
    down     1024      11264        45,056
    (end)              12288        49,152

Embedding / tied LM head: `embed.codes` uint8 [151936, 1024] row-major (token t's row at byte
t * 1024) and `embed.scales` fp32 [151936], same scheme. The lookup of token t dequantizes row t;
the LM head's logit t is row t's dot product times scale[t]. With `--head bf16` the packer keeps
the embedding as `embed.bf16` bf16 [151936, 1024] instead (the fallback NOTES.md, Facts names if fp8
argmax agreement fails); the per-matrix format map in the metadata says which.

Norm vectors (unquantized): `norms` bf16 [num_layers, NORM_LAYER_ELEMS] exactly like the bf16
packer's norm buffer ([input_ln 1024][post_ln 1024][q_norm 128][k_norm 128]), `final_norm`
bf16 [1024].

File: <out>/model.fp8.safetensors; its header's `__metadata__["monolith.pack"]` is JSON with
`format`, `scheme`, `layout`, `layout_version`, `element`, `scale_dtype`, `source.sha256`
(sha256 of the source model.safetensors), `config` (the source config.json), `num_layers`,
and `formats` (HF tensor name -> where and how it is stored). The loader refuses any other
scheme/layout/version and a source hash that differs from the --model given.
"""
from __future__ import annotations

from monolith import config as C

FORMAT = "monolith-packed-fp8"
SCHEME = "fp8-e4m3-rowscale"
LAYOUT = "rowmajor-v1"
LAYOUT_VERSION = 1
ELEMENT = "float8_e4m3fn"
SCALE_DTYPE = "float32"
E4M3_MAX = 448.0
MIN_SCALE = 2.0 ** -126          # smallest normal fp32: floor for a tiny row's scale
ZERO_ROW_SCALE = 1.0
FILE = "model.fp8.safetensors"
META_KEY = "monolith.pack"
ALIGN = 16                       # bytes: the kernel streams 16-byte vectors

# Safetensors tensor names.
T_LAYER_CODES = "layers.codes"
T_LAYER_SCALES = "layers.scales"
T_EMBED_CODES = "embed.codes"
T_EMBED_SCALES = "embed.scales"
T_EMBED_BF16 = "embed.bf16"
T_NORMS = "norms"
T_FINAL_NORM = "final_norm"

# Per-layer segments in stream order: name -> (rows, K). Bytes per weight = 1.
QKV_ROWS = C.Q_DIM + 2 * C.KV_DIM            # 4096
O_ROWS = C.HIDDEN                            # 1024
GATEUP_ROWS = 2 * C.INTERMEDIATE             # 6144
DOWN_ROWS = C.HIDDEN                         # 1024
SEGMENTS = {
    "qkv": (QKV_ROWS, C.HIDDEN),
    "o": (O_ROWS, C.Q_DIM),
    "gateup": (GATEUP_ROWS, C.HIDDEN),
    "down": (DOWN_ROWS, C.INTERMEDIATE),
}


def _offsets(unit_of) -> dict[str, int]:
    out, off = {}, 0
    for name, (rows, k) in SEGMENTS.items():
        out[name] = off
        off += unit_of(rows, k)
    out["end"] = off
    return out


BYTE_OFFSETS = _offsets(lambda rows, k: rows * k)       # codes: byte offset of each segment in a layer
SCALE_OFFSETS = _offsets(lambda rows, k: rows)          # scales: index of each segment's first scale
OFF_QKV, OFF_O, OFF_GATEUP, OFF_DOWN = (BYTE_OFFSETS[k] for k in ("qkv", "o", "gateup", "down"))
LAYER_BYTES = BYTE_OFFSETS["end"]                        # 15,728,640
SC_QKV, SC_O, SC_GATEUP, SC_DOWN = (SCALE_OFFSETS[k] for k in ("qkv", "o", "gateup", "down"))
LAYER_SCALES = SCALE_OFFSETS["end"]                      # 12,288

# Norms: same order as monolith/megakernel.py's bf16 norm buffer.
NORM_IN_LN, NORM_POST_LN = 0, C.HIDDEN
NORM_Q = 2 * C.HIDDEN
NORM_K = NORM_Q + C.HEAD_DIM
NORM_LAYER_ELEMS = NORM_K + C.HEAD_DIM                   # 2304
NORM_FIELDS = {"input_layernorm.weight": (NORM_IN_LN, C.HIDDEN),
               "post_attention_layernorm.weight": (NORM_POST_LN, C.HIDDEN),
               "self_attn.q_norm.weight": (NORM_Q, C.HEAD_DIM),
               "self_attn.k_norm.weight": (NORM_K, C.HEAD_DIM)}

# Where each HF projection lives: suffix -> (segment, first segment row, row step, rows, cols).
PROJECTIONS = {
    "self_attn.q_proj.weight": ("qkv", 0, 1, C.Q_DIM, C.HIDDEN),
    "self_attn.k_proj.weight": ("qkv", C.Q_DIM, 1, C.KV_DIM, C.HIDDEN),
    "self_attn.v_proj.weight": ("qkv", C.Q_DIM + C.KV_DIM, 1, C.KV_DIM, C.HIDDEN),
    "self_attn.o_proj.weight": ("o", 0, 1, C.HIDDEN, C.Q_DIM),
    "mlp.gate_proj.weight": ("gateup", 0, 2, C.INTERMEDIATE, C.HIDDEN),
    "mlp.up_proj.weight": ("gateup", 1, 2, C.INTERMEDIATE, C.HIDDEN),
    "mlp.down_proj.weight": ("down", 0, 1, C.HIDDEN, C.INTERMEDIATE),
}
MATRIX_TYPES = ("q", "k", "v", "o", "gate", "up", "down")

EMBED_BYTES = C.VOCAB * C.HIDDEN                         # 155,582,464
EMBED_SCALES = C.VOCAB


def bytes_per_token(num_layers: int = C.NUM_LAYERS, head: str = "fp8") -> int:
    """Weight bytes one decode step reads in this layout (codes + scales + norms + LM head +
    one embedding row), excluding the KV cache."""
    layers = num_layers * (LAYER_BYTES + 4 * LAYER_SCALES + 2 * NORM_LAYER_ELEMS) + 2 * C.HIDDEN
    if head == "fp8":
        return layers + EMBED_BYTES + 4 * EMBED_SCALES + C.HIDDEN + 4
    return layers + 2 * EMBED_BYTES + 2 * C.HIDDEN


def check_alignment() -> None:
    """Every row and every segment of codes, and every scale segment, 16-byte aligned."""
    for name, (_rows, k) in SEGMENTS.items():
        assert BYTE_OFFSETS[name] % ALIGN == 0 and k % ALIGN == 0, name
        assert (4 * SCALE_OFFSETS[name]) % ALIGN == 0, name
    assert LAYER_BYTES % ALIGN == 0 and (4 * LAYER_SCALES) % ALIGN == 0 and C.HIDDEN % ALIGN == 0


check_alignment()
