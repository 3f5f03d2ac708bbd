"""Quality of packed weights (fp8, or nvfp4) against bf16, with the bf16 floor beside it (issue 12
item 5 for fp8; issue 14 for nvfp4). The file keeps its M3 name; `fp8_quality` is the fp8 case.

Three engines, one reference (NOTES.md, Facts: the reference is the model itself):
- reference: `ref` on the ORIGINAL bf16 weights (default `reference-fp32`: fp32 compute);
- engine:    `engine` on the packed weights, dequantized (default `reference-fp32`, i.e. what the
             quantizer alone costs; or a kernel variant of the pack's format: weights "fp8" or
             "nvfp4" in kernel/variants.json);
- floor:     `floor` on the original bf16 weights (default the bf16 megakernel on CUDA, the bf16
             reference on CPU): what bf16 rounding alone costs on these weights (~90 % agreement
             on the synthetic checkpoint), so the quantized figure is judged against it as well as
             against the fixed gates (`monolith.eval.quality.quantized_gates`).

The format ("fp8" or "nvfp4") is given (`--fp8 DIR` / `--nvfp4 DIR`) or read from the pack's
metadata (`pack_format`); a pack of the other format is refused, and so is an engine that reads
another format. Several (engine, floor) pairs may share the one reference pass (the fp32 reference
is the expensive part on the GPU): e.g. the fp8 variants of both schedules, each beside its bf16
schedule.

`monolith eval quality --fp8 DIR` / `--nvfp4 DIR` runs this; on CPU with a truncated checkpoint and
a few positions it is the tests' fast path.
"""
from __future__ import annotations

from pathlib import Path

from monolith.errors import MonolithError

FORMATS = ("fp8", "nvfp4")


def _layouts() -> dict:
    from monolith.quant import fp8_layout, nvfp4_layout

    return {"fp8": fp8_layout, "nvfp4": nvfp4_layout}


def variants_of(fmt: str) -> list[str]:
    """The megakernel engines that read `fmt` weights (kernel/variants.json), without the sm_120
    configuration's twins (the same arithmetic as their base variants; a proof build, not a choice)
    and without the k-vector builds (one token per pass is what quality compares; they refuse to run)."""
    from monolith import kernel_spec

    return [f"megakernel-{v['name']}" for v in kernel_spec.variants()["variants"]
            if v.get("weights") == fmt and v.get("config") != "sm120" and v.get("vectors", 1) == 1]


def pack_format(packed) -> str:
    """The format ("fp8" or "nvfp4") a pack's metadata names; packed: a Packed, a packed dir or its file."""
    from monolith.quant.packfile import Packed, read_meta

    layouts = _layouts()
    if isinstance(packed, Packed):
        meta, where = packed.meta, packed.path or "the in-memory pack"
    else:
        p = Path(packed)
        if p.is_dir():
            files = [p / L.FILE for L in layouts.values() if (p / L.FILE).is_file()]
        else:
            files = [p] if p.is_file() else []
        if not files:
            raise MonolithError(f"packed weights not found: {p} (a dir with {' or '.join(L.FILE for L in layouts.values())};"
                                " write one with `monolith pack --format fp8|nvfp4 --model DIR --out DIR`)")
        if len(files) > 1:
            raise MonolithError(f"{p} holds both {' and '.join(f.name for f in files)}: name the file to measure")
        meta, where = read_meta(files[0], layouts["fp8"].META_KEY), files[0]
    fmt = next((k for k, L in layouts.items() if meta.get("format") == L.FORMAT), None)
    if fmt is None:
        raise MonolithError(f"{where}: format {meta.get('format')!r} is not a packed format this measures "
                            f"({', '.join(L.FORMAT for L in layouts.values())})")
    return fmt


def check_pack(packed, fmt: str) -> None:
    """Refuse a pack whose metadata names another format than `fmt` (--nvfp4 given an fp8 dir)."""
    found = pack_format(packed)
    if found != fmt:
        raise MonolithError(f"{getattr(packed, 'path', None) or packed} holds {found} weights, not {fmt}: measure it "
                            f"with `eval quality --{found}` and an {found} engine ({', '.join(variants_of(found))}) "
                            "or reference-fp32")


def default_floor(device: str) -> str:
    return "megakernel-bf16-upstream" if str(device).startswith("cuda") else "reference"


def check_roles(engine: str, ref: str, floor: str, device: str, fmt: str = "fp8") -> None:
    """Refuse, before any work, an engine that would not measure the `fmt` weights (one that computes
    in bf16 and would round them, one that reads the original weights from disk, like HF, or a kernel
    variant of another format), a floor that does not run on the original bf16 weights, and a CUDA
    engine on a CPU run."""
    from monolith.bench.baselines import registry

    if fmt not in FORMATS:
        raise MonolithError(f"weights format {fmt!r} is not one this measures ({', '.join(FORMATS)})")
    use = f"use reference-fp32 (the quantizer alone) or an {fmt} kernel variant ({', '.join(variants_of(fmt))})"
    if engine in ("reference", "reference-graph") or engine.startswith("hf-"):
        why = ("loads the original weights from the checkpoint dir" if engine.startswith("hf-")
               else f"computes in bf16 and would round the dequantized {fmt} weights to bf16 first")
        raise MonolithError(f"--engine {engine} {why}; {use}")
    if engine != "reference-fp32" and (w := registry.weights_of(engine)) != fmt:
        raise MonolithError(f"--engine {engine} does not read {fmt} weights (it reads {w}, kernel/variants.json); {use}")
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


def quality_pairs(engine, floor, ref: str | None, device: str, fmt: str = "fp8") -> list[tuple[str, str]]:
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
        check_roles(e, ref or "reference-fp32", f, device, fmt)
    return list(zip(engines, floors, strict=True))


def fp8_quality(ckpt, tok, packed, device: str, **kw) -> dict:
    """`packed_quality` of an fp8 pack (`eval quality --fp8`)."""
    return packed_quality(ckpt, tok, packed, device, fmt="fp8", **kw)


def packed_quality(ckpt, tok, packed, device: str, *, fmt: str | None = None, engine=None, ref: str | None = None,
                   floor=None, text=None, text_tokens: list[int] | None = None, positions: int = 10_000,
                   prompts: int = 100, context: int = 512, stride: int = 512, agree_tokens: int = 64,
                   free_running: bool = True, quality_prompts: list[list[int]] | None = None) -> dict:
    """ckpt: the original (bf16) Checkpoint; packed: a packed dir or Packed made from it, of format
    `fmt` ("fp8" or "nvfp4"; None: the pack's metadata says). engine, floor: a name or a list of
    names (pairs, `quality_pairs`); floor "none" skips it. All pairs share one reference pass (the
    expensive part on the GPU). Returns the first pair's {"engine", "floor", "gates", "roles"} at the
    top (as for one pair) with "format", "protocol", "weights", "packed_weights" (for fp8 also
    "fp8_weights", the M3 key), "seconds", and "pairs": one {"engine", "floor" (absent for none),
    "gates", "roles"} per pair."""
    import gc
    import time

    t0 = time.perf_counter()
    from monolith.bench.baselines import registry
    from monolith.eval import quality
    from monolith.quant import pack_fp8, pack_nvfp4

    ref = ref or "reference-fp32"
    fmt = fmt or pack_format(packed)
    pairs = quality_pairs(engine, floor, ref, device, fmt)  # before the dequantization and any engine build
    check_pack(packed, fmt)
    dequantize = {"fp8": pack_fp8, "nvfp4": pack_nvfp4}[fmt].dequantized_checkpoint
    dq = dequantize(packed, ckpt)  # once: every engine of the format runs on the same numbers
    text_desc = {"source": "given as tokens"}
    if text_tokens is None:
        import hashlib

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
    # keyed by role, as reference-fp32 may be both (on the packed weights, and on the bf16 ones)
    built = {}
    for name, fl in pairs:
        if ("engine", name) not in built:
            e = built["engine", name] = registry.build(name, dq, device)
            e.name = f"{name} on {fmt} weights ({dq.packed.meta['scheme']}, head {dq.packed.meta['head']})"
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
    res["format"] = fmt
    res["protocol"] = {  # NOTES.md, Facts: protocols: WikiText-2 ppl (context, stride), agreement, mean KL
        "text": {**text_desc, "tokens": len(text_tokens)}, "context": context, "stride": stride,
        "positions": res["engine"]["positions"], "kl_positions": res["engine"]["kl_positions"],
        "positions_asked": positions, "prompts": len(qp), "agree_tokens": agree_tokens, "free_running": free_running,
        "gates": {"ppl_ratio_max": quality.PPL_LIMIT, "agreement_min": quality.AGREEMENT_MIN,
                  "floor": "agreement >= the floor's and ppl ratio <= the floor's x ppl_ratio_max"},
        "one_pass": "the reference runs once; every engine and floor of every pair is compared with the same "
                    "logits/sequences"}
    res.update(weights=ckpt.describe(), packed_weights=dq.describe(), roles=out[0]["roles"], pairs=out)
    if fmt == "fp8":
        res["fp8_weights"] = res["packed_weights"]  # M3's key (results/m3_fp8_quality.json)
    res["seconds"] = round(time.perf_counter() - t0, 1)  # builds + the pass over all pairs (the stage's estimate)
    del r, built, dq
    gc.collect()
    if str(device).startswith("cuda"):  # hand the engines' memory back for whatever runs next
        import torch
        torch.cuda.empty_cache()
    return res
