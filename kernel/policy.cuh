// monolith: the streaming kernels' measured choices, one policy per (weight format x kernel x arch).
//
// Every field is a compile-time constant of the three keys, so each kernel instantiates only the
// code its policy picks. The measurements behind each choice (and the alternatives that lost) are
// rows of docs/EXPERIMENTS.md; the fields name the row.
#pragma once
#include "config.cuh"
#include "dequant.cuh"

namespace monolith {

// The three kernels of a streaming variant (megakernel.cu): decode_step below kLongKernelFrom,
// decode_step_long from there, decode_step_wide where its wider attention splits apply.
enum class KernelKind { kShort, kLong, kWide };

// This compilation pass is sm_120a's (where registers are tighter: ptxas at usage level 0, and the
// block's shared memory is 99 KB). The host makes the same choice from the device's compute
// capability (major >= 12: megakernel.cu device_sm120), so the dynamic shared memory it launches
// with is the ring of the code that runs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr bool kArchSm120 = true;
#else
constexpr bool kArchSm120 = false;
#endif

// k vectors per pass (issue 48; notes/ktoken.md §1): a k-pass block's shared memory as §1 plans it,
// and the ring depth that plan leaves, per (format, k, arch). S(k) = the union of the per-phase vector
// sets (down's B: act, fp8 6 KB / bf16 12 KB per vector; the attention set: 16 KB + 3.5 KB per vector;
// x: 2 / 4 KB per vector) + per-vector state (C tiles of two rounds, fp8 4 KB / bf16 2 KB, single-
// buffered half that; segsum, hval rows, rope: 1.5 KB) + 1.25 KB fixed. Slots: what is left of the
// block's limit (sm_120: 99 KB less 2 KB headroom) after S(k) and 0.5 KB of barriers, in 16 KB, at
// most 12. The assertions below are §1's table; the kernels that exist (fp8-stream-tc-k*) take
// their ring depth from it and assert their own state fits beside it (schedule_stream.cuh).
constexpr int kTcVecsMax = 8;       // B's columns: at most 8 vectors per pass
constexpr int kTcVecsMaxSm120 = 2;  // sm_120: the most vectors whose plan keeps kRoundSlots (4) ring slots
__host__ __device__ constexpr int kpass_max(int a, int b) { return a > b ? a : b; }
__host__ __device__ constexpr int kpass_plan_smem(bool fp8, int k, bool single_c) {
  const int act = (fp8 ? 6144 : 12288) * k, attn = 16384 + 3584 * k, x = (fp8 ? 2048 : 4096) * k;
  const int c_tiles = (fp8 ? 4096 : 2048) * k / (single_c ? 2 : 1);
  return kpass_max(act, kpass_max(attn, x)) + c_tiles + 1536 * k + 1280;
}
__host__ __device__ constexpr int kpass_plan_slots(bool fp8, int k, bool sm120, bool single_c = false) {
  const int limit = sm120 ? kSmemPerBlockSm120 - 2048 : kSmemPerBlockSm90;  // (sm_120: 2 KB headroom)
  const int slots = (limit - 512 - kpass_plan_smem(fp8, k, single_c)) / kSlotBytes;
  return slots < 0 ? 0 : slots > 12 ? 12 : slots;
}
static_assert(kpass_plan_slots(true, 1, false) == 12 && kpass_plan_slots(true, 2, false) == 11 &&
                  kpass_plan_slots(true, 4, false) == 10 && kpass_plan_slots(true, 8, false) == 8,
              "ktoken.md section 1's table, fp8 on sm_90: 12 / 11 / 10 / 8 slots at k = 1 / 2 / 4 / 8");
static_assert(kpass_plan_slots(false, 1, false) == 12 && kpass_plan_slots(false, 2, false) == 12 &&
                  kpass_plan_slots(false, 4, false) == 10 && kpass_plan_slots(false, 8, false) == 6,
              "ktoken.md section 1's table, bf16 on sm_90: 12 / 12 / 10 / 6 slots");
static_assert(kpass_plan_slots(true, 1, true) == 4 && kpass_plan_slots(true, 2, true) == 3 &&
                  kpass_plan_slots(true, 2, true, true) == 4 && kpass_plan_slots(true, 4, true) == 2 &&
                  kpass_plan_slots(true, 8, true) == 0,
              "ktoken.md section 1's table, fp8 on sm_120: 4 / 3 (4 with single-buffered C tiles) / 2 / does not fit");
static_assert(kpass_plan_slots(false, 1, true) == 4 && kpass_plan_slots(false, 2, true) == 4 &&
                  kpass_plan_slots(false, 4, true) == 2 && kpass_plan_slots(false, 8, true) == 0,
              "ktoken.md section 1's table, bf16 on sm_120: 4 / 4 / 2 / does not fit");
static_assert(kpass_plan_slots(true, kTcVecsMaxSm120, true, true) >= 4 &&
                  kpass_plan_slots(true, kTcVecsMaxSm120 + 1, true, true) < 4,
              "kTcVecsMaxSm120: the largest k whose sm_120 plan (single-buffered C tiles) keeps kRoundSlots slots");
// The ring of a tensor-core kernel of k vectors: sm_90 §1's slots (k = 1: the configured depth,
// config.cuh's kStagesSm90, which an experiment build may lower; k > 1 no deeper than it either);
// sm_120 its 4 (§1's plan with single-buffered C tiles, as the tensor-core rounds' partials are).
__host__ __device__ constexpr int kpass_stages_sm90(int k) {
  return k == 1 || kpass_plan_slots(true, k, false) > kStagesSm90 ? kStagesSm90 : kpass_plan_slots(true, k, false);
}

// kSm120: the sm_120 configuration (the sm_120a build, or a variant that asks for it on any arch:
// VariantCfg::kSm120Config, so that an sm_90 GPU can run the same ring and choices).
// kTc: the tensor-core GEMV (VariantCfg::kTcGemv: fp8-stream-tc, issue 48's k-pass kernel).
// kK: vectors per pass (VariantCfg::kTcVecs: fp8-stream-tc-k2/-k4/-k8), B's useful columns.
template <class W, KernelKind K, bool kSm120 = kArchSm120, bool kTc = false, int kK = 1>
struct Policy {
  static constexpr bool kBf16 = !W::kRowScale, kE4M3 = W::kRowScale && !W::kBlockScaled, kNvfp4 = W::kBlockScaled;
  static constexpr bool kLong = K != KernelKind::kShort;  // the wide kernel is a long kernel too

  // ring: how thread 0 tests a round's slots, and how long the producer holds at a hop; sm_120's bf16
  // kernels test one slot after another and skip O's pretest (both cost registers at its 96 cap)
  static constexpr bool kSlotTestBatch = kBf16 && !kSm120;          // tests issued back to back (slot_tests_batched)
  static constexpr bool kSlotLanded = kE4M3;                        // the producer's shared count of landed copies
  static constexpr bool kPretestO = kBf16 && !kLong && !kSm120;     // O's first slots tested before the merge's wait
  static constexpr long long kHopHoldCycles = kBf16 ? 1500 : 2000;  // producer's hold per hop mark
  // ring depth (config.cuh): 12 x 16 KB on sm_90, 4 x 16 KB within sm_120's 99 KB per block
  static constexpr int kStages = kSm120 ? kStagesSm120 : kpass_stages_sm90(kK);
  static constexpr int kRingBytes = kStages * kSlotBytes;
  static constexpr int kSmemPerBlock = kSm120 ? kSmemPerBlockSm120 : kSmemPerBlockSm90;
  // MLP-1's gate/up units per round (bf16: 2 slots each, E4M3: 1): 3, or as many as the ring holds
  // whole (a round's slots are all held before any goes back: more than kStages would never land)
  static constexpr int kMlpRoundUnits = 3 * (kBf16 ? 2 : 1) <= kStages ? 3 : kStages / (kBf16 ? 2 : 1);

  // GEMV inputs: E4M3 phases that read f16 words (mask: 1 qkv, 2 O, 4 gate/up, 8 down); NVFP4's
  // layers read half2 words in every phase; the LM head's input is swizzled except under NVFP4
  static constexpr int kE4M3Half2Phases = kE4M3 ? 4 : 0;
  static constexpr bool kHeadInSwizzled = !kNvfp4;
  // the tensor-core GEMV (stream_mma.cuh; notes/ktoken.md "The k-pass kernel"): the K = 1024 rounds
  // of these phases (mask as above: qkv, MLP-1, down) run on mma.sync, their inputs as store_xe's f16
  // words (the mask joins kE4M3Half2Phases'); O and the LM head keep their CUDA-core rounds
  static constexpr bool kTcGemv = kTc;
  static constexpr int kTcPhases = kTc ? 1 | 4 | 8 : 0;
  static_assert(!kTc || kE4M3, "the tensor-core rounds read E4M3 rows (stream_mma.cuh)");
  // k vectors per pass: B's columns 0 .. kVecs - 1 of the tensor-core rounds (stream_mma.cuh)
  static constexpr int kVecs = kK;
  static_assert(kK >= 1 && kK <= kTcVecsMax && (kK == 1 || kTc),
                "k > 1 vectors per pass: the tensor-core rounds, k <= 8");
  static_assert(!kSm120 || kK <= kTcVecsMaxSm120,
                "sm_120 takes k <= 2 vectors per pass (notes/ktoken.md section 1: its 4-slot ring)");
  static constexpr bool kHeadWarp = W::Head::kRowScale;  // E4M3 LM head: warp groups per slot, no round barrier

  // attention: the wide kernel exists for bf16 and E4M3; the merge before O runs on both halves of
  // the block in the long kernels, and reads (m, l) once per warp except NVFP4 (register cap) and
  // sm_120a's bf16 short kernel (it spilled there)
  static constexpr bool kWideKernel = !kNvfp4;
  static constexpr bool kMergeHalves = kLong;
  static constexpr bool kMergeMlLanes = !kNvfp4 && (kLong || kE4M3 || !kSm120);
};

// The kernel kind of a stream_step instantiation.
__host__ __device__ constexpr KernelKind kernel_kind(bool long_kernel, bool wide) {
  return wide ? KernelKind::kWide : long_kernel ? KernelKind::kLong : KernelKind::kShort;
}

}  // namespace monolith
