"""What the X-ray costs: tok/s of the plain and the X-ray build of one engine, same process, same
positions, interleaved runs, and the decoded tokens compared (the instrument must not change them).

The bar (NOTES.md, M2; issue 49): the instrumented build within LIMIT_PCT of the plain build's
tok/s, on every variant at every traced position. overhead % = (plain tok/s - X-ray tok/s) /
plain tok/s x 100 (negative: the X-ray build was faster, i.e. noise).

`measure(timer, builds, positions, runs)` is the GPU-free core (a test drives it with fake
timings); `engine_timer(mk, ...)` times a MegakernelEngine; `attach(meta, result)` puts the numbers
into a trace's meta (`xray_overhead`), which the analyzer copies into the summary and the page
shows beside the trace.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from monolith.errors import MonolithError

LIMIT_PCT = 3.0
SWEEP_POSITIONS = (16, 128, 512, 1024, 2048)
METHOD = ("CUDA events around {tokens} back-to-back decode launches from the position (seek: the "
          "K/V cache below it holds what earlier windows left), median of {runs} interleaved runs "
          "after one warm-up run per build; plain and X-ray builds of one engine in one process; "
          "overhead = (plain - X-ray) / plain tok/s")

# timer(build, position) -> (seconds per token, decoded tokens)
Timer = Callable[[str, int], tuple[float, list[int]]]


def overhead_pct(plain_tok_s: float, xray_tok_s: float) -> float:
    if not (math.isfinite(plain_tok_s) and plain_tok_s > 0 and math.isfinite(xray_tok_s) and xray_tok_s > 0):
        raise MonolithError(f"overhead: tok/s must be finite and > 0, got plain {plain_tok_s!r}, X-ray {xray_tok_s!r}")
    return (plain_tok_s - xray_tok_s) / plain_tok_s * 100.0


def measure(timer: Timer, builds: list[str], positions, runs: int = 5, tokens: int = 64,
            progress: Callable[[str], None] | None = None) -> dict:
    """builds[0] is the plain build; every other is an X-ray build compared with it. Runs are
    interleaved (run r of every build before run r + 1 of any) so that a clock or thermal drift
    hits every build alike; the first run of each (build, position) is a warm-up, not counted."""
    if len(builds) < 2 or len(set(builds)) != len(builds):
        raise MonolithError(f"overhead: need the plain build and at least one X-ray build, distinct: {builds}")
    if runs < 1:
        raise MonolithError(f"overhead: runs must be >= 1, got {runs}")
    positions = [int(p) for p in positions]
    times: dict[tuple[str, int], list[float]] = {}
    toks: dict[tuple[str, int], list[int]] = {}
    for pos in positions:
        for r in range(runs + 1):
            for b in builds:
                s, t = timer(b, pos)
                if not (math.isfinite(s) and s > 0):
                    raise MonolithError(f"overhead: build {b} at position {pos}: time per token {s!r} is not finite > 0")
                if r == 0:
                    toks[(b, pos)] = list(t)
                    continue
                times.setdefault((b, pos), []).append(s)
                if list(t) != toks[(b, pos)]:
                    raise MonolithError(f"overhead: build {b} at position {pos} decoded different tokens from run to run")
        if progress:
            med = {b: statistics.median(times[(b, pos)]) for b in builds}
            progress(f"position {pos}: " + ", ".join(f"{b} {1 / med[b]:.0f} tok/s" for b in builds))
    plain = builds[0]
    rows, over, same = [], {}, {}
    for b in builds:
        for pos in positions:
            ts = sorted(times[(b, pos)])
            med = statistics.median(ts)
            rows.append({"build": b, "position": pos, "us_per_token": med * 1e6, "tok_s": 1 / med,
                         "tok_s_min": 1 / ts[-1], "tok_s_max": 1 / ts[0], "runs": len(ts)})
    by = {(r["build"], r["position"]): r for r in rows}
    for b in builds[1:]:
        over[b] = {str(p): round(overhead_pct(by[(plain, p)]["tok_s"], by[(b, p)]["tok_s"]), 3) for p in positions}
        same[b] = {str(p): toks[(b, p)] == toks[(plain, p)] for p in positions}
    return {"plain": plain, "builds": builds, "positions": positions, "rows": rows, "overhead_pct": over,
            "tokens_equal": same, "limit_pct": LIMIT_PCT,
            "over_limit": {b: [int(p) for p, v in o.items() if v > LIMIT_PCT] for b, o in over.items()},
            "method": METHOD.format(tokens=tokens, runs=runs)}


def engine_timer(mk, ext_of: dict | None = None, tokens: int = 64, first_token: int = 9707) -> Timer:
    """A timer over one MegakernelEngine: build "plain" runs its plain kernel; any other build name
    runs the X-ray kernel of ext_of[name] (default: the engine's own extension). The window starts
    at the position (seek, then `tokens` decode launches, the X-ray buffer written by each)."""
    import torch

    own = mk.ext
    ext_of = dict(ext_of or {})

    def timer(build: str, pos: int) -> tuple[float, list[int]]:
        mk.ext = ext_of.get(build, own)
        mk.xray = build != "plain"
        try:
            mk.seek(pos)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(mk.device)
            e0.record()
            out = mk.decode(first_token, tokens)
            e1.record()
            torch.cuda.synchronize(mk.device)
        finally:
            mk.ext, mk.xray = own, True
        return e0.elapsed_time(e1) / 1e3 / tokens, [int(x) for x in out.tolist()]

    return timer


def attach(meta: dict, result: dict, build: str | None = None) -> dict:
    """meta["xray_overhead"]: the overhead of `build` (default: the first X-ray build) at each
    measured position, as the trace's summary and page carry it."""
    b = build or result["builds"][1]
    pct = result["overhead_pct"][b]
    meta["xray_overhead"] = {"pct": pct, "limit_pct": result["limit_pct"],
                             "over_limit": [int(p) for p, v in pct.items() if v > result["limit_pct"]],
                             "tokens_equal": all(result["tokens_equal"][b].values()),
                             "tok_s": {str(r["position"]): round(r["tok_s"], 1) for r in result["rows"]
                                       if r["build"] == b},
                             "plain_tok_s": {str(r["position"]): round(r["tok_s"], 1) for r in result["rows"]
                                             if r["build"] == result["plain"]},
                             "method": result["method"]}
    return meta


def measure_engine(mk, positions=SWEEP_POSITIONS, runs: int = 5, tokens: int = 64,
                   progress: Callable[[str], None] | None = None) -> dict:
    """measure() of one X-ray engine (MegakernelEngine(..., xray=True)): its plain kernel against
    its X-ray kernel at every position whose window fits the context."""
    cap = int(getattr(mk, "context_cap", 1 << 30))
    ok = [int(p) for p in positions if int(p) + tokens <= cap]
    if not ok:
        raise MonolithError(f"overhead: no position of {list(positions)} leaves room for {tokens} tokens (cap {cap})")
    return measure(engine_timer(mk, tokens=tokens), ["plain", "xray"], ok, runs=runs, tokens=tokens, progress=progress)
