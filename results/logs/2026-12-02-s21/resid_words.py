"""One-off (twenty-first session): the residual hop (down -> qkv) and the activations' hop
(MLP -> down) of a MONOLITH_XRAY_SUB=1 raw X-ray, split at the last warp's words (x_words): per layer
1-27, the median over blocks (us) of [thread 0's words -> the last warp's words] and [the last warp's
words -> the s_gather end (the first barrier passed)]; medians over layers. Run from the repo root
with PYTHONPATH=.. (reuses the twentieth session's helpers)."""
import sys

import numpy as np

from monolith.xray import analyze as A
from monolith.xray.raw import load_raw


def first_in(ph, lay, blk, s, e, pid_, L, nb, lo, hi):
    """(start, end) of the first event of phase pid_ at layer L in each block with lo-1 <= start <= hi+1."""
    m = (ph == pid_) & (lay == L)
    st_, en_ = np.full(nb, np.nan), np.full(nb, np.nan)
    for b, a, z in zip(blk[m], s[m], e[m], strict=True):
        if lo[b] - 1 <= a <= hi[b] + 1 and (np.isnan(st_[b]) or a < st_[b]):
            st_[b], en_[b] = a, z
    return st_, en_


def ends(ph, lay, blk, e, pid_, L, nb):
    m = (ph == pid_) & (lay == L)
    out = np.full(nb, np.nan)
    for b, z in zip(blk[m], e[m], strict=True):
        out[b] = z if np.isnan(out[b]) else max(out[b], z)
    return out


for path in sys.argv[1:]:
    meta, ev = A.validate_raw(*load_raw(path))
    al = A.align(meta, ev)
    s, e = al["start_ns"], al["end_ns"]
    pid = {p.name: p.id for p in A.load_phases()}
    blk, ph, lay = (ev[:, A.COL[k]] for k in ("block", "phase", "layer"))
    nb = int(meta["blocks"])
    out = {"resid": [], "act": []}
    for L in range(1, 28):
        for hop, wait, prod, prodL in (("resid", "s_wait_resid", "s_down", L - 1), ("act", "s_wait_act", "s_mlp", L)):
            pend = np.nanmax(ends(ph, lay, blk, e, pid[prod], prodL, nb))
            w = ends(ph, lay, blk, e, pid[wait], L, nb)
            gs, ge = first_in(ph, lay, blk, s, e, pid["s_gather"], L, nb, w, w)
            xs, xe = first_in(ph, lay, blk, s, e, pid["x_words"], L, nb, w, ge)
            xe = np.where(np.isnan(xe), w, xe)  # no cut: the last warp's words came with thread 0's
            out[hop].append([np.nanmedian(w - pend), np.nanmedian(xe - w), np.nanmedian(ge - xe),
                             np.nanmax(xe - w), np.nanmax(ge - pend)])
    print(path)
    for hop, rows in out.items():
        r = np.median(np.array(rows), axis=0) / 1e3
        print(f"  {hop:5s}: producers' end -> thread 0's words {r[0]:.2f} | -> last warp's words +{r[1]:.2f} "
              f"(max block {r[3]:.2f}) | -> barrier passed +{r[2]:.2f} | total, last block {r[4]:.2f} us")
