"""`monolith predict`: every variant's decode speed on a GPU this project has not measured on
(RTX 5090, RTX PRO 6000), from the H200's measured pieces (bench/predict.py does the work)."""
from __future__ import annotations

from pathlib import Path

import typer

from monolith import REPO_ROOT
from monolith.errors import MonolithError


def register(app: typer.Typer) -> None:
    @app.command()
    def predict(
        gpu: list[str] = typer.Option(None, help="rtx5090, rtxpro6000 or h200 (repeatable; default the two sm_120 cards)"),
        ring_slots: int = typer.Option(None, help="16 KB ring slots of the sm_120 configuration (default: as many "
                                       "as fit beside 32 KB of block state in 99 KB: 4)"),
        out: Path = typer.Option(REPO_ROOT / "results" / "predictions_sm120.json",
                                 help="the predictions JSON (a .md is written beside it)"),
    ) -> None:
        """Predict each variant on the RTX 5090 / RTX PRO 6000: bytes at the card's bandwidth plus the
        chain priced from the H200's measured pieces. Every row is labelled 'predicted'; the
        assumptions are written into the file (docs/RUNBOOK.md explains them)."""
        from monolith.bench import predict as P

        argv = [x for g in (gpu or []) for x in ("--gpu", g)] + ["--out", str(out)]
        if ring_slots is not None:
            argv += ["--ring-slots", str(ring_slots)]
        bad = [g for g in (gpu or []) if g not in P.GPUS]
        if bad:
            raise MonolithError(f"unknown GPU {bad[0]!r}: one of {', '.join(P.GPUS)}")
        rc = P.main(argv)
        if rc:
            raise typer.Exit(rc)
