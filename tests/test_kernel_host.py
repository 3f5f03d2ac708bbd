"""Host-side checks of the megakernel (no GPU): the packed layout, the config header, the
RoPE table, the byte model, and the refusals that happen before any launch."""
import json
import re

import pytest
import torch

from monolith import REPO_ROOT, kernel_spec
from monolith import config as C
from monolith import megakernel as mk
from monolith.errors import MonolithError


def parse_config_header() -> dict[str, float]:
    """Every `constexpr` of kernel/config.cuh, evaluated (the one parser: monolith.kernel_spec)."""
    return kernel_spec.config_constants()


def test_header_matches_python_config():
    h = parse_config_header()
    assert h["kHidden"] == C.HIDDEN and h["kIntermediate"] == C.INTERMEDIATE
    assert h["kNumLayers"] == C.NUM_LAYERS and h["kVocab"] == C.VOCAB
    assert h["kNumQHeads"] == C.NUM_Q_HEADS and h["kNumKVHeads"] == C.NUM_KV_HEADS and h["kHeadDim"] == C.HEAD_DIM
    assert h["kContextCap"] == C.CONTEXT_CAP and h["kContextCap"] >= 2048
    assert h["kRmsEps"] == pytest.approx(C.RMS_EPS)
    assert h["kThreads"] == mk.THREADS


def test_header_matches_packing_offsets():
    h = parse_config_header()
    assert (h["kOffQKV"], h["kOffO"], h["kOffGateUp"], h["kOffDown"], h["kLayerElems"]) == (
        mk.OFF_QKV, mk.OFF_O, mk.OFF_GATEUP, mk.OFF_DOWN, mk.LAYER_ELEMS)
    assert (h["kNormInLn"], h["kNormPostLn"], h["kNormQ"], h["kNormK"], h["kNormLayerElems"]) == (
        mk.NORM_IN_LN, mk.NORM_POST_LN, mk.NORM_Q, mk.NORM_K, mk.NORM_LAYER_ELEMS)
    # NOTES.md, facts: a bf16 layer is ~31.5 MB (15.7 M weights)
    assert h["kLayerBytes"] == mk.LAYER_ELEMS * 2
    assert 31.4e6 < h["kLayerBytes"] < 31.5e6
    assert h["kSmemBytes"] <= 48 * 1024


def _fake_layer_tensors(num_layers: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    shape = C.ModelShape(num_layers=num_layers)
    out = {}
    for name, s in shape.weight_shapes().items():
        if name.startswith("model.layers."):
            out[name] = torch.randn(s, generator=gen).to(torch.bfloat16)
    return out


def test_pack_layer_weights_places_every_row():
    g = torch.Generator().manual_seed(1234)
    t = _fake_layer_tensors(2, g)
    w, n = mk.pack_layer_weights(t, 2)
    assert w.numel() == 2 * mk.LAYER_ELEMS and n.numel() == 2 * mk.NORM_LAYER_ELEMS
    H = C.HIDDEN
    for i in (0, 1):
        base = i * mk.LAYER_ELEMS
        pre = f"model.layers.{i}."

        def row(off, r, k=H, base=base):
            return w[base + off + r * k: base + off + (r + 1) * k]

        assert torch.equal(row(mk.OFF_QKV, 5), t[pre + "self_attn.q_proj.weight"][5])
        assert torch.equal(row(mk.OFF_QKV, C.Q_DIM + 7), t[pre + "self_attn.k_proj.weight"][7])
        assert torch.equal(row(mk.OFF_QKV, C.Q_DIM + C.KV_DIM + 9), t[pre + "self_attn.v_proj.weight"][9])
        assert torch.equal(row(mk.OFF_O, 3, C.Q_DIM), t[pre + "self_attn.o_proj.weight"][3])
        assert torch.equal(row(mk.OFF_GATEUP, 2 * 11), t[pre + "mlp.gate_proj.weight"][11])
        assert torch.equal(row(mk.OFF_GATEUP, 2 * 11 + 1), t[pre + "mlp.up_proj.weight"][11])
        assert torch.equal(row(mk.OFF_DOWN, 1023, C.INTERMEDIATE), t[pre + "mlp.down_proj.weight"][1023])
        nb = i * mk.NORM_LAYER_ELEMS
        assert torch.equal(n[nb + mk.NORM_K: nb + mk.NORM_K + C.HEAD_DIM], t[pre + "self_attn.k_norm.weight"])
        assert torch.equal(n[nb + mk.NORM_POST_LN: nb + mk.NORM_Q], t[pre + "post_attention_layernorm.weight"])


def test_pack_layer_weights_stream_groups_rows_by_kv_head():
    """bf16-stream's order (kernel/config.cuh): qkv [group g][q head 2g, q head 2g+1, k head g,
    v head g], O [group g][row][the group's 256 columns]; gate/up and down as upstream. Every
    (group, row) is checked against the checkpoint, so a swapped head or column block fails."""
    g = torch.Generator().manual_seed(99)
    t = _fake_layer_tensors(2, g)
    w_up, n_up = mk.pack_layer_weights(t, 2)
    w, n = mk.pack_layer_weights_stream(t, 2)
    assert torch.equal(n, n_up)
    H, D = C.HIDDEN, C.HEAD_DIM
    for i in (0, 1):
        base, pre = i * mk.LAYER_ELEMS, f"model.layers.{i}."
        qkv = w[base + mk.OFF_QKV: base + mk.OFF_O].view(C.NUM_KV_HEADS, 4 * D, H)
        o = w[base + mk.OFF_O: base + mk.OFF_GATEUP].view(C.NUM_KV_HEADS, H, 2 * D)
        q, k, v = (t[pre + f"self_attn.{m}_proj.weight"] for m in "qkv")
        wo = t[pre + "self_attn.o_proj.weight"]
        for grp in range(C.NUM_KV_HEADS):
            assert torch.equal(qkv[grp, :2 * D], q[2 * D * grp: 2 * D * (grp + 1)])
            assert torch.equal(qkv[grp, 2 * D: 3 * D], k[D * grp: D * (grp + 1)])
            assert torch.equal(qkv[grp, 3 * D:], v[D * grp: D * (grp + 1)])
            assert torch.equal(o[grp], wo[:, 2 * D * grp: 2 * D * (grp + 1)])
        tail = slice(base + mk.OFF_GATEUP, base + mk.LAYER_ELEMS)
        assert torch.equal(w[tail], w_up[tail])
    assert mk.PACKERS[kernel_spec.variant_spec("bf16-stream")["layout"]] is mk.pack_layer_weights_stream
    assert mk.PACKERS[kernel_spec.variant_spec("bf16-upstream")["layout"]] is mk.pack_layer_weights


def test_rope_table_uses_theta_1e6():
    r = mk.rope_table(context_cap=300)
    assert r.shape == (300, C.HEAD_DIM) and r.dtype == torch.float32
    pos, i = 257, 5
    ang = pos * (1.0 / (1e6 ** (2 * i / 128)))
    assert r[pos, i].item() == pytest.approx(torch.tensor(ang).cos().item(), abs=1e-5)
    assert r[pos, 64 + i].item() == pytest.approx(torch.tensor(ang).sin().item(), abs=1e-5)
    wrong = mk.rope_table(context_cap=300, theta=10_000.0)
    assert (wrong[pos] - r[pos]).abs().max() > 0.1  # the theta bug would be visible


def test_byte_model_matches_the_model_facts():
    b0 = mk.bytes_per_token(0)
    # NOTES.md, facts: ~880.9 MB layers + 311.2 MB LM head in bf16; KV 114.7 KB per position
    assert 1.19e9 < b0 < 1.195e9
    assert mk.kv_bytes_per_position() == 114_688
    assert mk.bytes_per_token(256) - b0 == 256 * 114_688


def test_variants_file_is_consistent():
    spec = json.loads((REPO_ROOT / "kernel" / "variants.json").read_text())
    names = [v["name"] for v in spec["variants"]]
    assert names[0] == "bf16-upstream" and len(set(names)) == len(names)
    assert mk.variant_spec("bf16-upstream")["id"] == 0
    with pytest.raises(MonolithError, match="unknown kernel variant"):
        mk.variant_spec("fp9")
    src = (REPO_ROOT / spec["source"]).read_text()
    assert '#include "step_unit.cuh"' in src  # the units table's reader (kernel/step_unit.cuh)
    units = (REPO_ROOT / "kernel" / "variant_units.def").read_text()
    assert "MONOLITH_VARIANT(kVariantBf16Upstream, Main, true)" in units


def test_check_constants_names_the_mismatch():
    good = mk.expected_constants()
    assert good["layer_elems"] == mk.LAYER_ELEMS and good["xray_event_bytes"] == 40
    mk.check_constants(good)
    with pytest.raises(MonolithError, match="context_cap"):
        mk.check_constants({**good, "context_cap": 2048})


def test_default_blocks_stream_is_a_multiple_of_the_kv_groups():
    """Stream variants default to the largest multiple of the KV-group count within [min, SMs]
    (NOTES.md M4, Choices: 128 on the 132-SM H200); upstream variants to one block per SM."""
    h = parse_config_header()
    groups, min_stream = int(h["kGroups"]), int(h["kMinStreamBlocks"])
    assert groups == C.NUM_KV_HEADS == mk.expected_constants()["groups"] == 8 and min_stream == 16
    stream = mk.variant_spec("bf16-stream")
    assert stream["schedule"] == "stream"
    cases = {132: 128, 128: 128, 120: 120, 100: 96, 16: 16, 17: 16, 23: 16, 15: 15, 8: 8}
    for sms, want in cases.items():  # below min_stream: one per SM, which the range check refuses
        assert mk.default_blocks(stream, sms, groups, min_stream) == want, sms
    for v in kernel_spec.variants()["variants"]:  # every stream variant (fp8-stream too) takes the rule
        if v.get("schedule") == "stream":
            assert mk.default_blocks(v, 132, groups, min_stream) == 128, v["name"]
    for name in ("bf16-upstream", "fp8-upstream", "bf16-upstream-l2pre"):
        spec = mk.variant_spec(name)
        assert spec["schedule"] == "upstream"
        for sms in (132, 128, 100, 78):
            assert mk.default_blocks(spec, sms, groups, int(h["kMinBlocks"])) == sms
    # the engine takes it when blocks=None, with the group count from the extension (no GPU here)
    src = (REPO_ROOT / "monolith" / "megakernel.py").read_text()
    assert 'blocks or default_blocks(self.spec, self.sm_count, self.k["groups"], min_blocks)' in src
    assert 'd["groups"] = kGroups;' in (REPO_ROOT / "kernel" / "bindings.cpp").read_text()


def test_xray_record_layout_is_40_bytes():
    assert mk.XRAY_EVENT_DTYPE.itemsize == 40
    text = (REPO_ROOT / "kernel" / "xray.cuh").read_text()
    assert "uint64_t g0, g1;" in text and "uint64_t c0, c1;" in text and "uint16_t phase, layer, block, smid;" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_no_gpu_is_a_clear_error():
    with pytest.raises(MonolithError, match="needs a CUDA GPU"):
        mk.load_extension()


def test_harness_names_the_xray_build():
    from monolith.bench.baselines import registry

    s = registry.spec("megakernel-bf16-upstream-xray")
    assert s.needs_cuda and "X-ray" in s.label


def test_seek_refuses_positions_outside_the_context_and_sets_valid_ones():
    """MegakernelEngine.seek (the sanitizer's long-position run) range-checks before it touches the
    engine's state; a valid position goes through _set_position (called here on a stand-in self)."""
    seen = []
    fake = type("Fake", (), {"_set_position": lambda self, p: seen.append(p)})()
    for bad in (-1, C.CONTEXT_CAP, C.CONTEXT_CAP + 5, 3.0, True, "7"):
        with pytest.raises(MonolithError, match="seek: position"):
            mk.MegakernelEngine.seek(fake, bad)
    assert seen == []
    mk.MegakernelEngine.seek(fake, C.CONTEXT_CAP - 1)
    mk.MegakernelEngine.seek(fake, 300)
    assert seen == [C.CONTEXT_CAP - 1, 300]


def stream_source() -> str:
    """The streaming schedule's source: its parts (kernel/stream_*.cuh), its phases (kernel/phase_*.cuh)
    and schedule_stream.cuh."""
    kdir = REPO_ROOT / "kernel"
    parts = [*sorted(kdir.glob("stream_*.cuh")), *sorted(kdir.glob("phase_*.cuh")), kdir / "schedule_stream.cuh"]
    return "".join(p.read_text() for p in parts)


def test_fixed_attention_splits_tile_the_positions():
    """The default split rule (kernel/schedule_stream.cuh make_plan / split_of; the source's
    expressions checked, then modelled): pos / 64 + 1 splits of 64 cached positions, the last one
    partial and also holding this position; they tile [0, pos) at every position up to the
    context cap, and the partials fit kMaxSplits. The short and long kernels always take it: only
    the wide kernel (kWide) widens."""
    src = stream_source()
    assert "s.nsplit = pos / split_width<kWide>(pos, s.ng) + 1;" in src
    assert "const int w = split_width<kWide>(pos, s.ng);" in src
    assert "t0 = sp * w;" in src and "t1 = min(t0 + w, pos);" in src
    assert "  return kSplitPositions;\n}" in src  # split_width's answer outside the wide kernel's rule
    h = parse_config_header()
    split, max_splits = int(h["kSplitPositions"]), int(h["kMaxSplits"])
    for pos in range(C.CONTEXT_CAP):
        nsplit = pos // split + 1
        assert nsplit <= max_splits, pos
        ranges = [(sp * split, min(sp * split + split, pos)) for sp in range(nsplit)]
        covered = [t for t0, t1 in ranges for t in range(t0, t1)]
        assert covered == list(range(pos)), pos
        assert all(t1 - t0 == split for t0, t1 in ranges[:-1]) and 0 <= ranges[-1][1] - ranges[-1][0] < split


@pytest.mark.parametrize("even", [0, 1])
@pytest.mark.parametrize("wide,wide_min", [(3, 3), (2, 2), (3, 2)])
def test_wide_attention_splits_tile_the_positions(wide, wide_min, even):
    """The wide kernel's split rule (schedule_stream.cuh wide_k / split_width / split_slots, the
    source's expressions checked for the shipped wide = 3, wide_min = 2, even; the model also covers
    the measured alternatives, docs/EXPERIMENTS.md): k = ceil((pos / 64 + 1) / ng) slots per block;
    where wide_min <= k <= wide the wide kernel's splits are ceil((pos + 1) / ng) wide (`even`), or
    k x 64. At every position and
    group size the splits tile the cached positions, the last one also holds this position, a
    widened position has at most one split per block and none wider than `wide` slots (acquire_n's
    bound), its scores fit the sm.x it borrows, the partials fit kMaxSplits, and everywhere else the
    splits are the default's 64. The host launches the wide kernel where k (for blocks / 8 per
    group) is in range: at 128 blocks and 3 / 3, positions 2,048-3,071."""
    src = stream_source()
    assert "return (pos / kSplitPositions + ng) / ng; }" in src
    assert "if (k >= kWideMinSlots && k <= kWideSlots) return (pos + ng) / ng;" in src
    assert "return min((nh + kSplitPositions - 1) / kSplitPositions, kSplitSlotsMax);" in src
    assert "constexpr int kWideSlots = 3;" in src and "constexpr int kWideMinSlots = 2;" in src
    assert 'static_assert(kHeadsPerKV * kWideEntriesMax <= kHidden, "the wide kernel\'s scores fit in sm.x");' in src
    # the width once per token in the plan (WidePlan), each split from it
    assert "if constexpr (kWide) s.w = split_width<kWide>(pos, s.ng);" in src
    assert "t0 = sp * s.w;\n    t1 = min(t0 + s.w, pos);" in src
    cu = (REPO_ROOT / "kernel" / "megakernel.cu").read_text()
    assert "const int k = wide_k(position, blocks / kGroups);" in cu
    assert "if (k.fn_wide != nullptr && position >= kLongKernelFrom && wide_applies(blocks, position)) fn = k.fn_wide;" in cu
    h = parse_config_header()
    split, max_splits, hidden = int(h["kSplitPositions"]), int(h["kMaxSplits"]), int(h["kHidden"])
    assert 2 * wide * split <= hidden  # two heads' scores in sm.x
    widened = 0
    for ng in (1, 2, 3, 8, 16, 17, 48):
        for pos in list(range(0, 300)) + list(range(300, C.CONTEXT_CAP, 37)) + [C.CONTEXT_CAP - 1]:
            k = (pos // split + ng) // ng
            assert k == -(-(pos // split + 1) // ng)  # the source's expression is the ceiling
            w = (-(-(pos + 1) // ng) if even else k * split) if wide_min <= k <= wide else split
            assert w == split or (pos + ng) // ng == -(-(pos + 1) // ng)  # the source's even width
            nsplit = pos // w + 1
            assert nsplit <= max_splits
            if not (wide_min <= k <= wide):
                assert nsplit == pos // split + 1  # the default's splits
            else:
                widened += 1
                assert nsplit <= ng  # one split per block
                if even:
                    assert nsplit == ng  # and every block of the group holds one
            covered = 0
            for sp in range(nsplit):
                t0, t1 = sp * w, min(sp * w + w, pos)
                nh = max(t1 - t0, 0)
                assert t0 == covered or (sp == nsplit - 1 and nh == 0 and t0 >= pos), (ng, pos, sp)
                assert nh <= wide * split and min(-(-nh // split), wide) == -(-nh // split) <= 8
                if sp < nsplit - 1:
                    assert nh == w  # only the last split is partial (and holds this position)
                else:
                    assert nh < w  # so this position's entry (index nh) fits the w entries per head
                covered = t0 + nh
            assert covered == pos
    assert widened > 0
    if (wide, wide_min) == (3, 3):
        ks = [p for p in range(C.CONTEXT_CAP) if 3 <= (p // split + 16) // 16 <= 3]
        assert (ks[0], ks[-1]) == (2048, 3071)
    if (wide, wide_min) == (3, 2):  # the default: at 128 blocks, both of the harness's long sweep points
        ks = [p for p in range(C.CONTEXT_CAP) if 2 <= (p // split + 16) // 16 <= 3]
        assert (ks[0], ks[-1]) == (1024, 3071)
    if even and (wide, wide_min) == (3, 3):  # the point of the rule: at 2,060 and ng = 16, 16 splits of 129
        pos, ng = 2060, 16
        w = -(-(pos + 1) // ng)
        assert (w, pos // w + 1) == (129, 16)


def test_wide_kernel_formats_mask():
    """Policy::kWideKernel (kernel/policy.cuh: bf16 and E4M3, not NVFP4) picks the streaming
    variants that get a wide kernel: the format comes from the weights' traits (NVFP4 is also
    row-scaled, so the block-scaled test decides), info_of builds and registers the wide kernel
    only for those, and the wide kernel refuses to instantiate for any other. Every streaming
    variant of variants.json has one of the three formats."""
    pol = (REPO_ROOT / "kernel" / "policy.cuh").read_text()
    assert "static constexpr bool kBf16 = !W::kRowScale, kE4M3 = W::kRowScale && !W::kBlockScaled, kNvfp4 = W::kBlockScaled;" in pol
    assert "static constexpr bool kWideKernel = !kNvfp4;" in pol
    cu = "".join((REPO_ROOT / "kernel" / f).read_text() for f in ("megakernel.cu", "decode_step.cuh"))  # + its kernels
    info = cu[cu.index("StepKernels kernels_of() {"):]  # the kernels info_of registers
    info = info[: info.index("\n}\n")]
    wide = "Policy<typename Cfg::Weights, KernelKind::kWide>::kWideKernel"
    assert f"if constexpr (Cfg::kStream && Cfg::kLongKernel && {wide})" in info
    assert "&decode_step_wide<kVariant>" in info and info.count("decode_step_wide") == 1
    assert "const StepKernels k = kernels_of<kVariant>();" in cu[cu.index("KernelInfo info_of(bool device_sm120) {"):]
    assert f"static_assert(Cfg::kStream && Cfg::kLongKernel && {wide}," in cu
    dq = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    traits = re.findall(r"static constexpr bool kRowScale = (true|false);.*?\n\s*static constexpr bool kBlockScaled = (true|false);",
                        dq, flags=re.S)
    bits = {(rs == "true", bs == "true") for rs, bs in traits}
    assert bits == {(False, False), (True, False), (True, True)}  # bf16, E4M3, NVFP4: one bit each
    spec = json.loads((REPO_ROOT / "kernel" / "variants.json").read_text())
    stream = {v["weights"] for v in spec["variants"] if v["schedule"] == "stream"}
    assert stream and stream <= {"bf16", "fp8", "nvfp4"}


def test_long_kernel_dispatch_rule():
    """The host launches a streaming variant's long-position kernel (decode_step_long: the merge
    halves) from kLongKernelFrom on. Below it every KV group has at most one merge batch of
    partials (nsplit = pos / 64 + 1 <= kMergeBatch), so the upper half is idle and the two kernels
    compute the same bits (test_merge_halves_rule); at kLongKernelFrom the first fifth split
    appears, so the threshold is the lowest that is safe. Every launch passes the host's position."""
    k = kernel_spec.config_constants()
    batch, split, first = int(k["kMergeBatch"]), int(k["kSplitPositions"]), int(k["kLongKernelFrom"])
    assert first == batch * split
    nsplit = lambda pos: pos // split + 1  # noqa: E731 (schedule_stream.cuh StreamPlan, fixed splits)
    assert all(nsplit(pos) <= batch for pos in range(first)) and nsplit(first) == batch + 1
    cu = "".join((REPO_ROOT / "kernel" / f).read_text() for f in ("megakernel.cu", "decode_step.cuh"))  # + its kernels
    assert "const void* fn = k.fn_long != nullptr && position >= kLongKernelFrom ? k.fn_long : k.fn;" in cu
    assert "return cudaLaunchKernel(fn, dim3(blocks)" in cu
    # every streaming format has the long kernel (StreamCfg's); the upstream schedule has one kernel, and
    # so does the tensor-core variant (fp8-stream-tc: its short kernel at every position, for now)
    assert "static constexpr bool kLongKernel = true;" in cu
    assert cu.count("static constexpr bool kLongKernel = false;") == 2
    tc = cu[cu.index("struct VariantCfg<kVariantFp8StreamTc>"):]
    assert "static constexpr bool kLongKernel = false;" in tc[:tc.index("};")]
    sched = stream_source()
    assert "constexpr int kBatch = kMergeBatch;" in sched
    py = (REPO_ROOT / "monolith" / "megakernel.py").read_text()
    # every launch site passes a position, and the decode loops the one each launch consumes
    assert py.count("self._launch(") == 5
    assert py.count(", self.position + i)") == 3


def test_merge_halves_rule():
    """Merge halves (Policy::kMergeHalves; kernel/schedule_stream.cuh, the merge before O; source expressions
    checked, then modelled): the lower threads merge partials [0, min(np, mh)), the upper ones
    [mh, np); every partial is merged exactly once, in order; at most 4 partials leave the upper
    half idle (the default's bits); each half needs at most ceil(np / 8) rounds of 4; and folding
    the upper (m, num, den) into the lower one equals the sequential online merge (fp64 model)."""
    import numpy as np

    src = stream_source()
    assert "const int mh = kBatch * ((np() + 2 * kBatch - 1) / (2 * kBatch));" in src
    assert "auto pend = [&] { return kMergeHalves && !upper ? min(np(), mh) : np(); };" in src
    assert "for (int sp0 = upper ? mh : 0; sp0 < pend() && ok; sp0 += kRound) {" in src  # kRound: below
    assert "if (tid < kMergeThreads && (!upper || mh < np())) {" in src
    # measured (docs/EXPERIMENTS.md): on in the long-position (and wide) kernels only
    pol = (REPO_ROOT / "kernel" / "policy.cuh").read_text()
    assert "static constexpr bool kMergeHalves = kLong;" in pol
    assert "static constexpr bool kLong = K != KernelKind::kShort;" in pol
    assert "constexpr bool kMergeHalves = P::kMergeHalves;" in src
    batch = 4

    def online(ms, ls, os_, m=-np.inf, num=0.0, den=0.0):
        for mj, lj, oj in zip(ms, ls, os_, strict=True):
            mn = max(m, mj)
            ca, cb = np.exp(m - mn), np.exp(mj - mn)
            num, den, m = num * ca + oj * cb, den * ca + lj * cb, mn
        return m, num, den

    rng = np.random.default_rng()
    for n in range(1, C.CONTEXT_CAP // 64 + 1):
        mh = batch * ((n + 2 * batch - 1) // (2 * batch))
        lower, upper = list(range(0, min(n, mh))), list(range(mh, n))
        assert lower + upper == list(range(n))
        if n <= batch:
            assert not upper
        rounds = -(-n // (2 * batch))
        assert -(-len(lower) // batch) <= rounds and -(-len(upper) // batch) <= rounds
        ms, ls, os_ = rng.normal(size=n) * 4, rng.uniform(0.5, 8, n), rng.normal(size=n)
        m0, num0, den0 = online(ms, ls, os_)
        m, num, den = online(ms[lower], ls[lower], os_[lower])
        if upper:
            mu, nu, du = online(ms[upper], ls[upper], os_[upper])
            m, num, den = online([mu], [du], [nu], m, num, den)
        assert np.isclose(num / den, num0 / den0, rtol=1e-12) and m == m0


def test_merge_ml_lanes_rule():
    """Policy::kMergeMlLanes (bf16 and E4M3; not sm_120a's bf16 short kernel): the merge
    before O polls, per thread, its o words of a round's partials plus one (m, l) word, and the warp
    shares the (m, l) words by shuffles. Modelled on the source's lane mapping: for every round size
    and every count of partials in the round, lane j's word is m of partial j and lane kRound + j's
    is l of partial j (what the shuffles take), every address is a written word (a partial of the
    round, or split 0's past its end), and the lanes above 2 kRound repeat the lanes below (no new L2
    sectors). With halves (mh unchanged) a long kernel's half holds <= 8 partials at 16 blocks a group,
    so a round of 8 takes it in one L2 round trip instead of two."""
    src = stream_source()
    pol = (REPO_ROOT / "kernel" / "policy.cuh").read_text()
    assert "static constexpr bool kMergeMlLanes = !kNvfp4 && (kLong || kE4M3 || !kSm120);" in pol
    assert "constexpr bool kMl = P::kMergeMlLanes;" in src
    assert "constexpr int kRound = kMl && kLong ? 2 * kBatch : kBatch;" in src
    assert "const int jl = lane % kRound, wl = (lane / kRound) & 1;" in src
    assert "const int j = i < kRound ? i : jl, sp = j < nb ? sp0 + j : 0;" in src
    assert "return part0 + sp * kSplitStride + (i < kRound ? 2 + d : wl);" in src
    assert "const float mj = __shfl_sync(0xffffffffu, got[kRound], j);" in src
    assert "const float lj = __shfl_sync(0xffffffffu, got[kRound], kRound + j);" in src
    assert "ok = __all_sync(0xffffffffu, ok);  // the shuffles below need the whole warp" in src
    k = kernel_spec.config_constants()
    batch = int(k["kMergeBatch"])
    for k_round in (batch, 2 * batch):
        assert 2 * k_round <= 32
        for sp0 in (0, 8, 24):
            for nb in range(1, k_round + 1):
                # (split, word) each lane reads: word 0 = m, 1 = l, 2 + d = o
                lane_word = []
                for lane in range(32):
                    jl, wl = lane % k_round, (lane // k_round) & 1
                    sp = sp0 + jl if jl < nb else 0
                    lane_word.append((sp, wl))
                for j in range(nb):
                    assert lane_word[j] == (sp0 + j, 0) and lane_word[k_round + j] == (sp0 + j, 1)
                assert all(sp == 0 or sp0 <= sp < sp0 + nb for sp, _ in lane_word)
                assert set(lane_word[2 * k_round:]) <= set(lane_word[:2 * k_round])
    groups_blocks = 16  # 128 blocks / 8 KV groups: np = min(blocks of a group, splits) <= 16
    for n in range(1, groups_blocks + 1):
        mh = batch * ((n + 2 * batch - 1) // (2 * batch))
        lower, upper = min(n, mh), max(0, n - mh)
        assert lower <= 2 * batch and upper <= 2 * batch  # one round of 2 kMergeBatch each
