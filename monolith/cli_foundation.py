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


def register(app: typer.Typer) -> None:
    @app.command()
    def synth(out: Path = typer.Option(..., "--out", help="directory to write; an existing one must be empty or a "
                                                          "monolith synthetic checkpoint (then it is replaced)"),
              seed: int = typer.Option(0, "--seed", help="random seed; the same seed gives byte-identical files"),
              layers: int = typer.Option(28, "--layers", help="fewer than 28 only for tests"),
              force: bool = typer.Option(False, "--force", help="write into a non-empty directory that is not a "
                                                                "monolith checkpoint (replaces only config.json, "
                                                                "model.safetensors, tokenizer.json; deletes nothing)")):
        """Write a synthetic Qwen3-0.6B checkpoint (HF format, bf16) with trained-LM-like statistics."""
        from monolith.synth import RECIPE_NAME, write_synthetic
        if not 1 <= layers <= 28:
            raise MonolithError(f"--layers must be in 1..28, got {layers}")
        t = time.perf_counter()
        console.print(f"writing a synthetic checkpoint ({layers} layers, seed {seed}) to {out}; "
                      "about half a minute for all 28 layers on two cores")
        write_synthetic(out, seed=seed, num_layers=layers, progress=True, force=force)
        console.print(f"wrote {out} (recipe {RECIPE_NAME}, seed {seed}, {layers} layers) in {time.perf_counter() - t:.1f} s")

    @app.command()
    def generate(prompt: str = typer.Option(..., "--prompt", help="prompt text (UTF-8)"),
                 n: int = typer.Option(32, "-n", help="tokens to generate (prompt + n - 1 must fit the context cap)"),
                 model: Path | None = typer.Option(None, "--model", help="checkpoint dir (default: synthetic seed 0)"),
                 device: str = typer.Option("auto", "--device", help="auto|cpu|cuda"),
                 engine: str = typer.Option("auto", "--engine", help="auto|reference|megakernel")):
        """Greedy-decode a prompt with the best engine present; prints the text and decode tok/s.
        On a CPU the tokens are printed as they come (the reference takes about a second each)."""
        import torch

        from monolith.checkpoint import ensure_checkpoint, load_checkpoint
        from monolith.tokenizer import load_tokenizer
        if n < 1:
            raise MonolithError(f"-n must be >= 1, got {n}")
        dev = _device(device)
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
            console.print(f"[dim]{getattr(eng, 'name', type(eng).__name__)} on {dev}: prefill of {len(ids)} "
                          f"tokens, then {n} tokens as they come[/]")
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
        console.print(f"[bold]{getattr(eng, 'name', type(eng).__name__)}[/] on {dev}: {n} tokens, "
                      f"decode {rate} (prefill excluded)")
