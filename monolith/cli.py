"""The `monolith` command line. Each area registers its own subcommands from a small
module (monolith/cli_<area>.py exposing `register(app)`), so the command list is exactly
the set of commands that exist and work."""
from __future__ import annotations

import importlib
import sys

import typer
from rich.markup import escape

from monolith.console import make_console
from monolith.errors import MonolithError

app = typer.Typer(
    name="monolith",
    help="monolith: a one-launch-per-token megakernel decoder for Qwen3-0.6B, with an X-ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Order = order in --help. Every module listed here must import; CLI tests check every command's --help.
_AREAS = [
    "monolith.cli_foundation",   # synth, generate
    "monolith.cli_probe",        # probe, m0
    "monolith.cli_harness",      # bench, eval, reproduce, m1
    "monolith.cli_xray",         # xray, export, m2
    "monolith.cli_pod",          # pod ...
    "monolith.cli_predict",      # predict
    "monolith.cli_quant",        # pack
    "monolith.cli_milestones",   # m3 ... m8
]



def register_areas(app: typer.Typer, areas: list[str]) -> None:
    """Import every area and let it register its commands. A module that fails to import is
    an error, never a silently missing command: that would hide a broken install."""
    for mod in areas:
        try:
            module = importlib.import_module(mod)
        except Exception as e:
            raise ImportError(f"monolith: the CLI area {mod} failed to import ({type(e).__name__}: {e}); "
                              "the installation is broken (make install)") from e
        module.register(app)


register_areas(app, _AREAS)


def main() -> None:
    try:
        app()
    except MonolithError as e:
        make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}")
        sys.exit(2)


if __name__ == "__main__":
    main()
