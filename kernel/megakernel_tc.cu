// The tensor-core GEMV variant (fp8-stream-tc: VariantCfg<kVariantFp8StreamTc> in kernel/decode_step.cuh,
// Policy::kTcGemv, kernel/stream_mma.cuh): its kernel, in a translation unit of its own
// (kernel/variant_units.def's Tc row), so that only an extension that runs it compiles it
// (kernel/variants.json "config": "tc"; monolith/megakernel.py load_extension, scripts/compile_all.py),
// as kernel/megakernel_sm120.cu holds the sm_120 configuration's. Linked into an extension, it hands
// megakernel.cu's kernel_for its kernel (MONOLITH_STEP_UNIT: a static initializer).
// The X-ray build: kernel/megakernel_tc_xray.cu.
#include "step_unit.cuh"

MONOLITH_STEP_UNIT(Tc)
