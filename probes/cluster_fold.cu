// Probe: MLP-1 -> down folded into one hop, the split-K partial sums pre-reduced inside thread-block
// clusters over distributed shared memory (issue 11; twelfth session).
//
// The question. Today a layer's MLP is two phases and two grid hops: gate/up -> tagged activation
// words -> every block gathers all 3,072 -> down -> tagged residual words. A fold multiplies each
// block's own activations by down's matching columns and reduces the 1,024-element partials of all
// blocks, with no activation hop and no down phase. The eighth session measured the plain fold
// (probes/hop_latency.cu S3: every block adds all 1,024 elements with red.global.add.u64 on counted
// fixed-point words): 6-7 us, since ~135 K atomics take ~4-6 us to drain. Pre-reducing inside a
// cluster of C blocks divides the atomics by C.
//
// One round (every block, after a grid barrier and an optional pseudo-random delay):
//   F0  direct: the block adds its 1,024 fixed-point partials to the counted words (S3 with P = 1);
//   F1  cluster: each thread pushes its 2 partials with st.async into the shared memory of the
//       cluster rank that owns them (rank k owns elements [k N / C, (k + 1) N / C)), completing
//       bytes on that rank's mbarrier; the owner's thread 0 waits for the N x 8 bytes of its C
//       senders (one thread polls, .acquire.cluster), its threads sum the C values of each owned
//       element (int64: exact, so any order gives the same bits) and add one counted word each:
//       G / C x 1,024 atomics per round instead of G x 1,024.
//   then every thread polls the counted words of its 2 elements until their count is complete
//   (the kernel's resid_poll), as the next layer's qkv would.
// Stamps per round and block (%globaltimer): [0] the block's partials issued, [1] the owner's adds
// issued (F0: = [0]), [2] thread 0's words complete, [3] the whole block's (after a barrier).
// Reported: us after the last block's [0] (the last producer), median over rounds.
// --load: warp 16 lane 0 streams 16 KB cp.async.bulk copies into a 12-slot ring (~4 TB/s grid-wide),
// as the kernel's producer does. The receive buffers are double-buffered by round parity (a sender
// is never two rounds ahead: the rounds are separated by a grid barrier here, by the residual hop in
// a kernel). Every wait is bounded; every word's final value and count is checked on the host.
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I kernel -I probes \
//          -o /tmp/cluster_fold probes/cluster_fold.cu
// Run:   /tmp/cluster_fold [--json] [--rounds 200] [--delay 1500] [--timeout-ms 2000]
#define PROBE_NAME "cluster_fold"
#include <cooperative_groups.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "probe_common.cuh"
#include "ring.cuh"
#include "probe_loader.cuh"

namespace cg = cooperative_groups;
using monolith::mbar_arrive_expect_tx;
using monolith::mbar_init;
using monolith::smem_addr;

constexpr int kN = 1024;                    // the residual's elements (down's outputs)
constexpr int kConsumers = 512;             // 16 consumer warps, as the stream schedule
constexpr int kThreads = kConsumers + 32;   // + the loader warp
constexpr int kPerThread = kN / kConsumers;  // 2 elements per thread, as resid_poll
constexpr int kCountBits = 12;              // the kernel's counted words: value << 12 | count
constexpr int kLoadSlots = 12, kLoadSlotBytes = 16 * 1024;  // the kernel's ring: 192 KB
constexpr size_t kLoadBufBytes = size_t(1) << 30;           // far larger than the 50 MB L2
constexpr int kStamps = 4;
constexpr int kMaxCluster = 16;
static_assert(kN % kConsumers == 0 && kN % kMaxCluster == 0, "elements split evenly over threads and ranks");

struct Params {
  unsigned long long* words;   // kN counted words (monotonic over rounds, never cleared)
  unsigned int* bar;           // grid barrier between rounds (monotonic)
  unsigned int* abort;         // set by a timed-out wait: every block stops
  unsigned long long* stamps;  // [round][block][kStamps] globaltimer ns
  unsigned long long* loaded;  // bytes the loaders copied
  const uint8_t* load_buf;
  int rounds, mode, cluster, load, delay_ns;
  unsigned long long timeout_ns;
};

// Block b's partial of element i in round r (raw fixed-point units, small enough for the host to sum)
__device__ __host__ __forceinline__ unsigned long long part_value(int i, int b, int r) {
  return (unsigned long long)((i + 3 * b + 7 * r) & 0xff);
}

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Address of this CTA's shared variable at the same offset in cluster rank `rank` (shared::cluster).
__device__ __forceinline__ uint32_t mapa(const void* p, uint32_t rank) {
  uint32_t a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  return a;
}
// One 8-byte store into another CTA's shared memory that completes 8 bytes on its mbarrier.
__device__ __forceinline__ void st_async_b64(uint32_t remote, unsigned long long v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(remote), "l"(v),
               "r"(remote_bar)
               : "memory");
}
// try_wait with cluster-scope acquire: the pushed bytes are remote CTAs' writes.
__device__ __forceinline__ bool mbar_try_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

struct Smem {
  unsigned long long recv[2][kN];  // [round parity][sender rank][owned element]: kN words in all
  uint64_t rbar[2];                // one receive mbarrier per parity
  uint64_t full[kLoadSlots];       // the loader's ring
  int ok, stop;
};

__device__ void consumer(const Params& p, Smem& sm) {
  const int t = threadIdx.x, b = blockIdx.x, G = gridDim.x;
  const int C = p.cluster, per_owner = kN / C;
  const uint32_t rank = p.mode == 1 ? cg::this_cluster().block_rank() : 0u;
  const unsigned contributors = p.mode == 1 ? unsigned(G / C) : unsigned(G);
  for (int r = 1; r <= p.rounds; ++r) {
    const int par = r & 1;
    if (t == 0) {
      if (probe_arrive_and_wait(p.bar, p.abort, unsigned(r) * G, p.timeout_ns) != 0) sm.ok = 0;
      // the owner's side of this round's receive: kN x 8 bytes from the cluster (senders may
      // already have pushed some: the transaction count may go below zero, the one pending arrival
      // keeps the phase open)
      if (p.mode == 1) mbar_arrive_expect_tx(&sm.rbar[par], kN * 8u);
      probe_spread_sleep(b, r, p.delay_ns);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (*(volatile int*)&sm.ok == 0) break;
    unsigned long long* st = p.stamps + (size_t(r - 1) * G + b) * kStamps;
    if (p.mode == 0) {
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int i = t + e * kConsumers;
        atomicAdd(p.words + i, (part_value(i, b, r) << kCountBits) | 1ull);
      }
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
      if (t == 0) st[0] = st[1] = globaltimer();
    } else {
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int i = t + e * kConsumers, k = i / per_owner, j = i - k * per_owner;
        st_async_b64(mapa(&sm.recv[par][rank * per_owner + j], uint32_t(k)), part_value(i, b, r),
                     mapa(&sm.rbar[par], uint32_t(k)));
      }
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
      if (t == 0) {
        st[0] = globaltimer();
        const uint32_t phase = uint32_t((r - 1) >> 1) & 1u;  // this buffer's use count, mod 2
        const uint64_t deadline = globaltimer() + p.timeout_ns;
        for (uint32_t it = 0; !mbar_try_wait_cluster(&sm.rbar[par], phase); ++it)
          if ((it & 15u) == 15u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) {
            atomicExch(p.abort, 1u);
            sm.ok = 0;
            break;
          }
      }
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
      if (*(volatile int*)&sm.ok == 0) break;
      for (int j = t; j < per_owner; j += kConsumers) {
        unsigned long long s = 0;
        for (int k = 0; k < C; ++k) s += sm.recv[par][k * per_owner + j];
        atomicAdd(p.words + rank * per_owner + j, (s << kCountBits) | 1ull);
      }
      if (t == 0) st[1] = globaltimer();
    }
    // the next phase's input: both elements' counts complete (one L2 round trip per poll)
    const unsigned want = (unsigned(r) * contributors) & ((1u << kCountBits) - 1u);
    const uint64_t deadline = globaltimer() + p.timeout_ns;
    bool ok = true;
    for (uint32_t it = 0;; ++it) {
      unsigned long long w[kPerThread];
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) w[e] = ld_relaxed(p.words + t + e * kConsumers);
      bool all = true;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) all = all && unsigned(w[e] & ((1ull << kCountBits) - 1ull)) == want;
      if (all) break;
      if ((it & 15u) == 15u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) {
        ok = false;
        break;
      }
    }
    if (t == 0) st[2] = globaltimer();
    if (!ok) {
      atomicExch(p.abort, 1u);
      sm.ok = 0;
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (t == 0) st[3] = globaltimer();
  }
  if (t == 0) *(volatile int*)&sm.stop = 1;
}

__global__ void __launch_bounds__(kThreads, 1) fold_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(16) Smem sm;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kLoadSlots; ++i) mbar_init(&sm.full[i], 1);
    for (int i = 0; i < 2; ++i) mbar_init(&sm.rbar[i], 1);  // the owner's arrive; the rest is bytes
    sm.ok = 1;
    sm.stop = 0;
    monolith::mbar_fence_init();
  }
  // every rank's mbarriers are initialised before anyone pushes into them
  if (p.mode == 1) cg::this_cluster().sync();
  else __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers && p.load)
      probe_ring_loader<kLoadSlots, kLoadSlotBytes>(p.load_buf, kLoadBufBytes, ring, sm.full, &sm.stop, p.timeout_ns, p.loaded);
  } else {
    consumer(p, sm);
  }
  // no rank may exit while a peer could still push into its shared memory
  if (p.mode == 1) cg::this_cluster().sync();
}

struct Row {
  int mode, cluster, blocks, load, delay_ns;
  double owner_last, ready_first, ready_last, ready_last_p90, t0_first, t0_last, spread, load_tbs;
  long long atomics_per_round;
  unsigned bad;
  bool ok;
};

int main(int argc, char** argv) {
  int rounds = 200, delay = 1500;
  double timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--delay") && i + 1 < argc) delay = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--json] [--rounds N] [--delay NS] [--timeout-ms MS]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || rounds > 100000 || delay < 0 || timeout_ms <= 0) {
    fprintf(stderr, "cluster_fold: --rounds 1..100000, --delay >= 0, --timeout-ms > 0\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int smem = kLoadSlots * kLoadSlotBytes;
  probe_require_smem(prop, size_t(smem) + sizeof(Smem));
  if (prop.major < 9) {
    fprintf(stderr, "cluster_fold: needs thread-block clusters (sm_90)\n");
    if (g_json) printf("{\"probe\": \"cluster_fold\", \"ok\": false, \"error\": \"no clusters\"}\n");
    return 1;
  }
  CUDA_CHECK(cudaFuncSetAttribute(fold_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUDA_CHECK(cudaFuncSetAttribute(fold_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

  Params p{};
  CUDA_CHECK(cudaMalloc(&p.words, kN * sizeof(unsigned long long)));
  unsigned int* flags_d = nullptr;
  CUDA_CHECK(cudaMalloc(&flags_d, 2 * sizeof(unsigned int)));
  p.bar = flags_d;
  p.abort = flags_d + 1;
  const int kMaxBlocks = 256;
  CUDA_CHECK(cudaMalloc(&p.stamps, size_t(rounds) * kMaxBlocks * kStamps * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&p.loaded, sizeof(unsigned long long)));
  uint8_t* lb = nullptr;
  CUDA_CHECK(cudaMalloc(&lb, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(lb, 1, kLoadBufBytes));
  p.load_buf = lb;
  p.rounds = rounds;
  p.timeout_ns = (unsigned long long)(timeout_ms * 1e6);

  // The grid of each cluster size: as many whole clusters as are co-resident, at most 128 blocks
  // (the kernel's grid); F0 runs at 128 and at the clustered grids' size for comparison.
  auto launch_config = [&](int C, int G, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(G);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(C);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
  };
  struct Config {
    int mode, cluster, blocks;
  };
  std::vector<Config> shapes;
  std::vector<int> cluster_blocks;
  for (int C : {2, 4, 8, 16}) {
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = launch_config(C, C, attr);
    int nclusters = 0;
    if (cudaOccupancyMaxActiveClusters(&nclusters, fold_kernel, &cfg) != cudaSuccess) {
      cudaGetLastError();
      nclusters = 0;
    }
    const int G = std::min(128 / C, nclusters) * C;
    if (!g_json) printf("cluster %2d: %d co-resident clusters -> %d blocks\n", C, nclusters, G);
    if (G >= 2 * C) {
      shapes.push_back({1, C, G});
      cluster_blocks.push_back(G);
    }
  }
  std::sort(cluster_blocks.begin(), cluster_blocks.end());
  cluster_blocks.erase(std::unique(cluster_blocks.begin(), cluster_blocks.end()), cluster_blocks.end());
  for (int G : cluster_blocks) shapes.insert(shapes.begin(), {0, 1, G});
  if (std::find(cluster_blocks.begin(), cluster_blocks.end(), 128) == cluster_blocks.end())
    shapes.insert(shapes.begin(), {0, 1, 128});

  std::vector<Row> rows;
  std::vector<unsigned long long> st(size_t(rounds) * kMaxBlocks * kStamps), words(kN);
  bool all_ok = true;
  std::vector<int> delays{0};
  if (delay > 0) delays.push_back(delay);
  for (int dly : delays)
    for (int load : {0, 1})
      for (const Config& c : shapes) {
        const int G = c.blocks, C = c.cluster;
        p.mode = c.mode;
        p.cluster = C;
        p.load = load;
        p.delay_ns = dly;
        CUDA_CHECK(cudaMemset(p.words, 0, kN * sizeof(unsigned long long)));
        CUDA_CHECK(cudaMemset(flags_d, 0, 2 * sizeof(unsigned int)));
        CUDA_CHECK(cudaMemset(p.loaded, 0, sizeof(unsigned long long)));
        cudaLaunchAttribute attr[1];
        cudaLaunchConfig_t cfg = launch_config(C, G, attr);
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaEventRecord(e0));
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, fold_kernel, p));
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaDeviceSynchronize());
        float ms = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        unsigned int flags[2];
        unsigned long long loaded = 0;
        CUDA_CHECK(cudaMemcpy(flags, flags_d, sizeof(flags), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&loaded, p.loaded, sizeof(loaded), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(st.data(), p.stamps, size_t(rounds) * G * kStamps * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(words.data(), p.words, kN * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        // every word: the sum over rounds and blocks of the partials, and one count per contributor
        // (a cluster's sum carries one count) per round
        const unsigned long long contributors = c.mode == 1 ? unsigned(G / C) : unsigned(G);
        unsigned bad = 0;
        for (int i = 0; i < kN; ++i) {
          unsigned long long want = 0;
          for (int r = 1; r <= rounds; ++r) {
            for (int b = 0; b < G; ++b) want += part_value(i, b, r) << kCountBits;
            want += contributors;
          }
          if (words[i] != want) ++bad;
        }
        std::vector<double> ol, rf, rl, tf, tl, sp;
        for (int r = 0; r < rounds; ++r) {
          const unsigned long long* q = st.data() + size_t(r) * G * kStamps;
          const ProbeStampRange out = probe_stamp_range(q, G, kStamps, 0), adds = probe_stamp_range(q, G, kStamps, 1),
                                t0 = probe_stamp_range(q, G, kStamps, 2), ready = probe_stamp_range(q, G, kStamps, 3);
          ol.push_back(probe_us(out.hi, adds.hi));
          rf.push_back(probe_us(out.hi, ready.lo));
          rl.push_back(probe_us(out.hi, ready.hi));
          tf.push_back(probe_us(out.hi, t0.lo));
          tl.push_back(probe_us(out.hi, t0.hi));
          sp.push_back(probe_us(out.lo, out.hi));
        }
        Row row{c.mode, C, G, load, dly, probe_median(ol), probe_median(rf), probe_median(rl), probe_quantile(rl, 0.9), probe_median(tf),
                probe_median(tl), probe_median(sp), load ? double(loaded) / (ms * 1e-3) / 1e12 : 0.0,
                (long long)(c.mode == 1 ? G / C : G) * kN, bad, flags[1] == 0 && bad == 0};
        all_ok = all_ok && row.ok;
        rows.push_back(row);
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
      }
  if (g_json) {
    printf("{\"probe\": \"cluster_fold\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, \"rounds\": %d, "
           "\"unit\": \"us after the last block's partials are issued\", \"rows\": [",
           all_ok ? "true" : "false", prop.name, prop.multiProcessorCount, rounds);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      printf("%s{\"mode\": \"%s\", \"cluster\": %d, \"blocks\": %d, \"atomics_per_round\": %lld, \"load\": %s, "
             "\"delay_ns\": %d, \"owner_adds_last_us\": %.3f, \"ready_first_us\": %.3f, \"ready_last_us\": %.3f, "
             "\"ready_last_p90_us\": %.3f, \"thread0_first_us\": %.3f, \"thread0_last_us\": %.3f, "
             "\"producer_spread_us\": %.3f, \"load_tbs\": %.2f, \"bad_words\": %u, \"ok\": %s}",
             i ? ", " : "", r.mode ? "F1 cluster" : "F0 direct", r.cluster, r.blocks, r.atomics_per_round,
             r.load ? "true" : "false", r.delay_ns, r.owner_last, r.ready_first, r.ready_last, r.ready_last_p90, r.t0_first,
             r.t0_last, r.spread, r.load_tbs, r.bad, r.ok ? "true" : "false");
    }
    printf("]}\n");
  } else {
    printf("device: %s (%d SMs), %d threads per block, %d rounds\n", prop.name, prop.multiProcessorCount, kThreads,
           rounds);
    printf("us after the last block's partials are issued, median over rounds (p90 of the last block)\n");
    printf("%-11s %2s %4s %7s %4s %5s | %9s | %11s %10s %7s | %13s %12s | %6s %6s %s\n", "mode", "C", "G", "atomics",
           "load", "delay", "adds last", "ready first", "ready last", "p90", "thread0 first", "thread0 last", "spread",
           "TB/s", "check");
    for (const Row& r : rows)
      printf("%-11s %2d %4d %7lld %4s %5d | %9.3f | %11.3f %10.3f %7.3f | %13.3f %12.3f | %6.3f %6.2f %s\n",
             r.mode ? "F1 cluster" : "F0 direct", r.cluster, r.blocks, r.atomics_per_round, r.load ? "on" : "off",
             r.delay_ns, r.owner_last, r.ready_first, r.ready_last, r.ready_last_p90, r.t0_first, r.t0_last, r.spread,
             r.load_tbs, r.ok ? "OK" : "FAIL");
  }
  return all_ok ? 0 : 1;
}
