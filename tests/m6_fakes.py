"""Row files of a made-up final matrix (numbers invented, shapes real): the merge tests and
tests/fixtures/final_example.json (the page's fixture) are built from them."""
from __future__ import annotations

import datetime as _dt

from monolith.bench import final
from monolith.eval.correctness import not_gated
from monolith.results import base_row

UUID = "GPU-00000000-1111-2222-3333-444444444444"
T0 = _dt.datetime(2026, 12, 7, 17, 0, 0, tzinfo=_dt.UTC)
ENV = {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "sm_clock_mhz": 1980,
       "mem_clock_mhz": 3201, "power_limit_w": 700, "temperature_c": 31}
WEIGHTS = {"kind": "synthetic", "seed": 0, "num_layers": 28, "sha256": "0" * 64}
SPEEDS = {"megakernel-bf16-upstream": 1350.0, "megakernel-fp8-upstream": 1900.0, "megakernel-bf16-stream": 2180.0,
          "megakernel-fp8-stream": 2410.0, "megakernel-nvfp4-stream": 2600.0, "llamacpp-bf16": 690.0,
          "llamacpp-q8_0": 760.0, "hf-eager": 31.0, "hf-static": 45.0, "hf-compile": 180.0, "reference-graph": 222.0}


def _stats(m: float, runs: int = 5) -> dict:
    rs = [m * (1 + d) for d in (-0.004, -0.002, 0.0, 0.001, 0.003)[:runs]]
    rs = rs if runs == 5 else [m] * runs
    import statistics
    return {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "runs": rs}


def _sweep(m: float) -> dict:
    return {str(p): {"status": "ok", "tok_s": _stats(m * (1 - p / 8000), 1) | {"runs": [m * (1 - p / 8000)]},
                     "us_per_token": 1e6 / (m * (1 - p / 8000)), "bytes_per_token": 1_192_000_000 + 114_688 * p,
                     "predicted_us_per_token": 1e6 / (m * 1.1)}
            for p in (16, 128, 512, 1024, 2048)}


def row(engine: str, quick: bool = False) -> dict:
    m = SPEEDS[engine]
    kind = "monolith" if engine.startswith("megakernel-") else "baseline"
    from monolith.bench.baselines import llamacpp, registry

    label = llamacpp.LABELS.get(engine.removeprefix("llamacpp-")) if engine.startswith("llamacpp-") else \
        registry.spec(engine).label
    r = base_row(engine, label, experimental=engine.endswith("nvfp4-stream"))
    runs = 5 if m >= 100 else 1
    bpt = 640_000_000 if "fp8" in engine or "q8" in engine else 1_192_000_000
    joules = 25600 / m * 420.0
    r.update(status="ok", kind=kind, variant=engine.removeprefix("megakernel-") if kind == "monolith" else None,
             tok_s=_stats(m, runs), us_per_token={"median": 1e6 / m, "min": 1e6 / m, "max": 1e6 / m},
             predicted_us_per_token=bpt / 4.5e12 * 1e6, bytes_per_token=bpt, eff_bw_tbs=bpt * m / 1e12,
             energy={"method": "nvml-total-energy", "joules": joules, "window_s": 25600 / m * 1.05,
                     "decode_s": 25600 / m, "tokens": 25600, "mean_w": 420.0},
             tok_per_joule=25600 / (420.0 * 25600 / m), runs_note=None if runs == 5 else
             f"{runs} run: under 100 tok/s (warm-up estimate {m:.0f} tok/s)", speed_label=None,
             gate={"passed": True, "divergences": 0, "prompts": 20, "tokens_per_prompt": 256})
    if kind == "monolith":
        r["sweep"] = None if quick else _sweep(m)
    if engine.startswith("llamacpp-"):
        r["gate"] = not_gated("external engine: llama.cpp has no teacher-forced interface; not gated")
        r["reason"] = "not gated (external)"
    if engine in ("hf-static", "hf-compile"):
        r["gate"] = {**not_gated(final.UNGATED_LABEL), "verdict": {
            "passed": False, "reasons": ["prompt 0: 3 repeated decodes are not bitwise identical"],
            "deterministic": False, "divergences": 0, "divergences_disallowed": 0}}
        r["speed_label"] = r["reason"] = final.UNGATED_LABEL
    fmt = "fp8" if "fp8" in engine and kind == "monolith" else "nvfp4" if "nvfp4" in engine else None
    if fmt:
        r["weight_format"] = fmt
        r["gates"] = {
            "implementation": {"passed": True, "oracle": f"fp32 reference on the {fmt} weights dequantized",
                               "rule": "margin rule, tolerance 0.5 logits"},
            "quality": {"passed": False, "reference": "fp32 on the original bf16 weights", "ppl_ratio": 0.988,
                        "ppl_limit": 1.02, "agreement": 0.411 if fmt == "fp8" else 0.087, "agreement_min": 0.9,
                        "kl": 1.43, "positions": 10000, "prompts": 100, "agree_tokens": 64,
                        "floor": {"engine": "megakernel-bf16-stream", "agreement": 0.976, "ppl_ratio": 1.001,
                                  "kl": 0.00104}}}
    return r


def write_rows(rows_dir, engines=None, *, uuid: str = UUID, start: _dt.datetime = T0, step_s: float = 60.0,
               quick: bool = False) -> list:
    """One row file per engine (llama.cpp: one file, two rows), `step_s` apart."""
    engines = engines or final.all_engines()
    paths = []
    for i, e in enumerate(engines):
        rows = [row(x, quick) for x in ((["llamacpp-bf16", "llamacpp-q8_0"]) if e == "llamacpp" else [e])]
        s = start + _dt.timedelta(seconds=i * step_s)
        paths.append(final.write_row_file(
            rows_dir, e, rows, gpu_uuid=uuid, gpu="NVIDIA H200", started=s.isoformat(),
            ended=(s + _dt.timedelta(seconds=step_s * 0.9)).isoformat(), env=ENV, weights=WEIGHTS,
            protocol={"runs": 5, "tokens": 256, "prompts": 20, "quick": quick}))
    return paths


def example_final(tmp) -> dict:
    """tests/fixtures/final_example.json: the merge of every engine's fake row file, with the paths
    the merge publishes (results/timelines/, results/xray/)."""
    from pathlib import Path

    rows = Path(tmp) / "rows"
    write_rows(rows)
    (rows / "timelines").mkdir()
    for e in ("megakernel-fp8-stream", "llamacpp-q8_0", "hf-compile", "reference-graph"):
        (rows / "timelines" / f"{e}.json").write_text("{}")
    (rows / "xray").mkdir()
    for v in final.VARIANTS:
        (rows / "xray" / f"{v}.raw.npz").write_bytes(b"")
    doc = final.merge(rows, Path(tmp) / "repo" / "results" / "final.json", publish_root=Path(tmp) / "repo")
    doc["created"] = "2026-12-07T17:12:00+00:00"
    return doc
