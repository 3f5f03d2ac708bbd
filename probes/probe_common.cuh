// What every probe shares: the `--json` switch and a CUDA_CHECK that also reports the failure as
// the probe's JSON line, so probes/run.py records it. Define PROBE_NAME before including.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// Quantile q of the values (the element at floor(q * n), clamped; q = 0.5: the median); 0 when
// there are none. Host side, for the probes' summaries.
static inline double probe_quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * v.size()))];
}

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread's bounded wait for a grid counter (the arrive/wait half of a grid barrier; the
// probes that need one share it). Arrives with a release add, spins on acquire loads until
// `*count` reaches `target` (wrap-safe), and looks at the clock and the abort flag only every 64
// spins. Returns 0 when released, 1 when another block aborted, 2 when `timeout_ns` passed
// (it then sets the abort flag so every other block stops too).
__device__ __forceinline__ int probe_arrive_and_wait(unsigned int* count, unsigned int* abort, unsigned int target,
                                                     uint64_t timeout_ns) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
  const uint64_t deadline = globaltimer() + timeout_ns;
  unsigned int spins = 0;
  for (;;) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    if (int(v - target) >= 0) return 0;
    if ((++spins & 63u) == 0) {
      if (*(volatile unsigned int*)abort) return 1;
      if (globaltimer() > deadline) {
        atomicExch(abort, 1u);
        return 2;
      }
    }
  }
}
