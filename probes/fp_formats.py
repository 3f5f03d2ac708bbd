"""CPU reference decoders for the two weight formats monolith dequantizes in registers.

They are written from the format definitions (OCP MX spec, FP8 E4M3 "fn" variant and FP4 E2M1),
not from any GPU code, so that the CUDA probe (probes/cvt.cu) and the Python tests check the
device decode against an independent oracle. cvt.cu has its own C++ copy of the same rules; the
tests compare both against these tables.

E4M3 (fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 (0x7F, 0xFF)
is NaN; max normal 448 (0x7E); subnormals m * 2^-9.
E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit. No NaN/inf; magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6.

The f16 helpers give the exact IEEE half bit patterns the device must produce: every E4M3 and
E2M1 value is exactly representable in f16 (E4M3's smallest subnormal 2^-9 and E2M1 * 2^-14 are
both >= the f16 subnormal step 2^-24), so the device check can be bit-exact.
"""
from __future__ import annotations

import math
import struct

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# The sm_90 e2m1 decode (kernel/dequant.cuh) moves the code's bits straight into an f16's low
# exponent/mantissa bits, which yields value * 2^-14 exactly; the kernel folds 2^14 into the scale.
E2M1_F16_BIAS_LOG2 = 14


def e4m3_to_float(byte: int) -> float:
    """Decode one E4M3 (fn) byte. NaN for 0x7F and 0xFF."""
    if not 0 <= byte <= 0xFF:
        raise ValueError(f"e4m3 byte out of range: {byte}")
    sign = -1.0 if byte & 0x80 else 1.0
    exp = (byte >> 3) & 0xF
    man = byte & 0x7
    if exp == 0xF and man == 0x7:
        return math.nan
    if exp == 0:
        return sign * man * 2.0 ** -9          # subnormal: 0.mmm * 2^(1-7)
    return sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)


def e2m1_to_float(code: int) -> float:
    """Decode one E2M1 nibble (sign in bit 3)."""
    if not 0 <= code <= 0xF:
        raise ValueError(f"e2m1 code out of range: {code}")
    sign = -1.0 if code & 0x8 else 1.0
    return sign * E2M1_MAGNITUDES[code & 0x7]


E4M3_TABLE = tuple(e4m3_to_float(b) for b in range(256))
E2M1_TABLE = tuple(e2m1_to_float(c) for c in range(16))


def float_to_f16_bits(x: float) -> int:
    """Exact IEEE binary16 bits of x; raises if x is not exactly representable (never rounds).

    NaN maps to 0x7FFF (the canonical NaN PTX documents for f16 results), keeping the sign bit
    of the input NaN is not something the reference promises: the probe records what it sees.
    """
    if math.isnan(x):
        return 0x7FFF
    bits = struct.unpack("<H", struct.pack("<e", x))[0]
    back = struct.unpack("<e", struct.pack("<H", bits))[0]
    if back != x or (x == 0.0 and math.copysign(1.0, x) != math.copysign(1.0, back)):
        raise ValueError(f"{x!r} is not exactly representable in f16")
    return bits


def f16_bits_to_float(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def e4m3_to_f16_bits(byte: int) -> int:
    return float_to_f16_bits(e4m3_to_float(byte))


def e2m1_to_f16_bits_biased(code: int) -> int:
    """f16 bits of e2m1(code) * 2^-14: what the sm_90 bit-trick decode must produce."""
    return float_to_f16_bits(e2m1_to_float(code) * 2.0 ** -E2M1_F16_BIAS_LOG2)


def decode_e2m1_word(word: int) -> list[tuple[float, float]]:
    """The 4 (lo, hi) pairs kernel/dequant.cuh's e2m1x8 decode returns for a packed u32.

    Storage is the standard NVFP4 order (element j in nibble j, low nibble first); the decode
    pairs element k with element k+4 (pair k), because those nibbles are 16 bits apart, like the
    two halves of a half2, so one shift serves both halves.
    """
    codes = [(word >> (4 * j)) & 0xF for j in range(8)]
    return [(e2m1_to_float(codes[k]), e2m1_to_float(codes[k + 4])) for k in range(4)]


def cross_check_torch() -> dict:
    """Compare E4M3_TABLE with torch.float8_e4m3fn when torch has it; returns a small report."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency, but stay usable without
        return {"available": False, "reason": "torch not importable"}
    if not hasattr(torch, "float8_e4m3fn"):
        return {"available": False, "reason": "torch has no float8_e4m3fn"}
    raw = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32).tolist()
    mismatches = []
    for b, (ours, theirs) in enumerate(zip(E4M3_TABLE, raw, strict=True)):
        same = (math.isnan(ours) and math.isnan(theirs)) or ours == theirs
        if not same:
            mismatches.append((b, ours, theirs))
    out = {"available": True, "mismatches": mismatches}
    if hasattr(torch, "float4_e2m1fn_x2"):
        # Packed pairs: low nibble is the first element (the layout our packer uses).
        try:
            t = torch.arange(256, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
            out["e2m1_torch"] = "float4_e2m1fn_x2 present (no float conversion in torch: not compared)"
            del t
        except (RuntimeError, TypeError) as e:
            out["e2m1_torch"] = f"float4_e2m1fn_x2 unusable: {e}"
    return out
