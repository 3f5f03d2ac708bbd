"""scripts/ncu_stalls.py: Nsight Compute's per-instruction warp samples joined with a SASS line dump."""
import csv
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("ncu_stalls", Path(__file__).parents[1] / "scripts" / "ncu_stalls.py")
ncu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu)

KERNEL = "_ZN8monolith11plain_build11decode_stepILi2EEEvNS_10StepParamsE"
DUMP = f""".text.other:
        /*0000*/                   NOP ;
.text.{KERNEL}:
	//## File "/x/kernel/schedule_stream.cuh", line 70 inlined at "/x/kernel/schedule_stream.cuh", line 810
	//## File "/x/kernel/schedule_stream.cuh", line 810 inlined at "/x/kernel/schedule_stream.cuh", line 1467
	//## File "/x/kernel/schedule_stream.cuh", line 1467 inlined at "/x/kernel/schedule_stream.cuh", line 1863
	//## File "/x/kernel/schedule_stream.cuh", line 1863 inlined at "/x/kernel/megakernel.cu", line 931
	//## File "/x/kernel/megakernel.cu", line 931
        /*0000*/                   BAR.SYNC 0x1 ;
        /*0010*/                   B2R.RESULT RZ, P2 ;
	//## File "/x/kernel/schedule_stream.cuh", line 169 inlined at "/x/kernel/schedule_stream.cuh", line 1441
	//## File "/x/kernel/schedule_stream.cuh", line 1441 inlined at "/x/kernel/schedule_stream.cuh", line 1863
	//## File "/x/kernel/schedule_stream.cuh", line 1863 inlined at "/x/kernel/megakernel.cu", line 931
	//## File "/x/kernel/megakernel.cu", line 931
        /*0020*/                   ISETP.NE.AND P2, PT, R88, R37, PT ;
"""
HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Avg. Threads Executed", "stall_barrier",
       "stall_long_sb", "stall_barrier (Not Issued)"]


def write(tmp: Path, rows, gz=True, hdr=HDR, kernel="decode_step<(int)2>") -> Path:
    """The source page's CSV as `ncu --page source --csv` writes it: the kernel's name, then the table."""
    p = tmp / ("s.csv.gz" if gz else "s.csv")
    with (gzip.open(p, "wt", newline="") if gz else open(p, "w", newline="")) as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", f"void monolith::plain_build::{kernel}(monolith::StepParams)"])
        w.writerow(hdr)
        w.writerows(rows)
    return p


ROWS = [["0x7f0000000000", "BAR.SYNC 0x1", "10", "32", "9", "1", "9"],
        ["0x7f0000000010", "B2R.RESULT RZ, P2", "30", "32", "30", "0", "30"],
        ["0x7f0000000020", "ISETP.NE.AND P2, PT, R88, R37, PT", "60", "1", "0", "60", "0"]]


def test_sites_reasons_and_one_thread_share(tmp_path):
    (tmp_path / "d.sass").write_text(DUMP)
    out = tmp_path / "o.json"
    assert ncu.main([str(write(tmp_path, ROWS)), "--lines", str(tmp_path / "d.sass"), "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["samples"] == 100
    assert r["by_reason"]["long_sb"] == {"samples": 61, "share": 0.61}
    assert r["by_reason"]["barrier"]["samples"] == 39
    sites = {s["site"]: s for s in r["sites"]}
    assert sites["schedule_stream.cuh:1441"]["samples"] == 60 and sites["schedule_stream.cuh:1441"]["one_thread_samples"] == 60
    assert sites["schedule_stream.cuh:1467"]["samples"] == 40 and sites["schedule_stream.cuh:1467"]["one_thread_samples"] == 0
    assert r["one_thread_samples"] == 60


def test_refuses_another_build_and_other_csv(tmp_path):
    (tmp_path / "d.sass").write_text(DUMP)
    other = [r[:] for r in ROWS]
    for r in other:
        r[1] = "FFMA R1, R2, R3, R4"
    with pytest.raises(SystemExit, match="not the same build"):
        ncu.main([str(write(tmp_path, other, gz=False)), "--lines", str(tmp_path / "d.sass")])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="not an ncu SASS source page"):
        ncu.main([str(bad), "--lines", str(tmp_path / "d.sass")])


def test_microseconds_per_block(tmp_path):
    """With the launch's duration, a site's samples become warp-microseconds per block:
    share x warps per block x duration (60 % of 2 warps x 10 us = 12 us)."""
    (tmp_path / "d.sass").write_text(DUMP)
    out = tmp_path / "o.json"
    ncu.main([str(write(tmp_path, ROWS)), "--lines", str(tmp_path / "d.sass"), "--json", str(out),
              "--duration-us", "10", "--warps-per-block", "2"])
    sites = {s["site"]: s for s in json.loads(out.read_text())["sites"]}
    assert sites["schedule_stream.cuh:1441"]["us_per_block"] == 12.0
    assert sites["schedule_stream.cuh:1441"]["one_thread_us_per_block"] == 12.0
    assert sites["schedule_stream.cuh:1467"]["us_per_block"] == 8.0
    assert sites["schedule_stream.cuh:1467"]["one_thread_us_per_block"] == 0.0


def test_shared_wavefronts_per_site(tmp_path):
    """Bank conflicts: the source page's shared-memory wavefront columns, summed per site, with
    the sites ranked by excessive wavefronts (an 8-way LDS.128 at 1441 doubles its ideal 4)."""
    (tmp_path / "d.sass").write_text(DUMP)
    hdr = HDR + ["L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal", "L1 Wavefronts Shared Excessive"]
    rows = [ROWS[0] + ["0", "0", "0"], ROWS[1] + ["4", "4", "0"], ROWS[2] + ["8", "4", "4"]]
    p = write(tmp_path, rows, gz=False, hdr=hdr)
    out = tmp_path / "o.json"
    assert ncu.main([str(p), "--lines", str(tmp_path / "d.sass"), "--json", str(out)]) == 0
    sh = json.loads(out.read_text())["shared"]
    assert (sh["wavefronts"], sh["ideal"], sh["excessive"]) == (12, 8, 4)
    assert sh["sites"] == [{"site": "schedule_stream.cuh:1441", "wavefronts": 8, "ideal": 4, "excessive": 4}]


def test_long_position_kernel_is_found_in_the_dump(tmp_path):
    """A report of decode_step_long (the long-position kernel) is joined with that kernel's section
    of the dump (found under its own mangled name), and decode_step's name does not find it."""
    long_kernel = "_ZN8monolith11plain_build16decode_step_longILi2EEEvNS_10StepParamsE"
    (tmp_path / "d.sass").write_text(DUMP.replace(f".text.{KERNEL}:", ".text.short_only:") + DUMP.replace(
        ".text.other:\n        /*0000*/                   NOP ;\n", "").replace(KERNEL, long_kernel))
    p = write(tmp_path, ROWS, gz=False, kernel="decode_step_long<(int)2>")
    out = tmp_path / "o.json"
    assert ncu.main([str(p), "--lines", str(tmp_path / "d.sass"), "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["samples"] == 100 and {s["site"] for s in r["sites"]} == {"schedule_stream.cuh:1441", "schedule_stream.cuh:1467"}
    # the short kernel's name finds no section in a dump that holds only the long one's
    (tmp_path / "only_long.sass").write_text(DUMP.replace(KERNEL, long_kernel))
    with pytest.raises(SystemExit, match="no .text section"):
        ncu.main([str(write(tmp_path, ROWS)), "--lines", str(tmp_path / "only_long.sass")])


def test_within_a_region_of_lines(tmp_path):
    """--within A:B: only instructions inlined through schedule_stream.cuh lines A..B, by reason, the
    one-thread ones apart, per statement (the chain's outermost line in the range)."""
    (tmp_path / "d.sass").write_text(DUMP)
    out = tmp_path / "o.json"
    csv_path = write(tmp_path, ROWS)
    assert ncu.main([str(csv_path), "--lines", str(tmp_path / "d.sass"), "--json", str(out), "--within", "800:900"]) == 0
    w = json.loads(out.read_text())["within"]
    assert w["lines"] == [800, 900]
    assert w["all"]["samples"] == 40 and w["all"]["share_of_all"] == 0.4   # BAR.SYNC + B2R, through line 810
    assert w["all"]["reasons"] == {"barrier": 0.975, "long_sb": 0.025}
    assert w["one_thread"]["samples"] == 0 and w["one_thread"]["reasons"] == {}
    assert [(s["line"], s["one_thread"], s["samples"]) for s in w["statements"]] == [(810, False, 40)]
    assert ncu.main([str(csv_path), "--lines", str(tmp_path / "d.sass"), "--json", str(out), "--within", "1400:1470"]) == 0
    w = json.loads(out.read_text())["within"]
    assert w["all"]["samples"] == 100 and w["one_thread"]["samples"] == 60
    assert w["one_thread"]["reasons"] == {"long_sb": 1.0}
    assert {(s["line"], s["one_thread"]): s["samples"] for s in w["statements"]} == {(1441, True): 60, (1467, False): 40}
    with pytest.raises(SystemExit, match="expected A:B"):
        ncu.main([str(csv_path), "--lines", str(tmp_path / "d.sass"), "--within", "900:800"])
