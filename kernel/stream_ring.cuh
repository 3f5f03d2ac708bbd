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
// a slot's barrier is never a lap ahead of the copy tested on it. kStages: the ring's depth (Policy).
template <int kStages>
__device__ __forceinline__ void producer_land(uint64_t* full, uint32_t* landed, uint32_t k) {
  const uint32_t L0 = atomicAdd(landed, 0u);
  uint32_t L = L0;
  while (L < k && mbar_test_wait(&full[L % kStages], (L / kStages) & 1u)) ++L;
  if (L != L0) producer_publish_landed(landed, L);
}

// P: the kernel's Policy; kWide: the wide kernel's splits, which the consumers read in the same order
template <class W, class P, bool kWide>
__device__ __forceinline__ void stream_producer(const StepParams& p, const PlanT<kWide>& s, int pos, Ring r) {
  using F = StreamFmt<W>;
  using HF = StreamFmt<typename W::Head>;  // the LM head's format (NVFP4: FP8)
  using NF = StreamFmt<WeightsNvfp4>;
  constexpr bool kNv = W::kBlockScaled;
  constexpr int HE = HF::kElemBytes;
  constexpr int kStages = P::kStages;  // the ring's depth (config.cuh: per configuration)
  SyncState* S = p.sync;
  const long long tmo = p.timeout_cycles;
  uint32_t k = 0;
  bool ok = true;
  const uint64_t pol = l2_evict_first_policy();
  // The small vectors the consumers read on their critical path go to L2 ahead of time: a miss
  // there would queue behind the ring's copies in DRAM. Each layer's norms are asked for a layer
  // ahead (below); here layer 0's, the RoPE row, the final norm and the token's embedding row.
  prefetch_l2_bulk(p.norms, kNormLayerElems * 2);
  prefetch_l2_bulk(p.rope + int64_t(pos) * kHeadDim, kHeadDim * 4);
  prefetch_l2_bulk(p.final_norm, kHidden * 2);
  if constexpr (W::kRowScale && !kNv) prefetch_l2_bulk(p.row_scales, kLayerRows * 4);
  // NVFP4: every layer's tensor scales (896 B), and this block's block-scale spans a layer ahead
  // (layer 0's here): the consumers read them with __ldg, a round ahead (StreamFmt<WeightsNvfp4>)
  // one of this block's four block-scale spans of layer L (0 qkv, 1 O, 2 gate/up, 3 down) to L2
  auto nv_scale_span = [&](int L, int part) {
    const uint8_t* b = nv_block_scales(p) + int64_t(L) * kNvLayerBscaleBytes;
    int64_t off = 0, bytes = 0;
    if (part == 0) {
      off = kBsQKV + int64_t(s.g * kGroupRows + s.q0) * NF::kBsRow1024, bytes = int64_t(s.q1 - s.q0) * NF::kBsRow1024;
    } else if (part == 1) {
      off = kBsO + int64_t(s.g * kHidden + s.o0) * NF::kBsRowO, bytes = int64_t(s.o1 - s.o0) * NF::kBsRowO;
    } else if (part == 2) {
      off = kBsGateUp + int64_t(2 * kMlpUnitCols * s.u0) * NF::kBsRow1024;
      bytes = int64_t(2 * kMlpUnitCols * (s.u1 - s.u0)) * NF::kBsRow1024;
    } else {
      off = kBsDown + int64_t(s.h0) * 3 * NF::kBsRow1024, bytes = int64_t(s.h1 - s.h0) * 3 * NF::kBsRow1024;
    }
    if (bytes > 0) prefetch_l2_bulk(b + off, uint32_t(bytes));
  };
  auto nv_prefetch_scales = [&](int L) {  // all four spans of layer L
    for (int part = 0; part < 4; ++part) nv_scale_span(L, part);
  };
  // the next layer's span of one phase, asked for after that phase's copies
  auto nv_prefetch_part = [&](int L, int part) {
    if constexpr (kNv)
      if (L + 1 < kNumLayers) nv_scale_span(L + 1, part);
  };
  if constexpr (kNv) {
    prefetch_l2_bulk(p.row_scales, kNumLayers * kNvTscaleSlots * 4);
    nv_prefetch_scales(0);
  }
  int held_seen = 0;  // the last hop mark the producer held for (each mark holds it once)
  // the landed count lives only in shared memory (producer_land inlined: out of line, the call
  // made the E4M3 and NVFP4 kernels spill)
  auto land = [&] {
    if constexpr (P::kSlotLanded) producer_land<kStages>(r.full, r.landed, k);
  };
  auto publish_landed = [&](uint32_t L) {
    if constexpr (P::kSlotLanded) producer_publish_landed(r.landed, L);
  };
  auto issue = [&](const void* src, uint32_t bytes, uint32_t info) {
    if (!ok) return;
    const uint32_t slot = k % kStages;
    if (k >= kStages) {  // wait until the consumers released the chunk that used this slot
      const uint32_t par = ((k / kStages) - 1u) & 1u;
      if (!mbar_try_wait(&r.empty[slot], par)) {
        const long long t0 = clock64();
        for (uint32_t it = 0;; ++it) {
          land();
          // (the landed count: a non-blocking test, so that the loop keeps publishing landings;
          // try_wait may suspend the thread for a while before it answers)
          if (P::kSlotLanded ? mbar_test_wait(&r.empty[slot], par) : mbar_try_wait(&r.empty[slot], par))
            break;
          if (atomicAdd(r.quit, 0) != 0) {
            ok = false;
            return;
          }
          if ((it & 63u) == 63u) {
            if (*(volatile uint32_t*)&S->error != 0u) {
              ok = false;
              return;
            }
            if (clock64() - t0 > tmo) {
              raise_error(S, kErrRingTimeout, info);
              ok = false;
              return;
            }
          }
        }
      }
    }
    if (k >= kStages) publish_landed(k - kStages + 1);  // its consumers handed that copy back
    {  // a hop's mark: hold this copy until it drops, at most kHopHoldCycles
      const int h = atomicAdd(r.hold, 0);
      if ((h & 1) && h != held_seen) {
        held_seen = h;
        const long long t0 = clock64();
        const long long cap = P::kHopHoldCycles;
        while (atomicAdd(r.hold, 0) == h && clock64() - t0 < cap) land();
      }
    }
    mbar_arrive_expect_tx(&r.full[slot], bytes);
    bulk_copy_g2s(r.slots + size_t(slot) * kSlotBytes, src, bytes, &r.full[slot], pol);
    ++k;
  };
  // element offsets of the layout times the element size: the bf16 buffer or the E4M3 codes
  const uint8_t* w8 = W::kRowScale ? p.codes : reinterpret_cast<const uint8_t*>(p.w);
  const uint8_t* e8 = W::Head::kRowScale ? p.embed_codes : reinterpret_cast<const uint8_t*>(p.embed);
  // element offsets in a layer of this block's rows of qkv (row q of its group), O (column o of its
  // group's rows) and gate/up (row q of the interleaved matrix): the issue loop walks them in slots,
  // the next-token prefetch asks for layer 0's spans whole
  auto qkv_elem = [&](int q) { return kOffQKV + int64_t(s.g * kGroupRows + q) * kHidden; };
  auto o_elem = [&](int o) { return kOffO + int64_t(s.g * kHidden + o) * kGroupCols; };
  auto gu_elem = [&](int q) { return kOffGateUp + int64_t(q) * kHidden; };
  for (int L = 0; L < kNumLayers && ok; ++L) {
    const uint8_t* Wl = w8 + F::bytes_of(int64_t(L) * kLayerElems);
    auto at = [&](int64_t elem) { return Wl + F::bytes_of(elem); };
    const uint32_t info = uint32_t(L) * 16u + 13u;
    if (L + 1 < kNumLayers) prefetch_l2_bulk(p.norms + int64_t(L + 1) * kNormLayerElems, kNormLayerElems * 2);
    if constexpr (W::kRowScale && !kNv)  // this layer's scales (48 KB) to L2: the consumers load a few each phase
      if (L + 1 < kNumLayers) prefetch_l2_bulk(p.row_scales + int64_t(L + 1) * kLayerRows, kLayerRows * 4);
    constexpr int R = F::kRows1024;
    for (int q = s.q0; q < s.q1; q += R)
      issue(at(qkv_elem(q)), uint32_t(min(R, s.q1 - q)) * F::kRowBytes1024, info);
    nv_prefetch_part(L, 0);
    for (int sp = s.gi; sp < s.nsplit; sp += s.ng) {
      int t0, t1;
      split_of<kWide>(s, sp, pos, t0, t1);
      if constexpr (kWide) {  // K in slots of 64 positions, then V likewise
        for (int kind = 0; kind < 2; ++kind)
          for (int c = t0; c < t1; c += kSplitPositions)
            issue(kv_base(p.kv, L, kind, s.g) + int64_t(c) * kHeadDim,
                  uint32_t(min(kSplitPositions, t1 - c)) * kHeadDim * 2, info);
      } else if (t1 > t0) {
        issue(kv_base(p.kv, L, 0, s.g) + int64_t(t0) * kHeadDim, uint32_t(t1 - t0) * kHeadDim * 2, info);
        issue(kv_base(p.kv, L, 1, s.g) + int64_t(t0) * kHeadDim, uint32_t(t1 - t0) * kHeadDim * 2, info);
      }
    }
    for (int o = s.o0; o < s.o1; o += F::kRowsO)
      issue(at(o_elem(o)), uint32_t(min(F::kRowsO, s.o1 - o)) * F::kRowBytesO, info);
    nv_prefetch_part(L, 1);
    if constexpr (F::kSlotsPerUnit > 0) {
      for (int u = s.u0; u < s.u1; ++u)  // a unit: 8 gate/up row pairs, 16 rows
        for (int j = 0; j < F::kSlotsPerUnit; ++j)
          issue(at(gu_elem(2 * kMlpUnitCols * u + j * R)), kSlotBytes, info);
    } else {  // NVFP4: the units' rows 16 u0 .. 16 u1 are contiguous: slots of R rows, the last one partial
      const int g0 = 2 * kMlpUnitCols * s.u0, g1 = 2 * kMlpUnitCols * s.u1;
      for (int q = g0; q < g1; q += R)
        issue(at(gu_elem(q)), uint32_t(min(R, g1 - q)) * F::kRowBytes1024, info);
    }
    nv_prefetch_part(L, 2);
    {  // down rows h0..h1, row-major (K = 3072): contiguous, cut into slots of R segments of 1024
      const uint8_t* d0 = at(kOffDown + int64_t(s.h0) * kIntermediate);
      const int64_t bytes = int64_t(s.h1 - s.h0) * F::kRowBytesDown;
      for (int64_t off = 0; off < bytes; off += kSlotBytes)
        issue(d0 + off, uint32_t(min(int64_t(kSlotBytes), bytes - off)), info);
    }
    nv_prefetch_part(L, 3);
  }
  static_assert((kVocab * 4) % 16 == 0, "the LM-head scale array ends 16-byte aligned");
  if constexpr (W::Head::kRowScale) {  // the block's LM-head scales, widened to 16-byte bounds (the array's are)
    const uintptr_t a0 = reinterpret_cast<uintptr_t>(p.embed_scales + s.v0) & ~uintptr_t(15);
    const uintptr_t a1 = (reinterpret_cast<uintptr_t>(p.embed_scales + s.v1) + 15) & ~uintptr_t(15);
    prefetch_l2_bulk(reinterpret_cast<const void*>(a0), uint32_t(a1 - a0));
  }
  for (int v = s.v0; v < s.v1 && ok; v += HF::kRows1024)
    issue(e8 + int64_t(v) * kHidden * HE, uint32_t(min(HF::kRows1024, s.v1 - v)) * kHidden * HE,
          uint32_t(kNumLayers) * 16u + 13u);
  // Drain: no bulk copy may still be writing into this block's shared memory when it exits.
  // (Each landing is published, so the LM head's last rounds see it.)
  for (uint32_t j = k > uint32_t(kStages) ? k - kStages : 0u; j < k; ++j) {
    const long long t0 = clock64();
    bool done = true;
    while (!mbar_try_wait(&r.full[j % kStages], (j / kStages) & 1u))
      if (clock64() - t0 > tmo) {
        done = false;
        break;
      }
    if (done) publish_landed(j + 1);
  }
  // this block's first three phases of layer 0 (qkv, O, gate/up), to L2 for the next launch, once
  // every copy of this one has landed
  if (ok) {
    auto span = [&](int64_t elem, int64_t bytes) { prefetch_l2_bulk(w8 + F::bytes_of(elem), uint32_t(bytes)); };
    span(qkv_elem(s.q0), int64_t(s.q1 - s.q0) * F::kRowBytes1024);
    span(o_elem(s.o0), int64_t(s.o1 - s.o0) * F::kRowBytesO);
    span(gu_elem(2 * kMlpUnitCols * s.u0), int64_t(2 * kMlpUnitCols * (s.u1 - s.u0)) * F::kRowBytes1024);
  }
}


// Thread 0's tests of slots kc .. kc + n - 1 (n <= 2 kRoundSlots, n <= kStages) of the ring of
// depth kStages whose full barriers are `full`, issued back to back, slot and parity stepped, not
// divided; bit i of the result: slot i had not landed. Bits set in `known` (landed at an earlier
// test: a landed slot stays landed until this block hands it back) are not tested again. n <=
// kStages keeps each parity test sound: the block consumed copy kc + i - kStages (i < kStages)
// itself, so the slot's barrier is in the phase of copy kc + i or the one before it.
template <int kStages>
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
