"""Synthetic raw traces with known answers, for tests and for the page's sample trace.

A tiny discrete-event model of the bf16-upstream schedule (per layer: qkv, barrier, attention
on 16 head blocks with a K/V flag between the two q heads of a KV pair and L2 prefetch on the
rest, the O-projection flag, then oproj/gateup/down each followed by a grid barrier; LM head on
every block and argmax on the last to finish). The model runs in true nanoseconds; the stamps
are then made the way the GPU makes them: %globaltimer floored to its 32 ns tick, clock64 at a
per-SM frequency (ppm skew) from a per-SM offset. `meta["truth"]` keeps the true answers, so a
test can check that the analyzer recovers them through the clocks.
"""
from __future__ import annotations

import numpy as np

from monolith.config import NUM_LAYERS, NUM_Q_HEADS
from monolith.xray.phases import by_name

# Work durations in µs (mean); ~14 µs per layer with the barriers, as measured-ish on H200 bf16.
DEFAULT_US = {"qkv": 2.2, "attn": 1.5, "kv_append": 0.3, "prefetch": 1.0, "oproj": 1.0,
              "gateup": 3.2, "down": 1.6, "lmhead": 75.0, "argmax": 0.8}
BARRIER_US = 0.9          # grid barrier: last arrival -> release (NOTES.md, Facts)
FLAG_US = 0.15            # flag visibility latency
GT_EPOCH_NS = 1_764_000_000_000_000_000   # a realistic %globaltimer value (ns since 1970)


def generate(*, sm_count=132, blocks=128, layers=NUM_LAYERS, position=128, idle_sms=(5, 47, 90, 131),
             durations_us=None, jitter=0.03, extra_wait_ns=None, slow_work_ns=None,
             clock_ghz=1.98, skew_ppm=50.0, tick_ns=32, seed=0, variant="synthetic-bf16-upstream"):
    """Return (meta, events int64 [N, 8]) of one synthetic token.

    extra_wait_ns: {(block, layer, phase_name): ns} lengthens that block's wait (it sees the
    release late). slow_work_ns: {(block, layer, phase_name): ns} makes that block's work slower,
    so every other block waits longer at the next barrier.
    """
    rng = np.random.default_rng(seed)
    dur = {k: v * 1000.0 for k, v in {**DEFAULT_US, **(durations_us or {})}.items()}
    extra_wait_ns = extra_wait_ns or {}
    slow_work_ns = slow_work_ns or {}
    ph = by_name()
    busy = [s for s in range(sm_count) if s not in set(idle_sms)]
    if len(busy) < blocks:
        raise ValueError(f"{blocks} blocks need {blocks} SMs, only {len(busy)} are not idle")
    sm_of = np.array(rng.permutation(busy)[:blocks])
    n_attn = min(NUM_Q_HEADS, blocks)
    ev: list[tuple] = []  # (block, phase_id, layer, t0_ns, t1_ns) in true time

    def add(b, name, layer, t0, t1):
        ev.append((b, ph[name].id, layer, float(t0), float(t1)))

    def work(t, name, layer, base_ns):
        """All blocks do `name` from their own time t; returns end times."""
        d = base_ns * np.clip(1 + jitter * rng.standard_normal(blocks), 0.5, 1.5)
        for b in range(blocks):
            d[b] += slow_work_ns.get((b, layer, name), 0.0)
        end = t + d
        for b in range(blocks):
            add(b, name, layer, t[b], end[b])
        return end

    def wait_until(t, release, name, layer, who=None):
        out = t.copy()
        for b in (range(blocks) if who is None else who):
            r = max(release[b] if np.ndim(release) else release, t[b]) + extra_wait_ns.get((b, layer, name), 0.0)
            add(b, name, layer, t[b], r)
            out[b] = r
        return out

    def barrier(t, name, layer):
        release = t.max() + dur.get("barrier", BARRIER_US * 1000) + rng.uniform(0, 40, blocks)
        return wait_until(t, release, name, layer)

    t = rng.uniform(0, 300, blocks)  # blocks start within ~0.3 µs of each other
    for layer in range(layers):
        t = work(t, "qkv", layer, dur["qkv"])
        t = barrier(t, "bar_qkv", layer)
        # attention: head blocks 2k and 2k+1 share KV head k; 2k appends K/V, 2k+1 waits for it
        kv_ready = {}
        for b in range(0, n_attn, 2):
            kv_ready[b] = t[b] + dur["kv_append"]
        end = t.copy()
        for b in range(blocks):
            if b < n_attn and b % 2 == 1:
                r = max(t[b], kv_ready[b - 1] + FLAG_US * 1000) + extra_wait_ns.get((b, layer, "flag_kv"), 0.0)
                add(b, "flag_kv", layer, t[b], r)
                t[b] = r
            name = "attn" if b < n_attn else "prefetch"
            d = dur[name] * float(np.clip(1 + jitter * rng.standard_normal(), 0.5, 1.5))
            d += slow_work_ns.get((b, layer, name), 0.0)
            end[b] = t[b] + d
            add(b, name, layer, t[b], end[b])
        heads_done = end[:n_attn].max() + FLAG_US * 1000
        t = wait_until(end, np.full(blocks, heads_done), "flag_attn", layer)
        t = work(t, "oproj", layer, dur["oproj"])
        t = barrier(t, "bar_o", layer)
        t = work(t, "gateup", layer, dur["gateup"])
        t = barrier(t, "bar_gateup", layer)
        t = work(t, "down", layer, dur["down"])
        t = barrier(t, "bar_down", layer)
    t = work(t, "lmhead", layers, dur["lmhead"])
    last = int(np.argmax(t))
    add(last, "argmax", layers, t[last], t[last] + dur["argmax"] * float(np.clip(1 + jitter * rng.standard_normal(), 0.5, 1.5)))

    arr = np.array([(b, p, la) for b, p, la, _, _ in ev], dtype=np.int64)
    t0 = np.array([e[3] for e in ev])
    t1 = np.array([e[4] for e in ev])
    sm = sm_of[arr[:, 0]]
    # clocks: globaltimer floored to its tick; clock64 per SM with its own frequency and offset
    f_sm = clock_ghz * (1 + skew_ppm * 1e-6 * rng.uniform(-1, 1, sm_count))
    c_off = rng.integers(10**11, 10**12, sm_count)
    gt = lambda x: ((GT_EPOCH_NS + np.floor(x).astype(np.int64)) // tick_ns) * tick_ns  # noqa: E731
    ck = lambda x: c_off[sm] + np.round(x * f_sm[sm]).astype(np.int64)  # noqa: E731
    events = np.stack([arr[:, 0], sm, arr[:, 1], arr[:, 2], gt(t0), gt(t1), ck(t0), ck(t1)], axis=1).astype(np.int64)

    span_ns = t1.max() - t0.min()
    kinds = {p.id: p.kind for p in ph.values()}
    is_wait = np.array([kinds[p] == "wait" for p in arr[:, 1]])
    wait_per_block = np.bincount(arr[is_wait, 0], weights=(t1 - t0)[is_wait], minlength=blocks)
    phase_total = {p.name: float((t1 - t0)[arr[:, 1] == p.id].sum()) for p in ph.values()}
    meta = {
        "variant": variant, "gpu": "synthetic (generated, not measured)", "sm_count": sm_count,
        "blocks": blocks, "threads": 512, "position": position, "sm_clock_mhz": clock_ghz * 1000,
        "token_time_us": round(span_ns / 1000 + 4.0, 3),  # CUDA events add launch + drain
        "build": "synthetic", "weights": {"kind": "none", "note": "synthetic trace: no model ran"},
        "created": "2026-12-01T00:00:00Z", "synthetic": True, "globaltimer_tick_ns": tick_ns,
        "truth": {
            "t0_ns": t0.tolist(), "t1_ns": t1.tolist(),  # true times, same order as events
            "idle_sms": sorted(int(s) for s in idle_sms),
            "wait_ns_per_block": wait_per_block.tolist(),
            "phase_total_ns": phase_total,
            "span_ns": float(span_ns),
            "sm_freq_ghz": f_sm.tolist(),
        },
    }
    return meta, events


# The page's sample: a few visible anomalies so the viewer has something to show.
SAMPLE_EXTRA_WAIT_NS = {(37, 10, "bar_o"): 3000.0, (90, 3, "bar_gateup"): 1500.0}
SAMPLE_SLOW_WORK_NS = {(64, 20, "gateup"): 4000.0, (5, 14, "down"): 2500.0, (120, 27, "qkv"): 2000.0}


def sample(seed: int = 0):
    return generate(seed=seed, extra_wait_ns=SAMPLE_EXTRA_WAIT_NS, slow_work_ns=SAMPLE_SLOW_WORK_NS)


def write_sample(path):
    """Write the synthetic sample page trace (web/public/traces/sample-synthetic.json.gz)."""
    from monolith.xray.analyze import analyze
    from monolith.xray.export import to_page, write_page

    meta, ev = sample()
    return write_page(to_page(meta, ev, analyze(meta, ev)), path)
