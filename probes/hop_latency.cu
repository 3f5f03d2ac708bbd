// Probe: one grid hop of the streaming schedule, measured alone. G blocks (one per SM) each
// publish their slice of N tagged 64-bit words {fp32 value, u32 tag}; then every block gathers
// all N, as the stream schedule's residual (N = 1,024) and activation (N = 3,072) hops do. Per
// round and block it stamps %globaltimer when the block's stores are out, when thread 0 has its
// own words, and when the whole block has its words (the barrier after the gather). The kernel's
// X-ray puts ~1.4 us between the last producer's store and the first block holding all its words,
// and ~2.5 us to the last block (NOTES.md, fourth session); this probe splits that number by
// what it varies:
//   --load       warp 16 lane 0 of every block streams 16 KB cp.async.bulk copies from a 1 GB
//                buffer into a 12-slot shared-memory ring, as the kernel's producer does (~4 TB/s
//                grid-wide), or stays idle;
//   strategies   S0  every thread polls its N/512 words back to back, re-polling only the
//                    missing ones (kernel/schedule_stream.cuh tagged_gather);
//                S1  two waves of polls in flight, the second issued --offset cycles after the
//                    first, so a word that lands just after a poll is seen half a round trip
//                    sooner; before the block barrier every in-flight load is waited for (the
//                    register the kernel would reuse), so the tail cost is included;
//                S2  counter: producers store, bar.sync, then thread 0 adds 1 with
//                    red.release.gpu; consumers: thread 0 polls ld.acquire.gpu until G arrivals,
//                    bar.sync, then every thread loads its words once (tags checked);
//                S3  (eighth session) a split-K reduction in one hop: every block adds its
//                    contribution to ALL N elements with red.global.add.u64 on fixed-point words
//                    (value << 12 | a count of 1: the kernel's counted words, order-independent,
//                    nothing cleared between rounds), block b into partition b % P of each
//                    element; a consumer thread polls the P words of each of its elements until
//                    every count is complete (r x the partition's blocks, mod 4096). P = 1 is one
//                    word per element (the fourth session's 133 atomics per word, ~6 us in the
//                    kernel); larger P trades serialized atomics per word for more words polled.
//                    The question it answers: can MLP-1 -> down be fused into one split-K hop
//                    (down's columns multiplied where the activations are made) at a lower cost
//                    than today's activation hop plus down's own phase (NOTES.md, eighth session).
//                    Values are checked on the host after the last round.
//   --delay NS   every configuration runs twice: all blocks store together after a grid barrier,
//                and each block first waiting a pseudo-random 0..NS (the producers' spread; the
//                kernel's producers end within 1.0-1.7 us of each other; default 1500).
// Every wait is bounded (--timeout-ms); values and tags are checked (a wrong word = failure).
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I kernel -I probes \
//          -o /tmp/hop_latency probes/hop_latency.cu
// Run:   /tmp/hop_latency [--json] [--rounds 200] [--offset 700] [--delay 1500] [--timeout-ms 2000]
//        (every strategy x N in {1024, 3072} x load off/on x delay 0/NS; seconds on an H200)
#define PROBE_NAME "hop_latency"
#include <algorithm>
#include <cstring>
#include <vector>

#include "probe_common.cuh"
#include "ring.cuh"
#include "probe_loader.cuh"

using monolith::mbar_init;

constexpr int kConsumers = 512;               // 16 consumer warps, as the stream schedule
constexpr int kThreads = kConsumers + 32;     // + the loader warp
constexpr int kLoadSlots = 12, kLoadSlotBytes = 16 * 1024;  // the kernel's ring: 192 KB
constexpr size_t kLoadBufBytes = size_t(1) << 30;           // far larger than the 50 MB L2
constexpr int kMaxWordsPerThread = 6;         // N <= 3,072
constexpr int kStamps = 3;                    // stores out, thread 0's words in, block's words in

struct Params {
  unsigned long long* words;   // N tagged words (S3: kMaxParts x N counted words)
  unsigned int* counter;       // S2 arrivals (monotonic over rounds)
  unsigned int* bar;           // grid barrier between rounds (monotonic)
  unsigned int* abort;         // set by a timed-out wait: every block stops
  unsigned int* bad;           // wrong values or tags seen
  unsigned long long* stamps;  // [round][block][kStamps] globaltimer ns
  unsigned long long* loaded;  // bytes the loaders copied
  const uint8_t* load_buf;
  int n, rounds, strategy, load, delay_ns, offset_cycles, parts;
  unsigned long long timeout_ns;
};
constexpr int kMaxParts = 32;  // S3's largest P

// S3: block b's contribution to element i in round r (raw fixed-point units, small: the host can
// sum them), and the count a partition's word holds after round r (12 bits, as the kernel's)
__device__ __host__ __forceinline__ unsigned long long s3_value(int i, int b, int r) {
  return (unsigned long long)((i + 3 * b + 7 * r) & 0xff);
}
__device__ __host__ __forceinline__ int s3_blocks(int part, int parts, int G) { return G / parts + (part < G % parts ? 1 : 0); }

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ float word_value(int i, int r) { return float(i) * 0.5f + float(r); }
__device__ __forceinline__ unsigned long long make_word(int i, int r) {
  return (static_cast<unsigned long long>(uint32_t(r)) << 32) | __float_as_uint(word_value(i, r));
}
__device__ __forceinline__ bool tag_is(unsigned long long w, int r) { return uint32_t(w >> 32) == uint32_t(r); }

// S0: the kernel's tagged_gather (issue all, check all, re-poll the missing ones).
template <int K>
__device__ bool gather_s0(const Params& p, int r, unsigned long long out[K], uint64_t deadline) {
  const int t = threadIdx.x;
  unsigned long long w[K];
#pragma unroll
  for (int i = 0; i < K; ++i) w[i] = ld_relaxed(p.words + t + i * kConsumers);
  for (uint32_t it = 0;; ++it) {
    bool all = true;
#pragma unroll
    for (int i = 0; i < K; ++i) all = all && tag_is(w[i], r);
    if (all) break;
    if ((it & 15u) == 15u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) return false;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (!tag_is(w[i], r)) w[i] = ld_relaxed(p.words + t + i * kConsumers);
  }
#pragma unroll
  for (int i = 0; i < K; ++i) out[i] = w[i];
  return true;
}

// S1: two waves in flight, --offset cycles apart; a word is taken from whichever wave shows it
// first and is not polled again. Before returning, every load still in flight is waited for.
template <int K>
__device__ bool gather_s1(const Params& p, int r, unsigned long long out[K], uint64_t deadline) {
  const int t = threadIdx.x;
  unsigned long long a[K], b[K];
  uint32_t have = 0;
  constexpr uint32_t kAll = (1u << K) - 1u;
#pragma unroll
  for (int i = 0; i < K; ++i) a[i] = ld_relaxed(p.words + t + i * kConsumers);
  const long long c0 = clock64();
  while (clock64() - c0 < p.offset_cycles) {
  }
#pragma unroll
  for (int i = 0; i < K; ++i) b[i] = ld_relaxed(p.words + t + i * kConsumers);
  // one wave's turn: take the words it shows, then poll again only the ones still missing
  auto turn = [&](unsigned long long (&w)[K]) {
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (!((have >> i) & 1u) && tag_is(w[i], r)) {
        out[i] = w[i];
        have |= 1u << i;
      }
    if (have == kAll) return true;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (!((have >> i) & 1u)) w[i] = ld_relaxed(p.words + t + i * kConsumers);
    return false;
  };
  bool ok = true;
  for (uint32_t it = 0;; ++it) {
    if (turn(a) || turn(b)) break;
    if ((it & 15u) == 15u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) {
      ok = false;
      break;
    }
  }
  // the tail: wait for every load still in flight (what a later reuse of the register would do)
  unsigned long long sink = 0;
#pragma unroll
  for (int i = 0; i < K; ++i) sink ^= a[i] ^ b[i];
  asm volatile("" ::"l"(sink));
  return ok;
}

// S2: thread 0 polls the arrival counter (acquire), the block barrier passes it on, one load each.
template <int K>
__device__ bool gather_s2(const Params& p, int r, unsigned long long out[K], uint64_t deadline, int* s_ok) {
  const int t = threadIdx.x;
  if (t == 0) {
    int ok = 1;
    const unsigned int target = unsigned(r) * gridDim.x;
    for (uint32_t it = 0;; ++it) {
      unsigned int v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p.counter) : "memory");
      if (int(v - target) >= 0) break;
      if ((it & 15u) == 15u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) {
        ok = 0;
        break;
      }
    }
    *s_ok = ok;
  }
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
#pragma unroll
  for (int i = 0; i < K; ++i) out[i] = ld_relaxed(p.words + t + i * kConsumers);
  return *s_ok != 0;
}

// S3: this thread's elements t + i * 512, all P partition words of each, re-polling the words
// whose count is not complete yet.
template <int K>
__device__ bool gather_s3(const Params& p, int r, uint64_t deadline) {
  const int t = threadIdx.x, P = p.parts, G = gridDim.x;
  for (int i = 0; i < K; ++i) {
    const int e = t + i * kConsumers;
    if (e >= p.n) break;
    uint32_t want = 0;  // bit q: partition q still missing
    for (int q = 0; q < P; ++q) want |= 1u << q;
    for (uint32_t it = 0; want != 0u; ++it) {
      unsigned long long w[kMaxParts];  // fully unrolled with predicates: registers, not a stack frame
#pragma unroll
      for (int q = 0; q < kMaxParts; ++q)
        if (q < P && ((want >> q) & 1u)) w[q] = ld_relaxed(p.words + size_t(q) * p.n + e);
#pragma unroll
      for (int q = 0; q < kMaxParts; ++q)
        if (q < P && ((want >> q) & 1u) && uint32_t(w[q] & 0xfffu) == (uint32_t(r) * uint32_t(s3_blocks(q, P, G)) & 0xfffu))
          want &= ~(1u << q);
      if ((it & 15u) == 15u && want != 0u && (*(volatile unsigned int*)p.abort || globaltimer() > deadline)) return false;
    }
  }
  return true;
}

template <int K>
__device__ void consumer(const Params& p, int* s_ok, int* s_stop) {
  const int t = threadIdx.x, b = blockIdx.x, G = gridDim.x;
  const int w0 = int((long long)p.n * b / G), w1 = int((long long)p.n * (b + 1) / G);
  for (int r = 1; r <= p.rounds; ++r) {
    // every block starts the round together (grid barrier), then waits its pseudo-random delay
    if (t == 0) {
      if (probe_arrive_and_wait(p.bar, p.abort, unsigned(r) * G, p.timeout_ns) != 0) *s_ok = 0;
      probe_spread_sleep(b, r, p.delay_ns);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (*(volatile int*)s_ok == 0) break;
    if (p.strategy == 3) {
      unsigned long long* part = p.words + size_t(b % p.parts) * p.n;
      for (int i = t; i < p.n; i += kConsumers) atomicAdd(part + i, (s3_value(i, b, r) << 12) | 1ull);
    } else {
      for (int i = w0 + t; i < w1; i += kConsumers) st_relaxed(p.words + i, make_word(i, r));
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    unsigned long long* st = p.stamps + (size_t(r - 1) * G + b) * kStamps;
    if (t == 0) {
      st[0] = globaltimer();  // the block's stores are issued (the kernel stamps a phase's end here)
      if (p.strategy == 2) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.counter) : "memory");
    }
    const uint64_t deadline = globaltimer() + p.timeout_ns;
    unsigned long long got[K];
    bool ok = p.strategy == 0 ? gather_s0<K>(p, r, got, deadline)
              : p.strategy == 1 ? gather_s1<K>(p, r, got, deadline)
              : p.strategy == 2 ? gather_s2<K>(p, r, got, deadline, s_ok)
                                : gather_s3<K>(p, r, deadline);
    if (t == 0) st[1] = globaltimer();
    int bad = 0;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int idx = t + i * kConsumers;
      if (ok && p.strategy != 3 && got[i] != make_word(idx, r)) ++bad;  // S3: checked on the host
    }
    if (bad) atomicAdd(p.bad, unsigned(bad));
    if (!ok) atomicExch(p.abort, 1u);
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (t == 0) st[2] = globaltimer();
  }
  if (t == 0) *(volatile int*)s_stop = 1;
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1) hop_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kLoadSlots];
  __shared__ int s_ok, s_stop;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kLoadSlots; ++i) mbar_init(&full[i], 1);
    s_ok = 1;
    s_stop = 0;
    monolith::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers && p.load)
      probe_ring_loader<kLoadSlots, kLoadSlotBytes>(p.load_buf, kLoadBufBytes, ring, full, &s_stop, p.timeout_ns, p.loaded);
    return;
  }
  consumer<K>(p, &s_ok, &s_stop);
}

struct Row {
  const char* strategy;
  int n, load, delay_ns;
  double ready_first, ready_last, ready_last_p90, t0_first, t0_last, spread, load_tbs;
  unsigned bad;
  bool ok;
  int parts;  // S3's P (1 otherwise)
};

int main(int argc, char** argv) {
  int rounds = 200, offset = 700, delay = 1500;
  double timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--offset") && i + 1 < argc) offset = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--delay") && i + 1 < argc) delay = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--json] [--rounds N] [--offset CYCLES] [--delay NS] [--timeout-ms MS]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1 || rounds > 100000 || offset < 0 || delay < 0) {
    fprintf(stderr, "hop_latency: --rounds 1..100000, --offset >= 0, --delay >= 0\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  const int smem = kLoadSlots * kLoadSlotBytes;
  if (!coop || prop.sharedMemPerBlockOptin < size_t(smem) + 1024) {
    fprintf(stderr, "hop_latency: needs cooperative launch and %d B of shared memory per block (has %zu)\n", smem + 1024,
            size_t(prop.sharedMemPerBlockOptin));
    if (g_json) printf("{\"probe\": \"hop_latency\", \"ok\": false, \"error\": \"device cannot hold the grid\"}\n");
    return 1;
  }
  CUDA_CHECK(cudaFuncSetAttribute(hop_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUDA_CHECK(cudaFuncSetAttribute(hop_kernel<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hop_kernel<6>, kThreads, smem));
  const int G = prop.multiProcessorCount;
  if (per_sm < 1) {
    fprintf(stderr, "hop_latency: one block per SM does not fit\n");
    return 1;
  }
  Params p{};
  const size_t word_bytes = size_t(kMaxParts) * 1024 * sizeof(unsigned long long);  // >= 3,072 tagged words
  static_assert(kMaxParts * 1024 >= kConsumers * kMaxWordsPerThread, "S3's buffer holds the tagged words too");
  CUDA_CHECK(cudaMalloc(&p.words, word_bytes));
  CUDA_CHECK(cudaMalloc(&p.counter, 4 * sizeof(unsigned int)));
  p.bar = p.counter + 1;
  p.abort = p.counter + 2;
  p.bad = p.counter + 3;
  CUDA_CHECK(cudaMalloc(&p.stamps, size_t(rounds) * G * kStamps * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&p.loaded, sizeof(unsigned long long)));
  uint8_t* lb = nullptr;
  CUDA_CHECK(cudaMalloc(&lb, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(lb, 1, kLoadBufBytes));
  p.load_buf = lb;
  p.rounds = rounds;
  p.offset_cycles = offset;
  p.timeout_ns = (unsigned long long)(timeout_ms * 1e6);

  const char* names[4] = {"S0 every thread polls", "S1 two polls in flight", "S2 counter + release",
                          "S3 split-K atomics, P words"};
  std::vector<Row> rows;
  std::vector<unsigned long long> st(size_t(rounds) * G * kStamps);
  bool all_ok = true;
  std::vector<int> delays{0};
  if (delay > 0) delays.push_back(delay);
  struct Config {
    int delay_ns, n, load, strategy, parts;
  };
  std::vector<Config> configs;
  for (int dly : delays)
    for (int n : {1024, 3072})
      for (int load : {0, 1}) {
        for (int s = 0; s < 3; ++s) configs.push_back({dly, n, load, s, 1});
        if (n == 1024)  // S3: the residual's 1,024 elements (down's outputs)
          for (int parts : {1, 4, 8, 16, 32}) configs.push_back({dly, n, load, 3, parts});
      }
  std::vector<unsigned long long> words_host;
  for (const Config& c : configs) {
    const int dly = c.delay_ns, n = c.n, load = c.load, s = c.strategy;
    p.delay_ns = dly;
    p.parts = c.parts;
    CUDA_CHECK(cudaMemset(p.words, 0, word_bytes));
    CUDA_CHECK(cudaMemset(p.counter, 0, 4 * sizeof(unsigned int)));
    CUDA_CHECK(cudaMemset(p.loaded, 0, sizeof(unsigned long long)));
    p.n = n;
    p.strategy = s;
    p.load = load;
    void* args[] = {&p};
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0));
    if (n == 1024)
      CUDA_CHECK(cudaLaunchCooperativeKernel((void*)hop_kernel<2>, dim3(G), dim3(kThreads), args, smem, 0));
    else
      CUDA_CHECK(cudaLaunchCooperativeKernel((void*)hop_kernel<6>, dim3(G), dim3(kThreads), args, smem, 0));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaDeviceSynchronize());
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    unsigned int flags[4];
    unsigned long long loaded = 0;
    CUDA_CHECK(cudaMemcpy(flags, p.counter, sizeof(flags), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&loaded, p.loaded, sizeof(loaded), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(st.data(), p.stamps, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<double> rf, rl, tf, tl, sp;
    for (int r = 0; r < rounds; ++r) {
      const unsigned long long* q = st.data() + size_t(r) * G * kStamps;
      const ProbeStampRange out = probe_stamp_range(q, G, kStamps, 0), t0 = probe_stamp_range(q, G, kStamps, 1),
                            ready = probe_stamp_range(q, G, kStamps, 2);
      rf.push_back(probe_us(out.hi, ready.lo));
      rl.push_back(probe_us(out.hi, ready.hi));
      tf.push_back(probe_us(out.hi, t0.lo));
      tl.push_back(probe_us(out.hi, t0.hi));
      sp.push_back(probe_us(out.lo, out.hi));
    }
    if (s == 3 && flags[2] == 0) {  // S3: every word's value and count after the last round
      words_host.resize(size_t(c.parts) * n);
      CUDA_CHECK(cudaMemcpy(words_host.data(), p.words, words_host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      for (int q = 0; q < c.parts; ++q)
        for (int i = 0; i < n; ++i) {
          unsigned long long want = 0;
          for (int r = 1; r <= rounds; ++r)
            for (int b = q; b < G; b += c.parts) want += (s3_value(i, b, r) << 12) | 1ull;
          if (words_host[size_t(q) * n + i] != want) ++flags[3];
        }
    }
    Row row{names[s], n, load, dly, probe_median(rf), probe_median(rl), probe_quantile(rl, 0.9), probe_median(tf), probe_median(tl), probe_median(sp),
            load ? double(loaded) / (ms * 1e-3) / 1e12 : 0.0, flags[3], flags[2] == 0 && flags[3] == 0, c.parts};
    all_ok = all_ok && row.ok;
    rows.push_back(row);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
  }
  if (g_json) {
    printf("{\"probe\": \"hop_latency\", \"ok\": %s, \"device\": \"%s\", \"sm_count\": %d, \"blocks\": %d, "
           "\"rounds\": %d, \"offset_cycles\": %d, \"unit\": \"us after the last block's stores\", \"rows\": [",
           all_ok ? "true" : "false", prop.name, prop.multiProcessorCount, G, rounds, offset);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      printf("%s{\"strategy\": \"%s\", \"parts\": %d, \"words\": %d, \"load\": %s, \"delay_ns\": %d, \"ready_first_us\": %.3f, \"ready_last_us\": %.3f, "
             "\"ready_last_p90_us\": %.3f, \"thread0_first_us\": %.3f, \"thread0_last_us\": %.3f, "
             "\"producer_spread_us\": %.3f, \"load_tbs\": %.2f, \"bad_words\": %u, \"ok\": %s}",
             i ? ", " : "", r.strategy, r.parts, r.n, r.load ? "true" : "false", r.delay_ns, r.ready_first, r.ready_last, r.ready_last_p90,
             r.t0_first, r.t0_last, r.spread, r.load_tbs, r.bad, r.ok ? "true" : "false");
    }
    printf("]}\n");
  } else {
    printf("device: %s (%d SMs), %d blocks x %d threads, %d rounds, S1 offset %d cycles\n", prop.name,
           prop.multiProcessorCount, G, kThreads, rounds, offset);
    printf("µs after the last block's stores, median over rounds (p90 of the last block)\n");
    printf("%-28s %3s %5s %5s %6s | %12s %12s %8s | %13s %13s | %7s %7s %s\n", "strategy", "P", "words", "load", "delay",
           "ready first",
           "ready last", "p90", "thread0 first", "thread0 last", "spread", "TB/s", "check");
    for (const Row& r : rows)
      printf("%-28s %3d %5d %5s %6d | %12.3f %12.3f %8.3f | %13.3f %13.3f | %7.3f %7.2f %s\n", r.strategy, r.parts, r.n,
             r.load ? "on" : "off", r.delay_ns, r.ready_first, r.ready_last, r.ready_last_p90, r.t0_first, r.t0_last, r.spread,
             r.load_tbs, r.ok ? "OK" : "FAIL");
  }
  return all_ok ? 0 : 1;
}
