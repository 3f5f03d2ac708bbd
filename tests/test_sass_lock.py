"""scripts/sass_lock.py and compile_all.py --sass-lock without nvcc or cuobjdump: the SASS listing's
parsing and normalisation, the lock file's format, and the comparison that `make test-cuda` fails on."""
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return sys.modules[name]


sl = _load("sass_lock")
ca = _load("compile_all")

# The shape of `cuobjdump -sass` on a host object: a fatbin header, then per function its name,
# .headerflags, and instructions as /*address*/ text /* first encoding word */ + a line holding the second.
LISTING = """
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_90a
\t\tFunction : _Z11decode_stepILi0EEv10StepParams
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                       /* 0x00000a00ff017b82 */
                                                                                                /* 0x000fe40000000800 */
        //## File "/work/main/kernel/megakernel.cu", line 936
        /*0010*/                   S2R R0, SR_TID.X ;                                           /* 0x0000000000007919 */
                                                                                                /* 0x000e220000002100 */
        /*0020*/                   EXIT ;                                                       /* 0x000000000000794d */
                                                                                                /* 0x000fea0003800000 */
\t\t..........


\t\tFunction : _Z16decode_step_longILi2EEv10StepParams
\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                                       /* 0x00000a0000017a02 */
                                                                                                /* 0x000fe40000000f00 */
        /*0010*/                   BRA 0x10;                                                    /* 0xfffffffc00fc7947 */
                                                                                                /* 0x000fc0000383ffff */
\t\t..........
"""


def test_parse_counts_and_ignores_addresses_and_line_info():
    f = sl.parse_sass(LISTING)
    assert set(f) == {"_Z11decode_stepILi0EEv10StepParams", "_Z16decode_step_longILi2EEv10StepParams"}
    assert f["_Z11decode_stepILi0EEv10StepParams"][0] == 3 and f["_Z16decode_step_longILi2EEv10StepParams"][0] == 2
    assert all(len(d) == sl.HASH_DIGITS for _, d in f.values())
    # other addresses, other line info, other spacing: the same hashes
    moved = (LISTING.replace("/*0010*/", "/*0a10*/").replace("line 936", "line 700")
             .replace("S2R R0, SR_TID.X ;   ", "S2R   R0,  SR_TID.X ;"))
    moved = moved.replace("        //## File", "        //## File \"x.cu\", line 3\n        //## File")
    assert sl.parse_sass(moved) == f


@pytest.mark.parametrize("edit", [
    ("S2R R0, SR_TID.X", "S2R R0, SR_TID.Y"),  # another operand
    ("0x000e220000002100", "0x000e240000002100"),  # the same text, other control bits (stall/barrier)
    ("        /*0020*/                   EXIT ;", "        /*0020*/  NOP ;  /* 0x0000000000007918 */\n"
     "                                                                                                /* 0x000fc00000000000 */\n"
     "        /*0030*/                   EXIT ;"),  # one more instruction
])
def test_an_instruction_change_moves_only_its_functions_hash(edit):
    f = sl.parse_sass(LISTING)
    g = sl.parse_sass(LISTING.replace(*edit))
    name = "_Z11decode_stepILi0EEv10StepParams"
    assert g[name][1] != f[name][1]
    other = "_Z16decode_step_longILi2EEv10StepParams"
    assert g[other] == f[other]


@pytest.mark.parametrize("bad", [
    "", "Fatbin elf code:\narch = sm_90a\n",  # no function
    LISTING.replace("                                                                                                /* 0x000fea0003800000 */\n", ""),
    LISTING + LISTING.split("\t\t..........")[0].split("code for sm_90a")[1],  # a function twice
    LISTING.replace("EXIT ;                                                       /* 0x000000000000794d */", "EXIT ;"),
])
def test_bad_listings_are_refused(bad):
    with pytest.raises(ValueError):
        sl.parse_sass(bad)


def _k(fn="f", arch="sm_90a", build="plain", variants="all"):
    return sl.Key(arch, build, variants, fn)


def test_lock_file_round_trip_sorted_and_readable(tmp_path):
    entries = {_k("b", "sm_120a"): sl.FuncSass(10, "0" * 16, 96), _k("a"): sl.FuncSass(5, "a" * 16, None),
               _k("a", build="xray", variants="x+y"): sl.FuncSass(7, "b" * 16, 90)}
    text = sl.format_lock(entries, "nvcc 13.0.88, cuobjdump 13.5.37")
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert body == [f"sm_120a plain [all] b 10 96 {'0' * 16}", f"sm_90a plain [all] a 5 - {'a' * 16}",
                    f"sm_90a xray [x+y] a 7 90 {'b' * 16}"]
    assert sl.parse_lock(text) == (entries, "nvcc 13.0.88, cuobjdump 13.5.37")
    with pytest.raises(ValueError, match=":2:"):
        sl.parse_lock("# c\nsm_90a plain all f 1 2 abc\n")
    with pytest.raises(ValueError, match="twice"):
        sl.parse_lock(body[0] + "\n" + body[0] + "\n")


def test_compare_names_what_moved():
    locked = {_k("step"): sl.FuncSass(100, "1" * 16, 96), _k("long"): sl.FuncSass(200, "2" * 16, 96),
              _k("gone"): sl.FuncSass(50, "3" * 16, 96), _k("step", "sm_120a"): sl.FuncSass(9, "4" * 16, 96)}
    built = {_k("step"): sl.FuncSass(104, "5" * 16, 96), _k("long"): sl.FuncSass(200, "2" * 16, 96),
             _k("new"): sl.FuncSass(7, "6" * 16, 40)}
    assert sl.compare(locked, dict(locked), {"sm_90a", "sm_120a"}) == []
    d = sl.compare(locked, built)  # only the arch built (sm_90a) is compared
    assert len(d) == 3
    changed = next(x for x in d if x.startswith("changed"))
    assert "sm_90a plain [all] step" in changed and "100 -> 104 instructions" in changed
    assert "1111111111111111 -> 5555555555555555" in changed
    assert any(x.startswith("removed") and "gone" in x and "50" in x for x in d)
    assert any(x.startswith("added") and "new" in x for x in d)
    # the same count with other instructions, and registers alone, are differences too
    same_n = sl.compare(locked, {**locked, _k("long"): sl.FuncSass(200, "7" * 16, 96)}, {"sm_90a", "sm_120a"})
    assert same_n == [f"changed  sm_90a plain [all] long: 200 -> 200 instructions (same count, other instructions), "
                      f"hash {'2' * 16} -> {'7' * 16}"]
    regs = sl.compare(locked, {**locked, _k("long"): sl.FuncSass(200, "2" * 16, 90)}, {"sm_90a", "sm_120a"})
    assert regs == ["changed  sm_90a plain [all] long: registers 96 -> 90 (same instructions)"]
    # the same code under another name: one line naming both
    assert sl.compare({_k("old"): sl.FuncSass(5, "8" * 16)}, {_k("new"): sl.FuncSass(5, "8" * 16)}) == [
        "renamed  sm_90a plain [all] old -> new: the same 5 instructions"]
    # a build of another variant group or the X-ray build is its own line
    assert sl.compare({_k("f"): sl.FuncSass(1, "1" * 16)}, {_k("f", build="xray"): sl.FuncSass(1, "1" * 16)}) == [
        "removed  sm_90a plain [all] f: was 1 instructions (no longer built)",
        "added    sm_90a xray [all] f: 1 instructions (not in the lock)"]


def test_relock_replaces_only_the_archs_built():
    locked = {_k("f"): sl.FuncSass(1, "1" * 16), _k("f", "sm_120a"): sl.FuncSass(2, "2" * 16)}
    built = {_k("g"): sl.FuncSass(3, "3" * 16)}
    assert sl.relocked(locked, built, {"sm_90a"}) == {_k("g"): built[_k("g")], _k("f", "sm_120a"): locked[_k("f", "sm_120a")]}


# ------------------------------------------------ compile_all --sass-lock end to end, with stand-ins


def _fake_tools(tmp_path, extra_instr=""):
    """Stand-ins: nvcc (writes the object, ptxas-style info), cuobjdump (prints LISTING, with one more
    instruction in decode_step when extra_instr is set) and the nvdisasm beside it."""
    nv = tmp_path / "nvcc"
    nv.write_text("#!/bin/sh\n"
                  'while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n'
                  "echo \"ptxas info    : Compiling entry function '_Z11decode_stepILi0EEv10StepParams' for 'sm_90a'\" >&2\n"
                  'echo "ptxas info    : Used 96 registers, used 1 barriers, 8 bytes smem" >&2\n')
    nv.chmod(0o755)
    listing = LISTING
    if extra_instr:
        listing = listing.replace("        /*0020*/                   EXIT ;", extra_instr + "\n        /*0030*/  EXIT ;")
    (tmp_path / "listing.txt").write_text(listing)
    cu = tmp_path / "cuobjdump"
    cu.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "Cuda compilation tools, release 13.5, V13.5.37"; exit 0; }}\n'
                  f'cat {tmp_path / "listing.txt"}\n')
    cu.chmod(0o755)
    nd = tmp_path / "nvdisasm"  # cuobjdump -sass runs the nvdisasm beside it (sass_lock.disasm_env)
    nd.write_text('#!/bin/sh\necho "Cuda compilation tools, release 13.5, V13.5.37"\n')
    nd.chmod(0o755)
    return nv, cu


def test_compile_all_checks_and_relocks(tmp_path, capsys):
    nv, cu = _fake_tools(tmp_path)
    lock = tmp_path / "sass.lock"
    args = ["--nvcc", str(nv), "--cuobjdump", str(cu), "--only", "kernels", "--arch", "sm_90a", "--sass-lock", str(lock)]
    assert ca.main(args) == 1 and "does not exist" in capsys.readouterr().out  # no lock: fails, writes nothing
    assert not lock.exists()
    assert ca.main([*args, "--relock"]) == 0
    entries, tools = sl.parse_lock(lock.read_text())
    assert tools.endswith("cuobjdump 13.5.37, nvdisasm 13.5.37")
    # the repo's variants share one flag set: plain and X-ray builds of [all], and of the sm_120
    # configuration's and the tensor-core variants' translation units (variants.json config_sources),
    # two functions each
    sm120 = "bf16-stream-sm120+fp8-stream-sm120+nvfp4-stream-sm120"
    tck = "fp8-stream-tc-k2+fp8-stream-tc-k4+fp8-stream-tc-k8"
    assert sorted((k.build, k.variants, k.function) for k in entries) == sorted(
        (b, v, f) for b in ("plain", "xray") for v in ("all", sm120, "fp8-stream-tc", tck)
        for f in ("_Z11decode_stepILi0EEv10StepParams", "_Z16decode_step_longILi2EEv10StepParams"))
    assert entries[_k("_Z11decode_stepILi0EEv10StepParams")] == sl.FuncSass(3, entries[_k("_Z11decode_stepILi0EEv10StepParams")].digest, 96)
    before = lock.read_text()
    capsys.readouterr()
    assert ca.main(args) == 0 and "match" in capsys.readouterr().out
    # one more instruction: the check fails and names the function, both builds, old and new counts
    _fake_tools(tmp_path, extra_instr="        /*0020*/  NOP ;  /* 0x0000000000007918 */\n  /* 0x000fc00000000000 */")
    assert ca.main(args) == 1
    out = capsys.readouterr().out
    assert "8 kernel function(s) moved" in out  # (the fake listing is every object's: 4 units x 2 builds)
    for build in ("plain", "xray"):
        assert f"changed  sm_90a {build} [all] _Z11decode_stepILi0EEv10StepParams: 3 -> 4 instructions" in out
    assert "decode_step_long" not in out.split("moved")[1]
    assert lock.read_text() == before  # a check never writes


def test_sass_lock_option_errors(tmp_path):
    nv, cu = _fake_tools(tmp_path)
    assert ca.main(["--nvcc", str(nv), "--relock", "--only", "kernels"]) == 2  # --relock without a lock
    assert ca.main(["--nvcc", str(nv), "--only", "probes", "--sass-lock", str(tmp_path / "l")]) == 2
    bad = tmp_path / "bad.lock"
    bad.write_text("not a lock line\n")
    assert ca.main(["--nvcc", str(nv), "--cuobjdump", str(cu), "--only", "kernels", "--arch", "sm_90a",
                    "--sass-lock", str(bad)]) == 1


def test_the_committed_lock_parses_and_covers_every_build():
    """kernel/sass.lock: every (arch, build) of the shipped targets has lines, for both archs CI compiles."""
    lock = SCRIPTS.parent / "kernel" / "sass.lock"
    entries, tools = sl.parse_lock(lock.read_text(), str(lock))
    assert "cuobjdump" in tools and "nvcc" in tools
    targets = [t for t in ca.load_variants(SCRIPTS.parent / "kernel" / "variants.json") if t.kernel]
    want = {(arch, t.build, t.variants) for t in targets for arch in ca.DEFAULT_ARCHS}
    assert {(k.arch, k.build, k.variants) for k in entries} == want
    assert all(f.count > 0 and f.regs for f in entries.values())


def test_make_test_cuda_checks_the_lock():
    mk = (SCRIPTS.parent / "Makefile").read_text()
    line = next(ln for ln in mk.splitlines() if "scripts/compile_all.py" in ln and ln.startswith("\t"))
    assert "--sass-lock kernel/sass.lock" in line and "--relock" not in line


def test_function_labels_name_the_variant_and_ride_along_as_a_comment():
    ids = {2: "bf16-stream", 5: "nvfp4-stream"}
    assert sl.function_label("_ZN8monolith11plain_build16decode_step_longILi5EEEvNS_10StepParamsE", ids) \
        == "decode_step_long<nvfp4-stream>"
    assert sl.function_label("_ZN8monolith10xray_build11decode_stepILi7EEEvNS_10StepParamsE", ids) == "decode_step<7>"
    assert sl.function_label("_Z4stepv", ids) == ""
    k = _k("_ZN8monolith11plain_build11decode_stepILi2EEEvNS_10StepParamsE")
    entries = {k: sl.FuncSass(9, "c" * 16, 96)}
    labels = {k.function: sl.function_label(k.function, ids)}
    text = sl.format_lock(entries, "t", labels)
    assert text.rstrip().endswith(f"9 96 {'c' * 16}  # decode_step<bf16-stream>")
    assert sl.parse_lock(text)[0] == entries
    d = sl.compare(entries, {k: sl.FuncSass(10, "d" * 16, 96)}, labels=labels)
    assert d[0].startswith(f"changed  sm_90a plain [all] decode_step<bf16-stream> ({k.function}): 9 -> 10 instructions")
