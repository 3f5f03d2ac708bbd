"""One benchmark session: oracle -> for each engine: gate, then (only if it passed) speed ->
optional quality -> results JSON + Markdown (+ timelines). `monolith bench` and `monolith m1`
both run this.

Time caps: the whole M1 must fit one GPU call, and HF eager runs at ~34 tok/s. Each engine
gets a time budget for its gate and for its timed runs; a slow engine is measured on fewer
prompts (never fewer tokens or runs) and its row says so (`reduced`, gate `reduced`).
"""
from __future__ import annotations

import dataclasses
import gc
import json
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from monolith import envinfo, results
from monolith.bench import bwprobe, bytemodel
from monolith.bench.baselines import registry
from monolith.bench.decode import BenchConfig, Clock, bench_engine, timeline, warmup
from monolith.eval import correctness


@dataclass
class SuiteConfig:
    engines: list[str]
    model: str | None = None
    device: str = "cuda"
    bench: BenchConfig = field(default_factory=BenchConfig)
    gate_prompts: int = 20
    gate_tokens: int = 256
    tolerance: float = correctness.TOLERANCE
    det_repeats: int = 3
    det_prompts: int = 1
    engine_budget_s: float | None = None   # gate gets this much, timed runs this much again
    max_total_s: float | None = None       # shrink budgets so the session fits
    timelines_dir: Path | None = None
    timeline_tokens: int = 256
    llamacpp_json: Path | None = None
    # one or several {"engine", "ref", "positions", "prompts", "text", "free_running", "sanity"}
    quality: dict | list[dict] | None = None
    title: str = "monolith decode benchmark"
    # engines whose gate may fail on the bitwise repeat alone and still show a speed, labelled
    # (the M6 matrix: HF's static cache modes; bench/final.py UNGATED_LABEL)
    ungated_ok: tuple[str, ...] = ()
    # the full protocol keeps every prompt and cuts only the run count, and only for engines under
    # this rate (tok/s, warm-up estimate); None: the time budget cuts prompts (monolith bench/m1)
    slow_below_tok_s: float | None = None
    # race timelines scaled to one decode(first, n) call's end (the headline's way); False: raw
    timeline_scaled: bool = False
    # the bandwidth record predictions use (bench/bwprobe.py); None: run_suite measures it first
    bandwidth: dict | None = None


def log(msg: str) -> None:
    print(msg, flush=True)


def load_inputs(model: str | None):
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint
    from monolith.tokenizer import load_tokenizer

    path = ensure_checkpoint(model)
    ckpt = load_checkpoint(path, allow_reduced_depth=True)
    tok = load_tokenizer(ckpt.path)
    return ckpt, tok


def prompt_tokens(name: str, tok) -> list[list[int]]:
    from monolith import prompts

    data = prompts.load(name)
    texts = data["prompts"] if isinstance(data, dict) else data
    return [tok.encode(t) for t in texts]


def sweep_sequence(prompts: list[list[int]], n: int) -> list[int]:
    """A fixed long context for the sweep: the bench prompts concatenated, repeated to n tokens."""
    flat = [t for p in prompts for t in p]
    return (flat * (n // max(len(flat), 1) + 1))[:n]


def _oracle_progress(prompts: int, tokens: int, t0: float, cap_s: float | None = None):
    """The oracle's greedy runs take minutes on a CPU: one line per prompt, with the rate. With a
    session cap, the first prompt's rate projects the whole oracle: over the cap is refused there
    (the cap bounds the session, the oracle included)."""
    done = [0]

    def step() -> None:
        done[0] += 1
        if done[0] % tokens == 0:
            dt = time.perf_counter() - t0
            log(f"  oracle: prompt {done[0] // tokens}/{prompts} ({done[0] / dt:,.1f} tok/s, {dt:.0f} s)")
            need = dt / done[0] * prompts * tokens
            if cap_s and done[0] == tokens and need > cap_s:
                from monolith.errors import MonolithError
                raise MonolithError(f"the gate's oracle alone would take ~{need:,.0f} s at {done[0] / dt:,.1f} tok/s, "
                                    f"over the session cap of {cap_s:,.0f} s (--max-total)")
    return step


def _free() -> None:
    """Callers drop their references first; then memory really goes back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_suite(cfg: SuiteConfig) -> dict:
    t0 = time.perf_counter()
    ckpt, tok = load_inputs(cfg.model)
    env = envinfo.collect(cfg.device)
    # the GPU in hand's streaming read, measured before anything else runs on it
    if cfg.bandwidth is None:
        cfg = dataclasses.replace(cfg, bandwidth=bwprobe.resolve(cfg.device, gpu=env.get("gpu"), log=log))
    bw = cfg.bandwidth.get("tbs")
    bench_prompts = prompt_tokens("bench", tok)
    protocol = {"title": cfg.title, **cfg.bench.protocol(), "gate_prompts": cfg.gate_prompts,
                "gate_tokens": cfg.gate_tokens, "tolerance_logits": cfg.tolerance, "det_repeats": cfg.det_repeats,
                "det_prompts": cfg.det_prompts, "engine_budget_s": cfg.engine_budget_s, "max_total_s": cfg.max_total_s,
                **bwprobe.protocol_keys(cfg.bandwidth), "device": cfg.device,
                "byte_model": "weights (28 layers + LM head + 1 embedding row) + 114,688 B x cached positions"}
    doc = results.new_doc(env, ckpt.describe(), protocol)
    seq = sweep_sequence(bench_prompts, max(cfg.bench.sweep_positions or (0,)) + 1)

    locals_ = [e for e in cfg.engines if registry.spec(e).kind == "local"]
    # One oracle per weight format among the engines: fp32 compute on the weights each engine
    # multiplies (bf16: the checkpoint; fp8: its pack dequantized, registry.checkpoint_for), so
    # every gate checks an implementation, never a quantizer.
    ckpts, oracle_sets = {"bf16": ckpt}, {}
    for fmt in dict.fromkeys(registry.weights_of(e) for e in locals_):
        ck = ckpts[fmt] = registry.checkpoint_for(fmt, ckpt)
        on = "" if fmt == "bf16" else f" on the {fmt} weights dequantized ({ck.describe().get('scheme')})"
        log(f"oracle: fp32 reference{on}, {cfg.gate_prompts} prompts x {cfg.gate_tokens} tokens")
        ta = time.perf_counter()
        orc = registry.oracle(ck, cfg.device)
        oset = correctness.oracle_runs(orc, bench_prompts[:cfg.gate_prompts], cfg.gate_tokens,
                                       progress=_oracle_progress(cfg.gate_prompts, cfg.gate_tokens, ta, cfg.max_total_s))
        oset.desc["seconds"] = round(time.perf_counter() - ta, 1)
        if fmt != "bf16":
            oset.desc["weights"] = ck.describe()
            doc["protocol"].setdefault("oracles", {})[fmt] = f"fp32 reference on the {fmt} weights dequantized"
        oracle_sets[fmt] = oset
        log(f"  oracle done in {oset.desc['seconds']} s: distinct {oset.desc['distinct_frac']:.2f}, "
            f"repeats {oset.desc['repeat_frac']:.2f}, median margin {oset.desc['margin_median']:.2f}")
        orc = None
        _free()

    for i, name in enumerate(cfg.engines):
        spec = registry.spec(name)
        budget = cfg.engine_budget_s
        if cfg.max_total_s:
            left = cfg.max_total_s - (time.perf_counter() - t0)
            share = left / (len(cfg.engines) - i) * 0.4
            budget = share if budget is None else min(budget, share)
            if left < 15 and spec.kind == "local":
                row = results.base_row(name, spec.label, spec.experimental)
                row["reason"] = f"session time cap ({cfg.max_total_s:.0f} s) reached before this engine"
                doc["rows"].append(row)
                continue
        log(f"[{i + 1}/{len(cfg.engines)}] {name}" + (f" (budget {budget:.0f} s per phase)" if budget else ""))
        if spec.kind == "external":
            ext = external_rows(name, cfg, ckpt)
            for r in ext:
                bwprobe.reprice_external(r, cfg.bandwidth)
            doc["rows"].extend(ext)
            continue
        fmt = registry.weights_of(name)
        doc["rows"].append(measure(name, spec, ckpts.get(fmt, ckpt), tok, bench_prompts, seq, oracle_sets.get(fmt), cfg,
                                   budget, bw, weights=fmt))

    for q in ([cfg.quality] if isinstance(cfg.quality, dict) else cfg.quality or []):
        left = cfg.max_total_s - (time.perf_counter() - t0) if cfg.max_total_s else None
        if left is not None and left < 30:
            doc["protocol"].setdefault("quality_skipped", []).append(
                f"{q['engine']} vs {q.get('ref', 'reference')}: session time cap, {left:.0f} s left")
        else:
            attach_quality(doc, q, cfg.device, ckpt, tok)
    doc["env_after"] = envinfo.collect(cfg.device)
    doc["protocol"]["wall_s"] = round(time.perf_counter() - t0, 1)
    return doc


def measure(name, spec, ckpt, tok, bench_prompts, seq, oracle_set, cfg: SuiteConfig, budget, bw,
            weights: str = "bf16") -> dict:
    """Gate then time one engine. `ckpt` and `oracle_set` are those of the engine's weight format
    (registry.checkpoint_for), `weights` names it (the byte model counts its bytes). `bw`: the GPU
    in hand's streaming read (TB/s) or None (no prediction); cfg.bandwidth says where it came from."""
    row = results.base_row(name, spec.label, spec.experimental)
    if weights != "bf16":
        row["weights"] = ckpt.describe()
        row["weight_format"] = weights
    ta = time.perf_counter()
    try:
        eng = registry.build(name, ckpt, cfg.device)
    except Exception as e:  # noqa: BLE001  (a missing extension/GPU is a row, not a crash)
        row["reason"] = f"could not build: {type(e).__name__}: {e}"
        log(f"  not run: {row['reason']}")
        return row
    row["info"] = _jsonable(dict(eng.info or {}))
    row["build_s"] = round(time.perf_counter() - ta, 1)
    if eng.info.get("compiled") is False:  # hf-compile fell back to eager: its speed would be mislabelled
        row["reason"] = "torch.compile failed: " + "; ".join(eng.info.get("compile_errors", []))[:400]
        row["status"] = "failed"
        eng = None
        _free()
        return row
    try:
        clock = Clock(eng.device)
        est = warmup(eng, bench_prompts[0], cfg.bench.warmup_tokens, clock)
        row["warmup_tok_s"] = est
        runs = oracle_set.runs
        n = cfg.gate_tokens
        k = gate_prompts_within(budget, est, n, len(runs), cfg.det_prompts, cfg.det_repeats)
        sub = correctness.OracleSet(runs[:k], oracle_set.desc)
        log(f"  gate: {k} prompts x {n} tokens (~{est:,.0f} tok/s)")
        # An engine may declare a TIGHTER tolerance for its numeric class (the megakernel
        # accumulates in fp32 like the oracle, so bf16 rounding noise does not apply to it).
        tol = min(cfg.tolerance, float(eng.info.get("gate_tolerance", cfg.tolerance)))
        verdict = correctness.gate(eng, sub, tolerance=tol, det_prompts=cfg.det_prompts,
                                   det_repeats=cfg.det_repeats)
        if k < len(runs):
            verdict["reduced"] = gate_reduced_note(k, len(runs), budget, est, n, cfg.det_prompts, cfg.det_repeats)
        row["gate"] = verdict
        log(f"  gate {'PASSED' if verdict['passed'] else 'FAILED'}: {verdict['divergences']} divergence(s), "
            f"{verdict['divergences_disallowed']} disallowed; deterministic={verdict['deterministic']}")
        if name.startswith("mutant-"):
            row["expected"] = "gate fails (negative control)"
            row["control_ok"] = not verdict["passed"]
        if not verdict["passed"] and name in cfg.ungated_ok and determinism_only(verdict):
            from monolith.bench.final import UNGATED_LABEL

            row["gate"] = {**correctness.not_gated(UNGATED_LABEL), "verdict": verdict}
            row["speed_label"] = row["reason"] = UNGATED_LABEL
            log(f"  {UNGATED_LABEL}: its speed is measured and labelled, never as a gated speed")
        elif not verdict["passed"]:
            row.update(status="failed", reason="correctness gate failed: " + "; ".join(verdict["reasons"][:3]))
            return row
        if name.startswith("mutant-"):
            row.update(status="failed", reason="NEGATIVE CONTROL PASSED THE GATE: the gate is too weak")
            return row
        bcfg = BenchConfig(**{**cfg.bench.__dict__, "budget_s": budget})
        if budget and est < 200:  # slow engine: one sweep window per position (the row records sweep_reps)
            bcfg.sweep_reps = 1
            row["sweep_reps"] = 1
        if cfg.slow_below_tok_s is not None:
            bcfg.budget_s = None  # every prompt, always
            row["runs_note"] = None
            if est < cfg.slow_below_tok_s:
                bcfg.runs = runs_within(budget, est, cfg.bench.runs, cfg.bench.prompts * cfg.bench.tokens)
                if bcfg.runs < cfg.bench.runs:
                    row["runs_note"] = (f"{bcfg.runs} of {cfg.bench.runs} runs: under {cfg.slow_below_tok_s:.0f} tok/s "
                                        f"(warm-up estimate {est:,.1f} tok/s), time budget {budget:.0f} s")
        first_prompt: dict = {}  # the timed runs' decodes of prompt 0: the race timeline's end (no extra decode)
        row.update(bench_engine(eng, bench_prompts, bcfg, sweep_seq=seq, bw_tbs=bw, tok_s_est=est, log=log,
                                byte_model=bytemodel.ByteModel.for_weights(weights, ckpt.shape), first_prompt=first_prompt,
                                bw_note=bwprobe.note(cfg.bandwidth)))
        row["status"] = "ok"
        pred = row.get("predicted_us_per_token")
        log(f"  {row['tok_s']['median']:,.1f} tok/s (min {row['tok_s']['min']:,.1f}, max {row['tok_s']['max']:,.1f}), "
            + (f"predicted {pred:.1f} µs vs {row['us_per_token']['median']:.1f} µs measured" if pred is not None
               else f"{row['us_per_token']['median']:,.1f} µs/token ({row['timer']}; {row['prediction']['kind']})"))
        if cfg.timelines_dir:
            write_timeline(eng, spec, bench_prompts[0], cfg, tok, ckpt, one_call=first_prompt)
    except Exception as e:  # noqa: BLE001  (an engine that crashes gets no speed)
        row.update(status="failed", reason=f"{type(e).__name__}: {e}", tok_s=None)
        row["traceback"] = traceback.format_exc()[-2000:]
        log(f"  failed: {row['reason']}")
    finally:
        row["engine_s"] = round(time.perf_counter() - ta, 1)
        eng = None
        _free()
    return row


def determinism_only(verdict: dict) -> bool:
    """The gate agreed with the oracle (teacher-forced and free-running) and failed only the bitwise repeat."""
    reasons = verdict.get("reasons") or []
    return (verdict.get("passed") is False and verdict.get("deterministic") is False
            and not verdict.get("divergences_disallowed") and bool(reasons)
            and all("not bitwise identical" in r for r in reasons))


def gate_prompts_within(budget_s: float | None, tok_s_est: float, tokens: int, prompts: int, det_prompts: int,
                        det_repeats: int) -> int:
    """Gate prompts (the oracle's first k, at least 1, at most `prompts`) whose steps, as the gate
    runs them (correctness.gate_steps), fit budget_s at the warm-up rate. No budget: every prompt."""
    if not budget_s:
        return prompts
    if not math.isfinite(tok_s_est):
        raise ValueError(f"the warm-up rate is {tok_s_est}: a gate cannot be sized from it")
    k = prompts
    while k > 1 and correctness.gate_steps(k, tokens, det_prompts, det_repeats) > budget_s * tok_s_est:
        k -= 1
    return k


def gate_reduced_note(k: int, prompts: int, budget_s: float, tok_s_est: float, tokens: int, det_prompts: int,
                      det_repeats: int) -> str:
    """The verdict's `reduced`: which prompts, the budget, and the steps the sizing counted."""
    steps = correctness.gate_steps(k, tokens, det_prompts, det_repeats)
    used = "prompt 0" if k == 1 else f"prompts 0-{k - 1}"
    reps = min(det_prompts, k) * max(det_repeats - 1, 0)
    took = f", ~{steps / tok_s_est:,.0f} s predicted" if tok_s_est > 0 else ""
    return (f"{k}/{prompts} prompts ({used} of the oracle's {prompts}): gate budget {budget_s:.0f} s at "
            f"~{tok_s_est:,.1f} tok/s (warm-up); {correctness.GATE_PASSES} passes x {tokens} tokens per prompt "
            f"+ {reps} determinism repeat(s) = {steps:,} steps{took}")


def runs_within(budget_s: float | None, tok_s_est: float, runs: int, tokens_per_run: int) -> int:
    """Timed runs (all prompts each) that fit the budget: at least 1, at most `runs`."""
    if not budget_s or tok_s_est <= 0:
        return runs
    return max(1, min(runs, math.floor(budget_s * tok_s_est / tokens_per_run)))


def write_timeline(eng, spec, prompt, cfg: SuiteConfig, tok, ckpt, one_call: dict | None = None) -> None:
    tl = timeline(eng, prompt, cfg.timeline_tokens, tok, scaled=cfg.timeline_scaled, one_call=one_call)
    tl.update(label=spec.label, gpu=envinfo.collect(cfg.device).get("gpu"), weights=ckpt.describe(),
              prompt=tok.decode(prompt) if tok is not None else None)
    tl["engine"] = spec.name  # the registry's name (what rows and the page call it), whatever the class says
    out = Path(cfg.timelines_dir) / f"{spec.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(tl) + "\n")


def external_rows(name: str, cfg: SuiteConfig, ckpt) -> list[dict]:
    if name == "llamacpp":
        from monolith.bench.baselines.llamacpp import rows_from_json
        return rows_from_json(cfg.llamacpp_json)
    if name == "vllm":
        from monolith.bench.baselines.vllm import run as run_vllm
        return [run_vllm(ckpt.path, cfg.bench)]
    raise ValueError(name)


def attach_quality(doc: dict, q: dict, device, ckpt, tok) -> None:
    from monolith.eval import quality

    name, ref_name = q["engine"], q.get("ref", "reference")
    log(f"quality: {name} against {ref_name} ({q.get('positions')} positions, {q.get('prompts')} prompts)")
    row = next((r for r in doc["rows"] if r["engine"] == name), None)
    if row is None:
        row = results.base_row(name, registry.spec(name).label)
        row["reason"] = "quality only"
        doc["rows"].append(row)
    try:
        ref = registry.build(ref_name, ckpt, device)
        eng = ref if name == ref_name else registry.build(name, ckpt, device)
        text = quality.text_tokens(tok, q.get("text"))
        qp = prompt_tokens("quality", tok)[:q.get("prompts", 100)]
        res = quality.evaluate(ref, eng, text, qp, positions=q.get("positions", quality.KL_POSITIONS),
                               context=q.get("context", quality.CONTEXT), stride=q.get("stride", quality.STRIDE),
                               free_running=q.get("free_running", True))
        res["sanity"] = bool(q.get("sanity"))
        row["quality"] = res
        log(f"  ppl {res['ppl']:.3f} (ref {res['ref_ppl']:.3f}), agreement {res['agreement']:.2%}, KL {res['kl']:.2e}")
        ref = eng = None
        _free()
    except Exception as e:  # noqa: BLE001
        row["quality"] = {"error": f"{type(e).__name__}: {e}"}
        log(f"  quality failed: {e}")


def _jsonable(o):
    try:
        json.dumps(o)
        return o
    except TypeError:
        return json.loads(json.dumps(o, default=str))
