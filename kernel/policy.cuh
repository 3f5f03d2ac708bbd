// monolith: the streaming kernels' measured choices, one policy per (weight format x kernel x arch).
//
// Every field is a compile-time constant of the three keys, so each kernel instantiates only the
// code its policy picks. The measurements behind each choice (and the alternatives that lost) are
// rows of docs/EXPERIMENTS.md; the fields name the row.
#pragma once
#include "dequant.cuh"

namespace monolith {

// The three kernels of a streaming variant (megakernel.cu): decode_step below kLongKernelFrom,
// decode_step_long from there, decode_step_wide where its wider attention splits apply.
enum class KernelKind { kShort, kLong, kWide };

// This compilation pass is sm_120a's (where registers are tighter: ptxas at usage level 0).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr bool kArchSm120 = true;
#else
constexpr bool kArchSm120 = false;
#endif

template <class W, KernelKind K, bool kSm120 = kArchSm120>
struct Policy {
  static constexpr bool kBf16 = !W::kRowScale, kE4M3 = W::kRowScale && !W::kBlockScaled, kNvfp4 = W::kBlockScaled;
  static constexpr bool kLong = K != KernelKind::kShort;  // the wide kernel is a long kernel too

  // ring: how thread 0 tests a round's slots, and how long the producer holds at a hop
  static constexpr bool kSlotTestBatch = kBf16;          // tests issued back to back (slot_tests_batched)
  static constexpr bool kSlotLanded = kE4M3;             // the producer's shared count of landed copies
  static constexpr bool kPretestO = kBf16 && !kLong;     // O's first slots tested before the merge's wait
  static constexpr long long kHopHoldCycles = kBf16 ? 1500 : 2000;  // producer's hold per hop mark

  // GEMV inputs: E4M3 phases that read f16 words (mask: 1 qkv, 2 O, 4 gate/up, 8 down); NVFP4's
  // layers read half2 words in every phase; the LM head's input is swizzled except under NVFP4
  static constexpr int kE4M3Half2Phases = kE4M3 ? 4 : 0;
  static constexpr bool kHeadInSwizzled = !kNvfp4;
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
