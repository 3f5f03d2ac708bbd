// The X-ray build of the sm_120 configuration's variants (kernel/megakernel_sm120.cu), in
// namespace monolith::xray_build beside kernel/megakernel_xray.cu.
#define MONOLITH_XRAY 1
#include "megakernel_sm120.cu"
