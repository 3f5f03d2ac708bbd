"""`monolith m6`: measure the final matrix's rows on the GPU present, one row file per engine
(bench/final.py merges them). Composes the harness: the oracle, gate and timed runs are
bench/suite.py's `measure`, quality is quant/fp8_quality.py's `packed_quality`, llama.cpp is
bench/baselines/llamacpp.sh, the X-ray is the engine's `record_xray`.

Protocol (notes/harness.md): 20 prompts x 256 tokens, median/min/max of 5 runs; an engine under
100 tok/s (warm-up estimate) keeps every prompt and gets fewer runs, recorded in `runs_note`; the
sweep 16/128/512/1,024/2,048 on every monolith row; NVML energy around every row's timed runs.
`quick`: 3 prompts x 64 tokens, 3 runs, sweep 16/128/512, gate 2 x 64: a trial, never headline.

First, the GPU's own streaming read (bench/bwprobe.py: probes/bandwidth.cu, a few seconds, once per
lease), which every row's predicted µs/token divides by. Before the first engine, while the fp32
oracles hold the GPU: the variants' extension builds, the fp8/nvfp4 packs, and the ahead work
(AHEAD_ENGINES) of this process's engines and of the lease's later processes' ($M6_LATER_ENGINES):
hf-compile's compile caches warmed in a process of its own (its row: `compile_warmup_s` warm,
`compile_cold_s` the warming's), llama.cpp's GGUF conversions (its rows: `conversion`). All of it
is waited for before the first engine's window opens.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from monolith import REPO_ROOT, jsonio
from monolith.bench import final
from monolith.errors import MonolithError

QUALITY_FILES = {"fp8": REPO_ROOT / "results" / "m3_fp8_quality.json",
                 "nvfp4": REPO_ROOT / "results" / "m5_nvfp4_quality.json"}
QUICK_ENGINES = "fp8-stream,hf-eager"
SLOW_BELOW_TOK_S = 100.0
XRAY_POSITION = 128
XRAY_PROMPT = "The history of the city begins"
# Engines with CPU work that can run while a process's fp32 oracles hold the GPU: hf-compile's
# compile (bench/baselines/hf_warm.py fills torch's on-disk caches) and llama.cpp's GGUF conversions
# (bench/baselines/llamacpp_convert.sh). Started with the first oracle a process computes, for its
# own engines and for LATER_ENV's (the lease's later processes, scripts/m6_lease.sh), and waited for
# before its first engine, so none of it runs inside a row's window.
AHEAD_ENGINES = ("hf-compile", "llamacpp")
AHEAD_DIR = "ahead"  # in the rows dir: the warming's record and the jobs' logs
AHEAD_WAIT_S = 300.0  # the longest wait for them before the first engine; then they are stopped
LATER_ENV = "M6_LATER_ENGINES"


def later_engines() -> list[str]:
    """The engines the lease's later processes will measure ($M6_LATER_ENGINES, comma-separated)."""
    return [final.engine_name(e) for e in os.environ.get(LATER_ENV, "").split(",") if e.strip()]


@dataclass
class M6Config:
    engines: list[str]
    rows_dir: Path
    model: str | None = None
    device: str = "cuda"
    quick: bool = False
    budget_s: float = 90.0          # a slow engine's gate, and again its timed runs (never fewer prompts)
    llamacpp: str | None = None     # llama-bench pack dir (bench/baselines/llamacpp.sh PACK=) or an sdist
    quality: str = "file"           # file: the committed quality runs; measure: run them now; none
    quality_files: dict = field(default_factory=lambda: dict(QUALITY_FILES))
    xray: bool = True
    prebuild: bool = True           # build the variants' extensions in parallel processes first
    later: list[str] = field(default_factory=later_engines)  # the lease's later processes' engines
    ahead: bool = True              # AHEAD_ENGINES' CPU work beside the oracles (this process's and `later`)
    nvml: object = None             # an NVML module (tests: a fake); None: pynvml
    log: object = print
    bandwidth: dict | None = None   # a bandwidth record (bench/bwprobe.py; tests); None: measured first


def parse_engines(spec: str | None, quick: bool) -> list[str]:
    names = [final.engine_name(e) for e in (spec or (QUICK_ENGINES if quick else ",".join(final.all_engines())))
             .split(",") if e.strip()]
    from monolith.bench.baselines import registry

    for n in names:
        if n != "llamacpp":
            registry.spec(n)  # unknown names fail here, before anything runs
    if len(set(names)) != len(names):
        raise MonolithError(f"--engines names an engine twice: {','.join(names)}")
    return names


def _bench_cfg(quick: bool, nvml):
    from monolith.bench.decode import BenchConfig

    cfg = BenchConfig.quick_config() if quick else BenchConfig()
    cfg.nvml = nvml
    return cfg


def run(cfg: M6Config) -> list[Path]:
    """Measure each engine of cfg.engines and write its row file; returns the files written."""
    import torch

    from monolith import envinfo
    from monolith.bench import bwprobe, power, suite
    from monolith.bench.baselines import registry

    log = cfg.log
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise MonolithError("monolith m6 measures on a CUDA GPU and none is visible here "
                            "(merge row files with `monolith m6 --merge DIR`)")
    rows_dir = Path(cfg.rows_dir)
    rows_dir.mkdir(parents=True, exist_ok=True)
    ckpt, tok = suite.load_inputs(cfg.model)
    env = envinfo.collect(cfg.device)
    uuid = power.gpu_uuid(nvml=cfg.nvml) if cfg.device.startswith("cuda") else None
    # The GPU in hand's streaming read, before anything else runs on it: once per lease (the first
    # process measures, the later ones read rows_dir/bandwidth.json back), the same for every row.
    bwrec = cfg.bandwidth or bwprobe.for_lease(
        rows_dir, gpu_uuid=uuid, log=log,
        resolve_fn=lambda: bwprobe.resolve(cfg.device, gpu=env.get("gpu"), gpu_uuid=uuid, log=log))
    bw = bwrec.get("tbs")
    bench_prompts = suite.prompt_tokens("bench", tok)
    bcfg = _bench_cfg(cfg.quick, cfg.nvml)
    scfg = suite.SuiteConfig(
        engines=cfg.engines, model=cfg.model, device=cfg.device, bench=bcfg,
        gate_prompts=2 if cfg.quick else 20, gate_tokens=64 if cfg.quick else 256,
        det_repeats=2 if cfg.quick else 3, engine_budget_s=cfg.budget_s,
        timelines_dir=rows_dir / "timelines", timeline_tokens=64 if cfg.quick else 256, timeline_scaled=True,
        ungated_ok=final.UNGATED_OK, slow_below_tok_s=SLOW_BELOW_TOK_S, title="M6: the final matrix", bandwidth=bwrec)
    protocol = {**bcfg.protocol(), "quick": cfg.quick, "gate_prompts": scfg.gate_prompts,
                "gate_tokens": scfg.gate_tokens, "tolerance_logits": scfg.tolerance, "det_repeats": scfg.det_repeats,
                "slow_below_tok_s": SLOW_BELOW_TOK_S, "slow_engine_budget_s": cfg.budget_s,
                **bwprobe.protocol_keys(bwrec), "device": cfg.device,
                "quality_source": cfg.quality,
                "byte_model": "weights (28 layers + LM head + 1 embedding row) + 114,688 B x cached positions"}
    seq = suite.sweep_sequence(bench_prompts, max(bcfg.sweep_positions or (0,)) + 1)
    variants = [e.removeprefix("megakernel-") for e in cfg.engines if e.startswith("megakernel-")]
    builds = start_builds(variants, log) if cfg.prebuild and variants and cfg.device.startswith("cuda") else {}
    # Every oracle this process needs, while the extensions build (nvcc on the CPU, the GPU idle
    # otherwise): the builds' ~34 s hide under the oracles' ~40 s each. Oracle numbers do not depend
    # on timing, so sharing the machine with the compilers changes nothing in them.
    ahead: list[AheadJob] = []
    ahead_started = [False]

    def start_ahead_once() -> None:  # with the first oracle this process computes (none: nothing to hide under)
        if cfg.ahead and not ahead_started[0]:
            ahead_started[0] = True
            ahead.extend(start_ahead(cfg, ckpt.path, rows_dir, log))

    ckpts, oracles, oracle_errors = prepare_oracles(cfg, ckpt, bench_prompts, scfg, uuid, rows_dir, log,
                                                    before_compute=start_ahead_once)
    if builds:
        finish_builds(builds, log)
    finish_ahead(ahead, log)  # before the first engine: nothing of it runs inside a row's window
    written = []
    for i, name in enumerate(cfg.engines):
        started = final.now_iso()
        t0 = time.perf_counter()
        log(f"[{i + 1}/{len(cfg.engines)}] {name}")
        try:  # one engine's crash is its row, never the end of the others' measurements
            if name == "llamacpp":
                rows = llamacpp_rows(cfg, rows_dir, bcfg)
                for r in rows:  # its parser's prediction -> this run's bandwidth, like every other row
                    bwprobe.reprice_external(r, bwrec)
            else:
                spec = registry.spec(name)
                fmt = registry.weights_of(name)
                if fmt in oracle_errors:  # its checkpoint or oracle failed before the engines: this row says why
                    raise oracle_errors[fmt]
                row = suite.measure(name, spec, ckpts[fmt], tok, bench_prompts, seq, oracles[fmt], scfg, cfg.budget_s, bw,
                                    weights=fmt)
                rows = [row]
                if name == "hf-compile":
                    attach_compile_warm(row, rows_dir)
                if fmt in ("fp8", "nvfp4"):
                    try:
                        qg = quality_gate(cfg, name, fmt, ckpt, tok)
                    except Exception as e:  # noqa: BLE001  (the speed row stands; the quality gate says why not)
                        qg = {"passed": None, "reason": f"quality run failed: {type(e).__name__}: {e}"[:400]}
                    row["gates"] = {"implementation": implementation_gate(row, fmt), "quality": qg}
                if name.startswith("megakernel-") and cfg.xray and row.get("status") == "ok":
                    row["xray_raw"] = record_xray(ckpt, tok, name.removeprefix("megakernel-"), rows_dir / "xray", log)
        except Exception as e:  # noqa: BLE001
            from monolith.results import base_row

            row = base_row(name, name)
            row.update(status="failed", reason=f"{type(e).__name__}: {e}"[:500])
            log(f"  failed: {row['reason']}")
            rows = [row]
        for r in rows:
            decorate(r, name)
        ended = final.now_iso()
        try:
            written.append(final.write_row_file(rows_dir, name, rows, gpu_uuid=uuid, gpu=env.get("gpu"),
                                                started=started, ended=ended, env=env, weights=ckpt.describe(),
                                                protocol=protocol))
        except MonolithError as e:  # a non-finite number: refused (the copy is kept), the next engines still run
            log(f"  refused: {e}")
            continue
        log(f"  wrote {written[-1]} ({time.perf_counter() - t0:.0f} s)")
    return written


def prepare_oracles(cfg: M6Config, ckpt, bench_prompts, scfg, uuid, rows_dir: Path, log, before_compute=None):
    """The checkpoint and the gate's oracle of every weight format the in-process engines use:
    read from this lease's oracle file when another process of the lease computed it (bench/
    oracle_cache.py), else computed and written there (`before_compute()` is called first, each
    time). Returns (ckpts, oracles, errors): a format whose checkpoint or oracle failed has its
    exception in errors, and each of its engines' rows names it (the other formats still run)."""
    from concurrent.futures import ThreadPoolExecutor

    from monolith.bench import oracle_cache, suite
    from monolith.bench.baselines import registry
    from monolith.eval import correctness

    fmts = dict.fromkeys(registry.weights_of(n) for n in cfg.engines
                         if n != "llamacpp" and registry.spec(n).kind == "local")
    fmts = sorted(fmts, key=lambda f: f != "bf16")  # bf16 needs no pack: its oracle runs while the packs are made
    machine = oracle_cache.identity(uuid)
    gate_prompts = bench_prompts[:scfg.gate_prompts]
    ckpts, oracles, errors = {"bf16": ckpt}, {}, {}

    def compute(ck):
        if before_compute is not None:
            before_compute()
        orc = registry.oracle(ck, cfg.device)
        try:
            return correctness.oracle_runs(orc, gate_prompts, scfg.gate_tokens, progress=suite._oracle_progress(
                scfg.gate_prompts, scfg.gate_tokens, time.perf_counter()))
        finally:
            del orc
            suite._free()

    # The fp8/nvfp4 packs (CPU; nvfp4 ~20 s on the H100's host) are made in one worker thread, in
    # order, while this thread runs the oracles on the GPU: a pack is the same computation in any thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        packs = {f: pool.submit(registry.checkpoint_for, f, ckpt) for f in fmts if f != "bf16"}
        for fmt in fmts:
            try:
                ck = ckpts[fmt] = packs[fmt].result() if fmt in packs else ckpt
                log(f"oracle: fp32 reference on the {fmt} weights{' dequantized' if fmt != 'bf16' else ''}, "
                    f"{scfg.gate_prompts} prompts x {scfg.gate_tokens} tokens")
                k = None if machine is None else oracle_cache.key(ck.describe(), fmt, gate_prompts, scfg.gate_tokens,
                                                                   machine)
                oracles[fmt], _ = oracle_cache.get(rows_dir, k, lambda ck=ck: compute(ck), final.WINDOW_LIMIT_S, log)
            except Exception as e:  # noqa: BLE001  (the engines of this format fail with it; the others run)
                log(f"  oracle for {fmt} failed: {type(e).__name__}: {e}"[:400])
                errors[fmt] = e
    return ckpts, oracles, errors


def start_builds(variants: list[str], log) -> dict:
    """Start building every variant's extension (plain + X-ray in one) at once, one process per
    variant: distinct flag sets build side by side in their own build dirs, identical ones wait on
    torch's lock in the shared dir. Returns what finish_builds waits on."""
    import sys

    code = "import sys; from monolith.megakernel import load_extension as L; print(L(sys.argv[1]).build_info['tag'])"
    procs = {v: subprocess.Popen([sys.executable, "-c", code, v], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True) for v in variants}
    log(f"building {len(procs)} extension(s) in parallel: {', '.join(variants)}")
    return {"procs": procs, "t0": time.perf_counter()}


def finish_builds(builds: dict, log) -> None:
    """Wait for start_builds' processes. A failure here is only logged: the engine's row says it later."""
    t_wait = time.perf_counter()
    for v, p in builds["procs"].items():
        out, _ = p.communicate()
        tail = (out or "").strip().splitlines()[-1:] or [""]
        log(f"  {v}: {'ok, tag ' if p.returncode == 0 else f'exit {p.returncode}: '}{tail[0][:200]}")
    now = time.perf_counter()
    log(f"  builds done {now - builds['t0']:.0f} s after their start ({now - t_wait:.0f} s of it waited for)")


def prebuild(variants: list[str], log) -> None:
    """Build every variant's extension and wait for all of them (start_builds + finish_builds)."""
    finish_builds(start_builds(variants, log), log)


@dataclass
class AheadJob:
    """One engine's CPU work beside the oracles: commands run in order in a thread (each in a
    process session of its own, output to `log`), stopped at the first failure."""

    engine: str
    what: str
    cmds: list[list[str]]
    log: Path
    record: Path | None = None  # what the work wrote (read back for the log line)
    t0: float = 0.0
    rc: int | None = None
    proc: subprocess.Popen | None = None
    stop: bool = False
    thread: threading.Thread | None = None

    def run(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as out:
            for cmd in self.cmds:
                if self.stop:
                    return
                try:
                    self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
                except OSError as e:  # a missing tool: this job's engine does the work in its own window
                    out.write(f"{cmd[0]}: {type(e).__name__}: {e}\n")
                    self.rc = 127
                    return
                self.rc = self.proc.wait()
                if self.rc != 0:
                    return


def _nice(cmd: list[str]) -> list[str]:
    """Below the oracle's host thread and the extension builds: the ahead work only fills idle cores."""
    return ["nice", "-n", "10", *cmd]


def llamacpp_unpack_cmds(src: Path) -> list[list[str]]:
    """Unpacking a llama-bench pack dir's pack.tar.xz (once: a marker says it was)."""
    tar, mark = src / "pack.tar.xz", src / ".unpacked"
    if not (src.is_dir() and tar.is_file()):
        return []
    if mark.is_file() and mark.stat().st_mtime >= tar.stat().st_mtime:
        return []
    return [["tar", "xJf", str(tar), "-C", str(src)], ["touch", str(mark)]]


def llamacpp_work() -> Path:
    return Path(os.environ.get("LLAMACPP_WORK", "/tmp/llamacpp"))


def warm_record(rows_dir: Path) -> Path:
    return Path(rows_dir) / AHEAD_DIR / "hf-compile.json"


def _warmed_in_this_lease(rows_dir: Path) -> bool:
    p = warm_record(rows_dir)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return doc.get("status") == "ok" and time.time() - p.stat().st_mtime < final.WINDOW_LIMIT_S


def ahead_jobs(cfg: M6Config, ckpt_dir: Path, rows_dir: Path) -> list[AheadJob]:
    """The ahead work this process should start: for AHEAD_ENGINES among its engines and the
    lease's later ones, unless already done in this lease (hf-compile's caches warmed; a kind of
    GGUF converted from the same files is kept by llamacpp_convert.sh itself)."""
    want = [e for e in dict.fromkeys([*cfg.engines, *cfg.later]) if e in AHEAD_ENGINES]
    ahead_dir = Path(rows_dir) / AHEAD_DIR
    jobs = []
    if "hf-compile" in want and cfg.device.startswith("cuda") and not _warmed_in_this_lease(rows_dir):
        cmd = [sys.executable, "-m", "monolith.bench.baselines.hf_warm", str(warm_record(rows_dir)),
               str(ckpt_dir), cfg.device]
        jobs.append(AheadJob("hf-compile", "torch.compile caches warmed", [_nice(cmd)], ahead_dir / "hf-compile.log",
                             warm_record(rows_dir)))
    src = Path(cfg.llamacpp) if cfg.llamacpp else None
    if "llamacpp" in want and src is not None and src.is_dir() and (
            (src / "convert_hf_to_gguf.py").is_file() or (src / "pack.tar.xz").is_file()):
        work = llamacpp_work()
        conv = [str(REPO_ROOT / "bench" / "baselines" / "llamacpp_convert.sh"), str(src), str(ckpt_dir), str(work)]
        jobs.append(AheadJob("llamacpp", "GGUF conversions", [*llamacpp_unpack_cmds(src), _nice(["bash", *conv])],
                             ahead_dir / "llamacpp-convert.log", work / "convert.json"))
    return jobs


def start_ahead(cfg: M6Config, ckpt_dir: Path, rows_dir: Path, log) -> list[AheadJob]:
    jobs = ahead_jobs(cfg, ckpt_dir, rows_dir)
    for j in jobs:
        j.t0 = time.perf_counter()
        j.thread = threading.Thread(target=j.run, name=f"ahead-{j.engine}", daemon=True)
        j.thread.start()
    if jobs:
        log(f"beside the oracles: {'; '.join(f'{j.engine}: {j.what}' for j in jobs)} (logs in {jobs[0].log.parent})")
    return jobs


def finish_ahead(jobs: list[AheadJob], log, limit_s: float = AHEAD_WAIT_S) -> None:
    """Wait for the ahead work (at most `limit_s` in all, then it is stopped: its engine then does
    the work in its own window, as without it). Only logged: the rows say what they found."""
    if not jobs:
        return
    t_wait = time.perf_counter()
    for j in jobs:
        j.thread.join(max(limit_s - (time.perf_counter() - t_wait), 0.0))
        if j.thread.is_alive():
            j.stop = True
            if j.proc is not None and j.proc.poll() is None:
                os.killpg(j.proc.pid, signal.SIGKILL)  # its own session: the job's process and its workers
            j.thread.join(10)
            log(f"  {j.engine}: stopped after {limit_s:.0f} s of waiting (log {j.log})")
            continue
        what = f"exit {j.rc}" if j.rc else "ok"
        if j.engine == "hf-compile":
            doc = _read_json(j.record)
            what += f", cold compile {doc.get('compile_cold_s')} s ({doc.get('status')})"
        elif j.engine == "llamacpp":
            kinds = _read_json(j.record).get("kinds") or {}
            what += ", " + ", ".join(f"{k} {v.get('status')} {v.get('seconds')} s" for k, v in kinds.items())
        log(f"  {j.engine}: {j.what} in {time.perf_counter() - j.t0:.0f} s: {what}")
    log(f"  ahead work done ({time.perf_counter() - t_wait:.0f} s of it waited for)")


def _read_json(p: Path | None) -> dict:
    try:
        doc = json.loads(Path(p).read_text())
    except (OSError, ValueError, TypeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def attach_compile_warm(row: dict, rows_dir: Path) -> None:
    """hf-compile's row: its own compile (`compile_warmup_s`, warm when the lease's warming ran) and
    the warming process's cold one (`compile_cold_s`), with what this compile found in the caches."""
    info = row.get("info")
    if not isinstance(info, dict) or "compile_warmup_s" not in info:
        return
    cache = info.get("compile_cache") or {}
    hits, misses = cache.get("fxgraph_cache_hit", 0), cache.get("fxgraph_cache_miss", 0)
    found = f"this compile: FX-graph cache {hits} hit(s), {misses} miss(es), AOT-autograd " \
            f"{cache.get('autograd_cache_hit', 0)} hit(s), in {cache.get('dir')}"
    doc = _read_json(warm_record(rows_dir))
    info["compile_cold_s"] = doc.get("compile_cold_s") if doc.get("status") == "ok" else None
    if info["compile_cold_s"] is None:
        why = doc.get("reason") or ("no warming ran in this lease" if not doc else f"status {doc.get('status')}")
        info["compile_caches"] = f"not warmed ({why}): compile_warmup_s is this process's own compile; {found}"
        return
    other = (doc.get("compile_cache") or {}).get("dir")
    where = "" if other == cache.get("dir") else f"; the warming used another cache folder ({other})"
    state = "warm" if hits and not misses else "NOT warm (the caches missed)"
    info["compile_caches"] = (f"{state}: compile_warmup_s is this process's compile on the caches that process "
                              f"{doc.get('pid')} filled ({doc.get('started')} to {doc.get('ended')}, beside an "
                              f"earlier process's oracles); compile_cold_s is that process's cold compile; "
                              f"{found}{where}")


def decorate(r: dict, name: str) -> None:
    """The matrix's row keys (notes/CONTRACTS.md) on a harness row."""
    mono = r["engine"].startswith("megakernel-")
    r["kind"] = "monolith" if mono else "baseline"
    r["variant"] = r["engine"].removeprefix("megakernel-") if mono else None
    r.setdefault("runs_note", None)
    r.setdefault("speed_label", None)
    if r.get("status") == "ok" and not isinstance(r.get("energy"), dict):
        r["energy"] = {"method": "not measured", "reason": "the harness returned no energy for this row"}
    if r.get("status") == "ok" and r.get("energy", {}).get("method") == "not measured":
        r["tok_per_joule"] = None


def implementation_gate(row: dict, fmt: str) -> dict:
    g = row.get("gate") or {}
    return {"passed": g.get("passed") if isinstance(g, dict) else None,
            "oracle": f"fp32 reference on the {fmt} weights dequantized",
            "rule": f"margin rule, tolerance {g.get('tolerance', 'as in the gate')} logits",
            "divergences": g.get("divergences"), "divergences_disallowed": g.get("divergences_disallowed"),
            "deterministic": g.get("deterministic"),
            **({} if g.get("passed") is not None else {"reason": f"not run: {row.get('reason')}"})}


def _quality_from_pair(pair: dict, source: str, protocol: dict | None) -> dict:
    g, e = pair["gates"], pair["engine"]
    fl = g.get("floor") or None
    passed = g.get("fixed_gates_pass")
    return {"passed": passed if passed in (True, False) else None, "reference": "fp32 on the original bf16 weights",
            "ppl_ratio": g.get("ppl_ratio"), "ppl_limit": g.get("ppl_limit"), "agreement": g.get("agreement"),
            "agreement_min": g.get("agreement_min"), "kl": g.get("kl"), "positions": e.get("kl_positions", e.get("positions")),
            "prompts": e.get("prompts"), "agree_tokens": (protocol or {}).get("agree_tokens", e.get("tokens_per_prompt")),
            "floor": None if fl is None else {k: fl.get(k) for k in ("engine", "agreement", "ppl_ratio", "kl")},
            "floor_gate_pass": g.get("floor_gate_pass"), "summary": g.get("summary"), "source": source}


def quality_from_file(path: Path, engine: str, weights: dict) -> dict:
    """The quality gate of `engine` from a committed `eval quality --fp8/--nvfp4` result: only on
    the same weights (sha256), named as an earlier run's."""
    p = Path(path)
    if not p.is_file():
        return {"passed": None, "reason": f"not measured in this run, and {p.name} is not there"}
    doc = jsonio.load(p)
    sha = (doc.get("weights") or {}).get("sha256")
    if sha != weights.get("sha256"):
        return {"passed": None, "reason": f"not measured in this run; {p.name} is of other weights "
                                          f"(sha256 {str(sha)[:12]}, these {str(weights.get('sha256'))[:12]})"}
    for pair in doc.get("pairs") or [doc]:
        if str((pair.get("roles") or {}).get("engine", "")).split(" ")[0] == engine:
            rel = p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p
            return _quality_from_pair(pair, f"{rel} (an earlier run on these weights: full protocol)", doc.get("protocol"))
    return {"passed": None, "reason": f"not measured in this run; {p.name} has no pair for {engine}"}


def quality_gate(cfg: M6Config, name: str, fmt: str, ckpt, tok) -> dict:
    if cfg.quality == "none":
        return {"passed": None, "reason": "not measured in this run (--quality none)"}
    if cfg.quality == "file":
        return quality_from_file(cfg.quality_files.get(fmt, Path("-")), name, ckpt.describe())
    from monolith.quant import pack_fp8, pack_nvfp4
    from monolith.quant.fp8_quality import packed_quality

    floor = "megakernel-bf16-upstream" if "upstream" in name else "megakernel-bf16-stream"
    packed = {"fp8": pack_fp8, "nvfp4": pack_nvfp4}[fmt].pack_in_memory(ckpt)
    kw = dict(positions=256, prompts=4, agree_tokens=16) if cfg.quick else {}
    cfg.log(f"  quality: {name} on the {fmt} pack against fp32 on the bf16 weights, floor {floor}")
    res = packed_quality(ckpt, tok, packed, cfg.device, fmt=fmt, engine=[name], ref="reference-fp32", floor=[floor], **kw)
    return _quality_from_pair(res["pairs"][0], "measured in this run" + (" (quick: reduced protocol)" if cfg.quick else ""),
                              res.get("protocol"))


def record_xray(ckpt, tok, variant: str, out_dir: Path, log) -> str | None:
    """One raw X-ray trace of `variant` at position 128 from the instrumented build."""
    try:
        from monolith.megakernel import MegakernelEngine
        from monolith.xray.raw import save_raw

        eng = MegakernelEngine(ckpt, variant=variant, xray=True)
        ovh = None
        try:  # the X-ray build's cost beside its trace (monolith.xray.overhead; the page shows it)
            from monolith.xray.overhead import measure_engine
            ovh = measure_engine(eng, progress=lambda m: log(f"  X-ray overhead, {variant} {m}"))
        except Exception as e:  # noqa: BLE001  (the trace stands without it; its absence is said)
            log(f"  X-ray overhead not measured: {type(e).__name__}: {e}")
        meta, events = eng.record_xray(tok.encode(XRAY_PROMPT), XRAY_POSITION)
        meta = {**meta, "variant": variant, "position": XRAY_POSITION}
        if ovh is not None:
            from monolith.xray.overhead import attach
            attach(meta, ovh)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = save_raw(out_dir / f"{variant}.raw.npz", meta, events)
        log(f"  X-ray: {variant} at position {XRAY_POSITION}, {len(events)} records -> {path}")
        return str(path)
    except Exception as e:  # noqa: BLE001  (the row's speed stands; the trace's absence is said)
        log(f"  X-ray failed: {type(e).__name__}: {e}")
        return None


def llamacpp_rows(cfg: M6Config, rows_dir: Path, bcfg) -> list[dict]:
    """llama.cpp BF16 and Q8_0 through bench/baselines/llamacpp.sh (energy by llamacpp_run.py), and
    each row's race timeline: uniform at its median rate (llama-bench reports per-run totals only)."""
    from monolith.bench.baselines.llamacpp import rows_from_json
    from monolith.checkpoint import ensure_checkpoint
    from monolith.results import base_row

    if not cfg.llamacpp:
        row = base_row("llamacpp", "llama.cpp")
        row["reason"] = "no llama.cpp build or source given (monolith m6 --llamacpp PACK_DIR_OR_SDIST)"
        return [row]
    out = rows_dir / "llamacpp.json"
    src = Path(cfg.llamacpp)
    env = {**os.environ, "WORK": str(llamacpp_work()), "N_GEN": str(bcfg.tokens), "REPS": str(bcfg.runs)}
    for cmd in llamacpp_unpack_cmds(src):  # none when the ahead work unpacked it already
        subprocess.run(cmd, check=False)
    if (src / "bin" / "llama-bench").exists():
        env["LLAMA_BENCH"] = str(src / "bin" / "llama-bench")
    ckpt_dir = ensure_checkpoint(cfg.model)
    cmd = ["bash", str(REPO_ROOT / "bench" / "baselines" / "llamacpp.sh"), str(src), str(ckpt_dir), str(out)]
    cfg.log(f"  {' '.join(cmd)}")
    subprocess.run(cmd, env=env, check=False)
    rows = rows_from_json(out)
    for r in rows:
        med = (r.get("tok_s") or {}).get("median")
        if r.get("status") == "ok" and med:
            n = bcfg.tokens
            tl = {"engine": r["engine"], "label": r.get("label"), "tokens": None, "pieces": None,
                  "t_us": [round((k + 1) * 1e6 / med, 2) for k in range(n)],
                  "method": f"uniform at the row's median {med:,.1f} tok/s: llama-bench reports each run's total "
                            "time, not per-token times"}
            (rows_dir / "timelines").mkdir(parents=True, exist_ok=True)
            (rows_dir / "timelines" / f"{r['engine']}.json").write_text(json.dumps(tl) + "\n")
    return rows
