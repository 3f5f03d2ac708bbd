"""Quality of fp8 weights against bf16, with the bf16 floor beside it (issue 12, item 5).

Three engines, one reference (NOTES.md, Facts: the reference is the model itself):
- reference: `ref` on the ORIGINAL bf16 weights (default `reference-fp32`: fp32 compute);
- engine:    `engine` on the fp8 weights, dequantized (default `reference-fp32`, i.e. what the
             quantizer alone costs; the fp8 kernel variant, once it exists, is named here);
- floor:     `floor` on the original bf16 weights (default the bf16 megakernel on CUDA, the bf16
             reference on CPU): what bf16 rounding alone costs on these weights (~90 % agreement
             on the synthetic checkpoint), so the fp8 figure is judged against it as well as
             against the fixed gates (`monolith.eval.quality.quantized_gates`).

Several (engine, floor) pairs may share the one reference pass (the fp32 reference is the
expensive part on the GPU): the fp8 variants of both schedules, each beside its bf16 schedule.

`monolith eval quality --fp8 DIR` runs this; on CPU with a truncated checkpoint and a few
positions it is the tests' fast path.
"""
from __future__ import annotations

from monolith.errors import MonolithError


def default_floor(device: str) -> str:
    return "megakernel-bf16-upstream" if str(device).startswith("cuda") else "reference"


def check_roles(engine: str, ref: str, floor: str, device: str) -> None:
    """Refuse, before any work, an engine that would not measure the fp8 weights (one that computes
    in bf16 and would round them, or one that reads the original weights from disk, like HF), a
    floor that does not run on the original bf16 weights, and a CUDA engine on a CPU run."""
    from monolith.bench.baselines import registry

    if engine in ("reference", "reference-graph") or engine.startswith("hf-"):
        why = ("loads the original weights from the checkpoint dir" if engine.startswith("hf-")
               else "computes in bf16 and would round the dequantized fp8 weights to bf16 first")
        raise MonolithError(f"--engine {engine} {why}; use reference-fp32 (the quantizer alone) or an fp8 kernel "
                            "variant (megakernel-fp8-upstream)")
    if engine != "reference-fp32" and registry.weights_of(engine) != "fp8":
        raise MonolithError(f"--engine {engine} does not read fp8 weights (kernel/variants.json); use an fp8 variant "
                            "such as megakernel-fp8-upstream, or reference-fp32")
    if floor != "none" and registry.weights_of(floor) != "bf16":
        raise MonolithError(f"--floor {floor} reads {registry.weights_of(floor)} weights; the floor is a bf16 engine on "
                            "the original weights (megakernel-bf16-upstream)")
    for role, name in (("--engine", engine), ("--ref", ref), ("--floor", floor)):
        if name != "none" and registry.spec(name).needs_cuda and not str(device).startswith("cuda"):
            raise MonolithError(f"{role} {name} needs a CUDA device; this run is on {device}")


def _names(x) -> list[str]:
    """A role given as None, a name, a comma-separated list or a list of names -> a list of names."""
    if x is None:
        return [None]
    items = x.split(",") if isinstance(x, str) else list(x)
    return [s.strip() for s in items if s and s.strip()]


def fp8_pairs(engine, floor, ref: str | None, device: str) -> list[tuple[str, str]]:
    """(engine, floor) pairs from --engine/--floor (names or comma-separated lists: pair i = engine i
    with floor i; one floor serves every engine), every role checked (`check_roles`) before any work."""
    engines = [e or "reference-fp32" for e in _names(engine)]
    floors = [default_floor(device) if f is None else f for f in _names(floor)]
    if not engines or not floors:
        raise MonolithError("--engine and --floor need at least one name each")
    if len(floors) == 1:
        floors = floors * len(engines)
    if len(floors) != len(engines):
        raise MonolithError(f"--engine lists {len(engines)} engines and --floor {len(floors)} floors; give one floor "
                            "per engine (pair i = engine i with floor i), or one floor for all ('none' skips one)")
    for e, f in zip(engines, floors, strict=True):
        check_roles(e, ref or "reference-fp32", f, device)
    return list(zip(engines, floors, strict=True))


def fp8_quality(ckpt, tok, packed, device: str, *, engine=None, ref: str | None = None, floor=None, text=None,
                text_tokens: list[int] | None = None, positions: int = 10_000, prompts: int = 100, context: int = 512,
                stride: int = 512, agree_tokens: int = 64, free_running: bool = True,
                quality_prompts: list[list[int]] | None = None) -> dict:
    """ckpt: the original (bf16) Checkpoint; packed: a packed fp8 dir or PackedFP8 made from it.
    engine, floor: a name or a list of names (pairs, `fp8_pairs`); floor "none" skips it. All pairs
    share one reference pass (the expensive part on the GPU). Returns the first pair's {"engine",
    "floor", "gates", "roles"} at the top (as for one pair) with "protocol", "weights", "fp8_weights",
    "seconds", and "pairs": one {"engine", "floor" (absent for none), "gates", "roles"} per pair."""
    import gc
    import time

    t0 = time.perf_counter()
    from monolith.bench.baselines import registry
    from monolith.eval import quality
    from monolith.quant.pack_fp8 import dequantized_checkpoint

    ref = ref or "reference-fp32"
    pairs = fp8_pairs(engine, floor, ref, device)  # before the dequantization and any engine build
    dq = dequantized_checkpoint(packed, ckpt)  # once: every fp8 engine runs on the same numbers
    text_desc = {"source": "given as tokens"}
    if text_tokens is None:
        import hashlib
        from pathlib import Path

        path = Path(text) if text else quality.default_text_path()
        text_tokens = quality.text_tokens(tok, path)
        text_desc = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if quality_prompts is None:
        from monolith.bench.suite import prompt_tokens
        quality_prompts = prompt_tokens("quality", tok)
    qp = quality_prompts[:prompts]
    kw = dict(positions=positions, context=context, stride=stride, agree_tokens=agree_tokens, free_running=free_running)
    r = registry.build(ref, ckpt, device)
    # each distinct engine and floor built and measured once (a floor shared by several engines too);
    # keyed by role, as reference-fp32 may be both (on the fp8 weights, and on the bf16 ones)
    built = {}
    for name, fl in pairs:
        if ("engine", name) not in built:
            e = built["engine", name] = registry.build(name, dq, device)
            e.name = f"{name} on fp8 weights ({dq.packed.meta['scheme']}, head {dq.packed.meta['head']})"
        if fl != "none" and ("floor", fl) not in built:
            built["floor", fl] = r if fl == ref else registry.build(fl, ckpt, device)
    figs = quality.evaluate_many(r, list(built.values()), text_tokens, qp, **kw)  # the one reference pass
    figs = {k: {**f, "engine": getattr(e, "name", k[0])} for (k, e), f in zip(built.items(), figs, strict=True)}
    out = []
    for name, fl in pairs:
        p = quality.quantized_pair(dict(figs["engine", name]), None if fl == "none" else dict(figs["floor", fl]))
        p["roles"] = {"reference": f"{ref} on the original bf16 weights", "engine": p["engine"]["engine"],
                      "floor": None if fl == "none" else f"{fl} on the original bf16 weights"}
        out.append(p)
    res = {k: v for k, v in out[0].items() if k != "roles"}  # the first pair where one-pair readers look
    res["protocol"] = {  # NOTES.md, Facts: protocols: WikiText-2 ppl (context, stride), agreement, mean KL
        "text": {**text_desc, "tokens": len(text_tokens)}, "context": context, "stride": stride,
        "positions": res["engine"]["positions"], "kl_positions": res["engine"]["kl_positions"],
        "positions_asked": positions, "prompts": len(qp), "agree_tokens": agree_tokens, "free_running": free_running,
        "gates": {"ppl_ratio_max": quality.PPL_LIMIT, "agreement_min": quality.AGREEMENT_MIN,
                  "floor": "agreement >= the floor's and ppl ratio <= the floor's x ppl_ratio_max"},
        "one_pass": "the reference runs once; every engine and floor of every pair is compared with the same "
                    "logits/sequences"}
    res.update(weights=ckpt.describe(), fp8_weights=dq.describe(), roles=out[0]["roles"], pairs=out)
    res["seconds"] = round(time.perf_counter() - t0, 1)  # builds + the pass over all pairs (the stage's estimate)
    del r, built, dq
    gc.collect()
    if str(device).startswith("cuda"):  # hand the engines' memory back for whatever runs next
        import torch
        torch.cuda.empty_cache()
    return res
