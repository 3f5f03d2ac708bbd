// monolith: the streaming schedule's down phase (MLP 2): every activation of the layer, this block's
// rows of down and the residual, published as tagged residual words (the next layer's input).
// Stream order: a block's down rows h0 .. h1 follow its MLP units in StreamPlan's list, as 3 (h1 - h0)
// 1024-wide segments in row order (stream_plan.cuh; issued in that order by stream_producer); the
// acquires here take them in that order, kRoundSlots slots per round.
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop. It reads and writes the consumer's locals as if written there; the compiler sees
// the same tokens as one function, as the SASS lock (kernel/sass.lock) requires: a phase made a
// function of its own compiles to PTX with other register orders, and so to other machine code.

// E4M3: this thread's down row scale (row h0 + tid), loaded before the activations' wait
// (NVFP4: down's tensor scale, the same for every row, and the first round's block scales)
float scd = kScaled && tid < s.h1 - s.h0 ? __ldg(SC + kScDown + s.h0 + tid) : 1.f;
const uint8_t* bsd = kNv ? BS + kBsDown + int64_t(s.h0) * 3 * NF::kBsRow1024 : nullptr;
uint32_t nbsd[kRoundSlots];
if constexpr (kNv) {
  scd = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsDown));
  nv_bs_load(bsd, 0, 3 * (s.h1 - s.h0), nbsd);
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
  if (!csync_and(ok)) return;  // also publishes sm.act
  XRAY_WORDS_CUT(&sm.xwords, L);  // MONOLITH_XRAY_SUB=1: the last warp's words
  XRAY_GATHER(L);  // every thread's activations are in and stored
}
{
  // rows h0..h1 of down (row-major, K = 3072) as 1024-wide segments, kRows1024 per slot (as
  // K = 1024 rows in round_1024); two warps per segment; thread t keeps segment t's sum, and
  // thread r adds row r's three in order (one thread adding all 24 of a block serially cost
  // ~0.3 us per layer), then the row scale (E4M3)
  const int nseg = 3 * (s.h1 - s.h0);
  int held = 0;  // the last round's slots, handed back after the residual stores
  if constexpr (kNv) {
    if (!rows_nv(std::true_type{}, std::bool_constant<kNv>{}, nseg, bsd, nbsd, nullptr, kPhase_s_down, L, true, [] {},
                 [&](int q, int nr, const float* part) {
                   if (tid < nr) sm.segsum[q + tid] = part[tid];
                 }, true, held))
      return;
  } else {
    for (int q0 = 0, rd = 0; q0 < nseg; q0 += kRowsRound, ++rd) {
      const int nq = min(kRowsRound, nseg - q0), n = (nq + F::kRows1024 - 1) / F::kRows1024;
      float* part = sm.part[rd & 1];
      if (!acquire_n(n, kPhase_s_down, L, true, rd == 0, rd == 0)) return;  // round 0: after the gather's barrier
      if (rd == 0) XRAY_SUB(x_open, L);
      if constexpr (P::kTcGemv) tc_round<true, P::kVecs>(slot_at, 0, nq, (3 * s.h0 + q0) & 3, q0 % 3, sm.act, kIntermediate / 32, &sm.part[0][0]);
#pragma unroll
      for (int k = 0; k < (P::kTcGemv ? 0 : F::kRb); ++k) {
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
              a[i] = half_row_lane<W>(slot_at(i), row, load_xe_half<kIntermediate / 32>(sm.act, (q % 3) * kHidden));
            } else {
              const XHalf xa = load_xhalf<W>(sm.act + (q % 3) * kHidden);
              a[i] = half_row_lane<W>(slot_at(i), row, xa);
            }
          }
        }
        const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);
        if ((lane & 7) == 0) part[(F::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;
      }
      csync();
      if (rd == 0) XRAY_SUB(x_dot, L);
      if (tid < nq) sm.segsum[q0 + tid] = combine_row(part, tid);
      if (q0 + nq < nseg) hand_back(n); else held = n;
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
  hop_mark();
  hand_back(held);
}
