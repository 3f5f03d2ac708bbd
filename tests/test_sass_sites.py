"""scripts/sass_sites.py: SASS instructions per schedule statement, one build or two side by side."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # sass_sites imports ncu_stalls from beside it
spec = importlib.util.spec_from_file_location("sass_sites", SCRIPTS / "sass_sites.py")
ss = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ss)

K = ss.KERNEL


def dump(sites: dict[int, int]) -> str:
    """A dump of the kernel whose instructions sit at the given schedule lines (n each), plus
    another kernel's that must not count."""
    out, off = [".text.other:", "        /*0000*/                   NOP ;", f".text.{K}:"], 0
    for line, n in sites.items():
        out += [f'\t//## File "/x/kernel/loads.cuh", line 40 inlined at "/x/kernel/schedule_stream.cuh", line {line}',
                f'\t//## File "/x/kernel/schedule_stream.cuh", line {line} inlined at "/x/kernel/schedule_stream.cuh", line 2000',
                '\t//## File "/x/kernel/schedule_stream.cuh", line 2000 inlined at "/x/kernel/megakernel.cu", line 931',
                '\t//## File "/x/kernel/megakernel.cu", line 931']
        for _ in range(n):
            out.append(f"        /*{off:04x}*/                   FFMA R1, R2, R3, R1 ;")
            off += 16
    return "\n".join(out) + "\n"


def test_counts_per_site_and_the_difference(tmp_path, capsys):
    a, b = tmp_path / "a.sass", tmp_path / "b.sass"
    a.write_text(dump({158: 5, 269: 3}))
    b.write_text(dump({158: 5, 269: 1, 175: 7}))
    assert ss.main([str(a), "--json", str(tmp_path / "a.json")]) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["instructions_a"] == 8  # the other kernel's NOP is not counted
    assert [(r["site"], r["instructions"]) for r in doc["sites"]] == [("schedule_stream.cuh:158", 5),
                                                                       ("schedule_stream.cuh:269", 3)]
    src = (Path(__file__).parents[1] / "kernel" / "schedule_stream.cuh").read_text().splitlines()
    assert doc["sites"][0]["statement"] == src[157].strip()[:70]  # this checkout's line text
    assert ss.main([str(a), "--compare", str(b), "--json", str(tmp_path / "ab.json")]) == 0
    ab = json.loads((tmp_path / "ab.json").read_text())
    assert (ab["instructions_a"], ab["instructions_b"]) == (8, 13)
    assert [(r["site"], r["delta"]) for r in ab["sites"]] == [("schedule_stream.cuh:175", 7),
                                                              ("schedule_stream.cuh:269", -2),
                                                              ("schedule_stream.cuh:158", 0)]
    assert "13" in capsys.readouterr().out


def test_refuses_a_dump_without_the_kernel(tmp_path):
    p = tmp_path / "x.sass"
    p.write_text(dump({158: 2}).replace(K, "something_else"))
    with pytest.raises(SystemExit, match="no .text"):
        ss.main([str(p)])
