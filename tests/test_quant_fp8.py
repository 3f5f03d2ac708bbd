"""FP8 packer (quant/pack_fp8.py), layout contract (quant/fp8_layout.py) and the CPU model of the
kernel's dequant (quant/fp8_kernel_model.py): issue 12, items 1-2. CPU only."""
import json
import math
import re

import pytest
import torch

from monolith import config as C
from monolith.errors import MonolithError
from monolith.quant import fp8_layout as L
from monolith.quant.fp8_kernel_model import e4m3_to_f16_bits, kernel_gemv, kernel_weight_values
from monolith.quant.pack_fp8 import (
    dequantize_rows,
    e4m3_values,
    encode_rows,
    load_packed_fp8,
    pack_fp8,
    quantize_rows,
    row_scales,
)

NAN_CODES = (0x7F, 0xFF)


# ---- an independent E4M3 definition: bit formula + exhaustive nearest search --------------------
def e4m3_value_from_bits(c: int) -> float:
    """The OCP E4M3 (fn) value of a non-NaN code, from the bit layout alone (Python floats, exact)."""
    sign = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 0xF, c & 0x7
    mag = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return sign * mag


POS_VALUES = [e4m3_value_from_bits(c) for c in range(0x7F)]  # codes 0x00..0x7E, ascending


def ref_encode(x: float) -> int:
    """Round to nearest, ties to the even code, saturate at 448; by search, not by bit tricks."""
    s = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 448.0:
        return s | 0x7E
    return s | min(range(0x7F), key=lambda c: (abs(POS_VALUES[c] - a), c & 1))


def encode_scale1(values) -> torch.Tensor:
    return encode_rows(torch.tensor(values, dtype=torch.float32).view(1, -1), torch.ones(1))[0]


# ---- every code ---------------------------------------------------------------------------------
def test_value_table_matches_torch_for_all_256_codes():
    vals = e4m3_values()
    for c in range(256):
        if c in NAN_CODES:
            assert math.isnan(vals[c]), hex(c)
        else:
            assert vals[c].item() == e4m3_value_from_bits(c), hex(c)
            assert math.copysign(1.0, vals[c].item()) == (-1.0 if c & 0x80 else 1.0), hex(c)  # -0 is 0x80
    assert float(vals[0x7E]) == L.E4M3_MAX == 448.0
    assert float(vals[0x01]) == 2.0 ** -9  # smallest subnormal


def test_every_finite_code_round_trips_through_the_packer():
    codes = torch.tensor([c for c in range(256) if c not in NAN_CODES], dtype=torch.uint8)
    row = codes.view(torch.float8_e4m3fn).float()  # contains +-448, so the row's scale is exactly 1
    got, scale = quantize_rows(row.view(1, -1))
    assert scale.item() == 1.0
    assert torch.equal(got[0], codes)  # all 254, including -0 (0x80) and all 14 subnormals
    assert torch.equal(dequantize_rows(got, scale)[0], row)


def test_rounding_matches_an_independent_search_at_ties_and_around_them():
    xs = []
    for lo, hi in zip(POS_VALUES, POS_VALUES[1:], strict=False):
        mid = (lo + hi) / 2  # exact in fp32: a tie, must go to the even code
        xs += [mid, math.nextafter(mid, 0.0), math.nextafter(mid, 1e9), lo, hi]
    xs += [2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -11, 1e-9, 0.0, 447.99, 448.0, 464.0, 480.0]
    g = torch.Generator().manual_seed(0)
    xs += (2.0 ** (torch.rand(2000, generator=g) * 22 - 13)).tolist()  # log-uniform over 2^-13 .. 2^9
    xs = [float(torch.tensor(x, dtype=torch.float32)) for x in xs]  # the fp32 values actually fed
    xs += [-x for x in xs]
    got = encode_scale1(xs).tolist()
    want = [ref_encode(x) for x in xs]
    bad = [(x, g_, w) for x, g_, w in zip(xs, got, want, strict=True) if g_ != w]
    assert not bad, bad[:5]
    # the ties really were ties resolved to even, in both directions
    assert encode_scale1([2.0 ** -10]).tolist() == [0x00]          # 0.5 * 2^-9 -> 0 (even)
    assert encode_scale1([3 * 2.0 ** -10]).tolist() == [0x02]      # 1.5 * 2^-9 -> 2 * 2^-9 (even)
    assert encode_scale1([5 * 2.0 ** -10]).tolist() == [0x02]      # 2.5 * 2^-9 -> 2 * 2^-9 (even)
    assert encode_scale1([1.0625]).tolist() == [0x38]              # 1 + 1/16 -> 1.0 (even mantissa)
    assert encode_scale1([1.1875]).tolist() == [0x3A]              # 1 + 3/16 -> 1.25 (even mantissa)


def test_subnormals_quantize_and_dequantize_exactly():
    sub = [m * 2.0 ** -9 for m in range(1, 8)]
    assert encode_scale1(sub + [-x for x in sub]).tolist() == list(range(1, 8)) + [0x80 | m for m in range(1, 8)]
    # through quantize_rows with a non-trivial scale: value = m * 2^-9 * scale exactly
    scale = 0.0625
    row = torch.tensor([448.0 * scale] + [m * 2.0 ** -9 * scale for m in range(1, 8)])
    c, s = quantize_rows(row.view(1, -1))
    assert s.item() == scale and c[0, 1:].tolist() == list(range(1, 8))
    assert torch.equal(dequantize_rows(c, s)[0], row)


def test_saturation_clamps_to_448_never_nan():
    big = [448.0, 448.5, 449.0, 464.0, 479.9, 480.0, 512.0, 1e4, 3.0e38, float("inf")]
    assert encode_scale1(big).tolist() == [0x7E] * len(big)
    assert encode_scale1([-x for x in big]).tolist() == [0xFE] * len(big)


def test_scale_rounding_down_saturates_instead_of_overflowing():
    # rows whose fp32 amax / 448 rounds down, so amax / scale > 448: the clamp must catch them
    g = torch.Generator().manual_seed(1)
    a = (torch.rand(20000, generator=g) * 10).to(torch.bfloat16).float()
    s = a / 448.0
    over = a[(a / s) > 448.0]
    assert len(over) > 0, "no amax with a rounded-down scale found: the test would check nothing"
    rows = torch.stack([over, -over / 3], dim=1)
    c, sc = quantize_rows(rows)
    assert (c[:, 0] == 0x7E).all() and not ((c & 0x7F) == 0x7F).any()
    assert (dequantize_rows(c, sc)[:, 0] <= over).all()


def test_nan_never_produced():
    bmax = torch.finfo(torch.bfloat16).max
    btiny = 2.0 ** -133  # smallest bf16 subnormal
    g = torch.Generator().manual_seed(2)
    heavy = torch.randn(64, 512, generator=g) * torch.exp(torch.randn(64, 512, generator=g) * 3)
    rows = [torch.full((512,), bmax), torch.full((512,), -bmax), torch.full((512,), btiny),
            torch.tensor([bmax, btiny, -bmax, 0.0] * 128), torch.tensor([btiny, 0.0, -btiny, -0.0] * 128)]
    w = torch.cat([torch.stack(rows), heavy]).to(torch.bfloat16)
    c, s = quantize_rows(w)
    assert not ((c & 0x7F) == 0x7F).any()
    assert torch.isfinite(s).all() and (s > 0).all()
    assert torch.isfinite(dequantize_rows(c, s)).all()


def test_non_finite_weights_are_refused():
    for bad in (float("nan"), float("inf"), -float("inf")):
        w = torch.ones(3, 16)
        w[1, 5] = bad
        with pytest.raises(MonolithError, match="non-finite weight .* row 1, column 5"):
            quantize_rows(w)


def test_zero_and_tiny_rows_never_divide_by_zero():
    w = torch.zeros(4, 64)
    w[1] = -0.0
    w[2, 3] = 2.0 ** -133           # amax / 448 underflows fp32's normal range
    w[3, 0] = 1.0
    c, s = quantize_rows(w)
    assert s.tolist()[:2] == [L.ZERO_ROW_SCALE] * 2 and s[2].item() == L.MIN_SCALE
    assert s[3].item() == (torch.tensor(1.0) / 448).item()  # fp32 division
    assert (c[0] == 0).all() and set(c[1].tolist()) == {0x80}  # -0 stays -0: still zero, never NaN
    dq = dequantize_rows(c, s)
    assert torch.isfinite(dq).all() and (dq[:2] == 0).all()
    assert dq[2, 3].item() == 2.0 ** -133  # 2^-7 * 2^-126, exact
    assert row_scales(torch.zeros(2, 8)).tolist() == [1.0, 1.0]


def test_fp32_input_is_not_modified():
    w = torch.randn(8, 64)
    keep = w.clone()
    quantize_rows(w)
    assert torch.equal(w, keep)


def test_error_is_e4m3_sized_on_heavy_tailed_rows():
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(256, 1024, generator=g) * torch.exp(torch.randn(256, 1, generator=g))).to(torch.bfloat16)
    c, s = quantize_rows(w)
    wf, dq = w.float(), dequantize_rows(c, s)
    # normal-range values: relative error <= half an ulp = 2^-4
    normal = wf.abs() >= 2.0 ** -6 * s[:, None]
    assert ((dq - wf).abs()[normal] <= wf.abs()[normal] * 2.0 ** -4 * (1 + 1e-6)).all()
    # each row's largest weight takes the largest code, and comes back within fp32 rounding of itself
    arg = wf.abs().argmax(1, keepdim=True)
    assert ((c.gather(1, arg) & 0x7F) == 0x7E).all()
    amax = wf.abs().amax(1)
    assert ((dq.abs().amax(1) - amax).abs() <= amax * 2.0 ** -23).all()
    rel = float((dq - wf).square().sum() / wf.square().sum())
    assert 1e-4 < rel < 2e-3


# ---- the CPU model of the kernel ----------------------------------------------------------------
def test_kernel_e4m3_to_f16_port_matches_torch_for_all_256_codes():
    codes = torch.arange(256, dtype=torch.uint8)
    bits = e4m3_to_f16_bits(codes)
    ref16 = codes.view(torch.float8_e4m3fn).to(torch.float16)
    for c in range(256):
        if c in NAN_CODES:
            assert bits[c].item() & 0x7FFF == 0x7FFF
        else:
            assert bits[c].item() == ref16[c].view(torch.int16).item() & 0xFFFF, hex(c)
    vals = kernel_weight_values(codes)
    finite = [c for c in range(256) if c not in NAN_CODES]
    assert torch.equal(vals[finite], e4m3_values()[finite])


def _one_hot_gemv(codes, scales):
    K = codes.shape[1]
    return kernel_gemv(codes, scales, torch.eye(K))  # [R, K]: column j = W e_j = (dequantized) column j


def _bits(t):
    return (t + 0.0).view(torch.int32)  # + 0.0 turns -0 into +0 (a dot product starting at +0 never gives -0)


def test_kernel_model_reproduces_packer_dequant_bit_for_bit(ckpt2):
    w = ckpt2.tensors["model.layers.1.mlp.gate_proj.weight"][:24]   # 24 rows x 1024
    c, s = quantize_rows(w)
    got = _one_hot_gemv(c, s)
    assert torch.equal(_bits(got), _bits(dequantize_rows(c, s)))
    # teeth: had the kernel scaled each weight in f16 (__hmul) before its fp32 FMA, it would not match
    f16_scaled = (kernel_weight_values(c).half() * s.half()[:, None]).float()
    assert not torch.equal(_bits(f16_scaled), _bits(dequantize_rows(c, s)))


def test_kernel_model_dot_products_are_within_fp32_summation_error(ckpt2):
    w = ckpt2.tensors["model.layers.0.mlp.down_proj.weight"][:64]   # K = 3072
    c, s = quantize_rows(w)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3072, 3, generator=g)
    y = kernel_gemv(c, s, x)
    dq = dequantize_rows(c, s).double()
    exact = dq @ x.double()
    bound = (3072 + 8) * 2.0 ** -24 * (dq.abs() @ x.double().abs()) + 1e-30
    err = (y.double() - exact).abs()
    assert (err <= bound).all() and err.max() > 0  # not exact (fp32 summation), but within the bound
    assert torch.equal(kernel_gemv(c, s, x[:, 0]), y[:, 0])  # batch columns independent


# ---- layout -------------------------------------------------------------------------------------
def test_layout_constants_mirror_the_bf16_packer_and_the_docstring():
    from monolith import megakernel as MK
    assert (L.OFF_QKV, L.OFF_O, L.OFF_GATEUP, L.OFF_DOWN, L.LAYER_BYTES) == (
        MK.OFF_QKV, MK.OFF_O, MK.OFF_GATEUP, MK.OFF_DOWN, MK.LAYER_ELEMS)  # 1 byte per weight
    assert (L.NORM_IN_LN, L.NORM_POST_LN, L.NORM_Q, L.NORM_K, L.NORM_LAYER_ELEMS) == (
        MK.NORM_IN_LN, MK.NORM_POST_LN, MK.NORM_Q, MK.NORM_K, MK.NORM_LAYER_ELEMS)
    assert (L.SC_QKV, L.SC_O, L.SC_GATEUP, L.SC_DOWN, L.LAYER_SCALES) == (0, 4096, 5120, 11264, 12288)
    assert L.LAYER_BYTES == 15_728_640 and L.EMBED_BYTES == C.VOCAB * C.HIDDEN
    doc = L.__doc__
    for name in ("qkv", "o", "gateup", "down"):
        rows, k = L.SEGMENTS[name]
        line = re.search(rf"^\s+{name}\s+(\d+)\s+(\d+)\s+([\d,]+)\s+([\d,]+)", doc, re.M)
        assert line, name
        assert [int(v.replace(",", "")) for v in line.groups()] == [rows, k, L.BYTE_OFFSETS[name], rows * k], name
        sline = re.search(rf"^\s+{name}\s+(\d+)\s+(\d+)\s+([\d,]+)\s*(\(|$)", doc, re.M)
        assert sline and [int(v.replace(",", "")) for v in sline.groups()[:3]] == [
            rows, L.SCALE_OFFSETS[name], 4 * L.SCALE_OFFSETS[name]], name
    assert f"{L.LAYER_BYTES:,}" in doc and f"{L.LAYER_SCALES:,}" in doc


@pytest.fixture(scope="module")
def packed2(synth2, tmp_path_factory):
    out = tmp_path_factory.mktemp("fp8") / "pack2"
    meta = pack_fp8(synth2, out, progress=False)
    return out, meta


def test_pack_writes_the_metadata_the_kernel_reads(packed2, ckpt2):
    out, meta = packed2
    p = load_packed_fp8(out, model=ckpt2.path)
    assert p.meta == meta
    assert (meta["scheme"], meta["layout"], meta["layout_version"], meta["scale_dtype"]) == (
        "fp8-e4m3-rowscale", "rowmajor-v1", 1, "float32")
    assert meta["source"]["sha256"] == ckpt2.sha256() and meta["num_layers"] == 2
    fm = meta["formats"]
    assert set(fm) == set(ckpt2.tensors)  # every tensor of the checkpoint has an entry
    assert sum(f["format"] == "fp8-e4m3-rowscale" for f in fm.values()) == 2 * 7 + 1
    assert fm["model.layers.1.mlp.up_proj.weight"] == {
        "format": "fp8-e4m3-rowscale", "tensor": "layers.codes", "layer": 1, "segment": "gateup",
        "byte_offset": L.OFF_GATEUP + 1024, "rows": 3072, "cols": 1024, "row_stride_bytes": 2048,
        "scale_tensor": "layers.scales", "scale_offset": L.SC_GATEUP + 1, "scale_stride": 2}
    assert p.tensors["layers.codes"].shape == (2, L.LAYER_BYTES)
    assert p.tensors["layers.scales"].shape == (2, L.LAYER_SCALES)
    assert p.tensors["embed.codes"].shape == (C.VOCAB, C.HIDDEN) and p.tensors["embed.scales"].shape == (C.VOCAB,)


def test_packed_bytes_are_the_bf16_packers_rows_quantized(packed2, ckpt2):
    """Independent of the format map: quantize the bf16 packer's own buffer segment by segment
    and compare byte for byte (order, interleave, offsets)."""
    from monolith.megakernel import pack_layer_weights
    out, _ = packed2
    p = load_packed_fp8(out)
    w, n = pack_layer_weights(ckpt2.tensors, 2)
    w = w.view(2, L.LAYER_BYTES)
    for i in range(2):
        for seg, (rows, k) in L.SEGMENTS.items():
            b0 = L.BYTE_OFFSETS[seg]
            c, s = quantize_rows(w[i, b0:b0 + rows * k].view(rows, k))
            assert torch.equal(p.tensors["layers.codes"][i, b0:b0 + rows * k], c.view(-1)), (i, seg)
            s0 = L.SCALE_OFFSETS[seg]
            assert torch.equal(p.tensors["layers.scales"][i, s0:s0 + rows], s), (i, seg)
    assert torch.equal(p.tensors["norms"].view(-1), n)
    # gate/up interleave spelled out: row 2r+1 of the segment is up row r
    up = quantize_rows(ckpt2.tensors["model.layers.1.mlp.up_proj.weight"])[0]
    r = 777
    at = L.OFF_GATEUP + (2 * r + 1) * C.HIDDEN
    assert torch.equal(p.tensors["layers.codes"][1, at:at + C.HIDDEN], up[r])


def test_format_map_views_give_every_matrix_quantized(packed2, ckpt2):
    out, _ = packed2
    p = load_packed_fp8(out)
    for name, f in p.meta["formats"].items():
        if f["format"] != L.SCHEME:
            assert torch.equal(p.dequantized(name), ckpt2.tensors[name].float()), name
            continue
        c, s = quantize_rows(ckpt2.tensors[name])
        pc, ps = p.matrix(name)
        assert torch.equal(pc, c) and torch.equal(ps, s), name
    dq = p.dequantized_tensors()
    assert all(t.dtype == torch.float32 for t in dq.values())
    q = dq["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(q, ckpt2.tensors["model.layers.0.self_attn.q_proj.weight"].float())  # really quantized


def test_bf16_head_option(synth2, tmp_path, ckpt2):
    meta = pack_fp8(synth2, tmp_path / "h", head="bf16", progress=False)
    p = load_packed_fp8(tmp_path / "h", model=synth2)
    assert meta["formats"]["model.embed_tokens.weight"]["format"] == "bf16" and "embed.codes" not in p.tensors
    assert torch.equal(p.dequantized("model.embed_tokens.weight"), ckpt2.tensors["model.embed_tokens.weight"].float())
    layers = 2 * (L.LAYER_BYTES + 4 * L.LAYER_SCALES + 2 * L.NORM_LAYER_ELEMS) + 2 * C.HIDDEN
    assert p.bytes_per_token() == layers + 2 * C.VOCAB * C.HIDDEN + 2 * C.HIDDEN
    assert L.bytes_per_token(2, "fp8") == layers + C.VOCAB * C.HIDDEN + 4 * C.VOCAB + C.HIDDEN + 4
    with pytest.raises(MonolithError, match="--head must be fp8 or bf16"):
        pack_fp8(synth2, tmp_path / "x", head="fp16", progress=False)


# ---- loader refusals ----------------------------------------------------------------------------
def _rewrite_meta(src_dir, dst_dir, **changes):
    from safetensors import safe_open
    from safetensors.torch import save_file
    f = src_dir / L.FILE
    with safe_open(str(f), framework="pt") as h:
        meta = json.loads(h.metadata()[L.META_KEY])
        tensors = {k: h.get_tensor(k) for k in h.keys()}
    meta.update(changes)
    dst_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst_dir / L.FILE), metadata={L.META_KEY: json.dumps(meta)})
    return tensors, meta


@pytest.mark.parametrize("change,msg", [
    ({"layout": "rowmajor-v2"}, "layout 'rowmajor-v2' is not known"),
    ({"scheme": "fp8-e4m3-tilescale"}, "scheme 'fp8-e4m3-tilescale' is not known"),
    ({"layout_version": 2}, "layout_version 2 is not known"),
    ({"scale_dtype": "bfloat16"}, "scale_dtype 'bfloat16' is not known"),
    ({"format": "something-else"}, "format 'something-else' is not known"),
])
def test_loader_refuses_unknown_layout_or_scheme(packed2, tmp_path, change, msg):
    _rewrite_meta(packed2[0], tmp_path / "bad", **change)
    with pytest.raises(MonolithError, match=re.escape(msg)) as e:
        load_packed_fp8(tmp_path / "bad")
    assert "\n" not in str(e.value)


def test_loader_refuses_a_pack_of_other_weights(packed2, tmp_path, synth2):
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"not the same weights")
    with pytest.raises(MonolithError, match="packed from a different checkpoint") as e:
        load_packed_fp8(packed2[0], model=other)
    assert "\n" not in str(e.value)
    load_packed_fp8(packed2[0], model=synth2)  # the right one loads


def test_loader_refuses_missing_file_shape_and_map_damage(packed2, tmp_path):
    with pytest.raises(MonolithError, match="packed fp8 weights not found"):
        load_packed_fp8(tmp_path / "nothing")
    tensors, meta = _rewrite_meta(packed2[0], tmp_path / "m", formats={})
    with pytest.raises(MonolithError, match="format map differs"):
        load_packed_fp8(tmp_path / "m")
    from safetensors.torch import save_file
    tensors["layers.scales"] = tensors["layers.scales"][:, :-1].contiguous()
    (tmp_path / "s").mkdir()
    save_file(tensors, str(tmp_path / "s" / L.FILE), metadata={L.META_KEY: json.dumps(meta)})
    with pytest.raises(MonolithError, match="tensor layers.scales is float32 \\[2, 12287\\]"):
        load_packed_fp8(tmp_path / "s")
    (tmp_path / "n").mkdir()
    save_file({"x": torch.zeros(1)}, str(tmp_path / "n" / L.FILE))
    with pytest.raises(MonolithError, match="not a monolith packed file"):
        load_packed_fp8(tmp_path / "n")


# ---- cross-check against torchao (a kept library doing FP8 weight-only quantization) --------------
def _torchao_quantize(w: torch.Tensor):
    try:  # torchao also tries to load its CUDA extensions at import: any failure to import is a skip
        from torchao import quantization
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"torchao not importable ({type(e).__name__}: {e}); `pip install -e .[dev]` installs it")
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    with torch.no_grad():
        lin.weight.copy_(w)
    m = torch.nn.Sequential(lin)
    quantization.quantize_(m, quantization.Float8WeightOnlyConfig())
    q = m[0].weight
    return q.qdata.view(torch.uint8), q.scale.reshape(-1)


@pytest.mark.filterwarnings("ignore")
def test_cross_check_with_torchao(ckpt2):
    for name, rows in (("model.layers.0.self_attn.q_proj.weight", None), ("model.layers.1.mlp.down_proj.weight", None),
                       ("model.embed_tokens.weight", 8192)):
        w = ckpt2.tensors[name][:rows]
        c, s = quantize_rows(w)
        # torchao on the exact fp32 values of the same matrix: identical codes and scales, bit for bit
        tc, ts = _torchao_quantize(w.float())
        assert ts.dtype == torch.float32
        assert torch.equal(tc, c), name
        assert torch.equal(ts, s), name
        # torchao on the bf16 tensor rounds its scale (amax / 448) to bf16 first: codes then differ by
        # at most one E4M3 step, never in sign, and its dequantized matrix is no closer to the weights
        tc16, ts16 = _torchao_quantize(w)
        assert ((tc16.int() - c.int()).abs() <= 1).all() and ((tc16 ^ c) & 0x80 == 0).all()
        assert torch.equal(ts16, s.bfloat16().float())
        wf = w.float()
        ours = (dequantize_rows(c, s) - wf).square().sum()
        theirs = (dequantize_rows(tc16, ts16) - wf).square().sum()
        assert ours <= theirs * 1.001, name
