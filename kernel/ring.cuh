// monolith: the weight ring of the streaming schedule: bulk copies (TMA, `cp.async.bulk`) from
// global memory into a ring of shared-memory slots, one producer lane per block, mbarriers for
// "slot landed" (full) and "slot consumed" (empty).
//
// Why a ring of bulk copies and not register preloads: a grid-wide release (the arrival on a
// counter) compiles to MEMBAR.GPU + RED, and that fence waits for every load the block has in
// flight. Register preloads of the next phase's weights therefore make every arrival slower
// (measured on the bf16-upstream kernel: barriers 2-4 of a layer cost 1.2-2.3 us more than
// barrier 1, ~0.2 us per MB preloaded just before them; NOTES.md, M4). Bulk copies into shared
// memory are completed by the copy engine against an mbarrier and are not "the block's loads"
// for the fence: a counter arrival stays cheap while the ring keeps ~190 KB per SM in flight.
//
// Every wait here is BOUNDED (clock64 budget, then an error code in SyncState) like every other
// wait of the kernel: a ring that never fills is a host-side error, never a hung GPU.
#pragma once
#include <cstdint>

#include "sync.cuh"

namespace monolith {

#if defined(__CUDACC__)

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes the initialised mbarriers visible to the async proxy (the bulk-copy engine).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// Non-blocking probe (try_wait may suspend the thread for a while before it answers; the X-ray
// needs to know whether a wait is about to happen before it starts the clock).
__device__ __forceinline__ bool mbar_test_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// L2 policy for data read once per token (weights): evict first, so that what the critical path
// reads from L2 (norm vectors, the RoPE row, the words blocks exchange) is not pushed out to DRAM,
// where under a full ring a miss queues behind ~25 MB of copies in flight (NOTES.md, M4).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// Global -> shared bulk copy of `bytes` (multiple of 16, both addresses 16-byte aligned) that
// completes `bytes` transactions on `bar`, with an L2 cache policy.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(pol)
      : "memory");
}

// Bounded wait for phase `parity` of an mbarrier. Returns false on timeout (the error is raised
// with `code`/`info`) or when another block already raised one.
__device__ __forceinline__ bool mbar_wait_bounded(uint64_t* bar, uint32_t parity, SyncState* s, long long timeout_cycles,
                                                  uint32_t code, uint32_t info) {
  if (mbar_try_wait(bar, parity)) return true;
  const long long t0 = clock64();
  for (uint32_t it = 0;; ++it) {
    if (mbar_try_wait(bar, parity)) return true;
    if ((it & 63u) == 63u) {
      if (*(volatile uint32_t*)&s->error != 0u) return false;
      if (clock64() - t0 > timeout_cycles) {
        raise_error(s, code, info);
        return false;
      }
    }
  }
}

// Named barrier over the consumer warps only (barrier 0 is __syncthreads over the whole block,
// producer included; the producer never joins barrier 1).
template <int kConsumerThreads>
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
}

#endif  // __CUDACC__

}  // namespace monolith
