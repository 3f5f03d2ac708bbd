"""A CPU model of probes/gemv_k.cu (issue 48, step 0): the swizzled shared-memory layouts, the lanes'
loads and the mma.m16n8k16 fragments must give every (row, vector) dot product, and the loads must
be free of bank conflicts. Both cost device time to find wrong on the GPU.

The model follows the PTX ISA's fragment layout of mma.m16n8k16 (row.col, f32 accumulate): lane
4 g + t holds A's a0 (row g, k 2t, 2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8, 2t+9), a3 (row
g+8, same k); B's b0 (k 2t, 2t+1, column g), b1 (k 2t+8, 2t+9, column g); C's c0, c1 (row g,
columns 2t, 2t+1), c2, c3 (row g+8). The probe's choices, as it writes them: warp w takes the K
range 128 (w / 2), 4 chunks of 32, and M tile w % 2 (bf16, 32 rows) or tiles 2 (w % 2), + 1 (E4M3,
64 rows); a lane loads elements 8t .. 8t+7 of its rows' chunk (bf16: 16 B, E4M3: 8 B of codes)
and of vector g's chunk (16 B); step s of a chunk uses the lane's element pairs 2s and 2s + 1.
"""
import numpy as np
import pytest
from smem_banks import conflict_free

K, COLS, WARPS, KRANGES, CHUNKS = 1024, 8, 16, 8, 4


def w_off(e4, r, c, swizzle=True):
    """probes/gemv_k.cu w_off: byte offset of row r's 32-element chunk c."""
    if e4:
        return r * K + ((c ^ (r & 3) if swizzle else c) << 5)
    return r * 2 * K + ((c ^ (r & 1) if swizzle else c) << 6)


def x_off(j, c, swizzle=True):
    """probes/gemv_k.cu x_off: byte offset of vector j's chunk c in one (hi or lo) plane."""
    return j * 2 * K + ((c ^ (j & 1) if swizzle else c) << 6)


def rows_of(e4):
    return 64 if e4 else 32


def weight_smem(e4, swizzle=True):
    """Element index (r * K + e) at each element slot of the weights' shared memory."""
    esize, rows = (1 if e4 else 2), rows_of(e4)
    smem = np.full(rows * K, -1, dtype=np.int64)
    for r in range(rows):
        for e in range(K):
            smem[(w_off(e4, r, e // 32, swizzle) + esize * (e % 32)) // esize] = r * K + e
    return smem


def x_smem(swizzle=True):
    smem = np.full(COLS * K, -1, dtype=np.int64)
    for j in range(COLS):
        for e in range(K):
            smem[(x_off(j, e // 32, swizzle) + 2 * (e % 32)) // 2] = j * K + e
    return smem


def round_model(e4, w, x):
    """Every warp's mma as the PTX layout defines it, on the lanes' loads; the K ranges added in order.
    Returns y[row][column]."""
    rows, tiles = rows_of(e4), (2 if e4 else 1)
    esize = 1 if e4 else 2
    ws, xs = weight_smem(e4), x_smem()
    wflat, xflat = w.reshape(-1), x.reshape(-1)
    part = np.zeros((rows, COLS, KRANGES))
    for warp in range(WARPS):
        kq, tile0 = warp >> 1, (warp & 1) * tiles
        for i in range(tiles):
            acc = np.zeros((16, COLS))
            for c in range(CHUNKS):
                cg = CHUNKS * kq + c
                a_mat = [np.zeros((16, 16)) for _ in range(2)]
                b_mat = [np.zeros((16, COLS)) for _ in range(2)]
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    r0 = 16 * (tile0 + i) + g
                    # the lane's 8 elements of rows r0, r0 + 8 and of vector g
                    l0 = ws[(w_off(e4, r0, cg) + esize * 8 * t) // esize:][:8]
                    l1 = ws[(w_off(e4, r0 + 8, cg) + esize * 8 * t) // esize:][:8]
                    lx = xs[(x_off(g, cg) + 16 * t) // 2:][:8]
                    for s in range(2):
                        p0, p1 = 2 * s, 2 * s + 1  # the element pairs of step s
                        for h in range(2):
                            a_mat[s][g, 2 * t + h] = wflat[l0[2 * p0 + h]]
                            a_mat[s][g + 8, 2 * t + h] = wflat[l1[2 * p0 + h]]
                            a_mat[s][g, 2 * t + 8 + h] = wflat[l0[2 * p1 + h]]
                            a_mat[s][g + 8, 2 * t + 8 + h] = wflat[l1[2 * p1 + h]]
                            b_mat[s][2 * t + h, g] = xflat[lx[2 * p0 + h]]
                            b_mat[s][2 * t + 8 + h, g] = xflat[lx[2 * p1 + h]]
                for s in range(2):
                    acc += a_mat[s] @ b_mat[s]
            part[16 * (tile0 + i):16 * (tile0 + i) + 16, :, kq] = acc
    y = part[:, :, 0].copy()
    for u in range(1, KRANGES):
        y += part[:, :, u]
    return y


def _inputs(e4, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(-8, 9, size=(rows_of(e4), K)).astype(np.float64)
    x = rng.integers(-8, 9, size=(COLS, K)).astype(np.float64)
    return w, x


@pytest.mark.parametrize("e4", [False, True])
def test_the_layouts_hold_every_element_once(e4):
    ws, xs = weight_smem(e4), x_smem()
    assert sorted(ws.tolist()) == list(range(rows_of(e4) * K))
    assert sorted(xs.tolist()) == list(range(COLS * K))


@pytest.mark.parametrize("e4", [False, True])
def test_the_fragments_give_every_columns_dot_product(e4):
    w, x = _inputs(e4, 48 + e4)
    assert np.array_equal(round_model(e4, w, x), w @ x.T)  # small integers: exact


def test_a_zero_padded_column_leaves_the_others_alone():
    """The model's column j at k = 1 (others zero) and beside 7 neighbours: the same numbers (the
    probe checks the hardware's bits; here the mapping must not mix columns)."""
    w, x = _inputs(False, 7)
    full = round_model(False, w, x)
    for j in (0, 3, 7):
        alone = np.zeros_like(x)
        alone[j] = x[j]
        y = round_model(False, w, alone)
        assert np.array_equal(y[:, j], full[:, j])
        assert not np.any(np.delete(y, j, axis=1))


def load_phases(e4, swizzle=True):
    """(width, [lane addresses]) for every phase of every shared-memory load of one round: 16-byte
    loads are served per quarter warp (8 lanes), 8-byte loads per half warp (16 lanes)."""
    tiles = 2 if e4 else 1
    wwidth = 8 if e4 else 16
    esize = 1 if e4 else 2
    lanes_per_phase = 128 // wwidth
    for warp in range(WARPS):
        kq, tile0 = warp >> 1, (warp & 1) * tiles
        for c in range(CHUNKS):
            cg = CHUNKS * kq + c
            for i in range(tiles):
                for rsel in (0, 8):
                    for ph in range(32 // lanes_per_phase):
                        lanes = range(ph * lanes_per_phase, (ph + 1) * lanes_per_phase)
                        yield wwidth, [w_off(e4, 16 * (tile0 + i) + (ln >> 2) + rsel, cg, swizzle) + esize * 8 * (ln & 3)
                                       for ln in lanes]
            for ph in range(4):
                yield 16, [x_off(ln >> 2, cg, swizzle) + 16 * (ln & 3) for ln in range(8 * ph, 8 * ph + 8)]


@pytest.mark.parametrize("e4", [False, True])
def test_the_loads_are_free_of_bank_conflicts(e4):
    for width, addrs in load_phases(e4):
        assert conflict_free(addrs, width), (e4, width, addrs)


@pytest.mark.parametrize("e4", [False, True])
def test_without_the_swizzle_the_loads_conflict(e4):
    """Rows 2 KB (bf16) / 1 KB (E4M3) apart and vectors 2 KB apart start in the same bank: the
    swizzle is what makes the loads conflict-free, so the test above can fail."""
    assert not all(conflict_free(a, w) for w, a in load_phases(e4, swizzle=False))
