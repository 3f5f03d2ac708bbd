"""Engine names the CLI accepts -> how to build each one. Imports are lazy so that a missing
optional piece (the megakernel extension, a GPU) only affects its own row."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from monolith.errors import MonolithError


@dataclass(frozen=True)
class Spec:
    name: str
    label: str
    kind: str = "local"          # local: implements Engine here; external: reads/produces a row
    needs_cuda: bool = False
    experimental: bool = False


SPECS = {s.name: s for s in [
    Spec("reference", "PyTorch reference, eager (bf16)"),
    Spec("reference-graph", "PyTorch reference in a CUDA graph (gpt-fast style, bf16)", needs_cuda=True),
    Spec("hf-eager", "HF transformers, eager (DynamicCache)"),
    Spec("hf-static", "HF transformers, static cache"),
    Spec("hf-compile", "HF transformers, static cache + torch.compile reduce-overhead", needs_cuda=True),
    Spec("hf-static-det", "HF transformers, static cache, torch deterministic algorithms on"),
    Spec("hf-compile-det", "HF transformers, static cache + torch.compile reduce-overhead, deterministic algorithms on",
         needs_cuda=True),
    Spec("hf-parallel", "HF transformers, eager; logits from one parallel forward (quality work)"),
    Spec("hf-parallel-fp32", "HF transformers, fp32 compute on the bf16 weights, parallel forward (quality sanity)"),
    Spec("reference-fp32", "PyTorch reference, fp32 compute on the bf16 weights (the gate's oracle)"),
    Spec("megakernel-bf16-upstream", "monolith megakernel, bf16-upstream design", needs_cuda=True),
    Spec("megakernel-bf16-upstream-xray", "monolith megakernel, bf16-upstream, X-ray build (recording every token)",
         needs_cuda=True),
    Spec("megakernel-fp8-upstream", "monolith megakernel, fp8-upstream (E4M3 weights, fp32 row scales, bf16-upstream's "
         "schedule; gated against fp32 on the dequantized weights)", needs_cuda=True),
    Spec("megakernel-fp8-upstream-xray", "monolith megakernel, fp8-upstream, X-ray build (recording every token)",
         needs_cuda=True),
    Spec("mutant-rope10k", "negative control: reference with RoPE theta 10,000 (must FAIL the gate)"),
    Spec("llamacpp", "llama.cpp llama-bench tg (BF16, Q8_0)", kind="external"),
    Spec("vllm", "vLLM bf16, CUDA graphs, batch 1", kind="external"),
]}


def spec(name: str) -> Spec:
    if name in SPECS:
        return SPECS[name]
    if name.startswith("megakernel-"):  # any variant the lead adds: megakernel-fp8, ...
        v = name.removeprefix("megakernel-")
        return Spec(name, f"monolith megakernel, {v}", needs_cuda=True, experimental=v.startswith("nvfp4"))
    raise MonolithError(f"unknown engine {name!r}; known: {', '.join(SPECS)}, megakernel-<variant>")


def weights_of(name: str) -> str:
    """The weight format an engine computes with: a megakernel variant's `weights` in
    kernel/variants.json ("fp8" for fp8-upstream, ...), "bf16" for everything else."""
    if not name.startswith("megakernel-"):
        return "bf16"
    from monolith import kernel_spec

    v = name.removeprefix("megakernel-").removesuffix("-xray")
    try:
        return kernel_spec.variant_spec(v).get("weights", "bf16")
    except MonolithError:
        return "bf16"  # an unknown variant fails in build() with its own message


def checkpoint_for(weights: str, ckpt):
    """The checkpoint an engine of weight format `weights` runs on, and its gate's oracle with it:
    `ckpt` itself for bf16; for fp8 (nvfp4), ckpt packed in memory (quant/pack_fp8.py,
    quant/pack_nvfp4.py) and dequantized to
    fp32, so the fp8 gate checks the kernel against fp32 on the numbers it multiplies (the
    quantizer's error is the quality runs' business, not the gate's). A fp8 megakernel built from
    that checkpoint runs on the very pack the oracle dequantized."""
    if weights == "bf16":
        return ckpt
    if weights == "nvfp4":  # all-NVFP4 layers + FP8 LM head (quant/pack_nvfp4.py), likewise
        from monolith.quant import pack_nvfp4

        return pack_nvfp4.dequantized_checkpoint(pack_nvfp4.pack_in_memory(ckpt), ckpt)
    if weights != "fp8":
        raise MonolithError(f"no checkpoint for weight format {weights!r}")
    from monolith.quant.pack_fp8 import dequantized_checkpoint, pack_in_memory

    return dequantized_checkpoint(pack_in_memory(ckpt), ckpt)


def build(name: str, ckpt, device: str | torch.device):
    """Construct a local engine. `ckpt` is a monolith Checkpoint (its .path is the HF dir)."""
    s = spec(name)
    dev = torch.device(device)
    if s.kind != "local":
        raise MonolithError(f"{name} is an external baseline, not an in-process engine")
    if s.needs_cuda and dev.type != "cuda":
        raise MonolithError(f"{name} needs a CUDA device")
    if name == "reference":
        from monolith.reference import ReferenceEngine
        return ReferenceEngine(ckpt, device=dev)
    if name == "reference-graph":
        from monolith.bench.baselines.graphs import GraphEngine
        return GraphEngine(ckpt, device=dev)
    if name == "reference-fp32":
        return oracle(ckpt, dev)
    if name == "mutant-rope10k":
        return _mutant_rope(ckpt, dev, 10_000.0)
    if name.startswith("hf-"):
        from monolith.bench.baselines.hf import HFEngine
        mode, fp32, det = name.removeprefix("hf-"), name.endswith("-fp32"), name.endswith("-det")
        mode = mode.removesuffix("-fp32").removesuffix("-det")
        return HFEngine(ckpt.path, mode=mode, device=dev, compute_dtype=torch.float32 if fp32 else torch.bfloat16,
                        deterministic=det)
    if name.startswith("megakernel-"):
        try:
            from monolith.megakernel import MegakernelEngine
        except ImportError as e:
            raise MonolithError(f"monolith.megakernel is not importable: {e}") from e
        v = name.removeprefix("megakernel-")
        xray = v.endswith("-xray")  # the instrumented build of a variant, for the overhead check (M2)
        return MegakernelEngine(ckpt, variant=v.removesuffix("-xray"), xray=xray)
    raise MonolithError(f"no builder for {name}")


def oracle(ckpt, device):
    """The gate's oracle: bf16 weights, fp32 compute. On CUDA the same step in a CUDA graph
    (identical ops, ~5x faster); falls back to eager if capture fails. A checkpoint that
    declares `weight_dtype` (the fp8 pack dequantized to fp32, quant/pack_fp8.py) keeps its
    weights in that dtype: rounding them to bf16 would make the oracle a third model."""
    from monolith.reference import ReferenceEngine

    dev = torch.device(device)
    wdt = getattr(ckpt, "weight_dtype", torch.bfloat16)
    if dev.type == "cuda":
        try:
            from monolith.bench.baselines.graphs import GraphEngine
            e = GraphEngine(ckpt, device=dev, dtype=wdt, compute_dtype=torch.float32)
            e.name = "reference-fp32 (CUDA graph)"
            return e
        except Exception as err:  # noqa: BLE001
            print(f"oracle: CUDA graph capture failed ({err}); using the eager fp32 reference")
    e = ReferenceEngine(ckpt, device=dev, dtype=wdt, compute_dtype=torch.float32)
    e.name = "reference-fp32"
    return e


def _mutant_rope(ckpt, dev, theta: float):
    """The bug a public megakernel shipped (NOTES.md, Facts): RoPE theta 10,000 instead of 1,000,000.
    The gate must fail it; m1 runs it as a negative control so the results show that it does."""
    from monolith.reference import ReferenceEngine, rope_tables

    def mutate(ref):
        cos, sin = rope_tables(theta, ref.shape.head_dim, ref.context_cap)
        ref.cos, ref.sin = cos.to(ref.cos.device, ref.cos.dtype), sin.to(ref.sin.device, ref.sin.dtype)
        ref.info["mutation"] = f"rope_theta={theta:g}"

    if dev.type == "cuda":
        from monolith.bench.baselines.graphs import GraphEngine
        e = GraphEngine(ckpt, device=dev, mutate=mutate)
    else:
        e = ReferenceEngine(ckpt, device=dev)
        mutate(e)
        e.info = {**e.info, "mutation": f"rope_theta={theta:g}"}
    e.name = "mutant-rope10k"
    return e
