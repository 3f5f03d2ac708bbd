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
- `position` is the number of tokens in the KV cache; `context_cap` how many it can hold;
  token ids are valid in [0, `vocab_size`).
- `bytes_per_token(position)` is the engine's byte model: bytes read from DRAM for one
  decode step at that position (weights + KV cache), for effective-bandwidth figures.

The four feeding methods are implemented HERE, once, and no engine may override them
(`__init_subclass__` refuses the class): they check every token id as a Python integer (so
no cast can wrap it: 2**32 + 5 is refused, never run as token 5) and the room left in the
KV cache, then call the engine's `_prefill` / `_decode` / `_teacher_forced` / `_logits` with
an int64 CPU tensor of valid ids. An engine that casts to int32 for its kernel does so after.
"""
from __future__ import annotations

import operator
from abc import ABC, abstractmethod

import torch

from monolith.config import CONTEXT_CAP, VOCAB
from monolith.errors import MonolithError

_CHECKED = ("prefill", "decode", "teacher_forced", "logits")


def _as_ints(tokens) -> list[int]:
    """Token ids as exact Python ints (a tensor or array of any integer dtype, a sequence of
    ints, or one int). Floats and booleans are refused: a float id is a caller's bug."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise MonolithError(f"token ids must be integers, got a {tokens.dtype} tensor")
        return tokens.detach().reshape(-1).tolist()  # exact for every integer dtype
    if hasattr(tokens, "__array__") and hasattr(tokens, "dtype"):  # numpy (no import needed)
        kind = getattr(tokens.dtype, "kind", "")
        if kind not in ("i", "u"):
            raise MonolithError(f"token ids must be integers, got an array of dtype {tokens.dtype}")
        return tokens.reshape(-1).tolist()
    items = [tokens] if not hasattr(tokens, "__iter__") or isinstance(tokens, str | bytes) else list(tokens)
    out = []
    for x in items:
        if type(x).__name__ in ("bool", "bool_"):  # Python and numpy booleans
            raise MonolithError(f"token ids must be integers, got {x!r}")
        try:
            out.append(operator.index(x))
        except TypeError:
            raise MonolithError(f"token ids must be integers, got {x!r} ({type(x).__name__})") from None
    return out


class Engine(ABC):
    name: str = "engine"
    device: torch.device = torch.device("cpu")
    position: int = 0
    #: positions the KV cache holds (prompt and generated tokens together)
    context_cap: int = CONTEXT_CAP
    #: token ids are valid in [0, vocab_size)
    vocab_size: int = VOCAB
    #: free-form facts the harness records next to this engine's numbers (variant, launch shape...)
    info: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        overridden = [m for m in _CHECKED if m in vars(cls)]
        if overridden:
            raise TypeError(f"{cls.__name__} overrides {', '.join(overridden)}: implement "
                            f"{', '.join('_' + m for m in overridden)} instead (the base class checks "
                            "token ids and KV-cache room before calling them)")

    # ---- the checks every engine gets -----------------------------------------------------
    def check_tokens(self, tokens) -> torch.Tensor:
        """Valid token ids as an int64 CPU tensor; MonolithError naming the first bad one.
        The range check runs on exact Python integers, before any cast."""
        ids = _as_ints(tokens)
        for i, t in enumerate(ids):
            if not 0 <= t < self.vocab_size:
                where = f" (token {i} of {len(ids)})" if len(ids) > 1 else ""
                raise MonolithError(f"token id {t}{where} is outside the vocabulary [0, {self.vocab_size})")
        return torch.tensor(ids, dtype=torch.int64)

    def check_room(self, n: int) -> None:
        """n more positions must fit in the KV cache."""
        left = self.context_cap - self.position
        if n > left:
            raise MonolithError(f"{n} more positions do not fit in {self.name}'s KV cache: it holds {self.context_cap} "
                                f"positions and {self.position} are in use, so at most {max(left, 0)} more fit")

    def check_generation(self, prompt_len: int, n: int) -> None:
        """Before prefill: a prompt of `prompt_len` tokens and `n` generated tokens (the first comes
        from prefill, the other n - 1 from decode) must fit from position 0. Names the largest n."""
        need = prompt_len + n - 1
        if prompt_len > self.context_cap:
            raise MonolithError(f"the prompt has {prompt_len} tokens; {self.name}'s context cap is "
                                f"{self.context_cap} positions: shorten the prompt")
        if need > self.context_cap:
            raise MonolithError(f"a {prompt_len}-token prompt and -n {n} need {need} positions; {self.name}'s "
                                f"context cap is {self.context_cap}: the largest -n allowed is "
                                f"{self.context_cap - prompt_len + 1}")

    @staticmethod
    def _count(n) -> int:
        if isinstance(n, bool):
            raise MonolithError(f"the token count must be an integer >= 0, got {n!r}")
        try:
            n = operator.index(n)
        except TypeError:
            raise MonolithError(f"the token count must be an integer >= 0, got {n!r}") from None
        if n < 0:
            raise MonolithError(f"the token count must be >= 0, got {n}")
        return n

    # ---- the interface (checked; engines implement the underscored methods) ---------------
    def prefill(self, tokens) -> int:
        t = self.check_tokens(tokens)
        if t.numel() == 0:
            raise MonolithError("prefill needs at least one token")
        self.check_room(t.numel())
        return self._prefill(t)

    def decode(self, first_token, n: int) -> torch.Tensor:
        t = self.check_tokens(first_token)
        if t.numel() != 1:
            raise MonolithError(f"decode takes one first token, got {t.numel()}")
        n = self._count(n)
        self.check_room(n)
        return self._decode(int(t[0]), n)

    def teacher_forced(self, tokens) -> torch.Tensor:
        t = self.check_tokens(tokens)
        self.check_room(t.numel())
        return self._teacher_forced(t)

    def logits(self, tokens) -> torch.Tensor:
        t = self.check_tokens(tokens)
        self.check_room(t.numel())
        return self._logits(t)

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def _prefill(self, tokens: torch.Tensor) -> int: ...

    @abstractmethod
    def _decode(self, first_token: int, n: int) -> torch.Tensor: ...

    @abstractmethod
    def _teacher_forced(self, tokens: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def _logits(self, tokens: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def bytes_per_token(self, position: int) -> int: ...
