"""Run a reduced megakernel configuration under compute-sanitizer (memcheck / racecheck /
synccheck): a short prompt, a step stopped after layer 1 (two layers) and one full step, with
long timeouts because the sanitizer slows every access. Exit code 0 = no error reported.

Environment: MONOLITH_VARIANT (default bf16-upstream); MONOLITH_SANITIZE_BLOCKS (grid size,
default: one block per SM; the streaming schedule runs with as few as 16, which is its reduced
configuration here); MONOLITH_SANITIZE_PROMPT (prompt length, default 3)."""
import os
import sys

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine


def main() -> int:
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    blocks = int(os.environ.get("MONOLITH_SANITIZE_BLOCKS", "0")) or None
    mk = MegakernelEngine(ckpt, variant=os.environ.get("MONOLITH_VARIANT", "bf16-upstream"), timeout_s=600.0,
                          blocks=blocks)
    n_prompt = int(os.environ.get("MONOLITH_SANITIZE_PROMPT", "3"))
    mk.reset()
    nxt = mk.prefill([9707, 1879, 11][:n_prompt])  # steps at positions 0..n-1
    mk.step_until(nxt, 1, 4)                        # reduced: stop after layer 1
    out = mk.decode(nxt, 1)                         # one full step (28 layers + LM head)
    torch.cuda.synchronize()
    print(f"sanitize_step ok ({mk.variant}, {mk.blocks} blocks), token", int(out[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
