// monolith: what a block streams and computes (StreamPlan) and the attention's splits.
// Part of the streaming schedule (kernel/schedule_stream.cuh includes it inside the build
// namespace, in dependency order); not a stand-alone header.
#pragma once

// Index of group g's qkv row r (0..511) in the standard q | k | v order of scr[kScrQKV].
__device__ __forceinline__ int qkv_std_row(int g, int r) {
  return r < kGroupCols ? g * kGroupCols + r
                        : (r < kGroupCols + kHeadDim ? kQDim + g * kHeadDim + (r - kGroupCols)
                                                     : kQDim + kKVDim + g * kHeadDim + (r - kGroupCols - kHeadDim));
}

// What one block streams and computes, for the whole token (a function of b, G and pos only:
// the producer and the consumers derive the same list).
struct StreamPlan {
  int g, ng, gi;  // KV group, blocks in it, this block's index in it
  int q0, q1;     // qkv rows of the group (0..512)
  int o0, o1;     // O rows (0..1024) of the group's columns
  int u0, u1;     // MLP units (0..384)
  int h0, h1;     // residual slice this block seeds into each stage
  int v0, v1;     // LM-head rows
  int nsplit;     // attention splits at this position (same in every block)
};
// The wide kernel's plan: its split width at this position, computed once per token (split_width's
// division by the group's block count, recomputed by every warp for each split, was a measurable part
// of the wide kernel's extra instructions), and its hand-backs unrolled to kSplitSlotsMax.
struct WidePlan : StreamPlan {
  int w;  // cached positions per split (split_width<true>(pos, ng))
};
template <bool kWide>
using PlanT = std::conditional_t<kWide, WidePlan, StreamPlan>;

// The wide kernel (megakernel.cu decode_step_wide; bf16 and E4M3: Policy::kWideKernel): wider
// attention splits at long positions, in a third kernel of the variant that the host launches only
// where they apply, so that the short and long kernels keep their code. Let k = ceil((pos / 64 + 1) /
// ng), the 64-position slots each of the group's ng blocks holds when every block runs one split.
// With fixed 64-position splits a block runs k of them (merged locally); where kWideMinSlots <= k <=
// kWideSlots the wide kernel's splits are ceil((pos + 1) / ng) positions wide (<= k x 64: K slots,
// then V slots, in the ring), so every block of the group runs one split of about the same length:
// one softmax, one output, one set of barriers. At 128 blocks (ng = 16): positions 1,024-3,071.
// Another summation order where it widens (deterministic, not bitwise the long kernel's).
constexpr int kWideSlots = 3;     // K (and V) slots of the widest split
constexpr int kWideMinSlots = 2;  // the narrowest widened split
constexpr int kSplitSlotsMax = kWideSlots;                   // K (and V) slots of one split
constexpr int kSplitEntriesMax = kSplitPositions;            // sm.sc per head (the short and long kernels)
// The wide kernel's scores, up to kSplitSlotsMax x 64 per head, live in sm.x instead (the qkv input,
// free from the qkv -> attention hop until the MLP's RMSNorm writes it), so StreamSmem, and with it
// every address in the short and long kernels, does not depend on the wide kernel.
constexpr int kWideEntriesMax = kSplitSlotsMax * kSplitPositions;
// k of the rule above (host and device use the same expression: megakernel.cu wide_applies)
__host__ __device__ __forceinline__ int wide_k(int pos, int ng) { return (pos / kSplitPositions + ng) / ng; }
// cached positions per split at this position for a group of ng blocks: 64, or in the wide kernel
// (kWide) ceil((pos + 1) / ng) where the rule widens
template <bool kWide>
__device__ __forceinline__ int split_width(int pos, int ng) {
  if constexpr (kWide) {
    const int k = wide_k(pos, ng);
    if (k >= kWideMinSlots && k <= kWideSlots) return (pos + ng) / ng;
  }
  return kSplitPositions;
}
// K (or V) slots of a split of nh cached positions: one per 64 (the last one partial); the min
// tells the compiler the bound (acquire_n unrolls thread 0's tests to it)
__device__ __forceinline__ int split_slots(int nh) {
  return min((nh + kSplitPositions - 1) / kSplitPositions, kSplitSlotsMax);
}
template <bool kWide>
__device__ __forceinline__ PlanT<kWide> make_plan(int b, int G, int pos) {
  PlanT<kWide> s;
  s.g = 0;
  while (s.g + 1 < kGroups && part_begin(G, kGroups, s.g + 1) <= b) ++s.g;
  const int gb0 = int(part_begin(G, kGroups, s.g)), gb1 = int(part_begin(G, kGroups, s.g + 1));
  s.ng = gb1 - gb0;
  s.gi = b - gb0;
  s.q0 = int(part_begin(kGroupRows, s.ng, s.gi)), s.q1 = int(part_begin(kGroupRows, s.ng, s.gi + 1));
  s.o0 = int(part_begin(kHidden, s.ng, s.gi)), s.o1 = int(part_begin(kHidden, s.ng, s.gi + 1));
  s.u0 = int(part_begin(kMlpUnits, G, b)), s.u1 = int(part_begin(kMlpUnits, G, b + 1));
  s.h0 = int(part_begin(kHidden, G, b)), s.h1 = int(part_begin(kHidden, G, b + 1));
  s.v0 = int(part_begin(kVocab, G, b)), s.v1 = int(part_begin(kVocab, G, b + 1));
  s.nsplit = pos / split_width<kWide>(pos, s.ng) + 1;
  if constexpr (kWide) s.w = split_width<kWide>(pos, s.ng);
  return s;
}

// Split sp of the attention at this position: its cached positions [t0, t1) (t1 <= pos; this
// position itself belongs to the last split): the plan's width in the wide kernel, else 64.
template <bool kWide>
__device__ __forceinline__ void split_of(const PlanT<kWide>& s, int sp, int pos, int& t0, int& t1) {
  if constexpr (kWide) {
    t0 = sp * s.w;
    t1 = min(t0 + s.w, pos);
  } else {
    const int w = split_width<kWide>(pos, s.ng);
    t0 = sp * w;
    t1 = min(t0 + w, pos);
  }
}

__device__ __forceinline__ uint16_t* kv_base(uint16_t* kv, int L, int kind, int g) {
  return kv + ((int64_t(L) * 2 + kind) * kNumKVHeads + g) * int64_t(kContextCap) * kHeadDim;
}
