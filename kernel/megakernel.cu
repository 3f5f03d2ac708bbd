// monolith megakernel: one launch = one Qwen3-0.6B decode step (28 layers + LM head + argmax).
//
// Compile (CI does this for sm_90a and sm_120a through scripts/compile_all.py):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c kernel/megakernel.cu
// The X-ray build is the same source with -DMONOLITH_XRAY (kernel/megakernel_xray.cu). The step
// kernels themselves are kernel/decode_step.cuh; which translation unit compiles which variant's
// kernels (this one: kernel/variant_units.def's Main rows) is that table's, read through
// kernel/step_unit.cuh by every unit.
//
// Two schedules, chosen at compile time by VariantCfg<variant>::kStream: the upstream design
// below (bf16-upstream, and its step-0 A/B bf16-upstream-l2pre), and the streaming schedule
// (bf16-stream), described in kernel/schedule_stream.cuh.
//
// Schedule of the `bf16-upstream` variant (the published qwen_megakernel design, re-implemented):
// a persistent grid of one 512-thread block per SM; per layer
//   qkv      every block recomputes the RMSNorm of the residual (cheaper than a barrier) and
//            computes its contiguous slice of the fused q|k|v rows
//   -- grid barrier 1 --
//   attn     blocks 0..15, one per q head: QK-norm, RoPE, K/V append, attention over the cache;
//            the even head of each KV pair appends K/V and raises a flag the odd head waits on
//            (flag sync 1); meanwhile the other blocks may bulk-prefetch the next phases'
//            weights into L2 (compile-time UpstreamCfg::kL2PrefetchMode; off: it measured slower,
//            results/m1_l2_prefetch_ab.json)
//   -- flag sync 2: all blocks wait until the 16 heads are done --
//   oproj    O-projection rows + residual add, on the 116 blocks that did no attention
//   -- grid barrier 2 --
//   gateup   redundant post-attention RMSNorm, gate/up row pairs, SiLU(gate) * up
//   -- grid barrier 3 --
//   down     down-projection rows + residual add
//   -- grid barrier 4 --
// then the final RMSNorm, the LM-head rows with a per-block argmax, and the last block to finish
// reduces the per-block winners into the token (no fifth barrier: an arrival counter).
// Every reduction runs in a fixed order, so a step is bitwise deterministic.
// Each phase's first weight loads are issued before the barrier or flag that guards its input
// (weights never depend on activations), so the barrier wait overlaps the memory latency.
#include "step_unit.cuh"

namespace monolith {
namespace MONOLITH_BUILD_NS {

// Whether the wide kernel's splits are wider than 64 at this position and grid: k of the rule for
// the smallest group (blocks / kGroups; groups differ by at most one block) within [MIN, MAX].
static bool wide_applies(int blocks, int position) {
  const int k = wide_k(position, blocks / kGroups);
  return k >= kWideMinSlots && k <= kWideSlots;
}

// ---- host side ----------------------------------------------------------------------------
UnitKernelsFn linked_units[kUnitCount] = {};  // (step_unit.cuh)

// The device of the sm_120 family (compute capability 12.x): the host's side of kArchSm120 (the
// extension is built for the device's own arch, sm_90a or sm_120a: monolith/megakernel.py).
static bool device_sm120(int device) {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 12;
}

// One variant's kernels on this device, by its row of kernel/variant_units.def: a Main row's from this
// unit (which compiles them even where the row is never launched, and then hands out none); none for
// another unit's row that is never launched; else that unit's, where it is linked in, except that an
// sm_120-configuration variant on an sm_120 device runs its base variant's kernels (compiled here in
// that configuration there, while its own compile to nothing: stream_compiled).
template <int kVariant>
KernelInfo variant_kernels(bool sm120) {
  using Cfg = VariantCfg<kVariant>;
  constexpr VariantRow row = kVariantRows[kVariant];
  if constexpr (row.unit == kUnitMain) {
    return unit_kernels_of<kUnitMain, kVariant>(sm120);
  } else if constexpr (!row.launched) {
    return kNoKernels;
  } else {
    if constexpr (Cfg::kSm120Config) {
      static_assert(kVariantRows[Cfg::kBaseVariant].unit == kUnitMain, "an sm_120 base variant is Main's");
      if (sm120) return info_of<Cfg::kBaseVariant>(true);
    }
    const UnitKernelsFn unit = linked_units[row.unit];
    return unit != nullptr ? unit(kVariant, sm120) : kNoKernels;
  }
}

static KernelInfo kernel_for(int variant, bool sm120) {  // kNoKernels: not a variant of this build
  switch (variant) {
#define MONOLITH_VARIANT(variant, unit, launched) \
  case variant:                                   \
    return variant_kernels<variant>(sm120);
#include "variant_units.def"
#undef MONOLITH_VARIANT
    default:
      return kNoKernels;
  }
}
static KernelInfo kernel_for_current(int variant) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return kNoKernels;
  return kernel_for(variant, device_sm120(device));
}

// The ring lives in dynamic shared memory beyond the 48 KB default: opt in once per variant
// (the device's opt-in limit is checked by max_coresident_blocks before any launch).
static cudaError_t prepare(const KernelInfo& k) {
  if (k.dynamic_smem == 0) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.dynamic_smem);
  for (const void* fn : {k.fn_long, k.fn_wide})
    if (e == cudaSuccess && fn != nullptr) e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.dynamic_smem);
  return e;
}

cudaError_t launch_step(const StepParams& p, int variant, int blocks, int position, cudaStream_t stream) {
  const KernelInfo k = kernel_for_current(variant);
  const int min_blocks = k.stream ? kMinStreamBlocks : kMinBlocks;
  if (k.fn == nullptr || blocks < min_blocks || blocks > kMaxGrid) return cudaErrorInvalidValue;
  // a row-scaled variant without its codes and scales would read through null pointers
  if (k.row_scaled && (p.codes == nullptr || p.row_scales == nullptr || p.embed_codes == nullptr ||
                       p.embed_scales == nullptr))
    return cudaErrorInvalidValue;
  cudaError_t e = prepare(k);
  if (e != cudaSuccess) return e;
  void* args[] = {const_cast<StepParams*>(&p)};
  // the host's position picks the kernel (each reads its own position from SyncState, and both are
  // correct at any position; a host count that disagreed would give the other kernel's summation
  // order above 4 partials, and MegakernelEngine.check raises on such a disagreement anyway)
  const void* fn = k.fn_long != nullptr && position >= kLongKernelFrom ? k.fn_long : k.fn;
  if (k.fn_wide != nullptr && position >= kLongKernelFrom && wide_applies(blocks, position)) fn = k.fn_wide;
  return cudaLaunchKernel(fn, dim3(blocks), dim3(k.threads), args, size_t(k.dynamic_smem), stream);
}

int max_coresident_blocks(int variant, int device, cudaError_t* err) {
  const KernelInfo k = kernel_for(variant, device_sm120(device));
  if (k.fn == nullptr) {
    *err = cudaErrorInvalidValue;
    return 0;
  }
  int sms = 0, optin = 0;
  *err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (*err != cudaSuccess) return 0;
  // the grid must fit with every kernel of the variant (decode_step, decode_step_long, decode_step_wide)
  const void* fns[3] = {k.fn, k.fn_long, k.fn_wide};
  for (const void* fn : fns) {
    if (fn == nullptr) continue;
    cudaFuncAttributes a{};
    *err = cudaFuncGetAttributes(&a, fn);
    if (*err != cudaSuccess) return 0;
    if (int(a.sharedSizeBytes) + k.dynamic_smem > optin) return 0;  // cannot launch at all on this GPU
  }
  *err = prepare(k);
  if (*err != cudaSuccess) return 0;
  int per_sm = 1 << 30;  // the smallest of them (k.fn is never null)
  for (const void* fn : fns) {
    if (fn == nullptr) continue;
    int n = 0;
    *err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, k.threads, size_t(k.dynamic_smem));
    if (*err != cudaSuccess) return 0;
    if (n < per_sm) per_sm = n;
  }
  *err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return *err == cudaSuccess ? per_sm * sms : 0;
}

cudaError_t kernel_attributes(int variant, cudaFuncAttributes* out) {
  const KernelInfo k = kernel_for_current(variant);
  if (k.fn == nullptr) return cudaErrorInvalidValue;
  return cudaFuncGetAttributes(out, k.fn);
}

}  // namespace MONOLITH_BUILD_NS
}  // namespace monolith
