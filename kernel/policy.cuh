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

// kSm120: the sm_120 configuration (the sm_120a build, or a variant that asks for it on any arch:
// VariantCfg::kSm120Config, so that an sm_90 GPU can run the same ring and choices).
// kTc: the tensor-core GEMV (VariantCfg::kTcGemv: fp8-stream-tc, issue 48's k-pass kernel at k = 1).
template <class W, KernelKind K, bool kSm120 = kArchSm120, bool kTc = false>
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
  static constexpr int kStages = kSm120 ? kStagesSm120 : kStagesSm90;
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
