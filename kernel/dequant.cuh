// monolith: register dequantization of FP8 (E4M3) and NVFP4 (E2M1) weights.
//
// Every function here is checked value-by-value against a CPU reference by probes/cvt.cu, which
// includes this header, so the megakernel uses exactly what the probe verified on the GPU.
//
// Design (why):
// - Weights stream from DRAM once per token; the GEMVs are bandwidth-bound, so the decode must
//   cost only a few integer ops per weight. At 4.5 TB/s an H200 SM receives ~17 bytes/cycle:
//   ~17 E4M3 or ~34 E2M1 weights per cycle against 128 lanes of ALU, i.e. a budget of roughly
//   3-7 instructions per weight *including* the FMA. probes/cvt.cu times each path (values/s,
//   and the equivalent weight bandwidth) so this budget is measured, not assumed.
// - E4M3 -> f16: one hardware `cvt.rn.f16x2.e4m3x2` per two weights (sm_89+). Every E4M3 value is
//   exact in f16 (smallest subnormal 2^-9 >= f16 step 2^-24), so no rounding happens here.
// - E2M1 on sm_90 (no hardware cvt): the 3 magnitude bits (e1 e0 m) are copied into the lowest two
//   exponent bits and the top mantissa bit of an f16, the sign into the f16 sign. The result is
//   *exactly* e2m1 * 2^-14 for every code, including the subnormal 0.5 (E2M1 subnormal step 2^-1
//   * 2^-14 = f16 subnormal 2^-15), because both formats put "exponent field 0" at 2^(1-bias).
//   The 2^14 goes into the per-group scale (fp32, one multiply per 16 weights), never into the
//   f16 (6 * 2^14 would overflow f16). Decoded pairs are (element k, element k+4) of a packed
//   u32: those nibbles are 16 bits apart, exactly like the two halves of a half2, so one shift
//   and one mask serve both halves (pairing k with k+1 would need two different shifts).
//   Storage stays the standard NVFP4 order (element j in nibble j, low nibble first).
//   The sm_90 code does not compute the pairs one at a time (e2m1_pair_f16bits_trick, 15 integer
//   ops per u32) but with e2m1x8_f16bits_lop3 (12): the same values bit for bit (see there).
// - E2M1 on sm_100a/sm_120a: the native `cvt.rn.f16x2.e2m1x2` (compiled for sm_120a; our
//   measurements are on the H200, where it does not exist). Same pairing and same API; the
//   unbias factor differs per arch (e2m1_unbias()), so the kernel code is identical.
// - NVFP4's FMAs in the kernel are f16x2 on pre-scaled f16 inputs (the half2 path, below: half the
//   instructions); dot16B keeps the fp32 form (f16 -> f32 is exact), as E4M3's dot16_e4m3.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

#include "loads.cuh"  // dot8_bf16: the bf16 side of the weight formats below

namespace monolith {

static_assert(sizeof(__half2) == 4, "half2 must be 32 bits: decoders return packed pairs");
static_assert(sizeof(uint4) == 16, "weights are streamed as 16-byte vectors");

// Native e2m1x2 conversion exists only on the arch-specific Blackwell targets (sm_100a, sm_120a,
// ...). The arch-specific feature macros are what nvcc defines for the `a` variants.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 &&                                       \
    (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM101_ALL) ||           \
     defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM110_ALL) ||           \
     defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) ||           \
     defined(__CUDA_ARCH_SPECIFIC__) || defined(__CUDA_ARCH_FAMILY_SPECIFIC__))
#define MONOLITH_HAS_E2M1_CVT 1
#else
#define MONOLITH_HAS_E2M1_CVT 0
#endif

// 2^14 as a float: the factor the sm_90 e2m1 decode leaves out (see above).
constexpr float kE2M1F16Bias = 16384.0f;
static_assert(kE2M1F16Bias == float(1 << 14), "bias must be exactly 2^14");

__device__ __forceinline__ __half2 u32_as_half2(uint32_t v) {
  __half2 h;
  *reinterpret_cast<uint32_t*>(&h) = v;
  return h;
}
__device__ __forceinline__ uint32_t half2_as_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// ---------------------------------------------------------------------------------------------
// E4M3
// ---------------------------------------------------------------------------------------------

// Software E4M3 -> f16 bits. Only the fallback for pre-sm_89 devices and a second opinion in the
// probe; the kernels use the hardware cvt. NaN (S.1111.111) -> 0x7FFF with the sign kept.
__host__ __device__ __forceinline__ uint16_t e4m3_to_f16_bits_sw(uint8_t b) {
  const uint32_t s = (uint32_t(b) & 0x80u) << 8;
  const uint32_t e = (uint32_t(b) >> 3) & 0xFu;
  const uint32_t m = uint32_t(b) & 0x7u;
  if (e == 0xFu && m == 0x7u) return uint16_t(s | 0x7FFFu);
  if (e == 0u) {
    if (m == 0u) return uint16_t(s);
    // subnormal m * 2^-9 = 1.f * 2^(p-9) with p = floor(log2 m): normal in f16.
    const uint32_t p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
    return uint16_t(s | ((p + 6u) << 10) | (((m << (3u - p)) & 0x7u) << 7));
  }
  return uint16_t(s | ((e + 8u) << 10) | (m << 7));  // rebias 7 -> 15
}

// Two E4M3 (low byte = first element) -> half2 (low half = first element).
__device__ __forceinline__ __half2 e4m3x2_to_half2(uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  return u32_as_half2(r);
#else
  return u32_as_half2(uint32_t(e4m3_to_f16_bits_sw(uint8_t(v & 0xFF))) |
                      (uint32_t(e4m3_to_f16_bits_sw(uint8_t(v >> 8))) << 16));
#endif
}

// Four E4M3 in a u32 (byte j = element j) -> (e0,e1), (e2,e3).
__device__ __forceinline__ void e4m3x4_to_half2x2(uint32_t v, __half2& lo, __half2& hi) {
  lo = e4m3x2_to_half2(uint16_t(v & 0xFFFFu));
  hi = e4m3x2_to_half2(uint16_t(v >> 16));
}

// One E4M3 byte -> float (exact): NVFP4's per-16 block scales, and single fp8 weights (the fp8
// embedding lookup). The per-row scales of the fp8 layout rowmajor-v1 are fp32, not E4M3.
__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
  return __low2float(e4m3x2_to_half2(uint16_t(b)));
}

// tour:begin dequant
// acc + dot(8 E4M3 weights in w, activations a0 = x[0..3], a1 = x[4..7]), fp32 FMAs.
// The per-row scale is applied once per row by the caller, not here.
__device__ __forceinline__ float dot8_e4m3(uint2 w, float4 a0, float4 a1, float acc) {
  __half2 p0, p1, p2, p3;
  e4m3x4_to_half2x2(w.x, p0, p1);
  e4m3x4_to_half2x2(w.y, p2, p3);
  float2 f;
  f = __half22float2(p0); acc = fmaf(f.x, a0.x, acc); acc = fmaf(f.y, a0.y, acc);
  f = __half22float2(p1); acc = fmaf(f.x, a0.z, acc); acc = fmaf(f.y, a0.w, acc);
  f = __half22float2(p2); acc = fmaf(f.x, a1.x, acc); acc = fmaf(f.y, a1.y, acc);
  f = __half22float2(p3); acc = fmaf(f.x, a1.z, acc); acc = fmaf(f.y, a1.w, acc);
  return acc;
}
// acc + dot(16 E4M3 weights = one 16-byte load of a row, x[0..15] = a[0..3]): fp32 FMAs in element
// order, so one lane's share of a row is summed exactly as quant/fp8_kernel_model.py models it
// (kernel_gemv(..., group=16)). The per-row scale is applied once per row by the caller.
__device__ __forceinline__ float dot16_e4m3(uint4 w, const float4 (&a)[4], float acc) {
  acc = dot8_e4m3(make_uint2(w.x, w.y), a[0], a[1], acc);
  return dot8_e4m3(make_uint2(w.z, w.w), a[2], a[3], acc);
}
// tour:end dequant
// The half2 form of dot16_e4m3 (Policy::kE4M3Half2Phases; probes/round_gemv.cu
// shape 9 measured the E4M3 round at 1,794 cycles against dot16_e4m3's 2,283): the cvt's f16
// pairs go straight into HFMA2 against inputs that are already f16 (x[u]: the half2 of elements
// 2u, 2u + 1), so neither the widening adds nor the 16 fp32 FMAs remain. The inputs are lifted per
// 32-element word so that the word's max |x| is in [1, 2) (schedule_stream.cuh store_xe); then
// |w x| <= 448 * 2 and each half's 8-term sum stays below 7,168, inside f16. f = the word's factor
// 2^E, applied once to the lane's fp32 sum of its two halves.
__device__ __forceinline__ float hdot16_e4m3(uint4 w, const uint32_t (&x)[8], float f) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  __half2 acc = __float2half2_rn(0.f);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    acc = __hfma2(e4m3x2_to_half2(uint16_t(ws[u] & 0xFFFFu)), u32_as_half2(x[2 * u]), acc);
    acc = __hfma2(e4m3x2_to_half2(uint16_t(ws[u] >> 16)), u32_as_half2(x[2 * u + 1]), acc);
  }
  return (__low2float(acc) + __high2float(acc)) * f;
}

// ---------------------------------------------------------------------------------------------
// Weight formats of the megakernel's GEMVs
// ---------------------------------------------------------------------------------------------
// The GEMV code is written once; a format says how wide a weight is, how one 16-byte load meets
// its activations, and whether the row carries a scale. A variant picks one
// (VariantCfg<...>::Weights in megakernel.cu), so the choice costs the hot loop nothing.
// - WeightsBf16: the bf16 layouts (2 bytes per weight, no scale).
// - WeightsE4M3: `fp8-e4m3-rowscale`, layout rowmajor-v1 (quant/fp8_layout.py): 1 byte per weight,
//   rows in the bf16 order, one fp32 scale per output row applied after the row's dot product:
//   y[r] = (sum_k f32(f16(code[r, k])) * x[k]) * scale[r].
struct WeightsBf16 {
  using Elem = uint16_t;
  using Head = WeightsBf16;                   // the format of the (tied) embedding / LM head
  static constexpr int kPer16B = 8;           // weights per 16-byte load
  static constexpr bool kRowScale = false;
  static constexpr bool kBlockScaled = false;  // one scale per 16 weights beside the codes (NVFP4)
  // acc + dot(one 16-byte load, its kPer16B activations a[0 .. kPer16B/4 - 1])
  static __device__ __forceinline__ float dot16B(uint4 w, const float4 (&a)[2], float acc) {
    return dot8_bf16(w, a[0], a[1], acc);
  }
  // element i of a row (the embedding lookup); `scale` unused
  static __device__ __forceinline__ float value(const Elem* row, int i, float) {
    return __uint_as_float(uint32_t(row[i]) << 16);
  }
};
struct WeightsE4M3 {
  using Elem = uint8_t;
  using Head = WeightsE4M3;
  static constexpr int kPer16B = 16;
  static constexpr bool kRowScale = true;
  static constexpr bool kBlockScaled = false;
  static __device__ __forceinline__ float dot16B(uint4 w, const float4 (&a)[4], float acc) {
    return dot16_e4m3(w, a, acc);
  }
  // fp32(e4m3) * scale: one fp32 multiply, bit for bit the dequantized weight of the packer
  // (quant/pack_fp8.py dequantize_rows), which is what the fp8 gate's oracle multiplies
  static __device__ __forceinline__ float value(const Elem* row, int i, float scale) {
    return e4m3_to_float(row[i]) * scale;
  }
};
static_assert(WeightsBf16::kPer16B * sizeof(WeightsBf16::Elem) == 16 && WeightsE4M3::kPer16B * sizeof(WeightsE4M3::Elem) == 16,
              "a 16-byte load holds kPer16B whole weights");

// ---------------------------------------------------------------------------------------------
// E2M1 (NVFP4 elements)
// ---------------------------------------------------------------------------------------------

// Factor to multiply the decoded values by to get true e2m1 values: 2^14 for the sm_90 bit trick,
// 1 for the native cvt. Fold it into the fp32 group scale (free), never into the f16.
__host__ __device__ __forceinline__ constexpr float e2m1_unbias() {
#if MONOLITH_HAS_E2M1_CVT
  return 1.0f;
#else
  return kE2M1F16Bias;
#endif
}

// The sm_90 bit trick for pair K: element K (bits 4K..4K+3) -> low half, element K+4 (bits 16+4K..)
// -> high half. Magnitude bits move to f16 bits 9..11, the sign to bit 15. The definition of the
// sm_90 values; e2m1x8_to_half2x4 computes all four pairs with e2m1x8_f16bits_lop3 (same bits).
template <int K>
__device__ __forceinline__ uint32_t e2m1_pair_f16bits_trick(uint32_t x) {
  static_assert(K >= 0 && K < 4, "pair index");
  constexpr int kMagShift = 9 - 4 * K;    // 9, 5, 1, -3
  constexpr int kSignShift = 12 - 4 * K;  // 12, 8, 4, 0
  const uint32_t mag = kMagShift >= 0 ? (x << (kMagShift & 31)) : (x >> ((-kMagShift) & 31));
  const uint32_t sgn = x << kSignShift;
  return (mag & 0x0E000E00u) | (sgn & 0x80008000u);
}

// lop3 immLut = F(0xF0, 0xCC, 0xAA) for operands a = 0xF0, b = 0xCC, c = 0xAA (PTX ISA), checked at
// compile time. kE2M1LutSel: (a & ~c) | (b & c), b's bits where c is set, a's elsewhere. (The
// probe's first version had 0xE2 = (a & b) | (c & ~b), a select on b: 713216 of 1048576 values
// wrong on the H200; tests/test_probe_e2m1_decode.py reads this constant and emulates the lop3.)
constexpr uint32_t kE2M1LutSel = 0xD8;
static_assert(kE2M1LutSel == (((0xF0u & ~0xAAu) | (0xCCu & 0xAAu)) & 0xFFu), "immLut of (a & ~c) | (b & c)");
__device__ __forceinline__ uint32_t e2m1_bitsel(uint32_t a, uint32_t b, uint32_t m) {  // (a & ~m) | (b & m)
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(m), "n"(kE2M1LutSel));
  return d;
}

// All four sm_90 pairs at once, out[k] = e2m1_pair_f16bits_trick<k>(x) bit for bit, in 12 integer
// ops instead of 15 (SASS: 7 LOP3 + 5 shifts): one bit-select copies the even nibbles' signs 3 bits
// up (y: bits 6, 14, 22, 30 from x << 3, just above each magnitude's top bit), another nibbles 1 and
// 5's (z: bits 10, 26); pairs (0,4), (2,6), (1,5) are then one shift and one AND each, (3,7) is the
// trick's. The sequence of probes/e2m1_decode.cu's decode_lop3 (tests/test_probe_e2m1_decode.py
// checks the two texts are the same and emulates it over every code in every nibble): measured
// there on the H200 with fp32 FMAs (lop3_f32) at 3.48 TB/s of codes against the trick's 3.07
// (trick_f32), weights in registers (results/m5_e2m1_decode.json).
__device__ __forceinline__ void e2m1x8_f16bits_lop3(uint32_t x, uint32_t out[4]) {
  constexpr uint32_t kM = 0x8E008E00u;         // f16x2 sign + the 3 magnitude bits, both halves
  const uint32_t t = x << 3;
  const uint32_t y = e2m1_bitsel(x, t, 0x40404040u);  // even nibbles: sign 4 bits above the magnitude's top
  const uint32_t z = e2m1_bitsel(x, t, 0x04000400u);  // nibbles 1 and 5 likewise
  out[0] = (y << 9) & kM;                        // (e0, e4)
  out[1] = (z << 5) & kM;                        // (e1, e5)
  out[2] = (y << 1) & kM;                        // (e2, e6)
  out[3] = ((x >> 3) & 0x0E000E00u) | (x & 0x80008000u);  // (e3, e7): the trick's
}

// Eight E2M1 in a u32 (element j in nibble j) -> out[k] = (element k, element k+4), k = 0..3,
// each value multiplied by 1 / e2m1_unbias() (exact: see the header comment).
__device__ __forceinline__ void e2m1x8_to_half2x4(uint32_t x, __half2 out[4]) {
#if MONOLITH_HAS_E2M1_CVT
  // Gather each pair into one byte (low nibble = element k, high nibble = element k+4), then
  // convert bytes natively: byte0 = (e0,e4), byte1 = (e2,e6) ; byte0' = (e1,e5), byte1' = (e3,e7).
  const uint32_t y02 = (x & 0x0F0Fu) | ((x >> 12) & 0xF0F0u);
  const uint32_t y13 = ((x >> 4) & 0x0F0Fu) | ((x >> 16) & 0xF0F0u);
  uint32_t r0, r1, r2, r3;
  asm("{\n\t.reg .b8 a0, a1, a2, a3, b0, b1, b2, b3;\n\t"
      "mov.b32 {a0, a1, a2, a3}, %4;\n\t"
      "mov.b32 {b0, b1, b2, b3}, %5;\n\t"
      "cvt.rn.f16x2.e2m1x2 %0, a0;\n\t"
      "cvt.rn.f16x2.e2m1x2 %1, b0;\n\t"
      "cvt.rn.f16x2.e2m1x2 %2, a1;\n\t"
      "cvt.rn.f16x2.e2m1x2 %3, b1;\n\t}"
      : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
      : "r"(y02), "r"(y13));
  out[0] = u32_as_half2(r0);
  out[1] = u32_as_half2(r1);
  out[2] = u32_as_half2(r2);
  out[3] = u32_as_half2(r3);
#else
  uint32_t d[4];
  e2m1x8_f16bits_lop3(x, d);  // = e2m1_pair_f16bits_trick<k>(x), k = 0..3
  out[0] = u32_as_half2(d[0]);
  out[1] = u32_as_half2(d[1]);
  out[2] = u32_as_half2(d[2]);
  out[3] = u32_as_half2(d[3]);
#endif
}

// acc + dot(8 E2M1 weights in w, x[0..3] = a0, x[4..7] = a1) WITHOUT the unbias factor: the
// caller sums a 16-element group (two calls) and multiplies the group once by
// nvfp4_group_scale(). Pair k = (element k, element k+4) meets a0[k] and a1[k].
__device__ __forceinline__ float dot8_e2m1_biased(uint32_t w, float4 a0, float4 a1, float acc) {
  __half2 p[4];
  e2m1x8_to_half2x4(w, p);
  float2 f;
  f = __half22float2(p[0]); acc = fmaf(f.x, a0.x, acc); acc = fmaf(f.y, a1.x, acc);
  f = __half22float2(p[1]); acc = fmaf(f.x, a0.y, acc); acc = fmaf(f.y, a1.y, acc);
  f = __half22float2(p[2]); acc = fmaf(f.x, a0.z, acc); acc = fmaf(f.y, a1.z, acc);
  f = __half22float2(p[3]); acc = fmaf(f.x, a0.w, acc); acc = fmaf(f.y, a1.w, acc);
  return acc;
}

// The half2 path (the streaming kernel's NVFP4 rows; dot16B above is the fp32 form): HFMA2 straight
// on the decoded pairs against inputs that are already f16, so no f16 -> f32 widening and one
// fused op per two weights. Why it pays: NVFP4's rows were bound by their instruction stream at
// ~3.6 instructions per weight (decode 1.5, widen 1, FMA 1; ncu); the M5 probe
// (probes/e2m1_decode.cu, lop3_h2 against lop3_f32) turned 5.02 TB/s of codes against 3.48.
// Range: the caller pre-scales each 32-element word of x by 2^(kE2M1UnbiasLog2 - E), E the
// exponent of the word's largest |x| (schedule_stream.cuh store_xh2), so the decoded values (e2m1
// * 2^-kE2M1UnbiasLog2) times the inputs are w * x * 2^-E: |product| < 12, a block's two 8-term
// half sums < 96, far inside f16, and every input within 2^14 of the word's max stays a normal
// f16. The word's factor f = 2^E returns the sum to scale; it multiplies the block scale (exact:
// a power of two), so the row needs no unbias: row_scale(g) = g.
// log2(e2m1_unbias()): the exponent the inputs are lifted to, so the biased decode needs no unbias
constexpr int kE2M1UnbiasLog2 = MONOLITH_HAS_E2M1_CVT ? 0 : 14;
static_assert(MONOLITH_HAS_E2M1_CVT || float(1 << kE2M1UnbiasLog2) == kE2M1F16Bias, "the lift is the decode's bias");

// acc + the products of 8 E2M1 weights in w with their inputs x: pair k = (element k, element k + 4)
// of w meets the half2 in x's 32-bit word k (fused f16 FMAs in pair order k = 0..3).
__device__ __forceinline__ __half2 hdot8_e2m1(uint32_t w, uint4 x, __half2 acc) {
  __half2 p[4];
  e2m1x8_to_half2x4(w, p);
  acc = __hfma2(p[0], u32_as_half2(x.x), acc);
  acc = __hfma2(p[1], u32_as_half2(x.y), acc);
  acc = __hfma2(p[2], u32_as_half2(x.z), acc);
  acc = __hfma2(p[3], u32_as_half2(x.w), acc);
  return acc;
}

// WeightsNvfp4: `nvfp4-e2m1-b16-e4m3`, layout nvfp4-rowmajor-v1 (quant/nvfp4_layout.py): two E2M1
// codes per byte, one E4M3 block scale per 16 weights (a buffer of its own), one fp32 tensor scale
// per matrix. One 16-byte load is 32 weights = two whole blocks, so it meets exactly two scale
// bytes (one aligned u16). The order of operations is quant/nvfp4_kernel_model.py's kernel_gemv,
// so that model predicts the kernel bit for bit: per block an fp32 accumulator from 0 over the
// block's two u32s (dot8_e2m1_biased's pair order), then acc = fmaf(a_b, e4m3(s_b), acc) per
// block; the caller reduces over lanes and multiplies the row once by row_scale(g) = g *
// e2m1_unbias() (2^14 on sm_90: a power of two, so exact), like fp8's row scale. The LM head and
// the embedding stay FP8 (issue 14): Head is WeightsE4M3.
struct WeightsNvfp4 {
  using Elem = uint8_t;                        // two codes per byte: element 2j low nibble, 2j+1 high
  using Head = WeightsE4M3;
  static constexpr int kPer16B = 32;
  static constexpr int kBlock = 16;            // weights per block scale
  static constexpr bool kRowScale = true;      // reads StepParams::codes / row_scales / embed_codes / embed_scales
  static constexpr bool kBlockScaled = true;
  // acc + s0 * dot(block 0) + s1 * dot(block 1) of one 16-byte load w (elements 0..31 = a[0..7]),
  // bs2 = the two E4M3 block scales (low byte: block 0); not unbiased, not tensor-scaled
  static __device__ __forceinline__ float dot16B(uint4 w, const float4 (&a)[8], uint32_t bs2, float acc) {
    const float2 s = __half22float2(e4m3x2_to_half2(uint16_t(bs2)));  // exact: E4M3 -> f16 -> f32
    const float b0 = dot8_e2m1_biased(w.y, a[2], a[3], dot8_e2m1_biased(w.x, a[0], a[1], 0.f));
    acc = fmaf(b0, s.x, acc);
    const float b1 = dot8_e2m1_biased(w.w, a[6], a[7], dot8_e2m1_biased(w.z, a[4], a[5], 0.f));
    return fmaf(b1, s.y, acc);
  }
  // The half2 path's dot16B: xh[u] = the lifted inputs of u32 u of w (hdot8_e2m1's
  // pairs), f = their word's factor 2^E. Per block a half2 from 0 over its two u32s, then
  // fmaf(lo + hi, e4m3(s_b) * f, acc): quant/nvfp4_kernel_model.py kernel_gemv(half2=True).
  static __device__ __forceinline__ float dot16B_h2(uint4 w, const uint4 (&xh)[4], float f, uint32_t bs2, float acc) {
    const float2 s = __half22float2(e4m3x2_to_half2(uint16_t(bs2)));  // exact: E4M3 -> f16 -> f32
    const __half2 z = __float2half2_rn(0.f);
    const __half2 h0 = hdot8_e2m1(w.y, xh[1], hdot8_e2m1(w.x, xh[0], z));
    acc = fmaf(__low2float(h0) + __high2float(h0), s.x * f, acc);
    const __half2 h1 = hdot8_e2m1(w.w, xh[3], hdot8_e2m1(w.z, xh[2], z));
    return fmaf(__low2float(h1) + __high2float(h1), s.y * f, acc);
  }
  // the factor a row's lane-reduced sum is multiplied by: the tensor scale, with the decode's
  // unbias on the fp32 path (the half2 path's word factors already undo it); kH2: the half2 path
  template <bool kH2>
  static __device__ __forceinline__ float row_scale(float g) { return kH2 ? g : g * e2m1_unbias(); }
};
static_assert(WeightsNvfp4::kPer16B == 2 * WeightsNvfp4::kBlock, "a 16-byte load of codes is two whole blocks");

// NVFP4 group scale: E4M3 block scale (one per 16 elements) * fp32 tensor/row scale * unbias.
// `global_scale` may be precomputed per row; the product is computed in fp32 (exact for the
// power-of-two unbias, one rounding for the rest).
__device__ __forceinline__ float nvfp4_group_scale(uint8_t block_scale_e4m3, float global_scale) {
  return e4m3_to_float(block_scale_e4m3) * (global_scale * e2m1_unbias());
}

}  // namespace monolith
