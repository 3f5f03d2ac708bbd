// monolith: the streaming schedule (`bf16-stream`, `fp8-stream`), one part of kernel/megakernel.cu.
//
// Included by megakernel.cu inside its build namespace (plain_build / xray_build), after the
// shared helpers (part_begin, warp_sum, dot8_bf16, the X-ray macros): it is not a stand-alone
// header, and it is compiled once per build like the rest of the kernel. Its parts, in the order
// included below: stream_words.cuh (the hops' word protocol), stream_gemv.cuh (norms, input
// vectors, a slot's row dot products), stream_plan.cuh (StreamPlan, the attention's splits),
// stream_ring.cuh (the ring: its producer and thread 0's slot tests); here the consumers
// (stream_consumer: every phase of a layer, the LM head) and the kernel body (stream_step). The
// measured per-format / per-kernel choices are kernel/policy.cuh's Policy.
//
// The schedule (per block; 16 consumer warps + 1 producer warp):
//   producer  lane 0 of warp 16 walks this block's whole-token stream list (StreamPlan): its qkv
//             rows, the K/V history of its attention splits, its O rows, its MLP units, its down
//             rows, every layer, then its LM-head rows, and keeps a ring of kStages bulk copies of
//             kSlotBytes in shared memory full. It never waits on activations, only on free slots.
//   consumers per layer L (blocks form 8 KV groups of G/8; words as in kernel/config.cuh):
//     wait_resid  the residual after layer L-1: tagged words, this thread's two   [grid hop]
//     qkv         RMSNorm (every block, redundantly; its 1/rms applied in the GEMV epilogue),
//                 this block's rows of its group's 512 q/k/v rows   -> tagged q/k/v words
//     wait_qkv    the group's 512 q/k/v words                                      [group hop]
//     attn        (blocks owning a split) QK-norm + RoPE, K/V append (owner of the last split),
//                 scores / softmax / V of its 64-position splits     -> tagged (m, l, o[128])
//     wait_attn   the group's splits, merged online in split order                 [group hop]
//     oproj       O rows x the group's 256 columns: partial sums    -> counted words (int64 adds)
//     wait_o      the residual after attention + O: 8 groups + 1 residual seed per word [grid]
//     mlp         RMSNorm, 8-column units: 16 gate/up rows -> SiLU(gate) * up -> tagged act words
//     wait_act    all 3,072 activations                                            [grid hop]
//     down        this block's rows of down + the residual           -> tagged residual words
//   then the final norm, the LM-head rows and the argmax (the last block to arrive reduces).
// Hops per layer: 5 (3 grid-wide, 2 inside a group); no grid barrier and no release fence: every
// hop is data that carries its own readiness. The upstream schedule has 6 (4 grid barriers + 2
// flag syncs), each a release. A phase's outputs are stored before its last slots go back to the
// producer (hand_back), so they leave the SM ahead of the refill burst.
//
// Weight formats (StreamFmt): the ring's 16 KB slots hold 8 bf16 rows of K = 1024 or 16 E4M3 rows
// (with their fp32 row scales loaded by the consumers before each phase's wait); the phases, hops
// and words are the same code for both.
//
// Determinism: every dot product is summed by one warp (or two, combined in a fixed order) in a
// fixed lane order; each (row, group) O partial is rounded to fixed point once (kFixShift) and
// integers add associatively, so neither the order of the atomics nor the grid size changes a
// bit of the residual. Attention splits depend on the position only and merge in split order.
//
// Counted words: layer L's live in acc[kAccO + L % 2] on top of layer L-2's (nothing is ever
// cleared, see ResidHist). A block adds to layer L's words only after reading the residual of
// layer L-1, which needs every block's layer L-1 MLP, which each block ran after reading layer
// L-1's counted words, so every block has read layer L-2's words (the buffer's previous content)
// before anyone adds: that content is final and known to every reader.

#include "stream_words.cuh"
#include "stream_gemv.cuh"
#include "stream_plan.cuh"
#include "stream_ring.cuh"

// ---- consumers ------------------------------------------------------------------------------
// Which of its residual elements a block seeds into the O stage: block b seeds the contiguous
// elements i with (i G) >> log2(kHidden) == b, ~kHidden / G of them, without an integer division
// (i % G == b cost ~20 dependent instructions on every thread's path into the qkv opening). Every
// element gets exactly one seed (i G / kHidden runs over 0 .. G-1, each value hit at least once as
// G <= kHidden), and the residual words are integer sums, so the tokens do not depend on the rule.
constexpr int kHiddenShift = [] { int k = 0; while ((1 << k) < kHidden) ++k; return k; }();  // log2(kHidden)
static_assert((1 << kHiddenShift) == kHidden, "the seed range is a shift by log2(kHidden)");
// The warp LM head (Policy::kHeadWarp: the E4M3 heads; bf16's head is DRAM-bound and keeps its
// rounds): no block barrier per round. The head's slots go to kHeadGroups groups of G = 16 /
// kHeadGroups warps; group g takes the slots j = g, g + kHeadGroups, ..., each warp of it R / G of a
// slot's rows, waits on that slot's mbarrier itself (lane 0, then __syncwarp), reduces its rows' lane
// sums in-warp (a reduce-scatter), writes the logits, keeps its own argmax and releases its share of
// the slot's arrivals. kHeadGroups divides kStages, so a slot's previous copy was the same group's,
// consumed by every warp of it in order: that is what keeps the mbarrier parity waits sound (a parity
// tells the current phase only from the one before it; a warp taking other warps' slots could arrive
// a lap early). Rows are independent in the head, so the rounds' fixed chain (slot tests, two block
// barriers, the combine) bought nothing there. Each row's sum is one warp's, in a fixed order.
constexpr int kHeadGroups = 4;
// In racecheck's reference build (MONOLITH_RING_RELEASE=512: every consumer thread releases a slot
// itself) every lane of the warp head also waits on the slot's `full` barrier itself: racecheck
// credits bar.sync and each thread's own mbarrier operations, not bar.warp.sync. The default build
// keeps lane 0's wait (the PTX memory model orders the other lanes' reads after it through
// bar.warp.sync, as bar.sync does in the layers).
constexpr bool kHeadLaneWait = kEmptyArrivals == kStreamConsumerThreads;
// The group's merge of attention partials (before O). A block that owns several splits of its group
// merges them itself, online, in split order, and publishes one (m, l, o) partial per block, so the
// group's merge reads min(blocks, splits) partials in block order. Policy::kMergeHalves: the merge on
// all 512 consumer threads instead of 256; threads 256.. (the same (head, dim) pairs) merge the
// partials from mh = 4 ceil(np / 8) on, and the lower half folds the upper's (m, num, den) in after
// the merge's barrier (through sm.vpart, free by then): each thread gathers a batch of partials per
// L2 round trip, one round trip after another, so halves cut the dependent rounds. With <= 4
// partials (positions < 256 at 128 blocks) nothing changes, bitwise.
static_assert(2 * kGroupCols <= kStreamConsumerThreads, "merge halves: two threads per (head, dim)");
static_assert(3 * kGroupCols <= kStreamConsumerWarps * kGroupCols,
              "merge halves: the upper half's (m, num, den) fit in sm.vpart");
// Policy::kMergeMlLanes: the merge reads each partial's (m, l) once per warp instead of once per
// thread. Every thread of a warp merges the same head (a head is 4 whole warps), so the 2 x kRound
// words (m, l) of a round trip's kRound partials are one word per lane, handed to the warp by
// shuffles; a thread then polls its o words plus that one word. In the long and wide kernels a round
// trip takes 8 partials instead of 4. The same values merged in the same order: the same bits (a
// warp-uniform `ok` is forced: the shuffles need the whole warp).
static_assert(kHeadDim % 32 == 0 && kGroupCols % 32 == 0, "merge (m, l) lanes: a warp merges one head");
static_assert(2 * 2 * kMergeBatch <= 32, "merge (m, l) lanes: a round trip's (m, l) words are one per lane");
constexpr int kWideSoftmaxParts = kStreamConsumerWarps / kHeadsPerKV;  // the wide softmax: warps per head


struct StreamSmem {
  float x[kHidden];                                 // normed residual (qkv, MLP, LM head input)
  float hval[kHidden];                              // the residual after attention + O (MLP's seed)
  float attn[kGroupCols];                           // merged attention of the group's two heads
  float q[kGroupCols];                              // q of both heads after QK-norm + RoPE
  uint16_t pad_q[2 * kGroupCols];                   // unused: keeps the offsets of the members below
  float kc[kHeadDim], vc[kHeadDim];                 // this position's K and V (bf16-rounded)
  float sc[kHeadsPerKV * kSplitEntriesMax];         // scores, then probabilities, of one split [head][entry]
  float ml[2 * kHeadsPerKV];                        // (max, sum) per head of one split
  float rope[kHeadDim];                             // this position's cos | sin, read once per launch
  union {
    float vpart[kStreamConsumerWarps * kGroupCols];  // attention: per-warp V partial sums
    float act[kIntermediate];                        // MLP down: every activation of the layer
  };
  float segsum[3 * (kHidden / kMinStreamBlocks)];   // MLP down: this block's 1024-wide segment sums
  float part[2][kRoundRbMax * kPartBlk];  // half-row sums per 8-row block, last two rounds
  float red[kStreamConsumerWarps];                  // per-warp sums (attention's QK-norm)
  float ssq[kStreamConsumerWarps];                  // per-warp sums of squares (stream_prenorm)
  int flag;
  uint32_t pre_kc;      // O's pretest: the ring position of thread 0's last pretest,
  uint32_t pre_landed;  // the slots from there it found landed (bit i: slot pre_kc + i),
  int pre_ready;        // and n when all n had landed, else 0
#if defined(MONOLITH_XRAY) && MONOLITH_XRAY_SUB == 1
  unsigned long long xwords;  // MONOLITH_XRAY_SUB: the latest cycle at which a thread had its words (xray.cuh)
#endif
};
static_assert(offsetof(StreamSmem, q) % 16 == 0 && offsetof(StreamSmem, vpart) % 16 == 0 &&
                  (kGroupCols * sizeof(float)) % 16 == 0,
              "attention reads q and writes the V partials as float4");
// The shared-memory budget of a streaming block (sm_90: 227 KB per block): the ring, StreamSmem and
// ~0.2 KB of barriers, flags and the plan. NVFP4's block scales do not fit beside it (StreamFmt<WeightsNvfp4>).
constexpr int kStreamSmemBudget = 227 * 1024;
constexpr int kNvSlotScaleBytes = StreamFmt<WeightsNvfp4>::kRows1024 * StreamFmt<WeightsNvfp4>::kBsRow1024;  // 2 KB
static_assert(kRingBytes + int(sizeof(StreamSmem)) + 512 <= kStreamSmemBudget, "ring + StreamSmem fit one block");
static_assert(kRingBytes + int(sizeof(StreamSmem)) + kStages * kNvSlotScaleBytes > kStreamSmemBudget,
              "a per-stage scale area would fit now: reconsider reading NVFP4 block scales from L2");

// P: the kernel's Policy; kLong: the long-position kernel (megakernel.cu decode_step_long), which
// differs where P says; kWide: the wide kernel (decode_step_wide: kLong's, with wider splits)
template <class Cfg, class P, bool kLong, bool kWide>
__device__ __forceinline__ void stream_consumer(const StepParams& p, const PlanT<kWide>& s, int pos, int token,
                                             uint32_t steps, Ring r, StreamSmem& sm) {
  using W = typename Cfg::Weights;
  using F = StreamFmt<W>;
  using HW = typename W::Head;  // the embedding's and LM head's format (NVFP4: E4M3)
  using HF = StreamFmt<HW>;
  using NF = StreamFmt<WeightsNvfp4>;
  constexpr bool kNv = W::kBlockScaled;           // NVFP4 layers: block scales from L2, tensor scales per row
  constexpr bool kScaled = W::kRowScale && !kNv;  // fp8: one fp32 scale per row
  // the LM head's input (rows_1024's only caller with the NVFP4 variant): linear there (the
  // swizzle cost nvfp4-stream time at its 96-register cap)
  constexpr bool kHeadSwz = P::kHeadInSwizzled;
  // The layers' GEMV inputs (s_x, sm.attn, sm.act) are stored with nv_swz; NVFP4's as half2 words
  // (store_xh2, read by dot16B_h2); fp8's as f16 words (store_xe, read by hdot16_e4m3) in the
  // phases of P::kE4M3Half2Phases
  constexpr int kE4H2Mask = P::kE4M3Half2Phases;
  constexpr bool kE4H2Qkv = (kE4H2Mask & 1) != 0, kE4H2O = (kE4H2Mask & 2) != 0, kE4H2Mlp = (kE4H2Mask & 4) != 0,
                 kE4H2Down = (kE4H2Mask & 8) != 0;
  constexpr bool kMergeHalves = P::kMergeHalves;
  constexpr bool kPretestO = P::kPretestO;
  constexpr int kMergeThreads = (kMergeHalves ? 2 : 1) * kGroupCols;  // threads that gather partials
  constexpr int kRowsRound = kRoundSlots * F::kRows1024;  // K = 1024 rows per round: 32 | 64 | 128 (NVFP4)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int G = gridDim.x, b = blockIdx.x, g = s.g;
  SyncState* S = p.sync;
  float* scr = p.scr;
  long long* acc = p.acc;
  const long long tmo = p.timeout_cycles;
  const float* rope_row = p.rope + int64_t(pos) * kHeadDim;
  volatile int* flag = &sm.flag;
  XRAY_INIT(p.xray);
  XRAY_BEGIN();

  uint32_t kc = 0;  // chunks consumed
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
  auto test_slots = [&](int n, uint32_t known) -> uint32_t { return slot_tests_batched(r.full, kc, n, known); };
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
      const uint32_t slot = (kc + i) % kStages, par = ((kc + i) / kStages) & 1u;
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
        if (!mbar_test_wait(&r.full[(kc + i) % kStages], ((kc + i) / kStages) & 1u)) wait_slot(i);
    }
    if (sub) XRAY_SUB2(x_slots, layer);
    const bool all = csync_and(ok);
    hop_unmark();
    return all;
  };
  auto slot_at = [&](int i) -> const uint4* {
    return reinterpret_cast<const uint4*>(r.slots + size_t((kc + i) % kStages) * kSlotBytes);
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
      for (int i = 0; i < n; ++i) mbar_arrive(&r.empty[(kc + i) % kStages]);
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
        if (i < n) mbar_arrive(&r.empty[(kc + i) % kStages]);
    }
    kc += n;
  };
  // Rows of K = 1024 in slots base .. base + n (nr rows in all, kRows1024 per slot): warp w's
  // half-row sum of row 8 b + w / 2 goes to part[b * 16 + w] (b: 8-row block of the round); the
  // row's two halves are added after the round's closing barrier, in fixed order (combine_row).
  static_assert(kRoundSlots == 4, "round_1024 reduces four 8-row blocks' sums per warp_sum4");
  auto round_1024 = [&](int base, int n, int nr, const auto& x, float* part) {  // x: XHalf, or XE16 (fp8's half2 phases)
    using RW = HW;  // (bf16 / E4M3 rows: the layers' of those variants, and every variant's LM head)
    using RF = HF;
#pragma unroll
    for (int k = 0; k < RF::kRb; ++k) {  // E4M3: the slots' first 8 rows, then their second 8
      float a[kRoundSlots];
#pragma unroll
      for (int i = 0; i < kRoundSlots; ++i) {
        const int row = 8 * k + (warp >> 1);  // in the slot
        a[i] = (i < n && RF::kRows1024 * i + row < nr) ? half_row_lane<RW>(slot_at(base + i), row, x) : 0.f;
      }
      const float r4 = warp_sum4(a[0], a[1], a[2], a[3]);  // lane 8 v: slot v's row
      // only the slots of this piece: a piece's part[] ends where its n slots end (the second
      // piece of a 6-slot E4M3 round would write past sm.part otherwise)
      if ((lane & 7) == 0 && (lane >> 3) < n) part[(RF::kRb * (lane >> 3) + k) * kPartBlk + warp] = r4;
    }
  };
  auto combine_row = [&](const float* part, int t) {  // row t of the round (8-row block t / 8, row t % 8)
    const float* pp = part + (t >> 3) * kPartBlk + 2 * (t & 7);
    return pp[0] + pp[1];
  };
  // Rows [r0, r1) of K = 1024 streamed in rounds against s_x; after each round's closing barrier,
  // thread t < rows of the round calls on_row(r0' + t, dot product) (rows in increasing order
  // per thread). The first round's opening barrier publishes s_x and the norm's sums of squares
  // (and carries `ok`, see acquire_n); after it each thread calls opened() (norm_inv), and the
  // input half stays in registers. False when a wait failed.
  // Row scales (E4M3): row q's is scl[q]; thread t's for the first round is sc0 (the caller loads
  // it before its wait), each later round's is loaded one round ahead, so no scale load is ever
  // waited on at the end of a round. The dot product reaches on_row scaled.
  // kSlots (an integral_constant): slots per round, at most two pieces of kRoundSlots.
  // The rows are in the LM head's format HW: the layers' too for bf16 / E4M3 variants (W == HW);
  // NVFP4 layers go through rows_nv below.
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
        if (np > 0) round_1024(p0, np, nr - p0 * RF::kRows1024, x, part + p0 * RF::kRb * kPartBlk);
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

  const float scale = rsqrtf(float(kHeadDim));
  ResidHist rh = resid_start(acc);
  // the position's RoPE row, once per launch (published by the first barrier of layer 0)
  if (tid < kHeadDim) sm.rope[tid] = rope_row[tid];
  // Stress test (p.jitter_ns > 0): a pseudo-random sleep per block, layer and phase, so that blocks
  // reach every wait in shuffled orders; the tokens must stay bitwise the same.
  auto jitter = [&](int L, int phase) {
    if (p.jitter_ns <= 0) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200  // sm_120a: the launch's term from the layer's tag, live anyway
    uint32_t x = uint32_t(b) * 0x9E3779B1u ^ uint32_t(phase) * 0xC2B2AE35u ^ layer_tag(steps, L) * 0x27D4EB2Fu;
#else
    uint32_t x = uint32_t(b) * 0x9E3779B1u ^ uint32_t(L) * 0x85EBCA6Bu ^ uint32_t(phase) * 0xC2B2AE35u ^ steps * 0x27D4EB2Fu;
#endif
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    __nanosleep(x % uint32_t(p.jitter_ns));
  };
  // A stop for the phase diff (every block), or the fault injection (block 0 alone leaves).
  auto stop_after = [&](int L, int phase) {
    return p.stop_layer == L && (p.stop_phase == phase || (p.stop_phase == kFaultBlock0After + phase && b == 0));
  };
  // Block b seeds element i of a counted stage (the residual connection) when i G / kHidden == b
  // (kHiddenShift above).
  auto seed_o = [&](long long* buf, const float v[2]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = tid + e * kStreamConsumerThreads;
      if ((i * G) >> kHiddenShift == b) resid_add(buf + i, to_fix(v[e]));
    }
  };
  for (int L = 0; L < kNumLayers; ++L) {
    const uint16_t* N = p.norms + int64_t(L) * kNormLayerElems;
    const uint32_t tag = layer_tag(steps, L);
    long long* acc_o = acc + kAccO + (L % kAccBuffers) * kHidden;  // residual after attention + O

    // this layer's row scales (E4M3; null for bf16), in the stream order (qkv rows grouped)
    const float* SC = kScaled ? p.row_scales + int64_t(L) * kLayerRows : nullptr;
    // NVFP4: this layer's block scales (stream order) and tensor scales (null otherwise)
    const uint8_t* BS = kNv ? nv_block_scales(p) + int64_t(L) * kNvLayerBscaleBytes : nullptr;
    const float* TS = kNv ? p.row_scales + int64_t(L) * kNvTscaleSlots : nullptr;

    // ---------------- qkv ----------------
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
        XRAY_END(s_gather, L);  // every thread's residual words are in
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
    XRAY_END(s_qkv, L);
    if (stop_after(L, kStopQKV)) return;
    jitter(L, 1);

    // ---------------- attention splits of group g ----------------
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
        XRAY_END(s_gather, L);  // every thread's q/k/v words are in
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

    // ---------------- merge + O partial sums ----------------
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
    if (stop_after(L, kStopAttn)) return;
    jitter(L, 2);
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
        uint32_t b0 = bso[0], b1 = bso[1];  // later slots' scales: issued before the slot wait
        if (i > 0) {
          const uint16_t* bs = reinterpret_cast<const uint16_t*>(BS + kBsO + int64_t(g * kHidden + o) * F::kBsRowO) + l8;
          b0 = r0 < nr ? __ldg(bs + r0 * (F::kBsRowO / 2)) : 0u;
          b1 = r1 < nr ? __ldg(bs + r1 * (F::kBsRowO / 2)) : 0u;
        }
        if (!acquire_n(1, kPhase_s_oproj, L, true, false, i == 0)) return;  // i = 0: after the barrier above
        const uint4* slot = slot_at(0);
        float a0 = r0 < nr ? nv_dot(slot[r0 * (F::kRowBytesO / 16) + l8], at, b0) : 0.f;
        float a1 = r1 < nr ? nv_dot(slot[r1 * (F::kRowBytesO / 16) + l8], at, b1) : 0.f;
#pragma unroll
        for (int m = 4; m > 0; m >>= 1) {  // within each group of 8 lanes, fixed order
          a0 += __shfl_xor_sync(0xffffffffu, a0, m);
          a1 += __shfl_xor_sync(0xffffffffu, a1, m);
        }
        if (l8 == 0) {
          if (r0 < nr) resid_add(acc_o + o + r0, to_fix(a0 * tso));
          if (r1 < nr) resid_add(acc_o + o + r1, to_fix(a1 * tso));
        }
        if (o + F::kRowsO >= s.o1) hop_mark();
        release_n(1);
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
        const float s0 = (l16 == 0 && r0 < nr) ? (i == 0 ? sco[0] : __ldg(SC + kScO + o + r0)) : 0.f;
        const float s1 = (l16 == 0 && r1 < nr) ? (i == 0 ? sco[1] : __ldg(SC + kScO + o + r1)) : 0.f;
        if (!acquire_n(1, kPhase_s_oproj, L, true, i == 0, i == 0)) return;  // i = 0: after the barrier above
        if (i == 0) XRAY_SUB2(x_bar, L);
        const uint4* slot = slot_at(0);
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
        if (o + F::kRowsO >= s.o1) hop_mark();
        if (i == 0) XRAY_SUB2(x_out, L);
        release_n(1);
      }
    } else {
      // lane's 8 attention values are the same for every O row: registers
      const float4 at0 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane)];
      const float4 at1 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane + 1)];
      for (int o = s.o0; o < s.o1; o += 32 * kRoundSlots) {
        const int nr = min(32 * kRoundSlots, s.o1 - o), n = (nr + 31) / 32;
        if (!acquire_n(n, kPhase_s_oproj, L, true, o == s.o0, o == s.o0)) return;  // the first: after the barrier above
        if (o == s.o0) XRAY_SUB2(x_bar, L);
        float a[2 * kRoundSlots];
#pragma unroll
        for (int i = 0; i < kRoundSlots; ++i) {  // slot i, rows 2 w and 2 w + 1
          const uint4* slot = slot_at(i);
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
        if (o + 32 * kRoundSlots >= s.o1) hop_mark();
        if (o == s.o0) XRAY_SUB2(x_out, L);
        release_n(n);
      }
    }
    XRAY_END(s_oproj, L);
    if (p.stop_layer == L && p.stop_phase == kFaultBlock0After + kStopO && b == 0) return;
    jitter(L, 3);

    // ---------------- MLP 1: RMSNorm, gate/up rows of this block's units, SiLU(gate) * up ------
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
      pair_scales(s.u0, min(kMlpRoundUnits, s.u1 - s.u0), scg, scu);
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
      auto mlp_slots0 = [&] { return F::kSlotsPerUnit * min(kMlpRoundUnits, s.u1 - s.u0); };  // bf16 / E4M3: round 0's
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
              XRAY_END(s_gather, L);  // every thread's counted words are in
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
        static_assert(kMlpRoundUnits * kSpu <= 2 * kRoundSlots, "an MLP round is at most two pieces");
        if (!acquire_n(mlp_slots0(), kPhase_s_mlp, L, ok, true)) return;
        XRAY_WORDS_CUT(&sm.xwords, L);
        XRAY_END(s_gather, L);  // every thread's counted words are in
        const float inv = norm_inv(sm.ssq);
        if (b == 0)  // for the phase diff
          for (int e = 0; e < 2; ++e) scr[kScrNormPost + tid + e * kStreamConsumerThreads] = v[e] * inv * npost.w[e];
        const auto xg = [&] {
          if constexpr (kE4H2Mlp) return load_xe_half<kHidden / 32>(sm.x);
          else return load_xhalf<W>(sm.x);
        }();
        for (int u = s.u0, rd = 0; u < s.u1; u += kMlpRoundUnits, ++rd) {
          const int nu = min(kMlpRoundUnits, s.u1 - u), n = kSpu * nu;
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
          if (u + kMlpRoundUnits >= s.u1) hop_mark();
          hand_back(n);
          if (rd == 0) XRAY_SUB(x_out, L);
        }
      }
    }
    XRAY_END(s_mlp, L);
    jitter(L, 4);

    // ---------------- MLP 2: every activation, this block's down rows, the residual -------------
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
    XRAY_END(s_down, L);
    if (stop_after(L, kStopGateUp) || stop_after(L, kStopDown)) return;
    jitter(L, 5);
  }

  // ---------------- final norm + LM head + argmax ----------------
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
    constexpr int NG = kHeadGroups;
    constexpr int G = kStreamConsumerWarps / NG, RW = R / G;
    constexpr int kArrivals = kEmptyArrivals / G;  // each warp's share of a slot's release
    static_assert(kStages % NG == 0 && NG * G <= kStreamConsumerWarps, "groups tile the ring and the warps");
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
      const uint32_t c = kc + uint32_t(j), slot = c % kStages;
      const int r0 = s.v0 + j * R, nr = min(R, s.v1 - r0);
      float sc = 1.f;  // E4M3: this lane's row scale, asked for before the slot wait
      if constexpr (HW::kRowScale)
        if (owner && my_r < nr) sc = __ldg(p.embed_scales + r0 + my_r);
      bool wok = true;
      auto wait_head_slot = [&] {  // bounded; a timeout names the LM head (layer 28, wait 12)
        return mbar_wait_bounded(&r.full[slot], (c / kStages) & 1u, S, tmo, kErrRingTimeout, uint32_t(kNumLayers) * 16u + 12u);
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
}

template <class Cfg, bool kLong, bool kWide = false>
__device__ __forceinline__ void stream_step(const StepParams& p) {
  using P = Policy<typename Cfg::Weights, kernel_kind(kLong, kWide)>;
  extern __shared__ __align__(128) uint8_t ring_slots[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ int quit, hold;
  __shared__ uint32_t landed;  // the landed count (Policy::kSlotLanded)
  __shared__ __align__(16) StreamSmem sm;
  __shared__ PlanT<kWide> plan;  // block-uniform: shared memory, not 14 registers per thread
  const int tid = threadIdx.x;
  int pos, token;
  if (!step_inputs_ok(p, &pos, &token)) return;
  if (p.stop_phase == kFaultBlock0Exits && blockIdx.x == 0) return;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kEmptyArrivals);
    }
    quit = 0;
    hold = 0;
    if constexpr (P::kSlotLanded) landed = 0u;
    if constexpr (P::kPretestO) {
      sm.pre_kc = ~0u;  // no pretest yet (a ring position never reached)
      sm.pre_landed = 0u;
      sm.pre_ready = 0;
    }
#if defined(MONOLITH_XRAY) && MONOLITH_XRAY_SUB == 1
    sm.xwords = 0ull;
#endif
    plan = make_plan<kWide>(blockIdx.x, gridDim.x, pos);
    mbar_fence_init();
  }
  __syncthreads();  // the schedule's only barrier 0: from here the consumers sync on barrier 1
  const Ring r{ring_slots, full, empty, &quit, &hold, &landed};
  if (tid >= kStreamConsumerThreads) {
    if (tid == kStreamConsumerThreads) stream_producer<typename Cfg::Weights, P, kWide>(p, plan, pos, r);
    return;
  }
  const uint32_t steps = *(volatile const uint32_t*)&p.sync->steps;  // names this launch in tagged words
  stream_consumer<Cfg, P, kLong, kWide>(p, plan, pos, token, steps, r, sm);
  if (tid == 0) atomicExch(&quit, 1);  // whatever path the consumers left by
}
