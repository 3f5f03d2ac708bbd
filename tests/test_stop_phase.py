"""The StopPhase codes: one definition (kernel/config.cuh `enum StopPhase`), read by monolith/stop_phase.py,
and what the host's launches pass (monolith/megakernel.py, monolith.xray.fidelity) taken from it. No GPU."""

import ast
import re
import types

import pytest
import torch

from monolith import REPO_ROOT
from monolith import megakernel as M
from monolith import stop_phase as SP
from monolith.errors import MonolithError
from monolith.xray import fidelity as F

CONFIG = REPO_ROOT / "kernel" / "config.cuh"


def test_the_enum_holds_every_code_the_kernel_compares_stop_phase_with():
    vals = SP.values()
    assert SP.CONFIG_CUH == CONFIG
    # the kernel's own names for the codes, wherever it compares or offsets stop_phase
    used = set()
    for f in sorted((REPO_ROOT / "kernel").glob("*.cu*")):
        used |= set(re.findall(r"\b(kStop\w+|kFault\w+)\b", f.read_text()))
    assert used and used <= set(vals), sorted(used - set(vals))
    assert len(set(vals.values())) == len(vals), "two StopPhase names share a value"
    # kFaultBlock0After + phase must not land on another code for any stop of a layer
    phases = [vals[n] for n in ("kStopQKV", "kStopAttn", "kStopO", "kStopGateUp", "kStopDown")]
    others = set(vals.values()) - {vals["kFaultBlock0After"]}  # kFaultBlock0After + kStopQKV is itself
    assert not {vals["kFaultBlock0After"] + p for p in phases} & others
    assert F.stop_phase_values() == vals  # the fidelity tables read the same source


def test_megakernel_takes_its_codes_from_the_enum():
    vals = SP.parse(CONFIG.read_text())
    assert (M.STOP_NEVER, M.FAULT_BLOCK0_EXITS, M.FAULT_BLOCK0_AFTER) == (
        vals["kStopNever"],
        vals["kFaultBlock0Exits"],
        vals["kFaultBlock0After"],
    )


STOP_NAMES = {"stop", "stop_phase", "after_phase"}


def stop_literals(source: str, codes: set[int]) -> list[tuple[int, int]]:
    """(line, value) of every integer literal equal to one of `codes` where the host spells a stop: a
    `stop` / `stop_phase` keyword, parameter default or assignment, a tuple of int literals, or an
    arithmetic with a name that says phase (`110 + after_phase`)."""

    def lits(node):
        return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is int and n.value in codes]

    def names(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
        }

    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.keyword) and n.arg in STOP_NAMES:
            found += lits(n.value)
        elif isinstance(n, ast.arguments):
            pos = n.posonlyargs + n.args
            pairs = list(zip(pos[len(pos) - len(n.defaults) :], n.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(n.kwonlyargs, n.kw_defaults, strict=True) if d is not None]
            found += [x for a, d in pairs if a.arg in STOP_NAMES for x in lits(d)]
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in STOP_NAMES for t in n.targets):
            found += lits(n.value)
        elif isinstance(n, ast.Tuple) and all(isinstance(e, ast.Constant) for e in n.elts):
            found += lits(n)
        elif isinstance(n, ast.BinOp) and any("phase" in x.lower() for x in names(n)):
            found += lits(n)
    return [(n.lineno, n.value) for n in sorted(set(found), key=lambda n: (n.lineno, n.col_offset))]


def test_the_literal_scan_finds_the_forms_a_stop_code_was_written_in():
    codes = {99, 100, 110}
    src = """
def _launch(self, pos, stop=(99, 99), record=True):
    pass
def hang(layer, after_phase):
    stop = (0, 100) if after_phase is None else (layer, 110 + after_phase)
    f(stop_phase=99)
    g(pct=100 * x, n=99)
"""
    assert [v for _, v in stop_literals(src, codes)] == [99, 99, 100, 110, 99]


def test_no_stop_code_is_written_as_a_literal_on_the_host():
    """The launches' codes come from the enum only: a literal stop code in the host's launch code
    would stay behind when config.cuh changed it."""
    vals = SP.values()
    codes = {v for v in vals.values() if v >= 99}  # 0..4 are everywhere and say nothing
    assert {vals["kStopNever"], vals["kFaultBlock0Exits"], vals["kFaultBlock0After"]} <= codes
    for rel in ("monolith/megakernel.py", "xray/fidelity.py", "tests/test_xray_fidelity.py"):
        assert stop_literals((REPO_ROOT / rel).read_text(), codes) == [], rel


class _Ext:
    def __init__(self):
        self.stops = []

    def launch(self, *args):
        self.stops.append((args[17], args[18]))  # stop_layer, stop_phase (kernel/bindings.cpp's order)


class _Tensor:
    def data_ptr(self):
        return 0


def _engine(monkeypatch):
    """A MegakernelEngine without a GPU: every buffer a fake pointer, the extension a recorder."""
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    eng = object.__new__(M.MegakernelEngine)
    eng.ext = _Ext()
    t = _Tensor()
    for name in (
        "w",
        "norms",
        "embed",
        "final_norm",
        "rope",
        "kv",
        "scr",
        "acc",
        "logits_buf",
        "sync",
        "codes",
        "row_scales",
        "embed_codes",
        "embed_scales",
        "_scratch_tokens",
    ):
        setattr(eng, name, t)
    eng.xray_buf, eng.variant_id, eng.blocks, eng.xray = None, 0, 1, False
    eng.timeout_cycles, eng.jitter_ns, eng.device, eng.position = 10**9, 0, "cpu", 0
    eng.check = lambda: None
    eng.reset = lambda: None
    return eng


def test_the_launches_pass_the_enums_codes(monkeypatch):
    """What reaches the extension: a whole step (kStopNever, kStopNever); the hang tests
    (0, kFaultBlock0Exits) and (layer, kFaultBlock0After + phase). (step_until passes its caller's
    StopPhase through.)"""
    vals = SP.parse(CONFIG.read_text())
    eng = _engine(monkeypatch)
    # the argument order the fake reads is the binding's: stop_layer and stop_phase after timeout_cycles
    sig = re.search(
        r"long long timeout_cycles, int stop_layer, int stop_phase,",
        (REPO_ROOT / "kernel" / "bindings.cpp").read_text(),
    )
    assert sig
    eng._launch(0, 0, 0)
    eng.inject_stuck_barrier()
    eng.inject_stuck_barrier(layer=3, after_phase=vals["kStopO"])
    never = vals["kStopNever"]
    assert eng.ext.stops == [
        (never, never),
        (0, vals["kFaultBlock0Exits"]),
        (3, vals["kFaultBlock0After"] + vals["kStopO"]),
    ]


def test_parse_reads_only_explicit_decimal_codes(tmp_path):
    text = """// before
    enum Other { kA = 1 };
    enum StopPhase : int { kStopQKV = 0, /* a block comment, kX = 5 */ kStopNever = 99,
                           // a comment with, commas = 3
                           kFaultBlock0Exits = 100 };"""
    assert SP.parse(text) == {"kStopQKV": 0, "kStopNever": 99, "kFaultBlock0Exits": 100}
    for bad, msg in (
        ("enum StopPhase { kA = 0, kB };", r"item 'kB' is not `kName = <decimal>`"),
        ("enum StopPhase { kA = 0, kB = 0x10 };", r"item 'kB = 0x10'"),
        ("enum StopPhase { kA = 0, kA = 1 };", "names kA twice"),
        ("enum StopPhase { };", "is empty"),
        ("enum Stop { kA = 0 };", r"no `enum StopPhase \{...\}`"),
    ):
        with pytest.raises(MonolithError, match=msg):
            SP.parse(bad, "x.cuh")
    p = tmp_path / "config.cuh"
    p.write_text("enum StopPhase { kStopNever = 7 };")
    assert SP.code("kStopNever", p) == 7
    p.write_text("enum StopPhase { kStopNever = 8 };\n")  # another size: the cache keys on the file's version
    assert SP.values(p) == {"kStopNever": 8}
    with pytest.raises(MonolithError, match="has no kFaultBlock0Exits"):
        SP.code("kFaultBlock0Exits", p)
    with pytest.raises(MonolithError, match="cannot read the StopPhase enum"):
        SP.values(tmp_path / "absent.cuh")
