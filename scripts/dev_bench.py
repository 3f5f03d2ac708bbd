"""Development timing of the megakernel: variants and launch shapes. Not a headline
number (headline numbers come only from `monolith bench`, which gates every engine first); run
it after tests/test_kernel_gpu.py passed on the same build (scripts/gpu.sh does).
usage: python scripts/dev_bench.py [--variant bf16-upstream,bf16-stream] [--blocks 132,128,...]
       [--prompt-len N] [--out FILE.json] [--tokens-ref FILE.json]
--tokens-ref: the decoded tokens of every (variant, blocks, prompt) row against a reference file
(written when absent): an A/B of diagnostic builds (MONOLITH_NVCC_DEFINES) that only move timing
must decode bitwise the same tokens as the default build; a mismatch fails the run.
(The L2-prefetch modes of bf16-upstream became a compile-time choice, UpstreamCfg::kL2PrefetchMode
in kernel/megakernel.cu; their A/B is results/m1_l2_prefetch_ab.json.)"""
import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import torch

from monolith.checkpoint import ensure_checkpoint, load_checkpoint
from monolith.megakernel import MegakernelEngine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--variant", default="bf16-upstream", help="comma list of kernel variants (kernel/variants.json)")
    ap.add_argument("--blocks", default="")
    ap.add_argument("--prompt-len", type=int, default=2, help="tokens prefilled before the timed decode")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--xray", action="store_true")
    ap.add_argument("--out", default="", help="write the rows (and the environment) as JSON")
    ap.add_argument("--tokens-ref", default="", help="check the decoded tokens against this file (written if absent)")
    a = ap.parse_args()
    ref = json.loads(Path(a.tokens_ref).read_text()) if a.tokens_ref and Path(a.tokens_ref).exists() else None
    seen, mismatches = {}, []
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    shapes = [int(b) for b in a.blocks.split(",") if b] or [None]
    rows = []
    prompt = ([9707, 1879] * (a.prompt_len // 2 + 1))[: a.prompt_len]
    for variant, blocks in [(v, b) for v in a.variant.split(",") for b in shapes]:
        mk = MegakernelEngine(ckpt, variant=variant, blocks=blocks, xray=a.xray)
        times = []
        for _ in range(a.runs + 1):
            mk.reset()
            first = mk.prefill(prompt)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            toks = mk.decode(first, a.tokens)
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / 1000)
        key = f"{variant}/{mk.blocks}/{len(prompt)}"
        seen[key] = [int(first), *(int(t) for t in toks.tolist())]
        match = None
        if ref is not None and key in ref:
            match = ref[key] == seen[key]
            if not match:
                mismatches.append(key)
        times = sorted(times[1:])
        med = times[len(times) // 2]
        p0 = len(prompt)
        extra = mk.ext.build_info.get("extra_defines", [])  # MONOLITH_NVCC_DEFINES: not the measured kernel
        bpt = sum(mk.bytes_per_token(p) for p in range(p0, p0 + a.tokens)) / a.tokens  # the variant's weight format
        print(f"[dev] {variant} pos={p0} blocks={mk.blocks} xray={a.xray} tok/s median {a.tokens / med:.0f} "
              f"(min {a.tokens / times[-1]:.0f}, max {a.tokens / times[0]:.0f}) us/token {med / a.tokens * 1e6:.1f} "
              f"eff BW {bpt * a.tokens / med / 1e12:.2f} TB/s regs {mk.info['kernel_attributes']['num_regs']}"
              + (f" DIAGNOSTIC BUILD (defines {extra})" if extra else "")
              + ("" if match is None else " tokens " + ("== ref" if match else "DIFFER FROM REF")))
        rows.append({"variant": variant, "prompt_len": p0, "blocks": mk.blocks, "xray": a.xray,
                     "build": mk.ext.build_info["tag"], "extra_defines": extra,
                     "tok_s": {"median": a.tokens / med, "min": a.tokens / times[-1], "max": a.tokens / times[0]},
                     "us_per_token": med / a.tokens * 1e6, "eff_bw_tbs": bpt * a.tokens / med / 1e12,
                     "tokens_match_ref": match})
        del mk
        torch.cuda.empty_cache()


    if a.tokens_ref and ref is None:
        Path(a.tokens_ref).write_text(json.dumps(seen))
        print(f"[dev] tokens reference written: {a.tokens_ref}")
    if a.out:
        from monolith.envinfo import collect

        doc = {"schema": "monolith-devbench/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
               "note": f"dev timing: CUDA events around a {a.tokens}-token decode after a {len(prompt)}-token prompt, "
                       f"median of {a.runs} after 1 warm-up; same build as the GPU tests that passed in this run; "
                       "not a headline",
               "env": collect(), "weights": ckpt.describe(), "rows": rows}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    if mismatches:
        raise SystemExit(f"[dev] FAIL: decoded tokens differ from {a.tokens_ref} for {', '.join(mismatches)}")


if __name__ == "__main__":
    main()
