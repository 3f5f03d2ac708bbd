// monolith: the weight ring: who releases a slot, the hop hold, the producer (the ring's writer)
// and thread 0's slot tests (its reader's first step).
// Part of the streaming schedule (kernel/schedule_stream.cuh includes it inside the build
// namespace, in dependency order); not a stand-alone header.
#pragma once

// Who returns a consumed slot to the producer (the `empty` mbarrier's arrival count). 16: lane 0
// of every consumer warp after __syncwarp, so each warp's slot reads are ordered before its own
// arrive (CUTLASS's consumer-release shape); 1: thread 0 alone after the block barrier (the reads
// reach its arrive only through bar.sync's cumulativity); 512: every consumer thread, racecheck's
// reference build (scripts/gpu.sh stage racecheck-stream: -DMONOLITH_RING_RELEASE=512).
// (Here, not in config.cuh: a build switch, which the header's Python parser does not evaluate.)
#ifndef MONOLITH_RING_RELEASE
#define MONOLITH_RING_RELEASE 16
#endif
constexpr int kEmptyArrivals = MONOLITH_RING_RELEASE;
static_assert(kEmptyArrivals == 1 || kEmptyArrivals == kStreamConsumerWarps || kEmptyArrivals == kStreamConsumerThreads,
              "a slot is released by thread 0, by lane 0 of every consumer warp, or by every consumer thread");

// The hop hold (Policy::kHopHoldCycles). probes/hop_latency.cu measured one grid hop at 0.5 / 0.8 us
// (first / last block ready after the last store) with an idle memory system and 6.1 / 12.5 us with
// every SM keeping 12 x 16 KB of bulk copies in flight: the polls' responses queue behind the copies.
// In the kernel the ring is mostly full at a hop, except the refill of the slots the phase just
// handed back, a grid-wide burst right when every block starts to poll. So the consumers mark "in a
// hop" from a phase's last hand-back to the next phase's opening barrier, and the producer issues no
// copy while the mark is up, for at most kHopHoldCycles per mark (a bound, not a handshake: no wait
// of the producer can depend on the consumers' progress, so the hold can never deadlock). A bf16
// phase hands back twice the bytes of an E4M3 one, so its refill needs more of the time after a hop:
// a shorter hold.
//
// Thread 0's slot tests (Policy::kSlotTestBatch): the tests of a round's n <= 8 slots issued back to
// back, the slot index and parity stepped instead of divided by kStages per slot, with one branch on
// the combined result; the other formats test one slot after another.
//
// O's pretest (Policy::kPretestO): thread 0 tests O's first-round slots before it polls the
// attention partials (the merge's input wait, long for the blocks without a split), and O's opening
// barrier is skipped when every slot had landed: the merge's own barriers already order thread 0's
// acquire before every thread's reads (bar.sync is cumulative).
// The landed count (Policy::kSlotLanded): the producer keeps a shared count of the copies that have
// landed, in ring order, and thread 0's acquire skips the mbarrier tests of every slot below it (one
// shared load instead of up to 8 tests). The producer learns landings where it waits anyway: in its
// loop for an empty slot, in the hop hold, and in its final drain; a slot it is about to refill had
// landed (its consumers handed it back), so the count never waits behind a lap it missed. Thread 0
// falls back to its own tests for slots above the count: the count only ever saves work. Ordering:
// the producer's test_wait (acquire) observed the copy, a CTA fence, a shared atomic; thread 0's
// shared atomic read, a CTA fence, then the opening barrier.
//
// When a block's producer has seen its last copy land (the LM head's tail), it asks L2 for its own
// spans of layer 0's first three weight phases (qkv, O, gate/up): the next launch's first copies. Layer 0 starts with every block's ring empty and 128 x 192 KB of copies from DRAM at once;
// between launches DRAM is idle, and L2 keeps what was asked for (weights otherwise stream
// evict_first). A block's plan is the same at the next position (only its attention splits change),
// so the spans are the same.
// NVFP4's producer asks L2 for each of the next layer's four block-scale spans after the copies of
// the same phase, not all four at a layer boundary (~1.1 MB from DRAM grid-wide at once, outside the
// hop hold, which only holds bulk copies).
//
// ---- producer -------------------------------------------------------------------------------
struct Ring {
  uint8_t* slots;
  uint64_t* full;
  uint64_t* empty;
  int* quit;  // set by the consumers when they leave (stop phase, error): the producer stops. Shared-
              // memory atomics on both sides: a flag, not data (racecheck reports plain accesses)
  int* hold;  // the hop hold: odd while the consumers are in a hop (a new value per hop)
  uint32_t* landed;  // the landed count: copies 0 .. *landed - 1 have landed (producer-written)
};

// NVFP4 (WeightsNvfp4): StepParams::codes holds every layer's codes, then every layer's block
// scales (one allocation, monolith/megakernel.py); row_scales holds the tensor scales.
__device__ __forceinline__ const uint8_t* nv_block_scales(const StepParams& p) {
  return p.codes + int64_t(kNumLayers) * kNvLayerCodeBytes;
}

// The landed count (Policy::kSlotLanded): the producer raises the shared count of landed
// copies to L (a fence, then a shared atomic: thread 0 reads it with an atomic and a fence).
// Atomics on both sides, as the quit and hold flags: racecheck reports plain accesses.
__device__ __forceinline__ void producer_publish_landed(uint32_t* landed, uint32_t L) {
  if (L > atomicAdd(landed, 0u)) {
    __threadfence_block();
    atomicExch(landed, L);
  }
}
// ... after testing, in ring order, the issued copies (< k) above it. Only copies k - kStages .. k - 1
// are ever tested (issue() raises the count past a slot's previous copy before refilling it), so
// a slot's barrier is never a lap ahead of the copy tested on it.
__device__ __forceinline__ void producer_land(uint64_t* full, uint32_t* landed, uint32_t k) {
  const uint32_t L0 = atomicAdd(landed, 0u);
  uint32_t L = L0;
  while (L < k && mbar_test_wait(&full[L % kStages], (L / kStages) & 1u)) ++L;
  if (L != L0) producer_publish_landed(landed, L);
}

// A span of `bytes` (>= 0; a multiple of 16, 16-byte aligned) to L2; nothing for an empty span.
__device__ __forceinline__ void prefetch_span(const uint8_t* a, int64_t bytes) {
  if (bytes > 0) prefetch_l2_bulk(a, uint32_t(bytes));
}

// Thread 0's tests of slots kc .. kc + n - 1 (n <= 2 kRoundSlots) of the ring whose full barriers
// are `full`, issued back to back, slot and parity stepped, not divided; bit i of the result: slot
// i had not landed. Bits set in `known` (landed at an earlier test: a landed slot stays landed
// until this block hands it back) are not tested again.
__device__ __forceinline__ uint32_t slot_tests_batched(uint64_t* full, uint32_t kc, int n, uint32_t known) {
  uint32_t slot = kc % kStages, par = (kc / kStages) & 1u, miss = 0u;
#pragma unroll
  for (int i = 0; i < 2 * kRoundSlots; ++i) {
    const bool landed = i >= n || ((known >> i) & 1u) || mbar_test_wait(&full[slot], par);
    miss |= landed ? 0u : 1u << i;
    if (++slot == uint32_t(kStages)) slot = 0u, par ^= 1u;
  }
  return miss;
}
