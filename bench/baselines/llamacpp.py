"""Rows for the llama.cpp baseline, read from the JSON that llamacpp.sh wrote.

llama-bench reports per-repetition tokens/s (`samples_ts`) for its tg test; we take the
median/min/max of those, like our own runs. Not gated: llama.cpp has no teacher-forced
interface here, and its numerics differ (GGUF kernels); the row says so.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from monolith import REPO_ROOT, jsonio, results
from monolith.bench import bwprobe
from monolith.eval.correctness import not_gated

DEFAULT_JSON = REPO_ROOT / "results" / "llamacpp.json"
NO_BANDWIDTH = "no bandwidth record was passed with the rows: the run that reads them prices them at its own"
LABELS = {"bf16": "llama.cpp BF16 (llama-bench tg256)", "q8_0": "llama.cpp Q8_0 (llama-bench tg256)"}


def _tests(raw) -> list[dict]:
    return raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []


def rows_from_json(path: str | Path | None = None, bandwidth: dict | None = None) -> list[dict]:
    """The llama.cpp rows of llamacpp.sh's JSON. `bandwidth`: the run's bandwidth record
    (bench/bwprobe.py resolve / for_lease), which prices each row's predicted µs/token (its whole
    file streamed per token); without one the rows carry no prediction and say so."""
    p = Path(path) if path else DEFAULT_JSON
    if not p.is_file():
        row = results.base_row("llamacpp", "llama.cpp")
        row["reason"] = f"{p} not found: run bench/baselines/llamacpp.sh SDIST first"
        return [row]
    doc = jsonio.load_object(p)
    if doc.get("status") != "ok":
        row = results.base_row("llamacpp", "llama.cpp")
        row.update(reason=doc.get("reason") or "llamacpp.sh did not run", version=doc.get("version"))
        return [row]
    rows = []
    for kind, raw in (doc.get("results") or {}).items():
        row = results.base_row(f"llamacpp-{kind}", LABELS.get(kind, f"llama.cpp {kind}"))
        row.update(gate=not_gated("external engine: llama.cpp has no teacher-forced interface; not gated"),
                   version=doc.get("version"), source_json=str(p), created=doc.get("created"))
        conv = (doc.get("conversion") or {}).get(kind)
        if isinstance(conv, dict):  # the GGUF's conversion (CPU): never part of the speed
            where = ("before llamacpp.sh started (monolith m6: beside a process's oracles), outside this row's window"
                     if conv.get("ahead") else "by llamacpp.sh, inside this row's window")
            row["conversion"] = {"seconds": conv.get("seconds"), "ahead": bool(conv.get("ahead")),
                                 "converted": conv.get("converted"), "where": where}
        tg = [t for t in _tests(raw) if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0]
        if not tg:
            row["reason"] = f"no tg test in llama-bench output ({str(raw)[:200]})"
            rows.append(row)
            continue
        t = tg[0]
        samples = [float(x) for x in (t.get("samples_ts") or [t.get("avg_ts")]) if x]
        med = statistics.median(samples)
        row.update(status="ok", reason="not gated (external)", timer="llama-bench",
                   tok_s={"median": med, "min": min(samples), "max": max(samples), "runs": samples},
                   us_per_token={"median": 1e6 / med, "min": 1e6 / max(samples), "max": 1e6 / min(samples)},
                   llama_bench={k: t.get(k) for k in ("build_commit", "build_number", "gpu_info", "model_type",
                                                      "model_size", "n_gen", "n_batch", "n_gpu_layers",
                                                      "flash_attn", "avg_ts", "stddev_ts")})
        energy = t.get("monolith_energy") or {"method": "not measured",
                                              "reason": "llama-bench ran without bench/baselines/llamacpp_run.py"}
        row["energy"] = {k: v for k, v in energy.items() if k != "tok_per_joule"}
        row["tok_per_joule"] = energy.get("tok_per_joule")
        if t.get("model_size"):
            # llama.cpp streams its whole file per token (+ KV, small at tg256)
            row["bytes_per_token"] = int(t["model_size"])
            row["eff_bw_tbs"] = int(t["model_size"]) * med / 1e12
            row["predicted_us_per_token"] = None
            row["prediction"] = {"kind": "none", "reason": NO_BANDWIDTH}
            bwprobe.reprice_external(row, bandwidth)  # the same bandwidth as every other row of the run
        rows.append(row)
    return rows
