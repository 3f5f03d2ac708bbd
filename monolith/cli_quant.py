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
        format: str = typer.Option(..., "--format", help="weight format: fp8 (E4M3, one fp32 scale per output row) "
                                   "or nvfp4 (E2M1, E4M3 scale per 16 weights, fp32 per tensor; LM head fp8)"),
        model: Path = typer.Option(..., "--model", help="bf16 checkpoint dir (HF format) to pack"),
        out: Path = typer.Option(..., "--out", help="output dir; writes model.fp8.safetensors or model.nvfp4.safetensors"),
        head: str = typer.Option("fp8", "--head", help="tied embedding/LM head: fp8, or bf16 (fp8 format only)"),
        search: bool = typer.Option(True, "--search/--no-search",
                                    help="nvfp4: per-block MSE search over block scales (off: NVIDIA's max scaling)"),
        stats: Path = typer.Option(None, "--stats", help="also write quantization error statistics (JSON) here"),
    ):
        """Pack a checkpoint into the layout the kernel streams (fp8: quant/fp8_layout.py, rowmajor-v1;
        nvfp4: quant/nvfp4_layout.py, nvfp4-rowmajor-v1)."""
        if format not in FORMATS:
            raise MonolithError(f"--format {format!r} is not supported; known: {', '.join(FORMATS)}")
        if not (Path(model) / "config.json").is_file():
            raise MonolithError(f"--model {model}: not a checkpoint dir (config.json not found)")
        if format == "nvfp4":
            if head != "fp8":
                raise MonolithError("--format nvfp4 keeps the LM head in fp8 (issue 14); --head bf16 is fp8-only")
            return _pack_nvfp4(model, out, search, stats)
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
            Path(stats).write_text(json.dumps({"weights": ckpt.describe(), "scheme": meta["scheme"],
                                               "pack_seconds": meta["pack_seconds"], "total_seconds": round(dt, 2),
                                               "matrices": st}, indent=1) + "\n")
            console.print(f"{'matrix':8} {'rel MSE':>10} {'worst layer':>12} {'->0 frac':>10} {'subnormal':>10}"
                          f" {'outlier cols':>13} {'other cols':>11}")
            for t, s in st.items():
                oc = f"{s['rel_mse_outlier_cols']:.3e}" if "rel_mse_outlier_cols" in s else "-"
                ot = f"{s['rel_mse_other_cols']:.3e}" if "rel_mse_other_cols" in s else "-"
                console.print(f"{t:8} {s['rel_mse']:10.3e} {s['rel_mse_worst_layer']:12.3e} "
                              f"{s['flushed_to_zero_frac']:10.2e} {s['subnormal_frac']:10.2e} {oc:>13} {ot:>11}")
            console.print(f"wrote {stats}")


def _pack_nvfp4(model: Path, out: Path, search: bool, stats: Path | None) -> None:
    from monolith.checkpoint import load_checkpoint
    from monolith.quant import nvfp4_layout as L
    from monolith.quant.pack_nvfp4 import pack_nvfp4, summarize_stats

    t0 = time.perf_counter()
    ckpt = load_checkpoint(model, allow_reduced_depth=True)
    raw: dict = {}
    meta = pack_nvfp4(ckpt, out, search=search, progress=True, stats=raw)
    dt = time.perf_counter() - t0
    f = Path(out) / L.FILE
    console.print(f"wrote {f} ({f.stat().st_size / 1e6:.1f} MB, {meta['scheme']}, layout {meta['layout']}, "
                  f"LM head fp8, search {'on' if search else 'off'}, {meta['num_layers']} layers) in {dt:.1f} s "
                  f"(quantize {meta['pack_seconds']:.1f} s); source sha256 {meta['source']['sha256'][:12]}…")
    summary = summarize_stats(raw, meta["num_layers"])
    console.print(f"{'matrix':8} {'rel MSE max':>12} {'rel MSE stored':>15} {'gain':>6}")
    for t, s in summary.items():
        console.print(f"{t:8} {s['rel_mse_max']:12.3e} {s['rel_mse_search']:15.3e} {s['gain']:6.3f}")
    if stats is not None:
        Path(stats).write_text(json.dumps({"weights": ckpt.describe(), "scheme": meta["scheme"], "layout": meta["layout"],
                                           "search": meta["search"], "pack_seconds": meta["pack_seconds"],
                                           "total_seconds": round(dt, 2), "matrices": summary, "per_matrix": raw},
                                          indent=1) + "\n")
        console.print(f"wrote {stats}")
