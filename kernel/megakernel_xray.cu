// The X-ray build of the megakernel: the same source with the tracer compiled in (kernel/xray.cuh).
// Its symbols live in namespace monolith::xray_build, so one extension carries both builds.
#define MONOLITH_XRAY 1
#include "megakernel.cu"
