/*
Probe: can an sm_90 NVFP4 decode keep up with HBM? (issue 14, item 3)

The H200 has no e2m1 `cvt`; M0's bit trick + fp32 FMAs turned only ~3.3 TB/s of weights per second
in registers (results/m0_probes.json), below the ~4.3 TB/s the streaming read measured. This probe
checks and times three candidate decode + dot-product paths over the packed layout of
quant/nvfp4_layout.py (a lane's 16-byte word = 32 weights = two blocks of 16, their two E4M3 block
scales in one u16):

  A trick_f32  kernel/dequant.cuh as it was when this probe ran: the bit trick (f16 = e2m1 * 2^-14,
               pairs (k, k+4) of a u32, e2m1_pair_f16bits_trick), f16 -> f32, 8 fp32 FMAs per u32
               in dot8_e2m1_biased's order, block sum * block scale in fp32. Numerically the oracle's
               arithmetic (fp32 activations). (dequant.cuh's sm_90 decode is E's since; A calls the
               trick itself so the comparison stays.)
  B prmt_h2    a 16-entry table lookup with `prmt`: the f16 high bytes of the 8 magnitudes live in
               two registers, the masked codes are the selector (nibbles 1 and 3 -> bytes 1 and 3,
               nibbles 0 and 2 pick the table's 0x00), a second `prmt` in sign-replicate mode makes
               the sign bytes, one `lop3` merges: exact e2m1 values in f16x2 (pairs (1,3), (5,7),
               (0,2), (4,6)); then HFMA2 with f16 activations into a half2 per block.
  C trick_h2   the same bit trick as A (lop3/shift), but half2 math: HFMA2 straight on the biased
               values e2m1 * 2^-14 against activations pre-scaled by 2^kXShift (exact), so no
               conversion and no unbias per weight; the remaining 2^(14 - kXShift) folds into the
               row's fp32 tensor scale (once per row).
  D lop3_h2    C's math with a cheaper decode of the same values (bit for bit the trick's): the
               even nibbles' signs are copied 3 bits up into unused bit positions with one `lop3`
               bit-select (y = x with bits 6, 14, 22, 30 taken from x << 3), likewise the odd
               nibbles 1 and 5 (z: bits 10, 26), after which pairs (0,4), (2,6), (1,5) are one shift
               + one AND each; (3,7) stays the trick's shift + 2 lop3. 12 integer ops per u32
               instead of 15, 4 of them left shifts the compiler can issue as IMAD.SHL.
  E lop3_f32   D's decode with A's fp32 math (the oracle's numerics).
  B, C, D: a block's half2 sum goes to fp32 (lo + hi) and meets its block scale in one fp32 FMA;
  the scale pair comes from one `cvt.rn.f16x2.e4m3x2`. Numerics (CPU model: quant/nvfp4_kernel_model.py,
  half2=True): activations rounded to f16 and 8-term f16 sums, ~1e-4 relative on a K = 3072 row;
  C additionally needs |x| * 2^kXShift < 65504 (kXShift = 8: |x| < 256) and makes products below
  2^-14 * 2^(14 - kXShift) f16 subnormals (absolute error <= 2^-25 * 2^(14 - kXShift) per product).

Checks: every one of the 16 codes in every nibble position for each decode, bit-exact against a CPU
reference (A, C: f16 bits of e2m1 * 2^-14; B: of e2m1), and each path's 32-weight dot product
against fp64 (A: 1e-5 of sum |terms|; B, C: 4e-3, the f16 activations and sums). Before any GPU
call, D's decode also runs on the host (its lop3 through lop3_host with the same immLut) over the
same words, exhaustive per u32 half; a mismatch exits 1 there. --host-check stops after it (no GPU).

Throughput: 4 words (rows) per thread per iteration against one set of activations held in
registers (like a lane of the stream schedule), 132 x 4 blocks of 256 threads, weights
  --source reg   in registers, XORed with the loop counter each iteration (4 LOP3 per word: an
                 overhead of 1 ALU op per 8 weights that the kernel does not have), or
  --source smem  from shared memory (LDS.128 + LDS.U16 per word), like the ring's slots.
Reports Gweights/s and TB/s of weight bytes (codes only, 0.5 B/weight; and with the block scales,
0.5625 B/weight), to compare with HBM: at 4.3 TB/s the decode must sustain 7.6 Tweights/s.

Compile (what scripts/compile_all.py does for every probe, plus the link):
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I kernel -o e2m1_decode probes/e2m1_decode.cu
  (sm_120a compiles too; there the native cvt exists and C/B are only for comparison)
PTX / SASS instruction counts per 8 weights: python probes/e2m1_count.py (the k_count_* kernels).
Run:
  ./e2m1_decode [--json] [--reps N] [--iters N] [--host-check]
*/
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../kernel/dequant.cuh"

#define PROBE_NAME "e2m1_decode"
#include "probe_common.cuh"

constexpr int kXShift = 8;                    // C: activations pre-scaled by 2^kXShift in f16
constexpr int kThreads = 256;
constexpr int kRowsPerIter = 4;               // independent words (rows) per thread per iteration
constexpr int kSmemWords = 2048;              // 32 KB of codes per block (+ 4 KB of scales)

// ------------------------------- the decodes ------------------------------------------------
// B's table: byte c = high byte of f16(e2m1 magnitude c); the low byte of every value is 0.
constexpr uint32_t kLutLo = 0x3E3C3800u;      // 0, 0.5, 1, 1.5
constexpr uint32_t kLutHi = 0x46444240u;      // 2, 3, 4, 6

// lop3 immLuts are F(0xF0, 0xCC, 0xAA) with a = 0xF0, b = 0xCC, c = 0xAA (PTX ISA), checked here at
// compile time; lop3_host evaluates a table bit by bit so the host check in main runs the same ones.
constexpr uint32_t kLutOrAnd = 0xF8;  // a | (b & c)
constexpr uint32_t kLutSel = 0xD8;    // (a & ~c) | (b & c): b's bits where c is set, a's elsewhere
static_assert(kLutOrAnd == ((0xF0u | (0xCCu & 0xAAu)) & 0xFFu), "immLut of a | (b & c)");
static_assert(kLutSel == (((0xF0u & ~0xAAu) | (0xCCu & 0xAAu)) & 0xFFu), "immLut of (a & ~c) | (b & c)");
__host__ __device__ constexpr uint32_t lop3_host(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
  uint32_t d = 0;
  for (int i = 0; i < 8; ++i)  // minterm i: a if bit 2, b if bit 1, c if bit 0
    if ((lut >> i) & 1u) d |= ((i & 4) ? a : ~a) & ((i & 2) ? b : ~b) & ((i & 1) ? c : ~c);
  return d;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t lop3_or_and(uint32_t a, uint32_t b, uint32_t c) {  // a | (b & c)
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(kLutOrAnd));
  return d;
}

// B: out[0] = (e1, e3), out[1] = (e5, e7), out[2] = (e0, e2), out[3] = (e4, e6), exact e2m1 values.
// Magnitude: selector nibbles 1 and 3 are the two codes' magnitudes (sign bit masked, so prmt stays
// in plain byte-select mode), nibbles 0 and 2 are 0 -> the table's 0x00 low bytes. Sign: prmt in
// sign-replicate mode (selector bit 3) copies each odd nibble's sign (the msb of its byte) to a
// whole byte 0x00/0xFF at bytes 1 and 3 (bytes 0 and 2 come from the zero register); the even
// nibbles' signs are byte msbs of x << 4.
__device__ __forceinline__ void decode_prmt(uint32_t x, uint32_t out[4]) {
  const uint32_t x4 = x << 4;
  const uint32_t m13 = prmt(kLutLo, kLutHi, x & 0x7070u);
  const uint32_t m57 = prmt(kLutLo, kLutHi, (x >> 16) & 0x7070u);
  const uint32_t m02 = prmt(kLutLo, kLutHi, x4 & 0x7070u);
  const uint32_t m46 = prmt(kLutLo, kLutHi, (x4 >> 16) & 0x7070u);
  out[0] = lop3_or_and(m13, prmt(x, 0u, 0x9484u), 0x80008000u);
  out[1] = lop3_or_and(m57, prmt(x, 0u, 0xB4A4u), 0x80008000u);
  out[2] = lop3_or_and(m02, prmt(x4, 0u, 0x9484u), 0x80008000u);
  out[3] = lop3_or_and(m46, prmt(x4, 0u, 0xB4A4u), 0x80008000u);
}
// Element index (within the u32) of out[k]'s low and high half, for B.
__host__ __device__ constexpr int prmt_elem(int k, int hi) {
  return k == 0 ? (hi ? 3 : 1) : k == 1 ? (hi ? 7 : 5) : k == 2 ? (hi ? 2 : 0) : (hi ? 6 : 4);
}

// D and E: the trick's values with fewer integer ops (see the header). bitsel(a, b, m) = (a & ~m) | (b & m),
// immLut 0xD8. (It had 0xE2 = (a & b) | (c & ~b), a select on b: y and z were garbage, 713216 of the
// probe's 1048576 values wrong on the H200.) 12 integer ops per u32: shl (t), 2 lop3 (y, z), shift + and
// for each of out[0..2], shr + 2 lop3 for out[3]; the trick takes 15. On the host, bitsel evaluates
// kLutSel with lop3_host, so main's host check exercises the same table as the GPU.
__host__ __device__ __forceinline__ uint32_t bitsel(uint32_t a, uint32_t b, uint32_t m) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(m), "n"(kLutSel));
  return d;
#else
  return lop3_host(a, b, m, kLutSel);
#endif
}
__host__ __device__ __forceinline__ void decode_lop3(uint32_t x, uint32_t out[4]) {
  constexpr uint32_t kM = 0x8E008E00u;         // f16x2 sign + the 3 magnitude bits, both halves
  const uint32_t t = x << 3;
  const uint32_t y = bitsel(x, t, 0x40404040u);  // even nibbles: sign 4 bits above the magnitude's top
  const uint32_t z = bitsel(x, t, 0x04000400u);  // nibbles 1 and 5 likewise
  out[0] = (y << 9) & kM;                        // (e0, e4)
  out[1] = (z << 5) & kM;                        // (e1, e5)
  out[2] = (y << 1) & kM;                        // (e2, e6)
  out[3] = ((x >> 3) & 0x0E000E00u) | (x & 0x80008000u);  // (e3, e7): the trick's
}

// A and C: kernel/dequant.cuh's bit trick e2m1_pair_f16bits_trick on every arch: out[k] = (e_k, e_k+4) * 2^-14.
__device__ __forceinline__ void decode_trick(uint32_t x, uint32_t out[4]) {
  out[0] = monolith::e2m1_pair_f16bits_trick<0>(x);
  out[1] = monolith::e2m1_pair_f16bits_trick<1>(x);
  out[2] = monolith::e2m1_pair_f16bits_trick<2>(x);
  out[3] = monolith::e2m1_pair_f16bits_trick<3>(x);
}
__host__ __device__ constexpr int trick_elem(int k, int hi) { return k + 4 * hi; }

// ------------------------------- one word: 32 weights, two blocks ---------------------------
// Activations for one 32-weight word: fp32 for A (xf[j] = x[j]); for B and C as half2 pairs in
// each decode's pairing, per u32 m: xh[4m + k] = (x[8m + lo(k)], x[8m + hi(k)]).
struct ActF { float v[32]; };
struct ActH { __half2 v[16]; };

// CAND: 0 trick_f32, 1 prmt_h2, 2 trick_h2, 3 lop3_h2, 4 lop3_f32.
__host__ __device__ constexpr bool is_h2(int cand) { return cand >= 1 && cand <= 3; }

template <int CAND>
__device__ __forceinline__ float dot_word(uint4 w, uint32_t sc2, const ActF& xf, const ActH& xh, float y) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  const __half2 s2 = monolith::e4m3x2_to_half2(uint16_t(sc2));  // block scales of blocks 0 and 1
  const float s[2] = {__low2float(s2), __high2float(s2)};
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    if constexpr (CAND == 0 || CAND == 4) {  // dot8_e2m1_biased's order on the trick's / decode_lop3's pairs
      float a = 0.f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 2 * b + h;
        uint32_t d[4];
        if constexpr (CAND == 0) decode_trick(u[m], d);
        else decode_lop3(u[m], d);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __half22float2(monolith::u32_as_half2(d[k]));
          a = fmaf(f.x, xf.v[8 * m + k], a);
          a = fmaf(f.y, xf.v[8 * m + k + 4], a);
        }
      }
      y = fmaf(a, s[b], y);
    } else {
      __half2 acc = __float2half2_rn(0.f);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 2 * b + h;
        uint32_t d[4];
        if constexpr (CAND == 1) decode_prmt(u[m], d);
        else if constexpr (CAND == 2) decode_trick(u[m], d);
        else decode_lop3(u[m], d);
#pragma unroll
        for (int k = 0; k < 4; ++k) acc = __hfma2(monolith::u32_as_half2(d[k]), xh.v[4 * m + k], acc);
      }
      y = fmaf(__low2float(acc) + __high2float(acc), s[b], y);
    }
  }
  return y;
}

// Per-row factor applied once: A and C undo their decode bias (C: 2^(14 - kXShift)), B nothing.
__host__ __device__ constexpr float row_unbias(int cand) {
  return cand == 0 || cand == 4 ? 16384.f : cand == 1 ? 1.f : float(1 << (14 - kXShift));
}

template <int CAND>
__device__ __forceinline__ void make_acts(const float* x32, ActF& xf, ActH& xh) {
#pragma unroll
  for (int j = 0; j < 32; ++j) xf.v[j] = x32[j];
  const float pre = CAND == 2 || CAND == 3 ? float(1 << kXShift) : 1.f;
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int lo = CAND == 1 ? prmt_elem(k, 0) : trick_elem(k, 0);
      const int hi = CAND == 1 ? prmt_elem(k, 1) : trick_elem(k, 1);
      xh.v[4 * m + k] = __floats2half2_rn(x32[8 * m + lo] * pre, x32[8 * m + hi] * pre);
    }
}

// ------------------------------- correctness kernels ----------------------------------------
__global__ void k_decode(const uint32_t* words, int n, uint4* out_prmt, uint4* out_trick, uint4* out_lop3) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t d[4];
  decode_prmt(words[i], d);
  out_prmt[i] = make_uint4(d[0], d[1], d[2], d[3]);
  decode_trick(words[i], d);
  out_trick[i] = make_uint4(d[0], d[1], d[2], d[3]);
  decode_lop3(words[i], d);
  out_lop3[i] = make_uint4(d[0], d[1], d[2], d[3]);
}

template <int CAND>
__device__ __forceinline__ float dot_case(const uint4* w, const uint16_t* sc, const float* x, int i) {
  ActF xf;
  ActH xh;
  make_acts<CAND>(x + 32 * i, xf, xh);
  return dot_word<CAND>(w[i], sc[i], xf, xh, 0.f) * row_unbias(CAND);
}
__global__ void k_dots(const uint4* w, const uint16_t* sc, const float* x, int n, float* out /* [kCands][n] */) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = dot_case<0>(w, sc, x, i);
  out[n + i] = dot_case<1>(w, sc, x, i);
  out[2 * n + i] = dot_case<2>(w, sc, x, i);
  out[3 * n + i] = dot_case<3>(w, sc, x, i);
  out[4 * n + i] = dot_case<4>(w, sc, x, i);
}

// PTX/SASS counting (probes/e2m1_count.py): one u32 (8 weights) of decode + multiply-accumulate per
// kernel, activations and accumulator from memory so nothing folds; k_count_none is the baseline.
__global__ void k_count_none(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  out[0] = __uint_as_float(w[0]) + x[0] + __low2float(xh[0]);
}
__global__ void k_count_trick_f32(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  uint32_t d[4];
  decode_trick(w[0], d);
  float a = x[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(monolith::u32_as_half2(d[k]));
    a = fmaf(f.x, x[k], a);
    a = fmaf(f.y, x[k + 4], a);
  }
  out[0] = a + __low2float(xh[0]);
}
__global__ void k_count_prmt_h2(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  uint32_t d[4];
  decode_prmt(w[0], d);
  __half2 acc = xh[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc = __hfma2(monolith::u32_as_half2(d[k]), xh[k], acc);
  out[0] = __uint_as_float(monolith::half2_as_u32(acc)) + x[0];
}
__global__ void k_count_trick_h2(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  uint32_t d[4];
  decode_trick(w[0], d);
  __half2 acc = xh[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc = __hfma2(monolith::u32_as_half2(d[k]), xh[k], acc);
  out[0] = __uint_as_float(monolith::half2_as_u32(acc)) + x[0];
}
__global__ void k_count_lop3_h2(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  uint32_t d[4];
  decode_lop3(w[0], d);
  __half2 acc = xh[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc = __hfma2(monolith::u32_as_half2(d[k]), xh[k], acc);
  out[0] = __uint_as_float(monolith::half2_as_u32(acc)) + x[0];
}
__global__ void k_count_lop3_f32(const uint32_t* w, const float* x, const __half2* xh, float* out) {
  uint32_t d[4];
  decode_lop3(w[0], d);
  float a = x[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(monolith::u32_as_half2(d[k]));
    a = fmaf(f.x, x[k], a);
    a = fmaf(f.y, x[k + 4], a);
  }
  out[0] = a + __low2float(xh[0]);
}
// The per-word (32 weights) block epilogue of B and C: scale pair cvt, 2 x (lo + hi, fmaf).
__global__ void k_count_epilogue_h2(const uint16_t* sc, const __half2* acc, float* out) {
  const __half2 s2 = monolith::e4m3x2_to_half2(sc[0]);
  float y = out[1];
  y = fmaf(__low2float(acc[0]) + __high2float(acc[0]), __low2float(s2), y);
  y = fmaf(__low2float(acc[1]) + __high2float(acc[1]), __high2float(s2), y);
  out[0] = y;
}

// ------------------------------- throughput -------------------------------------------------
template <int CAND, bool SMEM>
__global__ void __launch_bounds__(kThreads) k_tput(const uint4* src, const uint16_t* src_sc, int iters, float* sink) {
  __shared__ uint4 s_w[kSmemWords];
  __shared__ uint16_t s_sc[kSmemWords];
  uint4 rw[kRowsPerIter];
  uint32_t rs[kRowsPerIter];
  if constexpr (SMEM) {
    for (int i = threadIdx.x; i < kSmemWords; i += blockDim.x) {
      s_w[i] = src[i];
      s_sc[i] = src_sc[i];
    }
    __syncthreads();
  } else {
#pragma unroll
    for (int r = 0; r < kRowsPerIter; ++r) {
      rw[r] = src[(threadIdx.x * kRowsPerIter + r) % kSmemWords];
      rs[r] = src_sc[(threadIdx.x * kRowsPerIter + r) % kSmemWords];
    }
  }
  float x32[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) x32[j] = 0.25f * float((threadIdx.x + 3 * j) % 13) - 1.5f;
  ActF xf;
  ActH xh;
  make_acts<CAND>(x32, xf, xh);
  float y[kRowsPerIter] = {};
  int idx = threadIdx.x;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int r = 0; r < kRowsPerIter; ++r) {
      uint4 w;
      uint32_t sc;
      if constexpr (SMEM) {
        const int j = (idx + r * kThreads) & (kSmemWords - 1);
        w = s_w[j];
        sc = s_sc[j];
      } else {
        const uint32_t t = uint32_t(it);
        w = make_uint4(rw[r].x ^ t, rw[r].y ^ t, rw[r].z ^ t, rw[r].w ^ t);  // new codes each iteration
        sc = rs[r];
      }
      y[r] = dot_word<CAND>(w, sc, xf, xh, y[r]);
    }
    if constexpr (SMEM) idx = (idx + kRowsPerIter * kThreads) & (kSmemWords - 1);
  }
  float t = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerIter; ++r) t += y[r];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = t * row_unbias(CAND);  // keeps the work observable
}

template <int CAND, bool SMEM>
static double time_tput(int blocks, int iters, const uint4* src, const uint16_t* sc, float* sink, int reps) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  k_tput<CAND, SMEM><<<blocks, kThreads>>>(src, sc, iters, sink);  // warm-up
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(e0));
    k_tput<CAND, SMEM><<<blocks, kThreads>>>(src, sc, iters, sink);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
}

// ------------------------------- CPU reference ----------------------------------------------
static double ref_e2m1(int code) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return ((code & 8) ? -1.0 : 1.0) * mag[code & 7];
}
static double ref_e4m3(uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0) return sign * m * std::ldexp(1.0, -9);
  return sign * (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}
// Exact f16 bits of a value that is representable (every e2m1 value, and e2m1 * 2^-14).
static uint16_t f16_bits(double v) {
  const uint16_t s = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a == 0.0) return s;
  int e;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int ex = e - 1 + 15;
  if (ex >= 1) return uint16_t(s | (ex << 10) | int((f * 2.0 - 1.0) * 1024.0));
  return uint16_t(s | int(a / std::ldexp(1.0, -24)));
}
static float f16_round(float v) { return __half2float(__float2half_rn(v)); }

// decode_lop3 run on the host (bitsel through lop3_host, same immLut) against the CPU table, for
// every word: the nibbles of a u32's low half only reach its outputs' low halves, the high half's
// the high halves, so the probe's words (every low half, every high half) are exhaustive.
static long host_check_lop3(const std::vector<uint32_t>& words) {
  long bad = 0;
  for (const uint32_t x : words) {
    uint32_t d[4];
    decode_lop3(x, d);
    for (int k = 0; k < 4; ++k)
      for (int hi = 0; hi < 2; ++hi)
        if (uint16_t(d[k] >> (16 * hi)) != f16_bits(ref_e2m1((x >> (4 * trick_elem(k, hi))) & 0xF) * std::ldexp(1.0, -14)))
          ++bad;
  }
  return bad;
}

int main(int argc, char** argv) {
  int reps = 5, iters = 2048;
  bool host_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--host-check")) host_only = true;
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: e2m1_decode [--json] [--reps N] [--iters N] [--host-check (no GPU: decode_lop3 on the host only)]\n");
      return 0;
    }
  }

  // ---- every code in every nibble: words i | i << 16 and i | ~i << 16 (as probes/cvt.cu)
  const int nw = 2 * 65536;
  std::vector<uint32_t> words(nw);
  for (uint32_t i = 0; i < 65536; ++i) {
    words[i] = i | (i << 16);
    words[65536 + i] = i | ((~i & 0xFFFFu) << 16);
  }
  // ---- decode_lop3 on the host first: a wrong bit trick fails here, before any GPU time
  const long bad_lop3_host = host_check_lop3(words);
  if (host_only || bad_lop3_host) {
    if (g_json)
      printf("{\"probe\": \"e2m1_decode\", \"ok\": %s, \"host_check\": {\"checked\": %d, \"lop3_mismatches\": %ld}}\n",
             bad_lop3_host ? "false" : "true", nw * 8, bad_lop3_host);
    else
      printf("host check, decode_lop3 vs CPU table (%d values): %ld mismatches  %s\n", nw * 8, bad_lop3_host,
             bad_lop3_host ? "FAIL (no GPU run)" : "OK");
    return bad_lop3_host ? 1 : 0;
  }

  int dev = 0, sms = 0, clock_khz = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  uint32_t* d_words;
  uint4 *d_p, *d_t, *d_l;
  CUDA_CHECK(cudaMalloc(&d_words, nw * 4));
  CUDA_CHECK(cudaMalloc(&d_p, nw * 16));
  CUDA_CHECK(cudaMalloc(&d_t, nw * 16));
  CUDA_CHECK(cudaMalloc(&d_l, nw * 16));
  CUDA_CHECK(cudaMemcpy(d_words, words.data(), nw * 4, cudaMemcpyHostToDevice));
  k_decode<<<(nw + 255) / 256, 256>>>(d_words, nw, d_p, d_t, d_l);
  CUDA_CHECK(cudaGetLastError());
  std::vector<uint4> dp(nw), dt(nw), dl(nw);
  CUDA_CHECK(cudaMemcpy(dp.data(), d_p, nw * 16, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(dt.data(), d_t, nw * 16, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(dl.data(), d_l, nw * 16, cudaMemcpyDeviceToHost));
  long bad_prmt = 0, bad_trick = 0, bad_lop3 = 0;
  int code_seen[16] = {};
  for (int i = 0; i < nw; ++i) {
    const uint32_t gp[4] = {dp[i].x, dp[i].y, dp[i].z, dp[i].w}, gt[4] = {dt[i].x, dt[i].y, dt[i].z, dt[i].w};
    const uint32_t gl[4] = {dl[i].x, dl[i].y, dl[i].z, dl[i].w};
    for (int k = 0; k < 4; ++k)
      for (int hi = 0; hi < 2; ++hi) {
        const int ep = prmt_elem(k, hi), et = trick_elem(k, hi);
        const int cp = (words[i] >> (4 * ep)) & 0xF, ct = (words[i] >> (4 * et)) & 0xF;
        ++code_seen[cp];
        const uint16_t want_t = f16_bits(ref_e2m1(ct) * std::ldexp(1.0, -14));
        if (uint16_t(gp[k] >> (16 * hi)) != f16_bits(ref_e2m1(cp))) ++bad_prmt;
        if (uint16_t(gt[k] >> (16 * hi)) != want_t) ++bad_trick;
        if (uint16_t(gl[k] >> (16 * hi)) != want_t) ++bad_lop3;
      }
  }
  bool all_codes = true;
  for (int c = 0; c < 16; ++c) all_codes = all_codes && code_seen[c] > 0;

  // ---- dot products of one word (32 weights, 2 blocks) against fp64
  constexpr int kCands = 5;
  const char* names[kCands] = {"trick_f32", "prmt_h2", "trick_h2", "lop3_h2", "lop3_f32"};
  const int nd = 8192;
  std::vector<uint4> w(nd);
  std::vector<uint16_t> sc(nd);
  std::vector<float> x(32 * nd);
  uint64_t lcg = 0x9E3779B97F4A7C15ull;
  auto rnd = [&]() { lcg = lcg * 6364136223846793005ull + 1442695040888963407ull; return uint32_t(lcg >> 32); };
  for (int i = 0; i < nd; ++i) {
    w[i] = make_uint4(rnd(), rnd(), rnd(), rnd());
    sc[i] = uint16_t((0x08 + rnd() % 0x70) | ((0x08 + rnd() % 0x70) << 8));  // positive normal scales
    for (int j = 0; j < 32; ++j) x[32 * i + j] = float(int(rnd() % 2001) - 1000) / 64.0f;  // |x| < 16
  }
  uint4* d_w;
  uint16_t* d_sc;
  float *d_x, *d_out;
  CUDA_CHECK(cudaMalloc(&d_w, nd * 16));
  CUDA_CHECK(cudaMalloc(&d_sc, nd * 2));
  CUDA_CHECK(cudaMalloc(&d_x, nd * 128));
  CUDA_CHECK(cudaMalloc(&d_out, kCands * nd * 4));
  CUDA_CHECK(cudaMemcpy(d_w, w.data(), nd * 16, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_sc, sc.data(), nd * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_x, x.data(), nd * 128, cudaMemcpyHostToDevice));
  k_dots<<<(nd + 127) / 128, 128>>>(d_w, d_sc, d_x, nd, d_out);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(kCands * nd);
  CUDA_CHECK(cudaMemcpy(out.data(), d_out, kCands * nd * 4, cudaMemcpyDeviceToHost));
  double worst[kCands] = {};
  for (int i = 0; i < nd; ++i) {
    const uint32_t u[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
    double r = 0, rh = 0, mag = 0;
    for (int j = 0; j < 32; ++j) {
      const double v = ref_e2m1((u[j / 8] >> (4 * (j % 8))) & 0xF) * ref_e4m3(uint8_t(sc[i] >> (8 * (j / 16))));
      r += v * x[32 * i + j];
      rh += v * f16_round(x[32 * i + j]);  // the half2 paths multiply f16-rounded activations
      mag += std::fabs(v * x[32 * i + j]);
    }
    mag = std::max(mag, 1e-30);
    for (int c = 0; c < kCands; ++c)
      worst[c] = std::max(worst[c], std::fabs(out[c * nd + i] - (is_h2(c) ? rh : r)) / mag);
  }
  bool ok_dot = true;
  for (int c = 0; c < kCands; ++c) ok_dot = ok_dot && worst[c] < (is_h2(c) ? 4e-3 : 1e-5);

  // ---- throughput
  const int blocks = sms * 4;
  uint4* d_src;
  uint16_t* d_ssc;
  float* d_sink;
  CUDA_CHECK(cudaMalloc(&d_src, kSmemWords * 16));
  CUDA_CHECK(cudaMalloc(&d_ssc, kSmemWords * 2));
  CUDA_CHECK(cudaMalloc(&d_sink, size_t(blocks) * kThreads * 4));
  CUDA_CHECK(cudaMemcpy(d_src, w.data(), kSmemWords * 16, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_ssc, sc.data(), kSmemWords * 2, cudaMemcpyHostToDevice));
  const double words_done = double(blocks) * kThreads * iters * kRowsPerIter;
  struct Tp { const char* name; const char* source; double t; };
  const Tp tps[2 * kCands] = {
      {names[0], "reg", time_tput<0, false>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[1], "reg", time_tput<1, false>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[2], "reg", time_tput<2, false>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[3], "reg", time_tput<3, false>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[4], "reg", time_tput<4, false>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[0], "smem", time_tput<0, true>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[1], "smem", time_tput<1, true>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[2], "smem", time_tput<2, true>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[3], "smem", time_tput<3, true>(blocks, iters, d_src, d_ssc, d_sink, reps)},
      {names[4], "smem", time_tput<4, true>(blocks, iters, d_src, d_ssc, d_sink, reps)},
  };

  const bool ok_codes = bad_prmt == 0 && bad_trick == 0 && bad_lop3 == 0 && all_codes;
  const bool ok = ok_codes && ok_dot;
  if (g_json) {
    printf("{\"probe\": \"e2m1_decode\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, \"clock_mhz\": %d, ",
           ok ? "true" : "false", prop.name, sms, clock_khz / 1000);
    printf("\"codes\": {\"ok\": %s, \"checked\": %d, \"prmt_mismatches\": %ld, \"trick_mismatches\": %ld, "
           "\"lop3_mismatches\": %ld}, ", ok_codes ? "true" : "false", nw * 8, bad_prmt, bad_trick, bad_lop3);
    printf("\"dot\": {\"ok\": %s, \"cases\": %d, \"worst_rel\": {", ok_dot ? "true" : "false", nd);
    for (int c = 0; c < kCands; ++c) printf("%s\"%s\": %.3e", c ? ", " : "", names[c], worst[c]);
    printf("}}, \"throughput\": {\"blocks\": %d, \"threads\": %d, \"rows_per_iter\": %d, \"iters\": %d, \"runs\": [",
           blocks, kThreads, kRowsPerIter, iters);
    for (int i = 0; i < 2 * kCands; ++i)
      printf("%s{\"decode\": \"%s\", \"source\": \"%s\", \"s\": %.6e, \"tweights_per_s\": %.3f, \"tbs_codes\": %.3f, "
             "\"tbs_codes_scales\": %.3f}", i ? ", " : "", tps[i].name, tps[i].source, tps[i].t,
             words_done * 32 / tps[i].t * 1e-12, words_done * 16 / tps[i].t * 1e-12, words_done * 18 / tps[i].t * 1e-12);
    printf("]}}\n");
  } else {
    printf("device: %s (%d SMs, %d MHz)\n", prop.name, sms, clock_khz / 1000);
    printf("16 codes in every nibble (%d values): prmt %ld, trick %ld, lop3 %ld mismatches  %s\n", nw * 8, bad_prmt,
           bad_trick, bad_lop3, ok_codes ? "OK" : "FAIL");
    printf("dot of 32 weights vs fp64 (tol 1e-5 fp32 paths, 4e-3 half2 paths):");
    for (int c = 0; c < kCands; ++c) printf(" %s %.2e", names[c], worst[c]);
    printf("  %s\n", ok_dot ? "OK" : "FAIL");
    printf("decode + dot throughput (%d x %d threads, %d rows per iteration):\n", blocks, kThreads, kRowsPerIter);
    for (const Tp& tp : tps)
      printf("  %-9s %-4s %7.3f Tweights/s = %6.2f TB/s codes, %6.2f TB/s codes+scales\n", tp.name, tp.source,
             words_done * 32 / tp.t * 1e-12, words_done * 16 / tp.t * 1e-12, words_done * 18 / tp.t * 1e-12);
  }
  return ok ? 0 : 1;
}
