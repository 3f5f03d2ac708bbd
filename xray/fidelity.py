"""Phase fidelity: does the X-ray trace place a layer's phases where the plain kernel has them?
(issue 49, the fidelity item)

The plain kernel has no clock of its own, but it can stop: a launch with StepParams stop_layer /
stop_phase (kernel/config.cuh StopPhase) ends when every block has left after its part of
(layer, phase). Its CUDA-event time is the plain kernel's milestone "every block is done with
(layer, phase)" plus a constant (the launch, the event reads, the blocks' exit); the difference of
two stop points cancels the constant. The trace's milestone of the same stop point is the latest end
over blocks of the record that the kernel closes just before that stop's return (STOP_RECORDS).
Per segment between consecutive stop points, the two differences are compared; the token span of
the trace (first stamp to last) is compared with the plain build's decode time per token.

Stop points of layer L (stop_points): the previous layer's last (L-1, kStopDown), then every stop of
L that the schedule honours at a point of its own. Which records close them depends on the schedule
(kernel/variants.json "schedule", the one place it is written: schedule_of), not on the variant's
name: an upstream trace has no stream records (its layer 13 has bar_down, not s_down).

Protocol (window_launcher), identical for every launch that is compared: seek to the position less
WINDOW, WINDOW full launches back to back (the steady state of a decode loop; a streaming launch's
tail asks L2 for the next one's first weights), then the measured launch between two CUDA events, then a
host sync and the engine's error check. Plain stopped launches, X-ray stopped launches and X-ray
traced full launches are interleaved rep by rep (a clock or thermal drift hits each alike); a
stopped launch's time is the interquartile mean of its reps (the event timer's ~0.5 µs resolution
makes a median of few values move in steps), the trace's segment the median over its traces.

Where a stop and its record are not the same instant (streaming schedule; each a fraction of a
microsecond, which the segment floor SEGMENT_FLOOR_US is meant to absorb): the producer lane leaves
after the consumers (it drains the copies in flight); after kStopAttn the block still folds the last
partial into its attention vector (the trace counts that into s_oproj); after kStopO each thread
leaves once it has its own counted words, while s_wait_o closes at thread 0's (the block's last
thread has its words up to the x_words sub-interval later, which the trace counts into s_gather).
A segment that fails by about that much points at these, not at the instrument.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from monolith import stop_phase as SP
from monolith.errors import MonolithError

# The pass rule, per variant and position (the shipped X-ray layout): the trace's token span within
# TOKEN_PCT % of the plain build's time per token, and every segment's trace difference within
# max(SEGMENT_PCT % of the plain difference, SEGMENT_FLOOR_US) of it (the whole-layer row included).
TOKEN_PCT = 3.0
SEGMENT_PCT = 3.0
SEGMENT_FLOOR_US = 0.2
PASS_RULE = (
    f"token: |trace span - plain us/token| <= {TOKEN_PCT:g} % of plain us/token; each segment between "
    f"stop points (and the whole layer): |trace - plain| <= max({SEGMENT_PCT:g} % of plain, "
    f"{SEGMENT_FLOOR_US:g} µs)"
)

WINDOW = 4  # full launches before each measured one
REPS = 31  # stopped launches per (build, stop point, position)
TRACES = 5  # traced full launches per (X-ray build, position)
FIRST_TOKEN = 9707

CONFIG_CUH = SP.CONFIG_CUH

# Per schedule, in kernel order: (StopPhase name, the X-ray phase whose XRAY_END the kernel executes
# last before that stop's return). Stops a schedule honours at the same statement as another are
# left out (the stream schedule leaves after its down rows for kStopGateUp and kStopDown alike).
# tests/test_xray_fidelity.py reads the kernel sources and checks this table against them.
STOP_RECORDS: dict[str, tuple[tuple[str, str], ...]] = {
    "upstream": (
        ("kStopQKV", "bar_qkv"),
        ("kStopAttn", "flag_attn"),
        ("kStopO", "bar_o"),
        ("kStopGateUp", "bar_gateup"),
        ("kStopDown", "bar_down"),
    ),
    "stream": (("kStopQKV", "s_qkv"), ("kStopAttn", "s_wait_attn"), ("kStopO", "s_wait_o"), ("kStopDown", "s_down")),
}
LAST_STOP = "kStopDown"  # every schedule's last stop of a layer (the previous layer's point)


@dataclass(frozen=True)
class StopPoint:
    layer: int
    stop: str  # StopPhase name (kernel/config.cuh)
    phase: int  # its value, what the launch passes as stop_phase
    record: str  # the X-ray phase whose record closes it (kernel/xray_phases.def)
    schedule: str  # the schedule whose table named the record

    @property
    def key(self) -> str:
        return f"L{self.layer}.{self.record}"

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "layer": self.layer,
            "stop": self.stop,
            "stop_phase": self.phase,
            "record": self.record,
            "schedule": self.schedule,
        }


def schedule_of(variant: str) -> str:
    """The variant's schedule as kernel/variants.json states it ("upstream" or "stream")."""
    from monolith import kernel_spec

    sched = kernel_spec.variant_spec(variant).get("schedule")
    if sched not in STOP_RECORDS:
        raise MonolithError(
            f"fidelity: variant {variant} has schedule {sched!r} in kernel/variants.json; "
            f"known: {', '.join(STOP_RECORDS)}"
        )
    return sched


def stop_phase_values(path: Path | str = CONFIG_CUH) -> dict[str, int]:
    """kernel/config.cuh `enum StopPhase` as {name: value} (monolith/stop_phase.py, the launches' own
    source), with every name this module's tables use."""
    out = SP.values(path)
    need = {n for recs in STOP_RECORDS.values() for n, _ in recs} | {"kStopNever"}
    missing = sorted(need - set(out))
    if missing:
        raise MonolithError(f"{path}: enum StopPhase lacks {missing}")
    return out


def stop_points(schedule: str, layer: int, num_layers: int | None = None) -> list[StopPoint]:
    """The stop points of layer `layer`: (layer - 1, kStopDown), then each of the layer's stops."""
    if schedule not in STOP_RECORDS:
        raise MonolithError(f"fidelity: unknown schedule {schedule!r} (known: {', '.join(STOP_RECORDS)})")
    if num_layers is None:
        from monolith.config import NUM_LAYERS as num_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer < num_layers:
        raise MonolithError(
            f"fidelity: the layer must be in 1..{num_layers - 1} (its previous layer's end is the "
            f"first stop point), got {layer!r}"
        )
    vals = stop_phase_values()
    recs = dict(STOP_RECORDS[schedule])
    first = StopPoint(layer - 1, LAST_STOP, vals[LAST_STOP], recs[LAST_STOP], schedule)
    return [first] + [StopPoint(layer, n, vals[n], r, schedule) for n, r in STOP_RECORDS[schedule]]


def trace_milestones(events: np.ndarray, end_ns: np.ndarray, points: list[StopPoint], variant: str) -> dict[str, float]:
    """key -> the latest end (ns, the trace's clock) over blocks of the point's record in its layer.
    events: [N, 8] as decode_buffer gives them (column 2 phase, 3 layer); end_ns: align()'s ends."""
    from monolith.xray.phases import by_name

    ids = {n: p.id for n, p in by_name().items()}
    ev = np.asarray(events)
    end = np.asarray(end_ns, dtype=np.float64)
    if ev.ndim != 2 or ev.shape[1] < 4 or len(end) != len(ev):
        raise MonolithError(f"fidelity: {variant}: events {ev.shape} and ends {end.shape} do not match")
    out = {}
    for pt in points:
        if pt.record not in ids:
            raise MonolithError(f"fidelity: {variant}: phase {pt.record} is not in kernel/xray_phases.def")
        sel = (ev[:, 2] == ids[pt.record]) & (ev[:, 3] == pt.layer)
        if not sel.any():
            raise MonolithError(
                f"fidelity: {variant}: the trace has no {pt.record} record of layer {pt.layer} "
                f"(stop point {pt.stop}, {pt.schedule} schedule)"
            )
        t = float(end[sel].max())
        if not math.isfinite(t):
            raise MonolithError(f"fidelity: {variant}: the {pt.record} record of layer {pt.layer} ends at {t}")
        out[pt.key] = t
    return out


def robust_us(samples) -> tuple[float, float]:
    """(interquartile mean, interquartile range) of launch times in µs; refuses a non-finite or
    non-positive sample."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise MonolithError("fidelity: no samples")
    bad = [x for x in xs if not (math.isfinite(x) and x > 0)]
    if bad:
        raise MonolithError(f"fidelity: a launch time is not finite > 0: {bad[0]!r}")
    n = len(xs)
    lo, hi = n // 4, n - n // 4
    mid = xs[lo:hi]
    return statistics.fmean(mid), xs[min(n - 1, (3 * n) // 4)] - xs[n // 4]


def segment_limit_us(plain_us: float) -> float:
    return max(SEGMENT_PCT / 100.0 * abs(plain_us), SEGMENT_FLOOR_US)


def segments(
    points: list[StopPoint],
    plain_us: dict[str, float],
    traces_us: list[dict[str, float]],
    xray_stop_us: dict[str, float] | None = None,
) -> list[dict]:
    """Rows per segment between consecutive stop points, then the whole layer (first point to last):
    plain_us (the stopped plain launches' difference), trace_us (the median over traces of each
    trace's milestone difference; trace_us_each: every trace's), error_us = trace - plain,
    rel_error = error / plain, limit_us and pass; with xray_stop_us (stopped X-ray launches) also
    xray_stop_us and overhead_us = X-ray stop - plain stop (what the instrument costs the segment,
    apart from how the trace reads it)."""
    if not traces_us:
        raise MonolithError("fidelity: no trace")
    keys = [p.key for p in points]
    spans = list(zip(keys, keys[1:], strict=False)) + [(keys[0], keys[-1])]
    rows = []
    for i, (k0, k1) in enumerate(spans):
        a = plain_us[k1] - plain_us[k0]
        each = [m[k1] - m[k0] for m in traces_us]
        t = statistics.median(each)
        for name, x in (("plain", a), ("trace", t)):
            if not math.isfinite(x):
                raise MonolithError(f"fidelity: segment {k0} -> {k1}: the {name} difference is {x}")
        err = t - a
        lim = segment_limit_us(a)
        row = {
            "from": k0,
            "to": k1,
            "what": "layer" if i == len(spans) - 1 else "segment",
            "plain_us": round(a, 3),
            "trace_us": round(t, 3),
            "error_us": round(err, 3) + 0.0,
            "rel_error": round(err / a, 4) if a > 0 else None,
            "limit_us": round(lim, 3),
            "pass": abs(err) <= lim,
            "trace_us_each": [round(x, 3) for x in each],
        }
        if xray_stop_us is not None:
            x = xray_stop_us[k1] - xray_stop_us[k0]
            row["xray_stop_us"] = round(x, 3)
            row["overhead_us"] = round(x - a, 3) + 0.0  # (no -0.0 in the JSON)
        rows.append(row)
    return rows


def token_check(span_us: float, plain_token_us: float) -> dict:
    """The trace's token span against the plain build's decode time per token."""
    for name, x in (("trace span", span_us), ("plain time per token", plain_token_us)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and x > 0):
            raise MonolithError(f"fidelity: the {name} must be finite > 0 µs, got {x!r}")
    err = span_us - plain_token_us
    return {
        "trace_span_us": round(span_us, 3),
        "plain_token_us": round(plain_token_us, 3),
        "error_us": round(err, 3),
        "rel_error": round(err / plain_token_us, 4),
        "pass": abs(err) <= TOKEN_PCT / 100.0 * plain_token_us,
    }


def evaluate(
    variant: str,
    points: list[StopPoint],
    plain_samples: dict[str, list[float]],
    plain_token_us: float,
    traces: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    xray_samples: dict[str, list[float]] | None = None,
) -> dict:
    """One (variant, position, X-ray build), the GPU-free core. plain_samples / xray_samples: key ->
    stopped-launch times (µs), "token" -> full launches; traces: [(events, start_ns, end_ns)] of full
    traced launches; plain_token_us: the plain build's decode time per token at that position."""
    if not traces:
        raise MonolithError(f"fidelity: {variant}: no trace")
    plain = {k: robust_us(v) for k, v in plain_samples.items()}
    missing = [p.key for p in points if p.key not in plain]
    if missing:
        raise MonolithError(f"fidelity: {variant}: no plain stopped launches at {missing}")
    xray = {k: robust_us(v) for k, v in xray_samples.items()} if xray_samples else None
    miles, spans = [], []
    for ev, start, end in traces:
        miles.append({k: v / 1e3 for k, v in trace_milestones(ev, end, points, variant).items()})
        spans.append(float(np.max(end) - np.min(start)) / 1e3)
    rows = segments(
        points, {k: v[0] for k, v in plain.items()}, miles, {k: v[0] for k, v in xray.items()} if xray else None
    )
    tok = token_check(statistics.median(spans), plain_token_us)
    tok["trace_span_us_each"] = [round(s, 3) for s in spans]
    if "token" in plain:
        tok["plain_launch_us"] = round(plain["token"][0], 3)
    if xray and "token" in xray:
        tok["xray_launch_us"] = round(xray["token"][0], 3)
    failed = [f"{r['from']}->{r['to']}" for r in rows if not r["pass"]] + ([] if tok["pass"] else ["token"])
    out = {
        "plain_stop_us": {k: round(v[0], 3) for k, v in plain.items()},
        "plain_stop_iqr_us": {k: round(v[1], 3) for k, v in plain.items()},
    }
    if xray:
        out["xray_stop_us"] = {k: round(v[0], 3) for k, v in xray.items()}
    out.update(
        {
            "trace_milestones_us": [{k: round(v, 3) for k, v in m.items()} for m in miles],
            "segments": rows,
            "token": tok,
            "failed": failed,
            "pass": not failed,
        }
    )
    return out


# ---------------------------------------------------------------- on the GPU


def window_launcher(mk, builds: dict, position: int, window: int = WINDOW, event=None):
    """launch(build, stop, traced) -> (µs, trace or None) over one MegakernelEngine built with its
    X-ray buffer. builds: name -> (extension, xray). stop: (layer, stop_phase), or None for a full
    launch; traced: a full X-ray launch whose buffer is decoded and aligned (events, start_ns, end_ns).
    The protocol is the module docstring's; the engine's extension and mode are restored after each."""
    import torch

    from monolith.xray.analyze import align
    from monolith.xray.raw import decode_buffer

    event = event or (lambda: torch.cuda.Event(enable_timing=True))
    never = stop_phase_values()["kStopNever"]
    w = min(window, position)
    if mk.xray_buf is None:
        raise MonolithError("fidelity: the engine has no X-ray buffer (MegakernelEngine(..., xray=True))")

    def launch(build: str, stop, traced: bool = False):
        ext, xray = builds[build]
        if traced and (stop is not None or not xray):
            raise MonolithError("fidelity: a traced launch is a full launch of an X-ray build")
        own = (mk.ext, mk.xray)
        mk.ext, mk.xray = ext, xray
        try:
            mk.seek(position - w)
            buf = torch.zeros(w + 2, dtype=torch.int32, device=mk.device)
            buf[0] = FIRST_TOKEN
            base = buf.data_ptr()
            for i in range(w):
                mk._launch(base + 4 * i, base + 4 * (i + 1), position - w + i, record=xray)
            if traced:
                mk.xray_buf.zero_()  # stream-ordered: only the measured launch's records remain
            e0, e1 = event(), event()
            e0.record()
            mk._launch(base + 4 * w, base + 4 * (w + 1), position, stop=stop or (never, never), record=xray)
            e1.record()
            mk.position = position + (1 if stop is None else 0)  # a stopped launch leaves the position
            mk.check()  # synchronizes; one clear error if any launch failed
            us = e0.elapsed_time(e1) * 1e3
            trace = None
            if traced:
                ev, add = decode_buffer(
                    mk.xray_buf.cpu().numpy(), mk.blocks, mk.k["xray_max_events"], where=f"{mk.variant} X-ray buffer"
                )
                if not len(ev):
                    raise MonolithError(f"fidelity: {mk.variant}: the traced launch wrote no records")
                al = align({"sm_clock_mhz": None, **add}, ev)
                trace = (ev, al["start_ns"], al["end_ns"])
        finally:
            mk.ext, mk.xray = own
        return us, trace

    return launch


def measure_position(
    launch,
    variant: str,
    points: list[StopPoint],
    alts: list[str],
    plain_token_us: float,
    reps: int = REPS,
    traces: int = TRACES,
) -> dict:
    """At one position: `reps` rounds, each one launch of every (build, stop point) and of the full
    step (plain first, then each X-ray build in `alts`), and in the first `traces` rounds one traced
    launch of each X-ray build; then evaluate() per X-ray build. launch: window_launcher's."""
    if reps < 4 or traces < 1:
        raise MonolithError(f"fidelity: need reps >= 4 and traces >= 1, got {reps}, {traces}")
    builds = ["plain", *alts]
    samples = {b: {p.key: [] for p in points} | {"token": []} for b in builds}
    tr = {a: [] for a in alts}
    for r in range(reps):
        for b in builds:
            for p in points:
                samples[b][p.key].append(launch(b, (p.layer, p.phase))[0])
            samples[b]["token"].append(launch(b, None)[0])
            if b != "plain" and r < traces:
                tr[b].append(launch(b, None, traced=True)[1])
    return {a: evaluate(variant, points, samples["plain"], plain_token_us, tr[a], samples[a]) for a in alts}


def measure_variant(
    mk,
    variant: str,
    builds: dict,
    alts: list[str],
    positions,
    layer: int,
    plain_token_us: dict[int, float],
    shipped: str,
    reps: int = REPS,
    traces: int = TRACES,
    progress=None,
) -> dict:
    """The JSON block of one variant (scripts/xray_overhead.py variants.<v>.phase_fidelity).
    builds: name -> (extension, xray) with "plain" and every alt; plain_token_us: position -> the
    plain build's decode µs per token (the overhead measurement's)."""
    sched = schedule_of(variant)
    points = stop_points(sched, layer)
    out: dict = {
        "layer": layer,
        "schedule": sched,
        "points": [p.as_dict() for p in points],
        "rule": {
            "token_pct": TOKEN_PCT,
            "segment_pct": SEGMENT_PCT,
            "segment_floor_us": SEGMENT_FLOOR_US,
            "text": PASS_RULE,
        },
        "protocol": {
            "window": WINDOW,
            "reps": reps,
            "traces": traces,
            "text": "seek(position - window), window full launches, the measured launch between "
            "CUDA events, host sync + error check; plain and X-ray stopped launches, full "
            "launches and traced launches interleaved per rep; stopped: interquartile "
            "mean of reps; trace: median over traces of each trace's difference",
        },
        "shipped": shipped,
        "positions": {},
    }
    for pos in positions:
        if pos not in plain_token_us:
            raise MonolithError(f"fidelity: {variant}: no plain time per token at position {pos}")
        launch = window_launcher(mk, builds, pos)
        res = measure_position(launch, variant, points, alts, plain_token_us[pos], reps, traces)
        out["positions"][str(pos)] = res
        if progress:
            s = res[shipped]
            progress(
                f"fidelity L{layer} at {pos}: token {s['token']['rel_error'] * 100:+.2f}%, "
                f"worst segment {max(abs(r['error_us']) for r in s['segments']):.2f} µs: "
                + ("pass" if s["pass"] else f"FAIL {s['failed']}")
            )
    out["pass"] = all(p[shipped]["pass"] for p in out["positions"].values())
    return out
