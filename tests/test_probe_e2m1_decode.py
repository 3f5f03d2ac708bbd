"""probes/e2m1_decode.cu's integer decodes emulated instruction by instruction (PTX lop3 and prmt
semantics, immLuts read from the source), checked against the format-definition decoders.

decode_lop3 once had immLut 0xE2 for its bit-select: 713216 of the probe's 1048576 values were wrong
on the H200, and this emulation reproduces that count exactly. The shifts and masks are transcribed
from the source; the probe's own host check (`e2m1_decode --host-check`) runs the real C++.

kernel/dequant.cuh's sm_90 decode (e2m1x8_f16bits_lop3, behind e2m1x8_to_half2x4) is the same
sequence: its statements are checked equal to decode_lop3's text, its lop3 operand order and the
pair order e2m1x8_to_half2x4 hands out are checked in the source, and the emulation runs with the
immLut read from dequant.cuh.
"""
import re

import numpy as np

from monolith import REPO_ROOT
from monolith.probes import fp_formats as ff

SRC = (REPO_ROOT / "probes" / "e2m1_decode.cu").read_text()
DEQUANT = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
U = np.uint32


def _const(name: str, src: str = SRC) -> int:
    m = re.search(rf"constexpr uint32_t {name} = (0x[0-9A-Fa-f]+)u?;", src)
    assert m, name
    return int(m.group(1), 16)


def _body(src: str, signature: str) -> str:
    """A function's body (after `signature`, up to the closing brace at column 0), comments dropped."""
    i = src.index(signature)
    body = src[src.index("{", i) + 1:src.index("\n}", i)]
    return re.sub(r"//[^\n]*", "", body)


def _statements(body: str) -> list[str]:
    return [" ".join(st.split()) for st in body.split(";") if st.strip()]


def lop3(a, b, c, lut: int):
    """PTX lop3.b32: result bit = lut bit (4 a + 2 b + c), i.e. lut = F(0xF0, 0xCC, 0xAA)."""
    r = np.zeros_like(a)
    for i in range(8):
        if lut >> i & 1:
            r |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return r


def prmt(a, b, sel):
    """PTX prmt.b32, default mode: selector nibble i picks byte (n & 7) of {b, a} (a = bytes 0..3),
    or with n & 8 that byte's msb replicated."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(sel))
    a, b, sel = (np.broadcast_to(np.asarray(v, dtype=np.uint64), shape) for v in (a, b, sel))
    src = a | (b << np.uint64(32))
    r = np.zeros(shape, dtype=np.uint64)
    for i in range(4):
        n = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
        byte = (src >> ((n & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        byte = np.where(n & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
        r |= byte << np.uint64(8 * i)
    return r.astype(U)


def decode_lop3(x, lut_sel: int):
    km = U(0x8E008E00)
    t = x << U(3)
    y = lop3(x, t, np.full_like(x, 0x40404040), lut_sel)
    z = lop3(x, t, np.full_like(x, 0x04000400), lut_sel)
    return [(y << U(9)) & km, (z << U(5)) & km, (y << U(1)) & km,
            ((x >> U(3)) & U(0x0E000E00)) | (x & U(0x80008000))]


def decode_prmt(x, lut_or_and: int):
    lo, hi, s, m = U(0x3E3C3800), U(0x46444240), np.full_like(x, 0x80008000), U(0x7070)
    x4 = x << U(4)
    mags = [prmt(lo, hi, x & m), prmt(lo, hi, (x >> U(16)) & m), prmt(lo, hi, x4 & m), prmt(lo, hi, (x4 >> U(16)) & m)]
    signs = [prmt(x, 0, 0x9484), prmt(x, 0, 0xB4A4), prmt(x4, 0, 0x9484), prmt(x4, 0, 0xB4A4)]
    return [lop3(mg, sg, s, lut_or_and) for mg, sg in zip(mags, signs, strict=True)]


def probe_words():
    """main's words: every low half with itself and with its complement as the high half."""
    i = np.arange(65536, dtype=U)
    return np.concatenate([i | (i << U(16)), i | ((~i & U(0xFFFF)) << U(16))])


def mismatches(words, out, elem, table) -> int:
    bad = 0
    for k in range(4):
        for hi in range(2):
            code = (words >> U(4 * elem(k, hi))) & U(0xF)
            bad += int(np.count_nonzero(((out[k] >> U(16 * hi)) & U(0xFFFF)) != table[code]))
    return bad


BIASED = np.array([ff.e2m1_to_f16_bits_biased(c) for c in range(16)], dtype=U)
EXACT = np.array([ff.float_to_f16_bits(ff.e2m1_to_float(c)) for c in range(16)], dtype=U)


def trick_elem(k, hi):
    return k + 4 * hi


def prmt_elem(k, hi):
    return ((1, 3), (5, 7), (0, 2), (4, 6))[k][hi]


def test_lop3_emulation_matches_ptx_definition():
    for lut in (0xD8, 0xE2, 0xF8, 0x96):
        assert int(lop3(U(0xF0), U(0xCC), U(0xAA), lut)) == lut


def test_decode_lop3_every_code_every_nibble():
    w = probe_words()
    assert mismatches(w, decode_lop3(w, _const("kLutSel")), trick_elem, BIASED) == 0


def trick(x):
    """e2m1_pair_f16bits_trick<k>(x), k = 0..3 (kernel/dequant.cuh)."""
    out = []
    for k in range(4):
        ms, ss = 9 - 4 * k, 12 - 4 * k
        mag = x << U(ms) if ms >= 0 else x >> U(-ms)
        out.append((mag & U(0x0E000E00)) | ((x << U(ss)) & U(0x80008000)))
    return out


def test_decode_lop3_equals_trick_on_random_words():
    x = np.random.default_rng(14).integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(U)
    got = decode_lop3(x, _const("kLutSel"))
    assert all(np.array_equal(a, b) for a, b in zip(got, trick(x), strict=True))


def test_old_immlut_reproduces_the_h200_failure():
    w = probe_words()
    assert mismatches(w, decode_lop3(w, 0xE2), trick_elem, BIASED) == 713216


def test_decode_prmt_every_code_every_nibble():
    w = probe_words()
    assert mismatches(w, decode_prmt(w, _const("kLutOrAnd")), prmt_elem, EXACT) == 0


def test_dequant_lop3_is_the_probes_sequence():
    probe = _statements(_body(SRC, "void decode_lop3(uint32_t x, uint32_t out[4])"))
    kern = _statements(_body(DEQUANT, "void e2m1x8_f16bits_lop3(uint32_t x, uint32_t out[4])"))
    assert len(kern) == 8
    assert [st.replace("e2m1_bitsel(", "bitsel(") for st in kern] == probe
    # e2m1_bitsel(a, b, m) passes a, b, m to lop3 in that order with dequant.cuh's immLut, like bitsel
    asm = _body(DEQUANT, "uint32_t e2m1_bitsel(uint32_t a, uint32_t b, uint32_t m)")
    assert '"lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(m), "n"(kE2M1LutSel)' in asm
    # the sm_90 branch of e2m1x8_to_half2x4 hands out d[k] as out[k]: pair k = (element k, element k + 4)
    sm90 = _body(DEQUANT, "void e2m1x8_to_half2x4(uint32_t x, __half2 out[4])").split("#else")[1].split("#endif")[0]
    assert _statements(sm90) == ["uint32_t d[4]", "e2m1x8_f16bits_lop3(x, d)"] + \
        [f"out[{k}] = u32_as_half2(d[{k}])" for k in range(4)]


def test_dequant_lop3_every_code_every_nibble():
    lut = _const("kE2M1LutSel", DEQUANT)
    w = probe_words()
    assert mismatches(w, decode_lop3(w, lut), trick_elem, BIASED) == 0
    x = np.random.default_rng(90).integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(U)
    assert all(np.array_equal(a, b) for a, b in zip(decode_lop3(x, lut), trick(x), strict=True))
