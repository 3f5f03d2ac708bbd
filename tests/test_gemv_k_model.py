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
                    l0 = ws[(w_off(e4, r0, cg) + esize * 8 * t) // esize :][:8]
                    l1 = ws[(w_off(e4, r0 + 8, cg) + esize * 8 * t) // esize :][:8]
                    lx = xs[(x_off(g, cg) + 16 * t) // 2 :][:8]
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
            part[16 * (tile0 + i) : 16 * (tile0 + i) + 16, :, kq] = acc
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
                        yield (
                            wwidth,
                            [
                                w_off(e4, 16 * (tile0 + i) + (ln >> 2) + rsel, cg, swizzle) + esize * 8 * (ln & 3)
                                for ln in lanes
                            ],
                        )
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


# ---------------------------------------------------------------------------------------------
# The partial tiles' layouts (probes/gemv_k.cu Layout) and the store half's wavefront counts that
# probes/ktoken_run.py's predictions rest on
# ---------------------------------------------------------------------------------------------
from monolith.probes import ktoken_run as kr  # noqa: E402

PART_FLOATS = KRANGES * COLS * (64 + 4)  # Smem::part


def part_slot(layout, e4, row, col, kq):
    """Float index of the K range kq's partial of (row, column) in Smem::part."""
    rows = rows_of(e4)
    if layout == "rck":
        return (row * COLS + col) * KRANGES + kq
    if layout == "krc-pad":
        return kq * COLS * (rows + 4) + col * (rows + 4) + row
    tile, g, t = row // 16, row % 8, col // 2  # frag16: lane 4 g + t of tile, element c0..c3
    elem = (col % 2) + (2 if row % 16 >= 8 else 0)
    return ((kq * (rows // 16) + tile) * 32 + 4 * g + t) * 4 + elem


def wavefronts(width, lanes_addrs):
    """Shared-memory wavefronts of one warp's access: 4-byte accesses in one phase of 32 lanes, 8-byte
    in two of 16, 16-byte in four of 8; a phase takes as many wavefronts as its busiest bank has
    distinct words (equal words broadcast)."""
    per = 128 // width
    total = 0
    for ph in range(32 // per):
        addrs = [a for ln, a in lanes_addrs if ph * per <= ln < (ph + 1) * per]
        if not addrs:
            continue
        words = {}
        for a in addrs:
            for i in range(width // 4):
                words.setdefault((a // 4 + i) % 32, set()).add(a // 4 + i)
        total += max(len(v) for v in words.values())
    return total


def write_accesses(layout, e4):
    """(width, [(lane, byte address)]) of every warp's fragment stores of one round."""
    tiles = 2 if e4 else 1
    for warp in range(WARPS):
        kq, tile0 = warp >> 1, (warp & 1) * tiles
        for i in range(tiles):
            if layout == "frag16":
                yield (
                    16,
                    [
                        (ln, 4 * part_slot(layout, e4, 16 * (tile0 + i) + (ln >> 2), 2 * (ln & 3), kq))
                        for ln in range(32)
                    ],
                )
                continue
            for dr, dc in ((0, 0), (0, 1), (8, 0), (8, 1)):  # c0 .. c3
                yield (
                    4,
                    [
                        (ln, 4 * part_slot(layout, e4, 16 * (tile0 + i) + (ln >> 2) + dr, 2 * (ln & 3) + dc, kq))
                        for ln in range(32)
                    ],
                )


SCALE_BASE = 4 * PART_FLOATS  # Smem::scale follows part


def read_accesses(layout, e4, k):
    """(width, [(lane, byte address)]) of every reducer warp's loads for k useful columns, the E4M3
    row scales included, as the compiled code issues them (rck: 2 x 16 B; krc-pad: 8 x 4 B;
    frag16: 8 x 16 B)."""
    rows = rows_of(e4)
    if layout == "frag16":
        for warp in range(rows // 16):
            for kq in range(KRANGES):
                yield 16, [(ln, 4 * part_slot(layout, e4, 16 * warp + (ln >> 2), 2 * (ln & 3), kq)) for ln in range(32)]
            if e4:
                for dr in (0, 8):
                    yield 4, [(ln, SCALE_BASE + 4 * (16 * warp + (ln >> 2) + dr)) for ln in range(32)]
        return
    for warp in range(rows * COLS // 32):
        qs = [(ln, 32 * warp + ln) for ln in range(32)]
        act = [(ln, q % rows, q // rows) for ln, q in qs if q // rows < k]
        if not act:
            continue
        if layout == "rck":
            for half in (0, 4):
                yield 16, [(ln, 4 * (part_slot(layout, e4, row, col, 0) + half)) for ln, row, col in act]
        else:
            for kq in range(KRANGES):
                yield 4, [(ln, 4 * part_slot(layout, e4, row, col, kq)) for ln, row, col in act]
        if e4:
            yield 4, [(ln, SCALE_BASE + 4 * row) for ln, row, _col in act]


@pytest.mark.parametrize("layout", kr.GEMV_LAYOUTS)
@pytest.mark.parametrize("e4", [False, True])
def test_every_partial_has_its_own_slot(layout, e4):
    slots = [part_slot(layout, e4, r, c, q) for r in range(rows_of(e4)) for c in range(COLS) for q in range(KRANGES)]
    assert len(set(slots)) == len(slots) and 0 <= min(slots) and max(slots) < PART_FLOATS
    if layout == "frag16":  # the 16-byte store of a lane: its 4 outputs in consecutive floats
        assert (
            part_slot(layout, e4, 3, 2, 5) % 4 == 0
            and part_slot(layout, e4, 11, 3, 5) == part_slot(layout, e4, 3, 2, 5) + 3
        )


@pytest.mark.parametrize("layout", kr.GEMV_LAYOUTS)
@pytest.mark.parametrize("e4", [False, True])
def test_the_reducer_reads_what_the_fragments_wrote(layout, e4):
    """Fragment stores through the layout, then the reducer's loads: every (row, column) adds its own
    8 K ranges, in the order 0 .. 7 (the probe checks that every layout stores the same bits)."""
    rows = rows_of(e4)
    part = np.full(PART_FLOATS, -1, dtype=np.int64)
    for warp in range(WARPS):
        kq, tile0 = warp >> 1, (warp & 1) * (2 if e4 else 1)
        for i in range(2 if e4 else 1):
            for ln in range(32):
                for dr, dc in ((0, 0), (0, 1), (8, 0), (8, 1)):
                    r, c = 16 * (tile0 + i) + (ln >> 2) + dr, 2 * (ln & 3) + dc
                    part[part_slot(layout, e4, r, c, kq)] = (r * COLS + c) * KRANGES + kq
    for r in range(rows):
        for c in range(COLS):
            got = [part[part_slot(layout, e4, r, c, q)] for q in range(KRANGES)]
            assert got == [(r * COLS + c) * KRANGES + q for q in range(KRANGES)]


@pytest.mark.parametrize("layout", kr.GEMV_LAYOUTS)
@pytest.mark.parametrize("e4", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_the_runners_wavefront_counts_are_the_bank_models(layout, e4, k):
    want = kr.gemv_wavefronts("e4m3" if e4 else "bf16", layout, k)
    assert sum(wavefronts(w, a) for w, a in write_accesses(layout, e4)) == want["write"]
    assert sum(wavefronts(w, a) for w, a in read_accesses(layout, e4, k)) == want["read"]


@pytest.mark.parametrize("e4", [False, True])
def test_the_new_layouts_store_and_load_without_conflicts(e4):
    """krc-pad and frag16 take the minimum wavefronts of every access (4-byte: 1, 16-byte: 4): the
    bank model above can tell, since rck's accesses are 16- and 32-way."""
    for layout in ("krc-pad", "frag16"):
        for w, a in list(write_accesses(layout, e4)) + list(read_accesses(layout, e4, 8)):
            assert wavefronts(w, a) == (1 if w == 4 else 4), (layout, w)
    assert max(wavefronts(w, a) for w, a in write_accesses("rck", e4)) == 16
    assert max(wavefronts(w, a) for w, a in read_accesses("rck", e4, 8)) == 32
