"""A CPU model of the planned nvfp4 kernel arithmetic, in the kernel's operation order (issue 14).

It shares no code with the packer's dequantizer (quant/pack_nvfp4.py looks values up in a table):
- decode: a port of kernel/dequant.cuh's sm_90 bit trick `e2m1_pair_f16bits_trick` (magnitude
  bits -> f16 bits 9..11, sign -> bit 15), giving e2m1 * 2^-14 exactly as an f16, then f16 -> f32
  through torch's half type (exact); the kernel computes the same bits with `e2m1x8_f16bits_lop3`
  (tests/test_probe_e2m1_decode.py emulates it against the trick);
- one row: lane l takes the 16-byte words l, l + 32, ... of the row (a word = 32 weights = blocks
  2w and 2w + 1; nvfp4_layout's docstring); per block an fp32 accumulator runs fmaf over the
  block's two u32s in dot8_e2m1_biased's pair order (element k, then k + 4, for k = 0..3), then
  the lane adds it times the block scale (fmaf(a_b, e4m3(s_b), y)); an xor butterfly over lanes;
  finally one multiply by the tensor scale times 2^14 (exact: a power of two).
- `half2=True` is the kernel's default path (MONOLITH_NV_HALF2, kernel/dequant.cuh dot16B_h2; the
  probe probes/e2m1_decode.cu measured it as lop3_h2): the same biased f16 values, inputs lifted per
  32-element word (a lane's 16-byte word of codes) by 2^(14 - E), E the fp32 exponent field of the
  word's max |x| minus 127, clamped to +-100 (kernel/schedule_stream.cuh store_xh2), then rounded
  to f16; a half2 accumulator per block (low half: elements k, high half: elements k + 4, fused
  f16 FMAs), a_b = f32(lo) + f32(hi), then fmaf(a_b, s_b * 2^E, y) (the word's factor folded into
  the block scale, exact), the butterfly, and a multiply by g (the lift undid the bias).

fp32 FMA is emulated in float64 (product exact, one extra rounding possible in rare near-midpoint
cases); an f16 FMA likewise (float64, then rounded to f16 once). With one-hot activations every
step is exact in both paths, which the bit-for-bit test against the packer relies on.
"""
from __future__ import annotations

import torch

from monolith.quant import nvfp4_layout as L
from monolith.quant.fp8_kernel_model import _fmah, word_lift_f16


def e2m1_to_f16_bits(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes (any int dtype, 0..15) -> int32 f16 bits of e2m1 * 2^-14 (the sm_90 trick)."""
    c = codes.to(torch.int32)
    return ((c & 0x7) << 9) | ((c & 0x8) << 12)


def f16_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    b16 = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
    return b16.view(torch.float16).float()


WORD = 32          # weights per 16-byte word of codes: one lane's share of a row per load
LIFT_LOG2 = 14     # kernel/dequant.cuh kE2M1UnbiasLog2 on sm_90


def word_lift(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 [K, B] -> (the f16 inputs [K, B], the factor 2^E per word [K / 32, B]) of the half2
    path: E from the exponent field of each word's max |x| (as store_xh2 reads it), clamped; the
    inputs lifted by 2^(14 - E), the decode's bias (fp8's lift, quant/fp8_kernel_model.py, with it)."""
    return word_lift_f16(x, LIFT_LOG2)


def kernel_weight_values(codes: torch.Tensor) -> torch.Tensor:
    """fp32 value the fp32-path kernel feeds its FMA for each code (e2m1 * 2^-14)."""
    return f16_bits_to_f32(e2m1_to_f16_bits(codes))


def _fmaf(a, b, c):
    return (a.double() * b.double() + c.double()).float()


# Element order inside one u32 (8 weights) as dot8_e2m1_biased consumes them: (k, k + 4), k = 0..3.
PAIR_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def kernel_gemv(codes: torch.Tensor, bscales: torch.Tensor, g: float, x: torch.Tensor, lanes: int = 32,
                half2: bool = False) -> torch.Tensor:
    """y = W x for one packed nvfp4 matrix as the kernel computes it. codes uint8 [R, K/2] (packed
    nibbles), bscales uint8 [R, K/16], g the fp32 tensor scale, x fp32 [K] or [K, B]. Returns
    fp32 [R] or [R, B]."""
    R, half_k = codes.shape
    K = 2 * half_k
    if K % (32 * lanes):
        raise ValueError(f"K={K} is not a multiple of 32 weights x {lanes} lanes")
    single = x.dim() == 1
    X = x.float().reshape(K, -1)
    B = X.shape[1]
    nib = torch.stack([codes & 0xF, codes >> 4], dim=-1).reshape(R, K).long()     # element order
    s = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()[bscales.long()]  # [R, K/16]
    W = kernel_weight_values(nib)
    if half2:
        W = W.half()                                         # exact: the decode's f16 values
        Xh, fw = word_lift(X)
    y = torch.zeros(lanes, R, B, dtype=torch.float32)
    words = K // 32
    for w0 in range(0, words, lanes):                       # each lane's next 16-byte word
        base = (torch.arange(lanes) + w0) * 32               # first weight of each lane's word
        for blk in range(2):                                 # the word's two blocks
            if half2:
                lo = torch.zeros(lanes, R, B, dtype=torch.float16)
                hi = torch.zeros(lanes, R, B, dtype=torch.float16)
            else:
                a = torch.zeros(lanes, R, B, dtype=torch.float32)
            for u in range(2):                               # the block's two u32s
                for k in range(4):
                    ks = base + 16 * blk + 8 * u + k         # element k of the u32 (low half) ...
                    ks4 = ks + 4                             # ... and element k + 4 (high half)
                    if half2:
                        lo = _fmah(W[:, ks].T.unsqueeze(-1), Xh[ks].unsqueeze(1), lo)
                        hi = _fmah(W[:, ks4].T.unsqueeze(-1), Xh[ks4].unsqueeze(1), hi)
                    else:
                        a = _fmaf(W[:, ks].T.unsqueeze(-1), X[ks].unsqueeze(1), a)
                        a = _fmaf(W[:, ks4].T.unsqueeze(-1), X[ks4].unsqueeze(1), a)
            if half2:
                a = lo.float() + hi.float()
            sb = s[:, (base + 16 * blk) // L.BLOCK].T.unsqueeze(-1)          # [lanes, R, 1]
            if half2:
                sb = sb * fw[base // WORD].unsqueeze(1)                       # exact: times 2^E
            y = _fmaf(a, sb, y)
    off = lanes // 2
    while off:                                               # xor butterfly, lane 0's view
        idx = torch.arange(lanes) ^ off
        y = y + y[idx]
        off //= 2
    gt = torch.tensor(g, dtype=torch.float32) * (1.0 if half2 else L.KERNEL_UNBIAS)
    out = y[0] * gt
    return out.view(-1) if single else out


def shared_scalar(pre: torch.Tensor, got: torch.Tensor, approx: float, ulps: int = 8) -> list[float]:
    """The fp32 values s within +-ulps of `approx` for which fp32 `pre * s` equals `got` bit for bit
    in every element. For a factor the kernel computes on the GPU in a way the CPU cannot repeat
    bit for bit (the qkv rows' 1/rms: rsqrtf), but that is one scalar shared by every row: a wrong
    candidate misses most rows, so a hit pins the kernel's products without knowing its rsqrtf."""
    base = int(torch.tensor(approx, dtype=torch.float32).view(torch.int32))
    cands = torch.arange(base - ulps, base + ulps + 1, dtype=torch.int32).view(torch.float32)
    pre32 = pre.float()
    return [float(c) for c in cands if torch.equal(pre32 * c, got)]
