"""Issue 48 step 0 on the GPU: build probes/hop_k.cu and probes/gemv_k.cu, run them, write their JSON
and a summary against the predictions (notes/ktoken.md) under --out, print a short table last.

    python -m monolith.probes.ktoken_run --out DIR [--rounds 200] [--only hop,gemv] [--nvcc nvcc]

Writes DIR/gemv_k_predicted.json before the GEMV probe runs (the store half's predicted cycles per
partial-tile layout, from shared-memory wavefront counts), then DIR/hop_k.json, DIR/gemv_k.json
(each probe's own JSON, with its status and ptxas spills) and DIR/ktoken_summary.json (every measured row beside its prediction, the hops' extra cost per
layer and the hop part of T(k)/T(1)). Exit 0 when both probes ran and every check held, 1 when a
probe failed (its row says why), 2 on bad arguments or without a GPU.

The predictions are computed from the committed results (results/m4_hop_latency.json,
results/m4_cluster_fold.json) where a linear model applies, are fixed numbers for the GEMV rounds'
dots (reasoned in notes/ktoken.md), and come from a shared-memory wavefront model for the GEMV
rounds' store half per partial-tile layout (rck, krc-pad, frag16: see GEMV_STORE_FIXED), so that a
run compares against what was said before it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import tempfile
from pathlib import Path

from monolith.errors import MonolithError

PROBE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROBE_DIR.parent
RESULTS = REPO_ROOT / "results"
SCHEMA = "monolith-ktoken/1"
TIMEOUTS = {"hop_k": 150, "gemv_k": 90}
KS = (1, 2, 4, 8)
LAYERS = 28
# fp8-stream's token today (results/m5_nvfp4.json's run: 2,411.3 tok/s), the T(1) of the pricing
T1_US = {"fp8-stream": 1e6 / 2411.3, "bf16-stream": 1e6 / 2183.2}
# The five hops of a layer (docs/DESIGN.md §3) as the probe's word kinds: (hop, kind, base, contributors)
LAYER_HOPS = (
    ("residual -> qkv", "tagged", 1024, 1),
    ("qkv -> attention", "tagged", 1024, 1),
    ("attention -> O", "tagged", 1024, 1),
    ("O -> MLP (counted)", "counted", 1024, 9),
    ("MLP -> down", "tagged", 3072, 1),
)

# ---------------------------------------------------------------------------------------------
# Predictions (written before the run; notes/ktoken.md gives the reasoning)
# ---------------------------------------------------------------------------------------------
# quiet mode: the kernel's hops sit ~0.07-0.1 us above the idle probe at k = 1 (bench/chainmodel.py:
# qkv's hop 0.84 against the floor's 0.77); the words beyond share the L2 with the landing copies.
# drained mode (the copies in flight landed before the stores): the idle hop. stream mode (no hold):
# not predicted (results/m4_hop_latency.json has it for k = 1: 12-13 us)
QUIET_EXTRA_US = 0.10
QUIET_SLOPE_FACTOR = 1.5
# the GEMV rounds (cycles): the mma count does not depend on k
GEMV_DOTS_CYCLES = {
    ("bf16", "round"): 1100,
    ("bf16", "hoisted"): 700,
    ("bf16", "hoisted-hi"): 600,
    ("e4m3", "round"): 1500,
    ("e4m3", "hoisted"): 1400,
    ("e4m3", "hoisted-hi"): 1300,
}
# The store half (probes/gemv_k.cu: from the barrier that publishes the partial tiles to the barrier
# after the tagged words are stored) by the layout of the partial tiles. Model: the SM's shared
# memory serves one wavefront (one conflict-free 128-byte access) per cycle and its queue is in
# order, so the store half is
#     GEMV_STORE_FIXED + backlog x (fragment-store wavefronts) + (reducer-load wavefronts)
# GEMV_STORE_FIXED: the load latency, the 7 dependent adds, the scale, the global stores' issue and
# the closing barrier. backlog: the share of the 16 warps' fragment stores (issued at the end of the
# dots half, all warps together) still queued when the publishing barrier opens: ~1 for bf16, whose
# warps end their mma together, 0.3-0.45 for E4M3, whose longer cvt-bound dots spread the warps'
# ends (the longer the dots, the smaller the share: round < hoisted < hoisted-hi).
# FIXED and the backlogs are fitted to the rck rows of results/ktoken/gemv_k.json (H100: bf16
# 1,190-1,590 cycles, E4M3 720-2,020); the wavefront counts are layout arithmetic (gemv_wavefronts,
# checked against an address-level bank model in tests/test_gemv_k_model.py), and for krc-pad and
# frag16 the cycles are predictions.
# the keys of the probes' JSON rows that the summaries copy (tests/test_ktoken_run.py checks that the
# probes print each of them)
HOP_ROW_KEYS = (
    "kind",
    "base",
    "k",
    "contributors",
    "mode",
    "words",
    "passes",
    "ready_first_us",
    "ready_last_us",
    "ready_last_p90_us",
    "ready_last_mean_us",
    "ok",
)
GEMV_ROW_KEYS = (
    "fmt",
    "b",
    "k",
    "loader",
    "mma_cycles",
    "dots_cycles",
    "stores_cycles",
    "sm_ghz",
    "dots_us",
    "stores_us",
    "round_us",
    "max_rel_err",
    "ok",
)
GEMV_LAYOUTS = ("rck", "krc-pad", "frag16")
GEMV_STORE_FIXED = 100
GEMV_STORE_BACKLOG = {
    ("bf16", "round"): 0.97,
    ("bf16", "hoisted"): 0.97,
    ("bf16", "hoisted-hi"): 0.95,
    ("e4m3", "round"): 0.30,
    ("e4m3", "hoisted"): 0.39,
    ("e4m3", "hoisted-hi"): 0.45,
}
GEMV_WARPS = 16
MMA_GHZ = 1.80  # results/m4_tc_clock.json: any mma.sync holds the SM at 1.80 GHz
# today's FFMA rounds for one vector (results/m4_round_gemv.json): the k = 1 cost a k-vector FFMA round
# multiplies by ~k (the dots are issue-bound once x is shared)
FFMA_SHAPE = {"bf16": "x-perm", "e4m3": "e4m3-kernel"}


def _load(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise MonolithError(f"cannot read {path}: {e}") from e


def hop_model(results: Path = RESULTS) -> dict:
    """The idle hop as a line through the committed S0 rows (1,024 and 3,072 tagged words, last
    block ready, producers together), and the counted atomics' drain rate from the cluster-fold
    probe's direct row (128 blocks, idle)."""
    hop = _load(results / "m4_hop_latency.json")
    pts = {
        r["words"]: r["ready_last_us"]
        for r in hop["rows"]
        if r["strategy"].startswith("S0") and not r["load"] and r["delay_ns"] == 0
    }
    if not {1024, 3072} <= set(pts):
        raise MonolithError("m4_hop_latency.json has no idle S0 rows for 1,024 and 3,072 words")
    slope = (pts[3072] - pts[1024]) / 2048
    fold = _load(results / "m4_cluster_fold.json")
    f0 = [
        r
        for r in fold["rows"]
        if r["mode"].startswith("F0") and r["blocks"] == 128 and not r["load"] and r["delay_ns"] == 0
    ]
    if not f0:
        raise MonolithError("m4_cluster_fold.json has no idle F0 row on 128 blocks")
    return {
        "intercept_us": pts[1024] - 1024 * slope,
        "slope_us_per_word": slope,
        "atomics_per_us": f0[0]["atomics_per_round"] / f0[0]["ready_last_us"],
        "source": "results/m4_hop_latency.json S0 idle; results/m4_cluster_fold.json F0 128 blocks idle",
    }


def predict_hop(model: dict, kind: str, base: int, k: int, contributors: int = 1, mode: str = "idle") -> float | None:
    """Predicted ready_last (us after the last block's stores) of one hop of k vectors; None for the
    stream mode (no prediction)."""
    if kind not in ("tagged", "packed", "counted") or k < 1 or mode not in ("idle", "quiet", "drained", "stream"):
        raise ValueError(f"no prediction for {kind} k={k} mode={mode}")
    if mode == "stream":
        return None
    quiet = mode == "quiet"
    words = base * k // (2 if kind == "packed" else 1)
    slope = model["slope_us_per_word"] * (QUIET_SLOPE_FACTOR if quiet else 1.0)
    t = model["intercept_us"] + slope * words
    if kind == "counted":
        t += base * k * contributors / model["atomics_per_us"]
    return t + (QUIET_EXTRA_US if quiet else 0.0)


def gemv_wavefronts(fmt: str, layout: str, k: int) -> dict:
    """Shared-memory wavefronts of one round's partial tiles (one block): the 16 warps' fragment
    stores, and the reducer's loads for k useful columns (the E4M3 row scales included).
    rck: a fragment store's 32 lanes hit 2 banks (16-way), a reducer warp (32 rows of a column)
    reads its 8 partials as 2 x 16 B with every lane in the same 4 banks (32 wavefronts each).
    krc-pad: conflict-free 4-byte stores and 8 conflict-free 4-byte loads per reducer warp.
    frag16: one 16-byte store per lane and tile (4 wavefronts), and rows / 16 reducer warps of
    8 x 16-byte conflict-free loads whatever k is."""
    if fmt not in ("bf16", "e4m3") or layout not in GEMV_LAYOUTS or not 1 <= k <= 8:
        raise ValueError(f"no wavefront count for {fmt} {layout} k={k}")
    e4 = fmt == "e4m3"
    rows, tiles = (64, 2) if e4 else (32, 1)
    stores = GEMV_WARPS * tiles * 4  # 4 outputs per lane and tile
    active = k * rows // 32  # rck, krc-pad: reducer warps with a useful column
    if layout == "rck":
        write, read = 16 * stores, active * 2 * 32 + (active if e4 else 0)
    elif layout == "krc-pad":
        write, read = stores, active * 8 + (active if e4 else 0)
    else:
        write, read = stores, (rows // 16) * 8 * 4 + ((rows // 16) * 2 if e4 else 0)  # 16 B: 4 wavefronts a store
    return {"write": write, "read": read}


def predict_gemv_stores(fmt: str, b: str, layout: str, k: int) -> float:
    w = gemv_wavefronts(fmt, layout, k)
    return GEMV_STORE_FIXED + GEMV_STORE_BACKLOG[(fmt, b)] * w["write"] + w["read"]


def gemv_predictions() -> dict:
    """The store half's prediction for every layout, format and k: written before the probe runs."""
    return {
        "model": "stores_cycles = fixed + backlog[fmt] * write_wavefronts + read_wavefronts "
        "(one shared-memory wavefront per cycle, in order)",
        "fixed_cycles": GEMV_STORE_FIXED,
        "backlog": {f"{f} {b}": v for (f, b), v in GEMV_STORE_BACKLOG.items()},
        "fitted_on": "rck rows of results/ktoken/gemv_k.json (H100); krc-pad and frag16 are predictions",
        "layouts": {
            layout: {
                fmt: {
                    b: {
                        str(k): gemv_wavefronts(fmt, layout, k)
                        | {"stores_cycles": round(predict_gemv_stores(fmt, b, layout, k))}
                        for k in range(1, 9)
                    }
                    for b in ("round", "hoisted", "hoisted-hi")
                }
                for fmt in ("bf16", "e4m3")
            }
            for layout in GEMV_LAYOUTS
        },
    }


def predict_gemv(fmt: str, b: str, k: int, layout: str = "rck") -> dict:
    dots = GEMV_DOTS_CYCLES[(fmt, b)]
    stores = round(predict_gemv_stores(fmt, b, layout, k))
    return {
        "dots_cycles": dots,
        "stores_cycles": stores,
        "sm_ghz": MMA_GHZ,
        "round_us": (dots + stores) / MMA_GHZ / 1e3,
    }


def ffma_round_us(fmt: str, k: int, results: Path = RESULTS) -> float | None:
    """Today's FFMA round (idle loader) for one vector times k: what k vectors cost without mma."""
    try:
        rows = _load(results / "m4_round_gemv.json")["rows"]
    except MonolithError:
        return None
    r = [x for x in rows if x["shape"] == FFMA_SHAPE[fmt] and x["loader"] == "idle"]
    return None if not r else k * (r[0]["dots_cycles"] + r[0]["stores_cycles"]) / r[0]["sm_ghz"] / 1e3


# ---------------------------------------------------------------------------------------------
# Summaries of the probes' JSON
# ---------------------------------------------------------------------------------------------


def _ok_rows(res: dict | None) -> list[dict]:
    return [r for r in (res or {}).get("rows", []) if isinstance(r, dict)]


def summarize_hop(res: dict, model: dict) -> dict:
    """Each row beside its prediction; per (kind, base, contributors, mode) the cost of each extra
    vector at k = 8 (mean of rounds: the timer's 256 ns tick is below the median's resolution);
    per mode the extra per layer over k = 1 and the hop part of T(k)/T(1)."""
    rows = []
    for r in _ok_rows(res):
        pred = predict_hop(model, r["kind"], r["base"], r["k"], r.get("contributors", 1), r["mode"])
        rows.append(
            {key: r.get(key) for key in HOP_ROW_KEYS} | {"predicted_us": None if pred is None else round(pred, 3)}
        )
    by = {(r["kind"], r["base"], r["contributors"], r["mode"], r["k"]): r for r in rows}
    per_vector = []
    for (kind, base, c, mode, k), r in sorted(by.items()):
        one = by.get((kind, base, c, mode, 1))
        if k > 1 and one and r["ok"] and one["ok"]:
            per_vector.append(
                {
                    "kind": kind,
                    "base": base,
                    "contributors": c,
                    "mode": mode,
                    "k": k,
                    "extra_per_vector_us": round((r["ready_last_mean_us"] - one["ready_last_mean_us"]) / (k - 1), 3),
                }
            )
    layers = {}
    for mode in sorted({r["mode"] for r in rows}):
        for packed in (False, True):
            name = f"{mode}{' packed' if packed else ''}"
            per_k = {}
            for k in KS:
                total = 0.0
                for _hop, kind, base, c in LAYER_HOPS:
                    kk = "packed" if packed and kind == "tagged" else kind
                    r, one = by.get((kk, base, c, mode, k)), by.get((kk, base, c, mode, 1))
                    if not (r and one and r["ok"] and one["ok"]):
                        total = None
                        break
                    total += r["ready_last_mean_us"] - one["ready_last_mean_us"]
                if total is not None:
                    per_k[str(k)] = {
                        "hop_extra_per_layer_us": round(total, 3),
                        "hop_only_t_ratio": {v: round((t1 + LAYERS * total) / t1, 3) for v, t1 in T1_US.items()},
                    }
            if per_k:
                layers[name] = per_k
    return {"rows": rows, "per_vector": per_vector, "per_layer": layers}


def summarize_gemv(res: dict) -> dict:
    rows, inv = [], []
    for r in _ok_rows(res):
        if r.get("kind") == "invariance":
            inv.append(r)
            continue
        layout = r.get("layout", "rck")  # probe output from before the layouts: rck
        pred = predict_gemv(r["fmt"], r["b"], r["k"], layout)
        ffma = ffma_round_us(r["fmt"], r["k"])
        rows.append(
            {key: r.get(key) for key in GEMV_ROW_KEYS}
            | {"layout": layout, "predicted": pred, "ffma_k_round_us": None if ffma is None else round(ffma, 4)}
        )
    return {
        "rows": rows,
        "invariance": inv,
        "bitwise_ok": bool(inv) and all(x.get("ok") for x in inv),
        "store_model": gemv_predictions(),
    }


PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_spills(log: str) -> int:
    return sum(int(a) + int(b) for a, b in PTXAS_SPILL.findall(log))


def table(summary: dict) -> str:
    """The short table printed last."""
    out = []
    hop = summary.get("hop")
    if hop:
        out.append("hop (us after the last store, last block ready: mean of rounds | predicted)")
        out.append(f"{'kind':8} {'base':>5} {'C':>2} {'mode':6} " + " ".join(f"{'k=' + str(k):>13}" for k in KS))
        keys = sorted(
            {(r["kind"], r["base"], r["contributors"], r["mode"]) for r in hop["rows"]},
            key=lambda x: (x[3], x[0], x[1], x[2]),
        )
        for kind, base, c, mode in keys:
            cells = []
            for k in KS:
                r = next(
                    (
                        x
                        for x in hop["rows"]
                        if (x["kind"], x["base"], x["contributors"], x["mode"], x["k"]) == (kind, base, c, mode, k)
                    ),
                    None,
                )
                pred = "  -  " if r is None or r["predicted_us"] is None else f"{r['predicted_us']:5.2f}"
                cells.append(
                    f"{'-':>13}"
                    if r is None
                    else f"{r['ready_last_mean_us']:6.2f}|{pred}{'' if r['ok'] else '!'}".rjust(13)
                )
            out.append(f"{kind:8} {base:>5} {c:>2} {mode:6} " + " ".join(cells))
        for name, per_k in hop["per_layer"].items():
            out.append(
                f"per layer, {name}: "
                + ", ".join(
                    f"k={k} +{v['hop_extra_per_layer_us']:.2f} us (fp8 x{v['hop_only_t_ratio']['fp8-stream']:.2f})"
                    for k, v in per_k.items()
                )
            )
    gemv = summary.get("gemv")
    if gemv:
        out.append(
            "gemv round (idle loader): dots+stores us at the run's clock | predicted | FFMA x k; "
            "then the store half in cycles | predicted"
        )
        order = {name: i for i, name in enumerate(GEMV_LAYOUTS)}
        for fmt, b, layout in sorted(
            {(r["fmt"], r["b"], r["layout"]) for r in gemv["rows"]}, key=lambda x: (x[0], x[1], order.get(x[2], 99))
        ):
            cells, stores = [], []
            for k in KS:
                r = next(
                    (
                        x
                        for x in gemv["rows"]
                        if (x["fmt"], x["b"], x["layout"], x["k"], x["loader"]) == (fmt, b, layout, k, "idle")
                    ),
                    None,
                )
                if r is None:
                    cells.append("-")
                    continue
                ff = "-" if r["ffma_k_round_us"] is None else f"{r['ffma_k_round_us']:.2f}"
                cells.append(f"k={k} {r['round_us']:.3f}|{r['predicted']['round_us']:.3f}|{ff}{'' if r['ok'] else '!'}")
                stores.append(f"{r['stores_cycles']:.0f}|{r['predicted']['stores_cycles']}")
            clk = next((x["sm_ghz"] for x in gemv["rows"] if (x["fmt"], x["b"], x["layout"]) == (fmt, b, layout)), None)
            out.append(
                f"  {fmt:4} {b:10} {layout:7} "
                + "  ".join(cells)
                + ("" if clk is None else f"  ({clk:.2f} GHz)")
                + "  stores "
                + " ".join(stores)
            )
        out.append(
            "bitwise batch / slot invariance, determinism / layout agreement: "
            + ("ok" if gemv["bitwise_ok"] else "FAILED")
            + "; "
            + ", ".join(
                f"{x['fmt']} {x['b']} {x.get('layout', 'rck')}: {x.get('batch_mismatches')}/"
                f"{x.get('slot_mismatches')}/{x.get('determinism_mismatches')}/{x.get('layout_mismatches', 0)}"
                for x in gemv["invariance"]
            )
        )
    for name, st in summary.get("status", {}).items():
        out.append(f"{name}: {st}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def run(out: Path, only: list[str], rounds: int, nvcc: str) -> int:
    from monolith.probes import run as pr

    gpu = pr.detect_gpu()  # MonolithError without a GPU, before anything is built
    out.mkdir(parents=True, exist_ok=True)
    model = hop_model()
    summary: dict = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "gpu": gpu,
        "rounds": rounds,
        "hop_model": model,
        "status": {},
    }
    all_ok = True
    build_dir = Path(tempfile.mkdtemp(prefix="ktoken-build-"))  # binaries stay out of --out
    for name in ("hop_k", "gemv_k"):
        if name.removesuffix("_k") not in only:
            continue
        if name == "gemv_k":  # the predictions go to disk before anything is measured
            (out / "gemv_k_predicted.json").write_text(json.dumps(gemv_predictions(), indent=1) + "\n")
        print(f"[{name}] building for {gpu['arch']}", file=sys.stderr, flush=True)
        try:
            exe, log = pr.build_probe(name, gpu["arch"], nvcc, build_dir)
        except RuntimeError as e:
            res = {"ok": False, "status": "build failed", "reason": str(e)[-3000:]}
        else:
            print(f"[{name}] running (timeout {TIMEOUTS[name]} s)", file=sys.stderr, flush=True)
            res = pr.run_probe(exe, ["--rounds", str(rounds)], TIMEOUTS[name])
            res["ptxas_spill_bytes"] = ptxas_spills(log)
        (out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
        summary["status"][name] = res.get("status", "ok" if res.get("ok") else "failed") + (
            "" if res.get("ok") else f" ({res.get('reason', res.get('error', 'a check failed'))})"[:300]
        )
        all_ok = all_ok and bool(res.get("ok")) and res.get("status") == "ok"
        if name == "hop_k":
            summary["hop"] = summarize_hop(res, model)
        else:
            summary["gemv"] = summarize_gemv(res)
    (out / "ktoken_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(summary))
    return 0 if all_ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for the JSON files (created)")
    ap.add_argument("--only", default="hop,gemv", help="comma-separated: hop, gemv (default both)")
    ap.add_argument("--rounds", type=int, default=200, help="rounds per configuration (1..100000)")
    ap.add_argument("--nvcc", default="nvcc", help="nvcc executable")
    a = ap.parse_args(argv)
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    try:
        if not only or set(only) - {"hop", "gemv"}:
            raise MonolithError(f"--only takes hop and/or gemv, not {a.only!r}")
        if not 1 <= a.rounds <= 100000:
            raise MonolithError(f"--rounds must be 1..100000, not {a.rounds}")
        return run(a.out, only, a.rounds, a.nvcc)
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
