"""Token-id and KV-room checks live once, in monolith.engine.Engine, and run before any engine
code: on exact integers, so no cast can wrap an id (2**32 + 5 used to run as token 5 in the
megakernel, which cast to int32 before its range check)."""
import numpy as np
import pytest
import torch
from harness_fakes import FakeEngine, V

from monolith import config as C
from monolith.engine import Engine
from monolith.errors import MonolithError

WRAPS = [2**32 + 5, 2**31, 2**63 + 5, -(2**32) + 5, -1]


def _as_array(x: int) -> np.ndarray:
    return np.array([1, x], dtype=np.uint64 if x >= 2**63 else np.int64)


@pytest.mark.parametrize("bad", WRAPS)
def test_ids_that_a_cast_would_wrap_are_refused(bad):
    e = FakeEngine()
    for toks in ([1, bad], _as_array(bad)):
        for call in (e.prefill, e.teacher_forced, e.logits):
            with pytest.raises(MonolithError, match=f"token id {bad} \\(token 1 of 2\\) is outside"):
                call(toks)
    with pytest.raises(MonolithError, match=f"token id {bad} is outside the vocabulary \\[0, {V}\\)"):
        e.decode(bad, 3)
    assert e.position == 0 and e.hist == []  # nothing ran


def test_int64_tensor_and_other_types():
    e = FakeEngine()
    with pytest.raises(MonolithError, match="token id 4294967301"):
        e.prefill(torch.tensor([2**32 + 5]))
    with pytest.raises(MonolithError, match="must be integers, got a torch.float32 tensor"):
        e.prefill(torch.tensor([1.0]))
    with pytest.raises(MonolithError, match="must be integers, got True"):
        e.prefill([True])
    with pytest.raises(MonolithError, match="must be integers, got 1.5"):
        e.teacher_forced([1, 1.5])
    with pytest.raises(MonolithError, match="must be integers, got an array of dtype float64"):
        e.logits(np.array([1.0]))
    with pytest.raises(MonolithError, match="must be integers, got '7'"):
        e.decode("7", 1)
    with pytest.raises(MonolithError, match="token count must be an integer >= 0"):
        e.decode(1, 2.0)
    with pytest.raises(MonolithError, match="token count must be >= 0"):
        e.decode(1, -1)
    with pytest.raises(MonolithError, match="prefill needs at least one token"):
        e.prefill([])
    # valid ids in every integer form run
    a = e.prefill(np.array([1, 2], dtype=np.uint8))
    e.reset()
    assert e.prefill(torch.tensor([1, 2], dtype=torch.int32)) == a
    assert e.decode(torch.tensor(3), 2).numel() == 2


def test_room_is_checked_before_running():
    e = FakeEngine()
    e.context_cap = 10
    e.prefill(list(range(8)))
    with pytest.raises(MonolithError, match="3 more positions do not fit in fake's KV cache: it holds 10 positions "
                                            "and 8 are in use, so at most 2 more fit"):
        e.decode(1, 3)
    with pytest.raises(MonolithError, match="at most 2 more fit"):
        e.teacher_forced([1, 2, 3])
    assert e.position == 8  # nothing ran
    e.decode(1, 2)
    assert e.position == 10


def test_generation_check_names_the_largest_n():
    e = FakeEngine()
    e.context_cap = 100
    e.check_generation(10, 91)  # 10 prompt positions + 90 decoded ones
    with pytest.raises(MonolithError, match="a 10-token prompt and -n 92 need 101 positions; fake's context cap "
                                            "is 100: the largest -n allowed is 91"):
        e.check_generation(10, 92)
    with pytest.raises(MonolithError, match="the prompt has 101 tokens"):
        e.check_generation(101, 1)


def test_no_engine_can_bypass_the_checks():
    with pytest.raises(TypeError, match="overrides prefill, decode: implement _prefill, _decode instead"):
        class Sneaky(FakeEngine):  # noqa: F841
            def prefill(self, tokens):
                return 0

            def decode(self, first_token, n):
                return torch.zeros(n)
    # every engine of the project is an Engine whose public methods are the checked ones
    from monolith.bench.baselines.graphs import GraphEngine
    from monolith.bench.baselines.hf import HFEngine
    from monolith.megakernel import MegakernelEngine
    from monolith.reference import ReferenceEngine

    for cls in (ReferenceEngine, MegakernelEngine, GraphEngine, HFEngine):
        for m in ("prefill", "decode", "teacher_forced", "logits"):
            assert getattr(cls, m) is getattr(Engine, m), (cls, m)


def test_megakernel_refuses_a_wrapping_id_before_any_launch():
    """No GPU needed: the check runs before the engine's own code (a bare object has no buffers,
    so reaching the launch would be an AttributeError, not this MonolithError)."""
    from monolith.megakernel import MegakernelEngine

    eng = object.__new__(MegakernelEngine)
    eng.position = 0
    assert eng.context_cap == C.CONTEXT_CAP and eng.vocab_size == C.VOCAB
    for call in (lambda: eng.prefill([2**32 + 5]), lambda: eng.teacher_forced([1, 2**32 + 5]),
                 lambda: eng.logits(torch.tensor([2**32 + 5])), lambda: eng.decode(2**32 + 5, 1)):
        with pytest.raises(MonolithError, match="token id 4294967301"):
            call()
    with pytest.raises(MonolithError, match=f"at most {C.CONTEXT_CAP} more fit"):
        eng.decode(5, C.CONTEXT_CAP + 1)


def test_reference_engine_uses_the_base_checks(ckpt2):
    from monolith.reference import ReferenceEngine

    r = ReferenceEngine(ckpt2, compute_dtype=torch.float32, context_cap=8)
    assert r.vocab_size == C.VOCAB and r.context_cap == 8
    with pytest.raises(MonolithError, match="token id 4294967301"):
        r.prefill([2**32 + 5])
    with pytest.raises(MonolithError, match="token id 4294967301"):
        r.step(2**32 + 5)
    with pytest.raises(MonolithError, match="the largest -n allowed is 6"):
        r.check_generation(3, 7)
