"""The `monolith` command line. Each area registers its own subcommands from a small
module (monolith/cli_<area>.py exposing `register(app)`), so the command list is exactly
the set of commands that exist and work."""
from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from monolith.errors import MonolithError

app = typer.Typer(
    name="monolith",
    help="monolith: a one-launch-per-token megakernel decoder for Qwen3-0.6B, with an X-ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Order = order in --help. A module listed here must exist; CLI tests check every command's --help.
_AREAS = [
    "monolith.cli_foundation",   # synth, generate
    "monolith.cli_probe",        # probe, m0
    "monolith.cli_harness",      # bench, eval, reproduce, m1
    "monolith.cli_xray",         # xray, export, m2
    "monolith.cli_pod",          # pod ...
    "monolith.cli_quant",        # pack
]

for _mod in _AREAS:
    try:
        importlib.import_module(_mod).register(app)
    except ModuleNotFoundError as e:  # an area not built yet registers nothing
        if e.name != _mod:
            raise


def main() -> None:
    try:
        app()
    except MonolithError as e:
        Console(stderr=True).print(f"[bold red]error:[/] {e}")
        sys.exit(2)


if __name__ == "__main__":
    main()
