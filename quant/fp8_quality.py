"""Quality of fp8 weights against bf16, with the bf16 floor beside it (issue 12, item 5).

Three engines, one reference (NOTES.md, Facts: the reference is the model itself):
- reference: `ref` on the ORIGINAL bf16 weights (default `reference-fp32`: fp32 compute);
- engine:    `engine` on the fp8 weights, dequantized (default `reference-fp32`, i.e. what the
             quantizer alone costs; the fp8 kernel variant, once it exists, is named here);
- floor:     `floor` on the original bf16 weights (default the bf16 megakernel on CUDA, the bf16
             reference on CPU): what bf16 rounding alone costs on these weights (~90 % agreement
             on the synthetic checkpoint), so the fp8 figure is judged against it as well as
             against the fixed gates (`monolith.eval.quality.quantized_gates`).

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


def fp8_quality(ckpt, tok, packed, device: str, *, engine: str | None = None, ref: str | None = None,
                floor: str | None = None, text=None, text_tokens: list[int] | None = None,
                positions: int = 10_000, prompts: int = 100, context: int = 512, stride: int = 512,
                agree_tokens: int = 64, free_running: bool = True, quality_prompts: list[list[int]] | None = None) -> dict:
    """ckpt: the original (bf16) Checkpoint; packed: a packed fp8 dir or PackedFP8 made from it.
    floor="none" skips the floor. Returns {"engine", "floor", "gates", "weights", "fp8_weights"}."""
    import gc
    import time

    t0 = time.perf_counter()
    from monolith.bench.baselines import registry
    from monolith.eval import quality
    from monolith.quant.pack_fp8 import dequantized_checkpoint

    engine = engine or "reference-fp32"
    ref = ref or "reference-fp32"
    floor = default_floor(device) if floor is None else floor
    check_roles(engine, ref, floor, device)  # before the dequantization and any engine build
    dq = dequantized_checkpoint(packed, ckpt)
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
    e = registry.build(engine, dq, device)
    e.name = f"{engine} on fp8 weights ({dq.packed.meta['scheme']}, head {dq.packed.meta['head']})"
    fl = None
    if floor != "none":
        fl = r if floor == ref else registry.build(floor, ckpt, device)
    res = quality.compare_quantized(r, e, fl, text_tokens, qp, **kw)
    res["protocol"] = {  # NOTES.md, Facts: protocols: WikiText-2 ppl (context, stride), agreement, mean KL
        "text": {**text_desc, "tokens": len(text_tokens)}, "context": context, "stride": stride,
        "positions": res["engine"]["positions"], "kl_positions": res["engine"]["kl_positions"],
        "positions_asked": positions, "prompts": len(qp), "agree_tokens": agree_tokens, "free_running": free_running,
        "gates": {"ppl_ratio_max": quality.PPL_LIMIT, "agreement_min": quality.AGREEMENT_MIN,
                  "floor": "agreement >= the floor's and ppl ratio <= the floor's x ppl_ratio_max"},
        "one_pass": "the reference runs once; the engine and the floor are compared with the same logits/sequences"}
    res.update(weights=ckpt.describe(), fp8_weights=dq.describe(),
               roles={"reference": f"{ref} on the original bf16 weights", "engine": e.name,
                      "floor": None if fl is None else f"{floor} on the original bf16 weights"})
    res["seconds"] = round(time.perf_counter() - t0, 1)  # builds + both passes (the stage's estimate)
    del r, e, fl, dq
    gc.collect()
    return res
