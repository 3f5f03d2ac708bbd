#!/usr/bin/env python3
"""Instruction counts per 8 weights of the NVFP4 decode candidates in probes/e2m1_decode.cu, from
the PTX (`nvcc -ptx`) and, when cuobjdump + nvdisasm are found (PATH, or CUOBJDUMP=path with
nvdisasm beside it), from the SASS. No GPU needed.

Each `k_count_<cand>` kernel decodes one u32 (8 weights) and multiply-accumulates it; the counts
below are that kernel minus `k_count_none` (the same loads and store), by class. The block
epilogue of the half2 paths (scale pair cvt, lo + hi, fp32 FMA; once per 32 weights) is counted
from `k_count_epilogue_h2` and reported per 8 weights. Then a throughput bound per SM sub-partition
and clock: one warp instruction issued per cycle, the integer/logic pipe (LOP3, SHF, PRMT, IADD3:
16 lanes) half of that, so cycles per warp-u32 >= max(all, 2 x ALU); TB/s of codes =
128 B / cycles x 4 SMSPs x SMs x clock. Usage:

    python probes/e2m1_count.py [--arch sm_90a] [--sms 132] [--ghz 1.98] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "probes" / "e2m1_decode.cu"
KERNELS = ("none", "trick_f32", "prmt_h2", "trick_h2", "lop3_h2", "lop3_f32", "epilogue_h2")

SASS_ALU = {"LOP3", "SHF", "PRMT", "IADD3", "LEA", "SEL", "ISETP", "MOV", "SGXT", "BMSK", "IABS", "IMNMX"}
SASS_FMA = {"FFMA", "FMUL", "FADD", "HFMA2", "HADD2", "HMUL2", "IMAD", "FSEL"}
SASS_CVT = {"F2F", "F2FP", "I2F", "F2I"}
SASS_SKIP = {"LDG", "STG", "LDC", "ULDC", "S2R", "EXIT", "BRA", "NOP", "LDS", "STS", "S2UR", "CS2R"}


def _ptx_class(op: str) -> str | None:
    base = op.split(".")[0]
    if base in ("ld", "st", "ret", "mov", "cvta"):
        return None
    if base in ("and", "or", "xor", "not", "shl", "shr", "prmt", "lop3", "bfe", "bfi", "shf", "add", "sub") and \
            not any(t in op for t in (".f32", ".f16", ".f64")):
        return "alu"
    if base in ("fma", "mul", "add", "sub") or op.startswith("mad"):
        return "fma"
    if base == "cvt":
        return "cvt"
    return "other"


def ptx_counts(ptx: str) -> dict[str, Counter]:
    out = {}
    # one chunk per entry (inline-asm blocks have their own braces, so split, don't match braces)
    for chunk in re.split(r"\n(?=\.visible \.entry|\.entry)", ptx)[1:]:
        m = re.match(r"(?:\.visible )?\.entry\s+(\S+)\(", chunk)
        if not m:
            continue
        name, body = m.group(1), chunk
        k = next((k for k in KERNELS if f"k_count_{k}P" in name or name.endswith(f"k_count_{k}")), None)
        if k is None:
            continue
        c = Counter()
        for line in body.splitlines():
            line = line.strip()
            line = line.strip("{} \t")   # inline-asm blocks put an instruction after a brace
            if not line or line.startswith(("//", ".", "$", "ret")) or line.endswith(":"):
                continue
            op = line.split()[0]
            if op.startswith("@"):
                op = line.split()[1]
            cls = _ptx_class(op)
            if cls:
                c[cls] += 1
                c["ops:" + op] += 1
        out[k] = c
    return out


def sass_counts(cubin: Path, cuobjdump: str) -> dict[str, Counter]:
    txt = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    out, cur = {}, None
    for line in txt.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = next((k for k in KERNELS if f"k_count_{k}P" in m.group(1)), None)
            if cur:
                out[cur] = Counter()
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)(\.[\w.]+)?", line)
        if not (m and cur):
            continue
        op = m.group(1)
        if op in SASS_SKIP:
            continue
        cls = "alu" if op in SASS_ALU else "fma" if op in SASS_FMA else "cvt" if op in SASS_CVT else "other"
        out[cur][cls] += 1
        out[cur]["ops:" + op + (m.group(2) or "")] += 1
    return out


def per8(counts: dict[str, Counter]) -> dict[str, dict]:
    base = counts["none"]
    epi = counts["epilogue_h2"]
    res = {}
    for k in ("trick_f32", "lop3_f32", "prmt_h2", "trick_h2", "lop3_h2"):
        d = Counter(counts[k])
        d.subtract(base)
        row = {c: d[c] for c in ("alu", "fma", "cvt", "other")}
        if k.endswith("_h2"):  # + the block epilogue, once per 32 weights
            row = {c: row[c] + epi[c] / 4 for c in row}
        else:                  # + cvt of the scale pair and one fp32 FMA per block, per 32 weights
            row = {c: row[c] + {"fma": 2 / 4, "cvt": 3 / 4}.get(c, 0) for c in row}
        row["total"] = sum(row[c] for c in ("alu", "fma", "cvt", "other"))
        row["ops"] = {o[4:]: n for o, n in sorted(d.items()) if o.startswith("ops:") and n}
        res[k] = row
    return res


def predict(row: dict, sms: int, ghz: float) -> float:
    cycles = max(row["total"], 2 * row["alu"])        # per warp per u32 (32 lanes x 4 B = 128 B)
    return 128 / cycles * 4 * sms * ghz * 1e9 / 1e12  # TB/s of codes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--ghz", type=float, default=1.98)
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    cc = a.arch.removeprefix("sm_")
    flags = ["-std=c++17", "-O3", f"-gencode=arch=compute_{cc},code=sm_{cc}", "-I", str(REPO / "kernel")]
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "p.ptx"
        subprocess.run([a.nvcc, *flags[:2], f"-arch={a.arch}", "-I", str(REPO / "kernel"), "-ptx", str(SRC), "-o", str(ptx)],
                       check=True)
        result = {"arch": a.arch, "source": str(SRC.relative_to(REPO)), "ptx": per8(ptx_counts(ptx.read_text()))}
        cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
        if cuobjdump:
            cubin = Path(tmp) / "p.cubin"
            subprocess.run([a.nvcc, *flags, "-cubin", str(SRC), "-o", str(cubin)], check=True)
            env_dir = str(Path(cuobjdump).parent)
            os.environ["PATH"] = env_dir + os.pathsep + os.environ.get("PATH", "")
            result["sass"] = per8(sass_counts(cubin, cuobjdump))
        else:
            result["sass"] = None
    for kind in ("ptx", "sass"):
        if result[kind]:
            for row in result[kind].values():
                row["predicted_tbs_codes"] = round(predict(row, a.sms, a.ghz), 2)
    if a.json:
        print(json.dumps(result, indent=1))
        return 0
    for kind in ("ptx", "sass"):
        if not result[kind]:
            print(f"{kind}: not available (no cuobjdump)")
            continue
        print(f"{kind} ({a.arch}), per 8 weights:  alu  fma  cvt  other  total  -> predicted TB/s of codes "
              f"({a.sms} SMs x {a.ghz} GHz)")
        for k, r in result[kind].items():
            print(f"  {k:10} {r['alu']:5.2f} {r['fma']:5.2f} {r['cvt']:5.2f} {r['other']:5.2f} {r['total']:6.2f}"
                  f"  -> {r['predicted_tbs_codes']:.2f}   {r['ops']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
