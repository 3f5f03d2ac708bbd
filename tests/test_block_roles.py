"""MONOLITH_BLOCK_ROLES (nineteenth session's experiment), without a GPU: the table scripts/block_roles.py
builds, the file check in monolith.megakernel, and the kernel source using the role where blockIdx.x was."""
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from monolith import megakernel as mk
from monolith.errors import MonolithError

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("block_roles", REPO / "scripts" / "block_roles.py")
br = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("block_roles", br)
_spec.loader.exec_module(br)


def test_roles_by_side_keep_groups_on_one_side():
    """32 blocks in chunks of 4 alternating between two sides (the launch's pattern, smaller): with
    groups of 4 roles, every group's blocks share a side, roles are a permutation, and within a side
    the block order is kept."""
    sm_of_block = [100 + b for b in range(32)]
    side_of_sm = {100 + b: (b // 4) % 2 for b in range(32)}
    roles = br.roles_by_side(sm_of_block, side_of_sm)
    assert sorted(roles) == list(range(32))
    assert br.group_sides(roles, sm_of_block, side_of_sm, 8) == [[4, 0]] * 4 + [[0, 4]] * 4
    side0 = [b for b in range(32) if side_of_sm[100 + b] == 0]
    assert [roles[b] for b in side0] == list(range(16))
    # identity roles mix the sides in every group of 8 here (groups of 4 with 8 groups: pure by chance)
    assert br.group_sides(list(range(32)), sm_of_block, side_of_sm, 4) == [[4, 4]] * 4


def test_uneven_sides_leave_one_mixed_group():
    sm_of_block = list(range(16))
    side_of_sm = {s: int(s >= 9) for s in range(16)}  # 9 on side 0, 7 on side 1
    gs = br.group_sides(br.roles_by_side(sm_of_block, side_of_sm), sm_of_block, side_of_sm, 4)
    assert sum(1 for a, b in gs if a and b) == 1 and sum(a for a, _ in gs) == 9


def _write(tmp_path, obj):
    p = tmp_path / "roles.json"
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


@pytest.mark.parametrize("bad", ["{", {"x": [0]}, {"roles": [0, 0]}, {"roles": [1, 2]}, {"roles": []},
                                 {"roles": [0, "1"]}, {"roles": list(range(1025))}])
def test_a_bad_roles_file_is_refused(tmp_path, bad):
    with pytest.raises(MonolithError, match="block roles file"):
        mk.read_block_roles(_write(tmp_path, bad))


def test_apply_block_roles_hands_the_table_over(tmp_path, monkeypatch):
    class Ext:
        got = None

        def set_block_roles(self, roles):
            Ext.got = roles

    monkeypatch.delenv(mk.BLOCK_ROLES_ENV, raising=False)
    assert mk.apply_block_roles(Ext()) is None and Ext.got is None
    p = _write(tmp_path, {"roles": [2, 0, 1, 3]})
    monkeypatch.setenv(mk.BLOCK_ROLES_ENV, str(p))
    assert mk.apply_block_roles(Ext()) == str(p) and Ext.got == [2, 0, 1, 3]


def test_the_kernel_takes_every_role_from_block_role():
    """make_plan and the consumer's b read block_role(); blockIdx.x is left only where the physical
    block is meant (the fault injection's block 0, block_role itself)."""
    text = (REPO / "kernel" / "schedule_stream.cuh").read_text()
    assert "plan = make_plan(block_role(), gridDim.x, pos);" in text
    assert "const int G = gridDim.x, b = block_role(), g = s.g;" in text
    code = [ln for ln in text.splitlines() if "blockIdx.x" in ln and not ln.lstrip().startswith("//")]
    assert len(code) == 3, code  # block_role's table read and fallback, the fault injection
    assert re.search(r"#define MONOLITH_BLOCK_ROLES 0\b", text)
