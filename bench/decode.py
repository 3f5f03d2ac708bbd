"""Decode benchmark protocol (notes/harness.md; NOTES.md, Facts: protocols). The harness owns every timer; engines never time
themselves.

One *run* = for each of the run's prompts: reset, prefill (untimed), then CUDA events around
one `decode(first, 256)` call; the run's time is the sum over prompts and its rate is
prompts x 256 / time. Headline = median of 5 runs, with min and max. Warm-up before the runs.
Slow engines may get fewer prompts per run (a per-engine time budget); the row says so.

Position sweep: prefill to position p with the engine's own path, then time `reps`
consecutive windows of W tokens (window r starts at p + r*W), median rate.

On CPU there are no CUDA events: perf_counter after the call returns (CPU work is
synchronous). Such numbers are marked `timer: perf_counter (CPU)` and are never headline.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass

import torch

from monolith.bench import bytemodel
from monolith.bench import power as _power
from monolith.engine import Engine

SWEEP_POSITIONS = (16, 128, 512, 1024, 2048)
NO_CPU_PREDICTION = "none: the time model predicts a GPU (bandwidth and barrier costs), not a CPU run"
NO_BW_PREDICTION = "none: no streaming-read bandwidth of the GPU in hand"


@dataclass
class BenchConfig:
    runs: int = 5
    tokens: int = 256
    prompts: int = 20
    warmup_tokens: int = 32
    sweep_positions: tuple[int, ...] = SWEEP_POSITIONS
    sweep_window: int = 32
    sweep_reps: int = 3
    budget_s: float | None = None   # cap on the timed decode of the 5 runs (reduces prompts/run)
    power: bool = True
    quick: bool = False
    nvml: object = None     # an NVML module (tests pass a fake); None: pynvml if importable

    @classmethod
    def quick_config(cls) -> BenchConfig:
        return cls(runs=3, tokens=64, prompts=3, warmup_tokens=8, sweep_positions=(16, 128, 512),
                   sweep_window=16, sweep_reps=1, quick=True)

    def protocol(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "nvml"}
        d["energy_method"] = ("NVML total-energy counter read before and after the timed runs; "
                              "tok/J = decoded tokens / (mean W of the loop x summed decode s)")
        d["sweep_positions"] = list(self.sweep_positions)
        d["headline"] = not self.quick
        d["run_definition"] = (f"per run: for each prompt, reset + prefill (untimed), then CUDA events (perf_counter on CPU) "
                               f"around one decode of {self.tokens} tokens; run time = sum over prompts")
        d["statistic"] = f"median of {self.runs} runs, with min and max"
        return d


class Clock:
    """CUDA events around a call on the current stream (GPU), perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.kind = "cuda events" if self.cuda else "perf_counter (CPU)"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn):
        if self.cuda:
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            out = fn()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1) / 1e3, out
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out


def stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": list(xs)}


def us_stats(tok_s: dict) -> dict:
    return {"median": 1e6 / tok_s["median"], "min": 1e6 / tok_s["max"], "max": 1e6 / tok_s["min"]}


def prompts_within(budget_s: float | None, tok_s_est: float, runs: int, tokens: int, have: int) -> int:
    """How many prompts per run fit the time budget (at least 1, at most all)."""
    if not budget_s or tok_s_est <= 0:
        return have
    return max(1, min(have, math.floor(budget_s * tok_s_est / (runs * tokens))))


def warmup(engine: Engine, prompt: list[int], n: int, clock: Clock) -> float:
    """Two untimed-for-headline decodes; returns the rate of the second (for the budget)."""
    rate = 0.0
    for _ in range(2):
        engine.reset()
        first = engine.prefill(prompt)
        dt, _ = clock.time(lambda first=first: engine.decode(first, n))
        rate = n / max(dt, 1e-9)
    return rate


def bench_engine(engine: Engine, prompts: list[list[int]], cfg: BenchConfig, sweep_seq: list[int] | None = None,
                 bw_tbs: float | None = None, tok_s_est: float | None = None, log=print,
                 byte_model: bytemodel.ByteModel | None = None, first_prompt: dict | None = None,
                 bw_note: str | None = None) -> dict:
    """Headline runs + sweep for one (already gated) engine. Returns the speed part of a row.

    bw_tbs: the streaming-read bandwidth of the GPU in hand (bench/bwprobe.py) that predictions
    divide by; None: no prediction, and `bw_note` (why there is none, or where bw_tbs came from)
    goes into the row's `prediction`.

    first_prompt: a dict the caller gives to receive the first prompt's timed decode of every run
    ({"prompt", "seconds": [one per run], "tokens": the first run's}): the race timeline scales to
    it instead of decoding that prompt once more (`timeline(one_call=...)`)."""
    clock = Clock(engine.device)
    if tok_s_est is None:
        tok_s_est = warmup(engine, prompts[0], cfg.warmup_tokens, clock)
    prompts = prompts[:cfg.prompts]
    n_p = prompts_within(cfg.budget_s, tok_s_est, cfg.runs, cfg.tokens, len(prompts))
    use = prompts[:n_p]
    run_s = []
    meter = _power.EnergyMeter(_gpu_index(engine), nvml=cfg.nvml) if clock.cuda and cfg.power else None
    with meter if meter is not None else contextlib.nullcontext():
        clock.sync()
        e0 = meter.read() if meter is not None and meter.available else None
        for r in range(cfg.runs):
            total = 0.0
            for i, p in enumerate(use):
                engine.reset()
                first = engine.prefill(p)
                dt, out = clock.time(lambda first=first: engine.decode(first, cfg.tokens))
                if out.numel() != cfg.tokens:
                    raise RuntimeError(f"{engine.name}.decode returned {out.numel()} tokens, expected {cfg.tokens}")
                total += dt
                if i == 0 and first_prompt is not None:  # read after the clock stopped: never inside a timing
                    first_prompt.setdefault("seconds", []).append(dt)
                    if "tokens" not in first_prompt:
                        first_prompt.update(prompt=list(p), tokens=[int(x) for x in out.tolist()])
            run_s.append(total)
            log(f"  run {r + 1}/{cfg.runs}: {len(use) * cfg.tokens / total:,.1f} tok/s")
        clock.sync()
        e1 = meter.read() if e0 is not None else None
    tokens_per_run = len(use) * cfg.tokens
    tok_s = stats([tokens_per_run / s for s in run_s])
    positions = [pos for p in use for pos in bytemodel.decode_positions(len(p), cfg.tokens)]
    mean_bytes = sum(engine.bytes_per_token(pos) for pos in positions) / len(positions)
    bw = bw_tbs
    mean_pos = sum(positions) / len(positions)
    # The time model's bandwidth and barrier costs are the GPU's (NOTES.md, Facts): no prediction for a
    # CPU run, and none without the bandwidth of the GPU in hand (never another GPU's).
    pred = bytemodel.predict_us(dict(engine.info or {}), mean_pos, bw, byte_model) if clock.cuda and bw else None
    if pred is not None and bw_note:
        pred["bw_source"] = bw_note
    none = {"kind": NO_CPU_PREDICTION} if not clock.cuda else \
        {"kind": NO_BW_PREDICTION, **({"reason": bw_note} if bw_note else {})}
    row = {
        "timer": clock.kind,
        "tok_s": tok_s,
        "us_per_token": us_stats(tok_s),
        "prompts_per_run": len(use),
        "tokens_per_run": tokens_per_run,
        "bytes_per_token": int(round(mean_bytes)),
        "mean_position": mean_pos,
        "eff_bw_tbs": mean_bytes * tok_s["median"] / 1e12,
        "roofline_frac": mean_bytes * tok_s["median"] / 1e12 / bw if bw else None,
        "predicted_us_per_token": pred["us"] if pred else None,
        "prediction": pred or none,
        "tok_per_joule": None,
    }
    if n_p < len(prompts):
        row["reduced"] = (f"{n_p}/{len(prompts)} prompts per run: time budget {cfg.budget_s:.0f} s at "
                          f"~{tok_s_est:,.0f} tok/s (warm-up estimate)")
    if e0 is not None:
        energy = _power.energy_row(e0[1], e1[1], e1[0] - e0[0], sum(run_s), tokens_per_run * cfg.runs)
        row["tok_per_joule"] = energy.pop("tok_per_joule", None)
    elif not clock.cuda:
        energy = _power.not_measured("CPU run: no GPU energy counter")
    elif not cfg.power:
        energy = _power.not_measured("energy measurement switched off (--no-power)")
    else:
        energy = _power.not_measured(meter.error or "NVML not available")
    row["energy"] = energy
    if sweep_seq is not None and cfg.sweep_positions:
        # On a CPU the sweep's prefills to position 2048 take minutes: there it may take no longer
        # than the budget, or without one than the timed runs took, so small settings stay small.
        sweep_s = cfg.budget_s if cfg.budget_s else (None if clock.cuda else max(sum(run_s), 1.0))
        row["sweep"] = sweep(engine, sweep_seq, cfg, clock, bw, byte_model,
                             budget_s=sweep_s, tok_s_est=tokens_per_run / max(statistics.median(run_s), 1e-9))
    return row


def sweep(engine: Engine, seq: list[int], cfg: BenchConfig, clock: Clock, bw_tbs: float | None,
          byte_model: bytemodel.ByteModel | None = None, budget_s: float | None = None,
          tok_s_est: float | None = None) -> dict:
    """With `budget_s` and `tok_s_est`, a position whose prefill and windows (p + reps x W steps
    at the estimated rate) would not fit what is left of the budget is "not run", named so."""
    out = {}
    cap = getattr(engine, "context_cap", None) or (engine.info or {}).get("context_cap")
    W, R = cfg.sweep_window, cfg.sweep_reps
    t0 = time.perf_counter()
    for p in cfg.sweep_positions:
        need = p + R * W
        if p > len(seq) or (cap and need > cap):
            out[str(p)] = {"status": "not run", "reason": f"needs {need} positions (have {len(seq)}-token text, context cap {cap})"}
            continue
        if budget_s is not None and tok_s_est:
            left = budget_s - (time.perf_counter() - t0)
            if need / tok_s_est > left:
                out[str(p)] = {"status": "not run", "reason": f"~{need / tok_s_est:,.0f} s at ~{tok_s_est:,.1f} tok/s "
                                                              f"does not fit the sweep's {budget_s:,.0f} s budget"}
                continue
        engine.reset()
        tok = engine.prefill(seq[:p])
        rates = []
        for _ in range(R):
            dt, o = clock.time(lambda tok=tok: engine.decode(tok, W))
            rates.append(W / dt)
            tok = int(o[-1])
        positions = range(p + 1, p + R * W + 1)
        mb = sum(engine.bytes_per_token(x) for x in positions) / len(positions)
        s = stats(rates)
        out[str(p)] = {"status": "ok", "tok_s": s, "us_per_token": 1e6 / s["median"], "bytes_per_token": int(mb),
                       "eff_bw_tbs": mb * s["median"] / 1e12, "positions": [p + 1, p + R * W],
                       "predicted_us_per_token": bytemodel.predict_us(dict(engine.info or {}), p + R * W / 2, bw_tbs,
                                                                        byte_model)["us"] if clock.cuda and bw_tbs
                       else None}
    return out


def timeline(engine: Engine, prompt: list[int], n: int, tokenizer=None, scaled: bool = False,
             one_call: dict | None = None) -> dict:
    """Per-token timestamps for the page's race: one `decode(tok, 1)` per token with events
    around each (so host gaps between steps are excluded). Never used for headline numbers.

    scaled: stretch the single-call shape onto one `decode(first, n)` call of the same prompt (CUDA
    events, as the headline is timed): `t_us` ends where that call ended, the single-call times stay
    in `t_us_single`. One-token calls pay a launch and a host round trip each, so unscaled lanes run
    ~20 % behind the headline's rate. `one_call` (bench_engine's `first_prompt`): the timed runs
    already decoded this prompt that way, so the median of their times is the end, and no extra
    decode runs (a slow engine's 256 steps are ~10 s); without it, or for another prompt or length,
    the call is made here."""
    clock = Clock(engine.device)
    engine.reset()
    tok = engine.prefill(prompt)
    toks, t_us, acc = [], [], 0.0
    for _ in range(n):
        dt, o = clock.time(lambda tok=tok: engine.decode(tok, 1))
        tok = int(o[0])
        acc += dt * 1e6
        toks.append(tok)
        t_us.append(round(acc, 2))
    out = {
        "engine": engine.name, "prompt_tokens": list(prompt), "tokens": toks,
        "pieces": tokenizer.pieces(toks) if tokenizer is not None else None, "t_us": t_us,
        "method": f"{clock.kind} around each single-token decode call; cumulative; not headline",
    }
    if scaled and t_us and t_us[-1] > 0:
        reuse = (one_call is not None and list(one_call.get("prompt") or []) == list(prompt)
                 and len(one_call.get("tokens") or []) == n and bool(one_call.get("seconds")))
        if reuse:
            dt, got = statistics.median(one_call["seconds"]), [int(x) for x in one_call["tokens"]]
            if dt <= 0 or not math.isfinite(dt):
                raise ValueError(f"timeline: the timed runs' decode of this prompt took {dt} s")
            where = (f"the median of the timed runs' {len(one_call['seconds'])} decode(first, {n}) call(s) of the "
                     "same prompt ended (the headline's own timing, not decoded again)")
        else:
            engine.reset()
            first = engine.prefill(prompt)
            dt, o = clock.time(lambda: engine.decode(first, n))
            got = [int(x) for x in o.tolist()]
            where = f"one decode(first, {n}) call of the same prompt ended (the headline's timing)"
        if got != toks:
            out["scale_note"] = "the one-call decode gave other tokens than the single-token calls"
        scale = dt * 1e6 / t_us[-1]
        out.update(t_us_single=t_us, t_us=[round(x * scale, 2) for x in t_us], scale=scale,
                   method=f"{clock.kind}: each token's share from single-token decode calls, scaled so the last token "
                          f"lands where {where}")
    return out


def _gpu_index(engine: Engine) -> int:
    d = torch.device(engine.device)
    return d.index if d.index is not None else (torch.cuda.current_device() if torch.cuda.is_available() else 0)
