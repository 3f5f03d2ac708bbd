#!/usr/bin/env python3
"""Compile every CUDA source of the project for every target arch; no GPU needed (`make test-cuda`).

- every probes/*.cu, as an object (`nvcc -c`), for each arch;
- every kernel variant listed in kernel/variants.json, plain and X-ray builds, for each arch.

The flags of a kernel build are monolith.kernel_spec.build_flags(variant) and arch_flags(arch) (per-arch
ptxas flags: sm_120a's register-usage level): the same functions the runtime loader
(monolith.megakernel.load_extension) uses, so CI compiles exactly the
configuration that runs (variants.json's schema is in monolith/kernel_spec.py). Variants with
identical flags compile to the same object, so they are compiled once.

Registers and spills come from `-Xptxas -v`. Prints a table; exits 1 if anything failed to compile,
or if the plain (not X-ray) kernel builds of an arch spill more bytes than `--spill-budget` allows
(the Makefile: sm_90a=0, the measured arch; sm_120a's ratchet at its current bytes, NOTES.md),
or, with `--sass-lock FILE`, if any kernel function's machine code differs from the lock's
(scripts/sass_lock.py: each kernel object is disassembled with cuobjdump as it is built; `--relock`
rewrites the lock instead). Runs at most --jobs nvcc processes at once (CI has 2 cores).
"""
from __future__ import annotations

import argparse
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
if str(REPO) not in sys.path:  # run as a script from anywhere: the monolith package is beside it
    sys.path.insert(0, str(REPO))
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

import sass_lock  # noqa: E402  (scripts/, beside this file)

from monolith import kernel_spec  # noqa: E402
from monolith.console import make_console  # noqa: E402
from monolith.errors import MonolithError  # noqa: E402

DEFAULT_ARCHS = ("sm_90a", "sm_120a")
PROBE_FLAGS = ["-std=c++17", "-O3"]  # probes are standalone; each file's header has its compile line


@dataclass
class Target:
    """One compile: a source with its full nvcc flags (no arch), for every arch."""
    label: str
    source: Path
    flags: list[str] = field(default_factory=list)
    kernel: bool = False  # a kernel build: its arch flags are kernel_spec.arch_flags (the loader's)
    build: str = ""  # kernel builds: "plain" or "xray"
    variants: str = ""  # kernel builds: the variants of this flag set joined by "+", or "all"


@dataclass
class Outcome:
    label: str
    arch: str
    ok: bool
    seconds: float
    kernels: dict[str, dict] = field(default_factory=dict)  # mangled name -> {regs, spill_st, spill_ld, smem}
    log: str = ""
    sass: dict[str, tuple[int, str]] | None = None  # kernel builds with a lock: name -> (instructions, hash)
    build: str = ""
    variants: str = ""


def gencode(arch: str) -> str:
    """kernel_spec.gencode, with a bad arch as ValueError (the command line's error)."""
    try:
        return kernel_spec.gencode(arch)
    except MonolithError as e:
        raise ValueError(str(e)) from e


def load_variants(path: Path, repo: Path = REPO) -> list[Target]:
    """Targets for kernel/variants.json: each distinct flag set, plain and X-ray. [] if absent."""
    path = Path(path)
    if not path.is_file():
        return []
    spec = kernel_spec.load_variants(path)  # ValueError naming the problem
    src, xsrc = kernel_spec.build_sources(spec, repo)
    # variants of a configuration with translation units of its own ("config": the sm_120 one's) are
    # compiled from those, apart; "all" names every variant of the main source
    main = [v for v in spec["variants"] if not v.get("config")]
    groups: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for v in spec["variants"]:
        key = (v.get("config") or "", tuple(kernel_spec.build_flags(v, spec=spec)),
               tuple(kernel_spec.build_flags(v, xray=True, spec=spec)))
        groups.setdefault(key, []).append(v["name"])
    targets = []
    for (config, plain, xray), names in groups.items():
        label = "+".join(names)
        group = "all" if not config and len(names) == len(main) else label
        psrc, pxsrc = kernel_spec.config_sources(config, spec, repo) if config else (src, xsrc or src)
        targets.append(Target(f"kernel {label}", psrc, list(plain), kernel=True, build="plain", variants=group))
        targets.append(Target(f"kernel {label} [xray]", pxsrc, list(xray), kernel=True, build="xray",
                              variants=group))
    return targets


def probe_targets(repo: Path = REPO) -> list[Target]:
    return [Target(f"probe {p.stem}", p, list(PROBE_FLAGS)) for p in sorted((repo / "probes").glob("*.cu"))]


def parse_ptxas(log: str) -> dict[str, dict]:
    """Per-kernel registers / spills / smem from `ptxas -v` (info lines follow 'Compiling entry').

    ptxas also prints 'Function properties' for the out-of-line (__noinline__) device functions an
    entry calls, after the entry's own lines; their spills are added to the entry's (a callee's
    spill is paid whenever it runs), so a callee's clean line can never hide the entry's spills."""
    kernels: dict[str, dict] = {}
    cur = name = props = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
            cur = kernels.setdefault(name, {"regs": None, "spill_st": 0, "spill_ld": 0, "smem": 0})
            props = None
            continue
        if cur is None:
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            st, ld = int(m.group(1)), int(m.group(2))
            if props is None or props == name:
                cur["spill_st"], cur["spill_ld"] = st, ld
            else:  # a callee's
                cur["spill_st"] += st
                cur["spill_ld"] += ld
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            if m2:
                cur["smem"] = int(m2.group(1))
    return kernels


def compile_command(nvcc: str, t: Target, arch: str, obj: Path) -> list[str]:
    arch_flags = kernel_spec.arch_flags(arch) if t.kernel else [gencode(arch)]
    return [nvcc, *t.flags, *arch_flags, "-Xptxas", "-v", "-I", str(REPO / "kernel"), "-c", str(t.source), "-o", str(obj)]


def compile_one(nvcc: str, t: Target, arch: str, outdir: Path, cuobjdump: str | None = None) -> Outcome:
    """Compile one target for one arch; with `cuobjdump`, a kernel build's object is disassembled
    (Outcome.sass) before it is deleted, and a failure to do so fails the build."""
    obj = outdir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{t.label}_{arch}") + ".o")
    cmd = compile_command(nvcc, t, arch, obj)
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
    sass = None
    if ok and t.kernel and cuobjdump:
        try:
            sass = sass_lock.dump_sass(cuobjdump, obj)
        except (RuntimeError, ValueError) as e:
            ok, log = False, f"{e}\n{log}"
    obj.unlink(missing_ok=True)
    return Outcome(t.label, arch, ok, time.monotonic() - t0, parse_ptxas(log) if ok else {}, log, sass,
                   t.build, t.variants)


def parse_budget(text: str) -> dict[str, int]:
    """`sm_90a=0,sm_120a=24` -> {arch: bytes}; ValueError on anything else."""
    out = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        arch, sep, n = part.partition("=")
        if not sep or not n.strip().isdigit():
            raise ValueError(f"bad spill budget {part!r}: expected ARCH=BYTES, e.g. sm_90a=0")
        gencode(arch.strip())
        out[arch.strip()] = int(n)
    return out


def over_budget(outcomes: list[Outcome], budget: dict[str, int]) -> list[tuple[str, int, int]]:
    """(arch, spill-store bytes, budget) of each arch whose plain kernel builds spill past its budget.
    X-ray builds (labels ending in [xray]) are diagnostic and not counted."""
    total: dict[str, int] = {}
    for o in outcomes:
        if o.ok and o.label.startswith("kernel ") and not o.label.endswith("[xray]"):
            total[o.arch] = total.get(o.arch, 0) + sum(k["spill_st"] for k in o.kernels.values())
    return [(arch, total[arch], budget[arch]) for arch in sorted(total) if arch in budget and total[arch] > budget[arch]]


def built_sass(outcomes: list[Outcome]) -> dict[sass_lock.Key, sass_lock.FuncSass]:
    """The lock entries of the kernel builds that were disassembled (regs from ptxas -v)."""
    out = {}
    for o in outcomes:
        for name, (count, digest) in (o.sass or {}).items():
            regs = o.kernels.get(name, {}).get("regs")
            out[sass_lock.Key(o.arch, o.build, o.variants, name)] = sass_lock.FuncSass(count, digest, regs)
    return out


def variant_ids(path: Path) -> dict[int, str]:
    """{launch-time id: variant name} of variants.json (the kernels' template argument); {} if absent."""
    try:
        return {v["id"]: v["name"] for v in kernel_spec.load_variants(path)["variants"] if "id" in v}
    except (OSError, ValueError):
        return {}


def check_lock(console, lock: Path, outcomes: list[Outcome], archs: list[str], relock: bool, tools: str,
               variant_ids: dict[int, str] | None = None) -> bool:
    """Compare the disassembled kernel builds with the lock file (or rewrite it with relock); False on a
    difference, a missing or unreadable lock, or a kernel build that failed (nothing is written then)."""
    from rich.markup import escape

    kernels = [o for o in outcomes if o.label.startswith("kernel ")]
    if any(not o.ok for o in kernels):
        console.print(f"[bold red]SASS lock {escape(str(lock))}: not checked, a kernel build failed[/]")
        return False
    built = built_sass(kernels)
    labels = {k.function: sass_lock.function_label(k.function, variant_ids or {}) for k in built}
    locked, locked_tools = {}, ""
    if lock.is_file():
        try:
            locked, locked_tools = sass_lock.parse_lock(lock.read_text(), str(lock))
            labels |= {k.function: sass_lock.function_label(k.function, variant_ids or {}) for k in locked}
        except ValueError as e:
            console.print(f"[bold red]SASS lock: {escape(str(e))}[/]" + ("" if relock else " (--relock rewrites it)"))
            if not relock:
                return False
    elif not relock:
        console.print(f"[bold red]SASS lock {escape(str(lock))} does not exist[/] (--relock writes it)")
        return False
    if relock:
        lock.write_text(sass_lock.format_lock(sass_lock.relocked(locked, built, set(archs)), tools, labels))
        console.print(f"SASS lock {escape(str(lock))} rewritten: {len(built)} functions for {', '.join(archs)}",
                      highlight=False)
        return True
    diffs = sass_lock.compare(locked, built, set(archs), labels)
    if not diffs:
        console.print(f"[green]SASS lock {escape(str(lock))}: all {len(built)} kernel functions "
                      f"({', '.join(archs)}) match[/]", highlight=False)
        return True
    console.print(f"[bold red]SASS lock {escape(str(lock))}: {len(diffs)} kernel function(s) moved[/]")
    for d in diffs:
        console.print("  " + d, markup=False, highlight=False)
    if locked_tools and locked_tools != tools:
        console.print(f"  (the lock was made with {locked_tools}; this run has {tools}: a tool change alone "
                      "can move it)", markup=False, highlight=False)
    console.print("  a deliberate change re-locks with --relock, and says why in its commit", markup=False,
                  highlight=False)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"), help="nvcc executable")
    ap.add_argument("--arch", default=",".join(DEFAULT_ARCHS), help="comma-separated, e.g. sm_90a,sm_120a")
    ap.add_argument("--jobs", type=int, default=2, help="nvcc processes at once (default 2)")
    ap.add_argument("--variants", type=Path, default=REPO / "kernel" / "variants.json")
    ap.add_argument("--only", choices=["all", "probes", "kernels"], default="all")
    ap.add_argument("--verbose", "-v", action="store_true", help="one row per kernel function")
    ap.add_argument("--spill-budget", default="", metavar="ARCH=BYTES,...",
                    help="fail when the plain kernel builds of an arch spill more bytes (e.g. sm_90a=0)")
    ap.add_argument("--sass-lock", type=Path, metavar="FILE",
                    help="fail when a kernel function's SASS differs from FILE's (e.g. kernel/sass.lock)")
    ap.add_argument("--relock", action="store_true", help="with --sass-lock: rewrite FILE for the archs built")
    ap.add_argument("--cuobjdump", default=None,
                    help="cuobjdump executable (default: $CUOBJDUMP, the pinned nvidia-cuda-cuobjdump, beside nvcc, PATH)")
    a = ap.parse_args(argv)

    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    archs = [x.strip() for x in a.arch.split(",") if x.strip()]
    try:
        budget = parse_budget(a.spill_budget)
        for arch in archs:
            gencode(arch)
        targets = []
        if a.only in ("all", "probes"):
            targets += probe_targets()
        if a.only in ("all", "kernels"):
            targets += load_variants(a.variants)
        if a.relock and not a.sass_lock:
            raise ValueError("--relock needs --sass-lock FILE")
        if a.sass_lock and a.only == "probes":
            raise ValueError("--sass-lock checks the kernel builds: use --only kernels or all")
    except ValueError as e:
        console.print(f"[bold red]error:[/] {e}")
        return 2
    cuobjdump = tools = None
    if a.sass_lock:
        cuobjdump = sass_lock.find_cuobjdump(a.cuobjdump, a.nvcc)
        if cuobjdump is None:
            console.print("[bold red]error:[/] --sass-lock needs cuobjdump: `make install` puts the pinned "
                          "nvidia-cuda-cuobjdump into .venv (or pass --cuobjdump PATH)")
            return 2
        nvdisasm = sass_lock.find_nvdisasm(cuobjdump)
        if nvdisasm is None:
            console.print("[bold red]error:[/] cuobjdump -sass needs nvdisasm: `make install` puts the pinned "
                          "nvidia-cuda-nvdisasm beside the pinned cuobjdump in .venv")
            return 2
        tools = (f"nvcc {sass_lock.tool_version(a.nvcc)}, cuobjdump {sass_lock.tool_version(cuobjdump)}, "
                 f"nvdisasm {sass_lock.tool_version(nvdisasm)}")
        console.print(f"SASS lock {a.sass_lock}: {tools} ({cuobjdump})", highlight=False, markup=False)
    if not targets:
        console.print("nothing to compile")
        return 0
    jobs = [(t, arch) for t in targets for arch in archs]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="monolith-nvcc-") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = [pool.submit(compile_one, a.nvcc, t, arch, Path(tmp), cuobjdump) for t, arch in jobs]
        outcomes = []
        for f in futs:
            o = f.result()
            outcomes.append(o)
            console.print(f"  {'ok  ' if o.ok else 'FAIL'} {o.label} ({o.arch}) {o.seconds:.1f} s", highlight=False,
                          markup=False)

    table = Table(title=f"nvcc compile ({len(jobs)} builds, {time.monotonic() - t0:.0f} s)")
    table.add_column("target", no_wrap=True)
    for col in ("arch", "status", "kernels", "max regs", "spill st/ld B", "s"):
        table.add_column(col, no_wrap=True)
    for o in outcomes:
        regs = [k["regs"] for k in o.kernels.values() if k["regs"] is not None]
        st = sum(k["spill_st"] for k in o.kernels.values())
        ld = sum(k["spill_ld"] for k in o.kernels.values())
        table.add_row(escape(o.label), o.arch, "[green]ok[/]" if o.ok else "[red]FAILED[/]", str(len(o.kernels)),
                      str(max(regs)) if regs else "-", f"{st}/{ld}" if o.ok else "-", f"{o.seconds:.1f}")
        if a.verbose:
            for name, k in sorted(o.kernels.items()):
                table.add_row(escape(f"  {name[:60]}"), "", "", "", str(k["regs"]), f"{k['spill_st']}/{k['spill_ld']}", "")
    console.print(table)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        console.print(f"[bold red]{escape(o.label)} ({o.arch}) failed:[/]\n{escape(o.log[-3000:])}", highlight=False)
    spilled = [o for o in outcomes if o.ok and any(k["spill_st"] or k["spill_ld"] for k in o.kernels.values())]
    if spilled:
        console.print("[yellow]register spills in:[/] " + escape(", ".join(f"{o.label} ({o.arch})" for o in spilled)))
    over = over_budget(outcomes, budget)
    for arch, got, allowed in over:
        console.print(f"[bold red]{arch}: the plain kernels spill {got} B, over the budget of {allowed} B[/]")
    locked_ok = check_lock(console, a.sass_lock, outcomes, archs, a.relock, tools, variant_ids(a.variants)) \
        if a.sass_lock else True
    return 1 if failed or over or not locked_ok else 0


if __name__ == "__main__":
    sys.exit(main())
