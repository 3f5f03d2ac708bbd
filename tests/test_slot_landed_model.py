"""A CPU model of the landed count's claims (Policy::kSlotLanded, on for E4M3; kernel/stream_ring.cuh
producer_land, producer_publish_landed, the issue loop, and the consumers' acquire_n in
kernel/schedule_stream.cuh; docs/EXPERIMENTS.md).

The producer keeps a count in shared memory: copies 0 .. count - 1 have landed. Thread 0 of the
consumers skips the mbarrier tests of every slot below the count. Two claims carry it:
1. Every parity test producer_land makes is unambiguous. It tests copy L (phase m = L // kStages of
   its slot's `full` barrier) only while copy L - kStages has landed (it tests in ring order from
   the count, stopping at the first miss) and copy L + kStages has not been issued (issue() raises
   the count to k - kStages + 1 before it issues copy k). A test of copy L also passes when the
   barrier sits one phase behind (the previous copy not landed: a stale pass, unsafe), and fails when
   it sits a phase ahead (copy L + kStages landed too: the count would stall there for good, and every
   later round would fall back to its own tests); the model flags both.
2. The count never runs ahead of the copies that landed: the producer raises it past copy k - kStages
   only after the consumers handed that copy back (they had acquired it), and producer_land only past
   copies its own tests saw land. A consumer that skips its test on the count's word therefore never
   reads a copy in flight.
The model runs the ring with copies landing in any order across slots (in order within a slot),
the consumers' rounds of 1-8 slots, their hand-backs late and in any order, and the producer's
land() wherever the kernel calls it (the empty-slot wait, the hop hold, the drain). A build that
raises the count before the hand-back (a bug the model must catch) reads copies in flight.
"""
import random

import pytest

from monolith.kernel_spec import config_constants

STAGES = int(config_constants()["kStagesSm90"])  # (the sm_120 ring: tests/test_sm120_config.py)


def parity_passes(landed_phases: int, copy: int) -> bool:
    """mbarrier test_wait.parity((copy // STAGES) & 1) on a barrier with landed_phases completed phases."""
    return ((copy // STAGES) & 1) != (landed_phases & 1)


def run(ncopies: int, seed: int, publish_early: bool = False, publish_on_issue: bool = True) -> list[str]:
    rnd = random.Random(seed)
    landed = [0] * STAGES               # completed phases of each slot's `full` barrier
    in_flight: list[int] = []           # issued copies that have not landed
    handed_back = [False] * ncopies     # the consumers released the copy (its `empty` arrival)
    issued, count, kc = 0, 0, 0         # producer's k, the shared count, the consumers' next copy
    held: list[int] = []                # copies the consumers read and have not handed back yet
    bad: list[str] = []

    def has_landed(c: int) -> bool:
        return landed[c % STAGES] > c // STAGES

    def publish(n: int) -> None:
        nonlocal count
        count = max(count, n)
        for c in range(count):
            if not has_landed(c):
                bad.append(f"count {count} claims copy {c}, still in flight")

    def land() -> None:  # producer_land: test in ring order from the count, stop at the first miss
        n = count
        while n < issued and parity_passes(landed[n % STAGES], n):
            if not has_landed(n):
                bad.append(f"land() test of copy {n} passed on the slot's previous phase")
            n += 1
        if n < issued and has_landed(n):
            bad.append(f"land() test of copy {n} failed with the copy landed (its slot a lap ahead)")
        publish(n)

    while (kc < ncopies or held or in_flight) and not bad:
        actions = ["land_copy"] * bool(in_flight) + ["consume"] * (kc < ncopies) + ["hand_back"] * bool(held)
        actions += ["issue"] * (issued < ncopies) + ["land"]
        a = rnd.choice(actions)
        if a == "issue":  # issue(): the empty-slot wait (land() in its loop), then the count, then the copy
            k = issued
            if k >= STAGES and not handed_back[k - STAGES]:
                land()
                continue
            if publish_early and k + 1 >= STAGES:
                publish(k - STAGES + 2)  # the bug: one copy past the one handed back
            if k >= STAGES and publish_on_issue:
                publish(k - STAGES + 1)
            in_flight.append(k)
            issued += 1
        elif a == "land_copy":  # DRAM finishes any copy; a slot's phases still complete in order
            c = rnd.choice(in_flight)
            if landed[c % STAGES] == c // STAGES:
                landed[c % STAGES] += 1
                in_flight.remove(c)
        elif a == "land":  # the hop hold's and the empty wait's land() calls
            land()
        elif a == "consume":  # thread 0's acquire_n of a round: skip below the count, test the rest
            n = min(rnd.randint(1, 8), ncopies - kc, STAGES - len(held))
            if n <= 0 or kc + n > issued:
                continue
            skip = min(max(count - kc, 0), n)
            for c in range(kc, kc + n):
                if c >= kc + skip and not parity_passes(landed[c % STAGES], c):
                    break  # wait_slot: this round waits (the model retries it later)
            else:
                for c in range(kc, kc + n):
                    if not has_landed(c):
                        bad.append(f"consumers read copy {c} in flight (count {count}, round {kc}..{kc + n - 1})")
                held.extend(range(kc, kc + n))
                kc += n
        else:  # a hand-back, in any order (the warps' releases of a round's slots)
            handed_back[held.pop(rnd.randrange(len(held)))] = True
    # the drain: each remaining copy waited on in order, then published
    for j in range(max(issued - STAGES, 0), issued):
        landed[j % STAGES] = max(landed[j % STAGES], j // STAGES + 1)
        publish(j + 1)
    return bad


@pytest.mark.parametrize("seed", range(60))
def test_the_landed_count_never_claims_a_copy_in_flight(seed):
    assert run(ncopies=5 * STAGES + 7, seed=seed) == []


def test_without_the_count_raised_at_issue_the_tests_go_a_lap_stale():
    """The second negative control: without issue()'s raise of the count, the producer can issue a
    slot's next copy while the count still sits below the slot's previous one, and land() then
    tests a barrier that is a lap ahead of the copy it asks about."""
    failures = [run(ncopies=5 * STAGES + 7, seed=s, publish_on_issue=False) for s in range(60)]
    assert any(any("a lap ahead" in x for x in f) for f in failures)


def test_a_count_raised_before_the_hand_back_is_caught():
    """The negative control: raising the count one copy past the handed-back one (before the slot's
    consumers are done with the copy it claims) reads copies in flight in some interleaving."""
    failures = [run(ncopies=5 * STAGES + 7, seed=s, publish_early=True) for s in range(60)]
    assert any(any("in flight" in x for x in f) for f in failures), "the model cannot tell a premature count from a sound one"
