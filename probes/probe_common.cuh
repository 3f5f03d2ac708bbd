// What every probe shares: the `--json` switch and a CUDA_CHECK that also reports the failure as
// the probe's JSON line, so probes/run.py records it. Define PROBE_NAME before including.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
static inline double probe_median(const std::vector<double>& v) { return probe_quantile(v, 0.5); }

// The command line of a probe with one integer option: `--json` and `opt N` (default `def`, in
// [lo, hi]). Anything else prints the usage, a value out of range says the range; both exit 2.
static inline int probe_int_arg(int argc, char** argv, const char* opt, int def, int lo, int hi) {
  int v = def;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], opt) && i + 1 < argc) v = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--json] [%s N]\n", argv[0], opt);
      exit(2);
    }
  }
  if (v < lo || v > hi) {
    fprintf(stderr, PROBE_NAME ": %s %d..%d\n", opt, lo, hi);
    exit(2);
  }
  return v;
}

// Stamps of one round, kept per block as [block][n] (%globaltimer ns): the earliest and latest of
// column `col` over the G blocks. The hop probes report every column against the latest of column 0
// (the last producer).
struct ProbeStampRange {
  unsigned long long lo, hi;
};
static inline ProbeStampRange probe_stamp_range(const unsigned long long* round, int G, int n, int col) {
  ProbeStampRange r{~0ull, 0ull};
  for (int b = 0; b < G; ++b) {
    r.lo = std::min(r.lo, round[size_t(b) * n + col]);
    r.hi = std::max(r.hi, round[size_t(b) * n + col]);
  }
  return r;
}
// Microseconds from ns stamp `from` to ns stamp `to` (negative when `to` is earlier).
static inline double probe_us(unsigned long long from, unsigned long long to) { return (double(to) - double(from)) / 1e3; }

// Exit 1 with a clear message when a block cannot have `bytes` of dynamic shared memory here.
static inline void probe_require_smem(const cudaDeviceProp& prop, size_t bytes) {
  if (prop.sharedMemPerBlockOptin < bytes) {
    fprintf(stderr, PROBE_NAME ": needs %zu B of shared memory per block (has %zu)\n", bytes,
            size_t(prop.sharedMemPerBlockOptin));
    exit(1);
  }
}

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The producers' spread of the hop probes: block b sleeps a pseudo-random 0..max_ns before round r
// (the same hash in every probe, so their delay columns are comparable).
__device__ __forceinline__ void probe_spread_sleep(int b, int r, int max_ns) {
  if (max_ns <= 0) return;
  uint32_t x = uint32_t(b) * 0x9E3779B1u ^ uint32_t(r) * 0x85EBCA6Bu;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  __nanosleep(x % uint32_t(max_ns));
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
