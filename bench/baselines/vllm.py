"""vLLM baseline: bf16, CUDA graphs, batch 1 — when vllm imports. It does not on our GPU
machine (no network; wheels of 336 MB+ pinned to another torch, kernels fetched at run
time: NOTES.md, Facts), so the usual result is a "not run" row that says why.

When it does import: one LLM, greedy, 256 new tokens with ignore_eos per bench prompt;
decode time = (time for 256 tokens) - (time for 1 token) per prompt, so prefill is excluded
the same way as ours up to vLLM's scheduling overhead. Not gated (no teacher-forced path).
"""
from __future__ import annotations

import statistics
import time

from monolith import results
from monolith.eval.correctness import not_gated

LABEL = "vLLM bf16, CUDA graphs, batch 1"


def run(ckpt_dir, bench_cfg, prompts_text: list[str] | None = None) -> dict:
    row = results.base_row("vllm", LABEL)
    try:
        import vllm
        from vllm import LLM, SamplingParams
    except Exception as e:  # noqa: BLE001  (ImportError or a broken install: either way not run)
        row["reason"] = (f"vllm not importable ({type(e).__name__}: {str(e)[:160]}); not installable offline on "
                         "the GPU machine (NOTES.md, Facts)")
        return row
    try:
        if prompts_text is None:
            from monolith import prompts
            data = prompts.load("bench")
            prompts_text = data["prompts"] if isinstance(data, dict) else data
        use = prompts_text[:bench_cfg.prompts]
        llm = LLM(model=str(ckpt_dir), dtype="bfloat16", max_num_seqs=1, enforce_eager=False, seed=0)
        one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
        full = SamplingParams(temperature=0, max_tokens=bench_cfg.tokens, ignore_eos=True)
        llm.generate(use[:1], full, use_tqdm=False)  # warm-up
        runs = []
        for _ in range(bench_cfg.runs):
            total = 0.0
            for p in use:
                t0 = time.perf_counter()
                llm.generate([p], one, use_tqdm=False)
                t1 = time.perf_counter()
                llm.generate([p], full, use_tqdm=False)
                t2 = time.perf_counter()
                total += max((t2 - t1) - (t1 - t0), 1e-9)
            runs.append(len(use) * (bench_cfg.tokens - 1) / total)
        med = statistics.median(runs)
        row.update(status="ok", reason="not gated (external)", version=vllm.__version__, timer="perf_counter",
                   gate=not_gated("external engine: not gated"),
                   tok_s={"median": med, "min": min(runs), "max": max(runs), "runs": runs},
                   us_per_token={"median": 1e6 / med, "min": 1e6 / max(runs), "max": 1e6 / min(runs)})
    except Exception as e:  # noqa: BLE001
        row.update(status="failed", reason=f"vllm run failed: {type(e).__name__}: {str(e)[:300]}")
    return row
