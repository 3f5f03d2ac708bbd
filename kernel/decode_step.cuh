// monolith: the step kernels of every variant (decode_step, decode_step_long, decode_step_wide),
// their compile-time configurations (VariantCfg), both schedules, and the host's descriptor of a
// variant's kernels (KernelInfo, info_of). Not a stand-alone header: kernel/step_unit.cuh includes it
// inside the build's namespace (plain_build / xray_build) for every translation unit of step kernels.
// Compile-time configuration of a variant.
template <int kVariant>
struct VariantCfg;

struct UpstreamCfg {
  static constexpr bool kStream = false;
  using Weights = WeightsBf16;                  // weight format of every GEMV and the embedding (dequant.cuh)
  static constexpr int kBlockThreads = kThreads;
  static constexpr bool kSm120Config = false;  // (StreamCfg)
  static constexpr bool kLongKernel = false;    // one kernel at every position (StreamCfg's has two)
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

// fp8-upstream: the same schedule on E4M3 weights with one fp32 scale per row (quant/fp8_layout.py,
// rowmajor-v1: the rows, their order and the element offsets of the bf16 buffer, one byte per
// weight). Every GEMV and the LM head dequantize in registers (dequant.cuh, WeightsE4M3); the
// embedding lookup dequantizes the token's row of the same (tied) matrix.
// A row of 1,024 weights is now 1 KB: 2 loads per lane instead of 4. The row partition per block
// stays: at 132 blocks qkv (31 rows per block), O (9 rows x 2 chunks), gate/up (47 rows) and down
// (8 rows x 3 chunks) are already one iteration of the block's 16 warps, so the whole slice of
// each phase is in flight before the wait that precedes it, with either format; more rows per warp
// would only leave warps idle. The LM head (1,151 rows per block) is the one phase with many
// iterations: 8 rows per warp keeps bf16's bytes per iteration (16 loads per lane, 128 KB per
// block, 17.3 MB grid-wide), so the L2 prefetch distance of 2 iterations still asks for ~35 MB
// of the 60 MB L2, and 9 iterations instead of 18 halve its per-iteration overheads.
template <>
struct VariantCfg<kVariantFp8Upstream> : UpstreamCfg {
  using Weights = WeightsE4M3;
  static constexpr int kRowsPerIterHead = 8;
};

struct StreamCfg {
  static constexpr bool kStream = true;
  using Weights = WeightsBf16;  // what the ring's slots hold (schedule_stream.cuh, StreamFmt)
  static constexpr int kBlockThreads = kStreamThreads;
  // The sm_120 configuration (policy.cuh: the 4-slot ring and sm_120's choices) on every arch; else
  // the arch's own (sm_120a builds are always the sm_120 configuration). The ring is the dynamic
  // shared memory: the host sizes it from the device (ring_bytes_on).
  static constexpr bool kSm120Config = false;
  static constexpr int kBaseVariant = -1;  // an sm_120-configuration variant: the variant it configures
  // A second kernel for positions >= kLongKernelFrom (decode_step_long; policy.cuh's kMergeHalves):
  // faster at long positions on every format, slower at short ones (docs/EXPERIMENTS.md).
  static constexpr bool kLongKernel = true;
  // The GEMV rounds on the tensor cores (policy.cuh kTcGemv, stream_mma.cuh): fp8-stream-tc
  static constexpr bool kTcGemv = false;
  // Vectors per pass (policy.cuh kVecs; issue 48): B's columns of the tensor-core rounds
  static constexpr int kTcVecs = 1;
};
template <>
struct VariantCfg<kVariantBf16Stream> : StreamCfg {};
// The same schedule on E4M3 codes: a 16 KB slot holds twice the rows, so every phase streams half
// the slots; the rounds, hops and words are the same code (StreamFmt in schedule_stream.cuh).
template <>
struct VariantCfg<kVariantFp8Stream> : StreamCfg {
  using Weights = WeightsE4M3;
};
// The same schedule on NVFP4 layers (issue 14; its LM head and embedding stay FP8: WeightsNvfp4::Head):
// a slot holds 32 rows of K = 1024 (128 of O's K = 256); the block scales are read from L2 a round
// ahead, the tensor scale multiplies each row once (StreamFmt<WeightsNvfp4> in schedule_stream.cuh).
template <>
struct VariantCfg<kVariantNvfp4Stream> : StreamCfg {
  using Weights = WeightsNvfp4;
};
// The sm_120 configuration of each streaming variant, for any arch. An sm_120a build compiles the
// base variants in that configuration already, so there these ids launch their base's kernels
// (kernel_for) and their own compile to nothing (stream_compiled).
template <int kBase>
struct Sm120Cfg : VariantCfg<kBase> {
  static constexpr bool kSm120Config = true;
  static constexpr int kBaseVariant = kBase;
};
template <>
struct VariantCfg<kVariantBf16StreamSm120> : Sm120Cfg<kVariantBf16Stream> {};
template <>
struct VariantCfg<kVariantFp8StreamSm120> : Sm120Cfg<kVariantFp8Stream> {};
template <>
struct VariantCfg<kVariantNvfp4StreamSm120> : Sm120Cfg<kVariantNvfp4Stream> {};
// fp8-stream's schedule and weights with qkv, MLP-1 and down on the tensor cores (issue 48's k-pass
// kernel at k = 1: notes/ktoken.md; the codes of those phases swizzled at upload, stream_mma.cuh).
// One kernel at every position (no long or wide kernel yet: the short kernel is correct at every
// position, MegakernelEngine runs it there), in a translation unit of its own (megakernel_tc.cu).
template <>
struct VariantCfg<kVariantFp8StreamTc> : VariantCfg<kVariantFp8Stream> {
  static constexpr bool kTcGemv = true;
  static constexpr bool kLongKernel = false;
};
// fp8-stream-tc with k vectors per pass (issue 48 step 4, notes/ktoken.md §7a): the tensor-core rounds
// take B's columns 0 .. k - 1, sm.x / sm.act / sm.part hold k vectors' inputs and sums, the ring is §1's
// depth for k (policy.cuh). Compiled (kernel/megakernel_tck.cu), never launched: the hops, attention,
// O and the LM head carry one vector, so no host path reaches these kernels (kernel_for: null; the
// engine refuses the variants in one line, monolith/kernel_spec.py check_runnable). sm_120a compiles
// k <= 2 only (stream_compiled).
template <int kK>
struct TcKCfg : VariantCfg<kVariantFp8StreamTc> {
  static constexpr int kTcVecs = kK;
};
template <>
struct VariantCfg<kVariantFp8StreamTcK2> : TcKCfg<2> {};
template <>
struct VariantCfg<kVariantFp8StreamTcK4> : TcKCfg<4> {};
template <>
struct VariantCfg<kVariantFp8StreamTcK8> : TcKCfg<8> {};
// Whether this pass compiles Cfg's streaming kernels (see Sm120Cfg; an sm_120a pass compiles no kernel
// of more vectors per pass than that configuration takes: kTcVecsMaxSm120).
template <class Cfg>
__host__ __device__ constexpr bool stream_compiled() {
  return !(Cfg::kSm120Config && kArchSm120) && !(kArchSm120 && Cfg::kTcVecs > kTcVecsMaxSm120);
}
// The ring (dynamic shared memory) of a streaming Cfg on a device of the sm_120 family or not: the
// ring of the Policy its kernels were compiled with (stream_step), 0 for the upstream schedule.
template <class Cfg>
__host__ __device__ constexpr int ring_bytes_on(bool device_sm120) {
  if constexpr (!Cfg::kStream) {
    return 0;
  } else {
    using W = typename Cfg::Weights;
    return Cfg::kSm120Config || device_sm120 ? Policy<W, KernelKind::kShort, true, Cfg::kTcGemv, Cfg::kTcVecs>::kRingBytes
                                             : Policy<W, KernelKind::kShort, false, Cfg::kTcGemv, Cfg::kTcVecs>::kRingBytes;
  }
}

__device__ __forceinline__ int64_t part_begin(int64_t n, int parts, int i) { return n * i / parts; }

__device__ __forceinline__ float ldcg_f32(const float* p) { return __ldcg(p); }

// The packed layer weights and the embedding (= tied LM head) of a weight format.
template <class Fmt>
__device__ __forceinline__ const typename Fmt::Elem* weights_of(const StepParams& p) {
  if constexpr (Fmt::kRowScale) return p.codes; else return p.w;
}
template <class Fmt>
__device__ __forceinline__ const typename Fmt::Elem* embed_of(const StepParams& p) {
  if constexpr (Fmt::kRowScale) return p.embed_codes; else return p.embed;
}

// Bulk L2 prefetch of [p, p + bytes) widened to whole 16-byte units (the instruction's
// granularity). Only for arrays that start 16-byte aligned and whose size is a multiple of 16, so
// the widened range stays inside them (the fp8 scale vectors: kVocab * 4 and kLayerRows * 4 bytes).
__device__ __forceinline__ void prefetch_l2_span(const void* p, int64_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes) + 15) & ~uintptr_t(15);
  if (e > a) prefetch_l2_bulk(reinterpret_cast<const void*>(a), uint32_t(e - a));
}
static_assert((int64_t(kVocab) * 4) % 16 == 0, "the LM-head scale vector is whole 16-byte units");

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

// s_x[i] = RMSNorm(src)[i] * weight[i] over kHidden elements, src(i) the fp32 value of element i:
// the fp32 residual (read through L2: it was written by other blocks) or, for layer 0, the
// embedding row in the variant's weight format (rmsnorm_to_smem_by).
template <class Src>
__device__ __forceinline__ void rmsnorm_to_smem_by(Src src, const uint16_t* weight, float* s_x, float* red) {
  constexpr int kPer = kHidden / kThreads;
  float v[kPer];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * kThreads;
    v[j] = src(i);
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
// The fp32 residual (kSrcBf16 = false) or a bf16 row.
template <bool kSrcBf16>
__device__ __forceinline__ void rmsnorm_to_smem(const void* src, const uint16_t* weight, float* s_x, float* red) {
  rmsnorm_to_smem_by(
      [src](int i) {
        if constexpr (kSrcBf16) {
          return __uint_as_float(uint32_t(static_cast<const uint16_t*>(src)[i]) << 16);
        } else {
          return ldcg_f32(static_cast<const float*>(src) + i);
        }
      },
      weight, s_x, red);
}

// Copy n fp32 activations written by other blocks into shared memory.
__device__ __forceinline__ void load_to_smem(const float* src, float* s_x, int n) {
  for (int i = threadIdx.x * 4; i < n; i += kThreads * 4) {
    *reinterpret_cast<float4*>(s_x + i) = __ldcg(reinterpret_cast<const float4*>(src + i));
  }
  __syncthreads();
}

// ---- GEMV, rows of exactly one chunk (K = 1024) -------------------------------------------
// Written once for every weight format (Fmt = WeightsBf16 / WeightsE4M3, kernel/dequant.cuh):
// a 1024-wide chunk of a row is 32 lanes x kLoadsPerChunk<Fmt> 16-byte loads (bf16 4, E4M3 2),
// and lane l's load j holds the weights 16 B / size * (32 j + l) ... of the chunk.
// Each warp streams kR rows at once: kR x kLoadsPerChunk independent 16-byte loads per lane in flight.
// The loads of a warp's FIRST iteration are issued separately (preload_k1024), before the
// barrier that guards the phase's input: weights do not depend on activations, so a phase's
// weights are already in flight while the block waits, and arithmetic starts the moment the
// input vector is ready. epi(row, acc, end) runs on lane 0 of the warp that owns the rows; acc is
// the row's result (for a format with row scales: already multiplied by the row's scale).
template <class Fmt>
constexpr int kLoadsPerChunkOf = kChunk / (32 * Fmt::kPer16B);
static_assert(kLoadsPerChunkOf<WeightsBf16> == kLoadsPerChunk, "bf16 keeps config.cuh's 4 loads per lane per chunk");
static_assert(kLoadsPerChunkOf<WeightsE4M3> * 32 * 16 == kChunk, "an E4M3 chunk is exactly 2 x 16 B per lane");

// One matrix (segment) of the packed weights: rows of `w` and, for a format with row scales,
// `scale[r]` for row r (unused otherwise).
template <class Fmt>
struct Mat {
  const typename Fmt::Elem* w;
  const float* scale;
};

// A warp's kR rows in registers; a format with row scales also holds the kR scales (loaded with
// the weights, so the multiply after the dot product never waits for memory).
template <class Fmt, int kR, bool = Fmt::kRowScale>
struct RowRegs {
  uint4 w[kR][kLoadsPerChunkOf<Fmt>];
};
template <class Fmt, int kR>
struct RowRegs<Fmt, kR, true> {
  uint4 w[kR][kLoadsPerChunkOf<Fmt>];
  float sc[kR];
};

template <class Fmt, int kR>
__device__ __forceinline__ void preload_k1024(const Mat<Fmt>& M, int r, int row_end, RowRegs<Fmt, kR>& w) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const uint4* row = reinterpret_cast<const uint4*>(M.w + int64_t(r + i) * kChunk);
#pragma unroll
    for (int j = 0; j < kLoadsPerChunkOf<Fmt>; ++j)
      w.w[i][j] = (r + i < row_end) ? ld_weights_16B(row + j * 32 + lane) : make_uint4(0, 0, 0, 0);
    if constexpr (Fmt::kRowScale) w.sc[i] = (r + i < row_end) ? __ldg(M.scale + r + i) : 0.f;
  }
}

// tour:begin gemv
template <class Fmt, int kR, class Epi>
__device__ __forceinline__ void rows_k1024(const RowRegs<Fmt, kR>& w, int r, int row_end, const float* s_x, Epi& epi) {
  constexpr int kF4 = Fmt::kPer16B / 4;  // float4s of activations per 16-byte load of weights
  const int lane = threadIdx.x & 31;
  const float4* x4 = reinterpret_cast<const float4*>(s_x);
  float acc[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) acc[i] = 0.f;
#pragma unroll
  for (int j = 0; j < kLoadsPerChunkOf<Fmt>; ++j) {
    // lane owns elements kPer16B * (32 j + lane) .. + kPer16B - 1 of the row
    float4 a[kF4];
#pragma unroll
    for (int q = 0; q < kF4; ++q) a[q] = x4[(j * 32 + lane) * kF4 + q];
#pragma unroll
    for (int i = 0; i < kR; ++i) acc[i] = Fmt::dot16B(w.w[i][j], a, acc[i]);
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    acc[i] = warp_sum(acc[i]);
    if constexpr (Fmt::kRowScale) acc[i] *= w.sc[i];  // once per row, after the whole sum
  }
  if (lane == 0) epi(r, acc, row_end);
}
// tour:end gemv

// The rows [row_begin, row_end) of M (K = 1024) against s_x. `pre` holds the warp's first
// iteration (from preload_k1024 with r = row_begin + warp * kR). kPfDist > 0 additionally asks
// L2 for the rows kPfDist iterations ahead (the LM head: 9-18 iterations per warp).
template <class Fmt, int kR, int kPfDist, class Epi>
__device__ __forceinline__ void gemv_k1024(const Mat<Fmt> M, int row_begin, int row_end, const float* s_x,
                                           const RowRegs<Fmt, kR>& pre, Epi epi) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kStride = kWarps * kR;
  constexpr uint32_t kRowBytes = kChunk * sizeof(typename Fmt::Elem);
  int r = row_begin + warp * kR;
  if (r >= row_end) return;
  if constexpr (kPfDist > 0) {
    if (lane == 0) {
#pragma unroll
      for (int d = 1; d <= kPfDist; ++d) {
        const int rp = r + d * kStride;
        if (rp < row_end) prefetch_l2_bulk(M.w + int64_t(rp) * kChunk, uint32_t(min(kR, row_end - rp)) * kRowBytes);
      }
    }
  }
  rows_k1024<Fmt, kR>(pre, r, row_end, s_x, epi);
  for (r += kStride; r < row_end; r += kStride) {
    if constexpr (kPfDist > 0) {
      const int rp = r + kPfDist * kStride;
      if (lane == 0 && rp < row_end)
        prefetch_l2_bulk(M.w + int64_t(rp) * kChunk, uint32_t(min(kR, row_end - rp)) * kRowBytes);
    }
    RowRegs<Fmt, kR> w;
    preload_k1024<Fmt, kR>(M, r, row_end, w);
    rows_k1024<Fmt, kR>(w, r, row_end, s_x, epi);
  }
}

// ---- GEMV, rows spanning kChunks chunks (O: K = 2048, down: K = 3072) ---------------------
// Units (row, chunk) are spread over the warps, kU per warp per iteration; partial sums go to
// shared memory and are added in chunk order by one thread per row (fixed order:
// deterministic), which then applies the row's scale (formats with row scales: `row_scale`, that
// thread's row's scale, loaded by the caller before the wait that precedes the phase). The first
// iteration's loads come preloaded, as above.
template <class Fmt, int kU>
struct UnitRegs {
  uint4 w[kU][kLoadsPerChunkOf<Fmt>];
};

template <class Fmt, int kChunks, int kU>
__device__ __forceinline__ void preload_chunked(const Mat<Fmt>& M, int row_begin, int row_end, int u,
                                                UnitRegs<Fmt, kU>& w) {
  const int lane = threadIdx.x & 31;
  const int units = (row_end - row_begin) * kChunks;
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    const int uu = u + i;
    const uint4* src = reinterpret_cast<const uint4*>(M.w + int64_t(row_begin + uu / kChunks) * (kChunks * kChunk) +
                                                      (uu % kChunks) * kChunk);
#pragma unroll
    for (int j = 0; j < kLoadsPerChunkOf<Fmt>; ++j)
      w.w[i][j] = uu < units ? ld_weights_16B(src + j * 32 + lane) : make_uint4(0, 0, 0, 0);
  }
}

template <class Fmt, int kChunks, int kU>
__device__ __forceinline__ void units_chunked(const UnitRegs<Fmt, kU>& w, int u, int units, const float* s_x,
                                              float* s_part) {
  constexpr int kF4 = Fmt::kPer16B / 4;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    const int uu = u + i;
    const float4* x4 = reinterpret_cast<const float4*>(s_x + (uu % kChunks) * kChunk);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kLoadsPerChunkOf<Fmt>; ++j) {
      float4 a[kF4];
#pragma unroll
      for (int q = 0; q < kF4; ++q) a[q] = x4[(j * 32 + lane) * kF4 + q];
      acc = Fmt::dot16B(w.w[i][j], a, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0 && uu < units) s_part[uu] = acc;
  }
}

// This thread's epilogue row's scale in gemv_chunked (thread t finishes row row_begin + t); 0 for
// a format without row scales (unused).
template <class Fmt>
__device__ __forceinline__ float chunked_row_scale(const Mat<Fmt>& M, int row_begin, int row_end) {
  if constexpr (Fmt::kRowScale) {
    return int(threadIdx.x) < row_end - row_begin ? __ldg(M.scale + row_begin + threadIdx.x) : 0.f;
  } else {
    return 0.f;
  }
}

template <class Fmt, int kChunks, int kU, class Epi>
__device__ __forceinline__ void gemv_chunked(const Mat<Fmt> M, int row_begin, int row_end, const float* s_x,
                                             float* s_part, const UnitRegs<Fmt, kU>& pre, float row_scale, Epi epi) {
  const int warp = threadIdx.x >> 5;
  const int units = (row_end - row_begin) * kChunks;
  int u = warp * kU;
  if (u < units) units_chunked<Fmt, kChunks, kU>(pre, u, units, s_x, s_part);
  for (u += kWarps * kU; u < units; u += kWarps * kU) {
    UnitRegs<Fmt, kU> w;
    preload_chunked<Fmt, kChunks, kU>(M, row_begin, row_end, u, w);
    units_chunked<Fmt, kChunks, kU>(w, u, units, s_x, s_part);
  }
  __syncthreads();
  const int rows = row_end - row_begin;
  if (threadIdx.x < rows) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc += s_part[threadIdx.x * kChunks + c];
    if constexpr (Fmt::kRowScale) acc *= row_scale;  // once per row, after the chunks' sum
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
template <class Elem>
__device__ __forceinline__ void prefetch_next_phases(const Elem* W, int L, bool with_next_qkv, int b, int G) {
  const int64_t elems = (with_next_qkv && L + 1 < kNumLayers ? kLayerElems + kOffO : kLayerElems) - kOffO;
  const int lane = threadIdx.x & 31;
  prefetch_l2_range(W + kOffO, elems * int64_t(sizeof(Elem)), (b - kAttnBlocks) * 32 + lane, (G - kAttnBlocks) * 32,
                    16 * 1024);
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

#include "schedule_upstream.cuh"

// ---- the step kernel: one template, the schedule chosen at compile time ---------------------
template <int kVariant>
__global__ void __launch_bounds__(VariantCfg<kVariant>::kBlockThreads, 1) decode_step(const StepParams p) {
  using Cfg = VariantCfg<kVariant>;
  if constexpr (Cfg::kStream) {
    if constexpr (stream_compiled<Cfg>()) stream_step<Cfg, false>(p);
  } else {
    upstream_step<Cfg>(p);
  }
}
// The same step compiled for long positions (a streaming variant with Cfg::kLongKernel): what
// differs is its Policy (policy.cuh: the merge before O on both halves of the block, ...). The host
// launches it from position kLongKernelFrom on; below that both kernels compute the same bits, so
// the choice only moves time (the merge halves gain at long positions and cost at short ones,
// where the same instructions run: a code-layout effect; docs/EXPERIMENTS.md).
template <int kVariant>
__global__ void __launch_bounds__(VariantCfg<kVariant>::kBlockThreads, 1) decode_step_long(const StepParams p) {
  using Cfg = VariantCfg<kVariant>;
  static_assert(Cfg::kStream && Cfg::kLongKernel, "a long-position kernel exists for streaming variants only");
  if constexpr (stream_compiled<Cfg>()) stream_step<Cfg, true>(p);
}
// The wide kernel (schedule_stream.cuh's kWideSlots note; bf16 and E4M3: Policy::kWideKernel): the
// long kernel with wider attention splits, launched only where the rule widens them (wide_applies),
// so that the short and long kernels keep their code. Correct at any position (elsewhere its splits
// are the long kernel's 64), like the other two.
template <int kVariant>
__global__ void __launch_bounds__(VariantCfg<kVariant>::kBlockThreads, 1) decode_step_wide(const StepParams p) {
  using Cfg = VariantCfg<kVariant>;
  static_assert(Cfg::kStream && Cfg::kLongKernel && Policy<typename Cfg::Weights, KernelKind::kWide>::kWideKernel,
                "the wide kernel: a streaming variant's, of a format whose Policy has it");
  if constexpr (stream_compiled<Cfg>()) stream_step<Cfg, true, true>(p);
}

// ---- the host's descriptor of a variant's kernels ------------------------------------------
struct KernelInfo {
  const void* fn;
  const void* fn_long;  // positions >= kLongKernelFrom (decode_step_long), or nullptr: fn at every position
  const void* fn_wide;  // where wide_applies (decode_step_wide, Policy::kWideKernel), or nullptr
  int threads;
  int dynamic_smem;  // the ring of the configuration that runs on the device (ring_bytes_on)
  bool row_scaled;  // reads StepParams::codes / row_scales / embed_codes / embed_scales
  bool stream;      // the streaming schedule (its own minimum grid: whole KV groups)
};

// A variant's kernels: decode_step, and decode_step_long / decode_step_wide where its configuration
// has them (nullptr otherwise). Naming them is what instantiates them in a translation unit.
struct StepKernels {
  const void* fn;
  const void* fn_long;
  const void* fn_wide;
};
template <int kVariant>
StepKernels kernels_of() {
  using Cfg = VariantCfg<kVariant>;
  const void* fn_long = nullptr;
  const void* fn_wide = nullptr;
  if constexpr (Cfg::kLongKernel) fn_long = reinterpret_cast<const void*>(&decode_step_long<kVariant>);
  if constexpr (Cfg::kStream && Cfg::kLongKernel && Policy<typename Cfg::Weights, KernelKind::kWide>::kWideKernel)
    fn_wide = reinterpret_cast<const void*>(&decode_step_wide<kVariant>);
  return {reinterpret_cast<const void*>(&decode_step<kVariant>), fn_long, fn_wide};
}

template <int kVariant>
KernelInfo info_of(bool device_sm120) {
  using Cfg = VariantCfg<kVariant>;
  const StepKernels k = kernels_of<kVariant>();
  return {k.fn, k.fn_long, k.fn_wide, Cfg::kBlockThreads, ring_bytes_on<Cfg>(device_sm120), Cfg::Weights::kRowScale,
          Cfg::kStream};
}
