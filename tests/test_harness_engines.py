"""CPU smokes on the 2-layer synthetic checkpoint: HF baselines agree with the reference, and
the gate + bench protocol runs end to end on the reference (perf_counter timing: not headline)."""
import pytest
import torch

from monolith.bench import decode, suite
from monolith.bench.baselines import registry
from monolith.eval import correctness

PROMPT = [9707, 1879, 11, 374]


@pytest.fixture(scope="module")
def ref2(ckpt2):
    from monolith.reference import ReferenceEngine
    return ReferenceEngine(ckpt2, context_cap=64)


def test_hf_engines_match_reference(ckpt2, ref2):
    from monolith.bench.baselines.hf import HFEngine

    ref2.reset()
    f = ref2.prefill(PROMPT)
    want = [f, *ref2.decode(f, 3).tolist()]
    for mode in ("eager", "static"):
        hf = HFEngine(ckpt2.path, mode=mode, context_cap=16)
        for _ in range(1 if mode == "eager" else 2):  # second pass checks reset() of the static cache
            hf.reset()
            g = hf.prefill(PROMPT)
            assert [g, *hf.decode(g, 3).tolist()] == want
            assert hf.position == len(PROMPT) + 3
        hf.reset()
        hf.prefill(PROMPT)
        assert hf.teacher_forced(want[:-1]).tolist() == want[1:]
        assert hf.bytes_per_token(10) == ref2.bytes_per_token(10)
        del hf


def test_hf_parallel_logits_match_step_logits(ckpt2, ref2):
    """hf-parallel's one-forward logits agree with the per-step path (same HF model) and with
    the reference's argmax; its position advances like the step path's."""
    from monolith.bench.baselines.hf import HFEngine

    seq = PROMPT + [11, 374, 9707, 1879]
    step = HFEngine(ckpt2.path, mode="eager")
    par = HFEngine(ckpt2.path, mode="parallel")
    a, b = step.logits(seq), par.logits(seq)
    assert a.shape == b.shape == (len(seq), step.model.config.vocab_size)
    assert par.position == step.position == len(seq)
    assert (a - b).abs().max().item() < 0.05 * a.abs().max().item()
    assert a.argmax(-1).tolist() == b.argmax(-1).tolist()
    ref2.reset()
    assert ref2.logits(seq).argmax(-1).tolist() == b.argmax(-1).tolist()
    par.reset()
    par.prefill(PROMPT)
    assert par.teacher_forced(seq[len(PROMPT):]).tolist() == b.argmax(-1)[len(PROMPT):].tolist()
    assert par.info["logits_path"].startswith("one parallel")


def test_gate_and_bench_on_reference_cpu(ckpt2, ref2, monkeypatch):
    from monolith.reference import ReferenceEngine

    monkeypatch.setattr(registry, "build", lambda name, ck, dev: ref2)
    orc = ReferenceEngine(ckpt2, compute_dtype=torch.float32, context_cap=64)
    oset = correctness.oracle_runs(orc, [PROMPT[:2]], 3)
    cfg = suite.SuiteConfig(engines=["reference"], device="cpu", det_repeats=2, bench=decode.BenchConfig(
        runs=2, tokens=2, prompts=1, warmup_tokens=1, sweep_positions=(3,), sweep_window=1, sweep_reps=1, power=False))
    row = suite.measure("reference", registry.spec("reference"), ckpt2, None, [PROMPT[:2]], PROMPT, oset, cfg, None, 4.53)
    assert row["gate"]["passed"], row["gate"]["reasons"]
    assert row["status"] == "ok" and row["timer"] == "perf_counter (CPU)"
    assert row["tok_s"]["median"] > 0 and row["sweep"]["3"]["status"] == "ok"
    # 2-layer byte model: weights + KV of the decoded positions
    assert 370e6 < row["bytes_per_token"] < 380e6


def test_cli_help_lists_harness_commands():
    from typer.testing import CliRunner

    from monolith.cli import app

    r = CliRunner().invoke(app, ["--help"])
    for cmd in ("bench", "eval", "m1", "reproduce"):
        assert cmd in r.output
    assert CliRunner().invoke(app, ["eval", "quality", "--help"]).exit_code == 0


def test_fp32_sanity_pair_matches_tightly(ckpt2):
    """The quality sanity's pair (HF fp32 parallel vs reference fp32 on the bf16 weights): same
    math, so the logits agree to fp32 noise, far tighter than any bf16 pair."""
    seq = PROMPT + [11, 374, 9707, 1879]
    hf = registry.build("hf-parallel-fp32", ckpt2, "cpu")
    ref = registry.build("reference-fp32", ckpt2, "cpu")
    assert hf.name == "hf-parallel-fp32" and hf.info["compute_dtype"] == "float32"
    a, b = hf.logits(seq), ref.logits(seq)
    assert (a - b).abs().max().item() < 1e-3 * a.abs().max().item()


def test_deterministic_variant_restores_global_state(ckpt2):
    """hf-static-det turns torch's deterministic algorithms on around its own forwards only."""
    before = torch.are_deterministic_algorithms_enabled()
    hf = registry.build("hf-static-det", ckpt2, "cpu")
    assert hf.name == "hf-static-det" and hf.info["deterministic_algorithms"] and hf.mode == "static"
    seen = []
    orig = hf.model.forward
    hf.model.forward = lambda *a, **k: (seen.append(torch.are_deterministic_algorithms_enabled()), orig(*a, **k))[1]
    hf._step_fn = hf.model.forward
    hf.reset()
    g = hf.prefill(PROMPT)
    hf.decode(g, 2)
    assert seen == [True, True, True]
    assert torch.are_deterministic_algorithms_enabled() == before
