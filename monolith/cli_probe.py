"""`monolith probe` (M0 probes on the GPU present) and `monolith m0` (probes + reference parity)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import typer

from monolith.errors import MonolithError


def register(app: typer.Typer) -> None:
    @app.command()
    def probe(
        out: Path = typer.Option(None, help="result JSON (default results/m0_probes.json); a .md goes beside it"),
        only: str = typer.Option("", help="comma-separated subset: cvt,timers,barrier,bandwidth,ncu"),
        nvcc: str = typer.Option(os.environ.get("NVCC", "nvcc"), help="nvcc executable"),
        quick: bool = typer.Option(False, help="fewer configurations (smoke test)"),
    ) -> None:
        """M0 probes: DRAM bandwidth sweep, grid-barrier cost, timers, e4m3/e2m1 decode checks, ncu."""
        from monolith.probes import run as probe_run

        res = probe_run.run_all(out or probe_run.DEFAULT_OUT,
                                only=[x.strip() for x in only.split(",") if x.strip()] or None,
                                nvcc=nvcc, quick=quick)
        if not res["ok"]:
            raise typer.Exit(1)

    @app.command()
    def m0(
        out: Path = typer.Option(None, help="probe result JSON (default results/m0_probes.json)"),
        nvcc: str = typer.Option(os.environ.get("NVCC", "nvcc"), help="nvcc executable"),
        skip_parity: bool = typer.Option(False, help="run only the probes"),
    ) -> None:
        """Milestone 0 end to end: the probes, then the reference-vs-HF parity check (if present)."""
        from monolith.probes import run as probe_run

        res = probe_run.run_all(out or probe_run.DEFAULT_OUT, nvcc=nvcc)
        parity_rc = 0
        if not skip_parity:
            if importlib.util.find_spec("monolith.parity") is None:
                typer.echo("monolith.parity not present yet: parity check skipped", err=True)
            else:
                parity_rc = subprocess.call([sys.executable, "-m", "monolith.parity"])
                if parity_rc != 0:
                    typer.echo(f"parity check failed (exit {parity_rc})", err=True)
        if not res["ok"] or parity_rc != 0:
            raise typer.Exit(1)


__all__ = ["register", "MonolithError"]
