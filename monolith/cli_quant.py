"""`monolith pack` (quant area): offline weight packing for the quantized kernel variants."""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from monolith.console import make_console
from monolith.errors import MonolithError

console = make_console()
FORMATS = ("fp8", "nvfp4")
STATS_KIND = "monolith-pack-stats"  # the marker of a --stats file: only such a file is replaced


def check_stats_path(stats: Path, model: Path, out: Path) -> Path:
    """--stats names a new file, or a stats file an earlier `pack --stats` wrote; never a file of
    the model or output directory (the weights themselves were once overwritten this way), never
    any other existing file."""
    from monolith import jsonio
    from monolith.outpaths import inside, writable_file

    for d, which in ((model, "model"), (out, "output")):
        if inside(stats, d):
            raise MonolithError(f"--stats {stats} is inside the {which} directory {d}; write it elsewhere")
    writable_file(stats, "--stats")
    if stats.exists() or stats.is_symlink():
        try:
            doc = jsonio.load(stats, f"--stats {stats}", max_bytes=16 << 20)
        except MonolithError:
            doc = None
        if not (isinstance(doc, dict) and doc.get("kind") == STATS_KIND):
            raise MonolithError(f"--stats {stats} exists and is not a pack statistics file (no \"kind\": "
                                f"\"{STATS_KIND}\"); refusing to overwrite it")
    return stats


def _write_stats(stats: Path, doc: dict) -> None:
    tmp = stats.with_name(f".{stats.name}.tmp")
    tmp.write_text(json.dumps({"kind": STATS_KIND, **doc}, indent=1, allow_nan=False) + "\n")
    tmp.replace(stats)


def synthetic_outlier_channels(ckpt) -> list[int] | None:
    """The hidden channels `monolith synth` gave large input columns (None for real weights)."""
    syn = ckpt.synthetic
    if not syn or syn.get("seed") is None:
        return None
    import torch

    from monolith.synth import RECIPE, _gen
    perm = torch.randperm(ckpt.shape.hidden, generator=_gen(int(syn["seed"]), "outlier_channels"))
    return sorted(perm[: RECIPE["outlier_channels"]].tolist())


def register(app: typer.Typer) -> None:
    @app.command()
    def pack(
        format: str = typer.Option(None, "--format", help="weight format: fp8 (E4M3, one fp32 scale per output row) "
                                   "or nvfp4 (E2M1, E4M3 scale per 16 weights, fp32 per tensor; LM head fp8); "
                                   "not needed with --sensitivity"),
        model: Path = typer.Option(..., "--model", help="bf16 checkpoint dir (HF format) to pack"),
        out: Path = typer.Option(..., "--out", help="output dir; writes model.fp8.safetensors or "
                                 "model.nvfp4.safetensors (with --sensitivity: the JSON file to write)"),
        head: str = typer.Option("fp8", "--head", help="tied embedding/LM head: fp8, or bf16 (fp8 format only)"),
        search: bool = typer.Option(True, "--search/--no-search",
                                    help="nvfp4: per-block MSE search over block scales (off: NVIDIA's max scaling)"),
        stats: Path = typer.Option(None, "--stats", help="also write quantization error statistics (JSON) here"),
        map_file: Path = typer.Option(None, "--map", help="nvfp4: mixed map, a `--sensitivity` JSON (its proposed "
                                      "map) or {\"formats\": {HF name: fp8|nvfp4}}: those projections stay FP8 "
                                      "(layout_version 2, quant/nvfp4_layout.py)"),
        fp8_kinds: str = typer.Option(None, "--fp8-kinds", help="nvfp4: keep these projection kinds FP8 in every "
                                      "layer, comma-separated (q,k,v,o,gate,up,down); instead of --map"),
        sensitivity: bool = typer.Option(False, "--sensitivity", help="run the NVFP4 sensitivity sweep instead of "
                                         "packing (quant/sensitivity.py): each unit NVFP4 alone, KL and agreement "
                                         "against reference-fp32 on the original weights, a proposed FP8/NVFP4 map; "
                                         "writes --out (JSON) and a PNG beside it"),
        device: str = typer.Option(None, "--device", help="--sensitivity: cuda or cpu (default: cuda if present)"),
        positions: int = typer.Option(None, "--positions", help="--sensitivity: KL positions of WikiText-2 "
                                      "(default 1024)"),
        context: int = typer.Option(None, "--context", help="--sensitivity: window of the KL slice in tokens, "
                                    "stride = context (default 512)"),
        prompts: int = typer.Option(None, "--prompts", help="--sensitivity: quality prompts for greedy agreement "
                                    "(default 20; 0 skips agreement)"),
        agree_tokens: int = typer.Option(None, "--agree-tokens", help="--sensitivity: greedy tokens per prompt "
                                         "(default 32)"),
        per_layer: bool = typer.Option(False, "--per-layer", help="--sensitivity: one unit per (layer, kind) "
                                       "matrix (196 passes at 28 layers) instead of one per kind (7)"),
        fp8_fraction: float = typer.Option(None, "--fp8-fraction", help="--sensitivity: most of the layers' "
                                           "weights the map may keep FP8, 0..1 (default 0.25)"),
        kl_budget: str = typer.Option(None, "--kl-budget", help="--sensitivity: stop keeping units FP8 once the "
                                      "NVFP4 units' summed KL is <= this: nats, 'fp8' (the all-FP8 endpoint's KL, "
                                      "default) or 'none'"),
        text: Path = typer.Option(None, "--text", help="--sensitivity: WikiText-2 raw test text "
                                  "(default ../shared/data/...)"),
        plot: Path = typer.Option(None, "--plot", help="--sensitivity: PNG path (default: --out with .png)"),
    ):
        """Pack a checkpoint into the layout the kernel streams (fp8: quant/fp8_layout.py, rowmajor-v1;
        nvfp4: quant/nvfp4_layout.py, nvfp4-rowmajor-v1, mixed with FP8 projections by --map or
        --fp8-kinds), or with --sensitivity measure which projections NVFP4 hurts (quant/sensitivity.py)."""
        sweep_opts = {"--device": device, "--positions": positions, "--context": context, "--prompts": prompts,
                      "--agree-tokens": agree_tokens, "--fp8-fraction": fp8_fraction, "--kl-budget": kl_budget,
                      "--text": text, "--plot": plot, "--per-layer": per_layer or None}
        if not (Path(model) / "config.json").is_file():
            raise MonolithError(f"--model {model}: not a checkpoint dir (config.json not found)")
        if sensitivity:
            if format not in (None, "nvfp4"):
                raise MonolithError(f"--sensitivity measures nvfp4 against the original weights; --format {format} "
                                    "does not apply")
            given = [k for k, v in {"--map": map_file, "--fp8-kinds": fp8_kinds, "--stats": stats}.items() if v]
            if head != "fp8" or given:
                raise MonolithError(f"--sensitivity writes a map; {', '.join(given) or '--head'} belongs to packing")
            return _sensitivity(model, out, search, **{k.lstrip("-").replace("-", "_"): v for k, v in sweep_opts.items()})
        given = [k for k, v in sweep_opts.items() if v is not None]
        if given:
            raise MonolithError(f"{', '.join(given)} apply to --sensitivity only")
        if format is None:
            raise MonolithError("--format is required (fp8 or nvfp4), or --sensitivity for the sweep")
        if format not in FORMATS:
            raise MonolithError(f"--format {format!r} is not supported; known: {', '.join(FORMATS)}")
        from monolith.outpaths import writable_dir
        writable_dir(out, "--out")
        if stats is not None:
            check_stats_path(stats, model, out)
        if format == "nvfp4":
            if head != "fp8":
                raise MonolithError("--format nvfp4 keeps the LM head in fp8 (issue 14); --head bf16 is fp8-only")
            if map_file is not None and fp8_kinds:
                raise MonolithError("give --map or --fp8-kinds, not both")
            return _pack_nvfp4(model, out, search, stats, map_file, fp8_kinds)
        if map_file is not None or fp8_kinds:
            raise MonolithError("--map and --fp8-kinds apply to --format nvfp4 only (a mixed nvfp4/fp8 pack)")
        if not search:
            raise MonolithError("--no-search applies to --format nvfp4 only")
        from monolith.checkpoint import load_checkpoint
        from monolith.quant import fp8_layout as L
        from monolith.quant.pack_fp8 import error_stats, load_packed_fp8, pack_fp8

        t0 = time.perf_counter()
        ckpt = load_checkpoint(model, allow_reduced_depth=True)
        meta = pack_fp8(ckpt, out, head=head, progress=True)
        dt = time.perf_counter() - t0
        f = Path(out) / L.FILE
        console.print(f"wrote {f} ({f.stat().st_size / 1e6:.1f} MB, {meta['scheme']}, layout {meta['layout']}, "
                      f"head {head}, {meta['num_layers']} layers) in {dt:.1f} s (quantize {meta['pack_seconds']:.1f} s); "
                      f"source sha256 {meta['source']['sha256'][:12]}…")
        if stats is not None:
            packed = load_packed_fp8(out, model=ckpt)
            st = error_stats(ckpt, packed, synthetic_outlier_channels(ckpt))
            _write_stats(Path(stats), {"weights": ckpt.describe(), "scheme": meta["scheme"],
                                       "pack_seconds": meta["pack_seconds"], "total_seconds": round(dt, 2),
                                       "matrices": st})
            console.print(f"{'matrix':8} {'rel MSE':>10} {'worst layer':>12} {'->0 frac':>10} {'subnormal':>10}"
                          f" {'outlier cols':>13} {'other cols':>11}")
            for t, s in st.items():
                oc = f"{s['rel_mse_outlier_cols']:.3e}" if "rel_mse_outlier_cols" in s else "-"
                ot = f"{s['rel_mse_other_cols']:.3e}" if "rel_mse_other_cols" in s else "-"
                console.print(f"{t:8} {s['rel_mse']:10.3e} {s['rel_mse_worst_layer']:12.3e} "
                              f"{s['flushed_to_zero_frac']:10.2e} {s['subnormal_frac']:10.2e} {oc:>13} {ot:>11}")
            console.print(f"wrote {stats}")


def _sensitivity(model: Path, out: Path, search: bool, *, device, positions, context, prompts, agree_tokens,
                 fp8_fraction, kl_budget, text, plot, per_layer) -> None:
    import torch

    from monolith.bench.suite import load_inputs
    from monolith.quant import sensitivity as S

    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise MonolithError(f"--device {dev}: no CUDA device here; use --device cpu (a truncated checkpoint)")
    if str(out).endswith("/") or Path(out).is_dir():
        raise MonolithError(f"--out {out}: with --sensitivity, a JSON file path (not a dir)")
    from monolith.outpaths import writable_file
    writable_file(out, "--out")
    ckpt, tok = load_inputs(str(model))
    doc = S.sweep(ckpt, tok, device=dev, per_layer=bool(per_layer),
                  positions=S.POSITIONS if positions is None else positions,
                  context=S.CONTEXT if context is None else context,
                  prompts=S.PROMPTS if prompts is None else prompts,
                  agree_tokens=S.AGREE_TOKENS if agree_tokens is None else agree_tokens, text=text, search=search,
                  fp8_fraction=S.FP8_FRACTION if fp8_fraction is None else fp8_fraction,
                  kl_budget=S.KL_BUDGET if kl_budget is None else kl_budget, out=Path(out), progress=True,
                  log=console.print)
    png = Path(plot) if plot is not None else Path(out).with_suffix(".png")
    try:
        doc["plot"] = str(S.plot(doc, png))
    except Exception as e:  # noqa: BLE001  (the measurements are written either way)
        doc["plot_error"] = f"{type(e).__name__}: {e}"
        console.print(f"plot failed: {doc['plot_error']}")
    S._write_json(Path(out), doc)
    m = doc["map"]
    console.print(f"{'unit':>8} {'KL':>10} {'agreement':>10} {'ppl ratio':>10} {'rel MSE':>10} {'rank':>5} format")
    for u in doc["units"]:
        ag = "-" if u["agreement"] is None else f"{u['agreement']:.1%}"
        console.print(f"{u['name']:>8} {u['kl']:10.4g} {ag:>10} {u['ppl_ratio']:10.4g} {u['rel_mse']:10.3e} "
                      f"{u['rank']:5d} {u['format']}")
    for name, e in doc["endpoints"].items():
        ag = "-" if e["agreement"] is None else f"{e['agreement']:.1%}"
        console.print(f"{name:>9}: KL {e['kl']:.4g}, agreement {ag}, ppl ratio {e['ppl_ratio']:.4g}")
    console.print(f"map: FP8 {', '.join(m['fp8_units']) or 'nothing'} ({m['fp8_weight_fraction']:.1%} of the layers' "
                  f"weights; stopped by {m['stopped_by']}), predicted KL {m['predicted_kl']:.4g}, measured "
                  f"{doc['endpoints']['mixed']['kl']:.4g}; {m['bytes_per_token'] / 1e6:.1f} MB/token "
                  f"(all nvfp4 {m['bytes_per_token_all_nvfp4'] / 1e6:.1f}, all fp8 {m['bytes_per_token_all_fp8'] / 1e6:.1f})",
                  soft_wrap=True)
    console.print(f"wrote {out}{' and ' + doc['plot'] if doc.get('plot') else ''} in {doc['seconds']:.1f} s", soft_wrap=True)
    console.print(f"pack it: monolith pack --format nvfp4 --map {out} --model {model} --out DIR", soft_wrap=True)


def _pack_nvfp4(model: Path, out: Path, search: bool, stats: Path | None, map_file: Path | None = None,
                fp8_kinds: str | None = None) -> None:
    from monolith.checkpoint import load_checkpoint
    from monolith.quant import nvfp4_layout as L
    from monolith.quant.pack_nvfp4 import fp8_names_for_kinds, pack_nvfp4, summarize_stats

    t0 = time.perf_counter()
    ckpt = load_checkpoint(model, allow_reduced_depth=True)
    fp8, source = (), None
    if map_file is not None:
        from monolith.quant.sensitivity import load_map
        fp8, source = load_map(map_file, ckpt)
    elif fp8_kinds:
        fp8 = fp8_names_for_kinds(fp8_kinds, ckpt.shape.num_layers)
        source = {"source": "--fp8-kinds", "fp8_kinds": fp8_kinds}
    raw: dict = {}
    meta = pack_nvfp4(ckpt, out, search=search, progress=True, stats=raw, fp8=fp8, map_source=source)
    dt = time.perf_counter() - t0
    f = Path(out) / L.FILE
    mixed = meta.get("mixed")
    what = (f"layout_version 2: {len(mixed['fp8'])} projections FP8 (kinds in every layer: "
            f"{', '.join(mixed['fp8_kinds']) or 'none'}), {L.bytes_per_token(meta['num_layers'], fp8) / 1e6:.1f} MB/token"
            if mixed else "all projections nvfp4")
    console.print(f"wrote {f} ({f.stat().st_size / 1e6:.1f} MB, {meta['scheme']}, layout {meta['layout']}, "
                  f"LM head fp8, search {'on' if search else 'off'}, {meta['num_layers']} layers, {what}) in {dt:.1f} s "
                  f"(quantize {meta['pack_seconds']:.1f} s); source sha256 {meta['source']['sha256'][:12]}…",
                  soft_wrap=True)  # one line whatever the path's length (a wrap split "layout_version 2")
    summary = summarize_stats(raw, meta["num_layers"])
    console.print(f"{'matrix':8} {'rel MSE max':>12} {'rel MSE stored':>15} {'gain':>6}")
    for t, s in summary.items():
        console.print(f"{t:8} {s['rel_mse_max']:12.3e} {s['rel_mse_search']:15.3e} {'exact' if s['gain'] is None else format(s['gain'], '6.3f'):>6}")
    if stats is not None:
        _write_stats(Path(stats), {"weights": ckpt.describe(), "scheme": meta["scheme"], "layout": meta["layout"],
                                   "search": meta["search"], "pack_seconds": meta["pack_seconds"],
                                   "total_seconds": round(dt, 2), "matrices": summary, "per_matrix": raw,
                                   "mixed": mixed})
        console.print(f"wrote {stats}")
