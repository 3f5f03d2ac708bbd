"""Checks on the paths a command will write, made before any work: an output that cannot be
created (under an existing file, in /proc, without permission) is one clear line at the start,
never a traceback after minutes of packing, and nothing is left behind by the check itself."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from monolith.errors import MonolithError


def _existing_ancestor(p: Path) -> Path:
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _probe(d: Path, what: str) -> None:
    """Make and remove a private directory in `d`: the one test of writability that holds for
    root, read-only mounts and pseudo file systems alike."""
    try:
        t = tempfile.mkdtemp(prefix=".monolith-probe-", dir=d)
    except OSError as e:
        raise MonolithError(f"{what}: cannot write in {d} ({e.strerror or e})") from None
    shutil.rmtree(t, ignore_errors=True)


def writable_dir(path, what: str) -> Path:
    """`path` is an existing directory we can write in, or can be created as one."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise MonolithError(f"{what} {p} exists and is not a directory")
    anc = _existing_ancestor(p.absolute())
    if not anc.is_dir():
        raise MonolithError(f"{what} {p} cannot be created: {anc} is a file, not a directory")
    _probe(anc, f"{what} {p}")
    return p


def writable_file(path, what: str) -> Path:
    """`path` names a file (not a directory) whose parent is, or can be made, a writable directory."""
    p = Path(path)
    if p.is_dir() or str(path).endswith(os.sep):
        raise MonolithError(f"{what} {p} is a directory; give a file path")
    writable_dir(p.parent if str(p.parent) else Path("."), f"{what} {p}: its directory")
    return p


def inside(p, d) -> bool:
    """Whether `p` is `d` or lies under it (both resolved: symlinks and .. cannot hide it)."""
    try:
        Path(p).resolve().relative_to(Path(d).resolve())
        return True
    except ValueError:
        return False
