// monolith: the word protocol of the hops: fixed-point counted words, tagged words, their polls.
// Part of the streaming schedule (kernel/schedule_stream.cuh includes it inside the build
// namespace, in dependency order); not a stand-alone header.
#pragma once

__device__ __forceinline__ void csync() { consumer_sync<kStreamConsumerThreads>(); }
__device__ __forceinline__ float bf16_as_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

__device__ __forceinline__ long long to_fix(float x) { return __float2ll_rn(x * float(1ll << kFixShift)); }
__device__ __forceinline__ float from_fix(long long v) { return float(v) * (1.0f / float(1ll << kFixShift)); }
// One contribution to a residual word: the fixed-point value above the count field, count 1.
__device__ __forceinline__ void resid_add(long long* p, long long fix) {
  const unsigned long long w = (static_cast<unsigned long long>(fix) << kCountBits) + 1ull;
  atomicAdd(reinterpret_cast<unsigned long long*>(p), w);
}
__device__ __forceinline__ long long ld_relaxed_s64(const long long* p) {
  long long v;
  asm volatile("ld.relaxed.gpu.global.s64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
constexpr int kActPer = kIntermediate / kStreamConsumerThreads;  // activation words per consumer thread
static_assert(kHidden == 2 * kStreamConsumerThreads && kActPer * kStreamConsumerThreads == kIntermediate,
              "each consumer thread holds the same number of elements of each grid-hop vector");

// AND of a predicate over the consumer threads (barrier 1): a bounded per-thread wait that
// fails in one thread makes every consumer leave together, never one thread at a barrier alone.
__device__ __forceinline__ bool csync_and(bool ok) {
  uint32_t r;
  asm volatile(
      "{ .reg .pred p, q; setp.ne.u32 p, %1, 0; bar.red.and.pred q, 1, %2, p; selp.u32 %0, 1, 0, q; }"
      : "=r"(r)
      : "r"(uint32_t(ok)), "n"(kStreamConsumerThreads)
      : "memory");
  return r != 0;
}

// What one consumer thread remembers of the counted words of its two elements (t, t + 512): the
// words it read at the last two layers. Layer L's O stage lives in buffer L % 2, which held layer
// L - 2's: the stage's own value is (word - w2) >> kCountBits and its contributor count is
// (word - w2) & mask, whatever the buffer held before (the difference cancels any carry out of
// the count field). No buffer is ever cleared; the host zeroes them at reset, and block 0 leaves
// a snapshot of the last two layers' words for the next launch to start from.
struct ResidHist {
  long long w1[2], w2[2];  // words of layers L-1 and L-2
};

__device__ __forceinline__ ResidHist resid_start(const long long* acc) {
  const long long* snap = acc + kAccSnap;
  ResidHist h;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int i = threadIdx.x + e * kStreamConsumerThreads;
    h.w2[e] = __ldcg(snap + 0 * kHidden + i);  // layer -2 -> buffer 0
    h.w1[e] = __ldcg(snap + 1 * kHidden + i);  // layer -1 -> buffer 1
  }
  return h;
}

// Wait until this layer's counted words (buf) have `expected` contributions in this thread's two
// elements, return the values (fixed point) in fix and shift the history. Bounded; false in this
// thread when its wait failed (the caller's next barrier is an AND over the threads: acquire_n).
__device__ __forceinline__ bool resid_poll(const long long* buf, uint32_t expected, ResidHist& h, long long fix[2],
                                           SyncState* S, long long tmo, uint32_t info) {
  constexpr unsigned long long kMask = (1ull << kCountBits) - 1ull;
  bool ok = true;
  long long w[2];
  const long long t0 = clock64();
  for (uint32_t it = 0;; ++it) {  // both words per round: one L2 round trip per poll
#pragma unroll
    for (int e = 0; e < 2; ++e) w[e] = ld_relaxed_s64(buf + threadIdx.x + e * kStreamConsumerThreads);
    if (((unsigned long long)(w[0] - h.w2[0]) & kMask) == expected &&
        ((unsigned long long)(w[1] - h.w2[1]) & kMask) == expected)
      break;
    if ((it & 15u) == 15u && (*(volatile uint32_t*)&S->error != 0u || clock64() - t0 > tmo)) {
      raise_error(S, kErrCounterTimeout, info);
      ok = false;
      break;
    }
  }
  if (!ok) return false;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    fix[e] = (w[e] - h.w2[e]) >> kCountBits;  // arithmetic shift: the signed stage value
    h.w2[e] = h.w1[e];
    h.w1[e] = w[e];
  }
  return true;
}

// sm_120a only: the stream kernels are capped at 96 registers on both archs (17 warps allocate as 20,
// the warp allocation granularity being 4: 65,536 / 640 -> 102 -> 96). sm_90a fits in 94-95; on
// sm_120a ptxas spilled a few values it had hoisted out of the layer loop. Two of them are
// recomputed there: the QK-norm weights' offset, from a fresh read of %tid.x that the compiler may
// neither hoist nor keep live (asm volatile; short kernels only: in the long ones the allocator then
// spills the residual history instead), and the stress test's per-launch hash term, taken from the
// layer's tag (jitter). sm_90a keeps the plain code.
__device__ __forceinline__ int remat_tid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
#else
  return threadIdx.x;
#endif
}

// Tagged words: {fp32 value (low half), tag (high half)}, one 64-bit store, so a reader never sees
// the value of one write with the tag of another.
__device__ __forceinline__ uint32_t layer_tag(uint32_t steps, int layer) {
  return (steps << kLayerTagBits) | uint32_t(layer + 1);
}
__device__ __forceinline__ void tagged_store(long long* p, float v, uint32_t tag) {
  const unsigned long long w = (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

// N tagged words at once: every poll round issues all N loads back to back, so waiting for N
// words costs one L2 round trip per round, not N (six sequential polls made the activation hop
// 2.5-3 us, X-ray NOTES.md M4). p(i) gives the address of word i.
template <int N, class Addr>
__device__ __forceinline__ void tagged_gather(Addr p, uint32_t tag, float out[N], SyncState* S, long long tmo,
                                              uint32_t info, bool& ok) {
  unsigned long long w[N];
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = (unsigned long long)ld_relaxed_s64(p(i));
  const long long t0 = clock64();
  for (uint32_t it = 0; ok; ++it) {
    bool all = true;
#pragma unroll
    for (int i = 0; i < N; ++i) all = all && uint32_t(w[i] >> 32) == tag;
    if (all) break;
    if ((it & 15u) == 15u && (*(volatile uint32_t*)&S->error != 0u || clock64() - t0 > tmo)) {
      raise_error(S, kErrCounterTimeout, info);
      ok = false;
      break;
    }
    // poll again only the words still missing: 132 blocks polling every word of a grid hop
    // each round put ~3 MB per round on L2 (the activation hop), most of it words already seen
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (uint32_t(w[i] >> 32) != tag) w[i] = (unsigned long long)ld_relaxed_s64(p(i));
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __uint_as_float(uint32_t(w[i]));
}
// This thread's kPer words of a grid hop's vector of tagged words at base: elements t + 512 j, in
// order j (every gather of the residual and activation vectors goes through here).
// Every caller of a poll (this, tagged_gather, resid_poll) converges its warp right after it
// (__syncwarp): the lanes leave a polling loop one by one, and where the warp's next converging
// instruction is a redux.sync (store_xh2 / store_xe), the warp would wait there for its slowest lane
// with the stores of the others stalled behind it.
template <int kPer>
__device__ __forceinline__ void gather_vec(const long long* base, uint32_t tag, float out[kPer], SyncState* S,
                                           long long tmo, uint32_t info, bool& ok) {
  const int t = threadIdx.x;  // an int, not threadIdx.x's unsigned: the address arithmetic (and SASS) of before
  const long long* p = base + t;
  tagged_gather<kPer>([&](int k) { return p + k * kStreamConsumerThreads; }, tag, out, S, tmo, info, ok);
}
