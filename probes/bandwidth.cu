/*
Probe: DRAM streaming-read bandwidth with 16-byte `ld.global.nc.L1::no_allocate` loads.

Why: the megakernel is a persistent grid of about one block per SM. Such a grid only reaches the
DRAM roofline if every thread keeps several independent 16-byte loads in flight. This probe
sweeps grid shape x loads in flight x read size x access pattern and reports TB/s, so the kernel's
launch shape and unroll depth come from measurements on the GPU at hand.

- grids: one block per SM with 256/512/1024 threads, 2/4/8 blocks per SM, and 128x512 (SM count
  read from the device; nothing about the H200 is hard-coded).
- loads in flight per thread: 1, 2, 4, 8 (independent loads issued before any is consumed).
- patterns: "interleaved" (grid-stride: consecutive threads read consecutive 16 B) and "chunked"
  (each block streams its own contiguous slice, like a block owning weight rows).
- sizes: 6 MB, 32 MB (a phase / a layer of weights) and 300 MB (steady state).
- DRAM, not L2: consecutive launches read different windows of an arena of at least 4x L2 (and
  3x the largest size), so a window was evicted before it is read again.
- Two timings per config: "stream" = back-to-back launches between two events (launch overhead
  hidden, steady-state bandwidth) and "single" = an event pair around one launch (what one short
  phase pays, ramp and launch included). Both: warm-up, median of repeats.
- Correctness: every load is summed (so the compiler cannot drop it) and the sum is compared with
  the closed form (word i of the arena holds i).

Compile:
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o bandwidth probes/bandwidth.cu
Run:
  ./bandwidth [--json] [--quick] [--reps N]
*/
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define PROBE_NAME "bandwidth"
#include "probe_common.cuh"
#include "../kernel/loads.cuh"  // the probe streams with the megakernel's own weight load

__device__ __forceinline__ uint64_t sum4(uint4 v) {
  return uint64_t(v.x) + uint64_t(v.y) + uint64_t(v.z) + uint64_t(v.w);
}

__device__ __forceinline__ void reduce_and_add(uint64_t acc, unsigned long long* out) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, (unsigned long long)acc);
}

// Interleaved: the whole grid walks the buffer; each thread issues LOADS independent loads, one
// grid-stride apart, before consuming any of them (that is what "loads in flight" means here).
template <int LOADS>
__global__ void __launch_bounds__(1024, 1) read_interleaved(const uint4* __restrict__ buf, size_t n, unsigned long long* out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t acc = 0;
  for (; i + (LOADS - 1) * stride < n; i += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int k = 0; k < LOADS; ++k) v[k] = monolith::ld_weights_16B(buf + i + k * stride);
#pragma unroll
    for (int k = 0; k < LOADS; ++k) acc += sum4(v[k]);
  }
  for (; i < n; i += stride) acc += sum4(monolith::ld_weights_16B(buf + i));
  reduce_and_add(acc, out);
}

// Chunked: block b owns vectors [b*n/B, (b+1)*n/B); inside, the block's threads interleave.
template <int LOADS>
__global__ void __launch_bounds__(1024, 1) read_chunked(const uint4* __restrict__ buf, size_t n, unsigned long long* out) {
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  const size_t lo = size_t(blockIdx.x) * per;
  const size_t hi = lo + per < n ? lo + per : n;
  const size_t stride = blockDim.x;
  size_t i = lo + threadIdx.x;
  uint64_t acc = 0;
  for (; i + (LOADS - 1) * stride < hi; i += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int k = 0; k < LOADS; ++k) v[k] = monolith::ld_weights_16B(buf + i + k * stride);
#pragma unroll
    for (int k = 0; k < LOADS; ++k) acc += sum4(v[k]);
  }
  for (; i < hi; i += stride) acc += sum4(monolith::ld_weights_16B(buf + i));
  reduce_and_add(acc, out);
}

__global__ void fill_index(uint32_t* w, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w[i] = uint32_t(i);
}

using ReadFn = void (*)(const uint4*, size_t, unsigned long long*);

static ReadFn pick(int chunked, int loads) {
  switch (loads) {
    case 1: return chunked ? read_chunked<1> : read_interleaved<1>;
    case 2: return chunked ? read_chunked<2> : read_interleaved<2>;
    case 4: return chunked ? read_chunked<4> : read_interleaved<4>;
    default: return chunked ? read_chunked<8> : read_interleaved<8>;
  }
}

struct Result {
  std::string pattern;
  int blocks, threads, loads, regs;
  size_t bytes;
  double stream_us, stream_us_min, stream_us_max, stream_tbs;
  double single_us, single_tbs;
  bool sum_ok;
};

int main(int argc, char** argv) {
  int reps = 5;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, atoi(argv[++i]));
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: bandwidth [--json] [--quick] [--reps N]\n");
      return 0;
    }
  }
  int dev = 0, sms = 0, l2 = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  std::vector<size_t> sizes = {6000000, 32000000, 300000000};
  if (quick) sizes = {6000000, 32000000};
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
  size_t arena = std::max<size_t>(size_t(l2) * 4, max_size * 3);
  arena = (arena + 4095) & ~size_t(4095);
  const size_t arena_words = arena / 4;
  if (arena_words >= (size_t(1) << 32)) { fprintf(stderr, "arena too large for the index pattern\n"); return 1; }

  uint32_t* d_arena;
  unsigned long long* d_sum;
  CUDA_CHECK(cudaMalloc(&d_arena, arena));
  CUDA_CHECK(cudaMalloc(&d_sum, sizeof(unsigned long long)));
  fill_index<<<sms * 8, 256>>>(d_arena, arena_words);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());

  struct Grid { int blocks, threads; };
  std::vector<Grid> grids = {{sms, 256},     {sms, 512},     {sms, 1024},    {128, 512},
                             {2 * sms, 256}, {2 * sms, 512}, {4 * sms, 256}, {4 * sms, 512},
                             {8 * sms, 256}};
  std::vector<int> loads_list = {1, 2, 4, 8};
  if (quick) {
    grids = {{sms, 512}, {4 * sms, 512}};
    loads_list = {1, 8};
  }

  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<Result> results;
  bool all_ok = true;
  const int batch = 10;  // launches per "stream" timing

  for (size_t bytes : sizes) {
    const size_t n16 = bytes / 16;
    const size_t windows = arena / bytes;  // >= 3 by construction
    // closed-form sum of a window starting at vector v0: words 4*v0 .. 4*(v0+n16)-1
    auto expect = [&](size_t v0) {
      const uint64_t a = 4 * uint64_t(v0), b = a + 4 * uint64_t(n16);
      return (a + b - 1) * (b - a) / 2;  // fits: b < 2^32 -> product < 2^64
    };
    size_t launch_no = 0;
    auto window = [&](size_t k) { return (k % windows) * n16; };
    for (int chunked = 0; chunked < 2; ++chunked) {
      for (const Grid& g : grids) {
        for (int loads : loads_list) {
          ReadFn fn = pick(chunked, loads);
          const uint4* base = reinterpret_cast<const uint4*>(d_arena);
          // warm-up + sum check on one window
          const size_t v0 = window(launch_no++);
          CUDA_CHECK(cudaMemset(d_sum, 0, sizeof(unsigned long long)));
          fn<<<g.blocks, g.threads>>>(base + v0, n16, d_sum);
          CUDA_CHECK(cudaGetLastError());
          unsigned long long got = 0;
          CUDA_CHECK(cudaMemcpy(&got, d_sum, sizeof got, cudaMemcpyDeviceToHost));
          const bool sum_ok = got == expect(v0);
          all_ok = all_ok && sum_ok;
          // stream: `batch` back-to-back launches on rotating windows
          std::vector<double> st, si;
          for (int r = 0; r < reps; ++r) {
            CUDA_CHECK(cudaEventRecord(e0));
            for (int b = 0; b < batch; ++b) fn<<<g.blocks, g.threads>>>(base + window(launch_no++), n16, d_sum);
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            st.push_back(ms * 1e3 / batch);
          }
          // single: one launch between two events, device idle before it
          for (int r = 0; r < reps; ++r) {
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaEventRecord(e0));
            fn<<<g.blocks, g.threads>>>(base + window(launch_no++), n16, d_sum);
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            si.push_back(ms * 1e3);
          }
          CUDA_CHECK(cudaGetLastError());
          Result res;
          res.pattern = chunked ? "chunked" : "interleaved";
          res.blocks = g.blocks;
          res.threads = g.threads;
          res.loads = loads;
          cudaFuncAttributes fa;
          CUDA_CHECK(cudaFuncGetAttributes(&fa, fn));
          res.regs = fa.numRegs;  // fewer than 4*loads+~8 would mean the loads were serialized
          res.bytes = n16 * 16;
          res.stream_us = probe_median(st);
          res.stream_us_min = *std::min_element(st.begin(), st.end());
          res.stream_us_max = *std::max_element(st.begin(), st.end());
          res.stream_tbs = double(res.bytes) / (res.stream_us * 1e-6) * 1e-12;
          res.single_us = probe_median(si);
          res.single_tbs = double(res.bytes) / (res.single_us * 1e-6) * 1e-12;
          res.sum_ok = sum_ok;
          results.push_back(res);
          if (!g_json)
            fprintf(stderr, "  %-11s %5dx%-4d loads %d  %6.1f MB  stream %8.2f us %5.2f TB/s  single %8.2f us %5.2f TB/s%s\n",
                    res.pattern.c_str(), g.blocks, g.threads, loads, bytes / 1e6, res.stream_us, res.stream_tbs,
                    res.single_us, res.single_tbs, sum_ok ? "" : "  SUM MISMATCH");
        }
      }
    }
  }

  // best per size, and the one-block-per-SM rows (what a persistent megakernel can use)
  auto row_json = [](const Result& r) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"pattern\": \"%s\", \"blocks\": %d, \"threads\": %d, \"loads\": %d, \"regs\": %d, \"bytes\": %zu, "
             "\"stream_us\": %.3f, \"stream_us_min\": %.3f, \"stream_us_max\": %.3f, \"stream_tbs\": %.4f, "
             "\"single_us\": %.3f, \"single_tbs\": %.4f, \"sum_ok\": %s}",
             r.pattern.c_str(), r.blocks, r.threads, r.loads, r.regs, r.bytes, r.stream_us, r.stream_us_min,
             r.stream_us_max, r.stream_tbs, r.single_us, r.single_tbs, r.sum_ok ? "true" : "false");
    return std::string(buf);
  };
  std::string best_json = "{", obps_json = "{";
  for (size_t si = 0; si < sizes.size(); ++si) {
    const size_t bytes = (sizes[si] / 16) * 16;
    const Result *best = nullptr, *best1 = nullptr;
    for (const Result& r : results) {
      if (r.bytes != bytes) continue;
      if (!best || r.stream_tbs > best->stream_tbs) best = &r;
      if (r.blocks == sms && (!best1 || r.stream_tbs > best1->stream_tbs)) best1 = &r;
    }
    char key[32];
    snprintf(key, sizeof key, "%s\"%zu\": ", si ? ", " : "", bytes);
    best_json += key + (best ? row_json(*best) : std::string("null"));
    obps_json += key + (best1 ? row_json(*best1) : std::string("null"));
    if (!g_json && best)
      printf("%7.1f MB: best %s %dx%d loads %d: %.2f TB/s (single launch %.2f us); one block/SM best: %s %dx%d "
             "loads %d: %.2f TB/s\n",
             bytes / 1e6, best->pattern.c_str(), best->blocks, best->threads, best->loads, best->stream_tbs,
             best->single_us, best1 ? best1->pattern.c_str() : "-", best1 ? best1->blocks : 0,
             best1 ? best1->threads : 0, best1 ? best1->loads : 0, best1 ? best1->stream_tbs : 0.0);
  }
  best_json += "}";
  obps_json += "}";

  if (g_json) {
    printf("{\"probe\": \"bandwidth\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %d, "
           "\"arena_bytes\": %zu, \"reps\": %d, \"batch\": %d, \"load\": \"ld.global.nc.L1::no_allocate.v4.u32\", "
           "\"best\": %s, \"best_one_block_per_sm\": %s, \"results\": [",
           all_ok ? "true" : "false", prop.name, sms, l2, arena, reps, batch, best_json.c_str(), obps_json.c_str());
    for (size_t i = 0; i < results.size(); ++i) printf("%s%s", i ? ", " : "", row_json(results[i]).c_str());
    printf("]}\n");
  } else if (!all_ok) {
    printf("SUM MISMATCH: some loads were not performed as expected\n");
  }
  CUDA_CHECK(cudaFree(d_arena));
  CUDA_CHECK(cudaFree(d_sum));
  return all_ok ? 0 : 1;
}
