"""CPU model of the tensor-core GEMV rounds (fp8-stream-tc: kernel/stream_mma.cuh tc_round, Policy::kTcGemv)
and of the engine's code swizzle they read (monolith/megakernel.py tc_swizzle_). Finding a wrong
fragment, swizzle key or row map on the GPU costs device time; here every round of a few blocks' plans
(at 128, 66 and 16 blocks: rows per block not a multiple of 4, several rounds per phase) is replayed
lane by lane from the kernel's own formulas, through the mma.m16n8k16 fragment layout, and must give
every row's dot product exactly (small integers, power-of-two word factors), with every fragment load
free of bank conflicts.

The fragment layout is the PTX ISA's (row.col, f32 accumulate), as tests/test_gemv_k_model.py writes
it: lane 4 g + t holds a0 (row g, k 2t, 2t+1), a1 (row g+8), a2 (row g, k 2t+8, 2t+9), a3 (row g+8);
b0 (k 2t, 2t+1 of column g), b1 (k 2t+8, 2t+9); c0, c1 (row g, columns 2t, 2t+1), c2, c3 (row g+8).
"""

import json
import re

import numpy as np
import pytest
import torch
from smem_banks import conflict_free

from monolith import REPO_ROOT, kernel_spec
from monolith import megakernel as mk

KERNEL = REPO_ROOT / "kernel"
MMA = (KERNEL / "stream_mma.cuh").read_text()
K = kernel_spec.config_constants()
WARPS = int(K["kStreamConsumerWarps"])


def _const(name: str) -> int:
    m = re.search(rf"constexpr int {name} = (\d+);", MMA)
    assert m, f"stream_mma.cuh lost {name}"
    return int(m.group(1))


VECS, RANGES = _const("kTcVecs"), _const("kTcRanges")
RANGE_WORDS = 1024 // 32 // RANGES  # kTcRangeWords
ROWS_MAX = 4 * 16  # kTcRowsMax = kRoundSlots * 16
ROUND_ROWS, MLP_UNITS = 4 * 16, 3  # an E4M3 round: kRoundSlots slots of 16 lines; MLP-1: kMlpRoundUnits


def test_the_models_constants_are_the_kernels():
    assert "constexpr int kTcRangeWords = kHidden / 32 / kTcRanges;" in MMA
    assert "constexpr int kTcRowsMax = kRoundSlots * 16;" in MMA
    assert "constexpr int kRoundSlots = 4;" in (KERNEL / "stream_gemv.cuh").read_text()
    assert WARPS % RANGES == 0 and VECS == 1
    # the partials fit sm.part: float part[2][kRoundRbMax * kPartBlk] (kRoundRbMax = 12, kPartBlk = 16)
    assert RANGES * VECS * ROWS_MAX <= 2 * 12 * WARPS


def _part_begin(n: int, parts: int, i: int) -> int:
    return n * i // parts


def plan(b: int, G: int) -> dict:
    """kernel/stream_plan.cuh make_plan: the ranges the tensor-core phases read."""
    g = 0
    while g + 1 < 8 and _part_begin(G, 8, g + 1) <= b:
        g += 1
    gb0, gb1 = _part_begin(G, 8, g), _part_begin(G, 8, g + 1)
    ng, gi = gb1 - gb0, b - gb0
    return {
        "g": g,
        "q0": _part_begin(512, ng, gi),
        "q1": _part_begin(512, ng, gi + 1),
        "u0": _part_begin(384, G, b),
        "u1": _part_begin(384, G, b + 1),
        "h0": _part_begin(1024, G, b),
        "h1": _part_begin(1024, G, b + 1),
    }


def rounds(phase: str, s: dict, limit: int = 2):
    """(first line of the round in its segment, rows, key0, seg0) of a block's rounds, as the phases call
    tc_round: qkv through rows_1024 (key0 = q & 3), MLP-1 through round_1024 (key0 = 0), down inline."""
    out = []
    if phase == "qkv":
        for q in range(s["q0"], s["q1"], ROUND_ROWS):
            out.append((512 * s["g"] + q, min(ROUND_ROWS, s["q1"] - q), q & 3, 0))
    elif phase == "gateup":
        for u in range(s["u0"], s["u1"], MLP_UNITS):
            out.append((16 * u, 16 * min(MLP_UNITS, s["u1"] - u), 0, 0))
    else:
        nseg = 3 * (s["h1"] - s["h0"])
        for q0 in range(0, nseg, ROUND_ROWS):
            out.append((3 * s["h0"] + q0, min(ROUND_ROWS, nseg - q0), (3 * s["h0"] + q0) & 3, q0 % 3))
    return out[:limit]


def tc_rows(nr: int, down: bool, seg0: int, warp: int):
    """tc_round's items of one warp: (range, tile, segment, rows[g][h])."""
    kr = warp % RANGES
    ntiles = 3 * (((nr + 2) // 3 + 15) // 16) if down else (nr + 15) // 16
    for tt in range(warp // RANGES, ntiles, WARPS // RANGES):
        seg = tt % 3 if down else 0
        rows = [
            [
                ((seg - seg0 + 3) % 3 + 3 * (16 * (tt // 3) + g + 8 * h)) if down else 16 * tt + g + 8 * h
                for h in range(2)
            ]
            for g in range(8)
        ]
        yield kr, tt, seg, rows


def tc_round_model(ring, nr, key0, seg0, down, xi, fac, loads=None):
    """kernel/stream_mma.cuh tc_round (base 0) on `ring` ([slot] -> [16 lines][1,024 code bytes] as the
    producer copied them), inputs xi (integers, element order) with word factors fac; returns the
    partials {(range, row): value} and, with `loads`, appends (width, lane addresses) of every
    shared-memory load phase."""
    part = {}
    for warp in range(WARPS):
        for kr, _tt, seg, rows in tc_rows(nr, down, seg0, warp):
            w0 = (32 * seg if down else 0) + RANGE_WORDS * kr
            acc = np.zeros((16, 8))
            for j in range(RANGE_WORDS):
                c = RANGE_WORDS * kr + j
                a = [np.zeros((16, 16)) for _ in range(2)]
                bm = [np.zeros((16, 8)) for _ in range(2)]
                addr = {0: [], 1: []}
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for h in range(2):
                        r = rows[g][h]
                        vals = np.zeros(8)
                        if r < nr:
                            off = ((c ^ ((key0 + r) & 3)) << 5) + 8 * t
                            vals = ring[r >> 4][r & 15, off : off + 8].astype(np.float64) - 128.0
                            addr[h].append((lane, (r & 15) * 1024 + off))
                        for s_ in range(
                            2
                        ):  # step s: the lane's elements 4s, 4s+1 -> k 2t, 2t+1; 4s+2, 4s+3 -> 2t+8, 2t+9
                            a[s_][g + 8 * h, [2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9]] = vals[4 * s_ : 4 * s_ + 4]
                    if g < VECS:
                        xb = xi[32 * (w0 + j) + 8 * t : 32 * (w0 + j) + 8 * t + 8]
                        for s_ in range(2):
                            bm[s_][[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9], g] = xb[4 * s_ : 4 * s_ + 4]
                cw = a[0] @ bm[0] + a[1] @ bm[1]
                fvec = np.array([fac[w0 + j] if col < VECS else 0.0 for col in range(8)])
                acc += cw * fvec
                if loads is not None:  # 8-byte loads: one phase per half warp
                    for h in range(2):
                        for half in range(2):
                            loads.append((8, [ad for ln, ad in addr[h] if ln // 16 == half]))
            for g in range(8):
                for h in range(2):
                    r = rows[g][h]
                    if r < nr:
                        assert (kr, r) not in part, "a row's range stored twice"
                        part[(kr, r)] = acc[g + 8 * h, 0]
    return part


def tc_combine(part, nr):
    """tc_combine: row t's ranges in order 0 .. RANGES - 1."""
    y = np.zeros(nr)
    for t in range(nr):
        for kr in range(RANGES):
            y[t] += part[(kr, t)]
    return y


@pytest.fixture(scope="module")
def layer():
    """One layer of random E4M3-like codes in the stream order, and the same after tc_swizzle_."""
    g = torch.Generator().manual_seed(48)
    orig = torch.randint(0, 256, (mk.LAYER_ELEMS,), dtype=torch.uint8, generator=g)
    sw = mk.tc_swizzle_(orig.clone(), 1)
    return orig.numpy(), sw.numpy()


def _lines(buf, name):
    a, b = mk.TC_SEGMENTS[name]
    return buf[a:b].reshape(-1, 1024)


def test_the_swizzle_moves_chunks_within_lines_and_undoes_itself(layer):
    orig, sw = layer
    assert not np.array_equal(orig, sw)
    assert np.array_equal(mk.tc_swizzle_(torch.from_numpy(sw.copy()), 1).numpy(), orig)  # an involution
    o = slice(mk.OFF_O, mk.OFF_GATEUP)
    assert np.array_equal(orig[o], sw[o])  # O keeps the CUDA-core rounds: not swizzled
    for name in mk.TC_SEGMENTS:
        lo, ls = _lines(orig, name), _lines(sw, name)
        for line in (0, 1, 2, 3, 5, 1022, lo.shape[0] - 1):
            for c in (0, 7, 31):
                new = c ^ (line & 3)
                assert np.array_equal(ls[line, 32 * new : 32 * new + 32], lo[line, 32 * c : 32 * c + 32]), (
                    name,
                    line,
                    c,
                )


def test_the_segments_are_the_policys_tensor_core_phases():
    """Policy::kTcPhases (bits as kE4M3Half2Phases: 1 qkv, 2 O, 4 gate/up, 8 down) names the phases whose
    codes the engine swizzles; the engine swizzles exactly those, for the variant with "gemv": "mma"."""
    pol = (KERNEL / "policy.cuh").read_text()
    m = re.search(r"static constexpr int kTcPhases = kTc \? ([\d |]+) : 0;", pol)
    assert m, "policy.cuh lost kTcPhases"
    bits = sum(int(x) for x in m.group(1).split("|"))
    named = {1: "qkv", 2: "o", 4: "gateup", 8: "down"}
    assert {named[b] for b in named if bits & b} == set(mk.TC_SEGMENTS)
    assert (mk.TC_SEGMENTS["qkv"], mk.TC_SEGMENTS["gateup"], mk.TC_SEGMENTS["down"]) == (
        (mk.OFF_QKV, mk.OFF_O),
        (mk.OFF_GATEUP, mk.OFF_DOWN),
        (mk.OFF_DOWN, mk.LAYER_ELEMS),
    )
    src = (REPO_ROOT / "monolith" / "megakernel.py").read_text()
    assert 'if self.spec.get("gemv") == "mma":' in src and "codes = tc_swizzle_(codes, C.NUM_LAYERS)" in src


CASES = [(G, b) for G, bs in ((128, (0, 77, 127)), (66, (0, 9, 26, 27, 65)), (16, (0, 15))) for b in bs]


@pytest.mark.parametrize("phase", ["qkv", "gateup", "down"])
@pytest.mark.parametrize("G,b", CASES)
def test_every_round_gives_each_rows_dot_product_without_bank_conflicts(layer, phase, G, b):
    _, sw = layer
    lines = _lines(sw, phase)
    orig = _lines(layer[0], phase).astype(np.float64) - 128.0
    rng = np.random.default_rng(G * 1000 + b)
    ks = 3 if phase == "down" else 1  # input segments of 1,024
    xi = rng.integers(-8, 9, size=1024 * ks).astype(np.float64)  # store_xe's f16 words, lifted
    fac = 2.0 ** rng.integers(-6, 7, size=32 * ks)  # each word's factor 2^E
    xfull = xi * np.repeat(fac, 32)
    for line0, nr, key0, seg0 in rounds(phase, plan(b, G)):
        assert key0 == line0 & 3  # the hook's key is the round's first line's
        nslots = (nr + 15) // 16
        ring = [lines[line0 + 16 * i : line0 + 16 * i + 16] for i in range(nslots)]
        loads = []
        part = tc_round_model(ring, nr, key0, seg0, phase == "down", xi, fac, loads)
        assert all(r < ROWS_MAX for _, r in part)  # within kTcRowsMax
        y = tc_combine(part, nr)
        for t in range(nr):
            seg = (line0 + t) % 3 if phase == "down" else 0  # down's line 3 h + s: segment s
            assert seg == ((seg0 + t) % 3 if phase == "down" else 0)
            want = orig[line0 + t] @ xfull[1024 * seg : 1024 * seg + 1024]
            assert y[t] == want, (phase, G, b, line0, t)
        for width, addrs in loads:
            assert conflict_free(addrs, width), (phase, G, b, addrs)


def test_a_down_round_puts_each_line_in_one_tile_of_its_segment():
    for nr in (1, 2, 3, 24, 47, 48, 49, 63, 64):
        for seg0 in range(3):
            seen = []
            for warp in range(WARPS):
                for kr, _tt, seg, rows in tc_rows(nr, True, seg0, warp):
                    if kr:
                        continue
                    for g in range(8):
                        for h in range(2):
                            r = rows[g][h]
                            if r < nr:
                                assert (seg0 + r) % 3 == seg
                                seen.append(r)
            assert sorted(seen) == list(range(nr)), (nr, seg0)


def test_the_tc_variant_is_built_and_registered_apart():
    """fp8-stream-tc: its own translation unit (variants.json config "tc"), the id of megakernel.cuh's enum,
    megakernel.cu's dispatch through tc_kernels, one kernel at every position, fp8-stream's waits."""
    spec = json.loads((KERNEL / "variants.json").read_text())
    v = next(x for x in spec["variants"] if x["name"] == "fp8-stream-tc")
    base = next(x for x in spec["variants"] if x["name"] == "fp8-stream")
    assert (v["config"], v["gemv"], v["id"], v["weights"], v["layout"], v["schedule"]) == (
        "tc",
        "mma",
        9,
        base["weights"],
        base["layout"],
        "stream",
    )
    assert kernel_spec.build_flags("fp8-stream-tc") == kernel_spec.build_flags("fp8-stream")
    plain, xray = kernel_spec.config_sources("tc")
    assert (plain.name, xray.name) == ("megakernel_tc.cu", "megakernel_tc_xray.cu")
    assert "kVariantFp8StreamTc = 9," in (KERNEL / "megakernel.cuh").read_text()
    cu = (KERNEL / "megakernel.cu").read_text()
    assert "case kVariantFp8StreamTc:" in cu and "info_of<kVariantFp8StreamTc>" not in cu
    tc = plain.read_text()
    assert "info_of<kVariantFp8StreamTc>(device_sm120)" in tc and "tc_kernels = &tc_config_kernels" in tc
    assert '#include "megakernel_tc.cu"' in xray.read_text()
    ds = (KERNEL / "decode_step.cuh").read_text()
    cfg = ds[ds.index("struct VariantCfg<kVariantFp8StreamTc>") :]
    cfg = cfg[: cfg.index("};")]
    assert "kTcGemv = true" in cfg and "kLongKernel = false" in cfg
    assert mk.WAITS["fp8-stream-tc"] == mk.WAITS["fp8-stream"]
    assert mk.engine_class("fp8-stream-tc") is mk.Fp8Engine
