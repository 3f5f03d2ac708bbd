#!/usr/bin/env python3
"""Compile every CUDA source of the project for every target arch; no GPU needed (`make test-cuda`).

- every probes/*.cu, as an object (`nvcc -c`), for each arch;
- every kernel variant listed in kernel/variants.json, plain and X-ray builds, for each arch.

variants.json (lead-owned):
  {"source": "kernel/megakernel.cu",
   "xray_source": "kernel/megakernel_xray.cu",        # optional; else source + -DMONOLITH_XRAY
   "extra_flags": ["-std=c++17", "-O3"],
   "variants": [{"name": "bf16-upstream", "defines": ["MONOLITH_VARIANT=0"]}, ...]}
Variants with identical defines compile to the same object, so they are compiled once.

Registers and spills come from `-Xptxas -v`. Prints a table; exits 1 if anything failed to compile.
Runs at most --jobs nvcc processes at once (CI has 2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ARCHS = ("sm_90a", "sm_120a")
BASE_FLAGS = ["-std=c++17", "-O3"]


@dataclass
class Target:
    """One compile: a source with defines, for every arch."""
    label: str
    source: Path
    defines: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    label: str
    arch: str
    ok: bool
    seconds: float
    kernels: dict[str, dict] = field(default_factory=dict)  # mangled name -> {regs, spill_st, spill_ld, smem}
    log: str = ""


def gencode(arch: str) -> str:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"bad arch {arch!r}: expected e.g. sm_90a or sm_120a")
    cc = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{cc},code=sm_{cc}"


def load_variants(path: Path, repo: Path = REPO) -> list[Target]:
    """Targets for kernel/variants.json: each distinct define set, plain and X-ray. [] if absent."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(spec, dict) or "source" not in spec or "variants" not in spec:
        raise ValueError(f"{path}: needs 'source' and 'variants'")
    src = repo / spec["source"]
    xsrc = repo / spec["xray_source"] if spec.get("xray_source") else None
    extra = spec.get("extra_flags", [])
    if not isinstance(extra, list) or not all(isinstance(f, str) for f in extra):
        raise ValueError(f"{path}: 'extra_flags' must be a list of strings")
    variants = spec["variants"]
    if not isinstance(variants, list) or not variants:
        raise ValueError(f"{path}: 'variants' must be a non-empty list")
    groups: dict[tuple[str, ...], list[str]] = {}
    for i, v in enumerate(variants):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise ValueError(f"{path}: variant #{i} needs a 'name'")
        defs = v.get("defines", [])
        if not isinstance(defs, list) or not all(isinstance(d, str) and d and not d.startswith("-") for d in defs):
            raise ValueError(f"{path}: variant {v['name']!r}: 'defines' must be a list like [\"NAME=1\"]")
        groups.setdefault(tuple(defs), []).append(v["name"])
    targets = []
    for defs, names in groups.items():
        label = "+".join(names)
        targets.append(Target(f"kernel {label}", src, list(defs), list(extra)))
        if xsrc is not None:
            targets.append(Target(f"kernel {label} [xray]", xsrc, list(defs), list(extra)))
        else:
            targets.append(Target(f"kernel {label} [xray]", src, [*defs, "MONOLITH_XRAY"], list(extra)))
    return targets


def probe_targets(repo: Path = REPO) -> list[Target]:
    return [Target(f"probe {p.stem}", p) for p in sorted((repo / "probes").glob("*.cu"))]


def parse_ptxas(log: str) -> dict[str, dict]:
    """Per-kernel registers / spills / smem from `ptxas -v` (info lines follow 'Compiling entry')."""
    kernels: dict[str, dict] = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = kernels.setdefault(m.group(1), {"regs": None, "spill_st": 0, "spill_ld": 0, "smem": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["spill_st"], cur["spill_ld"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            if m2:
                cur["smem"] = int(m2.group(1))
    return kernels


def compile_one(nvcc: str, t: Target, arch: str, outdir: Path) -> Outcome:
    flags = t.flags or BASE_FLAGS
    obj = outdir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{t.label}_{arch}") + ".o")
    cmd = [nvcc, *flags, gencode(arch), "-Xptxas", "-v", "-I", str(REPO / "kernel"),
           *[f"-D{d}" for d in t.defines], "-c", str(t.source), "-o", str(obj)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
        ok, log = p.returncode == 0, p.stderr + p.stdout
    except FileNotFoundError:
        ok, log = False, f"nvcc not found: {nvcc}"
    except subprocess.TimeoutExpired:
        ok, log = False, "nvcc timed out after 900 s"
    if not ok:
        log = " ".join(cmd) + "\n" + log
    return Outcome(t.label, arch, ok, time.monotonic() - t0, parse_ptxas(log) if ok else {}, log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"), help="nvcc executable")
    ap.add_argument("--arch", default=",".join(DEFAULT_ARCHS), help="comma-separated, e.g. sm_90a,sm_120a")
    ap.add_argument("--jobs", type=int, default=2, help="nvcc processes at once (default 2)")
    ap.add_argument("--variants", type=Path, default=REPO / "kernel" / "variants.json")
    ap.add_argument("--only", choices=["all", "probes", "kernels"], default="all")
    ap.add_argument("--verbose", "-v", action="store_true", help="one row per kernel function")
    a = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console()
    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    try:
        for arch in archs:
            gencode(arch)
        targets = []
        if a.only in ("all", "probes"):
            targets += probe_targets()
        if a.only in ("all", "kernels"):
            targets += load_variants(a.variants)
    except ValueError as e:
        console.print(f"[bold red]error:[/] {e}")
        return 2
    if not targets:
        console.print("nothing to compile")
        return 0
    jobs = [(t, arch) for t in targets for arch in archs]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="monolith-nvcc-") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = [pool.submit(compile_one, a.nvcc, t, arch, Path(tmp)) for t, arch in jobs]
        outcomes = []
        for f in futs:
            o = f.result()
            outcomes.append(o)
            console.print(f"  {'ok  ' if o.ok else 'FAIL'} {o.label} ({o.arch}) {o.seconds:.1f} s", highlight=False)

    table = Table(title=f"nvcc compile ({len(jobs)} builds, {time.monotonic() - t0:.0f} s)")
    table.add_column("target", no_wrap=True)
    for col in ("arch", "status", "kernels", "max regs", "spill st/ld B", "s"):
        table.add_column(col, no_wrap=True)
    for o in outcomes:
        regs = [k["regs"] for k in o.kernels.values() if k["regs"] is not None]
        st = sum(k["spill_st"] for k in o.kernels.values())
        ld = sum(k["spill_ld"] for k in o.kernels.values())
        table.add_row(o.label, o.arch, "[green]ok[/]" if o.ok else "[red]FAILED[/]", str(len(o.kernels)),
                      str(max(regs)) if regs else "-", f"{st}/{ld}" if o.ok else "-", f"{o.seconds:.1f}")
        if a.verbose:
            for name, k in sorted(o.kernels.items()):
                table.add_row(f"  {name[:60]}", "", "", "", str(k["regs"]), f"{k['spill_st']}/{k['spill_ld']}", "")
    console.print(table)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        console.print(f"[bold red]{o.label} ({o.arch}) failed:[/]\n{o.log[-3000:]}", highlight=False)
    spilled = [o for o in outcomes if o.ok and any(k["spill_st"] or k["spill_ld"] for k in o.kernels.values())]
    if spilled:
        console.print("[yellow]register spills in:[/] " + ", ".join(f"{o.label} ({o.arch})" for o in spilled))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
