"""scripts/compile_all.py without nvcc: variant-list parsing, ptxas log parsing, arch validation."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "compile_all", Path(__file__).resolve().parent.parent / "scripts" / "compile_all.py")
ca = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("compile_all", ca)  # dataclasses look their module up
_spec.loader.exec_module(ca)


def _write(tmp_path, obj) -> Path:
    p = tmp_path / "variants.json"
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_brief_format_plain_and_xray(tmp_path):
    p = _write(tmp_path, {"source": "kernel/megakernel.cu", "extra_flags": ["-std=c++17", "-O3"],
                          "variants": [{"name": "bf16-upstream", "defines": ["MONOLITH_RING_RELEASE=1"]},
                                       {"name": "fp8", "defines": ["MONOLITH_RING_RELEASE=512"]}]})
    ts = ca.load_variants(p, repo=tmp_path)
    assert [t.label for t in ts] == ["kernel bf16-upstream", "kernel bf16-upstream [xray]",
                                     "kernel fp8", "kernel fp8 [xray]"]
    assert ts[0].flags == ["-std=c++17", "-O3", "-DMONOLITH_RING_RELEASE=1"]
    assert ts[1].flags == ["-std=c++17", "-O3", "-DMONOLITH_RING_RELEASE=1", "-DMONOLITH_XRAY"]
    assert ts[0].source == tmp_path / "kernel/megakernel.cu"


def test_xray_source_and_dedupe(tmp_path):
    p = _write(tmp_path, {"source": "kernel/megakernel.cu", "xray_source": "kernel/megakernel_xray.cu",
                          "variants": [{"name": "bf16-upstream", "id": 0, "defines": []},
                                       {"name": "fp8", "id": 1}]})
    ts = ca.load_variants(p, repo=tmp_path)
    assert [t.label for t in ts] == ["kernel bf16-upstream+fp8", "kernel bf16-upstream+fp8 [xray]"]
    assert ts[1].source.name == "megakernel_xray.cu" and ts[1].flags == []


def test_missing_file_means_no_kernels(tmp_path):
    assert ca.load_variants(tmp_path / "nope.json") == []


@pytest.mark.parametrize("bad", [
    "{not json", {"variants": []}, {"source": "a.cu", "variants": []},
    {"source": "a.cu", "variants": [{"defines": []}]},
    {"source": "a.cu", "variants": [{"name": "x", "defines": "A=1"}]},
    {"source": "a.cu", "variants": [{"name": "x", "defines": ["-DA=1"]}]},
    {"source": "a.cu", "variants": [{"name": "x", "defines": ["MONOLITH_ATTN_FLASH=1"]}]},  # a retired knob
    {"source": "a.cu", "extra_flags": "-O3", "variants": [{"name": "x"}]},
    {"source": "a.cu", "extra_flags": ["O3"], "variants": [{"name": "x"}]},
    {"source": "a.cu", "variants": [{"name": "x", "id": 0}, {"name": "y", "id": 0}]},
    {"source": "a.cu", "variants": [{"name": "x"}, {"name": "x"}]},
])
def test_bad_variant_files(tmp_path, bad):
    with pytest.raises(ValueError):
        ca.load_variants(_write(tmp_path, bad), repo=tmp_path)


def test_repo_variants_file_parses():
    p = ca.REPO / "kernel" / "variants.json"
    if not p.exists():
        pytest.skip("no kernel/variants.json yet")
    ts = ca.load_variants(p)
    assert ts and all(t.source.suffix == ".cu" for t in ts)


def test_parse_ptxas():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4stepv' for 'sm_90a'
ptxas info    : Function properties for _Z4stepv
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 40960 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4tinyv' for 'sm_90a'
ptxas info    : Function properties for _Z4tinyv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 352 bytes cmem[0]
"""
    k = ca.parse_ptxas(log)
    assert k["_Z4stepv"] == {"regs": 128, "spill_st": 8, "spill_ld": 12, "smem": 40960}
    assert k["_Z4tinyv"]["regs"] == 8 and k["_Z4tinyv"]["spill_st"] == 0


def test_parse_ptxas_adds_a_callees_spills_and_a_clean_callee_hides_nothing():
    """ptxas prints an out-of-line device function's properties after the entry's Used line (the
    ninth session's MONOLITH_SLOT_LANDED build: producer_land); the old parser let that line's
    zero spills overwrite the entry's."""
    log = """ptxas info    : Compiling entry function '_Z4stepv' for 'sm_90a'
ptxas info    : Function properties for _Z4stepv
    64 bytes stack frame, 92 bytes spill stores, 132 bytes spill loads
ptxas info    : Used 96 registers, used 2 barriers, 64 bytes cumulative stack size, 32512 bytes smem
ptxas info    : Function properties for _Z4landPmPjj
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z4tinyv' for 'sm_90a'
ptxas info    : Function properties for _Z4tinyv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Function properties for _Z6calleev
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
"""
    k = ca.parse_ptxas(log)
    assert k["_Z4stepv"] == {"regs": 96, "spill_st": 92, "spill_ld": 132, "smem": 32512}
    assert k["_Z4tinyv"] == {"regs": 8, "spill_st": 4, "spill_ld": 4, "smem": 0}


def test_arch_validation_and_probe_list():
    assert ca.gencode("sm_120a") == "-gencode=arch=compute_120a,code=sm_120a"
    with pytest.raises(ValueError):
        ca.gencode("compute_90")
    names = {t.label for t in ca.probe_targets()}
    assert {"probe bandwidth", "probe barrier", "probe timers", "probe cvt"} <= names


def test_bad_arch_exits_2():
    assert ca.main(["--arch", "hopper", "--only", "probes"]) == 2


def _fake_nvcc(tmp_path) -> Path:
    """Stands in for nvcc: records its arguments, writes the object and ptxas-style info."""
    nv = tmp_path / "nvcc"
    nv.write_text("#!/bin/sh\n"
                  f'echo "$@" >> {tmp_path / "calls"}\n'
                  'while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n'
                  "echo \"ptxas info    : Compiling entry function '_Z4stepv' for 'sm_90a'\" >&2\n"
                  'echo "ptxas info    : Used 96 registers, used 1 barriers, 8 bytes smem" >&2\n')
    nv.chmod(0o755)
    return nv


def test_ci_compiles_with_the_loaders_flags(tmp_path, monkeypatch):
    """The flags CI compiles with are kernel_spec.build_flags(variant), the function the runtime
    loader calls; a flag added to variants.json reaches both (the loader used to read a key that
    did not exist, so CI and the running extension were configured differently)."""
    import torch

    from monolith import kernel_spec
    from monolith import megakernel as mk

    spec = json.loads((ca.REPO / "kernel" / "variants.json").read_text())
    spec["extra_flags"] = [*spec.get("extra_flags", []), "-DMONOLITH_TEST_FLAG=1"]
    vfile = _write(tmp_path, spec)
    monkeypatch.setattr(kernel_spec, "VARIANTS_FILE", vfile)
    name = spec["variants"][0]["name"]
    want = kernel_spec.build_flags(name)
    assert "-DMONOLITH_TEST_FLAG=1" in want and "-O3" in want

    # CI: the nvcc command line of the plain build
    nv = _fake_nvcc(tmp_path)
    assert ca.main(["--nvcc", str(nv), "--only", "kernels", "--arch", "sm_90a", "--variants", str(vfile)]) == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    plain = next(c.split() for c in calls if c.split()[-3].endswith("megakernel.cu"))
    assert plain[:len(want)] == want and plain[len(want)] == ca.gencode("sm_90a")

    # runtime: the flags handed to torch's extension builder (no GPU: the builder is a stand-in)
    seen = {}

    class Ext:
        pass

    def fake_load(**kw):
        seen.update(kw)
        return Ext()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mk, "_arch_flags", lambda: [ca.gencode("sm_90a")])
    monkeypatch.setattr(mk, "_EXT", {})
    monkeypatch.setattr("torch.utils.cpp_extension.load", fake_load)
    monkeypatch.setattr(mk, "REPO_ROOT", tmp_path)  # build/ext-<tag> goes to tmp
    ext = mk.load_extension(name)
    assert seen["extra_cuda_cflags"] == [*want, ca.gencode("sm_90a")] == ext.build_info["nvcc_flags"]
    assert [p.rsplit("/", 1)[-1] for p in seen["sources"]][1:] == [Path(spec["source"]).name, Path(spec["xray_source"]).name]


def test_labels_keep_brackets_and_tables_keep_their_width(tmp_path, capsys):
    """"[xray]" is text, not rich markup, and a table written to a pipe is not cut to 80 columns."""
    nv = _fake_nvcc(tmp_path)
    assert ca.main(["--nvcc", str(nv), "--only", "kernels", "--arch", "sm_90a,sm_120a"]) == 0
    out = capsys.readouterr().out
    # one X-ray target per translation unit: the main source's, the sm_120 configuration's, the tc one's,
    # the k-vector tc one's
    assert out.count("[xray] (sm_90a)") == 4 and "[xray]" in out.split("nvcc compile")[1]
    assert "…" not in out


def test_spill_budget_counts_plain_kernels_only():
    k = lambda st: {"f": {"regs": 96, "spill_st": st, "spill_ld": st, "smem": 0}}  # noqa: E731
    outs = [ca.Outcome("kernel a+b", "sm_90a", True, 1.0, k(0)),
            ca.Outcome("kernel a+b [xray]", "sm_90a", True, 1.0, k(48)),  # diagnostic: not counted
            ca.Outcome("kernel a+b", "sm_120a", True, 1.0, k(24)),
            ca.Outcome("probe x", "sm_120a", True, 1.0, k(8))]  # probes: not counted
    assert ca.parse_budget("sm_90a=0, sm_120a=24") == {"sm_90a": 0, "sm_120a": 24}
    assert ca.over_budget(outs, {"sm_90a": 0, "sm_120a": 24}) == []
    assert ca.over_budget(outs, {"sm_90a": 0, "sm_120a": 16}) == [("sm_120a", 24, 16)]
    outs[0] = ca.Outcome("kernel a+b", "sm_90a", True, 1.0, k(4))
    assert ca.over_budget(outs, {"sm_90a": 0}) == [("sm_90a", 4, 0)]
    assert ca.over_budget(outs, {}) == []
    for bad in ("sm_90a", "sm_90a=x", "gfx90a=0"):
        with pytest.raises(ValueError):
            ca.parse_budget(bad)


def test_arch_ptxas_flags_reach_kernels_not_probes(tmp_path, monkeypatch):
    """sm_120a's kernel builds take kernel_spec.ARCH_PTXAS_FLAGS (the register-usage level that halves
    its spills), in CI's compile and in the loader alike; probes and sm_90a (the measured arch) do not."""
    import torch

    from monolith import kernel_spec
    from monolith import megakernel as mk

    assert kernel_spec.arch_flags("sm_90a") == [ca.gencode("sm_90a")]
    assert kernel_spec.arch_flags("sm_120a") == [ca.gencode("sm_120a"), "-Xptxas", "--register-usage-level=0"]
    with pytest.raises(Exception, match="bad arch"):
        kernel_spec.arch_flags("gfx90a")
    nv = _fake_nvcc(tmp_path)
    assert ca.main(["--nvcc", str(nv), "--arch", "sm_90a,sm_120a"]) == 0
    calls = [c.split() for c in (tmp_path / "calls").read_text().splitlines()]
    kernels = [c for c in calls if any(a.endswith("megakernel.cu") or a.endswith("megakernel_xray.cu") for a in c)]
    probes = [c for c in calls if any("/probes/" in a for a in c)]
    assert kernels and probes
    for c in kernels:
        assert ("--register-usage-level=0" in c) == (ca.gencode("sm_120a") in c)
    assert not any("--register-usage-level=0" in c for c in probes)
    for cap, arch in (((9, 0), "sm_90a"), ((12, 0), "sm_120a")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda cap=cap: cap)
        assert mk._arch_flags() == kernel_spec.arch_flags(arch)
