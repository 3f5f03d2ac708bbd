"""The sm_120 configuration of the streaming kernels (CPU only): its ring and shared-memory budget
against kernel/config.cuh's constants, the host's choice of configuration from the device it finds
(fake device properties), the grid on 170- and 188-SM GPUs, the *-sm120 variants, and the ring
protocol models run at the shallow ring's depth."""

from __future__ import annotations

import re

import pytest

import monolith.megakernel as mk
from monolith import REPO_ROOT, kernel_spec
from monolith.errors import MonolithError

K = kernel_spec.config_constants()
KERNEL = REPO_ROOT / "kernel"
# the extension's constants() names for the ring (kernel/bindings.cpp), from the header's values
EXT = {
    "stages_sm90": K["kStagesSm90"],
    "stages_sm120": K["kStagesSm120"],
    "ring_bytes_sm90": K["kRingBytesSm90"],
    "ring_bytes_sm120": K["kRingBytesSm120"],
    "smem_per_block_sm90": K["kSmemPerBlockSm90"],
    "smem_per_block_sm120": K["kSmemPerBlockSm120"],
}
# StreamSmem + barriers, flags and the plan: ~32 KB (schedule_stream.cuh asserts the sizeof)
BLOCK_STATE = 32 * 1024


def test_the_rings_fit_their_arch_budget():
    assert (K["kStagesSm90"], K["kSlotBytes"], K["kSmemPerBlockSm90"]) == (12, 16 * 1024, 227 * 1024)
    assert (K["kStagesSm120"], K["kSmemPerBlockSm120"]) == (4, 99 * 1024)
    for arch in ("Sm90", "Sm120"):
        ring, budget = K[f"kRingBytes{arch}"], K[f"kSmemPerBlock{arch}"]
        assert ring == K[f"kStages{arch}"] * K["kSlotBytes"]
        assert ring + BLOCK_STATE <= budget, arch
    # the sm_120 ring is the deepest of 16 KB slots that fits: one more slot would not
    assert K["kRingBytesSm120"] + K["kSlotBytes"] + BLOCK_STATE > K["kSmemPerBlockSm120"]
    text = (KERNEL / "schedule_stream.cuh").read_text()
    assert "constexpr int kStreamSmemBudgetSm120 = 99 * 1024;" in text
    assert (
        "static_assert(kRingBytesSm120 + int(sizeof(StreamSmem)) + 512 + kStreamSmemHeadroomSm120 <= "
        "kStreamSmemBudgetSm120,"
    ) in text
    assert "static_assert(ring_fits<Cfg, P>()" in text


def test_no_global_ring_depth_is_left():
    """Every reader of the ring takes its depth from the kernel's Policy (kernel/policy.cuh): the
    consumer's fragments as P::kStages, the producer and stream_step through their own alias, the
    slot tests as a template argument."""
    allowed = {"constexpr int kStages = P::kStages;", "template <int kStages>"}
    owners = {"stream_ring.cuh", "schedule_stream.cuh", "policy.cuh"}  # the member, an alias, a template
    for f in sorted(KERNEL.glob("*.cu*")):
        code = re.sub(r"//[^\n]*", "", f.read_text()).replace("P::kStages", "")
        for a in allowed:
            code = code.replace(a, "")
        bare = re.findall(r"\bkStages\b(?!Sm)", code)
        assert not bare or f.name in owners, f.name
    pol = (KERNEL / "policy.cuh").read_text()
    assert "static constexpr int kStages = kSm120 ? kStagesSm120 : kpass_stages_sm90(kK);" in pol
    assert "return k == 1 || kpass_plan_slots(true, k, false) > kStagesSm90 ? kStagesSm90 :" in pol  # (k vectors)
    assert "constexpr int kStages = P::kStages;" in (KERNEL / "stream_ring.cuh").read_text()
    assert "constexpr int kStages = P::kStages;" in (KERNEL / "schedule_stream.cuh").read_text()
    assert "slot_tests_batched<P::kStages>(" in (KERNEL / "stream_reader.cuh").read_text()
    for f in ("phase_head.cuh", "phase_mlp.cuh", "stream_reader.cuh"):  # fragments of stream_consumer
        assert "P::kStages" in (KERNEL / f).read_text() or "P::kMlpRoundUnits" in (KERNEL / f).read_text(), f


def test_rounds_fit_the_shallow_ring():
    """A round's slots are all held before any goes back, so each round fits in the ring; the MLP
    round of bf16 (2 slots per unit) shrinks to 2 units in the 4-slot ring (Policy::kMlpRoundUnits)."""
    stages = int(K["kStagesSm120"])

    def mlp_units(bf16: bool, st: int) -> int:  # kernel/policy.cuh's kMlpRoundUnits
        per = 2 if bf16 else 1
        return 3 if 3 * per <= st else st // per

    assert mlp_units(True, 12) == mlp_units(False, 12) == 3
    assert mlp_units(True, stages) == 2 and mlp_units(False, stages) == 3
    pol = (KERNEL / "policy.cuh").read_text()
    assert "kMlpRoundUnits = 3 * (kBf16 ? 2 : 1) <= kStages ? 3 : kStages / (kBf16 ? 2 : 1);" in pol
    gemv = (KERNEL / "stream_gemv.cuh").read_text()
    round_slots = int(re.search(r"constexpr int kRoundSlots = (\d+);", gemv).group(1))
    wide = int(re.search(r"constexpr int kWideSlots = (\d+);", (KERNEL / "stream_plan.cuh").read_text()).group(1))
    assert round_slots <= stages and wide <= stages and 2 * mlp_units(True, stages) <= stages
    head_groups = int(
        re.search(r"constexpr int kHeadGroups = (\d+);", (KERNEL / "schedule_stream.cuh").read_text()).group(1)
    )
    assert stages % head_groups == 0 and K["kStagesSm90"] % head_groups == 0


@pytest.mark.parametrize("cap,config", [((9, 0), "sm90"), ((12, 0), "sm120"), ((12, 1), "sm120"), ((10, 0), "sm90")])
def test_the_host_picks_the_ring_from_the_device(cap, config):
    ring = mk.stream_ring(mk.variant_spec("fp8-stream"), cap, EXT)
    assert ring["config"] == config
    assert ring["ring_bytes"] == EXT[f"ring_bytes_{config}"] and ring["stages"] == EXT[f"stages_{config}"]
    # an sm_120-configuration variant is that configuration on every device
    assert mk.stream_ring(mk.variant_spec("fp8-stream-sm120"), cap, EXT)["config"] == "sm120"


def test_the_host_refuses_in_one_line_where_the_ring_does_not_fit():
    static = 32 * 1024
    h200 = mk.stream_ring(mk.variant_spec("bf16-stream"), (9, 0), EXT)
    mk.check_smem_fits("bf16-stream", h200, static, 227 * 1024, "NVIDIA H200")
    rtx = mk.stream_ring(mk.variant_spec("bf16-stream"), (12, 0), EXT)
    mk.check_smem_fits("bf16-stream", rtx, static, 99 * 1024, "NVIDIA GeForce RTX 5090")
    mk.check_smem_fits("bf16-stream", rtx, static, None, "a GPU that does not say")
    with pytest.raises(MonolithError) as e:  # the sm_90 ring on a 99 KB device (a misreported arch)
        mk.check_smem_fits("bf16-stream", h200, static, 99 * 1024, "NVIDIA GeForce RTX 5090")
    msg = str(e.value)
    assert "\n" not in msg and "cannot launch on NVIDIA GeForce RTX 5090" in msg and "12-slot ring 192 KB" in msg
    with pytest.raises(MonolithError, match="4-slot ring 64 KB"):
        mk.check_smem_fits("bf16-stream", rtx, static, 64 * 1024, "a small GPU")
    src = (REPO_ROOT / "monolith" / "megakernel.py").read_text()
    assert "self.ring = stream_ring(self.spec, (props.major, props.minor), self.k)" in src
    assert 'check_smem_fits(variant, self.ring, static, getattr(props, "shared_memory_per_block_optin", None)' in src


@pytest.mark.parametrize("sms,blocks", [(170, 168), (188, 184), (132, 128)])
def test_grid_on_rtx_5090_and_rtx_pro_6000(sms, blocks):
    """One block per SM at most, whole KV groups (8 x 21 on the RTX 5090, 8 x 23 on the RTX PRO 6000);
    each group's partition stays within the kernel's bounds."""
    groups, min_stream = int(K["kGroups"]), int(K["kMinStreamBlocks"])
    for name in ("bf16-stream", "fp8-stream-sm120", "nvfp4-stream-sm120"):
        assert mk.default_blocks(mk.variant_spec(name), sms, groups, min_stream) == blocks
    assert mk.default_blocks(mk.variant_spec("bf16-upstream"), sms, groups, int(K["kMinBlocks"])) == sms
    ng = blocks // groups
    assert blocks % groups == 0 and ng >= 2 and blocks <= K["kMaxGrid"]
    assert -(-int(K["kHidden"]) // blocks) <= K["kHidden"] // min_stream  # down rows fit sm.segsum
    assert -(-int(K["kMlpUnits"]) // blocks) <= 3  # MLP units: one round at most (3 units)


def test_the_sm120_variants():
    names = {v["name"]: v for v in kernel_spec.variants()["variants"]}
    for base in ("bf16-stream", "fp8-stream", "nvfp4-stream"):
        v = names[f"{base}-sm120"]
        assert v["config"] == "sm120" and v["defines"] == [] and v["schedule"] == "stream"
        assert (v["weights"], v["layout"]) == (names[base]["weights"], names[base]["layout"])
        assert kernel_spec.build_flags(v["name"]) == kernel_spec.build_flags(base)  # one build holds both
        assert v["name"] in mk.WAITS
    ids = {names[n]["id"] for n in ("bf16-stream-sm120", "fp8-stream-sm120", "nvfp4-stream-sm120")}
    assert ids == {6, 7, 8}
    cuh = (KERNEL / "megakernel.cuh").read_text()
    for n, i in (("Bf16", 6), ("Fp8", 7), ("Nvfp4", 8)):
        assert f"kVariant{n}StreamSm120 = {i}," in cuh
        assert f"MONOLITH_VARIANT(kVariant{n}StreamSm120, Sm120, true)" in (KERNEL / "variant_units.def").read_text()


def test_nvfp4_uses_the_native_e2m1_convert_on_sm120():
    dq = (KERNEL / "dequant.cuh").read_text()
    assert "cvt.rn.f16x2.e2m1x2" in dq and "MONOLITH_HAS_E2M1_CVT" in dq
    cond = dq[: dq.index("#define MONOLITH_HAS_E2M1_CVT 1")]
    assert "defined(__CUDA_ARCH_FEAT_SM120_ALL)" in cond[cond.rindex("#if") :]  # the sm_120a build


def test_ring_models_at_the_shallow_depth(monkeypatch):
    """The landed-count and warp-head ring models (their own tests run sm_90's 12 slots) at 4."""
    import tests.test_head_ring_model as head
    import tests.test_slot_landed_model as landed

    stages = int(K["kStagesSm120"])
    monkeypatch.setattr(landed, "STAGES", stages)
    for seed in range(20):
        assert landed.run(ncopies=5 * stages + 7, seed=seed) == []
    monkeypatch.setattr(head, "STAGES", stages)
    for ng in (4, 2, 1):  # kHeadGroups = 4 divides both depths
        for seed in range(20):
            assert head.run_ring("groups", ng, nslots=75, seed=seed) == [], (ng, seed)


def test_the_sm120_variants_have_a_translation_unit_of_their_own():
    """Ordinary extensions (every variant without a "config") do not compile the sm_120
    configuration's kernels: variant_units.def puts them in the Sm120 unit, which megakernel_sm120.cu
    registers (megakernel.cu compiles only Main's rows: step_unit.cuh unit_kernels_of), and only a
    -sm120 variant's extension (load_extension) and CI (compile_all) build it."""
    table = (KERNEL / "variant_units.def").read_text()
    for n in ("Bf16", "Fp8", "Nvfp4"):
        assert f"MONOLITH_VARIANT(kVariant{n}StreamSm120, Sm120, true)" in table
        assert f"MONOLITH_VARIANT(kVariant{n}Stream, Main, true)" in table  # the base, for an sm_120 device
    assert "MONOLITH_STEP_UNIT(Sm120)" in (KERNEL / "megakernel_sm120.cu").read_text()
    assert '#include "megakernel_sm120.cu"' in (KERNEL / "megakernel_sm120_xray.cu").read_text()
    plain, xray = kernel_spec.config_sources("sm120")
    assert (plain.name, xray.name) == ("megakernel_sm120.cu", "megakernel_sm120_xray.cu")
    with pytest.raises(MonolithError):
        kernel_spec.config_sources("sm100")
    src = (REPO_ROOT / "monolith" / "megakernel.py").read_text()
    assert 'config = variant_spec(variant).get("config")' in src
    assert "sources += list(kernel_spec.config_sources(config))" in src

    from tests.test_probe_compile_all import ca  # scripts/compile_all.py, loaded as that test does

    targets = ca.load_variants(KERNEL / "variants.json")
    by_source = {t.source.name: t for t in targets}
    assert by_source["megakernel.cu"].variants == "all" and by_source["megakernel_xray.cu"].variants == "all"
    sm120 = by_source["megakernel_sm120.cu"]
    assert sm120.variants == "bf16-stream-sm120+fp8-stream-sm120+nvfp4-stream-sm120" and sm120.build == "plain"
    assert by_source["megakernel_sm120_xray.cu"].build == "xray"
