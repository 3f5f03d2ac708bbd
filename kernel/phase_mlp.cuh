// monolith: the streaming schedule's MLP-1 phase: the residual after attention + O (counted words),
// RMSNorm, the gate/up rows of this block's 8-column units and SiLU(gate) * up as tagged act words.
// Stream order: a block's MLP units u0 .. u1 follow its O rows in StreamPlan's list, F::kSlotsPerUnit
// slots per unit (rows 2i gate, 2i + 1 up of pair i; stream_plan.cuh, issued in that order by
// stream_producer); the acquires here take them in that order, kMlpRoundUnits units per round
// (NVFP4: kRoundSlots slots of 32 rows).
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop. It reads and writes the consumer's locals as if written there; the compiler sees
// the same tokens as one function, as the SASS lock (kernel/sass.lock) requires: a phase made a
// function of its own compiles to PTX with other register orders, and so to other machine code.

{
  long long fix[2] = {0, 0};
  const Norm2 npost = load_norm2(N + kNormPostLn);  // in flight during the wait below
  // E4M3: the gate and up scales of this thread's pair in the first round, also before the wait
  auto pair_scales = [&](int u, int nu, float& sg, float& su) {
    sg = su = 1.f;
    if constexpr (kScaled)
      if (tid < kMlpUnitCols * nu) {
        sg = __ldg(SC + kScGateUp + 2 * kMlpUnitCols * u + 2 * tid);
        su = __ldg(SC + kScGateUp + 2 * kMlpUnitCols * u + 2 * tid + 1);
      }
  };
  float scg, scu;
  pair_scales(s.u0, min(P::kMlpRoundUnits, s.u1 - s.u0), scg, scu);
  // NVFP4: the block's gate/up rows 16 u0 .. 16 u1 as one row range; the first round's block
  // scales and the gate and up tensor scales, before the wait
  const int ngu = 2 * kMlpUnitCols * (s.u1 - s.u0);
  const uint8_t* bsg = kNv ? BS + kBsGateUp + int64_t(2 * kMlpUnitCols * s.u0) * NF::kBsRow1024 : nullptr;
  uint32_t nbs[kRoundSlots];
  float tsg = 1.f, tsu = 1.f;
  if constexpr (kNv) {
    nv_bs_load(bsg, 0, ngu, nbs);
    tsg = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsGate));
    tsu = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsUp));
  }
  auto mlp_slots0 = [&] { return F::kSlotsPerUnit * min(P::kMlpRoundUnits, s.u1 - s.u0); };  // bf16 / E4M3: round 0's
  const bool ok = resid_poll(acc_o, kGroups + 1, rh, fix, S, tmo, uint32_t(L) * 16u + 10u);
  __syncwarp();  // converge after the poll (the note at gather_vec)
  XRAY_WORDS_NOTE(&sm.xwords);
  XRAY_END(s_wait_o, L);  // thread 0's words (the first round's barrier is the block's)
  float v[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    v[e] = from_fix(fix[e]);
    sm.hval[tid + e * kStreamConsumerThreads] = v[e];
  }
  if (p.stop_layer == L && p.stop_phase == kStopO) {
    if (b == 0 && ok)
      for (int e = 0; e < 2; ++e) scr[kScrHidden + tid + e * kStreamConsumerThreads] = v[e];
    return;
  }
  stream_prenorm<true, kNv, kE4H2Mlp>(v, npost, sm.x, sm.ssq);
  XRAY_SUB2(x_prenorm, L);
  if constexpr (kNv) {
    float inv = 0.f;
    int unused = 0;
    if (!rows_nv(std::false_type{}, std::bool_constant<kNv>{}, ngu, bsg, nbs, sm.x, kPhase_s_mlp, L, ok, [&] {
          XRAY_WORDS_CUT(&sm.xwords, L);
          XRAY_GATHER(L);  // every thread's counted words are in
          inv = norm_inv(sm.ssq);
          if (b == 0)  // for the phase diff
            for (int e = 0; e < 2; ++e) scr[kScrNormPost + tid + e * kStreamConsumerThreads] = v[e] * inv * npost.w[e];
        }, [&](int q, int nr, const float* part) {
          if (tid < nr / 2) {  // pair t of the round: gate j (row 2t) and up j (row 2t + 1)
            const float gg = (part[2 * tid] * tsg) * inv, uu = (part[2 * tid + 1] * tsu) * inv;
            const int j = kMlpUnitCols * s.u0 + q / 2 + tid;
            const float av = gg / (1.f + __expf(-gg)) * uu;
            tagged_store(acc + kTagAct + j, av, tag);
            scr[kScrAct + j] = av;  // for the phase diff
          }
        }, false, unused))
      return;
  } else {
    // rounds of kMlpRoundUnits units (16 rows each: rows 2i (gate) and 2i + 1 (up) of pair i),
    // each in pieces of at most kRoundSlots slots. The first round's opening barrier publishes
    // hval, x and the sums of squares.
    constexpr int kSpu = F::kSlotsPerUnit;
    static_assert(P::kMlpRoundUnits * kSpu <= kMlpRoundSlots, "an MLP round: at most two pieces, in part[]");
    if (!acquire_n(mlp_slots0(), kPhase_s_mlp, L, ok, true)) return;
    XRAY_WORDS_CUT(&sm.xwords, L);
    XRAY_GATHER(L);  // every thread's counted words are in
    const float inv = norm_inv(sm.ssq);
    if (b == 0)  // for the phase diff
      for (int e = 0; e < 2; ++e) scr[kScrNormPost + tid + e * kStreamConsumerThreads] = v[e] * inv * npost.w[e];
    const auto xg = [&] {
      if constexpr (kE4H2Mlp) return load_xe_half<kHidden / 32>(sm.x);
      else return load_xhalf<W>(sm.x);
    }();
    for (int u = s.u0, rd = 0; u < s.u1; u += P::kMlpRoundUnits, ++rd) {
      const int nu = min(P::kMlpRoundUnits, s.u1 - u), n = kSpu * nu;
      float* part = sm.part[rd & 1];
      if (rd > 0) {
        pair_scales(u, nu, scg, scu);
        if (!acquire_n(n, kPhase_s_mlp, L)) return;
      }
#pragma unroll
      for (int pc = 0; pc < 2; ++pc) {
        const int p0 = pc * kRoundSlots, np = min(kRoundSlots, n - p0);
        if (np > 0) round_1024(p0, np, np * F::kRows1024, xg, part + p0 * F::kRb * kPartBlk);
      }
      csync();
      if (rd == 0) XRAY_SUB(x_dot, L);
      if (tid < kMlpUnitCols * nu) {  // pair t of the round: gate j and up j, j = 8 u + t
        const float gg = combine_row(part, 2 * tid) * (inv * scg), uu = combine_row(part, 2 * tid + 1) * (inv * scu);
        const int j = kMlpUnitCols * u + tid;
        const float av = gg / (1.f + __expf(-gg)) * uu;
        tagged_store(acc + kTagAct + j, av, tag);
        scr[kScrAct + j] = av;  // for the phase diff
      }
      if (u + P::kMlpRoundUnits >= s.u1) hop_mark();
      hand_back(n);
      if (rd == 0) XRAY_SUB(x_out, L);
    }
  }
}
