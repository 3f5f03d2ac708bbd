// monolith: the streaming consumers' ring reader and GEMV rounds: the slot acquire / hand-back
// protocol, the hop mark, the pretest, and the rounds every phase's rows go through (rows_1024,
// rows_nv), as lambdas over the consumer's ring position kc.
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// once, before the layer loop. It reads and writes the consumer's locals as if written there; the
// compiler sees the same tokens as one function, as the SASS lock (kernel/sass.lock) requires: a phase
// made a function of its own compiles to PTX with other register orders, and so to other machine code.

// The next slot, once its bulk copy has landed (nullptr: timeout or another block's error).
// Only thread 0 waits on the mbarrier (a bounded wait; its try_wait has acquire semantics, which
// makes the bulk copy's writes visible to it) and barrier 1 passes that on to the other threads
// (bar.sync orders memory among the participating threads, cumulatively); no thread can leave
// on a timeout while another waits at a barrier. Every consumer thread polling the mbarrier
// itself cost ~1.2 us per round of 4 slots (X-ray, NOTES.md M4): mbarrier probes are issued
// per thread, not per warp.
// A round: the next n slots (n <= kRoundSlots), one barrier to start and one to end (the
// attention's K and V chunks are rounds of one slot). The opening barrier is an AND over the
// threads' `ok` (a bounded wait that failed just before, in any thread) and thread 0's slot
// waits, so a phase's first round also serves as the barrier after its input wait.
// The hop hold: thread 0 raises the hop mark (odd) before a phase's last hand-back and drops it
// (even) at the next round's opening barrier, or before it would wait for a slot
int hword = 0;
auto hop_mark = [&] {
  if (tid == 0) atomicExch(r.hold, ++hword);
};
auto hop_unmark = [&] {
  if (tid == 0 && (hword & 1)) atomicExch(r.hold, ++hword);
};
// thread 0's batched tests of this round's slots (slot_tests_batched above)
auto test_slots = [&](int n, uint32_t known) -> uint32_t { return slot_tests_batched<P::kStages>(r.full, kc, n, known); };
// Before a phase's input wait: thread 0 tests the first n slots the phase's opening acquire_n
// will take, and leaves what it found in sm.pre_* (in shared memory, not registers: NVFP4 spilled).
// An acquire_n at the same kc reuses it; a stale record never matches (kc only grows, and every
// acquire at a kc that consumes nothing is preceded by its own pretest or none). Written only
// here, by thread 0, always after a barrier that follows every other thread's last read of it.
auto pretest = [&](int n) {
  if constexpr (kPretestO) {
    if (tid == 0 && n > 0 && n <= 2 * kRoundSlots) {
      const uint32_t miss = test_slots(n, 0u);
      sm.pre_kc = kc;
      sm.pre_landed = ~miss & ((1u << n) - 1u);
      sm.pre_ready = miss == 0u ? n : 0;
    }
  }
};
// sub: MONOLITH_XRAY_SUB's x_slots stamp after thread 0's slot tests (the first round of a phase)
// may_skip: the caller's input wait ended in a barrier after its pretest, and `ok` is true (the
// opening barrier would carry nothing else): when the pretest found all n slots landed, no
// barrier (every thread reads sm.pre_* after that barrier: a uniform decision).
// slots of a first round of `rows` rows: K = 1024 rows in the format RF (rows_1024, at most kSl
// slots), NVFP4 rows (rows_nv); the pretests ask for the same count as the acquires they precede
auto slots_1024 = [&](auto rf, int rows, int kSl) {
  return min(kSl, (rows + decltype(rf)::kRows1024 - 1) / decltype(rf)::kRows1024);
};
auto slots_nv = [&](int rows) { return min(kRoundSlots, (rows + NF::kRows1024 - 1) / NF::kRows1024); };
// the landed count: how many of the round's n slots from kc lie below the producer's count of
// landed copies (thread 0; the atomic read and the CTA fence pair with producer_publish_landed)
auto counted = [&](int n) -> uint32_t {
  const uint32_t L = uint32_t(atomicAdd(r.landed, 0u));
  __threadfence_block();
  return L > kc ? min(L - kc, uint32_t(n)) : 0u;
};
auto acquire_n = [&](int n, uint16_t work_phase, int layer, bool ok = true, bool sub = false,
                     bool may_skip = false) -> bool {
  if constexpr (kPretestO) {
    if (may_skip && sm.pre_kc == kc && sm.pre_ready >= n) {
      if (sub) XRAY_SUB2(x_slots, layer);
      hop_unmark();
      return true;
    }
  }
  // thread 0: slot i of the round has not landed yet: wait for it (bounded; the X-ray's `ring`)
  auto wait_slot = [&](int i) {
    const uint32_t slot = (kc + i) % P::kStages, par = ((kc + i) / P::kStages) & 1u;
    hop_unmark();
    XRAY_STAMP(tg, tcy);
    ok = mbar_wait_bounded(&r.full[slot], par, S, tmo, kErrRingTimeout, uint32_t(layer) * 16u + 12u);
    if (ok) XRAY_STALL(work_phase, layer < kNumLayers ? kPhase_ring : kPhase_ring_head, layer, tg, tcy);
  };
  static_assert(!(P::kSlotTestBatch && P::kSlotLanded), "the landed count is read by the one-by-one tests");
  if (P::kSlotTestBatch && tid == 0 && ok && n <= 2 * kRoundSlots) {
    // every test issued before the first branch on a result
    const uint32_t miss = test_slots(n, 0u);
    for (int i = 0; miss != 0u && i < n && ok; ++i)
      if ((miss >> i) & 1u) wait_slot(i);
  } else if (tid == 0 && ok) {
    // one test after another; with the landed count, only the slots above the producer's count
    int i0 = 0;
    if constexpr (P::kSlotLanded) {
      i0 = int(counted(n));
      if (sub) XRAY_SUB2(x_count, layer);  // (SUB=2: the count's read, apart from the tests above it)
    }
    for (int i = i0; i < n && ok; ++i)
      if (!mbar_test_wait(&r.full[(kc + i) % P::kStages], ((kc + i) / P::kStages) & 1u)) wait_slot(i);
  }
  if (sub) XRAY_SUB2(x_slots, layer);
  const bool all = csync_and(ok);
  hop_unmark();
  return all;
};
auto slot_at = [&](int i) -> const uint4* {
  return reinterpret_cast<const uint4*>(r.slots + size_t((kc + i) % P::kStages) * kSlotBytes);
};
// The end of a round: after a barrier (every thread is done with the slots) the slots go back
// to the producer (kEmptyArrivals arrivals each, above), which refills them at once. Phases
// whose outputs are other blocks' inputs issue those stores between the barrier and the
// hand-back, so that the stores leave the SM ahead of the refill burst (up to 6 x 16 KB per
// block, grid-wide ~13 MB).
// Every call site is reached by all consumer threads (uniform control flow), after a barrier.
auto hand_back = [&](int n) {
  if constexpr (kEmptyArrivals == kStreamConsumerWarps) __syncwarp();  // the warp's reads, then lane 0's arrive
  const bool arrives = kEmptyArrivals == 1 ? tid == 0 : kEmptyArrivals == kStreamConsumerWarps ? lane == 0 : true;
  if (arrives)
    for (int i = 0; i < n; ++i) mbar_arrive(&r.empty[(kc + i) % P::kStages]);
  kc += n;
};
auto release_n = [&](int n) {
  csync();
  hand_back(n);
};
// a wide split's K or V slots (n <= kSplitSlotsMax, known at run time only): the arrivals unrolled
// to the bound behind predicates (the loop's branches showed in ncu). Its two arrival lines repeat
// hand_back's on purpose: shared through a lambda, they changed the short and long kernels' SASS.
auto hand_back_split = [&](int n) {
  if constexpr (kEmptyArrivals == kStreamConsumerWarps) __syncwarp();
  const bool arrives = kEmptyArrivals == 1 ? tid == 0 : kEmptyArrivals == kStreamConsumerWarps ? lane == 0 : true;
  if (arrives) {
#pragma unroll
    for (int i = 0; i < kSplitSlotsMax; ++i)
      if (i < n) mbar_arrive(&r.empty[(kc + i) % P::kStages]);
  }
  kc += n;
};
// Rows of K = 1024 in slots base .. base + n (nr rows in all, kRows1024 per slot): warp w's half-row sum of
// row 8 b + w / 2 goes to part[b * 16 + w] (b: 8-row block of the round); the row's two halves are added after
// the closing barrier in fixed order (combine_row). P::kTcGemv: tc_round (key0: the swizzle key of line 0).
static_assert(kRoundSlots == 4, "round_1024 reduces four 8-row blocks' sums per warp_sum4");
auto round_1024 = [&](int base, int n, int nr, const auto& x, float* part, int key0 = 0) {  // x: XHalf, or XE16 (fp8's half2 phases)
  using RW = HW;  // (bf16 / E4M3 rows: the layers' of those variants, and every variant's LM head)
  using RF = HF;
  if constexpr (P::kTcGemv) tc_round<false, P::kVecs>(slot_at, base, min(nr, n * RF::kRows1024), key0, 0, sm.x, kHidden / 32, &sm.part[0][0]);
#pragma unroll
  for (int k = 0; k < (P::kTcGemv ? 0 : RF::kRb); ++k) {  // E4M3: the slots' first 8 rows, then their second 8
    float a[kRoundSlots];
#pragma unroll
    for (int i = 0; i < kRoundSlots; ++i) {
      const int row = 8 * k + (warp >> 1);  // in the slot
      a[i] = (i < n && RF::kRows1024 * i + row < nr) ? half_row_lane<RW>(slot_at(base + i), row, x) : 0.f;
    }
    const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);  // lane 8 v: slot v's row
    // only this piece's slots: its part[] ends with them (a 6-slot E4M3 round's second piece would write past sm.part)
    if ((lane & 7) == 0 && (lane >> 3) < n) part[(RF::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;
  }
};
auto combine_row = [&](const float* part, int t) {  // row t of the round (8-row block t / 8, row t % 8)
  if constexpr (P::kTcGemv) return tc_combine<P::kVecs>(&sm.part[0][0], t);  // (column 0: the hops carry one vector)
  const float* pp = part + (t >> 3) * kPartBlk + 2 * (t & 7);
  return pp[0] + pp[1];
};
// Rows [r0, r1) of K = 1024 streamed in rounds against s_x; after each round's closing barrier, thread
// t < rows of the round calls on_row(r0' + t, dot product) (rows in increasing order per thread). The
// first round's opening barrier publishes s_x and the norm's sums of squares (and carries `ok`, see
// acquire_n); after it each thread calls opened() (norm_inv), and the input half stays in registers.
// False when a wait failed. Row scales (E4M3): row q's is scl[q]; thread t's for the first round is sc0
// (the caller loads it before its wait), each later round's is loaded one round ahead, so no scale load
// is ever waited on at the end of a round. The dot product reaches on_row scaled.
// kSlots (an integral_constant): slots per round, at most two pieces of kRoundSlots. The rows are in
// the LM head's format HW: the layers' too for bf16 / E4M3 variants (W == HW); NVFP4's: rows_nv below.
auto rows_1024 = [&](auto kXeC, auto kSlotsC, int r0, int r1, uint16_t work_phase, int layer, const float* s_x, bool ok,
                     const float* scl, float sc0, auto&& on_row, auto&& opened) -> bool {
  using RW = HW;
  using RF = HF;
  constexpr bool kSc = RW::kRowScale;
  static_assert(!RW::kBlockScaled, "NVFP4 rows go through rows_nv");
  constexpr int kSl = decltype(kSlotsC)::value, kRows = kSl * RF::kRows1024;
  static_assert(kSl <= 2 * kRoundSlots && kSl * RF::kRb <= kRoundRbMax, "two pieces at most; part[] holds the round");
  if (!acquire_n(slots_1024(RF{}, r1 - r0, kSl), work_phase, layer, ok, layer < kNumLayers))
    return false;
  opened();
  const auto x = [&] {  // kXeC: s_x holds half2 inputs (store_xe: fp8's layers, not the head)
    if constexpr (decltype(kXeC)::value) return load_xe_half<kHidden / 32>(s_x);
    else return load_xhalf<RW, kHeadSwz>(s_x);
  }();
  float sc = sc0;
  for (int q = r0, rd = 0; q < r1; q += kRows, ++rd) {
    const int nr = min(kRows, r1 - q), n = (nr + RF::kRows1024 - 1) / RF::kRows1024;
    float* part = sm.part[rd & 1];
    if (rd > 0 && !acquire_n(n, work_phase, layer)) return false;
    float sc_next = 1.f;
    if constexpr (kSc)
      if (tid < kRows && q + kRows + tid < r1) sc_next = __ldg(scl + q + kRows + tid);
#pragma unroll
    for (int pc = 0; pc < (kSl + kRoundSlots - 1) / kRoundSlots; ++pc) {  // pieces of kRoundSlots slots
      const int p0 = pc * kRoundSlots, np = min(kRoundSlots, n - p0);
      if (np > 0) round_1024(p0, np, nr - p0 * RF::kRows1024, x, part + p0 * RF::kRb * kPartBlk, q & 3);
    }
    csync();  // publishes part: combine after it, in fixed order
    if (rd == 0 && layer < kNumLayers) XRAY_SUB(x_dot, layer);
    if (tid < nr) {
      if constexpr (kSc) on_row(q + tid, combine_row(part, tid) * sc);
      else on_row(q + tid, combine_row(part, tid));
    }
    if (q + kRows >= r1) hop_mark();  // the phase's outputs are out: a hop follows
    hand_back(n);
    if (rd == 0 && layer < kNumLayers) XRAY_SUB(x_out, layer);
    sc = sc_next;
  }
  return true;
};
// this thread's scale of row r0 + tid (the first round of rows_1024 with kRows rows), 1 for bf16;
// rows in the format HW, as rows_1024's (NVFP4's qkv does not call it)
auto first_scale = [&](const float* scl, int r0, int r1, int kRows) -> float {
  if constexpr (HW::kRowScale) return tid < kRows && r0 + tid < r1 ? __ldg(scl + r0 + tid) : 1.f;
  else return 1.f;
};

// ---- NVFP4 rows of 1,024 weights (qkv rows, gate/up rows, down's 1024-wide segments) ----
// 32 rows per slot, one warp per row: warp w takes rows w and w + 16 of each slot of a round of
// kRoundSlots slots (value k = 2 i + j: slot i, row 16 j + w), lane l the row's 16-byte word l
// (blocks 2l, 2l + 1) and the row's block-scale bytes 2l, 2l + 1. A row's lane sum is reduced by
// warp_sum4 (for each value the xor tree 16, 8, 4, 2, 1: bitwise the kernel model's butterfly),
// so part[t] is row t of the round, unscaled: quant/nvfp4_kernel_model.py kernel_gemv with g = 1
// (the half2 path).
static_assert(kRoundSlots == 4 && NF::kRows1024 * kRoundSlots <= kRoundRbMax * kStreamConsumerWarps,
              "an NVFP4 round is two warp_sum4 per warp; part[] holds its 128 rows");
constexpr int kNvRowsRound = kRoundSlots * NF::kRows1024;  // 128
auto nv_row = [&](int k) { return NF::kRows1024 * (k >> 1) + kStreamConsumerWarps * (k & 1) + warp; };
// This lane's two scale bytes of each row of the round starting at phase row q (rows >= nrows: 0),
// two rows per register (value k in half k % 2 of bs[k / 2]: 4 registers held across a round,
// not 8; the 96-register cap of the 17-warp block is what spills first). bs0: phase row 0's
// scales, kBsRow1024 bytes per row (a down row's 3 segments are 3 such rows).
auto nv_bs_load = [&](const uint8_t* bs0, int q, int nrows, uint32_t(&bs)[kRoundSlots]) {
#pragma unroll
  for (int i = 0; i < kRoundSlots; ++i) {
    uint32_t h[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int t = q + nv_row(2 * i + j);
      h[j] = t < nrows ? uint32_t(__ldg(reinterpret_cast<const uint16_t*>(bs0 + int64_t(t) * NF::kBsRow1024) + lane)) : 0u;
    }
    bs[i] = h[0] | (h[1] << 16);
  }
};
// kSeg: down's segments (each row's input is sm.act's segment (q + row) % 3, read per row from
// shared memory: three XFull would not fit in registers); else every row's input is x.
auto round_nv = [&](auto kSegC, int q, int n, int nr, const auto& x, const uint32_t(&bs)[kRoundSlots], float* part) {
  float a[2 * kRoundSlots];
#pragma unroll
  for (int k = 0; k < 2 * kRoundSlots; ++k) {
    const int i = k >> 1, row = kStreamConsumerWarps * (k & 1) + warp;  // row of slot i
    a[k] = 0.f;
    if (i < n && NF::kRows1024 * i + row < nr) {
      const uint4 w = slot_at(i)[row * (NF::kRowBytes1024 / 16) + lane];
      const uint32_t b2 = (k & 1) ? bs[i] >> 16 : bs[i];  // dot16B reads the low 16 bits
      if constexpr (decltype(kSegC)::value) {
        const int seg = (q + NF::kRows1024 * i + row) % 3;
        a[k] = nv_dot(w, load_xh2<kIntermediate / 32>(sm.act, 32 * seg + lane), b2);
      } else {
        a[k] = nv_dot(w, x, b2);
      }
    }
  }
  const float lo = warp_sum4(a[0], a[1], a[2], a[3]), hi = warp_sum4(a[4], a[5], a[6], a[7]);
  if ((lane & 7) == 0) {
    part[nv_row(lane >> 3)] = lo;
    part[nv_row(4 + (lane >> 3))] = hi;
  }
};
// Rows [0, nrows) of a phase in rounds of kNvRowsRound (the producer issued them in slots of 32
// from row 0). The first round's opening barrier carries `ok` (acquire_n); opened() runs after
// it, then each round reads x = this lane's inputs from s_x (not kSeg). bsf: the first round's
// scales, loaded by the caller before its input wait; each later round's are loaded at the end of
// the round before, ahead of its barrier, hand-back and slot wait. After each round's closing
// barrier epi(q, nr, part) (part[t]: row q + t). keep_last: the last round's slots are not handed
// back (held = their count; down stores the residual first), else the last round raises the hop
// mark and hands back.
auto rows_nv = [&](auto kSegC, auto kH2C, int nrows, const uint8_t* bs0, const uint32_t(&bsf)[kRoundSlots], const float* s_x,
                   uint16_t work_phase, int layer, bool ok, auto&& opened, auto&& epi, bool keep_last, int& held) -> bool {
  if (!acquire_n(slots_nv(nrows), work_phase, layer, ok)) return false;
  opened();
  uint32_t bs[kRoundSlots];
#pragma unroll
  for (int i = 0; i < kRoundSlots; ++i) bs[i] = bsf[i];
  for (int q = 0, rd = 0; q < nrows; q += kNvRowsRound, ++rd) {
    const int nr = min(kNvRowsRound, nrows - q), n = (nr + NF::kRows1024 - 1) / NF::kRows1024;
    float* part = sm.part[rd & 1];
    if (rd > 0 && !acquire_n(n, work_phase, layer)) return false;
    // this lane's 32 inputs, read again each round (swizzled: conflict-free) rather than held
    // across the rounds: 32 registers live over the epilogue and the slot waits spilled at the
    // 96-register cap (and at the default grid qkv and MLP-1 are one round per block anyway)
    NvIn<decltype(kH2C)::value> x;  // kH2C: this phase's inputs are half2 words
    if constexpr (!decltype(kSegC)::value) x = load_nv_in<decltype(kH2C)::value, kHidden / 32>(s_x, lane);
    round_nv(kSegC, q, n, nr, x, bs, part);
    // the next round's scales, issued before this round's barrier (their registers are free now)
    nv_bs_load(bs0, q + kNvRowsRound, nrows, bs);
    csync();  // publishes part
    if (rd == 0) XRAY_SUB(x_dot, layer);  // MONOLITH_XRAY_SUB: as rows_1024's cuts
    epi(q, nr, part);
    const bool last = q + kNvRowsRound >= nrows;
    if (last && keep_last) {
      held = n;
    } else {
      if (last) hop_mark();  // the phase's outputs are out: a hop follows
      hand_back(n);
    }
    if (rd == 0) XRAY_SUB(x_out, layer);
  }
  return true;
};
