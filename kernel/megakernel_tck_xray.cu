// The X-ray build of the k-vector tensor-core variants (kernel/megakernel_tck.cu), in namespace
// monolith::xray_build beside kernel/megakernel_xray.cu.
#define MONOLITH_XRAY 1
#include "megakernel_tck.cu"
