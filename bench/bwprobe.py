"""The streaming-read bandwidth the byte model divides by (`bw_tbs_for_prediction`): always the
GPU in hand's own, never another GPU's.

`resolve` tries, in order:
1. measured now: probes/bandwidth.cu, built and run through the M0 probe runner's own functions
   (probes/run.py: build_probe, run_probe, summarize), taking what results/m0_probes.json calls
   `bandwidth_best_tbs` at the probe's largest read (300 MB: DRAM, steady state). About 3 s of
   nvcc and 1-2 s on the GPU, before the run puts anything else on it.
2. the probe could not run (no nvcc, a build or run failure, a result naming another GPU or an
   implausible number): a committed measurement of the same GPU model (MEASURED, each with the
   file it comes from), and the record says the probe failed and why.
3. neither: no bandwidth. Rows then carry no prediction (None) and the reason.

4.53 TB/s (NOTES.md, Facts: the H200's streaming read measured before M0) is never returned
here. LEGACY_TBS names it only so that results recorded with it can be labelled as such.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from monolith import REPO_ROOT, jsonio
from monolith.errors import MonolithError

BUILD_DIR = REPO_ROOT / "build" / "bwprobe"
PROBE_TIMEOUT_S = 60
MAX_PLAUSIBLE_TBS = 100.0  # HBM3e is ~5 TB/s: a number far above it is a broken timing, not a GPU
LEASE_FILE = "bandwidth.json"
METHOD = (
    "probes/bandwidth.cu built and run by monolith.probes.run (build_probe, run_probe, summarize): "
    "16-byte ld.global.nc.L1::no_allocate streaming reads over the probe's grid x loads-in-flight x "
    "pattern sweep, each configuration the median of 5 timings of 10 back-to-back launches on "
    "DRAM-resident windows; the best configuration at the largest read (bandwidth_best_tbs)"
)
# Results recorded before this module carry this value with a NOTES.md (or older) source and no
# bw_measurement record: the merge and final.md name it for what it is.
LEGACY_TBS = 4.53
LEGACY_GPU = "NVIDIA H200"


@dataclass(frozen=True)
class Measured:
    """A committed streaming-read measurement: its value, the file it is in, where in that file."""

    tbs: float
    file: str
    where: str


# Keyed by the exact device name torch and the probe report: other SKUs (an H100 PCIe, an H200
# NVL) have other memory systems and get no entry of their own without a measurement.
MEASURED: dict[str, Measured] = {
    "NVIDIA H200": Measured(
        4.2804,
        "results/m0_probes.json",
        "summary.bandwidth_best_tbs['300000000'] (env.gpu 'NVIDIA H200', monolith probe)",
    ),
}


class ProbeFailed(RuntimeError):
    """The bandwidth probe gave no usable number; the message says why in one line."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def find_nvcc() -> str | None:
    """$NVCC, nvcc on PATH, else $CUDA_HOME/bin/nvcc or /usr/local/cuda/bin/nvcc."""
    env = os.environ.get("NVCC")
    if env:
        return env if shutil.which(env) or Path(env).is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def parse(res: dict, gpu: str) -> dict:
    """The usable number of one bandwidth-probe result (run_probe's dict): the best streaming read
    at the largest size, on `gpu`. ProbeFailed for anything else."""
    from monolith.probes import run as probe_run

    if res.get("status") != "ok":
        raise ProbeFailed(
            f"probe {res.get('status', 'failed')}: {str(res.get('reason') or res.get('error') or '')[:200]}"
        )
    if res.get("device") != gpu:
        raise ProbeFailed(f"the probe ran on {res.get('device')!r}, not on {gpu!r} (CUDA_VISIBLE_DEVICES?)")
    s = probe_run.summarize({"bandwidth": res})
    best = {int(k): v for k, v in (s.get("bandwidth_best_tbs") or {}).items() if v is not None}
    if not best:
        raise ProbeFailed("the probe reported no best configuration")
    size = max(best)
    tbs = best[size]
    if not (isinstance(tbs, int | float) and math.isfinite(tbs) and 0 < tbs <= MAX_PLAUSIBLE_TBS):
        raise ProbeFailed(f"the probe's best streaming read at {size:,} B is {tbs!r} TB/s: not a bandwidth")
    row = (res.get("best") or {}).get(str(size)) or {}
    if row.get("sum_ok") is not True:
        raise ProbeFailed("the best configuration's checksum did not match: its loads were not all performed")
    return {
        "tbs": float(tbs),
        "bytes": size,
        "config": (s.get("bandwidth_best_config") or {}).get(str(size)),
        "sm_count": res.get("sm_count"),
        "probe_s": res.get("wall_s"),
    }


@contextlib.contextmanager
def _visible(index: int):
    """The probe binary uses its device 0: make that torch's device `index` for the child."""
    if index == 0:
        yield
        return
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in old.split(",")] if old else [str(i) for i in range(index + 1)]
    if index >= len(ids):
        raise ProbeFailed(f"device {index} is not among CUDA_VISIBLE_DEVICES={old!r}")
    os.environ["CUDA_VISIBLE_DEVICES"] = ids[index]
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def probe(
    device, gpu: str, *, nvcc: str | None = None, build_dir: Path | None = None, timeout_s: int = PROBE_TIMEOUT_S
) -> dict:
    """Build and run probes/bandwidth.cu on torch's `device` (named `gpu`); parse()'s dict plus the
    build's seconds. ProbeFailed when there is no number."""
    import torch

    from monolith.probes import run as probe_run

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise ProbeFailed("nvcc not found ($NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    index = _index(device)
    major, minor = torch.cuda.get_device_capability(index)
    arch = probe_run.arch_for_cc(major, minor)
    t0 = time.perf_counter()
    try:
        exe, _log = probe_run.build_probe("bandwidth", arch, nvcc, Path(build_dir or BUILD_DIR))
    except (RuntimeError, OSError) as e:
        raise ProbeFailed(
            f"build for {arch}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else e!r}"
        ) from e
    build_s = time.perf_counter() - t0
    with _visible(index):
        res = probe_run.run_probe(exe, [], timeout_s)
    return {**parse(res, gpu), "build_s": round(build_s, 1), "arch": arch}


def _index(device) -> int:
    import torch

    d = torch.device(device)
    if d.index is not None:
        return d.index
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def _none(gpu, uuid, reason: str, probe_error: str | None = None) -> dict:
    return {
        "tbs": None,
        "status": "none",
        "gpu": gpu,
        "gpu_uuid": uuid,
        "method": None,
        "source": f"none: {reason}",
        "reason": reason,
        "probe_error": probe_error,
    }


def resolve(
    device: str = "cuda",
    *,
    gpu: str | None,
    gpu_uuid: str | None = None,
    probe_fn=None,
    table: dict[str, Measured] | None = None,
    log=print,
) -> dict:
    """The bandwidth record of this run's GPU (see the module's docstring for the order). `gpu` is
    the device's name as torch reports it; `probe_fn(device, gpu)` replaces the probe (tests)."""
    table = MEASURED if table is None else table
    if not str(device).startswith("cuda"):
        return _none(gpu, gpu_uuid, "a CPU run: the time model predicts a GPU")
    if not gpu or str(gpu).startswith("none"):
        return _none(gpu, gpu_uuid, "the GPU's name is unknown, so no bandwidth can be attributed to it")
    if gpu_uuid is None:
        try:
            from monolith.bench import power

            gpu_uuid = power.gpu_uuid(_index(device))
        except Exception:  # noqa: BLE001  (the UUID labels the record; its absence is recorded as null)
            gpu_uuid = None
    t0 = time.perf_counter()
    try:
        m = (probe_fn or probe)(device, gpu)
        tbs = float(m["tbs"])
        if not (math.isfinite(tbs) and 0 < tbs <= MAX_PLAUSIBLE_TBS):
            raise ProbeFailed(f"the probe returned {tbs!r} TB/s")
    except Exception as e:  # noqa: BLE001  (a probe that cannot run falls back, recorded, never silently)
        err = f"{type(e).__name__}: {e}"[:400]
        hit = table.get(gpu)
        if hit is None:
            known = ", ".join(sorted(table)) or "none"
            rec = _none(
                gpu,
                gpu_uuid,
                f"the bandwidth probe could not run here ({err}) and no committed "
                f"measurement of {gpu} exists (bench/bwprobe.py MEASURED: {known})",
                err,
            )
            log(f"bandwidth: {rec['reason']}: rows get no predicted µs/token")
            return rec
        rec = {
            "tbs": hit.tbs,
            "status": "table",
            "gpu": gpu,
            "gpu_uuid": gpu_uuid,
            "method": f"committed measurement: {hit.file}, {hit.where}",
            "source": f"{hit.tbs} TB/s, the committed measurement of {gpu} ({hit.file}); the probe could "
            f"not run here: {err}",
            "file": hit.file,
            "probe_error": err,
            "reason": None,
        }
        log(f"bandwidth: the probe could not run ({err}); using {gpu}'s committed {hit.tbs} TB/s ({hit.file})")
        return rec
    rec = {
        "tbs": tbs,
        "status": "measured",
        "gpu": gpu,
        "gpu_uuid": gpu_uuid,
        "method": METHOD,
        "source": f"measured at the start of this run on {gpu} ({gpu_uuid or 'UUID unknown'}): probes/bandwidth.cu, "
        f"best streaming read at {m.get('bytes', 0) / 1e6:,.0f} MB ({m.get('config')})",
        "bytes": m.get("bytes"),
        "config": m.get("config"),
        "sm_count": m.get("sm_count"),
        "measured_at": now_iso(),
        "seconds": round(time.perf_counter() - t0, 1),
        "build_s": m.get("build_s"),
        "probe_s": m.get("probe_s"),
        "probe_error": None,
        "reason": None,
    }
    log(f"bandwidth: {tbs:.3f} TB/s streaming read, measured now on {gpu} in {rec['seconds']} s")
    return rec


def for_lease(rows_dir: Path, *, gpu_uuid: str | None, resolve_fn, limit_s: float | None = None, log=print) -> dict:
    """One measurement per lease: a record an earlier process of the lease measured on this GPU
    (same UUID, within the lease window) is read back from rows_dir/bandwidth.json; otherwise
    `resolve_fn()` runs and a measured record is written there for the later processes."""
    from monolith.bench.final import WINDOW_LIMIT_S

    limit_s = WINDOW_LIMIT_S if limit_s is None else limit_s
    p = Path(rows_dir) / LEASE_FILE
    if gpu_uuid and p.is_file():
        try:
            prev = jsonio.load_object(p, LEASE_FILE)
            age = (_dt.datetime.now(_dt.UTC) - _dt.datetime.fromisoformat(str(prev.get("measured_at")))).total_seconds()
        except (MonolithError, ValueError, TypeError):
            prev, age = None, math.inf
        tbs = (prev or {}).get("tbs")
        if (
            prev
            and prev.get("status") == "measured"
            and prev.get("gpu_uuid") == gpu_uuid
            and 0 <= age <= limit_s
            and isinstance(tbs, int | float)
            and math.isfinite(tbs)
            and 0 < tbs <= MAX_PLAUSIBLE_TBS
        ):
            log(f"bandwidth: {tbs:.3f} TB/s, measured {age:.0f} s ago by an earlier process of this lease ({p})")
            return {
                **prev,
                "status": "reused",
                "reused_from": LEASE_FILE,
                "source": f"{prev['source']}; read back from the rows dir's {LEASE_FILE} ({age:.0f} s later)",
            }
    rec = resolve_fn()
    if rec.get("status") == "measured" and gpu_uuid and rec.get("gpu_uuid") == gpu_uuid:
        Path(rows_dir).mkdir(parents=True, exist_ok=True)
        jsonio.write(p, rec, LEASE_FILE)
    return rec


def note(rec: dict | None) -> str | None:
    """One line for a row: where its bandwidth came from, or why it has none."""
    if not rec:
        return None
    return rec.get("source") if rec.get("tbs") is not None else (rec.get("reason") or rec.get("source"))


def protocol_keys(rec: dict) -> dict:
    """The protocol's keys: the value every row's prediction used, its one-line source, the record."""
    return {"bw_tbs_for_prediction": rec.get("tbs"), "bw_source": rec.get("source"), "bw_measurement": rec}


def reprice_external(row: dict, rec: dict | None) -> None:
    """An external engine's row (llama.cpp: its whole file streamed per token) predicted at this
    run's bandwidth instead of whatever its parser assumed; no bandwidth: None and the reason."""
    b = row.get("bytes_per_token")
    if row.get("status") != "ok" or not (isinstance(b, int | float) and b > 0) or rec is None:
        return
    tbs = rec.get("tbs")
    if tbs is None:
        row["predicted_us_per_token"] = None
        row["prediction"] = {"kind": "none", "reason": note(rec)}
        return
    row["predicted_us_per_token"] = b / (tbs * 1e12) * 1e6
    row["prediction"] = {
        "kind": "bandwidth floor (bytes_per_token / bandwidth)",
        "us": row["predicted_us_per_token"],
        "bw_tbs": tbs,
        "bw_source": note(rec),
    }
