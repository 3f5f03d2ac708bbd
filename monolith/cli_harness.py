"""Harness commands: bench, eval correctness|quality, reproduce, m1."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from monolith import REPO_ROOT

# Most important first: budgets shrink for later engines when the session runs long.
# Order = priority under the session cap. The first M1 run (2026-11-30) spent its cap before the
# HF rows: the eager PyTorch reference (23 tok/s) is the least informative peer, so it runs last.
M1_ENGINES = ("megakernel-bf16-upstream,reference-graph,mutant-rope10k,hf-static,hf-compile,hf-eager,reference,"
              "llamacpp,vllm")


def _device(device: str | None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def _bench_cfg(runs: int, tokens: int, prompts: int, quick: bool, power: bool):
    from monolith.bench.decode import BenchConfig

    if quick:
        cfg = BenchConfig.quick_config()
        cfg.power = power
        return cfg
    return BenchConfig(runs=runs, tokens=tokens, prompts=prompts, power=power)


def _write(doc: dict, out: Path, merge: bool) -> None:
    from monolith import results

    if merge and out.is_file():
        from monolith import jsonio
        doc = results.merge_rows(doc, jsonio.load_object(out, f"--merge {out}"))
    j, md = results.write(doc, out)
    typer.echo(f"wrote {j} and {md}")


def _suite(engines, model, device, out, runs, tokens, prompts, quick, budget, max_total, gate_prompts, gate_tokens,
           tolerance, timelines, llamacpp_json, power, merge, quality, title):
    from monolith import results
    from monolith.bench.suite import SuiteConfig, run_suite
    from monolith.eval.correctness import TOLERANCE

    results.check_path(out)  # before the GPU run, not after it

    cfg = SuiteConfig(
        engines=[e.strip() for e in engines.split(",") if e.strip()], model=model, device=_device(device),
        bench=_bench_cfg(runs, tokens, prompts, quick, power),
        gate_prompts=2 if quick else gate_prompts, gate_tokens=min(64, gate_tokens) if quick else gate_tokens,
        tolerance=TOLERANCE if tolerance is None else tolerance, engine_budget_s=budget, max_total_s=max_total,
        timelines_dir=timelines, timeline_tokens=64 if quick else 256, llamacpp_json=llamacpp_json,
        quality=quality, title=title + (" (quick smoke: not headline)" if quick else ""))
    if quick:
        cfg.det_repeats = 2
    doc = run_suite(cfg)
    _write(doc, out, merge)
    return doc


def _write_kernel_doc(doc: dict, engine: str, path: Path) -> None:
    """The megakernel's own results file, cut from the same session (same gate, same env): its
    row first, then the baselines measured beside it, so nothing is re-measured or hand-copied."""
    from monolith import results

    # a row merged in from an earlier run (`--merge`) was not measured in this session: keep its file as it is
    rows = [r for r in doc.get("rows", []) if r.get("engine") == engine and not r.get("from_earlier_run")]
    if not rows:
        return
    proto = {**doc.get("protocol", {}), "title": f"M1: {engine}, gated and measured in the same session as the baselines"}
    kdoc = {**doc, "protocol": proto, "rows": rows + [r for r in doc["rows"] if r.get("engine") != engine]}
    results.write(kdoc, path)


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        engine: str = typer.Option("reference", help="engine name(s), comma-separated"),
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        out: Path = typer.Option(REPO_ROOT / "results" / "bench.json", help="results JSON (a .md is written beside it)"),
        runs: int = typer.Option(5, help="timed runs; the headline is their median, with min and max"),
        tokens: int = typer.Option(256, help="tokens decoded per prompt in each timed run"),
        prompts: int = typer.Option(20, help="bench prompts per run (data/prompts/bench.json)"),
        quick: bool = typer.Option(False, help="fast smoke: 3 prompts x 64 tokens, 3 runs; labelled not headline"),
        device: str = typer.Option(None, help="cuda or cpu (default: cuda if present)"),
        budget: float = typer.Option(None, help="seconds per engine for its gate and again for its timed runs"),
        max_total: float = typer.Option(None, help="cap on the whole session (s); budgets shrink to fit"),
        gate_prompts: int = typer.Option(20, help="prompts the correctness gate compares"),
        gate_tokens: int = typer.Option(256, help="tokens per prompt the gate compares"),
        tolerance: float = typer.Option(None, help="gate tolerance (logits); default eval.correctness.TOLERANCE"),
        timelines: Path = typer.Option(None, help="write per-token timelines here"),
        llamacpp_json: Path = typer.Option(None, help="JSON written by bench/baselines/llamacpp.sh"),
        power: bool = typer.Option(True, help="sample nvidia-smi power during timed runs"),
        merge: bool = typer.Option(False, help="keep rows of engines not measured now from an existing --out"),
    ):
        """Gate, then benchmark, each engine (protocol: notes/harness.md); writes JSON + Markdown."""
        _suite(engine, model, device, out, runs, tokens, prompts, quick, budget, max_total, gate_prompts, gate_tokens,
               tolerance, timelines, llamacpp_json, power, merge, None, "monolith decode benchmark")

    ev = typer.Typer(help="correctness gate and quality measures", no_args_is_help=True)
    app.add_typer(ev, name="eval")

    @ev.command("correctness")
    def correctness_cmd(
        engine: str = typer.Option("reference", help="engine name(s), comma-separated"),
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        device: str = typer.Option(None, help="cuda or cpu (default: cuda if present)"),
        prompts: int = typer.Option(20, help="bench prompts compared"),
        tokens: int = typer.Option(256, help="tokens per prompt compared"),
        tolerance: float = typer.Option(None, help="near-tie tolerance in logits (default: eval.correctness.TOLERANCE)"),
        out: Path = typer.Option(None, help="write the verdict JSON here"),
        fp8: Path = typer.Option(None, help="packed fp8 dir (`monolith pack`): oracle and engines get its dequantized "
                                 "weights (fp32), so the gate checks the implementation, not the quantizer"),
    ):
        """The gate alone: fp32 oracle, teacher-forced + free-running + determinism."""
        from monolith.bench.baselines import registry
        from monolith.bench.suite import load_inputs, prompt_tokens
        from monolith.eval import correctness

        dev = _device(device)
        ckpt, tok = load_inputs(model)
        if fp8 is not None:  # quant area: the fp8 gate's oracle is the fp32 reference on the dequantized weights
            from monolith.quant.pack_fp8 import dequantized_checkpoint
            ckpt = dequantized_checkpoint(fp8, ckpt)
        ps = prompt_tokens("bench", tok)[:prompts]
        orc = registry.oracle(ckpt, dev)
        oset = correctness.oracle_runs(orc, ps, tokens)
        del orc
        verdicts = {}
        for name in engine.split(","):
            eng = registry.build(name.strip(), ckpt, dev)
            v = correctness.gate(eng, oset, tolerance=correctness.TOLERANCE if tolerance is None else tolerance)
            verdicts[name] = v
            typer.echo(f"{name}: {'PASSED' if v['passed'] else 'FAILED'} ({v['divergences']} divergences, "
                       f"{v['divergences_disallowed']} disallowed, deterministic={v['deterministic']})")
            for r in v["reasons"]:
                typer.echo(f"  {r}")
            del eng
        if out:
            from monolith import jsonio
            jsonio.write(out, {"weights": ckpt.describe(), "verdicts": verdicts})
        if not all(v["passed"] for v in verdicts.values()):
            raise typer.Exit(1)

    @ev.command("quality")
    def quality_cmd(
        engine: str = typer.Option("reference-graph", help="engine measured (with --fp8/--nvfp4: comma-separated "
                                   "list, one reference pass for all; default there reference-fp32)"),
        ref: str = typer.Option(None, help="bf16 reference engine"),
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        device: str = typer.Option(None, help="cuda or cpu (default: cuda if present)"),
        text: Path = typer.Option(None, help="WikiText-2 raw test text (default ../shared/data/...)"),
        positions: int = typer.Option(10_000, help="scored perplexity positions = KL positions"),
        prompts: int = typer.Option(100, help="quality prompts for greedy agreement"),
        context: int = typer.Option(512, help="perplexity window (tokens)"),
        stride: int = typer.Option(512, help="step between perplexity windows (tokens)"),
        free_running: bool = typer.Option(True, help="also free-run the engine for the common-prefix measure"),
        out: Path = typer.Option(None, help="write the full result JSON here"),
        fp8: Path = typer.Option(None, help="packed fp8 dir (`monolith pack --format fp8`): the engine runs on its "
                                 "dequantized weights, the reference (default reference-fp32) on --model's bf16 weights"),
        nvfp4: Path = typer.Option(None, help="packed nvfp4 dir (`monolith pack --format nvfp4`): as --fp8, with an "
                                   "nvfp4 engine (megakernel-nvfp4-stream) or reference-fp32; not with --fp8"),
        floor: str = typer.Option(None, help="with --fp8/--nvfp4: bf16 engine measured beside it against the same "
                                  "reference (default megakernel-bf16-upstream on cuda, reference on cpu; 'none' "
                                  "skips); "
                                  "a comma-separated list pairs floor i with engine i, one floor serves all"),
        agree_tokens: int = typer.Option(64, help="greedy tokens per prompt for agreement"),
    ):
        """Perplexity, greedy agreement and KL against the bf16 reference (same weights). With --fp8 or
        --nvfp4 DIR: the packed weights against fp32 on the original bf16 weights, beside a bf16 floor."""
        from monolith.bench.baselines import registry
        from monolith.bench.suite import load_inputs, prompt_tokens
        from monolith.eval import quality

        if fp8 is not None and nvfp4 is not None:
            from monolith.errors import MonolithError
            raise MonolithError("--fp8 and --nvfp4 are exclusive: one packed dir (one weights format) per run")
        dev = _device(device)
        if fp8 is not None or nvfp4 is not None:  # quant area: quant/fp8_quality.py (either format)
            from monolith.quant.fp8_quality import check_pack, packed_quality, quality_pairs

            fmt, packed = ("fp8", fp8) if fp8 is not None else ("nvfp4", nvfp4)
            # every pair's roles checked before the pack is read and the checkpoint loaded
            pairs = quality_pairs(None if engine == "reference-graph" else engine, floor, ref, dev, fmt)
            check_pack(packed, fmt)
            ckpt, tok = load_inputs(model)
            res = packed_quality(ckpt, tok, packed, dev, fmt=fmt, engine=[e for e, _ in pairs], ref=ref,
                                 floor=[f for _, f in pairs], text=text, positions=positions, prompts=prompts,
                                 context=context, stride=stride, agree_tokens=agree_tokens,
                                 free_running=free_running)
            keys = ("ppl", "ref_ppl", "ppl_ratio", "agreement", "kl", "positions")
            for p in res["pairs"]:
                typer.echo(f"{p['roles']['engine']} | floor {p['roles']['floor']}: " + json.dumps(
                    {role: {k: p[role][k] for k in keys} for role in ("engine", "floor") if role in p}))
                typer.echo(f"  {p['gates']['summary']}")
            if out:
                from monolith import jsonio
                jsonio.write(out, res, default=str)
            return
        ref = ref or ("reference-graph" if dev == "cuda" else "reference")
        ckpt, tok = load_inputs(model)
        r = registry.build(ref, ckpt, dev)
        e = r if engine == ref else registry.build(engine, ckpt, dev)
        res = quality.evaluate(r, e, quality.text_tokens(tok, text), prompt_tokens("quality", tok)[:prompts],
                               positions=positions, context=context, stride=stride, free_running=free_running,
                               agree_tokens=agree_tokens)
        res.update(engine=engine, weights=ckpt.describe())
        typer.echo(json.dumps({k: res[k] for k in ("ppl", "ref_ppl", "ppl_ratio", "agreement", "kl", "positions")}))
        if out:
            from monolith import jsonio
            jsonio.write(out, res, default=str)

    def _m1(out_dir: Path, engines: str, model, device, quick, max_total, budget, llamacpp_json, merge, name,
            with_quality=True):
        dev = _device(device)
        if dev != "cuda":
            from monolith.errors import MonolithError
            # the gate's fp32 oracle alone (20 x 256 steps) runs ~3 tok/s on a CPU: half an hour
            raise MonolithError("monolith m1 measures on a CUDA GPU and none is visible here (a CPU trial of the "
                                "harness: monolith bench --engine reference --quick --device cpu)")
        mk = "megakernel-bf16-upstream"
        ref = "reference-graph" if dev == "cuda" else "reference"
        # The sanity check: our reference against HF transformers, both in fp32 on the bf16
        # weights, so it checks the implementation and not bf16 rounding, which these synthetic
        # weights amplify (bf16 against bf16 agrees ~90 %: results/m1_quality_hf_vs_reference_bf16.json).
        # HF's parallel path takes seconds, not minutes. Then the kernel if it ran here.
        quality = [{"engine": "hf-parallel-fp32", "ref": "reference-fp32", "positions": 256 if quick else 10_000,
                    "prompts": 4 if quick else 100, "free_running": False, "sanity": True}] if with_quality else []
        if with_quality and mk in engines.split(","):
            quality.append({"engine": mk, "ref": ref, "positions": 256 if quick else 10_000,
                            "prompts": 4 if quick else 100})
        doc = _suite(engines, model, dev, out_dir / f"{name}.json", 5, 256, 20, quick, budget, max_total, 20, 256,
                     None, out_dir / "timelines", llamacpp_json or (REPO_ROOT / "results" / "llamacpp.json"), True,
                     merge, quality, "M1: baselines and the bf16-upstream megakernel")
        _write_kernel_doc(doc, mk, out_dir / "m1_monolith_bf16.json")

    m1_opts = dict(
        out_dir=typer.Option(REPO_ROOT / "results", help="writes m1_baselines.json/.md and timelines/ here"),
        engines=typer.Option(M1_ENGINES, help="engines in priority order (later ones get less time under the cap)"),
        model=typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        device=typer.Option(None, help="cuda or cpu (default: cuda if present)"),
        quick=typer.Option(False, help="fast smoke protocol, labelled not headline"), max_total=typer.Option(450.0, help="whole-session cap in seconds"),
        budget=typer.Option(24.0, help="per-engine seconds for the gate and again for timed runs"),
        llamacpp_json=typer.Option(None, help="JSON written by bench/baselines/llamacpp.sh (default results/llamacpp.json)"),
        merge=typer.Option(False, help="merge into an existing m1_baselines.json"),
        quality=typer.Option(True, help="quality sanity (reference vs HF, fp32) and the kernel's quality"),
    )

    @app.command()
    def m1(out_dir: Path = m1_opts["out_dir"], engines: str = m1_opts["engines"], model: str = m1_opts["model"],
           device: str = m1_opts["device"], quick: bool = m1_opts["quick"], max_total: float = m1_opts["max_total"],
           budget: float = m1_opts["budget"], llamacpp_json: Path = m1_opts["llamacpp_json"],
           merge: bool = m1_opts["merge"], quality: bool = m1_opts["quality"]):
        """M1 end to end on a GPU: gate + baselines + megakernel + quality sanity -> results/m1_baselines.*"""
        _m1(out_dir, engines, model, device, quick, max_total, budget, llamacpp_json, merge, "m1_baselines", quality)

    @app.command()
    def reproduce(out_dir: Path = m1_opts["out_dir"], engines: str = m1_opts["engines"], model: str = m1_opts["model"],
                  device: str = m1_opts["device"], quick: bool = m1_opts["quick"],
                  max_total: float = m1_opts["max_total"], budget: float = m1_opts["budget"],
                  llamacpp_json: Path = m1_opts["llamacpp_json"], merge: bool = m1_opts["merge"],
                  quality: bool = m1_opts["quality"]):
        """Reproduce the upstream bf16 design next to the baselines (M1, same protocol as `m1`)."""
        _m1(out_dir, engines, model, device, quick, max_total, budget, llamacpp_json, merge, "m1_baselines", quality)
