"""The documents: README for users (short, no development history), NOTES.md one entry per
milestone (short enough to read), docs/DESIGN.md beside them, and every citation of NOTES.md in the
code resolves to a place that exists in it."""
import json
import re
import subprocess

from monolith import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
NOTES = (REPO_ROOT / "NOTES.md").read_text()
DESIGN = REPO_ROOT / "docs" / "DESIGN.md"


def test_sizes():
    assert len(README.splitlines()) <= 220, "README.md is for users: at most ~220 lines"
    assert len(NOTES.splitlines()) <= 1500, "NOTES.md: one entry per milestone, at most ~1,500 lines"


def test_readme_has_no_development_history():
    for i, line in enumerate(README.splitlines(), 1):
        assert not re.search(r"\bsessions?\b|\bcall \d", line, re.I), f"README.md:{i}: {line.strip()[:90]}"


def test_readme_shows_make_test_and_every_milestone_command():
    assert re.search(r"^make test\b", README, re.M)
    for m in range(9):
        assert f"`monolith m{m}`" in README, f"monolith m{m}"


def test_synthetic_weights_are_described_the_same_way():
    phrase = "random weights made statistically like a trained model"
    for name, text in (("README.md", README), ("NOTES.md", NOTES), ("docs/DESIGN.md", DESIGN.read_text())):
        flat = " ".join(re.sub(r"^> ?", "", text, flags=re.M).replace("*", "").split())
        assert "trained-LM-like" not in flat, name
        if name != "docs/DESIGN.md":
            assert phrase in flat, name


def test_notes_is_one_entry_per_milestone_in_order():
    heads = re.findall(r"^## (M\d)\b", NOTES, re.M)
    assert heads == [f"M{i}" for i in range(9)], heads
    assert re.search(r"^## Facts the code relies on$", NOTES, re.M)  # cited as "NOTES.md, Facts"
    assert re.search(r"^## Choices recorded", NOTES, re.M)


def _session_index():
    block = NOTES[NOTES.index("### Session index"):]
    block = block[:block.index("\n## ")]
    return {m.group(1).lower() for m in re.finditer(r"^\| ([\w -]+?) \| \d\d-\d\d \|", block, re.M)}


def test_every_citation_of_notes_resolves():
    """Code comments cite "NOTES.md, twelfth session", "NOTES.md, M3", "NOTES.md, Facts": each must
    name a session of the index or a heading that exists."""
    sessions = _session_index()
    assert {"first", "third", "twelfth", "twenty-first", "twenty-ninth"} <= sessions, sorted(sessions)
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO_ROOT).stdout.split()
    bad = []
    for f in files:
        if f.startswith(("results/", "web/public/")) or f == "NOTES.md" or not f.endswith(
                (".py", ".md", ".ts", ".mjs", ".sh", ".cu", ".cuh", ".cpp", ".toml")):
            continue
        p = REPO_ROOT / f
        if not p.is_file():
            continue
        text = " ".join(p.read_text(errors="replace").replace("//", " ").replace("#", " ").split())
        for m in re.finditer(r"NOTES\.md,? (?:the )?([a-z]+(?:-[a-z]+)?(?: M4)?) sessions?\b", text):
            name = m.group(1).lower()
            if name not in sessions and name not in ("these", "those", "its"):
                bad.append(f"{f}: {m.group(0)}")
        for m in re.finditer(r"NOTES\.md,? (M\d)\b", text):
            if not re.search(rf"^## {m.group(1)}\b", NOTES, re.M):
                bad.append(f"{f}: {m.group(0)}")
    assert bad == []


def test_design_doc_links_the_ledger_and_names_phases_not_paths():
    text = DESIGN.read_text()
    assert "EXPERIMENTS.md" in text
    for phase in ("qkv", "attention", "merge + O", "MLP-1", "down", "LM head"):
        assert phase in text, phase
    assert "schedule_stream.cuh" not in text, "describe the schedule by phase names: the kernel's files move"


def _named_results_numbers(text: str) -> set[float]:
    """Every number in the results files a document names (a folder or a glob: every file in it);
    JSON lists longer than 16 entries (per-SM and per-block arrays) are left out, so that a match
    means something."""
    nums: set[float] = set()

    def walk(o):
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            if len(o) <= 16:
                for v in o:
                    walk(v)
        elif isinstance(o, int | float) and not isinstance(o, bool):
            nums.add(float(o))
        elif isinstance(o, str):
            nums.update(float(m.replace(",", "")) for m in re.findall(r"\d[\d,]*(?:\.\d+)?", o))

    for ref in set(re.findall(r"results/[\w./*{},-]+", text)):
        ref = ref.rstrip(".,")
        if "{" in ref:  # results/m1_baselines.{json,md}
            stem, alts = ref.split("{", 1)
            paths = [REPO_ROOT / (stem + a) for a in alts.rstrip("}").split(",")]
        else:
            paths = sorted(REPO_ROOT.glob(ref.rstrip("/") + ("/*" if ref.endswith("/") else "")))
        for p in paths:
            if not p.is_file():
                continue
            if p.suffix == ".json":
                walk(json.loads(p.read_text()))
            elif p.suffix in (".md", ".txt"):
                walk(p.read_text(errors="replace"))
    return nums


def test_every_number_in_readmes_prose_comes_from_a_named_results_file():
    """Outside the generated table and the command blocks, a number with a decimal point or of
    three or more digits must be, at the precision README prints it (or as a percentage), a number
    of a results file README names. Targets, versions and the demo's port are not measurements."""
    begin, end = README.index("<!-- results:begin"), README.index("<!-- results:end -->")
    prose = re.sub(r"```.*?```", "", README[:begin] + README[end:], flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)  # inline code: commands, versions, paths
    have = _named_results_numbers(README)
    not_measurements = {"3,150", "5,500", "7,500", "2,000", "4173", "3.11", "20.19", "2.11", "2.13"}
    missing = []
    for n in sorted(set(re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", prose))):
        digits = n.replace(",", "")
        if n in not_measurements or ("." not in n and len(digits) < 3):
            continue
        x, d = float(digits), len(digits.split(".")[1]) if "." in digits else 0
        if not any(abs(round(v, d) - x) < 1e-9 or abs(round(100 * v, d) - x) < 1e-9 for v in have):
            missing.append(n)
    assert missing == [], f"numbers in README.md that no results file it names holds: {missing}"
