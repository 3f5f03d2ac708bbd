"""`monolith generate --batch / --prompt-file / --speculate` (issue 48's k-pass through the CLI) on CPU:
the 2-layer synthetic checkpoint, the reference k-pass. Expected tokens come from the reference
engine's own one-token path here, not from the CLI's --check."""

import pytest
import torch
from typer.testing import CliRunner

from monolith.cli import app
from monolith.errors import MonolithError
from monolith.kpass import ReferenceKPass
from monolith.reference import ReferenceEngine
from monolith.tokenizer import load_tokenizer

runner = CliRunner()
N = 3
PROMPTS = ["Hello world", "The cat", "ab"]  # 2, 2 and 1 tokens: mixed positions in each pass


@pytest.fixture(scope="module")
def expected(ckpt2, synth2):
    """Per prompt: the text generate prints (prompt + decoded greedy tokens) and the tokens."""
    tok = load_tokenizer(synth2)
    eng = ReferenceEngine(ckpt2)
    out = {}
    for p in PROMPTS:
        eng.reset()
        logits = [eng.step(t)[0] for t in tok.encode(p)][-1]
        toks = [int(torch.argmax(logits))]
        while len(toks) < N:
            toks.append(int(torch.argmax(eng.step(toks[-1])[0])))
        out[p] = p + tok.decode(toks), toks
    return out


def _gen(synth2, *args):
    return runner.invoke(app, ["generate", "--model", str(synth2), "--device", "cpu", "-n", str(N), *args])


def test_help_names_the_kpass_options():
    r = runner.invoke(app, ["generate", "--help"])
    assert r.exit_code == 0
    for opt in ("--batch", "--prompt-file", "--speculate", "--draft", "--check"):
        assert opt in r.output


def test_batch_from_a_prompt_file_equals_per_prompt_greedy(synth2, expected, tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text(f"{PROMPTS[0]}\n\n{PROMPTS[1]}\n{PROMPTS[2]}\n", encoding="utf-8")  # blank lines are skipped
    r = _gen(synth2, "--prompt-file", str(f))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    for i, p in enumerate(PROMPTS):
        assert f"[{i}] {expected[p][0]}" in lines, (p, r.output)
    assert "no kernel k-pass yet" in r.output and "not the kernel's" in r.output
    # entries: every prompt token and every generated token but the last, one per pass
    entries = sum(len(load_tokenizer(synth2).encode(p)) + N - 1 for p in PROMPTS)
    assert f"batch k = 3: 4 passes ({entries} entries" in r.output
    assert "acceptance n/a" in r.output


def test_batch_repeats_the_prompt(synth2, expected):
    r = _gen(synth2, "--prompt", PROMPTS[2], "--batch", "2", "--check")
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.output.splitlines() if ln.startswith("[")] == [
        f"[0] {expected[PROMPTS[2]][0]}",
        f"[1] {expected[PROMPTS[2]][0]}",
    ]
    assert "tokens equal per-prompt greedy k = 1: yes" in r.output


def test_speculate_perfect_draft_equals_plain_greedy(synth2, expected):
    p = PROMPTS[0]
    r = _gen(synth2, "--prompt", p, "--speculate", "4", "--draft", "perfect", "--check")
    assert r.exit_code == 0, r.output
    assert expected[p][0] in r.output.splitlines()
    # N = 3 tokens: one pass of the last prompt token + 2 draft tokens, all accepted
    assert "speculate k = 4, draft perfect: 1 verify passes (+1 prefill), 3 tokens, 3.00 tokens per pass" in r.output
    assert "acceptance 1.000 (2/2 drafted)" in r.output
    assert "tokens equal greedy k = 1: yes" in r.output
    plain = _gen(synth2, "--prompt", p)
    assert plain.exit_code == 0 and expected[p][0] in plain.output


def test_check_reports_a_mismatch(synth2, monkeypatch):
    """A k-pass whose rows disagree with the k = 1 path must be caught: spike token 0 in every row."""
    run = ReferenceKPass._run

    def bent(self, tokens, slots, positions):
        rows = run(self, tokens, slots, positions).clone()  # an inference tensor: edit a copy
        rows[:, 0] = 1e4
        return rows

    monkeypatch.setattr(ReferenceKPass, "_run", bent)
    r = _gen(synth2, "--prompt", PROMPTS[2], "--speculate", "2", "--check")
    assert r.exit_code == 1, r.output
    assert "tokens equal greedy k = 1: no (first difference at generated token 0)" in r.output


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--prompt", "x", "--batch", "0"], "--batch must be in 1..8"),
        (["--prompt", "x", "--batch", "9"], "--batch must be in 1..8"),
        (["--prompt", "x", "--speculate", "0"], "--speculate must be in 1..8"),
        (["--prompt", "x", "--speculate", "9"], "--speculate must be in 1..8"),
        (["--prompt", "x", "--batch", "2", "--speculate", "2"], "--batch and --speculate cannot be combined"),
        (["--prompt", "x", "--draft", "perfect"], "--draft goes with --speculate"),
        (["--prompt", "x", "--speculate", "2", "--draft", "oracle"], "--draft must be lookup or perfect"),
        (["--prompt", "x", "--check"], "--check goes with"),
        (["--prompt", "x", "--batch", "2", "--engine", "megakernel"], "the megakernel has no k-pass yet"),
        (["--batch", "2"], "--prompt is required"),
    ],
)
def test_refusals_come_before_any_work(tmp_path, args, msg):
    # the checkpoint does not exist: a refusal must come before it is looked for
    r = runner.invoke(app, ["generate", "--model", str(tmp_path / "none"), "--device", "cpu", *args])
    assert isinstance(r.exception, MonolithError), r.output
    assert msg in str(r.exception) and "\n" not in str(r.exception)


def test_prompt_file_refusals(tmp_path):
    nine = tmp_path / "nine.txt"
    nine.write_text("".join(f"p{i}\n" for i in range(9)), encoding="utf-8")
    two = tmp_path / "two.txt"
    two.write_text("a\nb\n", encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    cases = [
        (["--prompt-file", str(nine)], "has 9 prompts; a batch takes 1..8"),
        (["--prompt-file", str(two), "--batch", "3"], "--batch 3 but --prompt-file"),
        (["--prompt-file", str(two), "--prompt", "x"], "give --prompt or --prompt-file, not both"),
        (["--prompt-file", str(two), "--speculate", "2"], "--prompt-file goes with --batch"),
        (["--prompt-file", str(bad)], "is not valid UTF-8"),
        (["--prompt-file", str(tmp_path / "missing.txt")], "cannot read it"),
    ]
    for args, msg in cases:
        r = runner.invoke(app, ["generate", "--model", str(tmp_path / "none"), "--device", "cpu", *args])
        assert isinstance(r.exception, MonolithError), (args, r.output)
        assert msg in str(r.exception), (args, str(r.exception))
