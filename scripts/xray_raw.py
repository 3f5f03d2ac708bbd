"""Record raw X-ray traces (no analysis) of several variants at one position, from token ids
(no tokenizer needed): the device-side half of `monolith xray`; analyze here with
`monolith xray export --raw FILE`.
usage: python scripts/xray_raw.py --variant bf16-stream,bf16-upstream --position 128 --out DIR"""
import argparse
from pathlib import Path

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine
from monolith.xray.raw import save_raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--variant", default="bf16-stream")
    ap.add_argument("--position", type=int, default=128)
    ap.add_argument("--prompt", default="9707,1879,11", help="comma-separated token ids")
    ap.add_argument("--out", default="results/xray")
    a = ap.parse_args()
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    prompt = [int(t) for t in a.prompt.split(",") if t]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for v in a.variant.split(","):
        mk = MegakernelEngine(ckpt, variant=v, xray=True)
        meta, events = mk.record_xray(prompt, position=a.position)
        try:
            path = save_raw(out / f"{v}.raw.npz", meta, events)
        except Exception as e:  # keep the records even when the validator objects: analyze them here
            import json

            import numpy as np
            print(f"[xray] {v}: save_raw refused ({e}); writing the unvalidated records")
            path = out / f"{v}.unvalidated.npz"
            np.savez_compressed(path, events=events, meta=json.dumps(meta, default=str))
        print(f"[xray] {v} pos={a.position} token {meta['token_time_us']:.1f} us, {len(events)} records -> {path}")
        del mk
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
