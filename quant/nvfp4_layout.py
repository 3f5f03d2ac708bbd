"""NVFP4 packed layout `nvfp4-rowmajor-v1`, scheme `nvfp4-e2m1-b16-e4m3`: the contract between
the CPU packer (quant/pack_nvfp4.py) and the CUDA kernel (issue 14). Every number the kernel
needs is a constant below; tests/test_quant_nvfp4.py parses the tables of this docstring and
checks them against the constants, the fp8 layout and the packed bytes.

Scheme `nvfp4-e2m1-b16-e4m3`
----------------------------
- Element: E2M1 (4 bits: sign, 2 exponent bits, 1 mantissa bit, bias 1, no inf/NaN). The 8
  magnitudes by code 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; code | 8 is the same magnitude negated
  (code 8 is -0). Every bit pattern is a finite value, so the packer cannot write a NaN.
- One block scale per 16 consecutive weights of a row (block b of a row = elements 16b..16b+15):
  E4M3 (torch.float8_e4m3fn semantics), always a positive code 0x00..0x7E.
- One fp32 tensor scale per HF matrix (q, k, v, o, gate, up, down of each layer), NVIDIA's
  recipe:  g = amax(|W|) / (6 * 448)   (fp32 division; an all-zero matrix gets g = 1.0).
- Block scale, max-based (NVIDIA's recipe):  s_max = e4m3_rn(clamp(amax_b / 6 / g, <= 448))
  (fp32: amax_b / 6, then / g; round to nearest even onto E4M3, positive, saturating at 448).
- MSE search (ours): the block scale actually stored is the E4M3 code among
      SEARCH_OFFSETS = (0, -1, 1, -2, 2, 3, 4, 5, 6)   (code steps from s_max's code, clamped to 0..0x7E)
  whose block reconstruction error sum((w - w_dq)^2) (over the 16 weights, with the codes that
  scale gives) is smallest. A candidate replaces the best so far only if it is smaller by a
  factor 1 + 2^-18 in the fp32 evaluation (which is within 20 * 2^-24 of exact), so s_max is kept
  on ties and the stored scale is never worse than max scaling in exact arithmetic.
  Why up to +6: offsets +3..+6 scale the block's largest weight to ~4..3 instead of 6, which moves
  the coarse upper grid (3, 4, 6) under the bulk of the block (NVIDIA's grid is 4/6 at the top);
  on synth-seed0 an exhaustive search over -6..+8 picks -2..+6 for all but ~3e-5 of the blocks.
- Element code:  d = fl32(s * g);  code = sign(w) | e2m1_rn(min(|w| / d, 6))   (IEEE division,
  round to nearest, ties to the even code, i.e. to mantissa bit 0; past 6 it saturates). A block
  whose scale code is 0 (every weight below ~2^-10 * 6 * g) is stored as all +0 codes.
- The dequantized weight, the number the kernel multiplies and the nvfp4 gate's oracle uses:
      w_dq = fl32( (e2m1(code) * e4m3(s)) * g )
  e2m1 * e4m3 has at most 6 significant bits, so the inner product is exact in fp32 and w_dq is
  rounded once.
- What the kernel computes for one row (the order the CPU model in quant/nvfp4_kernel_model.py
  reproduces; sm_90 has no e2m1 cvt, so the decode gives e2m1 * 2^-14 exactly, kernel/dequant.cuh):
      for each block b:  a_b = 0;  for each k in b: a_b = fmaf(f32(f16(e2m1(code_k) * 2^-14)), x[k], a_b)
                         y   = fmaf(a_b, f32(e4m3(s_b)), y)
      y[r] = reduce_over_lanes(y) * (g * 2^14)        (g * 2^14 exact: a power of two)
  With x one-hot this is fl32(e2m1 * s * g): bit for bit the packer's w_dq.

Layout `nvfp4-rowmajor-v1` (rows in the bf16 packer's / rowmajor-v1's order)
----------------------------------------------------------------------------
Per layer three buffers, layers back to back (layer i at i * the per-layer size):

`layers.codes` uint8 [num_layers, LAYER_CODE_BYTES]: two weights per byte, element 2j in the low
nibble of byte j and element 2j+1 in the high nibble (the standard NVFP4 order, as torchao packs):

    segment  rows   K     code bytes/row  byte offset   bytes       rows are
    qkv      4096   1024   512                    0    2,097,152   q 0..2047, k 2048..3071, v 3072..4095
    o        1024   2048   1024           2,097,152    1,048,576   o_proj rows
    gateup   6144   1024   512            3,145,728    3,145,728   2r = gate row r, 2r+1 = up row r
    down     1024   3072   1536           6,291,456    1,572,864   down_proj rows
    (end)                                 7,864,320

`layers.bscales` uint8 [num_layers, LAYER_BSCALE_BYTES]: the E4M3 block scales, same rows in the
same order, K / 16 bytes per row (byte b of a row = block b):

    segment  scale bytes/row  scale offset   bytes
    qkv      64                        0      262,144
    o        128                 262,144      131,072
    gateup   64                  393,216      393,216
    down     192                 786,432      196,608
    (end)                        983,040

`layers.tscales` fp32 [num_layers, 8]: the tensor scales g in TSCALE_ORDER (q, k, v, o, gate,
up, down) and one pad (1.0) so each layer's 32 bytes stay 16-byte aligned. A qkv row r takes
q's g if r < 2048, k's if r < 3072, else v's; a gateup row 2r takes gate's, 2r+1 up's.

Why this layout (and not each row's scales after its codes):
- Codes alone keep every row a power-of-two fraction of the ring's 16 KB slot: 32 rows of
  K = 1024 (qkv, gate/up, the LM-head-sized rows, down's 1024-column segments), 128 O rows of a
  KV group's 256 columns (128 bytes each). Inline scales would make a K = 1024 row 576 bytes
  (28.4 rows per slot) and change every phase's rows-per-slot arithmetic or the slot size.
- Every row's codes (K/2 = 512 / 1024 / 1536 bytes; 128 for an O group slice) and every row's
  scales (K/16 = 64 / 128 / 192 bytes; 16 for an O group slice) start 16-byte aligned, and the
  rows of a slot have contiguous scales (32 rows x 64 B = 2 KB), so the producer can copy a slot's
  scales with one bulk copy beside its codes, or the consumers can read them from L2.
- One lane's 16-byte load of codes is 32 consecutive weights = two whole blocks (2l, 2l+1 of a
  K = 1024 row for lane l), so it needs exactly the two adjacent scale bytes 2l, 2l+1: one aligned
  u16 load and one `cvt.rn.f16x2.e4m3x2` give both (exact in f16). A warp reads a K = 1024 row's
  512 code bytes and 64 scale bytes in one instruction each, conflict-free.
- The nibble order is the standard one; the sm_90 decode pairs elements (k, k+4) of a u32 (one
  shift serves both halves of a half2, kernel/dequant.cuh), which only permutes the activations a
  lane holds in registers, so no reordering of the stored codes is needed.
- The tensor scale is applied once per row (like fp8's row scale): no per-weight cost, 32 bytes per layer.

Embedding / tied LM head: FP8 exactly as quant/fp8_layout.py's rowmajor-v1 (`embed.codes` uint8
[151936, 1024], `embed.scales` fp32 [151936], scheme fp8-e4m3-rowscale): issue 14 keeps the LM head
in FP8. Norm vectors (unquantized): `norms` bf16 [num_layers, 2304] and `final_norm` bf16 [1024],
the fp8 layout's.

File: <out>/model.nvfp4.safetensors; its header's `__metadata__["monolith.pack"]` is JSON with
`format`, `scheme`, `layout`, `layout_version`, `element`, `block`, `block_scale_dtype`,
`tensor_scale_dtype`, `search` (the search space and rule), `source.sha256` (of the source
model.safetensors), `config`, `num_layers`, and `formats` (HF tensor name -> its format and where it
is stored: per-matrix, so a mixed map can keep some matrices FP8, below). The loader refuses any
other format/scheme/layout/version and a source hash that differs from the --model given.

Mixed files: layout_version 2 (some projections FP8; issue 14 item 2)
---------------------------------------------------------------------
Written only when a map keeps projections in FP8 (`monolith pack --format nvfp4 --map FILE.json`,
the map quant/sensitivity.py proposes, or `--fp8-kinds q,k`). An all-NVFP4 pack is still written
and read as layout_version 1, byte for byte as before. Version 2 is version 1 plus one section, so
a reader that knows only version 1 refuses a mixed file instead of misreading it.
- `layers.codes`, `layers.bscales`, `layers.tscales`, `embed.*`, `norms`, `final_norm`: version 1's
  tensors at version 1's offsets. The rows of an FP8 matrix in them are zero (codes 0, block-scale
  code 0: +0 weights) and its tensor-scale slot holds 0.0 (version 1 never writes 0.0 there: an
  all-zero matrix gets 1.0).
- `layers.fp8.codes` uint8 [num_layers, 15728640] and `layers.fp8.scales` fp32 [num_layers, 12288]:
  per layer the fp8 layout rowmajor-v1 of quant/fp8_layout.py (its segments, offsets, row order,
  gate/up interleave and scheme fp8-e4m3-rowscale with one fp32 scale per row). An FP8 matrix's
  rows hold exactly the codes and scales `monolith pack --format fp8` writes for it; the rows of
  every NVFP4 matrix there are zero codes with scale 0.0 (rowmajor-v1 never writes a 0.0 scale).
- So each matrix has one home, at its own format's offsets, and the other buffer's rows of it are
  zero: a kernel that streams the wrong buffer for a matrix computes 0 and fails its gate. A mixed
  gate/up pair (one FP8, one NVFP4) keeps the interleave: gate r is row 2r and up r row 2r + 1 of
  the gateup segment in both sections, each format's rows in its own section.
- Metadata: layout_version 2; `formats` gives each matrix's format and place (an FP8 matrix's entry
  has fp8_layout's keys: tensor `layers.fp8.codes`, byte_offset, row_stride_bytes, scale_tensor
  `layers.fp8.scales`, scale_offset, scale_stride); `mixed` = {"fp8": the FP8 projections' HF names,
  sorted; "fp8_kinds": the kinds (q, k, v, o, gate, up, down) FP8 in every layer; "per_kind": true
  when every layer has the same FP8 kinds (a kernel may build its variant for one kind set and
  refuse other maps); "fp8_layout", "fp8_scheme"; "map": where the map came from (the sensitivity
  JSON's path, sha256, rule and units, or the --fp8-kinds list)}. The loader refuses a map naming a
  matrix that does not exist or a norm, the LM head in any format but FP8, an unknown format, and
  zero markers that disagree with the map.
- Bytes per token (`bytes_per_token(num_layers, fp8=names)`): an FP8 matrix of R x K rows costs
  R * K + 4 * R bytes instead of R * K / 2 + R * K / 16. The file is larger than what a token reads:
  the fp8 section holds every layer's 15.7 MB, zero outside the FP8 matrices.
"""
from __future__ import annotations

from monolith import config as C
from monolith.quant import fp8_layout as F8

FORMAT = "monolith-packed-nvfp4"
SCHEME = "nvfp4-e2m1-b16-e4m3"
LAYOUT = "nvfp4-rowmajor-v1"
LAYOUT_VERSION = 1
ELEMENT = "float4_e2m1"
BLOCK = 16                       # weights per block scale
BLOCK_SCALE_DTYPE = "float8_e4m3fn"
TENSOR_SCALE_DTYPE = "float32"
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)   # code 0..7; code | 8 negates
ZERO_TENSOR_SCALE = 1.0
MAX_SCALE_CODE = 0x7E            # 448: the largest finite E4M3 code
SEARCH_OFFSETS = (0, -1, 1, -2, 2, 3, 4, 5, 6)  # E4M3 code steps from the max-based scale, in tie order
FILE = "model.nvfp4.safetensors"
META_KEY = "monolith.pack"
ALIGN = 16
# The sm_90 bit-trick decode gives e2m1 * 2^-14 (kernel/dequant.cuh, kE2M1F16Bias).
KERNEL_UNBIAS = 2.0 ** 14

# Safetensors tensor names (the embedding and norms reuse the fp8 layout's names).
T_LAYER_CODES = "layers.codes"
T_LAYER_BSCALES = "layers.bscales"
T_LAYER_TSCALES = "layers.tscales"
T_EMBED_CODES = F8.T_EMBED_CODES
T_EMBED_SCALES = F8.T_EMBED_SCALES
T_NORMS = F8.T_NORMS
T_FINAL_NORM = F8.T_FINAL_NORM
# layout_version 2 (mixed files): the FP8 projections' section, fp8 rowmajor-v1 per layer
LAYOUT_VERSION_MIXED = 2
T_FP8_CODES = "layers.fp8.codes"
T_FP8_SCALES = "layers.fp8.scales"
ABSENT_SCALE = 0.0               # tensor scale / fp8 row scale of a matrix stored in the other section

SEGMENTS = F8.SEGMENTS           # name -> (rows, K): the same rows as rowmajor-v1
QKV_ROWS, O_ROWS, GATEUP_ROWS, DOWN_ROWS = F8.QKV_ROWS, F8.O_ROWS, F8.GATEUP_ROWS, F8.DOWN_ROWS
PROJECTIONS = F8.PROJECTIONS     # HF suffix -> (segment, first row, row step, rows, cols)
NORM_LAYER_ELEMS = F8.NORM_LAYER_ELEMS
NORM_FIELDS = F8.NORM_FIELDS

TSCALE_ORDER = ("q", "k", "v", "o", "gate", "up", "down")
TSCALE_SLOTS = 8                 # 7 tensor scales + 1 pad: 32 bytes per layer
SUFFIX_OF = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
             "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
             "down": "mlp.down_proj.weight"}
TSCALE_INDEX = {SUFFIX_OF[t]: i for i, t in enumerate(TSCALE_ORDER)}


CODE_ROW_BYTES = {name: k // 2 for name, (_r, k) in SEGMENTS.items()}
BSCALE_ROW_BYTES = {name: k // BLOCK for name, (_r, k) in SEGMENTS.items()}
# each segment's first byte (and "end"), by rowmajor-v1's offset rule over the same SEGMENTS
CODE_OFFSETS = F8._offsets(lambda rows, k: rows * k // 2)
BSCALE_OFFSETS = F8._offsets(lambda rows, k: rows * k // BLOCK)
LAYER_CODE_BYTES = CODE_OFFSETS["end"]          # 7,864,320
LAYER_BSCALE_BYTES = BSCALE_OFFSETS["end"]      # 983,040

EMBED_BYTES = F8.EMBED_BYTES
EMBED_SCALES = F8.EMBED_SCALES


def bytes_per_token(num_layers: int = C.NUM_LAYERS, fp8=()) -> int:
    """Weight bytes one decode step reads in this layout (codes + block scales + tensor scales +
    norms + the FP8 LM head + one FP8 embedding row with its scale), excluding the KV cache.
    `fp8`: HF names of projections kept FP8 (layout_version 2): each reads its fp8 rows and row
    scales instead of its nvfp4 codes and block scales."""
    layers = num_layers * (LAYER_CODE_BYTES + LAYER_BSCALE_BYTES + 4 * TSCALE_SLOTS + 2 * NORM_LAYER_ELEMS)
    for name in fp8:
        _seg, _row0, _step, rows, cols = PROJECTIONS[name.split(".", 3)[3]]
        layers += rows * cols + 4 * rows - (rows * cols // 2 + rows * cols // BLOCK)
    return layers + 2 * C.HIDDEN + EMBED_BYTES + 4 * EMBED_SCALES + C.HIDDEN + 4


def check_alignment() -> None:
    """Every segment and every row of codes and of block scales starts 16-byte aligned, and so
    does every O row's slice of one KV group's 256 columns (the streaming schedule's O unit)."""
    for name in SEGMENTS:
        assert CODE_OFFSETS[name] % ALIGN == 0 and CODE_ROW_BYTES[name] % ALIGN == 0, name
        assert BSCALE_OFFSETS[name] % ALIGN == 0 and BSCALE_ROW_BYTES[name] % ALIGN == 0, name
    group_cols = C.HEAD_DIM * (C.NUM_Q_HEADS // C.NUM_KV_HEADS)
    assert (group_cols // 2) % ALIGN == 0 and (group_cols // BLOCK) % ALIGN == 0
    assert LAYER_CODE_BYTES % ALIGN == 0 and LAYER_BSCALE_BYTES % ALIGN == 0 and (4 * TSCALE_SLOTS) % ALIGN == 0
    assert (32 * 16) == C.HIDDEN // 2, "one warp's 16-byte loads cover one K = 1024 row's codes"


check_alignment()
