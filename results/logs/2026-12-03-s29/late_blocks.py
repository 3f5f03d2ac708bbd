"""Per-block lateness in an X-ray raw trace (twenty-ninth session's reading; a record, not a tool).

For each streaming phase: every block's first start and last end against the median block's, mean
over layers 1..27, and the ten blocks that end it latest. For each hop: every block's time from
thread 0's words (the wait's end) to the end of the s_gather that follows (the phase's opening).

    PYTHONPATH=.. python results/logs/2026-12-03-s29/late_blocks.py RAW.npz
"""
import argparse
import warnings

import numpy as np

from monolith.xray.analyze import COL, align, load_phases
from monolith.xray.raw import load_raw, validate_raw

PHASES = ("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down")
HOPS = ("s_wait_resid", "s_wait_o", "s_wait_act")


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)  # blocks without attention: empty means, by design
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", help="an X-ray raw trace (.raw.npz)")
    args = ap.parse_args()
    meta, ev = validate_raw(*load_raw(args.raw))
    al = align(meta, ev)
    s, e = al["start_ns"], al["end_ns"]
    blk, ph, lay = (ev[:, COL[k]] for k in ("block", "phase", "layer"))
    ids = {p.name: p.id for p in load_phases()}
    nb = int(meta["blocks"])
    layers = range(2, 28)

    def per_block(name: str, layer: int, ends: bool = True, first: bool = False) -> np.ndarray:
        m = (ph == ids[name]) & (lay == layer)
        out = np.full(nb, np.inf if first else -np.inf)
        (np.minimum if first else np.maximum).at(out, blk[m], (e if ends else s)[m])
        return np.where(np.isfinite(out), out, np.nan)

    for name in PHASES:
        st = np.array([per_block(name, L, ends=False, first=True) for L in layers])
        en = np.array([per_block(name, L) for L in layers])
        late = np.nanmean(st - np.nanmedian(st, axis=1, keepdims=True), axis=0) / 1e3
        endl = np.nanmean(en - np.nanmedian(en, axis=1, keepdims=True), axis=0) / 1e3
        top = [int(b) for b in np.argsort(-np.nan_to_num(endl, nan=-1e9))[:10]]
        print(f"{name:8s} latest end (block: late start / late end, us):",
              " ".join(f"{b}:{late[b]:+.2f}/{endl[b]:+.2f}" for b in top))
    gm = ph == ids["s_gather"]
    for name in HOPS:
        rows = []
        for L in layers:
            w = per_block(name, L)
            g = np.full(nb, np.nan)
            for b in range(nb):
                m = gm & (lay == L) & (blk == b) & (e >= w[b])
                if m.any():
                    g[b] = e[m].min()
            rows.append(g - w)
        d = np.nanmedian(np.array(rows), axis=0) / 1e3
        top = [int(b) for b in np.argsort(-np.nan_to_num(d, nan=-1e9))[:10]]
        print(f"{name}: thread 0's words to the opening's end, median {np.nanmedian(d):.2f} us; latest:",
              " ".join(f"{b}:{d[b]:.2f}" for b in top))


if __name__ == "__main__":
    main()
