// Probe (issue 48, step 0): one grid hop of the streaming schedule carrying k activation vectors
// instead of one. probes/hop_latency.cu measured the hop for one vector (1,024 and 3,072 tagged
// words: 0.51 / 0.77 and 0.51 / 1.02 us first / last block ready, idle memory); a k-token pass
// pays each hop once for k vectors, so what it costs is how the hop grows with its words. G = 128
// blocks (the kernel's launch on the 132-SM H200), 512 consumer threads + a loader warp per block.
// Word kinds (docs/DESIGN.md §5):
//   tagged   {fp32 value, u32 tag} in one 64-bit relaxed store; N = 1,024 k (residual / q / O
//            outputs) or 3,072 k (activations) words, block b publishes its slice, every block
//            gathers all N (every thread issues its N / 512 loads back to back, re-polls the
//            missing ones; at most kBatch loads per thread in flight, more in passes);
//   packed   the same values as bf16, two per word with a u32 tag: N / 2 words;
//   counted  O's reduction: 1,024 k fixed-point words (value << 12 | 1 per contribution, int64
//            atomics, never cleared), each element added to by the block of each of the 8 groups
//            that owns its O row (64 rows per block) and, with 9 contributors, by its seed block
//            (i * G) >> 10; a reader polls until the count is the round's (r * C mod 4096), the
//            host checks every value after the last round.
// Modes:
//   idle     the loader warp does nothing (the chain model's floor: bench/chainmodel.py);
//   quiet    the loader keeps 12 x 16 KB bulk copies in flight (the kernel's ring), and each round
//            runs as the kernel's hop does: the block raises the hop mark, waits --quiet-ns (the
//            phase's last round after its last hand-back), stores, gathers and drops the mark; the
//            loader issues no copy while the mark is up, for at most --hold-cycles (the kernel's
//            hop hold, 2,000 for E4M3);
//   drained  as quiet, with a window of --drain-ns (default 6,000: the grid's 25 MB of copies in
//            flight drain in ~5.4 us at 4.7 TB/s) and the loader held until the mark drops: the
//            hop after the memory system went quiet, the floor a perfect hold would reach;
//   stream   the loader streams without a hold (only with --modes ...,stream).
// Per round and block, %globaltimer stamps: the block's stores out, thread 0 has its words, the
// block has all its words (after a block barrier). Reported per configuration, against the last
// block's stores: ready first / last block (median, p90, and the mean: the timer ticks by 256 ns
// here, the mean over rounds resolves below a tick), thread 0 first / last, the producers'
// spread. Every word's tag and value is checked (counted: the count per round, the value on the host);
// every wait is bounded (--timeout-ms), a timeout fails the configuration.
//
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I probes \
//          -o /tmp/hop_k probes/hop_k.cu
// Run:   /tmp/hop_k [--json] [--rounds 200] [--ks 1,2,4,8] [--modes idle,quiet,drained] [--quiet-ns 600]
//        [--drain-ns 6000] [--hold-cycles 2000] [--timeout-ms 2000]   (72 configurations, seconds on an H200)
#define PROBE_NAME "hop_k"
#include <cstring>
#include <string>
#include <vector>

#include "probe_common.cuh"
#include "ktoken_common.cuh"

constexpr int kConsumers = 512, kThreads = kConsumers + 32;
constexpr int kLoadSlots = 12, kLoadSlotBytes = 16 * 1024;  // the kernel's ring: 192 KB
constexpr size_t kLoadBufBytes = size_t(1) << 30;           // far larger than the 50 MB L2
constexpr int kStamps = 3;
constexpr int kBlocks = 128, kGroups = 8, kGroupBlocks = kBlocks / kGroups;  // the kernel's launch
constexpr int kBatch = 24;  // loads in flight per thread at most (registers); more words: passes
constexpr int kMaxK = 8;
constexpr size_t kMaxWords = size_t(3072) * kMaxK;

enum Kind { kTagged = 0, kPacked = 1, kCounted = 2 };
enum Mode { kIdle = 0, kQuiet = 1, kStream = 2, kDrained = 3 };
constexpr int kModes = 4;

struct Params {
  unsigned long long* words;
  unsigned int* flags;  // [0] grid barrier, [1] abort, [2] bad words
  unsigned long long* stamps;
  unsigned long long* loaded;
  const uint8_t* load_buf;
  int kind, n_words, contributors, rounds, mode, quiet_ns, drain_ns;
  long long hold_cycles;
  unsigned long long timeout_ns;
};

// tagged: element i's value in round r (exact in fp32); packed: element i's value, exact in bf16
__device__ __host__ __forceinline__ float tagged_value(int i, int r) { return float(i) * 0.5f + float(r); }
__device__ __host__ __forceinline__ uint32_t packed_bits(int i, int r) { return uint32_t((i * 7 + r) & 0xff); }
// the bf16 bits of the integer v < 256 (exact)
__device__ __host__ __forceinline__ uint32_t bf16_of_int(uint32_t v) {
  const float f = float(v);
  uint32_t u;
  memcpy(&u, &f, 4);
  return u >> 16;
}
__device__ __forceinline__ unsigned long long tagged_word(int i, int r) {
  return (static_cast<unsigned long long>(uint32_t(r)) << 32) | __float_as_uint(tagged_value(i, r));
}
__device__ __forceinline__ unsigned long long packed_word(int j, int r) {
  const uint32_t lo = bf16_of_int(packed_bits(2 * j, r)) | (bf16_of_int(packed_bits(2 * j + 1, r)) << 16);
  return (static_cast<unsigned long long>(uint32_t(r)) << 32) | lo;
}
// counted: contributor q's (0..7 the groups, 8 the seed) value for element e in round r
__device__ __host__ __forceinline__ unsigned long long counted_value(int e, int q, int r) {
  return (unsigned long long)((e + 5 * q + 11 * r) & 0xff);
}
__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ bool timed_out(const Params& p, uint32_t it, uint64_t deadline) {
  return (it & 15u) == 15u && (*(volatile unsigned int*)(p.flags + 1) || globaltimer() > deadline);
}

// Tagged or packed words t + 512 i, i < K, in passes of kBatch: all loads of a pass back to back,
// then only the missing ones again. Returns false on a timeout; counts wrong words in *bad.
template <int K>
__device__ bool gather_tagged(const Params& p, int r, uint64_t deadline, unsigned* bad) {
  constexpr int kB = K < kBatch ? K : kBatch;
  static_assert(K % kB == 0, "whole passes");
  const int t = threadIdx.x;
#pragma unroll 1
  for (int pass = 0; pass < K / kB; ++pass) {
    unsigned long long w[kB];
    const unsigned long long* base = p.words + t + size_t(pass) * kB * kConsumers;
#pragma unroll
    for (int i = 0; i < kB; ++i) w[i] = ld_relaxed(base + i * kConsumers);
    for (uint32_t it = 0;; ++it) {
      bool all = true;
#pragma unroll
      for (int i = 0; i < kB; ++i) all = all && uint32_t(w[i] >> 32) == uint32_t(r);
      if (all) break;
      if (timed_out(p, it, deadline)) return false;
#pragma unroll
      for (int i = 0; i < kB; ++i)
        if (uint32_t(w[i] >> 32) != uint32_t(r)) w[i] = ld_relaxed(base + i * kConsumers);
    }
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const int idx = t + (pass * kB + i) * kConsumers;
      *bad += w[i] != (p.kind == kPacked ? packed_word(idx, r) : tagged_word(idx, r));
    }
  }
  return true;
}

// Counted elements t + 512 i, i < K: poll until each count is round r's (r * C mod 4096: the
// host zeroes the words before each configuration); the values are checked on the host after the
// last round (the sum of every round's contributions).
template <int K>
__device__ bool gather_counted(const Params& p, int r, uint64_t deadline) {
  const int t = threadIdx.x;
  const uint32_t want = (uint32_t(r) * uint32_t(p.contributors)) & 0xfffu;
  unsigned long long w[K];
#pragma unroll
  for (int i = 0; i < K; ++i) w[i] = ld_relaxed(p.words + t + i * kConsumers);
  for (uint32_t it = 0;; ++it) {
    bool all = true;
#pragma unroll
    for (int i = 0; i < K; ++i) all = all && uint32_t(w[i] & 0xfffu) == want;
    if (all) break;
    if (timed_out(p, it, deadline)) return false;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (uint32_t(w[i] & 0xfffu) != want) w[i] = ld_relaxed(p.words + t + i * kConsumers);
  }
  return true;
}

// block b's contributions to the counted words of round r: the O rows it owns in its group (64
// per block) of every vector, and with 9 contributors the elements it seeds ((i * G) >> 10 == b)
__device__ void add_counted(const Params& p, int r) {
  const int b = blockIdx.x, t = threadIdx.x, q = b / kGroupBlocks, row0 = (b % kGroupBlocks) * 64;
  const int k = p.n_words / 1024;
  for (int j = t; j < 64 * k; j += kConsumers) {
    const int e = (j / 64) * 1024 + row0 + (j % 64);
    atomicAdd(p.words + e, (counted_value(e, q, r) << 12) | 1ull);
  }
  if (p.contributors == 9)
    for (int j = t; j < 8 * k; j += kConsumers) {
      const int e = (j / 8) * 1024 + 8 * b + (j % 8);  // G = 128: (i * 128) >> 10 == i / 8
      atomicAdd(p.words + e, (counted_value(e, 8, r) << 12) | 1ull);
    }
}

template <int K>
__device__ void consumer(const Params& p, int* s_ok, volatile int* s_hold) {
  const int t = threadIdx.x, b = blockIdx.x, G = gridDim.x;
  const int n_pub = p.n_words;  // words published (tagged / packed)
  const int w0 = int((long long)n_pub * b / G), w1 = int((long long)n_pub * (b + 1) / G);
  unsigned bad = 0;
  int hword = 0;
  for (int r = 1; r <= p.rounds; ++r) {
    if (t == 0 && probe_arrive_and_wait(p.flags, p.flags + 1, unsigned(r) * G, p.timeout_ns) != 0) *s_ok = 0;
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (*(volatile int*)s_ok == 0) break;
    if (p.mode == kQuiet || p.mode == kDrained) {  // the hop mark, then the phase's last round (a quiet window)
      if (t == 0) *s_hold = ++hword;
      const uint64_t q0 = globaltimer(), window = uint64_t(p.mode == kQuiet ? p.quiet_ns : p.drain_ns);
      while (globaltimer() - q0 < window) {
      }
    }
    if (p.kind == kCounted) {
      add_counted(p, r);
    } else {
      for (int i = w0 + t; i < w1; i += kConsumers) st_relaxed(p.words + i, p.kind == kPacked ? packed_word(i, r) : tagged_word(i, r));
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    unsigned long long* st = p.stamps + (size_t(r - 1) * G + b) * kStamps;
    if (t == 0) st[0] = globaltimer();
    const uint64_t deadline = globaltimer() + p.timeout_ns;
    bool ok;
    if constexpr (K <= 16) {
      ok = p.kind == kCounted ? gather_counted<K>(p, r, deadline) : gather_tagged<K>(p, r, deadline, &bad);
    } else {
      ok = gather_tagged<K>(p, r, deadline, &bad);
    }
    if (t == 0) st[1] = globaltimer();
    if (!ok) atomicExch(p.flags + 1, 1u);
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    if (t == 0) {
      st[2] = globaltimer();
      if (p.mode == kQuiet || p.mode == kDrained) *s_hold = ++hword;  // the next phase's opening drops the mark
    }
  }
  if (bad) atomicAdd(p.flags + 2, bad);
}

template <int K>
__global__ void __launch_bounds__(kThreads, 1) hop_k_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[kLoadSlots];
  __shared__ int s_ok, s_stop, s_hold;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kLoadSlots; ++i) kt::mbar_init(&full[i], 1);
    s_ok = 1;
    s_stop = 0;
    s_hold = 0;
    kt::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers && p.mode != kIdle)
      kt::ring_loader<kLoadSlots, kLoadSlotBytes>(p.load_buf, kLoadBufBytes, ring, full, &s_stop, &s_hold,
                                                  p.mode == kQuiet ? p.hold_cycles : p.mode == kDrained ? (1ll << 40) : 0,
                                                  p.timeout_ns, p.loaded);
    return;
  }
  consumer<K>(p, &s_ok, &s_hold);
  if (threadIdx.x == 0) *(volatile int*)&s_stop = 1;
}

using KernelFn = void (*)(Params);
static KernelFn kernel_for(int K) {
  switch (K) {
    case 1: return hop_k_kernel<1>;
    case 2: return hop_k_kernel<2>;
    case 3: return hop_k_kernel<3>;
    case 4: return hop_k_kernel<4>;
    case 6: return hop_k_kernel<6>;
    case 8: return hop_k_kernel<8>;
    case 12: return hop_k_kernel<12>;
    case 16: return hop_k_kernel<16>;
    case 24: return hop_k_kernel<24>;
    case 48: return hop_k_kernel<48>;
    default: return nullptr;
  }
}

static std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* c = s; *c;) {
    v.push_back(atoi(c));
    while (*c && *c != ',') ++c;
    if (*c == ',') ++c;
  }
  return v;
}

struct Config {
  int kind, base, k, contributors, mode;
};
static const char* kKindNames[3] = {"tagged", "packed", "counted"};
static const char* kModeNames[kModes] = {"idle", "quiet", "stream", "drained"};

int main(int argc, char** argv) {
  int rounds = 200, quiet_ns = 600, drain_ns = 6000, hold = 2000;
  double timeout_ms = 2000;
  std::vector<int> ks{1, 2, 4, 8};
  std::vector<int> modes{kIdle, kQuiet, kDrained};
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quiet-ns") && i + 1 < argc) quiet_ns = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--drain-ns") && i + 1 < argc) drain_ns = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hold-cycles") && i + 1 < argc) hold = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--ks") && i + 1 < argc) ks = parse_list(argv[++i]);
    else if (!strcmp(argv[i], "--modes") && i + 1 < argc) {
      modes.clear();
      const std::string s = argv[++i];
      for (int m = 0; m < kModes; ++m)
        if (s.find(kModeNames[m]) != std::string::npos) modes.push_back(m);
    } else {
      fprintf(stderr, "usage: %s [--json] [--rounds N] [--ks 1,2,4,8] [--modes idle,quiet,drained,stream] [--quiet-ns NS] [--drain-ns NS] "
                      "[--hold-cycles C] [--timeout-ms MS]\n", argv[0]);
      return 2;
    }
  }
  bool args_ok = rounds >= 1 && rounds <= 100000 && quiet_ns >= 0 && drain_ns >= 0 && hold >= 0 && timeout_ms > 0 && !ks.empty() && !modes.empty();
  for (int k : ks) args_ok = args_ok && (k == 1 || k == 2 || k == 4 || k == 8);
  if (!args_ok) {
    fprintf(stderr, "hop_k: --rounds 1..100000, --ks from {1, 2, 4, 8}, --modes from idle/quiet/drained/stream, --quiet-ns / --drain-ns / --hold-cycles >= 0\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  const int smem = kLoadSlots * kLoadSlotBytes;
  if (!coop || prop.sharedMemPerBlockOptin < size_t(smem) + 1024 || prop.multiProcessorCount < kBlocks) {
    fprintf(stderr, "hop_k: needs cooperative launch, %d SMs and %d B of shared memory per block\n", kBlocks, smem + 1024);
    if (g_json) printf("{\"probe\": \"hop_k\", \"ok\": false, \"error\": \"device cannot hold the grid\"}\n");
    return 1;
  }
  for (int K : {1, 2, 3, 4, 6, 8, 12, 16, 24, 48}) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel_for(K), cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(K), kThreads, smem));
    if (per_sm < 1) {
      fprintf(stderr, "hop_k: one block per SM does not fit (K = %d)\n", K);
      return 1;
    }
  }
  const int G = kBlocks;
  Params p{};
  CUDA_CHECK(cudaMalloc(&p.words, kMaxWords * 8));
  CUDA_CHECK(cudaMalloc(&p.flags, 4 * sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(&p.stamps, size_t(rounds) * G * kStamps * 8));
  CUDA_CHECK(cudaMalloc(&p.loaded, 8));
  uint8_t* lb = nullptr;
  CUDA_CHECK(cudaMalloc(&lb, kLoadBufBytes));
  CUDA_CHECK(cudaMemset(lb, 1, kLoadBufBytes));
  p.load_buf = lb;
  p.rounds = rounds;
  p.quiet_ns = quiet_ns;
  p.drain_ns = drain_ns;
  p.hold_cycles = hold;
  p.timeout_ns = (unsigned long long)(timeout_ms * 1e6);

  std::vector<Config> configs;
  for (int mode : modes)
    for (int k : ks) {
      configs.push_back({kTagged, 1024, k, 1, mode});
      configs.push_back({kTagged, 3072, k, 1, mode});
      configs.push_back({kPacked, 1024, k, 1, mode});
      configs.push_back({kPacked, 3072, k, 1, mode});
      configs.push_back({kCounted, 1024, k, 8, mode});
      configs.push_back({kCounted, 1024, k, 9, mode});
    }
  std::vector<unsigned long long> st(size_t(rounds) * G * kStamps);
  bool all_ok = true;
  if (g_json)
    printf("{\"probe\": \"hop_k\", \"device\": \"%s\", \"sm_count\": %d, \"blocks\": %d, \"rounds\": %d, \"quiet_ns\": %d, \"drain_ns\": %d, "
           "\"hold_cycles\": %d, \"unit\": \"us after the last block's stores\", \"rows\": [",
           prop.name, prop.multiProcessorCount, G, rounds, quiet_ns, drain_ns, hold);
  else
    printf("%-8s %5s %2s %2s %6s %6s | %8s %8s %8s %8s %8s | %8s %8s | %6s %5s %s\n", "kind", "base", "k", "C", "words", "mode",
           "first", "last", "last p90", "mean 1st", "mean last", "t0 first", "t0 last", "spread", "TB/s", "check");
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    const int elements = c.base * c.k;                                 // values per block per hop
    const int n_words = c.kind == kPacked ? elements / 2 : elements;  // 64-bit words per block
    const int K = n_words / kConsumers;
    p.kind = c.kind;
    p.n_words = n_words;
    p.contributors = c.contributors;
    p.mode = c.mode;
    CUDA_CHECK(cudaMemset(p.words, 0, kMaxWords * 8));
    CUDA_CHECK(cudaMemset(p.flags, 0, 4 * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(p.loaded, 0, 8));
    void* args[] = {&p};
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0));
    CUDA_CHECK(cudaLaunchCooperativeKernel((void*)kernel_for(K), dim3(G), dim3(kThreads), args, smem, 0));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaDeviceSynchronize());
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    unsigned flags[4];
    unsigned long long loaded = 0;
    CUDA_CHECK(cudaMemcpy(flags, p.flags, sizeof(flags), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&loaded, p.loaded, 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(st.data(), p.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
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
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return v.empty() ? 0.0 : s / double(v.size());
    };
    if (c.kind == kCounted && flags[1] == 0) {  // every element's value and count after the last round
      std::vector<unsigned long long> got(static_cast<size_t>(elements), 0ull);
      CUDA_CHECK(cudaMemcpy(got.data(), p.words, got.size() * 8, cudaMemcpyDeviceToHost));
      for (int e = 0; e < elements; ++e) {
        unsigned long long want = 0;
        for (int r = 1; r <= rounds; ++r)
          for (int q = 0; q < c.contributors; ++q) want += (counted_value(e, q, r) << 12) | 1ull;
        flags[2] += got[size_t(e)] != want;
      }
    }
    const bool ok = flags[1] == 0 && flags[2] == 0;
    all_ok = all_ok && ok;
    const double tbs = c.mode != kIdle ? double(loaded) / (ms * 1e-3) / 1e12 : 0.0;
    if (g_json)
      printf("%s{\"kind\": \"%s\", \"base\": %d, \"k\": %d, \"elements\": %d, \"words\": %d, \"passes\": %d, \"contributors\": %d, \"mode\": \"%s\", "
             "\"ready_first_us\": %.3f, \"ready_last_us\": %.3f, \"ready_last_p90_us\": %.3f, \"ready_first_mean_us\": %.3f, "
             "\"ready_last_mean_us\": %.3f, \"thread0_first_us\": %.3f, \"thread0_last_us\": %.3f, \"producer_spread_us\": %.3f, "
             "\"load_tbs\": %.2f, \"bad_words\": %u, \"timed_out\": %s, \"ok\": %s}",
             ci ? ", " : "", kKindNames[c.kind], c.base, c.k, elements, n_words, K > kBatch ? K / kBatch : 1, c.kind == kCounted ? c.contributors : 1,
             kModeNames[c.mode], probe_median(rf), probe_median(rl), probe_quantile(rl, 0.9), mean(rf), mean(rl), probe_median(tf),
             probe_median(tl), probe_median(sp), tbs, flags[2], flags[1] ? "true" : "false", ok ? "true" : "false");
    else
      printf("%-8s %5d %2d %2d %6d %6s | %8.3f %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f | %6.3f %5.2f %s\n", kKindNames[c.kind], c.base,
             c.k, c.kind == kCounted ? c.contributors : 1, n_words, kModeNames[c.mode], probe_median(rf), probe_median(rl),
             probe_quantile(rl, 0.9), mean(rf), mean(rl), probe_median(tf), probe_median(tl), probe_median(sp), tbs, ok ? "OK" : "FAIL");
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
  }
  if (g_json) printf("], \"ok\": %s}\n", all_ok ? "true" : "false");
  return all_ok ? 0 : 1;
}
