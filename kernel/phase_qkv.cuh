// monolith: the streaming schedule's qkv phase: the residual after layer L-1 (tagged words; layer 0:
// the token's embedding row), its seed into this layer's O stage, RMSNorm, and this block's rows of
// its group's 512 q/k/v rows, published as tagged q/k/v words.
// Stream order: a block's qkv rows q0 .. q1 of its group are the first entries of each layer in
// StreamPlan's list (stream_plan.cuh; stream_producer issues them in that order); the acquires here
// take them in that order, kRoundSlots slots per round.
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop. It reads and writes the consumer's locals as if written there; the compiler sees
// the same tokens as one function, as the SASS lock (kernel/sass.lock) requires: a phase made a
// function of its own compiles to PTX with other register orders, and so to other machine code.

{
  float v[2];
  bool ok = true;
  const Norm2 nin = load_norm2(N + kNormInLn);  // in flight during the wait below
  const float* scl = kScaled ? SC + kScQKV + g * kGroupRows : nullptr;
  const float sc0 = kNv ? 1.f : first_scale(scl, s.q0, s.q1, kRowsRound);
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
    nv_bs_load(bsq, 0, s.q1 - s.q0, nbs);
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
    XRAY_GATHER(L);  // every thread's residual words are in
  };
  bool done;
  if constexpr (kNv) {
    int unused = 0;
    done = rows_nv(std::false_type{}, std::bool_constant<kNv>{}, s.q1 - s.q0, bsq, nbs, sm.x, kPhase_s_qkv, L, ok, opened_qkv,
                   [&](int q, int nr, const float* part) {
                     if (tid < nr) {
                       const int r = s.q0 + q + tid;
                       const float ts = tsr;
                       if (r + kNvRowsRound < s.q1) tsr = qkv_ts(r + kNvRowsRound);
                       on_qkv(r, part[tid] * ts);
                     }
                   }, false, unused);
  } else {
    done = rows_1024(std::bool_constant<kE4H2Qkv>{}, std::integral_constant<int, kRoundSlots>{}, s.q0, s.q1, kPhase_s_qkv, L, sm.x, ok,
                     scl, sc0, on_qkv, opened_qkv);
  }
  if (!done) return;
  if (b == 0)  // for the phase diff
    for (int e = 0; e < 2; ++e) scr[kScrNormIn + tid + e * kStreamConsumerThreads] = v[e] * inv * nin.w[e];
}
