"""The fp8 half2 path's arithmetic on the CPU (quant/fp8_kernel_model.py hdot16 / word_lift_f16,
the model of kernel/dequant.cuh hdot16_e4m3 and schedule_stream.cuh store_xe): the range claim
in the kernel's comment (no f16 overflow for any finite code and any input), its error bound
(each 16-code block within 5e-3 of sum |w| |x|, as probes/round_gemv.cu checks shape 9), and
exactness where every step is exact."""
import torch

from monolith.quant import fp8_kernel_model as KM

FINITE = torch.tensor([c for c in range(256) if (c & 0x7F) != 0x7F], dtype=torch.uint8)


def _block(codes, x):
    """codes uint8 [R, 16], x fp32 [32] (one word; the lane's 16 inputs are its first half)."""
    xh, f = KM.word_lift_f16(x)
    return KM.hdot16(codes, xh[:16], f[0])


def test_worst_case_block_stays_finite_and_one_more_exponent_does_not():
    big = torch.tensor([0x7E, 0xFE], dtype=torch.uint8)  # +-448, the largest finite codes
    codes = big[0].repeat(1, 16)
    x = torch.full((32,), 1.999, dtype=torch.float32) * 3.0  # every input at its word's max
    y = _block(codes, x)
    assert torch.isfinite(y).all()
    assert abs(float(y[0, 0]) - 448 * 16 * float(x[0])) <= 5e-3 * 448 * 16 * float(x[0])
    # lifted one more binade, the same block overflows f16: the lift is what keeps it finite
    xh, f = KM.word_lift_f16(x, lift_log2=4)
    assert not torch.isfinite(KM.hdot16(codes, xh[:16], f[0])).all()


def test_random_blocks_within_the_bound():
    g = torch.Generator().manual_seed(17)
    for scale in (1e-3, 1.0, 300.0):
        codes = FINITE[torch.randint(0, len(FINITE), (64, 16), generator=g)]
        x = torch.randn(32, generator=g) * scale
        x[torch.randint(0, 32, (1,), generator=g)] *= 50.0  # an outlier sets the word's lift
        w = KM.kernel_weight_values(codes).double()
        exact = w @ x[:16].double()
        bound = w.abs() @ x[:16].abs().double()
        y = _block(codes, x)[:, 0].double()
        err = ((y - exact).abs() / bound.clamp_min(1e-300)).max().item()
        assert err < 5e-3, (scale, err)


def test_one_hot_inputs_are_exact():
    codes = FINITE[:240].reshape(-1, 16)  # 15 rows, 240 different codes
    for k in (0, 5, 15):
        x = torch.zeros(32)
        x[k] = 0.75
        y = _block(codes, x)[:, 0]
        want = KM.kernel_weight_values(codes[:, k]) * 0.75
        assert torch.equal(y, want)
