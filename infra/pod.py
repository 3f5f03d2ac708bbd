"""Pod control for rented GPUs through the runpod SDK (runpod==1.12.0).

Every function takes its API key from RUNPOD_API_KEY only (never from ~/.runpod/config.toml,
which the SDK would otherwise read at import) and every SDK failure is re-raised as a
MonolithError whose text went through `redact`, so the key cannot leak into output, logs or
tracebacks. Only pods whose name starts with `monolith-` are listed, stopped or terminated.

Driver filtering: the SDK's GPU queries (gpuTypes: id, displayName, memoryInGb, prices) carry
no driver or CUDA field, and the pod query none either. The one host filter the SDK exposes is
`create_pod(allowed_cuda_versions=[...])`, sent as `allowedCudaVersions` in the
`podFindAndDeployOnDemand` mutation: the scheduler then only places the pod on hosts whose
driver reports one of those CUDA versions. CUDA 13 needs driver R580+, so we allow only
versions >= the pinned toolkit. bootstrap.sh checks the driver again on the pod itself.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from monolith.errors import MonolithError

PREFIX = "monolith-"
CUDA_TOOLKIT = "13.0"          # the pinned toolkit (nvcc 13.0 on the H200, NOTES.md)
MIN_DRIVER = 580               # R580 is the first driver branch that runs CUDA 13.0
# CUDA versions a RunPod host may report; we pass those >= CUDA_TOOLKIT. Extend with
# MONOLITH_POD_CUDA_VERSIONS="13.0,13.1,..." when RunPod lists newer ones.
KNOWN_CUDA_VERSIONS = ("12.4", "12.6", "12.8", "12.9", "13.0", "13.1", "13.2")
# Official RunPod PyTorch image (CUDA 12.8 userland); bootstrap.sh adds the 13.0 toolkit.
IMAGE = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"
VOLUME_GB = 50
CONTAINER_DISK_GB = 40         # the CUDA toolkit and pip wheels live on the container disk
VOLUME_PATH = "/workspace"
# Preference tiers, matched against each GPU type's id and displayName as the API lists them.
GPU_PREFERENCE = (r"RTX 5090", r"RTX PRO 6000", r"H200|H100")
NO_CAPACITY = re.compile(r"no longer any instances|not enough|no instances|unavailable", re.I)


# ----------------------------------------------------------------------------- secrets
def _key_from_env() -> str:
    key = os.environ.get("RUNPOD_API_KEY", "").strip()
    if not key:
        raise MonolithError(
            "RUNPOD_API_KEY is not set. Export it in this shell (monolith reads it from the "
            "environment only, never from a file); see infra/README.md.")
    return key


_PATTERNS = [
    re.compile(r"(Bearer\s+)\S+", re.I),
    re.compile(r"(api[_-]?key[\"']?\s*[=:]\s*[\"']?)[^\s\"'&,}]+", re.I),
    re.compile(r"()\brpa_[A-Za-z0-9]{8,}"),  # RunPod's key format
]


def redact(text: object) -> str:
    """The text with the current API key (and anything shaped like a key) replaced by ***."""
    s = str(text)
    key = os.environ.get("RUNPOD_API_KEY", "").strip()
    if key:
        s = s.replace(key, "***")
    for p in _PATTERNS:
        s = p.sub(lambda m: m.group(1) + "***", s)
    return s


@contextmanager
def _guard(what: str):
    """Turn any SDK/network exception into a redacted MonolithError, chain cut (`from None`)
    so a traceback cannot print the original text either."""
    try:
        yield
    except MonolithError as e:
        raise MonolithError(redact(e)) from None
    except Exception as e:  # noqa: BLE001 - every SDK failure must pass the redactor
        raise MonolithError(redact(f"{what} failed: {type(e).__name__}: {e}")) from None


def _sdk():
    """Import runpod lazily (2 s import, optional `infra` extra) and point it at our key."""
    key = _key_from_env()
    try:
        import runpod
    except ImportError:
        raise MonolithError("the runpod SDK is not installed: pip install -e '.[infra]'") from None
    runpod.api_key = key  # overrides whatever the SDK read from ~/.runpod at import
    return runpod


# ----------------------------------------------------------------------------- GPU choice
def allowed_cuda_versions(pinned: str = CUDA_TOOLKIT) -> list[str]:
    extra = [v.strip() for v in os.environ.get("MONOLITH_POD_CUDA_VERSIONS", "").split(",") if v.strip()]
    known = sorted(set(KNOWN_CUDA_VERSIONS) | set(extra), key=_ver)
    return [v for v in known if _ver(v) >= _ver(pinned)]


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def rank_gpus(gpu_types: list[dict], preference=GPU_PREFERENCE) -> list[dict]:
    """GPU types from get_gpus() that match a preference tier, best tier first; within a
    tier, more memory first, then id (stable, independent of API order)."""
    out, seen = [], set()
    for tier, pat in enumerate(preference):
        rx = re.compile(pat, re.I)
        hits = [g for g in gpu_types
                if g.get("id") not in seen and rx.search(f"{g.get('id', '')} {g.get('displayName', '')}")]
        hits.sort(key=lambda g: (-(g.get("memoryInGb") or 0), g.get("id", "")))
        for g in hits:
            seen.add(g["id"])
            out.append(dict(g, tier=tier))
    return out


def image_cuda(image: str) -> tuple[int, ...]:
    m = re.search(r"cuda(\d+)\.(\d+)", image)
    if not m:
        raise MonolithError(f"cannot read the CUDA version from image tag {image!r}")
    return int(m.group(1)), int(m.group(2))


def public_key() -> str:
    """SSH public key: MONOLITH_SSH_PUBLIC_KEY or PUBLIC_KEY env, else ~/.ssh/id_*.pub."""
    key = os.environ.get("MONOLITH_SSH_PUBLIC_KEY") or os.environ.get("PUBLIC_KEY")
    if not key:
        for name in ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"):
            p = Path.home() / ".ssh" / name
            if p.is_file():
                key = p.read_text()
                break
    if not key:
        raise MonolithError("no SSH public key: set MONOLITH_SSH_PUBLIC_KEY or create ~/.ssh/id_ed25519.pub "
                            "(ssh-keygen -t ed25519)")
    key = key.strip()
    # The SDK pastes env values into a GraphQL string unescaped: refuse what would break it.
    if not key.startswith(("ssh-", "ecdsa-")) or any(c in key for c in '"\\\n'):
        raise MonolithError("the SSH public key does not look like one line of an OpenSSH .pub file")
    return key


def create(*, suffix: str = "", gpu: str | None = None, image: str = IMAGE, volume_gb: int = VOLUME_GB,
           cloud: str = "ALL", max_hours: float | None = None, dry_run: bool = False) -> dict:
    """Create one pod on the best GPU type that has capacity. `gpu` overrides the preference
    order with a comma-separated list of patterns (e.g. "H200,H100")."""
    if image_cuda(image) < (12, 8):
        raise MonolithError(f"image {image} has CUDA older than 12.8")
    if suffix and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", suffix):
        raise MonolithError("pod name suffix: lower-case letters, digits and '-' only")
    name = PREFIX + (suffix or time.strftime("%Y%m%d-%H%M%S"))
    pref = tuple(p.strip() for p in gpu.split(",")) if gpu else GPU_PREFERENCE
    env = {"PUBLIC_KEY": public_key(), "MAX_POD_HOURS": str(max_hours if max_hours is not None else 6)}
    cuda = allowed_cuda_versions()
    runpod = _sdk()
    with _guard("listing GPU types"):
        candidates = rank_gpus(runpod.get_gpus(api_key=runpod.api_key), pref)
    if not candidates:
        raise MonolithError(f"the API lists no GPU type matching {', '.join(pref)}")
    plan = {"name": name, "image": image, "volume_gb": volume_gb, "allowed_cuda_versions": cuda,
            "candidates": [g["id"] for g in candidates]}
    if dry_run:
        return plan
    tried = []
    for g in candidates:
        try:
            with _guard(f"creating a pod on {g['id']}"):
                pod = runpod.create_pod(
                    name, image, g["id"], cloud_type=cloud, support_public_ip=True, start_ssh=True,
                    gpu_count=1, volume_in_gb=volume_gb, container_disk_in_gb=CONTAINER_DISK_GB,
                    volume_mount_path=VOLUME_PATH, ports="22/tcp", env=env, allowed_cuda_versions=cuda)
        except MonolithError as e:
            if NO_CAPACITY.search(str(e)):  # sold out with our CUDA floor: try the next type
                tried.append(g["id"])
                continue
            raise
        return dict(plan, id=pod["id"], gpu=g["id"], tried=tried,
                    pod_host_id=(pod.get("machine") or {}).get("podHostId"))
    raise MonolithError(f"no capacity on any of {', '.join(tried)} with a driver for CUDA >= {CUDA_TOOLKIT}; "
                        "retry later or widen --gpu")


# ----------------------------------------------------------------------------- pods
def _mine(pods: list[dict] | None) -> list[dict]:
    return [p for p in (pods or []) if str(p.get("name", "")).startswith(PREFIX)]


def list_pods() -> list[dict]:
    runpod = _sdk()
    with _guard("listing pods"):
        return _mine(runpod.get_pods(api_key=runpod.api_key))


def get(pod_id: str) -> dict:
    """One of our pods; a pod not named monolith-* is refused so we never touch others."""
    runpod = _sdk()
    with _guard(f"reading pod {pod_id}"):
        pod = runpod.get_pod(pod_id, api_key=runpod.api_key)
    if not pod:
        raise MonolithError(f"no pod {pod_id}")
    if not str(pod.get("name", "")).startswith(PREFIX):
        raise MonolithError(f"pod {pod_id} is not named {PREFIX}*: monolith leaves it alone")
    return pod


def stop(pod_id: str) -> dict:
    get(pod_id)
    runpod = _sdk()
    with _guard(f"stopping pod {pod_id}"):
        return runpod.stop_pod(pod_id)


def terminate(pod_id: str) -> None:
    get(pod_id)
    runpod = _sdk()
    with _guard(f"terminating pod {pod_id}"):
        runpod.terminate_pod(pod_id)


def ssh_info(pod: dict) -> dict:
    """Direct SSH over the pod's public TCP mapping of port 22 (needs runtime: pod running)."""
    ports = ((pod.get("runtime") or {}).get("ports")) or []
    for p in ports:
        if p.get("privatePort") == 22 and p.get("isIpPublic") and p.get("type") == "tcp":
            return {"host": p["ip"], "port": p["publicPort"], "user": "root",
                    "command": f"ssh root@{p['ip']} -p {p['publicPort']}"}
    raise MonolithError(f"pod {pod.get('id')} has no public SSH port yet (status "
                        f"{pod.get('desiredStatus')}); wait until it is RUNNING and retry")


def cost(pods: list[dict]) -> dict:
    """Uptime and spend per pod: costPerHr × uptimeSeconds / 3600 (the current run only;
    a stopped pod's volume storage is billed separately by RunPod and not counted here)."""
    rows = []
    for p in _mine(pods):
        up = int(p.get("uptimeSeconds") or 0)
        rate = float(p.get("costPerHr") or 0.0)
        rows.append({"id": p.get("id"), "name": p.get("name"), "status": p.get("desiredStatus"),
                     "gpu": (p.get("machine") or {}).get("gpuDisplayName"), "cost_per_hr": rate,
                     "uptime_h": up / 3600, "spend": round(rate * up / 3600, 4)})
    return {"pods": rows, "total_per_hr": round(sum(r["cost_per_hr"] for r in rows
                                                    if r["status"] == "RUNNING"), 4),
            "total_spend": round(sum(r["spend"] for r in rows), 4)}
