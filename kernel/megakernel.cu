// monolith megakernel: one launch = one Qwen3-0.6B decode step (28 layers + LM head + argmax).
//
// Compile (CI does this for sm_90a and sm_120a through scripts/compile_all.py):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c kernel/megakernel.cu
// The X-ray build is the same source with -DMONOLITH_XRAY (kernel/megakernel_xray.cu).
//
// Two schedules, chosen at compile time by VariantCfg<variant>::kStream: the upstream design
// below (bf16-upstream, and its step-0 A/B bf16-upstream-l2pre), and the streaming schedule
// (bf16-stream), described in kernel/schedule_stream.cuh.
//
// Schedule of the `bf16-upstream` variant (the published qwen_megakernel design, re-implemented):
// a persistent grid of one 512-thread block per SM; per layer
//   qkv      every block recomputes the RMSNorm of the residual (cheaper than a barrier) and
//            computes its contiguous slice of the fused q|k|v rows
//   -- grid barrier 1 --
//   attn     blocks 0..15, one per q head: QK-norm, RoPE, K/V append, attention over the cache;
//            the even head of each KV pair appends K/V and raises a flag the odd head waits on
//            (flag sync 1); meanwhile the other blocks may bulk-prefetch the next phases'
//            weights into L2 (compile-time UpstreamCfg::kL2PrefetchMode; off: it measured slower,
//            results/m1_l2_prefetch_ab.json)
//   -- flag sync 2: all blocks wait until the 16 heads are done --
//   oproj    O-projection rows + residual add, on the 116 blocks that did no attention
//   -- grid barrier 2 --
//   gateup   redundant post-attention RMSNorm, gate/up row pairs, SiLU(gate) * up
//   -- grid barrier 3 --
//   down     down-projection rows + residual add
//   -- grid barrier 4 --
// then the final RMSNorm, the LM-head rows with a per-block argmax, and the last block to finish
// reduces the per-block winners into the token (no fifth barrier: an arrival counter).
// Every reduction runs in a fixed order, so a step is bitwise deterministic.
// Each phase's first weight loads are issued before the barrier or flag that guards its input
// (weights never depend on activations), so the barrier wait overlaps the memory latency.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "config.cuh"
#include "loads.cuh"
#include "megakernel.cuh"
#include "ring.cuh"
#include "sync.cuh"
#include "xray.cuh"

namespace monolith {
#if defined(MONOLITH_XRAY)
namespace xray_build {
#else
namespace plain_build {
#endif

// Compile-time configuration of a variant.
template <int kVariant>
struct VariantCfg;

struct UpstreamCfg {
  static constexpr bool kStream = false;
  static constexpr int kBlockThreads = kThreads;
  static constexpr int kDynamicSmem = 0;
  static constexpr bool kPreloadL2 = false;     // step 0 of M4: see VariantCfg<kVariantBf16UpstreamL2Pre>
  // Upstream's "productive wait": while 16 blocks do attention, the others ask L2 for the next
  // phases' weights. 0 off, 1 this layer's O, gate/up, down (23 MB), 2 those and the next
  // layer's qkv (31.5 MB), 3 the same issued at the start of the qkv phase. Measured (M1 A/B,
  // results/m1_l2_prefetch_ab.json): 0 1,366 tok/s, 1 1,337, 2 1,337, 3 1,285: off. A compile-
  // time choice, so the measured-slower modes cost the hot loop nothing.
  static constexpr int kL2PrefetchMode = 0;
  static constexpr int kRowsPerIterQKV = 2;     // rows a warp streams at once (8 x 16 B per lane)
  static constexpr int kRowsPerIterHead = 4;    // LM head: 1152 rows per block, 16 loads per lane
  static constexpr int kUnitsPerIterO = 2;      // O: 9 rows x 2 chunks on the 116 non-attention blocks
  static constexpr int kUnitsPerIterDown = 2;   // down: 8 rows x 3 chunks = 24 units
  static constexpr int kRowsPerIterGateUp = 4;  // 2 gate/up pairs per warp: 46 rows in one round
  static constexpr int kVUnroll = 8;            // attention V rows in flight per warp
  static constexpr int kHeadPrefetchDistance = 2;  // LM head: L2 prefetch 2 iterations ahead; each
                                                   // iteration is 17 MB grid-wide, so 4 would ask for
                                                   // more than the 60 MB L2 holds
};
template <>
struct VariantCfg<kVariantBf16Upstream> : UpstreamCfg {};

// M4 step 0 (A/B against bf16-upstream): before each barrier or flag, ask L2 for the block's
// whole next-phase row range with one bulk prefetch instead of loading its first iteration into
// registers; the register loads start after the wait. Question: how much of a barrier's cost is
// its release fence waiting for the block's register loads in flight?
template <>
struct VariantCfg<kVariantBf16UpstreamL2Pre> : UpstreamCfg {
  static constexpr bool kPreloadL2 = true;
};

template <>
struct VariantCfg<kVariantBf16Stream> {
  static constexpr bool kStream = true;
  static constexpr int kBlockThreads = kStreamThreads;
  static constexpr int kDynamicSmem = kRingBytes;
};

__device__ __forceinline__ int64_t part_begin(int64_t n, int parts, int i) { return n * i / parts; }

__device__ __forceinline__ float ldcg_f32(const float* p) { return __ldcg(p); }

// ---- block-wide helpers -------------------------------------------------------------------

// Sum of one value per thread over kNWarps warps that meet at Sync, in a fixed order
// (deterministic). `red` >= kNWarps floats.
template <int kNWarps, void (*Sync)()>
__device__ __forceinline__ float block_sum_over(float v, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = warp_sum(v);
  Sync();  // `red` may still be read by a previous call
  if (lane == 0) red[warp] = v;
  Sync();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kNWarps; ++w) t += red[w];
  return t;
}
__device__ __forceinline__ void sync_block() { __syncthreads(); }
// The whole block (the upstream schedule).
__device__ __forceinline__ float block_sum(float v, float* red) { return block_sum_over<kWarps, sync_block>(v, red); }

// Two block sums in one reduction (one pair of barriers instead of two).
__device__ __forceinline__ float2 block_sum2(float a, float b, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  a = warp_sum(a);
  b = warp_sum(b);
  __syncthreads();
  if (lane == 0) {
    red[warp] = a;
    red[kWarps + warp] = b;
  }
  __syncthreads();
  float2 t = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    t.x += red[w];
    t.y += red[kWarps + w];
  }
  return t;
}

// s_x[i] = RMSNorm(src)[i] * weight[i] over kHidden elements. `src` is the fp32 residual
// (read through L2: it was written by other blocks) or, for layer 0, a bf16 embedding row.
template <bool kSrcBf16>
__device__ __forceinline__ void rmsnorm_to_smem(const void* src, const uint16_t* weight, float* s_x, float* red) {
  constexpr int kPer = kHidden / kThreads;
  float v[kPer];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if constexpr (kSrcBf16) {
      v[j] = __uint_as_float(uint32_t(static_cast<const uint16_t*>(src)[i]) << 16);
    } else {
      v[j] = ldcg_f32(static_cast<const float*>(src) + i);
    }
    ss += v[j] * v[j];
  }
  const float total = block_sum(ss, red);
  const float inv = rsqrtf(total / float(kHidden) + kRmsEps);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * kThreads;
    s_x[i] = v[j] * inv * __uint_as_float(uint32_t(weight[i]) << 16);
  }
  __syncthreads();
}

// Copy n fp32 activations written by other blocks into shared memory.
__device__ __forceinline__ void load_to_smem(const float* src, float* s_x, int n) {
  for (int i = threadIdx.x * 4; i < n; i += kThreads * 4) {
    *reinterpret_cast<float4*>(s_x + i) = __ldcg(reinterpret_cast<const float4*>(src + i));
  }
  __syncthreads();
}

// ---- GEMV, rows of exactly one chunk (K = 1024) -------------------------------------------
// Each warp streams kR rows at once: kR x 4 independent 16-byte loads per lane in flight.
// The loads of a warp's FIRST iteration are issued separately (preload_k1024), before the
// barrier that guards the phase's input: weights do not depend on activations, so a phase's
// weights are already in flight while the block waits, and arithmetic starts the moment the
// input vector is ready. epi(row, acc, end) runs on lane 0 of the warp that owns the rows.
template <int kR>
using RowRegs = uint4[kR][kLoadsPerChunk];

template <int kR>
__device__ __forceinline__ void preload_k1024(const uint16_t* __restrict__ W, int r, int row_end, RowRegs<kR>& w) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const uint4* row = reinterpret_cast<const uint4*>(W + int64_t(r + i) * kChunk);
#pragma unroll
    for (int j = 0; j < kLoadsPerChunk; ++j)
      w[i][j] = (r + i < row_end) ? ld_weights_16B(row + j * 32 + lane) : make_uint4(0, 0, 0, 0);
  }
}

// tour:begin gemv
template <int kR, class Epi>
__device__ __forceinline__ void rows_k1024(const RowRegs<kR>& w, int r, int row_end, const float* s_x, Epi& epi) {
  const int lane = threadIdx.x & 31;
  const float4* x4 = reinterpret_cast<const float4*>(s_x);
  float acc[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) acc[i] = 0.f;
#pragma unroll
  for (int j = 0; j < kLoadsPerChunk; ++j) {
    // lane owns elements 8 * (32 j + lane) .. + 7 of the row: two float4 of the input vector
    const float4 a0 = x4[(j * 32 + lane) * 2], a1 = x4[(j * 32 + lane) * 2 + 1];
#pragma unroll
    for (int i = 0; i < kR; ++i) acc[i] = dot8_bf16(w[i][j], a0, a1, acc[i]);
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) acc[i] = warp_sum(acc[i]);
  if (lane == 0) epi(r, acc, row_end);
}
// tour:end gemv

// The rows [row_begin, row_end) of W (K = 1024) against s_x. `pre` holds the warp's first
// iteration (from preload_k1024 with r = row_begin + warp * kR). kPfDist > 0 additionally asks
// L2 for the rows kPfDist iterations ahead (the LM head: 18 iterations per warp).
template <int kR, int kPfDist, class Epi>
__device__ __forceinline__ void gemv_k1024(const uint16_t* __restrict__ W, int row_begin, int row_end, const float* s_x,
                                           const RowRegs<kR>& pre, Epi epi) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kStride = kWarps * kR;
  int r = row_begin + warp * kR;
  if (r >= row_end) return;
  if constexpr (kPfDist > 0) {
    if (lane == 0) {
#pragma unroll
      for (int d = 1; d <= kPfDist; ++d) {
        const int rp = r + d * kStride;
        if (rp < row_end) prefetch_l2_bulk(W + int64_t(rp) * kChunk, uint32_t(min(kR, row_end - rp)) * kChunk * 2);
      }
    }
  }
  rows_k1024<kR>(pre, r, row_end, s_x, epi);
  for (r += kStride; r < row_end; r += kStride) {
    if constexpr (kPfDist > 0) {
      const int rp = r + kPfDist * kStride;
      if (lane == 0 && rp < row_end)
        prefetch_l2_bulk(W + int64_t(rp) * kChunk, uint32_t(min(kR, row_end - rp)) * kChunk * 2);
    }
    RowRegs<kR> w;
    preload_k1024<kR>(W, r, row_end, w);
    rows_k1024<kR>(w, r, row_end, s_x, epi);
  }
}

// ---- GEMV, rows spanning kChunks chunks (O: K = 2048, down: K = 3072) ---------------------
// Units (row, chunk) are spread over the warps, kU per warp per iteration; partial sums go to
// shared memory and are added in chunk order by one thread per row (fixed order:
// deterministic). The first iteration's loads come preloaded, as above.
template <int kChunks, int kU>
__device__ __forceinline__ void preload_chunked(const uint16_t* __restrict__ W, int row_begin, int row_end, int u,
                                                RowRegs<kU>& w) {
  const int lane = threadIdx.x & 31;
  const int units = (row_end - row_begin) * kChunks;
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    const int uu = u + i;
    const uint4* src = reinterpret_cast<const uint4*>(W + int64_t(row_begin + uu / kChunks) * (kChunks * kChunk) +
                                                      (uu % kChunks) * kChunk);
#pragma unroll
    for (int j = 0; j < kLoadsPerChunk; ++j)
      w[i][j] = uu < units ? ld_weights_16B(src + j * 32 + lane) : make_uint4(0, 0, 0, 0);
  }
}

template <int kChunks, int kU>
__device__ __forceinline__ void units_chunked(const RowRegs<kU>& w, int u, int units, const float* s_x, float* s_part) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    const int uu = u + i;
    const float4* x4 = reinterpret_cast<const float4*>(s_x + (uu % kChunks) * kChunk);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kLoadsPerChunk; ++j)
      acc = dot8_bf16(w[i][j], x4[(j * 32 + lane) * 2], x4[(j * 32 + lane) * 2 + 1], acc);
    acc = warp_sum(acc);
    if (lane == 0 && uu < units) s_part[uu] = acc;
  }
}

template <int kChunks, int kU, class Epi>
__device__ __forceinline__ void gemv_chunked(const uint16_t* __restrict__ W, int row_begin, int row_end, const float* s_x,
                                             float* s_part, const RowRegs<kU>& pre, Epi epi) {
  const int warp = threadIdx.x >> 5;
  const int units = (row_end - row_begin) * kChunks;
  int u = warp * kU;
  if (u < units) units_chunked<kChunks, kU>(pre, u, units, s_x, s_part);
  for (u += kWarps * kU; u < units; u += kWarps * kU) {
    RowRegs<kU> w;
    preload_chunked<kChunks, kU>(W, row_begin, row_end, u, w);
    units_chunked<kChunks, kU>(w, u, units, s_x, s_part);
  }
  __syncthreads();
  const int rows = row_end - row_begin;
  if (threadIdx.x < rows) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc += s_part[threadIdx.x * kChunks + c];
    epi(row_begin + threadIdx.x, acc);
  }
}

// Bulk L2 prefetch of K and V of positions [0, pos) of one layer and KV head.
__device__ __forceinline__ void prefetch_kv_history(const uint16_t* kv, int layer, int kvh, int pos) {
  const int64_t base = ((int64_t(layer) * 2) * kNumKVHeads + kvh) * int64_t(kContextCap) * kHeadDim;
  prefetch_l2_bulk(kv + base, uint32_t(pos) * kHeadDim * 2);
  prefetch_l2_bulk(kv + base + int64_t(kNumKVHeads) * kContextCap * kHeadDim, uint32_t(pos) * kHeadDim * 2);
}

// The next phases' weights of layer L (its O, gate/up and down, then, when with_next_qkv, the
// next layer's qkv: one contiguous range of the packed buffer) asked into L2 by warp 0 of each of
// the G - 16 non-attention blocks. Weights never depend on activations, so they can be asked for
// early; whether that pays is the A/B of UpstreamCfg::kL2PrefetchMode (results/m1_l2_prefetch_ab.json).
__device__ __forceinline__ void prefetch_next_phases(const uint16_t* W, int L, bool with_next_qkv, int b, int G) {
  const int64_t elems = (with_next_qkv && L + 1 < kNumLayers ? kLayerElems + kOffO : kLayerElems) - kOffO;
  const int lane = threadIdx.x & 31;
  prefetch_l2_range(W + kOffO, elems * 2, (b - kAttnBlocks) * 32 + lane, (G - kAttnBlocks) * 32, 16 * 1024);
}

// ---- what every schedule does first and last ----------------------------------------------

// A failed earlier step poisons the stream (do nothing until the host resets the state); a bad
// token or position is an error, never an out-of-bounds read.
__device__ __forceinline__ bool step_inputs_ok(const StepParams& p, int* pos, int* token) {
  SyncState* S = p.sync;
  if (*(volatile uint32_t*)&S->error != 0u) return false;
  *pos = *(volatile int32_t*)&S->pos;
  *token = *(volatile const int32_t*)p.token_in;
  if (*token < 0 || *token >= kVocab) {
    if (blockIdx.x == 0 && threadIdx.x == 0) raise_error(S, kErrBadToken, uint32_t(*token));
    return false;
  }
  if (*pos < 0 || *pos >= kContextCap) {
    if (blockIdx.x == 0 && threadIdx.x == 0) raise_error(S, kErrBadPosition, uint32_t(*pos));
    return false;
  }
  return true;
}

// Thread 0: publish this block's best (value, index) and count the block done. Returns true in
// the last block to finish, which then reduces (no grid barrier: an arrival counter).
__device__ __forceinline__ bool publish_block_argmax(const StepParams& p, float bv, int bi) {
  p.scr[kScrBlockMax + blockIdx.x] = bv;
  reinterpret_cast<int*>(p.scr)[kScrBlockIdx + blockIdx.x] = bi;
  __threadfence();
  const uint32_t arrived = atomicAdd(&p.sync->done, 1u);
  return arrived == gridDim.x - 1;
}

// Warp 0 of the last block: every other block has finished every wait, so it may reduce the
// per-block winners (ties: lowest index) and reset the counters for the next launch.
__device__ __forceinline__ void finish_argmax(const StepParams& p, int pos) {
  const int lane = threadIdx.x & 31, G = gridDim.x;
  SyncState* S = p.sync;
  __threadfence();
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = lane; i < G; i += 32) {
    const float v = ldcg_f32(p.scr + kScrBlockMax + i);
    const int id = __ldcg(reinterpret_cast<const int*>(p.scr) + kScrBlockIdx + i);
    if (v > bv || (v == bv && id < bi)) {
      bv = v;
      bi = id;
    }
  }
  warp_argmax(bv, bi);
  if (lane == 0) {
    *p.token_out = bi;
    S->pos = pos + 1;
    S->steps += 1;
    S->bar = 0;
    S->attn_done = 0;
    S->done = 0;
#pragma unroll
    for (int k = 0; k < kNumKVHeads; ++k) S->kv_flag[k] = 0;
    __threadfence();
  }
}

#include "schedule_stream.cuh"

// ---- the bf16-upstream schedule -----------------------------------------------------------
template <class Cfg>
__device__ __forceinline__ void upstream_step(const StepParams& p) {
  __shared__ __align__(16) float s_x[kSmemX];
  __shared__ __align__(16) float s_part[kSmemPartials];
  __shared__ __align__(16) float s_scores[kSmemScores];
  __shared__ __align__(16) float s_acc[kSmemAttnAcc];
  __shared__ float s_red[kSmemRed];
  __shared__ float s_q[kHeadDim], s_tmp[kHeadDim];
  __shared__ int s_flag;
  __shared__ int s_bestidx[kWarps];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int G = gridDim.x, b = blockIdx.x;
  SyncState* S = p.sync;
  float* scr = p.scr;
  float* hidden = scr + kScrHidden;
  XRAY_INIT(p.xray);
  XRAY_BEGIN();

  int pos, token;
  if (!step_inputs_ok(p, &pos, &token)) return;
  if (p.stop_phase == kFaultBlock0Exits && b == 0) return;
  const uint16_t* emb_row = p.embed + int64_t(token) * kHidden;
  const float* rope_row = p.rope + int64_t(pos) * kHeadDim;
  uint32_t gen = 0;  // grid barriers passed in this launch
  const long long tmo = p.timeout_cycles;
  // A grid barrier in two intervals for the X-ray: the arrival (its release fence) and the wait.
  auto barrier = [&](int layer, uint32_t which) -> bool {
    grid_arrive(S);
    XRAY_END(arrive, layer);
    return grid_wait(S, ++gen, tmo, uint32_t(layer) * 16u + which, &s_flag);
  };

  // Row ranges of this block in each phase (contiguous: a block streams one piece of each matrix).
  constexpr int kRq = Cfg::kRowsPerIterQKV, kRg = Cfg::kRowsPerIterGateUp, kUo = Cfg::kUnitsPerIterO,
                kUd = Cfg::kUnitsPerIterDown;
  const int q0 = int(part_begin(kQKVRows, G, b)), q1 = int(part_begin(kQKVRows, G, b + 1));
  const int h0 = int(part_begin(kHidden, G, b)), h1 = int(part_begin(kHidden, G, b + 1));
  // O-projection rows go to the blocks that do not do attention: they are idle during it and
  // can have their O weights in flight early; the attention blocks go straight to barrier 2.
  const int ob = b - kAttnBlocks, og = G - kAttnBlocks;
  const int o0 = ob < 0 ? 0 : int(part_begin(kHidden, og, ob)), o1 = ob < 0 ? 0 : int(part_begin(kHidden, og, ob + 1));
  const int g0 = 2 * int(part_begin(kIntermediate, G, b)), g1 = 2 * int(part_begin(kIntermediate, G, b + 1));

  RowRegs<kRq> pre_qkv;  // next qkv phase's first loads, issued before the barrier that precedes it
  if constexpr (!Cfg::kPreloadL2) preload_k1024<kRq>(p.w + kOffQKV, q0 + warp * kRq, q1, pre_qkv);

  for (int L = 0; L < kNumLayers; ++L) {
    const uint16_t* W = p.w + int64_t(L) * kLayerElems;
    const uint16_t* N = p.norms + int64_t(L) * kNormLayerElems;
    if constexpr (Cfg::kPreloadL2) preload_k1024<kRq>(W + kOffQKV, q0 + warp * kRq, q1, pre_qkv);

    // ---------------- qkv ----------------
    // The attention of a layer reads K/V of positions 0..pos-1, written by earlier steps and
    // long evicted from L2. Ask for the NEXT layer's history now, a whole layer ahead: issued
    // later it would queue behind the 31.5 MB weight prefetch and stall the attention chain.
    if (b < kAttnBlocks && b % kHeadsPerKV == 0 && tid == 0 && pos > 0) {
      for (int l = (L == 0 ? 0 : L + 1); l <= L + 1 && l < kNumLayers; ++l) prefetch_kv_history(p.kv, l, b / kHeadsPerKV, pos);
    }
    if constexpr (Cfg::kL2PrefetchMode == 3) {
      // mode 3: requested before this layer's qkv GEMV, so the burst drains while qkv runs
      if (b >= kAttnBlocks && warp == 0) prefetch_next_phases(W, L, true, b, G);
    }
    if (L == 0) {
      rmsnorm_to_smem<true>(emb_row, N + kNormInLn, s_x, s_red);
      // Seed the residual stream with the embedding row (this block's slice; read after barrier 1).
      for (int i = h0 + tid; i < h1; i += kThreads) hidden[i] = __uint_as_float(uint32_t(emb_row[i]) << 16);
    } else {
      rmsnorm_to_smem<false>(hidden, N + kNormInLn, s_x, s_red);
    }
    if (b == 0)
      for (int i = tid; i < kHidden; i += kThreads) scr[kScrNormIn + i] = s_x[i];
    {
      float* qkv = scr + kScrQKV;
      gemv_k1024<kRq, 0>(W + kOffQKV, q0, q1, s_x, pre_qkv, [&](int r, const float* acc, int end) {
#pragma unroll
        for (int i = 0; i < kRq; ++i)
          if (r + i < end) qkv[r + i] = acc[i];
      });
    }
    XRAY_END(qkv, L);
    if (!barrier(L, 1)) return;
    XRAY_END(bar_qkv, L);
    if (p.stop_layer == L && p.stop_phase == kStopQKV) return;

    // ---------------- attention / L2 prefetch ----------------
    if (b < kAttnBlocks) {
      const int h = b, kvh = h / kHeadsPerKV;
      const bool leader = (h % kHeadsPerKV) == 0;
      uint16_t* kcache = p.kv + ((int64_t(L) * 2 + 0) * kNumKVHeads + kvh) * int64_t(kContextCap) * kHeadDim;
      uint16_t* vcache = p.kv + ((int64_t(L) * 2 + 1) * kNumKVHeads + kvh) * int64_t(kContextCap) * kHeadDim;
      float* s_k = s_acc;                // this position's K (bf16-rounded), free until the V pass
      float* s_ktmp = s_acc + kHeadDim;  // K before RoPE
      // q, k and v of this head in one round trip through L2, both QK-norms in one reduction.
      float qv = 0.f, kv = 0.f, vv = 0.f;
      if (tid < kHeadDim) {
        qv = ldcg_f32(scr + kScrQKV + h * kHeadDim + tid);
        kv = ldcg_f32(scr + kScrQKV + kQDim + kvh * kHeadDim + tid);
        vv = ldcg_f32(scr + kScrQKV + kQDim + kKVDim + kvh * kHeadDim + tid);
      }
      const float2 ss = block_sum2(qv * qv, kv * kv, s_red);
      if (tid < kHeadDim) {
        s_tmp[tid] = qv * rsqrtf(ss.x / float(kHeadDim) + kRmsEps) * __uint_as_float(uint32_t(N[kNormQ + tid]) << 16);
        s_ktmp[tid] = kv * rsqrtf(ss.y / float(kHeadDim) + kRmsEps) * __uint_as_float(uint32_t(N[kNormK + tid]) << 16);
      }
      __syncthreads();
      if (tid < kHeadDim) {
        // RoPE, rotate-half pairing (i, i + 64)
        const int i = tid & 63;
        const float c = rope_row[i], sn = rope_row[64 + i];
        const bool lo = tid < 64;
        const float q = lo ? s_tmp[tid] * c - s_tmp[tid + 64] * sn : s_tmp[tid] * c + s_tmp[tid - 64] * sn;
        s_q[tid] = q;
        scr[kScrQRot + h * kHeadDim + tid] = q;
        if (leader) {
          // Append this position's K and V to the cache; the score of this position uses the
          // same bf16-rounded K in both heads of the pair.
          const float k = lo ? s_ktmp[tid] * c - s_ktmp[tid + 64] * sn : s_ktmp[tid] * c + s_ktmp[tid - 64] * sn;
          const __nv_bfloat16 kb = __float2bfloat16_rn(k);
          kcache[int64_t(pos) * kHeadDim + tid] = __bfloat16_as_ushort(kb);
          vcache[int64_t(pos) * kHeadDim + tid] = __bfloat16_as_ushort(__float2bfloat16_rn(vv));
          scr[kScrKRot + kvh * kHeadDim + tid] = k;
          s_k[tid] = __bfloat162float(kb);
        }
      }
      __syncthreads();
      if (leader && tid == 0) {  // flag sync 1: K/V of this position are in the cache
        st_release(&S->kv_flag[kvh], uint32_t(L + 1));
      }
      // Scores of the cached positions 0..pos-1 (prefetched into L2 at the start of the layer):
      // one thread per position, 16 x 16-byte loads of its K row. They do not need this
      // position's K, so the second head of the pair does them before waiting on the flag.
      const float scale = rsqrtf(float(kHeadDim));
      float mx = -INFINITY;
      for (int t = tid; t < pos; t += kThreads) {
        const uint4* krow = reinterpret_cast<const uint4*>(kcache + int64_t(t) * kHeadDim);
        uint4 kw[kHeadDim / 8];
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) kw[j] = __ldcg(krow + j);
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          const float4* q4 = reinterpret_cast<const float4*>(s_q + j * 8);
          acc = dot8_bf16(kw[j], q4[0], q4[1], acc);
        }
        acc *= scale;
        s_scores[t] = acc;
        mx = fmaxf(mx, acc);
      }
      if (!leader) {
        XRAY_END(attn, L);
        // tour:begin flagwait
        if (!block_wait_geq(S, &S->kv_flag[kvh], uint32_t(L + 1), tmo, kErrFlagKVTimeout, L * 16 + 2, &s_flag)) return;
        // tour:end flagwait
        XRAY_END(flag_kv, L);
        if (tid < kHeadDim) s_k[tid] = __uint_as_float(uint32_t(__ldcg(kcache + int64_t(pos) * kHeadDim + tid)) << 16);
        __syncthreads();
      }
      if (warp == 0) {  // score of this position
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < kHeadDim / 32; ++i) acc = fmaf(s_q[lane + 32 * i], s_k[lane + 32 * i], acc);
        acc = warp_sum(acc) * scale;
        if (lane == 0) {
          s_scores[pos] = acc;
          mx = fmaxf(mx, acc);
        }
      }
      mx = warp_max(mx);
      __syncthreads();
      if (lane == 0) s_red[warp] = mx;
      __syncthreads();
      mx = s_red[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_red[w]);
      float sum = 0.f;
      for (int t = tid; t <= pos; t += kThreads) {
        const float e = __expf(s_scores[t] - mx);
        s_scores[t] = e;
        sum += e;
      }
      const float denom = block_sum(sum, s_red + kWarps);
      // V: warp w takes positions w, w + 16, ...; lane covers dims 4*lane .. 4*lane + 3.
      // V: each half-warp reads one V row (16 lanes x 16 B), so a warp covers 2 positions per
      // load and kVUnroll loads are in flight: one memory round trip per 2*16*kVUnroll positions.
      constexpr int kVUnroll = Cfg::kVUnroll;
      const int half = lane >> 4, l16 = lane & 15;
      float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int t0 = 2 * warp + half; t0 <= pos; t0 += 2 * kWarps * kVUnroll) {
        uint4 vv[kVUnroll];
        float pt[kVUnroll];
#pragma unroll
        for (int u = 0; u < kVUnroll; ++u) {
          const int t = t0 + u * 2 * kWarps;
          const bool in = t <= pos;
          vv[u] = in ? __ldcg(reinterpret_cast<const uint4*>(vcache + int64_t(t) * kHeadDim) + l16) : make_uint4(0, 0, 0, 0);
          pt[u] = in ? s_scores[t] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kVUnroll; ++u) {
          const uint32_t w4[4] = {vv[u].x, vv[u].y, vv[u].z, vv[u].w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            o[2 * i] = fmaf(pt[u], __uint_as_float(w4[i] << 16), o[2 * i]);
            o[2 * i + 1] = fmaf(pt[u], __uint_as_float(w4[i] & 0xffff0000u), o[2 * i + 1]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] += __shfl_xor_sync(0xffffffffu, o[i], 16);  // fixed order: deterministic
      __syncthreads();  // s_acc held K in the leader until here
      if (half == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) s_acc[warp * kHeadDim + l16 * 8 + i] = o[i];
      }
      __syncthreads();
      if (tid < kHeadDim) {
        float a = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) a += s_acc[w * kHeadDim + tid];
        scr[kScrAttn + h * kHeadDim + tid] = a / denom;
      }
      __syncthreads();
      if (tid == 0) {
        red_release_add(&S->attn_done, 1u);
      }
      XRAY_END(attn, L);
    } else {
      // modes 1 and 2: upstream's productive wait, while 16 blocks do attention (23 / 31.5 MB)
      if constexpr (Cfg::kL2PrefetchMode == 1 || Cfg::kL2PrefetchMode == 2) {
        if (warp == 0) prefetch_next_phases(W, L, Cfg::kL2PrefetchMode == 2, b, G);
      }
      XRAY_END(prefetch, L);
    }
    RowRegs<kUo> pre_o;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && o1 > o0) prefetch_l2_bulk(W + kOffO + int64_t(o0) * kQDim, uint32_t(o1 - o0) * kQDim * 2);
    } else {
      preload_chunked<kQDim / kChunk, kUo>(W + kOffO, o0, o1, warp * kUo, pre_o);
    }
    // the residual rows this block will update, stable since barrier 1: read them before the wait
    const float resid_o = tid < o1 - o0 ? ldcg_f32(hidden + o0 + tid) : 0.f;
    if (!block_wait_geq(S, &S->attn_done, uint32_t(kAttnBlocks * (L + 1)), tmo, kErrFlagAttnTimeout, L * 16 + 3,
                        &s_flag))
      return;
    XRAY_END(flag_attn, L);
    if (p.stop_layer == L && p.stop_phase == kStopAttn) return;
    if constexpr (Cfg::kPreloadL2) preload_chunked<kQDim / kChunk, kUo>(W + kOffO, o0, o1, warp * kUo, pre_o);

    // ---------------- O projection + residual ----------------
    if (o1 > o0) {
      load_to_smem(scr + kScrAttn, s_x, kQDim);
      gemv_chunked<kQDim / kChunk, kUo>(W + kOffO, o0, o1, s_x, s_part, pre_o,
                                        [&](int r, float d) { hidden[r] = resid_o + d; });
    }
    RowRegs<kRg> pre_gu;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && g1 > g0) prefetch_l2_bulk(W + kOffGateUp + int64_t(g0) * kHidden, uint32_t(g1 - g0) * kHidden * 2);
    } else {
      preload_k1024<kRg>(W + kOffGateUp, g0 + warp * kRg, g1, pre_gu);
    }
    XRAY_END(oproj, L);
    if (!barrier(L, 4)) return;
    XRAY_END(bar_o, L);
    if (p.stop_layer == L && p.stop_phase == kStopO) return;
    if constexpr (Cfg::kPreloadL2) preload_k1024<kRg>(W + kOffGateUp, g0 + warp * kRg, g1, pre_gu);

    // ---------------- gate/up + SiLU ----------------
    rmsnorm_to_smem<false>(hidden, N + kNormPostLn, s_x, s_red);
    if (b == 0)
      for (int i = tid; i < kHidden; i += kThreads) scr[kScrNormPost + i] = s_x[i];
    {
      float* act = scr + kScrAct;
      // rows 2i (gate i) and 2i+1 (up i) are streamed together by one warp
      static_assert(kRg % 2 == 0, "gate and up rows of a pair stay in one warp");
      gemv_k1024<kRg, 0>(W + kOffGateUp, g0, g1, s_x, pre_gu, [&](int r, const float* acc, int end) {
#pragma unroll
        for (int i = 0; i < kRg; i += 2) {
          if (r + i < end) {
            const float g = acc[i], u = acc[i + 1];
            act[(r + i) / 2] = g / (1.f + __expf(-g)) * u;
          }
        }
      });
    }
    RowRegs<kUd> pre_dn;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && h1 > h0)
        prefetch_l2_bulk(W + kOffDown + int64_t(h0) * kIntermediate, uint32_t(h1 - h0) * kIntermediate * 2);
    } else {
      preload_chunked<kIntermediate / kChunk, kUd>(W + kOffDown, h0, h1, warp * kUd, pre_dn);
    }
    const float resid_d = tid < h1 - h0 ? ldcg_f32(hidden + h0 + tid) : 0.f;  // stable since barrier 2
    XRAY_END(gateup, L);
    if (!barrier(L, 5)) return;
    XRAY_END(bar_gateup, L);
    if (p.stop_layer == L && p.stop_phase == kStopGateUp) return;
    if constexpr (Cfg::kPreloadL2) preload_chunked<kIntermediate / kChunk, kUd>(W + kOffDown, h0, h1, warp * kUd, pre_dn);

    // ---------------- down + residual ----------------
    load_to_smem(scr + kScrAct, s_x, kIntermediate);
    gemv_chunked<kIntermediate / kChunk, kUd>(W + kOffDown, h0, h1, s_x, s_part, pre_dn,
                                              [&](int r, float d) { hidden[r] = resid_d + d; });
    // Next layer's first qkv loads (an empty row range after the last layer keeps the
    // definition unconditional, so the registers are not live across the whole loop).
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && L + 1 < kNumLayers)
        prefetch_l2_bulk(W + kLayerElems + kOffQKV + int64_t(q0) * kHidden, uint32_t(q1 - q0) * kHidden * 2);
    } else {
      preload_k1024<kRq>(W + kLayerElems + kOffQKV, q0 + warp * kRq, L + 1 < kNumLayers ? q1 : 0, pre_qkv);
    }
    XRAY_END(down, L);
    if (!barrier(L, 6)) return;
    XRAY_END(bar_down, L);
    if (p.stop_layer == L && p.stop_phase == kStopDown) return;
  }

  // ---------------- final norm + LM head + argmax ----------------
  constexpr int kRh = Cfg::kRowsPerIterHead;
  const int v0 = int(part_begin(kVocab, G, b)), v1 = int(part_begin(kVocab, G, b + 1));
  RowRegs<kRh> pre_head;  // first LM-head rows in flight while the final norm runs
  preload_k1024<kRh>(p.embed, v0 + warp * kRh, v1, pre_head);
  rmsnorm_to_smem<false>(hidden, p.final_norm, s_x, s_red);
  if (b == 0)
    for (int i = tid; i < kHidden; i += kThreads) scr[kScrFinalNorm + i] = s_x[i];
  float best = -INFINITY;
  int best_i = 0x7fffffff;
  {
    constexpr int kR = kRh;
    // Rows are visited in increasing order per warp and only a strictly larger logit replaces
    // the best: ties keep the lowest index, as torch.argmax does.
    gemv_k1024<kR, Cfg::kHeadPrefetchDistance>(p.embed, v0, v1, s_x, pre_head,
                   [&](int r, const float* acc, int end) {
#pragma unroll
                     for (int i = 0; i < kR; ++i) {
                       if (r + i < end) {
                         p.logits[r + i] = acc[i];
                         if (acc[i] > best) {
                           best = acc[i];
                           best_i = r + i;
                         }
                       }
                     }
                   });
  }
  __syncthreads();
  if (lane == 0) {
    s_red[warp] = best;
    s_bestidx[warp] = best_i;
  }
  __syncthreads();
  if (tid == 0) {
    float bv = s_red[0];
    int bi = s_bestidx[0];
    for (int w = 1; w < kWarps; ++w) {
      if (s_red[w] > bv || (s_red[w] == bv && s_bestidx[w] < bi)) {
        bv = s_red[w];
        bi = s_bestidx[w];
      }
    }
    s_flag = publish_block_argmax(p, bv, bi) ? 1 : 0;
  }
  __syncthreads();
  XRAY_END(lmhead, kNumLayers);
  if (s_flag == 0) return;
  if (warp == 0) finish_argmax(p, pos);
  XRAY_END(argmax, kNumLayers);
}

// ---- the step kernel: one template, the schedule chosen at compile time ---------------------
template <int kVariant>
__global__ void __launch_bounds__(VariantCfg<kVariant>::kBlockThreads, 1) decode_step(const StepParams p) {
  using Cfg = VariantCfg<kVariant>;
  if constexpr (Cfg::kStream) {
    stream_step<Cfg>(p);
  } else {
    upstream_step<Cfg>(p);
  }
}

// ---- host side ----------------------------------------------------------------------------
struct KernelInfo {
  const void* fn;
  int threads;
  int dynamic_smem;
};

template <int kVariant>
KernelInfo info_of() {
  using Cfg = VariantCfg<kVariant>;
  return {reinterpret_cast<const void*>(&decode_step<kVariant>), Cfg::kBlockThreads, Cfg::kDynamicSmem};
}

static KernelInfo kernel_for(int variant) {
  switch (variant) {
    case kVariantBf16Upstream:
      return info_of<kVariantBf16Upstream>();
    case kVariantBf16UpstreamL2Pre:
      return info_of<kVariantBf16UpstreamL2Pre>();
    case kVariantBf16Stream:
      return info_of<kVariantBf16Stream>();
    default:
      return {nullptr, 0, 0};
  }
}

// The ring lives in dynamic shared memory beyond the 48 KB default: opt in once per variant
// (the device's opt-in limit is checked by max_coresident_blocks before any launch).
static cudaError_t prepare(const KernelInfo& k) {
  if (k.dynamic_smem == 0) return cudaSuccess;
  return cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.dynamic_smem);
}

cudaError_t launch_step(const StepParams& p, int variant, int blocks, cudaStream_t stream) {
  const KernelInfo k = kernel_for(variant);
  const int min_blocks = variant == kVariantBf16Stream ? kMinStreamBlocks : kMinBlocks;
  if (k.fn == nullptr || blocks < min_blocks || blocks > kMaxGrid) return cudaErrorInvalidValue;
  cudaError_t e = prepare(k);
  if (e != cudaSuccess) return e;
  void* args[] = {const_cast<StepParams*>(&p)};
  return cudaLaunchKernel(k.fn, dim3(blocks), dim3(k.threads), args, size_t(k.dynamic_smem), stream);
}

int max_coresident_blocks(int variant, int device, cudaError_t* err) {
  const KernelInfo k = kernel_for(variant);
  if (k.fn == nullptr) {
    *err = cudaErrorInvalidValue;
    return 0;
  }
  int per_sm = 0, sms = 0, optin = 0;
  *err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (*err != cudaSuccess) return 0;
  cudaFuncAttributes a{};
  *err = cudaFuncGetAttributes(&a, k.fn);
  if (*err != cudaSuccess) return 0;
  if (int(a.sharedSizeBytes) + k.dynamic_smem > optin) return 0;  // cannot launch at all on this GPU
  *err = prepare(k);
  if (*err != cudaSuccess) return 0;
  *err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, size_t(k.dynamic_smem));
  if (*err != cudaSuccess) return 0;
  *err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return *err == cudaSuccess ? per_sm * sms : 0;
}

cudaError_t kernel_attributes(int variant, cudaFuncAttributes* out) {
  const KernelInfo k = kernel_for(variant);
  if (k.fn == nullptr) return cudaErrorInvalidValue;
  return cudaFuncGetAttributes(out, k.fn);
}

}  // namespace plain_build / xray_build
}  // namespace monolith
