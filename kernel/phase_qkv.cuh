// monolith: the streaming schedule's qkv phase: the residual after layer L-1 (tagged words; layer 0:
// the token's embedding row), its seed into this layer's O stage, RMSNorm, and this block's rows of
// its group's 512 q/k/v rows, published as tagged q/k/v words (one part of
// kernel/schedule_stream.cuh, included after stream_reader.cuh inside the build namespace).
//
// Stream order: a block's qkv rows q0 .. q1 of its group are the first entries of each layer in
// StreamPlan's list: `load` issues them in that order and `consume` acquires them in the same
// order, kRoundSlots slots per round. `consume` is false when a wait failed (the consumer leaves).

template <class Cfg, class P, bool kWide>
struct PhaseQkv {
  using F = StreamFmt<typename Cfg::Weights>;
  using NF = StreamFmt<WeightsNvfp4>;
  // element offset in a layer of group row q of this block's group (row-major, K = kHidden)
  __device__ __forceinline__ static int64_t elem(const PlanT<kWide>& s, int q) {
    return kOffQKV + int64_t(s.g * kGroupRows + q) * kHidden;
  }

  // ---- producer side: rows q0 .. q1 of the group, F::kRows1024 per slot (the last one partial)
  template <class Issue>
  __device__ __forceinline__ static void load(const Issue& issue, const PlanT<kWide>& s, const uint8_t* Wl,
                                              uint32_t info) {
    constexpr int R = F::kRows1024;
    for (int q = s.q0; q < s.q1; q += R)
      issue(Wl + F::bytes_of(elem(s, q)), uint32_t(min(R, s.q1 - q)) * F::kRowBytes1024, info);
  }
  // NVFP4: this phase's block scales of layer L (bsl: the layer's), to L2 ahead of the consumers' __ldg
  __device__ __forceinline__ static void prefetch_scales(const uint8_t* bsl, const PlanT<kWide>& s) {
    prefetch_span(bsl + kBsQKV + int64_t(s.g * kGroupRows + s.q0) * NF::kBsRow1024,
                  int64_t(s.q1 - s.q0) * NF::kBsRow1024);
  }
  // the next launch's copies of layer 0 (w8: every layer's weights), to L2
  __device__ __forceinline__ static void prefetch_next(const uint8_t* w8, const PlanT<kWide>& s) {
    prefetch_l2_bulk(w8 + F::bytes_of(elem(s, s.q0)), uint32_t(int64_t(s.q1 - s.q0) * F::kRowBytes1024));
  }

  // ---- consumer side
  __device__ __forceinline__ static bool consume(StreamReader<Cfg, P>& sr, const StepParams& p, const PlanT<kWide>& s, int token,
                                                   uint32_t steps, int L, int G, int b, int g, const uint16_t* N, uint32_t tag,
                                                   long long* acc_o, const float* SC, const uint8_t* BS, const float* TS) {
    using W = typename Cfg::Weights;
    using F = StreamFmt<W>;
    using HW = typename W::Head;  // the embedding's and LM head's format (NVFP4: E4M3)
    using NF = StreamFmt<WeightsNvfp4>;
    constexpr bool kNv = W::kBlockScaled;           // NVFP4 layers: block scales from L2, tensor scales per row
    constexpr bool kScaled = W::kRowScale && !kNv;  // fp8: one fp32 scale per row
    constexpr bool kE4H2Qkv = (P::kE4M3Half2Phases & 1) != 0;  // fp8: sm.x as f16 words (store_xe)
    constexpr int kRowsRound = kRoundSlots * F::kRows1024;  // K = 1024 rows per round: 32 | 64 | 128 (NVFP4)
    const int tid = sr.tid;
    StreamSmem& sm = sr.sm;
    SyncState* const S = sr.S;
    const long long tmo = sr.tmo;
    float* scr = p.scr;
    long long* acc = p.acc;
  #if defined(MONOLITH_XRAY)
    XrayRecorder& xr = sr.xr;
  #endif
    // Block b seeds element i of a counted stage (the residual connection) when i G / kHidden == b
    // (kHiddenShift above).
    auto seed_o = [&](long long* buf, const float v[2]) {
  #pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = tid + e * kStreamConsumerThreads;
        if ((i * G) >> kHiddenShift == b) resid_add(buf + i, to_fix(v[e]));
      }
    };
    {
      float v[2];
      bool ok = true;
      const Norm2 nin = load_norm2(N + kNormInLn);  // in flight during the wait below
      const float* scl = kScaled ? SC + kScQKV + g * kGroupRows : nullptr;
      const float sc0 = kNv ? 1.f : sr.first_scale(scl, s.q0, s.q1, kRowsRound);
      // NVFP4: the first round's block scales, and the tensor scale (q's, k's or v's) of this
      // thread's row of the first round, before the wait; the next round's row scale is loaded at
      // the end of a round (one register, as fp8's row scales: three held ones spilled)
      uint32_t nbs[kRoundSlots];
      float tsr = 1.f;
      const uint8_t* bsq = kNv ? BS + kBsQKV + int64_t(g * kGroupRows + s.q0) * NF::kBsRow1024 : nullptr;
      auto qkv_ts = [&](int r) {  // group row r: q rows 0..255, k 256..383, v 384..511
        return WeightsNvfp4::row_scale<kNv>(__ldg(TS + (r < kGroupCols ? kTsQ : (r < kGroupCols + kHeadDim ? kTsK : kTsV))));
      };
      if constexpr (kNv) {
        sr.nv_bs_load(bsq, 0, s.q1 - s.q0, nbs);
        if (tid < kNvRowsRound && s.q0 + tid < s.q1) tsr = qkv_ts(s.q0 + tid);
      }
      if (L == 0) {
        if constexpr (HW::kRowScale) {  // the token's E4M3 row, dequantized as the oracle's weights are
          const float es = __ldg(p.embed_scales + token);
          const uint8_t* er = p.embed_codes + int64_t(token) * kHidden;
  #pragma unroll
          for (int e = 0; e < 2; ++e) v[e] = HW::value(er, tid + e * kStreamConsumerThreads, es);
        } else {
  #pragma unroll
          for (int e = 0; e < 2; ++e) v[e] = bf16_as_float(p.embed[int64_t(token) * kHidden + tid + e * kStreamConsumerThreads]);
        }
      } else {
        gather_vec<2>(acc + kTagResid, layer_tag(steps, L - 1), v, S, tmo, uint32_t(L) * 16u + 7u, ok);
        __syncwarp();  // converge after the poll (the note at gather_vec)
        XRAY_WORDS_NOTE(&sm.xwords);
        XRAY_END(s_wait_resid, L);  // thread 0's words (the first round's barrier is the block's)
      }
      // the residual connection, added at once: every block has read the O stage of layer L-2
      // (this buffer's previous content) before any block could finish layer L-1's MLP
      if (ok) seed_o(acc_o, v);
      stream_prenorm<true, kNv, kE4H2Qkv>(v, nin, sm.x, sm.ssq);
      if (L > 0) XRAY_SUB2(x_prenorm, L);
      float inv = 0.f;
      auto on_qkv = [&](int q, float a) {  // group row q's dot product, row-scaled
        const int row = qkv_std_row(g, q);
        tagged_store(acc + kTagQKV + row, a * inv, tag);
        scr[kScrQKV + row] = a * inv;  // for the phase diff
      };
      auto opened_qkv = [&] {
        inv = norm_inv(sm.ssq);
        if (L > 0) XRAY_WORDS_CUT(&sm.xwords, L);
        XRAY_END(s_gather, L);  // every thread's residual words are in
      };
      bool done;
      if constexpr (kNv) {
        int unused = 0;
        done = sr.rows_nv(std::false_type{}, std::bool_constant<kNv>{}, s.q1 - s.q0, bsq, nbs, sm.x, kPhase_s_qkv, L, ok, opened_qkv,
                       [&](int q, int nr, const float* part) {
                         if (tid < nr) {
                           const int r = s.q0 + q + tid;
                           const float ts = tsr;
                           if (r + kNvRowsRound < s.q1) tsr = qkv_ts(r + kNvRowsRound);
                           on_qkv(r, part[tid] * ts);
                         }
                       }, false, unused);
      } else {
        done = sr.rows_1024(std::bool_constant<kE4H2Qkv>{}, std::integral_constant<int, kRoundSlots>{}, s.q0, s.q1, kPhase_s_qkv, L, sm.x, ok,
                         scl, sc0, on_qkv, opened_qkv);
      }
      if (!done) return false;
      if (b == 0)  // for the phase diff
        for (int e = 0; e < 2; ++e) scr[kScrNormIn + tid + e * kStreamConsumerThreads] = v[e] * inv * nin.w[e];
    }
    return true;
  }
};
