"""`monolith export` reproduces the committed page data byte for byte.

The committed outputs (web/public/traces/*.json.gz, results/xray/*.summary.json, web/public/data/)
are what export writes from the committed inputs (results/xray/*.raw.npz, results/*.json,
results/timelines/, results/chain/, kernel/). Here export's steps run into a temporary folder and
every output is compared with the committed file: a code change that alters an output fails until
the committed data is regenerated (`monolith export`), so `git status` stays clean after export.
Also: the X-ray palette gives every phase its own colour.
"""
from __future__ import annotations

import filecmp
import itertools
import math
from pathlib import Path

import pytest

from monolith import REPO_ROOT
from monolith.cli_xray import SAMPLE, process_raw
from monolith.xray import site
from monolith.xray.export import read_page
from monolith.xray.phases import COLORS, load_phases
from monolith.xray.synthetic import write_sample

TRACES = REPO_ROOT / "web" / "public" / "traces"
DATA = REPO_ROOT / "web" / "public" / "data"
RAWS = sorted((REPO_ROOT / "results" / "xray").glob("*.raw.npz"))


def _tree(d: Path) -> set[str]:
    return {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}


def _same(a: Path, b: Path, what: str) -> None:
    assert _tree(a) == _tree(b), f"{what}: files differ: {sorted(_tree(a) ^ _tree(b))}"
    bad = [f for f in sorted(_tree(a)) if not filecmp.cmp(a / f, b / f, shallow=False)]
    assert not bad, f"{what}: `monolith export` writes different bytes for {bad}: run `monolith export` and commit"


@pytest.mark.slow
def test_export_reproduces_committed_page_data(tmp_path):
    assert RAWS, "results/xray/ holds the committed raw traces"
    xray, traces, data = tmp_path / "xray", tmp_path / "traces", tmp_path / "data"
    for raw in RAWS:  # export's per-raw step, without PNGs (export's default)
        process_raw(raw, out_dir=xray, page_dir=traces, png=False, quiet=True)
    write_sample(traces / SAMPLE)
    site.build_site_data(REPO_ROOT, traces_dir=traces, out_dir=data)
    _same(traces, TRACES, "web/public/traces")
    for s in sorted(xray.glob("*.summary.json")):
        assert filecmp.cmp(s, REPO_ROOT / "results" / "xray" / s.name, shallow=False), \
            f"results/xray/{s.name}: `monolith export` writes different bytes: run it and commit"
    _same(data, DATA, "web/public/data")


def _rgb(c: str) -> tuple[int, int, int]:
    return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))


def test_every_phase_has_its_own_colour():
    phases = load_phases()
    missing = [p.name for p in phases if p.name not in COLORS]
    assert not missing, f"phases without a colour in xray/phases.py COLORS: {missing}"
    colours = [p.color for p in phases]
    dup = sorted({c for c in colours if colours.count(c) > 1})
    assert not dup, f"colours shared by several phases: {dup}"


@pytest.mark.parametrize("trace", sorted(TRACES.glob("*.json.gz")), ids=lambda p: p.name)
def test_a_committed_traces_phases_are_told_apart(trace):
    page = read_page(trace)
    used = set(page["events"]["phase"])
    ph = {p["id"]: p for p in page["phases"] if p["id"] in used}
    for a, b in itertools.combinations(ph.values(), 2):
        d = math.dist(_rgb(a["color"]), _rgb(b["color"]))
        assert d >= 30, f"{trace.name}: {a['name']} {a['color']} and {b['name']} {b['color']} are {d:.0f} apart in RGB"
