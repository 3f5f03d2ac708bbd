"""MONOLITH_NVCC_DEFINES (a diagnostic kernel build: extra -D defines, never the default), the
reduced-step-only knob of tests/gpu/sanitize_step.py, and scripts/gpu.sh's racecheck-stream stage
run with stand-ins for python3 and compute-sanitizer. No GPU: torch's extension loader is
replaced by a stand-in that records what it was asked to build."""
from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SM90A_GENCODE

from monolith import REPO_ROOT, envinfo, kernel_spec
from monolith import megakernel as mk
from monolith.errors import MonolithError

ENV = kernel_spec.EXTRA_DEFINES_ENV
ARCH = SM90A_GENCODE  # what the fake_loader fixture (tests/conftest.py) reports


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, want", [
    (None, []), ("", []), ("  , ", []),
    ("MONOLITH_RING_RELEASE=512", ["MONOLITH_RING_RELEASE=512"]),
    ("A B=1,C=x.y  D=-2", ["A", "B=1", "C=x.y", "D=-2"]),
    ("_X=1e+3,\tY", ["_X=1e+3", "Y"]),
])
def test_defines_parse(text, want):
    assert kernel_spec.parse_extra_defines(text, known=frozenset("A B C D _X Y MONOLITH_RING_RELEASE".split())) == want


@pytest.mark.parametrize("bad", [
    "-DMONOLITH_RING_RELEASE=512",   # a flag, not a define
    "1ABC=2",                         # not an identifier
    "A=",                             # empty value
    "A=1=2", "A=$(id)", "A=`x`", "A='1'", 'A="1"', "A=1;B=2", "A=(1)", "A=1|2", "A=x/y", "A(x)=1",
])
def test_defines_refuse_other_tokens(bad):
    with pytest.raises(MonolithError, match=f"{ENV}: .* is not NAME or NAME=VALUE"):
        kernel_spec.parse_extra_defines(f"MONOLITH_XRAY_SUB=1 {bad}")


def test_defines_refuse_a_name_twice_and_reserved_names():
    with pytest.raises(MonolithError, match="MONOLITH_RING_RELEASE is given twice"):
        kernel_spec.parse_extra_defines("MONOLITH_RING_RELEASE=1 MONOLITH_XRAY_SUB MONOLITH_RING_RELEASE=2")
    with pytest.raises(MonolithError, match="MONOLITH_XRAY is set by the build itself"):
        kernel_spec.parse_extra_defines("MONOLITH_XRAY")


def test_defines_refuse_unknown_names_in_one_line():
    """Only the switches the kernel reads build (kernel_spec.KNOWN_DEFINES); a retired knob or a typo
    is refused by name, before any build, with the names that exist."""
    for text in ("MONOLITH_ATTN_FLASH=1", "MONOLITH_RING_RELEASE=512 MONOLITH_X_SWIZZLE=0", "MONOLITH_RING_RELEAS=1"):
        with pytest.raises(MonolithError) as ei:
            kernel_spec.parse_extra_defines(text)
        msg = str(ei.value)
        assert "\n" not in msg and msg.startswith(f"{ENV}: unknown kernel define MONOLITH_")
        assert "MONOLITH_RING_RELEASE, MONOLITH_XRAY_SUB" in msg and "docs/EXPERIMENTS.md" in msg
    assert kernel_spec.parse_extra_defines("MONOLITH_RING_RELEASE=512,MONOLITH_XRAY_SUB=2") == [
        "MONOLITH_RING_RELEASE=512", "MONOLITH_XRAY_SUB=2"]
    with pytest.raises(MonolithError, match="unknown kernel define MONOLITH_ATTN_WIDE"):
        kernel_spec.build_flags("bf16-stream", extra_defines=["MONOLITH_ATTN_WIDE=3"])
    # every known name is one the kernel source reads, and the kernel reads no other build switch
    import re
    src = "\n".join(p.read_text() for p in sorted((REPO_ROOT / "kernel").glob("*.cu*")))
    read = set(re.findall(r"#\s*(?:if|ifdef|ifndef|elif)\b[^\n]*?\b(MONOLITH_[A-Z0-9_]+)", src))
    read |= set(re.findall(r"defined\((MONOLITH_[A-Z0-9_]+)\)", src))
    assert set(kernel_spec.KNOWN_DEFINES) <= read
    assert read - set(kernel_spec.KNOWN_DEFINES) <= {"MONOLITH_XRAY", "MONOLITH_HAS_E2M1_CVT"}, read


def test_env_extra_defines_reads_the_variable():
    assert kernel_spec.env_extra_defines({}) == []
    assert kernel_spec.env_extra_defines({ENV: "MONOLITH_RING_RELEASE=1"}) == ["MONOLITH_RING_RELEASE=1"]


# ----------------------------------------------------------------------------- build flags
def test_build_flags_append_extra_defines_last():
    spec = {"source": "k.cu", "extra_flags": ["-O3"],
            "variants": [{"name": "v", "id": 0, "defines": ["MONOLITH_XRAY_SUB=1"]}]}
    assert kernel_spec.build_flags("v", spec=spec) == ["-O3", "-DMONOLITH_XRAY_SUB=1"]
    assert kernel_spec.build_flags("v", spec=spec, extra_defines=["MONOLITH_RING_RELEASE=512"]) == \
        ["-O3", "-DMONOLITH_XRAY_SUB=1", "-DMONOLITH_RING_RELEASE=512"]
    with pytest.raises(MonolithError, match="MONOLITH_XRAY_SUB already defined by kernel/variants.json for v"):
        kernel_spec.build_flags("v", spec=spec, extra_defines=["MONOLITH_XRAY_SUB=2"])
    with pytest.raises(MonolithError, match="not NAME or NAME=VALUE"):
        kernel_spec.build_flags("v", spec=spec, extra_defines=["-DR=1"])


def test_load_extension_without_the_variable_is_the_measured_build(fake_loader):
    ext = mk.load_extension("bf16-stream")
    assert fake_loader[0]["extra_cuda_cflags"] == [*kernel_spec.build_flags("bf16-stream"), ARCH]
    assert ext.build_info["extra_defines"] == [] and ext.build_info["nvcc_flags"] == fake_loader[0]["extra_cuda_cflags"]
    assert not any("RING_RELEASE" in f for f in ext.build_info["nvcc_flags"])


def test_load_extension_passes_the_defines_and_hashes_them(fake_loader, monkeypatch):
    plain = mk.load_extension("bf16-stream")
    monkeypatch.setenv(ENV, "MONOLITH_RING_RELEASE=512")
    diag = mk.load_extension("bf16-stream")
    assert len(fake_loader) == 2  # a build of its own, not the cached plain one
    flags = fake_loader[1]["extra_cuda_cflags"]
    assert flags == [*kernel_spec.build_flags("bf16-stream"), "-DMONOLITH_RING_RELEASE=512", ARCH]
    assert diag.build_info["extra_defines"] == ["MONOLITH_RING_RELEASE=512"] and diag.build_info["nvcc_flags"] == flags
    assert diag.build_info["tag"] != plain.build_info["tag"]
    assert diag.build_info["build_dir"] != plain.build_info["build_dir"]
    assert fake_loader[1]["build_directory"] == diag.build_info["build_dir"]
    assert fake_loader[1]["name"] == f"monolith_mk_{diag.build_info['tag']}"
    monkeypatch.setenv(ENV, "MONOLITH_RING_RELEASE=1")
    assert mk.load_extension("bf16-stream").build_info["tag"] not in (diag.build_info["tag"], plain.build_info["tag"])


def test_load_extension_refuses_a_bad_value_before_anything(monkeypatch):
    """Checked first: on a machine without a GPU the bad value is still what is reported."""
    monkeypatch.setattr(mk, "_EXT", {})
    monkeypatch.setenv(ENV, "-DMONOLITH_RING_RELEASE=512")
    with pytest.raises(MonolithError, match=f"{ENV}: '-DMONOLITH_RING_RELEASE=512' is not NAME or NAME=VALUE"):
        mk.load_extension("bf16-stream")


def test_environment_record_names_the_defines(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert "monolith_nvcc_defines" not in envinfo.collect()
    monkeypatch.setenv(ENV, "MONOLITH_RING_RELEASE=512")
    assert envinfo.collect()["monolith_nvcc_defines"] == "MONOLITH_RING_RELEASE=512"


# ----------------------------------------------------------------------------- sanitize_step
def _sanitize_step(monkeypatch):
    path = REPO_ROOT / "tests" / "gpu" / "sanitize_step.py"
    spec = importlib.util.spec_from_file_location("sanitize_step_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls: list[tuple] = []

    class FakeEngine:
        def __init__(self, ckpt, variant, timeout_s, blocks):
            calls.append(("engine", variant, blocks))
            self.variant, self.blocks = variant, blocks
            self.ext = SimpleNamespace(build_info={"tag": "abc", "extra_defines": ["MONOLITH_RING_RELEASE=512"]})

        def reset(self):
            calls.append(("reset",))

        def seek(self, position):
            calls.append(("seek", position))

        def prefill(self, tokens):
            calls.append(("prefill", list(tokens)))
            return 42

        def step_until(self, token, layer, phase):
            calls.append(("step_until", token, layer, phase))
            return {}

        def decode(self, token, n):
            calls.append(("decode", token, n))
            return torch.tensor([7])

    monkeypatch.setattr(mod, "ensure_checkpoint", lambda *a, **k: "ckpt")
    monkeypatch.setattr(mod, "load_checkpoint", lambda p: p)
    monkeypatch.setattr(mod, "MegakernelEngine", FakeEngine)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    for k in ("MONOLITH_SANITIZE_FULL", "MONOLITH_SANITIZE_PROMPT", "MONOLITH_SANITIZE_BLOCKS", "MONOLITH_VARIANT",
              "MONOLITH_SANITIZE_START"):
        monkeypatch.delenv(k, raising=False)
    return mod, calls


def test_sanitize_step_reduced_only(monkeypatch, capsys):
    mod, calls = _sanitize_step(monkeypatch)
    monkeypatch.setenv("MONOLITH_SANITIZE_FULL", "0")
    monkeypatch.setenv("MONOLITH_SANITIZE_BLOCKS", "16")
    monkeypatch.setenv("MONOLITH_VARIANT", "bf16-stream")
    assert mod.main() == 0
    assert calls == [("engine", "bf16-stream", 16), ("reset",), ("step_until", 9707, 1, 4)]
    out = capsys.readouterr().out
    assert "build abc, extra defines ['MONOLITH_RING_RELEASE=512']" in out and "reduced step only" in out


def test_sanitize_step_reduced_at_a_wide_position(monkeypatch, capsys):
    """MONOLITH_SANITIZE_FULL=0 with MONOLITH_SANITIZE_START: seek there, then the reduced step (racecheck
    of the wide-attention kernel, which 16 blocks launch from position 300)."""
    mod, calls = _sanitize_step(monkeypatch)
    monkeypatch.setenv("MONOLITH_SANITIZE_FULL", "0")
    monkeypatch.setenv("MONOLITH_SANITIZE_BLOCKS", "16")
    monkeypatch.setenv("MONOLITH_SANITIZE_START", "300")
    monkeypatch.setenv("MONOLITH_VARIANT", "fp8-stream")
    assert mod.main() == 0
    assert calls == [("engine", "fp8-stream", 16), ("reset",), ("seek", 300), ("step_until", 9707, 1, 4)]
    assert "reduced step only, position 300" in capsys.readouterr().out


def test_sanitize_step_default_keeps_the_full_steps(monkeypatch):
    mod, calls = _sanitize_step(monkeypatch)
    monkeypatch.setenv("MONOLITH_SANITIZE_PROMPT", "2")
    assert mod.main() == 0
    assert calls == [("engine", "bf16-upstream", None), ("reset",), ("prefill", [9707, 1879]),
                     ("step_until", 42, 1, 4), ("decode", 42, 1)]


def test_sanitize_step_starts_at_a_long_position(monkeypatch, capsys):
    mod, calls = _sanitize_step(monkeypatch)
    monkeypatch.setenv("MONOLITH_SANITIZE_START", "300")
    monkeypatch.setenv("MONOLITH_SANITIZE_PROMPT", "2")
    assert mod.main() == 0
    assert calls == [("engine", "bf16-upstream", None), ("reset",), ("seek", 300), ("prefill", [9707, 1879]),
                     ("step_until", 42, 1, 4), ("decode", 42, 1)]
    assert "from position 300" in capsys.readouterr().out


def test_sanitize_step_refuses_an_unknown_full_value(monkeypatch, capsys):
    mod, calls = _sanitize_step(monkeypatch)
    monkeypatch.setenv("MONOLITH_SANITIZE_FULL", "no")
    assert mod.main() == 2 and calls == []
    assert "MONOLITH_SANITIZE_FULL must be 0 or 1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- scripts/gpu.sh
def _stand_in(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/usr/bin/env bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def _gpu_sh(tmp_path, *stages, **env_kw) -> tuple[subprocess.CompletedProcess, list[str], Path]:
    """scripts/gpu.sh in a scratch tree, python3 and compute-sanitizer stood in (each records its
    arguments and the environment the stage gave it)."""
    root, b, out = tmp_path / "repo", tmp_path / "bin", tmp_path / "out"
    (root / "scripts").mkdir(parents=True)
    (root / "results").mkdir()
    b.mkdir()
    shutil.copy2(REPO_ROOT / "scripts" / "gpu.sh", root / "scripts" / "gpu.sh")
    calls = tmp_path / "calls"
    rec = ('DEFINES=${MONOLITH_NVCC_DEFINES-unset} VARIANT=${MONOLITH_VARIANT-unset} '
           'BLOCKS=${MONOLITH_SANITIZE_BLOCKS-unset} FULL=${MONOLITH_SANITIZE_FULL-unset}')
    _stand_in(b, "python3", f'echo "python3 $* | {rec}" >> {calls}\n'
              f'case "$*" in *pytest*) echo "${{MONOLITH_TEST_VARIANTS-unset}}" >> {tmp_path / "test_variants"};; esac\n')
    _stand_in(b, "compute-sanitizer", f'echo "sanitizer $* | {rec}" >> {calls}\n'
              'echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"\n')
    _stand_in(b, "ncu", f'echo "ncu $* | {rec}" >> {calls}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONOLITH_", "RACECHECK_", "SANITIZE_"))}
    env.update(PATH=f"{b}:{env['PATH']}", OUT=str(out), **env_kw)
    r = subprocess.run(["bash", str(root / "scripts" / "gpu.sh"), *stages], capture_output=True, text=True,
                       timeout=60, env=env)
    return r, calls.read_text().splitlines(), out


def _monolith_calls(calls: list[str]) -> list[list[str]]:
    """The arguments of every `python3 -m monolith ...` call a _gpu_sh run recorded."""
    return [c.split(" | ")[0].split()[3:] for c in calls if c.startswith("python3 -m monolith ")]


def _milestone_steps(monkeypatch, argv: list[str], tmp_path: Path) -> dict:
    """`monolith <argv>` (a milestone command gpu.sh calls) through the real CLI on a CPU: the GPU
    check passes, results/ is tmp_path, and the steps' expensive parts are stood in by recorders:
    the pack (fmt, dir), the harness session (engines, out, timelines), the X-ray (variant), the
    kernel tests (variants), and packed_quality (its keyword arguments, the pack dir and device,
    the file written). Returns {step: what it received}."""
    from typer.testing import CliRunner

    from monolith import cli_milestones as M
    from monolith.bench import suite
    from monolith.cli import app
    from monolith.quant import fp8_quality

    got: dict = {}

    def quality(ckpt, tok, packed, device, **kw):
        got["quality"] = dict(kw, packed=Path(packed), device=device)
        return {"pairs": []}

    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(M, "RESULTS", tmp_path)
        m.setattr(M, "_pack", lambda fmt, model, out, map_file=None: got.setdefault("pack", (fmt, Path(out))) and "")
        m.setattr(M, "_bench", lambda engines, model, out, quick, title, timelines=None:
                  got.setdefault("bench", (engines, Path(out), timelines)) and "")
        m.setattr(M, "_xray", lambda model, v, real: got.setdefault("xray", []).append(v) or "")
        m.setattr(M, "_kernel_tests", lambda v: got.setdefault("tests", v) and "")
        m.setattr(M, "_run", lambda cmd, env=None: got.setdefault("run", []).append(cmd) or "")
        m.setattr(suite, "load_inputs", lambda model: (None, None))
        m.setattr(fp8_quality, "packed_quality", quality)
        r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    if "quality" in got:
        got["quality_file"] = sorted(p.name for p in tmp_path.glob("*_quality*.json"))
    return got


def test_gpu_sh_racecheck_stream_runs_release_512_then_the_default_build(tmp_path):
    r, calls, out = _gpu_sh(tmp_path, "racecheck-stream")
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls[0].endswith("DEFINES=unset VARIANT=unset BLOCKS=unset FULL=unset")  # synth: the plain build
    builds = [c for c in calls if "load_extension" in c]
    san = [c for c in calls if c.startswith("sanitizer ")]
    assert len(builds) == 2 and len(san) == 2
    assert builds[0].endswith("bf16-stream | DEFINES=MONOLITH_RING_RELEASE=512 VARIANT=unset BLOCKS=unset FULL=unset")
    assert builds[1].endswith("bf16-stream | DEFINES=unset VARIANT=unset BLOCKS=unset FULL=unset")
    opts = "--tool racecheck --racecheck-report analysis --print-limit 20 --error-exitcode 9 python3 tests/gpu/sanitize_step.py"
    assert san[0] == f"sanitizer {opts} | DEFINES=MONOLITH_RING_RELEASE=512 VARIANT=bf16-stream BLOCKS=16 FULL=0"
    assert san[1] == f"sanitizer {opts} | DEFINES=unset VARIANT=bf16-stream BLOCKS=16 FULL=0"
    for rel in ("512", "default"):
        assert "RACECHECK SUMMARY: 0 hazards" in (out / f"racecheck-stream-bf16-stream-r{rel}.log").read_text()
    table = r.stdout.split("==== summary")[1]
    assert "racecheck-bf16-stream-r512" in table and "racecheck-bf16-stream-rdefault" in table
    assert table.count("RACECHECK SUMMARY") == 2


def test_gpu_sh_racecheck_stream_variants_and_an_exported_define(tmp_path):
    """RACECHECK_VARIANTS adds fp8-stream; a caller's exported MONOLITH_NVCC_DEFINES is warned about
    and does not leak into the default-build run."""
    r, calls, out = _gpu_sh(tmp_path, "racecheck-stream", RACECHECK_VARIANTS="bf16-stream,fp8-stream",
                            MONOLITH_NVCC_DEFINES="MONOLITH_RING_RELEASE=1")
    assert r.returncode == 0, r.stdout + r.stderr
    san = [c.split(" | ")[1] for c in calls if c.startswith("sanitizer ")]
    assert san == [f"DEFINES={d} VARIANT={v} BLOCKS=16 FULL=0" for v in ("bf16-stream", "fp8-stream")
                   for d in ("MONOLITH_RING_RELEASE=512", "unset")]
    assert "WARNING: MONOLITH_NVCC_DEFINES=MONOLITH_RING_RELEASE=1" in (out / "log.txt").read_text()


def test_gpu_sh_lists_the_stage_and_passes_shellcheck():
    r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu.sh"), "--help"], capture_output=True, text=True)
    assert "[racecheck-stream]" in r.stdout
    sc = shutil.which("shellcheck")
    assert sc, "shellcheck is not installed: run `make deps` (apt-get install shellcheck)"
    r = subprocess.run([sc, "-x", str(REPO_ROOT / "scripts" / "gpu.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_gpu_sh_abdev_passes_extra_dev_args_and_can_skip_the_token_check(tmp_path):
    """AB_DEV_ARGS reaches every set's dev_bench (long positions: --prompt-len); AB_TOKENS_REF=0
    drops --tokens-ref (a knob that sums in another order decodes other tokens by design); by
    default every set is checked against the first set's tokens."""
    r, calls, _ = _gpu_sh(tmp_path, "abdev", AB_DEFINES="base;MONOLITH_RING_RELEASE=1", AB_VARIANTS="bf16-stream",
                          AB_DEV_ARGS="--prompt-len 2040 --tokens 32", AB_TOKENS_REF="0")
    assert r.returncode == 0, r.stdout + r.stderr
    dev = [c for c in calls if "dev_bench.py" in c]
    assert len(dev) == 2 and all("--prompt-len 2040 --tokens 32 --out" in c and "--tokens-ref" not in c for c in dev)
    assert dev[0].endswith("DEFINES=unset VARIANT=unset BLOCKS=unset FULL=unset")
    assert dev[1].endswith("DEFINES=MONOLITH_RING_RELEASE=1 VARIANT=unset BLOCKS=unset FULL=unset")
    r, calls, _ = _gpu_sh(tmp_path / "again", "abdev")
    dev = [c for c in calls if "dev_bench.py" in c]
    assert r.returncode == 0 and len(dev) == 1
    assert "--runs 3 --tokens-ref results/ab/tokens-ref.json --out results/ab/dev-0.json" in dev[0]


def test_gpu_sh_xraylong_records_at_2040_by_default_and_takes_the_position_and_variants(tmp_path):
    r, calls, _ = _gpu_sh(tmp_path, "xraylong")
    assert r.returncode == 0, r.stdout + r.stderr
    xr = [c for c in calls if "xray_raw.py" in c]
    assert xr == ["python3 scripts/xray_raw.py --variant bf16-stream --position 2040 --out results/xray-long"
                  " | DEFINES=unset VARIANT=unset BLOCKS=unset FULL=unset"]
    r, calls, _ = _gpu_sh(tmp_path / "b", "xraylong", XRAY_LONG_POS="1100", XRAY_LONG_VARIANTS="bf16-stream,fp8-stream")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c.split(" | ")[0] for c in calls if "xray_raw.py" in c] == [
        "python3 scripts/xray_raw.py --variant bf16-stream,fp8-stream --position 1100 --out results/xray-long"]


def test_gpu_sh_abdev_runs_tests_per_build_and_places_or_skips_the_xray(tmp_path):
    """AB_TESTS runs the GPU tests matching it on each set's build before its timing, with the
    set's defines and the A/B's variants; AB_XRAY_POS moves the X-ray, AB_XRAY=0 drops it."""
    r, calls, _ = _gpu_sh(tmp_path, "abdev", AB_DEFINES="base;MONOLITH_RING_RELEASE=1", AB_VARIANTS="bf16-stream",
                          AB_TESTS="more_splits", AB_XRAY_POS="2040")
    assert r.returncode == 0, r.stdout + r.stderr
    tests = [c for c in calls if "pytest" in c]
    assert [c.split(" | ")[0] for c in tests] == ["python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k more_splits"] * 2
    assert tests[0].endswith("DEFINES=unset VARIANT=unset BLOCKS=unset FULL=unset")
    assert tests[1].endswith("DEFINES=MONOLITH_RING_RELEASE=1 VARIANT=unset BLOCKS=unset FULL=unset")
    order = [("pytest" in c, "dev_bench" in c, "xray_raw" in c) for c in calls if "synth" not in c and "checkpoint" not in c]
    assert order == [(True, False, False), (False, True, False), (False, False, True)] * 2
    assert all("--position 2040" in c for c in calls if "xray_raw" in c)
    r, calls, _ = _gpu_sh(tmp_path / "b", "abdev", AB_XRAY="0")
    assert r.returncode == 0 and not any("xray_raw" in c or "pytest" in c for c in calls)
    assert (tmp_path / "test_variants").read_text().split() == ["bf16-stream", "bf16-stream"]  # the A/B's variants


def test_gpu_sh_abdev_xray_defines_reach_only_the_xray(tmp_path):
    """AB_XRAY_DEFINES (twenty-third session: the SUB=3 cuts of each set's attention) is added to each
    set's defines for its X-ray alone; the set's dev timing builds the set's defines only."""
    r, calls, _ = _gpu_sh(tmp_path, "abdev", AB_DEFINES="base;MONOLITH_RING_RELEASE=1", AB_VARIANTS="bf16-stream",
                          AB_XRAY_DEFINES="MONOLITH_XRAY_SUB=3")
    assert r.returncode == 0, r.stdout + r.stderr
    dev = [c.split(" | ")[1] for c in calls if "dev_bench.py" in c]
    xr = [c.split(" | ")[1] for c in calls if "xray_raw.py" in c]
    assert [d.split()[0] for d in dev] == ["DEFINES=unset", "DEFINES=MONOLITH_RING_RELEASE=1"]
    assert [x.split()[0] for x in xr] == ["DEFINES=MONOLITH_XRAY_SUB=3", "DEFINES=MONOLITH_RING_RELEASE=1,MONOLITH_XRAY_SUB=3"]


def test_gpu_sh_abpatch_times_this_tree_the_patched_copy_and_this_tree_again(tmp_path):
    """AB_PATCH is applied to a copy of the tree (AB_TREE), never to the tree itself; dev timings run
    base, patch, base again, each from its own tree, the patched build's tokens checked against the
    base's; then both X-rays, all under results/ab/. A missing patch or one that does not apply
    stops the stage before any timing."""
    root = tmp_path / "repo"
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "x.cuh").write_text("int knob = 1;\n")
    patch = tmp_path / "change.patch"
    patch.write_text("--- a/kernel/x.cuh\n+++ b/kernel/x.cuh\n@@ -1 +1 @@\n-int knob = 1;\n+int knob = 2;\n")
    tree = tmp_path / "tree"
    r, calls, _ = _gpu_sh(tmp_path, "abpatch", AB_PATCH=str(patch), AB_TREE=str(tree), AB_VARIANTS="nvfp4-stream")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (root / "kernel" / "x.cuh").read_text() == "int knob = 1;\n"  # the tree itself is untouched
    assert (tree / "kernel" / "x.cuh").read_text() == "int knob = 2;\n"
    assert (tree / "checkpoints").is_symlink() and not (tree / "results" / "ab").exists()
    dev = [c.split(" | ")[0] for c in calls if "dev_bench.py" in c]
    ref = f"--tokens-ref {root}/results/ab/tokens-ref.json"
    assert dev == [f"python3 scripts/dev_bench.py --variant nvfp4-stream --blocks 128 --runs 3 {ref} "
                   f"--out {root}/results/ab/dev-{side}.json" for side in ("base", "patch", "base2")]
    xr = [c.split(" | ")[0] for c in calls if "xray_raw.py" in c]
    assert xr == [f"python3 scripts/xray_raw.py --variant nvfp4-stream --position 128 --out {root}/results/ab/xray-{s}"
                  for s in ("base", "patch")]
    # a patch that does not apply (here: its file is missing from the copy) stops the stage
    patch.write_text("--- a/kernel/x.cuh\n+++ b/kernel/x.cuh\n@@ -1 +1 @@\n-int other = 1;\n+int other = 2;\n")
    r, calls, _ = _gpu_sh(tmp_path / "b", "abpatch", AB_PATCH=str(patch), AB_TREE=str(tmp_path / "tree2"))
    assert not any("dev_bench" in c for c in calls) and "abpatch-tree" in r.stdout.split("==== summary")[1]
    r, calls, _ = _gpu_sh(tmp_path / "c", "abpatch", AB_TOKENS_REF="0")
    assert not any("dev_bench" in c for c in calls) and "no AB_PATCH" in r.stdout


def test_gpu_sh_ncu_profiles_each_define_set_at_the_prompt_length(tmp_path):
    """NCU_SETS / NCU_PROMPT_LEN / NCU_SECTIONS (twenty-fourth session): each set built first, then
    one launch profiled at position N + 2 after an N-token prompt, into VARIANT-I; sets.txt names them."""
    wide = "MONOLITH_RING_RELEASE=1,MONOLITH_XRAY_SUB=2"
    r, calls, out = _gpu_sh(tmp_path, "ncu", NCU_SETS=f"base;{wide}", NCU_PROMPT_LEN="1100",
                            NCU_SECTIONS="WarpStateStats SourceCounters")
    assert r.returncode == 0, r.stdout + r.stderr
    steps = [c for c in calls if "load_extension" in c or (c.startswith("ncu ") and " -o " in c)]
    assert len(steps) == 4
    for (build, prof), (i, defines) in zip([steps[:2], steps[2:]], enumerate(["unset", wide]), strict=True):
        assert "load_extension('bf16-stream')" in build and f"DEFINES={defines} " in build
        assert f"-o {out}/ncu/bf16-stream-{i} " in prof and f"DEFINES={defines} " in prof
        assert "--launch-skip 1102 " in prof and "--prompt-len 1100 --tokens 4" in prof
        assert "--section WarpStateStats --section SourceCounters " in prof and "--set full" not in prof
    assert (out / "ncu" / "sets.txt").read_text() == f"ncu-0: base\nncu-1: {wide}\n"


def test_gpu_sh_ncu_default_is_the_environments_build_at_position_129(tmp_path):
    r, calls, out = _gpu_sh(tmp_path, "ncu", MONOLITH_NVCC_DEFINES="MONOLITH_RING_RELEASE=1")
    assert r.returncode == 0, r.stdout + r.stderr
    prof = [c for c in calls if c.startswith("ncu ") and " -o " in c]
    assert len(prof) == 1
    assert f"-o {out}/ncu/bf16-stream " in prof[0] and "--set full " in prof[0]
    assert "--launch-skip 129 " in prof[0] and prof[0].split(" | ")[0].endswith("--tokens 130")
    assert "DEFINES=MONOLITH_RING_RELEASE=1 " in prof[0]  # a diagnostic build named by the caller stays
    assert not (out / "ncu" / "sets.txt").exists()


def test_gpu_sh_m4_timelines_only_when_asked(tmp_path, monkeypatch):
    """M4_TIMELINES adds `--timelines DIR` to the m4 call and the harness session writes the
    timelines there (the page's race streams); without it the call names none and the session
    writes none. M4_ENGINES and M4_OUT reach the session too."""
    r, calls, _ = _gpu_sh(tmp_path / "a", "m4", M4_ENGINES="megakernel-bf16-stream", M4_OUT="results/x.json")
    assert r.returncode == 0, r.stdout + r.stderr
    (m4,) = [c for c in _monolith_calls(calls) if c[0] == "m4"]
    assert "--timelines" not in m4
    got = _milestone_steps(monkeypatch, m4, tmp_path / "a")
    assert got["bench"] == ("megakernel-bf16-stream", Path("results/x.json"), None)
    r, calls, _ = _gpu_sh(tmp_path / "b", "m4", M4_ENGINES="megakernel-bf16-stream", M4_TIMELINES="results/timelines")
    assert r.returncode == 0, r.stdout + r.stderr
    (m4,) = [c for c in _monolith_calls(calls) if c[0] == "m4"]
    assert m4[m4.index("--timelines") + 1] == "results/timelines"
    got = _milestone_steps(monkeypatch, m4, tmp_path / "b")
    assert got["bench"] == ("megakernel-bf16-stream", Path("results/m4_stream_bf16.json"), Path("results/timelines"))
