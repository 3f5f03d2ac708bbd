"""A CPU model of the fp8 kernel's arithmetic, in the kernel's operation order (issue 12, item 2).

It shares no code with the packer's dequantizer (quant/pack_fp8.py uses torch's float8 type):
- e4m3 -> f16 is a port of kernel/dequant.cuh's `e4m3_to_f16_bits_sw` (integer bit moves),
  then f16 -> f32 through torch's half type (exact);
- one row's dot product: `lanes` accumulators, each running fp32 FMAs over its 8-weight groups
  (group g belongs to lane g % lanes, like `dot8_e4m3` on 16-byte loads split across a warp),
  then an xor-butterfly reduction across lanes (like __shfl_xor_sync), and only then the row
  scale, once: y[r] = reduce(acc) * scale[r].

fp32 FMA is emulated in float64: the product of two fp32 numbers is exact in float64, so the
only deviation from a true fmaf is a double rounding (float64 sum, then fp32), which can differ
in the last bit in rare near-midpoint cases. With a one-hot activation every FMA is exact, which
is what the bit-for-bit test against the packer's dequantized values relies on.
"""
from __future__ import annotations

import torch


def e4m3_to_f16_bits(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes -> int32 f16 bit patterns (0..65535); NaN codes -> 0x7FFF with the sign."""
    b = codes.to(torch.int32)
    s = (b & 0x80) << 8
    e = (b >> 3) & 0xF
    m = b & 0x7
    normal = s | ((e + 8) << 10) | (m << 7)
    p = torch.where(m >= 4, 2, torch.where(m >= 2, 1, 0))
    sub = s | ((p + 6) << 10) | (((m << (3 - p)) & 0x7) << 7)
    out = torch.where(e == 0, torch.where(m == 0, s, sub), normal)
    return torch.where((e == 0xF) & (m == 0x7), s | 0x7FFF, out)


def f16_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    b16 = torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16)
    return b16.view(torch.float16).float()


def kernel_weight_values(codes: torch.Tensor) -> torch.Tensor:
    """fp32 value the kernel feeds its FMA for each code (e4m3 -> f16 -> f32, no scale)."""
    return f16_bits_to_f32(e4m3_to_f16_bits(codes))


def _fmaf(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a.double() * b.double() + c.double()).float()


def kernel_gemv(codes: torch.Tensor, scales: torch.Tensor, x: torch.Tensor, lanes: int = 32,
                group: int = 8) -> torch.Tensor:
    """y = W x for one packed matrix, as the kernel computes it. codes uint8 [R, K], scales fp32 [R],
    x fp32 [K] or [K, B] (a batch of activations, each computed independently). Returns fp32 [R]
    or [R, B]."""
    R, K = codes.shape
    if K % (group * lanes):
        raise ValueError(f"K={K} is not a multiple of group*lanes={group * lanes}")
    single = x.dim() == 1
    X = x.float().reshape(K, -1)
    W = kernel_weight_values(codes)                                   # [R, K]
    acc = torch.zeros(lanes, R, X.shape[1], dtype=torch.float32)      # one accumulator per lane
    groups = K // group
    for g0 in range(0, groups, lanes):                                # each lane's next group
        for j in range(group):                                        # dot8: sequential fmaf
            ks = torch.arange(g0, g0 + lanes) * group + j             # column read by each lane
            acc = _fmaf(W[:, ks].T.unsqueeze(-1), X[ks].unsqueeze(1), acc)
    off = lanes // 2
    while off:                                                        # xor butterfly, lane 0's view
        idx = torch.arange(lanes) ^ off
        acc = acc + acc[idx]
        off //= 2
    y = acc[0] * scales.float()[:, None]
    return y.view(-1) if single else y


# --- the half2 path (kernel/dequant.cuh hdot16_e4m3, MONOLITH_E4M3_HALF2) ----------------------
WORD = 32          # inputs per lifted word (kernel/schedule_stream.cuh store_xe)
X_EXP_CLAMP = 100  # kernel/schedule_stream.cuh kNvXExpClamp


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """fp32 2^e for integer e in the normal range, from its exponent bits (as the kernel builds it)."""
    return ((e.to(torch.int32) + 127) << 23).view(torch.float32)


def word_lift_f16(x: torch.Tensor, lift_log2: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x fp32 [K] or [K, B] -> (f16 inputs lifted per 32-element word so that the word's max |x|
    is in [2^lift_log2, 2^(lift_log2 + 1)), the factor 2^E per word [K / 32, B]). lift_log2 = 0 is
    fp8's store_xe; NVFP4's store_xh2 lifts by its decode's bias too (nvfp4_kernel_model.word_lift),
    and the fp8 test lifts further to show why the kernel does not."""
    X = x.float().reshape(x.shape[0], -1)
    K, B = X.shape
    m = X.abs().reshape(K // WORD, WORD, B).amax(1)
    e = (((m.contiguous().view(torch.int32) >> 23) & 0xFF) - 127).clamp(-X_EXP_CLAMP, X_EXP_CLAMP)
    lift = _pow2(lift_log2 - e).repeat_interleave(WORD, 0)
    return (X * lift).half(), _pow2(e)


def _fmah(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """An f16 FMA: exact product and sum in float64, one rounding to f16 (overflow -> inf)."""
    return (a.double() * b.double() + c.double()).half()


def hdot16(codes: torch.Tensor, xh: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """hdot16_e4m3 on rows of 16 codes: codes uint8 [R, 16], xh f16 [16, B] (lifted inputs), f fp32
    [B] (their word's factor) -> fp32 [R, B]. A half2 accumulator: the low half sums elements
    0, 2, .., 14 and the high half 1, 3, .., 15, each in that order (one f16 FMA per pair), then
    (f32(lo) + f32(hi)) * f."""
    W = kernel_weight_values(codes).half()            # exact: E4M3 values are f16 values
    R, B = codes.shape[0], xh.shape[1]
    lo = torch.zeros(R, B, dtype=torch.float16)
    hi = torch.zeros(R, B, dtype=torch.float16)
    for k in range(0, 16, 2):
        lo = _fmah(W[:, k].unsqueeze(-1), xh[k].unsqueeze(0), lo)
        hi = _fmah(W[:, k + 1].unsqueeze(-1), xh[k + 1].unsqueeze(0), hi)
    return (lo.float() + hi.float()) * f.float().unsqueeze(0)
