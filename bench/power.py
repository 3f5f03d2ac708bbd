"""Energy of timed runs from NVML's total-energy counter.

`nvmlDeviceGetTotalEnergyConsumption` counts millijoules since the driver loaded, integrated by the
GPU itself: its difference across an interval is that interval's energy, with no sampling gaps
(the former nvidia-smi power sampling integrated 50 ms samples). The counter updates on the
driver's own period, so an interval should last seconds, not milliseconds: the harness reads it
once before and once after a whole timed loop, and reports

- joules: counter difference over the loop (prefills and host gaps between decodes included),
- mean_w: joules / the loop's wall seconds,
- tok_per_joule: decoded tokens / (mean_w x summed decode seconds), i.e. the decode's share of the
  loop's energy at the loop's mean power.

External programs (llama-bench) are measured by polling the counter (`EnergyMeter.poll`) and
cutting the interval out of the timestamped readings (`energy_between`).

Where NVML is absent (no driver, no nvidia-ml-py) every figure is "not measured" with the reason;
never a guess. Tests pass a fake module with the same three calls.
"""
from __future__ import annotations

import threading
import time

NVML_METHOD = "nvml-total-energy"
POLL_S = 0.01
SHORT_WINDOW_S = 2.0  # under this, the counter's update period is a visible share of the interval


def nvml_module():
    """(pynvml module, None) or (None, reason)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as e:
        return None, f"NVML not available (pynvml not importable: {e})"
    return pynvml, None


def not_measured(reason: str) -> dict:
    return {"method": "not measured", "reason": reason}


class EnergyMeter:
    """Context manager around NVML for one GPU. `available` False (with `error`) when NVML or the
    counter cannot be read; `read()` -> (perf_counter s, mJ)."""

    def __init__(self, index: int = 0, nvml=None, uuid: str | None = None):
        self.index, self.uuid = index, uuid
        self.nvml = nvml
        self.error: str | None = None
        self.handle = None
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.handle is not None

    def __enter__(self) -> EnergyMeter:
        if self.nvml is None:
            self.nvml, self.error = nvml_module()
            if self.nvml is None:
                return self
        try:
            self.nvml.nvmlInit()
            h = None
            if self.uuid and hasattr(self.nvml, "nvmlDeviceGetHandleByUUID"):
                try:
                    h = self.nvml.nvmlDeviceGetHandleByUUID(self.uuid)
                except Exception:  # noqa: BLE001  (fall back to the index)
                    h = None
            self.handle = h or self.nvml.nvmlDeviceGetHandleByIndex(self.index)
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)  # the counter exists on this GPU
        except Exception as e:  # noqa: BLE001  (NVMLError has many subclasses)
            self.handle = None
            self.error = f"NVML total-energy counter not readable: {type(e).__name__}: {e}"
        return self

    def read(self) -> tuple[float, float]:
        mj = float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        return time.perf_counter(), mj

    def poll(self, interval_s: float = POLL_S) -> None:
        """Read the counter every `interval_s` in a thread until exit (for external programs)."""
        if not self.available:
            return

        def loop():
            while not self._stop.is_set():
                self.samples.append(self.read())
                self._stop.wait(interval_s)
        self.samples.append(self.read())
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self.samples.append(self.read())
        if self.handle is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def energy_between(samples: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Joules between t0 and t1 from timestamped counter readings (linear between readings);
    None when the readings do not cover [t0, t1]."""
    if not samples or t1 <= t0 or samples[0][0] > t0 or samples[-1][0] < t1:
        return None

    def at(t: float) -> float:
        for (ta, ea), (tb, eb) in zip(samples, samples[1:], strict=False):
            if ta <= t <= tb:
                return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)
        return samples[-1][1]
    return (at(t1) - at(t0)) / 1e3


def energy_row(mj0: float, mj1: float, window_s: float, decode_s: float, tokens: int) -> dict:
    """The row's `energy` object and its tok/J from two counter readings around a timed loop.
    A counter that did not move (or went back) is an error, not zero energy."""
    joules = (mj1 - mj0) / 1e3
    if not joules > 0 or not window_s > 0 or not decode_s > 0:
        return not_measured(f"NVML counter gave {joules:.3f} J over {window_s:.3f} s: no usable reading")
    mean_w = joules / window_s
    out = {"method": NVML_METHOD, "joules": joules, "window_s": window_s, "decode_s": decode_s, "tokens": tokens,
           "mean_w": mean_w, "tok_per_joule": tokens_per_joule(tokens, mean_w, decode_s)}
    if window_s < SHORT_WINDOW_S:
        out["note"] = (f"a {window_s:.2f} s window: the counter's own update period makes this rough "
                       f"(the full protocol's loops last {SHORT_WINDOW_S:.0f} s and more)")
    return out


def tokens_per_joule(tokens: int, watts: float | None, decode_seconds: float) -> float | None:
    """tokens / (mean watts x decode seconds)."""
    if not watts or decode_seconds <= 0:
        return None
    return tokens / (watts * decode_seconds)


def gpu_uuid(index: int = 0, nvml=None) -> str | None:
    """The GPU's UUID ("GPU-..."): NVML, else torch's device properties; None without a GPU."""
    mod = nvml or nvml_module()[0]
    if mod is not None:
        try:
            mod.nvmlInit()
            try:
                u = mod.nvmlDeviceGetUUID(mod.nvmlDeviceGetHandleByIndex(index))
                return u.decode() if isinstance(u, bytes) else str(u)
            finally:
                mod.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    try:
        import torch

        if torch.cuda.is_available():
            u = getattr(torch.cuda.get_device_properties(index), "uuid", None)
            if u is not None:
                s = str(u)
                return s if s.startswith("GPU-") else f"GPU-{s}"
    except Exception:  # noqa: BLE001
        pass
    return None
