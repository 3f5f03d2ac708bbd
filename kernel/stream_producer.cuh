// monolith: the ring's writer. Lane 0 of the producer warp walks this block's whole-token stream
// list and keeps kStages bulk copies in flight; what each phase copies, and in which order, is that
// phase's `load` (kernel/phase_*.cuh), beside the `consume` that acquires the same slots in the same
// order. Part of the streaming schedule (kernel/schedule_stream.cuh includes it after the phases,
// inside the build namespace); not a stand-alone header. The ring's protocol (release counts, the
// hop hold, the landed count, the next launch's prefetch) is described in stream_ring.cuh.
#pragma once

// Cfg: the variant's configuration; P: its Policy; kLong, kWide: the kernel (the phases' splits
// depend on kWide alone, which the consumers read in the same order)
template <class Cfg, class P, bool kLong, bool kWide>
__device__ __forceinline__ void stream_producer(const StepParams& p, const PlanT<kWide>& s, int pos, Ring r) {
  using W = typename Cfg::Weights;
  using F = StreamFmt<W>;
  constexpr bool kNv = W::kBlockScaled;
  using Qkv = PhaseQkv<Cfg, P, kWide>;
  using Attn = PhaseAttn<Cfg, P, kLong, kWide>;
  using O = PhaseO<Cfg, P, kWide>;
  using Mlp = PhaseMlp<Cfg, P, kWide>;
  using Down = PhaseDown<Cfg, P, kWide>;
  using Head = PhaseHead<Cfg, P, kWide>;
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
  auto nv_layer_scales = [&](int L) { return nv_block_scales(p) + int64_t(L) * kNvLayerBscaleBytes; };
  if constexpr (kNv) {
    prefetch_l2_bulk(p.row_scales, kNumLayers * kNvTscaleSlots * 4);
    Qkv::prefetch_scales(nv_layer_scales(0), s);
    O::prefetch_scales(nv_layer_scales(0), s);
    Mlp::prefetch_scales(nv_layer_scales(0), s);
    Down::prefetch_scales(nv_layer_scales(0), s);
  }
  int held_seen = 0;  // the last hop mark the producer held for (each mark holds it once)
  // the landed count lives only in shared memory (producer_land inlined: out of line, the call
  // made the E4M3 and NVFP4 kernels spill)
  auto land = [&] {
    if constexpr (P::kSlotLanded) producer_land(r.full, r.landed, k);
  };
  auto publish_landed = [&](uint32_t L) {
    if constexpr (P::kSlotLanded) producer_publish_landed(r.landed, L);
  };
  // one bulk copy into the next slot, once its previous copy was handed back; after a failed wait
  // (quit, another block's error, a timeout) every later call returns at once
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
  // the weights: the bf16 buffer or the E4M3 / NVFP4 codes (element offsets x F::bytes_of)
  const uint8_t* w8 = W::kRowScale ? p.codes : reinterpret_cast<const uint8_t*>(p.w);
  // The stream: per layer the phases' loads in the consumers' order (merge has no slots), then the
  // LM head. NVFP4 asks L2 for the next layer's block scales of a phase after that phase's copies.
  for (int L = 0; L < kNumLayers && ok; ++L) {
    const uint8_t* Wl = w8 + F::bytes_of(int64_t(L) * kLayerElems);
    const uint32_t info = uint32_t(L) * 16u + 13u;
    const bool nv_next = kNv && L + 1 < kNumLayers;
    if (L + 1 < kNumLayers) prefetch_l2_bulk(p.norms + int64_t(L + 1) * kNormLayerElems, kNormLayerElems * 2);
    if constexpr (W::kRowScale && !kNv)  // this layer's scales (48 KB) to L2: the consumers load a few each phase
      if (L + 1 < kNumLayers) prefetch_l2_bulk(p.row_scales + int64_t(L + 1) * kLayerRows, kLayerRows * 4);
    Qkv::load(issue, s, Wl, info);
    if (nv_next) Qkv::prefetch_scales(nv_layer_scales(L + 1), s);
    Attn::load(issue, p, s, pos, L, info);
    O::load(issue, s, Wl, info);
    if (nv_next) O::prefetch_scales(nv_layer_scales(L + 1), s);
    Mlp::load(issue, s, Wl, info);
    if (nv_next) Mlp::prefetch_scales(nv_layer_scales(L + 1), s);
    Down::load(issue, s, Wl, info);
    if (nv_next) Down::prefetch_scales(nv_layer_scales(L + 1), s);
  }
  if (ok) Head::load(issue, p, s);
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
    Qkv::prefetch_next(w8, s);
    O::prefetch_next(w8, s);
    Mlp::prefetch_next(w8, s);
  }
}
