"""nvfp4-stream without a GPU (issue 14, item 4): the kernel's nvfp4 constants against the layout
contract (quant/nvfp4_layout.py), the variant's registration, the engine's refusals (all before the
extension is built), the streaming order the engine uploads, and a Python model of what the
producer lane issues and the consumers read (kernel/schedule_stream.cuh) checked against the
layout's offsets at several grid sizes."""
import re
from types import SimpleNamespace

import pytest
import torch

from monolith import REPO_ROOT, kernel_spec
from monolith import config as C
from monolith import megakernel as mk
from monolith.bench import bytemodel
from monolith.bench.baselines import registry
from monolith.errors import MonolithError
from monolith.quant import fp8_layout as F8
from monolith.quant import nvfp4_layout as L
from monolith.quant import pack_nvfp4

SCHEDULE = REPO_ROOT / "kernel" / "schedule_stream.cuh"
XVEC = REPO_ROOT / "kernel" / "xvec.cuh"  # the input vectors' stores and loads, moved out of SCHEDULE


def schedule_text() -> str:
    """The streaming schedule's source: its parts (kernel/stream_*.cuh), its phases (kernel/phase_*.cuh),
    schedule_stream.cuh and the xvec.cuh it stands on."""
    kdir = REPO_ROOT / "kernel"
    parts = [*sorted(kdir.glob("stream_*.cuh")), *sorted(kdir.glob("phase_*.cuh"))]
    return "".join(p.read_text() for p in parts) + SCHEDULE.read_text() + XVEC.read_text()


def _k() -> dict:
    """config.cuh's constants, the integral ones as ints (its `/` evaluates to floats here)."""
    return {n: int(v) if float(v).is_integer() else v for n, v in kernel_spec.config_constants().items()}


def _nv_fmt() -> dict[str, int]:
    """The `static constexpr int` members of StreamFmt<WeightsNvfp4> in schedule_stream.cuh,
    evaluated with kernel/config.cuh's constants (the same checked arithmetic as config_constants)."""
    text = schedule_text()
    body = re.search(r"struct StreamFmt<WeightsNvfp4>\s*\{(.*?)\n\};", text, flags=re.S).group(1)
    env = dict(_k())
    out = {}
    for m in re.finditer(r"static constexpr int (k\w+) = ([^;]+);", body):
        expr = m.group(2)
        assert re.fullmatch(r"[\w\s.+\-*/()%]+", expr), expr
        v = eval(expr, {"__builtins__": {}}, dict(env))  # noqa: S307 (checked: names, numbers, arithmetic)
        assert float(v).is_integer(), (m.group(1), v)
        out[m.group(1)] = env[m.group(1)] = int(v)
    return out


def test_kernel_nvfp4_constants_are_the_layout_contract():
    k = _k()
    assert k["kNvBlock"] == L.BLOCK
    assert k["kNvLayerCodeBytes"] == L.LAYER_CODE_BYTES and k["kNvLayerBscaleBytes"] == L.LAYER_BSCALE_BYTES
    assert (k["kBsQKV"], k["kBsO"], k["kBsGateUp"], k["kBsDown"]) == \
        tuple(L.BSCALE_OFFSETS[s] for s in ("qkv", "o", "gateup", "down"))
    # the codes' byte offsets are the bf16 element offsets halved (one row order for every format)
    assert tuple(k[n] / 2 for n in ("kOffQKV", "kOffO", "kOffGateUp", "kOffDown")) == \
        tuple(L.CODE_OFFSETS[s] for s in ("qkv", "o", "gateup", "down"))
    assert k["kNvTscaleSlots"] == L.TSCALE_SLOTS
    assert [k[f"kTs{n}"] for n in ("Q", "K", "V", "O", "Gate", "Up", "Down")] == \
        [L.TSCALE_ORDER.index(t) for t in L.TSCALE_ORDER]
    exp = mk.expected_constants()
    assert exp["nv_layer_code_bytes"] == L.LAYER_CODE_BYTES and exp["bs_down"] == L.BSCALE_OFFSETS["down"]
    bindings = (REPO_ROOT / "kernel" / "bindings.cpp").read_text()
    for name in ("nv_layer_code_bytes", "nv_layer_bscale_bytes", "bs_qkv", "bs_o", "bs_gateup", "bs_down",
                 "nv_tscale_slots"):
        assert f'd["{name}"]' in bindings, name  # check_constants compares them at engine start
    # the sm_90 decode's unbias is the layout's KERNEL_UNBIAS
    assert "kE2M1F16Bias = 16384.0f" in (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    assert L.KERNEL_UNBIAS == 16384.0


def test_stream_slot_geometry_is_the_layouts():
    f, k = _nv_fmt(), _k()
    slot = k["kSlotBytes"]
    assert f["kRows1024"] == slot // L.CODE_ROW_BYTES["qkv"] == 32
    assert f["kRowBytes1024"] == L.CODE_ROW_BYTES["qkv"] == L.CODE_ROW_BYTES["gateup"]
    assert f["kRowBytesDown"] == L.CODE_ROW_BYTES["down"] == 3 * f["kRowBytes1024"]
    group_cols = C.HEAD_DIM * (C.NUM_Q_HEADS // C.NUM_KV_HEADS)
    assert f["kRowBytesO"] == group_cols // 2 and f["kRowsO"] == slot // f["kRowBytesO"] == 128
    assert f["kBsRow1024"] == L.BSCALE_ROW_BYTES["qkv"] == 64 and 3 * f["kBsRow1024"] == L.BSCALE_ROW_BYTES["down"]
    assert f["kBsRowO"] == group_cols // L.BLOCK == 16
    assert f["kRows1024"] * f["kBsRow1024"] == 2048  # a slot's scales: 2 KB (why they are not in shared memory)
    assert f["kSlotsPerUnit"] == 0  # units share slots: the producer streams their rows as one range
    # one lane's 16-byte load = two whole blocks: the two scale bytes it needs are one aligned u16
    assert 16 * 2 == 2 * L.BLOCK and f["kRowBytes1024"] == 32 * 16
    text = schedule_text()
    assert "static_assert(kRingBytesSm90 + int(sizeof(StreamSmem)) + 512 <= kStreamSmemBudget" in text
    assert "kStagesSm90 * kNvSlotScaleBytes > kStreamSmemBudget" in text  # and the sm_120 ring's:
    assert "kStagesSm120 * kNvSlotScaleBytes > kStreamSmemBudgetSm120" in text


# ---- a Python model of the producer's issue list and the consumers' reads -------------------------
GROUPS, GROUP_ROWS, UNITS, UNIT_ROWS = C.NUM_KV_HEADS, 512, C.INTERMEDIATE // 8, 16


def part_begin(n: int, parts: int, i: int) -> int:
    return n * i // parts


def plan(b: int, G: int) -> dict:
    """make_plan of schedule_stream.cuh (the attention split fields left out)."""
    g = 0
    while g + 1 < GROUPS and part_begin(G, GROUPS, g + 1) <= b:
        g += 1
    gb0, gb1 = part_begin(G, GROUPS, g), part_begin(G, GROUPS, g + 1)
    ng, gi = gb1 - gb0, b - gb0
    return {"g": g, "q": (part_begin(GROUP_ROWS, ng, gi), part_begin(GROUP_ROWS, ng, gi + 1)),
            "o": (part_begin(C.HIDDEN, ng, gi), part_begin(C.HIDDEN, ng, gi + 1)),
            "u": (part_begin(UNITS, G, b), part_begin(UNITS, G, b + 1)),
            "h": (part_begin(C.HIDDEN, G, b), part_begin(C.HIDDEN, G, b + 1))}


def producer_issues(s: dict) -> dict[str, list[tuple[int, int]]]:
    """(byte offset in the layer's stream-ordered codes, bytes) of every bulk copy stream_producer
    issues for one layer's NVFP4 weights, per phase, in issue order."""
    f, k = _nv_fmt(), _k()
    R, slot = f["kRows1024"], k["kSlotBytes"]
    half = lambda elems: int(elems) // 2  # noqa: E731 (StreamFmt<WeightsNvfp4>::bytes_of)
    g, (q0, q1), (o0, o1), (u0, u1), (h0, h1) = s["g"], s["q"], s["o"], s["u"], s["h"]
    out = {"qkv": [(half(k["kOffQKV"] + (g * GROUP_ROWS + q) * C.HIDDEN), min(R, q1 - q) * f["kRowBytes1024"])
                   for q in range(q0, q1, R)],
           "o": [(half(k["kOffO"] + (g * C.HIDDEN + o) * 256), min(f["kRowsO"], o1 - o) * f["kRowBytesO"])
                 for o in range(o0, o1, f["kRowsO"])]}
    r0, r1 = UNIT_ROWS * u0, UNIT_ROWS * u1
    out["gateup"] = [(half(k["kOffGateUp"] + q * C.HIDDEN), min(R, r1 - q) * f["kRowBytes1024"]) for q in range(r0, r1, R)]
    d0, nbytes = half(k["kOffDown"] + h0 * C.INTERMEDIATE), (h1 - h0) * f["kRowBytesDown"]
    out["down"] = [(d0 + off, min(slot, nbytes - off)) for off in range(0, nbytes, slot)]
    return out


def consumer_slots(s: dict) -> dict[str, int]:
    """Slots each phase's consumers acquire (rows_nv: rounds of 4 slots of 32 rows; O: one slot of
    128 rows per round); must equal what the producer issued, or the ring desynchronises."""
    f = _nv_fmt()
    R, per_round = f["kRows1024"], 4 * f["kRows1024"]

    def rows_nv(nrows):
        n = 0
        for q in range(0, nrows, per_round):
            n += -(-min(per_round, nrows - q) // R)
        return n
    (q0, q1), (o0, o1), (u0, u1), (h0, h1) = s["q"], s["o"], s["u"], s["h"]
    return {"qkv": rows_nv(q1 - q0), "o": len(range(o0, o1, f["kRowsO"])), "gateup": rows_nv(UNIT_ROWS * (u1 - u0)),
            "down": rows_nv(3 * (h1 - h0))}


def consumer_scale_spans(s: dict) -> dict[str, tuple[int, int]]:
    """[first, end) of the block-scale bytes each phase's consumers read (and the producer asks L2
    for a layer ahead): phase row t's scales at base + t * row bytes."""
    f, k = _nv_fmt(), _k()
    g, (q0, q1), (o0, o1), (u0, u1), (h0, h1) = s["g"], s["q"], s["o"], s["u"], s["h"]
    b1024, bo = f["kBsRow1024"], f["kBsRowO"]
    return {"qkv": (k["kBsQKV"] + (g * GROUP_ROWS + q0) * b1024, k["kBsQKV"] + (g * GROUP_ROWS + q1) * b1024),
            "o": (k["kBsO"] + (g * C.HIDDEN + o0) * bo, k["kBsO"] + (g * C.HIDDEN + o1) * bo),
            "gateup": (k["kBsGateUp"] + UNIT_ROWS * u0 * b1024, k["kBsGateUp"] + UNIT_ROWS * u1 * b1024),
            "down": (k["kBsDown"] + 3 * h0 * b1024, k["kBsDown"] + 3 * h1 * b1024)}


def _covers_once(spans, end):
    spans = sorted(x for x in spans if x[1] > x[0])
    assert spans[0][0] == 0 and spans[-1][1] == end, (spans[0], spans[-1], end)
    for (_a0, a1), (b0, _b1) in zip(spans, spans[1:], strict=False):
        assert a1 == b0, ("gap or overlap", a1, b0)


@pytest.mark.parametrize("G", [16, 24, 66, 128, 132, 384, 1024])
def test_producer_issues_every_code_byte_once_in_whole_slots(G):
    slot = _k()["kSlotBytes"]
    spans, scales = [], []
    for b in range(G):
        s = plan(b, G)
        iss = producer_issues(s)
        assert {p: len(v) for p, v in iss.items()} == consumer_slots(s), (b, G)
        for phase, lst in iss.items():
            for off, n in lst:
                assert 0 < n <= slot and off % 16 == 0 and n % 16 == 0, (phase, off, n)
                spans.append((off, off + n))
        # the producer's L2 prefetch spans are the consumers' scale reads: every one 16-byte aligned
        for phase, (a, e) in consumer_scale_spans(s).items():
            assert a % 16 == 0 and (e - a) % 16 == 0, (phase, a, e)
            scales.append((a, e))
    _covers_once(spans, L.LAYER_CODE_BYTES)
    _covers_once(scales, L.LAYER_BSCALE_BYTES)


@pytest.mark.parametrize("G", [16, 128, 132])
def test_each_slot_row_meets_its_own_block_scales(G):
    """For every row a consumer reads from a slot, the code row the producer put there and the
    scale row the consumer reads are the same stream row (qkv, gate/up, down segments: 512 code
    bytes and 64 scale bytes per row; O: 128 and 16)."""
    f, k = _nv_fmt(), _k()
    R, per_round = f["kRows1024"], 4 * f["kRows1024"]
    for b in range(G):
        s = plan(b, G)
        iss, sc = producer_issues(s), consumer_scale_spans(s)
        for phase, seg in (("qkv", "qkv"), ("gateup", "gateup"), ("down", "down")):
            nrows = (sc[phase][1] - sc[phase][0]) // f["kBsRow1024"]
            for t in range(nrows):  # phase row t: round t // 128, slot (t % 128) // 32, row t % 32
                rd, i, r = t // per_round, (t % per_round) // R, t % R
                off, n = iss[phase][4 * rd + i]
                assert r * f["kRowBytes1024"] < n
                code_row = (off + r * f["kRowBytes1024"] - L.CODE_OFFSETS[seg]) // f["kRowBytes1024"]
                scale_row = (sc[phase][0] + t * f["kBsRow1024"] - L.BSCALE_OFFSETS[seg]) // f["kBsRow1024"]
                assert code_row == scale_row, (phase, b, t)
        o0, o1 = s["o"]
        for t in range(o1 - o0):
            off, n = iss["o"][t // f["kRowsO"]]
            code_row = (off + (t % f["kRowsO"]) * f["kRowBytesO"] - L.CODE_OFFSETS["o"]) // f["kRowBytesO"]
            scale_row = (sc["o"][0] + t * f["kBsRowO"] - k["kBsO"]) // f["kBsRowO"]
            assert code_row == scale_row == s["g"] * C.HIDDEN + o0 + t


def qkv_std_row(g: int, r: int) -> int:
    """schedule_stream.cuh's qkv_std_row: group g's row r -> the q | k | v row."""
    if r < 256:
        return g * 256 + r
    if r < 384:
        return C.Q_DIM + g * C.HEAD_DIM + r - 256
    return C.Q_DIM + C.KV_DIM + g * C.HEAD_DIM + r - 384


def test_stream_order_puts_every_row_where_the_kernel_reads_it():
    """One layer of codes and block scales with every byte naming its row and column, reordered by
    the engine: group g's qkv row r holds layout row qkv_std_row(g, r); group g's O row r holds
    columns 256 g .. of layout O row r; gate/up and down stay; the block scales follow their rows."""
    g8 = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 256, (1, L.LAYER_CODE_BYTES), dtype=torch.uint8, generator=g8)
    bsc = torch.randint(0, 127, (1, L.LAYER_BSCALE_BYTES), dtype=torch.uint8, generator=g8)
    out = mk.stream_order_nvfp4(codes, bsc)
    assert out.dtype == torch.uint8 and out.numel() == L.LAYER_CODE_BYTES + L.LAYER_BSCALE_BYTES
    oc, ob = out[:L.LAYER_CODE_BYTES], out[L.LAYER_CODE_BYTES:]
    for buf, src, offs, rb in ((oc, codes[0], L.CODE_OFFSETS, L.CODE_ROW_BYTES),
                               (ob, bsc[0], L.BSCALE_OFFSETS, L.BSCALE_ROW_BYTES)):
        qkv_in = src[offs["qkv"]:offs["o"]].view(-1, rb["qkv"])
        qkv_out = buf[offs["qkv"]:offs["o"]].view(GROUPS, GROUP_ROWS, rb["qkv"])
        for g in range(GROUPS):
            idx = torch.tensor([qkv_std_row(g, r) for r in range(GROUP_ROWS)])
            assert torch.equal(qkv_out[g], qkv_in[idx]), g
        w = rb["o"] // GROUPS  # one group's slice of an O row: 128 code bytes, 16 scale bytes
        o_in = src[offs["o"]:offs["gateup"]].view(C.HIDDEN, rb["o"])
        o_out = buf[offs["o"]:offs["gateup"]].view(GROUPS, C.HIDDEN, w)
        for g in range(GROUPS):
            assert torch.equal(o_out[g], o_in[:, g * w:(g + 1) * w]), g
        assert torch.equal(buf[offs["gateup"]:], src[offs["gateup"]:])
    # the inputs are not modified
    assert torch.equal(codes, torch.randint(0, 256, (1, L.LAYER_CODE_BYTES), dtype=torch.uint8,
                                            generator=torch.Generator().manual_seed(0)))


# ---- registration, byte model, refusals -----------------------------------------------------------
def test_nvfp4_variant_is_registered_everywhere():
    v = mk.variant_spec("nvfp4-stream")
    assert v["id"] == 5 and v["weights"] == "nvfp4" and v["schedule"] == "stream" and v["experimental"] is True
    assert "experimental" in v["description"].lower()
    assert mk.NVFP4_LAYOUTS[v["layout"]] == L.LAYOUT
    assert mk.WAITS["nvfp4-stream"] == mk.WAITS["bf16-stream"]
    src = "".join((REPO_ROOT / "kernel" / f).read_text() for f in ("megakernel.cu", "decode_step.cuh"))  # + its kernels
    hdr = (REPO_ROOT / "kernel" / "megakernel.cuh").read_text()
    units = (REPO_ROOT / "kernel" / "variant_units.def").read_text()  # kernel_for is generated from it
    assert "kVariantNvfp4Stream = 5" in hdr and "MONOLITH_VARIANT(kVariantNvfp4Stream, Main, true)" in units
    assert re.search(r"struct VariantCfg<kVariantNvfp4Stream> : StreamCfg \{\s*using Weights = WeightsNvfp4;", src)
    deq = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    assert "struct WeightsNvfp4" in deq and "using Head = WeightsE4M3;" in deq  # the LM head stays FP8
    assert kernel_spec.build_flags("nvfp4-stream") == kernel_spec.build_flags("fp8-stream")
    assert registry.weights_of("megakernel-nvfp4-stream") == "nvfp4"
    assert registry.weights_of("megakernel-nvfp4-stream-xray") == "nvfp4"
    sp = registry.spec("megakernel-nvfp4-stream")
    assert sp.needs_cuda and sp.experimental


def test_dot16B_follows_the_kernel_models_order():
    """WeightsNvfp4::dot16B: per block an accumulator from 0 over its two u32s (elements 0..7 then
    8..15 of the block, dot8_e2m1_biased's pair order), then one fmaf with the block scale, block 0
    before block 1 (quant/nvfp4_kernel_model.py kernel_gemv)."""
    deq = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    body = re.search(r"struct WeightsNvfp4 \{(.*?)\n\};", deq, flags=re.S).group(1)
    assert "dot8_e2m1_biased(w.y, a[2], a[3], dot8_e2m1_biased(w.x, a[0], a[1], 0.f))" in body
    assert "dot8_e2m1_biased(w.w, a[6], a[7], dot8_e2m1_biased(w.z, a[4], a[5], 0.f))" in body
    assert body.index("acc = fmaf(b0, s.x, acc)") < body.index("return fmaf(b1, s.y, acc)")
    assert "g * e2m1_unbias()" in body


def test_dot16B_h2_follows_the_kernel_models_half2_order():
    """The half2 path (kNvHalf2): per block a half2 from 0 over its two u32s (u32 u meets the lifted
    inputs xh[u]; pair k = elements (k, k + 4) meets their half2 k, fused f16 FMAs in k order), then
    fmaf(lo + hi, block scale * the word's factor, acc), block 0 first; the row scale is g alone
    (quant/nvfp4_kernel_model.py kernel_gemv(half2=True))."""
    deq = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    body = deq[deq.index("struct WeightsNvfp4 {"):]
    body = body[:body.index("\n};")]
    assert "const __half2 h0 = hdot8_e2m1(w.y, xh[1], hdot8_e2m1(w.x, xh[0], z));" in body
    assert "const __half2 h1 = hdot8_e2m1(w.w, xh[3], hdot8_e2m1(w.z, xh[2], z));" in body
    assert body.index("acc = fmaf(__low2float(h0) + __high2float(h0), s.x * f, acc);") < \
        body.index("return fmaf(__low2float(h1) + __high2float(h1), s.y * f, acc);")
    assert "row_scale(float g) { return kH2 ? g : g * e2m1_unbias(); }" in body and "template <bool kH2>" in body
    hdot = deq[deq.index("__half2 hdot8_e2m1(uint32_t w, uint4 x, __half2 acc) {"):]
    hdot = hdot[:hdot.index("\n}")]
    lines = [f"acc = __hfma2(p[{k}], u32_as_half2(x.{c}), acc);" for k, c in enumerate("xyzw")]
    assert all(ln in hdot for ln in lines) and [hdot.index(ln) for ln in lines] == sorted(hdot.index(ln) for ln in lines)
    assert "constexpr int kE2M1UnbiasLog2 = MONOLITH_HAS_E2M1_CVT ? 0 : 14;" in deq


def test_half2_input_words_are_a_conflict_free_layout():
    """store_xh2 / load_xh2 (the half2 path's inputs in sm.x, sm.attn, sm.act): lane l of a word's
    warp stores element 32 i + l as half `hi` (l / 4 % 2) of half2 16 i + 4 (c ^ ((i >> 1) & 3)) + k
    (c = l / 8, k = l % 4), so pair (l, l + 4) shares one half2; lane i of a reading warp loads chunk c of word i from 16-byte slot
    4 i + (c ^ ((i >> 1) & 3)). Emulated over sm.act's 96 words: every half2 written once, every
    reader's chunk u holds the pairs (8 u + k, 8 u + k + 4), k = 0..3 (the code word's u32 u, as
    hdot8_e2m1 meets them), the factors sit after the pairs inside the float array, and the 8 lanes
    of a quarter-warp read 8 different 16-byte bank groups."""
    text = schedule_text()
    for line in ("const int at = kPairPlaces ? 2 * (16 * i + 4 * (c ^ ((i >> 1) & 3)) + k) + hi : 32 * i + lane;",
                 "reinterpret_cast<__half*>(buf)[at] = __float2half_rn(v * lift);",
                 "store_word_f16<kWords, kE2M1UnbiasLog2, true>(buf, i, v);",
                 "const int c = lane >> 3, k = lane & 3, hi = (lane >> 2) & 1;",
                 "for (int c = 0; c < 4; ++c) x.c[c] = c4[c ^ ((i >> 1) & 3)];", "x.f = buf[kWords * 16 + i];",
                 "if (lane == 0) buf[kWords * 16 + i] = pow2f(e);",
                 "float pow2f(int e) { return __uint_as_float(uint32_t(127 + e) << 23); }",
                 "store_xh2<kHidden / 32>(s_x, e >> 5, v[j] * nw.w[j]);",
                 "store_xh2<kGroupCols / 32>(sm.attn, tid >> 5, a);", "store_xh2<kIntermediate / 32>(sm.act, i >> 5, av[k]);",
                 "load_xh2<kIntermediate / 32>(sm.act, 32 * seg + lane)",
                 "x = load_nv_in<decltype(kH2C)::value, kHidden / 32>(s_x, lane);",
                 "load_nv_in<kNv, kGroupCols / 32>(sm.attn, l8)"):
        assert line in text, line
    words = C.INTERMEDIATE // 32
    store: dict[int, tuple[int, int]] = {}
    halves: dict[int, int] = {}
    for i in range(words):
        for lane in range(32):
            c, k, hi = lane >> 3, lane & 3, (lane >> 2) & 1
            at = 2 * (16 * i + 4 * (c ^ ((i >> 1) & 3)) + k) + hi
            assert at not in halves
            halves[at] = 32 * i + lane
    for at in range(0, 2 * 16 * words, 2):
        store[at // 2] = (halves[at], halves[at + 1])
    assert sorted(store) == list(range(16 * words))
    assert 16 * words + words <= C.INTERMEDIATE and 16 * 8 + 8 <= 256 and 16 * 32 + 32 <= C.HIDDEN
    for i in range(words):
        for u in range(4):
            slot = 4 * i + (u ^ ((i >> 1) & 3))
            assert [store[4 * slot + k] for k in range(4)] == [(32 * i + 8 * u + k, 32 * i + 8 * u + k + 4) for k in range(4)]
    for base in range(0, words, 8):
        for u in range(4):
            assert len({(4 * i + (u ^ ((i >> 1) & 3))) % 8 for i in range(base, base + 8)}) == 8


def test_nvfp4_bytes_and_time_model():
    nv = bytemodel.ByteModel.nvfp4()
    assert nv.weight_bytes == L.bytes_per_token(C.NUM_LAYERS)
    assert bytemodel.ByteModel.for_weights("nvfp4").weight_bytes == nv.weight_bytes
    assert mk.bytes_per_token(0, weights="nvfp4") == L.bytes_per_token(C.NUM_LAYERS) + mk.kv_bytes_per_position()
    tm = mk.time_model_bytes("nvfp4")
    assert C.NUM_LAYERS * tm["bytes_layer"] + tm["bytes_head"] + C.HIDDEN * 2 + C.HIDDEN + 4 == nv.weight_bytes
    assert nv.weight_bytes < bytemodel.ByteModel.fp8().weight_bytes


def _fake_ckpt(packed=None, sha="a" * 64):
    return SimpleNamespace(shape=SimpleNamespace(num_layers=C.NUM_LAYERS), packed=packed, tensors={},
                           sha256=lambda: sha, describe=lambda: {})


def _meta(**kw):
    return {"format": L.FORMAT, "scheme": L.SCHEME, "layout": L.LAYOUT, "layout_version": L.LAYOUT_VERSION,
            "element": L.ELEMENT, "block": L.BLOCK, "block_scale_dtype": L.BLOCK_SCALE_DTYPE,
            "tensor_scale_dtype": L.TENSOR_SCALE_DTYPE, "head": "fp8", "num_layers": C.NUM_LAYERS,
            "search": {"enabled": True}, "source": {"sha256": "a" * 64}, **kw}


def _mixed_meta():
    fp8 = ["model.layers.0.self_attn.q_proj.weight"]
    return _meta(layout_version=L.LAYOUT_VERSION_MIXED,
                 mixed={"fp8": fp8, "fp8_kinds": [], "per_kind": False, "fp8_layout": F8.LAYOUT,
                        "fp8_scheme": F8.SCHEME, "map": {"source": "given as names"}})


def test_engine_refusals_come_before_any_gpu_work():
    nv = lambda meta: pack_nvfp4.PackedNVFP4(path=None, meta=meta, tensors={})  # noqa: E731
    with pytest.raises(MonolithError, match="mixed pack.*layout_version 2.*no kernel variant reads mixed packs"):
        mk.MegakernelEngine(_fake_ckpt(nv(_mixed_meta())), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="mixed pack"):
        mk.MegakernelEngine(_fake_ckpt(), variant="nvfp4-stream", packed=nv(_mixed_meta()))
    with pytest.raises(MonolithError, match="layout"):
        mk.MegakernelEngine(_fake_ckpt(nv(_meta(layout="nvfp4-colmajor-v9"))), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="scheme"):
        mk.MegakernelEngine(_fake_ckpt(nv(_meta(scheme="mxfp4"))), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="head"):
        mk.MegakernelEngine(_fake_ckpt(nv(_meta(head="bf16"))), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="layers"):
        mk.MegakernelEngine(_fake_ckpt(nv(_meta(num_layers=2))), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="layers.codes"):  # right metadata, wrong tensors
        mk.MegakernelEngine(_fake_ckpt(nv(_meta())), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="another checkpoint"):
        mk.MegakernelEngine(_fake_ckpt(), variant="nvfp4-stream", packed=nv(_meta(source={"sha256": "b" * 64})))
    from monolith.quant import pack_fp8

    f8 = pack_fp8.PackedFP8(path=None, meta={}, tensors={})
    with pytest.raises(MonolithError, match="reads nvfp4 weights"):
        mk.MegakernelEngine(_fake_ckpt(f8), variant="nvfp4-stream")
    with pytest.raises(MonolithError, match="reads nvfp4 weights"):
        mk.MegakernelEngine(_fake_ckpt(), variant="nvfp4-stream", packed=f8)
    # a bf16 variant refuses the nvfp4 oracle's checkpoint (its weights would be rounded to bf16)
    with pytest.raises(MonolithError, match="reads bf16 weights"):
        mk.MegakernelEngine(_fake_ckpt(nv(_meta())), variant="bf16-stream")


def test_packed_file_errors_are_clear(tmp_path):
    with pytest.raises(MonolithError, match="packed nvfp4 weights not found"):
        mk.MegakernelEngine(_fake_ckpt(), variant="nvfp4-stream", packed=tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path after the nvfp4 checks")
def test_a_valid_nvfp4_pack_reaches_the_extension():
    t = {name: torch.zeros(shape, dtype=getattr(torch, dt)) for name, (shape, dt) in
         pack_nvfp4._expected_shapes(C.NUM_LAYERS).items()}
    pk = pack_nvfp4.PackedNVFP4(path=None, meta=_meta(), tensors=t)
    with pytest.raises(MonolithError, match="needs a CUDA GPU"):
        mk.MegakernelEngine(_fake_ckpt(pk), variant="nvfp4-stream")
    eng = object.__new__(mk.Nvfp4Engine)  # the dequantized checkpoint's own pack is what runs
    eng.spec, eng.weight_format = mk.variant_spec("nvfp4-stream"), "nvfp4"
    assert eng._pack(_fake_ckpt(pk), "nvfp4-stream", None) is pk


def test_the_oracle_is_the_in_memory_pack_dequantized(ckpt2):
    dq = registry.checkpoint_for("nvfp4", ckpt2)
    assert dq.weight_dtype == torch.float32 and isinstance(dq.packed, pack_nvfp4.PackedNVFP4)
    assert dq.packed.meta["layout_version"] == L.LAYOUT_VERSION and dq.describe()["source"]["sha256"] == ckpt2.sha256()
    name = "model.layers.1.self_attn.o_proj.weight"
    assert torch.equal(dq.tensors[name], dq.packed.dequantized(name))


def test_input_swizzle_is_a_conflict_free_permutation():
    """nv_swz (where the writers put element e of sm.x / sm.attn / sm.act) and load_x32 (lane i
    reads float4 j ^ (i % 8) of its 8): a permutation inside each 128-byte line, every lane gets its
    32 elements in order, and the 8 lanes of a quarter-warp read 8 different 16-byte bank groups."""
    text = schedule_text()
    assert "return (i << 5) | ((j ^ (i & 7)) << 2) | (e & 3);" in text
    assert "for (int j = 0; j < 8; ++j) x.v[j] = x4[j ^ (i & 7)];" in text

    def swz(e):
        i, j = e >> 5, (e >> 2) & 7
        return (i << 5) | ((j ^ (i & 7)) << 2) | (e & 3)

    n = C.INTERMEDIATE
    place = [swz(e) for e in range(n)]
    assert sorted(place) == list(range(n)) and all(p // 32 == e // 32 for e, p in enumerate(place))
    store = [None] * n
    for e, p in enumerate(place):
        store[p] = e
    for i in range(n // 32):  # lane i's float4 j (the code reads float4 index 8 i + (j ^ (i & 7)))
        got = [store[4 * (8 * i + (j ^ (i & 7))) + c] for j in range(8) for c in range(4)]
        assert got == list(range(32 * i, 32 * i + 32)), i
    for j in range(8):  # one quarter-warp, one load: 8 lanes, 8 distinct bank groups of 16 bytes
        assert len({(8 * i + (j ^ (i & 7))) % 8 for i in range(8)}) == 8
    # the writers (warp w stores elements 32 w' .. of one line) stay within one 128-byte line
    assert all(place[e] // 32 == e // 32 for e in range(0, n, 32))


def _warp_sum4(a: torch.Tensor) -> torch.Tensor:
    """A port of schedule_stream.cuh's warp_sum4 on fp32 values a [4, 32] (value v, lane l): the
    lane-8v result of each value. Each line is the kernel's (select, shuffle xor, add)."""
    lane = torch.arange(32)
    hi, b3 = (lane & 16) != 0, (lane & 8) != 0
    shfl = lambda v, m: v[lane ^ m]  # noqa: E731 (__shfl_xor_sync)
    b0 = torch.where(hi, a[2], a[0]) + shfl(torch.where(hi, a[0], a[2]), 16)
    b1 = torch.where(hi, a[3], a[1]) + shfl(torch.where(hi, a[1], a[3]), 16)
    c = torch.where(b3, b1, b0) + shfl(torch.where(b3, b0, b1), 8)
    for m in (4, 2, 1):
        c = c + shfl(c, m)
    return c[8 * torch.arange(4)]


def test_warp_sum4_is_bitwise_the_kernel_models_butterfly():
    """rows_nv reduces a row's 32 lane sums with warp_sum4; quant/nvfp4_kernel_model.py with an xor
    butterfly 16, 8, 4, 2, 1 (lane 0's view). The same pairs are added at every step (fp32 addition
    commutes), so the two agree bit for bit, for values of any magnitude and sign."""
    text = schedule_text()
    for line in ("const float b0 = (hi ? a2 : a0) + __shfl_xor_sync(0xffffffffu, hi ? a0 : a2, 16);",
                 "const float b1 = (hi ? a3 : a1) + __shfl_xor_sync(0xffffffffu, hi ? a1 : a3, 16);",
                 "float c = (b3 ? b1 : b0) + __shfl_xor_sync(0xffffffffu, b3 ? b0 : b1, 8);"):
        assert line in text, line
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        a = torch.randn(4, 32, generator=g) * torch.exp2(torch.randint(-30, 30, (4, 32), generator=g).float())
        y = a.clone()
        for off in (16, 8, 4, 2, 1):  # the model's butterfly, every lane
            y = y + y[:, torch.arange(32) ^ off]
        assert torch.equal(_warp_sum4(a), y[:, 0])


def _lds128_wavefronts(float4_index) -> int:
    """Shared-memory wavefronts of one LDS.128 by 32 lanes (lane l reads float4 float4_index[l]):
    the 32 banks form 8 groups of 16 bytes, one wavefront serves each group once, and lanes
    reading the same float4 share it (broadcast)."""
    per_group: dict[int, set[int]] = {}
    for f in float4_index:
        per_group.setdefault(f % 8, set()).add(f)
    return max(len(v) for v in per_group.values())


def test_x_swizzle_makes_the_bf16_and_e4m3_input_loads_conflict_free():
    """The GEMV inputs' swizzle (load_xhalf, O's attention loads): the lanes of bf16 rows read float4s
    2 q, 2 q + 1 (q = 64 h + lane + 32 j), of E4M3 rows 4 m + j (m = 32 h + lane), of bf16 / E4M3 O
    2 lane (+1) / 4 (lane % 16) + j. Linear, those cost 8 / 16 / 8 / 8 wavefronts per LDS.128; through
    x4_swz (nv_swz on float4s) each costs the minimum (4; E4M3 O, whose half-warps read the same 16
    float4s: 2), and x4_swz is the float4 form of nv_swz, the writers' placement."""
    text = schedule_text() + (REPO_ROOT / "kernel" / "policy.cuh").read_text()
    assert "return kSwz ? (f & ~7) | ((f & 7) ^ ((f >> 3) & 7)) : f;" in text
    for line in ("x.v[2 * j] = x4[x4_swz<kSwz>(2 * q)];", "x.v[2 * j + 1] = x4[x4_swz<kSwz>(2 * q + 1)];",
                 "x.v[j] = x4[x4_swz<kSwz>(128 * h + 4 * lane + j)];",
                 # (the third argument: fp8's half2 inputs per phase, Policy::kE4M3Half2Phases; its
                 # mask 4 gives gate/up store_xe's f16 words, so these fp32 stores are qkv's, O's and down's)
                 "static constexpr int kE4M3Half2Phases = kE4M3 ? 4 : 0;",
                 "stream_prenorm<true, kNv, kE4H2Qkv>(v, nin, sm.x, sm.ssq);",
                 "stream_prenorm<true, kNv, kE4H2Mlp>(v, npost, sm.x, sm.ssq);", "stream_prenorm<kHeadSwz>(v, nfin, sm.x, sm.ssq);",
                 "sm.attn[nv_swz(tid)] = a;", "sm.act[nv_swz(i)] = av[k];",
                 "reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane)];",
                 # the attention's q stays linear (a swizzle measured neutral: docs/EXPERIMENTS.md)
                 "const float4 qa0 = q4[2 * ql16], qa1 = q4[2 * ql16 + 1];",
                 "sm.q[seg * kHeadDim + d] = y0;"):
        assert line in text, line

    def x4_swz(f):
        return (f & ~7) | ((f & 7) ^ ((f >> 3) & 7))

    def nv_swz(e):
        i, j = e >> 5, (e >> 2) & 7
        return (i << 5) | ((j ^ (i & 7)) << 2) | (e & 3)

    assert all(4 * x4_swz(e >> 2) + (e & 3) == nv_swz(e) for e in range(C.INTERMEDIATE))
    lanes = range(32)
    patterns = {  # name: (float4 index of each lane, for each load), linear wavefronts
        "bf16 rows": ([[2 * (64 * h + ln + 32 * j) + o for ln in lanes] for h in (0, 1) for j in (0, 1) for o in (0, 1)], 8),
        "e4m3 rows": ([[128 * h + 4 * ln + j for ln in lanes] for h in (0, 1) for j in range(4)], 16),
        "bf16 O": ([[2 * ln + o for ln in lanes] for o in (0, 1)], 8),
        "e4m3 O": ([[4 * (ln % 16) + j for ln in lanes] for j in range(4)], 8),
        # a split's q loads, were they swizzled (half-warps alike: lane l reads 2 (l % 16) + o of
        # each head, 32 float4s per head; docs/EXPERIMENTS.md MONOLITH_Q_SWIZZLE)
        "attention q": ([[32 * hd + 2 * (ln % 16) + o for ln in lanes] for hd in (0, 1) for o in (0, 1)], 4),
    }
    for name, (loads, linear) in patterns.items():
        for seg in (0, 256, 512):  # sm.act's three 1024-wide segments (float4 offsets)
            for ld in loads:
                assert _lds128_wavefronts([seg + f for f in ld]) == linear, name
                least = -(-len(set(ld)) // 8)  # distinct float4s / 8 bank groups (E4M3 O: 16, broadcast)
                assert _lds128_wavefronts([x4_swz(seg + f) for f in ld]) == least, name


def test_part_stride_bank_ways():
    """part[]'s 8-row blocks are 16 floats apart: lanes 0, 8, 16, 24 of warp w store block kRb v + k's
    sum at the same time and share 2 banks (bf16, kRb = 1) or 1 bank (E4M3, kRb = 2): a 2- or 4-way
    conflict, which a 17-float stride would spread over four banks (measured neutral and removed:
    docs/EXPERIMENTS.md MONOLITH_PART_PAD)."""
    text = schedule_text()
    for line in ("constexpr int kPartBlk = kStreamConsumerWarps;  // part[] floats per 8-row block",
                 "part[(RF::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;",
                 "part[(F::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;",
                 "const float* pp = part + (t >> 3) * kPartBlk + 2 * (t & 7);"):
        assert line in text, line

    def ways(blk: int, rb: int) -> int:  # the most lanes on one bank, over warps and k
        worst = 0
        for w in range(16):
            for k in range(rb):
                banks = [((rb * v + k) * blk + w) % 32 for v in range(4)]
                worst = max(worst, max(banks.count(b) for b in banks))
        return worst

    assert (ways(16, 1), ways(16, 2)) == (2, 4)
    assert (ways(17, 1), ways(17, 2)) == (1, 1)


def test_nvfp4_half2_phases_agree_per_phase():
    """Every NVFP4 phase's input store, its rows' loads and its tensor row scale follow one flag (kNv:
    the half2 path); a phase storing half2 words but unbiasing its sums as the fp32 path does (or the
    reverse) would be off by 2^14. Every NVFP4 tensor scale goes through WeightsNvfp4::row_scale<kNv>."""
    text = schedule_text()
    lines = ["WeightsNvfp4::row_scale<kNv>(__ldg(TS + (r < kGroupCols", "stream_prenorm<true, kNv, kE4H2Qkv>",
             "rows_nv(std::false_type{}, std::bool_constant<kNv>{}, s.q1 - s.q0,",
             "tso = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsO));", "if constexpr (kNv) store_xh2<kGroupCols / 32>(sm.attn",
             "const NvIn<kNv> at = load_nv_in<kNv, kGroupCols / 32>(sm.attn, l8);",
             "tsg = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsGate));", "tsu = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsUp));",
             "stream_prenorm<true, kNv, kE4H2Mlp>", "rows_nv(std::false_type{}, std::bool_constant<kNv>{}, ngu,",
             "scd = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsDown));",
             "if constexpr (kNv) store_xh2<kIntermediate / 32>(sm.act",
             "a[k] = nv_dot(w, load_xh2<kIntermediate / 32>(sm.act, 32 * seg + lane), b2);",
             "rows_nv(std::true_type{}, std::bool_constant<kNv>{}, nseg,"]
    for line in lines:
        assert line in text, line
    assert "W::row_scale(__ldg(TS" not in text and "WeightsNvfp4::row_scale(" not in text  # no default path
    assert "kNvH2" not in text and "kNvHalf2" not in text
