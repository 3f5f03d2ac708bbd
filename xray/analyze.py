"""Analyze one raw X-ray trace: clock alignment, per-phase time, waits, idle SMs, bandwidth.

Library: `align(meta, events)`, `analyze(meta, events) -> dict`, `print_report(summary)`,
`gantt_png(meta, events, path)`. CLI: `python -m monolith.xray.analyze RAW [--json OUT] [--png OUT]`.

Clock alignment. %globaltimer is one clock for the whole GPU but only ticks every 32 ns on
the H200; clock64 ticks at the SM clock (~0.5 ns) but each SM's counter has its own origin
(and, slightly, its own rate). Per SM we fit globaltimer = a * clock64 + b by least squares
over every stamp of that SM (hundreds of stamps over ~0.5 ms), then place every stamp at
a * clock64 + b: GPU-wide comparable like globaltimer, with clock64's resolution. The tick's
floor quantization is zero-mean-free (always <= true time) but it biases every SM's b by the
same half tick, which cancels once times are taken relative to the token start.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from monolith.config import HEAD_DIM, HIDDEN, INTERMEDIATE, KV_DIM, NUM_KV_HEADS, Q_DIM, VOCAB
from monolith.errors import MonolithError
from monolith.figures import pyplot, save_png
from monolith.kernel_spec import xray_max_events
from monolith.xray.phases import load_phases
from monolith.xray.raw import COL, validate_raw

UPSTREAM = {"us_per_layer": 28.0, "barrier_us_per_layer": 8.8, "source": "AlpinDale/qwen_megakernel README (RTX 5090)"}
SUMMARY_SCHEMA = "monolith-xray-summary/1"
NOMINAL_SM_MHZ = 1980.0  # H200 measured SM clock (NOTES.md, facts); used only when a fit is impossible
# How per-phase bandwidth is measured (the summary carries these sentences next to the numbers).
BW_METHOD = {
    "per_phase": "issue to use: a phase's bytes over the interval from the start of the wait(s) just before it "
                 "in each block's sequence (the kernel issues a phase's weight loads before it waits on the "
                 "preceding barrier/flag) to the phase's last end, earliest to latest over blocks, per layer",
    "per_phase_own_span": "the phase's bytes over its own span only (earliest start to latest end over blocks): "
                          "overstates a phase whose loads were in flight during the wait before it",
    "per_layer": "grid bandwidth over time windows: the byte model's bytes of one layer over the mean layer time "
                 "(first start of a layer to the next layer's first start); no attribution to phases",
}

# ---------------------------------------------------------------- clock alignment


def align(meta: dict, events: np.ndarray, method: str = "clock64-fit") -> dict:
    """Return start/end times in ns relative to the token start (float64) plus fit facts.

    method "clock64-fit" (default) as described above; "globaltimer" uses the raw 32 ns stamps.
    """
    ev = events
    tick = int(meta.get("globaltimer_tick_ns", 32))
    g0, g1 = ev[:, COL["g0"]], ev[:, COL["g1"]]
    gref = int(g0.min())  # subtract before float math: raw stamps (~1.7e18) exceed float64's 2^53
    if method == "globaltimer":
        s, e = (g0 - gref).astype(np.float64), (g1 - gref).astype(np.float64)
        t_origin = s.min()
        return {"start_ns": s - t_origin, "end_ns": e - t_origin, "method": "globaltimer (raw, 32 ns ticks)",
                "tick_ns": tick, "residual_ns": {"rms": tick / np.sqrt(12), "max": float(tick)}, "per_sm": {}}
    if method != "clock64-fit":
        raise MonolithError(f"unknown alignment method {method!r} (clock64-fit or globaltimer)")
    if meta.get("xray_record") == "compact":
        return _align_anchored(meta, ev, gref, tick)
    start = np.empty(len(ev))
    end = np.empty(len(ev))
    per_sm, resid_all = {}, []
    smid = ev[:, COL["smid"]]
    for sm in np.unique(smid):
        idx = np.nonzero(smid == sm)[0]
        c = np.concatenate([ev[idx, COL["c0"]], ev[idx, COL["c1"]]])
        g = np.concatenate([g0[idx], g1[idx]])
        cref = int(c.min())
        x = (c - cref).astype(np.float64)
        y = (g - gref).astype(np.float64)
        if x.max() - x.min() < 1000 * 1.0 or len(x) < 4:
            # too short to fit a slope: use the nominal SM clock and fit only the offset
            a = 1000.0 / float(meta.get("sm_clock_mhz") or NOMINAL_SM_MHZ)
            b = float(np.mean(y - a * x))
            how = "offset-only"
        else:
            a, b = np.polyfit(x, y, 1)
            how = "linear"
        r = y - (a * x + b)
        resid_all.append(r)
        # globaltimer floors: the true time is g + U[0, tick); correct the offset by half a tick
        b += tick / 2
        start[idx] = a * (ev[idx, COL["c0"]] - cref) + b
        end[idx] = a * (ev[idx, COL["c1"]] - cref) + b
        per_sm[int(sm)] = {"ghz": 1.0 / a if a > 0 else None, "fit": how, "n": len(x),
                           "residual_rms_ns": float(np.sqrt(np.mean(r ** 2))), "residual_max_ns": float(np.abs(r).max())}
    r = np.concatenate(resid_all)
    t_origin = start.min()
    ghz = np.array([v["ghz"] for v in per_sm.values() if v["fit"] == "linear" and v["ghz"]])
    return {
        "start_ns": start - t_origin, "end_ns": end - t_origin,
        "method": "per-SM least-squares fit of %globaltimer on clock64 over all stamps of the SM",
        "tick_ns": tick,
        # a perfect fit under floor quantization leaves residuals ~U(-tick/2, tick/2): rms tick/sqrt(12)
        "residual_ns": {"rms": float(np.sqrt(np.mean(r ** 2))), "max": float(np.abs(r).max()),
                        "expected_rms_from_tick": tick / np.sqrt(12)},
        # the fitted SM clocks (linear fits only): a mean over the token, so a clock that moved
        # shows as a large residual, not here (NOTES.md, ninth session: tensor-core instructions
        # lowered the H200's SM clock from 1.98 to 1.66-1.94 GHz)
        "sm_ghz": ({"median": float(np.median(ghz)), "min": float(ghz.min()), "max": float(ghz.max()), "sms": int(len(ghz))}
                   if len(ghz) else None),
        "per_sm": per_sm,
    }


def _align_anchored(meta: dict, ev: np.ndarray, gref: int, tick: int) -> dict:
    """Compact traces (kernel/xray.cuh kCompact): only clock64 is stamped per phase; the decoder
    (monolith.xray.raw.decode_buffer) mapped each block's clock64 linearly onto its two
    %globaltimer tick edges and wrote the result as g0/g1 (integer ns). Those are the times; what
    bounds their error is each anchor's window between the two timer reads around its tick."""
    g0, g1 = ev[:, COL["g0"]], ev[:, COL["g1"]]
    start = (g0 - gref).astype(np.float64) + tick / 2
    end = (g1 - gref).astype(np.float64) + tick / 2
    anchors = meta.get("clock_anchors") or {}
    ghz = anchors.get("sm_ghz")
    win = anchors.get("edge_window_cycles_max")
    clk = (ghz or {}).get("median") or (float(meta.get("sm_clock_mhz") or NOMINAL_SM_MHZ) / 1e3)
    half = (win / clk / 2) if win else tick / 2  # ns: half the widest window (or half a tick when unaligned)
    t_origin = start.min()
    return {
        "start_ns": start - t_origin, "end_ns": end - t_origin,
        "method": "per block, clock64 mapped linearly onto two %globaltimer tick edges (kernel entry, last "
                  "token-scope phase), by the decoder",
        "tick_ns": tick,
        # no fit: the error bound is the anchors' timing (half the widest window between the reads
        # around a tick), not a residual; kept under the residual's key so every reader finds it
        "residual_ns": {"rms": half / np.sqrt(3), "max": half, "expected_rms_from_tick": tick / np.sqrt(12)},
        "sm_ghz": ghz, "per_sm": {},
        "anchors": {k: v for k, v in anchors.items() if k != "per_block"},
    }


# ---------------------------------------------------------------- byte model


def phase_bytes(variant: str, position: int) -> dict[str, dict]:
    """Bytes each phase reads from memory for one token (per layer for layer phases).

    bf16: 2 bytes/weight. fp8*: 1 byte/weight + one fp32 scale per output row. nvfp4: 4.5
    bits/weight (e2m1 + an e4m3 scale per 16) in the layers, FP8 LM head. Attention reads the
    K and V cache of positions 0..position (bf16). RMSNorm weights (2 KB) are ignored.
    """
    v = variant.lower()
    if "nvfp4" in v:
        bpw, row_scale, head_bpw, head_scale = 4.5 / 8, 0, 1.0, 4
    elif "fp8" in v:
        bpw, row_scale, head_bpw, head_scale = 1.0, 4, 1.0, 4
    else:
        bpw, row_scale, head_bpw, head_scale = 2.0, 0, 2.0, 0

    def mat(rows, cols, b=bpw, s=row_scale):
        return int(rows * cols * b + rows * s)

    kv = 2 * NUM_KV_HEADS * HEAD_DIM * 2 * (position + 1)
    out = {
        "qkv": {"bytes": mat(Q_DIM, HIDDEN) + 2 * mat(KV_DIM, HIDDEN), "per": "layer"},
        "attn": {"bytes": kv, "per": "layer", "note": f"K+V cache, positions 0..{position}"},
        "oproj": {"bytes": mat(HIDDEN, Q_DIM), "per": "layer"},
        "gateup": {"bytes": 2 * mat(INTERMEDIATE, HIDDEN), "per": "layer"},
        "down": {"bytes": mat(HIDDEN, INTERMEDIATE), "per": "layer"},
        "lmhead": {"bytes": mat(VOCAB, HIDDEN, head_bpw, head_scale), "per": "token"},
    }
    if re.search(r"(^|-)stream", v):  # bf16-stream, fp8-stream... (not "upstream"): same matrices, its own phases
        names = {"qkv": "s_qkv", "attn": "s_attn", "oproj": "s_oproj", "gateup": "s_mlp", "down": "s_down"}
        out = {names.get(k, k): val for k, val in out.items()}
    return out


# ---------------------------------------------------------------- analysis


def _union_len(iv: np.ndarray) -> tuple[float, list[tuple[float, float]]]:
    """Length of the union of [s, e) intervals and the gaps between them."""
    if len(iv) == 0:
        return 0.0, []
    iv = iv[np.argsort(iv[:, 0])]
    total, gaps = 0.0, []
    cs, ce = iv[0]
    for s, e in iv[1:]:
        if s > ce:
            total += ce - cs
            gaps.append((ce, s))
            cs, ce = s, e
        else:
            ce = max(ce, e)
    total += ce - cs
    return total, gaps


def _tbs(nbytes: float, ns: float) -> float | None:
    return float(nbytes / (ns * 1e-9) / 1e12) if ns > 0 else None


def _issue_starts(s: np.ndarray, blk: np.ndarray, is_wait: np.ndarray) -> np.ndarray:
    """Per event: when its loads could have been issued. A work phase that follows a run of
    waits in its block's sequence gets the start of that run (the kernel issues the next
    phase's loads, then waits); any other event gets its own start."""
    issue = s.copy()
    run_start, prev = None, None
    for i in np.lexsort((s, blk)):
        if blk[i] != prev:
            run_start, prev = None, blk[i]
        if is_wait[i]:
            run_start = s[i] if run_start is None else run_start
        else:
            if run_start is not None:
                issue[i] = run_start
            run_start = None
    return issue


# Waits that are not dependency waits: a consumer waiting for weights to land in its ring.
RING_PHASES = ("ring", "ring_head")
# Hops: (producing work phase, the wait that consumes its output, layer offset of the consumer).
# Latency = consumer's wait end - the last producer's end, per layer: "first" (the first block to
# see it) and "last" (the last block to see it); the producer's end is stamped after its stores.
HOPS = (("s_down", "s_wait_resid", 1), ("s_qkv", "s_wait_qkv", 0), ("s_attn", "s_wait_attn", 0),
        ("s_oproj", "s_wait_o", 0), ("s_mlp", "s_wait_act", 0),
        ("qkv", "bar_qkv", 0), ("oproj", "bar_o", 0), ("gateup", "bar_gateup", 0), ("down", "bar_down", 0),
        ("attn", "flag_attn", 0))


def _ready_ends(s: np.ndarray, e: np.ndarray, blk: np.ndarray, ph: np.ndarray, lay: np.ndarray,
                gather: int | None, sub_ids: list[int]) -> np.ndarray:
    """Per event: when its block had every thread's words. A stream wait interval ends when thread
    0 has its own words; where the block's next event is an `s_gather` of the same layer (the rest
    of the wait, up to the phase's opening barrier), that interval's end; else the event's own end."""
    ready = e.copy()
    if gather is None:
        return ready
    order = np.lexsort((s, blk))
    order = order[~np.isin(ph[order], sub_ids)]  # MONOLITH_XRAY_SUB's cuts sit between a wait and its s_gather
    for a, b in zip(order[:-1], order[1:], strict=True):
        if blk[a] == blk[b] and ph[b] == gather and lay[b] == lay[a] and ph[a] != gather:
            ready[a] = e[b]
    return ready


def sub_phase_ids(phases) -> list[int]:
    """Ids of the diagnostic sub-intervals (x_*, recorded only by a MONOLITH_XRAY_SUB build)."""
    return [p.id for p in phases if p.name.startswith("x_")]


# the stream wait that precedes a phase's opening -> that phase (labels an s_gather parent below)
OPENS = {"s_wait_resid": "s_qkv", "s_wait_qkv": "s_attn", "s_wait_attn": "s_oproj", "s_wait_o": "s_mlp",
         "s_wait_act": "s_down", "s_wait_final": "lmhead"}


def sub_intervals(s: np.ndarray, e: np.ndarray, ph: np.ndarray, blk: np.ndarray, phases) -> list[dict] | None:
    """MONOLITH_XRAY_SUB traces: each x_* interval is cut from the interval recorded next in its
    block (its parent: x_words / x_prenorm from the hop's s_gather, x_open / x_dot / x_out / x_slots
    from the work phase). Every hop's bookkeeping is an s_gather, so an s_gather parent is named by
    the phase it opens, from the stream wait before it in its block (`s_gather@s_qkv`: the residual
    hop's). Per (parent, sub), in the order they first occur (the first block's timeline): intervals,
    median and max µs, and the parent's remainder (median of that parent's own intervals). None when
    the trace has no sub-intervals."""
    sub_ids = set(sub_phase_ids(phases))
    if not np.isin(ph, list(sub_ids)).any():
        return None
    name = {p.id: p.name for p in phases}
    order = np.lexsort((s, blk))
    durs: dict[tuple[str, str], list[float]] = {}
    rest: dict[str, list[float]] = {}
    pending: list[int] = []
    opening, cur = None, None
    for i in order:
        if blk[i] != cur:  # a new block: its own cuts and its own waits
            pending, opening, cur = [], None, blk[i]
        n = name[int(ph[i])]
        if int(ph[i]) in sub_ids:
            pending.append(i)
            continue
        if n in OPENS:
            opening = OPENS[n]
        par = f"{n}@{opening}" if n == "s_gather" and opening else n
        rest.setdefault(par, []).append(float(e[i] - s[i]))
        for j in pending:
            durs.setdefault((par, name[int(ph[j])]), []).append(float(e[j] - s[j]))
        pending = []
    return [{"parent": par, "sub": sb, "count": len(v), "median_us": float(np.median(v)) / 1e3,
             "max_us": float(np.max(v)) / 1e3, "parent_rest_median_us": float(np.median(rest[par])) / 1e3}
            for (par, sb), v in durs.items()]  # first-seen order: a block's cuts in time order


def hop_latency(s: np.ndarray, e: np.ndarray, ph: np.ndarray, lay: np.ndarray, phases,
                blk: np.ndarray | None = None) -> list[dict]:
    """Per hop of HOPS present in the trace: median over layers of (first / last consumer wait end)
    - (last producer end), in µs, how many layers it was measured on, and the producers' spread
    (last producer end - first producer end; the attention hop's producers are the split owners
    only). With block ids and an
    `s_gather` phase in the trace, also the same for the block-level readiness (`first_ready_us`,
    `last_ready_us`): thread 0's wait end understates a hop whose words arrive over a spread."""
    ids = {p.name: p.id for p in phases}
    ready = _ready_ends(s, e, blk, ph, lay, ids.get("s_gather"), sub_phase_ids(phases)) if blk is not None else None
    has_gather = ready is not None and "s_gather" in ids and bool((ph == ids["s_gather"]).any())
    out = []
    for prod, wait, off in HOPS:
        if prod not in ids or wait not in ids:
            continue
        mp, mw = ph == ids[prod], ph == ids[wait]
        first, last, rfirst, rlast, spread = [], [], [], [], []
        for L in np.unique(lay[mw]):
            src = mp & (lay == L - off)
            dst = mw & (lay == L)
            if not src.any() or not dst.any():
                continue
            t = e[src].max()
            spread.append(t - e[src].min())
            first.append(e[dst].min() - t)
            last.append(e[dst].max() - t)
            if has_gather:
                rfirst.append(ready[dst].min() - t)
                rlast.append(ready[dst].max() - t)
        if first:
            h = {"producer": prod, "wait": wait, "layers": len(first),
                 "first_sees_us": float(np.median(first) / 1e3), "last_sees_us": float(np.median(last) / 1e3),
                 # how far apart the producers finish: the part of a hop that is the producers' own spread
                 "producer_spread_us": float(np.median(spread) / 1e3)}
            if has_gather:
                h["first_ready_us"] = float(np.median(rfirst) / 1e3)
                h["last_ready_us"] = float(np.median(rlast) / 1e3)
            out.append(h)
    return out


# A layer's work phases in schedule order, per schedule: the milestones below.
CHAINS = (("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down"), ("qkv", "attn", "oproj", "gateup", "down"))


def token_edges(s: np.ndarray, e: np.ndarray, ph: np.ndarray, lay: np.ndarray, phases, blk: np.ndarray,
                layer_scoped: np.ndarray, layer0_us: float | None, n_layers: int, nblocks: int) -> dict:
    """The token's two ends, which the layer medians and milestones leave out (sixteenth session: the
    LM head's warp groups and the next launch's first copies asked into L2 were read off ad-hoc
    scripts). first_layer: layer 0's time, and when its first work phase (the one starting earliest:
    every block starts with an empty ring) ends, median and last block. lm_head: its span (first start
    to last end over blocks), each block's own span (median, max), its ring waits per block and how
    long after the last layer's last interval it starts. Times in µs from the token's first stamp;
    None where the trace has no such phase. layer_scoped: the events of layer-scoped phases;
    layer0_us: layer 0's time as analyze() measures every layer's."""
    kind = {p.id: p.kind for p in phases}
    name_of = {p.id: p.name for p in phases}
    # the work phases of a layer; the X-ray sub-intervals (x_*) are cut out of them, not phases of their own
    layer_work = layer_scoped & np.array([kind[x] == "work" and not name_of[x].startswith("x_") for x in ph], dtype=bool)
    out = {"first_layer": None, "lm_head": None}
    m0 = layer_work & (lay == 0)
    if m0.any():
        first = int(ph[m0][np.argmin(s[m0])])
        mf = m0 & (ph == first)
        nxt = layer_scoped & (lay == 1)
        out["first_layer"] = {
            "layer_us": layer0_us,
            "first_phase": name_of[first],
            "first_phase_median_end_us": float(np.median([e[mf & (blk == b)].max() for b in np.unique(blk[mf])])) / 1e3,
            "first_phase_last_end_us": float(e[mf].max()) / 1e3,
            "next_layer_start_us": float(s[nxt].min()) / 1e3 if nxt.any() else None,
        }
    head_id = next((p.id for p in phases if p.name == "lmhead"), None)
    head = ph == head_id
    if head.any():
        per = np.array([e[head & (blk == b)].max() - s[head & (blk == b)].min() for b in np.unique(blk[head])])
        ring_id = next((p.id for p in phases if p.name == "ring_head"), None)
        ring = ph == ring_id
        layers_in = layer_scoped & (lay < n_layers)
        out["lm_head"] = {
            "start_us": float(s[head].min()) / 1e3,
            "span_us": float(e[head].max() - s[head].min()) / 1e3,
            "per_block_median_us": float(np.median(per)) / 1e3,
            "per_block_max_us": float(per.max()) / 1e3,
            "ring_wait_per_block_us": float((e - s)[ring].sum()) / 1e3 / nblocks if ring.any() else None,
            "after_last_layer_us": float(s[head].min() - e[layers_in].max()) / 1e3 if layers_in.any() else None,
        }
    return out


def layer_milestones(s: np.ndarray, e: np.ndarray, ph: np.ndarray, lay: np.ndarray, phases,
                     blk: np.ndarray, smid: np.ndarray | None = None, top: int = 4) -> dict | None:
    """Where a layer's time goes along the schedule: for each work phase P of the chain (CHAINS),
    the grid milestone "every block has finished P" (the last end of P in the layer), and the
    segment from the previous milestone (the previous phase's, or the last phase of the layer
    before) to it. A segment is the hop into P plus the last block's P: it also reports P's own
    work, the median over blocks of a block's P time in the layer, so that segment - work is the
    part of the segment that is not P's work (hops, waits, stragglers). Medians over layers, µs.
    The segments add up to about a layer; they are grid-wide, not one block's critical path.
    Why the milestone is late (seventeenth session: a faster round made every phase's median work
    shorter and the token slower): the block that ends P last, against the median block, either
    started P late (`last_late_start_us`: its first start of P minus the median block's) or worked
    longer (`last_extra_work_us`: its first start to last end minus the median block's); medians over
    layers. `late_blocks`: the `top` blocks whose start of P is latest against the median block's,
    averaged over layers, with their SMs (smid given) — a block late in every layer, not now and then.
    None when the trace has none of the chains."""
    ids = {p.name: p.id for p in phases}
    chain = next((c for c in CHAINS if all(n in ids for n in c) and bool((ph == ids[c[0]]).any())), None)
    if chain is None:
        return None
    present = [n for n in chain if (ph == ids[n]).any()]
    if len(present) < 2:
        return None
    segs: dict[str, list[float]] = {n: [] for n in present}
    work: dict[str, list[float]] = {n: [] for n in present}
    late: dict[str, list[tuple[float, float]]] = {n: [] for n in present}
    # Blocks that start P late in every layer, not only now and then (nineteenth session: the O blocks
    # of some KV groups started O 0.2-0.3 µs after the rest of their group, layer after layer): each
    # block's first start of P minus the median block's, summed over layers
    late_sum: dict[str, np.ndarray] = {n: np.zeros(int(blk.max()) + 1) for n in present}
    late_cnt: dict[str, np.ndarray] = {n: np.zeros(int(blk.max()) + 1) for n in present}
    layers = sorted(int(L) for L in np.unique(lay[ph == ids[present[0]]]))
    last_end = {}
    for L in layers:
        for n in present:
            m = (ph == ids[n]) & (lay == L)
            if m.any():
                last_end[(n, L)] = float(e[m].max())
                per_block = np.bincount(blk[m], weights=(e[m] - s[m]))
                work[n].append(float(np.median(per_block[per_block > 0])))
                # each block's first start and last end of P (over P's events only, not per-block masks)
                bs, inv = np.unique(blk[m], return_inverse=True)
                st = np.full(len(bs), np.inf)
                en = np.full(len(bs), -np.inf)
                np.minimum.at(st, inv, s[m])
                np.maximum.at(en, inv, e[m])
                late_sum[n][bs] += st - np.median(st)
                late_cnt[n][bs] += 1
                i = int(np.argmax(en))
                late[n].append((float(st[i] - np.median(st)), float((en[i] - st[i]) - np.median(en - st))))
    for L in layers:
        for i, n in enumerate(present):
            prev = (present[i - 1], L) if i > 0 else (present[-1], L - 1)
            if (n, L) in last_end and prev in last_end:
                segs[n].append(last_end[(n, L)] - last_end[prev])
    out = [{"phase": n, "segment_us": float(np.median(segs[n]) / 1e3), "segment_max_us": float(np.max(segs[n]) / 1e3),
            "work_us": float(np.median(work[n]) / 1e3), "layers": len(segs[n]),
            "last_late_start_us": float(np.median([x[0] for x in late[n]]) / 1e3),
            "last_extra_work_us": float(np.median([x[1] for x in late[n]]) / 1e3)} for n in present if segs[n] and work[n]]
    if not out:
        return None
    sm_of = {}
    if smid is not None:
        for b, m in zip(blk.tolist(), smid.tolist(), strict=True):
            sm_of.setdefault(b, m)
    for x in out:
        n = x["phase"]
        have = late_cnt[n] > 0
        mean = np.where(have, late_sum[n] / np.maximum(late_cnt[n], 1), -np.inf)
        order = [int(b) for b in np.argsort(-mean, kind="stable")[:top] if have[b]]
        x["late_blocks"] = [{"block": b, "sm": sm_of.get(b), "late_start_us": float(mean[b] / 1e3)} for b in order]
    return {"chain": [x["phase"] for x in out], "segments": out,
            "sum_us": float(sum(x["segment_us"] for x in out)),
            "method": "per layer: last end of each work phase over blocks minus the previous phase's last end "
                      "(the first phase: minus the previous layer's last phase); work = median over blocks of the "
                      "phase's time in the layer; medians over layers"}


def attention_by_group_index(s: np.ndarray, e: np.ndarray, ph: np.ndarray, lay: np.ndarray, phases,
                             blk: np.ndarray, nblocks: int, groups: int = 8) -> dict | None:
    """The streaming schedule's attention work (`s_attn`) by a block's index in its KV group: block b
    is in group g where g * nblocks // groups <= b < (g + 1) * nblocks // groups (the kernel's
    part_begin), index b minus the group's first block. Each block's s_attn time in a layer; the median
    over groups and layers 1.. (layer 0 also waits for the first weights), µs. Why (twenty-third
    session): at long positions the splits of a group are not shared evenly (33 of 64 positions over
    16 blocks: index 0 runs three, the others two), and the slowest index sets the group's hop; the
    phase's median work hides it. `spread_us`: the slowest index minus the median index. A
    MONOLITH_XRAY_SUB=3 trace's x_att_* cuts are s_attn's time too and are added back. None without
    s_attn."""
    ids = [p.id for p in phases if p.name == "s_attn" or p.name.startswith("x_att_")]
    m = np.isin(ph, ids) & (lay >= 1) & (blk < nblocks)
    if not (ph == next((p.id for p in phases if p.name == "s_attn"), -1)).any() or not m.any():
        return None  # (no attention after layer 0: nothing to compare)
    starts = np.array([g * nblocks // groups for g in range(groups + 1)])
    g_of = np.searchsorted(starts, blk[m], side="right") - 1
    idx = blk[m] - starts[g_of]
    per_layer_block = {}
    for b, L, d in zip(blk[m].tolist(), lay[m].tolist(), (e[m] - s[m]).tolist(), strict=True):
        per_layer_block[(b, L)] = per_layer_block.get((b, L), 0.0) + d
    idx_of = dict(zip(blk[m].tolist(), idx.tolist(), strict=False))
    width = int(max(starts[g + 1] - starts[g] for g in range(groups)))
    vals: list[list[float]] = [[] for _ in range(width)]
    for (b, _L), d in per_layer_block.items():
        vals[idx_of[b]].append(d)
    per_index = [float(np.median(v) / 1e3) if v else None for v in vals]
    have = [x for x in per_index if x is not None]
    return {"per_index_us": per_index, "slowest_index": int(np.nanargmax([np.nan if x is None else x for x in per_index])),
            "slowest_us": float(max(have)), "median_us": float(np.median(have)),
            "spread_us": float(max(have) - np.median(have)),
            "method": "per block and layer >= 1: its s_attn time; median over groups and layers by index in the group"}


def analyze(meta: dict, events: np.ndarray, method: str = "clock64-fit", gap_min_ns: float = 100.0) -> dict:
    meta, ev = validate_raw(meta, events)
    al = align(meta, ev, method)
    s, e = al["start_ns"], al["end_ns"]
    d = e - s
    phases = load_phases()
    blk, sm, ph, lay = (ev[:, COL[k]] for k in ("block", "smid", "phase", "layer"))
    span = float(e.max())  # start is 0 by construction; 0 when every interval is empty
    nblocks = int(meta["blocks"])
    layer_scoped = np.isin(ph, [p.id for p in phases if p.scope == "layer"])
    n_layers = int(lay[layer_scoped].max() + 1) if layer_scoped.any() else 0  # a trace may have no layer phases
    kind = {p.id: p.kind for p in phases}
    name_of = {p.id: p.name for p in phases}
    is_wait = np.array([kind[p] == "wait" for p in ph])
    bytes_model = phase_bytes(meta["variant"], int(meta["position"]))
    issue = _issue_starts(s, blk, is_wait)

    per_phase = []
    for p in phases:
        m = ph == p.id
        if not m.any():
            per_phase.append({"id": p.id, "name": p.name, "kind": p.kind, "count": 0})
            continue
        # "critical-path-ish": per layer, earliest start to latest end of this phase over blocks
        spans = [float(e[m & (lay == L)].max() - s[m & (lay == L)].min()) for L in np.unique(lay[m])]
        row = {"id": p.id, "name": p.name, "kind": p.kind, "scope": p.scope, "count": int(m.sum()),
               "blocks": int(len(np.unique(blk[m]))), "sum_us": float(d[m].sum() / 1e3),
               "mean_per_block_us": float(d[m].sum() / 1e3 / nblocks),
               "mean_interval_us": float(d[m].mean() / 1e3),
               "span_per_layer_us": float(np.mean(spans) / 1e3), "span_total_us": float(np.sum(spans) / 1e3)}
        if p.name in bytes_model:
            nb = bytes_model[p.name]["bytes"] * len(spans)
            windows = [float(e[m & (lay == L)].max() - issue[m & (lay == L)].min()) for L in np.unique(lay[m])]
            row["bytes"] = int(nb)
            row["bw_own_span_tbs"] = _tbs(nb, np.sum(spans))
            row["bw_issue_to_use_tbs"] = _tbs(nb, np.sum(windows))
            row["issue_to_use_per_layer_us"] = float(np.mean(windows) / 1e3)
            row["eff_bw_tbs"] = row["bw_issue_to_use_tbs"]  # the figure we stand behind (BW_METHOD["per_phase"])
        per_phase.append(row)

    wait_ns = np.bincount(blk[is_wait], weights=d[is_wait], minlength=nblocks)
    bar = is_wait & np.array([name_of[p].startswith("bar_") for p in ph])
    bar_ns = np.bincount(blk[bar], weights=d[bar], minlength=nblocks)
    block_sm = {}
    for b, m in zip(blk.tolist(), sm.tolist(), strict=True):
        block_sm.setdefault(b, m)

    # idle: SMs with no block idle the whole token; busy SMs idle in the gaps of their union
    idle_sms = sorted(set(range(int(meta["sm_count"]))) - set(sm.tolist()))
    per_sm_idle, gaps_all = {}, []
    for m_ in sorted(set(sm.tolist())):
        k = sm == m_
        busy, gaps = _union_len(np.stack([s[k], e[k]], 1))
        per_sm_idle[m_] = (span - busy) / 1e3
        gaps_all += [(m_, g0, g1) for g0, g1 in gaps if g1 - g0 >= gap_min_ns]
    gaps_all.sort(key=lambda x: x[1] - x[2])

    # layer time: from the layer's first start to the next layer's first start (last: its end);
    # a layer with no events (a hostile or partial trace) has no time rather than a crash
    present = [L for L in range(n_layers) if (layer_scoped & (lay == L)).any()]
    lstart = [float(s[layer_scoped & (lay == L)].min()) for L in present]
    lend = lstart[1:] + [float(e[layer_scoped & (lay == present[-1])].max())] if present else []
    layer_us = (np.array(lend) - np.array(lstart)) / 1e3 if present else np.array([])
    layer_mask = lay < n_layers
    wait_per_layer = float(d[is_wait & layer_mask].sum() / 1e3 / nblocks / max(n_layers, 1))
    is_ring = np.isin(ph, [p.id for p in phases if p.name in RING_PHASES])
    dep = is_wait & ~is_ring
    dep_per_layer = float(d[dep & layer_mask].sum() / 1e3 / nblocks / max(n_layers, 1))
    ring_per_layer = float(d[is_ring & layer_mask].sum() / 1e3 / nblocks / max(n_layers, 1))
    dep_token = float(d[dep].sum() / 1e3 / nblocks)  # per block, the whole token (LM head included)
    ring_token = float(d[is_ring].sum() / 1e3 / nblocks)
    hops = hop_latency(s, e, ph, lay, phases, blk)
    hops_per_layer = len({h["wait"] for h in hops if h["wait"].startswith("s_")}) or len(hops)
    milestones = layer_milestones(s, e, ph, lay, phases, blk, sm)
    edges = token_edges(s, e, ph, lay, phases, blk, layer_scoped,
                        float(layer_us[0]) if present and present[0] == 0 else None, n_layers, nblocks)
    subs = sub_intervals(s, e, ph, blk, phases)
    attn_idx = attention_by_group_index(s, e, ph, lay, phases, blk, nblocks)
    bar_per_layer = float(d[bar & layer_mask].sum() / 1e3 / nblocks / max(n_layers, 1))
    mean_layer = float(layer_us.mean()) if len(layer_us) else None

    token_us = float(meta["token_time_us"])
    warnings = []
    per_block = np.bincount(blk, minlength=nblocks)
    cap = int(meta.get("xray_max_events") or xray_max_events())  # kernel/xray.cuh's kXrayMaxEvents
    if per_block.max() >= cap:
        warnings.append(f"blocks {np.nonzero(per_block >= cap)[0].tolist()[:8]} filled all {cap} event slots: "
                        "their trace is truncated (raise kXrayMaxEvents)")
    if (per_block == 0).any():
        warnings.append(f"{int((per_block == 0).sum())} of {nblocks} blocks recorded no events")
    # A straight line per SM fits clock64 to %globaltimer with an rms of ~tick/sqrt(12) (9 ns at
    # 32 ns ticks); single stamps 2-3 ticks off happen in every measured trace (the two clock
    # reads are two instructions). A clock that moved during the token bends the line: the rms
    # grows (NOTES.md, ninth session: 11 ns on the default build, 171 ns with tensor-core scores).
    if al["residual_ns"]["rms"] > al["tick_ns"]:
        warnings.append(f"clock fit residual rms {al['residual_ns']['rms']:.0f} ns exceeds one globaltimer tick "
                        f"({al['tick_ns']} ns; a steady clock leaves ~{al['tick_ns'] / np.sqrt(12):.0f} ns): the SM "
                        "clock changed during the token (throttling, a tensor-core clock drop) or stamps are torn")
    ovh = meta.get("xray_overhead")
    if isinstance(ovh, dict) and ovh.get("over_limit"):
        warnings.append(f"X-ray overhead above {ovh.get('limit_pct')}% of the plain build's tok/s at positions "
                        f"{ovh['over_limit']} ({', '.join(f'{p}: {v:.1f}%' for p, v in ovh.get('pct', {}).items())}): "
                        "this trace may not show the plain kernel's schedule")
    if span <= 0:
        warnings.append("every interval has zero length: the trace carries no time")
    elif abs(span / 1e3 / token_us - 1) > 0.05:
        warnings.append(f"trace span {span / 1e3:.1f} µs differs from the CUDA-event token time {token_us:.1f} µs by more than 5%")
    return {
        "warnings": warnings,
        "schema": SUMMARY_SCHEMA,
        "meta": {k: v for k, v in meta.items() if k != "truth"},
        "events": int(len(ev)),
        "clock_alignment": {k: v for k, v in al.items() if k not in ("start_ns", "end_ns", "per_sm")},
        "clock_alignment_per_sm": al["per_sm"],
        "trace_span_us": span / 1e3,
        "token_time_us": token_us,
        # the instrument's cost, measured beside the trace (monolith.xray.overhead); None: not measured
        "xray_overhead": ovh if isinstance(ovh, dict) else None,
        "span_vs_token_time": {"ratio": span / 1e3 / token_us, "within_5pct": abs(span / 1e3 / token_us - 1) <= 0.05,
                               "note": "trace span (first stamp to last stamp) / CUDA-event time of the traced launch"},
        "phases": per_phase,
        "bandwidth": {"method": BW_METHOD,
                      "per_layer_tbs": _tbs(sum(v["bytes"] for v in bytes_model.values() if v["per"] == "layer"),
                                            mean_layer * 1e3) if mean_layer else None},
        "layers": {"count": n_layers, "mean_us": mean_layer, "min_us": float(layer_us.min()) if len(layer_us) else None,
                   "max_us": float(layer_us.max()) if len(layer_us) else None,
                   # a mean above the median is a few slow layers, not every layer (fourteenth
                   # session: an A/B whose milestone medians moved 0.07 µs and whose mean moved 0.55)
                   "median_us": float(np.median(layer_us)) if len(layer_us) else None,
                   "p90_us": float(np.percentile(layer_us, 90)) if len(layer_us) else None,
                   "per_layer_us": [round(float(x), 4) for x in layer_us]},
        "waits": {
            "per_block_us": [round(float(x) / 1e3, 4) for x in wait_ns],
            "barrier_per_block_us": [round(float(x) / 1e3, 4) for x in bar_ns],
            "mean_per_block_us": float(wait_ns.mean() / 1e3), "max_block": int(np.argmax(wait_ns)),
            "min_block": int(np.argmin(wait_ns)),
        },
        "barrier_share": {
            "wait_us_per_layer": wait_per_layer, "grid_barrier_us_per_layer": bar_per_layer,
            "layer_us": mean_layer,
            "wait_share": wait_per_layer / mean_layer if mean_layer else None,
            "grid_barrier_share": bar_per_layer / mean_layer if mean_layer else None,
            "upstream": dict(UPSTREAM, share=UPSTREAM["barrier_us_per_layer"] / UPSTREAM["us_per_layer"]),
            "dependency_wait_us_per_layer": dep_per_layer, "ring_wait_us_per_layer": ring_per_layer,
            "dependency_wait_share": dep_per_layer / mean_layer if mean_layer else None,
        },
        "token_waits": {
            "note": "per block over the whole token: dependency waits (barriers, flags, counters, tagged and "
                    "counted words) vs ring waits (weights not landed yet); share of the trace span",
            "dependency_us": dep_token, "ring_us": ring_token,
            "dependency_share": dep_token / (span / 1e3) if span > 0 else None,
            "ring_share": ring_token / (span / 1e3) if span > 0 else None,
        },
        "hops": {"per_layer": hops_per_layer, "latency": hops,
                 "method": "per layer: consumer wait end (first / last block) minus the last producer's phase end "
                           "(stamped after its stores); median over layers. *_sees_us: the wait's end (thread 0 "
                           "has its words); *_ready_us (traces with s_gather): the block has every thread's words"},
        "milestones": milestones,
        "edges": edges,
        "sub_intervals": subs,
        "attention_by_group_index": attn_idx,
        "grid_bandwidth_token_tbs": _tbs(float(sum(v["bytes"] * (n_layers if v["per"] == "layer" else 1)
                                                   for v in bytes_model.values())), span) if span > 0 else None,
        "idle": {
            "idle_sms": idle_sms, "idle_sm_us_each": span / 1e3,
            "per_sm_us": {str(k): round(float(v), 4) for k, v in per_sm_idle.items()},
            "busy_sm_idle_us_total": float(sum(per_sm_idle.values())),
            "gap_min_ns": gap_min_ns, "gaps": len(gaps_all),
            "largest_gaps": [{"sm": int(m_), "start_us": g0 / 1e3, "dur_us": (g1 - g0) / 1e3} for m_, g0, g1 in gaps_all[:10]],
        },
        "blocks": {str(b): int(m) for b, m in sorted(block_sm.items())},
        "byte_model": bytes_model,
        "tokens_per_s_from_trace": 1e6 / (span / 1e3) if span > 0 else None,
    }


# ---------------------------------------------------------------- A/B comparison


def compare(a: dict, b: dict) -> list[dict]:
    """Two summaries (analyze()) side by side, for an A/B of two builds: the headline numbers,
    each layer milestone's segment and work, and each hop's latency (medians over layers, µs:
    last block sees it; every thread's words in, where the trace has them), as rows {metric, a, b}.
    A metric one summary lacks is None there (e.g. milestones of another schedule)."""
    def get(summ, *path):
        x = summ
        for k in path:
            x = x.get(k) if isinstance(x, dict) else None
            if x is None:
                return None
        return x

    rows = [
        ("token time (CUDA events), µs", ("token_time_us",)),
        ("trace span, µs", ("trace_span_us",)),
        ("SM clock over the token, GHz", ("clock_alignment", "sm_ghz", "median")),
        ("clock fit residual rms, ns", ("clock_alignment", "residual_ns", "rms")),
        ("layer, µs (mean)", ("layers", "mean_us")),
        ("layer, µs (median)", ("layers", "median_us")),
        ("layer, µs (max)", ("layers", "max_us")),
        ("dependency waits, share of the token", ("token_waits", "dependency_share")),
        ("ring waits, share of the token", ("token_waits", "ring_share")),
        ("grid bandwidth over the token, TB/s", ("grid_bandwidth_token_tbs",)),
        ("layer 0, µs", ("edges", "first_layer", "layer_us")),
        ("layer 0's first phase, last block's end, µs", ("edges", "first_layer", "first_phase_last_end_us")),
        ("LM head span, µs", ("edges", "lm_head", "span_us")),
        ("LM head per block, µs (median)", ("edges", "lm_head", "per_block_median_us")),
        ("LM head ring waits per block, µs", ("edges", "lm_head", "ring_wait_per_block_us")),
        ("s_attn work, slowest index in a KV group, µs", ("attention_by_group_index", "slowest_us")),
        ("s_attn work, median index in a KV group, µs", ("attention_by_group_index", "median_us")),
    ]
    out = [{"metric": name, "a": get(a, *path), "b": get(b, *path)} for name, path in rows]
    seg = {}
    for side, summ in (("a", a), ("b", b)):
        for x in (get(summ, "milestones", "segments") or []):
            seg.setdefault(x["phase"], {})[side] = x
    for phase, d in seg.items():
        for key, label in (("segment_us", "segment"), ("segment_max_us", "segment, slowest layer"), ("work_us", "work"),
                           ("last_late_start_us", "last block's late start"), ("last_extra_work_us", "last block's extra work")):
            out.append({"metric": f"{phase} {label}, µs", "a": d.get("a", {}).get(key), "b": d.get("b", {}).get(key)})
    # the hops (hop_latency): where a faster phase's gain can go (thirteenth session: NVFP4's half2
    # stores shortened every phase's work and lengthened the hop into down by 1 µs)
    hop = {}
    for side, summ in (("a", a), ("b", b)):
        for h in (get(summ, "hops", "latency") or []):
            hop.setdefault((h["producer"], h["wait"]), {})[side] = h
    for (prod, wait), d in hop.items():
        for key, label in (("last_sees_us", "last block sees it"), ("last_ready_us", "every thread's words in, last block")):
            if any(key in d.get(side, {}) for side in ("a", "b")):
                out.append({"metric": f"hop {prod} → {wait}: {label}, µs",
                            "a": d.get("a", {}).get(key), "b": d.get("b", {}).get(key)})
    return out


def print_compare(rows: list[dict], name_a: str, name_b: str, console=None) -> None:
    from rich.table import Table

    from monolith.console import make_console

    con = console or make_console()
    t = Table(title=f"X-ray A/B: A = {name_a}, B = {name_b}")
    for c in ("metric", "A", "B", "B - A", "B / A - 1"):
        t.add_column(c, justify="left" if c == "metric" else "right")
    for r in rows:
        a, b = r["a"], r["b"]
        both = isinstance(a, (int, float)) and isinstance(b, (int, float))
        fmt = (lambda v: "–" if v is None else f"{v:.4g}")  # noqa: E731
        t.add_row(r["metric"], fmt(a), fmt(b), f"{b - a:+.4g}" if both else "–",
                  f"{(b / a - 1) * 100:+.1f} %" if both and a else "–")
    con.print(t)


# ---------------------------------------------------------------- report + plot


def print_report(summ: dict, console=None) -> None:
    from rich.table import Table

    from monolith.console import make_console

    con = console or make_console()
    m = summ["meta"]
    ca = summ["clock_alignment"]
    con.print(f"[bold]X-ray[/] {m['variant']} on {m['gpu']} · position {m['position']} · "
              f"{m['blocks']} blocks × {m['threads']} threads on {m['sm_count']} SMs · {summ['events']} events")
    con.print(f"clock alignment: {ca['method']} · residual rms {ca['residual_ns']['rms']:.1f} ns, "
              f"max {ca['residual_ns']['max']:.1f} ns (tick {ca['tick_ns']} ns)")
    if ca.get("sm_ghz"):
        g = ca["sm_ghz"]
        con.print(f"SM clock over the token (per-SM fits): median {g['median']:.4f} GHz, "
                  f"min {g['min']:.4f}, max {g['max']:.4f} ({g['sms']} SMs)")
    t = Table(title="per phase (TB/s issue→use: from the wait before the phase to its end; own span: the phase alone)")
    for c in ("phase", "kind", "count", "sum block-µs", "µs/block", "span/layer µs", "MB", "TB/s issue→use",
              "TB/s own span"):
        t.add_column(c, justify="left" if c in ("phase", "kind") else "right")
    for p in summ["phases"]:
        if not p["count"]:
            t.add_row(p["name"], p["kind"], "0", "", "", "", "", "", "")
            continue
        t.add_row(p["name"], p["kind"], str(p["count"]), f"{p['sum_us']:.1f}", f"{p['mean_per_block_us']:.2f}",
                  f"{p['span_per_layer_us']:.3f}", f"{p['bytes'] / 1e6:.2f}" if "bytes" in p else "",
                  f"{p['bw_issue_to_use_tbs']:.2f}" if p.get("bw_issue_to_use_tbs") else "",
                  f"{p['bw_own_span_tbs']:.2f}" if p.get("bw_own_span_tbs") else "")
    con.print(t)
    if summ.get("bandwidth", {}).get("per_layer_tbs"):
        con.print(f"grid bandwidth per layer (bytes of a layer / layer time): {summ['bandwidth']['per_layer_tbs']:.2f} TB/s")
    bs = summ["barrier_share"]
    if bs["layer_us"]:
        con.print(f"layer {bs['layer_us']:.2f} µs: waits {bs['wait_us_per_layer']:.2f} µs/block "
                  f"({bs['wait_share']:.1%}), grid barriers {bs['grid_barrier_us_per_layer']:.2f} µs "
                  f"({bs['grid_barrier_share']:.1%}) · upstream {UPSTREAM['barrier_us_per_layer']} of "
                  f"{UPSTREAM['us_per_layer']} µs ({bs['upstream']['share']:.1%})")
    ly = summ.get("layers", {})
    if ly.get("median_us") is not None:
        con.print(f"layers: median {ly['median_us']:.2f} µs, p90 {ly['p90_us']:.2f}, min {ly['min_us']:.2f}, "
                  f"max {ly['max_us']:.2f} (mean {ly['mean_us']:.2f}; {len(ly['per_layer_us'])} layers)")
    tw = summ.get("token_waits")
    if tw and tw.get("dependency_share") is not None:
        con.print(f"token: dependency waits {tw['dependency_us']:.1f} µs/block ({tw['dependency_share']:.1%}), "
                  f"ring waits {tw['ring_us']:.1f} µs/block ({tw['ring_share']:.1%})"
                  + (f" · grid bandwidth over the token {summ['grid_bandwidth_token_tbs']:.2f} TB/s"
                     if summ.get("grid_bandwidth_token_tbs") else ""))
    for h in summ.get("hops", {}).get("latency", []):
        ready = (f"; every thread's words in: first block {h['first_ready_us']:.2f}, last {h['last_ready_us']:.2f} µs"
                 if "last_ready_us" in h else "")
        con.print(f"hop {h['producer']} → {h['wait']}: first block sees it after {h['first_sees_us']:.2f} µs, "
                  f"last after {h['last_sees_us']:.2f} µs{ready}; producers end within {h['producer_spread_us']:.2f} µs "
                  f"(median of {h['layers']} layers)")
    ms = summ.get("milestones")
    if ms:
        segs = " · ".join(f"{x['phase']} {x['segment_us']:.2f} ({x['work_us']:.2f}; slowest layer "
                          f"{x['segment_max_us']:.2f})" for x in ms["segments"])
        con.print(f"layer milestones, µs from the previous phase's last end to this one's (the phase's median work "
                  f"per block; the segment's slowest layer): {segs} = {ms['sum_us']:.2f} µs", markup=False)
        if all("last_late_start_us" in x for x in ms["segments"]):
            late = " · ".join(f"{x['phase']} +{x['last_late_start_us']:.2f} / +{x['last_extra_work_us']:.2f}" for x in ms["segments"])
            con.print(f"the block that ends each phase last, against the median block (late start / extra work, µs): {late}",
                      markup=False)
        if all(x.get("late_blocks") for x in ms["segments"]):
            lb = " · ".join(x["phase"] + " " + ", ".join(f"{b['block']} (SM {b['sm']}) +{b['late_start_us']:.2f}"
                                                          for b in x["late_blocks"]) for x in ms["segments"])
            con.print(f"blocks that start each phase latest, mean over layers against the median block (µs): {lb}",
                      markup=False)
    ed = summ.get("edges") or {}
    if ed.get("first_layer"):
        f = ed["first_layer"]
        con.print(f"layer 0: {f['layer_us']:.2f} µs; its first phase {f['first_phase']} ends at "
                  f"{f['first_phase_median_end_us']:.2f} µs (median block), {f['first_phase_last_end_us']:.2f} (last)",
                  markup=False)
    if ed.get("lm_head"):
        h = ed["lm_head"]
        ring = f", ring waits {h['ring_wait_per_block_us']:.2f} µs/block" if h["ring_wait_per_block_us"] is not None else ""
        con.print(f"LM head: span {h['span_us']:.2f} µs from {h['start_us']:.1f}; per block median "
                  f"{h['per_block_median_us']:.2f}, max {h['per_block_max_us']:.2f} µs{ring}", markup=False)
    ai = summ.get("attention_by_group_index")
    if ai:
        con.print("attention work by the block's index in its KV group (median over groups and layers ≥ 1, µs): "
                  + " ".join("–" if x is None else f"{x:.2f}" for x in ai["per_index_us"])
                  + f" · slowest index {ai['slowest_index']} +{ai['spread_us']:.2f} over the median", markup=False)
    subs = summ.get("sub_intervals")
    if subs:  # MONOLITH_XRAY_SUB traces only
        by_parent: dict[str, list[dict]] = {}
        for x in subs:
            by_parent.setdefault(x["parent"], []).append(x)
        con.print("sub-intervals (MONOLITH_XRAY_SUB; median / max µs, cut from the parent; s_gather@P: the hop "
                  "bookkeeping that opens phase P; rest: the parent's own interval after the cuts): " + " · ".join(
                      f"{par}: " + ", ".join(f"{x['sub']} {x['median_us']:.2f}/{x['max_us']:.2f}" for x in xs)
                      + f" (rest {xs[0]['parent_rest_median_us']:.2f})" for par, xs in by_parent.items()), markup=False)
    w = summ["waits"]
    con.print(f"wait per block: mean {w['mean_per_block_us']:.1f} µs, max block {w['max_block']} "
              f"({w['per_block_us'][w['max_block']]:.1f} µs), min block {w['min_block']} ({w['per_block_us'][w['min_block']]:.1f} µs)")
    i = summ["idle"]
    con.print(f"idle SMs (no block): {i['idle_sms'] or 'none'} · busy-SM idle total {i['busy_sm_idle_us_total']:.1f} µs "
              f"in {i['gaps']} gaps ≥ {i['gap_min_ns']:.0f} ns")
    for w_ in summ.get("warnings", []):
        con.print(f"[bold yellow]warning:[/] {w_}")
    r = summ["span_vs_token_time"]
    con.print(f"trace span {summ['trace_span_us']:.1f} µs vs token time {summ['token_time_us']:.1f} µs: "
              f"ratio {r['ratio']:.3f} ({'within' if r['within_5pct'] else 'OUTSIDE'} 5%)")


def gantt_png(meta: dict, events: np.ndarray, path, method: str = "clock64-fit", width_px: int = 2400) -> Path:
    """Rows = blocks grouped by SM (idle SMs get a red labelled row), colour per phase, hatched waits.

    Painted as a pixel image, not as 40k vector patches: matplotlib hatching of that many
    polygons takes ~20 s, the image takes well under one. Every interval gets >= 1 px.
    """
    plt = pyplot()
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    meta, ev = validate_raw(meta, events)
    al = align(meta, ev, method)
    s, e = al["start_ns"] / 1e3, al["end_ns"] / 1e3
    phases = load_phases()
    blk, sm = ev[:, COL["block"]], ev[:, COL["smid"]]
    rows, labels, idle_rows = {}, [], []
    blocks_of = {}
    for b, m in zip(blk.tolist(), sm.tolist(), strict=True):
        blocks_of.setdefault(m, set()).add(b)
    for m in range(int(meta["sm_count"])):
        if m not in blocks_of:
            idle_rows.append(len(labels))
            labels.append(f"SM{m} idle")
            continue
        for b in sorted(blocks_of[m]):
            rows[b] = len(labels)
            labels.append(f"SM{m} b{b}")
    rh = 6  # pixels per row: 4 painted, 2 of gap
    span = max(float(e.max()), 1e-3)  # a trace whose intervals are all empty still draws
    img = np.ones((len(labels) * rh, width_px, 3))
    for r in idle_rows:
        img[r * rh:(r + 1) * rh - 1, :] = to_rgb("#f3c0c0")
    yy, xx = np.mgrid[0:rh - 2, 0:width_px]
    stripes = ((xx + yy) % 4) < 2  # diagonal hatch for waits
    x0 = np.clip((s / span * width_px).astype(int), 0, width_px - 1)
    x1 = np.maximum(x0 + 1, np.clip((e / span * width_px).astype(int), 0, width_px))
    color = {p.id: np.array(to_rgb(p.color)) for p in phases}
    wait = {p.id for p in phases if p.kind == "wait"}
    for i in range(len(ev)):
        r, p = rows[int(blk[i])], int(ev[i, COL["phase"]])
        tile = img[r * rh + 1:r * rh + rh - 1, x0[i]:x1[i]]
        tile[:] = color[p]
        if p in wait:
            tile[stripes[:, x0[i]:x1[i]]] = color[p] * 0.45
    fig_h = max(6.0, len(labels) * rh / 110 + 1.5)
    fig, ax = plt.subplots(figsize=(width_px / 110 + 2.5, fig_h), dpi=110)
    ax.imshow(img, aspect="auto", interpolation="nearest", extent=(0, span, len(labels) - 0.5, -0.5))
    step = max(1, len(labels) // 60)
    ax.set_yticks(range(0, len(labels), step), labels[::step], fontsize=5)
    ax.set_xlabel("µs from token start (clock64 aligned to globaltimer per SM)")
    ax.set_title(f"monolith X-ray · {meta['variant']} · {meta['gpu']} · position {meta['position']} · "
                 f"token {meta['token_time_us']:.1f} µs")
    handles = [Patch(facecolor=p.color, hatch="////" if p.kind == "wait" else None, label=p.name) for p in phases
               if (ev[:, COL["phase"]] == p.id).any()]
    handles.append(Patch(facecolor="#f3c0c0", label="idle SM (no block)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return save_png(fig, path)


def main(argv=None) -> int:
    from monolith.xray.raw import load_raw

    ap = argparse.ArgumentParser(prog="python -m monolith.xray.analyze", description="Analyze a raw X-ray trace (.npz).")
    ap.add_argument("raw", help="raw trace written by `monolith xray` (results/xray/<variant>.raw.npz)")
    ap.add_argument("--json", help="write the summary JSON here")
    ap.add_argument("--png", help="write a Gantt chart PNG here")
    ap.add_argument("--method", default="clock64-fit", choices=["clock64-fit", "globaltimer"])
    ap.add_argument("--compare", metavar="RAW_B", help="a second raw trace (build B): print the two side by side "
                    "(headline numbers, each layer milestone) instead of the one report")
    a = ap.parse_args(argv)
    try:
        meta, ev = load_raw(a.raw)
        summ = analyze(meta, ev, a.method)
        if a.compare:
            meta_b, ev_b = load_raw(a.compare)
            summ_b = analyze(meta_b, ev_b, a.method)
            rows = compare(summ, summ_b)
            print_compare(rows, a.raw, a.compare)
            if a.json:
                Path(a.json).parent.mkdir(parents=True, exist_ok=True)
                Path(a.json).write_text(json.dumps({"a": a.raw, "b": a.compare, "rows": rows}, indent=1))
            return 0
        print_report(summ)
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(json.dumps(summ, indent=1))
        if a.png:
            gantt_png(meta, ev, a.png, a.method)
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
