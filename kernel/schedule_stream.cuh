// monolith: the streaming schedule (`bf16-stream`, `fp8-stream`), one part of kernel/megakernel.cu.
//
// Included by megakernel.cu inside its build namespace (plain_build / xray_build), after the
// shared helpers (part_begin, warp_sum, dot8_bf16, the X-ray macros): it is not a stand-alone
// header, and it is compiled once per build like the rest of the kernel. Its parts, in the order
// included below: stream_words.cuh (the hops' word protocol), stream_gemv.cuh (norms, input
// vectors, a slot's row dot products), stream_mma.cuh (the same rounds on the tensor cores:
// Policy::kTcGemv), stream_plan.cuh (StreamPlan, the attention's splits),
// stream_ring.cuh (the ring: its producer and thread 0's slot tests); here the consumers
// (stream_consumer) and the kernel body (stream_step). The measured per-format / per-kernel
// choices are kernel/policy.cuh's Policy.
// stream_consumer's body is the layer loop below, one line per phase; each phase's code is a
// fragment of that body in a file of its own, included at its place: stream_reader.cuh (the ring
// reader and the GEMV rounds, as lambdas), phase_qkv.cuh, phase_attn.cuh, phase_merge.cuh,
// phase_oproj.cuh, phase_mlp.cuh, phase_down.cuh, phase_head.cuh. Fragments, not functions: the
// compiler sees one function's tokens, as the SASS lock (kernel/sass.lock) requires; a phase made
// a function of its own compiles to PTX with other register orders, and so to other machine code.
//
// The schedule (per block; 16 consumer warps + 1 producer warp):
//   producer  lane 0 of warp 16 walks this block's whole-token stream list (StreamPlan): its qkv
//             rows, the K/V history of its attention splits, its O rows, its MLP units, its down
//             rows, every layer, then its LM-head rows, and keeps a ring of P::kStages bulk copies of
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
#include "stream_mma.cuh"
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
// The warp head's group count for a ring of `stages` slots: kHeadGroups wherever it divides the ring
// (every shipped depth: 12 and 4), else 2 or 1, whichever divides it (an experiment depth of the sm_90
// ring, config.cuh MONOLITH_RING_DEPTH_SM90: 10 or 7). The tokens do not depend on it: a row's sum is
// one warp's, by warp_reduce_scatter's xor-16/8/4/2/1 tree whatever the rows per warp.
__host__ __device__ constexpr int head_groups(int stages) {
  return stages % kHeadGroups == 0 ? kHeadGroups : stages % 2 == 0 ? 2 : 1;
}
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


// kK: vectors per pass (Policy::kVecs, the tensor-core variants' k; notes/ktoken.md §1). kK = 1 is every
// shipped kernel's state, member for member; kK > 1 sizes the tensor-core rounds' inputs (x, act: k
// vectors at stream_mma.cuh's tc_words_at / tc_factors_at, vector 0 where store_xe writes it) and their
// partials (part: tc_part_floats) for k vectors, and drops pad_q. The rest is one vector's state: the
// hops, attention, O and the LM head carry one vector (§7a).
template <int kK>
struct StreamSmemK {
  float x[kK == 1 ? kHidden : tc_vec_floats(kHidden / 32, kK)];  // normed residual (qkv, MLP, LM head input)
  float hval[kHidden];                              // the residual after attention + O (MLP's seed)
  float attn[kGroupCols];                           // merged attention of the group's two heads
  float q[kGroupCols];                              // q of both heads after QK-norm + RoPE
  uint16_t pad_q[kK == 1 ? 2 * kGroupCols : 8];     // unused: keeps the offsets of the members below
  float kc[kHeadDim], vc[kHeadDim];                 // this position's K and V (bf16-rounded)
  float sc[kHeadsPerKV * kSplitEntriesMax];         // scores, then probabilities, of one split [head][entry]
  float ml[2 * kHeadsPerKV];                        // (max, sum) per head of one split
  float rope[kHeadDim];                             // this position's cos | sin, read once per launch
  union {
    float vpart[kStreamConsumerWarps * kGroupCols];  // attention: per-warp V partial sums
    float act[kK == 1 ? kIntermediate : tc_vec_floats(kIntermediate / 32, kK)];  // MLP down: every activation
  };
  float segsum[3 * (kHidden / kMinStreamBlocks)];   // MLP down: this block's 1024-wide segment sums
  // half-row sums per 8-row block, last two rounds (the tensor-core rounds: tc_part_at, both buffers)
  float part[2][kK == 1 || 2 * kRoundRbMax * kPartBlk >= tc_part_floats(kK) ? kRoundRbMax * kPartBlk
                                                                            : (tc_part_floats(kK) + 1) / 2];
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
using StreamSmem = StreamSmemK<1>;
static_assert(offsetof(StreamSmem, q) % 16 == 0 && offsetof(StreamSmem, vpart) % 16 == 0 &&
                  (kGroupCols * sizeof(float)) % 16 == 0,
              "attention reads q and writes the V partials as float4");
// The shared-memory budget of a streaming block, per configuration (Policy::kStages): the ring,
// StreamSmem and ~0.2 KB of barriers, flags and the plan. sm_90: 227 KB per block. sm_120: 99 KB per
// block (100 KB per SM, one block per SM); its 4-slot ring leaves ~3 KB free, of which the assert
// keeps 2 KB as headroom for StreamSmem to grow. NVFP4's block scales do not fit beside either ring
// (StreamFmt<WeightsNvfp4>).
constexpr int kStreamSmemBudget = 227 * 1024;
constexpr int kStreamSmemBudgetSm120 = 99 * 1024;
constexpr int kStreamSmemHeadroomSm120 = 2 * 1024;
static_assert(kStreamSmemBudget == kSmemPerBlockSm90 && kStreamSmemBudgetSm120 == kSmemPerBlockSm120,
              "the budgets are config.cuh's per-block limits");
constexpr int kNvSlotScaleBytes = StreamFmt<WeightsNvfp4>::kRows1024 * StreamFmt<WeightsNvfp4>::kBsRow1024;  // 2 KB
static_assert(kRingBytesSm90 + int(sizeof(StreamSmem)) + 512 <= kStreamSmemBudget, "ring + StreamSmem fit one block");
static_assert(kRingBytesSm120 + int(sizeof(StreamSmem)) + 512 + kStreamSmemHeadroomSm120 <= kStreamSmemBudgetSm120,
              "the sm_120 ring + StreamSmem fit one sm_120 block, with headroom");
// k vectors per pass (fp8-stream-tc-k2/-k4/-k8: Policy::kVecs), per (k, arch), by name: the ring of
// §1's plan (policy.cuh kpass_plan_slots) and the k-pass state built so far (StreamSmemK<k>) fit the
// block (sm_120 with its 2 KB headroom), the attention's float4 members stay aligned, and the rounds'
// k-column partials fit sm.part. sm_120 takes k <= 2 (Policy refuses more in one line).
template <int kK, bool kSm120>
constexpr bool kpass_block_fits() {
  using P = Policy<WeightsE4M3, KernelKind::kShort, kSm120, true, kK>;
  using Sm = StreamSmemK<kK>;
  return P::kRingBytes + int(sizeof(Sm)) + 512 + (kSm120 ? kStreamSmemHeadroomSm120 : 0) <= P::kSmemPerBlock &&
         offsetof(Sm, q) % 16 == 0 && offsetof(Sm, vpart) % 16 == 0 &&
         int(sizeof(Sm::part)) >= 4 * tc_part_floats(kK) &&
         int(sizeof(Sm::x)) >= 4 * kpass_max(kHidden, tc_vec_floats(kHidden / 32, kK)) &&
         int(sizeof(Sm::act)) >= 4 * kpass_max(kIntermediate, tc_vec_floats(kIntermediate / 32, kK));
}
static_assert(kpass_block_fits<1, false>() &&
                  Policy<WeightsE4M3, KernelKind::kShort, false, true, 1>::kStages == kStagesSm90,
              "fp8-stream-tc (k = 1), sm_90: the configured ring (12) + today's state");
static_assert(kpass_block_fits<2, false>() && Policy<WeightsE4M3, KernelKind::kShort, false, true, 2>::kStages ==
                  kpass_stages_sm90(2), "fp8-stream-tc-k2, sm_90: ktoken.md section 1's 11 slots + the k = 2 state fit 227 KB");
static_assert(kpass_block_fits<4, false>() && Policy<WeightsE4M3, KernelKind::kShort, false, true, 4>::kStages ==
                  kpass_stages_sm90(4), "fp8-stream-tc-k4, sm_90: ktoken.md section 1's 10 slots + the k = 4 state fit 227 KB");
static_assert(kpass_block_fits<8, false>() && Policy<WeightsE4M3, KernelKind::kShort, false, true, 8>::kStages ==
                  kpass_stages_sm90(8), "fp8-stream-tc-k8, sm_90: ktoken.md section 1's 8 slots + the k = 8 state fit 227 KB");
static_assert(kpass_block_fits<1, true>() && kpass_block_fits<2, true>() &&
                  Policy<WeightsE4M3, KernelKind::kShort, true, true, 2>::kStages == kStagesSm120,
              "fp8-stream-tc(-k2), sm_120: 4 slots + the k = 2 state fit 99 KB with 2 KB headroom "
              "(ktoken.md section 1: single-buffered C tiles)");
static_assert((kStagesSm90 != kStagesSm90Shipped ||  // (the shipped depth's rule: config.cuh)
               kRingBytesSm90 + int(sizeof(StreamSmem)) + kStagesSm90 * kNvSlotScaleBytes > kStreamSmemBudget) &&
                  kRingBytesSm120 + int(sizeof(StreamSmem)) + kStagesSm120 * kNvSlotScaleBytes > kStreamSmemBudgetSm120,
              "a per-stage scale area would fit now: reconsider reading NVFP4 block scales from L2");

// P: the kernel's Policy; kLong: the long-position kernel (megakernel.cu decode_step_long), which
// differs where P says; kWide: the wide kernel (decode_step_wide: kLong's, with wider splits)
template <class Cfg, class P, bool kLong, bool kWide>
__device__ __forceinline__ void stream_consumer(const StepParams& p, const PlanT<kWide>& s, int pos, int token,
                                             uint32_t steps, Ring r, StreamSmemK<P::kVecs>& sm) {
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
  constexpr int kE4H2Mask = P::kE4M3Half2Phases | P::kTcPhases;
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
  XRAY_INIT(p.xray, kNv);
  XRAY_BEGIN();

  uint32_t kc = 0;  // chunks consumed
  #include "stream_reader.cuh"

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
    #include "phase_qkv.cuh"
    XRAY_END(s_qkv, L);
    if (stop_after(L, kStopQKV)) return;
    jitter(L, 1);

    // ---------------- attention splits of group g ----------------
    #include "phase_attn.cuh"

    // ---------------- merge + O partial sums ----------------
    #include "phase_merge.cuh"
    if (stop_after(L, kStopAttn)) return;
    jitter(L, 2);
    #include "phase_oproj.cuh"
    XRAY_END(s_oproj, L);
    if (p.stop_layer == L && p.stop_phase == kFaultBlock0After + kStopO && b == 0) return;
    jitter(L, 3);

    // ---------------- MLP 1: RMSNorm, gate/up rows of this block's units, SiLU(gate) * up ------
    #include "phase_mlp.cuh"
    XRAY_END(s_mlp, L);
    jitter(L, 4);

    // ---------------- MLP 2: every activation, this block's down rows, the residual -------------
    #include "phase_down.cuh"
    XRAY_END(s_down, L);
    if (stop_after(L, kStopGateUp) || stop_after(L, kStopDown)) return;
    jitter(L, 5);
  }

  // ---------------- final norm + LM head + argmax ----------------
  #include "phase_head.cuh"
}

// Every round of the schedule fits in P's ring: a round's slots are all held before any goes back,
// and a parity test of slot kc + i is sound only for i < kStages (slot_tests_batched). The rounds:
// qkv, O (bf16), down and NVFP4 kRoundSlots; MLP-1 P::kMlpRoundUnits units; a split's K or V
// kSplitSlotsMax; the bf16 LM head HF::kHeadSlots; O's pretest at most kRoundSlots. The warp head's
// groups tile the ring (head_groups(kStages) divides kStages: phase_head.cuh).
template <class Cfg, class P>
__host__ __device__ constexpr bool ring_fits() {
  using F = StreamFmt<typename Cfg::Weights>;
  using HF = StreamFmt<typename Cfg::Weights::Head>;
  return kRoundSlots <= P::kStages && P::kMlpRoundUnits * F::kSlotsPerUnit <= P::kStages &&
         kSplitSlotsMax <= P::kStages && (P::kHeadWarp || HF::kHeadSlots <= P::kStages) &&
         (!P::kHeadWarp || P::kStages % head_groups(P::kStages) == 0);
}

template <class Cfg, bool kLong, bool kWide = false>
__device__ __forceinline__ void stream_step(const StepParams& p) {
  using P = Policy<typename Cfg::Weights, kernel_kind(kLong, kWide), Cfg::kSm120Config || kArchSm120, Cfg::kTcGemv,
                   Cfg::kTcVecs>;
  using Sm = StreamSmemK<P::kVecs>;
  static_assert(ring_fits<Cfg, P>(), "every round of the schedule fits in the ring");
  static_assert(P::kRingBytes + int(sizeof(Sm)) + 512 <= P::kSmemPerBlock, "ring + StreamSmem fit one block");
  constexpr int kStages = P::kStages;
  extern __shared__ __align__(128) uint8_t ring_slots[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ int quit, hold;
  __shared__ uint32_t landed;  // the landed count (Policy::kSlotLanded)
  __shared__ __align__(16) Sm sm;
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
