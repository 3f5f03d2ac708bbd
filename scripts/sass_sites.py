"""How much SASS each statement of the schedule compiles to, for one build or two side by side.

usage: python scripts/sass_sites.py DUMP.sass [--compare B.sass] [--kernel NAME] [--top N] [--json OUT]

DUMP.sass: `nvdisasm -gi -c` of a `-lineinfo` cubin (the command is in scripts/ncu_stalls.py's
docstring; add -DNAME=V for a knob build). A "site" is the same as ncu_stalls.py's: the statement of
stream_consumer / stream_producer that an instruction was inlined into. Why (NOTES.md, tenth
session): code that never runs in a token cost this kernel 4-8 % when it was added; with
Nsight Compute's `no_inst` samples per site, this says where the code mass sits, and with
--compare, where a knob added it. Needs no GPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_stalls import read_dump, site_of  # noqa: E402  (a script beside this one, not a package)

KERNEL = "_ZN8monolith11plain_build11decode_stepILi2EEEvNS_10StepParamsE"  # bf16-stream
KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernel"


def statement(site: str) -> str:
    """The site's source line, trimmed (this checkout's kernel/: the dump must be of it)."""
    name, _, line = site.partition(":")
    try:
        return (KERNEL_DIR / name).read_text().splitlines()[int(line) - 1].strip()[:70]
    except (OSError, ValueError, IndexError):
        return ""


def sites(dump: Path, kernel: str) -> collections.Counter:
    lines = read_dump(dump, kernel)
    if not lines:
        raise SystemExit(f"{dump}: no .text.{kernel} section (another kernel? pass --kernel)")
    return collections.Counter(site_of(chain) for _, chain in lines.values())


def table(a: collections.Counter, b: collections.Counter | None, top: int) -> list[dict]:
    keys = set(a) | set(b or {})
    if b is None:
        order = sorted(keys, key=lambda k: -a[k])
        return [{"site": k, "statement": statement(k), "instructions": a[k]} for k in order[:top]]
    order = sorted(keys, key=lambda k: (-abs(b[k] - a[k]), -a[k]))
    return [{"site": k, "statement": statement(k), "a": a[k], "b": b[k], "delta": b[k] - a[k]} for k in order[:top]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", type=Path, help="nvdisasm -gi -c dump of a -lineinfo build")
    ap.add_argument("--compare", type=Path, help="a second dump: per-site differences B - A")
    ap.add_argument("--kernel", default=KERNEL, help="mangled kernel name (default: bf16-stream's)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, help="write the table here too")
    args = ap.parse_args(argv)
    a = sites(args.dump, args.kernel)
    b = sites(args.compare, args.kernel) if args.compare else None
    rows = table(a, b, args.top)
    doc = {"kernel": args.kernel, "instructions_a": sum(a.values()),
           **({"instructions_b": sum(b.values())} if b is not None else {}), "sites": rows}
    print(f"{args.kernel}: {doc['instructions_a']:,} instructions"
          + (f" -> {doc['instructions_b']:,}" if b is not None else ""))
    for r in rows:
        if b is None:
            print(f"{r['instructions']:7,}  {r['site']:<26} {r['statement']}")
        else:
            print(f"{r['a']:7,} {r['b']:7,} {r['delta']:+7,}  {r['site']:<26} {r['statement']}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
