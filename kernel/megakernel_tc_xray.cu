// The X-ray build of the tensor-core variant (kernel/megakernel_tc.cu), in namespace
// monolith::xray_build beside kernel/megakernel_xray.cu.
#define MONOLITH_XRAY 1
#include "megakernel_tc.cu"
