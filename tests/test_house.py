"""The house (issue 13): constants defined once, no silent import failures, every CLI option
explained, imports sorted with monolith as first-party, no stale file references."""
import re
import subprocess
import sys

import pytest
import typer

from monolith import REPO_ROOT, kernel_spec
from monolith import megakernel as mk

# ---------------------------------------------------------------- constants defined once

def test_error_codes_are_parsed_from_the_kernel():
    codes = kernel_spec.error_codes()
    assert codes["kOk"] == 0 and codes["kErrBarrierTimeout"] >= 1
    assert len(set(codes.values())) == len(codes), "two names for one code"
    assert not hasattr(mk, "ERRORS"), "the Python copy of the error table is back"
    for name, code in codes.items():
        if code == 0:
            continue
        text = kernel_spec.describe_error(code, 3 * 16 + 2, {2: "the second wait"})
        assert name in text and "unknown" not in text
        if name.endswith("Timeout"):
            assert "layer 3, the second wait" in text
        else:
            assert "value 50" in text
    assert "wait 9" in kernel_spec.describe_error(codes["kErrBarrierTimeout"], 16 + 9, {})
    assert "unknown error code 999" in kernel_spec.describe_error(999, 0)


def test_error_code_parser_follows_the_header(tmp_path):
    """New codes appear and old ones go without a Python edit; implicit values count like C++."""
    h = tmp_path / "sync.cuh"
    h.write_text("enum ErrorCode : uint32_t {\n  kOk = 0,  // fine\n  kErrBarrierTimeout = 1,\n"
                 "  /* gone: kErrBadLaunch = 6, */\n  kErrRingTimeout = 0x8u,\n  kErrNext,\n};\n")
    codes = kernel_spec.error_codes(h)
    assert codes == {"kOk": 0, "kErrBarrierTimeout": 1, "kErrRingTimeout": 8, "kErrNext": 9}
    assert "kErrRingTimeout" in kernel_spec.describe_error(8, 16 * 27 + 3, {}, codes)
    h.write_text("enum Other { kOk = 0 };")
    with pytest.raises(ValueError, match="no `enum ErrorCode"):
        kernel_spec.error_codes(h)


def test_xray_slots_come_from_the_kernel(tmp_path):
    """The analyzer's truncation check uses kXrayMaxEvents of kernel/xray.cuh (it had 320 against
    the kernel's 384): a block that filled every slot is reported, one short of it is not."""
    import numpy as np

    from monolith.xray.analyze import analyze
    from monolith.xray.synthetic import generate

    cap = kernel_spec.xray_max_events()
    text = (REPO_ROOT / "kernel" / "xray.cuh").read_text()
    assert re.search(rf"constexpr int kXrayMaxEvents = {cap};", text)
    assert "XRAY_MAX_EVENTS" not in (REPO_ROOT / "xray" / "analyze.py").read_text()
    meta, ev = generate(sm_count=6, blocks=4, layers=3, idle_sms=(), seed=1)
    meta.pop("truth")
    per_block = int(np.bincount(ev[:, 0]).max())
    assert per_block < cap
    # pad block 0 with empty token-scope records up to exactly the kernel's slot count
    lm = [p for p in __import__("monolith.xray.phases", fromlist=["x"]).load_phases() if p.scope == "token"][0].id
    row = ev[ev[:, 0] == 0][-1].copy()
    row[2], row[3] = lm, 3
    pad = np.repeat(row[None], cap - int((ev[:, 0] == 0).sum()), axis=0)
    full = np.concatenate([ev, pad])
    assert any("filled all" in w and str(cap) in w for w in analyze(meta, full)["warnings"])
    assert not any("filled all" in w for w in analyze(meta, full[:-1])["warnings"])


def test_config_header_is_parsed_once():
    c = kernel_spec.config_constants()
    assert c["kHidden"] == 1024 and c["kContextCap"] >= 2048
    src = (REPO_ROOT / "tests" / "test_kernel_host.py").read_text()
    assert "kernel_spec.config_constants" in src and "re.finditer" not in src


def test_every_variant_has_its_wait_table():
    """A timed-out wait names its wait from megakernel.WAITS[variant]; a variant without a table
    would report bare numbers."""
    for v in kernel_spec.variants()["variants"]:
        assert v["name"] in mk.WAITS, f"monolith/megakernel.py WAITS has no entry for variant {v['name']!r}"


def test_build_flags_come_from_variants_json():
    spec = kernel_spec.variants()
    for v in spec["variants"]:
        flags = kernel_spec.build_flags(v["name"])
        assert flags[:len(spec["extra_flags"])] == spec["extra_flags"]
        assert flags[len(spec["extra_flags"]):] == [f"-D{d}" for d in v.get("defines", [])]
    assert "extra_flags_nvcc" not in (REPO_ROOT / "monolith" / "megakernel.py").read_text()


def test_variants_json_holds_no_measurement_notes():
    """Measurement notes live in results/ and NOTES.md; variants.json is build configuration."""
    spec = kernel_spec.variants()
    for v in spec["variants"]:
        for k, val in v.items():
            assert not k.endswith("_note"), f"{v['name']}.{k}: a note belongs in NOTES.md"
            assert not (isinstance(val, str) and re.search(r"\d[\d,.]* tok/s", val)), f"{v['name']}.{k} quotes a measurement"


def test_dead_code_is_gone():
    assert not hasattr(mk, "wall_time_tokens_per_s")


# ---------------------------------------------------------------- the CLI

def test_an_area_that_fails_to_import_is_an_error(tmp_path, monkeypatch):
    """It used to be skipped silently when the module itself was missing, hiding a broken install."""
    from monolith import cli

    app = typer.Typer()
    with pytest.raises(ImportError, match="the CLI area monolith.cli_nope failed to import"):
        cli.register_areas(app, ["monolith.cli_nope"])
    (tmp_path / "broken_area.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="broken_area failed to import .*not_installed_anywhere"):
        cli.register_areas(app, ["broken_area"])


def _commands(c, path=()):
    if hasattr(c, "commands"):
        for n, sub in c.commands.items():
            yield from _commands(sub, (*path, n))
    else:
        yield " ".join(path), c


def test_every_option_has_help_text():
    from monolith.cli import app

    missing = []
    for path, c in _commands(typer.main.get_command(app)):
        if not (c.help or "").strip():
            missing.append(f"{path}: command")
        missing += [f"{path} {p.opts[0]}" for p in c.params
                    if type(p).__name__.endswith("Option") and not (getattr(p, "help", "") or "").strip()]
    assert missing == []


# ---------------------------------------------------------------- lint and references

def test_ruff_sorts_monolith_subpackages_as_first_party():
    """monolith.bench lives in bench/: without known-first-party ruff wants it in the third-party
    group, apart from monolith.config (two groups for one package)."""
    src = "import numpy as np\n\nfrom monolith.bench import bytemodel\nfrom monolith.config import HIDDEN\n\nprint(np, bytemodel, HIDDEN)\n"
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--stdin-filename", "monolith/x.py", "-"],
                       input=src, capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_stale_test_file_references():
    """Comments and docs name test files that exist (one named a test_config.py long gone).
    kernel/ sources are checked by their owner."""
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO_ROOT).stdout.split()
    stale = []
    for f in files:
        if f.startswith(("kernel/", "results/", "web/public/")) or not f.endswith((".py", ".md", ".ts", ".mjs", ".sh", ".toml", ".cu", ".cuh", "Makefile")):
            continue
        p = REPO_ROOT / f
        if not p.is_file():
            continue
        for m in re.finditer(r"(?<![\w/])tests/(test_\w+\.py)", p.read_text(errors="replace")):
            if not (REPO_ROOT / "tests" / m.group(1)).is_file():
                stale.append(f"{f}: tests/{m.group(1)}")
    assert stale == []


def test_repository_does_not_cite_documents_it_does_not_contain():
    """Code and docs cite NOTES.md and results files, never a brief that is not in the
    repository. Not checked: kernel/ sources (their owner's), results/ (written by the harness
    at the time, never edited by hand) and web/public/data/ (generated from those by
    `monolith export`)."""
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO_ROOT).stdout.split()
    bad = []
    for f in files:
        if f.startswith(("kernel/", "results/", "web/public/data/")) or f.endswith((".png", ".gz", ".npz", ".safetensors")):
            continue
        p = REPO_ROOT / f
        if not p.is_file():
            continue
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if re.search(r"MISS" r"ION|\bthe brief\b", line):  # spelled apart so this line does not match itself
                bad.append(f"{f}:{i}: {line.strip()[:100]}")
    assert bad == []


def test_every_console_is_made_by_make_console():
    """A bare rich Console lays logs out for 80 columns and cuts tables: every command's console
    comes from monolith.console.make_console."""
    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, cwd=REPO_ROOT).stdout.split()
    bare = [f for f in files if f != "monolith/console.py" and re.search(r"\bConsole\(", (REPO_ROOT / f).read_text())]
    assert bare == []
