"""The X-ray phase table, parsed from kernel/xray_phases.def (the single source).

The kernel includes the .def file as an X-macro; parsing the same file here means the
analyzer, the exporter and the page can never disagree with the kernel about what phase 7 is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from monolith.errors import MonolithError

# Source checkout: <repo>/xray/ -> <repo>/kernel/. Installed wheel: monolith/xray/ ->
# monolith/kernel/ (package data). The same relative step works for both.
DEF_PATH = Path(__file__).resolve().parent.parent / "kernel" / "xray_phases.def"

_LINE = re.compile(r"^\s*XRAY_PHASE\(\s*(\d+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
KINDS = ("work", "wait")
SCOPES = ("layer", "token")

# Page and PNG colours, chosen here (not in the .def) because they are presentation only. Every
# phase has its own colour (a legend whose keys share a colour names nothing): work phases get
# distinct hues; waits (the page hatches them) a muted tint of the work they wait for, ring waits
# and arrivals neutral greys. A streaming variant's phase has a hue near its upstream counterpart's.
# Test: tests/test_export_reproduces.py (one colour per phase; within each committed trace, no two
# phases closer than 30 in RGB).
COLORS = {
    "qkv": "#4e79a7", "attn": "#f28e2b", "prefetch": "#b6992d", "oproj": "#59a14f",
    "gateup": "#e15759", "down": "#76b7b2", "lmhead": "#af7aa1", "argmax": "#ff9da7",
    "bar_qkv": "#6d7f99", "bar_o": "#8fae88", "bar_gateup": "#b98482", "bar_down": "#4f8a80",
    "flag_kv": "#d3ab84", "flag_attn": "#8c7a62", "arrive": "#b5b5b5",
    "s_qkv": "#2f6db5", "s_attn": "#e8862a", "s_oproj": "#3f9a4a", "s_mlp": "#d1495b", "s_down": "#47b0a8",
    "s_wait_resid": "#6f86a8", "s_wait_qkv": "#d8b38f", "s_wait_attn": "#9dbb95", "s_wait_o": "#c29290",
    "s_wait_act": "#7fbdb7", "s_wait_final": "#7d6a7b", "ring": "#555555", "ring_head": "#e0b0c8",
    "s_gather": "#cfcfcf",
    "x_words": "#a3a3c2", "x_open": "#ffbb78", "x_dot": "#98df8a", "x_out": "#ff9896", "x_prenorm": "#c5b0d5",
    "x_slots": "#c49c94", "x_att_open": "#f7b6d2", "x_att_score": "#dbdb8d", "x_att_soft": "#9edae5",
    "x_att_v": "#393b79", "x_att_out": "#637939", "x_count": "#8c6d31", "x_bar": "#843c39",
}
# A phase added to the .def without a colour here: a fallback until it gets one (the test fails).
_FALLBACK = ["#9c755f", "#bab0ac", "#edc948", "#17becf", "#bcbd22"]


@dataclass(frozen=True)
class Phase:
    id: int
    name: str
    kind: str   # "work" | "wait"
    scope: str  # "layer" | "token"

    @property
    def color(self) -> str:
        if self.kind == "wait" and self.name not in COLORS:
            return "#999999"
        return COLORS.get(self.name, _FALLBACK[self.id % len(_FALLBACK)])

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "kind": self.kind, "scope": self.scope, "color": self.color}


def parse_phases(text: str, source: str = "xray_phases.def") -> list[Phase]:
    """Parse X-macro lines; comments and the #define-style preamble are ignored."""
    out: list[Phase] = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        if "XRAY_PHASE" not in code:
            continue
        m = _LINE.match(code)
        if not m:
            raise MonolithError(f"{source}:{n}: cannot parse phase line: {line.strip()!r}")
        pid, name, kind, scope = int(m[1]), m[2], m[3], m[4]
        if kind not in KINDS:
            raise MonolithError(f"{source}:{n}: phase {name!r} has kind {kind!r}, expected one of {KINDS}")
        if scope not in SCOPES:
            raise MonolithError(f"{source}:{n}: phase {name!r} has scope {scope!r}, expected one of {SCOPES}")
        out.append(Phase(pid, name, kind, scope))
    if not out:
        raise MonolithError(f"{source}: no XRAY_PHASE lines found")
    out.sort(key=lambda p: p.id)
    return out


@lru_cache(maxsize=1)
def load_phases(path: str | None = None) -> tuple[Phase, ...]:
    p = Path(path) if path else DEF_PATH
    if not p.is_file():
        raise MonolithError(f"X-ray phase table not found: {p}")
    return tuple(parse_phases(p.read_text(), str(p)))


def by_id(phases=None) -> dict[int, Phase]:
    return {p.id: p for p in (phases or load_phases())}


def by_name(phases=None) -> dict[str, Phase]:
    return {p.name: p for p in (phases or load_phases())}
