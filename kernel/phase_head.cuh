// monolith: the streaming schedule's last phase: the final norm, the LM-head rows and the argmax.
// Stream order: the head's rows are the last entries of StreamPlan's list, after layer 27's down rows
// (stream_plan.cuh; issued in that order by stream_producer); the acquires here take them in that
// order, HF::kHeadSlots slots per round (rows_1024) or one slot per warp group (the warp head).
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// after the layer loop, at the end of the consumer. It reads and writes the consumer's locals as if
// written there; the compiler sees the same tokens as one function, as the SASS lock (kernel/sass.lock)
// requires: a phase made a function of its own compiles to PTX with other register orders, and so to
// other machine code.

float v[2];
bool ok = true;
const Norm2 nfin = load_norm2(p.final_norm);  // in flight during the wait below
constexpr int kHeadRows = HF::kHeadSlots * HF::kRows1024;  // LM-head rows per round: 32 | 96
const float sch0 = P::kHeadWarp ? 1.f : first_scale(p.embed_scales, s.v0, s.v1, kHeadRows);  // E4M3: the first LM-head round's
{
  gather_vec<2>(acc + kTagResid, layer_tag(steps, kNumLayers - 1), v, S, tmo, uint32_t(kNumLayers) * 16u + 7u, ok);
  __syncwarp();  // converge after the poll (the note at gather_vec)
  XRAY_END(s_wait_final, kNumLayers);  // thread 0's words (the first round's barrier is the block's)
  stream_prenorm<kHeadSwz>(v, nfin, sm.x, sm.ssq);
  if (b == 0 && ok) {  // the next launch starts from these counted words
    static_assert((kNumLayers - 1) % kAccBuffers == 1, "snapshot order below assumes layer 27 in buffer 1");
    long long* snap = acc + kAccSnap;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = tid + e * kStreamConsumerThreads;
      snap[0 * kHidden + i] = rh.w2[e];  // layer 26 (buffer 0)
      snap[1 * kHidden + i] = rh.w1[e];  // layer 27 (buffer 1)
      scr[kScrHidden + i] = v[e];
    }
  }
}
float best = -INFINITY;
int best_i = 0x7fffffff;
if constexpr (P::kHeadWarp) {  // the warp head: no block barrier per round (kHeadGroups' note)
  constexpr int R = HF::kRows1024;  // rows per slot: 8 bf16, 16 E4M3
  // NG groups of G warps; group g takes the slots j = g, g + NG, ...
  // (NG divides kStages, so copy j - kStages of a slot was the same group's: every warp of a
  // group is that slot's in-order consumer), warp gw of a group its RW rows gw RW .. of each.
  constexpr int NG = head_groups(P::kStages);  // kHeadGroups at every shipped depth
  constexpr int G = kStreamConsumerWarps / NG, RW = R / G;
  constexpr int kArrivals = kEmptyArrivals / G;  // each warp's share of a slot's release
  static_assert(P::kStages % NG == 0 && NG * G <= kStreamConsumerWarps, "groups tile the ring and the warps");
  static_assert(R % G == 0 && RW <= 32 && 32 % RW == 0, "a warp's rows of a slot reduce-scatter over one warp");
  static_assert(kEmptyArrivals % G == 0 && (kArrivals < 32 || kArrivals % 32 == 0),
                "a slot's arrivals split evenly over its group's warps (MONOLITH_RING_RELEASE=1: groups of one warp)");
  const int group = warp % NG, rbase = (warp / NG) * RW;
  const bool active = warp / NG < G;  // (all 16 warps at NG = 4)
  // publishes s_x and the sums of squares, carries `ok`; then the producer may run (the hop is over)
  if (!csync_and(ok)) return;
  hop_unmark();
  const float inv = norm_inv(sm.ssq);
  if (b == 0)  // for the phase diff
    for (int e = 0; e < 2; ++e) scr[kScrFinalNorm + tid + e * kStreamConsumerThreads] = v[e] * inv * nfin.w[e];
  const XRow xrow = load_xrow<HW, kHeadSwz>(sm.x);
  const int nslots = (s.v1 - s.v0 + R - 1) / R, my_r = rbase + scatter_row<RW>(lane);
  const bool owner = lane % (32 / RW) == 0;
  for (int j = group; active && j < nslots; j += NG) {  // slot (kc + group) % kStages, every time
    const uint32_t c = kc + uint32_t(j), slot = c % P::kStages;
    const int r0 = s.v0 + j * R, nr = min(R, s.v1 - r0);
    float sc = 1.f;  // E4M3: this lane's row scale, asked for before the slot wait
    if constexpr (HW::kRowScale)
      if (owner && my_r < nr) sc = __ldg(p.embed_scales + r0 + my_r);
    bool wok = true;
    auto wait_head_slot = [&] {  // bounded; a timeout names the LM head (layer 28, wait 12)
      return mbar_wait_bounded(&r.full[slot], (c / P::kStages) & 1u, S, tmo, kErrRingTimeout, uint32_t(kNumLayers) * 16u + 12u);
    };
    if constexpr (kHeadLaneWait) {  // racecheck's reference build: every lane acquires the slot itself
      wok = __all_sync(0xffffffffu, wait_head_slot());
      if (!wok) {
        ok = false;
        break;
      }
    } else {
      if (lane == 0) {  // lane 0 waits (acquire); __syncwarp orders the slot's bytes for the others
        XRAY_STAMP(tg, tcy);
        wok = wait_head_slot();
        if (wok) XRAY_STALL(kPhase_lmhead, kPhase_ring_head, kNumLayers, tg, tcy);  // (warp 0's only)
      }
      if (!__shfl_sync(0xffffffffu, wok, 0)) {
        ok = false;
        break;
      }
      __syncwarp();
    }
    const uint4* sl = reinterpret_cast<const uint4*>(r.slots + size_t(slot) * kSlotBytes);
    float a[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) a[i] = rbase + i < nr ? row_lane<HW>(sl, rbase + i, xrow) : 0.f;
    __syncwarp();  // every lane's reads of the slot, then the release: this warp's share of the arrivals
    // (MONOLITH_RING_RELEASE=512, racecheck's reference build: every reading lane arrives
    // kArrivals / 32 times, single arrivals as in the layers' rounds. The reports racecheck gave
    // on this head came from the acquire side, not from these arrivals: kHeadLaneWait above)
    if constexpr (kArrivals >= 32) {
      for (int i = 0; i < kArrivals / 32; ++i) mbar_arrive(&r.empty[slot]);
    } else if (lane < kArrivals) {
      mbar_arrive(&r.empty[slot]);
    }
    const float dot = warp_reduce_scatter<RW>(a);
    if (owner && my_r < nr) {  // rows in increasing order per lane: a strictly larger logit wins
      const float logit = (HW::kRowScale ? dot * sc : dot) * inv;
      p.logits[r0 + my_r] = logit;
      if (logit > best) {
        best = logit;
        best_i = r0 + my_r;
      }
    }
  }
  kc += uint32_t(nslots);
  warp_argmax(best, best_i);
  float* wv = sm.part[0];  // the warps' winners (part[] is not used by this head)
  int* wi = reinterpret_cast<int*>(sm.part[1]);
  if (lane == 0) {
    wv[warp] = best;
    wi[warp] = best_i;
  }
  if (!csync_and(ok)) return;
  if (tid == 0)
    for (int w = 1; w < kStreamConsumerWarps; ++w)
      if (wv[w] > best || (wv[w] == best && wi[w] < best_i)) {
        best = wv[w];
        best_i = wi[w];
      }
} else {
  // Thread t < kHeadRows (32 bf16, 96 E4M3) combines row t of every round: rows are visited in
  // increasing order per thread and only a strictly larger logit replaces the best, so ties keep
  // the lowest index (as torch.argmax); the threads' winners are reduced with the same rule, per
  // warp and then over the kArgWarps warps in order.
  float inv = 0.f;
  if (!rows_1024(std::false_type{}, std::integral_constant<int, HF::kHeadSlots>{}, s.v0, s.v1, kPhase_lmhead, kNumLayers, sm.x, ok, p.embed_scales, sch0, [&](int row, float a) {
        const float logit = a * inv;
        p.logits[row] = logit;
        if (logit > best) {
          best = logit;
          best_i = row;
        }
      }, [&] {
        inv = norm_inv(sm.ssq);
        if (b == 0)  // for the phase diff
          for (int e = 0; e < 2; ++e) scr[kScrFinalNorm + tid + e * kStreamConsumerThreads] = v[e] * inv * nfin.w[e];
      }))
    return;
  constexpr int kArgWarps = kHeadRows / 32;
  static_assert(kHeadRows % 32 == 0 && kArgWarps <= kStreamConsumerWarps, "whole warps hold the candidates");
  if (warp < kArgWarps) warp_argmax(best, best_i);
  if constexpr (kArgWarps > 1) {  // the other warps' winners to warp 0 (sm.red is free here)
    int* idx = reinterpret_cast<int*>(sm.ssq);
    if (warp > 0 && warp < kArgWarps && lane == 0) {
      sm.red[warp] = best;
      idx[warp] = best_i;
    }
    csync();
    if (tid == 0)
      for (int w = 1; w < kArgWarps; ++w)
        if (sm.red[w] > best || (sm.red[w] == best && idx[w] < best_i)) {
          best = sm.red[w];
          best_i = idx[w];
        }
  }
}
if (tid == 0) {
  const float bv = best;
  const int bi = best_i;
  *flag = publish_block_argmax(p, bv, bi) ? 1 : 0;
}
csync();
XRAY_END(lmhead, kNumLayers);
if (*flag == 0) return;
if (warp == 0) finish_argmax(p, pos);
XRAY_END(argmax, kNumLayers);
