"""The device tool copies the work tree to the GPU machine and refuses more than 64 MiB
(results/logs/README.md). Keep the tracked files well below it, so that the carried wheels and
data (~5 MB) and a session's new results always fit."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAP = 64 * 1024 * 1024
HEADROOM = 16 * 1024 * 1024  # carry (.whl + .data ~5 MB) and a session's logs and traces


def tracked_bytes() -> int:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sum(os.path.getsize(ROOT / f) for f in out.decode().split("\0") if f and (ROOT / f).is_file())


def test_tracked_tree_leaves_room_under_the_device_cap():
    size = tracked_bytes()
    assert size > 1_000_000, "git ls-files listed almost nothing: the measurement itself is broken"
    assert size <= CAP - HEADROOM, (
        f"tracked files are {size / 1e6:.1f} MB; the device copy cap is {CAP / 1e6:.1f} MB and "
        f"{HEADROOM / 1e6:.1f} MB are kept for carried files: move archived raw traces out of the "
        "tree (results/logs/README.md)"
    )


def test_no_archived_raw_traces_duplicate_the_headline_ones():
    out = subprocess.run(["git", "ls-files", "results/logs"], cwd=ROOT, capture_output=True, text=True).stdout
    raws = [f for f in out.split() if f.endswith(".raw.npz")]
    heads = {p.name: p.read_bytes() for p in (ROOT / "results" / "xray").glob("*.raw.npz")}
    dups = [f for f in raws if Path(f).name in heads and (ROOT / f).read_bytes() == heads[Path(f).name]]
    assert not dups, f"byte-identical copies of results/xray traces in results/logs: {dups}"


def test_perfetto_json_is_rebuilt_not_committed():
    """The Perfetto JSON of a trace (~0.4 MB each) is rebuilt from the committed raw by `monolith export`
    and is not committed (twenty-sixth session: it held the 5 MB trace budget that a second position's
    page traces needed)."""
    out = subprocess.run(["git", "ls-files", "results/xray"], cwd=ROOT, capture_output=True, text=True).stdout
    if not out.strip():
        pytest.skip("not a git checkout")
    assert [f for f in out.split() if f.endswith(".perfetto.json.gz")] == []
    assert "results/xray/*.perfetto.json.gz" in (ROOT / ".gitignore").read_text().splitlines()
