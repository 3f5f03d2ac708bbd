"""The environment recorded with every result: GPU, driver, CUDA, torch, clocks, power, temperature.

Hostname-free on purpose (results are committed and published). Each field degrades to None
when it cannot be read (no GPU, no nvidia-smi) so CPU runs still produce a valid record.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess

import torch

# nvidia-smi query field -> our key. One call, CSV, no units.
_SMI_FIELDS = {
    "name": "gpu",
    "driver_version": "driver",
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz",
    "power.limit": "power_limit_w",
    "power.draw": "power_draw_w",
    "temperature.gpu": "temperature_c",
    "pstate": "pstate",
    "memory.total": "memory_total_mib",
}


def _num(s: str):
    try:
        f = float(s)
        return int(f) if f.is_integer() else f
    except ValueError:
        return s if s and s not in ("[N/A]", "N/A") else None


def query_smi(index: int = 0, timeout: float = 10.0) -> dict:
    if not shutil.which("nvidia-smi"):
        return {}
    q = ",".join(_SMI_FIELDS)
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout, check=True,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if not out:
        return {}
    vals = [v.strip() for v in out[0].split(",")]
    return {key: (_num(v) if key not in ("gpu", "driver", "pstate") else v)
            for key, v in zip(_SMI_FIELDS.values(), vals, strict=False)}


def collect(device: str | torch.device | None = None) -> dict:
    """One snapshot. Called before and after every benchmark (clocks and temperature drift)."""
    env = {
        "gpu": None, "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__,
        "python": platform.python_version(), "sm_clock_mhz": None, "mem_clock_mhz": None,
        "power_limit_w": None, "temperature_c": None,
    }
    # a diagnostic kernel build: recorded wherever set, so a result of such a build names it even
    # where the engine's build info is not kept
    from monolith.kernel_spec import EXTRA_DEFINES_ENV

    defines = os.environ.get(EXTRA_DEFINES_ENV, "").strip()
    if defines:
        env["monolith_nvcc_defines"] = defines
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if torch.cuda.is_available():
        idx = torch.device(device).index if device is not None and torch.device(device).type == "cuda" else None
        idx = torch.cuda.current_device() if idx is None else idx
        p = torch.cuda.get_device_properties(idx)
        env.update(gpu=p.name, sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
                   l2_bytes=getattr(p, "L2_cache_size", None))
        env.update({k: v for k, v in query_smi(idx).items() if v is not None})
    else:
        env["gpu"] = "none (CPU)"
        env["cpu"] = platform.processor() or platform.machine()
    return env
