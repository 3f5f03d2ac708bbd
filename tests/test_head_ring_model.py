"""A CPU model of the warp LM head's two claims (kernel/schedule_stream.cuh, Policy::kHeadWarp and
kHeadGroups; docs/EXPERIMENTS.md).

1. Parity waits are sound only when every consumer of a ring slot consumed the slot's previous copy
   itself. The model runs the ring (in-order producer, copies landing late, consumer warps in random
   order) with mbarrier parity semantics: a wait on copy c (phase m = c // kStages of its slot)
   returns at once when the slot's barrier is in phase m + 1 (c landed) but also in phase m - 1 (the
   slot's previous copy not landed yet: a stale "completed"). The kernel's assignments (12 warps on
   their own slots; NG groups with NG dividing kStages) never read a copy that has not landed; the
   first build's 16 warps round-robin over 12 slots does, which is the race it had.
2. A row's sum is the same for any number of rows per warp: warp_reduce_scatter's levels each add a
   lane and its partner (lane ^ o), the same xor-16/8/4/2/1 tree whatever R is, and fp32 addition
   commutes. The model is the kernel's shuffle tree in float32.
"""
import random

import numpy as np
import pytest

from monolith.kernel_spec import config_constants

STAGES = int(config_constants()["kStagesSm90"])  # (the sm_120 ring: tests/test_sm120_config.py)
WARPS = 16  # kStreamConsumerWarps


def assignment(kind: str, ng: int = STAGES):
    """warp -> (first head slot j, stride) and the number of warps reading each slot."""
    if kind == "round_robin":  # the first build: 16 warps, 12 slots
        return {w: (w, WARPS) for w in range(WARPS)}, 1
    g = WARPS // ng  # the kernel's G (12 groups: 1 warp each, warps 12 .. 15 idle)
    return {w: (w % ng, ng) for w in range(WARPS) if w // ng < g}, g


def run_ring(kind: str, ng: int, nslots: int, seed: int) -> list[str]:
    """Simulate one head; returns the violations (a wait that passed before its copy landed)."""
    rnd = random.Random(seed)
    warps, readers = assignment(kind, ng)
    landed = [0] * STAGES        # completed phases of each slot's `full` barrier
    released = [0] * nslots      # warps done with each copy
    issued, in_flight = 0, []    # copies the producer issued; copies not landed yet
    todo = {w: list(range(j, nslots, step)) for w, (j, step) in warps.items()}
    bad = []
    while any(todo.values()) or in_flight:
        actors = ["producer"] * (issued < nslots) + ["land"] * bool(in_flight) + [w for w in todo if todo[w]]
        a = rnd.choice(actors)
        if a == "producer":  # copy k needs copy k - STAGES released by all its readers
            k = issued
            if k < STAGES or released[k - STAGES] == readers:
                in_flight.append(k)
                issued += 1
        elif a == "land":  # any copy in flight may land first (the DRAM does not keep order)
            k = in_flight.pop(rnd.randrange(len(in_flight)))
            # a slot's copies land in order: copy k's phase completes after copy k - STAGES's
            slot = k % STAGES
            if landed[slot] == k // STAGES:
                landed[slot] += 1
            else:
                in_flight.append(k)
        else:
            c = todo[a][0]
            slot, m = c % STAGES, c // STAGES
            n = landed[slot]  # the barrier's current (incomplete) phase
            if (m & 1) != (n & 1):  # try_wait.parity(m & 1) passes
                if n != m + 1:
                    bad.append(f"warp {a} read copy {c} in phase {n}")
                    return bad
                todo[a].pop(0)
                released[c] += 1
    return bad


@pytest.mark.parametrize("ng", [STAGES, 6, 4, 2])
def test_kernel_assignments_never_read_a_copy_before_it_lands(ng):
    if STAGES % ng:
        pytest.skip("NG must divide kStages (static_assert in the kernel)")
    for seed in range(40):
        assert run_ring("groups", ng, nslots=75, seed=seed) == [], (ng, seed)


def test_round_robin_over_more_warps_than_slots_reads_stale_copies():
    """The model finds the first build's race (16 warps round-robin over 12 slots)."""
    found = [run_ring("round_robin", 0, nslots=75, seed=s) for s in range(40)]
    assert any(found), "the model should catch a wait passing a lap early"


def reduce_scatter(v: np.ndarray) -> np.ndarray:
    """warp_reduce_scatter<R> on [32, R] float32 lane values -> [32] (lane l: its row's sum)."""
    v = v.astype(np.float32).copy()
    lanes = np.arange(32)
    w, o = v.shape[1] // 2, 16
    while w >= 1:
        hi = (lanes & o) != 0
        keep = np.where(hi[:, None], v[:, w:2 * w], v[:, :w])
        send = np.where(hi[:, None], v[:, :w], v[:, w:2 * w])
        v = (keep + send[lanes ^ o]).astype(np.float32)
        w, o = w // 2, o // 2
    s = v[:, 0]
    while o >= 1:
        s = (s + s[lanes ^ o]).astype(np.float32)
        o //= 2
    return s


def scatter_row(r: int, lane: int) -> int:
    row, w, o = 0, r // 2, 16
    while w >= 1:
        row += w if lane & o else 0
        w, o = w // 2, o // 2
    return row


@pytest.mark.parametrize("r", [16, 8, 4, 2, 1])
def test_reduce_scatter_row_sums_do_not_depend_on_rows_per_warp(r):
    rng = np.random.default_rng(r)
    parts = rng.standard_normal((32, 16)).astype(np.float32) * 10 ** rng.uniform(-3, 3, (32, 16)).astype(np.float32)
    full = reduce_scatter(parts)  # 16 rows per warp (NG = 12)
    rows16 = {scatter_row(16, lane): full[lane] for lane in range(0, 32, 2)}
    assert sorted(rows16) == list(range(16))
    for base in range(0, 16, r):  # warp gw of a group: rows base .. base + r
        got = reduce_scatter(parts[:, base:base + r])
        for lane in range(0, 32, 32 // r):
            row = base + scatter_row(r, lane)
            assert got[lane].tobytes() == rows16[row].tobytes(), (r, row)
