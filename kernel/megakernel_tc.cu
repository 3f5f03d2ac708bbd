// The tensor-core GEMV variant (fp8-stream-tc: VariantCfg<kVariantFp8StreamTc> in kernel/decode_step.cuh,
// Policy::kTcGemv, kernel/stream_mma.cuh): its kernel, in a translation unit of its own, so that only an
// extension that runs it compiles it (kernel/variants.json "config": "tc"; monolith/megakernel.py
// load_extension, scripts/compile_all.py), as kernel/megakernel_sm120.cu holds the sm_120 configuration's.
// Linked into an extension, it hands megakernel.cu its kernel through tc_kernels (a static initializer).
// The X-ray build: kernel/megakernel_tc_xray.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "config.cuh"
#include "dequant.cuh"
#include "loads.cuh"
#include "megakernel.cuh"
#include "policy.cuh"
#include "ring.cuh"
#include "sync.cuh"
#include "xray.cuh"
#include "xvec.cuh"

namespace monolith {
#if defined(MONOLITH_XRAY)
namespace xray_build {
#else
namespace plain_build {
#endif

#include "decode_step.cuh"

static KernelInfo tc_config_kernels(int variant, bool device_sm120) {
  if (variant == kVariantFp8StreamTc) return info_of<kVariantFp8StreamTc>(device_sm120);
  return {nullptr, nullptr, nullptr, 0, 0, false, false};
}
[[maybe_unused]] static const bool tc_registered = (tc_kernels = &tc_config_kernels, true);

}  // namespace plain_build / xray_build
}  // namespace monolith
