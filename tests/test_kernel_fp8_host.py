"""fp8-upstream without a GPU (issue 12, items 3-4): the kernel's fp8 constants against the packer's
layout contract, the variant's registration, the engine's refusals (they all happen before the
extension is built), the in-memory pack, the per-format oracle and byte model of the harness."""
from types import SimpleNamespace

import pytest
import torch

from monolith import REPO_ROOT, kernel_spec
from monolith import config as C
from monolith import megakernel as mk
from monolith.bench import bytemodel
from monolith.bench.baselines import registry
from monolith.errors import MonolithError
from monolith.quant import fp8_layout as F
from monolith.quant import pack_fp8


def test_kernel_fp8_constants_are_the_layout_contract():
    k = kernel_spec.config_constants()
    assert (k["kScQKV"], k["kScO"], k["kScGateUp"], k["kScDown"], k["kLayerRows"]) == \
        (F.SC_QKV, F.SC_O, F.SC_GATEUP, F.SC_DOWN, F.LAYER_SCALES)
    # the codes use the bf16 buffer's element offsets as byte offsets (one byte per weight)
    assert (k["kOffQKV"], k["kOffO"], k["kOffGateUp"], k["kOffDown"], k["kLayerElems"]) == \
        (F.OFF_QKV, F.OFF_O, F.OFF_GATEUP, F.OFF_DOWN, F.LAYER_BYTES)
    assert k["kNormLayerElems"] == F.NORM_LAYER_ELEMS
    exp = mk.expected_constants()
    assert exp["layer_rows"] == F.LAYER_SCALES and exp["sc_down"] == F.SC_DOWN
    bindings = (REPO_ROOT / "kernel" / "bindings.cpp").read_text()
    for name in ("sc_qkv", "sc_o", "sc_gateup", "sc_down", "layer_rows"):
        assert f'd["{name}"]' in bindings, name  # check_constants compares them at engine start


def test_fp8_variant_is_registered_everywhere():
    v = mk.variant_spec("fp8-upstream")
    assert v["id"] == 3 and v["weights"] == "fp8" and v["schedule"] == "upstream"
    assert mk.FP8_LAYOUTS[v["layout"]] == F.LAYOUT
    assert mk.WAITS["fp8-upstream"] == mk.WAITS["bf16-upstream"]
    src = "".join((REPO_ROOT / "kernel" / f).read_text() for f in ("megakernel.cu", "decode_step.cuh"))  # + its kernels
    hdr = (REPO_ROOT / "kernel" / "megakernel.cuh").read_text()
    units = (REPO_ROOT / "kernel" / "variant_units.def").read_text()  # kernel_for is generated from it
    assert "kVariantFp8Upstream = 3" in hdr and "MONOLITH_VARIANT(kVariantFp8Upstream, Main, true)" in units
    assert "VariantCfg<kVariantFp8Upstream>" in src and "using Weights = WeightsE4M3;" in src
    # one flag set for all variants: compile_all.py compiles fp8-upstream with the others
    assert kernel_spec.build_flags("fp8-upstream") == kernel_spec.build_flags("bf16-upstream")
    assert registry.weights_of("megakernel-fp8-upstream") == "fp8"
    assert registry.weights_of("megakernel-fp8-upstream-xray") == "fp8"
    assert registry.weights_of("megakernel-bf16-upstream") == "bf16"
    assert registry.weights_of("reference-graph") == "bf16"
    assert registry.weights_of("megakernel-nonexistent") == "bf16"  # build() names the unknown variant
    assert registry.spec("megakernel-fp8-upstream").needs_cuda


def test_dequant_header_has_the_formats():
    text = (REPO_ROOT / "kernel" / "dequant.cuh").read_text()
    for needle in ("dot16_e4m3", "struct WeightsBf16", "struct WeightsE4M3", "kRowScale = true", "cvt.rn.f16x2.e4m3x2"):
        assert needle in text, needle


def test_fp8_bytes_and_time_model():
    fp8 = bytemodel.ByteModel.fp8()
    assert fp8.weight_bytes == F.bytes_per_token(C.NUM_LAYERS, "fp8")
    assert 598.0e6 < fp8.weight_bytes < 598.2e6  # NOTES.md, M3: 598.1 MB per token
    assert bytemodel.ByteModel.for_weights("bf16").weight_bytes == bytemodel.ByteModel.bf16().weight_bytes
    with pytest.raises(ValueError):
        bytemodel.ByteModel.for_weights("int3")  # (nvfp4 has one since nvfp4-stream: test_kernel_nvfp4_host.py)
    assert mk.bytes_per_token(0, weights="fp8") == F.bytes_per_token(C.NUM_LAYERS, "fp8") + mk.kv_bytes_per_position()
    tm = mk.time_model_bytes("fp8")
    assert C.NUM_LAYERS * tm["bytes_layer"] + tm["bytes_head"] + C.HIDDEN * 2 + C.HIDDEN + 4 == fp8.weight_bytes
    info = {"time_model": {**tm, "syncs_per_layer": 6}}
    p8 = bytemodel.predict_us(info, 128, 4.53, fp8)
    p16 = bytemodel.predict_us({"time_model": {**mk.time_model_bytes("bf16"), "syncs_per_layer": 6}}, 128, 4.53)
    assert p8["us"] < p16["us"] and p8["sync_us_total"] == p16["sync_us_total"]  # bytes halve, syncs do not


def _fake_ckpt(packed=None):
    return SimpleNamespace(shape=SimpleNamespace(num_layers=C.NUM_LAYERS), packed=packed, tensors={},
                           sha256=lambda: "a" * 64, describe=lambda: {})


def _meta(**kw):
    return {"format": F.FORMAT, "scheme": F.SCHEME, "layout": F.LAYOUT, "layout_version": F.LAYOUT_VERSION,
            "element": F.ELEMENT, "scale_dtype": F.SCALE_DTYPE, "head": "fp8", "num_layers": C.NUM_LAYERS,
            "source": {"sha256": "a" * 64}, **kw}


def test_engine_refusals_come_before_any_gpu_work():
    pk = pack_fp8.PackedFP8(path=None, meta=_meta(), tensors={})
    with pytest.raises(MonolithError, match="reads bf16 weights"):
        mk.MegakernelEngine(_fake_ckpt(pk), variant="bf16-upstream")
    with pytest.raises(MonolithError, match="reads bf16 weights"):
        mk.MegakernelEngine(_fake_ckpt(), variant="bf16-upstream", packed=pk)
    with pytest.raises(MonolithError, match="LM head"):
        mk.MegakernelEngine(_fake_ckpt(pack_fp8.PackedFP8(None, _meta(head="bf16"), {})), variant="fp8-upstream")
    with pytest.raises(MonolithError, match="layout"):
        mk.MegakernelEngine(_fake_ckpt(pack_fp8.PackedFP8(None, _meta(layout="colmajor-v9"), {})), variant="fp8-upstream")
    with pytest.raises(MonolithError, match="scheme"):
        mk.MegakernelEngine(_fake_ckpt(pack_fp8.PackedFP8(None, _meta(scheme="int8"), {})), variant="fp8-upstream")
    with pytest.raises(MonolithError, match="layers"):
        mk.MegakernelEngine(_fake_ckpt(pack_fp8.PackedFP8(None, _meta(num_layers=2), {})), variant="fp8-upstream")
    with pytest.raises(MonolithError, match="layers.codes"):  # right metadata, wrong tensors
        mk.MegakernelEngine(_fake_ckpt(pk), variant="fp8-upstream")
    other = pack_fp8.PackedFP8(None, _meta(source={"sha256": "b" * 64}), {})
    with pytest.raises(MonolithError, match="another checkpoint"):
        mk.MegakernelEngine(_fake_ckpt(), variant="fp8-upstream", packed=other)
    with pytest.raises(MonolithError, match="different sources"):
        mk.MegakernelEngine(_fake_ckpt(pk), variant="fp8-upstream", packed=other)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path after the fp8 checks")
def test_a_valid_fp8_pack_reaches_the_extension(monkeypatch):
    t = {name: torch.zeros(shape, dtype=getattr(torch, dt)) for name, (shape, dt) in
         pack_fp8._expected_shapes(C.NUM_LAYERS, "fp8").items()}
    pk = pack_fp8.PackedFP8(path=None, meta=_meta(), tensors=t)
    with pytest.raises(MonolithError, match="needs a CUDA GPU"):
        mk.MegakernelEngine(_fake_ckpt(pk), variant="fp8-upstream")


def test_packed_file_from_other_weights_is_refused(synth2, ckpt2, tmp_path):
    out = tmp_path / "pack"
    pack_fp8.pack_fp8(synth2, out, progress=False)
    from monolith.checkpoint import Checkpoint

    # a 28-layer checkpoint with another hash: load_packed_fp8 refuses the pack's source
    fake = Checkpoint(path=tmp_path, shape=SimpleNamespace(num_layers=C.NUM_LAYERS), config={}, tensors={},
                      tokenizer_path=None, _sha256="b" * 64)
    with pytest.raises(MonolithError, match="different checkpoint"):
        mk.MegakernelEngine(fake, variant="fp8-upstream", packed=out)


def test_in_memory_pack_equals_the_file_and_feeds_the_oracle(synth2, ckpt2, tmp_path):
    out = tmp_path / "pack"
    pack_fp8.pack_fp8(ckpt2, out, progress=False)
    f = pack_fp8.load_packed_fp8(out, model=ckpt2)
    m = pack_fp8.pack_in_memory(ckpt2)
    assert m.path is None and set(m.tensors) == set(f.tensors)
    for k in f.tensors:
        assert torch.equal(m.tensors[k], f.tensors[k]), k
    drop = {"created", "pack_seconds", "load_seconds"}
    assert {k: v for k, v in m.meta.items() if k not in drop} == {k: v for k, v in f.meta.items() if k not in drop}
    assert m.digest() == pack_fp8.pack_in_memory(ckpt2).digest() != f.digest()  # tensors' bytes vs the file's
    dq = registry.checkpoint_for("fp8", ckpt2)
    assert dq.weight_dtype == torch.float32 and dq.packed.path is None
    assert dq.describe()["path"].startswith("in memory") and dq.describe()["source"]["sha256"] == ckpt2.sha256()
    name = "model.layers.1.mlp.down_proj.weight"
    assert torch.equal(dq.tensors[name], f.dequantized(name))
    assert registry.checkpoint_for("bf16", ckpt2) is ckpt2


def test_suite_gates_each_engine_against_its_own_weights(monkeypatch, ckpt2):
    """run_suite builds one oracle per weight format and hands each engine the checkpoint (and byte
    model) of its format: the fp8 engine never meets the bf16 oracle."""
    from monolith.bench import suite

    seen = {"oracle": [], "measure": []}
    dq = SimpleNamespace(describe=lambda: {"kind": "fp8-dequantized", "scheme": F.SCHEME}, shape=ckpt2.shape)
    monkeypatch.setattr(suite, "load_inputs", lambda model: (ckpt2, None))
    monkeypatch.setattr(suite, "prompt_tokens", lambda name, tok: [[1, 2, 3]])
    monkeypatch.setattr(suite.envinfo, "collect", lambda device: {})
    monkeypatch.setattr(registry, "checkpoint_for", lambda fmt, ck: ck if fmt == "bf16" else dq)
    monkeypatch.setattr(registry, "oracle", lambda ck, dev: seen["oracle"].append(ck) or "orc-" + str(id(ck)))

    def oracle_runs(orc, prompts, n, progress=None):
        return SimpleNamespace(desc={"distinct_frac": 1.0, "repeat_frac": 0.0, "margin_median": 1.0}, runs=[orc])

    monkeypatch.setattr(suite.correctness, "oracle_runs", oracle_runs)

    def measure(name, spec, ck, tok, prompts, seq, oset, cfg, budget, bw, weights="bf16"):
        seen["measure"].append((name, ck, oset.runs[0], weights))
        return {"engine": name}

    monkeypatch.setattr(suite, "measure", measure)
    cfg = suite.SuiteConfig(engines=["megakernel-bf16-upstream", "megakernel-fp8-upstream"], device="cpu")
    doc = suite.run_suite(cfg)
    assert seen["oracle"] == [ckpt2, dq]
    (n1, c1, o1, w1), (n2, c2, o2, w2) = seen["measure"]
    assert (n1, c1, w1) == ("megakernel-bf16-upstream", ckpt2, "bf16") and o1 == f"orc-{id(ckpt2)}"
    assert (n2, c2, w2) == ("megakernel-fp8-upstream", dq, "fp8") and o2 == f"orc-{id(dq)}"
    assert "fp8" in doc["protocol"]["oracles"]


def test_engine_on_the_dequantized_checkpoint_runs_its_own_pack():
    """`monolith eval quality --fp8 DIR --engine megakernel-fp8-upstream` builds the engine from the
    dequantized checkpoint (registry.build(engine, dq)) with packed=None: the kernel then multiplies
    the very codes and scales that checkpoint's fp32 weights were dequantized from."""
    t = {name: torch.zeros(shape, dtype=getattr(torch, dt)) for name, (shape, dt) in
         pack_fp8._expected_shapes(C.NUM_LAYERS, "fp8").items()}
    pk = pack_fp8.PackedFP8(path=None, meta=_meta(), tensors=t)
    eng = object.__new__(mk.Fp8Engine)  # _pack alone: no extension, no GPU
    eng.spec, eng.weight_format = mk.variant_spec("fp8-upstream"), "fp8"
    assert eng._pack(_fake_ckpt(pk), "fp8-upstream", None) is pk
