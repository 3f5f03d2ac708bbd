"""Loads issued before a wait but consumed before it: where "in flight during the wait" did not hold.

usage: python scripts/sass_waits.py DUMP.sass [--kernel NAME ...] [--json OUT]

DUMP.sass: `nvdisasm -gi -c` of a `-lineinfo` cubin (the command is in scripts/ncu_stalls.py's
docstring). The schedule issues loads whose values do not depend on the token (norm weights,
scales) before each dependency wait, so that their L2 round trip overlaps the wait. That only
holds if no instruction reads (or overwrites) the load's register before the wait's first poll: a
GPU warp stalls at the first instruction that needs a pending load's register. nvcc does not
promise it: a widening shift (bf16 -> fp32) or a pack (two u16 -> one u32) written beside the
load is scheduled beside it, and the warp then begins to poll one L2 round trip late.

What it is worth is measured, not assumed (NOTES.md, fourteenth session): every streaming kernel
had such sites, and moving the shifts and packs after the waits (0 sites left in bf16 / E4M3)
made all three formats 1.1-1.8 % slower, with bitwise the same tokens. So a site is a fact about
the SASS to read beside an X-ray, not a defect to remove blind.

A wait is a run of polls: `LDG.E.64.STRONG.GPU` (ld.relaxed.gpu, the tagged words and counted
words of kernel/schedule_stream.cuh), a new wait when the previous poll is more than GAP
instructions back. For each wait, the global loads (LDG, not .STRONG) in the WINDOW instructions
before its first poll, back to the head of any loop around the wait (code before it ran in an
earlier iteration), whose destination register is read or written before the poll. A load that
is predicated off at run time (NVFP4's next-round scales when a phase is one round) is listed
too: the SASS cannot say. Sites are named like scripts/sass_sites.py's (the schedule
statement). Needs no GPU.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_stalls import read_insns, site_of  # noqa: E402  (a script beside this one, not a package)

# the streaming schedule's kernels of the plain build (bf16 / E4M3 / NVFP4, short and long)
KERNELS = tuple(f"_ZN8monolith11plain_build{n}decode_step{s}ILi{v}EEEvNS_10StepParamsE"
                for v in (2, 4, 5) for n, s in (("11", ""), ("16", "_long")))
POLL = re.compile(r"^(@!?U?P\w+\s+)?LDG\.E\.64\.STRONG\.GPU\b")
LOAD = re.compile(r"^(@!?U?P\w+\s+)?LDG\.(?!.*STRONG)\S*\s+R(\d+)")
BRANCH = re.compile(r"\b(?:BRA|BRX|JMP)\b.*?(\.L_x_\d+|0x[0-9a-f]+)")
REG = re.compile(r"\bR(\d+)(?:\.(64|128))?\b")
GAP, WINDOW, LOOP_MIN = 40, 400, 1000


def regs(operands: str) -> set[int]:
    """Registers an operand list names (R4.64 is R4, R5; .128 four; RZ is none)."""
    out = set()
    for m in REG.finditer(operands):
        n = int(m.group(1))
        out.update(range(n, n + {None: 1, "64": 2, "128": 4}[m.group(2)]))
    return out


def split(text: str) -> tuple[str, str, str]:
    """(opcode, destination operand, source operands) of one instruction, predicate dropped."""
    body = re.sub(r"^@!?U?P\w+\s+", "", text)
    op, _, rest = body.partition(" ")
    dst, _, src = rest.partition(",")
    if op.startswith(("ST", "RED", "BAR", "BRA", "EXIT", "WARPSYNC", "BSYNC", "BSSY", "CALL", "RET")):
        return op, "", rest  # no register destination: every operand is read
    return op, dst, src


def early_uses(ins: list[dict]) -> list[dict]:
    """Per wait: its site, offset and the loads consumed before its first poll."""
    # backward branches (from, to): a loop that spans a wait began at its label
    where = {i["label"]: k for k, i in enumerate(ins) if i["label"]}
    back = []
    for k, i in enumerate(ins):
        m = BRANCH.search(i["text"])
        if m and m.group(1) in where and where[m.group(1)] <= k:
            back.append((k, where[m.group(1)]))
    polls = [k for k, i in enumerate(ins) if POLL.match(i["text"])]
    waits = [k for n, k in enumerate(polls) if n == 0 or k - polls[n - 1] > GAP]
    out = []
    for p in waits:
        lo = max(0, p - WINDOW)
        for j, h in back:
            # a loop around the wait (the layer loop; not the wait's own polling loop, a few dozen
            # instructions): code before its head ran in an earlier iteration
            if h <= p < j and j - h > LOOP_MIN:
                lo = max(lo, h)
        found = []
        for k in range(lo, p):
            m = LOAD.match(ins[k]["text"])
            if not m:
                continue
            op = split(ins[k]["text"])[0]
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            dest = set(range(int(m.group(2)), int(m.group(2)) + width))
            for j in range(k + 1, p):
                op, dst, src = split(ins[j]["text"])
                if regs(src) & dest or (regs(dst) & dest and not op.startswith("LDG")):
                    found.append({"load": f"{ins[k]['off']:04x}", "load_text": ins[k]["text"],
                                  "load_site": site_of(ins[k]["chain"]),
                                  "use": f"{ins[j]['off']:04x}", "use_text": ins[j]["text"]})
                    break
        out.append({"wait": f"{ins[p]['off']:04x}", "site": site_of(ins[p]["chain"]), "early": found})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("dump", type=Path, help="nvdisasm -gi -c output of a -lineinfo cubin")
    ap.add_argument("--kernel", action="append", help="mangled kernel name (repeatable; default: the streaming kernels)")
    ap.add_argument("--json", type=Path, help="write the findings here")
    a = ap.parse_args(argv)
    report = {}
    for k in a.kernel or KERNELS:
        ins = read_insns(a.dump, k)
        if not ins:
            raise SystemExit(f"sass_waits: no .text.{k} in {a.dump} (another build, or not nvdisasm -gi -c?)")
        waits = early_uses(ins)
        report[k] = waits
        n = sum(len(w["early"]) for w in waits)
        print(f"{k}: {len(waits)} waits, {n} loads consumed before their wait")
        for w in waits:
            for e in w["early"]:
                print(f"  wait {w['wait']} ({w['site']}): load {e['load']} ({e['load_site']}) "
                      f"used at {e['use']}: {e['use_text'][:60]}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
