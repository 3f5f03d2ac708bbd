"""The X-ray's kernel buffer decoder (both record layouts of kernel/xray.cuh) and the overhead
measurement core, with fake buffers and fake timings (no GPU)."""
import re
import struct
import sys

import numpy as np
import pytest

from monolith import REPO_ROOT
from monolith.errors import MonolithError
from monolith.xray import overhead as O
from monolith.xray.analyze import align, analyze
from monolith.xray.raw import (
    COMPACT_HEADER_WORDS,
    COMPACT_MAGIC,
    SLOT_BYTES,
    compact_capacity,
    decode_buffer,
    load_raw,
    save_raw,
)

SLOTS = 16  # per block: 16 x 40 B = 80 words, 72 records


def compact_block(block, smid, g_begin, c_begin, recs, g_end=None, c_end=None, edges=(True, True), slots=SLOTS):
    """One block's region as the kernel writes it: recs = [(phase, layer, clock64)]."""
    w = np.zeros(slots * SLOT_BYTES // 8, np.uint64)
    w[0] = COMPACT_MAGIC
    w[1] = (block << 32) | smid
    w[2], w[3], w[4] = g_begin, c_begin, (int(edges[0]) << 32) | 40
    if g_end is not None:
        w[5], w[6], w[7] = g_end, c_end, (int(edges[1]) << 32) | 50
    for i, (ph, layer, c) in enumerate(recs):
        w[COMPACT_HEADER_WORDS + i] = ((ph + 1) << 48) | (layer << 32) | (c & 0xFFFFFFFF)
    return w.tobytes()


def full_block(block, smid, events, slots=SLOTS):
    """40-byte records (g0, g1, c0, c1, phase, layer, block, smid)."""
    out = b"".join(struct.pack("<4Q4H", g0, g1, c0, c1, ph, layer, block, smid) for ph, layer, g0, g1, c0, c1 in events)
    return out + bytes(slots * SLOT_BYTES - len(out))


def test_the_kernel_and_the_decoder_agree_on_the_layout():
    text = (REPO_ROOT / "kernel" / "xray.cuh").read_text()
    magic = int(re.search(r"kXrayCompactMagic = (0x[0-9a-fA-F]+)ull", text).group(1), 16)
    assert magic == COMPACT_MAGIC
    assert int(re.search(r"kXrayCompactHeaderWords = (\d+);", text).group(1)) == COMPACT_HEADER_WORDS
    assert "sizeof(XrayEvent) == 40" in text and SLOT_BYTES == 40
    assert compact_capacity(1024) == 1024 * 5 - 8


def test_compact_decode_maps_clock64_onto_the_anchors():
    c0 = (1 << 32) - 300  # the low 32 bits wrap during the token
    g0 = 1_700_000_000_000
    recs = [(16, 0, c0 + 1000), (17, 0, c0 + 1500), (23, 0, c0 + 2600), (18, 0, c0 + 4000)]
    buf = compact_block(0, 7, g0, c0, recs, g_end=g0 + 2000, c_end=c0 + 4000)
    buf += bytes(SLOTS * SLOT_BYTES)  # block 1 wrote nothing
    buf += compact_block(2, 9, g0 + 64, c0 + 10, [(16, 0, c0 + 2010)], g_end=g0 + 1064, c_end=c0 + 2010)
    ev, add = decode_buffer(np.frombuffer(buf, np.uint8), 3, SLOTS)
    assert add["xray_record"] == "compact" and add["xray_max_events"] == compact_capacity(SLOTS)
    assert add["clock_anchors"]["blocks"] == 2 and add["clock_anchors"]["edges"] == 4
    assert ev.shape == (5, 8)
    b0 = ev[ev[:, 0] == 0]
    assert b0[:, 1].tolist() == [7] * 4 and b0[:, 2].tolist() == [16, 17, 23, 18]
    # intervals tile the block's token from the begin anchor; clock64 unwrapped past 2^32
    assert b0[0, 6] == c0 and b0[:, 7].tolist() == [c0 + 1000, c0 + 1500, c0 + 2600, c0 + 4000]
    assert (b0[1:, 6] == b0[:-1, 7]).all()
    # 0.5 ns per cycle between the anchors (edges: stored half a 32 ns tick early)
    assert b0[0, 4] == g0 - 16 and b0[0, 5] == g0 - 16 + 500 and b0[-1, 5] == g0 - 16 + 2000
    m = {"variant": "bf16-stream", "gpu": "fake", "sm_count": 16, "blocks": 3, "threads": 544, "position": 128,
         "sm_clock_mhz": 1980, "token_time_us": 2.0, **add}
    al = align(m, ev)
    assert al["method"].startswith("per block")
    # the error bound: half the widest window between the timer reads around a tick (50 cycles at 2 GHz)
    assert al["residual_ns"]["max"] == pytest.approx(12.5)
    # block 2 started 64 ns after block 0 at the same clock offset + 10 cycles
    s = al["start_ns"]
    assert abs(s[ev[:, 0] == 2][0] - s[ev[:, 0] == 0][0] - 64) < 1.0


def test_compact_decode_clamps_a_cut_and_falls_back_without_an_end_anchor():
    c0, g0 = 5000, 10_000_000
    recs = [(16, 3, c0 + 100), (29, 3, c0 + 50), (17, 3, c0 + 300)]  # x_words cut earlier than the record before
    ev, add = decode_buffer(np.frombuffer(compact_block(0, 1, g0, c0, recs), np.uint8), 1, SLOTS)
    assert ev[1, 6] == ev[1, 7] == c0 + 100  # clamped: an empty interval
    assert ev[2, 7] == c0 + 300
    assert add["clock_anchors"]["blocks_without_end"] == 1
    assert abs((ev[2, 5] - ev[0, 4]) - 300 / 1.98) <= 1  # the nominal clock


def test_full_layout_decodes_as_written_and_mixed_layouts_are_refused():
    evs = [(16, 0, 100, 164, 1000, 1128), (17, 0, 164, 228, 1128, 1256)]
    buf = full_block(0, 4, evs) + full_block(1, 5, [(16, 0, 90, 200, 50, 270)])
    ev, add = decode_buffer(np.frombuffer(buf, np.uint8), 2, SLOTS)
    assert add == {"xray_record": "full", "xray_max_events": SLOTS}
    assert ev.tolist()[0] == [0, 4, 16, 0, 100, 164, 1000, 1128]
    mixed = full_block(0, 4, evs) + compact_block(1, 5, 1000, 1000, [(16, 0, 2000)], 1500, 2000)
    with pytest.raises(MonolithError, match="different record layouts"):
        decode_buffer(np.frombuffer(mixed, np.uint8), 2, SLOTS)


def test_torn_compact_buffers_are_refused():
    good = compact_block(0, 1, 1000, 1000, [(16, 0, 2000), (17, 0, 3000)], 3000, 3000)
    w = np.frombuffer(good, np.uint64).copy()
    w[COMPACT_HEADER_WORDS] = 0  # a hole before a written record
    with pytest.raises(MonolithError, match="after an unwritten one"):
        decode_buffer(w.view(np.uint8), 1, SLOTS)
    w = np.frombuffer(good, np.uint64).copy()
    w[1] = (3 << 32) | 1  # says it is block 3
    with pytest.raises(MonolithError, match="says it is block 3"):
        decode_buffer(w.view(np.uint8), 1, SLOTS)
    with pytest.raises(MonolithError, match="expected 2 blocks"):
        decode_buffer(np.frombuffer(good, np.uint8), 2, SLOTS)


def test_a_compact_trace_saves_loads_and_analyzes(tmp_path):
    g0 = 1_000_000_000
    blocks = []
    for b in range(4):
        c = 10_000 * (b + 1)
        recs, t = [], c
        for layer in range(2):
            for ph in (15, 16, 17, 18, 19, 20, 21, 22, 26, 27):
                t += 200 + 10 * ph
                recs.append((ph, layer, t))
        t += 900
        recs.append((12, 28, t))
        blocks.append(compact_block(b, b + 2, g0 + 32 * b, c, recs, g_end=g0 + 32 * b + (t - c) // 2, c_end=t))
    ev, add = decode_buffer(np.frombuffer(b"".join(blocks), np.uint8), 4, SLOTS)
    meta = {"variant": "bf16-stream", "gpu": "fake", "sm_count": 8, "blocks": 4, "threads": 544, "position": 128,
            "sm_clock_mhz": 2000, "token_time_us": 3.9, **add}
    p = save_raw(tmp_path / "c.raw.npz", meta, ev)
    m2, e2 = load_raw(p)
    assert m2["xray_record"] == "compact" and np.array_equal(e2[:, 6:], ev[np.lexsort((ev[:, 6], ev[:, 0]))][:, 6:])
    O.attach(m2, fake_result([1.0, 2.5, 4.0]))
    s = analyze(m2, e2)
    assert s["clock_alignment"]["method"].startswith("per block")
    assert s["xray_overhead"]["over_limit"] == [1024] and s["xray_overhead"]["pct"]["16"] == 1.0
    assert any("X-ray overhead" in w and "1024" in w for w in s["warnings"])


def fake_result(pcts, positions=(16, 128, 1024)):
    plain = 2000.0
    seq = {}
    for p, pct in zip(positions, pcts, strict=True):
        seq[("plain", p)] = 1 / plain
        seq[("xray", p)] = 1 / (plain * (1 - pct / 100))
    return O.measure(lambda b, p: (seq[(b, p)], [1, 2, 3]), ["plain", "xray"], positions, runs=3)


def test_measure_computes_overhead_from_interleaved_medians():
    calls = []
    noise = iter([1.0, 1.3, 0.9, 1.0, 1.1, 1.0, 0.95, 1.05] * 50)

    def timer(build, pos):
        calls.append((build, pos))
        base = {"plain": 400e-6, "xray": 412e-6, "cheap": 402e-6}[build] * (1 + pos / 4096)
        return base * next(noise) ** 0.01, [7, 8, pos]

    r = O.measure(timer, ["plain", "xray", "cheap"], [16, 2048], runs=4)
    # interleaved: every build once per run, warm-up first
    assert calls[:3] == [("plain", 16), ("xray", 16), ("cheap", 16)] and len(calls) == 2 * 5 * 3
    assert r["overhead_pct"]["xray"]["16"] == pytest.approx((1 - 400 / 412) * 100, abs=0.3)
    assert 0 < r["overhead_pct"]["cheap"]["2048"] < 1
    assert r["over_limit"] == {"xray": [], "cheap": []}
    assert r["tokens_equal"] == {"xray": {"16": True, "2048": True}, "cheap": {"16": True, "2048": True}}
    r = fake_result([0.5, 3.5, 1.0])
    assert r["over_limit"] == {"xray": [128]}


def test_measure_refuses_bad_timings_and_changing_tokens():
    with pytest.raises(MonolithError, match="not finite"):
        O.measure(lambda b, p: (float("nan"), [1]), ["plain", "xray"], [16], runs=1)
    with pytest.raises(MonolithError, match="plain build and at least one"):
        O.measure(lambda b, p: (1.0, [1]), ["plain"], [16])
    n = iter(range(100))
    with pytest.raises(MonolithError, match="different tokens from run to run"):
        O.measure(lambda b, p: (1e-3, [next(n)]), ["plain", "xray"], [16], runs=2)
    # the X-ray build decoding other tokens than the plain one is reported, not hidden
    r = O.measure(lambda b, p: (1e-3, [1] if b == "plain" else [2]), ["plain", "xray"], [16], runs=1)
    assert r["tokens_equal"]["xray"]["16"] is False


def test_the_ab_script_rewrites_one_line_of_a_copy(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import xray_overhead as X

    assert X.shipped_alt(REPO_ROOT / "kernel") == "compact"
    (tmp_path / "kernel").mkdir()
    for f in (REPO_ROOT / "kernel").iterdir():
        if f.is_file():
            (tmp_path / "kernel" / f.name).write_bytes(f.read_bytes())
    d = X.alt_kernel_dir("full", root=tmp_path)
    assert X.shipped_alt(d) == "full"
    a = (REPO_ROOT / "kernel" / "xray.cuh").read_text().splitlines()
    b = (d / "xray.cuh").read_text().splitlines()
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1
    assert (REPO_ROOT / "kernel" / "xray.cuh").read_text() == (tmp_path / "kernel" / "xray.cuh").read_text()
    assert X.main(["--alts", "nope"]) == 2
    # nvnogather: compact's layout line, the s_gather constant flipped; nothing else moves
    d = X.alt_kernel_dir("nvnogather", root=tmp_path)
    assert X.shipped_alt(d) == "nvnogather"
    b = (d / "xray.cuh").read_text().splitlines()
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert diff == [("constexpr bool kXrayNvGather = true;", "constexpr bool kXrayNvGather = false;")]
    # nvsmemptr: the shared-state constant flipped alone; nvsmemnogather: both NVFP4 constants
    smem = ("constexpr bool kXrayNvSmem = false;", "constexpr bool kXrayNvSmem = true;")
    gather = ("constexpr bool kXrayNvGather = true;", "constexpr bool kXrayNvGather = false;")
    for alt, want in (("nvsmemptr", [smem]), ("nvsmemnogather", [gather, smem])):
        d2 = X.alt_kernel_dir(alt, root=tmp_path)
        assert X.shipped_alt(d2) == alt
        b2 = (d2 / "xray.cuh").read_text().splitlines()
        assert len(b2) == len(a) and [(x, y) for x, y in zip(a, b2, strict=True) if x != y] == want
        # every other kernel source is the shipped one, byte for byte
        others = sorted(f.name for f in d2.iterdir() if f.name != "xray.cuh")
        assert others and all((d2 / f).read_bytes() == (REPO_ROOT / "kernel" / f).read_bytes() for f in others)
    # a copy whose constants name no alt is refused, not guessed
    (d / "xray.cuh").write_text("\n".join(b).replace("XrayRecord::kCompact;", "XrayRecord::kFull;"))
    with pytest.raises(MonolithError, match="does not know"):
        X.shipped_alt(d)
    (d / "xray.cuh").write_text("\n".join(b).replace("constexpr bool kXrayNvSmem = false;", ""))
    with pytest.raises(MonolithError, match="kXrayNvSmem"):
        X.shipped_alt(d)


def test_every_stream_s_gather_stamp_goes_through_the_nvfp4_switch():
    """kXrayNvGather drops the NVFP4 kernels' s_gather records only if every stream phase stamps it
    through XRAY_GATHER (the macro that tests the switch against the NVFP4 flag XRAY_INIT gave xr)."""
    kdir = REPO_ROOT / "kernel"
    xray = (kdir / "xray.cuh").read_text()
    assert re.search(r"^constexpr bool kXrayNvGather = true;$", xray, re.M), "the shipped X-ray records s_gather"
    assert (
        "if constexpr (kXrayNvGather || !std::remove_reference_t<decltype(xr)>::kNvfp4) XRAY_END(s_gather, layer);"
        in xray
    )
    uses = 0
    for f in sorted(kdir.glob("phase_*.cuh")) + [kdir / "schedule_stream.cuh"]:
        text = f.read_text()
        assert not re.search(r"XRAY_END\(\s*s_gather", text), f"{f.name}: an s_gather stamp outside XRAY_GATHER"
        uses += len(re.findall(r"XRAY_GATHER\(L\);", text))
    assert uses == 5  # qkv, attention, MLP-1 (two paths), down


def test_the_nvfp4_shared_state_switch_reaches_only_the_stream_consumer():
    """kXrayNvSmem moves only the NVFP4 stream kernels' recorder state: XRAY_INIT takes the kernel's
    NVFP4 flag as an explicit argument at every use (no namespace-scope kNv supplies one by name
    lookup), the stream consumer passes its kNv and the upstream schedule false; the shipped value
    keeps every kernel's registers."""
    kdir = REPO_ROOT / "kernel"
    xray = (kdir / "xray.cuh").read_text()
    assert re.search(r"^constexpr bool kXrayNvSmem = false;$", xray, re.M), "the shipped X-ray keeps registers"
    assert "#define XRAY_INIT(buf, nvfp4) XrayRecorderFor<(nvfp4)> xr(buf)" in xray
    # the plain build: the same arity, and the flag must name a constant there too
    assert "#define XRAY_INIT(buf, nvfp4) ((void)(buf), (void)sizeof(std::bool_constant<(nvfp4)>))" in xray
    assert not re.search(r"^\s*constexpr bool kNv\b", xray, re.M), "a fallback kNv that a use would find by name"
    assert not re.search(r"\bkNv\b", re.sub(r"//[^\n]*", "", xray)), "xray.cuh's code names kNv"
    base = "std::conditional_t<kXrayNvSmem && kNvfp4Kernel, XrayCompactSmemRecorder, XrayRecorder>"
    assert f"struct XrayRecorderFor : {base} {{" in xray and f"using Base = {base};" in xray
    # the shared-state recorder keeps no member (nothing of it can live in a register across stamps)
    body = re.search(r"^struct XrayCompactSmemRecorder \{\n(.*?)^\};", xray, re.M | re.S).group(1)
    assert not re.search(r"^  [\w:<>*&][\w:<>*& ]* \w+;", body, re.M), "a data member in XrayCompactSmemRecorder"
    assert "__shared__ XrayCompactSmemState s;" in body and "volatile XrayCompactSmemState&" in body
    # the wrapper adds no data member either (only its base, a using and a static flag)
    body = re.search(r"^struct XrayRecorderFor : .*? \{\n(.*?)^\};", xray, re.M | re.S).group(1)
    assert [ln.strip().split()[0] for ln in body.splitlines()] == ["using", "using", "static"]
    # every use passes the flag: the stream consumer its kNv (declared before), upstream false
    uses = {f.name: re.findall(r"XRAY_INIT\(([^)]*)\)", f.read_text()) for f in sorted(kdir.glob("*.cu*"))}
    uses = {k: v for k, v in uses.items() if v and k != "xray.cuh"}
    assert uses == {"schedule_stream.cuh": ["p.xray, kNv"], "schedule_upstream.cuh": ["p.xray, false"]}
    ss = (kdir / "schedule_stream.cuh").read_text()
    assert ss.index("constexpr bool kNv = W::kBlockScaled;") < ss.index("XRAY_INIT(p.xray, kNv);")
    up = (kdir / "schedule_upstream.cuh").read_text()
    assert not re.search(r"\bkNv\b", up)
    assert "XrayRecorderFor<false>& xr;" in up  # upstream_step's recorder, the same type


def test_measure_engine_keeps_the_positions_that_fit():
    class Fake:
        context_cap = 1100

    with pytest.raises(MonolithError, match="no position of"):
        O.measure_engine(Fake(), positions=(2048,), tokens=64)


def test_the_ab_script_runs_end_to_end_on_fakes(tmp_path, monkeypatch, capsys):
    """scripts/xray_overhead.py's plumbing with every GPU piece faked: builds, engines, timings and
    traces; the JSON has every variant and layout, and the table comes last."""
    import json
    import types

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import xray_overhead as X

    import monolith.checkpoint as ck
    import monolith.megakernel as M

    class Ext:
        def __init__(self, name):
            self.build_info = {"tag": name}

        def attributes(self, vid, xray):
            return {"num_regs": 96 if xray else 95, "local_size_bytes": 0, "shared_size_bytes": 32512}

        def max_coresident(self, vid, xray, dev):
            return 132

    exts = {"compact": Ext("c"), "full": Ext("f")}
    monkeypatch.setattr(X, "build_all", lambda alts, shipped: alts)
    monkeypatch.setattr(X, "build_alt", lambda alt: exts[alt])
    monkeypatch.setattr(M, "load_extension", lambda v: exts["compact"])
    monkeypatch.setattr(ck, "ensure_checkpoint", lambda *a, **k: "ckpt")
    monkeypatch.setattr(ck, "load_checkpoint", lambda p: types.SimpleNamespace(describe=lambda: {"kind": "fake"}))
    monkeypatch.setattr(X, "make_engine", lambda ckpt, v: types.SimpleNamespace(
        variant=v, variant_id=2, blocks=128, device=types.SimpleNamespace(index=0), ext=exts["compact"]))
    cost = {"plain": 1.0, "compact": 1.005, "full": 1.07}
    monkeypatch.setattr(O, "engine_timer", lambda mk, ext_of, tokens: lambda b, p: (4e-4 * cost[b], [1, 2]))
    monkeypatch.setattr(X, "trace_fidelity", lambda mk, ext, alt, pos, prompt, out: {
        "trace_span_us": 401.0 if alt == "compact" else 430.0, "phase_mean_per_block_us": {"s_qkv": 1.0 + (alt == "full")}})
    rc = X.run(["bf16-stream", "nvfp4-stream"], [16, 128], ["compact", "full"], 64, 2, 128, tmp_path)
    assert rc == 0
    doc = json.loads((tmp_path / "xray_overhead.json").read_text())
    v = doc["variants"]["nvfp4-stream"]
    assert v["overhead_pct"]["compact"]["16"] == pytest.approx(0.4975, abs=1e-3)
    assert v["over_limit"] == {"compact": [], "full": [16, 128]}
    assert v["fidelity"]["span_vs_plain_token"] == pytest.approx(401 / 400, abs=1e-3)
    assert v["fidelity"]["phase_us_compact_minus_full"] == {"s_qkv": -1.0}
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("[xo] wrote")
    assert "+6.5%*" in out and "X-ray overhead" in out
