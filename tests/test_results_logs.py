"""results/logs keeps the logs that results and documents cite, and nothing else
(results/logs/README.md): every `results/logs/...` path cited by a results file, README.md,
docs/, notes/ or scripts/ exists in the tree, and the folder holds logs and JSON only (no scripts,
patches, tarballs or raw traces; those live in the archive tag the README names). A citation of
an archived file says so: `archive/results-logs-s29:results/logs/...` (any `REV:path`) or the tag's
name on the same line."""

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITE = re.compile(r"results/logs/[A-Za-z0-9_./*{},\-]*")
KINDS = (".log", ".txt", ".md", ".json", ".csv.gz")
ARCHIVE = "archive/results-logs-s29"  # the tag that holds what left the tree (results/logs/README.md)


def tracked(*paths: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.stdout.split()


def expand(pattern: str) -> list[str]:
    """Shell brace expansion, `{a,b}` and `{1..3}`, as the documents write it."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    body = m.group(1)
    if ".." in body:
        lo, hi = body.split("..")
        opts = [str(i) for i in range(int(lo), int(hi) + 1)]
    else:
        opts = body.split(",")
    return [x for o in opts for x in expand(pattern[:m.start()] + o + pattern[m.end():])]


def citing_files() -> list[str]:
    docs = [f for f in tracked("results", "docs", "notes", "scripts", "README.md")
            if not f.startswith("results/logs/") and f.endswith((".md", ".json", ".py", ".sh"))]
    assert "README.md" in docs and any(f.startswith("results/") for f in docs), docs
    return docs


def resolves(cited: str, logs: list[str]) -> bool:
    cited = cited.rstrip(".,;:)`'\"")
    if any(ch in cited for ch in "*?["):
        return any(fnmatch.fnmatch(f, cited) for f in logs)
    return cited in logs or any(f.startswith(cited.rstrip("/") + "/") for f in logs)


def test_expand_braces():
    assert expand("a/call{1,2}-*.log") == ["a/call1-*.log", "a/call2-*.log"]
    assert expand("s/call{1..3}/x{a,b}") == ["s/call1/xa", "s/call1/xb", "s/call2/xa", "s/call2/xb",
                                             "s/call3/xa", "s/call3/xb"]


def missing_citations(text: str, logs: list[str]) -> list[str]:
    """The results/logs paths `text` cites that are not in `logs` (globs and braces expanded)."""
    out = []
    for m in CITE.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1: text.find("\n", m.end()) % (len(text) + 1)]
        if m.group(0).rstrip("/") == "results/logs" or text[m.start() - 1: m.start()] == ":" or ARCHIVE in line:
            continue  # the folder itself, `REV:path`, or a path the line says is in the archive tag
        out += [c for c in expand(m.group(0).rstrip(".,;:")) if not resolves(c, logs)]
    return out


def test_every_cited_log_is_in_the_tree():
    logs = tracked("results/logs")
    assert len(logs) > 100, "git ls-files listed almost nothing under results/logs"
    missing = [f"{doc}: {c}" for doc in citing_files()
               for c in missing_citations((ROOT / doc).read_text(errors="replace"), logs)]
    assert not missing, "cited but not in the tree (results/logs/README.md says how to get archived files back):\n" + \
        "\n".join(missing)


def test_resolves_tells_a_missing_path():
    logs = ["results/logs/s1/call1/log.txt", "results/logs/s1/a.json"]
    assert resolves("results/logs/s1/", logs) and resolves("results/logs/s1/call1", logs)
    assert resolves("results/logs/s1/call*/log.txt", logs) and resolves("results/logs/s1/a.json`.", logs)
    assert not resolves("results/logs/s1/split.py", logs) and not resolves("results/logs/s2/", logs)


def test_only_logs_and_json_live_in_results_logs():
    odd = [f for f in tracked("results/logs") if not f.endswith(KINDS)]
    assert not odd, f"scripts, patches, tarballs or traces in results/logs (scripts/ or the archive tag): {odd}"


def test_archived_citations_are_exempt_only_where_they_say_so():
    logs = ["results/logs/s9/log.txt"]
    text = ("see `archive/results-logs-s29:results/logs/s9/split.py`\n"
            "git checkout archive/results-logs-s29 -- results/logs/s9/x.patch\n"
            "and results/logs/s9/gone.py, results/logs/s9/ and results/logs/s9/call{1,2}.log here\n")
    assert missing_citations(text, logs) == ["results/logs/s9/gone.py", "results/logs/s9/call1.log",
                                             "results/logs/s9/call2.log"]
