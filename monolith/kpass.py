"""k tokens per pass (issue 48): the host side and its executable model.

One k-pass takes k <= 8 entries (token, slot, position) and returns k fp32 logit rows. Each slot is
one sequence with its own KV cache; an entry writes K/V at (slot, position) and attends over that
slot's positions 0..position. Entries of one slot in one pass sit at consecutive positions starting
at the slot's cached length, in list order, and are causal among themselves (entry j sees the K/V
of the slot's earlier entries in the same pass). Two uses of the one interface:
- batched decode (`batched_generate`): k independent sequences, one entry each, mixed positions;
- speculative verify (`speculative_generate`): the last accepted token and k - 1 draft tokens of
  one sequence at positions p..p+k-1; the longest prefix of the draft whose rows' argmaxes
  reproduce it is accepted, plus the argmax after it (the corrected or bonus token); the slot's
  cache is then truncated past the rejected positions.

The invariant every implementation keeps (batch invariance, bitwise): the row of entry
(token t, slot s, position p) is a function of t, p and slot s's K/V at positions 0..p-1 only, so
it has the same bits for any k, any index of the entry in the pass, any neighbours in other slots
and any positions of theirs; by induction a slot's K/V depend only on the tokens fed to it. The
row therefore equals, bit for bit, what the same implementation returns for that entry alone
(k = 1). `ReferenceKPass` keeps it by construction: it runs each entry through
ReferenceEngine's own one-token step (`_forward`, the k = 1 path) with the slot's cache swapped
in, one entry after another in list order. A kernel keeps it by design (split boundaries depend
on the position only, one reduction order, masked entries add exact zeros) and is diffed against
itself at k = 1 bitwise and against this reference within the gate's tolerance. Consequence:
speculation never changes the output; its tokens equal greedy k = 1 decoding exactly.

Pricing (a derivation from issue 48's priced table, not a measurement). A verify pass of k
entries costs T(k) and yields 1 + a tokens, a = accepted draft tokens (0 <= a <= k - 1); the
single-token path yields 1 token per T(1). So speedup = E[1 + a] / (T(k)/T(1)) (`kpass_speedup`)
and a verify pays for itself when E[a] >= T(k)/T(1) - 1. results/ktoken/ktoken_summary.json has
only the hop part of T(k)/T(1), so the full ratios are the issue's (fp8-stream; bf16 in brackets).
notes/ktoken.md's design section re-prices them from the probe rows (fp8-stream 1.31 / 1.44 / 1.81
against today's kernel, 1.13 at k = 4 against the k-pass kernel's own k = 1); the table below keeps
the issue's ratios, which PRICED_T_RATIO holds, until a measured T(k) replaces both:

| k | T(k)/T(1)   | break-even a per pass | as a share of k-1 drafted | i.i.d. alpha | perfect draft |
|---|-------------|-----------------------|---------------------------|--------------|---------------|
| 2 | 1.10 (1.14) | 0.10 (0.14)           | 10.0 % (14.0 %)           | 0.100 (0.140) | 1.82x (1.75x) |
| 4 | 1.27 (1.29) | 0.27 (0.29)           |  9.0 % ( 9.7 %)           | 0.214 (0.227) | 3.15x (3.10x) |
| 8 | 1.71 (1.69) | 0.71 (0.69)           | 10.1 % ( 9.9 %)           | 0.416 (0.409) | 4.68x (4.73x) |

"i.i.d. alpha": if each draft token is right with probability alpha independently, the accepted
prefix gives E[1 + a] = (1 - alpha^k) / (1 - alpha); `breakeven_alpha` solves that for
T(k)/T(1). "perfect draft": a = k - 1 every pass, k / (T(k)/T(1)), the upper bound; batched decode
of k sequences has the same k tokens per pass in aggregate. T(1) is today's single-token kernel (the
k-pass kernel's own k = 1 costs 1.02). A draft shorter than k - 1 runs a smaller pass, which the
table does not price.
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from monolith.errors import MonolithError
from monolith.reference import ReferenceEngine

MAX_K = 8
#: issue 48's priced T(k)/T(1) (chain model, not measured), per variant.
PRICED_T_RATIO = {"fp8-stream": {2: 1.10, 4: 1.27, 8: 1.71}, "bf16-stream": {2: 1.14, 4: 1.29, 8: 1.69}}

#: draft(context, k) -> up to k - 1 proposed next tokens (fewer, or none, is allowed).
Draft = Callable[[Sequence[int], int], Sequence[int]]


def _int(x, what: str) -> int:
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        raise MonolithError(f"{what} must be an integer, got {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise MonolithError(f"{what} must be an integer, got {x!r} ({type(x).__name__})") from None


def _check_k(k, limit: int = MAX_K) -> int:
    k = _int(k, "k")
    if not 1 <= k <= limit:
        raise MonolithError(f"k must be in 1..{limit}, got {k}")
    return k


class KPassStep(ABC):
    """One k-pass over per-slot KV caches. `__call__` checks the entries, runs `_run`, checks the
    rows and only then advances the slots' lengths; `truncate` is the rollback. An implementation
    (the reference below, later the kernel) provides `_run` and `_reset_slot`."""

    max_k: int = MAX_K

    def __init__(self, slots: int, context_cap: int, vocab_size: int):
        self.slots, self.context_cap, self.vocab_size = int(slots), int(context_cap), int(vocab_size)
        self.lengths = [0] * self.slots  # positions 0..length-1 of each slot's cache are valid

    def __call__(self, entries: Sequence[tuple[int, int, int]]) -> torch.Tensor:
        """k entries (token, slot, position) -> fp32 logits [k, vocab], row j for entry j."""
        entries = list(entries)
        if not 1 <= len(entries) <= self.max_k:
            raise MonolithError(f"a k-pass takes 1..{self.max_k} entries, got {len(entries)}")
        nxt = {}  # the next position each slot must be fed at, within this pass
        toks, slots, poss = [], [], []
        for j, e in enumerate(entries):
            if not isinstance(e, Sequence) or len(e) != 3:
                raise MonolithError(f"entry {j} must be (token, slot, position), got {e!r}")
            t, s, p = (_int(v, f"entry {j}'s {w}") for v, w in zip(e, ("token", "slot", "position"), strict=True))
            if not 0 <= t < self.vocab_size:
                raise MonolithError(f"entry {j}'s token id {t} is outside the vocabulary [0, {self.vocab_size})")
            if not 0 <= s < self.slots:
                raise MonolithError(f"entry {j}'s slot {s} is outside 0..{self.slots - 1}")
            if not 0 <= p < self.context_cap:
                raise MonolithError(
                    f"entry {j}'s position {p} is past the KV cache (it holds {self.context_cap} positions)"
                )
            want = nxt.get(s, self.lengths[s])
            if p != want:
                raise MonolithError(
                    f"entry {j} is at position {p} but slot {s} must be fed at position {want} next "
                    f"(its cache holds {self.lengths[s]}; truncate to go back)"
                )
            nxt[s] = p + 1
            toks.append(t)
            slots.append(s)
            poss.append(p)
        rows = self._run(toks, slots, poss)
        if rows.shape != (len(entries), self.vocab_size) or rows.dtype != torch.float32:
            raise MonolithError(
                f"the k-pass returned {tuple(rows.shape)} {rows.dtype}, "
                f"expected ({len(entries)}, {self.vocab_size}) float32"
            )
        bad = ~torch.isfinite(rows).all(dim=1)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise MonolithError(
                f"non-finite logits in row {j} (slot {slots[j]}, position {poss[j]}); the pass is discarded"
            )
        for s, p in nxt.items():
            self.lengths[s] = p
        return rows

    def truncate(self, slot: int, position: int) -> None:
        """Roll slot back so that its cache holds positions 0..position-1 (K/V past it are stale
        and never read: the next entry overwrites position `position` before attending)."""
        slot, position = _int(slot, "slot"), _int(position, "position")
        if not 0 <= slot < self.slots:
            raise MonolithError(f"slot {slot} is outside 0..{self.slots - 1}")
        if not 0 <= position <= self.lengths[slot]:
            raise MonolithError(f"cannot truncate slot {slot} to {position}: it holds {self.lengths[slot]} positions")
        self.lengths[slot] = position

    def reset(self, slot: int | None = None) -> None:
        for s in range(self.slots) if slot is None else [slot]:
            self.truncate(s, 0)
            self._reset_slot(s)

    @abstractmethod
    def _run(self, tokens: list[int], slots: list[int], positions: list[int]) -> torch.Tensor: ...

    def _reset_slot(self, slot: int) -> None:
        return  # stale K/V are never read (entries start at the length), so clearing is optional


class ReferenceKPass(KPassStep):
    """The executable model: every entry through ReferenceEngine's k = 1 step with its slot's own
    KV cache, so every row has exactly the bits of the single-token path (see the module doc).
    The engine's own cache and position are restored after each pass."""

    def __init__(self, engine: ReferenceEngine, slots: int = MAX_K):
        if not 1 <= _int(slots, "slots"):
            raise MonolithError(f"slots must be >= 1, got {slots}")
        super().__init__(slots, engine.context_cap, engine.vocab_size)
        self.engine = engine
        self.kv = [torch.zeros_like(engine.kv) for _ in range(self.slots)]
        self._pos = torch.zeros((), dtype=torch.long, device=engine.device)

    @torch.inference_mode()
    def _run(self, tokens, slots, positions):
        e = self.engine
        saved = e.kv, e.pos_t, e.position
        rows = []
        try:
            e.pos_t = self._pos
            for t, s, p in zip(tokens, slots, positions, strict=True):
                e.kv, e.position = self.kv[s], p
                self._pos.fill_(p)
                rows.append(e._forward(torch.tensor([t], dtype=torch.long, device=e.device))[0])
        finally:
            e.kv, e.pos_t, e.position = saved
        return torch.stack(rows)

    def _reset_slot(self, slot):
        self.kv[slot].zero_()


def _argmax(rows: torch.Tensor) -> list[int]:
    return torch.argmax(rows, dim=-1).tolist()  # the k = 1 path's argmax: first index of the max


def _check_prompt(prompt, what: str = "the prompt") -> list[int]:
    p = [_int(t, f"{what}'s token") for t in prompt]
    if not p:
        raise MonolithError(f"{what} is empty: it needs at least one token")
    return p


def _check_fit(step: KPassStep, prompt_len: int, n: int, what: str = "the prompt") -> None:
    if prompt_len + n - 1 > step.context_cap:
        raise MonolithError(
            f"{what} ({prompt_len} tokens) and n = {n} need {prompt_len + n - 1} positions; "
            f"the KV cache holds {step.context_cap}"
        )


@dataclass
class SpecResult:
    tokens: list[int]
    passes: int  # verify passes (prefill not counted)
    prefill_passes: int
    drafted: int  # draft tokens fed to verify passes
    accepted: int  # of those, accepted

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def accepted_per_pass(self) -> float:
        return self.accepted / self.passes if self.passes else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return len(self.tokens) / self.passes if self.passes else 0.0


def speculative_generate(step: KPassStep, prompt, n: int, draft: Draft | None, k: int, slot: int = 0) -> SpecResult:
    """Greedy-generate n tokens after `prompt` in `slot`, verifying up to k - 1 draft tokens per
    pass. The prompt's first len - 1 tokens are prefilled in passes of k causal entries; each verify
    pass feeds the last token plus the draft (clipped so no position past prompt + n - 1 is used).
    The tokens equal greedy k = 1 decoding exactly (the batch invariance). k = 1 or draft None is
    plain greedy decoding."""
    k = _check_k(k, step.max_k)
    n = _int(n, "n")
    if n < 0:
        raise MonolithError(f"n must be >= 0, got {n}")
    ctx = _check_prompt(prompt)
    _check_fit(step, len(ctx), n)
    res = SpecResult([], 0, 0, 0, 0)
    if n == 0:
        return res
    step.reset(slot)
    for i in range(0, len(ctx) - 1, k):
        step([(t, slot, i + j) for j, t in enumerate(ctx[i : min(i + k, len(ctx) - 1)])])
        res.prefill_passes += 1
    while len(res.tokens) < n:
        d = []
        if draft is not None and k > 1:
            d = [_int(t, "a draft token") for t in draft(list(ctx), k)]
            if len(d) > k - 1:
                raise MonolithError(f"the draft returned {len(d)} tokens for k = {k}: at most {k - 1}")
            d = d[: n - len(res.tokens) - 1]
        p = len(ctx) - 1
        am = _argmax(step([(t, slot, p + j) for j, t in enumerate([ctx[-1], *d])]))
        a = 0
        while a < len(d) and am[a] == d[a]:
            a += 1
        new = d[:a] + [am[a]]
        ctx += new
        res.tokens += new
        res.passes += 1
        res.drafted += len(d)
        res.accepted += a
        step.truncate(slot, len(ctx) - 1)  # drops the K/V of the rejected draft tokens
    return res


@dataclass
class BatchResult:
    tokens: list[list[int]]
    passes: int
    entries: int


def batched_generate(step: KPassStep, prompts, n: int) -> BatchResult:
    """Greedy-generate n tokens after each of k = len(prompts) prompts (slots 0..k-1), one entry per
    unfinished sequence per pass: a long prompt still prefills while a short one already decodes
    beside it, at its own position. Each sequence's tokens equal its own k = 1 greedy tokens."""
    prompts = list(prompts)
    k = len(prompts)
    if not 1 <= k <= min(step.max_k, step.slots):
        raise MonolithError(f"batched_generate takes 1..{min(step.max_k, step.slots)} prompts, got {k}")
    n = _int(n, "n")
    if n < 0:
        raise MonolithError(f"n must be >= 0, got {n}")
    ctxs = [_check_prompt(p, f"prompt {i}") for i, p in enumerate(prompts)]
    for i, c in enumerate(ctxs):
        _check_fit(step, len(c), n, f"prompt {i}")
    lens = [len(c) for c in ctxs]
    res = BatchResult([[] for _ in ctxs], 0, 0)
    if n == 0:
        return res
    for s in range(k):
        step.reset(s)
    fed = [0] * k  # tokens of ctxs[s] fed so far (= slot s's cache length)
    while any(len(o) < n for o in res.tokens):
        live = [s for s in range(k) if len(res.tokens[s]) < n]
        am = _argmax(step([(ctxs[s][fed[s]], s, fed[s]) for s in live]))
        for s, t in zip(live, am, strict=True):
            fed[s] += 1
            if fed[s] >= lens[s]:  # the row after the prompt's last token onward is a generated token
                ctxs[s].append(t)
                res.tokens[s].append(t)
        res.passes += 1
        res.entries += len(live)
    return res


def prompt_lookup_draft(context: Sequence[int], k: int, ngram: int = 3) -> list[int]:
    """Draft by n-gram lookup in the context itself; returns 0..k-1 tokens.

    For g = ngram, ngram - 1, ..., 1 (longest first): find the newest (rightmost) earlier
    occurrence of the context's last g tokens, starting anywhere before the suffix itself; at the
    first g that has one, return the k - 1 tokens that followed that occurrence. The copy reads
    context + draft, so a match that runs into the end of the context keeps copying its own output
    (a loop of period q is extended past the end). No match at any g, or k = 1: []."""
    k = _check_k(k)
    ngram = _int(ngram, "ngram")
    if ngram < 1:
        raise MonolithError(f"ngram must be >= 1, got {ngram}")
    seq = [_int(t, "a context token") for t in context]
    m = len(seq)
    for g in range(min(ngram, m - 1), 0, -1):
        suffix = seq[m - g :]
        for i in range(m - g - 1, -1, -1):  # occurrence seq[i:i+g], i + g <= m - 1
            if seq[i : i + g] == suffix:
                out = seq[:]
                for j in range(k - 1):
                    out.append(out[i + g + j])
                return out[m:]
    return []


def perfect_draft(continuation: Sequence[int]) -> Draft:
    """The upper bound: a draft that proposes the model's own greedy continuation. `continuation`
    is the prompt followed by greedy k = 1 tokens (from the engine's decode or
    speculative_generate with k = 1); the draft returns the next k - 1 of them after the context
    (fewer near the end), so every verify pass accepts all it is given: k - 1 per pass."""
    ref = [_int(t, "a continuation token") for t in continuation]

    def draft(context: Sequence[int], k: int) -> list[int]:
        c = list(context)
        if ref[: len(c)] != c:
            raise MonolithError("perfect_draft: the context is not a prefix of its greedy continuation")
        return ref[len(c) : len(c) + k - 1]

    return draft


def kpass_speedup(t_ratio: float, acceptance: float) -> float:
    """Speedup of verify over the single-token path: tokens per pass / (T(k)/T(1)), where
    `acceptance` is the mean accepted draft tokens per pass (tokens per pass = 1 + acceptance;
    batched decode of k sequences: acceptance = k - 1)."""
    t_ratio, acceptance = float(t_ratio), float(acceptance)
    if not (math.isfinite(t_ratio) and t_ratio > 0):
        raise MonolithError(f"T(k)/T(1) must be a finite number > 0, got {t_ratio}")
    if not (math.isfinite(acceptance) and 0 <= acceptance <= MAX_K - 1):
        raise MonolithError(f"acceptance (accepted draft tokens per pass) must be in 0..{MAX_K - 1}, got {acceptance}")
    return (1.0 + acceptance) / t_ratio


def breakeven_alpha(t_ratio: float, k: int) -> float:
    """The per-token acceptance probability alpha at which (1 - alpha^k) / (1 - alpha) = T(k)/T(1)
    (i.i.d. draft tokens, accepted prefix); MonolithError when no alpha in [0, 1] reaches it."""
    k, t_ratio = _check_k(k), float(t_ratio)
    if not (math.isfinite(t_ratio) and 1.0 <= t_ratio <= k):
        raise MonolithError(f"T({k})/T(1) = {t_ratio} cannot be paid by {k} tokens per pass: it must be in [1, {k}]")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid**j for j in range(k)) < t_ratio else (lo, mid)
    return hi
