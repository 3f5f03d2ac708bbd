"""The chain model: the streaming schedule's token as its dependency chain (NOTES.md, twenty-eighth session).

The byte model (bench/bytemodel.py) prices bytes. The streaming schedule does not wait for bytes
(the X-ray's ring waits are ~1 % of the token); it waits for its chain. Per layer, five phases
run one after another, each entered through a hop:

    t_token = t_layer0 + (L - 1) * sum_P (hop_P + open_P + work_P) + t_head

This module fills that sum twice:

- measured, from an X-ray summary (xray/analyze.py) of one token, along P's milestone segment
  (the previous phase's last end to P's last end, median over layers):
  - hop_P: the producers' last store to the last block's thread 0 holding its words ("sees");
  - open_P: from there to the last block holding every thread's words and past its opening
    barrier ("ready": the s_gather interval ends after the first round's barrier, so this is the
    other threads' words plus the bookkeeping: RMSNorm, slot tests, the barrier). 0 for the hops
    without s_gather stamps (the attention hops);
  - work_P: the rest of the segment, the last block's dot products and stores. (P's median time
    per block is reported beside it, as `block_work_us`.)
- floor, from the standalone probes, each piece alone on an otherwise idle GPU:
  - hop: probes/hop_latency.cu S0 (every thread polls, memory idle), last block ready, for the
    hop's word count;
  - work: a GEMV phase's weights per block at the round probe's rate (probes/round_gemv.cu: bf16
    'x-perm' and E4M3 'e4m3-kernel'; both measure ~57 weights per ns per SM). NVFP4 has no round
    probe and takes E4M3's rate;
  - attention: probes/attn_split.cu's shipped shape (A3) for a split of min(64, position) cached
    positions (the short kernel's split; at long positions the wide kernel's splits are longer, so
    there this term is a lower bound, not the split's floor);
  - open: 0;
  - the LM head: its bytes at the bandwidth probe's best streaming rate;
  - layer 0's extra over a median layer, as measured.

The floor is the schedule with every overhead the probes do not have removed. It bounds what
tuning this schedule can reach; a target under it needs fewer hops or a shorter attention chain,
not a better knob.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from monolith import jsonio
from monolith.config import QWEN3_0_6B as M
from monolith.figures import pyplot, save_png

REPO = Path(__file__).resolve().parents[1]
# The five phases of a layer in chain order: the hop into each (producer -> wait phase), the
# hop's word count per block (probes/hop_latency.cu measures 1,024 and 3,072), and the weights
# the phase reads (None: attention, priced by its own probe).
CHAIN = (
    ("s_qkv", "s_down", "s_wait_resid", 1024, (M.num_q_heads + 2 * M.num_kv_heads) * M.head_dim * M.hidden),
    ("s_attn", "s_qkv", "s_wait_qkv", 1024, None),
    ("s_oproj", "s_attn", "s_wait_attn", 1024, M.hidden * M.num_q_heads * M.head_dim),
    ("s_mlp", "s_oproj", "s_wait_o", 1024, 2 * M.intermediate * M.hidden),
    ("s_down", "s_mlp", "s_wait_act", 3072, M.hidden * M.intermediate),
)
ROUND_SHAPE = {"bf16": ("x-perm", 32 * 1024), "fp8": ("e4m3-kernel", 64 * 1024)}  # shape, weights per round
PROBES = {"hop": "results/m4_hop_latency.json", "attn": "results/m4_attn_split.json",
          "round": "results/m4_round_gemv.json", "bandwidth": "results/m0_probes.json"}


def weight_format(variant: str) -> str:
    v = variant.lower()
    return "nvfp4" if "nvfp4" in v else "fp8" if "fp8" in v else "bf16"


def head_bytes(fmt: str) -> int:
    """The LM head's bytes (bf16, or E4M3 codes + an fp32 scale per row for fp8 and NVFP4)."""
    return M.vocab * M.hidden * 2 if fmt == "bf16" else M.vocab * M.hidden + 4 * M.vocab


def measured(summary: dict) -> dict:
    """The chain as one X-ray summary measured it (µs). Raises ValueError on a trace without the
    streaming schedule's milestones and hops."""
    ms = summary.get("milestones") or {}
    segs = {x["phase"]: x for x in ms.get("segments") or []}
    hops = {(h["producer"], h["wait"]): h for h in (summary.get("hops") or {}).get("latency") or []}
    phases = []
    for name, prod, wait, _words, _w in CHAIN:
        if name not in segs or (prod, wait) not in hops:
            raise ValueError(f"the trace has no {name} milestone or {prod} -> {wait} hop: not a streaming-schedule X-ray")
        h = hops[(prod, wait)]
        sees = h["last_sees_us"]
        ready = h.get("last_ready_us") if h.get("last_ready_us") is not None else sees
        seg = segs[name]["segment_us"]
        phases.append({"phase": name, "hop_us": sees, "open_us": ready - sees, "work_us": seg - ready,
                       "segment_us": seg, "block_work_us": segs[name]["work_us"]})
    layers = summary["layers"]
    edges = summary.get("edges") or {}
    head = edges.get("lm_head") or {}
    first = (edges.get("first_layer") or {}).get("layer_us")
    layer = sum(p["segment_us"] for p in phases)
    n = int(layers["count"])
    head_us = float(head.get("span_us", 0.0)) + float(head.get("after_last_layer_us") or 0.0)
    layer0 = float(first) if first is not None else layer
    return {"phases": phases, "layer_us": layer, "layer_mean_us": layers["mean_us"], "layers": n,
            "layer0_us": layer0, "head_us": head_us,
            "token_us": layer0 + (n - 1) * layer + head_us,
            "token_mean_us": layer0 + (n - 1) * float(layers["mean_us"]) + head_us,
            "trace_token_us": float(summary["token_time_us"])}


def load_probes(root: Path = REPO) -> dict:
    """The probe results the floor uses, from their committed JSON files."""
    out = {}
    for k, rel in PROBES.items():
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"{rel} is missing: run its probe (scripts/gpu.sh hop / attn / round / probes)")
        out[k] = jsonio.load(p)
    return out


def hop_floor(probes: dict, words: int) -> float:
    rows = [r for r in probes["hop"]["rows"] if r["strategy"].startswith("S0") and not r["load"]
            and r["delay_ns"] == 0 and r["words"] == words and r["ok"]]
    if not rows:
        raise ValueError(f"no S0 row for {words} words in {PROBES['hop']}")
    return float(min(r["ready_last_us"] for r in rows))


def round_rate(probes: dict, fmt: str) -> float:
    """Weights per µs per SM of one GEMV round from shared memory, loader idle."""
    shape, weights = ROUND_SHAPE["fp8" if fmt == "nvfp4" else fmt]
    rows = [r for r in probes["round"]["rows"] if r["shape"] == shape and r["loader"] == "idle" and r["ok"]]
    if not rows:
        raise ValueError(f"no idle '{shape}' row in {PROBES['round']}")
    return weights / min(float(r["dots_us"]) for r in rows)


def attn_floor(probes: dict, position: int) -> float:
    """The shipped split shape (A3) for the longest split at `position` (at most 64 cached)."""
    need = min(64, position)
    rows = [r for r in probes["attn"]["rows"] if r["shape"] == "A3" and r["ok"] and r["cached"] >= need]
    if not rows:
        raise ValueError(f"no A3 row with >= {need} cached positions in {PROBES['attn']}")
    return float(min(r["median_us"] for r in rows))


def stream_tbs(probes: dict) -> float:
    rows = probes["bandwidth"]["probes"]["bandwidth"]["results"]
    return float(max(r["stream_tbs"] for r in rows if r.get("sum_ok", True)))


def floor(probes: dict, fmt: str, position: int, blocks: int, layer0_extra_us: float) -> dict:
    """The chain with every piece at its probe's time (µs)."""
    rate = round_rate(probes, fmt)
    phases = []
    for name, _prod, _wait, words, weights in CHAIN:
        work = attn_floor(probes, position) if weights is None else weights / blocks / rate
        phases.append({"phase": name, "hop_us": hop_floor(probes, words), "work_us": work, "open_us": 0.0})
    for p in phases:
        p["segment_us"] = p["hop_us"] + p["work_us"]
    layer = sum(p["segment_us"] for p in phases)
    tbs = stream_tbs(probes)
    head = head_bytes(fmt) / (tbs * 1e6)
    n = M.num_layers
    return {"phases": phases, "layer_us": layer, "layers": n, "layer0_us": layer + layer0_extra_us, "head_us": head,
            "token_us": layer + layer0_extra_us + (n - 1) * layer + head, "round_weights_per_us": rate,
            "stream_tbs": tbs}


def what_if(fl: dict, changes: list[str]) -> dict:
    """The floor with some of its pieces changed, to price a proposed chain before anyone builds it.
    Each change is PHASE.PIECE=US (replace) or PHASE.PIECE=+US / -US (add), PIECE one of hop, open,
    work. E.g. MLP and down folded into one phase whose split-K partials are reduced in clusters
    (the cluster-fold probe, results/m4_cluster_fold.json, C = 8: 2.05 us from the last partials to
    the last block ready): no activation hop (s_down.hop=0), down's dots inside MLP (s_mlp.work=+0.43,
    s_down.work=0), and the reduction in place of the residual hop (s_qkv.hop=2.05).
    Raises ValueError on a phase or piece that does not exist or a value that is not a number."""
    phases = [dict(p) for p in fl["phases"]]
    by = {p["phase"]: p for p in phases}
    for c in changes:
        try:
            lhs, val = c.split("=", 1)
            name, piece = lhs.rsplit(".", 1)
            x = float(val)
        except ValueError:
            raise ValueError(f"what-if {c!r}: expected PHASE.PIECE=US or PHASE.PIECE=+US (e.g. s_down.hop=0)") from None
        if name not in by or piece not in ("hop", "open", "work"):
            raise ValueError(f"what-if {c!r}: phases are {', '.join(by)}; pieces are hop, open, work")
        k = f"{piece}_us"
        by[name][k] = by[name][k] + x if val.strip()[:1] in "+-" else x
        if by[name][k] < 0:
            raise ValueError(f"what-if {c!r}: {name}'s {piece} would be negative")
    for p in phases:
        p["segment_us"] = p["hop_us"] + p["open_us"] + p["work_us"]
    layer = sum(p["segment_us"] for p in phases)
    extra = fl["layer0_us"] - fl["layer_us"]
    n = fl["layers"]
    return {"changes": list(changes), "phases": phases, "layer_us": layer,
            "token_us": layer + extra + (n - 1) * layer + fl["head_us"]}


def layer_budget(target_tok_s: float, head_us: float, layer0_extra_us: float, n: int = M.num_layers) -> float:
    """The mean layer time (µs) a target leaves after the LM head and layer 0's extra."""
    return (1e6 / target_tok_s - head_us - layer0_extra_us) / n


def report(summary: dict, probes: dict, targets: list[float], changes: list[str] | None = None) -> dict:
    meas = measured(summary)
    meta = summary["meta"]
    fmt = weight_format(meta["variant"])
    extra = meas["layer0_us"] - meas["layer_us"]
    fl = floor(probes, fmt, int(meta["position"]), int(meta["blocks"]), extra)
    out = {"variant": meta["variant"], "position": int(meta["position"]), "blocks": int(meta["blocks"]),
           "format": fmt, "measured": meas, "floor": fl, "targets": []}
    hop_f = min(p["hop_us"] for p in fl["phases"])
    work_f = sum(p["work_us"] for p in fl["phases"])
    for t in targets:
        b = layer_budget(t, fl["head_us"], extra)
        out["targets"].append({"tok_s": t, "layer_budget_us": b, "floor_layer_us": fl["layer_us"],
                               "reachable_at_floor": b >= fl["layer_us"],
                               # hops at the cheapest probe hop that fit beside the floor's work
                               "hops_that_fit": max(0.0, (b - work_f) / hop_f)})
    if changes:
        out["what_if"] = what_if(fl, changes)
    return out


def print_report(r: dict, console=None) -> None:
    from rich.table import Table

    from monolith.console import make_console

    con = console or make_console()
    m, f = r["measured"], r["floor"]
    t = Table(title=f"chain of one layer · {r['variant']} at position {r['position']}, {r['blocks']} blocks "
                    "(µs; measured = X-ray medians over layers, floor = probes)")
    for c in ("phase", "hop", "open", "work", "segment", "floor hop", "floor work", "floor segment"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    for a, b in zip(m["phases"], f["phases"], strict=True):
        t.add_row(a["phase"], *(f"{a[k]:.2f}" for k in ("hop_us", "open_us", "work_us", "segment_us")),
                  *(f"{b[k]:.2f}" for k in ("hop_us", "work_us", "segment_us")))
    t.add_row("layer", *(f"{sum(p[k] for p in m['phases']):.2f}" for k in ("hop_us", "open_us", "work_us")),
              f"{m['layer_us']:.2f}", *(f"{sum(p[k] for p in f['phases']):.2f}" for k in ("hop_us", "work_us")),
              f"{f['layer_us']:.2f}")
    con.print(t)
    con.print(f"token, measured chain: layer 0 {m['layer0_us']:.1f} + {m['layers'] - 1} x {m['layer_us']:.2f} + LM head "
              f"{m['head_us']:.1f} = {m['token_us']:.1f} µs (with the mean layer {m['layer_mean_us']:.2f}: "
              f"{m['token_mean_us']:.1f}; the traced launch {m['trace_token_us']:.1f})")
    con.print(f"token, floor: layer 0 {f['layer0_us']:.1f} + {f['layers'] - 1} x {f['layer_us']:.2f} + LM head "
              f"{f['head_us']:.1f} ({f['stream_tbs']:.2f} TB/s) = {f['token_us']:.1f} µs = {1e6 / f['token_us']:,.0f} tok/s")
    if "what_if" in r:
        w = r["what_if"]
        con.print(f"what-if floor ({'; '.join(w['changes'])}): {w['layer_us']:.2f} µs per layer, token "
                  f"{w['token_us']:.1f} µs = {1e6 / w['token_us']:,.0f} tok/s (the floor: {f['token_us']:.1f} µs)")
    for x in r["targets"]:
        slack = x["layer_budget_us"] - x["floor_layer_us"]
        verdict = (f"{slack:.2f} µs above the floor: every overhead of the chain together must fit in that "
                   f"(today {m['layer_us'] - f['layer_us']:.2f})" if x["reachable_at_floor"]
                   else "below the floor: not reachable by tuning this chain")
        con.print(f"target {x['tok_s']:,.0f} tok/s: {x['layer_budget_us']:.2f} µs per layer against the floor's "
                  f"{x['floor_layer_us']:.2f} ({verdict}); hops at the probe's cheapest hop that fit beside the "
                  f"floor's work: {x['hops_that_fit']:.1f} (the schedule has 5)")


def chain_png(r: dict, path) -> Path:
    """One layer's chain as two bars on a time axis (measured above, floor below): each phase's hop,
    opening and work in chain order, so the eye sees which pieces the floor does not have."""
    plt = pyplot()
    colors = {"hop_us": "#c0504d", "open_us": "#f3a683", "work_us": "#4f81bd"}
    labels = {"hop_us": "hop (measured: to thread 0's words; floor: to every word)",
              "open_us": "opening (the other threads' words, bookkeeping)",
              "work_us": "work (dot products, stores)"}
    fig, ax = plt.subplots(figsize=(12, 2.6), dpi=150)
    seen = set()
    for y, key in ((1, "measured"), (0, "floor")):
        t = 0.0
        for p in r[key]["phases"]:
            for k in ("hop_us", "open_us", "work_us"):
                w = max(p[k], 0.0)
                ax.barh(y, w, left=t, color=colors[k], edgecolor="white", linewidth=0.5,
                        label=labels[k] if k not in seen else None)
                seen.add(k)
                t += w
            ax.text(t - 0.05, y + 0.42, p["phase"].removeprefix("s_"), ha="right", va="bottom", fontsize=7)
        ax.text(t + 0.1, y, f"{t:.2f} µs", va="center", fontsize=8)
    ax.set_yticks([0, 1], ["floor (probes)", "measured (X-ray)"])
    ax.set_xlabel("µs from the end of the previous layer's down phase (last block)")
    ax.set_ylim(-0.6, 1.9)
    ax.set_title(f"one layer's chain · {r['variant']} at position {r['position']}, {r['blocks']} blocks", fontsize=10)
    ax.legend(loc="upper right", fontsize=7, ncols=3, frameon=False, bbox_to_anchor=(1.0, -0.25))
    return save_png(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m monolith.bench.chainmodel", description=(
        "The streaming schedule's token as its dependency chain: per layer, each phase's hop, opening "
        "and work as an X-ray measured them, beside the floor the standalone probes give for each piece."))
    ap.add_argument("raw", help="raw X-ray trace of a streaming variant (results/xray/<variant>.raw.npz)")
    ap.add_argument("--target", type=float, action="append", default=[],
                    help="tok/s targets to price against the floor (repeatable)")
    ap.add_argument("--probes", default=str(REPO), help="repository root holding the probes' results/ JSON")
    ap.add_argument("--what-if", action="append", default=[], metavar="PHASE.PIECE=US",
                    help="price a changed chain: set (=US) or add to (=+US) one floor piece (hop, open, work) "
                         "of a phase, e.g. s_down.hop=0 (repeatable)")
    ap.add_argument("--json", help="write the model here")
    ap.add_argument("--png", help="write the layer's chain, measured above the floor, as a PNG here")
    a = ap.parse_args(argv)
    from monolith.errors import MonolithError
    from monolith.xray.analyze import analyze
    from monolith.xray.raw import load_raw

    try:
        meta, ev = load_raw(a.raw)
        r = report(analyze(meta, ev), load_probes(Path(a.probes)), a.target, a.what_if)
    except (MonolithError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(r)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(r, indent=1))
    if a.png:
        chain_png(r, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
