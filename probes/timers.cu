/*
Probe: the two clocks the X-ray stamps with, %globaltimer and clock64.

1. %globaltimer granularity: one thread reads it back to back; the smallest nonzero delta is the
   tick, and (last - first) / (number of changes) the mean update interval.
2. clock64 rate: one block per SM reads both clocks, spins for an interval of %globaltimer time,
   reads both again: cycles per ns (= SM clock in GHz while the spin ran), per SM.
3. Cross-SM consistency: one block per SM, co-resident (cooperative launch), R rounds of a grid
   barrier; right after each release every block's thread 0 reads %globaltimer, clock64 and %smid.
   The spread (max - min) of %globaltimer within a round bounds the skew between SMs (it also
   contains how long the release takes to reach each SM). For clock64: the raw spread of the
   counters at that common event says whether SMs' clock64 run in step; the drift of each SM's
   offset against %globaltimer over the rounds (clock64_drift_spread_ns) and its jitter say whether
   one offset per SM aligns clock64 stamps across SMs (the X-ray's alignment method).

Compile:
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o timers probes/timers.cu
Run:
  ./timers [--json] [--rounds 200] [--interval-ms 20]
*/
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define PROBE_NAME "timers"
#include "probe_common.cuh"

__device__ __forceinline__ uint64_t clk64() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}
__device__ __forceinline__ uint32_t smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// 1. granularity
__global__ void k_granularity(int n, uint64_t* out) {
  uint64_t prev = globaltimer(), first = prev, min_d = ~0ull, max_d = 0;
  uint64_t changes = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t t = globaltimer();
    if (t != prev) {
      const uint64_t d = t - prev;
      min_d = d < min_d ? d : min_d;
      max_d = d > max_d ? d : max_d;
      ++changes;
      prev = t;
    }
  }
  out[0] = min_d;
  out[1] = max_d;
  out[2] = changes;
  out[3] = prev - first;
}

// 2. clock64 rate per SM
__global__ void k_clock_rate(uint64_t interval_ns, double* rate, uint32_t* sm) {
  if (threadIdx.x != 0) return;
  const uint64_t g0 = globaltimer(), c0 = clk64();
  uint64_t g1;
  do { g1 = globaltimer(); } while (g1 - g0 < interval_ns);
  const uint64_t c1 = clk64();
  rate[blockIdx.x] = double(c1 - c0) / double(g1 - g0);
  sm[blockIdx.x] = smid();
}

// 3. cross-SM stamps after barrier releases (bounded spin: probe_common.cuh's probe_arrive_and_wait, as in probes/barrier.cu)
struct Ctl { unsigned int count, abort; };

__global__ void k_cross(Ctl* ctl, int rounds, uint64_t timeout_ns, uint64_t* g, uint64_t* c, uint32_t* sm) {
  if (threadIdx.x != 0) return;  // one thread per block; nothing else to wait for
  const unsigned int nb = gridDim.x;
  for (int r = 0; r < rounds; ++r) {
    if (probe_arrive_and_wait(&ctl->count, &ctl->abort, nb * unsigned(r + 1), timeout_ns) != 0) return;
    const uint64_t gt = globaltimer(), ct = clk64();
    g[size_t(r) * nb + blockIdx.x] = gt;
    c[size_t(r) * nb + blockIdx.x] = ct;
    if (r == 0) sm[blockIdx.x] = smid();
  }
}

static double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int main(int argc, char** argv) {
  int rounds = 200;
  double interval_ms = 20;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::max(2, atoi(argv[++i]));
    else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) interval_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: timers [--json] [--rounds R] [--interval-ms MS]\n");
      return 0;
    }
  }
  int dev = 0, sms = 0, coop = 0, clock_khz = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev) != cudaSuccess) {
    clock_khz = 0;
    (void)cudaGetLastError();
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  // 1
  uint64_t* d_gran;
  CUDA_CHECK(cudaMalloc(&d_gran, 4 * sizeof(uint64_t)));
  k_granularity<<<1, 1>>>(1000, d_gran);  // warm-up
  k_granularity<<<1, 1>>>(1 << 20, d_gran);
  CUDA_CHECK(cudaGetLastError());
  uint64_t gran[4];
  CUDA_CHECK(cudaMemcpy(gran, d_gran, sizeof gran, cudaMemcpyDeviceToHost));
  const double mean_tick = gran[2] ? double(gran[3]) / double(gran[2]) : 0.0;

  // 2
  double* d_rate;
  uint32_t* d_sm;
  CUDA_CHECK(cudaMalloc(&d_rate, sms * sizeof(double)));
  CUDA_CHECK(cudaMalloc(&d_sm, sms * sizeof(uint32_t)));
  k_clock_rate<<<sms, 32>>>(uint64_t(interval_ms * 1e6), d_rate, d_sm);
  CUDA_CHECK(cudaGetLastError());
  std::vector<double> rate(sms);
  CUDA_CHECK(cudaMemcpy(rate.data(), d_rate, sms * sizeof(double), cudaMemcpyDeviceToHost));
  const double rate_med = med(rate);
  const double rate_min = *std::min_element(rate.begin(), rate.end());
  const double rate_max = *std::max_element(rate.begin(), rate.end());

  // 3
  bool cross_ok = false, cross_timeout = false;
  double c64_raw_spread_ns = 0, spread_med = 0, spread_min = 0, spread_max = 0, off_spread = 0, off_jitter = 0, sm_mean_abs = 0;
  int distinct_sms = 0;
  if (coop) {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_cross, 32, 0));
    if (per_sm >= 1) {
      Ctl* d_ctl;
      uint64_t *d_g, *d_c;
      uint32_t* d_s;
      const size_t n = size_t(rounds) * sms;
      CUDA_CHECK(cudaMalloc(&d_ctl, sizeof(Ctl)));
      CUDA_CHECK(cudaMalloc(&d_g, n * 8));
      CUDA_CHECK(cudaMalloc(&d_c, n * 8));
      CUDA_CHECK(cudaMalloc(&d_s, sms * 4));
      CUDA_CHECK(cudaMemset(d_ctl, 0, sizeof(Ctl)));
      uint64_t timeout_ns = 2000000000ull;
      void* args[] = {&d_ctl, &rounds, &timeout_ns, &d_g, &d_c, &d_s};
      CUDA_CHECK(cudaLaunchCooperativeKernel((void*)k_cross, dim3(sms), dim3(32), args, 0, 0));
      CUDA_CHECK(cudaDeviceSynchronize());
      Ctl ctl;
      CUDA_CHECK(cudaMemcpy(&ctl, d_ctl, sizeof ctl, cudaMemcpyDeviceToHost));
      cross_timeout = ctl.abort != 0;
      if (!cross_timeout) {
        std::vector<uint64_t> g(n), c(n);
        std::vector<uint32_t> s(sms);
        CUDA_CHECK(cudaMemcpy(g.data(), d_g, n * 8, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(c.data(), d_c, n * 8, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(s.data(), d_s, sms * 4, cudaMemcpyDeviceToHost));
        std::vector<uint32_t> su(s);
        std::sort(su.begin(), su.end());
        distinct_sms = int(std::unique(su.begin(), su.end()) - su.begin());
        std::vector<double> spreads;
        std::vector<double> off_sum(sms, 0.0), off_sq(sms, 0.0), gdev_sum(sms, 0.0);
        const int skip = 1;  // round 0 includes the launch skew; leave it out
        for (int r = skip; r < rounds; ++r) {
          uint64_t lo = ~0ull, hi = 0;
          double gmean = 0;
          for (int b = 0; b < sms; ++b) {
            const uint64_t v = g[size_t(r) * sms + b];
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            gmean += double(v - g[size_t(r) * sms]);
          }
          gmean /= sms;
          spreads.push_back(double(hi - lo));
          for (int b = 0; b < sms; ++b) {
            const double gv = double(g[size_t(r) * sms + b] - g[0]);
            const double cv = double(c[size_t(r) * sms + b] - c[b]);  // own-SM cycles since round 0
            // offset (ns) of this SM's clock64 against globaltimer, relative to round 0
            const double off = cv / rate_med - gv;
            off_sum[b] += off;
            off_sq[b] += off * off;
            gdev_sum[b] += double(g[size_t(r) * sms + b] - g[size_t(r) * sms]) - gmean;
          }
        }
        const int m = rounds - skip;
        spread_med = med(spreads);
        spread_min = *std::min_element(spreads.begin(), spreads.end());
        spread_max = *std::max_element(spreads.begin(), spreads.end());
        double omin = 1e300, omax = -1e300;
        for (int b = 0; b < sms; ++b) {
          const double mean = off_sum[b] / m;
          const double sd = std::sqrt(std::max(0.0, off_sq[b] / m - mean * mean));
          omin = std::min(omin, mean);
          omax = std::max(omax, mean);
          off_jitter = std::max(off_jitter, sd);
          sm_mean_abs = std::max(sm_mean_abs, std::fabs(gdev_sum[b] / m));
        }
        off_spread = omax - omin;
        // are clock64 counters of different SMs in step? spread of raw clock64 at one common event
        uint64_t clo = ~0ull, chi = 0;
        for (int b = 0; b < sms; ++b) {
          clo = std::min(clo, c[size_t(skip) * sms + b]);
          chi = std::max(chi, c[size_t(skip) * sms + b]);
        }
        c64_raw_spread_ns = double(chi - clo) / rate_med;
        cross_ok = true;
      }
    }
  }

  const bool ok = gran[0] != ~0ull && cross_ok && !cross_timeout;
  if (g_json) {
    printf("{\"probe\": \"timers\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, ", ok ? "true" : "false",
           prop.name, sms);
    printf("\"globaltimer\": {\"min_delta_ns\": %llu, \"max_delta_ns\": %llu, \"changes\": %llu, "
           "\"span_ns\": %llu, \"mean_update_ns\": %.2f}, ",
           (unsigned long long)gran[0], (unsigned long long)gran[1], (unsigned long long)gran[2],
           (unsigned long long)gran[3], mean_tick);
    printf("\"clock64\": {\"interval_ms\": %g, \"cycles_per_ns_median\": %.5f, \"cycles_per_ns_min\": %.5f, "
           "\"cycles_per_ns_max\": %.5f, \"attr_clock_rate_khz\": %d}, ",
           interval_ms, rate_med, rate_min, rate_max, clock_khz);
    printf("\"cross_sm\": {\"ok\": %s, \"timeout\": %s, \"blocks\": %d, \"distinct_smids\": %d, \"rounds\": %d, "
           "\"globaltimer_spread_ns_median\": %.1f, \"globaltimer_spread_ns_min\": %.1f, "
           "\"globaltimer_spread_ns_max\": %.1f, \"globaltimer_max_mean_sm_offset_ns\": %.1f, "
           "\"clock64_raw_spread_ns\": %.1f, \"clock64_drift_spread_ns\": %.1f, \"clock64_offset_jitter_ns\": %.1f}}\n",
           cross_ok ? "true" : "false", cross_timeout ? "true" : "false", sms, distinct_sms, rounds, spread_med,
           spread_min, spread_max, sm_mean_abs, c64_raw_spread_ns, off_spread, off_jitter);
  } else {
    printf("globaltimer: min nonzero delta %llu ns, mean update %.1f ns (%llu changes)\n",
           (unsigned long long)gran[0], mean_tick, (unsigned long long)gran[2]);
    printf("clock64: %.4f cycles/ns median over %d SMs (min %.4f, max %.4f); attribute clock %d kHz\n", rate_med, sms,
           rate_min, rate_max, clock_khz);
    if (cross_ok)
      printf("cross-SM globaltimer after barrier release: spread median %.0f ns (min %.0f, max %.0f); "
             "largest mean per-SM offset %.0f ns; clock64 raw spread %.0f ns, drift spread %.0f ns, jitter %.0f ns\n",
             spread_med, spread_min, spread_max, sm_mean_abs, c64_raw_spread_ns, off_spread, off_jitter);
    else
      printf("cross-SM check: %s\n", cross_timeout ? "TIMEOUT (barrier spin expired)" : "not run (no cooperative launch)");
  }
  return ok ? 0 : 1;
}
