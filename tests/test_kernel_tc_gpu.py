"""GPU tests of the tensor-core GEMV variant (fp8-stream-tc: kernel/stream_mma.cuh, Policy::kTcGemv), the
k-pass kernel of issue 48 at k = 1. They must pass before any of its timings is reported
(notes/ktoken.md, "The k-pass kernel at k = 1"); tests/test_kernel_gpu.py's phase diff, determinism,
launch-shape, fault and stress tests run on it too (MONOLITH_TEST_VARIANTS=fp8-stream-tc).

- every row of the three tensor-core phases (qkv, MLP-1's activations, down + residual) of layers 0,
  13 and 27, against a float64 model on the kernel's own input, within the f16 rounding of that input
  (a wrong fragment, chunk or swizzle key mixes wrong weights in: errors of the order of the row's
  sum |w| |x|, hundreds of times the bound), on the default grid and on 66 blocks (row ranges that
  start off a multiple of 4: other swizzle keys, other tiles);
- logits bitwise equal across repeats and launch shapes (a row's arithmetic does not depend on the
  tile or the tile row it lands in: the precondition of batch invariance);
- the gate (eval/correctness.py) on a few prompts: greedy tokens against the fp32 oracle on the
  dequantized weights, divergences only at near-ties, repeated decodes bitwise equal.

MONOLITH_TEST_VARIANTS selects the variants (those of them whose variants.json "gemv" is "mma";
unset: fp8-stream-tc)."""

import math
import os

import pytest
import torch

from monolith import config as C
from monolith import kernel_spec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TC_VARIANTS = [
    v
    for v in os.environ.get("MONOLITH_TEST_VARIANTS", "fp8-stream-tc").split(",")
    if v and kernel_spec.variant_spec(v).get("gemv") == "mma"
]
# The inputs of a tensor-core round are f16 (store_xe: each 32-element word lifted so that its largest
# |x| is in [1, 2)): an element is off by at most 2^-11 of itself, or, below f16's normal range, by
# 2^-25 of its word's largest |x|. A row's error against the exact sum is then within
# 2^-11 sum |w x| + 2^-25 max|x| sum |w|, plus the fp32 sums (mma, 8 words per range, 4 ranges: far
# below 2^-11 of sum |w x|): the bound below doubles both terms.
REL_X, ABS_X = 2.0**-10, 2.0**-24
LAYERS = [0, 13, 27]


@pytest.fixture(scope="module")
def ckpt():
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint

    return load_checkpoint(ensure_checkpoint(None))


@pytest.fixture(scope="module", params=TC_VARIANTS)
def tc(ckpt, request):
    """(engine, its dequantized checkpoint): the fp8 pack of the checkpoint, as the gate's oracle sees it."""
    from monolith.bench.baselines.registry import checkpoint_for, weights_of
    from monolith.megakernel import MegakernelEngine

    ck = checkpoint_for(weights_of(f"megakernel-{request.param}"), ckpt)
    mk = MegakernelEngine(ck, variant=request.param)
    mk.test_ckpt = ck
    yield mk, ck
    del mk
    torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def layers_f64(tc):
    """Layer L's weights as the kernel multiplies them (rowmajor-v1, unswizzled), in float64: E4M3 code
    values and fp32 row scales apart, the norm vectors; the embedding's codes and scales."""
    from monolith.quant import fp8_layout as F

    _, ck = tc
    t = ck.packed.tensors
    out = {}
    for L in LAYERS:
        codes = t[F.T_LAYER_CODES][L].view(torch.float8_e4m3fn).float().double()
        sc = t[F.T_LAYER_SCALES][L].double()
        nrm = t[F.T_NORMS][L].double()
        out[L] = {
            "qkv": (codes[F.OFF_QKV : F.OFF_O].view(-1, C.HIDDEN), sc[F.SC_QKV : F.SC_O]),
            "gateup": (codes[F.OFF_GATEUP : F.OFF_DOWN].view(-1, C.HIDDEN), sc[F.SC_GATEUP : F.SC_DOWN]),
            "down": (codes[F.OFF_DOWN : F.LAYER_BYTES].view(-1, C.INTERMEDIATE), sc[F.SC_DOWN : F.LAYER_SCALES]),
            "in_ln": nrm[F.NORM_IN_LN : F.NORM_IN_LN + C.HIDDEN],
            "post_ln": nrm[F.NORM_POST_LN : F.NORM_POST_LN + C.HIDDEN],
        }
    out["embed"] = (t[F.T_EMBED_CODES], t[F.T_EMBED_SCALES])
    return out


def _rows_model(w: torch.Tensor, x: torch.Tensor):
    """(w @ x, the bound of each row's error from x's f16 rounding) in float64, x's words of 32 lifted
    apart (each word's largest |x| bounds its own subnormal error)."""
    xmax = x.abs().view(-1, 32).amax(dim=-1)
    wsum = w.abs().view(w.shape[0], -1, 32).sum(dim=-1)
    return w @ x, REL_X * (w.abs() @ x.abs()) + ABS_X * (wsum @ xmax)


def _inv_rms(v: torch.Tensor) -> float:
    return 1.0 / math.sqrt(float(v.double().square().mean()) + C.RMS_EPS)


def _residual_in(mk, L: int, tok: int, lw) -> torch.Tensor:
    """The residual layer L's qkv reads: the token's dequantized embedding row (layer 0), else the
    kernel's own output of layer L - 1 (fp32)."""
    if L == 0:
        codes, scales = lw["embed"]
        return (codes[tok].view(torch.float8_e4m3fn).float() * scales[tok].float()).double()
    return mk.step_until(tok, L - 1, 4)["hidden"].cpu().double()


def _check(name: str, got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor):
    got = got.cpu().double()
    assert torch.isfinite(got).all(), f"{name}: non-finite values (an unwritten buffer stays NaN)"
    err = (got - want).abs()
    tol = bound + 1e-6 * want.abs() + 1e-30
    worst = int((err / tol).argmax())
    assert bool((err <= tol).all()), (
        f"{name}: {int((err > tol).sum())}/{err.numel()} rows outside the f16 bound; "
        f"worst row {worst}: {float(got[worst])} vs {float(want[worst])} (bound {float(tol[worst])})"
    )
    return float((err / tol).max())


def _prefill(mk, n: int = 21, seed: int = 0) -> int:
    g = torch.Generator().manual_seed(seed)
    mk.reset()
    return mk.prefill(torch.randint(0, C.VOCAB, (n,), generator=g).tolist())


@pytest.mark.parametrize("blocks", [None, 66])
def test_every_tensor_core_row_is_its_dot_product(tc, layers_f64, blocks):
    """qkv rows, MLP-1 activations and down rows + residual of layers 0, 13, 27, each against float64
    on the kernel's own input (the residual it read, the residual after O it normed, the activations
    it gathered), within the bound of that input's f16 rounding."""
    from monolith.megakernel import MegakernelEngine

    mk0, ck = tc
    mk = mk0 if blocks is None else MegakernelEngine(ck, variant=mk0.variant, blocks=blocks)
    try:
        tok = _prefill(mk)
        worst = {}
        for L in LAYERS:
            lw = layers_f64[L]
            # qkv: rows (scale, 1/rms after the sum) of x = v * w_in; scr holds them in q | k | v order
            v = _residual_in(mk, L, tok, lw)
            w, sc = lw["qkv"]
            y, bound = _rows_model(w, v * lw["in_ln"])
            inv = _inv_rms(v)
            got = mk.step_until(tok, L, 0)["qkv"]
            worst[f"L{L} qkv"] = _check(f"layer {L} qkv", got, y * sc * inv, bound * sc * inv)
            # MLP-1: gate/up rows of x = h * w_post (h: the residual after attention + O), SiLU(gate) * up
            h = mk.step_until(tok, L, 2)["hidden"].cpu().double()
            w, sc = lw["gateup"]
            y, bound = _rows_model(w, h * lw["post_ln"])
            inv = _inv_rms(h)
            gu, egu = (y * sc * inv).view(-1, 2), (bound * sc * inv).view(-1, 2)
            g, u = gu[:, 0], gu[:, 1]
            sg = g / (1 + torch.exp(-g))
            act = sg * u
            e_act = 1.1 * u.abs() * egu[:, 0] + sg.abs() * egu[:, 1] + 1.1 * egu[:, 0] * egu[:, 1]
            got_act = mk.step_until(tok, L, 3)["mlp_act"]
            # (+ 1e-5 relative: the kernel's __expf in SiLU)
            worst[f"L{L} act"] = _check(f"layer {L} MLP activations", got_act, act, e_act + 1e-5 * act.abs())
            # down: h + (rows . act) * scale, act the fp32 activations the kernel gathered
            a = got_act.cpu().double()
            w, sc = lw["down"]
            y, bound = _rows_model(w, a)
            got = mk.step_until(tok, L, 4)["hidden"]
            worst[f"L{L} down"] = _check(f"layer {L} down + residual", got, h + y * sc, bound * sc)
        print(f"blocks {mk.blocks}: worst error / bound per phase: {worst}")
    finally:
        if mk is not mk0:
            del mk
            torch.cuda.empty_cache()


def test_logits_bitwise_across_repeats_and_launch_shapes(tc):
    """Teacher-forced logits of one prompt, three times on the default grid and once each on 66 and 16
    blocks: every bit equal. A row's partial sums are the same 4 K ranges of the same words whatever
    the grid; what moves is the tile, and the row within it, that holds the row."""
    from monolith.megakernel import MegakernelEngine

    mk, ck = tc
    g = torch.Generator().manual_seed(48)
    prompt = torch.tensor(torch.randint(0, C.VOCAB, (40,), generator=g).tolist())
    runs = []
    for _ in range(3):
        mk.reset()
        runs.append(mk._forced(prompt, want_logits=True)[1].cpu())
    for blocks in (66, 16):
        other = MegakernelEngine(ck, variant=mk.variant, blocks=blocks)
        other.reset()
        runs.append(other._forced(prompt, want_logits=True)[1].cpu())
        del other
        torch.cuda.empty_cache()
    assert torch.isfinite(runs[0]).all()
    for i, r in enumerate(runs[1:], 1):
        assert torch.equal(r, runs[0]), f"run {i} ({['repeat', 'repeat', '66 blocks', '16 blocks'][i - 1]}) differs"


def test_the_gate_on_a_few_prompts(tc, ckpt):
    """eval/correctness.py's gate (its tolerance), 4 bench prompts x 64 tokens: teacher-forced and
    free-running tokens against the fp32 oracle on the same dequantized weights, determinism. The
    full gate (20 x 256) is the harness's, before the timing (notes/ktoken.md)."""
    from monolith.bench.baselines import registry
    from monolith.bench.suite import prompt_tokens
    from monolith.eval import correctness
    from monolith.tokenizer import load_tokenizer

    mk, ck = tc
    prompts = prompt_tokens("bench", load_tokenizer(ckpt.path))[:4]
    orc = registry.oracle(ck, "cuda")
    oset = correctness.oracle_runs(orc, prompts, 64)
    del orc
    torch.cuda.empty_cache()
    v = correctness.gate(mk, oset, tolerance=correctness.TOLERANCE)
    print(
        f"gate: {v['divergences']} divergences, {v['divergences_disallowed']} disallowed, "
        f"free-running exact {v['free_running_exact']}/{v['prompts']}"
    )
    assert v["passed"], v["reasons"]
