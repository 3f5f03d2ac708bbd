"""The correctness gate (notes/harness.md; NOTES.md, Facts: protocols). No speed number counts unless the same engine object
passed this in the same run.

Oracle: the PyTorch ReferenceEngine with bf16 weights and fp32 compute (so the oracle's own
rounding is far below the tolerance). Per prompt it decodes N greedy tokens and records the
top-2 logit margin at every step.

The engine is then checked three ways:
1. teacher-forced on the oracle's sequence (prefill -> step 0, teacher_forced -> steps 1..N-1):
   every step compared, so one divergence never hides the rest. A mismatch is allowed only
   where the oracle's top-2 margin < tolerance (a near-tie the engine's bf16 rounding may flip).
2. free-running (prefill + decode): the first divergence must also fall on a near-tie. Up to
   that step the engine saw exactly the oracle's context, so this catches a decode path that
   differs from the teacher-forced path.
3. determinism: repeated free-running decodes must give bitwise-identical tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from monolith.engine import Engine

# Logits. Measured (notes/harness.md): the correct bf16 reference vs this fp32 oracle on the
# 28-layer synthetic checkpoint moves the top-2 margin by median 0.32, p99 1.12, max 1.29
# logits (logits reach ~32, where one bf16 step is 0.125), and flipped tokens at oracle
# margins up to 0.49. 0.1 would fail every correct bf16 engine; 2.0 leaves a third of all
# steps strictly checked, which a wrong RoPE theta (logit errors of several units) flips.
TOLERANCE = 2.0
MAX_LISTED = 64  # divergences listed in full in the verdict (all are counted)
# The passes `gate` makes over each prompt, each as long as the oracle's run: the engine's logits on
# the oracle's sequence (the non-finite check), teacher-forced, free-running. The determinism
# repeats add det_repeats - 1 free-running passes on each of the first det_prompts prompts.
# gate_steps counts them and bench/suite.py sizes a slow engine's gate with it;
# tests/test_harness_bench.py counts what `gate` really runs against it.
GATE_PASSES = 3


@dataclass
class OracleRun:
    prompt: list[int]
    tokens: list[int]
    margins: list[float]


@dataclass
class OracleSet:
    runs: list[OracleRun]
    desc: dict = field(default_factory=dict)
    #: the first non-finite oracle logit ({"prompt", "step", "position", "value"}), None if all finite
    nonfinite: dict | None = None


def _nonfinite_row(lg: torch.Tensor) -> tuple[int, int, float] | None:
    """(row, vocab index, value) of the first NaN/Inf in logits [rows, vocab], or None."""
    bad = ~torch.isfinite(lg)
    if not bool(bad.any()):
        return None
    r, c = (int(i) for i in bad.nonzero()[0])
    return r, c, float(lg[r, c])


def oracle_runs(oracle: Engine, prompts: list[list[int]], n_tokens: int, progress=None) -> OracleSet:
    """Greedy decode with the oracle through `logits`, keeping each step's top-2 margin."""
    runs, nonfinite = [], None
    for pi, prompt in enumerate(prompts):
        oracle.reset()
        lg = oracle.logits(prompt)[-1]
        toks, margins = [], []
        for i in range(n_tokens):
            bad = _nonfinite_row(lg.float().reshape(1, -1))
            if bad is not None and nonfinite is None:
                nonfinite = {"prompt": pi, "step": i, "position": len(prompt) - 1 + i, "token": bad[1],
                             "value": str(bad[2])}
            top = torch.topk(lg.float(), 2)
            tok = int(torch.argmax(lg))  # first index among exact ties, like every engine's argmax
            toks.append(tok)
            m = float(top.values[0] - top.values[1])
            margins.append(m if math.isfinite(m) else 0.0)  # the verdict fails on `nonfinite` instead
            if i + 1 < n_tokens:
                lg = oracle.logits([tok])[-1]
            if progress:
                progress()
        runs.append(OracleRun(list(prompt), toks, margins))
    return OracleSet(runs, {"engine": getattr(oracle, "name", type(oracle).__name__),
                            "info": dict(getattr(oracle, "info", {}) or {}), **sequence_stats(runs)}, nonfinite)


def engine_nonfinite(engine: Engine, run: OracleRun) -> dict | None:
    """The first non-finite logit the engine computes on the oracle's sequence (prompt, then the
    oracle's tokens teacher-forced), or None. Tokens alone cannot show it: an all-NaN logit row
    has argmax 0 in both engines, so two NaN models would agree on every step."""
    engine.reset()
    seq = list(run.prompt) + list(run.tokens[:-1])
    bad = _nonfinite_row(engine.logits(seq).float())
    if bad is None:
        return None
    row, tok, val = bad
    step = row - (len(run.prompt) - 1)
    return {"step": step if step >= 0 else None, "position": row, "token": tok, "value": str(val)}


def sequence_stats(runs: list[OracleRun]) -> dict:
    """The echo check (NOTES.md, Facts: synthetic weights): a gate on a checkpoint whose greedy output repeats is vacuous."""
    toks = [t for r in runs for t in r.tokens]
    repeats = sum(1 for r in runs for a, b in zip(r.tokens, r.tokens[1:], strict=False) if a == b)
    pairs = sum(max(len(r.tokens) - 1, 0) for r in runs)
    m = sorted(x for r in runs for x in r.margins)
    q = (lambda f: m[min(int(f * len(m)), len(m) - 1)]) if m else (lambda f: None)
    return {
        "distinct_frac": len(set(toks)) / max(len(toks), 1),
        "repeat_frac": repeats / max(pairs, 1),
        "margin_median": q(0.5), "margin_p10": q(0.1),
    }


def free_run(engine: Engine, prompt: list[int], n: int) -> list[int]:
    engine.reset()
    first = engine.prefill(prompt)
    rest = engine.decode(first, n - 1).tolist() if n > 1 else []
    return [first, *rest]


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def gate_steps(prompts: int, tokens: int, det_prompts: int = 1, det_repeats: int = 3) -> int:
    """The steps `gate` runs on `prompts` prompts of `tokens` tokens each (a one-token prompt: every
    pass is `tokens` positions long; a longer prompt adds its length - 1 to each pass)."""
    return (GATE_PASSES * prompts + min(det_prompts, prompts) * max(det_repeats - 1, 0)) * tokens


def gate(engine: Engine, oracle: OracleSet, *, tolerance: float = TOLERANCE, det_prompts: int = 1,
         det_repeats: int = 3, progress=None) -> dict:
    """Run the gate; returns the verdict dict that travels with every benchmark row."""
    divs, fr, det = [], [], []
    n_disallowed = 0
    reasons: list[str] = []
    nonfinite = []
    if oracle.nonfinite is not None:
        o = oracle.nonfinite
        reasons.append(f"the oracle's logits are non-finite ({o['value']} for token {o['token']}) at prompt "
                       f"{o['prompt']}, step {o['step']} (position {o['position']}): nothing can be compared")
    for pi, run in enumerate(oracle.runs):
        n = len(run.tokens)
        bad = engine_nonfinite(engine, run)
        if bad is not None:
            nonfinite.append({"prompt": pi, **bad})
            where = f"step {bad['step']}" if bad["step"] is not None else "a prompt token"
            reasons.append(f"prompt {pi}: the engine's logits are non-finite ({bad['value']} for token "
                           f"{bad['token']}) at {where} (position {bad['position']})")
        engine.reset()
        p0 = engine.prefill(run.prompt)
        preds = [p0, *(engine.teacher_forced(run.tokens[:-1]).tolist() if n > 1 else [])]
        if len(preds) != n:
            reasons.append(f"prompt {pi}: teacher_forced returned {len(preds) - 1} tokens, expected {n - 1}")
        for i, (got, want) in enumerate(zip(preds, run.tokens, strict=False)):
            if got != want:
                ok = run.margins[i] < tolerance
                n_disallowed += not ok
                divs.append({"prompt": pi, "step": i, "oracle": want, "engine": got,
                             "margin": round(run.margins[i], 5), "allowed": ok})
        seq = free_run(engine, run.prompt, n)
        j = first_mismatch(seq, run.tokens)
        fr_ok = j is None or (j < n and run.margins[j] < tolerance)
        fr.append({"prompt": pi, "first_divergence": j, "margin": None if j is None or j >= n else round(run.margins[j], 5),
                   "allowed": fr_ok})
        if not fr_ok:
            reasons.append(f"prompt {pi}: free-running decode diverged at step {j} (margin "
                           f"{fr[-1]['margin']}) >= tolerance {tolerance}")
        if pi < det_prompts:
            reps = [seq] + [free_run(engine, run.prompt, n) for _ in range(det_repeats - 1)]
            same = all(r == reps[0] for r in reps)
            diffs = [first_mismatch(reps[0], r) for r in reps[1:]]  # per repeat: who differs, and where
            det.append({"prompt": pi, "repeats": det_repeats, "identical": same,
                        "first_difference": None if same else min(d for d in diffs if d is not None),
                        "first_difference_per_repeat": diffs})
            if not same:
                reasons.append(f"prompt {pi}: {det_repeats} repeated decodes are not bitwise identical")
        if progress:
            progress()
    if n_disallowed:
        worst = max((d for d in divs if not d["allowed"]), key=lambda d: d["margin"])
        reasons.insert(0, f"{n_disallowed} teacher-forced divergence(s) at margin >= {tolerance} (worst: prompt "
                          f"{worst['prompt']} step {worst['step']}, margin {worst['margin']})")
    steps = sum(len(r.tokens) for r in oracle.runs)
    return {
        "passed": not reasons,
        "reasons": reasons,
        "tolerance": tolerance,
        "oracle": oracle.desc,
        "prompts": len(oracle.runs),
        "tokens_per_prompt": len(oracle.runs[0].tokens) if oracle.runs else 0,
        "steps_compared": steps,
        "divergences": len(divs),
        "divergences_disallowed": n_disallowed,
        "divergence_list": divs[:MAX_LISTED],
        "free_running": fr,
        "free_running_exact": sum(1 for f in fr if f["first_divergence"] is None),
        "determinism": det,
        "deterministic": all(d["identical"] for d in det),
        "nonfinite": {"oracle": oracle.nonfinite, "engine": nonfinite},
    }


def not_gated(reason: str) -> dict:
    """Verdict for external engines (llama.cpp, vLLM) that have no teacher-forced interface."""
    return {"passed": None, "applicable": False, "reasons": [reason]}
