"""Quality against the bf16 reference on the same weights (NOTES.md, Facts: protocols).

- WikiText-2 perplexity: windows of `context` tokens every `stride` tokens (both recorded);
  the first window scores all its predictions, later ones only their last `stride` (the
  usual sliding-window rule; with context == stride the windows are disjoint). Logits come
  from engine.logits: teacher-forced, one step per token (the decode path) for every engine
  except the quality-only `hf-parallel*`, which use HF's parallel forward and say so in
  `engine_info.logits_path`.
- Mean KL(ref || engine) of next-token distributions over the first `kl_positions`
  positions of those same windows (computed in the same pass).
- Greedy agreement over the first 64 tokens of the quality prompts: the reference decodes
  greedily; the engine is teacher-forced on that sequence and its argmax compared at every
  step (argmax agreement, robust to one early flip). The free-running common prefix is
  reported too.
"""
from __future__ import annotations

from pathlib import Path

import torch

from monolith.engine import Engine

CONTEXT = 512
STRIDE = 512
KL_POSITIONS = 10_000
AGREE_TOKENS = 64
WIKITEXT = "wikitext-2-raw-v1-test.txt"


def default_text_path() -> Path:
    """../shared/data/<WIKITEXT> beside the checkout, or $MONOLITH_DATA_DIR (monolith.prompts)."""
    from monolith.prompts import wikitext_path

    return wikitext_path()


def windows(n_tokens: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """(start, end, first_scored_index_in_window) covering [0, n_tokens)."""
    out, start = [], 0
    while start + 1 < n_tokens:
        end = min(start + context, n_tokens)
        first = 0 if start == 0 else max(context - stride - 1, 0)  # prediction i scores token i+1
        out.append((start, end, first))
        if end == n_tokens:
            break
        start += stride
    return out


def nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position negative log-likelihood (natural log), fp32."""
    return -torch.log_softmax(logits.float(), -1).gather(-1, targets.view(-1, 1)).view(-1)


def kl(ref_logits: torch.Tensor, eng_logits: torch.Tensor) -> torch.Tensor:
    """KL(ref || engine) per row, nats."""
    lp = torch.log_softmax(ref_logits.float(), -1)
    lq = torch.log_softmax(eng_logits.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def perplexity_kl(ref: Engine, eng: Engine, tokens: list[int], context: int = CONTEXT, stride: int = STRIDE,
                  kl_positions: int = KL_POSITIONS, max_positions: int | None = None, progress=None) -> dict:
    """One pass: perplexity of both engines and the KL between them. `max_positions` caps the
    scored positions (both engines see the same windows)."""
    return perplexity_kl_many(ref, [eng], tokens, context, stride, kl_positions, max_positions, progress)[0]


def perplexity_kl_many(ref: Engine, engines: list[Engine], tokens: list[int], context: int = CONTEXT,
                       stride: int = STRIDE, kl_positions: int = KL_POSITIONS, max_positions: int | None = None,
                       progress=None) -> list[dict]:
    """`perplexity_kl` for several engines against one reference, the reference run once per
    window (its logits are deterministic, so each engine's figures are the ones a pass of its own
    would give; an fp32 reference step costs ~10x a megakernel step). One dict per engine."""
    n_ref = 0.0
    n_eng = [0.0] * len(engines)
    kl_sum = [0.0] * len(engines)
    count, kl_n = 0, 0
    for start, end, first in windows(len(tokens), context, stride):
        win = tokens[start:end]
        sl = slice(first, len(win) - 1)
        if max_positions is not None:
            sl = slice(first, min(len(win) - 1, first + max_positions - count))
        k = sl.stop - sl.start
        if k <= 0:
            break
        ref.reset()
        lr = ref.logits(win)
        tgt = torch.as_tensor(win[1:], dtype=torch.long, device=lr.device)
        n_ref += float(nll(lr[sl], tgt[sl]).sum())
        m = min(k, kl_positions - kl_n)
        for j, eng in enumerate(engines):
            if eng is ref:
                le = lr
            else:
                eng.reset()
                le = eng.logits(win)
            n_eng[j] += float(nll(le[sl], tgt[sl].to(le.device)).sum())
            if m > 0:
                kl_sum[j] += float(kl(lr[sl][:m], le[sl][:m].to(lr.device)).sum())
            del le
        kl_n += max(m, 0)
        count += k
        if progress:
            progress(k)
        if max_positions is not None and count >= max_positions:
            break
    return [{
        "ppl": float(torch.tensor(n_eng[j] / count).exp()), "ref_ppl": float(torch.tensor(n_ref / count).exp()),
        "ppl_ratio": float(torch.tensor((n_eng[j] - n_ref) / count).exp()),
        "positions": count, "context": context, "stride": stride, "kl": kl_sum[j] / max(kl_n, 1), "kl_positions": kl_n,
    } for j in range(len(engines))]


def agreement(ref: Engine, eng: Engine, prompts: list[list[int]], n: int = AGREE_TOKENS, progress=None,
              free_running: bool = True) -> dict:
    """`free_running=False` skips the engine's free-running decode (the extra prefix measure):
    for an engine whose decode is slow and whose decode path is not what is being checked."""
    return agreement_many(ref, [eng], prompts, n, progress, free_running)[0]


def agreement_many(ref: Engine, engines: list[Engine], prompts: list[list[int]], n: int = AGREE_TOKENS,
                   progress=None, free_running: bool = True) -> list[dict]:
    """`agreement` for several engines against one reference, which decodes each prompt once."""
    match, prefix_sum = [0] * len(engines), [0] * len(engines)
    total = 0
    for p in prompts:
        ref.reset()
        f = ref.prefill(p)
        seq = [f, *ref.decode(f, n - 1).tolist()]
        total += n
        for j, eng in enumerate(engines):
            eng.reset()
            g = eng.prefill(p)
            preds = [g, *eng.teacher_forced(seq[:-1]).tolist()]
            match[j] += sum(int(a == b) for a, b in zip(preds, seq, strict=False))
            if free_running:
                eng.reset()
                g = eng.prefill(p)
                free = [g, *eng.decode(g, n - 1).tolist()]
                prefix_sum[j] += next((i for i, (a, b) in enumerate(zip(free, seq, strict=False)) if a != b), n)
        if progress:
            progress(1)
    return [{"agreement": match[j] / max(total, 1), "agreement_tokens": total, "prompts": len(prompts),
             "tokens_per_prompt": n, "free_running_prefix_frac": prefix_sum[j] / max(total, 1) if free_running else None,
             "method": "engine teacher-forced on the reference's greedy sequence; argmax match rate"}
            for j in range(len(engines))]


def evaluate(ref: Engine, eng: Engine, text_tokens: list[int], prompts: list[list[int]], *, context: int = CONTEXT,
             stride: int = STRIDE, positions: int = KL_POSITIONS, agree_tokens: int = AGREE_TOKENS,
             free_running: bool = True) -> dict:
    """Both measures with rich progress bars; `positions` caps scored perplexity positions and
    KL positions together (the KL uses the first `positions` of the perplexity pass)."""
    return evaluate_many(ref, [eng], text_tokens, prompts, context=context, stride=stride, positions=positions,
                         agree_tokens=agree_tokens, free_running=free_running)[0]


def evaluate_many(ref: Engine, engines: list[Engine], text_tokens: list[int], prompts: list[list[int]], *,
                  context: int = CONTEXT, stride: int = STRIDE, positions: int = KL_POSITIONS,
                  agree_tokens: int = AGREE_TOKENS, free_running: bool = True) -> list[dict]:
    """`evaluate` for several engines in one pass over the reference (see perplexity_kl_many)."""
    from rich.progress import Progress

    names = ", ".join(getattr(e, "name", "engine") for e in engines)
    with Progress(transient=True) as bar:
        t1 = bar.add_task(f"perplexity+KL ({names})", total=positions)
        pk = perplexity_kl_many(ref, engines, text_tokens, context, stride, kl_positions=positions,
                                max_positions=positions, progress=lambda k: bar.advance(t1, k))
        t2 = bar.add_task(f"agreement ({names})", total=len(prompts))
        ag = agreement_many(ref, engines, prompts, agree_tokens, progress=lambda k: bar.advance(t2, k),
                            free_running=free_running)
    return [{**pk[j], **ag[j], "reference": getattr(ref, "name", "reference"),
             "reference_info": dict(getattr(ref, "info", {}) or {}), "engine_info": dict(getattr(eng, "info", {}) or {})}
            for j, eng in enumerate(engines)]


def text_tokens(tokenizer, path: str | Path | None = None) -> list[int]:
    from monolith.errors import MonolithError

    p = Path(path) if path else default_text_path()
    if not p.is_file():
        raise MonolithError(f"WikiText-2 text not found at {p} (pass --text PATH)")
    return tokenizer.encode(p.read_text(encoding="utf-8"))


# ---- quantized weights against bf16 (issue 12; NOTES.md, Facts) -------------------------------------
PPL_LIMIT = 1.02       # FP8 perplexity within +2 % of bf16's
AGREEMENT_MIN = 0.90   # greedy agreement >= 90 %


def quantized_gates(q: dict, floor: dict | None = None, *, ppl_limit: float = PPL_LIMIT,
                    agreement_min: float = AGREEMENT_MIN) -> dict:
    """Verdicts for a quantized engine's quality `q` (measured against the model itself: fp32 on
    the original bf16 weights), next to the bf16 floor `floor` (a bf16 engine on the original
    weights against the same reference: what rounding alone costs on these weights).

    - fixed gates (NOTES.md, Facts: protocols): ppl_ratio <= ppl_limit and agreement >= agreement_min;
    - floor gate: agreement >= the floor's agreement and ppl_ratio <= the floor's ppl_ratio
      times ppl_limit (the same +2 %, on top of what bf16 rounding already costs)."""
    ppl_ok = q["ppl_ratio"] <= ppl_limit
    ag_ok = q["agreement"] >= agreement_min
    out = {"ppl_ratio": q["ppl_ratio"], "ppl_limit": ppl_limit, "ppl_pass": ppl_ok,
           "agreement": q["agreement"], "agreement_min": agreement_min, "agreement_pass": ag_ok,
           "kl": q["kl"], "fixed_gates_pass": ppl_ok and ag_ok, "floor": None, "floor_gate_pass": None}
    words = [f"fixed gates {'PASS' if ppl_ok and ag_ok else 'FAIL'} (ppl ratio {q['ppl_ratio']:.4f} "
             f"{'<=' if ppl_ok else '>'} {ppl_limit}, agreement {q['agreement']:.2%} {'>=' if ag_ok else '<'} "
             f"{agreement_min:.0%})"]
    if floor is not None:
        f_ag, f_ppl = floor["agreement"], floor["ppl_ratio"]
        fl_ag_ok, fl_ppl_ok = q["agreement"] >= f_ag, q["ppl_ratio"] <= f_ppl * ppl_limit
        fl_ok = fl_ag_ok and fl_ppl_ok
        out["floor"] = {"engine": floor.get("engine"), "agreement": f_ag, "ppl_ratio": f_ppl, "kl": floor["kl"],
                        "ppl": floor.get("ppl"), "ppl_pass": f_ppl <= ppl_limit, "agreement_pass": f_ag >= agreement_min}
        out.update(agreement_minus_floor=q["agreement"] - f_ag, ppl_over_floor=q["ppl_ratio"] / f_ppl,
                   kl_over_floor=q["kl"] / floor["kl"] if floor["kl"] > 0 else None,
                   floor_agreement_pass=fl_ag_ok, floor_ppl_pass=fl_ppl_ok, floor_gate_pass=fl_ok)
        words.append(f"against the bf16 floor {'PASS' if fl_ok else 'FAIL'} (agreement {q['agreement']:.2%} vs floor "
                     f"{f_ag:.2%}, ppl ratio {q['ppl_ratio']:.4f} vs floor {f_ppl:.4f}, KL {q['kl']:.3g} vs floor "
                     f"{floor['kl']:.3g})")
    out["summary"] = "; ".join(words)
    return out


def compare_quantized(ref: Engine, eng: Engine, floor: Engine | None, text_tokens: list[int],
                      prompts: list[list[int]], **kw) -> dict:
    """`evaluate` for the quantized engine and, beside it, for the bf16 floor engine, both
    against the same reference (one pass: the reference runs once for both); plus
    `quantized_gates`. kw: evaluate's keyword arguments."""
    both = evaluate_many(ref, [eng] if floor is None else [eng, floor], text_tokens, prompts, **kw)
    return quantized_pair({**both[0], "engine": getattr(eng, "name", "engine")},
                          None if floor is None else {**both[1], "engine": getattr(floor, "name", "floor")})


def quantized_pair(engine: dict, floor: dict | None) -> dict:
    """{"engine", "floor" (absent without one), "gates"} of a quantized engine's figures beside its
    floor's (each as `evaluate` returns it, with its "engine" name): one pair of
    `compare_quantized`, or of quant/fp8_quality.py's several pairs over one reference pass."""
    res = {"engine": engine}
    if floor is not None:
        res["floor"] = floor
    res["gates"] = quantized_gates(engine, floor)
    return res
