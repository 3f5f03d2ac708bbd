// Probe: one GEMV round of the streaming schedule's consumers (kernel/schedule_stream.cuh,
// round_1024 for bf16), measured alone, with the block's loader warp idle, streaming bulk copies,
// or spinning as the kernel's producer does when the ring is full. The sub-interval X-ray
// (NOTES.md, sixth session) put a qkv round's dot products (`x_dot`: 4 slots = 32 rows x 1024
// bf16, already landed, from the opening barrier to the closing one) at ~0.97 us, ~1,900 cycles.
// The round's instruction count says ~512 issue cycles per SM sub-partition (16 warps x ~170
// instructions over 4 schedulers). This probe tells which it is: the round's own cost, or the
// kernel around it. (Tenth session: 1,387 cycles alone, so mostly the round; the shapes below ask
// what in the round.)
//   The round (the kernel's shape): 16 consumer warps; warp w takes row w / 2 of each of the 4
//   slots, half h = w % 2 of it; each lane reads 2 x 16 B per slot (8 bf16 weights each) against
//   its 16 x values held in registers (loaded from shared memory after the opening barrier, as
//   the kernel does once per phase), two FMA chains of 8; warp_sum4 folds the 4 slots' sums in 6
//   shuffles; lanes 0, 8, 16, 24 store them; barrier; 32 threads add each row's two halves in
//   fixed order and store the row to global memory (64-bit {value, tag} words, as the kernel's
//   tagged stores); barrier.
//   Loader modes (warp 16, lane 0, into its own 8 x 16 KB ring: never the round's slots):
//     idle    nothing
//     stream  16 KB cp.async.bulk copies from a 1 GB buffer, 8 in flight (DRAM-bound, as the
//             kernel's producer while it refills)
//     spin    mbarrier try_wait on a barrier that never completes + a shared-memory atomicAdd per
//             turn (the producer's loop while the ring is full and the consumers compute)
// Stamps (thread 0, clock64): after the opening barrier, after the closing barrier (the X-ray's
// x_dot), after the row stores and a barrier (x_out); medians over rounds and blocks; SM clock
// from clock64 over %globaltimer. Check: every row against a CPU dot product (rel. err < 1e-4).
//
//   shapes 5 / 6 (sixteenth session, tensor cores): the same round through mma.sync.m16n8k16 (bf16
//   in, fp32 accumulate), never tried for a GEMV here. Why: the round is 1,387 cycles alone (tenth
//   session), ~700 of them issue slots of bf16 -> fp32 conversions and FMAs; an mma consumes 256
//   weights per instruction. Against it: any mma.sync holds this H200's SM clock at 1.80 GHz instead
//   of 1.98 (results/m4_tc_clock.json), so a tensor-core round must win by more than 9 %; the run's
//   SM clock is reported beside it, and shape 4 runs again after it (does the clock come back?).
//   Layout (the kernel's slots, untouched): the round's 32 rows are two M tiles of 16 (rows g and
//   g + 8 of a fragment come from slots 2 mt and 2 mt + 1); warp w takes tile w % 2 and the K range
//   128 (w / 2) .. + 127: 8 steps of 16. A lane (g = lane / 4, t = lane % 4) loads 8 B of row g and
//   8 B of row g + 8 per step (physical k 4t .. 4t + 3 of a 16-k chunk = the fragment's logical k
//   2t, 2t + 1, 2t + 8, 2t + 9; any K order serves a dot product if A and B share it). Rows are 2 KB
//   apart, so 4 rows reading the same chunk would hit the same banks: row g reads chunk
//   (step + g % 4) % 8 instead, conflict-free, and B's 8 columns carry what that needs: column n < 4
//   holds the chunk rows with g % 4 = n read, in bf16 (x_hi = bf16(x)), column n + 4 the same chunk's
//   remainder (x_lo = bf16(x - x_hi)), so that the products keep ~16 bits of x (the kernel's GEMV
//   multiplies by fp32 x). Row g's sum is C[g][g % 4] + C[g][g % 4 + 4] (a shuffle), its 8 K ranges
//   are added after the barrier in fixed order (deterministic, not the FFMA round's order). Its x
//   loads are 8 float4 per lane (each chunk is needed by 4 column pairs): 32 wavefronts per warp,
//   twice the FFMA round's. Shape 6 halves the K range (64) and gives each warp both tiles, so one
//   B fragment serves two mma (4 steps, the rotation over 4 chunks), and reads B as bf16 (hi, lo)
//   quads stored once per phase (as the phase's norm could write them: here before the rounds), one
//   8-byte load per step: 4 x 2 wavefronts per warp.
//   shapes 7 / 8 (sixteenth session): the same question for E4M3 rows (fp8-stream's layers), where
//   the FFMA round pays ~2.5 instructions per weight (a cvt per pair, a widening add, an FFMA;
//   NOTES.md, eleventh session). 64 KB = 4 slots of 16 rows of 1 KB. Shape 7 is the kernel's E4M3
//   round (dot16_e4m3, warp_sum4, two 8-row passes, the row scale once per row). Shape 8 widens the
//   codes by the same cvt (e4m3x2 -> f16x2) and feeds mma.m16n8k16 f16 with x as f16 hi + lo: slot i
//   is M tile i, warp w takes tiles 2 (w % 2), + 1 and K range 128 (w / 2), a lane loads 8 bytes of
//   rows g and g + 8 per chunk of 32 k (two mma) and its B column's 8 f16 in one 16-byte load.
//   tests/test_round_mma_model.py checks every tensor-core shape's fragments and banks on the CPU.
//   shapes 9 / 10 (seventeenth session): the E4M3 round without tensor cores and without fp32 FMAs:
//   shape 7 measured 2,262 cycles, far above its ~1,300 issue cycles, and shape 8 showed that the
//   same 64 cvt per lane fit in ~1,370 cycles, so the widening adds and the fp32 chains cost. These
//   shapes multiply the codes' f16 values by x as f16 with HFMA2 (NVFP4's half2 path, dequant.cuh
//   dot16B_h2): x lifted per 32-element word by 2^-E (E the exponent of the word's max |x|), the
//   word's factor 2^E applied to the lane's sum; one half2 accumulator per 16 codes (8 products per
//   half), then lo + hi in fp32. Shape 9 widens by cvt (1 instruction per pair); shape 10 by bits:
//   the byte moved to the high byte of its f16 lane, its magnitude shifted right by one, is the f16
//   of code * 2^-8 (E4M3 and f16 share the mantissa's top 3 bits and the exponent's low 4; the
//   missing 2^8 goes into x's lift), pairs (k, k + 2) and (k + 1, k + 3) of a u32, so x is stored
//   with the middle two of every 4 swapped. Check: rel. error against sum |w| |x| below 5e-3 (each
//   of a half's 8 f16 roundings and x's own is at most 2^-11 of it).
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I kernel -I probes \
//          -o /tmp/round_gemv probes/round_gemv.cu
// Run:   /tmp/round_gemv [--json] [--rounds 200]      (seconds on an H200)
#define PROBE_NAME "round_gemv"
#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dequant.cuh"  // dot8_bf16, dot16_e4m3: the kernel's own dot products; e4m3x2_to_half2
#include "probe_common.cuh"
#include "ring.cuh"

using monolith::bulk_copy_g2s;
using monolith::dot8_bf16;
using monolith::l2_evict_first_policy;
using monolith::mbar_arrive_expect_tx;
using monolith::mbar_init;
using monolith::mbar_try_wait;

constexpr int kConsumerWarps = 16, kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kK = 1024, kSlotBytes = 16 * 1024, kRowsPerSlot = kSlotBytes / (kK * 2);  // 8
constexpr int kSlots = 4, kRows = kSlots * kRowsPerSlot;                                  // 32 rows
constexpr int kRowsE4 = kSlots * kSlotBytes / kK;  // E4M3 shapes: 16 rows of 1 KB per slot, 64 per round
constexpr int kLoaderSlots = 8;
constexpr size_t kLoadBufBytes = size_t(1) << 30;  // far larger than L2
constexpr int kStamps = 3;
static_assert(kRows == 32, "the tensor-core shapes: two M tiles of 16 rows");
constexpr int kModes = 3;
constexpr const char* kModeNames[kModes] = {"idle", "stream", "spin"};
static_assert(kRowsPerSlot == 8 && kConsumerWarps == 2 * kRowsPerSlot, "two warps per slot row");

struct Smem {
  uint4 slot[kSlots][kSlotBytes / 16];        // the round's weights (fixed)
  uint4 ring[kLoaderSlots][kSlotBytes / 16];  // the loader's copies land here
  float x[kK];
  float part[kRows * kConsumerWarps];  // FFMA: [slot][warp] (64 / 128); mma: [row][K range] (256 / 512)
  uint2 xb[2][kK / 4];                 // shape 6: x as bf16 (hi, lo) quads, as a norm would store them
  __half xh[2][kK];                    // shape 8: x as f16 (hi, lo)
  float scale[kRowsE4];                // E4M3 shapes: the rows' fp32 scales
  __half xe[kK];                       // shapes 9 / 10: x as f16, lifted per 32-element word
  float xf[kK / 32];                   // shapes 9 / 10: each word's factor 2^E
  uint64_t full[kLoaderSlots];
  uint64_t never;  // spin mode: a barrier no one completes
  int stop, atom;
};

struct Params {
  const uint16_t* w;          // [kRows][kK] bf16
  const uint8_t* codes;       // [kRowsE4][kK] E4M3 (shapes 7, 8)
  const float* scales;        // [kRowsE4]
  const float* x;             // [kK]
  const uint8_t* load_buf;
  unsigned long long* out;    // [blocks][kRows] {value, tag} of the last round
  long long* stamps;          // [blocks][rounds][kStamps]
  unsigned long long* clk;    // block 0: globaltimer, clock64 at start and end
  int rounds, mode;
  long long timeout_cycles;
};

// four warp sums in 6 shuffles (the kernel's warp_sum4): lane 8 v ends with value v's sum
__device__ __forceinline__ float warp_sum4(float a0, float a1, float a2, float a3) {
  const int lane = threadIdx.x & 31;
  const bool hi = (lane & 16) != 0, b3 = (lane & 8) != 0;
  const float b0 = (hi ? a2 : a0) + __shfl_xor_sync(0xffffffffu, hi ? a0 : a2, 16);
  const float b1 = (hi ? a3 : a1) + __shfl_xor_sync(0xffffffffu, hi ? a1 : a3, 16);
  float c = (b3 ? b1 : b0) + __shfl_xor_sync(0xffffffffu, b3 ? b0 : b1, 8);
  c += __shfl_xor_sync(0xffffffffu, c, 4);
  c += __shfl_xor_sync(0xffffffffu, c, 2);
  c += __shfl_xor_sync(0xffffffffu, c, 1);
  return c;
}
// D = A (16 x 16, row) x B (16 x 8, col) + D with fp32 accumulators, inputs of type T: mma_bf16 (the
// bf16 shapes), mma_f16 (shape 8: E4M3 weights widened by cvt, x as f16 hi + lo)
#define PROBE_MMA_M16N8K16(name, T)                                                                         \
  __device__ __forceinline__ void name(float(&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,   \
                                       uint32_t b0, uint32_t b1) {                                          \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
                 "{%8, %9}, {%0, %1, %2, %3};"                                                              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                           \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                   \
  }
PROBE_MMA_M16N8K16(mma_bf16, "bf16")
PROBE_MMA_M16N8K16(mma_f16, "f16")
// two consecutive x values as a bf16 pair (the lower k in the low half): their bf16 (hi) or what is
// left of them after it (lo)
__device__ __forceinline__ uint32_t x_pair(float a, float b, bool lo) {
  const __nv_bfloat16 ha = __float2bfloat16_rn(a), hb = __float2bfloat16_rn(b);
  const __nv_bfloat162 v = lo ? __floats2bfloat162_rn(a - __bfloat162float(ha), b - __bfloat162float(hb))
                              : __halves2bfloat162(ha, hb);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
// An mma tile's row sums into part[row][K range] (nkr K ranges per row): row g's useful columns are
// g % 4 (x_hi) in lane t = (g % 4) / 2 and g % 4 + 4 (x_lo) in lane t + 2, register (g % 4) % 2, so
// one shuffle adds them; rows g and g + 8 of tile rows R0 .. R0 + 15 (R0 = 16 * tile)
__device__ __forceinline__ void mma_rows_to_part(const float (&c)[4], int R0, int kq, int nkr, float* part) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, j = g & 3;
  const float v0 = (j & 1) ? c[1] : c[0], v1 = (j & 1) ? c[3] : c[2];
  const float o0 = __shfl_xor_sync(0xffffffffu, v0, 2), o1 = __shfl_xor_sync(0xffffffffu, v1, 2);
  if (t == (j >> 1)) {
    part[(R0 + g) * nkr + kq] = v0 + o0;
    part[(R0 + g + 8) * nkr + kq] = v1 + o1;
  }
}
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t two) { return monolith::half2_as_u32(monolith::e4m3x2_to_half2(uint16_t(two))); }
// shape 10: the f16 of code * 2^-8 for the two codes in the high bytes of v's 16-bit lanes
__device__ __forceinline__ uint32_t e4m3_hi_bytes_f16x2(uint32_t v) { return (v & 0x80008000u) | ((v >> 1) & 0x3F803F80u); }
// shape 10: kernel/dequant.cuh hdot16_e4m3 (shape 9's, called as is) with the bit widening in
// place of the cvt: pairs (4u, 4u + 2) and (4u + 1, 4u + 3) of u32 u, against x stored to match
__device__ __forceinline__ float hdot16_e4m3_bits(uint4 w, const uint32_t (&x)[8], float f) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  __half2 acc = __float2half2_rn(0.f);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    acc = __hfma2(monolith::u32_as_half2(e4m3_hi_bytes_f16x2(ws[u] << 8)), monolith::u32_as_half2(x[2 * u]), acc);
    acc = __hfma2(monolith::u32_as_half2(e4m3_hi_bytes_f16x2(ws[u])), monolith::u32_as_half2(x[2 * u + 1]), acc);
  }
  return (__low2float(acc) + __high2float(acc)) * f;
}
__device__ __forceinline__ void csync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

__device__ void loader(const Params& p, Smem& sm) {
  const long long t0 = clock64();
  if (p.mode == 1) {
    const uint64_t pol = l2_evict_first_policy();
    const size_t chunks = kLoadBufBytes / kSlotBytes;
    size_t c = size_t(blockIdx.x) * 997;
    uint32_t k = 0;
    for (; !*(volatile int*)&sm.stop; ++k) {
      const int s = int(k % kLoaderSlots);
      if (k >= uint32_t(kLoaderSlots)) {  // the copy that used this slot has landed: reuse it
        const uint32_t par = ((k / kLoaderSlots) - 1u) & 1u;
        while (!mbar_try_wait(&sm.full[s], par))
          if (clock64() - t0 > p.timeout_cycles) return;
      }
      mbar_arrive_expect_tx(&sm.full[s], kSlotBytes);
      bulk_copy_g2s(sm.ring[s], p.load_buf + (c++ % chunks) * kSlotBytes, kSlotBytes, &sm.full[s], pol);
    }
    for (uint32_t j = k > uint32_t(kLoaderSlots) ? k - kLoaderSlots : 0u; j < k; ++j)  // drain
      while (!mbar_try_wait(&sm.full[j % kLoaderSlots], (j / kLoaderSlots) & 1u))
        if (clock64() - t0 > p.timeout_cycles) break;
  } else if (p.mode == 2) {
    while (!mbar_try_wait(&sm.never, 0)) {
      if (atomicAdd(&sm.atom, 0) != 0 || *(volatile int*)&sm.stop) break;
      if (clock64() - t0 > p.timeout_cycles) break;
    }
  }
}

// Shapes (tenth session): which loads stay inside the timed round. The kernel's round reads 96 KB
// of shared memory per block (64 KB of weights, and each warp's 2 KB of x: 32 KB), 768 cycles at
// 128 B per cycle; the measured round is 1,387 cycles. Hoisting the x loads (kHoistX) or the
// weight loads (kHoistW, into 32 registers per lane) out of the loop, before the first round,
// leaves the rest: if the round is bound by shared-memory bandwidth, each removes its bytes'
// cycles; if by the dependent tail (FMA chains, 6 shuffles, the barrier), neither moves it much.
//   shape 0: the kernel's (both loads in the round)   1: x hoisted   2: weights hoisted   3: both
//   shape 4 (eleventh session): the kernel's, with x stored so that the round's x loads are
//   conflict-free. The kernel's bf16 layout has each lane read float4s 2q and 2q + 1 (q = 64 h +
//   lane + 32 j): a 32-byte stride across lanes, so each quarter-warp's LDS.128 spans 256 B, two
//   wavefronts instead of one (x: 32 wavefronts per warp, 512 cycles per round at 16 warps, not
//   256). Shape 4 keeps float4 2q at q and 2q + 1 at 128 + q: consecutive lanes, consecutive 16 B.
template <int kShape>
__global__ void __launch_bounds__(kThreads, 1) round_kernel(Params p) {
  constexpr bool kE4 = kShape >= 7;  // 7: the kernel's E4M3 round (dot16_e4m3), 8: its tensor-core form, 9 / 10: HFMA2
  constexpr bool kE4Part = kShape == 7 || kShape >= 9;  // warp-partial sums in part, as the kernel's round
  constexpr bool kMma = kShape == 5 || kShape == 6;
  // tensor-core shapes: kT tiles per warp (5: one, 6: both), each warp's K range kKW, kSteps steps of
  // 16 in it, kNumKR K ranges per row (summed after the barrier)
  constexpr int kT = kShape == 6 ? 2 : 1, kKW = kK / (kConsumerWarps * kT / 2), kSteps = kKW / 16, kNumKR = kK / kKW;
  static_assert(!kMma || (kSteps >= 4 && kNumKR * kRows <= int(sizeof(Smem::part) / 4)), "the chunk rotation needs 4 chunks; part holds every K range");
  constexpr bool kFfmaBf16 = kShape <= 4;  // the bf16 FFMA shapes' bits: x hoisted, weights hoisted, x permuted
  constexpr bool kHoistX = kFfmaBf16 && (kShape & 1) != 0, kHoistW = kFfmaBf16 && (kShape & 2) != 0,
                 kXPerm = kFfmaBf16 && (kShape & 4) != 0;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < kSlots * kSlotBytes / 16; i += kThreads)  // 64 KB: 32 bf16 rows or 64 E4M3 rows
    sm.slot[i / (kSlotBytes / 16)][i % (kSlotBytes / 16)] = reinterpret_cast<const uint4*>(kE4 ? static_cast<const void*>(p.codes) : p.w)[i];
  if constexpr (kE4) {
    for (int i = tid; i < kRowsE4; i += kThreads) sm.scale[i] = p.scales[i];
    for (int i = tid; i < kK; i += kThreads) {
      const __half hi = __float2half_rn(p.x[i]);
      sm.xh[0][i] = hi;
      sm.xh[1][i] = __float2half_rn(p.x[i] - __half2float(hi));
    }
    for (int i = tid; i < kK / 32; i += kThreads) {  // shapes 9 / 10: word i lifted to max |x| in [1, 2) (10: [256, 512))
      float m = 0.f;
      for (int k = 0; k < 32; ++k) m = fmaxf(m, fabsf(p.x[32 * i + k]));
      const int e = min(max(int(__float_as_uint(m) >> 23) - 127, -100), 100);
      const float lift = __uint_as_float(uint32_t(127 - e + (kShape == 10 ? 8 : 0)) << 23);
      sm.xf[i] = __uint_as_float(uint32_t(127 + e) << 23);
      for (int k = 0; k < 32; ++k) {
        const int pos = kShape == 10 ? (k & ~3) | ((k & 1) << 1) | ((k >> 1) & 1) : k;  // 10: middle two of 4 swapped
        sm.xe[32 * i + pos] = __float2half_rn(p.x[32 * i + k] * lift);
      }
    }
  }
  for (int i = tid; i < kK; i += kThreads) {  // shape 4: float4 f at (f % 2) * 128 + f / 2
    const int f = i >> 2;
    // shape 7: lane l of half h reads float4s 128 h + 4 l + j (the kernel's E4M3 XHalf), kept at
    // (4 h + j) * 32 + l: consecutive lanes, consecutive 16 B (the kernel swizzles to the same end)
    const int f7 = ((f >> 7) * 4 + (f & 3)) * 32 + ((f & 127) >> 2);
    sm.x[kShape == 7 ? (f7 << 2) + (i & 3) : kXPerm ? (((f & 1) * 128 + (f >> 1)) << 2) + (i & 3) : i] = p.x[i];
  }
  if constexpr (kShape == 6)
    for (int q = tid; q < kK / 4; q += kThreads)
#pragma unroll
      for (int lo = 0; lo < 2; ++lo)
        sm.xb[lo][q] = make_uint2(x_pair(p.x[4 * q], p.x[4 * q + 1], lo), x_pair(p.x[4 * q + 2], p.x[4 * q + 3], lo));
  if (tid == 0) {
    for (int i = 0; i < kLoaderSlots; ++i) mbar_init(&sm.full[i], 1);
    mbar_init(&sm.never, 1);
    sm.stop = 0;
    sm.atom = 0;
    monolith::mbar_fence_init();
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0) loader(p, sm);
    return;
  }
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[0] = globaltimer();
    p.clk[1] = clock64();
  }
  {  // let the loader reach its steady state (~20 us), as probes/mbar_cost.cu
    const long long t0 = clock64();
    while (clock64() - t0 < 40000) {
    }
  }
  const int h = warp & 1, row = warp >> 1;
  // this lane's 16 x values of its half: words 64 h + lane and + 32 (the kernel's load_xhalf)
  const float4* x4 = reinterpret_cast<const float4*>(sm.x);
  auto load_x = [&](float4 (&xv)[4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = 64 * h + lane + 32 * j;
      xv[2 * j] = x4[kXPerm ? q : 2 * q];
      xv[2 * j + 1] = x4[kXPerm ? 128 + q : 2 * q + 1];
    }
  };
  // this lane's 2 x 16 B of its row's half in each slot
  auto load_w = [&](uint4 (&wv)[2 * kSlots]) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const uint4* rw = sm.slot[i] + row * (kK / 8) + 64 * h + lane;
      wv[2 * i] = rw[0];
      wv[2 * i + 1] = rw[32];
    }
  };
  // a row's value as the kernel's tagged 64-bit word (round r + 1); thread 0's three stamps
  auto put_row = [&](int r, int row, int nrows, float v) {
    const unsigned long long word = (unsigned long long)(uint32_t(r + 1)) << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p.out + size_t(blockIdx.x) * nrows + row), "l"(word) : "memory");
  };
  auto put_stamps = [&](int r, long long t0, long long t1, long long t2) {
    if (tid == 0) {
      long long* st = p.stamps + (size_t(blockIdx.x) * p.rounds + r) * kStamps;
      st[0] = t1 - t0;
      st[1] = t2 - t1;
      st[2] = t2 - t0;
    }
  };
  float4 xh[4];
  uint4 wh[2 * kSlots];
  if constexpr (kHoistX) load_x(xh);
  if constexpr (kHoistW) load_w(wh);
  for (int r = 0; r < p.rounds; ++r) {
    csync();  // the opening barrier (the kernel: the acquire's, after thread 0's slot tests)
    const long long t0 = clock64();
    if constexpr (kE4) {
      // shape 7: warp-partial sums to part (FFMA); shape 8: K-range sums to part (mma)
      if constexpr (kShape == 7) {
        // the kernel's E4M3 round_1024 (kRb = 2): warp w takes row 8 k + w / 2 of each slot (k = 0, 1),
        // half h = w % 2: one 16-byte load of 16 weights per lane, its 16 x values from registers
        float4 xv[4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) xv[jj] = x4[(4 * h + jj) * 32 + lane];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          float a[kSlots];
#pragma unroll
          for (int i = 0; i < kSlots; ++i) a[i] = monolith::dot16_e4m3(sm.slot[i][(8 * k + row) * (kK / 16) + 32 * h + lane], xv, 0.f);
          const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);
          if ((lane & 7) == 0) sm.part[(2 * (lane >> 3) + k) * kConsumerWarps + warp] = r4;
        }
      } else if constexpr (kShape >= 9) {
        // the kernel's E4M3 row split (as shape 7), x from f16: elements 512 h + 16 lane .. + 15 are
        // two 16-byte words of xe, and the lane's word (16 h + lane / 2) has one factor
        const uint4* xe4 = reinterpret_cast<const uint4*>(sm.xe);
        const uint4 x0 = xe4[64 * h + 2 * lane], x1 = xe4[64 * h + 2 * lane + 1];
        const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const float f = sm.xf[16 * h + (lane >> 1)];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          float a[kSlots];
#pragma unroll
          for (int i = 0; i < kSlots; ++i) {
            const uint4 w = sm.slot[i][(8 * k + row) * (kK / 16) + 32 * h + lane];
            if constexpr (kShape == 10) a[i] = hdot16_e4m3_bits(w, xw, f);
            else a[i] = monolith::hdot16_e4m3(w, xw, f);
          }
          const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);
          if ((lane & 7) == 0) sm.part[(2 * (lane >> 3) + k) * kConsumerWarps + warp] = r4;
        }
      } else {
        // shape 8: slot i is M tile i (rows g and g + 8 of a fragment in one slot, 1 KB apart);
        // warp w takes tiles 2 (w % 2), + 1 and the K range 128 (w / 2): 4 chunks of 32 k. A lane
        // loads 8 bytes of rows g and g + 8 (k 8t .. 8t + 7 of its chunk: two mma of 16 k), widens
        // them by cvt (e4m3x2 -> f16x2), and its B column's 8 x values as f16 (hi or lo) in one
        // 16-byte load; the chunk rotates with g as in the bf16 shapes
        const int g = lane >> 2, t = lane & 3, j = g & 3, tp = warp & 1, kq = warp >> 1;
        float c[2][4] = {};
#pragma unroll
        for (int st = 0; st < 4; ++st) {
          const int k0 = 128 * kq + 32 * ((st + j) & 3) + 8 * t;
          const uint4 xb = *reinterpret_cast<const uint4*>(sm.xh[g >= 4] + k0);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint8_t* base = reinterpret_cast<const uint8_t*>(sm.slot[2 * tp + i]);
            const uint2 rg = *reinterpret_cast<const uint2*>(base + g * kK + k0);
            const uint2 rg8 = *reinterpret_cast<const uint2*>(base + (g + 8) * kK + k0);
            mma_f16(c[i], e4m3x2_f16x2(rg.x), e4m3x2_f16x2(rg8.x), e4m3x2_f16x2(rg.x >> 16), e4m3x2_f16x2(rg8.x >> 16), xb.x, xb.y);
            mma_f16(c[i], e4m3x2_f16x2(rg.y), e4m3x2_f16x2(rg8.y), e4m3x2_f16x2(rg.y >> 16), e4m3x2_f16x2(rg8.y >> 16), xb.z, xb.w);
          }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) mma_rows_to_part(c[i], 16 * (2 * tp + i), kq, 8, sm.part);
      }
      csync();  // publishes part
      const long long t1 = clock64();
      if (tid < kRowsE4) {  // row tid: slot tid / 16, its row tid % 16; scaled once, as the kernel
        float v;
        if constexpr (kE4Part) {
          const int rr = tid & 15;
          const float* pp = sm.part + (2 * (tid >> 4) + (rr >> 3)) * kConsumerWarps + 2 * (rr & 7);
          v = pp[0] + pp[1];
        } else {
          const float* pp = sm.part + tid * 8;
          v = pp[0];
#pragma unroll
          for (int q = 1; q < 8; ++q) v += pp[q];
        }
        put_row(r, tid, kRowsE4, v * sm.scale[tid]);
      }
      csync();
      put_stamps(r, t0, t1, clock64());
      continue;
    }
    if constexpr (kMma) {
      const int g = lane >> 2, t = lane & 3, j = g & 3;
      const int kq = kT == 1 ? warp >> 1 : warp;  // this warp's K range: kKW values from kKW kq
      // B: column g's pairs for each step (shape 5 splits fp32 x here, inside the timed round; shape
      // 6 reads the pairs the phase's norm would have stored, one 8-byte load per step)
      uint32_t bx[kSteps][2];
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int k = kKW * kq + 16 * ((st + j) % kSteps) + 4 * t;
        if constexpr (kT == 1) {
          const float4 xv = *reinterpret_cast<const float4*>(sm.x + k);
          bx[st][0] = x_pair(xv.x, xv.y, g >= 4);
          bx[st][1] = x_pair(xv.z, xv.w, g >= 4);
        } else {
          const uint2 xb = sm.xb[g >= 4][k >> 2];
          bx[st][0] = xb.x;
          bx[st][1] = xb.y;
        }
      }
      float c[kT][4] = {};
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int off = kKW * kq + 16 * ((st + j) % kSteps) + 4 * t;  // row g's chunk this step (bank rotation)
#pragma unroll
        for (int i = 0; i < kT; ++i) {
          const int mt = kT == 1 ? warp & 1 : i, R0 = 16 * mt + g, R1 = R0 + 8;  // slots 2 mt, 2 mt + 1
          // A's registers: (row g, k 2t..), (row g + 8, k 2t..), (row g, k 2t + 8..), (row g + 8, k 2t + 8..)
          const uint2 rg = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(sm.slot[R0 >> 3]) + (R0 & 7) * kK + off);
          const uint2 rg8 = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(sm.slot[R1 >> 3]) + (R1 & 7) * kK + off);
          mma_bf16(c[i], rg.x, rg8.x, rg.y, rg8.y, bx[st][0], bx[st][1]);
        }
      }
#pragma unroll
      for (int i = 0; i < kT; ++i) mma_rows_to_part(c[i], 16 * (kT == 1 ? warp & 1 : i), kq, kNumKR, sm.part);
      csync();  // publishes part
      const long long t1 = clock64();
      if (tid < kRows) {  // row tid: its K ranges in order
        const float* pp = sm.part + tid * kNumKR;
        float v = pp[0];
#pragma unroll
        for (int q = 1; q < kNumKR; ++q) v += pp[q];
        put_row(r, tid, kRows, v);
      }
      csync();
      put_stamps(r, t0, t1, clock64());
      continue;
    }
    float4 xv[4];
    uint4 wv[2 * kSlots];
    if constexpr (kHoistX) {
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = xh[j];
    } else {
      load_x(xv);
    }
    if constexpr (kHoistW) {
#pragma unroll
      for (int j = 0; j < 2 * kSlots; ++j) wv[j] = wh[j];
    } else {
      load_w(wv);
    }
    float a[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) a[i] = dot8_bf16(wv[2 * i], xv[0], xv[1], 0.f) + dot8_bf16(wv[2 * i + 1], xv[2], xv[3], 0.f);
    const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);  // lane 8 v: slot v's row `row`, half h
    if ((lane & 7) == 0) sm.part[(lane >> 3) * kConsumerWarps + warp] = r4;
    csync();  // publishes part
    const long long t1 = clock64();
    if (tid < kRows) {  // row t: slot t / 8, row t % 8; its halves are warps 2 (t % 8) and + 1
      const float* pp = sm.part + (tid >> 3) * kConsumerWarps + 2 * (tid & 7);
      put_row(r, tid, kRows, pp[0] + pp[1]);
    }
    csync();  // part is reused by the next round
    put_stamps(r, t0, t1, clock64());
  }
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[2] = globaltimer();
    p.clk[3] = clock64();
  }
  if (tid == 0) {
    *(volatile int*)&sm.stop = 1;
    atomicAdd(&sm.atom, 1);
  }
}

int main(int argc, char** argv) {
  const int rounds = probe_int_arg(argc, argv, "--rounds", 200, 1, 100000);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int G = prop.multiProcessorCount;
  probe_require_smem(prop, sizeof(Smem));
  constexpr int kNumShapes = 11;
  void (*const kernels[kNumShapes])(Params) = {round_kernel<0>, round_kernel<1>, round_kernel<2>, round_kernel<3>,
                                               round_kernel<4>, round_kernel<5>, round_kernel<6>, round_kernel<7>,
                                               round_kernel<8>, round_kernel<9>, round_kernel<10>};
  for (auto k : kernels) CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))));
  // runs: the kernel's shape under every loader mode, then the hoisted shapes with the loader idle,
  // then the tensor-core rounds (idle and streaming loader) and the FFMA round once more after them;
  // then the same for E4M3 (the kernel's round, its tensor-core form, the kernel's again), then the
  // HFMA2 rounds (idle and streaming) and the kernel's E4M3 round streaming
  const int runs[][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {4, 1}, {5, 0}, {6, 0},
                         {6, 1}, {4, 0}, {7, 0}, {8, 0}, {8, 1}, {7, 0}, {9, 0}, {9, 1}, {10, 0}, {10, 1}, {7, 1}};
  const char* kShapeNames[kNumShapes] = {"kernel", "x-hoisted", "w-hoisted", "both", "x-perm", "mma-hilo", "mma-2tile",
                                         "e4m3-kernel", "e4m3-mma", "e4m3-h2cvt", "e4m3-h2bits"};
  // inputs: bf16 weights in [-1, 1), x in [-1, 1)
  std::vector<uint16_t> hw(size_t(kRows) * kK);
  std::vector<float> hx(kK);
  uint32_t seed = 2026u;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1u << 24) * 2.f - 1.f;
  };
  for (auto& v : hw) {
    const __nv_bfloat16 b = __float2bfloat16_rn(rnd());
    memcpy(&v, &b, 2);
  }
  for (auto& v : hx) v = rnd();
  std::vector<double> ref(kRows, 0.0);
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kK; ++k) {
      const uint32_t u = uint32_t(hw[size_t(r) * kK + k]) << 16;
      float f;
      memcpy(&f, &u, 4);
      ref[r] += double(f) * hx[k];
    }
  // E4M3 shapes: every code but the two NaNs, row scales in [0.5, 1.5), reference in double on the
  // codes' exact values (through the software decode of kernel/dequant.cuh)
  std::vector<uint8_t> hc(size_t(kRowsE4) * kK);
  std::vector<float> hs(kRowsE4);
  for (auto& c : hc) {
    c = uint8_t(uint32_t((rnd() + 1.f) * 128.f) & 0xFFu);
    if ((c & 0x7Fu) == 0x7Fu) c ^= 1u;
  }
  for (auto& v : hs) v = 1.f + 0.5f * rnd();
  std::vector<double> ref_e4(kRowsE4, 0.0), abs_e4(kRowsE4, 0.0);  // the dot product and sum |w| |x|
  for (int r = 0; r < kRowsE4; ++r) {
    for (int k = 0; k < kK; ++k) {
      const uint16_t hb = monolith::e4m3_to_f16_bits_sw(hc[size_t(r) * kK + k]);
      __half hh;
      memcpy(&hh, &hb, 2);
      ref_e4[r] += double(__half2float(hh)) * hx[k];
      abs_e4[r] += std::fabs(double(__half2float(hh)) * hx[k]);
    }
    ref_e4[r] *= hs[r];
    abs_e4[r] *= hs[r];
  }
  Params p{};
  uint16_t* dw;
  uint8_t* dc;
  float* ds;
  float* dx;
  uint8_t* buf;
  CUDA_CHECK(cudaMalloc(&dw, hw.size() * 2));
  CUDA_CHECK(cudaMalloc(&dx, kK * 4));
  CUDA_CHECK(cudaMalloc(&buf, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(buf, 1, kLoadBufBytes));
  CUDA_CHECK(cudaMalloc(&dc, hc.size()));
  CUDA_CHECK(cudaMalloc(&ds, hs.size() * 4));
  CUDA_CHECK(cudaMemcpy(dc, hc.data(), hc.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(ds, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
  p.codes = dc;
  p.scales = ds;
  constexpr int kOutRows = kRowsE4 > kRows ? kRowsE4 : kRows;
  CUDA_CHECK(cudaMalloc(&p.out, size_t(G) * kOutRows * 8));
  CUDA_CHECK(cudaMalloc(&p.stamps, size_t(G) * rounds * kStamps * 8));
  CUDA_CHECK(cudaMalloc(&p.clk, 4 * 8));
  CUDA_CHECK(cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dx, hx.data(), kK * 4, cudaMemcpyHostToDevice));
  p.w = dw;
  p.x = dx;
  p.load_buf = buf;
  p.rounds = rounds;
  p.timeout_cycles = 4000000000ll;  // ~2 s: nothing waits longer
  if (!g_json) printf("device: %s (%d SMs), %d blocks x %d threads (16 consumer warps + loader), %d rounds of %d rows x %d bf16\n",
                      prop.name, G, G, kThreads, rounds, kRows, kK);
  if (!g_json) printf("(E4M3 shapes: %d rows of %d E4M3 codes, 64 KB as well)\n", kRowsE4, kK);
  if (!g_json) printf("%-9s | %-7s | %22s | %22s | %8s | %s\n", "shape", "loader", "dots (x_dot) cyc / us", "stores (x_out) cyc / us", "SM GHz", "check");
  if (g_json) printf("{\"probe\": \"round_gemv\", \"device\": \"%s\", \"rows\": [", prop.name);
  bool all_ok = true;
  for (int ri = 0; ri < int(sizeof(runs) / sizeof(runs[0])); ++ri) {
    const int shape = runs[ri][0], mode = runs[ri][1];
    p.mode = mode;
    const int nrows = shape >= 7 ? kRowsE4 : kRows;
    const std::vector<double>& want = shape >= 7 ? ref_e4 : ref;
    CUDA_CHECK(cudaMemset(p.out, 0xff, size_t(G) * kOutRows * 8));  // poison
    kernels[shape]<<<G, kThreads, sizeof(Smem)>>>(p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<long long> st(size_t(G) * rounds * kStamps);
    std::vector<unsigned long long> out(size_t(G) * nrows), clk(4);
    CUDA_CHECK(cudaMemcpy(st.data(), p.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out.data(), p.out, out.size() * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(clk.data(), p.clk, 32, cudaMemcpyDeviceToHost));
    const double ghz = double(clk[3] - clk[1]) / double(clk[2] - clk[0]);
    double worst = 0.0;
    for (int b = 0; b < G; ++b)
      for (int r = 0; r < nrows; ++r) {
        const unsigned long long w = out[size_t(b) * nrows + r];
        float v;
        const uint32_t lo = uint32_t(w);
        memcpy(&v, &lo, 4);
        // fp32 shapes: relative to max(1, |y|); the f16 shapes (9, 10): relative to sum |w| |x|
        const double den = shape >= 9 ? abs_e4[r] : std::max(1.0, std::fabs(want[r]));
        const double err = (uint32_t(w >> 32) == uint32_t(rounds)) ? std::fabs(v - want[r]) / den : INFINITY;
        worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
      }
    const bool ok = worst < (shape >= 9 ? 5e-3 : 1e-4);  // fp32 sums of 1,024 products: ~1e-6 expected
    all_ok = all_ok && ok;
    double med[kStamps], p90[kStamps];
    for (int k = 0; k < kStamps; ++k) {
      std::vector<double> v;
      for (size_t i = 0; i < size_t(G) * rounds; ++i) v.push_back(double(st[i * kStamps + k]));
      med[k] = probe_quantile(v, 0.5);
      p90[k] = probe_quantile(v, 0.9);
    }
    if (g_json)
      printf("%s{\"shape\": \"%s\", \"loader\": \"%s\", \"dots_cycles\": %.0f, \"dots_p90_cycles\": %.0f, \"stores_cycles\": %.0f, "
             "\"stores_p90_cycles\": %.0f, \"round_cycles\": %.0f, \"sm_ghz\": %.4f, \"dots_us\": %.4f, \"max_rel_err\": %.3g, "
             "\"ok\": %s}",
             ri ? ", " : "", kShapeNames[shape], kModeNames[mode], med[0], p90[0], med[1], p90[1], med[2], ghz, med[0] / ghz / 1e3, worst,
             ok ? "true" : "false");
    else
      printf("%-9s | %-7s | %8.0f (p90 %5.0f) %5.3f | %8.0f (p90 %5.0f) %5.3f | %8.4f | %.2e %s\n", kShapeNames[shape],
             kModeNames[mode], med[0], p90[0],
             med[0] / ghz / 1e3, med[1], p90[1], med[1] / ghz / 1e3, ghz, worst, ok ? "OK" : "FAIL");
  }
  if (g_json) printf("], \"ok\": %s}\n", all_ok ? "true" : "false");
  return all_ok ? 0 : 1;
}
