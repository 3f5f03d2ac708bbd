// monolith: the streaming schedule's merge + O phases: the group's attention partials merged in
// split order, then the O rows of this block against the group's 256 columns, added into the
// counted residual words (one part of kernel/schedule_stream.cuh, included after stream_reader.cuh
// inside the build namespace).
//
// Stream order: a block's O rows o0 .. o1 follow its attention splits' K/V slots in StreamPlan's
// list: PhaseO's `load` issues them in that order, one slot per round (E4M3: 64 rows, NVFP4: 128)
// or up to kRoundSlots slots of 32 rows (bf16), and its `consume` acquires them in the same order;
// PhaseMerge (no slots of its own) pretests the slots of that first round.

// this lane's O scales of the first O slot, loaded by PhaseMerge before its wait
struct OScales {
  float sco[2] = {1.f, 1.f};  // E4M3: this lane's O row scales
  uint32_t bso[2] = {0u, 0u};  // NVFP4: this lane's block scales of its two rows
  float tso = 1.f;             // NVFP4: O's tensor scale
};

// the merge (group hop) and O's pretest; false when a wait failed (the consumer leaves)
template <class Cfg, class P, bool kLong, bool kWide>
struct PhaseMerge {
  // no producer side: the merge reads the group's attention partials (L2), and O's pretest tests
  // the slots of PhaseO's first round

  // ---- consumer side
  __device__ __forceinline__ static bool consume(StreamReader<Cfg, P>& sr, const StepParams& p, const PlanT<kWide>& s, int L,
                                              int g, uint32_t tag, const float* SC, const uint8_t* BS, const float* TS,
                                              OScales& os) {
    using W = typename Cfg::Weights;
    using F = StreamFmt<W>;
    using NF = StreamFmt<WeightsNvfp4>;
    constexpr bool kNv = W::kBlockScaled;           // NVFP4 layers: block scales from L2, tensor scales per row
    constexpr bool kScaled = W::kRowScale && !kNv;  // fp8: one fp32 scale per row
    constexpr bool kE4H2O = (P::kE4M3Half2Phases & 2) != 0;  // fp8: sm.attn as f16 words (store_xe)
    const int tid = sr.tid, warp = sr.warp, lane = sr.lane;
    StreamSmem& sm = sr.sm;
  #if defined(MONOLITH_XRAY)
    XrayRecorder& xr = sr.xr;
  #endif
    constexpr bool kMergeHalves = P::kMergeHalves;
    constexpr int kMergeThreads = (kMergeHalves ? 2 : 1) * kGroupCols;  // threads that gather partials
    SyncState* const S = sr.S;
    const long long tmo = sr.tmo;
    float* scr = p.scr;
    long long* acc = p.acc;
    if constexpr (kNv) {
      const int r0 = 8 * warp + (lane >> 3);
  #pragma unroll
      for (int m = 0; m < 2; ++m)
        if (s.o0 + r0 + 4 * m < s.o1)
          os.bso[m] = __ldg(reinterpret_cast<const uint16_t*>(BS + kBsO + int64_t(g * kHidden + s.o0 + r0 + 4 * m) * NF::kBsRowO) +
                         (lane & 7));
      os.tso = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsO));
    }
    if constexpr (kScaled) {
      const int r0 = 4 * warp + (lane >> 4);
      if ((lane & 15) == 0) {
        if (s.o0 + r0 < s.o1) os.sco[0] = __ldg(SC + kScO + s.o0 + r0);
        if (s.o0 + r0 + 2 < s.o1) os.sco[1] = __ldg(SC + kScO + s.o0 + r0 + 2);
      }
    }
    // O's first round: one slot (E4M3, NVFP4) or up to kRoundSlots of 32 rows (bf16)
    sr.pretest(F::kRb == 2 || kNv ? 1 : (min(32 * kRoundSlots, s.o1 - s.o0) + 31) / 32);
    {
      bool ok = true;
      float num = 0.f, den = 0.f;
      // partials to merge: one per block that owns a split (read where the loop reads it: hoisted,
      // the kernels' code changed)
      auto np = [&] { return min(s.ng, s.nsplit); };
      constexpr int kBatch = kMergeBatch;
      static_assert(kLongKernelFrom == kBatch * kSplitPositions, "below kLongKernelFrom one batch holds every partial");
      // merge halves: threads kGroupCols.. take the partials from mh on (none below 5)
      const int mh = kBatch * ((np() + 2 * kBatch - 1) / (2 * kBatch));
      const bool upper = kMergeHalves && tid >= kGroupCols;
      float m = -INFINITY;
      if (tid < kMergeThreads && (!upper || mh < np())) {
        // online merge in split order (deterministic); the loads of 4 splits are issued together (one
        // L2 round trip per poll round covers positions < 256)
        const int h = (kMergeHalves ? tid % kGroupCols : tid) / kHeadDim, d = tid & (kHeadDim - 1);
        const long long* part0 = acc + kTagAttnPart + (g * kMaxSplits * kHeadsPerKV + h) * kPartStride;
        constexpr int kSplitStride = kHeadsPerKV * kPartStride;
        auto pend = [&] { return kMergeHalves && !upper ? min(np(), mh) : np(); };  // past this half's last
        // partials per round trip: kMergeBatch, or (P::kMergeMlLanes) twice that in the long and wide
        // kernels, where each half's partials (at most 8 at 16 blocks a group) then take one
        constexpr bool kMl = P::kMergeMlLanes;
        constexpr int kRound = kMl && kLong ? 2 * kBatch : kBatch;
        for (int sp0 = upper ? mh : 0; sp0 < pend() && ok; sp0 += kRound) {
          float ms[kRound], ls[kRound], os[kRound];
          const int nb = min(kRound, pend() - sp0);
          if constexpr (kMl) {
            // words 0 .. kRound-1: this thread's o of the round's partials; word kRound: lane j's (m, l)
            // word, m of partial j % kRound (lanes < kRound) or l (lanes kRound .. 2 kRound - 1; the
            // lanes above repeat them, the same addresses: no extra L2 sectors)
            float got[kRound + 1];
            const int jl = lane % kRound, wl = (lane / kRound) & 1;
            tagged_gather<kRound + 1>(
                [&](int i) {
                  const int j = i < kRound ? i : jl, sp = j < nb ? sp0 + j : 0;  // (past the last: split 0's)
                  return part0 + sp * kSplitStride + (i < kRound ? 2 + d : wl);
                },
                tag, got, S, tmo, uint32_t(L) * 16u + 9u, ok);
            ok = __all_sync(0xffffffffu, ok);  // the shuffles below need the whole warp
  #pragma unroll
            for (int j = 0; j < kRound; ++j) {
              const bool in = j < nb;
              const float mj = __shfl_sync(0xffffffffu, got[kRound], j);
              const float lj = __shfl_sync(0xffffffffu, got[kRound], kRound + j);
              ms[j] = in ? mj : -INFINITY;
              ls[j] = in ? lj : 0.f;
              os[j] = in ? got[j] : 0.f;
            }
          } else {
            float got[3 * kBatch];
            // words past the last split are read as split 0's (always written): same tag, unused
            tagged_gather<3 * kBatch>(
                [&](int i) {
                  const int j = i / 3, sp = j < nb ? sp0 + j : 0;
                  const long long* pp = part0 + sp * kSplitStride;
                  return pp + (i % 3 == 2 ? 2 + d : i % 3);
                },
                tag, got, S, tmo, uint32_t(L) * 16u + 9u, ok);
            // converge before the merge arithmetic (the note at gather_vec); an AND, not a plain
            // __syncwarp, so that a lane whose wait failed leaves the loop with its whole warp (the
            // loop's other bounds are warp-uniform: kGroupCols is a multiple of 32)
            ok = __all_sync(0xffffffffu, ok);
  #pragma unroll
            for (int j = 0; j < kBatch; ++j) {
              const bool in = j < nb;
              ms[j] = in ? got[3 * j] : -INFINITY;
              ls[j] = in ? got[3 * j + 1] : 0.f;
              os[j] = in ? got[3 * j + 2] : 0.f;
            }
          }
  #pragma unroll
          for (int j = 0; j < kRound; ++j) {
            if (sp0 + j < pend()) {
              const float mn = fmaxf(m, ms[j]);
              const float ca = __expf(m - mn), cb = __expf(ms[j] - mn);
              num = num * ca + os[j] * cb;
              den = den * ca + ls[j] * cb;
              m = mn;
            }
          }
        }
        if (upper) {  // (m, num, den) of the later partials, for the lower half after the barrier
          sm.vpart[tid - kGroupCols] = m;
          sm.vpart[tid] = num;
          sm.vpart[tid + kGroupCols] = den;
        }
      }
      if (!csync_and(ok)) return false;
      XRAY_END(s_wait_attn, L);
      if (tid < kGroupCols) {
        if (kMergeHalves && mh < np()) {  // fold the upper half in, after every earlier partial
          const float mu = sm.vpart[tid], mn = fmaxf(m, mu);
          const float ca = __expf(m - mn), cb = __expf(mu - mn);
          num = num * ca + sm.vpart[kGroupCols + tid] * cb;
          den = den * ca + sm.vpart[2 * kGroupCols + tid] * cb;
        }
        const float a = num / den;
        if constexpr (kNv) store_xh2<kGroupCols / 32>(sm.attn, tid >> 5, a);  // warps 0-7 whole
        else if constexpr (kE4H2O) store_xe<kGroupCols / 32>(sm.attn, tid >> 5, a);
        else sm.attn[nv_swz(tid)] = a;  // O reads it through x4_swz / load_x32
        if (s.gi == 0) scr[kScrAttn + g * kGroupCols + tid] = a;
      }
    }
    csync();
    XRAY_SUB2(x_open, L);  // (SUB=2: O's opening, the merge's last step and its barrier)
    return true;
  }
};

// O's rows: partial sums into the counted words acc_o; false when a wait failed
template <class Cfg, class P, bool kWide>
struct PhaseO {
  using F = StreamFmt<typename Cfg::Weights>;
  using NF = StreamFmt<WeightsNvfp4>;
  // element offset in a layer of column o of this block's group's O rows (K = kGroupCols)
  __device__ __forceinline__ static int64_t elem(const PlanT<kWide>& s, int o) {
    return kOffO + int64_t(s.g * kHidden + o) * kGroupCols;
  }

  // ---- producer side: O rows o0 .. o1 of the group's columns, F::kRowsO per slot
  template <class Issue>
  __device__ __forceinline__ static void load(const Issue& issue, const PlanT<kWide>& s, const uint8_t* Wl,
                                              uint32_t info) {
    for (int o = s.o0; o < s.o1; o += F::kRowsO)
      issue(Wl + F::bytes_of(elem(s, o)), uint32_t(min(F::kRowsO, s.o1 - o)) * F::kRowBytesO, info);
  }
  // NVFP4: this phase's block scales of layer L (bsl: the layer's), to L2
  __device__ __forceinline__ static void prefetch_scales(const uint8_t* bsl, const PlanT<kWide>& s) {
    prefetch_span(bsl + kBsO + int64_t(s.g * kHidden + s.o0) * NF::kBsRowO, int64_t(s.o1 - s.o0) * NF::kBsRowO);
  }
  // the next launch's copies of layer 0 (w8: every layer's weights), to L2
  __device__ __forceinline__ static void prefetch_next(const uint8_t* w8, const PlanT<kWide>& s) {
    prefetch_l2_bulk(w8 + F::bytes_of(elem(s, s.o0)), uint32_t(int64_t(s.o1 - s.o0) * F::kRowBytesO));
  }

  // ---- consumer side
  __device__ __forceinline__ static bool consume(StreamReader<Cfg, P>& sr, const PlanT<kWide>& s, int L, int g,
                                              long long* acc_o, const float* SC, const uint8_t* BS, const OScales& os) {
    using W = typename Cfg::Weights;
    using F = StreamFmt<W>;
    using NF = StreamFmt<WeightsNvfp4>;
    constexpr bool kNv = W::kBlockScaled;           // NVFP4 layers: block scales from L2, tensor scales per row
    constexpr bool kScaled = W::kRowScale && !kNv;  // fp8: one fp32 scale per row
    constexpr bool kE4H2O = (P::kE4M3Half2Phases & 2) != 0;  // fp8: sm.attn as f16 words (store_xe)
    const int tid = sr.tid, warp = sr.warp, lane = sr.lane;
    StreamSmem& sm = sr.sm;
  #if defined(MONOLITH_XRAY)
    XrayRecorder& xr = sr.xr;
  #endif
    if constexpr (kNv) {
      // NVFP4: 128 rows of the group's 256 columns per slot (128 code bytes each), one slot per
      // round; a row is 8 lanes (lane l8 = lane % 8: the row's word l8 = columns 32 l8 .., blocks
      // 2 l8, 2 l8 + 1), warp w takes rows 8 w + lane / 8 and + 4. The eight lanes' sums meet in
      // an xor tree 4, 2, 1: kernel_gemv(..., lanes=8) of quant/nvfp4_kernel_model.py.
      const int l8 = lane & 7;
      const NvIn<kNv> at = load_nv_in<kNv, kGroupCols / 32>(sm.attn, l8);
      for (int o = s.o0, i = 0; o < s.o1; o += F::kRowsO, ++i) {
        const int nr = min(F::kRowsO, s.o1 - o);
        const int r0 = 8 * warp + (lane >> 3), r1 = r0 + 4;
        uint32_t b0 = os.bso[0], b1 = os.bso[1];  // later slots' scales: issued before the slot wait
        if (i > 0) {
          const uint16_t* bs = reinterpret_cast<const uint16_t*>(BS + kBsO + int64_t(g * kHidden + o) * F::kBsRowO) + l8;
          b0 = r0 < nr ? __ldg(bs + r0 * (F::kBsRowO / 2)) : 0u;
          b1 = r1 < nr ? __ldg(bs + r1 * (F::kBsRowO / 2)) : 0u;
        }
        if (!sr.acquire_n(1, kPhase_s_oproj, L, true, false, i == 0)) return false;  // i = 0: after the barrier above
        const uint4* slot = sr.slot_at(0);
        float a0 = r0 < nr ? nv_dot(slot[r0 * (F::kRowBytesO / 16) + l8], at, b0) : 0.f;
        float a1 = r1 < nr ? nv_dot(slot[r1 * (F::kRowBytesO / 16) + l8], at, b1) : 0.f;
  #pragma unroll
        for (int m = 4; m > 0; m >>= 1) {  // within each group of 8 lanes, fixed order
          a0 += __shfl_xor_sync(0xffffffffu, a0, m);
          a1 += __shfl_xor_sync(0xffffffffu, a1, m);
        }
        if (l8 == 0) {
          if (r0 < nr) resid_add(acc_o + o + r0, to_fix(a0 * os.tso));
          if (r1 < nr) resid_add(acc_o + o + r1, to_fix(a1 * os.tso));
        }
        if (o + F::kRowsO >= s.o1) sr.hop_mark();
        sr.release_n(1);
      }
    } else if constexpr (F::kRb == 2) {
      // E4M3: 64 rows of the group's 256 columns per slot, one slot per round; half-warp hw of warp
      // w takes rows 4 w + hw and 4 w + 2 + hw, lane l16 16 columns (one 16-byte word) of each
      const int hw = lane >> 4, l16 = lane & 15;
      const float4* at4 = reinterpret_cast<const float4*>(sm.attn);
      const float4 at[4] = {at4[x4_swz(4 * l16)], at4[x4_swz(4 * l16 + 1)], at4[x4_swz(4 * l16 + 2)], at4[x4_swz(4 * l16 + 3)]};
      const XE16 ate = kE4H2O ? load_xe16<kGroupCols / 32>(sm.attn, 16 * l16) : XE16{};  // kE4H2O: as half2 (at unused)
      for (int o = s.o0, i = 0; o < s.o1; o += F::kRowsO, ++i) {
        const int nr = min(F::kRowsO, s.o1 - o);
        const int r0 = 4 * warp + hw, r1 = r0 + 2;
        // the two rows' scales (issued before the slot wait; the first slot's before the merge's)
        const float s0 = (l16 == 0 && r0 < nr) ? (i == 0 ? os.sco[0] : __ldg(SC + kScO + o + r0)) : 0.f;
        const float s1 = (l16 == 0 && r1 < nr) ? (i == 0 ? os.sco[1] : __ldg(SC + kScO + o + r1)) : 0.f;
        if (!sr.acquire_n(1, kPhase_s_oproj, L, true, i == 0, i == 0)) return false;  // i = 0: after the barrier above
        if (i == 0) XRAY_SUB2(x_bar, L);
        const uint4* slot = sr.slot_at(0);
        float a0 = r0 < nr ? (kE4H2O ? hdot16_e4m3(slot[r0 * 16 + l16], ate.w, ate.f) : dot16_e4m3(slot[r0 * 16 + l16], at, 0.f)) : 0.f;
        float a1 = r1 < nr ? (kE4H2O ? hdot16_e4m3(slot[r1 * 16 + l16], ate.w, ate.f) : dot16_e4m3(slot[r1 * 16 + l16], at, 0.f)) : 0.f;
  #pragma unroll
        for (int m = 8; m > 0; m >>= 1) {  // within each half-warp, fixed order
          a0 += __shfl_xor_sync(0xffffffffu, a0, m);
          a1 += __shfl_xor_sync(0xffffffffu, a1, m);
        }
        if (i == 0) XRAY_SUB2(x_dot, L);
        if (l16 == 0) {
          if (r0 < nr) resid_add(acc_o + o + r0, to_fix(a0 * s0));
          if (r1 < nr) resid_add(acc_o + o + r1, to_fix(a1 * s1));
        }
        if (o + F::kRowsO >= s.o1) sr.hop_mark();
        if (i == 0) XRAY_SUB2(x_out, L);
        sr.release_n(1);
      }
    } else {
      // lane's 8 attention values are the same for every O row: registers
      const float4 at0 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane)];
      const float4 at1 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane + 1)];
      for (int o = s.o0; o < s.o1; o += 32 * kRoundSlots) {
        const int nr = min(32 * kRoundSlots, s.o1 - o), n = (nr + 31) / 32;
        if (!sr.acquire_n(n, kPhase_s_oproj, L, true, o == s.o0, o == s.o0)) return false;  // the first: after the barrier above
        if (o == s.o0) XRAY_SUB2(x_bar, L);
        float a[2 * kRoundSlots];
  #pragma unroll
        for (int i = 0; i < kRoundSlots; ++i) {  // slot i, rows 2 w and 2 w + 1
          const uint4* slot = sr.slot_at(i);
          a[2 * i] = i < n ? dot8_bf16(slot[(2 * warp) * 32 + lane], at0, at1, 0.f) : 0.f;
          a[2 * i + 1] = i < n ? dot8_bf16(slot[(2 * warp + 1) * 32 + lane], at0, at1, 0.f) : 0.f;
        }
        // values 0..3 and 4..7: lane 8 v holds the sum of value v (of its group of four)
        const float lo4 = warp_sum4(a[0], a[1], a[2], a[3]), hi4 = warp_sum4(a[4], a[5], a[6], a[7]);
        if (o == s.o0) XRAY_SUB2(x_dot, L);
        if ((lane & 7) == 0) {
  #pragma unroll
          for (int k = 0; k < 2; ++k) {
            const int i = 4 * k + (lane >> 3);
            const int rr = 32 * (i >> 1) + 2 * warp + (i & 1);
            if (rr < nr) resid_add(acc_o + o + rr, to_fix(k == 0 ? lo4 : hi4));
          }
        }
        if (o + 32 * kRoundSlots >= s.o1) sr.hop_mark();
        if (o == s.o0) XRAY_SUB2(x_out, L);
        sr.release_n(n);
      }
    }
    return true;
  }
};
