"""The gate's fp32 oracle, computed once per lease and per weight format.

scripts/m6_lease.sh measures the final matrix as two `monolith m6` processes (the variants, then the
baselines) so that one process's crash cannot take the other's rows; both need the oracle of the
bf16 weights (~37 s of an H100 lease each, notes/m6_budget.md). The first process writes it into
the lease's rows directory (ORACLE_DIR) and the second reads it back.

A file is reused only when everything that decides the oracle's tokens and margins is the same:
the weights (their `describe()`: sha256, pack scheme), the prompts' token ids, the prompt and token
counts, the oracle's code (sha256 of its source files), and the machine: the GPU's UUID, this boot
(the kernel's boot_id), torch and CUDA. It must also be younger than the merge's window
(bench/final.WINDOW_LIMIT_S), so an oracle from another lease is never read even on the same
card. No GPU UUID or no boot_id: nothing is written or read (the oracle is computed). Anything that
does not match is computed again and the file replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

from monolith.eval.correctness import OracleRun, OracleSet

ORACLE_DIR = "oracles"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SCHEMA = "monolith-oracle-cache/1"


def _source_sha() -> str:
    """The oracle's code: the gate's oracle loop, the registry that builds the oracle, the CUDA-graph
    wrapper and the reference model it runs."""
    import monolith.bench.baselines.graphs as graphs
    import monolith.bench.baselines.registry as registry
    import monolith.eval.correctness as correctness
    import monolith.reference as reference

    h = hashlib.sha256()
    for mod in (correctness, registry, graphs, reference):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()


def identity(gpu_uuid: str | None, boot_id_file: Path = BOOT_ID) -> dict | None:
    """This machine as the cache sees it, or None (then nothing is cached)."""
    import torch

    try:
        boot = boot_id_file.read_text().strip()
    except OSError:
        return None
    if not gpu_uuid or not boot:
        return None
    return {"gpu_uuid": gpu_uuid, "boot_id": boot, "torch": torch.__version__, "cuda": torch.version.cuda}


def key(weights: dict, fmt: str, prompts: list[list[int]], tokens: int, machine: dict) -> dict:
    """The key as it reads back from JSON (so a file's key compares equal to a fresh one)."""
    k = {
        "weights": weights,
        "format": fmt,
        "prompts": [list(map(int, p)) for p in prompts],
        "tokens": int(tokens),
        "oracle_source_sha256": _source_sha(),
        "machine": machine,
    }
    return json.loads(json.dumps(k, sort_keys=True, default=str))


def path_for(rows_dir: Path, k: dict) -> Path:
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:16]
    return Path(rows_dir) / ORACLE_DIR / f"{k['format']}-{digest}.json"


def load(rows_dir: Path, k: dict, max_age_s: float, now: float | None = None) -> tuple[OracleSet | None, str]:
    """(the oracle, "") from this lease's file, or (None, why it was not reused)."""
    p = path_for(rows_dir, k)
    if not p.is_file():
        return None, "no file"
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        return None, f"unreadable ({type(e).__name__})"
    if doc.get("schema") != SCHEMA or doc.get("key") != k:
        return None, "another oracle's key"
    age = (time.time() if now is None else now) - float(doc.get("created_unix", -math.inf))
    if not 0 <= age < max_age_s:
        return None, f"{age:,.0f} s old: not this lease's"
    runs = doc.get("runs") or []
    n = k["tokens"]
    ok = len(runs) == len(k["prompts"]) and all(
        r.get("prompt") == pr
        and len(r.get("tokens") or []) == n
        and len(r.get("margins") or []) == n
        and all(isinstance(m, int | float) and math.isfinite(m) for m in r["margins"])
        for r, pr in zip(runs, k["prompts"], strict=False)
    )
    if not ok:
        return None, "runs do not match the key's prompts and tokens"
    desc = {
        **doc.get("desc", {}),
        "source": f"this lease's oracle file {p.name}, computed at {doc.get('created')} "
        f"by process {doc.get('pid')} in {doc.get('seconds')} s; read, not recomputed",
    }
    oset = OracleSet(
        [OracleRun(r["prompt"], [int(t) for t in r["tokens"]], [float(m) for m in r["margins"]]) for r in runs],
        desc,
        doc.get("nonfinite"),
    )
    return oset, ""


def save(rows_dir: Path, k: dict, oset: OracleSet, seconds: float) -> Path:
    """Write the oracle (atomically: a reader sees the old file or the whole new one)."""
    from monolith.bench.final import now_iso

    p = path_for(rows_dir, k)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "key": k,
        "created": now_iso(),
        "created_unix": time.time(),
        "pid": os.getpid(),
        "seconds": round(seconds, 1),
        "desc": _jsonable(oset.desc),
        "nonfinite": oset.nonfinite,
        "runs": [{"prompt": list(r.prompt), "tokens": list(r.tokens), "margins": list(r.margins)} for r in oset.runs],
    }
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, allow_nan=False) + "\n")
    os.replace(tmp, p)
    return p


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)


def get(rows_dir: Path | None, k: dict | None, compute, max_age_s: float, log=print) -> tuple[OracleSet, float]:
    """The oracle of key `k`: read from the lease's file when it matches, else `compute()` (an
    OracleSet) and written for the next process. Returns (oracle, seconds spent computing it)."""
    why = "no machine identity: not cached"
    if rows_dir is not None and k is not None:
        oset, why = load(rows_dir, k, max_age_s)
        if oset is not None:
            log(f"  oracle: {oset.desc['source']}")
            return oset, 0.0
    t0 = time.perf_counter()
    oset = compute()
    seconds = time.perf_counter() - t0
    oset.desc["seconds"] = round(seconds, 1)
    oset.desc["source"] = f"computed in this process ({why})"
    if rows_dir is not None and k is not None:
        log(f"  oracle: {seconds:.0f} s, kept for this lease's next process in {save(rows_dir, k, oset, seconds)}")
    return oset, seconds
