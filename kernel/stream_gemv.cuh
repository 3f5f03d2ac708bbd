// monolith: the GEMV rounds' building blocks: norms, input vectors, a slot's row dot products, reductions.
// Part of the streaming schedule (kernel/schedule_stream.cuh includes it inside the build
// namespace, in dependency order); not a stand-alone header.
#pragma once

// This thread's two elements (t, t + 512) of a bf16 norm vector, as fp32. Issued before the wait
// that precedes the norm: the vectors do not depend on the token, and a load issued after the
// wait costs one L2 round trip on the critical path (~0.5-1 us under the ring's load).
struct Norm2 {
  float w[2];
};
__device__ __forceinline__ Norm2 load_norm2(const uint16_t* weight) {
  Norm2 n;
#pragma unroll
  for (int j = 0; j < 2; ++j) n.w[j] = bf16_as_float(__ldg(weight + threadIdx.x + j * kStreamConsumerThreads));
  return n;
}

// One NVFP4 input word as a phase's rows read it: half2 (XH2) or fp32 (XFull), from a vector of kWords.
template <bool kH2>
using NvIn = std::conditional_t<kH2, XH2, XFull>;
template <bool kH2, int kWords>
__device__ __forceinline__ NvIn<kH2> load_nv_in(const float* buf, int i) {
  if constexpr (kH2) return load_xh2<kWords>(buf, i);
  else return load_x32(buf, i);
}
// fp8's half2 inputs (Policy::kE4M3Half2Phases): the E4M3 layers' input vectors (s_x, sm.attn,
// sm.act) as store_xe's f16 words (xvec.cuh), read by dequant.cuh's hdot16_e4m3.
__device__ __forceinline__ float nv_dot(uint4 w, const XFull& x, uint32_t bs2) { return WeightsNvfp4::dot16B(w, x.v, bs2, 0.f); }
__device__ __forceinline__ float nv_dot(uint4 w, const XH2& x, uint32_t bs2) { return WeightsNvfp4::dot16B_h2(w, x.c, x.f, bs2, 0.f); }

// RMSNorm without its own barriers. RMSNorm(v) * w = (v * w) / rms(v), and 1/rms is one scalar
// per token, so the GEMV that follows can multiply its dot products by it at the end: the norm
// then needs no block reduction before the first round, only the round's own opening barrier,
// which publishes s_x and this warp's sum of squares (ssq[warp]) together. Thread t holds
// elements t and t + 512 (v). (Two barriers and a reduction less per norm than normalising first.)
// kSwz: s_x swizzled for NVFP4 rows (nv_swz), else linear.
// kH2: s_x holds NVFP4's half2 inputs (store_xh2) instead.
// kE4: s_x holds fp8's half2 inputs (store_xe).
template <bool kSwz = false, bool kH2 = false, bool kE4 = false>
__device__ __forceinline__ void stream_prenorm(const float v[2], const Norm2& nw, float* s_x, float* ssq) {
  const int t = threadIdx.x;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int e = t + j * kStreamConsumerThreads;
    if constexpr (kH2) store_xh2<kHidden / 32>(s_x, e >> 5, v[j] * nw.w[j]);
    else if constexpr (kE4) store_xe<kHidden / 32>(s_x, e >> 5, v[j] * nw.w[j]);
    else s_x[kSwz ? nv_swz(e) : e] = v[j] * nw.w[j];
  }
  const float q = warp_sum(v[0] * v[0] + v[1] * v[1]);
  if ((t & 31) == 0) ssq[t >> 5] = q;
}
// 1 / rms from the warps' sums of squares, after the barrier that published them; the same
// fixed order in every thread (deterministic).
__device__ __forceinline__ float norm_inv(const float* ssq) {
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kStreamConsumerWarps; ++w) total += ssq[w];
  return rsqrtf(total / float(kHidden) + kRmsEps);
}

// How a weight format (dequant.cuh: WeightsBf16, WeightsE4M3) fills the ring's 16 KB slots. The
// phases are written once; a format changes how many rows a slot holds, never the hops or words.
template <class W>
struct StreamFmt {
  static constexpr int kElemBytes = int(sizeof(typename W::Elem));
  static constexpr int kRows1024 = kSlotBytes / (kHidden * kElemBytes);      // K = 1024 rows per slot: 8 | 16
  static constexpr int kRb = kRows1024 / 8;                                  // 8-row blocks per slot: 1 | 2
  static constexpr int kRowsO = kSlotBytes / (kGroupCols * kElemBytes);      // O rows (K = 256) per slot: 32 | 64
  static constexpr int kSlotsPerUnit = 2 * kMlpUnitCols * kHidden * kElemBytes / kSlotBytes;  // 2 | 1
  static constexpr int kHeadSlots = kRb == 2 ? 6 : 4;                         // LM-head slots per round
  static_assert(kRows1024 % 8 == 0 && (kRb == 1 || kRb == 2), "a slot holds one or two 8-row blocks");
  static_assert(kSlotsPerUnit >= 1 && kSlotsPerUnit * kSlotBytes == 2 * kMlpUnitCols * kHidden * kElemBytes,
                "an MLP unit is whole slots");
  static constexpr int kRowBytes1024 = kHidden * kElemBytes;   // a K = 1024 row (or down segment)
  static constexpr int kRowBytesO = kGroupCols * kElemBytes;   // an O row's slice of one group
  static constexpr int kRowBytesDown = kIntermediate * kElemBytes;
  // bytes of the first `elems` weights of the layout (element offsets of kernel/config.cuh)
  static __device__ __forceinline__ int64_t bytes_of(int64_t elems) { return elems * kElemBytes; }
};
// NVFP4 (nvfp4-rowmajor-v1): the slots hold codes only, half a byte per weight, so 32 rows of K =
// 1024 and 128 O rows (the group's 256 columns: 128 bytes) per 16 KB slot, every row a power-of-two
// fraction of a slot (why the layout keeps the block scales out of the rows). An MLP unit (16
// gate/up rows, 8 KB) is half a slot: the producer streams a block's units as one contiguous row
// range (kSlotsPerUnit 0), and MLP-1 takes rows in rounds like qkv.
// Where the block scales come from: L2, not the ring. A slot's scales (32 rows x 64 B = 2 KB, one
// bulk copy beside the codes) would need a 2 KB area per stage: 12 x 2 KB = 24 KB more shared
// memory, and the block already holds the 192 KB ring + ~33 KB of StreamSmem and barriers of
// sm_90's 227 KB (static_assert below). Shrinking the ring to make room costs run-ahead on every
// phase; reading a lane's two scale bytes per row with __ldg (one u16, 64 B per warp row: one
// sector pair) costs one load per 32 weights, issued a round ahead (before the input wait for a
// phase's first round), from L2, where the producer asks each layer's scale spans of its block a
// layer ahead (prefetch_l2_bulk, as fp8's row scales). 12.5 % of the code bytes, read once.
template <>
struct StreamFmt<WeightsNvfp4> {
  static constexpr int kRows1024 = kSlotBytes / (kHidden / 2);      // 32
  static constexpr int kRb = kRows1024 / 8;                         // (the rounds of round_1024 are not used)
  static constexpr int kRowsO = kSlotBytes / (kGroupCols / 2);      // 128
  static constexpr int kSlotsPerUnit = 0;                           // two units per slot: rows, not units
  static constexpr int kHeadSlots = 0;                              // the LM head is FP8 (StreamFmt<WeightsE4M3>)
  static constexpr int kRowBytes1024 = kHidden / 2;
  static constexpr int kRowBytesO = kGroupCols / 2;
  static constexpr int kRowBytesDown = kIntermediate / 2;
  static constexpr int kBsRow1024 = kHidden / kNvBlock;            // 64 scale bytes per K = 1024 row / down segment
  static constexpr int kBsRowO = kGroupCols / kNvBlock;            // 16 per O row's group slice
  static __device__ __forceinline__ int64_t bytes_of(int64_t elems) { return elems / 2; }
  static_assert(kRows1024 == 2 * kStreamConsumerWarps, "a slot is two K = 1024 rows per consumer warp");
  static_assert(kRowBytes1024 == 32 * 16, "one K = 1024 row is one 16-byte word per lane of a warp");
  static_assert(kRowBytesO == 8 * 16 && kRowsO == 8 * kStreamConsumerWarps, "an O row is 8 lanes' words; 8 rows per warp");
  static_assert(kIntermediate == 3 * kHidden && kBsRow1024 * 3 == kIntermediate / kNvBlock,
                "a down row's three 1024-wide segments have their scales back to back: segment t's at 64 t");
  static_assert(2 * kMlpUnitCols * kRowBytes1024 * 2 == kSlotBytes, "two MLP units per slot");
};

// K = 1024 rows from a slot, two warps per row, warp w on half h = w % 2 of its rows. Its 16
// input values are the same for every row of a phase, so they live in registers (XHalf), loaded
// once per phase: the slot's 16 KB are then the only shared-memory traffic of a chunk.
//   bf16: 8 rows per slot, warp w takes row w / 2; lane reads the 16-byte words 64 h + lane and
//         + 32 (8 weights each; consecutive lanes, consecutive words: no bank conflicts).
//   E4M3: 16 rows per slot, warp w takes rows w / 2 and w / 2 + 8; lane reads word 32 h + lane of
//         each (16 weights: elements 512 h + 16 lane ..).
//   The input words a lane needs are contiguous (bf16: float4s 2 q, 2 q + 1 with q = 64 h + lane
//   + 32 j; E4M3: float4s 4 m .. 4 m + 3 with m = 32 h + lane), so across a warp they are 32 or
//   64 bytes apart: stored linearly, each LDS.128 uses only half (bf16) or a quarter (E4M3) of the
//   32 banks, 8 or 16 wavefronts instead of 4. So every K-vector these loads read (s_x, sm.act,
//   sm.attn) is stored with nv_swz: float4 j of 128-byte line i at j ^ (i % 8), which spreads both
//   patterns over all 8 bank groups (bf16: 2 lines per quarter-warp, E4M3: 4) and keeps the writers
//   (a warp per line) conflict-free. Same values, same sums as a linear layout.
template <bool kSwz = true>
__device__ __forceinline__ int x4_swz(int f) { return kSwz ? (f & ~7) | ((f & 7) ^ ((f >> 3) & 7)) : f; }
struct XHalf {
  float4 v[4];
};
template <class W, bool kSwz = true>
__device__ __forceinline__ XHalf load_xhalf(const float* s_x) {
  const int lane = threadIdx.x & 31, h = (threadIdx.x >> 5) & 1;
  const float4* x4 = reinterpret_cast<const float4*>(s_x);
  XHalf x;
  if constexpr (StreamFmt<W>::kRb == 1) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = 64 * h + lane + 32 * j;
      x.v[2 * j] = x4[x4_swz<kSwz>(2 * q)];
      x.v[2 * j + 1] = x4[x4_swz<kSwz>(2 * q + 1)];
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) x.v[j] = x4[x4_swz<kSwz>(128 * h + 4 * lane + j)];
  }
  return x;
}
// This lane's part of the warp's half-row dot product of slot row `row` (not reduced, not scaled).
template <class W>
__device__ __forceinline__ float half_row_lane(const uint4* slot, int row, const XHalf& x) {
  const int lane = threadIdx.x & 31, h = (threadIdx.x >> 5) & 1;
  if constexpr (StreamFmt<W>::kRb == 1) {  // two accumulators: the 16 FMAs form two chains of 8
    const uint4* r = slot + row * (kHidden / 8) + 64 * h + lane;
    const float a = dot8_bf16(r[0], x.v[0], x.v[1], 0.f);
    const float b = dot8_bf16(r[32], x.v[2], x.v[3], 0.f);
    return a + b;
  } else {
    return dot16_e4m3(slot[row * (kHidden / 16) + 32 * h + lane], x.v, 0.f);
  }
}
// E4M3 with half2 inputs (Policy::kE4M3Half2Phases): the same row split; the lane's 16 inputs from store_xe's
// vector of kWords words, starting at element e0 (down: its 1024-wide segment)
template <int kWords>
__device__ __forceinline__ XE16 load_xe_half(const float* buf, int e0 = 0) {
  const int lane = threadIdx.x & 31, h = (threadIdx.x >> 5) & 1;
  return load_xe16<kWords>(buf, e0 + 512 * h + 16 * lane);
}
template <class W>
__device__ __forceinline__ float half_row_lane(const uint4* slot, int row, const XE16& x) {
  static_assert(StreamFmt<W>::kRb == 2, "half2 inputs are E4M3's");
  const int lane = threadIdx.x & 31, h = (threadIdx.x >> 5) & 1;
  return hdot16_e4m3(slot[row * (kHidden / 16) + 32 * h + lane], x.w, x.f);
}

// Policy::kHeadWarp: a whole K = 1024 row per warp. Lane l reads the row's 16-byte words l + 32 i
// (consecutive lanes, consecutive words: conflict-free), i < 2 (E4M3, 1 KB rows) or 4 (bf16, 2 KB),
// so it needs the 32 inputs of those words in registers (XRow), loaded once for the head.
struct XRow {
  float4 v[8];
};
template <class W, bool kSwz>
__device__ __forceinline__ XRow load_xrow(const float* s_x) {
  const int lane = threadIdx.x & 31;
  const float4* x4 = reinterpret_cast<const float4*>(s_x);
  XRow x;
#pragma unroll
  for (int f = 0; f < 8; ++f) {
    // bf16: word lane + 32 i holds elements 8 (lane + 32 i) ..: float4s 2 (lane + 32 i), + 1
    // E4M3: word lane + 32 i holds elements 16 (lane + 32 i) ..: float4s 4 (lane + 32 i) .. + 3
    const int q = StreamFmt<W>::kRb == 1 ? 2 * (lane + 32 * (f >> 1)) + (f & 1) : 4 * (lane + 32 * (f >> 2)) + (f & 3);
    x.v[f] = x4[x4_swz<kSwz>(q)];
  }
  return x;
}
// This lane's part of row `row` of a slot (not reduced, not scaled), two accumulators.
template <class W>
__device__ __forceinline__ float row_lane(const uint4* slot, int row, const XRow& x) {
  const int lane = threadIdx.x & 31;
  if constexpr (StreamFmt<W>::kRb == 1) {
    const uint4* r = slot + row * (kHidden / 8) + lane;
    const float a = dot8_bf16(r[32], x.v[2], x.v[3], dot8_bf16(r[0], x.v[0], x.v[1], 0.f));
    const float b = dot8_bf16(r[96], x.v[6], x.v[7], dot8_bf16(r[64], x.v[4], x.v[5], 0.f));
    return a + b;
  } else {
    const uint4* r = slot + row * (kHidden / 16) + lane;
    const float4(&lo)[4] = *reinterpret_cast<const float4(*)[4]>(&x.v[0]);
    const float4(&hi)[4] = *reinterpret_cast<const float4(*)[4]>(&x.v[4]);
    return dot16_e4m3(r[0], lo, 0.f) + dot16_e4m3(r[32], hi, 0.f);
  }
}
// R values per lane summed over the warp, R a power of two <= 32: each level halves the set a
// lane holds (the lane with bit o set keeps the upper half and sends the lower), then the last
// value is summed over the remaining lanes. R - 1 + log2(32 / R) shuffles (16 rows: 16, not 80);
// a fixed tree, so deterministic. Lanes whose index differs only below 32 / R hold the same sum,
// of row scatter_row<R>(lane).
// (one level: lanes with bit O keep values W .. 2W - 1, the others 0 .. W - 1; recursion, not a loop,
// so that every index is a constant: a loop left the 16 values in local memory)
template <int W, int O, int R>
__device__ __forceinline__ void reduce_scatter_level(float (&v)[R], int lane) {
  if constexpr (W >= 1) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const float keep = hi ? v[i + W] : v[i], send = hi ? v[i] : v[i + W];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    reduce_scatter_level<W / 2, O / 2>(v, lane);
  }
}
template <int R>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[R]) {
  static_assert(R >= 1 && R <= 32 && (R & (R - 1)) == 0, "a power of two, at most a warp");
  const int lane = threadIdx.x & 31;
  reduce_scatter_level<R / 2, 16>(v, lane);
#pragma unroll
  for (int o = 16 / R; o >= 1; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
  return v[0];
}
template <int R>
__device__ __forceinline__ int scatter_row(int lane) {
  int r = 0;
#pragma unroll
  for (int w = R / 2, o = 16; w >= 1; w >>= 1, o >>= 1) r += (lane & o) ? w : 0;
  return r;
}

// Four warp sums in 6 shuffles instead of 20: halve the lanes' set of values at xor 16 and 8,
// then reduce within groups of 8. Lane 8 v (v = 0..3) ends with the sum of value v over all
// 32 lanes, added in a fixed order (deterministic).
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


// Slots consumed per round (one wait + one barrier pair): the consumers' fixed cost per round
// (mbarrier waits, two barriers, the combine) is paid once per 64 KB instead of once per 16 KB,
// and the 4 slots' dot products are independent (ILP). Measured: ~0.57 us per 16 KB slot at one
// slot per round (NOTES.md, M4).
constexpr int kRoundSlots = 4;
// MLP-1 takes a block's gate/up units (3 at 128 blocks: 6 slots) in one round: two pieces of
// round_1024 between one pair of barriers.
constexpr int kMlpRoundSlots = 6;
// (sm_90's shipped ring: a round leaves the producer half of it. The shallow sm_120 ring, and an
// experiment depth of the sm_90 one (config.cuh: MONOLITH_RING_DEPTH_SM90), only hold every round
// whole: stream_step's ring_fits, and Policy::kMlpRoundUnits there.)
static_assert(kRoundSlots <= kStagesSm90Shipped / 2 && kMlpRoundSlots <= kStagesSm90Shipped / 2,
              "a round leaves the producer half the ring");
static_assert(kRoundSlots <= kStagesSm90Min && kMlpRoundSlots <= kStagesSm90Min,
              "every sm_90 round fits the shallowest sm_90 ring whole (kStagesSm90Min)");
static_assert(kMlpRoundSlots % 2 == 0 && kMlpRoundSlots <= 2 * kRoundSlots, "whole units, at most two pieces");
static_assert(Policy<WeightsBf16, KernelKind::kShort, false>::kMlpRoundUnits == kMlpRoundSlots / 2 &&
                  Policy<WeightsE4M3, KernelKind::kShort, false>::kMlpRoundUnits == kMlpRoundSlots / 2,
              "sm_90's MLP-1 rounds: kMlpRoundSlots / 2 units (bf16: 2 slots each; E4M3: 1)");
// 8-row blocks of one round: a bf16 MLP round (6 slots of 8 rows) or an E4M3 round (4 slots of 16)
// The LM head's rounds (StreamFmt::kHeadSlots): E4M3 takes 6 slots per round, in two pieces like
// MLP-1, because its rounds are consumer-bound (the e4m3 cvt, ~1 us per 64 KB) and a round's
// fixed cost (waits, two barriers, the combine) is then paid per 96 KB; bf16 keeps 4 (its LM
// head streams at ~4.2 TB/s, DRAM-bound).
constexpr int kHeadRoundSlotsMax = 6;
static_assert(kHeadRoundSlotsMax <= kStagesSm90Shipped / 2 && kHeadRoundSlotsMax <= 2 * kRoundSlots &&
                  kHeadRoundSlotsMax <= kStagesSm90Min,
              "at most two pieces, half the shipped ring, whole in the shallowest");
constexpr int kRoundRbMax = kMlpRoundSlots > 2 * kHeadRoundSlotsMax ? kMlpRoundSlots : 2 * kHeadRoundSlotsMax;
constexpr int kPartBlk = kStreamConsumerWarps;  // part[] floats per 8-row block

static_assert(kIntermediate == 3 * kHidden, "a down row is three 1024-wide segments");
