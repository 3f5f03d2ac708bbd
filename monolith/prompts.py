"""Committed prompt sets: data/prompts/<name>.json = {"source": "...", "prompts": [...]}.

bench.json: 20 short English prompts written for this project (benchmark + correctness gate).
quality.json: 100 prompts drawn from the WikiText-2 raw test split by `build_quality()`:
  paragraphs = lines of the file that are not blank and not " = Heading = " lines and have
  at least 60 words; random.Random(0).sample(paragraphs, 100), kept in file order; each
  prompt = the paragraph's first 32 whitespace-separated words, joined by single spaces
  (WikiText's raw spacing such as " @-@ " is kept: it is what the perplexity text looks like).
The WikiText file is never committed; it is read from ../shared/data (beside the checkout)
or MONOLITH_DATA_DIR.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

from monolith import REPO_ROOT
from monolith.errors import MonolithError

PROMPTS_DIR = REPO_ROOT / "data" / "prompts"
WIKITEXT_NAME = "wikitext-2-raw-v1-test.txt"
QUALITY_SEED, QUALITY_COUNT, MIN_WORDS, PROMPT_WORDS = 0, 100, 60, 32


def load(name: str) -> list[str]:
    p = PROMPTS_DIR / f"{name}.json"
    if not p.is_file():
        have = sorted(x.stem for x in PROMPTS_DIR.glob("*.json"))
        raise MonolithError(f"no prompt set {name!r} ({p} missing); have {have}")
    from monolith import jsonio

    doc = jsonio.load_object(p, f"prompt set {p}")
    prompts = jsonio.field(doc, "prompts", list, f"prompt set {p}")
    if not prompts or not all(isinstance(x, str) and x for x in prompts):
        raise MonolithError(f"prompt set {p}: 'prompts' must be a non-empty list of non-empty strings")
    return prompts


def wikitext_path() -> Path:
    d = os.environ.get("MONOLITH_DATA_DIR")
    return Path(d) / WIKITEXT_NAME if d else REPO_ROOT.parent / "shared" / "data" / WIKITEXT_NAME


def build_quality(path: Path | None = None) -> dict:
    path = path or wikitext_path()
    if not path.is_file():
        raise MonolithError(f"WikiText-2 test split not found at {path} (set MONOLITH_DATA_DIR)")
    paras = [ln for ln in path.read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.strip().startswith("=") and len(ln.split()) >= MIN_WORDS]
    idx = sorted(random.Random(QUALITY_SEED).sample(range(len(paras)), QUALITY_COUNT))
    return {"source": f"{WIKITEXT_NAME} (WikiText-2 raw test, CC BY-SA): rule in monolith/prompts.py "
                      f"build_quality(): seed {QUALITY_SEED}, {QUALITY_COUNT} paragraphs of >= {MIN_WORDS} "
                      f"words, first {PROMPT_WORDS} words each",
            "prompts": [" ".join(paras[i].split()[:PROMPT_WORDS]) for i in idx]}


def write_quality() -> Path:
    out = PROMPTS_DIR / "quality.json"
    out.write_text(json.dumps(build_quality(), indent=1, ensure_ascii=False) + "\n")
    return out


if __name__ == "__main__":
    print(write_quality())
