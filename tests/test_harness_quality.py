"""Quality maths on tiny known distributions, and the passes with fake engines."""
import math

import pytest
import torch
from harness_fakes import FakeEngine, V, swap_top2_when

from monolith.engine import Engine
from monolith.eval import quality as Q


def test_nll_and_kl_known_values():
    lg = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    assert float(Q.nll(lg, torch.tensor([1]))) == pytest.approx(math.log(4))
    p, q = torch.log(torch.tensor([[0.5, 0.5]])), torch.log(torch.tensor([[0.9, 0.1]]))
    want = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert float(Q.kl(p, q)) == pytest.approx(want, rel=1e-5)
    assert float(Q.kl(p, p)) == pytest.approx(0.0, abs=1e-7)
    # logits shift-invariance: KL of the same distribution written with offset logits is 0
    assert float(Q.kl(q, q + 7.0)) == pytest.approx(0.0, abs=1e-6)


def test_windows_cover_every_token_once():
    for n, c, s in [(100, 32, 32), (100, 32, 16), (10, 32, 16)]:
        scored = []
        for start, end, first in Q.windows(n, c, s):
            scored += [start + i + 1 for i in range(first, end - start - 1)]
        assert len(scored) == len(set(scored))
        if c == s:
            assert len(scored) == n - len(Q.windows(n, c, s))  # disjoint: one unscored token per window
        else:
            assert sorted(scored) == list(range(1, n))


class Uniform(Engine):
    name = "uniform"
    vocab_size = V

    def reset(self):
        self.position = 0

    def _prefill(self, tokens):
        return 0

    def _decode(self, first_token, n):
        return torch.zeros(n, dtype=torch.long)

    def _teacher_forced(self, tokens):
        return torch.zeros(len(tokens), dtype=torch.long)

    def _logits(self, tokens):
        return torch.zeros(len(tokens), V)

    def bytes_per_token(self, position):
        return 0


def test_perplexity_of_uniform_is_vocab_size_and_kl_zero():
    u = Uniform()
    r = Q.perplexity_kl(u, u, list(range(V)) * 4, context=16, stride=16, kl_positions=50)
    assert r["ppl"] == pytest.approx(V) and r["ref_ppl"] == pytest.approx(V)
    assert r["kl"] == 0.0 and r["kl_positions"] == 50 and r["context"] == 16


def test_fake_engine_quality_numbers():
    ref, same = FakeEngine(), FakeEngine()
    toks = [i % V for i in range(7, 7 + 200)]
    r = Q.perplexity_kl(ref, same, toks, context=40, stride=40, kl_positions=100, max_positions=120)
    assert r["kl"] == pytest.approx(0.0, abs=1e-6) and r["ppl_ratio"] == pytest.approx(1.0)
    assert r["positions"] == 120
    worse = FakeEngine(flip=lambda pos, lg: lg * 0.5)  # flatter distribution: KL > 0, ppl changes
    r2 = Q.perplexity_kl(ref, worse, toks, context=40, stride=40, kl_positions=100)
    assert r2["kl"] > 0.01 and r2["ppl"] != pytest.approx(r2["ref_ppl"])
    a = Q.agreement(ref, FakeEngine(), [[1, 2], [3]], n=16)
    assert a["agreement"] == 1.0 and a["free_running_prefix_frac"] == 1.0
    flipper = FakeEngine(flip=swap_top2_when(lambda pos, m: m < 0.05))
    b = Q.agreement(ref, flipper, [[1, 2], [3]], n=16)
    assert 0.5 < b["agreement"] < 1.0


def test_agreement_without_free_running_never_decodes():
    class NoDecode(FakeEngine):
        def _decode(self, first, n):  # the measure must not call it
            raise AssertionError("decode called with free_running=False")

    ref = FakeEngine()
    a = Q.agreement(ref, NoDecode(), [[1, 2], [3]], n=16, free_running=False)
    assert a["agreement"] == 1.0 and a["free_running_prefix_frac"] is None
    flipper = FakeEngine(flip=swap_top2_when(lambda pos, m: m < 0.05))
    b = Q.agreement(ref, flipper, [[1, 2], [3]], n=16, free_running=False)
    assert 0.5 < b["agreement"] < 1.0


def test_many_engines_in_one_pass_give_each_engine_its_own_figures():
    """compare_quantized measures the fp8 engine and the bf16 floor in one pass over the reference
    (the fp32 reference is the expensive engine on the GPU): the figures must equal separate passes,
    and the reference must run each window and each prompt once."""
    class Counting(FakeEngine):
        def __init__(self):
            super().__init__()
            self.logit_calls = self.prefills = 0

        def _logits(self, tokens):
            self.logit_calls += 1
            return super()._logits(tokens)

        def _prefill(self, tokens):
            self.prefills += 1
            return super()._prefill(tokens)

    toks = [i % V for i in range(7, 7 + 200)]
    prompts = [[1, 2], [3], [4, 5, 6]]
    a = FakeEngine(flip=lambda pos, lg: lg * 0.5)
    b = FakeEngine(flip=swap_top2_when(lambda pos, m: m < 0.05))
    ref = Counting()
    many = Q.perplexity_kl_many(ref, [a, b, ref], toks, context=40, stride=30, kl_positions=70, max_positions=150)
    assert ref.logit_calls == 5  # once per window (39 + 30 + 30 + 30 + 21 scored = 150), not once per engine
    for e, got in zip((a, b, ref), many, strict=True):
        want = Q.perplexity_kl(FakeEngine(), e, toks, context=40, stride=30, kl_positions=70, max_positions=150)
        assert got == pytest.approx(want)
    assert many[2]["kl"] == 0.0 and many[0]["kl"] > 0.01 and many[0]["positions"] == 150
    ag = Q.agreement_many(ref, [a, b], prompts, n=16)
    assert ref.prefills == len(prompts)
    for e, got in zip((a, b), ag, strict=True):
        assert got == Q.agreement(FakeEngine(), e, prompts, n=16)
    assert 0.5 < ag[1]["agreement"] < 1.0
    both = Q.compare_quantized(FakeEngine(), a, b, toks, prompts, positions=60, context=40, stride=40,
                               agree_tokens=8, free_running=False)
    assert both["engine"]["positions"] == both["floor"]["positions"] == 60
    assert both["gates"]["floor"]["agreement"] == both["floor"]["agreement"]
    assert both["engine"]["ppl_ratio"] == pytest.approx(
        Q.perplexity_kl(FakeEngine(), a, toks, context=40, stride=40, kl_positions=60, max_positions=60)["ppl_ratio"])
