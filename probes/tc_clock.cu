// Probe: does issuing tensor-core instructions lower the SM clock on this GPU, and how few are
// enough? The ninth session found it twice (NOTES.md): probes/attn_split.cu's A5 (scores by
// mma.sync) ran at 1.66-1.73 GHz while A0-A4 in the same process ran at 1.98, and the megakernel
// with MONOLITH_ATTN_MMA (a few mma.sync per layer, in the attention splits only) traced at 1.94
// GHz with a clock fit residual of 170 ns rms (11 ns without): the clock moves during the token.
// A tensor-core GEMV would cut a round's instruction issue ~8x, but not if every cycle of the
// latency-bound rest of the token gets ~15 % longer; this probe measures that trade directly.
//   Each of 132 x 512 threads runs the same FFMA loop (8 independent chains per thread) for a
//   fixed number of iterations; every `period` iterations each warp of the first `mma_warps`
//   warps also issues one mma.sync.m16n8k16 (bf16, fp32 accumulate, register operands: no memory
//   traffic). period 0: no mma at all. Block 0's thread 0 reads clock64 and %globaltimer at the
//   start and the end: the SM clock over the run = cycles / ns; the run's time is the kernel's.
//   Each configuration runs 3 times; the table gives the median clock and time.
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I probes \
//          -o /tmp/tc_clock probes/tc_clock.cu
// Run:   /tmp/tc_clock [--json] [--iters N]      (~2 ms per run at the default; seconds in all)
#define PROBE_NAME "tc_clock"
#include <cstring>
#include <vector>

#include "probe_common.cuh"

constexpr int kThreads = 512, kWarps = kThreads / 32;

struct Params {
  unsigned long long* clk;  // [4]: block 0's globaltimer and clock64 at start and end
  float* sink;              // one value per thread (keeps the chains alive)
  int iters, period, mma_warps;
};

__device__ __forceinline__ void mma_reg(float (&d)[4], uint32_t a, uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %4, %4, %4}, {%5, %5}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a), "r"(b));
}

__global__ void __launch_bounds__(kThreads, 1) tc_clock_kernel(Params p) {
  const int tid = threadIdx.x, warp = tid >> 5;
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[0] = globaltimer();
    p.clk[1] = clock64();
  }
  float f[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = float(tid + i) * 1e-3f;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t a = 0x3f803f80u ^ uint32_t(tid & 1), b = 0x3c003c00u;  // bf16 pairs ~1.0 and ~0.0078
  const bool mma_on = p.period > 0 && warp < p.mma_warps;
#pragma unroll 1
  for (int it = 0; it < p.iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = fmaf(f[i], 0.999f, 1e-4f);
    if (mma_on && it % p.period == 0) mma_reg(d, a + uint32_t(it & 1), b);  // warp-uniform branch
  }
  __syncthreads();
  if (blockIdx.x == 0 && tid == 0) {
    p.clk[2] = globaltimer();
    p.clk[3] = clock64();
  }
  float s = d[0] + d[1] + d[2] + d[3];
#pragma unroll
  for (int i = 0; i < 8; ++i) s += f[i];
  p.sink[size_t(blockIdx.x) * kThreads + tid] = s;
}

int main(int argc, char** argv) {
  const int iters = probe_int_arg(argc, argv, "--iters", 400000, 1000, 100000000);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int G = prop.multiProcessorCount;
  Params p{};
  CUDA_CHECK(cudaMalloc(&p.clk, 4 * 8));
  CUDA_CHECK(cudaMalloc(&p.sink, size_t(G) * kThreads * 4));
  p.iters = iters;
  // (period, warps issuing mma): none, then rarer to denser, then one warp only; the baseline
  // again at the end (does the clock come back?)
  const int cfgs[][2] = {{0, 0}, {4096, kWarps}, {256, kWarps}, {16, kWarps}, {1, kWarps}, {16, 1}, {1, 1}, {0, 0}};
  const int ncfg = int(sizeof(cfgs) / sizeof(cfgs[0]));
  if (!g_json) printf("device: %s (%d SMs), %d blocks x %d threads, %d iterations of 8 FFMA per thread\n", prop.name, G, G,
                      kThreads, iters);
  if (!g_json) printf("%8s %10s | %10s %10s %10s\n", "period", "mma warps", "SM GHz", "run ms", "mma/SM/us");
  if (g_json) printf("{\"probe\": \"tc_clock\", \"device\": \"%s\", \"ok\": true, \"iters\": %d, \"rows\": [", prop.name, iters);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  tc_clock_kernel<<<G, kThreads>>>(p);  // warm-up
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int c = 0; c < ncfg; ++c) {
    p.period = cfgs[c][0];
    p.mma_warps = cfgs[c][1];
    std::vector<double> ghz, ms;
    for (int r = 0; r < 3; ++r) {
      CUDA_CHECK(cudaEventRecord(e0));
      tc_clock_kernel<<<G, kThreads>>>(p);
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      unsigned long long clk[4];
      CUDA_CHECK(cudaMemcpy(clk, p.clk, sizeof(clk), cudaMemcpyDeviceToHost));
      float t;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ghz.push_back(double(clk[3] - clk[1]) / double(clk[2] - clk[0]));
      ms.push_back(t);
    }
    const double g = probe_quantile(ghz, 0.5), t = probe_quantile(ms, 0.5);
    const double mma_rate = p.period ? double(iters / p.period) * p.mma_warps / (t * 1e3) : 0.0;  // per SM per us
    if (g_json)
      printf("%s{\"period\": %d, \"mma_warps\": %d, \"sm_ghz\": %.4f, \"run_ms\": %.4f, \"mma_per_sm_per_us\": %.2f}",
             c ? ", " : "", p.period, p.mma_warps, g, t, mma_rate);
    else
      printf("%8d %10d | %10.4f %10.4f %10.2f\n", p.period, p.mma_warps, g, t, mma_rate);
  }
  if (g_json) printf("]}\n");
  return 0;
}
