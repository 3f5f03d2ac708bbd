"""What the nvfp4 block-scale search buys (issue 14, item 1): relative weight MSE and the mean KL of
the next-token distribution, max scaling vs the search, on CPU.

`search_gain(ckpt, positions=.., seed=..)` packs the checkpoint twice in memory (search off / on),
runs the fp32 reference on the original weights and on both dequantized models over the same
teacher-forced token sequence (seeded random token ids: the synthetic weights make text
meaningless anyway), and returns per-matrix relative MSE, mean KL(original || quantized) and
argmax agreement for both. CPU only; cheap on the 2-layer test checkpoint, ~1 s per position for
28 layers.

    python -m monolith.quant.nvfp4_eval --model checkpoints/synth-seed0 --positions 32 --out FILE
"""
from __future__ import annotations

import json
import time


def _logits(ckpt, tokens):
    import torch

    from monolith.reference import ReferenceEngine

    eng = ReferenceEngine(ckpt, dtype=torch.float32, compute_dtype=torch.float32, context_cap=max(64, len(tokens)))
    return eng._logits(torch.tensor(tokens, dtype=torch.long))


def kl_and_agreement(ref_logits, logits) -> tuple[float, float]:
    import torch

    lp = torch.log_softmax(ref_logits.double(), -1)
    lq = torch.log_softmax(logits.double(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    agree = (ref_logits.argmax(-1) == logits.argmax(-1)).double().mean()
    return float(kl.mean()), float(agree)


def search_gain(ckpt, *, positions: int = 16, seed: int = 0) -> dict:
    import torch

    from monolith.quant.pack_nvfp4 import PackedNVFP4, _pack_meta, dequantized_checkpoint, pack_tensors, summarize_stats

    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, ckpt.shape.vocab, (positions,), generator=g).tolist()
    ref = _logits(ckpt, tokens)
    out = {"weights": ckpt.describe(), "positions": positions, "token_seed": seed, "compute": "fp32 reference, CPU"}
    for search in (False, True):
        stats: dict = {}
        packed = pack_tensors(ckpt.tensors, ckpt.shape.num_layers, search=search, progress=False, stats=stats)
        pk = PackedNVFP4(path=None, meta=_pack_meta(ckpt, packed, search, 0.0, 0.0), tensors=packed)
        dq = dequantized_checkpoint(pk, ckpt)
        kl, agree = kl_and_agreement(ref, _logits(dq, tokens))
        out["search" if search else "max"] = {"kl_mean": kl, "argmax_agreement": agree,
                                              "matrices": summarize_stats(stats, ckpt.shape.num_layers)}
        del dq, pk, packed
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv=None) -> None:
    import argparse

    from monolith.checkpoint import load_checkpoint

    ap = argparse.ArgumentParser(description="nvfp4 block-scale search: MSE and KL gain (CPU)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--positions", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    r = search_gain(load_checkpoint(a.model, allow_reduced_depth=True), positions=a.positions, seed=a.seed)
    for k in ("max", "search"):
        print(k, f"KL {r[k]['kl_mean']:.4f} agreement {r[k]['argmax_agreement']:.3f}",
              {t: round(m["rel_mse_search" if k == "search" else "rel_mse_max"], 6) for t, m in r[k]["matrices"].items()})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
