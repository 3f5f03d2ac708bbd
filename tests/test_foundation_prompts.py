import json

import pytest

from monolith import prompts
from monolith.errors import MonolithError


def test_bench_set():
    p = prompts.load("bench")
    assert len(p) == 20 and len(set(p)) == 20 and all(0 < len(x) < 80 for x in p)


def test_quality_matches_generator():
    if not prompts.wikitext_path().is_file():
        pytest.skip(f"WikiText-2 test split not found at {prompts.wikitext_path()} (set MONOLITH_DATA_DIR)")
    committed = json.loads((prompts.PROMPTS_DIR / "quality.json").read_text())
    assert committed == prompts.build_quality()
    assert len(committed["prompts"]) == 100 == len(set(committed["prompts"]))


def test_unknown_set():
    with pytest.raises(MonolithError, match="no prompt set 'nope'"):
        prompts.load("nope")
