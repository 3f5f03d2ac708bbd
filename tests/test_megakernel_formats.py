"""The megakernel engine's per-format classes (monolith/megakernel.py): one per weight format,
mirroring the kernel's weight types, picked by MegakernelEngine(ckpt, variant=...). CPU only: the
dispatch, the refusals before any GPU work, and what each format uploads (its pointers set, the
others null) on a 2-layer checkpoint."""

import re
from types import SimpleNamespace

import pytest
import torch

from monolith import config as C
from monolith import kernel_spec
from monolith import megakernel as mk
from monolith.errors import MonolithError


def _fake_ckpt(packed=None):
    return SimpleNamespace(shape=SimpleNamespace(num_layers=C.NUM_LAYERS), packed=packed, tensors={},
                           sha256=lambda: "a" * 64, describe=lambda: {})


def test_every_variant_maps_to_the_class_of_its_weight_format():
    seen = set()
    for v in kernel_spec.variants()["variants"]:
        cls = mk.engine_class(v["name"])
        assert cls.weight_format == v.get("weights", "bf16"), v["name"]
        assert issubclass(cls, mk.MegakernelEngine) and cls is not mk.MegakernelEngine
        inst = mk.MegakernelEngine.__new__(mk.MegakernelEngine, _fake_ckpt(), variant=v["name"])
        assert type(inst) is cls  # the old entry point constructs the format's class
        seen.add(cls)
    assert seen == {mk.Bf16Engine, mk.Fp8Engine, mk.Nvfp4Engine}
    assert type(mk.MegakernelEngine.__new__(mk.MegakernelEngine, _fake_ckpt())) is mk.Bf16Engine  # the default


def test_each_class_names_a_weight_type_of_the_kernel():
    src = (kernel_spec.KERNEL_DIR / "dequant.cuh").read_text()
    structs = set(re.findall(r"^struct (Weights\w+)\s*\{", src, re.M))
    assert {c.kernel_weights for c in mk.ENGINES.values()} == structs


def test_a_class_refuses_another_formats_variant_before_any_gpu_work():
    with pytest.raises(MonolithError, match="reads bf16 weights; Fp8Engine runs fp8 variants"):
        mk.Fp8Engine(_fake_ckpt(), variant="bf16-stream")
    with pytest.raises(MonolithError, match="reads fp8 weights; Nvfp4Engine"):
        mk.Nvfp4Engine(_fake_ckpt(), variant="fp8-stream")


def test_unknown_variants_and_formats_are_refused_in_the_old_order(monkeypatch):
    with pytest.raises(MonolithError, match="unknown kernel variant"):
        mk.MegakernelEngine(_fake_ckpt(), variant="bf17-stream")
    bad = SimpleNamespace(shape=SimpleNamespace(num_layers=3))
    with pytest.raises(MonolithError, match="compiled for 28 layers"):  # the layer count first, as before
        mk.MegakernelEngine(bad, variant="bf17-stream")
    spec = {**kernel_spec.variant_spec("bf16-stream"), "weights": "int3"}
    monkeypatch.setattr(mk, "variant_spec", lambda name: spec)
    with pytest.raises(MonolithError, match="weight format 'int3' is not known to this engine"):
        mk.MegakernelEngine(_fake_ckpt(), variant="bf16-stream")
    with pytest.raises(MonolithError, match="weight format 'int3'"):
        mk.bytes_per_token(0, weights="int3")


def test_byte_models_are_the_format_classes():
    kv = mk.kv_bytes_per_position()
    for fmt, cls in mk.ENGINES.items():
        assert mk.bytes_per_token(0, weights=fmt) == cls.weight_bytes() + kv
        assert mk.time_model_bytes(fmt) == cls.time_model_bytes()
    assert mk.bytes_per_token(0) == mk.Bf16Engine.weight_bytes() + kv
    assert mk.Nvfp4Engine.weight_bytes() < mk.Fp8Engine.weight_bytes() < mk.Bf16Engine.weight_bytes()


def _bare(cls, variant):
    eng = object.__new__(cls)
    eng.spec = mk.variant_spec(variant)
    eng.stream = eng.spec.get("schedule") == "stream"
    eng.w = eng.embed = eng.codes = eng.row_scales = eng.embed_codes = eng.embed_scales = None
    eng.weights = {}
    return eng


POINTERS = ("w", "embed", "codes", "row_scales", "embed_codes", "embed_scales")


@pytest.mark.parametrize("variant", ["bf16-upstream", "bf16-stream"])
def test_bf16_uploads_the_layouts_pack_and_no_codes(ckpt2, monkeypatch, variant):
    monkeypatch.setattr(C, "NUM_LAYERS", 2)
    eng = _bare(mk.Bf16Engine, variant)
    assert eng._pack(ckpt2, variant, None) is None
    eng._upload(ckpt2, None, torch.device("cpu"))
    w, n = mk.PACKERS[eng.spec["layout"]](ckpt2.tensors, 2)
    assert torch.equal(eng.w, w) and torch.equal(eng.norms, n)
    assert torch.equal(eng.embed, ckpt2.tensors["model.embed_tokens.weight"].to(torch.bfloat16))
    assert [p for p in POINTERS if getattr(eng, p) is None] == ["codes", "row_scales", "embed_codes", "embed_scales"]


def _random_pack(cls, shapes, meta):
    """A 2-layer pack of random bytes / values in the format's tensor shapes: the upload moves
    them, so any reordering shows."""
    g = torch.Generator().manual_seed(7)
    t = {}
    for name, (shape, dt) in shapes.items():
        dtype = getattr(torch, dt)
        t[name] = (torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1
                   else torch.rand(shape, generator=g).to(dtype))
    return cls(path=None, meta=meta, tensors=t)


META = {"scheme": "s", "layout": "l", "layout_version": 1, "head": "fp8", "search": {"enabled": False},
        "source": {"sha256": "a" * 64}}


@pytest.mark.parametrize("variant", ["fp8-upstream", "fp8-stream"])
def test_fp8_uploads_codes_in_the_schedules_order(monkeypatch, variant):
    from monolith.quant import fp8_layout as F
    from monolith.quant import pack_fp8

    pk = _random_pack(pack_fp8.PackedFP8, pack_fp8._expected_shapes(2, "fp8"), META)
    monkeypatch.setattr(C, "NUM_LAYERS", 2)
    eng = _bare(mk.Fp8Engine, variant)
    eng._upload(None, pk, torch.device("cpu"))
    codes, scales = pk.tensors[F.T_LAYER_CODES], pk.tensors[F.T_LAYER_SCALES]
    if eng.stream:
        codes, scales = mk.stream_order_(codes.clone().view(-1), 2), mk.stream_order_scales_(scales.clone())
        assert not torch.equal(eng.codes, pk.tensors[F.T_LAYER_CODES].view(-1))  # the rows did move
    assert torch.equal(eng.codes, codes.reshape(-1)) and torch.equal(eng.row_scales, scales.reshape(-1))
    assert torch.equal(eng.embed_codes, pk.tensors[F.T_EMBED_CODES])
    assert [p for p in POINTERS if getattr(eng, p) is None] == ["w", "embed"]
    assert eng.weights["kind"] == "fp8-packed" and eng.weights["packed"] == "in memory"


def test_nvfp4_uploads_codes_then_block_scales_in_the_streaming_order(monkeypatch):
    from monolith.quant import nvfp4_layout as NL
    from monolith.quant import pack_nvfp4

    pk = _random_pack(pack_nvfp4.PackedNVFP4, pack_nvfp4._expected_shapes(2), META)
    monkeypatch.setattr(C, "NUM_LAYERS", 2)
    eng = _bare(mk.Nvfp4Engine, "nvfp4-stream")
    eng._upload(None, pk, torch.device("cpu"))
    codes, bscales = pk.tensors[NL.T_LAYER_CODES], pk.tensors[NL.T_LAYER_BSCALES]
    assert torch.equal(eng.codes, mk.stream_order_nvfp4(codes, bscales))
    assert eng.codes.numel() == 2 * (NL.LAYER_CODE_BYTES + NL.LAYER_BSCALE_BYTES)
    assert not torch.equal(eng.codes[:codes.numel()], codes.reshape(-1))  # the qkv and O rows did move
    assert torch.equal(eng.codes[codes.numel():].view(2, -1)[:, NL.BSCALE_OFFSETS["gateup"]:],
                       bscales[:, NL.BSCALE_OFFSETS["gateup"]:])  # gate/up and down stay
    assert torch.equal(eng.row_scales, pk.tensors[NL.T_LAYER_TSCALES].reshape(-1))
    assert [p for p in POINTERS if getattr(eng, p) is None] == ["w", "embed"]
    assert eng.weights["kind"] == "nvfp4-packed" and eng.weights["search"] is False
