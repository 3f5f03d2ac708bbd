"""Run a reduced megakernel configuration under compute-sanitizer (memcheck / racecheck /
synccheck): a short prompt, a step stopped after layer 1 (two layers) and one full step, with
long timeouts because the sanitizer slows every access. Exit code 0 = no error reported.

Environment:
  MONOLITH_VARIANT          kernel variant (default bf16-upstream)
  MONOLITH_SANITIZE_BLOCKS  grid size (default: one block per SM; the streaming schedule runs with
                            as few as 16, which is its reduced configuration here)
  MONOLITH_SANITIZE_PROMPT  prompt length (default 3)
  MONOLITH_SANITIZE_START   position the prompt starts at (default 0; engine.seek, the K/V rows
                            before it stay zero): e.g. 300 with 16 blocks gives each block of a KV
                            group 2-3 attention splits, the regime of MONOLITH_ATTN_LOCAL_MERGE
  MONOLITH_SANITIZE_FULL    1 (default): prompt, reduced step, full step. 0: the reduced step
                            only: no prefill, no full step; one step of the first prompt token at
                            position 0 on a freshly reset engine, stopped after layer 1's down
                            projection (step_until(token, 1, 4): two layers' weights through the
                            weight ring, no LM head). Why: each prefill token is itself a full
                            28-layer step + LM head, and under racecheck those full steps are what
                            outlast a few minutes' cap. With 0, MONOLITH_SANITIZE_PROMPT is unused,
                            and MONOLITH_SANITIZE_START, where set, is the reduced step's position
                            (engine.seek first: e.g. 300 at 16 blocks launches the wide-attention
                            kernel, twenty-fifth session). scripts/gpu.sh stage racecheck-stream runs this.
  MONOLITH_NVCC_DEFINES     extra -D defines of the kernel build (monolith.megakernel.load_extension),
                            e.g. MONOLITH_RING_RELEASE=512; the build tag and its extra defines are
                            printed before the first launch, so a log names the build it checked."""
import os
import sys

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine

PROMPT = [9707, 1879, 11]


def main() -> int:
    full = os.environ.get("MONOLITH_SANITIZE_FULL", "1").strip()
    if full not in ("0", "1"):
        print(f"sanitize_step: MONOLITH_SANITIZE_FULL must be 0 or 1, got {full!r}", file=sys.stderr)
        return 2
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    blocks = int(os.environ.get("MONOLITH_SANITIZE_BLOCKS", "0")) or None
    mk = MegakernelEngine(ckpt, variant=os.environ.get("MONOLITH_VARIANT", "bf16-upstream"), timeout_s=600.0,
                          blocks=blocks)
    start = int(os.environ.get("MONOLITH_SANITIZE_START", "0"))
    b = mk.ext.build_info
    what = "reduced step only (layers 0-1)" if full == "0" else "prompt + reduced step + full step"
    if start:
        what += f", from position {start}"
    print(f"sanitize_step: build {b['tag']}, extra defines {b.get('extra_defines') or 'none'}, {what}", flush=True)
    mk.reset()
    if full == "0":
        if start:
            mk.seek(start)                          # K/V rows before it stay zero
        mk.step_until(PROMPT[0], 1, 4)              # position `start`, stop after layer 1's down projection
        torch.cuda.synchronize()
        print(f"sanitize_step ok ({mk.variant}, {mk.blocks} blocks), reduced step only, position {start}")
        return 0
    n_prompt = int(os.environ.get("MONOLITH_SANITIZE_PROMPT", "3"))
    if start:
        mk.seek(start)                              # K/V rows before it stay zero
    nxt = mk.prefill(PROMPT[:n_prompt])             # steps at positions start..start+n-1
    mk.step_until(nxt, 1, 4)                        # reduced: stop after layer 1
    out = mk.decode(nxt, 1)                         # one full step (28 layers + LM head)
    torch.cuda.synchronize()
    print(f"sanitize_step ok ({mk.variant}, {mk.blocks} blocks), token", int(out[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
