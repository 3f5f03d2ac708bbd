// The sm_120 configuration's variants on any arch (bf16-stream-sm120, fp8-stream-sm120,
// nvfp4-stream-sm120: Sm120Cfg in kernel/decode_step.cuh): their kernels, in a translation unit of
// their own, so that only an extension that runs them compiles them (kernel/variants.json
// "config_sources"; monolith/megakernel.py load_extension, scripts/compile_all.py). Linked into an
// extension, it hands megakernel.cu its kernels through sm120_kernels (a static initializer). On an
// sm_120 device megakernel.cu launches the base variants' kernels instead, which are this
// configuration there (here they compile to nothing on sm_120a: stream_compiled).
// The X-ray build: kernel/megakernel_sm120_xray.cu.
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

static KernelInfo sm120_config_kernels(int variant) {  // on a device outside the sm_120 family
  switch (variant) {
    case kVariantBf16StreamSm120:
      return info_of<kVariantBf16StreamSm120>(false);
    case kVariantFp8StreamSm120:
      return info_of<kVariantFp8StreamSm120>(false);
    case kVariantNvfp4StreamSm120:
      return info_of<kVariantNvfp4StreamSm120>(false);
    default:
      return {nullptr, nullptr, nullptr, 0, 0, false, false};
  }
}
[[maybe_unused]] static const bool sm120_registered = (sm120_kernels = &sm120_config_kernels, true);

}  // namespace plain_build / xray_build
}  // namespace monolith
