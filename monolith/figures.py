"""The project's PNG plots share two steps: matplotlib on its headless backend, imported only when a
plot is asked for (CI and the GPU machine have no display; the CLIs start faster without it), and
the figure written where it was asked for (its folder made) and closed."""
from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, dpi: float | None = None) -> Path:
    """Lay the figure out tight, write it to path (parent folders made; dpi None: the figure's own),
    close it and return the path."""
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    pyplot().close(fig)
    return out
