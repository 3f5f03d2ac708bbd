"""k-pass host model (monolith/kpass.py) on CPU: bitwise batch invariance, speculative == greedy,
KV rollback, drafts, pricing, errors. 2-layer synthetic checkpoint, bf16 reference."""

import math

import pytest
import torch

from monolith.errors import MonolithError
from monolith.kpass import (
    PRICED_T_RATIO,
    KPassStep,
    ReferenceKPass,
    batched_generate,
    breakeven_alpha,
    kpass_speedup,
    perfect_draft,
    prompt_lookup_draft,
    speculative_generate,
)
from monolith.reference import ReferenceEngine

CAP = 40
N = 10
PROMPTS = {
    "a": [9707, 1879, 11, 220],
    "b": [5, 6, 7, 5, 6, 7, 5, 6],  # repeats: the lookup draft proposes from the first pass on
    "c": [100, 2000, 30000, 400, 5000, 60000, 700],
}


@pytest.fixture(scope="module")
def engine(ckpt2):
    return ReferenceEngine(ckpt2, context_cap=CAP)


@pytest.fixture(scope="module")
def step(engine):
    return ReferenceKPass(engine, slots=8)


@pytest.fixture(scope="module")
def greedy(engine):
    """Per prompt: (N greedy tokens, logits of every fed position [L + N - 1, vocab]) from the
    engine's own one-token step, independent of kpass."""
    out = {}
    for name, p in PROMPTS.items():
        engine.reset()
        rows = [engine.step(t)[0] for t in p]
        toks = [int(torch.argmax(rows[-1]))]
        while len(toks) < N:
            rows.append(engine.step(toks[-1])[0])
            toks.append(int(torch.argmax(rows[-1])))
        out[name] = toks, torch.stack(rows)
    engine.reset()
    return out


def _prefill_neighbours(step, target_slot, k):
    """k - 1 neighbour slots with histories of 1..3 tokens (fed in mixed-slot causal passes of 8);
    returns {slot: next token id}."""
    nb = [s for s in range(8) if s != target_slot][: k - 1]
    entries = [(1000 * s + j, s, j) for s in nb for j in range(s % 3 + 1)]
    for i in range(0, len(entries), 8):
        step(entries[i : i + 8])
    return {s: 1000 * s + 77 for s in nb}


def test_rows_bitwise_invariant_to_k_slot_and_neighbours(step, engine, greedy):
    toks, rows = greedy["a"]
    seq = PROMPTS["a"] + toks[:2]
    want = rows[: len(seq)]
    for k, slot in ((1, 0), (2, 5), (4, 2), (8, 7)):
        step.reset()
        nb = _prefill_neighbours(step, slot, k)
        got = []
        for p, t in enumerate(seq):
            ents = [(tok, s, step.lengths[s]) for s, tok in nb.items()]
            ents.insert(p % k, (t, slot, p))  # the target's index in the pass moves around
            r = step(ents)
            got.append(r[p % k])
        assert torch.equal(torch.stack(got), want), (k, slot)
    # verify-style: the sequence in causal chunks of 3 beside 5 neighbours at other positions
    step.reset()
    nb = _prefill_neighbours(step, 4, 6)
    got = []
    for i in range(0, len(seq), 3):
        ents = [(tok, s, step.lengths[s]) for s, tok in nb.items()][:5]
        chunk = [(t, 4, i + j) for j, t in enumerate(seq[i : i + 3])]
        got.append(step(ents[:2] + chunk + ents[2:])[2 : 2 + len(chunk)])
    assert torch.equal(torch.cat(got), want)
    assert engine.position == 0  # the engine's own state is restored after every pass


def test_rollback_never_reads_rejected_positions(step, greedy):
    toks, rows = greedy["c"]
    seq = PROMPTS["c"] + toks[:3]
    L = len(PROMPTS["c"])
    step.reset()
    assert torch.equal(step([(t, 3, j) for j, t in enumerate(seq[:L])]), rows[:L])
    kept = step.kv[3][..., :L, :].clone()
    step([(11, 3, L), (12, 3, L + 1), (13, 3, L + 2)])  # a rejected draft
    step.truncate(3, L)
    assert step.lengths[3] == L and torch.equal(step.kv[3][..., :L, :], kept)
    step.kv[3][..., L:, :] = float("nan")  # stale K/V: reading any of them would poison the rows
    got = step([(seq[L], 3, L), (seq[L + 1], 3, L + 1), (seq[L + 2], 3, L + 2)])
    assert torch.equal(got, rows[L : L + 3])
    with pytest.raises(MonolithError, match="cannot truncate slot 3 to 11: it holds 10"):
        step.truncate(3, 11)
    step.kv[3][..., 2, :] = float("nan")  # a valid position poisoned: the pass is refused, not advanced
    with pytest.raises(MonolithError, match=r"non-finite logits in row 0 \(slot 3, position 10\)"):
        step([(1, 3, L + 3)])
    assert step.lengths[3] == L + 3
    step.reset()


def _wrong(cont):
    ok = perfect_draft(cont)
    return lambda ctx, k: [(t + 1) % 151_936 for t in ok(ctx, k)]


def _first_right(cont):
    ok = perfect_draft(cont)
    return lambda ctx, k: [t if j == 0 else (t + 1) % 151_936 for j, t in enumerate(ok(ctx, k))]


def test_speculative_equals_greedy(step, greedy):
    for name, p in PROMPTS.items():
        toks, _ = greedy[name]
        cont = p + toks
        L = len(p)
        r = speculative_generate(step, p, N, prompt_lookup_draft, 4, slot=1)
        assert r.tokens == toks, name
        if name == "b":
            assert r.drafted > 0
        print(f"lookup draft, prompt {name}: acceptance {r.acceptance_rate:.2f} over {r.drafted} drafted")
        k = {"a": 2, "b": 4, "c": 8}[name]
        r = speculative_generate(step, p, N, perfect_draft(cont), k, slot=6)
        # perfect draft: every pass accepts all k - 1 (the last one fewer when n runs out)
        assert r.tokens == toks and r.passes == math.ceil(N / k) and r.accepted == N - r.passes, name
        assert r.acceptance_rate == 1.0 and r.prefill_passes == math.ceil((L - 1) / k)
    toks, _ = greedy["a"]
    r = speculative_generate(step, PROMPTS["a"], N, _wrong(PROMPTS["a"] + toks), 4, slot=0)
    assert r.tokens == toks and r.passes == N and r.accepted == 0
    assert r.drafted == sum(min(3, N - 1 - i) for i in range(N)) and r.acceptance_rate == 0.0
    r = speculative_generate(step, PROMPTS["a"], N, None, 1)
    assert r.tokens == toks and r.passes == N and r.drafted == 0
    toks, rows = greedy["c"]
    r = speculative_generate(step, PROMPTS["c"], N - 1, _first_right(PROMPTS["c"] + toks), 4, slot=2)
    assert r.tokens == toks[: N - 1] and r.accepted == 4 and r.passes == 5  # 2 tokens a pass, then 1
    # after all those rejections, decoding on equals decoding without speculation, bit for bit
    last = len(PROMPTS["c"]) + N - 2
    assert step.lengths[2] == last
    assert torch.equal(step([(toks[N - 2], 2, last)])[0], rows[last])


def test_batched_equals_greedy_per_sequence(step, greedy):
    names = ["c", "a", "b"]  # prompt lengths 7, 4, 8: mixed positions in every pass
    r = batched_generate(step, [PROMPTS[n] for n in names], N)
    assert r.tokens == [greedy[n][0] for n in names]
    lens = [len(PROMPTS[n]) for n in names]
    assert r.passes == max(lens) + N - 1 and r.entries == sum(L + N - 1 for L in lens)


def test_prompt_lookup_draft():
    assert prompt_lookup_draft([1, 2, 3, 9, 1, 2, 3], 4) == [9, 1, 2]
    assert prompt_lookup_draft([1, 2, 7, 1, 2, 8, 1, 2], 4, ngram=2) == [8, 1, 2]  # newest match
    ctx = [4, 2, 9, 3, 2, 7, 4, 2]
    assert prompt_lookup_draft(ctx, 4, ngram=3) == [9, 3, 2]  # longest n-gram first
    assert prompt_lookup_draft(ctx, 4, ngram=1) == [7, 4, 2]
    assert prompt_lookup_draft([1, 2, 1, 2], 8, ngram=2) == [1, 2, 1, 2, 1, 2, 1]  # copies its own output
    assert prompt_lookup_draft([1, 2, 3], 4) == [] and prompt_lookup_draft([], 4) == []
    assert prompt_lookup_draft([1, 2, 1, 2], 1) == []
    d = perfect_draft([1, 2, 3, 4, 5])
    assert d([1, 2], 3) == [3, 4] and d([1, 2, 3, 4], 4) == [5]
    with pytest.raises(MonolithError, match="not a prefix"):
        d([1, 3], 3)
    with pytest.raises(MonolithError, match=r"k must be in 1\.\.8, got 9"):
        prompt_lookup_draft([1], 9)
    with pytest.raises(MonolithError, match="ngram must be >= 1"):
        prompt_lookup_draft([1], 4, ngram=0)


def test_pricing():
    t = PRICED_T_RATIO["fp8-stream"]
    assert kpass_speedup(t[4], 3) == pytest.approx(4 / 1.27)  # perfect draft at k = 4
    assert kpass_speedup(t[4], 0.27) == pytest.approx(1.0)  # the break-even acceptance
    assert kpass_speedup(t[8], 0) < 1  # a draft that never lands costs T(k)/T(1)
    for k, want in ((2, 0.100), (4, 0.214), (8, 0.416)):
        a = breakeven_alpha(t[k], k)
        assert a == pytest.approx(want, abs=1e-3)
        assert (1 - a**k) / (1 - a) == pytest.approx(t[k])
    for bad in (float("nan"), 0.0, -1.0):
        with pytest.raises(MonolithError, match="T\\(k\\)/T\\(1\\) must be a finite number > 0"):
            kpass_speedup(bad, 1)
    with pytest.raises(MonolithError, match="acceptance"):
        kpass_speedup(1.2, float("inf"))
    with pytest.raises(MonolithError, match="cannot be paid"):
        breakeven_alpha(4.5, 4)


class _NaNStep(KPassStep):
    def _run(self, tokens, slots, positions):
        rows = torch.zeros(len(tokens), self.vocab_size)
        rows[-1, 3] = float("inf")
        return rows


def test_errors(step):
    step.reset()
    with pytest.raises(MonolithError, match=r"a k-pass takes 1\.\.8 entries, got 0"):
        step([])
    with pytest.raises(MonolithError, match="got 9"):
        step([(1, s, 0) for s in range(8)] + [(1, 0, 1)])
    with pytest.raises(MonolithError, match=f"entry 0's position {CAP} is past the KV cache"):
        step([(1, 0, CAP)])
    with pytest.raises(MonolithError, match="entry 1 is at position 2 but slot 0 must be fed at position 1"):
        step([(1, 0, 0), (1, 0, 2)])
    with pytest.raises(MonolithError, match="token id 151936 is outside"):
        step([(151_936, 0, 0)])
    with pytest.raises(MonolithError, match="slot 8 is outside 0..7"):
        step([(1, 8, 0)])
    assert step.lengths == [0] * 8  # a refused pass changes nothing
    for k in (0, 9):
        with pytest.raises(MonolithError, match=f"k must be in 1..8, got {k}"):
            speculative_generate(step, [1, 2], 3, prompt_lookup_draft, k)
    with pytest.raises(MonolithError, match="the prompt is empty"):
        speculative_generate(step, [], 3, prompt_lookup_draft, 4)
    with pytest.raises(MonolithError, match="prompt 1 is empty"):
        batched_generate(step, [[1], []], 3)
    with pytest.raises(MonolithError, match=f"need 41 positions; the KV cache holds {CAP}"):
        speculative_generate(step, [1, 2], CAP, prompt_lookup_draft, 4)
    with pytest.raises(MonolithError, match=r"takes 1\.\.8 prompts, got 9"):
        batched_generate(step, [[1]] * 9, 3)
    with pytest.raises(MonolithError, match="the draft returned 4 tokens for k = 4: at most 3"):
        speculative_generate(step, [1, 2], 5, lambda ctx, k: [1] * k, 4)
    with pytest.raises(MonolithError, match="n must be >= 0"):
        speculative_generate(step, [1, 2], -1, None, 1)
    nan = _NaNStep(slots=2, context_cap=8, vocab_size=16)
    with pytest.raises(MonolithError, match=r"non-finite logits in row 1 \(slot 1, position 0\)"):
        nan([(1, 0, 0), (2, 1, 0)])
    assert nan.lengths == [0, 0]
    with pytest.raises(MonolithError, match="non-finite logits"):
        speculative_generate(nan, [1, 2, 3], 2, None, 1)
