// Probe: what one mbarrier operation, one global store and one L2 load cost a thread while the
// copy engine lands bulk copies in the same SM. The sixth session's sub-interval X-ray
// (MONOLITH_XRAY_SUB, NOTES.md) timed thread 0's test of a phase's landed slots at ~0.15 us per
// slot and a phase end's global stores at ~0.25 us while the ring streams, against tens of cycles
// one would expect; testing the slots from several lanes at once changed nothing. This probe
// times each operation alone, with 0, 1, 4 and 12 copies of 16 KB in flight per SM (one block
// per SM; warp 1 lane 0 keeps the ring full as the kernel's producer does), so the next change
// (fewer mbarrier operations per round, fewer stores at a phase end) is chosen on numbers.
//   test   mbarrier.test_wait.parity on a barrier whose phase completed long ago (no copy
//          completes on it), each result branched on before the next test (the kernel's shape)
//   arrive mbarrier.arrive on a barrier that never completes (count 2^20 - 1), back to back
//   store  st.relaxed.gpu.global.b64 to this block's own line, back to back (issue cost)
//   load   ld.relaxed.gpu.global.b64 of one L2-resident word (8 zero words: the address
//          depends on the previous value, which stays 0), one round trip each
//   alu    a dependent integer add chain (the clock's own overhead)
// Cycles per operation: clock64 around 64 operations, median over 200 repetitions and blocks.
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I kernel -I probes \
//          -o /tmp/mbar_cost probes/mbar_cost.cu
// Run:   /tmp/mbar_cost [--json] [--reps 200]      (seconds on an H200)
#define PROBE_NAME "mbar_cost"
#include <algorithm>
#include <cstring>
#include <vector>

#include "probe_common.cuh"
#include "ring.cuh"

using monolith::bulk_copy_g2s;
using monolith::l2_evict_first_policy;
using monolith::mbar_arrive;
using monolith::mbar_arrive_expect_tx;
using monolith::mbar_init;
using monolith::mbar_test_wait;
using monolith::mbar_try_wait;

constexpr int kThreads = 64;                                  // warp 0: the measurer; warp 1: the loader
constexpr int kSlots = 12, kSlotBytes = 16 * 1024;            // the kernel's ring: 192 KB
constexpr size_t kLoadBufBytes = size_t(1) << 30;             // far larger than the 50 MB L2
constexpr int kOps = 5, kPerRep = 64;
constexpr const char* kOpNames[kOps] = {"test", "arrive", "store", "load", "alu"};

struct Params {
  const uint8_t* load_buf;
  unsigned long long* word;     // one L2-resident word (load)
  unsigned long long* lines;    // [blocks][16] (store)
  unsigned long long* cycles;   // [inflight level][op][blocks][reps]
  int reps, inflight, level, blocks;
  unsigned long long timeout_cycles;
};

__device__ void loader(const Params& p, uint8_t* ring, uint64_t* full, volatile int* stop) {
  if (p.inflight == 0) return;
  const uint64_t pol = l2_evict_first_policy();
  const size_t chunks = kLoadBufBytes / kSlotBytes;
  size_t c = size_t(blockIdx.x) * 997;
  uint32_t k = 0;
  for (; !*stop; ++k) {
    const int s = int(k % p.inflight);
    if (k >= uint32_t(p.inflight)) {  // the copy that used this slot has landed: reuse it at once
      const uint32_t par = ((k / p.inflight) - 1u) & 1u;
      const long long t0 = clock64();
      while (!mbar_try_wait(&full[s], par))
        if ((unsigned long long)(clock64() - t0) > p.timeout_cycles) return;
    }
    mbar_arrive_expect_tx(&full[s], kSlotBytes);
    bulk_copy_g2s(ring + size_t(s) * kSlotBytes, p.load_buf + (c++ % chunks) * kSlotBytes, kSlotBytes, &full[s], pol);
  }
  for (uint32_t j = k > uint32_t(p.inflight) ? k - p.inflight : 0u; j < k; ++j) {  // drain before exit
    const long long t0 = clock64();
    while (!mbar_try_wait(&full[j % p.inflight], (j / p.inflight) & 1u))
      if ((unsigned long long)(clock64() - t0) > p.timeout_cycles) break;
  }
}

__global__ void __launch_bounds__(kThreads, 1) mbar_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kSlots], done_bar, open_bar;
  __shared__ int stop;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i) mbar_init(&full[i], 1);
    mbar_init(&done_bar, 1);
    mbar_init(&open_bar, (1u << 20) - 1);  // the largest count an mbarrier takes
    stop = 0;
    monolith::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 32) loader(p, ring, full, &stop);
  if (threadIdx.x != 0) return;
  mbar_arrive(&done_bar);  // phase 0 complete: every test below succeeds
  {                        // let the loader reach its steady state (~20 us)
    const long long t0 = clock64();
    while (clock64() - t0 < 40000) {
    }
  }
  unsigned long long* lines = p.lines + size_t(blockIdx.x) * 16;
  unsigned long long sink = 0;
  for (int r = 0; r < p.reps; ++r) {
    for (int op = 0; op < kOps; ++op) {
      long long t0 = 0, t1 = 0;
      if (op == 0) {
        int fails = 0;
        t0 = clock64();
#pragma unroll 1
        for (int i = 0; i < kPerRep; ++i)
          if (!mbar_test_wait(&done_bar, 0)) ++fails;
        t1 = clock64();
        sink += fails;
      } else if (op == 1) {
        t0 = clock64();
#pragma unroll 1
        for (int i = 0; i < kPerRep; ++i) mbar_arrive(&open_bar);
        t1 = clock64();
      } else if (op == 2) {
        t0 = clock64();
#pragma unroll 1
        for (int i = 0; i < kPerRep; ++i)
          asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(lines + (i & 15)), "l"((unsigned long long)i) : "memory");
        t1 = clock64();
      } else if (op == 3) {
        unsigned long long v = 0;
        t0 = clock64();
#pragma unroll 1
        for (int i = 0; i < kPerRep; ++i) {
          unsigned long long w;
          asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p.word + (v & 7ull)) : "memory");
          v += w;
        }
        t1 = clock64();
        sink += v;
      } else {
        unsigned long long v = sink | 1ull;
        t0 = clock64();
#pragma unroll 1
        for (int i = 0; i < kPerRep; ++i) asm volatile("add.u64 %0, %0, %0;" : "+l"(v));
        t1 = clock64();
        sink += v & 1ull;
      }
      p.cycles[((size_t(p.level) * kOps + op) * p.blocks + blockIdx.x) * p.reps + r] = (unsigned long long)(t1 - t0);
    }
  }
  if (sink == 0x5a5a5a5a5a5aull) lines[0] = sink;  // keep the chains alive
  *(volatile int*)&stop = 1;
}

int main(int argc, char** argv) {
  const int reps = probe_int_arg(argc, argv, "--reps", 200, 1, 100000);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int G = prop.multiProcessorCount;
  const int levels[4] = {0, 1, 4, 12};
  const size_t smem = size_t(kSlots) * kSlotBytes;
  CUDA_CHECK(cudaFuncSetAttribute(mbar_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  Params p{};
  uint8_t* buf;
  CUDA_CHECK(cudaMalloc(&buf, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(buf, 1, kLoadBufBytes));
  CUDA_CHECK(cudaMalloc(&p.word, 64));
  CUDA_CHECK(cudaMemset(p.word, 0, 64));
  CUDA_CHECK(cudaMalloc(&p.lines, size_t(G) * 16 * 8));
  CUDA_CHECK(cudaMalloc(&p.cycles, size_t(4) * kOps * G * reps * 8));
  p.load_buf = buf;
  p.reps = reps;
  p.blocks = G;
  p.timeout_cycles = 4000000000ull;  // ~2 s: a loader that never sees its copy land gives up
  for (int l = 0; l < 4; ++l) {
    p.inflight = levels[l];
    p.level = l;
    mbar_kernel<<<G, kThreads, smem>>>(p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<unsigned long long> cyc(size_t(4) * kOps * G * reps);
  CUDA_CHECK(cudaMemcpy(cyc.data(), p.cycles, cyc.size() * 8, cudaMemcpyDeviceToHost));
  if (!g_json) printf("device: %s (%d SMs), one block per SM, %d reps x %d ops; cycles per operation (median, p90)\n",
                      prop.name, G, reps, kPerRep);
  if (!g_json) printf("%-8s", "in flight");
  if (!g_json)
    for (int op = 0; op < kOps; ++op) printf(" | %14s", kOpNames[op]);
  if (!g_json) printf("\n");
  if (g_json) printf("{\"probe\": \"mbar_cost\", \"device\": \"%s\", \"ok\": true, \"per_op\": %d, \"rows\": [", prop.name, kPerRep);
  for (int l = 0; l < 4; ++l) {
    if (!g_json) printf("%3d x 16K", levels[l]);
    for (int op = 0; op < kOps; ++op) {
      std::vector<double> v;
      for (int b = 0; b < G; ++b)
        for (int r = 0; r < reps; ++r)
          v.push_back(double(cyc[((size_t(l) * kOps + op) * G + b) * reps + r]) / kPerRep);
      const double med = probe_quantile(v, 0.5), p90 = probe_quantile(v, 0.9);
      if (g_json)
        printf("%s{\"inflight_slots\": %d, \"op\": \"%s\", \"median_cycles\": %.1f, \"p90_cycles\": %.1f}",
               (l || op) ? ", " : "", levels[l], kOpNames[op], med, p90);
      else
        printf(" | %6.1f %7.1f", med, p90);
    }
    if (!g_json) printf("\n");
  }
  if (g_json) printf("]}\n");
  return 0;
}
