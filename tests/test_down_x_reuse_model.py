"""MONOLITH_DOWN_X_REUSE (kernel/schedule_stream.cuh, the down rounds): each half's nq segments are
listed by residue mod 3, then in order, and warp pair k takes items k*per .. k*per + per - 1 of its
half's list (per = ceil(nq / 8)). The kernel's partial sums are only right if every (segment, half)
of the round is computed by exactly one warp and lands in the part[] word the combine reads (the
one warp 2 (q % 8) + h writes in the default build), with at most kRoundSlots items per warp (the
four values of one warp_sum4). Checked here for every round size and first-segment residue, against
the kernel's own expressions read from the source; and the point of the knob, counted: how many
times a half's warps load x."""

import pytest

from monolith import REPO_ROOT, kernel_spec

SRC = (REPO_ROOT / "kernel" / "schedule_stream.cuh").read_text()
C = kernel_spec.config_constants()
ROUND_SLOTS = 4  # kRoundSlots (schedule_stream.cuh, static_assert'ed by round_1024)
ROWS_PER_SLOT = 8  # bf16's kRows1024: a 16 KB slot holds 8 rows of 1,024
ROWS_ROUND = ROUND_SLOTS * ROWS_PER_SLOT
WARP_PAIRS = 8  # 16 consumer warps, two per half-row pair


def items(nq: int, k: int) -> list[tuple[int, int]]:
    """(segment in the round, residue) of warp pair k, as the kernel enumerates them."""
    per = (nq + 7) >> 3
    c0, c1 = (nq + 2) // 3, (nq + 1) // 3
    out = []
    for j in range(ROUND_SLOTS):
        f = per * k + j
        if j < per and f < nq:
            res = 0 if f < c0 else (1 if f < c0 + c1 else 2)
            q = 3 * (f - (0 if res == 0 else (c0 if res == 1 else c0 + c1))) + res
            out.append((q, res))
    return out


def test_the_kernel_uses_these_expressions():
    for expr in ("const int per = (nq + 7) >> 3, k0 = per * (warp >> 1);",
                 "const int c0 = (nq + 2) / 3, c1 = (nq + 1) / 3;",
                 "const int res = f < c0 ? 0 : (f < c0 + c1 ? 1 : 2);",
                 "return 3 * (f - (res == 0 ? 0 : (res == 1 ? c0 : c0 + c1))) + res;",
                 "const int t = (q0 + q) % 3;",
                 "part[(q >> 3) * kPartBlk + 2 * (q & 7) + (warp & 1)] = r4;",
                 "a[j] = half_row_lane<W>(slot_at(q >> 3), q & 7, xa);"):
        assert expr in SRC, expr
    assert int(C["kIntermediate"]) == 3 * int(C["kHidden"])  # a down row is three 1,024-wide segments


@pytest.mark.parametrize("nq", range(1, ROWS_ROUND + 1))
def test_every_segment_once_per_half_in_its_part_word(nq):
    seen = []
    for k in range(WARP_PAIRS):
        its = items(nq, k)
        assert len(its) <= ROUND_SLOTS
        for q, res in its:
            assert 0 <= q < nq and q % 3 == res
            slot, row = q >> 3, q & 7
            assert slot < ROUND_SLOTS and slot * ROWS_PER_SLOT + row == q
            seen.append(q)
    assert sorted(seen) == list(range(nq))  # each segment by one warp pair (one warp per half)
    # the combine reads part[(t >> 3) * kPartBlk + 2 * (t & 7) + h] for segment t: the word written
    for h in (0, 1):
        words = {(q >> 3, 2 * (q & 7) + h) for k in range(WARP_PAIRS) for q, _ in items(nq, k)}
        assert words == {(t >> 3, 2 * (t & 7) + h) for t in range(nq)}


@pytest.mark.parametrize("q0", [0, 32, 64])
def test_thirds_follow_the_global_segment(q0):
    for nq in range(1, ROWS_ROUND + 1):
        for k in range(WARP_PAIRS):
            for q, res in items(nq, k):
                assert (q0 % 3 + res) % 3 == (q0 + q) % 3  # the kernel's t is the segment's own third


def test_x_loads_per_half():
    """At 128 blocks a down round is 8 rows x 3 segments: 24 loads of a half-third per half before,
    10 with the knob (a warp reloads only where its items change residue)."""
    def loads(nq):
        n = 0
        for k in range(WARP_PAIRS):
            last = None
            for _, res in items(nq, k):
                n += res != last
                last = res
        return n
    assert loads(24) == 10
    for nq in range(1, ROWS_ROUND + 1):
        assert loads(nq) <= nq  # never more than one load per segment (the default)
