"""Shared fixtures (keep small). Heavy objects are session-scoped: the CI machine has 2 cores."""
import pytest


@pytest.fixture(scope="session")
def synth2(tmp_path_factory):
    """A 2-layer, full-width synthetic checkpoint (seed 1) written through `monolith synth`'s code."""
    from monolith.synth import write_synthetic
    return write_synthetic(tmp_path_factory.mktemp("ckpt") / "synth2", seed=1, num_layers=2, progress=False)


@pytest.fixture(scope="session")
def ckpt2(synth2):
    from monolith.checkpoint import load_checkpoint
    return load_checkpoint(synth2, allow_reduced_depth=True)
