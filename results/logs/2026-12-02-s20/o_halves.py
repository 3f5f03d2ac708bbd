"""One-off (twentieth session): per KV group, the median O start of its blocks 8-15 minus that of
blocks 0-7, mean over layers, for each raw X-ray given. Run from the repo root with PYTHONPATH=..
The nineteenth session saw the upper halves start O 0.2-0.3 us late in some groups and layers."""
import sys

import numpy as np

from monolith.xray import analyze as A
from monolith.xray.raw import load_raw

for path in sys.argv[1:]:
    meta, ev = A.validate_raw(*load_raw(path))
    s = A.align(meta, ev)["start_ns"]
    pid = {p.name: p.id for p in A.load_phases()}
    blk, ph, lay = (ev[:, A.COL[k]] for k in ("block", "phase", "layer"))
    o_s = np.full((int(meta["blocks"]), 28), np.nan)
    m = (ph == pid["s_oproj"]) & (lay < 28)
    for b, L, v in zip(blk[m], lay[m], s[m], strict=True):
        o_s[b, L] = v if np.isnan(o_s[b, L]) else min(o_s[b, L], v)
    gaps = []
    for g in range(int(meta["blocks"]) // 16):
        bl = np.arange(16 * g, 16 * g + 16)
        lo = np.nanmedian(o_s[bl[:8]], axis=0)
        hi = np.nanmedian(o_s[bl[8:]], axis=0)
        gaps.append(np.nanmean(hi - lo) / 1e3)
    print(path, "upper-minus-lower O start per group, us:", " ".join(f"{x:+.2f}" for x in gaps),
          f"| mean {np.mean(gaps):+.3f}")
