"""kernel/variant_units.def, the one table from a variant id to the translation unit that compiles its
kernels and to whether the host launches them (kernel/step_unit.cuh reads it as an X-macro in every
unit): its rows against megakernel.cuh's enum and kernel/variants.json, and every unit built on it."""

from __future__ import annotations

import re

import pytest

from monolith import REPO_ROOT, kernel_spec

KERNEL = REPO_ROOT / "kernel"
ROW = re.compile(r"^MONOLITH_VARIANT\((\w+), (\w+), (true|false)\)$")
# variants.json "config" of a unit's variants (None: no "config", the units every extension links)
UNIT_OF_CONFIG = {None: "Main", "sm120": "Sm120", "tc": "Tc", "tck": "TcK"}


def parse_rows(text: str) -> list[tuple[str, str, bool]]:
    """(enumerator, unit, launched) of each MONOLITH_VARIANT row, in file order; ValueError on a line
    that is neither a comment, blank, nor a well-formed row."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        m = ROW.match(line)
        if m is None:
            raise ValueError(f"variant_units.def:{n}: not a MONOLITH_VARIANT(variant, unit, launched) row: {line}")
        rows.append((m.group(1), m.group(2), m.group(3) == "true"))
    return rows


def rows() -> list[tuple[str, str, bool]]:
    return parse_rows((KERNEL / "variant_units.def").read_text())


def enum_ids() -> dict[str, int]:
    cuh = (KERNEL / "megakernel.cuh").read_text()
    body = cuh[cuh.index("enum Variant : int {") : cuh.index("};", cuh.index("enum Variant : int {"))]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(kVariant\w+) = (\d+),", body)}


def test_the_parser_refuses_a_malformed_row():
    assert parse_rows("// c\n\nMONOLITH_VARIANT(kVariantA, Main, true)\n") == [("kVariantA", "Main", True)]
    with pytest.raises(ValueError, match=r"variant_units.def:2: not a MONOLITH_VARIANT"):
        parse_rows("// c\nMONOLITH_VARIANT(kVariantA, Main)\n")


def test_one_row_per_enumerator_in_id_order():
    ids = enum_ids()
    names = [r[0] for r in rows()]
    assert len(ids) >= 13 and len(names) == len(set(names))
    assert [ids[n] for n in names] == list(range(len(ids)))  # step_unit.cuh static_asserts the order too


def test_every_variant_has_its_units_row():
    """Each variants.json variant: the row of its enumerator id, the unit of its "config", launched
    exactly when the engine runs it (one vector per pass; check_runnable refuses the others)."""
    spec = kernel_spec.variants()
    by_id = {i: r for i, r in enumerate(rows())}
    assert sorted(v["id"] for v in spec["variants"]) == sorted(by_id)
    for v in spec["variants"]:
        _, unit, launched = by_id[v["id"]]
        assert unit == UNIT_OF_CONFIG[v.get("config")], v["name"]
        assert launched == (kernel_spec.vectors(v) == 1), v["name"]


def test_the_units_enum_names_the_tables_units():
    cuh = (KERNEL / "step_unit.cuh").read_text()
    enum = re.search(r"enum StepUnit : int \{([^}]*)\}", cuh).group(1)
    assert [e.strip() for e in enum.split(",")] == [f"kUnit{u}" for u in UNIT_OF_CONFIG.values()] + ["kUnitCount"]
    assert {r[1] for r in rows()} == set(UNIT_OF_CONFIG.values())


def test_every_translation_unit_is_built_on_the_table():
    """Each unit's plain source includes step_unit.cuh and none opens a build namespace or includes the
    kernels itself (so none can carry a dispatch of its own); each unit other than Main registers
    exactly its own unit_kernels; each X-ray twin is its plain source under MONOLITH_XRAY."""
    spec = kernel_spec.variants()
    main, main_xray = kernel_spec.build_sources(spec)
    units = {"Main": (main, main_xray)}
    for config, unit in UNIT_OF_CONFIG.items():
        if config is not None:
            units[unit] = kernel_spec.config_sources(config, spec)
    for unit, (plain, xray) in units.items():
        src = plain.read_text()
        code = re.sub(r"//[^\n]*", "", src)
        assert '#include "step_unit.cuh"' in code, plain.name
        assert "decode_step.cuh" not in code and "namespace plain_build" not in code, plain.name
        assert "namespace xray_build" not in code and "case kVariant" not in code, plain.name
        registered = re.findall(r"^MONOLITH_STEP_UNIT\((\w+)\)$", code, re.M)
        assert registered == ([] if unit == "Main" else [unit]), plain.name
        x = xray.read_text()
        assert "#define MONOLITH_XRAY 1" in x and f'#include "{plain.name}"' in x, xray.name
    mk = re.sub(r"//[^\n]*", "", main.read_text())
    assert mk.count('#include "variant_units.def"') == 1 and "variant_kernels<variant>(sm120)" in mk
