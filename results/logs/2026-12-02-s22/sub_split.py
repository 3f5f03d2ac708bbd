"""One-off (twenty-first session; copied for the twenty-second): thread 0's timeline of each phase opening in a MONOLITH_XRAY_SUB=2
raw X-ray (x_prenorm, x_slots, the s_gather rest, x_open) and of the attention split in a SUB=3 one
(x_att_*), medians over blocks and layers 1-27, us. Each sub-interval is labelled by the wait that
precedes it in the block's own sequence. Run from the repo root with PYTHONPATH=.."""
import sys
from collections import defaultdict

import numpy as np

from monolith.xray import analyze as A
from monolith.xray.raw import load_raw

WAITS = {"s_wait_resid": "qkv", "s_wait_o": "MLP", "s_wait_act": "down", "s_wait_qkv": "attn", "s_wait_attn": "O"}
for path in sys.argv[1:]:
    meta, ev = A.validate_raw(*load_raw(path))
    al = A.align(meta, ev)
    s, e = al["start_ns"], al["end_ns"]
    name = {p.id: p.name for p in A.load_phases()}
    blk, ph, lay = (ev[:, A.COL[k]] for k in ("block", "phase", "layer"))
    got = defaultdict(list)
    for b in np.unique(blk):
        for L in range(1, 28):
            idx = np.where((blk == b) & (lay == L))[0]
            idx = idx[np.argsort(s[idx], kind="stable")]
            where, seen = None, set()
            for i in idx:
                n = name[int(ph[i])]
                if n in WAITS:
                    where, seen = WAITS[n], set()
                    got[(where, n)].append(e[i] - s[i])
                elif where and (n.startswith("x_") or n == "s_gather") and n not in seen:
                    seen.add(n)  # the phase's first round only
                    got[(where, n)].append(e[i] - s[i])
                elif n.startswith("s_") and n not in WAITS and n != "s_gather":
                    where = None
    print(path)
    for where in ("qkv", "attn", "O", "MLP", "down"):
        parts = [(n, np.median(v) / 1e3, len(v)) for (w, n), v in got.items() if w == where]
        if parts:
            print(f"  {where:5s} " + " | ".join(f"{n} {m:.2f}" for n, m, _ in parts))
