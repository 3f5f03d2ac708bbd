"""Per-block attention work (X-ray phase s_attn), median over layers 1-27, by the block's index in
its KV group (128 blocks: block b is index b % 16 of group b // 16), in µs at the trace's SM clock.
Usage: python attn_blocks.py RAW.npz [RAW.npz ...]   (twenty-third session)"""
import json
import sys

import numpy as np

for f in sys.argv[1:]:
    d = np.load(f, allow_pickle=True)
    meta = json.loads(str(d["meta_json"]))
    ghz = meta["sm_clock_mhz"] / 1000.0
    m = (d["phase"] == 18) & (d["layer"] >= 1) & (d["layer"] < 28)  # 18: s_attn (kernel/xray_phases.def)
    gi = d["block"][m] % 16
    dur = d["c_dur"][m] / ghz / 1000.0
    row = [np.median(dur[gi == i]) if np.any(gi == i) else float("nan") for i in range(16)]
    print(f"{f}\n  " + " ".join(f"{x:4.2f}" for x in row))
