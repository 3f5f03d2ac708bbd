"""The StopPhase codes of a launch, read from their one definition: kernel/config.cuh `enum StopPhase`.

A launch passes (stop_layer, stop_phase); the kernel compares stop_phase with the enum's names
(kStopNever for a normal step, kStopQKV .. kStopDown to leave after a phase of stop_layer for the
phase diff, kFaultBlock0Exits / kFaultBlock0After + phase for the hang tests). The host takes every
code from this module (monolith/megakernel.py, monolith.xray.fidelity), so a code changed in
config.cuh changes on both sides at once; tests/test_stop_phase.py checks the parse and the launches.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from monolith import kernel_spec
from monolith.errors import MonolithError

CONFIG_CUH = kernel_spec.KERNEL_DIR / "config.cuh"

_ENUM = re.compile(r"\benum\s+StopPhase\b[^{;]*\{(.*?)\}", re.S)
_ITEM = re.compile(r"(k\w+)\s*=\s*(\d+)")


def parse(text: str, where: str = "config.cuh") -> dict[str, int]:
    """`enum StopPhase {...}` in C++ source text as {name: value}, in declaration order. Every
    enumerator must be `kName = <decimal>` (no implicit values: the host could not see a shift)."""
    m = _ENUM.search(re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S))
    if not m:
        raise MonolithError(f"{where}: no `enum StopPhase {{...}}`")
    out: dict[str, int] = {}
    for item in (x.strip() for x in m.group(1).split(",")):
        if not item:
            continue
        em = _ITEM.fullmatch(item)
        if not em:
            raise MonolithError(f"{where}: enum StopPhase item {item!r} is not `kName = <decimal>`")
        if em.group(1) in out:
            raise MonolithError(f"{where}: enum StopPhase names {em.group(1)} twice")
        out[em.group(1)] = int(em.group(2))
    if not out:
        raise MonolithError(f"{where}: enum StopPhase is empty")
    return out


@lru_cache(maxsize=8)
def _values(path: str, version: tuple[int, int]) -> tuple[tuple[str, int], ...]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise MonolithError(f"{p}: cannot read the StopPhase enum ({e.strerror})") from None
    return tuple(parse(text, str(p)).items())


def values(path: Path | str = CONFIG_CUH) -> dict[str, int]:
    """The enum of `path` (default kernel/config.cuh) as {name: value}; parsed again when the file's
    modification time or size changes."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise MonolithError(f"{p}: cannot read the StopPhase enum ({e.strerror})") from None
    return dict(_values(str(p), (st.st_mtime_ns, st.st_size)))


def code(name: str, path: Path | str = CONFIG_CUH) -> int:
    """One StopPhase value by its kernel name (e.g. "kStopNever")."""
    vals = values(path)
    if name not in vals:
        raise MonolithError(f"{path}: enum StopPhase has no {name} (it has {', '.join(vals)})")
    return vals[name]
