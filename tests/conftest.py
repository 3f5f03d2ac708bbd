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


@pytest.fixture(scope="session")
def fp8pack2(synth2, tmp_path_factory):
    """synth2 packed as fp8 (`monolith pack --format fp8`'s code), shared by the quality and oracle
    tests; read-only (a test that needs a changed pack writes its own)."""
    from monolith.quant.pack_fp8 import pack_fp8
    out = tmp_path_factory.mktemp("fp8pack2") / "pack"
    pack_fp8(synth2, out, progress=False)
    return out


@pytest.fixture
def fake_registry(monkeypatch):
    """registry.build returns a harness_fakes.FakeEngine and records the checkpoint each engine was
    built on; every engine's spec runs without CUDA. Returns that {engine name: checkpoint} record."""
    from harness_fakes import FakeEngine

    from monolith.bench.baselines import registry
    built = {}

    def fake_build(name, ck, device):
        built[name] = ck
        return FakeEngine()

    monkeypatch.setattr(registry, "build", fake_build)
    monkeypatch.setattr(registry, "spec", lambda name: registry.Spec(name, name))  # no CUDA needed here
    return built


# the arch flag the fake loader's machine reports (tests compare the build's flags against it)
SM90A_GENCODE = "-gencode=arch=compute_90a,code=sm_90a"


@pytest.fixture
def fake_loader(monkeypatch, tmp_path):
    """megakernel.load_extension with torch's builder replaced, on a fake sm_90a machine, with no
    MONOLITH_NVCC_DEFINES set: returns the kwargs of every build asked for (build/ goes to tmp)."""
    from types import SimpleNamespace

    import torch

    from monolith import kernel_spec
    from monolith import megakernel as mk
    seen: list[dict] = []

    def fake_load(**kw):
        seen.append(kw)
        return SimpleNamespace()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mk, "_arch_flags", lambda: [SM90A_GENCODE])
    monkeypatch.setattr(mk, "_EXT", {})
    monkeypatch.setattr("torch.utils.cpp_extension.load", fake_load)
    monkeypatch.setattr(mk, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(kernel_spec.EXTRA_DEFINES_ENV, raising=False)
    return seen
