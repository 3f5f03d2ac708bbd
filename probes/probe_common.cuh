// What every probe shares: the `--json` switch and a CUDA_CHECK that also reports the failure as
// the probe's JSON line, so probes/run.py records it. Define PROBE_NAME before including.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifndef PROBE_NAME
#error "define PROBE_NAME (the probe's JSON name) before including probe_common.cuh"
#endif

static bool g_json = false;

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__,       \
              __LINE__, cudaGetErrorString(err_));                                             \
      if (g_json) printf("{\"probe\": \"" PROBE_NAME "\", \"ok\": false, \"error\": \"%s\"}\n", \
                         cudaGetErrorName(err_));                                              \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
