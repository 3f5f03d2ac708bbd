// monolith: the layers' input vectors in shared memory, as the GEMV rounds read them: fp32
// swizzled for NVFP4 rows (XFull, nv_swz), NVFP4's half2 words (XH2, store_xh2) and fp8's f16 words
// (XE16, store_xe), with the per-word exponent both f16 forms share (word_exp, pow2f).
//
// A header of its own so that a probe (probes/act_store.cu) times the kernel's own stores; it needs
// only dequant.cuh (kE2M1UnbiasLog2). Device code only.
#pragma once
#include <cstdint>
#include <cuda_fp16.h>

#include "dequant.cuh"

namespace monolith {

// NVFP4: one lane's 32 inputs of a 16-byte word of codes (elements 32 i .. 32 i + 31 of v), fp32 as
// the kernel model multiplies them. A K = 1024 row is one word per lane (i = lane), so the inputs of
// a phase's rows are the same for every row: registers, loaded once per phase (32 of them).
// In shared memory those vectors are swizzled (nv_swz): float4 j of the 32 elements 32 i .. sits at
// float4 8 i + (j ^ (i % 8)), so the 8 lanes of a quarter-warp, reading their float4 j at once, hit
// 8 different 16-byte bank groups; linear, all 8 would hit the same one (an 8-way conflict, ~2 us
// per 128-row round at 16 warps). The swizzle stays inside each 128-byte line, so the writers (one
// warp per 32 consecutive elements) stay conflict-free too.
struct XFull {
  float4 v[8];
};
__device__ __forceinline__ int nv_swz(int e) {  // where element e of a swizzled vector is stored
  const int i = e >> 5, j = (e >> 2) & 7;
  return (i << 5) | ((j ^ (i & 7)) << 2) | (e & 3);
}
__device__ __forceinline__ XFull load_x32(const float* v, int i) {
  const float4* x4 = reinterpret_cast<const float4*>(v) + 8 * i;
  XFull x;
#pragma unroll
  for (int j = 0; j < 8; ++j) x.v[j] = x4[j ^ (i & 7)];
  return x;
}
// NVFP4's half2 inputs (dequant.cuh's dot16B_h2): a vector of kWords 32-element words,
// each stored as 16 half2 in the pair order of the codes (16-byte chunk c = the pairs (8c + k,
// 8c + k + 4), k = 0..3, the inputs of the word's u32 c), lifted by 2^(kE2M1UnbiasLog2 - E), E
// the exponent of the word's largest |x|; after the kWords * 16 half2, kWords floats: word i's
// factor 2^E. Half the floats of the vector plus kWords, so it lives in the float array it stands
// in for (sm.x, sm.attn, sm.act). Chunk c of word i sits at chunk 4 i + (c ^ ((i >> 1) & 3)): the
// 8 lanes of a quarter-warp, reading chunk c of 8 consecutive words (64 bytes apart), hit 8
// different 16-byte bank groups; linear, they would hit 2 (a 4-way conflict).
struct XH2 {
  uint4 c[4];
  float f;
};
// E clamped so that 2^E and the lift stay normal fp32 (a word of zeros has E = -127)
constexpr int kNvXExpClamp = 100;
template <int kWords>
__device__ __forceinline__ XH2 load_xh2(const float* buf, int i) {
  const uint4* c4 = reinterpret_cast<const uint4*>(buf) + 4 * i;
  XH2 x;
#pragma unroll
  for (int c = 0; c < 4; ++c) x.c[c] = c4[c ^ ((i >> 1) & 3)];
  x.f = buf[kWords * 16 + i];
  return x;
}
// Word i's element 32 i + lane is v; called by all 32 lanes of a warp. The word's max |x| is one
// redux.sync on the bit patterns (non-negative floats order as their bits), and each lane stores
// its own f16 (element k and k + 4 share a 32-bit word, low and high half: no shuffle): reducing
// with 5 shuffles and pairing with a 6th made the down phase's activation hop ~1 us longer (X-ray).
// The exponent E of the largest |v| over the warp's 32 lanes (one word), clamped; every lane gets it.
__device__ __forceinline__ int word_exp(float v) {
  const uint32_t m = __reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(v)));
  return min(max(int(m >> 23) - 127, -kNvXExpClamp), kNvXExpClamp);  // m < 2^31: no sign bit
}
// 2^e as fp32 from its exponent bits (e in the normal range): exact
__device__ __forceinline__ float pow2f(int e) { return __uint_as_float(uint32_t(127 + e) << 23); }
// Both f16 forms' store of word i (element 32 i + lane = v, all 32 lanes): lifted by
// 2^(kLiftLog2 - E), at store_xh2's pair-ordered, swizzled places (kPairPlaces) or in element order
// (store_xe's); the word's factor 2^E after the kWords * 16 half2.
template <int kWords, int kLiftLog2, bool kPairPlaces>
__device__ __forceinline__ void store_word_f16(float* buf, int i, float v) {
  const int lane = threadIdx.x & 31;
  const int e = word_exp(v);
  const float lift = pow2f(kLiftLog2 - e);
  const int c = lane >> 3, k = lane & 3, hi = (lane >> 2) & 1;  // lane = 8 c + 4 hi + k
  const int at = kPairPlaces ? 2 * (16 * i + 4 * (c ^ ((i >> 1) & 3)) + k) + hi : 32 * i + lane;
  reinterpret_cast<__half*>(buf)[at] = __float2half_rn(v * lift);
  if (lane == 0) buf[kWords * 16 + i] = pow2f(e);
}
template <int kWords>
__device__ __forceinline__ void store_xh2(float* buf, int i, float v) {
  store_word_f16<kWords, kE2M1UnbiasLog2, true>(buf, i, v);
}

// fp8's half2 inputs (store_xe / load_xe16; policy.cuh's kE4M3Half2Phases picks the
// phases): a vector as f16 in element order, each 32-element word lifted by 2^-E (E the exponent of
// its max |x|), then kWords floats: word i's factor 2^E (the same place as XH2's). A lane's 16 inputs
// are two 16-byte loads (32 bytes apart across lanes: two wavefronts per quarter-warp, once per
// phase or per down row).
struct XE16 {
  uint32_t w[8];  // half2 of elements (2u, 2u + 1)
  float f;        // the word's factor
};
template <int kWords>
__device__ __forceinline__ void store_xe(float* buf, int i, float v) {  // no decode bias to lift by
  store_word_f16<kWords, 0, false>(buf, i, v);
}
template <int kWords>
__device__ __forceinline__ XE16 load_xe16(const float* buf, int e0) {  // elements e0 .. e0 + 15 (e0 % 16 == 0)
  const uint4* c = reinterpret_cast<const uint4*>(buf) + e0 / 8;
  const uint4 a = c[0], b = c[1];
  return XE16{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, buf[kWords * 16 + e0 / 32]};
}

}  // namespace monolith
