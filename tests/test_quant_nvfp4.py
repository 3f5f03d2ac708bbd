"""NVFP4 packer (quant/pack_nvfp4.py), layout contract (quant/nvfp4_layout.py), the CPU model of the
planned kernel arithmetic (quant/nvfp4_kernel_model.py) and the search's gain: issue 14, item 1.
CPU only."""
import json
import math
import re

import pytest
import torch

from monolith.errors import MonolithError
from monolith.quant import fp8_layout as F8
from monolith.quant import nvfp4_layout as L
from monolith.quant.nvfp4_kernel_model import e2m1_to_f16_bits, kernel_gemv, kernel_weight_values, shared_scalar
from monolith.quant.pack_fp8 import quantize_rows as fp8_quantize_rows
from monolith.quant.pack_nvfp4 import (
    dequantize_matrix,
    e2m1_encode,
    e2m1_round_magnitude,
    e2m1_values,
    load_packed_nvfp4,
    pack_nvfp4,
    quantize_matrix,
    tensor_scale,
    unpack_nibbles,
)

E4M3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


# ---- an independent E2M1 definition: bit formula + exhaustive nearest search ---------------------
def e2m1_from_bits(c: int) -> float:
    s = -1.0 if c & 8 else 1.0
    e, m = (c >> 1) & 3, c & 1
    return s * (m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1))


POS = [e2m1_from_bits(c) for c in range(8)]


def ref_code(x: float) -> int:
    """Nearest E2M1 magnitude, ties to the even code, saturating at 6; sign from the sign bit."""
    s = 8 if math.copysign(1.0, x) < 0 else 0
    a = min(abs(x), 6.0)
    return s | min(range(8), key=lambda c: (abs(POS[c] - a), c & 1))


def quantize_scale1(values) -> list[int]:
    """Codes of `values` at block scale 1.0 and g = 1: blocks of [6.0, 15 values] (the 6 makes
    the max-based scale exactly 1), no search."""
    vals = list(values)
    out = []
    for i in range(0, len(vals), 15):
        chunk = vals[i:i + 15]
        row = torch.tensor([6.0] + chunk + [0.0] * (15 - len(chunk)), dtype=torch.float32).view(1, 16)
        m = quantize_matrix(row, search=False, g=1.0)
        assert m.bscales.item() == 0x38  # E4M3 1.0
        out += unpack_nibbles(m.codes)[0, 1:1 + len(chunk)].tolist()
    return out


# ---- E2M1 codes ---------------------------------------------------------------------------------
def test_value_table_matches_the_bit_formula():
    v = e2m1_values()
    assert [float(x) for x in v] == [e2m1_from_bits(c) for c in range(16)]
    assert math.copysign(1.0, float(v[8])) == -1.0  # code 8 is -0
    assert tuple(POS) == L.E2M1_MAGNITUDES


def test_all_16_codes_round_trip():
    vals = e2m1_values()                        # 0..6, -0..-6: one block, amax 6
    for g in (1.0, None):                       # scale 1 directly, and through NVIDIA's tensor scale
        m = quantize_matrix(vals.view(1, 16), g=g)
        assert unpack_nibbles(m.codes)[0].tolist() == list(range(16)), g
        dq = dequantize_matrix(m.codes, m.bscales, m.g)[0]
        assert torch.equal(torch.signbit(dq), torch.signbit(vals)) and (m.offset == 0).all()
        if g == 1.0:   # scale exactly 1: the values come back exactly, and the search keeps the max scale
            assert torch.equal(dq, vals) and (m.err == 0).all()
        else:          # g = 6 / 2688 is not a power of two: 448 * g is 1 within fp32 rounding
            assert ((dq - vals).abs() <= vals.abs() * 2.0 ** -23).all()
    assert tensor_scale(vals.view(1, 16)) == float(torch.tensor(6.0) / torch.tensor(2688.0))
    assert e2m1_encode(vals).tolist() == list(range(16))


def test_rounding_at_every_tie_and_one_ulp_either_side():
    xs = []
    for lo, hi in zip(POS, POS[1:], strict=False):
        mid = (lo + hi) / 2                     # exact in fp32: a tie
        xs += [mid, math.nextafter(mid, 0.0), math.nextafter(mid, 9.0), lo, hi]
    g = torch.Generator().manual_seed(0)
    xs += (torch.rand(600, generator=g) * 6.5).tolist()
    xs = [float(torch.tensor(x, dtype=torch.float32)) for x in xs]
    xs = [x for x in xs if x <= 6.0]            # the block's max is the 6
    xs += [-x for x in xs]
    # fp32 one-ulp neighbours (nextafter in float64 would round back onto the tie)
    t = torch.tensor([(a + b) / 2 for a, b in zip(POS, POS[1:], strict=False)], dtype=torch.float32)
    ulps = torch.cat([torch.nextafter(t, torch.zeros_like(t)), torch.nextafter(t, torch.full_like(t, 9.0))]).tolist()
    xs += ulps + [-u for u in ulps]
    got = quantize_scale1(xs)
    want = [ref_code(x) for x in xs]
    bad = [(x, a, b) for x, a, b in zip(xs, got, want, strict=True) if a != b]
    assert not bad, bad[:5]
    assert e2m1_encode(torch.tensor(xs)).tolist() == want
    # the ties, spelled out: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4
    assert quantize_scale1([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]) == [0, 2, 2, 4, 4, 6, 6]


def test_saturation():
    big = torch.tensor([6.0, 6.0001, 6.5, 7.0, 100.0, 3e38, float("inf")])
    assert (e2m1_round_magnitude(big) == 6.0).all()
    assert e2m1_encode(-big).tolist() == [15] * len(big)
    # block scales that round down (e4m3_rn(amax / 6 / g) < amax / 6 / g): amax / (s g) > 6 saturates to 6
    g = torch.Generator().manual_seed(1)
    rows = torch.rand(512, 16, generator=g) * torch.exp(torch.randn(512, 1, generator=g) * 2)
    m = quantize_matrix(rows, search=False, g=1.0)
    target = rows.amax(1) / 6.0
    down = (E4M3[m.bscales[:, 0].long()] < target) & (m.bscales[:, 0] > 0)   # (code 0: an all-zero block)
    assert down.any(), "no rounded-down block scale: the test would check nothing"
    codes = unpack_nibbles(m.codes)
    top = codes.gather(1, rows.argmax(1, keepdim=True))[:, 0]
    assert (top[down] == 7).all()
    assert (dequantize_matrix(m.codes, m.bscales, 1.0).abs().amax(1)[down] <= rows.amax(1)[down]).all()


def test_zero_and_tiny_blocks():
    z = quantize_matrix(torch.zeros(2, 32))
    assert z.g == L.ZERO_TENSOR_SCALE and (z.bscales == 0).all() and (z.codes == 0).all()
    w = torch.ones(3, 32)
    w[0, :16] = 0.0          # zero block
    w[1, :16] = -0.0         # -0 block: stored as +0 (scale 0)
    w[2, :16] = 1e-12        # far below the smallest block scale: scale code 0, codes 0
    m = quantize_matrix(w)
    assert m.bscales[:, 0].tolist() == [0, 0, 0] and (unpack_nibbles(m.codes)[:, :16] == 0).all()
    dq = dequantize_matrix(m.codes, m.bscales, m.g)
    assert torch.isfinite(dq).all() and (dq[:, :16] == 0).all() and (dq[:, 16:] == 1.0).all()


def test_non_finite_weights_are_refused():
    for bad in (float("nan"), float("inf"), -float("inf")):
        w = torch.ones(3, 32)
        w[1, 5] = bad
        with pytest.raises(MonolithError, match="non-finite weight .* row 1, column 5"):
            quantize_matrix(w)
    with pytest.raises(MonolithError, match="K % 16"):
        quantize_matrix(torch.ones(2, 24))


def test_fp32_input_is_not_modified():
    w = torch.randn(8, 64)
    keep = w.clone()
    quantize_matrix(w)
    assert torch.equal(w, keep)


# ---- the search ---------------------------------------------------------------------------------
def _block_err64(w, m):
    dq = dequantize_matrix(m.codes, m.bscales, m.g).double()
    return (w.double() - dq).square().reshape(-1, L.BLOCK).sum(1)


def test_search_never_worse_than_max_scaling_on_any_block(ckpt2):
    g = torch.Generator().manual_seed(2)
    heavy = (torch.randn(256, 1024, generator=g) * torch.exp(torch.randn(256, 64, generator=g).repeat_interleave(16, 1)))
    mats = [heavy] + [ckpt2.tensors[f"model.layers.{i}.{s}"] for i in (0, 1)
                      for s in ("self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight")]
    for w in mats:
        mx = quantize_matrix(w, search=False)
        se = quantize_matrix(w, search=True)
        e_max, e_se = _block_err64(w.float(), mx), _block_err64(w.float(), se)
        assert torch.equal(e_max, mx.err) and torch.equal(e_se, se.err)   # the recorded errors are the real ones
        assert (e_se <= e_max).all()                                       # never worse, in float64
        assert e_se.sum() < 0.9 * e_max.sum()                              # and better overall
        assert torch.equal(mx.bscales.view(-1).long() + se.offset.long(), se.bscales.view(-1).long())
        assert set(se.offset.unique().tolist()) <= set(L.SEARCH_OFFSETS)


def test_search_gain_mse_and_kl_on_the_two_layer_checkpoint(ckpt2):
    from monolith.quant.nvfp4_eval import search_gain
    r = search_gain(ckpt2, positions=6)
    for t, m in r["search"]["matrices"].items():
        assert m["rel_mse_search"] < m["rel_mse_max"], t
        assert 1.1 < m["gain"] < 1.6, (t, m["gain"])
    assert 0 <= r["search"]["kl_mean"] and 0 <= r["max"]["kl_mean"]
    print(f"\nnvfp4 2-layer: KL max {r['max']['kl_mean']:.4g}, search {r['search']['kl_mean']:.4g}; "
          f"agreement {r['max']['argmax_agreement']:.2f} / {r['search']['argmax_agreement']:.2f}")


# ---- the CPU model of the kernel ----------------------------------------------------------------
def test_kernel_decode_port_gives_e2m1_times_2_to_the_minus_14_for_all_16_codes():
    codes = torch.arange(16)
    bits = e2m1_to_f16_bits(codes)
    assert torch.equal(kernel_weight_values(codes) * L.KERNEL_UNBIAS, e2m1_values())
    assert torch.equal(torch.signbit(kernel_weight_values(codes)), torch.signbit(e2m1_values()))
    assert bits[1].item() == 0x0200 and bits[15].item() == 0x8E00   # 2^-15 (f16 subnormal) and -6 * 2^-14


@pytest.mark.parametrize("half2", [False, True])
def test_kernel_model_reproduces_packer_dequant_bit_for_bit(ckpt2, half2):
    w = ckpt2.tensors["model.layers.1.mlp.gate_proj.weight"][:12]
    m = quantize_matrix(ckpt2.tensors["model.layers.1.mlp.gate_proj.weight"])
    codes, bsc = m.codes[:12], m.bscales[:12]
    assert w.shape == (12, 1024)
    got = kernel_gemv(codes, bsc, m.g, torch.eye(1024), half2=half2)    # column j = W e_j
    want = dequantize_matrix(codes, bsc, m.g)
    assert torch.equal((got + 0.0).view(torch.int32), (want + 0.0).view(torch.int32))


def test_kernel_model_dot_products(ckpt2):
    """fp32 path within the fp32 summation bound of the exact dot products; the half2 path's error
    (activations lifted per word and rounded to f16, f16 block sums) recorded beside it."""
    w = ckpt2.tensors["model.layers.0.mlp.down_proj.weight"][:32]             # K = 3072
    m = quantize_matrix(w)
    x = torch.randn(3072, 2, generator=torch.Generator().manual_seed(4))
    dq = dequantize_matrix(m.codes, m.bscales, m.g).double()
    exact = dq @ x.double()
    scale = dq.abs() @ x.double().abs()
    y = kernel_gemv(m.codes, m.bscales, m.g, x)
    err = (y.double() - exact).abs()
    assert (err <= (3072 + 16) * 2.0 ** -24 * scale).all() and err.max() > 0
    y2 = kernel_gemv(m.codes, m.bscales, m.g, x, half2=True)
    rel2 = float(((y2.double() - exact).abs() / scale).max())
    assert rel2 < 2e-3   # f16 rounding of x (2^-11) dominates
    assert torch.equal(kernel_gemv(m.codes, m.bscales, m.g, x[:, 0]), y[:, 0])
    print(f"\nnvfp4 kernel model, K=3072: fp32 path max rel err {float((err / scale).max()):.2e}, half2 path {rel2:.2e}")


def test_half2_word_lift_keeps_every_word_in_f16_range(ckpt2):
    """The half2 path lifts each 32-element word by 2^(14 - E) (E: its max's exponent), so a word's
    largest f16 input lies in [2^14, 2^15) whatever its scale, and a word of zeros stays zeros.
    Inputs whose words are 2^13 apart in scale stay within the error bound of unit-scale inputs:
    each word gets its own lift, so the small words keep f16's 11 bits."""
    from monolith.quant.nvfp4_kernel_model import word_lift
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(1024, 2, generator=gen)
    x[:, 0] *= (2.0 ** torch.arange(-6, 7, 0.5))[torch.arange(1024) // 32 % 26]   # words 2^-6 .. 2^6.5
    x[:, 1] *= torch.where(torch.arange(1024) // 32 % 2 == 0, 2.0 ** 10, 2.0 ** -3)
    x[64:96, 1] = 0.0
    xh, fw = word_lift(x)
    top = xh.float().abs().reshape(32, 32, 2).amax(1)
    nz = torch.ones(32, 2, dtype=torch.bool)
    nz[2, 1] = False
    assert ((top[nz] >= 2.0 ** 14) & (top[nz] < 2.0 ** 15)).all()
    assert top[2, 1] == 0 and fw[2, 1] == 2.0 ** -100
    m = quantize_matrix(ckpt2.tensors["model.layers.0.self_attn.q_proj.weight"][:64])
    dq = dequantize_matrix(m.codes, m.bscales, m.g).double()
    exact, scale = dq @ x.double(), dq.abs() @ x.double().abs()
    y2 = kernel_gemv(m.codes, m.bscales, m.g, x, half2=True)
    assert torch.isfinite(y2).all()
    assert float(((y2.double() - exact).abs() / scale).max()) < 2e-3


def test_shared_scalar_pins_the_kernels_1_over_rms(ckpt2):
    """What the GPU test test_nvfp4_qkv_rows_bit_exact_on_the_kernels_input relies on (seventh
    session): (a) multiplying W (v w) by 1/rms after the sum, as the kernel does, differs in most
    rows from W ((v / rms) w), the vector the older GPU test fed the model (its 722 / 4,096
    bit-equal rows); (b) shared_scalar finds the one fp32 factor that turns the model's row sums
    into the kernel's, here 3 ulp off the double-precision value as rsqrtf may be, and (c) finds
    none when a single row is off by one ulp."""
    m = quantize_matrix(ckpt2.tensors["model.layers.0.self_attn.q_proj.weight"][:256])
    gen = torch.Generator().manual_seed(7)
    v = torch.randn(1024, generator=gen) * 0.05
    w = ckpt2.tensors["model.layers.0.input_layernorm.weight"].float()
    approx = 1.0 / float((v.double().square().mean() + 1e-6).sqrt())
    inv = float((torch.tensor(approx, dtype=torch.float32).view(torch.int32) + 3).view(torch.float32))
    pre = kernel_gemv(m.codes, m.bscales, m.g, v * w)
    got = pre * torch.tensor(inv)
    normed_first = kernel_gemv(m.codes, m.bscales, m.g, (v * torch.tensor(inv)) * w)
    assert int((normed_first == got).sum()) < len(got) // 2           # (a): not the kernel's order
    assert shared_scalar(pre, got, approx) == [inv]                     # (b)
    bad = got.clone()
    bad[17] = torch.nextafter(bad[17], torch.tensor(float("inf")))
    assert shared_scalar(pre, bad, approx) == []                        # (c)


# ---- layout -------------------------------------------------------------------------------------
def test_layout_constants_and_docstring_tables():
    assert L.SEGMENTS == F8.SEGMENTS and L.PROJECTIONS == F8.PROJECTIONS   # the same rows as rowmajor-v1
    assert L.LAYER_CODE_BYTES * 2 == F8.LAYER_BYTES and L.LAYER_BSCALE_BYTES * 16 == F8.LAYER_BYTES
    for seg in L.SEGMENTS:
        assert L.CODE_OFFSETS[seg] * 2 == F8.BYTE_OFFSETS[seg] and L.BSCALE_OFFSETS[seg] * 16 == F8.BYTE_OFFSETS[seg]
    doc = L.__doc__
    for name, (rows, k) in L.SEGMENTS.items():
        line = re.search(rf"^\s+{name}\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d,]+)\s+([\d,]+)", doc, re.M)
        assert line, name
        assert [int(v.replace(",", "")) for v in line.groups()] == [
            rows, k, k // 2, L.CODE_OFFSETS[name], rows * k // 2], name
        sline = re.search(rf"^\s+{name}\s+(\d+)\s+([\d,]+)\s+([\d,]+)\s*$", doc, re.M)
        assert sline and [int(v.replace(",", "")) for v in sline.groups()] == [
            k // 16, L.BSCALE_OFFSETS[name], rows * k // 16], name
    assert f"{L.LAYER_CODE_BYTES:,}" in doc and f"{L.LAYER_BSCALE_BYTES:,}" in doc
    assert re.search(r"SEARCH_OFFSETS = \(([-\d, ]+)\)", doc).group(1) == ", ".join(map(str, L.SEARCH_OFFSETS))
    assert L.bytes_per_token() == 404_049_284   # NOTES.md, Facts: "NVFP4 layers + FP8 head ≈0.40 GB"


@pytest.fixture(scope="module")
def packed2(synth2, tmp_path_factory):
    out = tmp_path_factory.mktemp("nvfp4") / "pack2"
    meta = pack_nvfp4(synth2, out, progress=False)
    return out, meta


def test_pack_writes_the_metadata_the_kernel_reads(packed2, ckpt2):
    out, meta = packed2
    p = load_packed_nvfp4(out, model=ckpt2.path)
    assert p.meta == meta
    assert (meta["scheme"], meta["layout"], meta["layout_version"], meta["block"], meta["head"]) == (
        "nvfp4-e2m1-b16-e4m3", "nvfp4-rowmajor-v1", 1, 16, "fp8")
    assert meta["search"]["enabled"] and meta["search"]["offsets"] == list(L.SEARCH_OFFSETS)
    assert meta["source"]["sha256"] == ckpt2.sha256() and meta["num_layers"] == 2
    fm = meta["formats"]
    assert set(fm) == set(ckpt2.tensors)
    assert sum(f["format"] == L.SCHEME for f in fm.values()) == 2 * 7
    assert fm["model.embed_tokens.weight"]["format"] == "fp8-e4m3-rowscale"
    assert fm["model.layers.1.mlp.up_proj.weight"] == {
        "format": L.SCHEME, "tensor": "layers.codes", "layer": 1, "segment": "gateup",
        "byte_offset": L.CODE_OFFSETS["gateup"] + 512, "rows": 3072, "cols": 1024, "row_stride_bytes": 1024,
        "bscale_tensor": "layers.bscales", "bscale_offset": L.BSCALE_OFFSETS["gateup"] + 64, "bscale_row_stride": 128,
        "tscale_tensor": "layers.tscales", "tscale_index": 5}
    assert p.bytes_per_token() == L.bytes_per_token(2)


def test_packed_bytes_are_the_bf16_packers_rows_quantized(packed2, ckpt2):
    """Independent of the format map: the bf16 packer's buffer, segment by segment, each HF matrix
    quantized on its own (its tensor scale), compared byte for byte."""
    from monolith.megakernel import pack_layer_weights
    p = load_packed_nvfp4(packed2[0])
    w, n = pack_layer_weights(ckpt2.tensors, 2)
    w = w.view(2, F8.LAYER_BYTES)
    for i in range(2):
        for seg, (rows, k) in L.SEGMENTS.items():
            b0 = F8.BYTE_OFFSETS[seg]
            seg_w = w[i, b0:b0 + rows * k].view(rows, k)
            parts = {"qkv": [(0, 2048, "q"), (2048, 3072, "k"), (3072, 4096, "v")], "o": [(0, 1024, "o")],
                     "down": [(0, 1024, "down")]}.get(seg)
            codes = torch.empty(rows, k // 2, dtype=torch.uint8)
            bsc = torch.empty(rows, k // 16, dtype=torch.uint8)
            if seg == "gateup":
                for par, t in ((0, "gate"), (1, "up")):
                    m = quantize_matrix(seg_w[par::2])
                    codes[par::2], bsc[par::2] = m.codes, m.bscales
                    assert p.tensors["layers.tscales"][i, L.TSCALE_ORDER.index(t)].item() == m.g
            else:
                for r0, r1, t in parts:
                    m = quantize_matrix(seg_w[r0:r1])
                    codes[r0:r1], bsc[r0:r1] = m.codes, m.bscales
                    assert p.tensors["layers.tscales"][i, L.TSCALE_ORDER.index(t)].item() == m.g
            c0, s0 = L.CODE_OFFSETS[seg], L.BSCALE_OFFSETS[seg]
            assert torch.equal(p.tensors["layers.codes"][i, c0:c0 + codes.numel()], codes.view(-1)), (i, seg)
            assert torch.equal(p.tensors["layers.bscales"][i, s0:s0 + bsc.numel()], bsc.view(-1)), (i, seg)
    assert torch.equal(p.tensors["norms"].view(-1), n)
    assert (p.tensors["layers.tscales"][:, 7] == 1.0).all()
    ec, es = fp8_quantize_rows(ckpt2.tensors["model.embed_tokens.weight"])
    assert torch.equal(p.tensors["embed.codes"], ec) and torch.equal(p.tensors["embed.scales"], es)


def test_format_map_views_give_every_matrix(packed2, ckpt2):
    p = load_packed_nvfp4(packed2[0])
    for name, f in p.meta["formats"].items():
        if f["format"] == L.SCHEME:
            m = quantize_matrix(ckpt2.tensors[name])
            c, s, g = p.matrix(name)
            assert torch.equal(c, m.codes) and torch.equal(s, m.bscales) and g == m.g, name
        elif f["format"] == "bf16":
            assert torch.equal(p.dequantized(name), ckpt2.tensors[name].float()), name
    dq = p.dequantized_tensors()
    assert all(t.dtype == torch.float32 for t in dq.values()) and set(dq) == set(ckpt2.tensors)


def test_cli_pack_nvfp4(synth2, tmp_path):
    from typer.testing import CliRunner

    from monolith.cli import app
    r = CliRunner().invoke(app, ["pack", "--format", "nvfp4", "--model", str(synth2), "--out", str(tmp_path / "o"),
                                 "--no-search", "--stats", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    assert "nvfp4-rowmajor-v1" in r.output
    p = load_packed_nvfp4(tmp_path / "o", model=synth2)
    assert p.meta["search"] == {**p.meta["search"], "enabled": False, "offsets": [0]}
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["matrices"]["q"]["rel_mse_max"] == st["matrices"]["q"]["rel_mse_search"]
    r = CliRunner().invoke(app, ["pack", "--format", "nvfp4", "--model", str(synth2), "--out", str(tmp_path / "x"),
                                 "--head", "bf16"])
    assert r.exit_code != 0 and "LM head in fp8" in str(r.exception) + r.output


# ---- loader refusals ----------------------------------------------------------------------------
def _rewrite_meta(src_dir, dst_dir, **changes):
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(src_dir / L.FILE), framework="pt") as h:
        meta = json.loads(h.metadata()[L.META_KEY])
        tensors = {k: h.get_tensor(k) for k in h.keys()}
    meta.update(changes)
    dst_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst_dir / L.FILE), metadata={L.META_KEY: json.dumps(meta)})
    return tensors, meta


@pytest.mark.parametrize("change,msg", [
    ({"layout": "nvfp4-rowmajor-v2"}, "layout 'nvfp4-rowmajor-v2' is not known"),
    ({"scheme": "nvfp4-e2m1-b32-e8m0"}, "scheme 'nvfp4-e2m1-b32-e8m0' is not known"),
    ({"layout_version": 3}, "layout_version 3 is not known"),   # 2 is the mixed nvfp4/fp8 pack (test_quant_sensitivity.py)
    ({"block": 32}, "block 32 is not known"),
    ({"format": "monolith-packed-fp8"}, "format 'monolith-packed-fp8' is not known"),
    ({"head": "bf16"}, "head 'bf16' is not known"),
])
def test_loader_refuses_unknown_layout_or_scheme(packed2, tmp_path, change, msg):
    _rewrite_meta(packed2[0], tmp_path / "bad", **change)
    with pytest.raises(MonolithError, match=re.escape(msg)) as e:
        load_packed_nvfp4(tmp_path / "bad")
    assert "\n" not in str(e.value)


def test_loader_refuses_other_weights_missing_file_and_map_damage(packed2, tmp_path, synth2):
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"not the same weights")
    with pytest.raises(MonolithError, match="packed from a different checkpoint"):
        load_packed_nvfp4(packed2[0], model=other)
    load_packed_nvfp4(packed2[0], model=synth2)
    with pytest.raises(MonolithError, match="packed nvfp4 weights not found"):
        load_packed_nvfp4(tmp_path / "nothing")
    _rewrite_meta(packed2[0], tmp_path / "m", formats={})
    with pytest.raises(MonolithError, match="format map differs"):
        load_packed_nvfp4(tmp_path / "m")


# ---- cross-check against torchao's NVFP4 quantizer ----------------------------------------------
def _torchao_nvfp4():
    try:  # torchao also tries to load its CUDA extensions at import: any failure to import is a skip
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"torchao NVFP4 not importable ({type(e).__name__}: {e}); `pip install -e .[dev]` installs it")
    return nvfp4_quantize, per_tensor_amax_to_scale


@pytest.mark.filterwarnings("ignore")
def test_cross_check_with_torchao(ckpt2):
    """torchao 0.18 `nvfp4_quantize` (prototype.mx_formats, pure torch, runs on CPU) with NVIDIA's
    two-level scales. Same tensor scale and same block-scale rule (amax / 6 / g, e4m3 RN): block
    scales identical wherever ours is an E4M3 normal (torchao clamps at 2^-6, the smallest normal).
    The element rule differs: torchao multiplies by (1/g)/s, ours divides by fl(s * g); the codes
    are identical except where the two roundings land on opposite sides of a tie, always one
    code apart. MSE: ours (max) equals torchao's to 1e-4 relative; the search is lower."""
    nvfp4_quantize, amax_to_scale = _torchao_nvfp4()
    report = {}
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                 "model.layers.1.self_attn.o_proj.weight"):
        w = ckpt2.tensors[name].float()
        g = amax_to_scale(w.abs().amax())
        ours = quantize_matrix(w, search=False)
        assert ours.g == g.item()
        ts, tcodes = nvfp4_quantize(w.contiguous(), 16, g)
        ts = ts.view(torch.uint8).view(ours.bscales.shape)
        normal = ours.bscales >= 0x08
        assert torch.equal(ts[normal], ours.bscales[normal]), name
        tc, oc = unpack_nibbles(tcodes.view(ours.codes.shape)), unpack_nibbles(ours.codes)
        tv, ov = e2m1_values()[tc.long()], e2m1_values()[oc.long()]
        diff = tc != oc
        frac = float(diff.float().mean())
        assert frac < 1e-3, (name, frac)
        # differing codes are one grid step apart, in the same sign, at a near-tie of the scaled weight
        grid = torch.tensor(L.E2M1_MAGNITUDES)
        ti, oi = torch.searchsorted(grid, tv.abs()[diff]), torch.searchsorted(grid, ov.abs()[diff])
        assert ((ti - oi).abs() == 1).all() and (torch.signbit(tv[diff]) == torch.signbit(ov[diff])).all()
        d = (E4M3[ours.bscales.long()].repeat_interleave(16, 1) * ours.g)[diff]
        mid = (tv.abs()[diff] + ov.abs()[diff]) / 2
        assert ((w.abs()[diff] / d - mid).abs() <= mid * 1e-5).all()
        t_dq = (tv.view(-1, 16) * E4M3[ts.long()].view(-1, 1)).view(w.shape) * ours.g
        mse_t = float((w - t_dq).double().square().sum() / w.double().square().sum())
        mse_o = float(ours.err.sum() / w.double().square().sum())
        mse_s = float(quantize_matrix(w).err.sum() / w.double().square().sum())
        assert abs(mse_t - mse_o) <= 1e-4 * mse_o and mse_s < 0.9 * mse_t
        report[name] = {"codes_differing": frac, "rel_mse_torchao": mse_t, "rel_mse_ours_max": mse_o,
                        "rel_mse_ours_search": mse_s}
    print("\n" + json.dumps(report, indent=1))
