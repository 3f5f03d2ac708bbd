"""Why a quantized model agrees with bf16 on few greedy tokens: margins against perturbations (CPU).

Greedy agreement is decided position by position by two numbers: the bf16 model's top-2 margin
m = l[t1] - l[t2] (t1, t2: its two largest logits) and the change the quantized weights make to
that difference, d = (l'[t1] - l'[t2]) - m. The quantized model keeps t1 over t2 iff m + d > 0.
This measures both distributions on the same teacher-forced sequences and states the agreement
they predict beside the agreement measured (argmax match):

- `predicted_top2`: mean over positions of [m + d > 0] (only the runner-up can overtake; the
  measured rate is lower by the positions where a third token overtakes);
- `predicted_indep_abs`: P(|d| < m) with m and d drawn independently from their two
  distributions (every pair), the rule "a perturbation larger than the margin flips the token";
- what 90 % would need: `q90_abs_d` (90 % of the perturbations are smaller than this), the share
  of today's margins above it, and `margin_scale_for_90`, the factor k by which every margin would
  have to grow for P(|d| < k m) to reach 0.90 (the same perturbations, a k-times more decided
  model).

The sequences are the protocol's (eval/quality.py): each quality prompt, then `tokens` greedy
tokens of the fp32 reference on the original bf16 weights; the scored positions are the ones
whose argmax is the next greedy token. All prompts run as one left-padded batch: a prefill plus
`tokens - 1` cached decode steps give the greedy sequence and the reference's logits, then one
teacher-forced prefill per format (on its dequantized weights: quant/pack_fp8.py, quant/pack_nvfp4.py, packed
in memory with the packers' defaults). fp32 compute throughout, the weights' values as stored.

    python -m monolith.quant.margins --model checkpoints/synth-seed0 --prompts 16

writes results/quality_margins.json and .md (numbers in logits, i.e. nats of log-probability).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from monolith.errors import MonolithError

QUANTILES = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)
TARGET = 0.90  # the quality gate's agreement (monolith.eval.quality.AGREEMENT_MIN)
FORMATS = ("fp8", "nvfp4")


# ---- a batched fp32 forward over a ReferenceEngine's weights -------------------------------------
def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class BatchModel:
    """The reference decoder's math (monolith/reference.py) on [batch, time] token blocks, fp32,
    left padding: row b's first pad[b] slots are padding (never attended to, positions count from
    the first real token). `kv` holds each layer's K/V of the slots already fed."""

    def __init__(self, ckpt):
        from monolith.reference import ReferenceEngine

        # dtype fp32: the stored values exactly (bf16 widens exactly; dequantized packs are fp32)
        self.e = ReferenceEngine(ckpt, dtype=torch.float32, compute_dtype=torch.float32, context_cap=8)
        self.e.kv = None  # the engine's own cache is not used here
        s = self.e.shape
        from monolith.reference import rope_tables
        self.cos, self.sin = rope_tables(s.rope_theta, s.head_dim, 4096)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, pad: torch.Tensor, kv: list | None, keep: int) -> tuple[torch.Tensor, list]:
        """tokens int64 [B, T] fed at slots start..start+T-1 (start = slots already in kv).
        Returns fp32 logits of the last `keep` slots [B, keep, vocab] and the extended cache."""
        e, s = self.e, self.e.shape
        eps, nq, nkv, hd = s.rms_eps, s.num_q_heads, s.num_kv_heads, s.head_dim
        B, T = tokens.shape
        start = 0 if kv is None else kv[0][0].shape[2]
        slots = torch.arange(start, start + T)
        pos = (slots[None, :] - pad[:, None]).clamp(min=0)  # [B, T]
        if int(pos.max()) >= self.cos.shape[0]:
            raise MonolithError(f"sequence of {int(pos.max()) + 1} positions is longer than 4096")
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]  # [B, 1, T, hd]
        keys = torch.arange(start + T)
        ok = (keys[None, None, :] <= slots[None, :, None]) & (keys[None, None, :] >= pad[:, None, None])
        ok |= keys[None, None, :] == slots[None, :, None]  # a pad slot attends to itself (its output is unused)
        mask = torch.zeros(ok.shape).masked_fill(~ok, float("-inf"))[:, None, None]  # [B, 1, 1, T, S]
        x = e.embed[tokens]
        new = []
        for i, L in enumerate(e.layers):
            h = _rms(x, L["in_norm"], eps)
            q = _rms(F.linear(h, L["wq"]).view(B, T, nq, hd), L["q_norm"], eps).transpose(1, 2)
            k = _rms(F.linear(h, L["wk"]).view(B, T, nkv, hd), L["k_norm"], eps).transpose(1, 2)
            v = F.linear(h, L["wv"]).view(B, T, nkv, hd).transpose(1, 2)
            q = q * cos + _rot(q) * sin
            k = k * cos + _rot(k) * sin
            if kv is not None:
                k, v = torch.cat((kv[i][0], k), 2), torch.cat((kv[i][1], v), 2)
            new.append((k, v))
            # GQA: q head h reads kv head h // (nq / nkv), as the reference does
            qg = q.reshape(B, nkv, nq // nkv, T, hd)
            sc = (qg @ k[:, :, None].transpose(-1, -2)) * hd ** -0.5 + mask
            a = torch.softmax(sc, -1) @ v[:, :, None]  # [B, nkv, rep, T, hd]
            x = x + F.linear(a.reshape(B, nq, T, hd).transpose(1, 2).reshape(B, T, nq * hd), L["wo"])
            h = _rms(x, L["post_norm"], eps)
            x = x + F.linear(F.silu(F.linear(h, L["wg"])) * F.linear(h, L["wu"]), L["wd"])
        xf = _rms(x[:, T - keep:], e.final_norm, eps)
        return F.linear(xf, e.embed), new


def left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(p) for p in prompts)
    toks = torch.zeros(len(prompts), n, dtype=torch.long)
    for b, p in enumerate(prompts):
        toks[b, n - len(p):] = torch.tensor(p, dtype=torch.long)
    return toks, torch.tensor([n - len(p) for p in prompts], dtype=torch.long)


def greedy(model: BatchModel, prompts: list[list[int]], n: int, progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, n] greedy tokens after each prompt (one prefill, n - 1 cached steps) and the logits
    [B, n, vocab] each was chosen from (the reference's logits at the scored positions)."""
    toks, pad = left_pad(prompts)
    logits, kv = model.forward(toks, pad, None, 1)
    seen = [logits[:, -1]]
    out = [seen[-1].argmax(-1)]
    for j in range(1, n):
        if progress:
            progress(j, n)
        logits, kv = model.forward(out[-1][:, None], pad, kv, 1)
        seen.append(logits[:, -1])
        out.append(seen[-1].argmax(-1))
    return torch.stack(out, 1), torch.stack(seen, 1)


def scored_logits(model: BatchModel, prompts: list[list[int]], gen: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits [B, n, vocab] at the n positions that predict gen[:, 0..n-1]."""
    toks, pad = left_pad(prompts)
    n = gen.shape[1]
    return model.forward(torch.cat((toks, gen[:, :n - 1]), 1), pad, None, n)[0]


# ---- the arithmetic (tested on its own) ----------------------------------------------------------
def margins_and_deltas(ref: torch.Tensor, q: torch.Tensor) -> dict:
    """ref, q: logits [N, vocab] at the same positions. m: ref's top-2 margin; d: the change of the
    same two tokens' difference under q; agree: q's argmax == ref's; sigma: std over the vocabulary
    of q - ref (the per-logit perturbation's scale)."""
    ref, q = ref.double().reshape(-1, ref.shape[-1]), q.double().reshape(-1, q.shape[-1])
    top = ref.topk(2, -1).indices
    m = ref.gather(1, top[:, :1]).squeeze(1) - ref.gather(1, top[:, 1:]).squeeze(1)
    dq = q.gather(1, top[:, :1]).squeeze(1) - q.gather(1, top[:, 1:]).squeeze(1)
    return {"m": m, "d": dq - m, "agree": q.argmax(-1) == top[:, 0], "sigma": (q - ref).std(-1)}


def quantiles(x: torch.Tensor) -> dict:
    v = torch.quantile(x.double(), torch.tensor(QUANTILES, dtype=torch.double))
    return {f"p{round(p * 100):02d}": float(a) for p, a in zip(QUANTILES, v, strict=True)}


def p_indep_abs(m: torch.Tensor, d: torch.Tensor, scale: float = 1.0) -> float:
    """P(|d| < scale * m), m and d drawn independently (every pair of the two samples)."""
    ad = d.abs().double().sort().values
    below = torch.searchsorted(ad, scale * m.double(), right=False)  # how many |d| < scale * m
    return float(below.double().mean() / ad.numel())


def scale_for(m: torch.Tensor, d: torch.Tensor, target: float = TARGET) -> float:
    """The smallest k (to 0.1 %) with p_indep_abs(m, d, k) >= target (monotone in k: bisection)."""
    lo, hi = 0.0, 1.0
    while p_indep_abs(m, d, hi) < target:
        lo, hi = hi, hi * 2
        if hi > 1e9:
            raise MonolithError("no margin scale reaches the target (margins all zero?)")
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if p_indep_abs(m, d, mid) >= target else (mid, hi)
    return hi


def summarize(m: torch.Tensor, d: torch.Tensor, agree: torch.Tensor, sigma: torch.Tensor) -> dict:
    q90 = float(torch.quantile(d.abs().double(), TARGET))
    k = scale_for(m, d)
    return {
        "positions": int(m.numel()),
        "agreement_measured": float(agree.double().mean()),
        "predicted_top2": float(((m + d) > 0).double().mean()),
        "predicted_indep_abs": p_indep_abs(m, d),
        "d_quantiles": quantiles(d), "abs_d_quantiles": quantiles(d.abs()),
        "sigma_logit_median": float(sigma.median()),
        "q90_abs_d": q90,
        "margins_above_q90_abs_d": float((m > q90).double().mean()),
        "margin_scale_for_90": k,
        "median_margin_for_90": k * float(m.median()),
    }


# ---- the run ------------------------------------------------------------------------------------
def measure(ckpt, prompts: list[list[int]], tokens: int = 64, formats=FORMATS, log=print) -> dict:
    from monolith.quant import pack_fp8, pack_nvfp4

    t0 = time.perf_counter()
    if tokens < 2 or not prompts:
        raise MonolithError("need at least one prompt and 2 tokens")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise MonolithError(f"unknown format {bad[0]!r} (have {', '.join(FORMATS)})")
    ref_model = BatchModel(ckpt)
    log(f"greedy: {len(prompts)} prompts x {tokens} tokens (fp32 on the bf16 weights, one batch)")
    step = max(tokens // 8, 1)
    gen, ref = greedy(ref_model, prompts, tokens,
                      progress=lambda j, n: j % step == 0 and log(f"  greedy {j}/{n} ({time.perf_counter() - t0:.0f} s)"))
    ref = ref.reshape(-1, ckpt.shape.vocab)  # the reference's logits at the scored positions
    del ref_model
    top = ref.double().topk(2, -1).values
    m = top[:, 0] - top[:, 1]
    out = {"positions": int(m.numel()), "margin_quantiles": quantiles(m), "formats": {}}
    for fmt in formats:
        log(f"packing {fmt} in memory ({time.perf_counter() - t0:.0f} s)")
        mod = {"fp8": pack_fp8, "nvfp4": pack_nvfp4}[fmt]
        pk = mod.pack_in_memory(ckpt)
        dq = mod.dequantized_checkpoint(pk, ckpt)
        log(f"teacher-forced: {fmt} ({time.perf_counter() - t0:.0f} s)")
        q = scored_logits(BatchModel(dq), prompts, gen).reshape(-1, ckpt.shape.vocab)
        r = margins_and_deltas(ref, q)
        out["formats"][fmt] = {"scheme": pk.meta.get("scheme"), "head": pk.meta.get("head"),
                               **summarize(r["m"], r["d"], r["agree"], r["sigma"])}
        del pk, dq, q
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


FILE = "quality_margins.json"

# What published measurements lead a reader to expect on a trained model (sources by address; the
# real checkpoint measures this quantizer: `monolith m3 --model DIR`, `monolith m5 --model DIR`).
PUBLISHED = [
    {"what": "8-bit weight-only (llama.cpp q8_0) on LLaMA-3-8B: WikiText-2 perplexity 6.7687 vs 6.7684 for f16, "
             "mean KL 0.0014; 4-bit q4_K_M: mean KL 0.029",
     "source": "https://github.com/ggml-org/llama.cpp/pull/6936"},
    {"what": "a 4.25-bit llama.cpp format (IQ4_XS) on a trained model: the same top token as the full-precision "
             "model at 89.9 % of WikiText positions, perplexity ratio 1.037",
     "source": "https://github.com/ggml-org/llama.cpp/pull/12557"},
    {"what": "Qwen3-0.6B, WikiText perplexity 26.16 in float16 vs 30.90 with mixed 4-/8-bit palettized weights",
     "source": "https://github.com/apple/coreai-models/pull/17"},
    {"what": "Qwen3 0.6B-72B under RTN/GPTQ/AWQ at 1-8 bits: 8-bit weight-only near-lossless, 4-bit degrades, "
             "the smallest models most (An Empirical Study of Qwen3 Quantization, arXiv:2505.02214)",
     "source": "https://arxiv.org/abs/2505.02214"},
    {"what": "plain NVFP4 (no GPTQ/AWQ, no rotations) on Qwen3-30B-A3B: 98.5 % accuracy recovery on the issue's first task",
     "source": "https://github.com/vllm-project/llm-compressor/issues/3001"},
]
TRAINED_MARGINS = ("no published distribution of a trained model's top-2 logit margins was found; the same-top-token "
                   "rates above are the nearest published evidence")


def paragraph(results_dir=None) -> str | None:
    """The explanation final.md and the page's methodology print verbatim (None without the file)."""
    from monolith import REPO_ROOT, jsonio

    p = Path(results_dir or REPO_ROOT / "results") / FILE
    if not p.is_file():
        return None
    text = jsonio.load_object(p, f"margins file {p}").get("explanation")
    if not isinstance(text, str) or not text:
        raise MonolithError(f"{p}: no explanation string (rewrite it with `python -m monolith.quant.margins`)")
    return text


QUALITY_FILES = {"fp8": "results/m3_fp8_quality.json", "nvfp4": "results/m5_nvfp4_quality.json"}


def _gpu_agreement(fmt: str) -> float | None:
    """The full protocol's agreement (100 prompts, the GPU run) beside this CPU subset's."""
    from monolith import REPO_ROOT, jsonio

    p = REPO_ROOT / QUALITY_FILES[fmt]
    if not p.is_file():
        return None
    return ((jsonio.load_object(p).get("engine") or {}).get("agreement"))


def render_md(doc: dict) -> str:
    r = doc["result"]
    mq = r["margin_quantiles"]
    lines = ["# Top-2 margins against quantization perturbations", "",
             f"Weights: {doc['weights']['path']} (sha256 {doc['weights']['sha256'][:16]}…), "
             f"{doc['protocol']['prompts']} quality prompts × {doc['protocol']['tokens']} greedy tokens = "
             f"{r['positions']} positions; fp32 compute on CPU. Logit units (nats).", "",
             "bf16 model's top-2 margin m: " + ", ".join(f"{k} {v:.3g}" for k, v in mq.items()), "",
             "| format | agreement measured | GPU run (100 prompts) | predicted P(m+d>0) | predicted P(abs d < m) "
             "| abs d p50 | abs d p90 | margins > abs d p90 | margin scale for 90 % |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fmt, f in r["formats"].items():
        g = doc["gpu_agreement"].get(fmt)
        lines.append(f"| {fmt} | {f['agreement_measured']:.1%} | {'–' if g is None else f'{g:.1%}'} | "
                     f"{f['predicted_top2']:.1%} | {f['predicted_indep_abs']:.1%} | {f['abs_d_quantiles']['p50']:.3g} | "
                     f"{f['q90_abs_d']:.3g} | {f['margins_above_q90_abs_d']:.1%} | {f['margin_scale_for_90']:.1f}× |")
    lines += ["", doc["explanation"], "", "What published measurements lead a reader to expect on a trained model "
              "(this quantizer's real quality needs the real checkpoint: `monolith m3 --model DIR`):", ""]
    lines += [f"- {x['what']} ({x['source']})" for x in doc["published"]]
    lines += ["", f"Trained models' margins: {doc['trained_margins']}."]
    return "\n".join(lines) + "\n"


def explanation(r: dict) -> str:
    """One paragraph, numbers from the result: what final.md and the page's methodology print verbatim."""
    mq, fm = r["margin_quantiles"], r["formats"]
    out = (f"Why the quality gate fails on the synthetic weights: the bf16 model's top-2 logit margin has median "
           f"{mq['p50']:.2g} (10th percentile {mq['p10']:.2g}, 90th {mq['p90']:.2g}; {r['positions']} positions, "
           "results/quality_margins.json). ")
    out += "; ".join(f"{fmt.upper()} changes that difference by a median {f['abs_d_quantiles']['p50']:.2g} (90th "
                     f"percentile {f['q90_abs_d']:.2g}) and keeps the token at {f['agreement_measured']:.0%} of them"
                     for fmt, f in fm.items()) + ". "
    out += ("With these perturbations 90 % agreement would need margins "
            + " and ".join(f"{f['margin_scale_for_90']:.0f}× ({fmt.upper()})" for fmt, f in fm.items())
            + " larger. A trained model's margins decide its agreement; monolith m3 --model DIR measures it on the "
              "real checkpoint.")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m monolith.quant.margins",
        description="bf16 top-2 logit margins vs the FP8/NVFP4 logit perturbation, and the greedy agreement "
                    "they predict (CPU, fp32; writes JSON + .md)")
    ap.add_argument("--model", default="checkpoints/synth-seed0", help="checkpoint dir (default: %(default)s)")
    ap.add_argument("--prompts", type=int, default=16, help="first N quality prompts (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt (default: %(default)s)")
    ap.add_argument("--formats", default="fp8,nvfp4", help="comma-separated (default: %(default)s)")
    ap.add_argument("--out", default="results/quality_margins.json", help="JSON path; .md beside it (default: %(default)s)")
    a = ap.parse_args(argv)
    try:
        from monolith import envinfo, jsonio
        from monolith.bench.suite import prompt_tokens
        from monolith.checkpoint import load_checkpoint
        from monolith.outpaths import writable_file
        from monolith.tokenizer import load_tokenizer

        if a.prompts < 1:
            raise MonolithError(f"--prompts {a.prompts}: need at least 1")
        out = writable_file(a.out, "--out")
        ckpt = load_checkpoint(a.model, allow_reduced_depth=True)
        prompts = prompt_tokens("quality", load_tokenizer(a.model))[:a.prompts]
        torch.manual_seed(0)

        def log(msg):
            print(msg, file=sys.stderr, flush=True)

        r = measure(ckpt, prompts, a.tokens, [f.strip() for f in a.formats.split(",") if f.strip()], log=log)
        doc = {"kind": "quality_margins", "weights": ckpt.describe(), "environment": envinfo.collect("cpu"),
               "threads": torch.get_num_threads(),
               "protocol": {"prompts": len(prompts), "prompt_set": "quality", "tokens": a.tokens,
                            "compute": "fp32 on CPU, batched (left-padded) reference math",
                            "sequence": "greedy tokens of fp32 on the original bf16 weights; every model "
                                        "teacher-forced on it",
                            "packing": "in memory, the packers' defaults (fp8 head; nvfp4 with block-scale search)",
                            "target_agreement": TARGET},
               "definitions": __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
               "published": PUBLISHED, "trained_margins": TRAINED_MARGINS,
               "result": r, "gpu_agreement": {f: _gpu_agreement(f) for f in r["formats"]}}
        doc["explanation"] = explanation(r)
        jsonio.write(out, doc, "margins")
        Path(out).with_suffix(".md").write_text(render_md(doc))
        print(render_md(doc))
        return 0
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
