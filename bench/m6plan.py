"""`monolith m6 --plan SRC`: the next lease's time, engine group by engine group, from the seconds each
engine took in an earlier one (SRC: a rows dir or a merged final.json, whose rows carry their start
and end), against the session's device budget. notes/m6_budget.md explains the model and its inputs.

The model of one group (one `monolith m6` process of scripts/m6_lease.sh):
  process start (interpreter, imports, checkpoint, NVML: PROCESS_S)
  + max(extension builds, the oracles it computes)  -- bench/m6.py builds while the oracles run;
    an oracle another group of the lease already computed is read from the lease's file (0 s)
  + for each engine: its measured row window, less what no longer runs inside it: the oracle the
    row computed (rows measured before the oracles moved ahead of the engines) and the race
    timeline's extra decode of prompt 0 (now the timed runs' own; rows without that marker).
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
        if desc is not None:
            seen.add(u.fmt)
        med = ((r.get("tok_s") or {}).get("median")) if r.get("status") == "ok" else None
        ppr = r.get("prompts_per_run")
        if old and med and ppr and r.get("timeline"):
            u.timeline_extra_s = r["tokens_per_run"] / ppr / med  # one decode of prompt 0, at the row's rate


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
    total = start_s
    for gi, g in enumerate(groups):
        engines, fmts = [], []
        for e in g:
            u = by_name.get(e)
            fmt = u.fmt if u is not None else ("bf16" if e == "llamacpp" else registry.weights_of(e))
            if e != "llamacpp" and fmt not in fmts:
                fmts.append(fmt)
            if u is not None:
                less = (measured_oracle.get(fmt, oracle_s) if u.oracle_inside else 0.0) + u.timeline_extra_s
                engines.append(
                    {
                        "engine": e,
                        "measured_s": round(u.seconds, 1),
                        "less_s": round(less, 1),
                        "s": round(max(u.seconds - less, 0.0), 1),
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
        new = [f for f in fmts if f not in have_oracle]
        have_oracle.update(fmts)
        oracles = sum(measured_oracle.get(f, oracle_s) for f in new)
        builds = build_s if any(e.startswith("megakernel-") for e in g) else 0.0
        prep = max(builds, oracles)
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
        lines.append(
            f"group {g['group']}: {g['s']:,.0f} s  (process {g['process_s']:.0f} s; oracles {orc}{read}; "
            f"builds {g['builds_s']:.0f} s, run beside the oracles: {g['prep_s']:.0f} s)"
        )
        for e in g["engines"]:
            if e["s"] is None:
                lines.append(f"  {e['engine']:<28} ?      not in the source: --assume {e['engine']}=SECONDS")
                continue
            how = (
                f"measured {e['measured_s']:,.0f} s less {e['less_s']:,.0f} s no longer in its window"
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
