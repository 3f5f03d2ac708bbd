#!/usr/bin/env python3
"""Ring-depth sweep of the shipped sm_90 streaming kernels (issue 48, step 0): what a shallower
weight ring costs today's kernel, to price the shared memory a k-token pass would take from it.

For each depth (default 12, 10, 7 slots of 16 KB) the extension is built with
MONOLITH_NVCC_DEFINES=MONOLITH_RING_DEPTH_SM90=N (the shipped depth, 12, is the default build with no
define: the measured kernel itself); the builds run in parallel first. Then, per variant and depth,
the harness's own steps (bench/suite.py `measure`, as `monolith bench` runs them): the correctness
gate against the fp32 oracle of the variant's weights (one oracle per format, shared by the depths),
the timed runs (median / min / max of N runs of 20 prompts x 256 tokens) and the position sweep. Each
engine then decodes the gate's prompts once more, plus one decode past position 2,040 (the long and
the wide kernels), and those tokens must be bitwise those of the reference depth: the depth moves
timing only, never the arithmetic. Each row's predicted µs/token divides by the GPU's own streaming
read, measured once at the start of the run (bench/bwprobe.py; the JSON's `bandwidth`).

The time model's prediction per depth is written into the JSON's `predicted` before anything is
measured (ring_model below states the model). Every row is a diagnostic build's dev measurement
(kernel_spec's MONOLITH_NVCC_DEFINES), not a headline number.

usage: PYTHONPATH=. python3 scripts/ring_sweep.py [--variants ...] [--depths 12,10,7]
           [--out results/ktoken/ring_sweep.json] [--quick] [--build-only] [--merge] [--dry-run]
Exit status: 0 all rows gated, on the depth they asked for, tokens equal; 1 otherwise; 2 refused.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: the monolith package is beside it
    sys.path.insert(0, str(REPO))

from monolith import kernel_spec  # noqa: E402
from monolith.errors import MonolithError  # noqa: E402

DEFINE = "MONOLITH_RING_DEPTH_SM90"
DEFAULT_VARIANTS = ("bf16-stream", "fp8-stream", "nvfp4-stream")
DEFAULT_DEPTHS = (12, 10, 7)
DEFAULT_OUT = REPO / "results" / "ktoken" / "ring_sweep.json"
SCHEMA = "monolith-ring-sweep/1"
LONG_PREFILL, LONG_DECODE = 2040, 64  # the token check's run past kLongKernelFrom, where wide splits apply
CLOCK_GHZ = 1.98  # the H100's / H200's SM boost clock (env sm_clock_max_mhz 1980): hold cycles -> µs
# Bandwidth the ring model gives a block (its 1/128 share). H200: the bandwidth probe. H100: no probe
# in this repository; its 3.35 TB/s spec at the H200's measured fraction of its own spec (4.28 / 4.8).
MODEL_GPUS = {
    "NVIDIA H200": {
        "bw_tbs": None,
        "bw_source": "results/m0_probes.json (bench/predict.py GPUS['h200'])",
        "baseline": "bench/predict.py H200_RESULTS (the README's results)",
    },
    "NVIDIA H100 80GB HBM3": {
        "bw_tbs": 3.35 * 4.2804 / 4.8,
        "bw_source": "assumed: 3.35 TB/s spec x the H200's measured fraction of its spec",
        "baseline": "results/xray_overhead_h100.json, plain build, position 128",
    },
}
# A run's parts, for the plan's wall-time estimate (s; the H100 / H200 device, a warm machine)
EST_BUILD_S, EST_ORACLE_S, EST_ENGINE_S, EST_SETUP_S = 120, 45, 35, 30


def log(msg: str) -> None:
    print(f"[ring] {msg}", flush=True)


# ----------------------------------------------------------------------------- arguments and plan
def _parse_list(text: str, flag: str, item, empty: str) -> list:
    """A comma-separated option: each entry through `item` (which refuses a bad one in one line),
    in the order given; an entry given twice or no entry at all is refused in one line too."""
    out: list = []
    for tok in (t.strip() for t in (text or "").split(",")):
        if not tok:
            continue
        x = item(tok)
        if x in out:
            raise MonolithError(f"{flag}: {x} is given twice")
        out.append(x)
    if not out:
        raise MonolithError(f"{flag}: {empty}")
    return out


def parse_depths(text: str) -> list[int]:
    """'12,10,7' -> [12, 10, 7]; each depth checked as the build would check it (kernel_spec's range,
    kernel/config.cuh kStagesSm90Min .. kStagesSm90Max); MonolithError in one line."""

    def depth(tok: str) -> int:
        try:
            return kernel_spec.check_define_range(DEFINE, tok)
        except MonolithError as e:
            raise MonolithError(f"--depths: {e}") from None

    return _parse_list(text, "--depths", depth, "no depth given (e.g. 12,10,7)")


def parse_variants(text: str) -> list[str]:
    """The variants to sweep: sm_90 streaming variants of kernel/variants.json (the ring the define
    sets); MonolithError in one line for another."""

    def variant(name: str) -> str:
        spec = kernel_spec.variant_spec(name)  # unknown: MonolithError naming the known ones
        if spec.get("schedule") != "stream" or spec.get("config"):
            raise MonolithError(
                f"--variants: {name} has no sm_90 ring (the sweep takes the streaming variants of the "
                f"sm_90 configuration: {', '.join(DEFAULT_VARIANTS)})"
            )
        return name

    return _parse_list(text, "--variants", variant, "no variant given")


def shipped_depth() -> int:
    return int(kernel_spec.config_constants()["kStagesSm90Shipped"])


def defines_for(depth: int) -> str | None:
    """MONOLITH_NVCC_DEFINES of a depth's build: None (the default build) at the shipped depth."""
    return None if depth == shipped_depth() else f"{DEFINE}={depth}"


def head_groups(stages: int) -> int:
    """kernel/schedule_stream.cuh head_groups(): the E4M3 warp head's groups at this depth."""
    return 4 if stages % 4 == 0 else 2 if stages % 2 == 0 else 1


def reference_depth(depths: list[int]) -> int:
    """The depth every other depth's tokens are checked against: the shipped one when swept."""
    return shipped_depth() if shipped_depth() in depths else depths[0]


@contextlib.contextmanager
def build_env(depth: int):
    """os.environ with the depth's MONOLITH_NVCC_DEFINES (unset at the shipped depth), restored after."""
    env, old = kernel_spec.EXTRA_DEFINES_ENV, os.environ.get(kernel_spec.EXTRA_DEFINES_ENV)
    d = defines_for(depth)
    if d is None:
        os.environ.pop(env, None)
    else:
        os.environ[env] = d
    try:
        yield d
    finally:
        if old is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = old


def display_path(p: Path) -> str:
    """A path under the repository relative to it (results are committed), any other as given."""
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def make_plan(variants: list[str], depths: list[int], a) -> dict:
    builds = []
    for d in depths:
        extra = [defines_for(d)] if defines_for(d) else []
        builds.append(
            {
                "depth": d,
                "defines": defines_for(d),
                "head_groups": head_groups(d),
                "nvcc_flags_sm90a": [
                    *kernel_spec.build_flags(variants[0], extra_defines=extra),
                    *kernel_spec.arch_flags("sm_90a"),
                ],
            }
        )
    engines = [{"variant": v, "depth": d, "engine": f"megakernel-{v}"} for v in variants for d in depths]
    formats = list(dict.fromkeys(kernel_spec.variant_spec(v).get("weights", "bf16") for v in variants))
    est = (
        EST_SETUP_S + EST_BUILD_S + EST_ORACLE_S * len(formats) + EST_ENGINE_S * len(engines) * (0.5 if a.quick else 1)
    )
    return {
        "variants": variants,
        "depths": depths,
        "reference_depth": reference_depth(depths),
        "shipped_depth": shipped_depth(),
        "builds": builds,
        "engines": engines,
        "oracles": formats,
        "gate": {"prompts": a.gate_prompts, "tokens": a.gate_tokens},
        "runs": a.runs,
        "quick": a.quick,
        "out": display_path(a.out),
        "token_check": {
            "gate_prompts": a.gate_prompts,
            "tokens": a.gate_tokens,
            "long": {"prefill": LONG_PREFILL, "decode": LONG_DECODE},
        },
        "estimated_wall_s": round(est),
    }


# ----------------------------------------------------------------------------- the prediction
# The model (written before the sweep measured anything): the chain model's measured pieces per
# phase (results/chain/<variant>.json: hop, opening and work of the median layer, on the H200 at
# position 128, 128 blocks, the shipped 12-slot ring) replayed for one block with a ring of S slots:
#  - the block streams its phase's slots in stream order (qkv, its attention split's K and V, O,
#    MLP-1's gate/up, down; per block and format from kernel/config.cuh) and consumes them in the
#    kernel's rounds (kRoundSlots; MLP-1 Policy::kMlpRoundUnits units), a round's slots all held
#    until the round ends (a round starts when its last slot has landed and the previous round ended;
#    it takes its share of the phase's measured work);
#  - the producer issues copy k once copy k - S was handed back, never during the hop hold (from a
#    phase's last hand-back for min(kHopHoldCycles, hop + opening)); a copy lands DRAM-latency after
#    its issue and at most one per 16 KB / (bandwidth / 128 blocks) after the previous one;
#  - hops and openings are the measured ones (they do not move with the ring).
# A layer's time at S minus its time at 12, x 28 layers, is the token's predicted change on top of a
# measured depth-12 baseline. The LM head is taken as unchanged: it streams at the bandwidth with at
# least S - 4 >= 2 slots in flight beyond its round, over the ~1 slot Little's law asks per block.
# The E4M3 head's group count at 10 and 7 slots (head_groups) is not modelled. At 12 slots the model
# has no ring wait (the X-ray's ~1 %), so it prices only what a shallower ring adds.
def phase_rounds(fmt: str, stages: int, k: dict, blocks: int = 128) -> dict[str, list[int]]:
    """Slots per round of each phase for one block that also owns an attention split."""
    wbytes = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5}[fmt]
    slot, per_group = int(k["kSlotBytes"]), blocks // int(k["kGroups"])

    def slots(nbytes: float) -> int:
        return math.ceil(nbytes / slot)

    def cut(n: int, r: int) -> list[int]:
        return [min(r, n - i) for i in range(0, n, r)]

    rs = int(k["kRoundSlotsModel"])
    qkv = slots(k["kGroupRows"] / per_group * k["kHidden"] * wbytes)
    o = slots(k["kHidden"] / per_group * k["kGroupCols"] * wbytes)
    units = math.ceil(k["kMlpUnits"] / blocks)
    down = slots(k["kHidden"] / blocks * k["kIntermediate"] * wbytes)
    if fmt == "nvfp4":  # units share slots: the unit rows stream as one range, in kRoundSlots rounds
        mlp = cut(slots(units * 2 * k["kMlpUnitCols"] * k["kHidden"] * wbytes), rs)
    else:
        spu = slots(2 * k["kMlpUnitCols"] * k["kHidden"] * wbytes)  # bf16 2, E4M3 1
        per_round = 3 if 3 * spu <= stages else stages // spu  # kernel/policy.cuh kMlpRoundUnits
        mlp = [spu * u for u in cut(units, per_round)]
    # one split of kSplitPositions positions: a K slot, then a V slot (the cache is bf16 in every format)
    return {"s_qkv": cut(qkv, rs), "s_attn": [1, 1], "s_oproj": cut(o, rs), "s_mlp": mlp, "s_down": cut(down, rs)}


def ring_layer_us(
    chain: dict,
    rounds: dict[str, list[int]],
    stages: int,
    bw_tbs: float,
    latency_us: float,
    hold_us: float,
    blocks: int = 128,
    layers: int = 30,
) -> dict:
    """The model above: one block's steady-state layer (mean of the second half of `layers`)."""
    per_slot = 16 * 1024 / (bw_tbs * 1e12 / blocks) * 1e6
    phases = chain["measured"]["phases"]
    seq = [(p, r) for _ in range(layers) for p in phases for r in rounds[p["phase"]]]
    nslots = sum(r for _p, r in seq)
    land, release = [0.0] * nslots, [None] * nslots
    holds: list[tuple[float, float]] = []
    state = {"next": 0, "issue": 0.0, "land": 0.0}

    def produce(upto: int) -> None:
        while state["next"] <= upto:
            j = state["next"]
            t = state["issue"]
            if j >= stages:
                if release[j - stages] is None:
                    raise RuntimeError(f"ring model: copy {j} waits on a slot its own round holds ({stages} slots)")
                t = max(t, release[j - stages])
            for a, b in holds:
                if a <= t < b:
                    t = b
            state["issue"] = t
            land[j] = state["land"] = max(t + latency_us, state["land"] + per_slot)
            state["next"] += 1

    t, slot, wait = 0.0, 0, 0.0
    starts = []
    for layer in range(layers):
        starts.append(t)
        for p in phases:
            hop = p["hop_us"] + p["open_us"]
            holds.append((t, t + min(hold_us, hop)))
            t += hop
            rs = rounds[p["phase"]]
            n = sum(rs)
            for r in rs:
                produce(slot + r - 1)
                start = max(t, land[slot + r - 1])
                if layer >= layers // 2:
                    wait += start - t
                t = start + p["work_us"] * r / n
                for q in range(slot, slot + r):
                    release[q] = t
                slot += r
    starts.append(t)
    half = starts[layers // 2 :]
    return {"layer_us": (half[-1] - half[0]) / (len(half) - 1), "ring_wait_us_per_layer": wait / (len(half) - 1)}


def hold_cycles(fmt: str, policy_text: str) -> int:
    m = re.search(r"kHopHoldCycles\s*=\s*kBf16\s*\?\s*(\d+)\s*:\s*(\d+)", policy_text)
    if not m:
        raise ValueError("kernel/policy.cuh: no `kHopHoldCycles = kBf16 ? A : B`")
    return int(m.group(1) if fmt == "bf16" else m.group(2))


def model_constants() -> dict:
    k = dict(kernel_spec.config_constants())
    gemv = (REPO / "kernel" / "stream_gemv.cuh").read_text()
    k["kRoundSlotsModel"] = int(re.search(r"constexpr int kRoundSlots = (\d+);", gemv).group(1))
    return k


def h100_baseline(variant: str, root: Path = REPO) -> float | None:
    """The H100's tok/s of the plain build at position 128 (results/xray_overhead_h100.json), or None."""
    p = root / "results" / "xray_overhead_h100.json"
    if not p.is_file():
        return None
    v = json.loads(p.read_text()).get("variants", {}).get(variant) or {}
    for r in v.get("rows", []):
        if r.get("build") == v.get("plain", "plain") and r.get("position") == 128:
            return float(r["tok_s"])
    return None


def predict(variants: list[str], depths: list[int], root: Path = REPO) -> dict:
    from monolith.bench import predict as P

    k = model_constants()
    pol = (root / "kernel" / "policy.cuh").read_text()
    lat_us = P.dram_latency_ns(json.loads((root / "results" / "m0_probes.json").read_text())) / 1e3
    n_layers = int(k["kNumLayers"])
    gpus = {}
    for gpu, g in MODEL_GPUS.items():
        bw = g["bw_tbs"] or P.GPUS["h200"].bw_tbs
        rows = {}
        for v in variants:
            chain = json.loads((root / "results" / "chain" / f"{v}.json").read_text())
            fmt = chain["format"]
            hold = hold_cycles(fmt, pol) / (CLOCK_GHZ * 1e3)
            base_tok = P.measured_h200(root, v)["tok_s"] if gpu == "NVIDIA H200" else h100_baseline(v, root)
            ref = ring_layer_us(chain, phase_rounds(fmt, shipped_depth(), k), shipped_depth(), bw, lat_us, hold)
            per = {}
            for d in depths:
                m = ring_layer_us(chain, phase_rounds(fmt, d, k), d, bw, lat_us, hold)
                delta = n_layers * (m["layer_us"] - ref["layer_us"])
                row = {
                    "layer_us_model": m["layer_us"],
                    "ring_wait_us_per_layer": m["ring_wait_us_per_layer"],
                    "token_delta_us": delta,
                    "rounds": phase_rounds(fmt, d, k),
                    "head_groups": head_groups(d),
                }
                if base_tok:
                    us = 1e6 / base_tok + delta
                    row.update(us_per_token=us, tok_s=1e6 / us, vs_shipped=(1e6 / us) / base_tok)
                else:
                    row["vs_shipped"] = None
                per[str(d)] = row
            rows[v] = {"baseline_tok_s": base_tok, "hold_us": hold, "depths": per}
        gpus[gpu] = {"bw_tbs": bw, "bw_source": g["bw_source"], "baseline": g["baseline"], "variants": rows}
    return {
        "label": "predicted before the sweep measured anything",
        "dram_latency_us": lat_us,
        "clock_ghz": CLOCK_GHZ,
        "model": (
            "per block, the chain's measured hop/opening/work per phase (results/chain, H200, position 128) "
            "replayed with an S-slot ring: rounds hold their slots until they end, the producer issues copy k "
            "after copy k-S is handed back and never in the hop hold, copies land DRAM latency after issue at "
            "the block's 1/128 bandwidth share; token delta = 28 x (layer at S - layer at 12); LM head "
            "unchanged; see scripts/ring_sweep.py ring_model's comment"
        ),
        "gpus": gpus,
    }


def merge_predicted(old: dict | None, new: dict) -> dict:
    """A file's prediction with the entries it lacks added from `new` (a merged run's further variants
    or depths): what was predicted before earlier rows were measured stays as it was."""
    if not old or not old.get("gpus"):
        return new
    for gpu, g in (new.get("gpus") or {}).items():
        og = old["gpus"].setdefault(gpu, g)
        for v, r in g["variants"].items():
            ov = og["variants"].setdefault(v, r)
            for d, x in r["depths"].items():
                ov["depths"].setdefault(d, x)
    return old


def predicted_ratio(doc: dict, gpu: str | None, variant: str, depth: int) -> float | None:
    gpus = (doc.get("predicted") or {}).get("gpus") or {}
    g = gpus.get(gpu) or gpus.get("NVIDIA H200") or {}
    r = ((g.get("variants") or {}).get(variant) or {}).get("depths", {}).get(str(depth)) or {}
    if r.get("vs_shipped") is not None:
        return r["vs_shipped"]
    return None


# ----------------------------------------------------------------------------- the GPU part
def build_all(
    depths: list[int], variant: str, jobs: int, log_dir: Path = REPO / "build" / "ring_sweep"
) -> dict[int, dict]:
    """Each depth's extension built in a process of its own, `jobs` at a time (load_extension's
    cache: the measuring process finds them built), its output in log_dir/depth-N.log.
    {depth: {ok, tag | error, seconds}}."""
    log_dir.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys; from monolith.megakernel import load_extension as L; "
        "print('TAG', L(sys.argv[1]).build_info['tag'])"
    )
    out: dict[int, dict] = {}
    pending = list(depths)
    running: list[tuple[int, subprocess.Popen, float]] = []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            d = pending.pop(0)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
            env.pop(kernel_spec.EXTRA_DEFINES_ENV, None)
            if defines_for(d):
                env[kernel_spec.EXTRA_DEFINES_ENV] = defines_for(d)
            log(f"build depth {d} ({defines_for(d) or 'the shipped build'})")
            with open(log_dir / f"depth-{d}.log", "w") as f:  # a file, not a pipe: nvcc's output cannot block it
                p = subprocess.Popen(
                    [sys.executable, "-c", code, variant], env=env, cwd=REPO, stdout=f, stderr=subprocess.STDOUT
                )
            running.append((d, p, time.monotonic()))
        for item in list(running):
            d, p, t0 = item
            if p.poll() is None:
                continue
            running.remove(item)
            text = (log_dir / f"depth-{d}.log").read_text(errors="replace")
            tag = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("TAG ")), None)
            dt = round(time.monotonic() - t0, 1)
            out[d] = {"ok": p.returncode == 0 and tag is not None, "tag": tag, "seconds": dt, "defines": defines_for(d)}
            if not out[d]["ok"]:
                out[d]["error"] = text[-3000:]
            log(f"  depth {d}: {'built ' + tag if out[d]['ok'] else 'BUILD FAILED'} in {dt} s")
        time.sleep(0.5)
    return out


def tokens_of(engine, prompts: list[list[int]], n: int, seq: list[int]) -> list[list[int]]:
    """The engine's free-running tokens on the gate's prompts (correctness.free_run) and one run past
    position LONG_PREFILL (the long kernel, and the wide one where its splits apply)."""
    from monolith.eval import correctness

    runs = [correctness.free_run(engine, p, n) for p in prompts]
    runs.append(correctness.free_run(engine, seq[:LONG_PREFILL], LONG_DECODE))
    return runs


def digest(runs: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(runs).encode()).hexdigest()[:16]


def first_difference(a: list[list[int]], b: list[list[int]]) -> dict | None:
    from monolith.eval.correctness import first_mismatch

    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        j = first_mismatch(x, y)
        if j is not None:
            return {"run": i, "step": j}
    return None if len(a) == len(b) else {"run": min(len(a), len(b)), "step": 0}


def free_gpu() -> None:
    """Callers drop their references first; then the memory really goes back."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def write(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


def measure_all(doc: dict, a, out: Path, tokens_by: dict) -> None:
    from monolith.bench import bwprobe, suite
    from monolith.bench.baselines import registry
    from monolith.bench.decode import BenchConfig
    from monolith.eval import correctness

    plan = doc["plan"]
    variants, depths, ref_d = plan["variants"], plan["depths"], plan["reference_depth"]
    done = {(r["variant"], r["depth"]) for r in doc["rows"] if r.get("status") == "ok"}
    todo = [(v, d) for v in variants for d in depths if (v, d) not in done and doc["builds"].get(str(d), {}).get("ok")]
    for v in variants:  # a build that failed: its rows say so
        for d in depths:
            b = doc["builds"].get(str(d), {})
            if not b.get("ok") and (v, d) not in done:
                doc["rows"] = [r for r in doc["rows"] if (r.get("variant"), r.get("depth")) != (v, d)]
                doc["rows"].append({"variant": v, "depth": d, "status": "failed", "reason": "the build failed"})
    if not todo:
        return
    gpu = doc["env"].get("gpu")
    # the GPU in hand's streaming read, once per run and before anything else runs on it: every
    # row's predicted µs/token divides by it (none, and the reason, where there is none)
    rec = bwprobe.resolve("cuda", gpu=gpu, log=log)
    if doc.get("bandwidth") and doc["bandwidth"] != rec:  # a merged file: its earlier rows' own
        doc.setdefault("bandwidth_merged", []).append(doc["bandwidth"])
    doc["bandwidth"] = rec
    bw = rec.get("tbs")
    ckpt, tok = suite.load_inputs(a.model)
    bench_prompts = suite.prompt_tokens("bench", tok)
    bcfg = BenchConfig.quick_config() if a.quick else BenchConfig()
    bcfg.runs = a.runs
    bcfg.power = False
    scfg = suite.SuiteConfig(
        engines=[f"megakernel-{v}" for v in variants],
        bench=bcfg,
        gate_prompts=a.gate_prompts,
        gate_tokens=a.gate_tokens,
        bandwidth=rec,
    )
    seq = suite.sweep_sequence(bench_prompts, max(max(bcfg.sweep_positions or (0,)) + 1, LONG_PREFILL + 1))
    gate_prompts = bench_prompts[: a.gate_prompts]
    fmts = {v: registry.weights_of(f"megakernel-{v}") for v, _d in todo}
    ckpts, oracles = {}, {}
    for fmt in dict.fromkeys(fmts.values()):
        t0 = time.perf_counter()
        log(f"oracle: fp32 reference on the {fmt} weights, {len(gate_prompts)} prompts x {a.gate_tokens} tokens")
        ck = ckpts[fmt] = registry.checkpoint_for(fmt, ckpt)
        orc = registry.oracle(ck, "cuda")
        oracles[fmt] = correctness.oracle_runs(orc, gate_prompts, a.gate_tokens)
        orc = None
        free_gpu()
        log(f"  oracle done in {time.perf_counter() - t0:.0f} s")
    for i, (v, d) in enumerate(todo):
        name = f"megakernel-{v}"
        log(f"[{i + 1}/{len(todo)}] {v} at {d} slots ({defines_for(d) or 'the shipped build'})")
        with build_env(d):
            row = suite.measure(
                name,
                registry.spec(name),
                ckpts[fmts[v]],
                tok,
                bench_prompts,
                seq,
                oracles[fmts[v]],
                scfg,
                None,
                bw,
                weights=fmts[v],
            )
            row = {"variant": v, "depth": d, "head_groups": head_groups(d), "defines": defines_for(d), **row}
            ring = (row.get("info") or {}).get("ring") or {}
            if row.get("status") == "ok" and ring.get("stages") != d:
                row.update(status="failed", reason=f"the engine runs a {ring.get('stages')}-slot ring, not {d}")
            if row.get("status") == "ok":
                try:
                    eng = registry.build(name, ckpts[fmts[v]], "cuda")
                    runs = tokens_of(eng, gate_prompts, a.gate_tokens, seq)
                    eng = None
                    free_gpu()
                    tokens_by[(v, d)] = runs
                    row["tokens"] = {"sha256_16": digest(runs), "runs": len(runs), "steps": sum(len(r) for r in runs)}
                except Exception as e:  # noqa: BLE001  (a row, not a crash)
                    row.update(status="failed", reason=f"token check: {type(e).__name__}: {e}")
        doc["rows"] = [r for r in doc["rows"] if (r.get("variant"), r.get("depth")) != (v, d)] + [row]
        compare_tokens(doc, tokens_by, ref_d)
        doc["summary"] = summarize(doc, gpu)
        write(doc, out)


def compare_tokens(doc: dict, tokens_by: dict, ref_d: int) -> None:
    """Each row's tokens against the reference depth's of its variant (this run's, else a merged
    file's digest)."""
    rows = {(r["variant"], r["depth"]): r for r in doc["rows"]}
    for (v, d), r in rows.items():
        t = r.get("tokens")
        if t is None:
            continue
        ref = rows.get((v, ref_d), {}).get("tokens")
        if ref is None:
            t.update(reference_depth=ref_d, equal=None)
            continue
        equal = t["sha256_16"] == ref["sha256_16"]
        diff = None
        if not equal and (v, d) in tokens_by and (v, ref_d) in tokens_by:
            diff = first_difference(tokens_by[(v, ref_d)], tokens_by[(v, d)])
        t.update(reference_depth=ref_d, equal=equal, first_difference=diff)


def summarize(doc: dict, gpu: str | None) -> list[dict]:
    ref_d = doc["plan"]["reference_depth"]
    rows = {(r["variant"], r.get("depth")): r for r in doc["rows"]}
    out = []
    for v in doc["plan"]["variants"]:
        base = ((rows.get((v, ref_d)) or {}).get("tok_s") or {}).get("median")
        for d in doc["plan"]["depths"]:
            r = rows.get((v, d))
            if r is None:
                continue
            ts = r.get("tok_s") or {}
            pr = predicted_ratio(doc, gpu, v, d)
            out.append(
                {
                    "variant": v,
                    "depth": d,
                    "head_groups": head_groups(d),
                    "status": r.get("status"),
                    "gate": (r.get("gate") or {}).get("passed"),
                    "tok_s_median": ts.get("median"),
                    "tok_s_min": ts.get("min"),
                    "tok_s_max": ts.get("max"),
                    "vs_reference": ts["median"] / base if base and ts.get("median") else None,
                    "predicted_vs_reference": pr,
                    "predicted_tok_s_from_measured_reference": base * pr if base and pr else None,
                    "tokens_equal": (r.get("tokens") or {}).get("equal"),
                    "reason": r.get("reason"),
                }
            )
    return out


def row_ok(s: dict, ref_d: int) -> bool:
    return s["status"] == "ok" and s["gate"] is True and (s["depth"] == ref_d or s["tokens_equal"] is True)


def table(summary: list[dict]) -> str:
    def f(x, spec):
        return "-" if x is None else format(x, spec)

    lines = [
        f"{'variant':<14} {'depth':>5} {'hg':>3} {'gate':<6} {'tok/s median (min-max)':<26} {'x ref':>6} "
        f"{'pred x':>7} tokens"
    ]
    for s in summary:
        tok = (
            "-"
            if s["tok_s_median"] is None
            else f"{s['tok_s_median']:,.0f} ({f(s['tok_s_min'], ',.0f')}-{f(s['tok_s_max'], ',.0f')})"
        )
        gate = {True: "PASS", False: "FAIL", None: "-"}[s["gate"]]
        eq = {True: "== ref", False: "DIFFER", None: "-"}[s["tokens_equal"]]
        lines.append(
            f"{s['variant']:<14} {s['depth']:>5} {s['head_groups']:>3} {gate:<6} {tok:<26} "
            f"{f(s['vs_reference'], '.3f'):>6} {f(s['predicted_vs_reference'], '.3f'):>7} {eq}"
            + (f"  ({s['reason']})" if s.get("reason") else "")
        )
    return "\n".join(lines)


def plan_text(plan: dict, predicted: dict | None) -> str:
    lines = [
        f"ring-depth sweep: variants {', '.join(plan['variants'])}; depths {plan['depths']} "
        f"(tokens checked against {plan['reference_depth']}); out {plan['out']}"
    ]
    for b in plan["builds"]:
        lines.append(
            f"  build depth {b['depth']:>2}: {kernel_spec.EXTRA_DEFINES_ENV}={b['defines'] or '(unset: shipped)'}"
            f"  head groups {b['head_groups']}  nvcc {' '.join(b['nvcc_flags_sm90a'])}"
        )
    g = plan["gate"]
    lines.append(
        f"  per variant x depth: gate ({g['prompts']} prompts x {g['tokens']} tokens vs the fp32 oracle of "
        f"its weights: {', '.join(plan['oracles'])}), {plan['runs']} timed runs + the position sweep "
        f"(bench/suite.py measure{', quick' if plan['quick'] else ''}), the token check"
    )
    lines.append(f"  {len(plan['engines'])} engines; estimated wall ~{plan['estimated_wall_s'] / 60:.0f} min")
    if predicted and predicted.get("gpus"):
        for gpu, g in predicted["gpus"].items():
            parts = []
            for v, r in g["variants"].items():
                ds = ", ".join(
                    f"{d}: "
                    + (f"{x['tok_s']:,.0f}" if x.get("tok_s") else "?")
                    + (f" ({x['vs_shipped']:.3f})" if x.get("vs_shipped") else "")
                    for d, x in r["depths"].items()
                )
                parts.append(f"{v} {ds}")
            lines.append(f"  predicted tok/s on {gpu}: " + "; ".join(parts))
    elif predicted:
        lines.append(f"  predicted: {predicted.get('error')}")
    return "\n".join(lines)


def new_doc(plan: dict, predicted: dict, env: dict) -> dict:
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "label": "dev measurement of diagnostic builds (MONOLITH_NVCC_DEFINES, kernel/config.cuh "
        "MONOLITH_RING_DEPTH_SM90): not headline numbers",
        "plan": plan,
        "predicted": predicted,
        "env": env,
        "builds": {},
        "rows": [],
    }


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Refuses (exit 2) on a machine without a CUDA GPU unless --dry-run.",
    )
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="comma list of sm_90 streaming variants")
    ap.add_argument("--depths", default=",".join(map(str, DEFAULT_DEPTHS)), help="ring depths in 16 KB slots (6..12)")
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="result JSON (default results/ktoken/ring_sweep.json)"
    )
    ap.add_argument("--runs", type=int, default=5, help="timed runs per row (the harness's 5)")
    ap.add_argument("--gate-prompts", type=int, default=20, help="gate prompts (the harness's 20)")
    ap.add_argument("--gate-tokens", type=int, default=256, help="tokens per gate prompt (the harness's 256)")
    ap.add_argument("--quick", action="store_true", help="the harness's quick timing config (3 prompts x 64 tokens)")
    ap.add_argument("--model", default=None, help="checkpoint (default: the synthetic one, as monolith bench)")
    ap.add_argument("--jobs", type=int, default=0, help="builds at once (default: one per depth)")
    ap.add_argument("--build-only", action="store_true", help="build every depth's extension, then stop")
    ap.add_argument("--merge", action="store_true", help="keep the ok rows of an existing --out and measure the rest")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the prediction; no GPU needed")
    ap.add_argument(
        "--predict-only",
        action="store_true",
        help="write the plan and the prediction to --out (no rows), then stop; no GPU needed",
    )
    a = ap.parse_args(argv)
    try:
        variants, depths = parse_variants(a.variants), parse_depths(a.depths)
        if a.runs < 1 or a.gate_prompts < 1 or a.gate_tokens < 2:
            raise MonolithError("--runs and --gate-prompts must be >= 1, --gate-tokens >= 2")
    except MonolithError as e:
        print(f"ring_sweep: {e}", file=sys.stderr)
        return 2
    plan = make_plan(variants, depths, a)
    try:
        predicted = predict(variants, depths)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        predicted = {"error": f"{type(e).__name__}: {e}"}
        log(f"no prediction: {predicted['error']}")
    if a.dry_run:
        print(plan_text(plan, predicted))
        return 0
    if a.predict_only:
        from monolith import envinfo

        print(plan_text(plan, predicted))
        write(new_doc(plan, predicted, envinfo.collect()), a.out)
        log(f"prediction written to {a.out} (no measurement)")
        return 0

    import torch

    if not torch.cuda.is_available():
        print("ring_sweep: needs a CUDA GPU (none is visible); --dry-run prints the plan without one", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        print(
            f"ring_sweep: the sweep sets the sm_90 ring (MONOLITH_RING_DEPTH_SM90); this GPU is sm_{major}{minor}",
            file=sys.stderr,
        )
        return 2
    from monolith import envinfo

    print(plan_text(plan, predicted), flush=True)
    env = envinfo.collect("cuda")
    if a.merge and a.out.is_file():
        try:
            doc = json.loads(a.out.read_text())
        except (OSError, ValueError) as e:
            print(f"ring_sweep: cannot read {a.out} to merge: {e}", file=sys.stderr)
            return 2
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            print(f"ring_sweep: {a.out} is not a {SCHEMA} file; refusing to merge", file=sys.stderr)
            return 2
        doc.setdefault("merged_plans", []).append(plan)
        doc["plan"]["variants"] = list(dict.fromkeys([*doc["plan"]["variants"], *variants]))
        doc["plan"]["depths"] = list(dict.fromkeys([*doc["plan"]["depths"], *depths]))
        doc["predicted"] = merge_predicted(doc.get("predicted"), predicted)
        if not doc.get("rows"):  # a prediction-only file (--predict-only): this run's environment
            doc["env"] = env
        elif doc["env"].get("gpu") != env.get("gpu"):
            print(
                f"ring_sweep: {a.out} was measured on {doc['env'].get('gpu')}, this is {env.get('gpu')}; "
                "refusing to merge rows of two GPUs",
                file=sys.stderr,
            )
            return 2
        else:
            doc.setdefault("env_merged", []).append(env)
        doc.setdefault("builds", {})
        doc.setdefault("rows", [])
    else:
        doc = new_doc(plan, predicted, env)
    write(doc, a.out)  # the prediction is on disk before anything is measured
    log(f"prediction written to {a.out}")
    t0 = time.perf_counter()
    builds = build_all(depths, variants[0], a.jobs or len(depths))
    doc["builds"].update({str(d): b for d, b in builds.items()})
    write(doc, a.out)
    if a.build_only:
        bad = [d for d, b in builds.items() if not b["ok"]]
        for d in bad:
            print(builds[d].get("error", "")[-1500:], file=sys.stderr)
        log(f"builds done in {time.perf_counter() - t0:.0f} s" + (f"; FAILED: depths {bad}" if bad else ""))
        return 1 if bad else 0
    tokens_by: dict = {}
    measure_all(doc, a, a.out, tokens_by)
    doc["summary"] = summarize(doc, doc["env"].get("gpu"))
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    write(doc, a.out)
    log(f"wrote {a.out} ({doc['wall_s']:.0f} s)")
    print(table(doc["summary"]))
    ref_d = doc["plan"]["reference_depth"]
    bad = [f"{s['variant']}@{s['depth']}" for s in doc["summary"] if not row_ok(s, ref_d)]
    if bad:
        print(f"ring_sweep: FAIL: {', '.join(bad)} (gate, ring depth or tokens; see {a.out})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
