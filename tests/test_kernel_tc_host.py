"""CPU model of the tensor-core GEMV rounds (fp8-stream-tc and its k-vector builds fp8-stream-tc-k2/-k4/-k8:
kernel/stream_mma.cuh tc_round, Policy::kTcGemv, Policy::kVecs) and of the engine's code swizzle they read
(monolith/megakernel.py tc_swizzle_). Finding a wrong fragment, swizzle key, row map or vector layout on
the GPU costs device time; here every round of a few blocks' plans (at 128, 66 and 16 blocks: rows per
block not a multiple of 4, several rounds per phase) is replayed lane by lane from the kernel's own
formulas, through the mma.m16n8k16 fragment layout, at k = 1, 2, 4 and 8 vectors per pass, and must give
every row's dot product with every column's vector exactly (small integers, power-of-two word factors),
with every fragment load (A, B), factor load and partial-sum store free of bank conflicts.

The vectors' layout (tc_words_at, tc_factors_at) and the partials' (tc_part_at) are evaluated from
stream_mma.cuh's own constexpr functions, so a change there reaches this model. The batch invariance the
issue requires (monolith/kpass.py): column j's result must not depend on the other columns' contents
(random, or NaN as the unwritten vectors of a k > 1 kernel would be) nor on k nor on j's index, bitwise,
with the rounds' fp32 order emulated; a layout that mixes two vectors fails it (test_a_broken_layout_fails).
What no CPU model can show is the hardware's order inside one mma: probes/gemv_k.cu measured it on the H100.

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
POLICY = (KERNEL / "policy.cuh").read_text()
K = kernel_spec.config_constants()
WARPS = int(K["kStreamConsumerWarps"])


def _const(name: str, text: str = MMA) -> int:
    m = re.search(rf"constexpr int {name} = (\d+);", text)
    assert m, f"lost {name}"
    return int(m.group(1))


RANGES = _const("kTcRanges")
VECS_MAX, VECS_MAX_SM120 = _const("kTcVecsMax", POLICY), _const("kTcVecsMaxSm120", POLICY)
RANGE_WORDS = 1024 // 32 // RANGES  # kTcRangeWords
ROWS_MAX = 4 * 16  # kTcRowsMax = kRoundSlots * 16
ROUND_ROWS, MLP_UNITS = 4 * 16, 3  # an E4M3 round: kRoundSlots slots of 16 lines; MLP-1: kMlpRoundUnits
KS = (1, 2, 4, 8)  # the vectors per pass of fp8-stream-tc and fp8-stream-tc-k2/-k4/-k8


def _cfuncs(text: str, names: list[str], env: dict) -> dict:
    """stream_mma.cuh's `__host__ __device__ constexpr int name(int a, ...) { return EXPR; }` as Python
    functions (EXPR: integer arithmetic with at most one top-level `c ? a : b`), defined in `env` in
    order, so the model computes with the kernel's own formulas."""
    for name in names:
        m = re.search(rf"constexpr int {name}\(([^)]*)\) \{{\s*return (.*?);\s*\}}", text, re.S)
        assert m, f"stream_mma.cuh lost {name}"
        args = [a.split()[-1] for a in m.group(1).split(",")]
        expr = " ".join(m.group(2).split())
        t = re.fullmatch(r"(.+?) \? (.+?) : (.+)", expr)
        if t:
            expr = f"(({t.group(2)}) if ({t.group(1)}) else ({t.group(3)}))"
        assert re.fullmatch(r"[\w\s()+\-*%<>=,]+", expr), (name, expr)  # arithmetic only (no /, no ?:)
        env[name] = eval(f"lambda {', '.join(args)}: {expr}", env)  # noqa: S307 (checked: names, numbers, arithmetic)
    return env


LAYOUT_FUNCS = [
    "tc_col_stride",
    "tc_part_at",
    "tc_part_floats",
    "tc_words_at",
    "tc_factor_base",
    "tc_factors_at",
    "tc_vec_floats",
]
F = _cfuncs(MMA, LAYOUT_FUNCS, {"kTcRowsMax": ROWS_MAX, "kTcRanges": RANGES})


def test_the_models_constants_are_the_kernels():
    assert "constexpr int kTcRangeWords = kHidden / 32 / kTcRanges;" in MMA
    assert "constexpr int kTcRowsMax = kRoundSlots * 16;" in MMA
    assert "constexpr int kRoundSlots = 4;" in (KERNEL / "stream_gemv.cuh").read_text()
    assert WARPS % RANGES == 0 and (VECS_MAX, VECS_MAX_SM120) == (8, 2)
    # k = 1: the partials fit today's sm.part (float part[2][kRoundRbMax * kPartBlk], 12 x 16), unpadded
    assert F["tc_part_floats"](1) == RANGES * ROWS_MAX <= 2 * 12 * WARPS and F["tc_col_stride"](1) == ROWS_MAX
    # vector 0 sits where store_xe writes a vector (xvec.cuh: element 32 i + lane at f16 32 i + lane, factor i
    # at float 16 kWords + i), so the phases' writers of vector 0 are today's at every k
    xvec = (KERNEL / "xvec.cuh").read_text()
    assert ": 32 * i + lane;" in xvec and "if (lane == 0) buf[kWords * 16 + i] = pow2f(e);" in xvec
    assert "store_word_f16<kWords, 0, false>(buf, i, v);" in xvec
    for k in KS:
        for words in (32, 96):
            assert F["tc_words_at"](words, 0) == 0 and F["tc_factors_at"](words, k, 0) == 16 * words
    # the hooks hand tc_round / tc_combine the Policy's k; the phases' epilogues take column 0
    reader = (KERNEL / "stream_reader.cuh").read_text()
    assert "tc_round<false, P::kVecs>(slot_at, base," in reader and "tc_combine<P::kVecs>(&sm.part[0][0], t)" in reader
    assert "tc_round<true, P::kVecs>(slot_at, 0, nq," in (KERNEL / "phase_down.cuh").read_text()


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


def write_vectors(k, words, xi, fac, funcs=None):
    """The k-vector input buffer as the kernel's writers leave it, in f16 slots (a float is two): vector 0
    by store_xe (element e of word i at f16 32 i + e, factor i at float 16 words + i), vector v >= 1 at
    tc_words_at / tc_factors_at (where the rounds read it). xi[v]: vector v's lifted f16 values (element
    order), fac[v]: its word factors. Unwritten slots are NaN; a slot written twice (two vectors
    overlapping) fails. funcs: other layout functions (default: the kernel's, F)."""
    fn = funcs or F
    mem = np.full(2 * fn["tc_vec_floats"](words, k), np.nan)
    owner = np.full(mem.shape, -1)

    def put(slot, value, v):
        assert owner[slot] == -1, f"vector {v} overwrites vector {owner[slot]}'s slot {slot} (k = {k})"
        owner[slot], mem[slot] = v, value

    for v in range(k):
        w0, f0 = (0, 16 * words) if v == 0 else (fn["tc_words_at"](words, v), fn["tc_factors_at"](words, k, v))
        for i in range(words):
            for e in range(32):
                put(2 * w0 + 32 * i + e, xi[v][32 * i + e], v)
            put(2 * (f0 + i), fac[v][i], v)
            owner[2 * (f0 + i) + 1] = v  # (the float's other half)
    return mem


def _f32(x):
    return np.float32(x)


def tc_round_model(ring, nr, key0, seg0, down, k, mem, words, loads=None, stores=None, f32=False, funcs=None):
    """kernel/stream_mma.cuh tc_round<kDown, k> (base 0) on `ring` ([slot] -> [16 lines][1,024 code bytes]
    as the producer copied them) and the input buffer `mem` (write_vectors: `words` words per vector);
    returns the partials {part index: value} (tc_part_at). With `loads` / `stores`, appends (width, lane
    byte addresses) of every shared-memory access phase: A (8 bytes, per half-warp), B (16 bytes, per
    quarter-warp), the factors (4 bytes, the warp), the partial stores (4 bytes, the warp). f32: the
    kernel's fp32 order (each word's two mma exact then rounded once, fmaf into the item's sums in
    ascending words); else exact float64."""
    fn = funcs or F
    wat = [fn["tc_words_at"](words, v if k > 1 else 0) for v in range(8)]
    fat = [fn["tc_factors_at"](words, k, v if k > 1 else 0) for v in range(8)]
    part = {}
    for warp in range(WARPS):
        for kr, _tt, seg, rows in tc_rows(nr, down, seg0, warp):
            w0 = (32 * seg if down else 0) + RANGE_WORDS * kr
            acc = np.zeros((16, 8), dtype=np.float32 if f32 else np.float64)
            for j in range(RANGE_WORDS):
                c = RANGE_WORDS * kr + j
                a = [np.zeros((16, 16)) for _ in range(2)]
                bm = [np.zeros((16, 8)) for _ in range(2)]
                addr = {0: [], 1: []}
                baddr = [[] for _ in range(4)]
                fa_addr, fb_addr = [], []
                fvec = np.zeros(8)
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
                    if g < k:  # one 16-byte load: floats wat[g] + 16 word + 4 t .. + 3 = elements 8t .. 8t + 7
                        fl = wat[g] + 16 * (w0 + j) + 4 * t
                        xb = mem[2 * fl : 2 * fl + 8]
                        baddr[lane // 8].append(4 * fl)
                        for s_ in range(2):
                            bm[s_][[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9], g] = xb[4 * s_ : 4 * s_ + 4]
                    if 2 * t < k:  # fa: column 2t's factor (vector 2t's)
                        fa_addr.append(4 * (fat[2 * t] + w0 + j))
                        fvec[2 * t] = mem[2 * (fat[2 * t] + w0 + j)]
                    if 2 * t + 1 < k:  # fb: column 2t + 1's
                        fb_addr.append(4 * (fat[2 * t + 1] + w0 + j))
                        fvec[2 * t + 1] = mem[2 * (fat[2 * t + 1] + w0 + j)]
                with np.errstate(invalid="ignore"):
                    if f32:  # (a column's products: a row of A times that column of B only)
                        cw = np.stack([_f32(a[0] @ bm[0][:, col] + a[1] @ bm[1][:, col]) for col in range(8)], axis=1)
                        acc = (cw.astype(np.float64) * fvec + acc).astype(np.float32)  # fmaf
                    else:
                        cw = np.stack([a[0] @ bm[0][:, col] + a[1] @ bm[1][:, col] for col in range(8)], axis=1)
                        acc = acc + cw * fvec
                if loads is not None:
                    for h in range(2):  # 8-byte loads: one phase per half warp
                        for half in range(2):
                            loads.append((8, [ad for ln, ad in addr[h] if ln // 16 == half]))
                    loads.extend((16, q) for q in baddr if q)  # 16-byte loads: one phase per quarter warp
                    loads.extend((4, f) for f in (fa_addr, fb_addr) if f)
            for u in range(4):  # the store of C register u: (row g + 8 (u >> 1), column 2t + (u & 1))
                st = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    col, r = 2 * t + (u & 1), rows[g][u >> 1]
                    if col < k and r < nr:
                        at = fn["tc_part_at"](k, kr, col, r)
                        assert at not in part, "a partial stored twice"
                        part[at] = acc[g + 8 * (u >> 1), col]
                        st.append(4 * at)
                if stores is not None and st:
                    stores.append((4, st))
    return part


def tc_combine(part, nr, k=1, col=0, f32=False, funcs=None):
    """tc_combine<k>: row t's value in column col, its ranges in order 0 .. RANGES - 1."""
    fn = funcs or F
    y = np.zeros(nr, dtype=np.float32 if f32 else np.float64)
    for t in range(nr):
        v = part[fn["tc_part_at"](k, 0, col, t)]
        for kr in range(1, RANGES):
            v = v + part[fn["tc_part_at"](k, kr, col, t)]
        y[t] = v
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


def _vectors(rng, k, ks):
    """k random vectors of ks 1,024-segments: lifted f16 values (small integers) and word factors 2^E."""
    xi = [rng.integers(-8, 9, size=1024 * ks).astype(np.float64) for _ in range(k)]
    fac = [2.0 ** rng.integers(-6, 7, size=32 * ks) for _ in range(k)]
    return xi, fac


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("phase", ["qkv", "gateup", "down"])
@pytest.mark.parametrize("G,b", CASES)
def test_every_round_gives_each_rows_dot_product_without_bank_conflicts(layer, phase, G, b, k):
    """Every column j < k of every round: row t's dot product with vector j, exactly; every A, B and factor
    load and every partial store of the round conflict-free; the partials within sm.part (StreamSmemK)."""
    _, sw = layer
    lines = _lines(sw, phase)
    orig = _lines(layer[0], phase).astype(np.float64) - 128.0
    rng = np.random.default_rng(G * 1000 + b + 7 * k)
    ks = 3 if phase == "down" else 1  # input segments of 1,024
    words = 32 * ks
    xi, fac = _vectors(rng, k, ks)
    mem = write_vectors(k, words, xi, fac)
    xfull = [xi[v] * np.repeat(fac[v], 32) for v in range(k)]
    part_floats = F["tc_part_floats"](k)
    for line0, nr, key0, seg0 in rounds(phase, plan(b, G)):
        assert key0 == line0 & 3  # the hook's key is the round's first line's
        nslots = (nr + 15) // 16
        ring = [lines[line0 + 16 * i : line0 + 16 * i + 16] for i in range(nslots)]
        loads, stores = [], []
        part = tc_round_model(ring, nr, key0, seg0, phase == "down", k, mem, words, loads, stores)
        assert all(0 <= at < part_floats for at in part)  # within tc_part_floats(k) (sm.part holds it)
        for col in range(k):
            y = tc_combine(part, nr, k, col)
            for t in range(nr):
                seg = (line0 + t) % 3 if phase == "down" else 0  # down's line 3 h + s: segment s
                assert seg == ((seg0 + t) % 3 if phase == "down" else 0)
                want = orig[line0 + t] @ xfull[col][1024 * seg : 1024 * seg + 1024]
                assert y[t] == want, (phase, G, b, k, line0, t, col)
        for width, addrs in loads + stores:
            assert conflict_free(addrs, width), (phase, G, b, k, width, addrs)
        assert any(w == 16 for w, _ in loads) and any(w == 4 for w, _ in stores)


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
    its row of variant_units.def (the Tc unit, launched), one kernel at every position, fp8-stream's waits."""
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
    assert "MONOLITH_VARIANT(kVariantFp8StreamTc, Tc, true)" in (KERNEL / "variant_units.def").read_text()
    assert "MONOLITH_STEP_UNIT(Tc)" in plain.read_text()
    assert '#include "megakernel_tc.cu"' in xray.read_text()
    ds = (KERNEL / "decode_step.cuh").read_text()
    cfg = ds[ds.index("struct VariantCfg<kVariantFp8StreamTc>") :]
    cfg = cfg[: cfg.index("};")]
    assert "kTcGemv = true" in cfg and "kLongKernel = false" in cfg
    assert mk.WAITS["fp8-stream-tc"] == mk.WAITS["fp8-stream"]
    assert mk.engine_class("fp8-stream-tc") is mk.Fp8Engine


def _one_round(layer, phase):
    """The first round of block 77 of 128 (qkv: 32 rows; gate/up: 48; down: 24 lines) and its ring."""
    _, sw = layer
    line0, nr, key0, seg0 = rounds(phase, plan(77, 128))[0]
    lines = _lines(sw, phase)
    return [lines[line0 + 16 * i : line0 + 16 * i + 16] for i in range((nr + 15) // 16)], nr, key0, seg0


def _column(layer, phase, k, j, x, fx, neighbours, read=None):
    """Column j's combined fp32 results of one round with vector (x, fx) at column j of a k-vector pass
    whose other columns hold `neighbours` (a function of the column: its values and factors), written
    by the kernel's layout and read by `read`'s (default: the kernel's)."""
    ring, nr, key0, seg0 = _one_round(layer, phase)
    words = 96 if phase == "down" else 32
    xi = [x if v == j else neighbours(v)[0] for v in range(k)]
    fac = [fx if v == j else neighbours(v)[1] for v in range(k)]
    mem = write_vectors(k, words, xi, fac)
    part = tc_round_model(ring, nr, key0, seg0, phase == "down", k, mem, words, f32=True, funcs=read)
    return tc_combine(part, nr, k, j, f32=True, funcs=read)


def _f16_values(rng, n):
    """n random f16 values of magnitude below 2 (store_xe's lifted words): not integers, so a summation
    order or a factor from another vector shows in the fp32 bits."""
    return rng.standard_normal(n).astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("phase", ["qkv", "down"])
def test_a_columns_bits_do_not_depend_on_its_neighbours_or_on_k(layer, phase):
    """Batch invariance (monolith/kpass.py) in the rounds: a vector's results, in the rounds' fp32 order,
    are bitwise the same at k = 1, at every column j of k = 2, 4, 8, beside random neighbours and beside
    unwritten ones (NaN: what a k > 1 kernel's vectors 1 .. k - 1 hold until the hops carry them)."""
    rng = np.random.default_rng(48)
    ks = 3 if phase == "down" else 1
    x, fx = _f16_values(rng, 1024 * ks), 2.0 ** rng.integers(-6, 7, size=32 * ks)
    alone = _column(layer, phase, 1, 0, x, fx, None)
    assert np.all(np.isfinite(alone)) and np.any(alone != 0)
    others = {v: (_f16_values(rng, 1024 * ks), 2.0 ** rng.integers(-6, 7, size=32 * ks)) for v in range(8)}
    nan = (np.full(1024 * ks, np.nan), np.full(32 * ks, np.nan))
    for k in KS[1:]:
        for j in sorted({0, 1, k // 2, k - 1}):
            for neighbours in (others.get, lambda v: nan):
                got = _column(layer, phase, k, j, x, fx, neighbours)
                assert np.array_equal(got.view(np.uint32), alone.view(np.uint32)), (phase, k, j)


def test_a_broken_layout_fails_the_model(layer):
    """The checks above can fail: rounds whose column 2t + 1 reads vector 2t's factors (t >= 1) break the
    invariance; a layout whose vector 2 starts on vector 1's words fails the writer's overlap check."""
    rng = np.random.default_rng(7)
    x, fx = _f16_values(rng, 1024), 2.0 ** rng.integers(-6, 7, size=32)
    others = {v: (_f16_values(rng, 1024), 2.0 ** rng.integers(-6, 7, size=32)) for v in range(8)}
    alone = _column(layer, "qkv", 1, 0, x, fx, None)
    bad_factor = dict(F, tc_factors_at=lambda w, k, v: F["tc_factors_at"](w, k, v - 1 if v >= 3 and v % 2 else v))
    got = _column(layer, "qkv", 4, 3, x, fx, others.get, read=bad_factor)
    assert not np.array_equal(got, alone)
    bad_words = dict(F, tc_words_at=lambda w, v: F["tc_words_at"](w, 1 if v == 2 else v))
    with pytest.raises(AssertionError, match="overwrites vector 1"):  # vector 2's words on vector 1's
        write_vectors(4, 32, [x] * 4, [fx] * 4, bad_words)
    assert np.array_equal(_column(layer, "qkv", 4, 3, x, fx, others.get), alone)  # (the kernel's own: equal)


def test_the_layouts_loads_are_conflict_free_and_vectors_apart():
    """tc_words_at / tc_factors_at at every k <= 8 (not only those built): vector v's words start at 16 v
    mod 32 floats and its factors at 4 v mod 32, so a quarter-warp's B loads (vectors 2q, 2q + 1) and a
    warp's factor loads (vectors 0, 2, 4, 6 or 1, 3, 5, 7) are conflict-free; no two vectors overlap; the
    buffer of k vectors is tc_vec_floats; StreamSmemK sizes x, act and part from these functions."""
    for words in (32, 96):
        for k in range(1, VECS_MAX + 1):
            xi = [np.arange(32 * words, dtype=np.float64) + 1e4 * v for v in range(k)]
            mem = write_vectors(k, words, xi, [np.ones(words)] * k)
            assert np.count_nonzero(~np.isnan(mem)) == 33 * k * words  # every word and factor once
            for w in (0, 1, words - 1):
                for q in range(4):
                    lanes = [
                        4 * (F["tc_words_at"](words, g) + 16 * w + 4 * t)
                        for g in (2 * q, 2 * q + 1)
                        if g < k
                        for t in range(4)
                    ]
                    assert conflict_free(lanes, 16), (words, k, w, q)
                for par in range(2):
                    fl = [4 * (F["tc_factors_at"](words, k, v) + w) for v in range(par, k, 2)]
                    assert conflict_free(fl, 4), (words, k, w, par)
    sched = (KERNEL / "schedule_stream.cuh").read_text()
    assert "float x[kK == 1 ? kHidden : tc_vec_floats(kHidden / 32, kK)];" in sched
    assert "float act[kK == 1 ? kIntermediate : tc_vec_floats(kIntermediate / 32, kK)];" in sched
    assert "(tc_part_floats(kK) + 1) / 2];" in sched


# ---------------------------------------------------------------- §1's budget, per (format, k, arch)

SLOT = 16384


def plan_smem(fp8: bool, k: int, single_c: bool = False) -> int:
    """notes/ktoken.md §1's S(k) in bytes (policy.cuh kpass_plan_smem)."""
    act, attn, x = (6144 if fp8 else 12288) * k, 16384 + 3584 * k, (2048 if fp8 else 4096) * k
    c_tiles = (4096 if fp8 else 2048) * k // (2 if single_c else 1)
    return max(act, attn, x) + c_tiles + 1536 * k + 1280


def plan_slots(fp8: bool, k: int, sm120: bool, single_c: bool = False) -> int:
    limit = 99 * 1024 - 2048 if sm120 else 227 * 1024
    return min(12, max(0, (limit - 512 - plan_smem(fp8, k, single_c)) // SLOT))


def test_the_budget_is_section_1s_table():
    """notes/ktoken.md §1's table (S(k) and the slots per format, k, arch) = this model = the static_asserts of
    kernel/policy.cuh's kpass_plan_slots (which nvcc evaluates), and the ring each k-vector kernel takes."""
    notes = (REPO_ROOT / "notes" / "ktoken.md").read_text()
    sec = notes[notes.index("| k | S(k) fp8 / bf16 |") :]
    rows = re.findall(r"^\| (\d) \| ([\d.]+) / ([\d.]+)(?: KB)? \| (\d+) / \**(\d+)\** \| (.+?) \|$", sec, re.M)[:4]
    assert [int(r[0]) for r in rows] == [1, 2, 4, 8]
    for k, s8, s16, f90, b90, sm120 in rows:
        k = int(k)
        for fp8, cell in ((True, s8), (False, s16)):  # the table's KB, to its one decimal (x.25 shown as x.3)
            assert abs(plan_smem(fp8, k) / 1024 - float(cell)) <= 0.05 + 1e-9, (k, fp8, cell)
        assert (plan_slots(True, k, False), plan_slots(False, k, False)) == (int(f90), int(b90))
        f12, b12 = (x.strip() for x in sm120.split(" / "))
        for fp8, cell in ((True, f12), (False, b12)):
            want = 0 if cell.startswith("does not fit") else int(cell.split()[0])
            assert plan_slots(fp8, k, True) == want, (k, fp8, cell)
    assert plan_slots(True, 2, True, single_c=True) == 4  # "4 with single-buffered C tiles"
    assert max(k for k in range(1, 9) if plan_slots(True, k, True, True) >= 4) == VECS_MAX_SM120
    # the kernel's asserts state the same numbers (nvcc checks its own function against them)
    asserts = re.findall(r"kpass_plan_slots\((true|false), (\d), (true|false)(?:, (true))?\) == (\d+)", POLICY)
    assert len(asserts) == 17
    for fp8, k, sm120, single, want in asserts:
        assert plan_slots(fp8 == "true", int(k), sm120 == "true", bool(single)) == int(want), (fp8, k, sm120)
    # each k-vector kernel's ring: §1's sm_90 slots, sm_120's 4; the state that fits beside it, by name
    assert (
        "return k == 1 || kpass_plan_slots(true, k, false) > kStagesSm90 ? kStagesSm90 : kpass_plan_slots(true, k, false);"
        in POLICY
    )
    assert "static constexpr int kStages = kSm120 ? kStagesSm120 : kpass_stages_sm90(kK);" in POLICY
    sched = (KERNEL / "schedule_stream.cuh").read_text()
    for k in (2, 4, 8):
        assert f"static_assert(kpass_block_fits<{k}, false>()" in sched
    assert "kpass_block_fits<2, true>()" in sched and "kpass_block_fits<4, true>" not in sched
    assert re.search(
        r'static_assert\(!kSm120 \|\| kK <= kTcVecsMaxSm120,\s+"sm_120 takes k <= 2 vectors per pass', POLICY
    )


# ---------------------------------------------------------------- the k-vector builds: compiled, refused


def _fake_ckpt():
    from types import SimpleNamespace

    from monolith import config as C

    return SimpleNamespace(
        shape=SimpleNamespace(num_layers=C.NUM_LAYERS),
        packed=None,
        tensors={},
        sha256=lambda: "a" * 64,
        describe=lambda: {},
    )


def test_the_k_vector_variants_are_compiled_apart_and_never_launched():
    """fp8-stream-tc-k2/-k4/-k8: fp8-stream-tc's flags and schedule with "vectors": k, ids 10..12 of
    megakernel.cuh's enum, VariantCfg's kTcVecs, compiled in a translation unit of their own (config "tck",
    variant_units.def's TcK unit), marked not launched there (megakernel.cu kernel_for: no kernels, so
    launch_step / kernel_attributes refuse the id)."""
    spec = json.loads((KERNEL / "variants.json").read_text())
    base = next(x for x in spec["variants"] if x["name"] == "fp8-stream-tc")
    enum = (KERNEL / "megakernel.cuh").read_text()
    ds = (KERNEL / "decode_step.cuh").read_text()
    plain, xray = kernel_spec.config_sources("tck")
    assert (plain.name, xray.name) == ("megakernel_tck.cu", "megakernel_tck_xray.cu")
    tck = plain.read_text()
    assert '#include "megakernel_tck.cu"' in xray.read_text()
    table = (KERNEL / "variant_units.def").read_text()
    assert "MONOLITH_STEP_UNIT(TcK)" in tck
    cu = (KERNEL / "megakernel.cu").read_text() + (KERNEL / "megakernel_tc.cu").read_text()
    assert "} else if constexpr (!row.launched) {\n    return kNoKernels;" in (KERNEL / "megakernel.cu").read_text()
    for k, vid in ((2, 10), (4, 11), (8, 12)):
        name, cname = f"fp8-stream-tc-k{k}", f"kVariantFp8StreamTcK{k}"
        v = next(x for x in spec["variants"] if x["name"] == name)
        assert (v["id"], v["config"], v["gemv"], v["vectors"], v["experimental"]) == (vid, "tck", "mma", k, True)
        assert all(v[key] == base[key] for key in ("weights", "layout", "schedule", "defines"))
        assert kernel_spec.build_flags(name) == kernel_spec.build_flags("fp8-stream-tc")
        assert f"{cname} = {vid}," in enum
        assert f"struct VariantCfg<{cname}> : TcKCfg<{k}> {{}};" in ds
        assert f"MONOLITH_VARIANT({cname}, TcK, false)" in table
        assert cname not in cu  # no unit but TcK names it
        assert mk.WAITS[name] == mk.WAITS["fp8-stream-tc"] and mk.engine_class(name) is mk.Fp8Engine
        assert kernel_spec.vectors(v) == k
    assert "struct TcKCfg : VariantCfg<kVariantFp8StreamTc>" in ds and "static constexpr int kTcVecs = kK;" in ds
    assert "!(kArchSm120 && Cfg::kTcVecs > kTcVecsMaxSm120)" in ds  # sm_120a: k <= 2 only
    assert kernel_spec.vectors(base) == 1 and "vectors" not in base


@pytest.mark.parametrize("name,k", [("fp8-stream-tc-k2", 2), ("fp8-stream-tc-k4", 4), ("fp8-stream-tc-k8", 8)])
def test_a_k_vector_variant_refuses_in_one_line(name, k):
    """check_runnable: every k > 1 refuses (its kernels compile, never run); on an sm_120 GPU k > 2 refuses
    first for the arch (notes/ktoken.md §1); the engine refuses before any GPU work."""
    v = kernel_spec.variant_spec(name)
    for cap in (None, (9, 0), (12, 0)):
        with pytest.raises(mk.MonolithError) as e:
            kernel_spec.check_runnable(v, cap)
        msg = str(e.value)
        assert "\n" not in msg and msg.endswith("refusing") and msg.startswith(name)
        if cap == (12, 0) and k > VECS_MAX_SM120:
            assert f"sm_120 takes at most {VECS_MAX_SM120} vectors per pass" in msg
        else:
            assert f"k = {k} vectors per pass is built only in the tensor-core GEMV rounds" in msg
            assert "notes/ktoken.md §7a" in msg
    with pytest.raises(mk.MonolithError, match="refusing"):
        mk.MegakernelEngine(_fake_ckpt(), variant=name)
    for ok in ("fp8-stream-tc", "fp8-stream", "bf16-upstream"):
        assert kernel_spec.check_runnable(kernel_spec.variant_spec(ok), (12, 0)) is None


@pytest.mark.parametrize("bad", [0, 9, True, "2", 2.0])
def test_variants_json_refuses_a_bad_vector_count(tmp_path, bad):
    spec = json.loads((KERNEL / "variants.json").read_text())
    v = next(x for x in spec["variants"] if x["name"] == "fp8-stream-tc-k2")
    v["vectors"] = bad
    p = tmp_path / "variants.json"
    p.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="'vectors' must be an integer 1..8 of a tensor-core variant"):
        kernel_spec.load_variants(p)
    v["vectors"], v["gemv"] = 2, None  # a CUDA-core variant takes one vector
    p.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="'vectors'"):
        kernel_spec.load_variants(p)
