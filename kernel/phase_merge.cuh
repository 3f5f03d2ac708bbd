// monolith: the streaming schedule's merge: this lane's O scales of the first O slot (sco, bso, tso,
// read by phase_oproj.cuh), O's pretest, and the group's attention partials merged in split order
// into sm.attn (the group hop).
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop, before phase_oproj.cuh. It reads and writes the consumer's locals as if written
// there; the compiler sees the same tokens as one function, as the SASS lock (kernel/sass.lock)
// requires: a phase made a function of its own compiles to PTX with other register orders, and so to
// other machine code.

float sco[2] = {1.f, 1.f};  // E4M3: this lane's O row scales of the first O slot, loaded before the wait
// NVFP4: this lane's block scales of its two rows of the first O slot and O's tensor scale, likewise
uint32_t bso[2] = {0u, 0u};
float tso = 1.f;
if constexpr (kNv) {
  const int r0 = 8 * warp + (lane >> 3);
#pragma unroll
  for (int m = 0; m < 2; ++m)
    if (s.o0 + r0 + 4 * m < s.o1)
      bso[m] = __ldg(reinterpret_cast<const uint16_t*>(BS + kBsO + int64_t(g * kHidden + s.o0 + r0 + 4 * m) * NF::kBsRowO) +
                     (lane & 7));
  tso = WeightsNvfp4::row_scale<kNv>(__ldg(TS + kTsO));
}
if constexpr (kScaled) {
  const int r0 = 4 * warp + (lane >> 4);
  if ((lane & 15) == 0) {
    if (s.o0 + r0 < s.o1) sco[0] = __ldg(SC + kScO + s.o0 + r0);
    if (s.o0 + r0 + 2 < s.o1) sco[1] = __ldg(SC + kScO + s.o0 + r0 + 2);
  }
}
// O's first round: one slot (E4M3, NVFP4) or up to kRoundSlots of 32 rows (bf16)
pretest(F::kRb == 2 || kNv ? 1 : (min(32 * kRoundSlots, s.o1 - s.o0) + 31) / 32);
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
  if (!csync_and(ok)) return;
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
