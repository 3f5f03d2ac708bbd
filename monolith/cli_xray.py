"""`monolith xray`, `monolith export`, `monolith m2`: record one token's X-ray on the GPU,
analyze it, and turn raw traces into the page's files (the last part needs no GPU)."""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import typer

from monolith import REPO_ROOT
from monolith.console import make_console
from monolith.errors import MonolithError

RESULTS = REPO_ROOT / "results"
RAW_DIR = RESULTS / "xray"
PAGE_DIR = REPO_ROOT / "web" / "public" / "traces"
M2_SUMMARY = RESULTS / "m2_xray.json"
SAMPLE = "sample-synthetic.json.gz"
DEFAULT_PROMPT = "The history of the city begins"
TRACE_BUDGET_BYTES = 5_000_000  # all committed traces (page traces + raws) <= 5 MB gzipped (NOTES.md, facts)

con = make_console(highlight=False)


def _slug(meta: dict) -> str:
    """A trace's file stem (monolith.xray.site.trace_slug: the variant, -p<pos> away from position 128)."""
    from monolith.xray.site import TRACE_POSITION, trace_slug

    return trace_slug(meta["variant"], int(meta.get("position", TRACE_POSITION)))


def _merge_summary(path: Path, summ: dict) -> None:
    """results/m2_xray.json keeps one summary per variant, so tracing another variant adds to it."""
    from monolith import jsonio

    old = jsonio.load_object(path, f"X-ray summaries {path}") if path.exists() else {}
    variants = old.get("variants", {})
    if not isinstance(variants, dict):
        raise MonolithError(f"X-ray summaries {path}: 'variants' must be an object; move the file aside")
    variants[summ["meta"]["variant"]] = summ
    out = {"schema": "monolith-xray-summaries/1", "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
           "variants": variants}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))


def process_raw(raw: Path, *, out_dir: Path = RAW_DIR, page_dir: Path = PAGE_DIR, png: bool = True,
                summary_path: Path | None = None, quiet: bool = False) -> dict:
    """raw trace -> summary JSON (+ m2 summary), Gantt PNG, page trace, Perfetto JSON. Returns paths."""
    from monolith.xray.analyze import analyze, gantt_png, print_report
    from monolith.xray.export import to_page, to_perfetto, write_page, write_perfetto
    from monolith.xray.raw import load_raw

    meta, ev = load_raw(raw)
    summ = analyze(meta, ev)
    if not quiet:
        print_report(summ, con)
    slug = _slug(meta)
    out = {"raw": str(raw)}
    out_dir.mkdir(parents=True, exist_ok=True)
    p = out_dir / f"{slug}.summary.json"
    p.write_text(json.dumps(summ, indent=1))
    out["summary"] = str(p)
    if summary_path is not None:
        _merge_summary(summary_path, summ)
        out["m2_summary"] = str(summary_path)
    out["page"] = str(write_page(to_page(meta, ev, summ), page_dir / f"{slug}.json.gz"))
    out["perfetto"] = str(write_perfetto(to_perfetto(meta, ev), out_dir / f"{slug}.perfetto.json.gz"))
    if png:
        out["png"] = str(gantt_png(meta, ev, out_dir / f"{slug}.png"))
    return out


def record(model: str | None, variant: str, position: int, prompt: str, out_dir: Path, blocks: int | None = None,
           overhead: bool = True) -> Path:
    """Run one traced token on the GPU and save the raw trace; clear errors when it cannot.
    overhead: first time the engine's plain and X-ray kernels at the sweep positions
    (monolith.xray.overhead) and keep the result in the trace's meta (xray_overhead)."""
    try:
        import torch
    except ImportError as e:
        raise MonolithError(f"torch is not importable: {e}") from None
    if not torch.cuda.is_available():
        raise MonolithError("monolith xray records on a CUDA GPU and none is visible here; "
                            "to rebuild page traces from committed raw traces use `monolith export`")
    try:
        from monolith.megakernel import MegakernelEngine
    except ModuleNotFoundError as e:
        raise MonolithError(f"the megakernel engine is not available ({e.name} missing): "
                            "build the CUDA extension from kernel/ first") from None
    except ImportError as e:
        raise MonolithError(f"cannot load the megakernel extension: {e}") from None
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint
    from monolith.tokenizer import load_tokenizer
    from monolith.xray.raw import save_raw

    ckpt_dir = ensure_checkpoint(model)
    ckpt = load_checkpoint(ckpt_dir)
    tokens = load_tokenizer(ckpt_dir).encode(prompt)
    if not 1 <= len(tokens) <= position:
        raise MonolithError(f"the prompt has {len(tokens)} tokens; --position {position} must be >= that and >= 1")
    engine = MegakernelEngine(ckpt, variant=variant, xray=True, blocks=blocks)
    if not hasattr(engine, "record_xray"):
        raise MonolithError("MegakernelEngine has no record_xray(); this build of the engine cannot trace")
    ovh = None
    if overhead:
        from monolith.xray.overhead import measure_engine

        ovh = measure_engine(engine, progress=lambda m: con.print(f"X-ray overhead, {variant} {m}"))
    meta, events = engine.record_xray(tokens, position)
    meta = dict(meta)
    if ovh is not None:
        from monolith.xray.overhead import attach

        attach(meta, ovh)
    meta.setdefault("variant", variant)
    meta.setdefault("position", position)
    meta.setdefault("weights", ckpt.describe())
    meta.setdefault("created", _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
    meta.setdefault("prompt_tokens", len(tokens))
    k = getattr(engine, "k", None)
    if isinstance(k, dict) and "xray_max_events" in k:
        meta.setdefault("xray_max_events", int(k["xray_max_events"]))
    path = save_raw(out_dir / f"{_slug(meta)}.raw.npz", meta, events)
    con.print(f"raw trace: {path} ({len(events)} events)")
    return path


def _site(page_dir: Path) -> None:
    """The web area's monolith.xray.site builds the page manifest; tolerate its absence."""
    import importlib

    try:
        site = importlib.import_module("monolith.xray.site")
    except ModuleNotFoundError as e:
        if e.name != "monolith.xray.site":
            raise
        con.print("note: monolith.xray.site not present yet: page manifest not rebuilt")
        return
    manifest = site.build_site_data(traces_dir=page_dir)
    n = len(manifest.get("versions", [])) if isinstance(manifest, dict) else "?"
    con.print(f"site data rebuilt (web/public/data/manifest.json, {n} traces)")


def _budget_note(page_dir: Path, out_dir: Path) -> None:
    # what is committed: page traces and raws. The Perfetto JSON is not (twenty-sixth session,
    # .gitignore): it is rebuilt from the raws by this command, and its ~0.4 MB per trace left no room
    # for a trace at a second position on the page (NOTES.md)
    files = [*page_dir.glob("*.json.gz"), *out_dir.glob("*.raw.npz")]
    total = sum(f.stat().st_size for f in files)
    msg = f"traces: {len(files)} files, {total / 1e6:.2f} MB (budget {TRACE_BUDGET_BYTES / 1e6:.0f} MB gzipped)"
    con.print(msg if total <= TRACE_BUDGET_BYTES else f"[bold red]over budget:[/] {msg}")


def export(raw: list[Path] | None, out_dir: Path, page_dir: Path, png: bool, synthetic: bool,
           site_data: bool = True) -> list[dict]:
    raws = list(raw) if raw else sorted(out_dir.glob("*.raw.npz"))
    done = []
    for r in raws:
        con.print(f"[bold]export[/] {r}")
        done.append(process_raw(Path(r), out_dir=out_dir, page_dir=page_dir, png=png, quiet=True))
        con.print(f"  page {done[-1]['page']} · perfetto {done[-1]['perfetto']}")
    if not raws:
        con.print(f"no raw traces in {out_dir} (record one on the GPU: monolith xray)")
    if synthetic:
        from monolith.xray.synthetic import write_sample
        con.print(f"sample (synthetic) page trace: {write_sample(page_dir / SAMPLE)}")
    if site_data:
        _site(page_dir)
    _budget_note(page_dir, out_dir)
    return done


def register(app: typer.Typer) -> None:
    @app.command("xray")
    def xray_cmd(
        model: str = typer.Option(None, "--model", help="checkpoint dir (default: the synthetic checkpoint)"),
        variant: str = typer.Option("bf16-upstream", help="kernel variant to trace"),
        position: int = typer.Option(128, help="KV-cache position of the traced token"),
        prompt: str = typer.Option(DEFAULT_PROMPT, help="prompt text; greedy tokens fill up to --position"),
        out_dir: Path = typer.Option(RAW_DIR, "--out-dir", help="raw trace, summary, Gantt PNG, Perfetto JSON"),
        page_dir: Path = typer.Option(PAGE_DIR, "--page-dir", help="where the page trace <variant>.json.gz goes"),
        summary: Path = typer.Option(M2_SUMMARY, "--summary", help="summary JSON keyed by variant"),
        png: bool = typer.Option(True, "--png/--no-png", help="write the matplotlib Gantt chart"),
        blocks: int = typer.Option(None, "--blocks", help="grid size (default: megakernel.default_blocks: one block per SM; stream: a multiple of 8, 128 on 132 SMs)"),
        overhead: bool = typer.Option(True, "--overhead/--no-overhead", help="first measure the X-ray build's overhead against the plain build at positions 16..2048 (a few seconds) and keep it with the trace"),
    ) -> None:
        """Record one token's X-ray on the GPU (needs -DMONOLITH_XRAY build), analyze and export it."""
        raw = record(model, variant, position, prompt, out_dir, blocks, overhead)
        out = process_raw(raw, out_dir=out_dir, page_dir=page_dir, png=png, summary_path=summary)
        con.print(json.dumps(out, indent=1))

    @app.command("export")
    def export_cmd(
        raw: list[Path] = typer.Option(None, "--raw", help="raw trace(s); default: every results/xray/*.raw.npz"),
        out_dir: Path = typer.Option(RAW_DIR, "--out-dir", help="summary + Perfetto JSON go here"),
        page_dir: Path = typer.Option(PAGE_DIR, "--page-dir", help="page traces go here"),
        png: bool = typer.Option(False, "--png/--no-png", help="also redraw Gantt PNGs"),
        synthetic: bool = typer.Option(True, "--synthetic/--no-synthetic", help=f"(re)write the synthetic {SAMPLE}"),
        site_data: bool = typer.Option(True, "--site/--no-site", help="rebuild web/public/data (monolith.xray.site)"),
    ) -> None:
        """Rebuild page traces and Perfetto JSON from committed raw traces (no GPU), then the page's data."""
        export(raw, out_dir, page_dir, png, synthetic, site_data)

    @app.command("m2")
    def m2_cmd(
        model: str = typer.Option(None, "--model", help="checkpoint dir (default: the synthetic checkpoint)"),
        variant: str = typer.Option("bf16-upstream", help="kernel variant to trace"),
        position: int = typer.Option(128, help="KV-cache position of the traced token"),
        out_dir: Path = typer.Option(RAW_DIR, "--out-dir", help="raw trace, summary, Gantt PNG, Perfetto JSON"),
        page_dir: Path = typer.Option(PAGE_DIR, "--page-dir", help="where the page trace <variant>.json.gz goes"),
    ) -> None:
        """Milestone 2: X-ray of one token (results/m2_xray.json, page trace, Perfetto, PNG), then export."""
        raw = record(model, variant, position, DEFAULT_PROMPT, out_dir)
        process_raw(raw, out_dir=out_dir, page_dir=page_dir, png=True, summary_path=M2_SUMMARY)
        export(None, out_dir, page_dir, png=False, synthetic=True)  # every committed raw trace + the sample
