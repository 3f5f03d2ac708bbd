"""Warm torch's compile caches for hf-compile in a process of its own, and say what the cold
compile took.

`monolith m6` starts this beside a process's fp32 oracles (GPU-bound, the host's cores idle), so
that the process that measures hf-compile later compiles with warm caches: inductor's FX-graph
cache, the AOT-autograd cache and the Triton kernels live on disk in inductor's cache folder
(TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_$USER), keyed by the graph, the input
shapes, the configuration, torch/Triton and the GPU, not by the process. The engine is built
exactly as the measured row builds it (registry.build), so the keys agree. What the cached code
computes is what a cold compile generates; only the compile's time changes, and the row keeps
both: `compile_warmup_s` (its own, warm) and `compile_cold_s` (this process's).

One choice is not handed over: which of a Triton kernel's configurations runs fastest. This
process measures that on a GPU shared with the oracle, so it saves none (inductor's
autotune_local_cache off: not part of the FX-graph cache's key, and carried into the cached
kernels, so the measured process benchmarks its kernels' configurations itself, on an idle GPU,
inside its compile and before any timed run, as a cold compile does).

usage: python -m monolith.bench.baselines.hf_warm OUT_JSON [MODEL_DIR] [DEVICE]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

SCHEMA = "monolith-compile-warm/1"
ENGINE = "hf-compile"


def warm(out: str, model: str | None = None, device: str = "cuda") -> dict:
    """Build hf-compile once (its compile and CUDA-graph capture happen in the constructor) and
    write what it took to `out` (atomically). A compile that failed is written too, with why."""
    t0 = time.perf_counter()
    from monolith.bench import final
    from monolith.bench.baselines import registry
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint

    started = final.now_iso()
    doc: dict = {"schema": SCHEMA, "engine": ENGINE, "pid": os.getpid(), "started": started, "device": device}
    try:
        import torch._inductor.config as inductor_config

        inductor_config.autotune_local_cache = False  # this GPU is shared now: no timing choice is kept
        doc["autotune_saved"] = False
        ckpt = load_checkpoint(ensure_checkpoint(model), allow_reduced_depth=True)
        eng = registry.build(ENGINE, ckpt, device)
        info = dict(eng.info or {})
        del eng
        doc.update(
            status="ok" if info.get("compiled") else "failed",
            compiled=info.get("compiled"),
            fullgraph=info.get("fullgraph"),
            compile_cold_s=info.get("compile_warmup_s"),
            compile_cache=info.get("compile_cache"),
            weights_sha256=ckpt.describe().get("sha256"),
        )
        if info.get("compile_errors"):
            doc["reason"] = "; ".join(info["compile_errors"])[:400]
    except Exception as e:  # noqa: BLE001  (the measured process then compiles cold; this file says why)
        doc.update(status="failed", reason=f"{type(e).__name__}: {e}"[:400])
    import torch

    doc.update(torch=torch.__version__, ended=final.now_iso(), process_s=round(time.perf_counter() - t0, 1))
    tmp = f"{out}.{os.getpid()}.tmp"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, out)
    return doc


def die_with_parent() -> None:
    """Linux: this process is killed when the thread that started it ends (`monolith m6` waits for
    it before its first engine; if that process dies first, the warming must not run on into the
    next process's timed runs)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    a = sys.argv[1:] if argv is None else argv
    if a and a[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not a or len(a) > 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    doc = warm(a[0], a[1] if len(a) > 1 and a[1] else None, a[2] if len(a) > 2 else "cuda")
    print(
        f"hf_warm: {doc['status']}, cold compile {doc.get('compile_cold_s')} s, process {doc['process_s']} s"
        + (f": {doc['reason']}" if doc.get("reason") else "")
    )
    return 0 if doc["status"] == "ok" else 1


if __name__ == "__main__":
    die_with_parent()
    raise SystemExit(main())
