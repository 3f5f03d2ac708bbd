"""A CPU model of probes/round_gemv.cu's tensor-core shapes (5, 6 bf16; 8 E4M3; sixteenth session, not
yet run on the GPU): the fragment mapping must give every row's dot product, and the weight loads must be free
of shared-memory bank conflicts. Both are easy to get wrong and cost device time to find.

The model follows the PTX ISA's fragment layout of mma.m16n8k16 (.bf16, row.col, f32 accumulate):
lane = 4 g + t holds A's a0 (row g, k 2t, 2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8, 2t+9),
a3 (row g+8, k 2t+8, 2t+9); B's b0 (k 2t, 2t+1, column g), b1 (k 2t+8, 2t+9, column g); C's c0, c1
(row g, columns 2t, 2t+1), c2, c3 (row g+8). The probe's own choices, modelled as it writes them:
shape 5: warp w takes tile w % 2 and K range 128 (w / 2), 8 steps; shape 6: both tiles, K range 64
(w), 4 steps, one B fragment for two mma. Per step a lane loads physical k 4t .. 4t+3 of row g's
chunk (step + g % 4) % steps from rows g and g + 8; B's column n carries the chunk of rows with
g % 4 = n % 4, as bf16(x) for n < 4 and bf16(x - bf16(x)) for n >= 4; row g's sum is
C[g][g % 4] + C[g][g % 4 + 4]; a row's K ranges are added in order.
"""
import numpy as np
import pytest
from smem_banks import conflict_free

K, ROWS, WARPS = 1024, 32, 16


def bf16(a):
    """Round float32 to the nearest bf16 (ties to even), returned as float32."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


class Shape:
    """kT tiles per warp (probe shape 5: 1, shape 6: 2); each warp's K range kw, steps of 16 in it."""

    def __init__(self, tiles):
        self.tiles = tiles
        self.kw = K // (WARPS * tiles // 2)
        self.steps = self.kw // 16
        self.nkr = K // self.kw

    def kq(self, warp):
        return warp >> 1 if self.tiles == 1 else warp

    def tiles_of(self, warp):
        return [warp & 1] if self.tiles == 1 else [0, 1]

    def chunk(self, step, g):
        return (step + (g & 3)) % self.steps

    def phys_k(self, warp, step, g, t):
        """The four physical k a lane's 8-byte load covers (the fragment's k 2t, 2t+1, 2t+8, 2t+9)."""
        k0 = self.kw * self.kq(warp) + 16 * self.chunk(step, g) + 4 * t
        return [k0, k0 + 1, k0 + 2, k0 + 3]


SHAPES = {5: Shape(1), 6: Shape(2)}


def extract(c, part, kq):
    """Row g's sum from its two useful columns, lane by lane as the probe writes it: g % 4 (x_hi) in
    lane t = (g % 4) / 2, g % 4 + 4 (x_lo) in lane t + 2, register (g % 4) % 2; c[tile] is [16][8]."""
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        j = g & 3
        if t != j >> 1:
            continue
        for tile in c:
            for m in (g, g + 8):
                part[16 * tile + m, kq] = c[tile][m, 2 * t + (j & 1)] + c[tile][m, 2 * (t ^ 2) + (j & 1)]


def round_model(w, x, sh):
    """The probe's round on the CPU, fragment by fragment; returns the 32 row sums."""
    x_hi = bf16(x)
    x_lo = bf16(x - x_hi)
    part = np.full((ROWS, sh.nkr), np.nan)
    for warp in range(WARPS):
        kq = sh.kq(warp)
        c = {mt: np.zeros((16, 8)) for mt in sh.tiles_of(warp)}
        for step in range(sh.steps):
            b = np.zeros((16, 8))   # [logical k][n]
            a = {mt: np.zeros((16, 16)) for mt in c}  # [m][logical k]
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                pk = sh.phys_k(warp, step, g, t)
                for mt in c:
                    for m in (g, g + 8):
                        row = 16 * mt + m
                        a[mt][m, 2 * t], a[mt][m, 2 * t + 1] = w[row, pk[0]], w[row, pk[1]]
                        a[mt][m, 2 * t + 8], a[mt][m, 2 * t + 9] = w[row, pk[2]], w[row, pk[3]]
                src = x_lo if g >= 4 else x_hi  # column g of B is this lane's
                b[2 * t, g], b[2 * t + 1, g] = src[pk[0]], src[pk[1]]
                b[2 * t + 8, g], b[2 * t + 9, g] = src[pk[2]], src[pk[3]]
            for mt in c:
                c[mt] += a[mt] @ b
        extract(c, part, kq)
    assert not np.isnan(part).any(), "a row's K range was never written"
    return part.sum(axis=1)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    w = bf16(rng.uniform(-1, 1, (ROWS, K)).astype(np.float32)).astype(np.float64)
    return w, rng.uniform(-1, 1, K).astype(np.float32)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_fragments_give_every_rows_dot_product(shape):
    w, x = _inputs(16 + shape)
    got = round_model(w, x, SHAPES[shape])
    ref = w @ x.astype(np.float64)
    # x_hi + x_lo keeps ~16 bits of x: the probe's own check (rel. err < 1e-4 against max(1, |ref|))
    err = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    assert err.max() < 1e-4, err.max()
    # and x_lo matters: without it the error is that of bf16 x (would fail the probe's check)
    hi_only = w @ bf16(x).astype(np.float64)
    assert (np.abs(hi_only - ref) / np.maximum(1.0, np.abs(ref))).max() > 1e-4


def test_a_wrong_chunk_rotation_is_caught():
    """The model is not vacuous: rows reading the chunk of another g % 4 give wrong sums."""
    class Wrong(Shape):
        def chunk(self, step, g):
            return (step + ((g + 1) & 3)) % self.steps if g >= 4 else (step + (g & 3)) % self.steps

    w, x = _inputs(3)
    assert np.abs(round_model(w, x, Wrong(1)) - w @ x.astype(np.float64)).max() > 1e-2


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_loads_are_free_of_bank_conflicts(shape):
    """8-byte loads are served per half warp (16 lanes x 8 B), 16-byte loads per quarter warp (8 x
    16 B). Rows are 2 KB apart (every row starts in bank 0), which is why the chunk rotates with g:
    without the rotation 4 rows would read the same banks. Shape 5 reads x as float4 from the fp32
    vector, shape 6 as 8-byte (hi, lo) quads from their own arrays (lanes g < 4 hi, g >= 4 lo)."""
    sh = SHAPES[shape]
    slot_bytes, row_bytes = 16 * 1024, 2 * K
    for warp in range(WARPS):
        for step in range(sh.steps):
            for mt in sh.tiles_of(warp):
                for half in range(2):
                    for rsel in (0, 8):
                        addrs = []
                        for lane in range(16 * half, 16 * half + 16):
                            g, t = lane >> 2, lane & 3
                            row = 16 * mt + g + rsel
                            addrs.append((row >> 3) * slot_bytes + (row & 7) * row_bytes + 2 * sh.phys_k(warp, step, g, t)[0])
                        assert conflict_free(addrs, 8), (shape, warp, step, mt, half, rsel)
            if shape == 5:
                for quarter in range(4):
                    addrs = [4 * sh.phys_k(warp, step, lane >> 2, lane & 3)[0] for lane in range(8 * quarter, 8 * quarter + 8)]
                    assert conflict_free(addrs, 16), (warp, step, quarter)
            else:
                for half in range(2):
                    xb = 8 * (K // 4)  # bytes of one (hi or lo) array
                    addrs = [(lane >> 2 >= 4) * xb + 2 * sh.phys_k(warp, step, lane >> 2, lane & 3)[0]
                             for lane in range(16 * half, 16 * half + 16)]
                    assert conflict_free(addrs, 8), (warp, step, half)


def test_without_the_rotation_the_weight_loads_conflict():
    class Flat(Shape):
        def chunk(self, step, g):
            return step

    sh = Flat(2)
    addrs = [(g >> 3) * 16 * 1024 + (g & 7) * 2 * K + 2 * sh.phys_k(0, 0, g, t)[0] for g in range(4) for t in range(4)]
    assert not conflict_free(addrs, 8)


# ---- shape 8: E4M3 weights widened by cvt, f16 mma, x as f16 hi + lo ----------------------------
# Slot i is M tile i (16 rows of 1 KB); warp w takes tiles 2 (w % 2), + 1 and K range 128 (w / 2):
# 4 chunks of 32 k, rotated with g as above. A lane loads k 8t .. 8t+7 of its chunk from rows g and
# g + 8 and feeds two mma: k 8t .. 8t+3 (logical 2t, 2t+1, 2t+8, 2t+9), then 8t+4 .. 8t+7.
ROWS_E4 = 64


def e4_lane_k(warp, step, g, t):
    return 128 * (warp >> 1) + 32 * ((step + (g & 3)) & 3) + 8 * t


def round_model_e4(w, x):
    x_hi = x.astype(np.float16).astype(np.float64)
    x_lo = (x - x_hi).astype(np.float16).astype(np.float64)
    part = np.full((ROWS_E4, 8), np.nan)
    for warp in range(WARPS):
        tp, kq = warp & 1, warp >> 1
        c = {tile: np.zeros((16, 8)) for tile in (2 * tp, 2 * tp + 1)}
        for step in range(4):
            for half in range(2):  # the lane's 8 k: first 4, then the next 4
                b = np.zeros((16, 8))
                a = {tile: np.zeros((16, 16)) for tile in c}
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    k = e4_lane_k(warp, step, g, t) + 4 * half
                    for tile in c:
                        for m in (g, g + 8):
                            row = 16 * tile + m
                            a[tile][m, 2 * t], a[tile][m, 2 * t + 1] = w[row, k], w[row, k + 1]
                            a[tile][m, 2 * t + 8], a[tile][m, 2 * t + 9] = w[row, k + 2], w[row, k + 3]
                    src = x_lo if g >= 4 else x_hi
                    b[2 * t, g], b[2 * t + 1, g] = src[k], src[k + 1]
                    b[2 * t + 8, g], b[2 * t + 9, g] = src[k + 2], src[k + 3]
                for tile in c:
                    c[tile] += a[tile] @ b
        extract(c, part, kq)
    assert not np.isnan(part).any(), "a row's K range was never written"
    return part.sum(axis=1)


def test_e4m3_fragments_give_every_rows_dot_product():
    rng = np.random.default_rng(8)
    # E4M3 values are exact in f16: any f16-representable weights in the E4M3 range model them
    w = rng.choice(np.array([0.0, 0.125, -0.25, 0.375, 0.5, -0.75, 1.0, 1.5, -2.0, 3.0, -448.0, 2 ** -9]), (ROWS_E4, K))
    x = rng.uniform(-1, 1, K).astype(np.float32)
    got = round_model_e4(w, x)
    ref = w @ x.astype(np.float64)
    err = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    assert err.max() < 1e-4, err.max()


def test_e4m3_loads_are_free_of_bank_conflicts():
    for warp in range(WARPS):
        tp = warp & 1
        for step in range(4):
            for tile in (2 * tp, 2 * tp + 1):
                for half in range(2):
                    for rsel in (0, 8):
                        addrs = [tile * 16 * 1024 + ((lane >> 2) + rsel) * K + e4_lane_k(warp, step, lane >> 2, lane & 3)
                                 for lane in range(16 * half, 16 * half + 16)]
                        assert conflict_free(addrs, 8), (warp, step, tile, half, rsel)
            for quarter in range(4):  # x as f16: hi array, then lo (2 KB each); 16 bytes per lane
                addrs = [((lane >> 2) >= 4) * 2 * K + 2 * e4_lane_k(warp, step, lane >> 2, lane & 3)
                         for lane in range(8 * quarter, 8 * quarter + 8)]
                assert conflict_free(addrs, 16), (warp, step, quarter)
