"""Predictions for GPUs this project has not measured on (the RTX 5090 and RTX PRO 6000 Blackwell,
sm_120): every variant's µs/token as the card's bytes at its bandwidth plus the chain priced from
the H200's measured pieces. Every output row is labelled "predicted"; nothing here is a measurement
of those cards.

Two models, one per schedule family (docs/RUNBOOK.md states the assumptions for the user):

- Barrier schedules (`bf16-upstream`, `fp8-upstream`): t = bytes/BW + rest. `rest` is the H200's
  measured µs/token minus its bytes at the H200's probed bandwidth: barriers, phase ramps and
  latency-bound work. It is taken as a time in ns, unchanged on the new card (barriers and ramps
  are round trips through L2 and DRAM, not bytes). The check: upstream's own 5090 figure
  (upstream/README.md, `UPSTREAM_5090`) puts the same design's rest per layer beside ours.
- Streaming schedules (`*-stream`): the chain model's measured pieces per phase
  (results/chain/<variant>.json: hop, opening, work, medians over layers of one X-ray'd token).
  A layer is max(chain, bytes): chain = sum_P (hop_P + open_P + work_P'), with work_P' =
  work_P * blocks_H200 / blocks_card for the GEMV phases (the rows split over more blocks;
  attention keeps its per-head split); bytes = the layer's weights and KV at the bandwidth, plus
  the time DRAM idles because the ring is full (a wait longer than ring / bandwidth per block).
  Layer 0's extra over a median layer is kept as measured; the LM head is its bytes at the card's
  bandwidth plus the H200's measured excess over its bytes at the H200's bandwidth. The same
  function on the H200's own numbers gives the X-ray'd token; its ratio to the harness's untraced
  median calibrates the prediction (`h200_check`).

The ring of the sm_120 configuration: at most 99 KB of shared memory per block, ~32 KB of block
state, so `ring_slots` 16 KB slots with slots * 16 + 32 <= 99 (4 slots). What a smaller ring costs
in bandwidth: bytes in flight per SM needed = BW * DRAM latency / SMs (Little's law); the latency is
the bandwidth probe's least-loaded row (results/m0_probes.json: in flight / rate, an upper bound).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from monolith.bench.bytemodel import ByteModel
from monolith.bench.chainmodel import CHAIN, head_bytes
from monolith.config import QWEN3_0_6B as M

REPO = Path(__file__).resolve().parents[1]
SLOT_KB = 16
BLOCK_STATE_KB = 32      # the streaming block's static shared memory beside its ring (kernel/config.cuh)
H200_RING_SLOTS = 12     # kStages on sm_90 (kernel/config.cuh)
STREAM_NEEDS = "needs the sm_120 configuration (not built yet)"


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    sms: int
    spec_tbs: float          # the card's spec bandwidth
    bw_tbs: float            # the achievable streaming read the model uses
    bw_source: str
    l2_mb: int
    smem_per_block_kb: int   # opt-in maximum per block
    blocks: int              # the streaming grid: KV groups x blocks per group, <= SMs
    arch: str


# The H200 numbers are this project's measurements (results/m0_probes.json); the sm_120 cards' are
# their spec sheets', except the 5090's 1,674 GB/s, which upstream measured (upstream/README.md).
GPUS = {
    "h200": Gpu("h200", "NVIDIA H200", 132, 4.8, 4.2804, "results/m0_probes.json, bandwidth_best_tbs at 300 MB",
                60, 227, 128, "sm_90a"),
    "rtx5090": Gpu("rtx5090", "NVIDIA GeForce RTX 5090", 170, 1.792, 1.674,
                   "upstream's measured streaming read on the RTX 5090 (upstream/README.md)", 96, 99, 168, "sm_120a"),
    "rtxpro6000": Gpu("rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell", 188, 1.792, 1.674,
                      "assumed the RTX 5090's measured fraction of the same 1.79 TB/s GDDR7 spec", 128, 99, 184,
                      "sm_120a"),
}
UPSTREAM_5090 = {"tok_s": 1033.0, "bw_gbs": 1674.0, "layer_us": 28.0, "barrier_us_per_layer": 8.8,
                 "source": "upstream/README.md (published by upstream on an RTX 5090; not reproduced here)"}
VARIANTS = ("bf16-upstream", "fp8-upstream", "bf16-stream", "fp8-stream", "nvfp4-stream")
# The H200 row each variant's prediction starts from: the same files README's results table names.
H200_RESULTS = {"bf16-upstream": "results/m4_stream_bf16.json", "bf16-stream": "results/m4_stream_bf16.json",
                "fp8-upstream": "results/m4_stream_s5_hold.json", "fp8-stream": "results/m5_nvfp4.json",
                "nvfp4-stream": "results/m5_nvfp4.json"}


def ring_slots_that_fit(smem_kb: int, slot_kb: int = SLOT_KB, state_kb: int = BLOCK_STATE_KB) -> int:
    return max(0, (smem_kb - state_kb) // slot_kb)


def sm120_config_built(root: Path = REPO) -> bool:
    """Whether the kernel asserts a ring budget against sm_120's per-block limit: a static_assert in
    kernel/*.cuh that names 99 * 1024, 101376 (99 KB) or sm_120 / Sm120. Until one exists the
    streaming variants cannot launch on sm_120."""
    rx = re.compile(r"static_assert\s*\((?:[^;]*?)(?:\b99\s*\*\s*1024\b|\b101376\b|sm_?120)", re.I | re.S)
    return any(rx.search(p.read_text(errors="replace")) for p in sorted((root / "kernel").glob("*.cuh")))


def dram_latency_ns(probes: dict) -> float:
    """Upper bound of the H200's loaded DRAM round trip: in flight / rate of the least-loaded row."""
    b = probes["probes"]["bandwidth"]
    rows = [r for r in b["results"] if r.get("sum_ok", True) and r["bytes"] == max(x["bytes"] for x in b["results"])]
    return min(r["blocks"] * r["threads"] * r["loads"] * 16 / (r["stream_tbs"] * 1e12) * 1e9 for r in rows)


def measured_h200(root: Path, variant: str) -> dict:
    rel = H200_RESULTS[variant]
    d = json.loads((root / rel).read_text())
    for r in d["rows"]:
        if r.get("engine") == f"megakernel-{variant}" and r.get("status") == "ok":
            tm = (r.get("info") or {}).get("time_model") or {}
            return {"us": float(r["us_per_token"]["median"]), "tok_s": float(r["tok_s"]["median"]),
                    "bytes": int(r["bytes_per_token"]), "bytes_head": int(tm.get("bytes_head", 0)),
                    "syncs_per_layer": tm.get("syncs_per_layer"), "position": float(r.get("mean_position") or 0),
                    "file": rel}
    raise ValueError(f"{rel} has no ok row for megakernel-{variant}")


def barrier_model(h: dict, info: dict, gpu: Gpu, h200: Gpu, barrier_us: float, hop_scale: float = 1.0,
                  overlap: bool = True) -> dict:
    """A barrier schedule's token on `gpu` (see the module doc). `overlap`: between two syncs the
    layer takes max(its bytes at the bandwidth, the H200's time there); without it, the sum."""
    L = M.num_layers
    head_h = h["bytes_head"] / (h200.bw_tbs * 1e6)
    syncs = info["syncs_per_layer"] * barrier_us
    between_h = (h["us"] - head_h) / L - syncs
    if between_h <= 0:
        raise ValueError("the H200's measured layer is shorter than its syncs")
    layer_bytes = (h["bytes"] - h["bytes_head"]) / L
    bytes_us = layer_bytes / (gpu.bw_tbs * 1e6)
    bytes_h = layer_bytes / (h200.bw_tbs * 1e6)
    rest = max(0.0, between_h - bytes_h)    # latency-bound time between syncs beyond the bytes
    between = max(bytes_us, between_h * hop_scale) if overlap else bytes_us + rest * hop_scale
    layer = syncs * hop_scale + between
    head = h["bytes_head"] / (gpu.bw_tbs * 1e6)
    return {"us": L * layer + head, "layer_us": layer, "bytes_layer_us": bytes_us, "syncs_us_per_layer": syncs * hop_scale,
            "between_syncs_h200_us": between_h, "head_us": head, "overlap": overlap,
            "bound": "bandwidth" if bytes_us >= between_h * hop_scale else "latency"}


def _phase_weight_bytes(fmt: str) -> list[float]:
    """Each chain phase's weight bytes (codes plus scales as the byte model counts them)."""
    bm = ByteModel.for_weights(fmt)
    proj = sum(w for *_x, w in CHAIN if w is not None)
    per_weight = (bm.layer_bytes - 2 * (2 * M.hidden + 2 * M.head_dim)) / proj
    return [0.0 if w is None else w * per_weight for *_x, w in CHAIN]


def stream_model(chain: dict, gpu: Gpu, ring_slots: int, position: float, latency_ns: float,
                 hop_scale: float = 1.0, work_scale: float = 1.0, h200: Gpu | None = None) -> dict:
    """The streaming token on `gpu` from the chain model's measured pieces (see the module doc)."""
    h200 = h200 or GPUS["h200"]
    m, fmt = chain["measured"], chain["format"]
    blocks_h = int(chain["blocks"])
    ring = ring_slots * SLOT_KB * 1024
    # Little's law: the ring holds at most `ring` bytes in flight per block.
    bw = min(gpu.bw_tbs, gpu.blocks * ring / (latency_ns * 1e-9) / 1e12)
    bw_blk = bw * 1e6 / gpu.blocks                  # bytes per µs per block
    fill_us = ring / bw_blk                         # a wait shorter than this leaves DRAM busy
    phases, idle = [], 0.0
    for p, (name, *_x, w) in zip(m["phases"], CHAIN, strict=True):
        hop, opening = p["hop_us"] * hop_scale, p["open_us"] * hop_scale
        work = p["work_us"] * work_scale * (blocks_h / gpu.blocks if w is not None else 1.0)
        idle += max(0.0, hop + opening - fill_us)
        phases.append({"phase": name, "hop_us": hop, "open_us": opening, "work_us": work,
                       "segment_us": hop + opening + work})
    chain_layer = sum(p["segment_us"] for p in phases)
    bm = ByteModel.for_weights(fmt)
    layer_bytes = bm.layer_bytes + position * bm.kv_per_position / M.num_layers
    bytes_layer = layer_bytes / (bw * 1e6) + idle
    layer = max(chain_layer, bytes_layer)
    hb = head_bytes(fmt)
    head = hb / (gpu.bw_tbs * 1e6) + max(0.0, m["head_us"] - hb / (h200.bw_tbs * 1e6)) * hop_scale
    extra = m["layer0_us"] - m["layer_us"]
    us = layer + extra + (M.num_layers - 1) * layer + head
    return {"us": us, "layer_us": layer, "chain_layer_us": chain_layer, "bytes_layer_us": bytes_layer,
            "ring_idle_us_per_layer": idle, "effective_bw_tbs": bw, "ring_fill_us": fill_us,
            "bound": "bandwidth" if bytes_layer >= chain_layer else "chain", "head_us": head,
            "layer0_extra_us": extra, "phases": phases}


def predict(gpu_key: str, root: Path = REPO, ring_slots: int | None = None, hop_scales=(0.8, 1.0, 1.25),
            sm120_built: bool | None = None) -> dict:
    if gpu_key not in GPUS:
        raise ValueError(f"unknown GPU {gpu_key!r}: one of {', '.join(GPUS)}")
    gpu, h200 = GPUS[gpu_key], GPUS["h200"]
    built = sm120_config_built(root) if sm120_built is None else sm120_built
    fits = ring_slots_that_fit(gpu.smem_per_block_kb)
    slots = ring_slots if ring_slots is not None else (H200_RING_SLOTS if gpu.arch == "sm_90a" else fits)
    if slots < 1 or slots > fits:
        raise ValueError(f"{slots} ring slots of {SLOT_KB} KB + {BLOCK_STATE_KB} KB of block state do not fit "
                         f"{gpu.smem_per_block_kb} KB per block (at most {fits})")
    probes = json.loads((root / "results" / "m0_probes.json").read_text())
    lat = dram_latency_ns(probes)
    need_per_sm = gpu.bw_tbs * 1e12 * lat * 1e-9 / gpu.sms
    barrier_us = float(probes["summary"]["barrier_us_one_block_per_sm"])
    rows = []
    for v in VARIANTS:
        h = measured_h200(root, v)
        stream = v.endswith("-stream")
        if stream:
            chain = json.loads((root / "results" / "chain" / f"{v}.json").read_text())
            pos = float(chain["position"])
            # The X-ray'd chain vs the untraced harness median on the H200: the model's calibration.
            check = stream_model(chain, h200, H200_RING_SLOTS, pos, lat)
            cal = h["us"] / check["us"]
            runs = {s: stream_model(chain, gpu, slots, pos, lat * ls, hop_scale=s)
                    for s, ls in ((hs, 1.0) for hs in hop_scales)}
            runs["slow"] = stream_model(chain, gpu, slots, pos, lat * 1.5, hop_scale=max(hop_scales))
            for r in runs.values():
                r["us_uncalibrated"], r["us"] = r["us"], r["us"] * cal
            h200_check = {"model_us": check["us"], "measured_us": h["us"], "calibration": cal}
            launches = gpu.arch == "sm_90a" or built
            status = "predicted" if launches else f"predicted; {STREAM_NEEDS}"
        else:
            if not h["syncs_per_layer"] or not h["bytes_head"]:
                raise ValueError(f"{h['file']}: the {v} row has no time_model (syncs_per_layer, bytes_head)")
            runs = {s: barrier_model(h, h, gpu, h200, barrier_us, s) for s in hop_scales}
            runs["slow"] = barrier_model(h, h, gpu, h200, barrier_us, max(hop_scales), overlap=False)
            h200_check = {"model_us": barrier_model(h, h, h200, h200, barrier_us)["us"], "measured_us": h["us"],
                          "calibration": 1.0}
            launches = True
            status = "predicted"
        mid = runs[1.0]
        lo, hi = min(r["us"] for r in runs.values()), max(r["us"] for r in runs.values())
        rows.append({"variant": v, "label": "predicted", "status": status, "launches_today": launches,
                     "us_per_token": mid["us"], "tok_s": 1e6 / mid["us"], "tok_s_range": [1e6 / hi, 1e6 / lo],
                     "vs_upstream_published": 1e6 / mid["us"] / UPSTREAM_5090["tok_s"],
                     "h200_measured": h, "h200_check": h200_check, "model": mid,
                     "range_models": {str(k): r["us"] for k, r in runs.items()}})
    bu = next(r for r in rows if r["variant"] == "bf16-upstream")["model"]
    return {
        "schema": "monolith.predictions/1", "label": "predicted (not measured on this GPU)", "gpu": asdict(gpu),
        "h200": asdict(h200), "upstream_published_5090": UPSTREAM_5090,
        "sm90_ring": {"slots": H200_RING_SLOTS, "ring_kb": H200_RING_SLOTS * SLOT_KB,
                      "needs_kb": H200_RING_SLOTS * SLOT_KB + BLOCK_STATE_KB},
        "ring": {"slots": slots, "slot_kb": SLOT_KB, "ring_kb": slots * SLOT_KB, "block_state_kb": BLOCK_STATE_KB,
                 "smem_per_block_kb": gpu.smem_per_block_kb, "slots_that_fit": fits,
                 "dram_latency_ns_assumed": lat,
                 "bytes_in_flight_per_sm_needed": need_per_sm,
                 "in_flight_headroom": slots * SLOT_KB * 1024 / need_per_sm,
                 "bw_limit_of_ring_tbs": gpu.sms * slots * SLOT_KB * 1024 / (lat * 1e-9) / 1e12},
        "upstream_design_check": {
            "note": "upstream's 5090 layer = bytes at 1,674 GB/s + barriers + rest; the barrier model's overlap "
                    "assumption holds if upstream's rest is small",
            "upstream_layer_bytes_us": ByteModel.bf16().layer_bytes / (UPSTREAM_5090["bw_gbs"] * 1e3),
            "upstream_rest_us_per_layer": UPSTREAM_5090["layer_us"] - UPSTREAM_5090["barrier_us_per_layer"]
            - ByteModel.bf16().layer_bytes / (UPSTREAM_5090["bw_gbs"] * 1e3),
            "predicted_bf16_upstream_layer_us": bu["layer_us"]},
        "sm120_configuration_built": built,
        "assumptions": assumptions(gpu, lat, hop_scales),
        "rows": rows,
    }


def assumptions(gpu: Gpu, lat_ns: float, hop_scales) -> list[str]:
    sc = ", ".join(f"{x:g}" for x in hop_scales)
    return [
        f"bytes per token at {gpu.bw_tbs:.3f} TB/s ({gpu.bw_source}); the H200's pieces priced at its probed "
        "4.28 TB/s (results/m0_probes.json)",
        "latency pieces (hops, openings, grid barriers and flag syncs: round trips through L2) keep their H200 "
        f"µs; the central row scales them by 1, the range by {sc}",
        "barrier schedules (*-upstream): per layer, syncs at the barrier probe's cost plus, between syncs, "
        "max(the layer's bytes at the new bandwidth, the H200's measured time there); the slow end of the range "
        "adds the two instead of overlapping them",
        f"streaming (*-stream): a layer is max(the chain, its bytes at the bandwidth); the chain is the X-ray's "
        f"hop + opening + work per phase, the GEMV work split over {gpu.blocks} blocks instead of 128 at the "
        "H200's per-SM rate and 1.98 GHz clock (the sm_120 cards boost higher: work is if anything overestimated); "
        "DRAM idles during a wait only once the ring is full (wait > ring / bandwidth per block)",
        f"the sm_120 ring: as many 16 KB slots as fit beside {BLOCK_STATE_KB} KB of block state in "
        f"{gpu.smem_per_block_kb} KB per block; it caps the bandwidth at blocks x ring / DRAM latency (Little's law)",
        f"DRAM round trip {lat_ns:.0f} ns as on the H200 (bandwidth probe, least-loaded row: in flight / rate, an "
        "upper bound), assumed for GDDR7 too; the slow end of the streaming range takes 1.5x",
        "LM head: its bytes at the new bandwidth plus the H200's measured excess over its bytes; layer 0's extra "
        "as measured",
        "streaming predictions are scaled by the H200's untraced harness median over the same model on the "
        "H200's X-ray'd pieces (h200_check.calibration)",
    ]


def to_markdown(r: dict) -> str:
    g, ring = r["gpu"], r["ring"]
    up = r["upstream_published_5090"]
    lines = [f"# Predicted decode speed on the {g['name']} ({g['sms']} SMs, {g['bw_tbs']} TB/s, "
             f"{g['smem_per_block_kb']} KB shared memory per block)", "",
             "Written by `python -m monolith.bench.predict`. **Every number is a prediction**, not a measurement "
             "of this GPU; upstream's published figure is beside it.", "",
             "| variant | label | tok/s (range) | µs/token | bound | × upstream's published | H200 measured tok/s | "
             "H200: model / measured µs | status |",
             "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for x in r["rows"]:
        lo, hi = x["tok_s_range"]
        c = x["h200_check"]
        chk = f"{c['model_us']:.1f} / {c['measured_us']:.1f}"
        lines.append(f"| `{x['variant']}` | predicted | {x['tok_s']:,.0f} ({lo:,.0f}–{hi:,.0f}) | "
                     f"{x['us_per_token']:.1f} | {x['model'].get('bound', 'bytes + rest')} | "
                     f"{x['vs_upstream_published']:.2f} | {x['h200_measured']['tok_s']:,.1f} | {chk} | {x['status']} |")
    lines += ["", f"Upstream's published RTX 5090 figure: {up['tok_s']:,.0f} tok/s bf16 ({up['source']}).", "",
              f"Ring: {ring['slots']} slots × {ring['slot_kb']} KB = {ring['ring_kb']} KB + {ring['block_state_kb']} KB "
              f"block state ≤ {ring['smem_per_block_kb']} KB; bytes in flight per SM needed "
              f"{ring['bytes_in_flight_per_sm_needed'] / 1024:.1f} KB (bandwidth × {ring['dram_latency_ns_assumed']:.0f} ns / "
              f"{g['sms']} SMs): {ring['in_flight_headroom']:.1f}× headroom.", "",
              "Assumptions:", ""] + [f"- {a}" for a in r["assumptions"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m monolith.bench.predict", description=(
        "Predict every variant's decode speed on a GPU not measured here (RTX 5090, RTX PRO 6000) from the "
        "H200's measured pieces; every row is labelled 'predicted'."))
    ap.add_argument("--gpu", action="append", choices=sorted(GPUS), default=[],
                    help="GPU to predict (repeatable; default rtx5090 and rtxpro6000)")
    ap.add_argument("--ring-slots", type=int, default=None, help="16 KB ring slots of the sm_120 configuration "
                    "(default: as many as fit beside 32 KB of block state: 4)")
    ap.add_argument("--root", default=str(REPO), help="repository root holding results/")
    ap.add_argument("--out", default=None, help="write JSON here (+ .md beside it); default "
                    "results/predictions_sm120.json for the default GPUs")
    a = ap.parse_args(argv)
    gpus = a.gpu or ["rtx5090", "rtxpro6000"]
    root = Path(a.root)
    try:
        res = {k: predict(k, root, a.ring_slots) for k in gpus}
    except (ValueError, FileNotFoundError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = {"schema": "monolith.predictions/1", "label": "predicted (not measured on these GPUs)", "gpus": res}
    for r in res.values():
        print(to_markdown(r))
    path = Path(a.out) if a.out else root / "results" / "predictions_sm120.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    path.with_suffix(".md").write_text("\n".join(to_markdown(r) for r in res.values()))
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
