"""The ring-depth sweep (issue 48 step 0; scripts/ring_sweep.py) and its build switch,
MONOLITH_RING_DEPTH_SM90 (kernel/config.cuh), on the CPU: the dry-run plan, the refusals, the define's
way into both compilers and its range, the ring protocol models at every depth the switch allows, the
time model's prediction, the sweep's GPU steps with the harness's functions replaced, and (with nvcc)
the kernel's own asserts and a depth-7 compile without spills."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SM90A_GENCODE

from monolith import REPO_ROOT, kernel_spec
from monolith import megakernel as mk
from monolith.errors import MonolithError

_spec = importlib.util.spec_from_file_location("ring_sweep", REPO_ROOT / "scripts" / "ring_sweep.py")
rs = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("ring_sweep", rs)
_spec.loader.exec_module(rs)

ENV = kernel_spec.EXTRA_DEFINES_ENV
K = kernel_spec.config_constants()
KERNEL = REPO_ROOT / "kernel"
ARCH = SM90A_GENCODE  # what the fake_loader fixture (tests/conftest.py) reports
DEPTHS = range(int(K["kStagesSm90Min"]), int(K["kStagesSm90Max"]) + 1)


# ----------------------------------------------------------------------------- the switch
def test_the_default_build_is_the_shipped_depth():
    """The parser reads the switch's default, so every constant derived from the depth is the shipped
    build's; the range's ends are what the kernel's asserts say they are."""
    assert K["kStagesSm90"] == K["kStagesSm90Shipped"] == 12
    assert K["kRingBytesSm90"] == 12 * K["kSlotBytes"]
    assert not any(k.startswith("MONOLITH") for k in K)  # only the k-names come back
    lo, hi = int(K["kStagesSm90Min"]), int(K["kStagesSm90Max"])
    block_state = 32 * 1024
    assert hi * K["kSlotBytes"] + block_state <= K["kSmemPerBlockSm90"] < (hi + 1) * K["kSlotBytes"] + block_state
    gemv = (KERNEL / "stream_gemv.cuh").read_text()
    mlp_round = int(re.search(r"constexpr int kMlpRoundSlots = (\d+);", gemv).group(1))
    assert lo == mlp_round  # MLP-1's bf16 round of 3 units held whole, and nothing shallower
    cfg = (KERNEL / "config.cuh").read_text()
    assert "#ifndef MONOLITH_RING_DEPTH_SM90\n#define MONOLITH_RING_DEPTH_SM90 kStagesSm90Shipped\n#endif" in cfg
    assert "constexpr int kStagesSm90 = MONOLITH_RING_DEPTH_SM90;" in cfg


def test_the_parser_evaluates_a_switch_default_in_order(tmp_path):
    h = tmp_path / "config.cuh"
    h.write_text(
        "constexpr int kA = 3;\n#ifndef MONOLITH_X\n#define MONOLITH_X kA * 2\n#endif\n"
        "constexpr int kB = MONOLITH_X + 1;  // 7\n"
    )
    assert kernel_spec.config_constants(h) == {"kA": 3, "kB": 7}
    h.write_text("#define MONOLITH_X $(id)\nconstexpr int kB = 1;\n")
    with pytest.raises(ValueError, match="cannot evaluate MONOLITH_X"):
        kernel_spec.config_constants(h)


@pytest.mark.parametrize("value", ["5", "13", "0", "x", "", "7.5", "-7"])
def test_an_impossible_depth_is_refused_in_one_line(value):
    tok = "MONOLITH_RING_DEPTH_SM90" + (f"={value}" if value else "")
    with pytest.raises(MonolithError) as ei:
        kernel_spec.parse_extra_defines(f"MONOLITH_RING_RELEASE=16 {tok}")
    msg = str(ei.value)
    assert "\n" not in msg and "cannot build: it takes an integer from 6 to 12" in msg


def test_every_depth_of_the_range_parses():
    for d in DEPTHS:
        assert kernel_spec.parse_extra_defines(f"MONOLITH_RING_DEPTH_SM90={d}") == [f"MONOLITH_RING_DEPTH_SM90={d}"]


def test_both_compilers_get_the_depth(fake_loader, monkeypatch):
    """nvcc builds the kernels at the depth; the host compiler builds bindings.cpp's constants() (the
    ring the host sizes and checks) with it too; the build is one of its own."""
    plain = mk.load_extension("fp8-stream")
    assert fake_loader[0]["extra_cflags"] == ["-O2", "-std=c++17"]  # the shipped build: as before
    monkeypatch.setenv(ENV, "MONOLITH_RING_DEPTH_SM90=7")
    ext = mk.load_extension("fp8-stream")
    kw = fake_loader[1]
    assert kw["extra_cuda_cflags"] == [*kernel_spec.build_flags("fp8-stream"), "-DMONOLITH_RING_DEPTH_SM90=7", ARCH]
    assert kw["extra_cflags"] == ["-O2", "-std=c++17", "-DMONOLITH_RING_DEPTH_SM90=7"]
    assert ext.build_info["extra_defines"] == ["MONOLITH_RING_DEPTH_SM90=7"]
    assert ext.build_info["tag"] != plain.build_info["tag"]


def test_an_impossible_depth_never_reaches_the_builder(fake_loader, monkeypatch):
    monkeypatch.setenv(ENV, "MONOLITH_RING_DEPTH_SM90=4")
    with pytest.raises(MonolithError, match="MONOLITH_RING_DEPTH_SM90=4 cannot build"):
        mk.load_extension("bf16-stream")
    assert fake_loader == []


def test_the_host_sizes_the_ring_from_the_build():
    """stream_ring takes the depth from the extension's constants(), never from a constant of its own."""
    ext7 = {
        "stages_sm90": 7,
        "ring_bytes_sm90": 7 * 16384,
        "smem_per_block_sm90": 227 * 1024,
        "stages_sm120": 4,
        "ring_bytes_sm120": 4 * 16384,
        "smem_per_block_sm120": 99 * 1024,
    }
    ring = mk.stream_ring(mk.variant_spec("bf16-stream"), (9, 0), ext7)
    assert (ring["stages"], ring["ring_bytes"]) == (7, 7 * 16384)
    bindings = (KERNEL / "bindings.cpp").read_text()
    assert 'd["stages_sm90"] = kStagesSm90;' in bindings and 'd["ring_bytes_sm90"] = kRingBytesSm90;' in bindings
    assert (
        "Policy<W, KernelKind::kShort, false, Cfg::kTcGemv, Cfg::kTcVecs>::kRingBytes"
        in (KERNEL / "decode_step.cuh").read_text()
    )


def test_the_shipped_depth_rules_stay_asserted_at_the_shipped_depth():
    gemv = (KERNEL / "stream_gemv.cuh").read_text()
    assert "kRoundSlots <= kStagesSm90Shipped / 2 && kMlpRoundSlots <= kStagesSm90Shipped / 2" in gemv
    assert "kHeadRoundSlotsMax <= kStagesSm90Shipped / 2" in gemv
    sched = (KERNEL / "schedule_stream.cuh").read_text()
    assert "static_assert(ring_fits<Cfg, P>()" in sched
    assert "(!P::kHeadWarp || P::kStages % head_groups(P::kStages) == 0)" in sched


# ----------------------------------------------------------------------------- head groups, ring models
def test_head_groups_mirror_the_kernel():
    sched = (KERNEL / "schedule_stream.cuh").read_text()
    assert "return stages % kHeadGroups == 0 ? kHeadGroups : stages % 2 == 0 ? 2 : 1;" in sched
    assert int(re.search(r"constexpr int kHeadGroups = (\d+);", sched).group(1)) == 4
    assert "constexpr int NG = head_groups(P::kStages);" in (KERNEL / "phase_head.cuh").read_text()
    assert [rs.head_groups(d) for d in (12, 10, 8, 7, 6, 4)] == [4, 2, 4, 1, 2, 4]
    for d in DEPTHS:
        ng = rs.head_groups(d)
        g = 16 // ng
        assert d % ng == 0 and 16 % ng == 0 and 16 % g == 0  # phase_head.cuh's static_asserts (R = 16)


@pytest.mark.parametrize("depth", list(DEPTHS))
def test_ring_models_at_every_experiment_depth(monkeypatch, depth):
    """The landed-count model and the warp head's parity model (their own tests run 12 slots) at the
    depth, the head with the groups head_groups gives it."""
    import tests.test_head_ring_model as head
    import tests.test_slot_landed_model as landed

    monkeypatch.setattr(landed, "STAGES", depth)
    for seed in range(10):
        assert landed.run(ncopies=5 * depth + 7, seed=seed) == []
    monkeypatch.setattr(head, "STAGES", depth)
    for seed in range(10):
        assert head.run_ring("groups", rs.head_groups(depth), nslots=75, seed=seed) == [], seed


# ----------------------------------------------------------------------------- plan, refusals
def test_dry_run_prints_the_plan(capsys):
    assert rs.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "variants bf16-stream, fp8-stream, nvfp4-stream; depths [12, 10, 7] (tokens checked against 12)" in out
    assert "build depth 12: MONOLITH_NVCC_DEFINES=(unset: shipped)  head groups 4" in out
    assert "-DMONOLITH_RING_DEPTH_SM90=10" in out and "-DMONOLITH_RING_DEPTH_SM90=7" in out
    assert "9 engines" in out and "predicted tok/s on NVIDIA H200" in out and "predicted tok/s on NVIDIA H100" in out


def test_the_plan():
    a = SimpleNamespace(gate_prompts=20, gate_tokens=256, runs=5, quick=False, out=Path("x.json"))
    plan = rs.make_plan(["fp8-stream", "bf16-stream"], [10, 12], a)
    assert plan["reference_depth"] == 12 and plan["oracles"] == ["fp8", "bf16"]
    assert [b["defines"] for b in plan["builds"]] == ["MONOLITH_RING_DEPTH_SM90=10", None]
    assert plan["builds"][0]["nvcc_flags_sm90a"][-2:] == ["-DMONOLITH_RING_DEPTH_SM90=10", ARCH]
    assert len(plan["engines"]) == 4 and plan["estimated_wall_s"] > 0
    assert rs.make_plan(["fp8-stream"], [10, 7], a)["reference_depth"] == 10  # no 12: the first depth


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--depths", "12,5"], "--depths: MONOLITH_NVCC_DEFINES: MONOLITH_RING_DEPTH_SM90=5 cannot build"),
        (["--depths", "12,12"], "--depths: 12 is given twice"),
        (["--depths", ","], "--depths: no depth given"),
        (["--variants", "bf16-upstream"], "--variants: bf16-upstream has no sm_90 ring"),
        (["--variants", "fp8-stream-sm120"], "--variants: fp8-stream-sm120 has no sm_90 ring"),
        (["--variants", "fp9-stream"], "unknown kernel variant 'fp9-stream'"),
        (["--runs", "0"], "--runs and --gate-prompts must be >= 1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(capsys, args, msg):
    assert rs.main([*args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err


def test_refuses_without_a_gpu(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "r.json"
    assert rs.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "ring_sweep: needs a CUDA GPU (none is visible); --dry-run prints the plan without one\n"
    assert not out.exists()


def test_refuses_without_a_gpu_as_a_script(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO_ROOT))
    env.pop(ENV, None)
    p = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "ring_sweep.py"), "--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs a CUDA GPU" in p.stderr
    assert not (tmp_path / "r.json").exists()


def test_refuses_another_arch(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (12, 0))
    assert rs.main(["--out", "/nonexistent/r.json"]) == 2
    assert "this GPU is sm_120" in capsys.readouterr().err


def test_build_env_sets_and_restores(monkeypatch):
    monkeypatch.setenv(ENV, "MONOLITH_RING_RELEASE=16")
    with rs.build_env(7) as d:
        assert d == os.environ[ENV] == "MONOLITH_RING_DEPTH_SM90=7"
    assert os.environ[ENV] == "MONOLITH_RING_RELEASE=16"
    with rs.build_env(12) as d:
        assert d is None and ENV not in os.environ  # the shipped build: no define at all
    assert os.environ[ENV] == "MONOLITH_RING_RELEASE=16"


# ----------------------------------------------------------------------------- the prediction
def test_phase_rounds_follow_the_kernel_constants():
    k = rs.model_constants()
    assert rs.phase_rounds("bf16", 12, k) == {
        "s_qkv": [4],
        "s_attn": [1, 1],
        "s_oproj": [2],
        "s_mlp": [6],
        "s_down": [3],
    }
    assert rs.phase_rounds("fp8", 7, k) == {"s_qkv": [2], "s_attn": [1, 1], "s_oproj": [1], "s_mlp": [3], "s_down": [2]}
    assert rs.phase_rounds("nvfp4", 7, k)["s_mlp"] == [2]
    assert rs.phase_rounds("bf16", 4, k)["s_mlp"] == [4, 2]  # kMlpRoundUnits in a ring under 6 slots: 2 units
    pol = (KERNEL / "policy.cuh").read_text()
    assert rs.hold_cycles("bf16", pol) == 1500 and rs.hold_cycles("fp8", pol) == 2000


def _chain(work=1.0, hop=0.5):
    names = ("s_qkv", "s_attn", "s_oproj", "s_mlp", "s_down")
    return {"measured": {"phases": [{"phase": n, "hop_us": hop, "open_us": 0.0, "work_us": work} for n in names]}}


def test_ring_model_without_a_memory_limit_is_the_chain():
    rounds = rs.phase_rounds("bf16", 6, rs.model_constants())
    for depth in (12, 6):
        m = rs.ring_layer_us(_chain(), rounds, depth, bw_tbs=1e6, latency_us=1e-6, hold_us=0.0)
        assert m["layer_us"] == pytest.approx(5 * 1.5) and m["ring_wait_us_per_layer"] == pytest.approx(0.0, abs=1e-6)


def test_ring_model_charges_a_shallow_ring_and_refuses_one_a_round_cannot_fit():
    k = rs.model_constants()
    deep = rs.ring_layer_us(_chain(0.2, 0.1), rs.phase_rounds("bf16", 12, k), 12, 3.0, 0.4, 0.8)
    shallow = rs.ring_layer_us(_chain(0.2, 0.1), rs.phase_rounds("bf16", 6, k), 6, 3.0, 0.4, 0.8)
    assert shallow["layer_us"] > deep["layer_us"] and shallow["ring_wait_us_per_layer"] > 0
    with pytest.raises(RuntimeError, match="waits on a slot its own round holds"):
        rs.ring_layer_us(_chain(), {**rs.phase_rounds("bf16", 12, k), "s_mlp": [6]}, 5, 3.0, 0.4, 0.8)


def test_the_prediction():
    p = rs.predict(list(rs.DEFAULT_VARIANTS), [12, 10, 8, 7, 6])
    assert set(p["gpus"]) == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} and p["dram_latency_us"] > 0
    for gpu, g in p["gpus"].items():
        for v, r in g["variants"].items():
            ds = r["depths"]
            assert ds["12"]["token_delta_us"] == 0.0 and ds["12"]["vs_shipped"] == pytest.approx(1.0), (gpu, v)
            assert ds["12"]["tok_s"] == pytest.approx(r["baseline_tok_s"])
            ratios = [ds[str(d)]["vs_shipped"] for d in (12, 10, 8, 7, 6)]
            assert all(0 < x <= 1.0 + 1e-12 for x in ratios)
            assert ratios == sorted(ratios, reverse=True), (gpu, v, ratios)  # a shallower ring never helps
            assert [ds[str(d)]["head_groups"] for d in (12, 10, 7)] == [4, 2, 1]
    json.dumps(p)  # JSON-ready, finite numbers only
    assert "nan" not in json.dumps(p).lower()


# ----------------------------------------------------------------------------- the GPU steps, faked
class FakeEngine:
    def __init__(self, depth, drift):
        self.depth, self.drift = depth, drift

    def reset(self):
        pass


def _fake_gpu(monkeypatch, stages_seen=None, differ_at=None):
    """measure_all with the harness's functions replaced: records the define each step saw."""
    from monolith.bench import bwprobe, suite
    from monolith.bench.baselines import registry
    from monolith.eval import correctness

    calls = []

    def resolve(device, *, gpu, log=print, **k):
        calls.append(("bandwidth", device, gpu))
        return {"tbs": 3.5, "status": "measured", "gpu": gpu, "source": f"measured now on {gpu}"}

    monkeypatch.setattr(bwprobe, "resolve", resolve)
    monkeypatch.setattr(suite, "load_inputs", lambda model: calls.append(("load_inputs",)) or ("ckpt", "tok"))
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3], [4, 5], [6]])
    monkeypatch.setattr(registry, "checkpoint_for", lambda fmt, ck: f"ckpt-{fmt}")
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: "oracle")
    monkeypatch.setattr(correctness, "oracle_runs", lambda orc, prompts, n: SimpleNamespace(runs=prompts, desc={}))
    monkeypatch.setattr(rs, "free_gpu", lambda: None)

    def depth_now():
        m = re.search(r"MONOLITH_RING_DEPTH_SM90=(\d+)", os.environ.get(ENV, ""))
        return int(m.group(1)) if m else 12

    def measure(name, spec, ck, tok, prompts, seq, oset, cfg, budget, bw, weights):
        d = depth_now()
        calls.append(("measure", name, d, ck, weights))
        calls.append(("measure_bw", bw, cfg.bandwidth["tbs"] if cfg.bandwidth else None))
        stages = (stages_seen or {}).get(d, d)
        return {
            "engine": name,
            "status": "ok",
            "gate": {"passed": True},
            "tok_s": {"median": 1000.0 - d, "min": 990.0 - d, "max": 1010.0 - d},
            "info": {"ring": {"stages": stages}},
        }

    monkeypatch.setattr(suite, "measure", measure)
    monkeypatch.setattr(registry, "build", lambda name, ck, dev: FakeEngine(depth_now(), depth_now() == differ_at))

    def free_run(engine, prompt, n):
        calls.append(("free_run", engine.depth, len(prompt), n))
        out = [sum(prompt) + i for i in range(n)]
        if engine.drift and len(prompt) == 2:
            out[3] += 1
        return out

    monkeypatch.setattr(correctness, "free_run", free_run)
    return calls


def _doc(variants, depths, tmp_path):
    a = SimpleNamespace(gate_prompts=2, gate_tokens=8, runs=1, quick=True, out=tmp_path / "r.json", model=None)
    plan = rs.make_plan(variants, depths, a)
    doc = rs.new_doc(plan, rs.predict(variants, depths), {"gpu": "NVIDIA H200"})
    doc["builds"] = {str(d): {"ok": True} for d in depths}
    return doc, a


def test_measure_all_runs_each_depth_on_its_own_build(monkeypatch, tmp_path):
    calls = _fake_gpu(monkeypatch)
    doc, a = _doc(["fp8-stream", "bf16-stream"], [12, 7], tmp_path)
    rs.measure_all(doc, a, a.out, {})
    measured = [c[1:] for c in calls if c[0] == "measure"]
    assert measured == [
        ("megakernel-fp8-stream", 12, "ckpt-fp8", "fp8"),
        ("megakernel-fp8-stream", 7, "ckpt-fp8", "fp8"),
        ("megakernel-bf16-stream", 12, "ckpt-bf16", "bf16"),
        ("megakernel-bf16-stream", 7, "ckpt-bf16", "bf16"),
    ]
    # the token check: the gate's 2 prompts x 8 tokens and the long run, on the depth's build
    runs = [c for c in calls if c[0] == "free_run"]
    assert (7, rs.LONG_PREFILL, rs.LONG_DECODE) in [c[1:] for c in runs] and len(runs) == 4 * 3
    summary = json.loads(a.out.read_text())["summary"]
    assert [(s["variant"], s["depth"], s["tokens_equal"]) for s in summary] == [
        ("fp8-stream", 12, True),
        ("fp8-stream", 7, True),
        ("bf16-stream", 12, True),
        ("bf16-stream", 7, True),
    ]
    s7 = summary[1]
    assert s7["vs_reference"] == pytest.approx(993 / 988) and s7["predicted_vs_reference"] is not None
    assert all(rs.row_ok(s, 12) for s in summary)
    assert "fp8-stream" in rs.table(summary) and "== ref" in rs.table(summary)


def test_measure_all_measures_the_gpus_bandwidth_once_first_and_every_row_uses_it(monkeypatch, tmp_path):
    calls = _fake_gpu(monkeypatch)
    doc, a = _doc(["fp8-stream", "bf16-stream"], [12, 7], tmp_path)
    rs.measure_all(doc, a, a.out, {})
    assert calls[0] == ("bandwidth", "cuda", "NVIDIA H200") and calls[1] == ("load_inputs",)
    assert [c for c in calls if c[0] == "bandwidth"] == [calls[0]]  # once per run, not per row
    assert [c[1:] for c in calls if c[0] == "measure_bw"] == [(3.5, 3.5)] * 4  # the value and its record
    on_disk = json.loads(a.out.read_text())
    assert on_disk["bandwidth"]["tbs"] == 3.5 and on_disk["bandwidth"]["gpu"] == "NVIDIA H200"
    # a merged run measures again; the earlier run's record stays beside its rows
    doc["rows"] = [r for r in doc["rows"] if r["depth"] != 7]
    doc["bandwidth"] = {**doc["bandwidth"], "tbs": 3.4}
    rs.measure_all(doc, a, a.out, {})
    assert doc["bandwidth"]["tbs"] == 3.5 and doc["bandwidth_merged"][0]["tbs"] == 3.4


def test_measure_all_fails_tokens_that_differ_and_a_ring_that_is_not_the_depth(monkeypatch, tmp_path):
    _fake_gpu(monkeypatch, stages_seen={10: 12}, differ_at=7)
    doc, a = _doc(["fp8-stream"], [12, 10, 7], tmp_path)
    tokens_by: dict = {}
    rs.measure_all(doc, a, a.out, tokens_by)
    s = {x["depth"]: x for x in doc["summary"]}
    assert s[12]["tokens_equal"] is True and rs.row_ok(s[12], 12)
    assert s[10]["status"] == "failed" and "a 12-slot ring, not 10" in s[10]["reason"] and not rs.row_ok(s[10], 12)
    assert s[7]["tokens_equal"] is False and not rs.row_ok(s[7], 12)
    row7 = next(r for r in doc["rows"] if r["depth"] == 7)
    assert row7["tokens"]["first_difference"] == {"run": 1, "step": 3}
    assert "DIFFER" in rs.table(doc["summary"])


def test_merge_keeps_the_earlier_prediction():
    old = rs.predict(["fp8-stream"], [12, 7])
    new = rs.predict(["fp8-stream", "bf16-stream"], [12, 10, 7])
    old["gpus"]["NVIDIA H200"]["variants"]["fp8-stream"]["depths"]["7"]["marker"] = 1
    m = rs.merge_predicted(old, new)
    h = m["gpus"]["NVIDIA H200"]["variants"]
    assert h["fp8-stream"]["depths"]["7"]["marker"] == 1 and "10" in h["fp8-stream"]["depths"]
    assert "bf16-stream" in h


# ----------------------------------------------------------------------------- with nvcc
NVCC = shutil.which(os.environ.get("NVCC", "nvcc"))
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")

_PROBE = """#include "config.cuh"
#include "policy.cuh"
using namespace monolith;
static_assert(Policy<WeightsE4M3, KernelKind::kShort, false>::kStages == WANT, "the sm_90 policy takes the depth");
static_assert(Policy<WeightsBf16, KernelKind::kLong, false>::kRingBytes == WANT * kSlotBytes, "its ring");
static_assert(Policy<WeightsBf16, KernelKind::kShort, true>::kStages == kStagesSm120, "sm_120's ring does not move");
static_assert(Policy<WeightsBf16, KernelKind::kShort, false>::kMlpRoundUnits == 3, "MLP-1 keeps 3 units");
"""


def _nvcc_probe(tmp_path, depth: int, want: int) -> subprocess.CompletedProcess:
    src = tmp_path / "probe.cu"
    src.write_text(_PROBE)
    cmd = [
        NVCC,
        "-std=c++17",
        ARCH,
        "-I",
        str(KERNEL),
        f"-DMONOLITH_RING_DEPTH_SM90={depth}",
        f"-DWANT={want}",
        "-c",
        str(src),
        "-o",
        str(tmp_path / "probe.o"),
    ]
    return subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True, timeout=300)


@needs_nvcc
def test_the_policy_takes_the_depth_and_the_kernel_refuses_one_outside_the_range(tmp_path):
    assert _nvcc_probe(tmp_path, 7, 7).returncode == 0
    p = _nvcc_probe(tmp_path, 5, 5)
    assert p.returncode != 0
    errors = [ln for ln in p.stderr.splitlines() if ": error:" in ln]
    # the first error names the switch and its range, in one line (the probe's own MLP assert follows)
    assert (
        "config.cuh" in errors[0] and "MONOLITH_RING_DEPTH_SM90: the sm_90 ring takes kStagesSm90Min (6)" in errors[0]
    )


@needs_nvcc
def test_depth_7_compiles_for_sm90a_without_spills(tmp_path):
    """The plain kernel build (every variant of megakernel.cu) at 7 slots, as load_extension's nvcc
    flags for sm_90a make it: it compiles, and ptxas reports no spill in any kernel."""
    _ca = importlib.util.spec_from_file_location("compile_all_rs", REPO_ROOT / "scripts" / "compile_all.py")
    ca = importlib.util.module_from_spec(_ca)
    sys.modules.setdefault("compile_all_rs", ca)
    _ca.loader.exec_module(ca)
    flags = kernel_spec.build_flags("bf16-stream", extra_defines=["MONOLITH_RING_DEPTH_SM90=7"])
    t = ca.Target("kernel ring-7", KERNEL / "megakernel.cu", flags, kernel=True, build="plain", variants="all")
    cmd = ca.compile_command(NVCC, t, "sm_90a", tmp_path / "mk7.o")  # compile_all's own command line
    t0 = time.monotonic()
    p = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True, timeout=900, cwd=REPO_ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    kernels = ca.parse_ptxas(p.stderr + p.stdout)
    streams = [n for n in kernels if re.search(r"decode_step\w*ILi[245]E", n)]
    assert len(streams) == 8  # bf16 / fp8 / nvfp4-stream: short, long, wide (no NVFP4 wide)
    assert all(k["spill_st"] == 0 and k["spill_ld"] == 0 for k in kernels.values()), kernels
    print(f"depth-7 compile: {time.monotonic() - t0:.0f} s")


def _fake_main(monkeypatch, gpu="NVIDIA H200"):
    from monolith import envinfo

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(envinfo, "collect", lambda *a, **k: {"gpu": gpu})
    built = []

    def build_all(depths, variant, jobs):
        built.append((list(depths), variant, jobs))
        return {d: {"ok": True, "tag": f"t{d}", "seconds": 1.0, "defines": rs.defines_for(d)} for d in depths}

    monkeypatch.setattr(rs, "build_all", build_all)
    return built


ARGS = ["--gate-prompts", "2", "--gate-tokens", "8", "--runs", "1", "--quick"]


def test_main_writes_the_prediction_first_then_the_rows_and_the_table(monkeypatch, tmp_path, capsys):
    built = _fake_main(monkeypatch)
    calls = _fake_gpu(monkeypatch)
    out = tmp_path / "ring.json"
    from monolith.bench import suite

    measure = suite.measure
    on_disk = []

    def measure_seeing_the_file(*a, **k):
        on_disk.append(json.loads(out.read_text()))
        return measure(*a, **k)

    monkeypatch.setattr(suite, "measure", measure_seeing_the_file)
    assert rs.main(["--variants", "fp8-stream", "--depths", "12,7", "--out", str(out), *ARGS]) == 0
    first = on_disk[0]
    assert first["rows"] == [] and first["predicted"]["gpus"]["NVIDIA H200"]["variants"]["fp8-stream"]["depths"]["7"]
    assert built == [([12, 7], "fp8-stream", 2)]
    doc = json.loads(out.read_text())
    assert [(r["variant"], r["depth"], r["status"]) for r in doc["rows"]] == [
        ("fp8-stream", 12, "ok"),
        ("fp8-stream", 7, "ok"),
    ]
    assert doc["builds"]["7"]["defines"] == "MONOLITH_RING_DEPTH_SM90=7" and doc["env"] == {"gpu": "NVIDIA H200"}
    assert len([c for c in calls if c[0] == "measure"]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("variant") and lines[-1].startswith("fp8-stream") and "== ref" in lines[-1]


def test_merge_into_a_prediction_only_file(monkeypatch, tmp_path, capsys):
    out = tmp_path / "ring.json"
    assert rs.main(["--predict-only", "--variants", "fp8-stream", "--depths", "12,7", "--out", str(out)]) == 0
    predicted = json.loads(out.read_text())["predicted"]
    _fake_main(monkeypatch)
    _fake_gpu(monkeypatch)
    assert rs.main(["--variants", "fp8-stream", "--depths", "12,7", "--out", str(out), "--merge", *ARGS]) == 0
    doc = json.loads(out.read_text())
    assert doc["predicted"] == predicted and doc["env"] == {"gpu": "NVIDIA H200"} and len(doc["rows"]) == 2
    # a second merge adds a variant's rows; the same GPU only
    assert rs.main(["--variants", "bf16-stream", "--depths", "12,7", "--out", str(out), "--merge", *ARGS]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 4 and doc["plan"]["variants"] == ["fp8-stream", "bf16-stream"]
    assert "bf16-stream" in doc["predicted"]["gpus"]["NVIDIA H200"]["variants"]
    _fake_main(monkeypatch, gpu="NVIDIA H100 80GB HBM3")
    assert rs.main(["--variants", "nvfp4-stream", "--out", str(out), "--merge", *ARGS]) == 2
    assert "refusing to merge rows of two GPUs" in capsys.readouterr().err


def test_build_all_builds_each_depth_with_its_define(monkeypatch, tmp_path):
    """Stand-in for the Python that runs load_extension: prints the define it was given as its tag,
    fails for one depth; every depth is reported, the failure with its output."""
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\necho "building $3"\ncase "$MONOLITH_NVCC_DEFINES" in *=10) echo "nvcc: error"; exit 1;; esac\n'
        'echo "TAG ${MONOLITH_NVCC_DEFINES:-shipped}"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setenv(ENV, "MONOLITH_RING_RELEASE=1")  # never inherited by a depth's build
    got = rs.build_all([12, 10, 7], "fp8-stream", jobs=2, log_dir=tmp_path / "logs")
    assert got[12]["ok"] and got[12]["tag"] == "shipped" and got[12]["defines"] is None
    assert got[7]["ok"] and got[7]["tag"] == "MONOLITH_RING_DEPTH_SM90=7"
    assert not got[10]["ok"] and "nvcc: error" in got[10]["error"] and "building fp8-stream" in got[10]["error"]
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["depth-10.log", "depth-12.log", "depth-7.log"]
