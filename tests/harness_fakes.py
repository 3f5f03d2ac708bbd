"""Tiny deterministic fake engines for the harness tests (no weights, microseconds per step)."""
from __future__ import annotations

import time

import torch

from monolith.bench import decode
from monolith.engine import Engine

V = 32


def oracle_logits(prev: int, pos: int) -> torch.Tensor:
    """A fixed 'model': logits depend on the previous token and the position. Every 5th
    position (pos % 5 == 3) is made a near-tie (top-2 margin 0.01)."""
    g = torch.Generator().manual_seed(prev * 7919 + pos)
    lg = torch.randn(V, generator=g) * 3
    top = torch.topk(lg, 2)
    if pos % 5 == 3:
        lg[top.indices[1]] = lg[top.indices[0]] - 0.01
    else:  # keep every other margin clearly large
        lg[top.indices[1]] = min(float(lg[top.indices[1]]), float(lg[top.indices[0]]) - 1.0)
    return lg


class FakeEngine(Engine):
    """Runs `oracle_logits`; `flip(pos, logits)` lets a test perturb what the engine sees."""

    name = "fake"
    vocab_size = V
    context_cap = 100_000

    def __init__(self, flip=None, decode_flip=None, nondeterministic=False):
        self.flip, self.decode_flip, self.nondet = flip, decode_flip, nondeterministic
        self.info = {}
        self.calls = 0
        self.reset()

    def reset(self):
        self.hist: list[int] = []
        self.position = 0

    def _step(self, tok: int, in_decode: bool = False) -> torch.Tensor:
        pos = len(self.hist)
        self.hist.append(int(tok))
        self.position = len(self.hist)
        lg = oracle_logits(int(tok), pos).clone()
        if self.flip:
            lg = self.flip(pos, lg)
        if in_decode and self.decode_flip:
            lg = self.decode_flip(pos, lg)
        return lg

    def _prefill(self, tokens):
        for t in tokens.tolist():
            lg = self._step(t)
        return int(torch.argmax(lg))

    def _decode(self, first_token, n):
        self.calls += 1
        out, tok = [], first_token
        for _ in range(n):
            lg = self._step(tok, in_decode=True)
            if self.nondet and self.calls % 2 == 0 and len(out) == n // 2:
                lg = -lg
            tok = int(torch.argmax(lg))
            out.append(tok)
        return torch.tensor(out, dtype=torch.long)

    def _teacher_forced(self, tokens):
        return torch.tensor([int(torch.argmax(self._step(t))) for t in tokens.tolist()], dtype=torch.long)

    def _logits(self, tokens):
        return torch.stack([self._step(t) for t in tokens.tolist()])

    def bytes_per_token(self, position):
        return 1000 + 10 * position


def swap_top2_when(pred):
    """A perturbation that swaps the top-2 logits at positions where pred(pos, margin) holds."""
    def f(pos, lg):
        top = torch.topk(lg, 2)
        margin = float(top.values[0] - top.values[1])
        if pred(pos, margin):
            lg = lg.clone()
            lg[top.indices[0]], lg[top.indices[1]] = top.values[1], top.values[0]
        return lg
    return f


class GpuLikeClock(decode.Clock):
    """A CPU clock that takes bench_engine's GPU path (time model, energy), timing with perf_counter."""

    def __init__(self, device):
        super().__init__("cpu")
        self.cuda = True

    def sync(self):
        pass

    def time(self, fn):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
