"""GPU tests of the megakernel (`make gpu-test` on the H200): phase-by-phase diff against the
reference decoder, refusals, the bounded-wait guarantee, determinism and the SASS check.
The full correctness gate (20 prompts x 256 tokens) runs through the harness in scripts/gpu.sh."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from monolith import config as C
from monolith.errors import MonolithError

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# Relative L2 error thresholds (kernel vs fp32-compute reference on the same bf16 weights).
# Before attention both compute the same fp32 math in a different summation order: ~1e-6.
# The kernel keeps the KV cache in bf16 (rounding 2^-9 relative), so everything after
# attention may differ by a few 1e-3; error grows with depth.
TOL_PRE_ATTN = 1e-4
# nvfp4-stream multiplies f16 inputs (the half2 path, kernel/dequant.cuh dot16B_h2): each input rounded to f16 (2^-11 relative) and 8-term f16 block sums: q and k at
# layer 0 were 4.7e-4 off the fp32 reference on the H200 (thirteenth session; the fp32 path < 1e-4),
# so its pre-attention bound is 10x the fp32 paths'. fp8-stream's default layers do the same with
# E4M3 codes where Policy::kE4M3Half2Phases says (dequant.cuh hdot16_e4m3): the same bound.
TOL_PRE_ATTN_F16 = 1e-3
TOL_POST_ATTN_L0 = 1e-2
TOL_DEEP = 3e-2
TOL_KV_BF16 = 8e-3


def nv_half2(mk) -> bool:
    """Whether this engine's kernel takes the half2 path: nvfp4 weights (every phase)."""
    return mk.weight_format == "nvfp4"


def e4m3_half2_phases() -> int:
    """Policy::kE4M3Half2Phases for E4M3 weights, as kernel/policy.cuh defines it."""
    text = (Path(__file__).resolve().parents[1] / "kernel" / "policy.cuh").read_text()
    m = re.search(r"static constexpr int kE4M3Half2Phases = kE4M3 \? (\d+) : 0;", text)
    assert m, "policy.cuh lost kE4M3Half2Phases"
    return int(m.group(1))


def fp8_half2(mk) -> bool:
    """Whether this engine's qkv rounds multiply f16 inputs by E4M3 codes: fp8 weights on the
    streaming schedule, with the qkv bit (1) of Policy::kE4M3Half2Phases set (4: gate/up only,
    so not in the shipped kernel)."""
    return mk.weight_format == "fp8" and mk.stream and bool(e4m3_half2_phases() & 1)


def tc_gemv(mk) -> bool:
    """Whether this engine's qkv rounds run on the tensor cores (variants.json "gemv": "mma",
    fp8-stream-tc): f16 inputs, as the half2 paths."""
    return mk.spec.get("gemv") == "mma"


def tol_pre_attn(mk) -> float:
    return TOL_PRE_ATTN_F16 if nv_half2(mk) or fp8_half2(mk) or tc_gemv(mk) else TOL_PRE_ATTN


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float().reshape(-1), b.float().reshape(-1).to(a.device)
    assert torch.isfinite(a).all(), "kernel buffer has NaN/inf (unwritten: it was poisoned before the step)"
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def ckpt():
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint

    return load_checkpoint(ensure_checkpoint(None))


# Every schedule runs the same tests (MONOLITH_TEST_VARIANTS narrows the list on the device; the
# quantized variants are chosen there: fp8-upstream, fp8-stream, nvfp4-stream; the last one first
# ran on the H200 in the sixth session: `MONOLITH_TEST_VARIANTS=nvfp4-stream make gpu-test`).
VARIANTS = [v for v in os.environ.get("MONOLITH_TEST_VARIANTS", "bf16-upstream,bf16-stream").split(",") if v]


@pytest.fixture(scope="module", params=VARIANTS)
def engines(ckpt, request):
    """(kernel, reference) on the weights the kernel multiplies: the checkpoint for a bf16 variant;
    for an fp8 variant (fp8-upstream) the checkpoint packed in memory and dequantized to fp32, which
    the reference keeps in fp32, so every diff below measures the kernel, not the quantizer. The
    engine's checkpoint is mk.test_ckpt (other engines of a test are built from it)."""
    from monolith.bench.baselines.registry import checkpoint_for, weights_of
    from monolith.megakernel import MegakernelEngine
    from monolith.reference import ReferenceEngine

    ck = checkpoint_for(weights_of(f"megakernel-{request.param}"), ckpt)
    mk = MegakernelEngine(ck, variant=request.param)
    mk.test_ckpt = ck
    yield mk, ReferenceEngine(ck, device="cuda", dtype=getattr(ck, "weight_dtype", torch.bfloat16),
                              compute_dtype=torch.float32)
    del mk
    torch.cuda.empty_cache()


def _prefilled(engines, n_prompt=21, seed=0):
    mk, ref = engines
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, C.VOCAB, (n_prompt,), generator=g).tolist()  # fresh random tokens
    mk.reset()
    ref.reset()
    a, b = mk.prefill(prompt), ref.prefill(prompt)
    return prompt, a, b


@pytest.mark.parametrize("layer", [0, 13, 27])
def test_phase_diff_after_each_layer(engines, layer):
    mk, ref = engines
    _, nxt, _ = _prefilled(engines)
    bufs = mk.step_until(nxt, layer, 4)  # stop after the down projection of `layer`
    _, cap = ref.step(nxt, capture=True)
    L = f"L{layer}."
    tol_post = TOL_POST_ATTN_L0 if layer == 0 else TOL_DEEP
    tol_pre = tol_pre_attn(mk) if layer == 0 else TOL_DEEP
    errs = {
        "normed_post": rel(bufs["normed_post"], cap[L + "normed_post"]),
        "mlp_act": rel(bufs["mlp_act"], cap[L + "mlp_act"]),
        "hidden(resid_out)": rel(bufs["hidden"], cap[L + "resid_out"]),
        "attn_out": rel(bufs["attn_out"], cap[L + "attn_out"]),
        "q": rel(bufs["q"], cap[L + "q"]),
        "k": rel(bufs["k"], cap[L + "k"]),
    }
    print(f"layer {layer} rel errors: {errs}")
    assert errs["q"] < tol_pre and errs["k"] < tol_pre, errs
    for name in ("normed_post", "mlp_act", "hidden(resid_out)", "attn_out"):
        assert errs[name] < tol_post, (name, errs)
    assert rel(bufs["k_cache"], cap[L + "k"]) < TOL_KV_BF16 + tol_pre
    assert rel(bufs["v_cache"], cap[L + "v"]) < TOL_KV_BF16 + tol_pre


@pytest.mark.parametrize("phase,keys", [(0, ["normed_in"]), (1, ["q", "k", "attn_out"]), (2, ["resid_attn"]),
                                        (3, ["normed_post", "mlp_act"]), (4, ["resid_out"])])
def test_phase_diff_layer0_each_phase(engines, phase, keys):
    mk, ref = engines
    _, nxt, _ = _prefilled(engines, seed=phase + 10)
    bufs = mk.step_until(nxt, 0, phase)
    _, cap = ref.step(nxt, capture=True)
    name_map = {"resid_attn": "hidden", "resid_out": "hidden"}
    for k in keys:
        e = rel(bufs[name_map.get(k, k)], cap["L0." + k])
        tol = tol_pre_attn(mk) if k in ("normed_in", "q", "k") else TOL_POST_ATTN_L0
        assert e < tol, (phase, k, e)


@pytest.mark.parametrize("n_prompt", [1100, 2100])
def test_attention_over_more_splits_than_a_groups_blocks(engines, n_prompt):
    """Long positions: at 1,100 / 2,100 cached positions a KV group has 18 / 33 attention splits of
    64 positions over its 16 blocks (128-block grid), so blocks own 2-3 splits and the merge reads
    more than one round of 4 partials. The gate's prompts never get there; the position sweep
    times it without checking it. Layer 0's attention and the whole step's logits against the
    reference: the regime where a block merges its own splits before the group's merge (and where
    the long and wide kernels run)."""
    mk, ref = engines
    _, nxt, _ = _prefilled(engines, n_prompt=n_prompt, seed=n_prompt)
    assert mk.position == ref.position == n_prompt
    bufs = mk.step_until(nxt, 0, 1)  # does not advance the position
    lk = mk.logits([nxt])[0]         # the same token at the same position, the whole step
    lr, cap = ref.step(nxt, capture=True)
    errs = {k: rel(bufs[k], cap["L0." + k]) for k in ("q", "k", "attn_out")}
    assert errs["q"] < tol_pre_attn(mk) and errs["k"] < tol_pre_attn(mk), errs
    assert errs["attn_out"] < TOL_POST_ATTN_L0, errs
    assert rel(lk, lr) < TOL_DEEP


def test_full_step_logits_and_token(engines):
    mk, ref = engines
    _, nxt, nxt_ref = _prefilled(engines, seed=3)
    lk = mk.logits([nxt])[0]
    lr = ref.logits([nxt])[0]
    assert rel(lk, lr) < TOL_DEEP
    top2 = torch.topk(lr, 2).values
    if float(top2[0] - top2[1]) > 0.05:
        assert int(lk.argmax()) == int(lr.argmax())


def test_kernel_token_is_the_argmax_of_its_own_logits(engines):
    """The in-kernel argmax (every block's candidates, then the grid's) must pick exactly
    torch.argmax of the logits the same launch wrote, ties to the lowest index, at every step.
    (fp8-stream's first build reduced only warp 0's candidates, while its LM-head rounds spread
    them over two warps: the logits were right and 1 token in 2 was not.)"""
    mk, _ = engines
    g = torch.Generator().manual_seed(21)
    prompt = torch.randint(0, C.VOCAB, (24,), generator=g).tolist()
    mk.reset()
    preds, logits = mk._forced(torch.tensor(prompt), want_logits=True)
    assert torch.equal(preds.cpu(), logits.argmax(dim=-1).cpu())


def test_decode_is_deterministic_and_matches_teacher_forcing(engines):
    mk, _ = engines
    prompt, nxt, _ = _prefilled(engines, seed=4)
    runs = []
    for _ in range(3):
        mk.reset()
        first = mk.prefill(prompt)
        runs.append(mk.decode(first, 64).cpu())
    assert all(torch.equal(runs[0], r) for r in runs[1:]), "decode is not bitwise deterministic"
    mk.reset()
    first = mk.prefill(prompt)
    forced = mk.teacher_forced([first] + runs[0][:-1].tolist()).cpu()
    assert torch.equal(forced, runs[0])


def test_launch_shape_does_not_change_tokens(engines, ckpt):
    """Every row's dot product is summed by one warp in a fixed order whatever the grid size,
    so a different block count must give bitwise the same tokens."""
    from monolith.megakernel import MegakernelEngine

    mk, _ = engines
    prompt, _, _ = _prefilled(engines, seed=6)
    mk.reset()
    a = mk.decode(mk.prefill(prompt), 48).cpu()
    other = MegakernelEngine(mk.test_ckpt, variant=mk.variant, blocks=66)
    b = other.decode(other.prefill(prompt), 48).cpu()
    del other
    assert torch.equal(a, b)


def test_bad_inputs_are_clear_errors(engines, ckpt):
    from monolith.megakernel import MegakernelEngine

    mk, _ = engines
    mk.reset()
    with pytest.raises(MonolithError, match="outside the vocabulary"):
        mk.prefill([1, C.VOCAB])
    mk.reset()
    mk._set_position(C.CONTEXT_CAP - 2)
    with pytest.raises(MonolithError, match="context cap|KV cache"):
        mk.decode(5, 3)
    mk.reset()
    too_many = mk.info["coresident_limit"] + 1
    with pytest.raises(MonolithError, match="cannot be co-resident"):
        MegakernelEngine(mk.test_ckpt, variant=mk.variant, blocks=too_many)
    if mk.weight_format != "bf16":  # a bf16 variant refuses quantized weights (fp8 or nvfp4)
        with pytest.raises(MonolithError, match="reads bf16 weights"):
            MegakernelEngine(mk.test_ckpt, variant="bf16-upstream")


def test_stuck_barrier_fails_loudly_not_hangs(engines):
    mk, _ = engines
    with pytest.raises(MonolithError, match="timed out"):
        mk.inject_stuck_barrier(timeout_s=0.05)
    # the engine recovers after reset
    _prefilled(engines, seed=5)
    mk.decode(1, 4)


# bf16-stream: block 0 leaves after its part of (layer, phase); a wait that needs its output must
# time out and name itself (wait ids: monolith.megakernel.WAITS["bf16-stream"]). After qkv three
# waits need block 0 (its q/k/v rows; at position 0 its attention split, which it owns; its group's
# O partial sums, which the other groups' blocks wait for), and whichever times out first reports.
STREAM_FAULTS = [(0, 0, ("layer 0, the group's q/k/v rows", "layer 0, the group's attention splits",
                         "layer 0, residual words after attention + O")),
                 (0, 1, ("layer 0, residual words after attention + O",)),
                 (0, 2, ("layer 0, the layer's MLP activations",)),
                 # after its layer-0 MLP block 0's outputs are complete: layer 1 misses its q/k/v
                 # rows, its attention split and its O partial sums
                 (0, 4, ("layer 1, the group's q/k/v rows", "layer 1, the group's attention splits",
                             "layer 1, residual words after attention + O")),
                 # after the last layer only the LM head misses it: no wait needs it, the step never
                 # finishes (no block reduces the argmax) and the host's position check says so
                 (27, 4, ("did not complete",))]


@pytest.mark.parametrize("layer,phase,waits", STREAM_FAULTS)
def test_stream_each_wait_fails_loudly(engines, layer, phase, waits):
    mk, _ = engines
    if not mk.stream:
        pytest.skip("fault points of the streaming schedule")
    with pytest.raises(MonolithError, match="timed out|did not complete") as e:
        mk.inject_stuck_barrier(timeout_s=0.05, layer=layer, after_phase=phase)
    assert any(w in str(e.value) for w in waits), str(e.value)
    _prefilled(engines, seed=7)  # and the engine works again
    mk.decode(1, 4)


def test_stream_random_delays_keep_tokens_bitwise(engines):
    """Thousands of steps with pseudo-random per-block sleeps before every phase (the blocks reach
    every wait in shuffled orders): the tokens must be bitwise those of the undisturbed run."""
    mk, _ = engines
    if not mk.stream:
        pytest.skip("jitter hook of the streaming schedule")
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, C.VOCAB, (5,), generator=g).tolist() for _ in range(8)]
    calm, shaken = [], []
    for jitter, out in ((0, calm), (3000, shaken)):
        mk.jitter_ns = jitter
        try:
            for pr in prompts:
                mk.reset()
                out.append(mk.decode(mk.prefill(pr), 256).cpu())
        finally:
            mk.jitter_ns = 0
    assert all(torch.equal(a, b) for a, b in zip(calm, shaken, strict=True)), "random delays changed the tokens"


def test_plain_build_reads_no_globaltimer(engines):
    mk, _ = engines
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    build = Path(mk.ext.build_info["build_dir"])
    plain = next(build.glob("megakernel.cuda.o"))
    xray = next(build.glob("megakernel_xray.cuda.o"))
    sass_plain = subprocess.run([cuobjdump, "-sass", str(plain)], capture_output=True, text=True, check=True).stdout
    sass_xray = subprocess.run([cuobjdump, "-sass", str(xray)], capture_output=True, text=True, check=True).stdout
    assert "GLOBALTIMER" not in sass_plain.upper()
    assert "GLOBALTIMER" in sass_xray.upper()


# ---- fp8 variants -------------------------------------------------------------------------------
def _fp8_only(mk):
    if mk.weight_format != "fp8":
        pytest.skip("fp8 weight format only")


def test_embedding_lookup_is_the_dequantized_row_bitwise(engines):
    """After layer 0's qkv the residual stream holds the token's embedding row as the kernel read it
    (each block seeds its slice before barrier 1): bit for bit the checkpoint's row (bf16 widened,
    or the fp8 code times its row scale, the dequantized weight the oracle uses)."""
    mk, _ = engines
    if mk.stream:
        pytest.skip("the upstream schedule seeds the residual in scratch at layer 0")
    for token in (0, 12345, C.VOCAB - 1):
        mk.reset()
        bufs = mk.step_until(token, 0, 0)
        want = mk.test_ckpt.tensors["model.embed_tokens.weight"][token].float()
        assert torch.equal(bufs["hidden"].cpu(), want), token


def test_fp8_every_code_through_the_kernel(engines):
    """All 256 E4M3 codes through both kernel paths, on a copy of the pack: (a) one embedding row
    holds every code 4 times with scale 1, so the lookup must return torch.float8_e4m3fn's value of
    each (NaN for 0x7F/0xFF); (b) layer 0's qkv row 0 holds every finite code, and every qkv row
    must equal the CPU model of the kernel's arithmetic (quant/fp8_kernel_model.py, 16-weight
    groups per lane, xor-butterfly, scale last) on the kernel's own normed input."""
    from monolith.megakernel import MegakernelEngine
    from monolith.quant import fp8_kernel_model as KM
    from monolith.quant import fp8_layout as F
    from monolith.quant.pack_fp8 import PackedFP8

    mk, _ = engines
    _fp8_only(mk)
    if mk.stream:
        pytest.skip("reads the upstream schedule's layer-0 residual seed")
    pk = mk.test_ckpt.packed
    t = dict(pk.tensors)
    codes, scales = t[F.T_LAYER_CODES].clone(), t[F.T_LAYER_SCALES].clone()
    ecodes, escales = t[F.T_EMBED_CODES].clone(), t[F.T_EMBED_SCALES].clone()
    every = torch.arange(256, dtype=torch.uint8).repeat(C.HIDDEN // 256)
    tok_all = 777
    ecodes[tok_all], escales[tok_all] = every, 1.0
    finite = every.clone()
    finite[(finite & 0x7F) == 0x7F] = 0
    codes[0, F.OFF_QKV:F.OFF_QKV + C.HIDDEN] = finite
    scales[0, F.SC_QKV] = 1.0
    t.update({F.T_LAYER_CODES: codes, F.T_LAYER_SCALES: scales, F.T_EMBED_CODES: ecodes, F.T_EMBED_SCALES: escales})
    mod = MegakernelEngine(mk.test_ckpt, variant=mk.variant, packed=PackedFP8(path=None, meta=pk.meta, tensors=t))
    try:
        mod.reset()
        got = mod.step_until(tok_all, 0, 0)["hidden"].cpu()
        want = every.view(torch.float8_e4m3fn).float()
        assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(got[~torch.isnan(want)],
                                                                               want[~torch.isnan(want)])
        mod.reset()
        bufs = mod.step_until(42, 0, 0)
        x = bufs["normed_in"].cpu()
        qkv_codes = codes[0, F.OFF_QKV:F.OFF_O].view(F.QKV_ROWS, C.HIDDEN)
        model = KM.kernel_gemv(qkv_codes, scales[0, F.SC_QKV:F.SC_O], x, lanes=32, group=16)
        got = bufs["qkv"].cpu()
        # The model's fmaf is emulated in float64 (a rare last-bit double rounding of a partial
        # sum), so compare against the fp32 summation scale sum |w| |x| of each row, not |y|.
        bound = (KM.kernel_weight_values(qkv_codes).abs() @ x.abs()) * scales[0, F.SC_QKV:F.SC_O]
        err = ((got - model).abs() / bound.clamp_min(1e-30)).max().item()
        assert err < 1e-6, err
        print(f"qkv rows vs the CPU model: max error {err:.2e} of sum|w||x|; "
              f"{int((got == model).sum())}/{len(got)} rows bit-equal")
    finally:
        del mod
        torch.cuda.empty_cache()


def test_fp8_engine_refuses_a_bf16_head_pack(engines):
    from monolith.megakernel import MegakernelEngine
    from monolith.quant.pack_fp8 import PackedFP8

    mk, _ = engines
    _fp8_only(mk)
    pk = mk.test_ckpt.packed
    with pytest.raises(MonolithError, match="LM head"):
        MegakernelEngine(mk.test_ckpt, variant=mk.variant,
                         packed=PackedFP8(path=None, meta={**pk.meta, "head": "bf16"}, tensors=pk.tensors))


# ---- nvfp4 variants -----------------------------------------------------------------------------
def _nvfp4_only(mk):
    if mk.weight_format != "nvfp4":
        pytest.skip("nvfp4 weight format only")


def _nvfp4_qkv_matrices(t: dict, codes: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """Layer 0's q, k and v as (codes, block scales, tensor scale) from a packed nvfp4 dict t, the
    codes taken from `codes` (t's own, or a modified copy)."""
    from monolith.quant import nvfp4_layout as NL

    qkv = codes[0, NL.CODE_OFFSETS["qkv"]:NL.CODE_OFFSETS["o"]].view(-1, NL.CODE_ROW_BYTES["qkv"])
    bs = t[NL.T_LAYER_BSCALES][0, NL.BSCALE_OFFSETS["qkv"]:NL.BSCALE_OFFSETS["o"]].view(-1, NL.BSCALE_ROW_BYTES["qkv"])
    rows = {"q": (0, C.Q_DIM), "k": (C.Q_DIM, C.Q_DIM + C.KV_DIM), "v": (C.Q_DIM + C.KV_DIM, C.Q_DIM + 2 * C.KV_DIM)}
    return [(qkv[r0:r1], bs[r0:r1], float(t[NL.T_LAYER_TSCALES][0, NL.TSCALE_ORDER.index(kind)]))
            for kind, (r0, r1) in rows.items()]


def _nvfp4_qkv_input(t: dict, tok: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(v, s_x): the residual v (the token's E4M3 embedding row, one fp32 multiply as
    WeightsE4M3::value) and the vector layer 0's qkv rows multiply in the kernel, s_x = v * w (the
    RMSNorm weight), before 1/rms (which the kernel applies to each row's sum, after the tensor scale)."""
    from monolith.quant import nvfp4_layout as NL

    v = t[NL.T_EMBED_CODES][tok].view(torch.float8_e4m3fn).float() * t[NL.T_EMBED_SCALES][tok].float()
    off, k = NL.NORM_FIELDS["input_layernorm.weight"]
    return v, v * t[NL.T_NORMS][0, off:off + k].float()


def _assert_qkv_rows_are_the_model(mk, t: dict, codes: torch.Tensor, tok: int) -> str:
    """Layer 0's q/k/v rows of one step of `mk` bit for bit the CPU model's (quant/nvfp4_kernel_model.py
    kernel_gemv, on the path the build takes: half2 or fp32) on the kernel's own input, up to the one
    fp32 1/rms (KM.shared_scalar: rsqrtf's last bit cannot be repeated on the CPU, but it is one
    scalar shared by all 4,096 rows)."""
    from monolith.quant import nvfp4_kernel_model as KM

    mk.reset()
    got = mk.step_until(tok, 0, 0)["qkv"].cpu()
    v, x = _nvfp4_qkv_input(t, tok)
    h2 = nv_half2(mk)
    pre = torch.cat([KM.kernel_gemv(c, b, g, x, half2=h2) for c, b, g in _nvfp4_qkv_matrices(t, codes)])
    approx = 1.0 / float((v.double().square().mean() + C.RMS_EPS).sqrt())
    hits = KM.shared_scalar(pre, got, approx)
    near = int((pre * torch.tensor(approx, dtype=torch.float32) == got).sum())
    assert hits, (f"no fp32 1/rms within 8 ulp makes every qkv row the model's (half2={h2}; "
                  f"{near}/{len(got)} rows at 1/rms itself)")
    return f"{len(got)}/{len(got)} rows bit-equal (half2={h2}, 1/rms {hits})"


def test_nvfp4_qkv_rows_are_the_cpu_model_for_every_code(engines):
    """Layer 0's q row 0 holds every pair of E2M1 codes (bytes 0..255 twice), and every q/k/v row
    of the kernel must equal quant/nvfp4_kernel_model.py's kernel_gemv bit for bit on the
    kernel's own input (per-block sums, the block-scale fmaf, the lane butterfly, the tensor
    scale, then 1/rms): one wrong code in the decode changes row 0. (Until the thirteenth
    session this compared against the model on the debug vector normed_in within 1e-6 of
    sum |w| |x|; the half2 path's f16 inputs differ by far more between those two vectors.)"""
    from monolith.megakernel import MegakernelEngine
    from monolith.quant import nvfp4_layout as NL
    from monolith.quant.pack_nvfp4 import PackedNVFP4

    mk, _ = engines
    _nvfp4_only(mk)
    pk = mk.test_ckpt.packed
    t = dict(pk.tensors)
    codes = t[NL.T_LAYER_CODES].clone()
    codes[0, NL.CODE_OFFSETS["qkv"]:NL.CODE_OFFSETS["qkv"] + NL.CODE_ROW_BYTES["qkv"]] = \
        torch.arange(256, dtype=torch.uint8).repeat(NL.CODE_ROW_BYTES["qkv"] // 256)
    t[NL.T_LAYER_CODES] = codes
    mod = MegakernelEngine(mk.test_ckpt, variant=mk.variant, packed=PackedNVFP4(path=None, meta=pk.meta, tensors=t))
    try:
        print("qkv rows (every code pair in q row 0) vs the nvfp4 CPU model:", _assert_qkv_rows_are_the_model(mod, t, codes, 42))
    finally:
        del mod
        torch.cuda.empty_cache()


def test_nvfp4_qkv_rows_bit_exact_on_the_kernels_input(engines):
    """Every q/k/v row of layer 0 bit for bit quant/nvfp4_kernel_model.py's kernel_gemv, given what
    the kernel multiplies (seventh session): s_x = v * w, the row sum scaled by the tensor scale,
    then by inv = rsqrtf(mean v^2 + eps). Feeding the model normed_in = (v * inv) * w instead, another
    vector, left only ~18 % of the rows bit-equal on the H200 (722 / 4,096) on the fp32 path."""
    from monolith.quant import nvfp4_layout as NL

    mk, _ = engines
    _nvfp4_only(mk)
    t = mk.test_ckpt.packed.tensors
    print("qkv rows vs the nvfp4 CPU model on the kernel's input:", _assert_qkv_rows_are_the_model(mk, t, t[NL.T_LAYER_CODES], 42))


def test_nvfp4_engine_refuses_a_mixed_pack(engines):
    from monolith.megakernel import MegakernelEngine
    from monolith.quant.pack_nvfp4 import PackedNVFP4

    mk, _ = engines
    _nvfp4_only(mk)
    pk = mk.test_ckpt.packed
    meta = {**pk.meta, "layout_version": 2,
            "mixed": {"fp8": ["model.layers.0.self_attn.q_proj.weight"], "fp8_kinds": [], "per_kind": False,
                      "fp8_layout": "rowmajor-v1", "fp8_scheme": "fp8-e4m3-rowscale", "map": {}}}
    with pytest.raises(MonolithError, match="mixed pack"):
        MegakernelEngine(mk.test_ckpt, variant=mk.variant, packed=PackedNVFP4(path=None, meta=meta, tensors=pk.tensors))
