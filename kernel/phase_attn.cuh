// monolith: the streaming schedule's attention phase: QK-norm + RoPE of the group's q/k/v words, the
// K/V append (the owner of the last split), and the scores, softmax and V of this block's splits,
// merged online and published as one tagged (m, l, o[128]) partial per block.
// Stream order: a block's splits sp = gi, gi + ng, ... follow its qkv rows in StreamPlan's list,
// each as its K slots then its V slots (one each, or split_slots(n) in the wide kernel; none for a
// split without cached positions; stream_plan.cuh, issued in that order by stream_producer); the
// acquires here take them in that order (the first split's K slots at the barrier after the QK-norm).
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop. It reads and writes the consumer's locals as if written there; the compiler sees
// the same tokens as one function, as the SASS lock (kernel/sass.lock) requires: a phase made a
// function of its own compiles to PTX with other register orders, and so to other machine code.

if (s.gi < s.nsplit) {
  const bool owner = (s.nsplit - 1) % s.ng == s.gi;  // owns the last split: appends K/V
  bool held = false;  // the first split's K slot, acquired by the barrier below
  // slots that barrier takes: the first split's K, when it has cached positions
  auto first_split_slots = [&] {
    int h0, h1;
    split_of<kWide>(s, s.gi, pos, h0, h1);
    if constexpr (kWide) return split_slots(h1 - h0);  // its K slots
    return h1 > h0 ? 1 : 0;
  };
  {
    // two values per thread t < 256: elements d and d + 64 of segment seg (0/1: q of heads
    // 2g/2g+1, 2: k, 3: v), so RoPE's pairs are in one thread and a segment is two warps:
    // one barrier for the QK-norm sums, none for RoPE
    const int seg = tid >> 6, d = tid & 63;
    const bool mine = tid < 4 * 64;
    float nw0 = 0.f, nw1 = 0.f;  // this thread's norm weights, issued before the wait
    if (mine && seg < 3) {
      // sm_120a's short kernels: not a hoisted 64-bit offset (remat_tid); in the long kernels the
      // allocator then spills the residual history instead (16 / 36 / 44 B against 8 / 28 / 12)
      const int t = kLong ? tid : remat_tid();
      const uint16_t* nw = N + ((t >> 6) < 2 ? kNormQ : kNormK) + (t & 63);
      nw0 = bf16_as_float(__ldg(nw));
      nw1 = bf16_as_float(__ldg(nw + 64));
    }
    // this position's K (kind 0) or V (1), elements d and d + 64: rounded to bf16 as the cache
    // holds them, kept in shared memory for this block's splits, appended by the owner
    auto keep_kv = [&](int kind, float a, float c, float* s_vec) {
      const __nv_bfloat16 a16 = __float2bfloat16_rn(a), c16 = __float2bfloat16_rn(c);
      s_vec[d] = __bfloat162float(a16);
      s_vec[d + 64] = __bfloat162float(c16);
      if (owner) {
        uint16_t* row = kv_base(p.kv, L, kind, g) + int64_t(pos) * kHeadDim;
        row[d] = __bfloat16_as_ushort(a16);
        row[d + 64] = __bfloat16_as_ushort(c16);
      }
    };
    bool ok = true;
    float v[2] = {0.f, 0.f};
    if (mine)
      tagged_gather<2>([&](int e) { return acc + kTagQKV + qkv_std_row(g, seg * kHeadDim + d + 64 * e); }, tag, v, S,
                       tmo, uint32_t(L) * 16u + 8u, ok);
    __syncwarp();  // converge after the poll (`mine` is warp-uniform)
    XRAY_END(s_wait_qkv, L);  // thread 0's words
    const float ssw = warp_sum(v[0] * v[0] + v[1] * v[1]);
    if (lane == 0) sm.red[warp] = ssw;
    if (!csync_and(ok)) return;
    XRAY_GATHER(L);  // every thread's q/k/v words are in
    if (mine && seg < 3) {
      const float r = rsqrtf((sm.red[2 * seg] + sm.red[2 * seg + 1]) / float(kHeadDim) + kRmsEps);
      const float x0 = v[0] * r * nw0, x1 = v[1] * r * nw1;
      const float c = sm.rope[d], sn = sm.rope[64 + d];
      const float y0 = x0 * c - x1 * sn, y1 = x1 * c + x0 * sn;
      if (seg < 2) {
        sm.q[seg * kHeadDim + d] = y0;
        sm.q[seg * kHeadDim + d + 64] = y1;
        if (owner) {
          scr[kScrQRot + g * kGroupCols + seg * kHeadDim + d] = y0;
          scr[kScrQRot + g * kGroupCols + seg * kHeadDim + d + 64] = y1;
        }
      } else {
        keep_kv(0, y0, y1, sm.kc);
        if (owner) {
          scr[kScrKRot + g * kHeadDim + d] = y0;
          scr[kScrKRot + g * kHeadDim + d + 64] = y1;
        }
      }
    } else if (mine) {
      keep_kv(1, v[0], v[1], sm.vc);
    }
    // this barrier publishes q, kc, vc and opens the first split's K round when it has one
    const int n0 = first_split_slots();
    held = n0 > 0;
    if (!acquire_n(n0, kPhase_s_attn, L)) return;
    XRAY_SUB3(x_att_open, L);
  }
  // Cached position rr's scores of both heads by a half-warp (16 lanes x 16 B = one K row;
  // the whole warp calls it for the shuffles, a half-warp past the split passes valid = false).
  // The lane's 8 dims of both heads' q are read from shared memory once (the barrier above
  // published sm.q), not at every position: probes/attn_split.cu's stage stamps put the scores
  // of a 64-position split at ~1,800 cycles of shared-memory wavefronts when q was loaded at
  // every position (4 x 16 B per lane and position, 2-way bank conflicts), not arithmetic.
  const float4* q4 = reinterpret_cast<const float4*>(sm.q);
  const int ql16 = tid & 15;
  const float4 qa0 = q4[2 * ql16], qa1 = q4[2 * ql16 + 1];
  const float4 qb0 = q4[32 + 2 * ql16], qb1 = q4[32 + 2 * ql16 + 1];
  auto score_k = [&](const uint4* kslot, int rr, bool valid, float& a0, float& a1) {
    a0 = a1 = 0.f;
    if (valid) {
      const uint4 kw = kslot[rr * 16 + ql16];
      a0 = dot8_bf16(kw, qa0, qa1, 0.f);
      a1 = dot8_bf16(kw, qb0, qb1, 0.f);
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) {  // within each half-warp, fixed order
      a0 += __shfl_xor_sync(0xffffffffu, a0, o);
      a1 += __shfl_xor_sync(0xffffffffu, a1, o);
    }
  };
  // this position's scores of both heads (unscaled), by one whole warp
  auto score_cur = [&](float& a0, float& a1) {
    a0 = a1 = 0.f;
#pragma unroll
    for (int i = 0; i < kHeadDim / 32; ++i) {
      a0 = fmaf(sm.q[lane + 32 * i], sm.kc[lane + 32 * i], a0);
      a1 = fmaf(sm.q[kHeadDim + lane + 32 * i], sm.kc[lane + 32 * i], a1);
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
  };
  // o += p * V for this lane's 4 dims of one V row (bf16 pairs), both heads
  auto add_v = [&](uint2 vv, float p0, float p1, float (&o0)[4], float (&o1)[4]) {
    const float v4[4] = {__uint_as_float(vv.x << 16), __uint_as_float(vv.x & 0xffff0000u),
                         __uint_as_float(vv.y << 16), __uint_as_float(vv.y & 0xffff0000u)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o0[i] = fmaf(p0, v4[i], o0[i]);
      o1[i] = fmaf(p1, v4[i], o1[i]);
    }
  };
  // one 16-byte store per head (8 scalar stores at a 16-byte stride were 4-way bank conflicts)
  auto store_vpart = [&](const float (&o0)[4], const float (&o1)[4]) {
    float4* p4 = reinterpret_cast<float4*>(sm.vpart + warp * kGroupCols);
    p4[lane] = make_float4(o0[0], o0[1], o0[2], o0[3]);
    p4[kHeadDim / 4 + lane] = make_float4(o1[0], o1[1], o1[2], o1[3]);
  };
  // this thread's (head, dim) running merge of the block's splits (the merge note above)
  float lm = -INFINITY, ll = 0.f, lo = 0.f;
  // a split's scores, then probabilities, [head][entry]: sm.sc, or sm.x in the wide kernel
  float* const scw = kWide ? sm.x : sm.sc;
  constexpr int kSE = kWide ? kWideEntriesMax : kSplitEntriesMax;
  static_assert(kHeadsPerKV * kWideEntriesMax <= kHidden, "the wide kernel's scores fit in sm.x");
  for (int sp = s.gi; sp < s.nsplit; sp += s.ng) {
    int t0, t1;
    split_of<kWide>(s, sp, pos, t0, t1);
    const int nh = t1 > t0 ? t1 - t0 : 0;      // cached positions in this split
    const bool cur = sp == s.nsplit - 1;       // this position is the split's last entry
    // scores: one half-warp per cached position, 16 lanes x 16 B = one K row, both heads
    if (nh > 0) {
      // K slots: one, or in the wide kernel nk (position r in slot r / 64)
      const int nk = kWide ? split_slots(nh) : 1;
      if (!held && !acquire_n(nk, kPhase_s_attn, L)) return;
      held = false;
      const int hw = tid >> 4, l16 = tid & 15;
      // slot by slot, each a 64-position loop (constant trip count, unrolled; one loop over
      // nk x 64 with a division per position did not unroll)
#pragma unroll 1
      for (int c = 0; c < nk; ++c) {
        const uint4* slot = slot_at(c);
        for (int rr = hw; rr < kSplitPositions; rr += kStreamConsumerThreads / 16) {
          const int r = c * kSplitPositions + rr;
          float a0, a1;
          score_k(slot, rr, r < nh, a0, a1);
          if (l16 == 0 && r < nh) {
            scw[r] = a0 * scale;
            scw[kSE + r] = a1 * scale;
          }
        }
      }
      if constexpr (kWide) {
        csync();
        hand_back_split(nk);
      } else {
        release_n(nk);
      }
    }
    if (sp == s.gi) XRAY_SUB3(x_att_score, L);  // (after the K hand-back's barrier, when it had slots)
    if (cur && warp == 0) {
      float a0, a1;
      score_cur(a0, a1);
      if (lane == 0) {
        scw[nh] = a0 * scale;
        scw[kSE + nh] = a1 * scale;
      }
    }
    csync();
    const int n = nh + (cur ? 1 : 0);
    if constexpr (kWide) {
      // The wide kernel's softmax statistics by all warps, not one per head (up to 193 entries per
      // head): warp w takes head w / 8 and entries 32 (w % 8) + lane (one each), the 8 warps'
      // maxima meet in sm.sc (free in the wide kernel: its scores are in sm.x) behind one more
      // barrier. The max is exact; l sums per warp, then the 8 warps in order (deterministic).
      // sm.ml is written at the V step (below).
      static_assert(kWideSoftmaxParts * 32 >= kWideEntriesMax && 2 * kStreamConsumerWarps <= kHeadsPerKV * kSplitEntriesMax,
                    "one entry per lane; the per-warp (max, sum) fit in sm.sc");
      const int h = warp / kWideSoftmaxParts, r = (warp % kWideSoftmaxParts) * 32 + lane;
      float* sc = scw + h * kSE;
      const float x = r < n ? sc[r] : -INFINITY;
      const float mw = warp_max(x);
      if (lane == 0) sm.sc[warp] = mw;
      csync();
      float m = -INFINITY;
#pragma unroll
      for (int j = 0; j < kWideSoftmaxParts; ++j) m = fmaxf(m, sm.sc[h * kWideSoftmaxParts + j]);
      const float er = r < n ? __expf(x - m) : 0.f;
      if (r < n) sc[r] = er;
      const float lw = warp_sum(er);
      if (lane == 0) sm.sc[kStreamConsumerWarps + warp] = lw;
    } else if (warp < kHeadsPerKV) {  // softmax statistics of this split, one warp per head
      float* sc = scw + warp * kSE;
      const float x0 = lane < n ? sc[lane] : -INFINITY, x1 = lane + 32 < n ? sc[lane + 32] : -INFINITY;
      const float m = warp_max(fmaxf(x0, x1));
      const float e0 = lane < n ? __expf(x0 - m) : 0.f, e1 = lane + 32 < n ? __expf(x1 - m) : 0.f;
      if (lane < n) sc[lane] = e0;
      if (lane + 32 < n) sc[lane + 32] = e1;
      const float l = warp_sum(e0 + e1);
      if (lane == 0) {
        sm.ml[2 * warp] = m;
        sm.ml[2 * warp + 1] = l;
      }
    }
    csync();
    if (sp == s.gi) XRAY_SUB3(x_att_soft, L);
    // V: warp w takes cached positions w, w + 16, w + 32, w + 48; lane holds dims 4 lane .. + 3
    float o0[4] = {0.f, 0.f, 0.f, 0.f}, o1[4] = {0.f, 0.f, 0.f, 0.f};
    if constexpr (kWide) {  // each head's (max, sum) from its 8 warps' (above), in order
      if (tid < kHeadsPerKV) {
        float m = -INFINITY, l = 0.f;
#pragma unroll
        for (int j = 0; j < kWideSoftmaxParts; ++j) m = fmaxf(m, sm.sc[tid * kWideSoftmaxParts + j]);
#pragma unroll
        for (int j = 0; j < kWideSoftmaxParts; ++j) l += sm.sc[kStreamConsumerWarps + tid * kWideSoftmaxParts + j];
        sm.ml[2 * tid] = m;
        sm.ml[2 * tid + 1] = l;
      }
    }
    if (nh > 0) {  // V slots: one, or in the wide kernel nk
      const int nk = kWide ? split_slots(nh) : 1;
      if (!acquire_n(nk, kPhase_s_attn, L)) return;
#pragma unroll 1
      for (int c = 0; c < nk; ++c) {  // slot by slot, positions in increasing order per warp
        const uint2* vslot = reinterpret_cast<const uint2*>(slot_at(c));
#pragma unroll
        for (int j = 0; j < kSplitPositions / kStreamConsumerWarps; ++j) {
          const int r = warp + kStreamConsumerWarps * j, rr = c * kSplitPositions + r;
          if (rr < nh) add_v(vslot[r * 32 + lane], scw[rr], scw[kSE + rr], o0, o1);
        }
      }
    }
    store_vpart(o0, o1);
    csync();
    if (sp == s.gi) XRAY_SUB3(x_att_v, L);
    if (tid < kGroupCols) {  // fixed order over warps, this position last
      const int h = tid / kHeadDim, d = tid & (kHeadDim - 1);
      float a = 0.f;
#pragma unroll
      for (int w = 0; w < kStreamConsumerWarps; ++w) a += sm.vpart[w * kGroupCols + tid];
      if (cur) a = fmaf(scw[h * kSE + nh], sm.vc[d], a);
      {  // fold this split in (lm = -inf before the first: ca = 0)
        const float ms = sm.ml[2 * h], ls = sm.ml[2 * h + 1];
        const float mn = fmaxf(lm, ms), ca = __expf(lm - mn), cb = __expf(ms - mn);
        lo = sp == s.gi ? a : lo * ca + a * cb;
        ll = sp == s.gi ? ls : ll * ca + ls * cb;
        lm = mn;
        if (sp + s.ng >= s.nsplit) {  // the block's last split: its one partial, at index gi
          long long* part = acc + kTagAttnPart + ((g * kMaxSplits + s.gi) * kHeadsPerKV + h) * kPartStride;
          tagged_store(part + 2 + d, lo, tag);
          if (d == 0) {
            tagged_store(part, lm, tag);
            tagged_store(part + 1, ll, tag);
          }
        }
      }
    }
    if (sp + s.ng >= s.nsplit) hop_mark();  // the block's last split: the merge's hop follows
    if constexpr (kWide) {
      if (nh > 0) hand_back_split(split_slots(nh));
    } else {
      if (nh > 0) hand_back(1);
    }
    csync();  // vpart and sc are reused by the next split
    if (sp == s.gi) XRAY_SUB3(x_att_out, L);
  }
  XRAY_END(s_attn, L);
}
