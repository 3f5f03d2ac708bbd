"""The seed range (kernel/schedule_stream.cuh, seed_o): block b seeds residual element i when
(i * G) >> log2(kHidden) == b. The residual words count one seed per element, so the rule must give
every element exactly one seeding block, for every grid size the host may launch; and it must use
every block (none idles while another seeds twice as many). Checked here for all G up to kHidden,
against the kernel's own expression read from the source."""

import numpy as np
import pytest

from monolith import REPO_ROOT, kernel_spec

SRC = "".join(p.read_text() for p in [*sorted((REPO_ROOT / "kernel").glob("stream_*.cuh")),
                                      *sorted((REPO_ROOT / "kernel").glob("phase_*.cuh")),
                                      REPO_ROOT / "kernel" / "schedule_stream.cuh"])
HIDDEN = int(kernel_spec.config_constants()["kHidden"])
SHIFT = HIDDEN.bit_length() - 1


def owner(i: np.ndarray, g: int) -> np.ndarray:
    return (i * g) >> SHIFT


def test_the_kernel_uses_this_expression():
    assert "(i * G) >> kHiddenShift == b" in SRC
    assert 1 << SHIFT == HIDDEN


@pytest.mark.parametrize("g", [1, 2, 3, 7, 64, 127, 128, 129, 132, 264, 1000, HIDDEN])
def test_every_element_has_one_seeding_block_and_every_block_seeds(g):
    i = np.arange(HIDDEN)
    own = owner(i, g)
    assert own.min() == 0 and own.max() == g - 1  # in range: each element's one owner is a real block
    counts = np.bincount(own, minlength=g)
    assert counts.min() >= HIDDEN // g and counts.max() <= -(-HIDDEN // g)  # balanced, none empty


def test_all_grid_sizes():
    i = np.arange(HIDDEN)
    for g in range(1, HIDDEN + 1):
        counts = np.bincount(owner(i, g), minlength=g)
        assert len(counts) == g and counts.min() >= 1, g


def test_negative_control_a_wrong_shift_fails_the_range_check():
    # the check above can fail: a shift one too small sends elements to blocks that do not exist
    i = np.arange(HIDDEN)
    assert ((i * 128) >> (SHIFT - 1)).max() > 127
