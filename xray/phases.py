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

# Page colours, chosen here (not in the .def) because they are presentation only. Waits are
# greys (the page hatches them); work phases get distinct hues. Unknown names get a fallback.
COLORS = {
    "qkv": "#4e79a7", "attn": "#f28e2b", "prefetch": "#b6992d", "oproj": "#59a14f",
    "gateup": "#e15759", "down": "#76b7b2", "lmhead": "#af7aa1", "argmax": "#ff9da7",
    "bar_qkv": "#8c8c8c", "bar_o": "#8c8c8c", "bar_gateup": "#8c8c8c", "bar_down": "#8c8c8c",
    "flag_kv": "#b0b0b0", "flag_attn": "#b0b0b0",
}
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
