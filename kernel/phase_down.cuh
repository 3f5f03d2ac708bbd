// monolith: the streaming schedule's down phase (MLP 2): every activation of the layer, this
// block's rows of down and the residual (one part of kernel/schedule_stream.cuh, included after
// stream_reader.cuh inside the build namespace).
//
// Stream order: a block's down rows h0 .. h1 follow its MLP units in StreamPlan's list, as 3 h
// 1024-wide segments in row order: `load` issues them in that order and `consume` acquires them in
// the same order, kRoundSlots slots per round. `consume` is false when a wait failed (the consumer
// leaves).

template <class Cfg, class P, bool kWide>
struct PhaseDown {
  using F = StreamFmt<typename Cfg::Weights>;
  using NF = StreamFmt<WeightsNvfp4>;

  // ---- producer side: down rows h0 .. h1, row-major (K = kIntermediate): contiguous, cut into
  // slots of kSlotBytes (R segments of 1024 each; the last one partial)
  template <class Issue>
  __device__ __forceinline__ static void load(const Issue& issue, const PlanT<kWide>& s, const uint8_t* Wl,
                                              uint32_t info) {
    const uint8_t* d0 = Wl + F::bytes_of(kOffDown + int64_t(s.h0) * kIntermediate);
    const int64_t bytes = int64_t(s.h1 - s.h0) * F::kRowBytesDown;
    for (int64_t off = 0; off < bytes; off += kSlotBytes)
      issue(d0 + off, uint32_t(min(int64_t(kSlotBytes), bytes - off)), info);
  }
  // NVFP4: this phase's block scales of layer L (bsl: the layer's), to L2
  __device__ __forceinline__ static void prefetch_scales(const uint8_t* bsl, const PlanT<kWide>& s) {
    prefetch_span(bsl + kBsDown + int64_t(s.h0) * 3 * NF::kBsRow1024, int64_t(s.h1 - s.h0) * 3 * NF::kBsRow1024);
  }

  // ---- consumer side
  __device__ __forceinline__ static bool consume(StreamReader<Cfg, P>& sr, const StepParams& p, const PlanT<kWide>& s, int L,
                                             uint32_t tag, const float* SC, const uint8_t* BS, const float* TS) {
    using W = typename Cfg::Weights;
    using F = StreamFmt<W>;
    using NF = StreamFmt<WeightsNvfp4>;
    constexpr bool kNv = W::kBlockScaled;           // NVFP4 layers: block scales from L2, tensor scales per row
    constexpr bool kScaled = W::kRowScale && !kNv;  // fp8: one fp32 scale per row
    constexpr bool kE4H2Down = (P::kE4M3Half2Phases & 8) != 0;  // fp8: sm.act as f16 words (store_xe)
    constexpr int kRowsRound = kRoundSlots * F::kRows1024;  // K = 1024 rows per round: 32 | 64 | 128 (NVFP4)
    const int tid = sr.tid, warp = sr.warp, lane = sr.lane;
    StreamSmem& sm = sr.sm;
    SyncState* const S = sr.S;
    const long long tmo = sr.tmo;
    float* scr = p.scr;
    long long* acc = p.acc;
  #if defined(MONOLITH_XRAY)
    XrayRecorder& xr = sr.xr;
  #endif
    // E4M3: this thread's down row scale (row h0 + tid), loaded before the activations' wait
    // (NVFP4: down's tensor scale, the same for every row, and the first round's block scales)
    float scd = kScaled && tid < s.h1 - s.h0 ? __ldg(SC + kScDown + s.h0 + tid) : 1.f;
    const uint8_t* bsd = kNv ? BS + kBsDown + int64_t(s.h0) * 3 * NF::kBsRow1024 : nullptr;
    uint32_t nbsd[kRoundSlots];
    if constexpr (kNv) {
      scd = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsDown));
      sr.nv_bs_load(bsd, 0, 3 * (s.h1 - s.h0), nbsd);
    }
    {
      bool ok = true;
      constexpr int kPer = kActPer;
      float av[kPer];
      gather_vec<kPer>(acc + kTagAct, tag, av, S, tmo, uint32_t(L) * 16u + 11u, ok);
      __syncwarp();  // converge after the poll (the note at gather_vec)
      XRAY_WORDS_NOTE(&sm.xwords);  // MONOLITH_XRAY_SUB=1: this warp's words are in (x_words, below)
      // thread 0's words are in; the stores below and the barrier are the hop's s_gather
      XRAY_END(s_wait_act, L);
  #pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int i = tid + k * kStreamConsumerThreads;
        if constexpr (kNv) store_xh2<kIntermediate / 32>(sm.act, i >> 5, av[k]);  // whole warps
        else if constexpr (kE4H2Down) store_xe<kIntermediate / 32>(sm.act, i >> 5, av[k]);
        else sm.act[nv_swz(i)] = av[k];  // down reads it swizzled (NVFP4: per 1024-wide segment)
      }
      if (!csync_and(ok)) return false;  // also publishes sm.act
      XRAY_WORDS_CUT(&sm.xwords, L);  // MONOLITH_XRAY_SUB=1: the last warp's words
      XRAY_END(s_gather, L);  // every thread's activations are in and stored
    }
    {
      // rows h0..h1 of down (row-major, K = 3072) as 1024-wide segments, kRows1024 per slot (as
      // K = 1024 rows in round_1024); two warps per segment; thread t keeps segment t's sum, and
      // thread r adds row r's three in order (one thread adding all 24 of a block serially cost
      // ~0.3 us per layer), then the row scale (E4M3)
      const int nseg = 3 * (s.h1 - s.h0);
      int held = 0;  // the last round's slots, handed back after the residual stores
      if constexpr (kNv) {
        if (!sr.rows_nv(std::true_type{}, std::bool_constant<kNv>{}, nseg, bsd, nbsd, nullptr, kPhase_s_down, L, true, [] {},
                     [&](int q, int nr, const float* part) {
                       if (tid < nr) sm.segsum[q + tid] = part[tid];
                     }, true, held))
          return false;
      } else {
        for (int q0 = 0, rd = 0; q0 < nseg; q0 += kRowsRound, ++rd) {
          const int nq = min(kRowsRound, nseg - q0), n = (nq + F::kRows1024 - 1) / F::kRows1024;
          float* part = sm.part[rd & 1];
          if (!sr.acquire_n(n, kPhase_s_down, L, true, rd == 0, rd == 0)) return false;  // round 0: after the gather's barrier
          if (rd == 0) XRAY_SUB(x_open, L);
  #pragma unroll
          for (int k = 0; k < F::kRb; ++k) {
            float a[kRoundSlots];
  #pragma unroll
            for (int i = 0; i < kRoundSlots; ++i) {
              const int row = 8 * k + (warp >> 1);         // in the slot
              const int q = q0 + F::kRows1024 * i + row;  // segment q: row q / 3, columns 1024 (q % 3) ..
              // the input half differs per segment: read it from shared memory (4 live XHalf would
              // cost 64 registers)
              a[i] = 0.f;
              if (i < n && q < nseg) {
                if constexpr (kE4H2Down) {
                  a[i] = half_row_lane<W>(sr.slot_at(i), row, load_xe_half<kIntermediate / 32>(sm.act, (q % 3) * kHidden));
                } else {
                  const XHalf xa = load_xhalf<W>(sm.act + (q % 3) * kHidden);
                  a[i] = half_row_lane<W>(sr.slot_at(i), row, xa);
                }
              }
            }
            const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);
            if ((lane & 7) == 0) part[(F::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;
          }
          csync();
          if (rd == 0) XRAY_SUB(x_dot, L);
          if (tid < nq) sm.segsum[q0 + tid] = sr.combine_row(part, tid);
          if (q0 + nq < nseg) sr.hand_back(n); else held = n;
          if (rd == 0) XRAY_SUB(x_out, L);
        }
      }
      csync();
      if (tid < s.h1 - s.h0) {
        const int i = s.h0 + tid;
        const float* sg = sm.segsum + 3 * tid;  // the row's three segments, added in order
        const float v = sm.hval[i] + ((sg[0] + sg[1]) + sg[2]) * scd;
        tagged_store(acc + kTagResid + i, v, tag);
        if (p.stop_layer == L && (p.stop_phase == kStopGateUp || p.stop_phase == kStopDown)) scr[kScrHidden + i] = v;
      }
      sr.hop_mark();
      sr.hand_back(held);
    }
    return true;
  }
};
