"""The engine interface every decoder implements (reference, HF baselines, megakernels).

The harness (monolith.bench.decode, monolith.eval.*) drives engines only through this
interface and owns every timer: an engine never times itself and never sees the events.

Contract (batch 1, greedy):
- `reset()` empties the KV cache; position becomes 0.
- `prefill(tokens)` feeds the prompt (positions 0..len-1) and returns the greedy next token
  as a Python int. Prefill is excluded from every headline number.
- `decode(first_token, n)` feeds `first_token` at the current position, then each greedy
  prediction, n steps in all; returns the n predicted tokens as an int64 tensor on the
  engine's device. The loop stays on the device: no host sync per token.
- `teacher_forced(tokens)` feeds the given tokens one step each and returns the greedy
  prediction after each (int64 tensor, same length). The correctness gate uses it so that a
  divergence never derails the rest of the comparison.
- `logits(tokens)` like `teacher_forced` but returns float32 logits [len, vocab]. This is
  the non-headline mode for quality work.
- `position` is the number of tokens in the KV cache.
- `bytes_per_token(position)` is the engine's byte model: bytes read from DRAM for one
  decode step at that position (weights + KV cache), for effective-bandwidth figures.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class Engine(ABC):
    name: str = "engine"
    device: torch.device = torch.device("cpu")
    position: int = 0
    #: free-form facts the harness records next to this engine's numbers (variant, launch shape...)
    info: dict = {}

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def prefill(self, tokens: list[int]) -> int: ...

    @abstractmethod
    def decode(self, first_token: int, n: int) -> torch.Tensor: ...

    @abstractmethod
    def teacher_forced(self, tokens: list[int] | torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def logits(self, tokens: list[int] | torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def bytes_per_token(self, position: int) -> int: ...
