"""NVFP4 sensitivity sweep, its map and the mixed nvfp4/fp8 pack (issue 14, item 2): quant/sensitivity.py,
the mixed side of quant/pack_nvfp4.py and `monolith pack --sensitivity / --map / --fp8-kinds`. CPU only,
on the 2-layer synthetic checkpoint; the sweep's bookkeeping with tiny fake engines, its figures
against eval/quality.py with the real fp32 reference."""
import dataclasses
import json

import pytest
import torch
from harness_fakes import FakeEngine, oracle_logits
from typer.testing import CliRunner

from monolith.bench.baselines import registry
from monolith.cli import app
from monolith.errors import MonolithError
from monolith.eval import quality
from monolith.quant import fp8_layout as F8
from monolith.quant import nvfp4_layout as L
from monolith.quant import pack_fp8 as P8
from monolith.quant import pack_nvfp4 as NV
from monolith.quant import sensitivity as S

MIXED = ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight",
         "model.layers.1.mlp.up_proj.weight")


@pytest.fixture(scope="module")
def nv2(ckpt2):
    return NV.pack_in_memory(ckpt2, search=False)


@pytest.fixture(scope="module")
def f82(ckpt2):
    return P8.pack_in_memory(ckpt2)


# ---- units and their checkpoints ----------------------------------------------------------------
def test_units_cover_every_projection_once():
    for per_layer, count in ((False, 7), (True, 14)):
        us = S.sweep_units(2, per_layer)
        assert len(us) == count
        mats = [m for u in us for m in u.matrices()]
        assert sorted(mats) == sorted(NV.projection_names(2))
        assert sum(u.weights() for u in us) == 2 * F8.LAYER_BYTES        # one byte per weight in fp8
    assert [u.name for u in S.sweep_units(2)] == list(L.TSCALE_ORDER)
    assert S.sweep_units(2, True)[8].name == "L1.k" and S.sweep_units(2, True)[8].layers == (1,)


# ---- the sweep's bookkeeping, with fake engines -------------------------------------------------
class CkptEngine(FakeEngine):
    """FakeEngine whose logits move with the checkpoint: each tensor that is not the original object
    adds its own fixed perturbation (a unit's KL grows with what it replaced). Counts its calls."""

    def __init__(self, ckpt, orig):
        super().__init__()
        self.ckpt = ckpt
        names = sorted(orig.tensors)
        self.d = sum(1 + names.index(n) for n in names if ckpt.tensors[n] is not orig.tensors[n])
        self.counts = {"logits": 0, "prefill": 0, "decode": 0, "teacher_forced": 0}
        for m in self.counts:
            setattr(self, f"_{m}", self._counted(m, getattr(self, f"_{m}")))

    def _counted(self, m, f):
        def g(*a):
            self.counts[m] += 1
            return f(*a)
        return g

    def _step(self, tok, in_decode=False):
        pos = len(self.hist)
        self.hist.append(int(tok))
        self.position = len(self.hist)
        noise = torch.randn(32, generator=torch.Generator().manual_seed(pos + 1))
        return oracle_logits(int(tok), pos) + 0.01 * self.d * noise


TEXT = [(7 * i + 3) % 32 for i in range(40)]
PROMPTS = [[1, 2, 3], [4, 5]]


@pytest.fixture(scope="module")
def fake_sweep(ckpt2, nv2, f82):
    built = []

    def build(c):
        built.append(CkptEngine(c, ckpt2))
        return built[-1]

    doc = S.sweep(ckpt2, device="cpu", positions=9, context=4, stride=4, prompts=2, agree_tokens=3, text_tokens=TEXT,
                  quality_prompts=PROMPTS, search=False, fp8_fraction=0.25, kl_budget="none", build=build,
                  progress=False, nvfp4_pack=nv2, fp8_pack=f82)
    return doc, built


def test_the_reference_runs_once_for_all_units(fake_sweep, ckpt2):
    doc, built = fake_sweep
    assert len(built) == 1 + 7 + 4                       # reference, 7 kinds, 4 endpoints (mixed measured)
    refs = [e for e in built if e.ckpt is ckpt2]
    assert len(refs) == 1 and built[0] is refs[0]       # built once, on the original weights, first
    windows = len(S.plan_windows(len(TEXT), 4, 4, 9))
    assert windows == 3                                  # 3 + 3 + 3 scored positions of windows of 4
    assert refs[0].counts == {"logits": windows, "prefill": 2, "decode": 2, "teacher_forced": 0}
    for e in built[1:]:                                  # every unit: its own pass, never the reference's
        assert e.counts == {"logits": windows, "prefill": 2, "decode": 0, "teacher_forced": 2}
    assert doc["reference"]["positions"] == 9 and doc["reference"]["steps"] == 9 + (2 + 2) + (3 + 2)
    assert doc["protocol"]["steps_per_pass"] == doc["reference"]["steps"] and doc["protocol"]["passes"] == 12
    assert doc["status"] == "complete" and doc["schema"] == S.SCHEMA


def test_a_units_checkpoint_differs_from_the_original_exactly_in_its_matrices(fake_sweep, ckpt2, nv2):
    doc, built = fake_sweep
    units = S.sweep_units(2)
    for u, e in zip(units, built[1:8], strict=True):
        c = e.ckpt
        assert c.label == u.name and c.weight_dtype == torch.float32
        swapped = {n for n in ckpt2.tensors if c.tensors[n] is not ckpt2.tensors[n]}  # the rest: the originals
        assert swapped == set(u.matrices()), u.name
        for n in u.matrices():
            assert torch.equal(c.tensors[n], nv2.dequantized(n)), n
            assert not torch.equal(c.tensors[n], ckpt2.tensors[n].float()), n
    head = built[8].ckpt
    assert {n for n in ckpt2.tensors if head.tensors[n] is not ckpt2.tensors[n]} == {S.EMBED}
    # the fp32 reference on a unit checkpoint holds the original bf16 values of everything else
    orc = registry.build("reference-fp32", built[1].ckpt, "cpu")
    assert torch.equal(orc.layers[0]["wk"], ckpt2.tensors["model.layers.0.self_attn.k_proj.weight"].float())
    assert torch.equal(orc.layers[0]["wq"], nv2.dequantized("model.layers.0.self_attn.q_proj.weight"))


def test_the_sweeps_doc_and_map(fake_sweep, tmp_path):
    doc, built = fake_sweep
    units = {u["name"]: u for u in doc["units"]}
    assert list(units) == list(L.TSCALE_ORDER)
    m = doc["map"]
    ranked = sorted(units.values(), key=lambda u: -u["kl"])
    assert m["ranking"] == [u["name"] for u in ranked] and [units[n]["rank"] for n in m["ranking"]] == list(range(1, 8))
    assert m["fp8_units"][0] == ranked[0]["name"] and m["stopped_by"] == "fp8_fraction"
    assert m["fp8_weight_fraction"] <= 0.25 and set(m["fp8"]) == {x for n in m["fp8_units"] for x in
                                                                   S.Unit(n, n, (0, 1)).matrices()}
    assert sum(f == "fp8" for f in m["formats"].values()) == len(m["fp8"]) and len(m["formats"]) == 14
    assert m["bytes_per_token"] == L.bytes_per_token(2, m["fp8"]) > m["bytes_per_token_all_nvfp4"]
    e = doc["endpoints"]
    assert list(e) == list(S.ENDPOINTS) and e["mixed"]["kl"] > 0
    mixed = built[-1].ckpt                                # the proposed map, packed and dequantized
    assert mixed.packed.fp8_projections == tuple(m["fp8"])
    assert all(u["format"] == ("fp8" if u["name"] in m["fp8_units"] else "nvfp4") for u in doc["units"])
    png = S.plot(doc, tmp_path / "s.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


# ---- the figures are eval/quality.py's ----------------------------------------------------------
def test_measure_equals_the_quality_protocol_functions(ckpt2, nv2):
    """Real fp32 reference: the cached pass gives the KL, perplexity ratio and agreement that
    quality.perplexity_kl and quality.agreement (teacher-forced) give for the same pair, including
    windows whose first scored row is not 0 (stride < context) and a truncated last window."""
    text = [(977 * i + 11) % 5000 + 100 for i in range(12)]
    prompts = [[9707, 1879]]
    ref = registry.build("reference-fp32", ckpt2, "cpu")
    eng = registry.build("reference-fp32", NV.dequantized_checkpoint(nv2, ckpt2), "cpu")
    plan = S.plan_windows(len(text), 4, 2, 5)
    assert plan == [(0, 0, 3), (2, 1, 3)]                # 3 + 2 positions: window 2 scores rows 1..2
    rp = S.reference_pass(ref, text, prompts, positions=5, context=4, stride=2, agree_tokens=3)
    got = S.measure(eng, rp)
    want = quality.perplexity_kl(ref, eng, text, context=4, stride=2, kl_positions=5, max_positions=5)
    ag = quality.agreement(ref, eng, prompts, n=3, free_running=False)
    assert got["kl_positions"] == want["kl_positions"] == 5
    assert got["kl"] == pytest.approx(want["kl"], rel=1e-12) and got["kl"] > 0
    assert got["ppl_ratio"] == pytest.approx(want["ppl_ratio"], rel=1e-6)   # quality.py exps in fp32
    assert rp.ppl == pytest.approx(want["ref_ppl"], rel=1e-6)
    assert got["agreement"] == ag["agreement"] and got["agreement_tokens"] == ag["agreement_tokens"] == 3


# ---- the map rule -------------------------------------------------------------------------------
def _units(kls: dict, per_layer=False):
    return [{"name": u.name, "kind": u.kind, "layers": list(u.layers), "weights": u.weights(), "kl": kls[u.name]}
            for u in S.sweep_units(2, per_layer)]


def test_map_keeps_the_highest_kl_units_fp8_within_the_caps():
    kl = {"up": 0.9, "q": 0.8, "k": 0.7, "v": 0.6, "o": 0.5, "gate": 0.4, "down": 0.3}
    m = S.propose_map(_units(kl), 2, fp8_fraction=0.3)
    # up (20 %) fits; q (13.3 %) would make 33.3 %: skipped; k (6.7 %) fits (26.7 %); nothing else does
    assert m["fp8_units"] == ["up", "k"] and m["stopped_by"] == "fp8_fraction"
    assert m["skipped_for_fraction"] == ["q", "v", "o", "gate", "down"]
    assert m["fp8_weight_fraction"] == pytest.approx(4 / 15) and m["predicted_kl"] == pytest.approx(2.6)
    assert m["ranking"] == ["up", "q", "k", "v", "o", "gate", "down"] and m["head"] == "fp8"
    assert m["fp8"] == sorted(f"model.layers.{i}.{s}" for i in (0, 1)
                              for s in ("mlp.up_proj.weight", "self_attn.k_proj.weight"))
    assert m["formats"]["model.layers.1.mlp.up_proj.weight"] == "fp8"
    assert m["formats"]["model.layers.1.self_attn.q_proj.weight"] == "nvfp4"
    m = S.propose_map(_units(kl), 2, fp8_fraction=1.0, kl_budget=2.5)   # left: 4.2 -> 3.3 -> 2.5 after up, q
    assert m["fp8_units"] == ["up", "q"] and m["stopped_by"] == "kl_budget"
    m = S.propose_map(_units(kl), 2, fp8_fraction=1.0, kl_budget=5.0)   # met before any unit
    assert m["fp8_units"] == [] and m["fp8"] == [] and set(m["formats"].values()) == {"nvfp4"}
    m = S.propose_map(_units(kl), 2, fp8_fraction=1.0)
    assert len(m["fp8_units"]) == 7 and m["stopped_by"] == "every unit is FP8" and m["predicted_kl"] == 0
    m = S.propose_map(_units(kl), 2, fp8_fraction=0.0)
    assert m["fp8_units"] == [] and m["stopped_by"] == "fp8_fraction"
    pl = {u.name: 0.01 * (i + 1) for i, u in enumerate(S.sweep_units(2, True))}  # L1.down is the largest
    m = S.propose_map(_units(pl, True), 2, fp8_fraction=0.1)                     # L1.down is exactly 10 %
    assert m["fp8_units"] == ["L1.down"] and m["fp8"] == ["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(MonolithError, match="0..1"):
        S.propose_map(_units(kl), 2, fp8_fraction=1.5)
    with pytest.raises(MonolithError, match="cover"):
        S.propose_map(_units(kl)[:6], 2)
    assert S.resolve_kl_budget("fp8", {"all-fp8": {"kl": 0.7}})[0] == 0.7
    assert S.resolve_kl_budget("none", {})[0] is None and S.resolve_kl_budget("0.02", {})[0] == 0.02
    for bad in ("lots", "-1"):
        with pytest.raises(MonolithError, match="--kl-budget"):
            S.resolve_kl_budget(bad, {})


# ---- the mixed pack -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed2(synth2, tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed") / "pack"
    meta = NV.pack_nvfp4(synth2, out, search=False, progress=False, fp8=MIXED, map_source={"source": "test"})
    return out, meta


def test_mixed_pack_round_trips_bit_for_bit(mixed2, ckpt2, nv2, f82):
    out, meta = mixed2
    p = NV.load_packed_nvfp4(out, model=ckpt2)
    assert meta["layout_version"] == 2 and p.fp8_projections == tuple(sorted(MIXED))
    assert meta["mixed"]["fp8_kinds"] == ["q"] and meta["mixed"]["per_kind"] is False
    assert meta["mixed"]["map"] == {"source": "test"} and meta["mixed"]["fp8_layout"] == "rowmajor-v1"
    for name in NV.projection_names(2):
        f = p.meta["formats"][name]
        if name in MIXED:   # fp8: the fp8 packer's codes, scales and dequantized values, at rowmajor-v1's place
            assert f["format"] == F8.SCHEME and f["tensor"] == L.T_FP8_CODES
            assert f == {**f82.meta["formats"][name], "tensor": L.T_FP8_CODES, "scale_tensor": L.T_FP8_SCALES}
            c, s = p.fp8_matrix(name)
            c8, s8 = f82.matrix(name)
            assert torch.equal(c, c8) and torch.equal(s, s8), name
            assert torch.equal(p.dequantized(name), f82.dequantized(name)), name
            # its nvfp4 rows are zero and its tensor scale 0.0
            nf = nv2.meta["formats"][name]
            view = PackedView(p, nf)
            assert not view.codes.any() and not view.bscales.any() and view.g == 0.0
        else:
            assert f == nv2.meta["formats"][name]
            assert torch.equal(p.dequantized(name), nv2.dequantized(name)), name
            c, s, g = p.matrix(name)
            c2, s2, g2 = nv2.matrix(name)
            assert torch.equal(c, c2) and torch.equal(s, s2) and g == g2
    assert torch.equal(p.dequantized(S.EMBED), f82.dequantized(S.EMBED))
    for k in ("norms", "final_norm", "embed.codes", "embed.scales"):
        assert torch.equal(p.tensors[k], nv2.tensors[k]), k
    # the fp8 section is zero outside the fp8 matrices: exactly the fp8 packer's bytes there
    fp8_bytes = sum(f82.matrix(n)[0].numel() for n in MIXED)
    assert int((p.tensors[L.T_FP8_CODES] != 0).sum()) <= fp8_bytes
    assert int((p.tensors[L.T_FP8_SCALES] != 0).sum()) == sum(f82.matrix(n)[1].numel() for n in MIXED)
    assert p.bytes_per_token() == L.bytes_per_token(2, MIXED) == L.bytes_per_token(2) + sum(
        r * k // 2 - r * k // 16 + 4 * r for r, k in ((2048, 1024), (2048, 1024), (3072, 1024)))
    dq = NV.dequantized_checkpoint(out, ckpt2)
    assert torch.equal(dq.tensors[MIXED[2]], f82.dequantized(MIXED[2]))
    d = dq.describe()
    assert d["layout_version"] == 2 and d["fp8_projections"] == 3 and d["fp8_kinds"] == ["q"]
    assert "layers.fp8.codes" not in nv2.tensors and nv2.meta["layout_version"] == 1  # all-nvfp4 stays v1


@dataclasses.dataclass
class PackedView:
    """A matrix's rows in the nvfp4 buffers of pack `p`, by an all-nvfp4 format-map entry `f`."""
    p: object
    f: dict

    def __post_init__(self):
        f, t = self.f, self.p.tensors
        buf, sbuf = t[L.T_LAYER_CODES][f["layer"]], t[L.T_LAYER_BSCALES][f["layer"]]
        self.codes = buf.as_strided((f["rows"], f["cols"] // 2), (f["row_stride_bytes"], 1),
                                    buf.storage_offset() + f["byte_offset"])
        self.bscales = sbuf.as_strided((f["rows"], f["cols"] // 16), (f["bscale_row_stride"], 1),
                                       sbuf.storage_offset() + f["bscale_offset"])
        self.g = float(t[L.T_LAYER_TSCALES][f["layer"], f["tscale_index"]])


def test_mixed_pack_refusals(mixed2, ckpt2, tmp_path, synth2):
    with pytest.raises(MonolithError, match="no projection of this 2-layer checkpoint"):
        NV.pack_in_memory(ckpt2, search=False, fp8=["model.layers.2.self_attn.q_proj.weight"])
    with pytest.raises(MonolithError, match="norms stay bf16"):
        NV.check_fp8_names(["model.layers.0.input_layernorm.weight"], 2)
    with pytest.raises(MonolithError, match="LM head/embedding is FP8"):
        NV.check_fp8_names([S.EMBED], 2)
    with pytest.raises(MonolithError, match="kinds are q, k, v, o, gate, up, down"):
        NV.fp8_names_for_kinds("q,qq", 2)
    assert len(NV.fp8_names_for_kinds("q, down", 2)) == 4
    # the header: version 2 needs its mixed section, version 1 must not have one
    out, meta = mixed2
    for change, msg in (({"mixed": None}, "without a 'mixed' section"),
                        ({"layout_version": 1}, "layout_version 1 with a 'mixed' section"),
                        ({"mixed": {**meta["mixed"], "fp8": ["model.layers.7.mlp.up_proj.weight"]}},
                         "its mixed map names 'model.layers.7.mlp.up_proj.weight'"),
                        ({"mixed": {**meta["mixed"], "fp8_layout": "rowmajor-v9"}}, "fp8 layout/scheme"),
                        ({"layout_version": 3}, "layout_version 3 is not known")):
        m = {k: v for k, v in {**meta, **change}.items() if v is not None}
        with pytest.raises(MonolithError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            NV.check_meta(m, "f")
    # a map that disagrees with the zero markers (an nvfp4 matrix with fp8 scales) is refused on load
    p = NV.load_packed_nvfp4(out)
    bad = dict(p.tensors)
    bad[L.T_LAYER_TSCALES] = p.tensors[L.T_LAYER_TSCALES].clone()
    bad[L.T_LAYER_TSCALES][0, 0] = 1.0                   # layer 0's q is fp8
    with pytest.raises(MonolithError, match="is FP8 in the map but has nvfp4 tensor scale 1.0"):
        NV._check_markers(NV.PackedNVFP4(path=None, meta=p.meta, tensors=bad), "f")
    bad = dict(p.tensors)
    bad[L.T_FP8_SCALES] = p.tensors[L.T_FP8_SCALES].clone()
    bad[L.T_FP8_SCALES][1, F8.SC_DOWN] = 0.5
    with pytest.raises(MonolithError, match="down_proj.weight is nvfp4 in the map but has fp8 row scales"):
        NV._check_markers(NV.PackedNVFP4(path=None, meta=p.meta, tensors=bad), "f")
    # the old loader's refusal of a map that is not the layout's stays
    from safetensors.torch import save_file
    meta2 = {**meta, "mixed": {**meta["mixed"], "fp8": [MIXED[0]]}}
    (tmp_path / "m").mkdir()
    save_file(p.tensors, str(tmp_path / "m" / L.FILE), metadata={L.META_KEY: json.dumps(meta2)})
    with pytest.raises(MonolithError, match="format map differs"):
        NV.load_packed_nvfp4(tmp_path / "m")


def test_load_map_refusals(ckpt2, tmp_path):
    def write(doc, name="m.json"):
        (tmp_path / name).write_text(json.dumps(doc))
        return tmp_path / name

    q0 = "model.layers.0.self_attn.q_proj.weight"
    fp8, src = S.load_map(write({"formats": {q0: "fp8", "model.layers.1.mlp.up_proj.weight": "nvfp4-e2m1-b16-e4m3",
                                             S.EMBED: "fp8"}}), ckpt2)
    assert fp8 == (q0,) and src["schema"] == "formats" and len(src["sha256"]) == 64
    for doc, msg in (({"formats": {q0: "int4"}}, "has format 'int4'"),
                     ({"formats": {S.EMBED: "nvfp4"}}, "LM head/embedding stays FP8"),
                     ({"formats": {"model.layers.9.self_attn.q_proj.weight": "fp8"}}, "no projection of this 2-layer"),
                     ({"nothing": 1}, "no 'formats' object"),
                     ({"schema": "other/1"}, "schema 'other/1' is not known"),
                     ({"schema": S.SCHEMA, "status": "partial"}, "not complete"),
                     ({"schema": S.SCHEMA, "status": "complete", "weights": {"sha256": "0" * 64}},
                      "measured on other weights")):
        with pytest.raises(MonolithError, match=msg):
            S.load_map(write(doc), ckpt2)
    with pytest.raises(MonolithError, match="file not found"):
        S.load_map(tmp_path / "none.json", ckpt2)


# ---- the CLI ------------------------------------------------------------------------------------
def test_cli_sensitivity_then_pack_with_its_map(synth2, tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text("The river rises in the hills and runs to the sea past the old town. " * 2)
    out = tmp_path / "s.json"
    r = CliRunner().invoke(app, ["pack", "--sensitivity", "--model", str(synth2), "--out", str(out), "--device", "cpu",
                                 "--positions", "3", "--context", "4", "--prompts", "0", "--text", str(txt),
                                 "--no-search"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    doc = json.loads(out.read_text())
    assert doc["schema"] == S.SCHEMA and doc["status"] == "complete" and len(doc["units"]) == 7
    assert doc["weights"]["num_layers"] == 2 and len(doc["weights"]["sha256"]) == 64
    assert doc["protocol"]["kl_positions"] == 3 and doc["protocol"]["nvfp4"]["search"] is False
    assert all(u["agreement"] is None and u["kl"] > 0 for u in doc["units"])
    assert out.with_suffix(".png").is_file() and doc["plot"] == str(out.with_suffix(".png"))
    assert "map: FP8" in r.output and "monolith pack --format nvfp4 --map" in r.output
    pk = tmp_path / "p"
    r = CliRunner().invoke(app, ["pack", "--format", "nvfp4", "--map", str(out), "--model", str(synth2),
                                 "--out", str(pk), "--no-search"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    p = NV.load_packed_nvfp4(pk, model=synth2)
    assert list(p.fp8_projections) == doc["map"]["fp8"] and p.meta["mixed"]["map"]["schema"] == S.SCHEMA
    assert p.meta["mixed"]["map"]["measured_kl"] == doc["endpoints"]["mixed"]["kl"]
    assert "layout_version 2" in r.output


@pytest.mark.parametrize("args,msg", [
    (["--per-layer"], "--per-layer apply to --sensitivity only"),
    (["--format", "fp8", "--positions", "3"], "--positions apply to --sensitivity only"),
    (["--sensitivity", "--format", "fp8"], "--format fp8 does not apply"),
    (["--sensitivity", "--fp8-kinds", "q"], "--fp8-kinds belongs to packing"),
    (["--format", "fp8", "--fp8-kinds", "q"], "apply to --format nvfp4 only"),
    (["--format", "nvfp4", "--fp8-kinds", "q", "--map", "x.json"], "not both"),
    (["--format", "nvfp4", "--fp8-kinds", "q,zz"], "kinds are q, k, v"),
    ([], "--format is required"),
])
def test_cli_refusals(synth2, tmp_path, args, msg):
    r = CliRunner().invoke(app, ["pack", "--model", str(synth2), "--out", str(tmp_path / "o"), *args])
    assert isinstance(r.exception, MonolithError) and msg in str(r.exception), r.output + repr(r.exception)
    assert not (tmp_path / "o").exists()


def test_format_summary_names_each_kinds_format(mixed2, nv2, ckpt2):
    """The one-line-per-kind map that results files quote (describe()'s format_map): every kind
    NVFP4 in an all-NVFP4 pack; in MIXED (q in both layers, up in layer 1 only) q is fp8, up mixed."""
    full = NV.format_summary(nv2.meta)
    assert full == {"layers": {k: "nvfp4" for k in NV.KINDS}, "embedding_lm_head": F8.SCHEME, "norms": "bf16",
                    "fp8_projections": 0}
    _, meta = mixed2
    got = NV.format_summary(meta)
    assert got["layers"] == {**{k: "nvfp4" for k in NV.KINDS}, "q": "fp8", "up": "mixed"}
    assert got["fp8_projections"] == 3
    assert NV.dequantized_checkpoint(nv2, ckpt2).describe()["format_map"] == full
