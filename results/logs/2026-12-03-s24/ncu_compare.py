"""One-off (twenty-fourth session): two Nsight Compute SASS source pages of the same variant, the
long kernel (A) and the wide kernel forced to the long kernel's splits (B), compared by stall
reason and by site (scripts/ncu_stalls.py's site: the statement of stream_consumer /
stream_producer an instruction was inlined into), in warp samples and executed warp instructions
per block and layer. DUMP: `nvdisasm -gi -c` of a -lineinfo cubin with -DMONOLITH_ATTN_WIDE=3 (it
holds both kernels; FORCE changes host code only) of commit 90546fe, the measured build. Run from the repo root:
  python results/logs/2026-12-03-s24/ncu_compare.py A.sass.csv.gz B.sass.csv.gz DUMP.sass"""
import collections
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
from ncu_stalls import SAMPLES, num, read_csv, read_dump, site_of  # noqa: E402

KERNELS = ("_ZN8monolith11plain_build16decode_step_longILi2EEEvNS_10StepParamsE",
           "_ZN8monolith11plain_build16decode_step_wideILi2EEEvNS_10StepParamsE")
PER = 128 * 28  # blocks x layers
a_csv, b_csv, dump = (Path(x) for x in sys.argv[1:4])
res = []
for path, kernel in zip((a_csv, b_csv), KERNELS, strict=True):
    name, rows = read_csv(path)
    lines = read_dump(dump, kernel)
    base = int(rows[0]["Address"], 16)
    reasons = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
    by_reason, samples, executed, mism = collections.Counter(), collections.Counter(), collections.Counter(), 0
    for r in rows:
        text, chain = lines.get(int(r["Address"], 16) - base, ("", []))
        mism += text.split()[:1] != r["Source"].split()[:1]
        site = site_of(chain)
        for h in reasons:
            by_reason[h[6:]] += num(r[h])
        samples[site] += num(r[SAMPLES])
        executed[site] += num(r["Instructions Executed"])
    print(f"{name}: {len(rows)} instructions ({mism} differ from the dump), {sum(samples.values()):.0f} samples, "
          f"{sum(executed.values()) / PER:.0f} warp instructions per block and layer")
    res.append((by_reason, samples, executed))
(ra, sa, ea), (rb, sb, eb) = res
print("\nstall reason: A B B-A")
for k in sorted(set(ra) | set(rb), key=lambda k: -(rb[k] - ra[k])):
    if ra[k] or rb[k]:
        print(f"  {k:18s} {ra[k]:8.0f} {rb[k]:8.0f} {rb[k] - ra[k]:+8.0f}")
# the statements' text from the measured source (the dump's line numbers are that commit's)
src = subprocess.run(["git", "show", "90546fe:kernel/schedule_stream.cuh"], capture_output=True, text=True,
                     check=True).stdout.splitlines()
print("\nsite: samples A B B-A | warp instructions per block and layer A B")
for s in sorted(set(sa) | set(sb), key=lambda s: -(sb[s] - sa[s]))[:30]:
    n, _, line = s.partition(":")
    txt = src[int(line) - 1].strip()[:50] if n == "schedule_stream.cuh" and line.isdigit() else ""
    print(f"  {s:26s} {sa[s]:7.0f} {sb[s]:7.0f} {sb[s] - sa[s]:+7.0f} | {ea[s] / PER:7.1f} {eb[s] / PER:7.1f}  {txt}")
