// Probe: is a hop between two SMs slower when they sit on different halves of the L2 (nineteenth
// session)?
//
// Why: the X-ray of fp8-stream (eighteenth session, position 128) shows, per layer, the O blocks of
// some KV groups starting O 200-300 ns after the group's other O blocks (bf16: up to 500 ns), and the
// late ones are always blocks gi 8-15 of their group, which the launch places on SMs 0-63 while the
// group's attention blocks (gi 0-2, the partials' writers) run on SMs 64-131. The H100's L2 is two
// partitions, each wired to half of the GPCs (chips-and-cheese, "Nvidia's H100: Funny L2"); a line's
// home is one of them. If a word written on one half and polled from the other costs a crossing, a
// group's 16 blocks should live on one half. This probe measures the two facts that decide it.
//
// One block per SM (the dynamic shared memory a block asks for leaves no room for a second), its
// %smid read at start; only thread 0 of a block works.
//   A  L2-hit latency of every SM to each of kLines 128-byte lines (ld.relaxed.gpu, the kernel's
//      polling load; each line loaded once to bring it in, then kReps chains of kChain dependent loads, the
//      fastest kept), all SMs at once (one load in flight per SM). The host splits the SMs into two sides by
//      which lines each sees fast (side 0: SM 0's), and gives each line the side that sees it fast.
//   B  round trips: the SM P writes seq i to a flag line, the SM C polls it (ld.relaxed.gpu) and
//      writes i to an ack line that P polls; kIters round trips timed by P's clock64, for every
//      combination of P's side, C's side and the flag/ack lines' home side (kPairs (P, C) pairs and
//      kLinePairs line pairs each). A one-way hop is about half a round trip.
// Prediction (written before the run, NOTES.md nineteenth session): the SMs split ~66/66; a line's
// far side sees it ~100-200 cycles later; a cross-side round trip ~200-400 ns longer than a same-side
// one when the lines are homed on the consumer's far side.
// Every spin is bounded (an abort word and --timeout-ms); a timeout is a failure, not a number.
//
// Compile: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernel -I probes -o /tmp/l2_partition probes/l2_partition.cu
// Run:     /tmp/l2_partition [--json] [--timeout-ms N]
#define PROBE_NAME "l2_partition"
#include <cmath>
#include <vector>

#include "probe_common.cuh"

constexpr int kLines = 256;      // lines probed in part A (32 KB)
constexpr int kLineWords = 32;   // 128 B
constexpr int kReps = 4;         // chains per (SM, line); the minimum is kept
constexpr int kIters = 64;       // round trips per part-B measurement
constexpr int kPairs = 4;        // (P, C) pairs per side combination
constexpr int kLinePairs = 4;    // (flag, ack) line pairs per home side
constexpr int kMaxSms = 256;

__device__ __forceinline__ uint32_t smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// kChain dependent loads of one line (each address is the line plus the value the previous load
// returned, which is 0 at run time but not known to the compiler), between two clock reads: a load
// cannot issue before the previous one returned, so (t1 - t0) / kChain is one L2 hit (minus 1 / kChain
// of one, the last load's return, which the second clock read does not wait for).
constexpr int kChain = 16;
__device__ __forceinline__ uint32_t chain_cycles(const uint32_t* p, uint32_t& dep) {
  const long long t0 = clock64();
#pragma unroll
  for (int i = 0; i < kChain; ++i) dep = ld_relaxed(p + dep);
  const long long t1 = clock64();
  return uint32_t((t1 - t0) / kChain);
}

// Part A: lat[block][line] (cycles) and sm_of[block]
__global__ void latency_kernel(const uint32_t* lines, uint32_t* lat, uint32_t* sm_of) {
  if (threadIdx.x != 0) return;
  sm_of[blockIdx.x] = smid();
  uint32_t dep = 0;  // 0 at run time (the lines hold 0): every load's address depends on the last one
  for (int l = 0; l < kLines; ++l) dep = ld_relaxed(lines + l * kLineWords + dep);
  for (int i = 0; i < kLines; ++i) {
    const int l = (i + int(blockIdx.x) * 37) % kLines;  // staggered: no two SMs on one line at once
    uint32_t best = ~0u;
    for (int r = 0; r < kReps; ++r) best = min(best, chain_cycles(lines + l * kLineWords, dep));
    lat[blockIdx.x * kLines + l] = best;
  }
  if (dep) sm_of[blockIdx.x] = ~0u;  // never (keeps dep live)
}

// Part B: the block on SM p pings the block on SM c through flag / ack; out = {cycles, ns} of kIters
// round trips, or err = 1 on a timeout.
__global__ void pingpong_kernel(uint32_t p, uint32_t c, uint32_t* flag, uint32_t* ack, uint32_t base,
                                unsigned long long* out, uint32_t* err, unsigned long long timeout_ns) {
  if (threadIdx.x != 0) return;
  const uint32_t me = smid();
  if (me != p && me != c) return;
  const unsigned long long deadline = globaltimer() + timeout_ns;
  if (me == p) {
    const long long t0 = clock64();
    const unsigned long long g0 = globaltimer();
    for (uint32_t i = 1; i <= kIters; ++i) {
      st_relaxed(flag, base + i);
      for (uint32_t spin = 0; ld_relaxed(ack) != base + i; ++spin) {
        if ((spin & 255u) == 255u && (ld_relaxed(err) || globaltimer() > deadline)) {
          st_relaxed(err, 1u);
          return;
        }
      }
    }
    out[0] = (unsigned long long)(clock64() - t0);
    out[1] = globaltimer() - g0;
  } else {
    for (uint32_t i = 1; i <= kIters; ++i) {
      for (uint32_t spin = 0; ld_relaxed(flag) != base + i; ++spin) {
        if ((spin & 255u) == 255u && (ld_relaxed(err) || globaltimer() > deadline)) {
          st_relaxed(err, 1u);
          return;
        }
      }
      st_relaxed(ack, base + i);
    }
  }
}

int main(int argc, char** argv) {
  const int timeout_ms = probe_int_arg(argc, argv, "--timeout-ms", 2000, 10, 60000);
  int dev = 0;
  CUDA_CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  const int G = prop.multiProcessorCount;
  if (G > kMaxSms) {
    fprintf(stderr, PROBE_NAME ": %d SMs, more than %d\n", G, kMaxSms);
    return 1;
  }
  // more than half an SM's shared memory: one block per SM, so G blocks cover every SM once
  const size_t smem = prop.sharedMemPerMultiprocessor / 2 + 1024;
  probe_require_smem(prop, smem);
  CUDA_CHECK(cudaFuncSetAttribute(latency_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(pingpong_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));

  uint32_t *lines, *lat, *sm_of, *err;
  unsigned long long* out;
  CUDA_CHECK(cudaMalloc(&lines, kLines * kLineWords * 4));
  CUDA_CHECK(cudaMemset(lines, 0, kLines * kLineWords * 4));
  CUDA_CHECK(cudaMalloc(&lat, size_t(G) * kLines * 4));
  CUDA_CHECK(cudaMalloc(&sm_of, G * 4));
  CUDA_CHECK(cudaMalloc(&err, 4));
  CUDA_CHECK(cudaMemset(err, 0, 4));
  CUDA_CHECK(cudaMalloc(&out, 2 * 8));

  // ---- part A
  latency_kernel<<<G, 32, smem>>>(lines, lat, sm_of);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint32_t> hl(size_t(G) * kLines), hs(G);
  CUDA_CHECK(cudaMemcpy(hl.data(), lat, hl.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(hs.data(), sm_of, G * 4, cudaMemcpyDeviceToHost));
  std::vector<int> row_of_sm(kMaxSms, -1);  // block (row) that ran on each SM
  for (int b = 0; b < G; ++b) {
    if (hs[b] >= uint32_t(kMaxSms) || row_of_sm[hs[b]] != -1) {
      fprintf(stderr, PROBE_NAME ": SM %u got two blocks: not one block per SM\n", hs[b]);
      if (g_json) printf("{\"probe\": \"" PROBE_NAME "\", \"ok\": false, \"error\": \"not one block per SM\"}\n");
      return 1;
    }
    row_of_sm[hs[b]] = b;
  }
  // sides: the lines SM 0 sees faster than its median are "near 0"; an SM whose mean latency over
  // those is below its mean over the others is on side 0. A line's home: the side that sees it faster.
  const int r0 = row_of_sm[0] >= 0 ? row_of_sm[0] : 0;
  std::vector<double> l0(kLines);
  for (int l = 0; l < kLines; ++l) l0[l] = hl[size_t(r0) * kLines + l];
  const double med0 = probe_median(l0);
  std::vector<int> near0(kLines);
  for (int l = 0; l < kLines; ++l) near0[l] = l0[l] <= med0;
  std::vector<int> side(G);  // per block row
  for (int b = 0; b < G; ++b) {
    double a = 0, na = 0, f = 0, nf = 0;
    for (int l = 0; l < kLines; ++l) {
      const double v = hl[size_t(b) * kLines + l];
      if (near0[l]) a += v, ++na;
      else f += v, ++nf;
    }
    side[b] = (a / std::max(na, 1.0)) <= (f / std::max(nf, 1.0)) ? 0 : 1;
  }
  std::vector<int> home(kLines);
  std::vector<double> d_home;  // per line: far side's median latency minus near side's
  std::vector<double> near_lat, far_lat;
  for (int l = 0; l < kLines; ++l) {
    std::vector<double> s0, s1;
    for (int b = 0; b < G; ++b) (side[b] ? s1 : s0).push_back(hl[size_t(b) * kLines + l]);
    const double m0 = probe_median(s0), m1 = probe_median(s1);
    home[l] = m0 <= m1 ? 0 : 1;
    d_home.push_back(std::fabs(m1 - m0));
    near_lat.push_back(std::min(m0, m1));
    far_lat.push_back(std::max(m0, m1));
  }
  int n_side[2] = {0, 0}, n_home[2] = {0, 0};
  for (int b = 0; b < G; ++b) ++n_side[side[b]];
  for (int l = 0; l < kLines; ++l) ++n_home[home[l]];

  // ---- part B: round trips per (P side, C side, lines' home side)
  std::vector<int> sms[2], lns[2];
  for (int s = 0; s < kMaxSms; ++s)
    if (row_of_sm[s] >= 0) sms[side[row_of_sm[s]]].push_back(s);
  for (int l = 0; l < kLines; ++l) lns[home[l]].push_back(l);
  struct Cell {
    int ps, cs, hs;
    std::vector<double> ns, cyc;
  };
  std::vector<Cell> cells;
  uint32_t base = 0;
  bool ok = true;
  for (int ps = 0; ps < 2 && ok; ++ps)
    for (int cs = 0; cs < 2 && ok; ++cs)
      for (int hs2 = 0; hs2 < 2 && ok; ++hs2) {
        Cell cell{ps, cs, hs2, {}, {}};
        if (sms[ps].size() < 2 || sms[cs].size() < 2 || lns[hs2].size() < 2 * kLinePairs) continue;
        for (int k = 0; k < kPairs && ok; ++k) {
          const int p = sms[ps][(k * 7) % sms[ps].size()];
          int c = sms[cs][(k * 13 + 3) % sms[cs].size()];
          if (c == p) c = sms[cs][(k * 13 + 4) % sms[cs].size()];
          for (int j = 0; j < kLinePairs && ok; ++j) {
            uint32_t* flag = lines + lns[hs2][2 * j] * kLineWords;
            uint32_t* ack = lines + lns[hs2][2 * j + 1] * kLineWords;
            base += 1u << 20;
            pingpong_kernel<<<G, 32, smem>>>(uint32_t(p), uint32_t(c), flag, ack, base, out, err,
                                             (unsigned long long)timeout_ms * 1000000ull);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaDeviceSynchronize());
            uint32_t herr;
            unsigned long long ho[2];
            CUDA_CHECK(cudaMemcpy(&herr, err, 4, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(ho, out, 16, cudaMemcpyDeviceToHost));
            if (herr) {
              ok = false;
              break;
            }
            cell.cyc.push_back(double(ho[0]) / kIters);
            cell.ns.push_back(double(ho[1]) / kIters);
          }
        }
        cells.push_back(cell);
      }
  if (!ok) {
    fprintf(stderr, PROBE_NAME ": a round trip timed out (%d ms)\n", timeout_ms);
    if (g_json) printf("{\"probe\": \"" PROBE_NAME "\", \"ok\": false, \"error\": \"timeout\"}\n");
    return 1;
  }

  if (g_json) {
    printf("{\"probe\": \"" PROBE_NAME "\", \"ok\": true, \"device\": \"%s\", \"sms\": %d, \"lines\": %d,", prop.name, G, kLines);
    printf(" \"side_sizes\": [%d, %d], \"line_homes\": [%d, %d],", n_side[0], n_side[1], n_home[0], n_home[1]);
    printf(" \"l2_hit_cycles\": {\"near_median\": %.1f, \"far_median\": %.1f, \"far_minus_near_median\": %.1f},",
           probe_median(near_lat), probe_median(far_lat), probe_median(d_home));
    printf(" \"side_of_sm\": [");
    for (int s = 0, first = 1; s < kMaxSms; ++s)
      if (row_of_sm[s] >= 0) printf("%s[%d, %d]", first ? "" : ", ", s, side[row_of_sm[s]]), first = 0;
    printf("], \"round_trips\": [");
    for (size_t i = 0; i < cells.size(); ++i)
      printf("%s{\"p_side\": %d, \"c_side\": %d, \"home\": %d, \"ns_median\": %.1f, \"ns_min\": %.1f, \"ns_max\": %.1f, "
             "\"cycles_median\": %.1f, \"n\": %zu}",
             i ? ", " : "", cells[i].ps, cells[i].cs, cells[i].hs, probe_median(cells[i].ns),
             probe_quantile(cells[i].ns, 0.0), probe_quantile(cells[i].ns, 1.0), probe_median(cells[i].cyc),
             cells[i].ns.size());
    printf("]}\n");
    return 0;
  }
  printf("%s, %d SMs: sides %d / %d (side 0: SM 0's); lines homed %d / %d\n", prop.name, G, n_side[0], n_side[1],
         n_home[0], n_home[1]);
  printf("L2-hit latency, median over lines: near side %.0f cycles, far side %.0f (far - near per line: median %.0f)\n",
         probe_median(near_lat), probe_median(far_lat), probe_median(d_home));
  printf("side of each SM:");
  for (int s = 0; s < kMaxSms; ++s)
    if (row_of_sm[s] >= 0) printf("%s%d", s % 32 ? "" : "\n  ", side[row_of_sm[s]]);
  printf("\nround trips (P writes, C polls and answers; %d per measurement), ns median (min-max) / cycles:\n", kIters);
  printf("  P side  C side  lines' home   ns median (min-max)     cycles\n");
  for (const Cell& c : cells)
    printf("  %6d  %6d  %11d   %7.0f (%5.0f-%5.0f)  %8.0f\n", c.ps, c.cs, c.hs, probe_median(c.ns),
           probe_quantile(c.ns, 0.0), probe_quantile(c.ns, 1.0), probe_median(c.cyc));
  return 0;
}
