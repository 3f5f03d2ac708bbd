"""The SASS lock: a hash of every kernel function's machine code, per build and arch, kept in kernel/sass.lock.

scripts/compile_all.py --sass-lock kernel/sass.lock (what `make test-cuda` runs) compiles every kernel
build (each distinct variant flag set, plain and X-ray, for each arch), disassembles each object with
`cuobjdump -sass`, and compares each function's hash and instruction count with the lock; any
difference fails the run and names the function (arch, build, variants, function, old and new
instruction counts). `--relock` rewrites the lock's lines for the archs compiled; a deliberate change
of the machine code is committed with the new lock and the reason in the commit message.

What is hashed, per function: each instruction's text (whitespace collapsed) with its 128-bit encoding,
which carries the scheduling control bits (stall counts, barriers, yield) that the text leaves out.
Left out: instruction addresses and `//` comments (line info), which move when only source lines or
comments do; the `.headerflags` line. Two compiles of the same source give the same hashes. The register count from `ptxas -v` is locked beside it (it sets occupancy but is not in
the SASS text).

This module holds the parsing, the lock file's format and the comparison; it needs neither nvcc nor
cuobjdump (tests/test_sass_lock.py).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HASH_DIGITS = 16  # of sha256's hex digest: 64 bits, far past any chance collision among a few hundred lines
# cuobjdump's SASS listing: "  /*0a30*/  IADD3 R2, R2, 0x1, RZ ;   /* 0x0000000102027810 */" then a line
# holding the encoding's second half "  /* 0x000fca0007ffe0ff */".
_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*/\*\s*(0x[0-9a-fA-F]+)\s*\*/\s*$")
_ENC_ONLY = re.compile(r"^\s*/\*\s*(0x[0-9a-fA-F]+)\s*\*/\s*$")
_ADDR = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")


@dataclass(frozen=True)
class FuncSass:
    """One function's locked facts."""
    count: int  # instructions
    digest: str  # HASH_DIGITS hex digits
    regs: int | None = None  # ptxas's "Used N registers"; None where unknown


@dataclass(frozen=True)
class Key:
    """One line of the lock: (arch, build, variants, function). build is 'plain' or 'xray'; variants is
    'all' when one flag set serves every variant, else the variants that share it, joined by '+'."""
    arch: str
    build: str
    variants: str
    function: str

    def text(self, labels: dict[str, str] | None = None) -> str:
        label = (labels or {}).get(self.function)
        fn = f"{label} ({self.function})" if label else self.function
        return f"{self.arch} {self.build} [{self.variants}] {fn}"


def function_label(mangled: str, variant_ids: dict[int, str]) -> str:
    """A reader's name for a kernel function: its own name and its integer template arguments, an
    argument named by the variant whose launch-time id it is, e.g.
    _ZN8monolith11plain_build16decode_step_longILi5EEEvNS_10StepParamsE -> decode_step_long<nvfp4-stream>.
    '' when the name is not a nested name of this shape (the mangled name then stands alone)."""
    m = re.match(r"_ZN((?:\d+\w+?)+?)(I(?:Li-?\d+E)+E)?E", mangled)
    if not m:
        return ""
    parts, rest = [], m.group(1)
    while rest:
        n = re.match(r"\d+", rest)
        if not n:
            return ""
        k = int(n.group())
        parts.append(rest[n.end():n.end() + k])
        rest = rest[n.end() + k:]
    args = [int(a) for a in re.findall(r"Li(-?\d+)E", m.group(2) or "")]
    names = [variant_ids.get(a, str(a)) for a in args]
    return parts[-1] + (f"<{', '.join(names)}>" if names else "")


def parse_sass(text: str) -> dict[str, tuple[int, str]]:
    """`cuobjdump -sass` output of one object -> {mangled function: (instruction count, digest)}.

    ValueError when the listing has no function or an instruction without its encoding, or when a
    function appears twice (an object built for one arch has each function once)."""
    funcs: dict[str, list[str]] = {}
    cur: list[str] | None = None
    pending: str | None = None  # an instruction line waiting for its encoding's second half
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("//") or s.startswith(".") or set(s) <= {"."}:
            continue  # line info, .headerflags, the "......" function separator
        m = _FUNCTION.match(line)
        if m:
            if pending is not None:
                raise ValueError(f"cuobjdump: an instruction without its second encoding word: {pending!r}")
            if m.group(1) in funcs:
                raise ValueError(f"cuobjdump: function {m.group(1)} listed twice (one arch per object expected)")
            cur = funcs[m.group(1)] = []
            continue
        m = _INSTR.match(line)
        if m:
            if cur is None:
                raise ValueError(f"cuobjdump: an instruction outside any function: {s!r}")
            if pending is not None:
                raise ValueError(f"cuobjdump: an instruction without its second encoding word: {pending!r}")
            pending = " ".join(m.group(2).split()) + " " + m.group(3).lower()
            continue
        m = _ENC_ONLY.match(line)
        if m:
            if pending is None:
                raise ValueError(f"cuobjdump: an encoding word without its instruction: {s!r}")
            cur.append(pending + " " + m.group(1).lower())
            pending = None
            continue
        if _ADDR.match(line):
            raise ValueError(f"cuobjdump: an instruction line without its encoding: {s!r}")
    if pending is not None:
        raise ValueError(f"cuobjdump: an instruction without its second encoding word: {pending!r}")
    if not funcs:
        raise ValueError("cuobjdump: no function in the SASS listing")
    out = {}
    for name, instrs in funcs.items():
        if not instrs:
            raise ValueError(f"cuobjdump: function {name} has no instructions")
        out[name] = (len(instrs), hashlib.sha256("\n".join(instrs).encode()).hexdigest()[:HASH_DIGITS])
    return out


def find_cuobjdump(explicit: str | None = None, nvcc: str | None = None) -> str | None:
    """The cuobjdump to use: `explicit` (or $CUOBJDUMP); else the pinned one of the nvidia-cuda-cuobjdump
    wheel (pyproject's dev extra) in this interpreter's environment; else one beside nvcc; else PATH."""
    explicit = explicit or os.environ.get("CUOBJDUMP")
    if explicit:
        return explicit
    for base in map(Path, sys.path):
        for cand in sorted((base / "nvidia").glob("cu*/bin/cuobjdump")) if base.is_dir() else []:
            if os.access(cand, os.X_OK):
                return str(cand)
    if nvcc:
        resolved = shutil.which(nvcc)
        if resolved:
            for d in {Path(resolved).parent, Path(resolved).resolve().parent}:
                if os.access(d / "cuobjdump", os.X_OK):
                    return str(d / "cuobjdump")
            # /usr/local/bin/nvcc is often a wrapper script: look where it points
            try:
                m = re.search(r"(/\S+)/nvcc\b", Path(resolved).read_text(errors="replace")[:4096])
            except OSError:
                m = None
            if m and os.access(Path(m.group(1)) / "cuobjdump", os.X_OK):
                return str(Path(m.group(1)) / "cuobjdump")
    return shutil.which("cuobjdump")


def disasm_env(cuobjdump: str) -> dict[str, str]:
    """The environment for cuobjdump -sass, which runs nvdisasm: the directory of the cuobjdump used
    (where the pinned nvidia-cuda-nvdisasm wheel puts it) first on PATH."""
    env = dict(os.environ)
    d = Path(cuobjdump).resolve().parent if os.sep in cuobjdump else None
    if d is not None and (d / "nvdisasm").is_file():
        env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
    return env


def find_nvdisasm(cuobjdump: str) -> str | None:
    """The nvdisasm that cuobjdump -sass runs (disasm_env's PATH)."""
    return shutil.which("nvdisasm", path=disasm_env(cuobjdump).get("PATH"))


def tool_version(exe: str) -> str:
    """'V13.5.37'-style version of nvcc or cuobjdump; '?' when it cannot be read."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "?"


def dump_sass(cuobjdump: str, obj: Path) -> dict[str, tuple[int, str]]:
    """parse_sass of `cuobjdump -sass obj`; RuntimeError with cuobjdump's message when it fails."""
    try:
        p = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, timeout=600,
                           env=disasm_env(cuobjdump))
    except FileNotFoundError as e:
        raise RuntimeError(f"cuobjdump not found: {cuobjdump}") from e
    if p.returncode != 0:
        raise RuntimeError(f"cuobjdump -sass {obj.name} failed: {p.stderr.strip()[-2000:]}")
    return parse_sass(p.stdout)


# ---------------------------------------------------------------- the lock file

HEADER = """\
# The machine code of every kernel build: one line per (arch, build, variants, function):
#   arch  build  [variants]  function  instructions  regs  hash  # function<variant>
# build: plain or xray; [variants]: the variants compiled from that flag set ('all': every variant).
# hash: sha256 of the function's SASS (each instruction's text and encoding; no addresses, no line
# info), first {digits} hex digits. Checked by `make test-cuda` (scripts/compile_all.py --sass-lock);
# a deliberate change re-locks with `scripts/compile_all.py --only kernels --sass-lock kernel/sass.lock
# --relock`, committed with its reason. Do not edit by hand.
"""
_LINE = re.compile(r"^(sm_\w+)\s+(plain|xray)\s+\[([^\]\s]+)\]\s+(\S+)\s+(\d+)\s+(\d+|-)\s+([0-9a-f]+)\s*(?:#.*)?$")
_TOOLS = re.compile(r"^#\s*tools:\s*(.*)$")


def format_lock(entries: dict[Key, FuncSass], tools: str = "", labels: dict[str, str] | None = None) -> str:
    """The lock file's text: the header, the tools line, then one sorted line per entry (a function with
    a label gets it as a trailing comment)."""
    lines = [HEADER.format(digits=HASH_DIGITS).rstrip("\n")]
    if tools:
        lines.append(f"# tools: {tools}")
    for k in sorted(entries, key=lambda k: (k.arch, k.build, k.variants, k.function)):
        f = entries[k]
        label = (labels or {}).get(k.function)
        lines.append(f"{k.arch} {k.build} [{k.variants}] {k.function} {f.count} {'-' if f.regs is None else f.regs} "
                     f"{f.digest}" + (f"  # {label}" if label else ""))
    return "\n".join(lines) + "\n"


def parse_lock(text: str, where: str = "sass.lock") -> tuple[dict[Key, FuncSass], str]:
    """format_lock's text -> (entries, tools); ValueError naming the line that does not parse."""
    entries: dict[Key, FuncSass] = {}
    tools = ""
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            m = _TOOLS.match(line)
            if m:
                tools = m.group(1).strip()
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"{where}:{i}: not a lock line: {line!r}")
        k = Key(m.group(1), m.group(2), m.group(3), m.group(4))
        if k in entries:
            raise ValueError(f"{where}:{i}: {k.text()} is listed twice")
        regs = None if m.group(6) == "-" else int(m.group(6))
        entries[k] = FuncSass(int(m.group(5)), m.group(7), regs)
    return entries, tools


def compare(locked: dict[Key, FuncSass], built: dict[Key, FuncSass], archs: set[str] | None = None,
            labels: dict[str, str] | None = None) -> list[str]:
    """One line per difference between the lock and the builds, sorted; [] when they agree. Only the
    lock's lines of `archs` (default: every arch built) are compared, so a run for fewer archs checks
    just those. A register count of None on either side is not compared. A function that is gone and
    one that is new with the same code in the same build are reported as one rename."""
    archs = archs if archs is not None else {k.arch for k in built}
    locked = {k: v for k, v in locked.items() if k.arch in archs}
    gone = {(k.arch, k.build, k.variants, v.digest): k for k, v in locked.items() if k not in built}
    renamed = {}  # new key -> old key
    for k, v in built.items():
        old_k = gone.pop((k.arch, k.build, k.variants, v.digest), None) if k not in locked else None
        if old_k is not None:
            renamed[k] = old_k
    skip = set(renamed.values())
    out = []
    for k in sorted(set(locked) | set(built), key=lambda k: (k.arch, k.build, k.variants, k.function)):
        old, new = locked.get(k), built.get(k)
        if k in skip:
            continue
        if k in renamed:
            out.append(f"renamed  {renamed[k].text(labels)} -> {k.function}: the same {new.count} instructions")
        elif old is None:
            out.append(f"added    {k.text(labels)}: {new.count} instructions (not in the lock)")
        elif new is None:
            out.append(f"removed  {k.text(labels)}: was {old.count} instructions (no longer built)")
        elif old.digest != new.digest:
            same = " (same count, other instructions)" if old.count == new.count else ""
            out.append(f"changed  {k.text(labels)}: {old.count} -> {new.count} instructions{same}, "
                       f"hash {old.digest} -> {new.digest}")
        elif old.regs is not None and new.regs is not None and old.regs != new.regs:
            out.append(f"changed  {k.text(labels)}: registers {old.regs} -> {new.regs} (same instructions)")
    return out


def relocked(locked: dict[Key, FuncSass], built: dict[Key, FuncSass], archs: set[str]) -> dict[Key, FuncSass]:
    """The lock after a relock of `archs`: their lines replaced by the builds', other archs' kept."""
    return {**{k: v for k, v in locked.items() if k.arch not in archs}, **built}
