// The sm_120 configuration's variants on any arch (bf16-stream-sm120, fp8-stream-sm120,
// nvfp4-stream-sm120: Sm120Cfg in kernel/decode_step.cuh): their kernels, in a translation unit of
// their own (kernel/variant_units.def's Sm120 rows), so that only an extension that runs them compiles
// them (kernel/variants.json "config_sources"; monolith/megakernel.py load_extension,
// scripts/compile_all.py). Linked into an extension, it hands megakernel.cu's kernel_for its kernels
// (MONOLITH_STEP_UNIT: a static initializer). On an sm_120 device kernel_for launches the base variants'
// kernels instead, which are this configuration there (here they compile to nothing on sm_120a:
// stream_compiled).
// The X-ray build: kernel/megakernel_sm120_xray.cu.
#include "step_unit.cuh"

MONOLITH_STEP_UNIT(Sm120)
