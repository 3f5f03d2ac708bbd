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
