"""M0 probe runner: build every probe for the GPU present, run it, collect its JSON, record the
environment, write results/m0_probes.json (+ a Markdown summary beside it).

    python -m monolith.probes.run [--out results/m0_probes.json] [--only cvt,timers] [--quick]

Each probe (probes/<name>.cu) is a standalone program that prints one JSON object on stdout with
`--json` (human-readable lines go to stderr). A probe that fails to build, crashes, times out or
prints no JSON is recorded as failed with the reason and its output tail; the other probes still
run. Exit status: 0 when every probe reported ok, 1 otherwise; no GPU is a MonolithError.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from monolith.errors import MonolithError

PROBE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROBE_DIR.parent
DEFAULT_OUT = REPO_ROOT / "results" / "m0_probes.json"
SCHEMA = "monolith-probes/1"

# (name, extra args, timeout s). Order: fast correctness checks first, the long sweep last.
PROBES: list[tuple[str, list[str], int]] = [
    ("cvt", [], 120),
    ("timers", [], 120),
    ("barrier", [], 180),
    ("bandwidth", [], 300),
]
QUICK_ARGS = {"bandwidth": ["--quick", "--reps", "3"], "barrier": ["--barriers", "500", "--reps", "3"],
              "timers": ["--rounds", "50"], "cvt": ["--reps", "3"]}


# ----------------------------------------------------------------------------------------------
# GPU detection
# ----------------------------------------------------------------------------------------------

def arch_for_cc(major: int, minor: int) -> str:
    """The nvcc target for a compute capability: arch-specific (`a`) where we use such features."""
    if major == 9 and minor == 0:
        return "sm_90a"
    if major == 12:
        return "sm_120a"
    if major == 10 and minor == 0:
        return "sm_100a"
    return f"sm_{major}{minor}"


def gencode(arch: str) -> str:
    cc = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{cc},code=sm_{cc}"


def _smi_gpus() -> list[tuple[str, str]]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and re.fullmatch(r"\d+\.\d+", parts[-1]):
            gpus.append((",".join(parts[:-1]), parts[-1]))
    return gpus


def detect_gpu() -> dict:
    """{"name", "cc", "arch"} of device 0, from torch if it sees a GPU, else nvidia-smi."""
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return {"name": torch.cuda.get_device_name(0), "cc": f"{major}.{minor}",
                    "arch": arch_for_cc(major, minor), "source": "torch"}
    except ImportError:
        pass
    gpus = _smi_gpus()
    if gpus:
        name, cc = gpus[0]
        major, minor = (int(x) for x in cc.split("."))
        return {"name": name, "cc": cc, "arch": arch_for_cc(major, minor), "source": "nvidia-smi"}
    raise MonolithError(
        "no CUDA GPU found (torch.cuda.is_available() is False and nvidia-smi lists no GPU). "
        "The M0 probes measure the GPU itself: run `monolith probe` on the GPU machine. "
        "To only check that the probes compile here, run `python scripts/compile_all.py`.")


# ----------------------------------------------------------------------------------------------
# Build, run, parse
# ----------------------------------------------------------------------------------------------

def nvcc_version(nvcc: str) -> str | None:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return m.group(2) if m else (out.strip().splitlines()[-1] if out.strip() else None)


def build_probe(name: str, arch: str, nvcc: str, build_dir: Path) -> tuple[Path, str]:
    """Compile probes/<name>.cu; returns (binary, ptxas log). Raises RuntimeError with the log."""
    src = PROBE_DIR / f"{name}.cu"
    build_dir.mkdir(parents=True, exist_ok=True)
    exe = build_dir / f"{name}_{arch}"
    cmd = [nvcc, "-std=c++17", "-O3", gencode(arch), "-Xptxas", "-v", "-o", str(exe), str(src)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as e:
        raise RuntimeError(f"nvcc not found: {nvcc}") from e
    if p.returncode != 0:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{p.stderr[-4000:]}")
    return exe, p.stderr


def parse_probe_output(stdout: str) -> dict:
    """The probe's JSON object: the last stdout line that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError("probe printed no JSON object on stdout")


def run_probe(exe: Path, args: list[str], timeout: int) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run([str(exe), "--json", *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"ok": False, "status": "timeout", "reason": f"no result within {timeout} s (killed)",
                "stderr_tail": (e.stderr or b"")[-2000:].decode(errors="replace") if isinstance(e.stderr, bytes)
                else str(e.stderr or "")[-2000:]}
    wall = time.monotonic() - t0
    try:
        res = parse_probe_output(p.stdout)
    except ValueError as e:
        return {"ok": False, "status": "failed", "reason": f"{e} (exit {p.returncode})",
                "stdout_tail": p.stdout[-2000:], "stderr_tail": p.stderr[-2000:], "wall_s": round(wall, 2)}
    res.setdefault("ok", p.returncode == 0)
    res["exit_code"] = p.returncode
    res["status"] = "ok" if res["ok"] and p.returncode == 0 else "failed"
    res["wall_s"] = round(wall, 2)
    if p.stderr.strip():
        res["stderr_tail"] = p.stderr[-1500:]
    return res


def run_ncu_check(exe: Path | None, arch: str) -> dict:
    script = PROBE_DIR / "ncu_check.sh"
    cmd = ["bash", str(script)] + ([str(exe)] if exe else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "ARCH": arch})
        return parse_probe_output(p.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return {"probe": "ncu", "ok": True, "status": "check failed", "counters_available": False, "detail": str(e)}


# ----------------------------------------------------------------------------------------------
# Environment and summary
# ----------------------------------------------------------------------------------------------

def collect_env(gpu: dict, nvcc: str) -> dict:
    env: dict = {}
    try:
        from monolith import envinfo  # harness area: one environment record for every result
        env = envinfo.collect()
    except Exception as e:  # noqa: BLE001 - a missing/odd env module must not sink the probes
        env = {"env_error": f"{type(e).__name__}: {e}"}
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                 "power.limit,temperature.gpu", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            if out:
                keys = ["gpu", "driver", "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "power_limit_w",
                        "temperature_c"]
                env.update(dict(zip(keys, [v.strip() for v in out[0].split(",")], strict=False)))
        except (OSError, subprocess.SubprocessError):
            pass
    env.setdefault("gpu", gpu["name"])
    env["capability"] = gpu["cc"]
    env["arch"] = gpu["arch"]
    env["nvcc"] = nvcc_version(nvcc)
    return env


def summarize(probes: dict) -> dict:
    """The handful of numbers NOTES.md and the kernel design quote."""
    s: dict = {}
    bw = probes.get("bandwidth", {})
    if bw.get("best"):
        s["bandwidth_best_tbs"] = {k: (v or {}).get("stream_tbs") for k, v in bw["best"].items()}
        s["bandwidth_best_config"] = {
            k: (f"{v['pattern']} {v['blocks']}x{v['threads']} loads {v['loads']}" if v else None)
            for k, v in bw["best"].items()}
        s["bandwidth_one_block_per_sm_tbs"] = {k: (v or {}).get("stream_tbs")
                                               for k, v in bw.get("best_one_block_per_sm", {}).items()}
        s["single_launch_us_one_block_per_sm"] = {k: (v or {}).get("single_us")
                                                  for k, v in bw.get("best_one_block_per_sm", {}).items()}
    br = probes.get("barrier", {})
    rows = [r for r in br.get("results", []) if r.get("status") == "ok"]
    if rows:
        s["barrier_us"] = {str(r["blocks"]): r["us_per_barrier"] for r in rows}
        sm = br.get("sm_count")
        at_sm = [r for r in rows if r["blocks"] == sm]
        if at_sm:
            s["barrier_us_one_block_per_sm"] = at_sm[0]["us_per_barrier"]
    tm = probes.get("timers", {})
    if tm.get("globaltimer"):
        s["globaltimer_tick_ns"] = tm["globaltimer"].get("min_delta_ns")
        s["clock64_ghz"] = tm.get("clock64", {}).get("cycles_per_ns_median")
        s["cross_sm_spread_ns"] = tm.get("cross_sm", {}).get("globaltimer_spread_ns_median")
    cv = probes.get("cvt", {})
    if "e4m3" in cv:
        s["cvt_ok"] = bool(cv.get("ok"))
        s["e2m1_path"] = cv.get("e2m1", {}).get("path")
        s["decode_weight_tbs"] = {k: v.get("weight_tbs") for k, v in cv.get("throughput", {}).items()
                                  if isinstance(v, dict)}
    nc = probes.get("ncu", {})
    if nc:
        s["ncu_counters"] = nc.get("counters_available")
    return s


def markdown(result: dict) -> str:
    env, s = result["env"], result["summary"]
    lines = [f"# M0 probes — {env.get('gpu')}", "",
             f"Created {result['created']}; driver {env.get('driver')}, nvcc {env.get('nvcc')}, "
             f"arch {env.get('arch')}, SM clock {env.get('sm_clock_mhz')} MHz, "
             f"temperature {env.get('temperature_c')} C.", "",
             "| probe | status | wall s |", "|---|---|---|"]
    for name, r in result["probes"].items():
        lines.append(f"| {name} | {r.get('status', 'ok' if r.get('ok') else 'failed')} | {r.get('wall_s', '')} |")
    lines += ["", "## Summary", "", "```json", json.dumps(s, indent=2), "```", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------

def run_all(out: Path = DEFAULT_OUT, only: list[str] | None = None, nvcc: str = "nvcc", quick: bool = False,
            build_dir: Path | None = None, console=None) -> dict:
    """Build + run the probes on the GPU present and write `out` (+ .md). Returns the result dict."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from monolith.console import make_console

    console = console or make_console(stderr=True)
    gpu = detect_gpu()  # MonolithError without a GPU, before anything is built
    names = [p[0] for p in PROBES] + ["ncu"]
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise MonolithError(f"unknown probe(s): {', '.join(unknown)}; known: {', '.join(names)}")
    selected = [p for p in PROBES if not only or p[0] in only]
    want_ncu = not only or "ncu" in only
    if shutil.which(nvcc) is None and not Path(nvcc).exists():
        raise MonolithError(f"nvcc not found ({nvcc}); pass --nvcc /path/to/nvcc")
    build_dir = build_dir or REPO_ROOT / "build" / "probes"
    console.print(f"[bold]M0 probes[/] on {gpu['name']} (cc {gpu['cc']}, {gpu['arch']}), writing {out}")
    t_start = time.monotonic()
    probes: dict = {}
    # Build everything first, in parallel (nvcc is mostly host-side work), then run one at a time
    # so that no probe shares the GPU with another.
    to_build = [p[0] for p in selected] + (["ncu_tiny"] if want_ncu else [])
    builds: dict[str, tuple[Path, str] | RuntimeError] = {}
    with console.status(f"building {len(to_build)} probes for {gpu['arch']} with {nvcc}"):
        with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
            futs = {n: pool.submit(build_probe, n, gpu["arch"], nvcc, build_dir) for n in to_build}
            for n, f in futs.items():
                try:
                    builds[n] = f.result()
                except RuntimeError as e:
                    builds[n] = e
    console.print(f"built in {time.monotonic() - t_start:.0f} s")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as prog:
        task = prog.add_task("probes", total=len(selected) + int(want_ncu))
        for name, args, timeout in selected:
            built = builds[name]
            if isinstance(built, RuntimeError):
                probes[name] = {"ok": False, "status": "build failed", "reason": str(built)[-3000:]}
                prog.console.print(f"  {name}: [red]build failed[/]")
                prog.advance(task)
                continue
            exe, ptxas = built
            prog.update(task, description=f"run {name}")
            res = run_probe(exe, args + (QUICK_ARGS.get(name, []) if quick else []), timeout)
            res["ptxas_registers"] = _ptxas_regs(ptxas)
            probes[name] = res
            mark = "[green]ok[/]" if res.get("status") == "ok" else f"[red]{res.get('status')}[/]"
            prog.console.print(f"  {name}: {mark} ({res.get('wall_s', '?')} s)")
            prog.advance(task)
        if want_ncu:
            prog.update(task, description="ncu counters")
            built = builds.get("ncu_tiny")
            exe = None if isinstance(built, RuntimeError) or built is None else built[0]
            probes["ncu"] = run_ncu_check(exe, gpu["arch"])
            prog.console.print(f"  ncu: {probes['ncu'].get('status')}")
            prog.advance(task)
    result = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "env": collect_env(gpu, nvcc),
        "quick": quick,
        "wall_s": round(time.monotonic() - t_start, 1),
        "probes": probes,
    }
    result["summary"] = summarize(probes)
    result["ok"] = all(p.get("ok") for p in probes.values())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    console.print(f"wrote {out} and {out.with_suffix('.md').name} in {result['wall_s']} s; "
                  f"{'all ok' if result['ok'] else '[red]some probes failed[/]'}")
    return result


def _ptxas_regs(log: str) -> dict:
    """kernel (mangled) -> registers, from `ptxas -v` output."""
    regs, fn = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            fn = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            regs[fn] = int(m.group(1))
    return regs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m monolith.probes.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="result JSON (a .md summary goes beside it)")
    ap.add_argument("--only", default="", help="comma-separated subset: cvt,timers,barrier,bandwidth,ncu")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"), help="nvcc executable")
    ap.add_argument("--quick", action="store_true", help="fewer configurations (smoke test, ~20 s)")
    ap.add_argument("--build-dir", type=Path, default=None, help="where probe binaries go (default build/probes)")
    a = ap.parse_args(argv)
    only = [x.strip() for x in a.only.split(",") if x.strip()] or None
    try:
        res = run_all(a.out, only=only, nvcc=a.nvcc, quick=a.quick, build_dir=a.build_dir)
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
