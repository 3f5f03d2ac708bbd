"""Run a reduced megakernel configuration under compute-sanitizer (memcheck / racecheck):
a short prompt, steps stopped after layer 1 (two layers) and one full step, with long timeouts
because the sanitizer slows every access. Exit code 0 = no error reported by the program."""
import os
import sys

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine


def main() -> int:
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    mk = MegakernelEngine(ckpt, variant=os.environ.get("MONOLITH_VARIANT", "bf16-upstream"), timeout_s=600.0)
    mk.reset()
    nxt = mk.prefill([9707, 1879, 11])  # 3 steps at positions 0..2
    mk.step_until(nxt, 1, 4)            # reduced: stop after layer 1
    out = mk.decode(nxt, 1)             # one full step (28 layers + LM head)
    torch.cuda.synchronize()
    print("sanitize_step ok, token", int(out[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
