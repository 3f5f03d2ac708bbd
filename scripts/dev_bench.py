"""Development timing of the megakernel (NOT a headline number: no gate, no environment record;
headline numbers come only from `monolith bench`). Prints tok/s for a few launch shapes.
usage: python scripts/dev_bench.py [--blocks 132,128,...] [--tokens 256] [--position 0]"""
import argparse

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine, bytes_per_token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", default="")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--xray", action="store_true")
    ap.add_argument("--l2-prefetch", default="", help="comma list of l2_prefetch modes to try (0,1,2)")
    a = ap.parse_args()
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    shapes = [int(b) for b in a.blocks.split(",") if b] or [None]
    modes = [int(m) for m in a.l2_prefetch.split(",") if m] or [None]
    for blocks, mode in [(b, m) for b in shapes for m in modes]:
        mk = MegakernelEngine(ckpt, blocks=blocks, xray=a.xray, l2_prefetch=mode)
        times = []
        for _ in range(a.runs + 1):
            mk.reset()
            first = mk.prefill([9707, 1879])
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            mk.decode(first, a.tokens)
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / 1000)
        times = sorted(times[1:])
        med = times[len(times) // 2]
        bpt = sum(bytes_per_token(p) for p in range(2, 2 + a.tokens)) / a.tokens
        print(f"[dev] blocks={mk.blocks} l2_prefetch={mk.l2_prefetch} xray={a.xray} tok/s median {a.tokens / med:.0f} "
              f"(min {a.tokens / times[-1]:.0f}, max {a.tokens / times[0]:.0f}) us/token {med / a.tokens * 1e6:.1f} "
              f"eff BW {bpt * a.tokens / med / 1e12:.2f} TB/s regs {mk.info['kernel_attributes']['num_regs']}")
        del mk
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
