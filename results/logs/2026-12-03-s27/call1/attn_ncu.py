# ad hoc (s27): stall reasons of the attention body's instructions (schedule_stream.cuh lines A..B
# anywhere in the inline chain), thread-0-only vs. all, and per innermost own line.
import sys, collections
sys.path.insert(0, 'scripts')
import ncu_stalls as n
from pathlib import Path
A, B = int(sys.argv[3]), int(sys.argv[4])
kname, rows = n.read_csv(Path(sys.argv[1]))
lines = n.read_dump(Path(sys.argv[2]), "_ZN8monolith11plain_build11decode_stepILi2EEEvNS_10StepParamsE")
reasons = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
base = int(rows[0]["Address"], 16)
tot = collections.Counter(); one = collections.Counter(); per = collections.defaultdict(collections.Counter)
allsum = 0
for r in rows:
    s = n.num(r[n.SAMPLES]); allsum += s
    off = int(r["Address"], 16) - base
    text, chain = lines.get(off, ("", []))
    own = [(f, l) for f, l in chain if f == "schedule_stream.cuh"]
    if not any(A <= l <= B for f, l in own) or not s:
        continue
    # the outermost line in A..B: the statement of the attention body
    stmt = [l for f, l in own if A <= l <= B][-1]
    o = n.num(r.get("Avg. Threads Executed", "32")) <= 1.5
    for h in reasons:
        v = n.num(r[h]); tot[h[6:]] += v
        if o: one[h[6:]] += v
        per[(stmt, o)][h[6:]] += v
def show(c, name):
    t = sum(c.values())
    print(f"{name}: {t:.0f} samples ({t/allsum:.1%} of all); " + ", ".join(f"{k} {v/t:.0%}" for k, v in c.most_common(6)))
show(tot, "attention body, all"); show(one, "attention body, one-thread")
src = Path("kernel/schedule_stream.cuh").read_text().splitlines()
for (l, o), c in sorted(per.items(), key=lambda kv: -sum(kv[1].values()))[:int(sys.argv[5]) if len(sys.argv) > 5 else 30]:
    t = sum(c.values())
    print(f"{t:6.0f} {'T0' if o else '  '} {l:5d} {src[l-1].strip()[:60]:60s} " + ", ".join(f"{k} {v:.0f}" for k, v in c.most_common(4)))
