"""scripts/sm120_proof.py on a CPU: the bitwise verdict over dev_bench's token file, the refusals and
the dry run (the steps themselves need a GPU)."""

from __future__ import annotations

import importlib.util
import sys

from monolith import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "sm120_proof.py"
_spec = importlib.util.spec_from_file_location("sm120_proof", SCRIPT)
proof = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sm120_proof", proof)
_spec.loader.exec_module(proof)


def test_bitwise_passes_only_when_every_depth_and_block_count_agrees():
    same = [1, 2, 3]
    ref = {f"{v}/{b}/250": same for v in ("fp8-stream", "fp8-stream-sm120") for b in (128, 96, 64)}
    assert proof.bitwise_verdict(ref)["passed"]
    ref["fp8-stream-sm120/64/250"] = [1, 2, 4]  # one block count of the 4-slot ring differs
    v = proof.bitwise_verdict(ref)
    assert not v["passed"] and v["groups"]["fp8-stream/250"]["distinct_token_sequences"] == 2


def test_bitwise_fails_a_group_without_its_sm120_twin_and_an_empty_file():
    assert not proof.bitwise_verdict({"bf16-stream/128/250": [1], "bf16-stream/64/250": [1]})["passed"]
    assert not proof.bitwise_verdict({})["passed"]


def test_groups_are_per_format_and_prompt():
    g = proof.bitwise_groups({"nvfp4-stream/128/2": [1], "nvfp4-stream-sm120/128/2": [1], "nvfp4-stream/128/250": [2]})
    assert g == {
        "nvfp4-stream/2": ["nvfp4-stream-sm120/128/2", "nvfp4-stream/128/2"],
        "nvfp4-stream/250": ["nvfp4-stream/128/250"],
    }


def test_refusals_and_dry_run(tmp_path, capsys):
    assert proof.main(["--steps", "tests,bogus", "--out", str(tmp_path / "p.json")]) == 2
    assert "unknown step(s) bogus" in capsys.readouterr().out
    assert proof.main(["--out", str(tmp_path / "p.txt")]) == 2
    assert "must end in .json" in capsys.readouterr().out
    assert proof.main(["--dry-run", "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    for step in proof.STEPS:
        assert out.count(f"{step} ") >= 1
    assert "MONOLITH_TEST_VARIANTS=bf16-stream-sm120,fp8-stream-sm120,nvfp4-stream-sm120" in out
    assert "megakernel-nvfp4-stream-sm120" in out and "--blocks 128,96,64" in out
