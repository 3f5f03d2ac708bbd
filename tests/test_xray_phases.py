import pytest

from monolith.errors import MonolithError
from monolith.xray.phases import DEF_PATH, load_phases, parse_phases


def test_phase_ids_dense_and_unique():
    ph = load_phases()
    ids = [p.id for p in ph]
    assert ids == list(range(len(ids))), "phase ids in kernel/xray_phases.def must be 0..N-1 without gaps"
    assert len({p.name for p in ph}) == len(ph)


def test_phase_table_matches_def_file_line_count():
    n = sum(1 for line in DEF_PATH.read_text().splitlines() if line.split("//")[0].strip().startswith("XRAY_PHASE("))
    assert n == len(load_phases())


def test_kinds_scopes_and_colors():
    for p in load_phases():
        assert p.kind in ("work", "wait") and p.scope in ("layer", "token")
        assert p.color.startswith("#") and len(p.color) == 7
    assert any(p.kind == "wait" for p in load_phases())


@pytest.mark.parametrize("line,msg", [
    ("XRAY_PHASE(0, a, busy, layer)", "kind"),
    ("XRAY_PHASE(0, a, work, block)", "scope"),
    ("XRAY_PHASE(x, a, work, layer)", "cannot parse"),
    ("// only a comment XRAY_PHASE", "no XRAY_PHASE"),
])
def test_parse_errors(line, msg):
    with pytest.raises(MonolithError, match=msg):
        parse_phases(line)
