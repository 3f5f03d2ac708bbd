// Probe (issue 48, step 0): one GEMV round of the streaming consumers for k activation vectors on
// the tensor cores. With k vectors the per-lane FMA dot products of today's round grow k-fold;
// mma.sync.m16n8k16 multiplies a 16 x 16 weight tile by 8 columns at once, so k <= 8 vectors cost
// the same mma count as one: the weights are the A operand (bf16 as they land, or E4M3 widened to
// f16 by cvt in registers), the k vectors are B's columns, columns k..7 zero. The round:
//   weights  64 KB, as a round of 4 ring slots: 32 bf16 rows or 64 E4M3 rows (row scale in fp32)
//            of K = 1,024, in shared memory with each row's 32-element chunks swizzled (chunk c of
//            row r at c ^ (r & 1) for bf16, c ^ (r & 3) for E4M3: the packer's order, free at
//            run time) so that the 8 rows of a fragment load without bank conflicts;
//   x        the 8 vectors as bf16 (f16 for E4M3) hi = rn(x) and lo = rn(x - hi), 2 KB per vector,
//            chunks swizzled by c ^ (j & 1); the products keep ~16 (bf16) / ~22 (f16) bits of x,
//            the kernel multiplies by fp32 x;
//   warps    16 consumer warps; warp w takes the K range 128 (w / 2) (4 chunks of 32, 2 mma
//            each) and M tile w % 2 (bf16) or tiles 2 (w % 2), + 1 (E4M3); the hi and lo products
//            accumulate in two independent chains (shorter dependent mma chains), added hi + lo at
//            the end; each warp's partial tile goes to shared memory in one of three layouts (Layout
//            below: today's, a padded transposed one, 16-byte fragment vectors), then the K ranges are
//            added in a fixed order (x the row scale) and, for the k useful columns, each output is
//            stored as one 64-bit tagged word.
// B operand variants: "round" loads B's fragments from shared memory in every round (hi and lo:
// two mma per step); "hoisted" loads them once before the rounds (a phase's x does not change
// between its rounds and each warp keeps its K range: 32 registers per lane); "hoisted-hi" drops
// x's lo half (half the mma; a looser check, relative to sum |w| |x|).
// Loader (warp 16, lane 0): idle, or 4 x 16 KB bulk copies in flight (a smaller ring than the
// kernel's: the weights, x and partials take the rest of shared memory).
// Stamps (thread 0, clock64): opening barrier -> warp 0's last mma issued (mma), -> partials published
// (dots), -> words stored and a barrier (stores); medians and p90 over rounds and blocks; the SM clock over the run from block
// 0's clock64 against %globaltimer (mma.sync holds this H200 at 1.80 GHz: results/m4_tc_clock.json).
// Checks: every stored word's tag and value against a CPU dot product in double (hi+lo: rel. err
// < 1e-4 of max(1, |y|); hi: < 5e-3 of sum |w| |x|), and, in one launch with a configuration per
// block, BITWISE: column j alone (k = 1, the other 7 columns zero) equals column j beside 7 random
// neighbours (batch invariance), vector j in column 0 alone equals it in column j (slot
// invariance), every block with the same configuration stores the same bits (determinism), and
// every layout stores layout 0's bits (the same additions in the same order).
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I probes \
//          -o /tmp/gemv_k probes/gemv_k.cu
// Run:   /tmp/gemv_k [--json] [--rounds 200]      (seconds on an H200)
#define PROBE_NAME "gemv_k"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "probe_common.cuh"
#include "ktoken_common.cuh"

constexpr int kConsumerWarps = 16, kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kK = 1024, kCols = 8, kRoundBytes = 64 * 1024;
constexpr int kRowsBf16 = kRoundBytes / (2 * kK), kRowsE4 = kRoundBytes / kK;  // 32, 64
constexpr int kKRanges = kConsumerWarps / 2, kKW = kK / kKRanges, kChunks = kKW / 32;  // 8 ranges of 128: 4 chunks
constexpr int kLoaderSlots = 4, kLoaderSlotBytes = 16 * 1024;
constexpr size_t kLoadBufBytes = size_t(1) << 30;
constexpr int kStamps = 4;
constexpr int kConfs = 1 + 2 * kCols;  // the check launch: all 8 random, each j alone in j, each j alone in 0

struct Smem {
  uint4 w[kRoundBytes / 16];                      // the round's weights (swizzled chunks)
  uint4 ring[kLoaderSlots][kLoaderSlotBytes / 16];  // the loader's copies land here
  uint4 x[2][kCols][kK * 2 / 16];                 // [hi, lo][vector][1,024 bf16 / f16] (swizzled chunks)
  alignas(16) float part[kKRanges * kCols * (kRowsE4 + 4)];  // the K ranges' partial tiles: see Layout
  float scale[kRowsE4];
  uint64_t full[kLoaderSlots];
  int stop, hold;
};

struct Params {
  const uint16_t* w;        // [32][1024] bf16, row-major (logical order)
  const uint8_t* codes;     // [64][1024] E4M3
  const float* scales;      // [64]
  const float* x;           // [confs][8][1024]: block b uses configuration b % confs
  const uint8_t* load_buf;
  unsigned long long* out;  // [blocks][8][rows] {value, tag} of the last round
  long long* stamps;        // [blocks][rounds][kStamps]
  unsigned long long* clk;  // block 0: globaltimer, clock64 at start and end
  unsigned long long* loaded;
  int rounds, k, confs, load;
  unsigned long long timeout_ns;
};

template <bool kF16>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (kF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// two E4M3 codes (low byte: the lower k) -> f16x2 (low half: the lower k)
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(two & 0xFFFFu)));
  return r;
}
// byte offset of row r's 32-element chunk c (bf16: 64-byte chunks, rows 2 KB apart; E4M3: 32-byte
// chunks, rows 1 KB apart), and of vector j's chunk c in an x plane
__host__ __device__ __forceinline__ int w_off(bool e4, int r, int c) { return e4 ? r * kK + ((c ^ (r & 3)) << 5) : r * 2 * kK + ((c ^ (r & 1)) << 6); }
__host__ __device__ __forceinline__ int x_off(int j, int c) { return j * 2 * kK + ((c ^ (j & 1)) << 6); }
__device__ __forceinline__ void csync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

// Layout of the partial tiles in shared memory (the round's outputs before the K ranges are added):
//   0 "rck"     part[row][column][K range]: the fragment stores hit 2 banks (16-way conflicts), the
//               reducer's lanes (32 rows of one column) read 256 B apart (one bank: 32-way);
//   1 "krc-pad" part[K range][column][row], columns kRows + 4 floats apart: a fragment store's lanes
//               (g, t) land in bank 8t + g + const (conflict-free), the reducer's lanes read 32
//               consecutive floats (conflict-free);
//   2 "frag16"  part[K range][M tile][lane] as float4 {c0, c1, c2, c3}: one 16-byte store per lane
//               and tile (512 contiguous bytes: 4 wavefronts, the minimum); a reducer lane of tile T
//               reads the same lane slot of every K range (8 x 16 B) and owns that lane's 4 outputs.
// Every layout adds the K ranges in the order 0 .. 7 and scales last, so all three store the same bits.
enum Layout { kRck = 0, kKrcPad = 1, kFrag16 = 2, kLayouts = 3 };

// kB: 0 B loaded in the round (hi + lo), 1 hoisted (hi + lo), 2 hoisted, hi only
template <bool kE4, int kB, int kL>
__global__ void __launch_bounds__(kThreads, 1) gemv_k_kernel(Params p) {
  constexpr int kRows = kE4 ? kRowsE4 : kRowsBf16, kTiles = kE4 ? 2 : 1;  // M tiles per warp
  constexpr bool kLo = kB != 2, kHoist = kB != 0;
  constexpr int kCS = kRows + 4;          // krc-pad: the column stride (4 mod 32 banks)
  constexpr int kTilesAll = kRows / 16;   // frag16: M tiles per round
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  uint8_t* wb = reinterpret_cast<uint8_t*>(sm.w);
  // the weights, swizzled (16-byte pieces: a bf16 chunk is 4 of them, an E4M3 chunk 2)
  for (int i = tid; i < kRoundBytes / 16; i += kThreads) {
    const int r = kE4 ? i / (kK / 16) : i / (2 * kK / 16), piece = kE4 ? i % (kK / 16) : i % (2 * kK / 16);
    const int c = kE4 ? piece / 2 : piece / 4, sub = kE4 ? piece % 2 : piece % 4;
    const uint4 v = kE4 ? reinterpret_cast<const uint4*>(p.codes)[i] : reinterpret_cast<const uint4*>(p.w)[i];
    *reinterpret_cast<uint4*>(wb + w_off(kE4, r, c) + 16 * sub) = v;
  }
  if constexpr (kE4)
    for (int i = tid; i < kRowsE4; i += kThreads) sm.scale[i] = p.scales[i];
  {  // x of this block's configuration: hi and lo as bf16 (f16 for E4M3), swizzled
    const float* xs = p.x + size_t(blockIdx.x % p.confs) * kCols * kK;
    for (int i = tid; i < kCols * kK; i += kThreads) {
      const int j = i / kK, e = i % kK, off = x_off(j, e / 32) + 2 * (e % 32);
      const float v = xs[i];
      uint16_t hb, lb;
      if constexpr (kE4) {
        const __half h = __float2half_rn(v), l = __float2half_rn(v - __half2float(h));
        hb = __half_as_ushort(h);
        lb = __half_as_ushort(l);
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(v), l = __float2bfloat16_rn(v - __bfloat162float(h));
        hb = __bfloat16_as_ushort(h);
        lb = __bfloat16_as_ushort(l);
      }
      *reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(sm.x[0]) + off) = hb;
      *reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(sm.x[1]) + off) = lb;
    }
  }
  if (tid == 0) {
    for (int i = 0; i < kLoaderSlots; ++i) kt::mbar_init(&sm.full[i], 1);
    sm.stop = 0;
    sm.hold = 0;
    kt::mbar_fence_init();
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0 && p.load)
      kt::ring_loader<kLoaderSlots, kLoaderSlotBytes>(p.load_buf, kLoadBufBytes, reinterpret_cast<uint8_t*>(sm.ring), sm.full,
                                                      &sm.stop, &sm.hold, 0, p.timeout_ns, p.loaded);
    return;
  }
  {  // let the loader reach its steady state (~20 us), as probes/round_gemv.cu
    const long long t0 = clock64();
    while (clock64() - t0 < 40000) {
    }
  }
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[0] = globaltimer();
    p.clk[1] = clock64();
  }
  const int g = lane >> 2, t = lane & 3, kq = warp >> 1, tile0 = (warp & 1) * kTiles;
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(sm.x);
  // lane (g, t)'s B fragments of chunk c: vector g's elements 8t .. 8t + 7 of the chunk, hi or lo
  auto load_b = [&](int c, int lo) -> uint4 {
    return *reinterpret_cast<const uint4*>(xb + lo * (kCols * 2 * kK) + x_off(g, kChunks * kq + c) + 16 * t);
  };
  uint4 bh[kHoist ? kChunks : 1][kHoist ? (kLo ? 2 : 1) : 1];
  if constexpr (kHoist) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      bh[c][0] = load_b(c, 0);
      if constexpr (kLo) bh[c][kLo ? 1 : 0] = load_b(c, 1);
    }
  }
  for (int r = 0; r < p.rounds; ++r) {
    csync();  // the opening barrier
    const long long t0 = clock64();
    float acc[kTiles][kLo ? 2 : 1][4] = {};  // hi and lo products in two chains (added at the end, hi + lo)
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int cg = kChunks * kq + c;  // the row's chunk
      uint4 b[2];
      if constexpr (kHoist) {
        b[0] = bh[c][0];
        b[1] = bh[c][kLo ? 1 : 0];
      } else {
        b[0] = load_b(c, 0);
        b[1] = load_b(c, 1);
      }
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int R0 = 16 * (tile0 + i) + g, R1 = R0 + 8;
        uint32_t a0[4], a1[4];  // rows g and g + 8: elements 8t .. 8t + 7 of the chunk as 4 pairs
        if constexpr (kE4) {
          const uint2 v0 = *reinterpret_cast<const uint2*>(wb + w_off(true, R0, cg) + 8 * t);
          const uint2 v1 = *reinterpret_cast<const uint2*>(wb + w_off(true, R1, cg) + 8 * t);
          a0[0] = e4m3x2_f16x2(v0.x), a0[1] = e4m3x2_f16x2(v0.x >> 16), a0[2] = e4m3x2_f16x2(v0.y), a0[3] = e4m3x2_f16x2(v0.y >> 16);
          a1[0] = e4m3x2_f16x2(v1.x), a1[1] = e4m3x2_f16x2(v1.x >> 16), a1[2] = e4m3x2_f16x2(v1.y), a1[3] = e4m3x2_f16x2(v1.y >> 16);
        } else {
          const uint4 v0 = *reinterpret_cast<const uint4*>(wb + w_off(false, R0, cg) + 16 * t);
          const uint4 v1 = *reinterpret_cast<const uint4*>(wb + w_off(false, R1, cg) + 16 * t);
          a0[0] = v0.x, a0[1] = v0.y, a0[2] = v0.z, a0[3] = v0.w;
          a1[0] = v1.x, a1[1] = v1.y, a1[2] = v1.z, a1[3] = v1.w;
        }
        // step s: physical pairs 2s, 2s + 1 of the lane's 8 elements are the fragment's k (2t, 2t + 1)
        // and (2t + 8, 2t + 9); B's registers carry the same elements of column g
        mma<kE4>(acc[i][0], a0[0], a1[0], a0[1], a1[1], b[0].x, b[0].y);
        mma<kE4>(acc[i][0], a0[2], a1[2], a0[3], a1[3], b[0].z, b[0].w);
        if constexpr (kLo) {
          mma<kE4>(acc[i][kLo ? 1 : 0], a0[0], a1[0], a0[1], a1[1], b[1].x, b[1].y);
          mma<kE4>(acc[i][kLo ? 1 : 0], a0[2], a1[2], a0[3], a1[3], b[1].z, b[1].w);
        }
      }
    }
    const long long tm = clock64();  // thread 0: its warp's last mma issued (the adds below wait for the results)
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {  // C: (row g, columns 2t, 2t + 1), (row g + 8, same)
      const int R0 = 16 * (tile0 + i) + g;
      float c[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) c[u] = kLo ? acc[i][0][u] + acc[i][kLo ? 1 : 0][u] : acc[i][0][u];
      if constexpr (kL == kRck) {
        sm.part[(R0 * kCols + 2 * t) * kKRanges + kq] = c[0];
        sm.part[(R0 * kCols + 2 * t + 1) * kKRanges + kq] = c[1];
        sm.part[((R0 + 8) * kCols + 2 * t) * kKRanges + kq] = c[2];
        sm.part[((R0 + 8) * kCols + 2 * t + 1) * kKRanges + kq] = c[3];
      } else if constexpr (kL == kKrcPad) {
        float* pk = sm.part + kq * kCols * kCS;
        pk[2 * t * kCS + R0] = c[0];
        pk[(2 * t + 1) * kCS + R0] = c[1];
        pk[2 * t * kCS + R0 + 8] = c[2];
        pk[(2 * t + 1) * kCS + R0 + 8] = c[3];
      } else {
        reinterpret_cast<float4*>(sm.part)[(kq * kTilesAll + tile0 + i) * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
      }
    }
    csync();  // publishes part
    const long long t1 = clock64();
    auto store_word = [&](int row, int col, float v) {
      const unsigned long long word = (unsigned long long)(uint32_t(r + 1)) << 32 | __float_as_uint(v);
      asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p.out + (size_t(blockIdx.x) * kCols + col) * kRowsE4 + row), "l"(word)
                   : "memory");
    };
    if constexpr (kL == kFrag16) {
      if (tid < kTilesAll * 32) {  // lane (g, t) of tile T: rows 16 T + g, + 8; columns 2t, 2t + 1
        const float4* pf = reinterpret_cast<const float4*>(sm.part) + tid;
        float4 v = pf[0];
#pragma unroll
        for (int u = 1; u < kKRanges; ++u) {
          const float4 w = pf[u * kTilesAll * 32];
          v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
        }
        const int row = 16 * (tid >> 5) + g, col = 2 * t;
        if constexpr (kE4) {
          const float s0 = sm.scale[row], s1 = sm.scale[row + 8];
          v.x *= s0, v.y *= s0, v.z *= s1, v.w *= s1;
        }
        if (col < p.k) store_word(row, col, v.x), store_word(row + 8, col, v.z);
        if (col + 1 < p.k) store_word(row, col + 1, v.y), store_word(row + 8, col + 1, v.w);
      }
    } else {
      for (int q = tid; q < kRows * kCols; q += kConsumers) {  // (row, column): the K ranges in order
        const int row = q % kRows, col = q / kRows;
        if (col < p.k) {
          float v;
          if constexpr (kL == kRck) {
            const float* pp = sm.part + (row * kCols + col) * kKRanges;
            v = pp[0];
#pragma unroll
            for (int u = 1; u < kKRanges; ++u) v += pp[u];
          } else {
            const float* pp = sm.part + col * kCS + row;
            v = pp[0];
#pragma unroll
            for (int u = 1; u < kKRanges; ++u) v += pp[u * kCols * kCS];
          }
          if constexpr (kE4) v *= sm.scale[row];
          store_word(row, col, v);
        }
      }
    }
    csync();
    if (tid == 0) {
      long long* st = p.stamps + (size_t(blockIdx.x) * p.rounds + r) * kStamps;
      const long long t2 = clock64();
      st[0] = t1 - t0;
      st[1] = t2 - t1;
      st[2] = t2 - t0;
      st[3] = tm - t0;
    }
  }
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[2] = globaltimer();
    p.clk[3] = clock64();
  }
  if (tid == 0) *(volatile int*)&sm.stop = 1;
}

// host: E4M3 code -> value (no NaN codes are generated)
static double e4m3_value(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
static double bf16_value(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  const int rounds = probe_int_arg(argc, argv, "--rounds", 200, 1, 100000);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int G = prop.multiProcessorCount;
  probe_require_smem(prop, sizeof(Smem));
  if (G < 2 * kConfs) {
    fprintf(stderr, "gemv_k: the check launch needs %d blocks (two per configuration)\n", 2 * kConfs);
    return 1;
  }
  using Fn = void (*)(Params);
#define GEMV_K_LAYOUTS(E, B) {gemv_k_kernel<E, B, kRck>, gemv_k_kernel<E, B, kKrcPad>, gemv_k_kernel<E, B, kFrag16>}
  const Fn kernels[2][3][kLayouts] = {{GEMV_K_LAYOUTS(false, 0), GEMV_K_LAYOUTS(false, 1), GEMV_K_LAYOUTS(false, 2)},
                                      {GEMV_K_LAYOUTS(true, 0), GEMV_K_LAYOUTS(true, 1), GEMV_K_LAYOUTS(true, 2)}};
#undef GEMV_K_LAYOUTS
  for (auto& fmt : kernels)
    for (auto& row : fmt)
      for (Fn f : row) CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))));
  const char* fmt_names[2] = {"bf16", "e4m3"};
  const char* b_names[3] = {"round", "hoisted", "hoisted-hi"};
  const char* layout_names[kLayouts] = {"rck", "krc-pad", "frag16"};
  uint32_t seed = 4848u;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1u << 24) * 2.f - 1.f;
  };
  std::vector<uint16_t> hw(size_t(kRowsBf16) * kK);
  for (auto& v : hw) {
    const __nv_bfloat16 b = __float2bfloat16_rn(rnd());
    memcpy(&v, &b, 2);
  }
  std::vector<uint8_t> hc(size_t(kRowsE4) * kK);
  for (auto& c : hc) {
    c = uint8_t(uint32_t((rnd() + 1.f) * 128.f) & 0xFFu);
    if ((c & 0x7Fu) == 0x7Fu) c ^= 1u;
  }
  std::vector<float> hs(kRowsE4);
  for (auto& v : hs) v = 1.f + 0.5f * rnd();
  std::vector<float> vec(size_t(kCols) * kK);  // the 8 test vectors V_j
  for (auto& v : vec) v = rnd();
  // the CPU reference: y[fmt][j][row] and sum |w| |x| in double on the weights' exact values
  std::vector<double> ref[2], mag[2];
  for (int f = 0; f < 2; ++f) {
    const int rows = f ? kRowsE4 : kRowsBf16;
    ref[f].assign(size_t(kCols) * rows, 0.0);
    mag[f].assign(size_t(kCols) * rows, 0.0);
    for (int j = 0; j < kCols; ++j)
      for (int r = 0; r < rows; ++r) {
        double s = 0, m = 0;
        for (int e = 0; e < kK; ++e) {
          const double w = f ? e4m3_value(hc[size_t(r) * kK + e]) * hs[r] : bf16_value(hw[size_t(r) * kK + e]);
          s += w * vec[size_t(j) * kK + e];
          m += std::fabs(w * vec[size_t(j) * kK + e]);
        }
        ref[f][size_t(j) * rows + r] = s;
        mag[f][size_t(j) * rows + r] = m;
      }
  }
  Params p{};
  uint16_t* dw;
  uint8_t *dc, *buf;
  float *ds, *dx;
  CUDA_CHECK(cudaMalloc(&dw, hw.size() * 2));
  CUDA_CHECK(cudaMalloc(&dc, hc.size()));
  CUDA_CHECK(cudaMalloc(&ds, hs.size() * 4));
  CUDA_CHECK(cudaMalloc(&dx, size_t(kConfs) * kCols * kK * 4));
  CUDA_CHECK(cudaMalloc(&buf, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(buf, 1, kLoadBufBytes));
  CUDA_CHECK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dc, hc.data(), hc.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(ds, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
  const size_t out_words = size_t(G) * kCols * kRowsE4;
  CUDA_CHECK(cudaMalloc(&p.out, out_words * 8));
  CUDA_CHECK(cudaMalloc(&p.stamps, size_t(G) * rounds * kStamps * 8));
  CUDA_CHECK(cudaMalloc(&p.clk, 4 * 8));
  CUDA_CHECK(cudaMalloc(&p.loaded, 8));
  p.w = dw;
  p.codes = dc;
  p.scales = ds;
  p.x = dx;
  p.load_buf = buf;
  p.timeout_ns = 2000000000ull;
  // x configurations: timing with k useful columns (V_0 .. V_k-1, the rest zero); the check launch's
  // 17: all 8 random (conf 0), V_j alone in column j (1 + j), V_j alone in column 0 (9 + j)
  auto upload_x = [&](const std::vector<float>& x) { CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice)); };
  std::vector<unsigned long long> out(out_words);
  auto launch = [&](int f, int b, int L, int k, int confs, int load, int nrounds) -> double {
    p.k = k;
    p.confs = confs;
    p.load = load;
    p.rounds = nrounds;
    CUDA_CHECK(cudaMemset(p.out, 0xff, out_words * 8));  // poison
    CUDA_CHECK(cudaMemset(p.loaded, 0, 8));
    kernels[f][b][L]<<<G, kThreads, sizeof(Smem)>>>(p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long clk[4];
    CUDA_CHECK(cudaMemcpy(clk, p.clk, 32, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out.data(), p.out, out_words * 8, cudaMemcpyDeviceToHost));
    return double(clk[3] - clk[1]) / double(clk[2] - clk[0]);
  };
  auto word_value = [&](int blk, int col, int row, int nrounds, bool* tag_ok) {
    const unsigned long long w = out[(size_t(blk) * kCols + col) * kRowsE4 + row];
    *tag_ok = uint32_t(w >> 32) == uint32_t(nrounds);
    float v;
    const uint32_t lo = uint32_t(w);
    memcpy(&v, &lo, 4);
    return v;
  };
  // error of a stored value against the reference of vector j, row r
  auto rel_err = [&](int f, int b, int j, int r, float v) {
    const int rows = f ? kRowsE4 : kRowsBf16;
    const double y = ref[f][size_t(j) * rows + r];
    const double den = b == 2 ? mag[f][size_t(j) * rows + r] : std::max(1.0, std::fabs(y));
    return std::isfinite(v) ? std::fabs(double(v) - y) / den : INFINITY;
  };
  bool all_ok = true;
  if (g_json) printf("{\"probe\": \"gemv_k\", \"device\": \"%s\", \"blocks\": %d, \"rounds\": %d, \"rows\": [", prop.name, G, rounds);
  else
    printf("%-5s %-10s %-7s %2s %-6s | %5s | %18s | %18s | %7s | %9s %s\n", "fmt", "B", "layout", "k", "loader", "mma",
           "dots cyc (p90) us", "stores cyc (p90) us", "SM GHz", "max err", "check");
  int nrow = 0;
  std::vector<long long> st(size_t(G) * rounds * kStamps);
  std::vector<uint32_t> bits0(size_t(kConfs) * kCols * kRowsE4);  // the check launch's bits, layout 0
  for (int f = 0; f < 2; ++f)
    for (int b = 0; b < 3; ++b)
      for (int L = 0; L < kLayouts; ++L) {
      std::vector<std::pair<int, int>> runs;  // (k, load)
      for (int k = 1; k <= kCols; ++k) runs.push_back({k, 0});
      runs.push_back({1, 1});
      runs.push_back({kCols, 1});
      for (auto [k, load] : runs) {
        std::vector<float> x(size_t(kCols) * kK, 0.f);
        std::copy(vec.begin(), vec.begin() + size_t(k) * kK, x.begin());
        upload_x(x);
        const double ghz = launch(f, b, L, k, 1, load, rounds);
        CUDA_CHECK(cudaMemcpy(st.data(), p.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
        const int rows = f ? kRowsE4 : kRowsBf16;
        double worst = 0.0;
        for (int blk = 0; blk < G; ++blk)
          for (int j = 0; j < k; ++j)
            for (int r = 0; r < rows; ++r) {
              bool tag_ok;
              const float v = word_value(blk, j, r, rounds, &tag_ok);
              worst = std::max(worst, tag_ok ? rel_err(f, b, j, r, v) : INFINITY);
            }
        const bool ok = worst < (b == 2 ? 5e-3 : 1e-4);
        all_ok = all_ok && ok;
        double med[kStamps], p90[kStamps];
        for (int s = 0; s < kStamps; ++s) {
          std::vector<double> v;
          for (size_t i = 0; i < size_t(G) * rounds; ++i) v.push_back(double(st[i * kStamps + s]));
          med[s] = probe_quantile(v, 0.5);
          p90[s] = probe_quantile(v, 0.9);
        }
        if (g_json)
          printf("%s{\"kind\": \"timing\", \"fmt\": \"%s\", \"b\": \"%s\", \"layout\": \"%s\", \"k\": %d, \"loader\": \"%s\", \"rows_per_round\": %d, "
                 "\"dots_cycles\": %.0f, \"dots_p90_cycles\": %.0f, \"stores_cycles\": %.0f, \"stores_p90_cycles\": %.0f, "
                 "\"round_cycles\": %.0f, \"mma_cycles\": %.0f, \"sm_ghz\": %.4f, \"dots_us\": %.4f, \"stores_us\": %.4f, \"round_us\": %.4f, "
                 "\"max_rel_err\": %.3g, \"ok\": %s}",
                 nrow++ ? ", " : "", fmt_names[f], b_names[b], layout_names[L], k, load ? "stream" : "idle", rows, med[0], p90[0], med[1], p90[1],
                 med[2], med[3], ghz,
                 med[0] / ghz / 1e3, med[1] / ghz / 1e3, med[2] / ghz / 1e3, worst, ok ? "true" : "false");
        else
          printf("%-5s %-10s %-7s %2d %-6s | %5.0f | %6.0f (%5.0f) %5.3f | %6.0f (%5.0f) %5.3f | %7.4f | %9.2e %s\n", fmt_names[f],
                 b_names[b], layout_names[L], k, load ? "stream" : "idle", med[3], med[0], p90[0], med[0] / ghz / 1e3, med[1], p90[1], med[1] / ghz / 1e3, ghz, worst, ok ? "OK" : "FAIL");
      }
      // the bitwise checks: one launch, block blk in configuration blk % 17, 8 columns stored
      std::vector<float> x(size_t(kConfs) * kCols * kK, 0.f);
      std::copy(vec.begin(), vec.end(), x.begin());  // conf 0: all 8
      for (int j = 0; j < kCols; ++j) {
        std::copy(vec.begin() + size_t(j) * kK, vec.begin() + size_t(j + 1) * kK, x.begin() + (size_t(1 + j) * kCols + j) * kK);
        std::copy(vec.begin() + size_t(j) * kK, vec.begin() + size_t(j + 1) * kK, x.begin() + size_t(1 + kCols + j) * kCols * kK);
      }
      upload_x(x);
      const int crounds = 3;
      launch(f, b, L, kCols, kConfs, 0, crounds);
      const int rows = f ? kRowsE4 : kRowsBf16;
      long batch_diff = 0, slot_diff = 0, det_diff = 0, zero_diff = 0, neg_zero = 0, bad_tags = 0, layout_diff = 0;
      double worst = 0.0;
      auto bits = [&](int blk, int col, int row) { return uint32_t(out[(size_t(blk) * kCols + col) * kRowsE4 + row]); };
      for (int blk = 0; blk < G; ++blk) {
        const int conf = blk % kConfs;
        for (int col = 0; col < kCols; ++col)
          for (int r = 0; r < rows; ++r) {
            bool tag_ok;
            const float v = word_value(blk, col, r, crounds, &tag_ok);
            bad_tags += !tag_ok;
            if (bits(blk, col, r) != bits(conf, col, r)) ++det_diff;  // block `conf` is the first of its configuration
            if (blk < kConfs) {  // every layout adds in the same order: the same bits as layout 0
              uint32_t& ref0 = bits0[(size_t(blk) * kCols + col) * kRowsE4 + r];
              if (L == 0) ref0 = bits(blk, col, r);
              else layout_diff += bits(blk, col, r) != ref0;
            }
            // which vector this column holds (-1: a zero column)
            const int j = conf == 0 ? col : conf <= kCols ? (col == conf - 1 ? col : -1) : (col == 0 ? conf - 1 - kCols : -1);
            if (j < 0) {
              zero_diff += v != 0.f;                         // a zero column adds exact zeros
              neg_zero += bits(blk, col, r) == 0x80000000u;  // reported: which zero it is
              continue;
            }
            worst = std::max(worst, rel_err(f, b, j, r, v));
            if (conf >= 1 && conf <= kCols) batch_diff += bits(blk, col, r) != bits(0, j, r);
            if (conf > kCols) slot_diff += bits(blk, col, r) != bits(0, j, r);
          }
      }
      const bool ok = batch_diff == 0 && slot_diff == 0 && det_diff == 0 && zero_diff == 0 && bad_tags == 0 && layout_diff == 0 && worst < (b == 2 ? 5e-3 : 1e-4);
      all_ok = all_ok && ok;
      if (g_json)
        printf(", {\"kind\": \"invariance\", \"fmt\": \"%s\", \"b\": \"%s\", \"layout\": \"%s\", \"batch_mismatches\": %ld, "
               "\"slot_mismatches\": %ld, \"determinism_mismatches\": %ld, \"layout_mismatches\": %ld, \"zero_column_nonzero\": %ld, \"zero_column_negative_zeros\": %ld, \"bad_tags\": %ld, \"max_rel_err\": %.3g, \"ok\": %s}",
               fmt_names[f], b_names[b], layout_names[L], batch_diff, slot_diff, det_diff, layout_diff, zero_diff, neg_zero, bad_tags, worst,
               ok ? "true" : "false");
      else
        printf("%-5s %-10s %-7s bitwise: batch %ld, slot %ld, determinism %ld, layout %ld mismatches; zero columns %ld nonzero (%ld -0.0); tags %ld bad; max err %.2e %s\n",
               fmt_names[f], b_names[b], layout_names[L], batch_diff, slot_diff, det_diff, layout_diff, zero_diff, neg_zero, bad_tags, worst,
               ok ? "OK" : "FAIL");
    }
  if (g_json) printf("], \"ok\": %s}\n", all_ok ? "true" : "false");
  return all_ok ? 0 : 1;
}
