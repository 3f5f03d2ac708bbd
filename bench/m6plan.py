"""`monolith m6 --plan SRC`: the next lease's time, engine group by engine group, from the seconds each
engine took in an earlier one (SRC: a rows dir or a merged final.json, whose rows carry their start
and end), against the session's device budget. notes/m6_budget.md explains the model and its inputs.

The model of one group (one `monolith m6` process of scripts/m6_lease.sh):
  process start (interpreter, imports, checkpoint, NVML: PROCESS_S)
  + max(extension builds, the oracles it computes, the ahead work)  -- bench/m6.py builds while the
    oracles run; an oracle another group of the lease already computed is read from the lease's
    file (0 s). The first group that computes an oracle also runs the ahead work (bench/m6.py
    AHEAD_ENGINES) of its own and every later group's hf-compile (its cold compile in a process of
    its own) and llama.cpp (unpack and GGUF conversions), each in parallel
  + for each engine: its measured row window, less what no longer runs inside it: the oracle the
    row computed (rows measured before the oracles moved ahead of the engines), the race
    timeline's extra decode of prompt 0 (now the timed runs' own; rows without that marker), a
    slow gate's prompts beyond what its budget holds at 3 passes per prompt (rows sized at 2), and
    what the ahead work took out: hf-compile's cold compile (a warm one stays) and llama.cpp's
    conversions (rows whose window held them).
Engines the source does not have need `assume` (seconds each); without it the plan says it cannot
tell whether the lease fits.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from monolith import REPO_ROOT, jsonio
from monolith.errors import MonolithError

LEASE_S = 1800.0  # a session's device time
START_S = 360.0  # a machine's start, counted (results/logs/2026-12-07-s32: ~6 device-minutes)
PROCESS_S = 15.0  # between one group's last row and the next group's first: 22:58:20.656 -> 22:58:35.118
BUILD_S = 34.0  # the five variants' extensions in parallel (the same log: "builds done in 34 s")
ORACLE_S = 40.0  # one fp32 oracle, 20 x 256: the log's 35-37 s of steps + ~5 s building and capturing it
MERGE_S = 10.0  # the merge and the tarballs after the last group
CHAIN_GAP_S = 1.0  # rows of one process follow each other within milliseconds; a process start takes seconds
SCRIPT = REPO_ROOT / "scripts" / "m6_lease.sh"
# hf-compile on warm caches (an estimate until a lease measures it: on this repository's 2-core CPU
# machine, the 28-layer synthetic model compiled in 76.1 s cold and 15.2 s with the caches another
# process filled; notes/m6_budget.md)
WARM_COMPILE_S = 15.0
WARM_PROCESS_S = 12.0  # the warming process besides its compile: interpreter, imports, checkpoint, model load
# llama.cpp's two GGUF conversions (15.6 s + 16.2 s for the synthetic checkpoint, notes/m6_budget.md) and
# the pack's unpack (2.0 s): in the window of rows that carry no `conversion`
CONVERT_S = 31.8
UNPACK_S = 2.0
# a weight format's pack (CPU), made beside the bf16 oracle since the packs moved out of the rows: the
# nvfp4 row of 2026-12-07 held ~20 s of it (its window less engine_s, oracle and X-ray); fp8's is <1 s
PACK_S = {"nvfp4": 20.0}
GATE_RE = re.compile(r"^(\d+)/(\d+) prompts: time budget (\d+(?:\.\d+)?) s")  # the 2-pass sizing's text


@dataclass
class Unit:
    """One engine's row file (llama.cpp: one file, two rows)."""

    engine: str
    started: _dt.datetime
    ended: _dt.datetime
    rows: list[dict]
    fmt: str = "bf16"
    oracle_inside: bool = False  # its window included an oracle's computation (older rows)
    timeline_extra_s: float = 0.0  # its window included the timeline's extra decode of prompt 0 (older rows)
    gate_extra_s: float = 0.0  # a slow gate sized at 2 passes per prompt: the prompts its budget does not hold
    cold_compile_s: float | None = None  # hf-compile: the cold compile its window held (None: warm or none)
    ahead_s: float | None = None  # the ahead work's seconds (hf-compile: its cold compile; llamacpp: conversions)
    convert_inside: bool = False  # llamacpp: its window held the unpack and the conversions
    pack_inside: bool = False  # its window held its weight format's pack (older rows, with the oracle)

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()


@dataclass
class Plan:
    groups: list[dict] = field(default_factory=list)
    total_s: float = 0.0
    lease_s: float = LEASE_S
    start_s: float = START_S
    unknown: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        return None if self.unknown else self.total_s <= self.lease_s


def default_groups(script: Path = SCRIPT) -> list[list[str]]:
    """The groups scripts/m6_lease.sh runs by default (its GROUPS_DEFAULT)."""
    m = re.search(r'^GROUPS_DEFAULT="([^"]+)"', script.read_text(), re.M)
    if not m:
        raise MonolithError(f"{script}: no GROUPS_DEFAULT line")
    return parse_groups(m.group(1))


def parse_groups(spec: str) -> list[list[str]]:
    from monolith.bench import final

    groups = [[final.engine_name(e) for e in g.split(",") if e.strip()] for g in spec.split(";")]
    if not all(groups):
        raise MonolithError(f"--groups {spec!r}: ';'-separated groups of ','-separated engines, none empty")
    return groups


def _time(s, where: str) -> _dt.datetime:
    from monolith.bench.final import _parse_iso

    return _parse_iso(s, where)


def _oracle_desc(row: dict) -> dict | None:
    g = row.get("gate") if isinstance(row.get("gate"), dict) else {}
    d = g.get("oracle") or (g.get("verdict") or {}).get("oracle")
    return d if isinstance(d, dict) else None


def load_units(src: Path) -> list[Unit]:
    """The engines of a rows dir (row-*.json) or a merged final.json, in the order they ran."""
    src = Path(src)
    units: dict[str, Unit] = {}
    if src.is_dir():
        files = sorted(src.glob("row-*.json"))
        if not files:
            raise MonolithError(f"--plan {src}: no row-*.json files")
        for f in files:
            if f.name.endswith(".invalid.json"):
                continue
            d = jsonio.load(f)
            if not isinstance(d, dict) or not isinstance(d.get("rows"), list) or not d["rows"]:
                raise MonolithError(f"--plan {f}: not a row file")
            units[d.get("engine") or f.stem] = Unit(
                d.get("engine") or f.stem, _time(d.get("started"), f.name), _time(d.get("ended"), f.name), d["rows"]
            )
    elif src.is_file():
        doc = jsonio.load(src)
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise MonolithError(f"--plan {src}: neither a rows directory nor a final.json with rows")
        for r in doc["rows"]:
            name = "llamacpp" if str(r.get("engine", "")).startswith("llamacpp-") else str(r.get("engine"))
            if r.get("started") is None or r.get("ended") is None:
                continue  # an absent engine's placeholder: nothing measured
            if name in units:
                units[name].rows.append(r)
            else:
                units[name] = Unit(name, _time(r["started"], src.name), _time(r["ended"], src.name), [r])
    else:
        raise MonolithError(f"--plan {src}: no such file or directory")
    out = sorted(units.values(), key=lambda u: u.started)
    for u in out:
        if u.seconds < 0 or not math.isfinite(u.seconds):
            raise MonolithError(f"--plan {src}: {u.engine} ends before it starts")
    _mark_old_flow(out)
    return out


def _mark_old_flow(units: list[Unit]) -> None:
    """Which windows held work that the present runner does elsewhere. An oracle without a
    "source" is from before the oracles moved ahead of the engines: then the first engine of each
    weight format in each process (a chain of rows with no gap) computed it inside its window."""
    seen: set[str] = set()
    prev = None
    for u in units:
        if prev is not None and (u.started - prev.ended).total_seconds() > CHAIN_GAP_S:
            seen = set()  # a new process: its oracles were computed again
        prev = u
        r = u.rows[0]
        u.fmt = r.get("weight_format") or "bf16"
        desc = _oracle_desc(r)
        old = desc is not None and "source" not in desc  # both changes came with the oracle's "source"
        if old and u.fmt not in seen:
            u.oracle_inside = True
            u.pack_inside = u.fmt in PACK_S
        if desc is not None:
            seen.add(u.fmt)
        med = ((r.get("tok_s") or {}).get("median")) if r.get("status") == "ok" else None
        ppr = r.get("prompts_per_run")
        if old and med and ppr and r.get("timeline"):
            u.timeline_extra_s = r["tokens_per_run"] / ppr / med  # one decode of prompt 0, at the row's rate
        u.gate_extra_s = _gate_extra_s(r)
        _mark_ahead(u)


def _verdict(row: dict) -> dict:
    g = row.get("gate") if isinstance(row.get("gate"), dict) else {}
    v = g.get("verdict") if isinstance(g.get("verdict"), dict) else g
    return v if isinstance(v, dict) else {}


def _gate_extra_s(row: dict) -> float:
    """A gate cut by the 2-passes-per-prompt sizing: the steps of the prompts that the budget does not
    hold at the passes the gate makes (bench/suite.py gate_prompts_within), at the warm-up rate."""
    from monolith.bench import suite
    from monolith.eval import correctness

    v = _verdict(row)
    m = GATE_RE.match(str(v.get("reduced") or ""))
    est, n = row.get("warmup_tok_s"), v.get("tokens_per_prompt")
    if not m or not isinstance(est, int | float) or not math.isfinite(est) or est <= 0 or not n:
        return 0.0
    k, total, budget = int(m.group(1)), int(m.group(2)), float(m.group(3))
    det = v.get("determinism") or [{}]
    reps = int(det[0].get("repeats") or 3)
    now = suite.gate_prompts_within(budget, est, n, total, len(det), reps)
    if now >= k:
        return 0.0
    return (correctness.gate_steps(k, n, len(det), reps) - correctness.gate_steps(now, n, len(det), reps)) / est


def _mark_ahead(u: Unit) -> None:
    """hf-compile's and llama.cpp's work that the ahead jobs do (bench/m6.py AHEAD_ENGINES)."""
    if u.engine == "hf-compile":
        info = u.rows[0].get("info") or {}
        warm, cold = info.get("compile_warmup_s"), info.get("compile_cold_s")
        if isinstance(cold, int | float):  # warmed: its window holds the warm compile only
            u.ahead_s = float(cold)
        elif isinstance(warm, int | float) and warm > WARM_COMPILE_S:
            u.cold_compile_s = u.ahead_s = float(warm)
    elif u.engine == "llamacpp":
        convs = [r.get("conversion") for r in u.rows if isinstance(r.get("conversion"), dict)]
        if convs:
            u.ahead_s = UNPACK_S + sum(float(c.get("seconds") or 0.0) for c in convs)
            u.convert_inside = not all(c.get("ahead") for c in convs)
        else:
            u.ahead_s, u.convert_inside = UNPACK_S + CONVERT_S, True


def oracle_seconds(units: list[Unit], default: float = ORACLE_S) -> dict[str, float]:
    """Per weight format: the seconds a row's oracle says it took (rows of the present runner), else
    `default`."""
    out: dict[str, float] = {}
    for u in units:
        d = _oracle_desc(u.rows[0]) or {}
        s = d.get("seconds")
        if isinstance(s, int | float) and math.isfinite(s) and s > 0:
            out.setdefault(u.fmt, float(s))
    return out


def plan(
    units: list[Unit],
    groups: list[list[str]],
    *,
    assume: dict[str, float] | None = None,
    lease_s: float = LEASE_S,
    start_s: float = START_S,
    process_s: float = PROCESS_S,
    build_s: float = BUILD_S,
    oracle_s: float = ORACLE_S,
    merge_s: float = MERGE_S,
) -> Plan:
    from monolith.bench.baselines import registry

    assume = dict(assume or {})
    by_name = {u.engine: u for u in units}
    measured_oracle = oracle_seconds(units, oracle_s)
    p = Plan(lease_s=lease_s, start_s=start_s)
    have_oracle: set[str] = set()
    ahead_done: set[str] = set()  # engines whose ahead work a group before (or the group itself) ran
    total = start_s
    for gi, g in enumerate(groups):
        fmts = []
        for e in g:
            u = by_name.get(e)
            fmt = u.fmt if u is not None else ("bf16" if e == "llamacpp" else registry.weights_of(e))
            if e != "llamacpp" and fmt not in fmts:
                fmts.append(fmt)
        new = [f for f in fmts if f not in have_oracle]
        ahead: dict[str, float] = {}
        if new:  # bench/m6.py starts the ahead work with the first oracle a process computes
            for e in dict.fromkeys(x for later in groups[gi:] for x in later):
                u = by_name.get(e)
                if e not in ahead_done and u is not None and u.ahead_s is not None:
                    ahead[e] = round(u.ahead_s + (WARM_PROCESS_S if e == "hf-compile" else 0.0), 1)
                    ahead_done.add(e)
        engines = []
        for e in g:
            u = by_name.get(e)
            fmt = u.fmt if u is not None else ("bf16" if e == "llamacpp" else registry.weights_of(e))
            if u is not None:
                less = {
                    "oracle": measured_oracle.get(fmt, oracle_s) if u.oracle_inside else 0.0,
                    "pack": PACK_S[fmt] if u.pack_inside else 0.0,
                    "timeline": u.timeline_extra_s,
                    "gate": u.gate_extra_s,
                    "compile": max(u.cold_compile_s - WARM_COMPILE_S, 0.0)
                    if u.cold_compile_s is not None and e in ahead_done
                    else 0.0,
                    "conversions": UNPACK_S + CONVERT_S if u.convert_inside and e in ahead_done else 0.0,
                }
                less = {k: round(v, 1) for k, v in less.items() if round(v, 1) > 0}
                engines.append(
                    {
                        "engine": e,
                        "measured_s": round(u.seconds, 1),
                        "less_s": round(sum(less.values()), 1),
                        "less": less,
                        "s": round(max(u.seconds - sum(less.values()), 0.0), 1),
                        "source": "measured",
                    }
                )
            elif e in assume:
                engines.append(
                    {"engine": e, "measured_s": None, "less_s": 0.0, "s": float(assume[e]), "source": "assumed"}
                )
            else:
                engines.append({"engine": e, "measured_s": None, "less_s": 0.0, "s": None, "source": "unknown"})
                p.unknown.append(e)
        have_oracle.update(fmts)
        oracles = sum(measured_oracle.get(f, oracle_s) for f in new)
        builds = build_s if any(e.startswith("megakernel-") for e in g) else 0.0
        packs = sum(PACK_S.get(f, 0.0) for f in new)  # in a thread beside the oracles (bench/m6.py)
        prep = max(builds, oracles, packs, *ahead.values())
        eng_s = sum(x["s"] or 0.0 for x in engines)
        gs = process_s + prep + eng_s
        p.groups.append(
            {
                "group": gi + 1,
                "engines": engines,
                "process_s": process_s,
                "builds_s": builds,
                "oracles": {f: measured_oracle.get(f, oracle_s) for f in new},
                "oracles_read": [f for f in fmts if f not in new],
                "ahead": ahead,
                "prep_s": round(prep, 1),
                "s": round(gs, 1),
            }
        )
        total += gs
    p.total_s = round(total + merge_s, 1)
    return p


def render(p: Plan, src: str) -> list[str]:
    lines = [f"lease plan from {src}: start {p.start_s:.0f} s, then the groups in order"]
    for g in p.groups:
        orc = ", ".join(f"{f} {s:.0f} s" for f, s in g["oracles"].items()) or "none"
        read = f"; read from the lease's file: {', '.join(g['oracles_read'])}" if g["oracles_read"] else ""
        ahead = ", ".join(f"{e} {s:.0f} s" for e, s in g.get("ahead", {}).items())
        ahead = f", ahead work ({ahead})" if ahead else ""
        lines.append(
            f"group {g['group']}: {g['s']:,.0f} s  (process {g['process_s']:.0f} s; oracles {orc}{read}; "
            f"builds {g['builds_s']:.0f} s{ahead}, run beside the oracles: {g['prep_s']:.0f} s)"
        )
        for e in g["engines"]:
            if e["s"] is None:
                lines.append(f"  {e['engine']:<28} ?      not in the source: --assume {e['engine']}=SECONDS")
                continue
            parts = ", ".join(f"{k} {v:,.1f}" for k, v in e.get("less", {}).items())
            how = (
                f"measured {e['measured_s']:,.0f} s less {e['less_s']:,.0f} s no longer in its window ({parts})"
                if e["source"] == "measured" and e["less_s"]
                else e["source"]
            )
            lines.append(f"  {e['engine']:<28} {e['s']:>6,.0f} s  {how}")
    lines.append(f"merge and copies: {MERGE_S:.0f} s")
    left = p.lease_s - p.total_s
    if p.fits is None:
        lines.append(
            f"total at least {p.total_s:,.0f} s of {p.lease_s:,.0f} s; cannot tell whether it fits: "
            f"no seconds for {', '.join(p.unknown)}"
        )
    else:
        lines.append(
            f"total {p.total_s:,.0f} s of {p.lease_s:,.0f} s: "
            + (f"fits, {left:,.0f} s to spare" if p.fits else f"DOES NOT FIT, {-left:,.0f} s over")
        )
    return lines


def parse_assume(items: list[str] | None) -> dict[str, float]:
    from monolith.bench import final

    out = {}
    for it in items or []:
        name, sep, val = it.partition("=")
        try:
            s = float(val)
        except ValueError:
            s = math.nan
        if not sep or not name.strip() or not math.isfinite(s) or s < 0:
            raise MonolithError(f"--assume {it!r}: ENGINE=SECONDS, seconds finite and >= 0")
        out[final.engine_name(name)] = s
    return out
