"""post/draft.md: length, the seven sections in order, its figures, and every number in it traced
to the results files it names (or to a declared derivation from such numbers)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
POST = REPO / "post" / "draft.md"

SECTIONS = ["hook", "megakernel", "x-ray", "fp8", "barriers", "benchmarks", "limitations"]
# a number standing alone: not part of an identifier such as sm_90a, E4M3, f16x2, Qwen3 or 0.6B
NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")
# long arrays (trace events, per-block series) would let almost any number match: not sources
MAX_LIST = 64
DERIVED = re.compile(r"<!--\s*derived:\s*([\d.]+)\s*=\s*([^>]+?)\s*-->")


def _text(post: str) -> str:
    """The prose a reader sees: no HTML comments, no image targets."""
    post = re.sub(r"<!--.*?-->", "", post, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", post)


def _numbers(text: str) -> list[tuple[str, float, int, bool]]:
    """(as written, value, decimals, followed by %)."""
    out = []
    for m in NUMBER.finditer(text):
        whole, frac = m.group(1), m.group(2) or ""
        value = float(whole.replace(",", "") + frac)
        pct = text[m.end():m.end() + 2].lstrip().startswith("%")
        out.append((m.group(0), value, max(len(frac) - 1, 0), pct))
    return out


def _source_values(paths: list[Path]) -> list[float]:
    vals: list[float] = []

    def walk(o):
        if isinstance(o, bool):
            return
        if isinstance(o, int | float):
            vals.append(float(o))
        elif isinstance(o, str):
            vals.extend(v for _, v, _, _ in _numbers(o))
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(k)
                walk(v)
        elif isinstance(o, list) and len(o) <= MAX_LIST:
            for v in o:
                walk(v)

    for p in paths:
        if p.suffix == ".json":
            walk(json.loads(p.read_text()))
        else:
            walk(p.read_text())
    return vals


def _matches(value: float, decimals: int, pct: bool, rounded: dict[int, set[float]]) -> bool:
    if value in rounded[decimals]:
        return True
    return pct and round(value / 100, decimals + 2) in rounded[decimals + 2]


def _rounded(vals: list[float]) -> dict[int, set[float]]:
    return {d: {round(v, d) for v in vals} for d in range(0, 7)}


def _sources(post: str) -> list[Path]:
    m = re.search(r"<!--\s*sources:(.*?)-->", post, flags=re.S)
    assert m, "post/draft.md names its sources in a '<!-- sources: ... -->' comment"
    return [REPO / s for s in m.group(1).split()]


def test_post_sources_exist():
    for p in _sources(POST.read_text()):
        assert p.is_file(), f"post/draft.md names {p.relative_to(REPO)}, which does not exist"


def test_post_length_and_sections():
    post = POST.read_text()
    words = len(re.findall(r"\S+", _text(post)))
    assert 1200 <= words <= 1800, f"post/draft.md has {words} words (want 1,200-1,800)"
    heads = [h.lower() for h in re.findall(r"^## (.+)$", post, flags=re.M)]
    assert len(heads) == len(SECTIONS), heads
    for want, got in zip(SECTIONS, heads, strict=True):
        assert want in got, f"section {got!r} where the order wants one about {want!r}"


def test_post_figures_exist():
    post = POST.read_text()
    figs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", post)
    assert 2 <= len(figs) <= 3, figs
    for f in figs:
        assert (POST.parent / f).resolve().is_file(), f


def test_post_derived_numbers_hold():
    post = POST.read_text()
    rounded = _rounded(_source_values(_sources(post)))
    derived = DERIVED.findall(post)
    assert derived, "no derived numbers declared"
    for result, expr in derived:
        for written, value, dec, _ in _numbers(expr):
            assert _matches(value, dec, False, rounded), f"derivation {expr!r}: {written} is in no source"
        got = eval(expr, {"__builtins__": {}})  # noqa: S307 - digits and + - * / ( ) only, checked below
        assert re.fullmatch(r"[\d.\s+\-*/()]+", expr), expr
        dec = len(result.split(".")[1]) if "." in result else 0
        assert round(got, dec) == float(result), f"{expr} = {got}, the post says {result}"


def _allowed(post: str) -> tuple[dict[int, set[float]], set[float]]:
    rounded = _rounded(_source_values(_sources(post)))
    derived = {float(r) for r, _ in DERIVED.findall(post)}
    return rounded, derived


def test_every_number_in_the_post_comes_from_a_source():
    post = POST.read_text()
    rounded, derived = _allowed(post)
    missing = [w for w, v, d, pct in _numbers(_text(post))
               if v not in derived and not _matches(v, d, pct, rounded)]
    assert not missing, f"numbers in post/draft.md found in none of its sources: {missing}"


@pytest.mark.parametrize("planted", ["2,411.4", "9.7 µs", "42.6 %"])
def test_a_number_not_in_the_sources_is_caught(planted):
    post = POST.read_text()
    rounded, derived = _allowed(post)
    bad = [w for w, v, d, pct in _numbers(planted) if v not in derived and not _matches(v, d, pct, rounded)]
    assert bad, f"{planted} should not trace to any source"
