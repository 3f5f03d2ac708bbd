"""CPU reference decoders (probes/fp_formats.py) and Python models of kernel/dequant.cuh's bit tricks.

The device code cannot run here, so its integer logic is mirrored below and checked exhaustively
against the format-definition decoders; probes/cvt.cu checks the real thing on the GPU.
"""
import math

import pytest

from monolith.probes import fp_formats as ff


def test_e4m3_known_values():
    assert ff.e4m3_to_float(0x38) == 1.0
    assert ff.e4m3_to_float(0x7E) == 448.0
    assert ff.e4m3_to_float(0xFE) == -448.0
    assert ff.e4m3_to_float(0x00) == 0.0
    assert math.copysign(1.0, ff.e4m3_to_float(0x80)) == -1.0
    assert ff.e4m3_to_float(0x01) == 2.0 ** -9          # smallest subnormal
    assert ff.e4m3_to_float(0x07) == 7 * 2.0 ** -9      # largest subnormal
    assert ff.e4m3_to_float(0x08) == 2.0 ** -6          # smallest normal
    assert ff.e4m3_to_float(0x40) == 2.0
    assert math.isnan(ff.e4m3_to_float(0x7F)) and math.isnan(ff.e4m3_to_float(0xFF))
    assert sum(math.isnan(v) for v in ff.E4M3_TABLE) == 2


def test_e4m3_matches_torch():
    rep = ff.cross_check_torch()
    if not rep["available"]:
        pytest.skip(rep["reason"])
    assert rep["mismatches"] == []


def test_e2m1_values_and_signs():
    assert ff.E2M1_TABLE[:8] == (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    assert ff.E2M1_TABLE[8:] == tuple(-v for v in ff.E2M1_TABLE[:8])
    assert math.copysign(1.0, ff.E2M1_TABLE[8]) == -1.0  # 0x8 is -0


def test_f16_bits_exact_and_rejects_rounding():
    assert ff.float_to_f16_bits(1.0) == 0x3C00
    assert ff.float_to_f16_bits(-2.0) == 0xC000
    assert ff.float_to_f16_bits(2.0 ** -24) == 0x0001
    assert ff.float_to_f16_bits(-0.0) == 0x8000
    assert ff.float_to_f16_bits(math.nan) == 0x7FFF
    with pytest.raises(ValueError):
        ff.float_to_f16_bits(1.0 + 2.0 ** -12)
    for b in range(256):  # every e4m3 value is exact in f16
        v = ff.e4m3_to_float(b)
        bits = ff.e4m3_to_f16_bits(b)
        if not math.isnan(v):
            assert ff.f16_bits_to_float(bits) == v


# --- models of kernel/dequant.cuh -------------------------------------------------------------

def e4m3_sw_model(b: int) -> int:
    """Mirror of e4m3_to_f16_bits_sw."""
    s = (b & 0x80) << 8
    e = (b >> 3) & 0xF
    m = b & 7
    if e == 0xF and m == 7:
        return s | 0x7FFF
    if e == 0:
        if m == 0:
            return s
        p = 2 if m >= 4 else (1 if m >= 2 else 0)
        return s | ((p + 6) << 10) | (((m << (3 - p)) & 7) << 7)
    return s | ((e + 8) << 10) | (m << 7)


def e2m1_trick_model(x: int, k: int) -> int:
    """Mirror of e2m1_pair_f16bits_trick<K>: pair k = (nibble k, nibble k+4)."""
    mag_shift, sign_shift = 9 - 4 * k, 12 - 4 * k
    mag = (x << mag_shift) if mag_shift >= 0 else (x >> -mag_shift)
    sgn = x << sign_shift
    return ((mag & 0x0E000E00) | (sgn & 0x80008000)) & 0xFFFFFFFF


def native_gather_model(x: int) -> list[int]:
    """Mirror of the sm_120a path's byte gathering: bytes (e0,e4), (e2,e6), (e1,e5), (e3,e7)."""
    y02 = (x & 0x0F0F) | ((x >> 12) & 0xF0F0)
    y13 = ((x >> 4) & 0x0F0F) | ((x >> 16) & 0xF0F0)
    return [y02 & 0xFF, y13 & 0xFF, (y02 >> 8) & 0xFF, (y13 >> 8) & 0xFF]  # pair 0..3


def test_e4m3_software_fallback_model():
    for b in range(256):
        want = ff.e4m3_to_f16_bits(b)
        got = e4m3_sw_model(b)
        if math.isnan(ff.e4m3_to_float(b)):
            assert got == ((b & 0x80) << 8) | 0x7FFF
        else:
            assert got == want, hex(b)


def test_e2m1_trick_every_code_every_nibble():
    # low 16 bits enumerate all 4-nibble combinations; the high half is a shuffled copy
    for lo in range(0, 65536, 7):
        hi = ((lo * 40503) ^ 0x5A5A) & 0xFFFF
        x = lo | (hi << 16)
        for k in range(4):
            r = e2m1_trick_model(x, k)
            assert r & 0xFFFF == ff.e2m1_to_f16_bits_biased((x >> (4 * k)) & 0xF)
            assert r >> 16 == ff.e2m1_to_f16_bits_biased((x >> (4 * (k + 4))) & 0xF)


def test_e2m1_trick_values_times_bias_are_exact():
    for code in range(16):
        x = code  # code in nibble 0 -> pair 0, low half
        v = ff.f16_bits_to_float(e2m1_trick_model(x, 0) & 0xFFFF) * 2.0 ** ff.E2M1_F16_BIAS_LOG2
        assert v == ff.e2m1_to_float(code) or (v == 0 and ff.e2m1_to_float(code) == 0)


def test_native_gather_pairs_match_decode_order():
    for x in (0x76543210, 0xFEDCBA98, 0x12345678, 0x89ABCDEF):
        pairs = ff.decode_e2m1_word(x)
        for k, byte in enumerate(native_gather_model(x)):
            assert (ff.e2m1_to_float(byte & 0xF), ff.e2m1_to_float(byte >> 4)) == pairs[k]
