"""`monolith synth` and `monolith generate` (foundation area)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from monolith.console import make_console
from monolith.errors import MonolithError

console = make_console()


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise MonolithError("--device cuda asked for, but torch sees no CUDA GPU")
    if name not in ("cpu", "cuda"):
        raise MonolithError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def make_engine(ckpt, device, engine: str = "auto"):
    """The best engine present: the megakernel on CUDA if its module imports, else the reference."""
    if engine not in ("auto", "reference", "megakernel"):
        raise MonolithError(f"--engine must be auto, reference or megakernel, got {engine!r}")
    if engine in ("auto", "megakernel") and device.type == "cuda":
        try:
            from monolith.megakernel import MegakernelEngine

            return MegakernelEngine(ckpt)
        except (ImportError, MonolithError, RuntimeError) as e:
            if engine == "megakernel":
                raise MonolithError(f"megakernel engine unavailable: {e}") from e
            console.print(f"[yellow]megakernel unavailable ({e}); using the reference[/]")
    elif engine == "megakernel":
        raise MonolithError("the megakernel needs --device cuda (a CUDA GPU)")
    from monolith.reference import ReferenceEngine

    return ReferenceEngine(ckpt, device=device)


def _stream(tok, gen: list[int], printed: int) -> int:
    """Print the text of `gen` not printed yet; hold back a character still being completed
    (byte-level BPE can split one across tokens). Returns the new printed length."""
    text = tok.decode(gen)
    if text.endswith("\ufffd"):
        text = text[:-1]
    if len(text) > printed:
        sys.stdout.write(text[printed:])
        sys.stdout.flush()
    return max(printed, len(text))


def _kpass_prompts(prompt, prompt_file, batch, speculate, draft, check, engine) -> list[str] | None:
    """Check the k-pass options before any work; the prompts of a k-pass run, or None for plain
    generate. Every refusal is one MonolithError line."""
    from monolith.kpass import MAX_K

    if batch is not None and speculate is not None:
        raise MonolithError(
            "--batch and --speculate cannot be combined: a k-pass holds either k sequences "
            "or one sequence and its draft"
        )
    if prompt_file is not None and speculate is not None:
        raise MonolithError("--prompt-file goes with --batch, not --speculate (which takes one --prompt)")
    for opt, k in (("--batch", batch), ("--speculate", speculate)):
        if k is not None and not 1 <= k <= MAX_K:
            raise MonolithError(f"{opt} must be in 1..{MAX_K} (a k-pass takes at most {MAX_K} entries), got {k}")
    if draft is not None and speculate is None:
        raise MonolithError("--draft goes with --speculate K")
    if draft is not None and draft not in ("lookup", "perfect"):
        raise MonolithError(f"--draft must be lookup or perfect, got {draft!r}")
    kpass = batch is not None or speculate is not None or prompt_file is not None
    if check and not kpass:
        raise MonolithError("--check goes with --batch, --prompt-file or --speculate")
    if not kpass:
        return None
    if engine == "megakernel":
        raise MonolithError(
            "the megakernel has no k-pass yet (issue 48): --batch/--speculate run on the "
            "reference; use --engine auto or reference"
        )
    if engine not in ("auto", "reference"):
        raise MonolithError(f"--engine must be auto, reference or megakernel, got {engine!r}")
    if prompt is not None and prompt_file is not None:
        raise MonolithError("give --prompt or --prompt-file, not both")
    if prompt_file is None:
        if prompt is None:
            raise MonolithError("--prompt is required (or --prompt-file for a batch)")
        return [prompt] * (batch if batch is not None else 1)
    try:
        text = prompt_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise MonolithError(f"--prompt-file {prompt_file} is not valid UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise MonolithError(f"--prompt-file {prompt_file}: cannot read it ({e.strerror or e})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not 1 <= len(lines) <= MAX_K:
        raise MonolithError(
            f"--prompt-file {prompt_file} has {len(lines)} prompts; a batch takes 1..{MAX_K} (one per non-empty line)"
        )
    if batch is not None and batch != len(lines):
        raise MonolithError(
            f"--batch {batch} but --prompt-file {prompt_file} has {len(lines)} prompts: drop --batch or make them agree"
        )
    return lines


def _greedy(eng, ids: list[int], n: int) -> list[int]:
    """Plain greedy decoding on the engine's own k = 1 path (prefill, then decode)."""
    eng.reset()
    first = eng.prefill(ids)
    return [first] + (eng.decode(first, n - 1).tolist() if n > 1 else [])


def _kpass_generate(
    prompts: list[str], n: int, model, dev, batched: bool, k_spec: int | None, draft: str, check: bool
) -> None:
    """--batch / --speculate: issue 48's k-pass through monolith/kpass.py. No kernel implements
    KPassStep yet, so this runs ReferenceKPass (each entry through the reference's k = 1 step),
    whose tokens are the contract a kernel k-pass must reproduce; its pass counts are exact, its
    timing is the reference's."""
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint
    from monolith.kpass import (
        PRICED_T_RATIO,
        ReferenceKPass,
        batched_generate,
        perfect_draft,
        prompt_lookup_draft,
        speculative_generate,
    )
    from monolith.reference import ReferenceEngine
    from monolith.tokenizer import load_tokenizer

    path = ensure_checkpoint(model)
    ckpt = load_checkpoint(path, allow_reduced_depth=True)
    tok = load_tokenizer(path)
    ids = []
    for i, p in enumerate(prompts):
        e = tok.encode(p)
        if not e:
            raise MonolithError(
                f"prompt {i} encodes to no tokens" if len(prompts) > 1 else "the prompt encodes to no tokens"
            )
        ids.append(e)
    eng = ReferenceEngine(ckpt, device=dev)
    for e in ids:
        eng.check_generation(len(e), n)  # before any work: names the largest -n that fits
    console.print(
        f"no kernel k-pass yet (issue 48): running the reference k-pass on {dev}; its passes are "
        "exact, its times are the reference's, not the kernel's"
    )
    if ckpt.synthetic:
        console.print("[dim]synthetic weights: the text is meaningless (and a lookup draft rarely hits)[/]")
    t = time.perf_counter()
    if batched:
        k = len(ids)
        res = batched_generate(ReferenceKPass(eng, slots=k), ids, n)
        dt = time.perf_counter() - t
        outs = res.tokens
        for i, (p, o) in enumerate(zip(prompts, outs, strict=True)):
            sys.stdout.write(f"[{i}] {p}{tok.decode(o)}\n")
        gen = sum(len(o) for o in outs)
        console.print(
            f"[bold]batch k = {k}[/]: {res.passes} passes ({res.entries} entries, prefill interleaved), "
            f"{gen} tokens, {gen / res.passes:.2f} generated tokens per pass, acceptance n/a (no draft); "
            f"{dt:.1f} s (reference)"
        )
        if check:
            ref = [_greedy(eng, e, n) for e in ids]
            _say_check("tokens equal per-prompt greedy k = 1", outs, ref)
        return
    k = k_spec
    ref = _greedy(eng, ids[0], n) if draft == "perfect" else None
    t = time.perf_counter()  # the perfect draft's greedy decode is not the speculation's time
    fn = perfect_draft(ids[0] + ref) if draft == "perfect" else prompt_lookup_draft
    res = speculative_generate(ReferenceKPass(eng, slots=1), ids[0], n, fn, k)
    dt = time.perf_counter() - t
    sys.stdout.write(f"{prompts[0]}{tok.decode(res.tokens)}\n")
    acc = (
        f"{res.acceptance_rate:.3f} ({res.accepted}/{res.drafted} drafted)" if res.drafted else "n/a (nothing drafted)"
    )
    console.print(
        f"[bold]speculate k = {k}, draft {draft}[/]: {res.passes} verify passes "
        f"(+{res.prefill_passes} prefill), {len(res.tokens)} tokens, {res.tokens_per_pass:.2f} tokens per "
        f"pass, acceptance {acc}; {dt:.1f} s (reference)"
    )
    if k in PRICED_T_RATIO["fp8-stream"]:
        r = PRICED_T_RATIO["fp8-stream"][k]
        console.print(
            f"[dim]pays for itself at >= {r - 1:.2f} accepted per pass (issue 48's priced T({k})/T(1) = "
            f"{r}, fp8-stream, not measured); this run: {res.accepted_per_pass:.2f}[/]"
        )
    if check:
        _say_check("tokens equal greedy k = 1", [res.tokens], [ref if ref is not None else _greedy(eng, ids[0], n)])


def _say_check(what: str, got: list[list[int]], want: list[list[int]]) -> None:
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    if not bad:
        console.print(f"{what}: yes")
        return
    i = bad[0]
    j = next(
        (j for j, (a, b) in enumerate(zip(got[i], want[i], strict=False)) if a != b), min(len(got[i]), len(want[i]))
    )
    where = f"sequence {i}, " if len(got) > 1 else ""
    console.print(f"{what}: no ({where}first difference at generated token {j})")
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command()
    def synth(
        out: Path = typer.Option(
            ...,
            "--out",
            help="directory to write; an existing one must be empty or a "
            "monolith synthetic checkpoint (then it is replaced)",
        ),
        seed: int = typer.Option(0, "--seed", help="random seed; the same seed gives byte-identical files"),
        layers: int = typer.Option(28, "--layers", help="fewer than 28 only for tests"),
        force: bool = typer.Option(
            False,
            "--force",
            help="write into a non-empty directory that is not a "
            "monolith checkpoint (replaces only config.json, "
            "model.safetensors, tokenizer.json; deletes nothing)",
        ),
    ):
        """Write a synthetic Qwen3-0.6B checkpoint (HF format, bf16) with trained-LM-like statistics."""
        from monolith.synth import RECIPE_NAME, write_synthetic

        if not 1 <= layers <= 28:
            raise MonolithError(f"--layers must be in 1..28, got {layers}")
        t = time.perf_counter()
        console.print(
            f"writing a synthetic checkpoint ({layers} layers, seed {seed}) to {out}; "
            "about half a minute for all 28 layers on two cores"
        )
        write_synthetic(out, seed=seed, num_layers=layers, progress=True, force=force)
        console.print(
            f"wrote {out} (recipe {RECIPE_NAME}, seed {seed}, {layers} layers) in {time.perf_counter() - t:.1f} s"
        )

    @app.command()
    def generate(
        prompt: str | None = typer.Option(
            None, "--prompt", help="prompt text (UTF-8); required unless --prompt-file is given"
        ),
        n: int = typer.Option(32, "-n", help="tokens to generate (prompt + n - 1 must fit the context cap)"),
        model: Path | None = typer.Option(None, "--model", help="checkpoint dir (default: synthetic seed 0)"),
        device: str = typer.Option("auto", "--device", help="auto|cpu|cuda"),
        engine: str = typer.Option("auto", "--engine", help="auto|reference|megakernel"),
        batch: int | None = typer.Option(
            None,
            "--batch",
            help="K in 1..8: decode K sequences together, one "
            "k-pass entry per sequence per pass (issue 48's batched decode): "
            "--prompt repeated K times, or the K lines of --prompt-file",
        ),
        prompt_file: Path | None = typer.Option(
            None,
            "--prompt-file",
            help="UTF-8 text file, one prompt per non-empty line (at most 8); implies --batch <line count>",
        ),
        speculate: int | None = typer.Option(
            None,
            "--speculate",
            help="K in 1..8: speculative decoding of "
            "--prompt, each verify pass checks up to K - 1 draft tokens; "
            "its tokens equal plain greedy decoding",
        ),
        draft: str | None = typer.Option(
            None,
            "--draft",
            help="with --speculate: lookup (n-gram lookup in the "
            "context, the default) or perfect (the model's own greedy "
            "continuation, decoded first: the upper bound)",
        ),
        check: bool = typer.Option(
            False,
            "--check",
            help="with --batch/--speculate: also decode each prompt "
            "greedily one token at a time (k = 1) and print whether the tokens "
            "equal it; exit 1 if not",
        ),
    ):
        """Greedy-decode a prompt with the best engine present; prints the text and decode tok/s.
        On a CPU the tokens are printed as they come (the reference takes about a second each).
        --batch / --prompt-file / --speculate run issue 48's k-pass instead (see each option); until a
        kernel k-pass exists that is the reference's (monolith/kpass.py), on --device."""
        import torch

        from monolith.checkpoint import ensure_checkpoint, load_checkpoint
        from monolith.tokenizer import load_tokenizer

        if n < 1:
            raise MonolithError(f"-n must be >= 1, got {n}")
        prompts = _kpass_prompts(prompt, prompt_file, batch, speculate, draft, check, engine)
        dev = _device(device)
        if prompts is not None:
            _kpass_generate(
                prompts,
                n,
                model,
                dev,
                batch is not None or prompt_file is not None,
                speculate,
                draft or "lookup",
                check,
            )
            return
        if prompt is None:
            raise MonolithError("--prompt is required (or --prompt-file for a batch)")
        path = ensure_checkpoint(model)
        ckpt = load_checkpoint(path, allow_reduced_depth=True)  # engines that need 28 layers say so
        tok = load_tokenizer(path)
        ids = tok.encode(prompt)
        if not ids:
            raise MonolithError("the prompt encodes to no tokens")
        eng = make_engine(ckpt, dev, engine)
        eng.check_generation(len(ids), n)  # before any work: names the largest -n that fits
        if ckpt.synthetic:
            console.print("[dim]synthetic weights: the text is meaningless[/]")
        stream = dev.type != "cuda"
        if stream:
            console.print(
                f"[dim]{getattr(eng, 'name', type(eng).__name__)} on {dev}: prefill of {len(ids)} "
                f"tokens, then {n} tokens as they come[/]"
            )
        first = eng.prefill(ids)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        gen = [first]
        t = time.perf_counter()
        if stream:
            sys.stdout.write(prompt)
            printed = _stream(tok, gen, 0)
            cur = first
            for _ in range(n - 1):
                cur = int(eng.decode(cur, 1)[0])
                gen.append(cur)
                printed = _stream(tok, gen, printed)
            sys.stdout.write(tok.decode(gen)[printed:] + "\n")
            sys.stdout.flush()
        else:
            out = eng.decode(first, n - 1) if n > 1 else torch.empty(0, dtype=torch.long)
            sync()
            gen += out.tolist()
        dt = time.perf_counter() - t
        if not stream:
            console.print(prompt + tok.decode(gen), markup=False, highlight=False)
        rate = f"{(n - 1) / dt:.1f} tok/s" if n > 1 else "n/a"
        console.print(
            f"[bold]{getattr(eng, 'name', type(eng).__name__)}[/] on {dev}: {n} tokens, "
            f"decode {rate} (prefill excluded)"
        )
