/*
Probe: cost of one grid-wide barrier vs number of blocks.

The barrier is the one the megakernel uses: after __syncthreads, thread 0 of each block does one
`red.release.gpu` add on a global counter and spins with `ld.acquire.gpu` until the counter reaches
(barrier index + 1) x blocks (a monotonic counter: no reset, no sense reversal). The spin is
BOUNDED: past a deadline (%globaltimer) the block raises an abort flag and leaves, every other
block sees the flag and leaves too, and the probe reports a timeout instead of hanging (the
upstream megakernel hung the H200 exactly there).

Before launching, the occupancy API checks that the grid can be co-resident; a grid that cannot is
refused with a clear message (not launched). The launch itself is cooperative, which makes the
driver refuse a too-large grid as well.

Two measurements per block count: in-kernel (%globaltimer in block 0 across N barriers, launch
excluded) and the event slope between N and 2N barriers (launch overhead cancels).

Compile:
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o barrier probes/barrier.cu
Run:
  ./barrier [--json] [--threads 512] [--barriers 2000] [--blocks N] [--timeout-ms 2000]
  exit 0 ok, 1 error/mismatch, 2 timeout, 3 refused (not co-resident)
*/
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define PROBE_NAME "barrier"
#include "probe_common.cuh"

struct BarrierCtl {
  unsigned int count;   // arrivals, monotonic within one launch
  unsigned int abort;   // set by the first block that times out
  unsigned int timed_out_at;  // barrier index of the first timeout (+1), 0 = none
};

// Returns false if the barrier timed out or another block aborted.
__device__ __forceinline__ bool grid_barrier(BarrierCtl* ctl, unsigned int target, uint64_t timeout_ns,
                                             unsigned int index) {
  __shared__ int s_ok;
  __syncthreads();  // the whole block's work is done before thread 0 arrives
  if (threadIdx.x == 0) {
    const int r = probe_arrive_and_wait(&ctl->count, &ctl->abort, target, timeout_ns);
    if (r == 2) atomicCAS(&ctl->timed_out_at, 0u, index + 1);
    s_ok = r == 0;
  }
  __syncthreads();
  return s_ok != 0;
}

__global__ void barrier_loop(BarrierCtl* ctl, int nbar, uint64_t timeout_ns, uint64_t* t_out) {
  const unsigned int nb = gridDim.x;
  // barrier 0 lines everyone up; the timed interval is barriers 1..nbar-1
  if (!grid_barrier(ctl, nb, timeout_ns, 0)) return;
  const uint64_t t0 = globaltimer();
  for (int i = 1; i < nbar; ++i)
    if (!grid_barrier(ctl, nb * unsigned(i + 1), timeout_ns, unsigned(i))) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    t_out[0] = t0;
    t_out[1] = globaltimer();
  }
}

struct Row {
  int blocks;
  std::string status, reason;
  double us_in_kernel = 0, us_slope = 0;
  int per_sm = 0;
};

int main(int argc, char** argv) {
  int threads = 512, nbar = 2000, only_blocks = 0, reps = 5;
  double timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--barriers") && i + 1 < argc) nbar = std::max(2, atoi(argv[++i]));
    else if (!strcmp(argv[i], "--blocks") && i + 1 < argc) only_blocks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, atoi(argv[++i]));
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: barrier [--json] [--threads T] [--barriers N] [--blocks B] [--timeout-ms MS] [--reps R]\n");
      return 0;
    }
  }
  int dev = 0, sms = 0, coop = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  std::vector<int> counts = {8, 16, 32, 64, 128, sms, 2 * sms};
  if (only_blocks > 0) counts = {only_blocks};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  BarrierCtl* d_ctl;
  uint64_t* d_t;
  CUDA_CHECK(cudaMalloc(&d_ctl, sizeof(BarrierCtl)));
  CUDA_CHECK(cudaMalloc(&d_t, 2 * sizeof(uint64_t)));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  const uint64_t timeout_ns = uint64_t(timeout_ms * 1e6);

  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, barrier_loop, threads, 0));

  std::vector<Row> rows;
  bool any_timeout = false, any_refused = false, any_error = false;
  for (int blocks : counts) {
    Row row;
    row.blocks = blocks;
    row.per_sm = per_sm;
    if (!coop) {
      row.status = "refused";
      row.reason = "device does not support cooperative launch";
      any_refused = true;
      rows.push_back(row);
      continue;
    }
    if (per_sm * sms < blocks) {
      char buf[256];
      snprintf(buf, sizeof buf,
               "grid of %d blocks x %d threads cannot be co-resident: occupancy allows %d blocks/SM x %d SMs = %d",
               blocks, threads, per_sm, sms, per_sm * sms);
      row.status = "refused";
      row.reason = buf;
      any_refused = true;
      fprintf(stderr, "barrier: refusing to launch: %s\n", buf);
      rows.push_back(row);
      continue;
    }
    // one run: returns elapsed event ms, in-kernel ns; false on timeout
    auto run = [&](int n, float* ms, uint64_t* kernel_ns) -> int {
      CUDA_CHECK(cudaMemset(d_ctl, 0, sizeof(BarrierCtl)));
      void* args[] = {&d_ctl, &n, (void*)&timeout_ns, &d_t};
      CUDA_CHECK(cudaEventRecord(e0));
      cudaError_t err = cudaLaunchCooperativeKernel((void*)barrier_loop, dim3(blocks), dim3(threads), args, 0, 0);
      if (err != cudaSuccess) {
        fprintf(stderr, "barrier: launch refused by the driver: %s\n", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 3;
      }
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaEventSynchronize(e1));
      CUDA_CHECK(cudaEventElapsedTime(ms, e0, e1));
      BarrierCtl ctl;
      uint64_t t[2];
      CUDA_CHECK(cudaMemcpy(&ctl, d_ctl, sizeof ctl, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(t, d_t, sizeof t, cudaMemcpyDeviceToHost));
      if (ctl.abort) {
        fprintf(stderr, "barrier: TIMEOUT at barrier %u with %d blocks (count %u of %u)\n", ctl.timed_out_at - 1,
                blocks, ctl.count, unsigned(n) * unsigned(blocks));
        return 2;
      }
      if (ctl.count != unsigned(n) * unsigned(blocks)) {
        fprintf(stderr, "barrier: count %u, expected %u\n", ctl.count, unsigned(n) * unsigned(blocks));
        return 1;
      }
      *kernel_ns = t[1] - t[0];
      return 0;
    };
    float ms;
    uint64_t kns;
    int rc = run(nbar, &ms, &kns);  // warm-up
    std::vector<double> in_kernel, slope;
    for (int r = 0; r < reps && rc == 0; ++r) {
      float ms1, ms2;
      uint64_t k1, k2;
      rc = run(nbar, &ms1, &k1);
      if (rc == 0) rc = run(2 * nbar, &ms2, &k2);
      if (rc != 0) break;
      in_kernel.push_back(double(k1) / 1e3 / (nbar - 1));
      slope.push_back((ms2 - ms1) * 1e3 / nbar);
    }
    if (rc == 2) { row.status = "timeout"; row.reason = "bounded spin expired"; any_timeout = true; }
    else if (rc == 3) { row.status = "refused"; row.reason = "cooperative launch refused by the driver"; any_refused = true; }
    else if (rc != 0) { row.status = "error"; row.reason = "arrival count mismatch"; any_error = true; }
    else {
      std::sort(in_kernel.begin(), in_kernel.end());
      std::sort(slope.begin(), slope.end());
      row.status = "ok";
      row.us_in_kernel = in_kernel[in_kernel.size() / 2];
      row.us_slope = slope[slope.size() / 2];
    }
    if (!g_json)
      printf("%5d blocks x %d threads: %s  %.3f us/barrier (in-kernel), %.3f us (event slope)\n", blocks, threads,
             row.status.c_str(), row.us_in_kernel, row.us_slope);
    rows.push_back(row);
    if (rc == 2) break;  // the GPU state after a timeout is suspect; stop here
  }
  const bool ok = !any_timeout && !any_error && !(only_blocks == 0 && any_refused);
  if (g_json) {
    printf("{\"probe\": \"barrier\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, \"threads\": %d, "
           "\"barriers\": %d, \"reps\": %d, \"timeout_ms\": %g, \"occupancy_blocks_per_sm\": %d, "
           "\"method\": \"red.release.gpu add + ld.acquire.gpu spin, cooperative launch\", \"results\": [",
           ok ? "true" : "false", prop.name, sms, threads, nbar, reps, timeout_ms, per_sm);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      printf("%s{\"blocks\": %d, \"status\": \"%s\", \"reason\": \"%s\", \"us_per_barrier\": %.4f, "
             "\"us_per_barrier_slope\": %.4f}",
             i ? ", " : "", r.blocks, r.status.c_str(), r.reason.c_str(), r.us_in_kernel, r.us_slope);
    }
    printf("]}\n");
  }
  if (any_timeout) return 2;
  if (any_error) return 1;
  if (any_refused) return 3;
  return 0;
}
