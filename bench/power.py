"""Board power during timed runs, sampled by `nvidia-smi -lms 50` in a background process.

Each line is stamped with the host's perf_counter when it is read (nvidia-smi's own output
has no timestamp in this query), so energy over a window [t0, t1] is the trapezoid integral
of the samples inside it. Tokens per joule = tokens decoded in timed loops / joules spent
over the *decode* time, using the mean power seen while the runs were going.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time

SAMPLE_MS = 50


class PowerSampler:
    """Context manager. `.samples` is a list of (perf_counter seconds, watts)."""

    def __init__(self, index: int = 0, interval_ms: int = SAMPLE_MS):
        self.index, self.interval_ms = index, interval_ms
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self._proc = None
        self._thread = None

    def __enter__(self) -> PowerSampler:
        if not shutil.which("nvidia-smi"):
            self.error = "nvidia-smi not found"
            return self
        cmd = ["nvidia-smi", f"--id={self.index}", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
               "-lms", str(self.interval_ms)]
        try:
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            self.error = f"nvidia-smi failed: {e}"
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        time.sleep(0.2)  # first sample before the timed work starts
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                self.samples.append((time.perf_counter(), float(line.strip())))
            except ValueError:
                continue

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            time.sleep(0.1)
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            if self._thread is not None:
                self._thread.join(timeout=2)
        if self._proc is not None and not self.samples and self.error is None:
            self.error = "nvidia-smi gave no power samples"


def energy_joules(samples: list[tuple[float, float]], t0: float | None = None, t1: float | None = None) -> float:
    """Trapezoid integral of watts over seconds, restricted to [t0, t1] when given."""
    pts = [(t, w) for t, w in samples if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:], strict=False))


def mean_power(samples: list[tuple[float, float]], t0: float | None = None, t1: float | None = None) -> float | None:
    """Time-weighted mean watts in the window (plain mean when there is a single sample)."""
    pts = [(t, w) for t, w in samples if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
    if not pts:
        return None
    span = pts[-1][0] - pts[0][0]
    if span <= 0:
        return sum(w for _, w in pts) / len(pts)
    return energy_joules(pts) / span


def tokens_per_joule(tokens: int, watts: float | None, decode_seconds: float) -> float | None:
    """tokens / (mean watts x decode seconds)."""
    if not watts or decode_seconds <= 0:
        return None
    return tokens / (watts * decode_seconds)
