"""scripts/sass_waits.py: loads issued before a wait whose register is needed before its first poll."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # sass_waits imports ncu_stalls from beside it
spec = importlib.util.spec_from_file_location("sass_waits", SCRIPTS / "sass_waits.py")
sw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sw)

K = sw.KERNELS[0]


def dump(body: list[tuple[int, str]], kernel: str = K) -> str:
    """A dump of `kernel` whose instructions (schedule line, text) come in order; a label line is
    given as (0, ".L_x_N:"). Another kernel's section first, which must not be read."""
    out, off = [".text.other:", "        /*0000*/                   LDG.E.64.STRONG.GPU R2, desc[UR4][R4.64] ;",
                f".text.{kernel}:"], 0
    for line, text in body:
        if text.endswith(":"):
            out.append(text)
            continue
        out += [f'\t//## File "/x/kernel/schedule_stream.cuh", line {line} inlined at "/x/kernel/schedule_stream.cuh", line 2400',
                '\t//## File "/x/kernel/schedule_stream.cuh", line 2400 inlined at "/x/kernel/megakernel.cu", line 937',
                '\t//## File "/x/kernel/megakernel.cu", line 937']
        out.append(f"        /*{off:04x}*/                   {text} ;")
        off += 16
    return "\n".join(out) + "\n"


def run(tmp_path, body, **kw) -> dict:
    p = tmp_path / "d.sass"
    p.write_text(dump(body, **kw))
    assert sw.main([str(p), "--kernel", K, "--json", str(tmp_path / "o.json")]) == 0
    return json.loads((tmp_path / "o.json").read_text())[K]


def test_a_widening_before_the_poll_is_found_and_one_after_it_is_not(tmp_path):
    waits = run(tmp_path, [
        (200, "LDG.E.U16.CONSTANT R40, desc[UR10][R30.64]"),       # norm weight, widened early
        (200, "LDG.E.U16.CONSTANT R41, desc[UR10][R30.64+0x400]"),  # widened after the wait
        (201, "IMAD.U32 R40, R40, 0x10000, RZ"),
        (1490, "LDG.E.64.STRONG.GPU R10, desc[UR10][R28.64+0x11a000]"),
        (1490, "LDG.E.64.STRONG.GPU R12, desc[UR10][R28.64+0x11b000]"),
        (1491, "SHF.L.U32 R41, R41, 0x10, RZ"),
    ])
    assert len(waits) == 1 and waits[0]["site"] == "schedule_stream.cuh:1490"
    assert [(e["load"], e["use"], e["load_site"]) for e in waits[0]["early"]] == [("0000", "0020", "schedule_stream.cuh:200")]


def test_a_pair_destination_an_overwrite_and_a_store_count_as_uses(tmp_path):
    waits = run(tmp_path, [
        (10, "LDG.E.64.CONSTANT R20, desc[UR10][R2.64]"),   # R20, R21
        (11, "LDG.E.CONSTANT R30, desc[UR10][R2.64+0x8]"),
        (12, "LDG.E.CONSTANT R31, desc[UR10][R2.64+0xc]"),
        (13, "FADD R5, R21, R6"),                           # reads the pair's high half
        (14, "MOV R30, 0x3f800000"),                        # overwrites a pending load: a wait too
        (15, "STS [R9+0x3210], R31"),                       # a store reads its data operand
        (16, "LDG.E.64.STRONG.GPU R8, desc[UR10][R4.64]"),
    ])
    assert sorted(e["load"] for e in waits[0]["early"]) == ["0000", "0010", "0020"]


def test_polls_split_into_waits_and_code_before_a_loop_around_the_wait_is_not_counted(tmp_path):
    body = [(1423, "LDG.E R8, desc[UR10][R8.64]"), (0, ".L_x_1:")]  # before the layer loop
    body += [(1424, "STS [R9], R8")]  # the use sits inside the loop, before the wait
    body += [(1490, "LDG.E.64.STRONG.GPU R10, desc[UR10][R28.64]")]
    body += [(1500, "FFMA R1, R2, R3, R1")] * (sw.GAP + 1)
    body += [(1573, "LDG.E.U16.CONSTANT R50, desc[UR10][R8.64]"), (1574, "IMAD.U32 R51, R50, 0x10000, RZ"),
             (1575, "LDG.E.64.STRONG.GPU R12, desc[UR10][R2.64]")]
    body += [(1600, "FFMA R1, R2, R3, R1")] * sw.LOOP_MIN
    body += [(1700, "BRA `(.L_x_1)")]
    waits = run(tmp_path, body)
    assert [w["site"] for w in waits] == ["schedule_stream.cuh:1490", "schedule_stream.cuh:1575"]
    assert waits[0]["early"] == []  # the load ran before the loop: an earlier iteration's
    assert [e["load_site"] for e in waits[1]["early"]] == ["schedule_stream.cuh:1573"]


def test_the_polling_loop_itself_does_not_hide_what_precedes_it(tmp_path):
    waits = run(tmp_path, [
        (2117, "LDG.E.U16.CONSTANT R41, desc[UR12][R70.64+0x800]"),
        (2118, "IMAD.U32 R41, R41, 0x10000, RZ"),
        (0, ".L_x_9:"),
        (2142, "LDG.E.64.STRONG.GPU R10, desc[UR10][R4.64]"),
        (2142, "ISETP.NE.AND P0, PT, R10, R2, PT"),
        (2142, "@P0 BRA `(.L_x_9)"),
    ])
    assert [e["load"] for e in waits[0]["early"]] == ["0000"]


def test_refuses_a_dump_without_the_kernel_and_has_help(tmp_path):
    p = tmp_path / "x.sass"
    p.write_text(dump([(1, "NOP")], kernel="something_else"))
    with pytest.raises(SystemExit, match="no .text"):
        sw.main([str(p), "--kernel", K])
    h = subprocess.run([sys.executable, str(SCRIPTS / "sass_waits.py"), "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "in flight during the wait" in h.stdout
