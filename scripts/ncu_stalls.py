"""Where a decode step's warps stall, per source statement: Nsight Compute's warp-state samples
(the SASS "source" page, `scripts/gpu.sh ncu`) joined with the line table of the same build.

usage: python scripts/ncu_stalls.py SASS.csv[.gz] --lines DUMP.sass [--json OUT] [--top N] [--within A:B]

SASS.csv: `ncu -i REP --page source --csv --print-source sass` (one kernel). DUMP.sass: the
kernel's SASS with inlined line info from the same source and flags, made here (no GPU needed):
    nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -cubin kernel/megakernel.cu \
         -I kernel -o /tmp/mk.cubin && nvdisasm -gi -c /tmp/mk.cubin > DUMP.sass
The instructions are matched by offset and their text is checked (a dump of another build fails).
Each sample is one warp caught at one instruction, so the shares are of all warps' time; a
"site" is the statement of stream_consumer / stream_producer's body that the instruction was
inlined into (its chain's second-outermost schedule_stream.cuh line). Thread-0-only code shows up
as instructions whose average active threads is 1. Shared-memory bank conflicts: the page's
"L1 Wavefronts Shared" (and Ideal, Excessive) columns, per site.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import re
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
WF_SHARED = "L1 Wavefronts Shared"
LINE = re.compile(r'\s*//## File "([^"]+)", line (\d+)')
INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")
LABEL = re.compile(r"\s*(\.L_x_\d+):")


def read_insns(path: Path, kernel: str) -> list[dict]:
    """The kernel's .text section in order: per instruction its offset, text, inline chain
    (innermost first) and the label on it, if any (scripts/sass_waits.py finds loops by them)."""
    out, chain, pend, inside, label = [], [], [], False, None
    for line in path.read_text().splitlines():
        if line.startswith(".text."):
            inside = line[len(".text."):].rstrip(":") == kernel
            continue
        if not inside:
            continue
        m = LINE.match(line)
        if m:
            pend.append((Path(m.group(1)).name, int(m.group(2))))
            continue
        m = LABEL.match(line)
        if m:
            label = m.group(1)
            continue
        m = INSN.match(line)
        if m:
            if pend:
                chain, pend = pend, []
            out.append({"off": int(m.group(1), 16), "text": m.group(2).rstrip(" ;"), "chain": chain, "label": label})
            label = None
    return out


def read_dump(path: Path, kernel: str) -> dict[int, tuple[str, list[tuple[str, int]]]]:
    """offset -> (instruction text, inline chain innermost first) for the kernel's .text section."""
    return {i["off"]: (i["text"], i["chain"]) for i in read_insns(path, kernel)}


def site_of(chain: list[tuple[str, int]]) -> str:
    """The statement of stream_consumer / stream_producer an instruction was inlined into: the
    chain's second-outermost line outside megakernel.cu (scripts/sass_sites.py counts by it too)."""
    own = [(f, n) for f, n in chain if f != "megakernel.cu"]
    if len(own) >= 2:
        return f"{own[-2][0]}:{own[-2][1]}"
    return f"{own[0][0]}:{own[0][1]}" if own else "?"


def read_csv(path: Path) -> tuple[str, list[dict]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3 or rows[0][0] != "Kernel Name" or "Address" not in rows[1]:
        raise SystemExit(f"{path}: not an ncu SASS source page (expected 'Kernel Name' then an 'Address' header)")
    hdr = rows[1]
    return rows[0][1], [dict(zip(hdr, r, strict=False)) for r in rows[2:]]


def num(v: str) -> float:
    v = (v or "").replace(",", "")
    try:
        return float(v)
    except ValueError:
        return 0.0


def stall_columns(rows: list[dict]) -> list[str]:
    """The source page's per-reason sample columns (their "(Not Issued)" twins left out)."""
    return [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]


def one_thread(r: dict) -> bool:
    """An instruction one thread runs (thread 0's serial work, the producer lane)."""
    return num(r.get("Avg. Threads Executed", "32")) <= 1.5


def summarize(rows: list[dict], lines: dict, top: int = 30, warp_us: float | None = None) -> dict:
    """warp_us: one block's warps x the launch's duration (us); with it each site also gets its
    samples as warp-microseconds per block (`us_per_block`: summed over the block's warps) and
    `one_thread_us_per_block` (instructions one thread runs, e.g. thread 0's serial work that the
    block's other warps wait for: that thread's own time)."""
    reasons = stall_columns(rows)
    base = int(rows[0]["Address"], 16)
    total = sum(num(r[SAMPLES]) for r in rows)
    by_reason = collections.Counter()
    sites: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    thread0 = collections.Counter()
    shared: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    mismatched = 0
    for r in rows:
        s = num(r[SAMPLES])
        off = int(r["Address"], 16) - base
        text, chain = lines.get(off, ("", []))
        if text.split()[:1] != r["Source"].split()[:1]:
            mismatched += 1
        site = site_of(chain)
        if num(r.get(WF_SHARED, "")):  # shared-memory wavefronts (the source page's memory columns)
            c = shared[site]
            c["wavefronts"] += num(r[WF_SHARED])
            c["ideal"] += num(r.get(WF_SHARED + " Ideal", ""))
            c["excessive"] += num(r.get(WF_SHARED + " Excessive", ""))
        if not s:
            continue
        one = one_thread(r)
        for h in reasons:
            v = num(r[h])
            by_reason[h[6:]] += v
            sites[site][h[6:]] += v
            if one:
                thread0[h[6:]] += v
        sites[site]["_samples"] += s
        sites[site]["_one_thread"] += s if one else 0
    if mismatched > len(rows) // 100:
        raise SystemExit(f"{mismatched} of {len(rows)} instructions differ from the dump: not the same build")
    def rank(c):
        return {k: int(v) for k, v in c.most_common() if not k.startswith("_") and v}

    def us(n):  # samples -> us of one warp: samples / (samples per warp-us)
        return round(n * warp_us / total, 3) if warp_us else None
    sh_tot = collections.Counter()
    for c in shared.values():
        sh_tot.update(c)
    return {
        # bank conflicts: wavefronts beyond one per 128 bytes a warp's access needs (the eighth
        # session's report had 22 % excessive, 95 % of it in the bf16 input loads; nobody looked)
        "shared": {**{k: int(v) for k, v in sh_tot.items()},
                   "sites": [{"site": k, **{n: int(v) for n, v in c.items()}}
                             for k, c in sorted(shared.items(), key=lambda kv: -kv[1]["excessive"])
                             if c["excessive"]][:top]},
        "samples": int(total),
        "instructions": len(rows),
        "by_reason": {k: {"samples": int(v), "share": round(v / total, 4)} for k, v in by_reason.most_common() if v},
        "one_thread_samples": int(sum(thread0.values())),
        "sites": [
            {"site": k, "samples": int(c["_samples"]), "share": round(c["_samples"] / total, 4),
             "one_thread_samples": int(c["_one_thread"]), "reasons": dict(list(rank(c).items())[:4]),
             **({"us_per_block": us(c["_samples"]), "one_thread_us_per_block": us(c["_one_thread"])} if warp_us else {})}
            for k, c in sorted(sites.items(), key=lambda kv: -kv[1]["_samples"])[:top]
        ],
    }


def within(rows: list[dict], lines: dict, lo: int, hi: int, source: str = "schedule_stream.cuh", top: int = 30) -> dict:
    """The instructions whose inline chain passes through `source` lines lo..hi (a region of the code,
    e.g. the attention body, whatever function its statements were inlined from): their samples by
    reason, the one-thread instructions' (thread 0's serial work) apart, and per statement (the chain's
    outermost line in lo..hi). Twenty-seventh session: is the attention body's time instruction fetch
    (`no_inst`) on cold code?"""
    reasons = stall_columns(rows)
    base = int(rows[0]["Address"], 16)
    total = sum(num(r[SAMPLES]) for r in rows)
    alls, one = collections.Counter(), collections.Counter()
    stmts: dict[tuple[int, bool], collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        s = num(r[SAMPLES])
        _, chain = lines.get(int(r["Address"], 16) - base, ("", []))
        inside = [n for f, n in chain if f == source and lo <= n <= hi]
        if not s or not inside:
            continue
        o = one_thread(r)
        for c in (alls, one, stmts[(inside[-1], o)]) if o else (alls, stmts[(inside[-1], o)]):
            c["_samples"] += s  # the samples column, as summarize() counts them; the reasons below
            for h in reasons:
                c[h[6:]] += num(r[h])

    def part(c):
        n = c["_samples"]
        why = sum(v for k, v in c.items() if k != "_samples")
        return {"samples": int(n), "share_of_all": round(n / total, 4) if total else 0.0,
                "reasons": {k: round(v / why, 4) for k, v in c.most_common() if v and k != "_samples"} if why else {}}

    return {"lines": [lo, hi], "all": part(alls), "one_thread": part(one),
            "statements": [{"line": n, "one_thread": o, **part(c)}
                           for (n, o), c in sorted(stmts.items(), key=lambda kv: -kv[1]["_samples"])[:top]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", type=Path)
    ap.add_argument("--lines", type=Path, required=True, help="nvdisasm -gi dump of the same build")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument("--top", type=int, default=30, help="sites listed")
    ap.add_argument("--duration-us", type=float, help="the launch's duration (the details page's Duration): "
                    "each site's samples also as warp-microseconds per block, summed over the block's warps "
                    "(a site's share of all samples x warps per block x the duration)")
    ap.add_argument("--warps-per-block", type=int, default=17, help="warps per block (the stream kernel: 16 + 1)")
    ap.add_argument("--source", type=Path, default=Path("kernel/schedule_stream.cuh"),
                    help="the build's copy of schedule_stream.cuh: each site's line text (sites in its "
                    "phase_*.cuh fragments: the files beside it); --within's file")
    ap.add_argument("--within", metavar="A:B", help="also: the samples of every instruction inlined through "
                    "--source's lines A..B (a region such as kernel/phase_attn.cuh's), by reason, thread 0's apart")
    a = ap.parse_args(argv)
    kernel_name, rows = read_csv(a.csv)
    mangled = None
    # decode_step (every position) or decode_step_long (a streaming variant from kLongKernelFrom on)
    m = re.search(r"(decode_step(?:_long)?)<\(int\)(\d+)>", kernel_name)
    if m:
        name = m.group(1)
        mangled = f"_ZN8monolith11plain_build{len(name)}{name}ILi{m.group(2)}EEEvNS_10StepParamsE"
    lines = read_dump(a.lines, mangled or kernel_name)
    if not lines:
        raise SystemExit(f"{a.lines}: no .text section for {mangled or kernel_name}")
    warp_us = a.duration_us * a.warps_per_block if a.duration_us else None  # one block's warp-us
    res = {"kernel": kernel_name, **summarize(rows, lines, a.top, warp_us=warp_us)}
    srcs: dict[str, list[str]] = {}  # a site in another file of the kernel (a phase_*.cuh): read beside --source
    for s in res["sites"]:
        f, n = s["site"].split(":")[0], int(s["site"].split(":")[-1])
        path = a.source if f == a.source.name else a.source.parent / f
        if f not in srcs:
            srcs[f] = path.read_text().splitlines() if path.is_file() else []
        src = srcs[f]
        s["text"] = src[n - 1].strip() if 0 < n <= len(src) else ""
    print(f"{res['kernel']}: {res['samples']} warp samples, {res['instructions']} instructions")
    print("  " + ", ".join(f"{k} {v['share']:.1%}" for k, v in list(res["by_reason"].items())[:8]))
    print(f"  one-thread instructions (thread 0, the producer lane): {res['one_thread_samples'] / res['samples']:.1%}")
    sh = res["shared"]
    if sh.get("wavefronts"):
        print(f"  shared-memory wavefronts {sh['wavefronts']:,} (ideal {sh['ideal']:,}), "
              f"excessive {sh['excessive']:,} = {sh['excessive'] / sh['wavefronts']:.1%} (bank conflicts)")
        for c in sh["sites"][:5]:
            print(f"    {c['excessive']:>12,} excessive of {c['wavefronts']:>12,} at {c['site']}")
    for s in res["sites"]:
        text = s["text"][:60]
        why = ", ".join(f"{k} {v}" for k, v in s["reasons"].items())
        t = f" {s['us_per_block']:8.2f} warp-us/block" if "us_per_block" in s else ""
        print(f"  {s['share']:6.1%}{t} {s['site']:26s} {text:60s} | {why}")
    if a.within:
        lo, _, hi = a.within.partition(":")
        if not (lo.isdigit() and hi.isdigit() and int(lo) <= int(hi)):
            raise SystemExit(f"--within {a.within!r}: expected A:B, two line numbers with A <= B")
        w = res["within"] = within(rows, lines, int(lo), int(hi), a.source.name, a.top)
        for name in ("all", "one_thread"):
            c = w[name]
            print(f"  lines {lo}-{hi}, {name.replace('_', '-')} instructions: {c['samples']} samples "
                  f"({c['share_of_all']:.1%} of all): " + ", ".join(f"{k} {v:.0%}" for k, v in list(c["reasons"].items())[:6]))
        for st in w["statements"]:
            text = src[st["line"] - 1].strip()[:60] if 0 < st["line"] <= len(src) else ""
            print(f"    {st['samples']:6d} {'T0' if st['one_thread'] else '  '} {st['line']:5d} {text:60s} | "
                  + ", ".join(f"{k} {v:.0%}" for k, v in list(st["reasons"].items())[:3]))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
