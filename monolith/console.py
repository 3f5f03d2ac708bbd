"""One rich Console factory for every command: when the output is not a terminal (a pipe, a
log file, CI) rich would lay everything out for 80 columns and cut table cells with "…";
here it gets a wide line instead, so logs keep every column. COLUMNS, when set, still wins."""
from __future__ import annotations

import os

from rich.console import Console

WIDE = 200  # columns when not writing to a terminal


def make_console(stderr: bool = False, **kwargs) -> Console:
    con = Console(stderr=stderr, **kwargs)
    if "width" not in kwargs and not con.is_terminal and not os.environ.get("COLUMNS"):
        con = Console(stderr=stderr, width=WIDE, **kwargs)
    return con
