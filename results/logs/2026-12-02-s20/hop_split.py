"""One-off (twentieth session): the residual hop (down -> qkv) against the activations' hop
(MLP -> down), per raw X-ray, median over layers 1-27 of the median (and max) over blocks, in us
after the producers' last end: thread 0's words (the wait's end), every thread's words in and the
block's first barrier passed (the s_gather that follows), and that s_gather alone. Run from the
repo root with PYTHONPATH=.."""
import sys

import numpy as np

from monolith.xray import analyze as A
from monolith.xray.raw import load_raw


def per_block(ph, lay, blk, arr, phase_id, L, nb, agg):
    m = (ph == phase_id) & (lay == L)
    out = np.full(nb, np.nan)
    for b, v in zip(blk[m], arr[m], strict=True):
        out[b] = v if np.isnan(out[b]) else agg(out[b], v)
    return out


def gather_after(ph, lay, blk, s, e, gid, L, nb, after):
    """End of the first s_gather of layer L that starts at or after `after` in each block."""
    m = (ph == gid) & (lay == L)
    out = np.full(nb, np.nan)
    for b, st, en in zip(blk[m], s[m], e[m], strict=True):
        if st >= after[b] - 1 and (np.isnan(out[b]) or en < out[b]):
            out[b] = en
    return out


for path in sys.argv[1:]:
    meta, ev = A.validate_raw(*load_raw(path))
    al = A.align(meta, ev)
    s, e = al["start_ns"], al["end_ns"]
    pid = {p.name: p.id for p in A.load_phases()}
    blk, ph, lay = (ev[:, A.COL[k]] for k in ("block", "phase", "layer"))
    nb = int(meta["blocks"])
    rows = []
    for L in range(1, 28):
        pend = np.nanmax(per_block(ph, lay, blk, e, pid["s_down"], L - 1, nb, max))
        w = per_block(ph, lay, blk, e, pid["s_wait_resid"], L, nb, max)
        g = gather_after(ph, lay, blk, s, e, pid["s_gather"], L, nb, w)
        aend = np.nanmax(per_block(ph, lay, blk, e, pid["s_mlp"], L, nb, max))
        aw = per_block(ph, lay, blk, e, pid["s_wait_act"], L, nb, max)
        ag = gather_after(ph, lay, blk, s, e, pid["s_gather"], L, nb, aw)
        rows.append([np.median(w - pend), np.max(w - pend), np.median(g - pend), np.max(g - pend), np.median(g - w),
                     np.median(aw - aend), np.max(aw - aend), np.median(ag - aend), np.max(ag - aend), np.median(ag - aw)])
    r = [f"{x:.2f}" for x in np.median(np.array(rows), axis=0) / 1e3]
    print(path, f"| residual hop: thread 0's words {r[0]} (max {r[1]}), all in + barrier {r[2]} (max {r[3]}), "
          f"s_gather {r[4]} | act hop: thread 0's words {r[5]} (max {r[6]}), all in + barrier {r[7]} (max {r[8]}), "
          f"s_gather {r[9]}")
