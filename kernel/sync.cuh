// monolith: grid-wide synchronisation for a persistent, non-cooperative grid.
//
// Every wait is BOUNDED: a block that spins longer than `timeout_cycles` (clock64) records an
// error code in SyncState and returns, and every other waiter sees the error word and leaves
// too, so a broken schedule becomes a host-side error instead of a hung GPU. clock64 (not
// %globaltimer) measures the timeout so that the plain build reads no global timer at all
// (the X-ray build is the only one that does).
//
// Counters are monotonic within a launch and reset to zero by the last block of the launch
// (it knows every block has passed every wait), so each launch starts from a clean state.
#pragma once
#include <cstdint>

namespace monolith {

enum ErrorCode : uint32_t {
  kOk = 0,
  kErrBarrierTimeout = 1,
  kErrFlagKVTimeout = 2,
  kErrFlagAttnTimeout = 3,
  kErrBadToken = 4,
  kErrBadPosition = 5,
  kErrCounterTimeout = 7,       // streaming schedule: a tagged or counted word never completed
  kErrRingTimeout = 8,          // streaming schedule: a weight slot never landed or was never freed
};

struct SyncState {
  uint32_t bar;                 // grid barrier arrivals (monotonic within a launch)
  uint32_t attn_done;           // attention heads finished (flag sync 2)
  uint32_t done;                // blocks finished with the LM head (last one reduces the argmax)
  uint32_t error;               // ErrorCode, sticky until the host resets it
  uint32_t error_info;          // layer * 16 + which wait, for the host's message
  int32_t pos;                  // position of the token this launch consumes
  uint32_t steps;               // launches completed (diagnostics)
  uint32_t pad;
  uint32_t kv_flag[8];          // per KV head: layer+1 once K/V of this position are in the cache
  // (the streaming schedule keeps no counters here: its data carries its readiness, see
  // kernel/config.cuh, "Data that carries its own readiness")
};
static_assert(sizeof(SyncState) % 16 == 0, "SyncState is memset as whole 16-byte words by the host");

#if defined(__CUDACC__)  // device code below; bindings.cpp (host C++) sees only the types above

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void raise_error(SyncState* s, uint32_t code, uint32_t info) {
  if (atomicCAS(&s->error, 0u, code) == 0u) s->error_info = info;
}

// tour:begin counter-wait
// Thread-level bounded wait until *p >= target (wrap-safe). Returns false on timeout or when
// another block has already raised an error; the caller then leaves the kernel.
__device__ __forceinline__ bool spin_until_geq(SyncState* s, const uint32_t* p, uint32_t target, long long timeout_cycles,
                                               uint32_t code, uint32_t info) {
  const long long t0 = clock64();
  for (uint32_t it = 0;; ++it) {
    if (int32_t(ld_acquire(p) - target) >= 0) return true;
    if ((it & 255u) == 255u) {
      if (*(volatile uint32_t*)&s->error != 0u) return false;
      if (clock64() - t0 > timeout_cycles) {
        raise_error(s, code, info);
        return false;
      }
    }
  }
}
// tour:end counter-wait

// Grid barrier: one release-add per block, thread 0 spins with acquire loads. `generation`
// counts the barriers this launch has passed, so the target is generation * gridDim.
// Split into the arrival and the wait so that the X-ray can time the arrival on its own: its
// release fence waits for every load the block still has in flight (NOTES.md, M4 step 0).
// No __threadfence: bar.sync orders the block's writes before thread 0's release (release is
// cumulative in the PTX memory model), and thread 0's acquire followed by bar.sync orders the
// other blocks' writes before every thread's later reads. A full fence here cost ~0.5 us.
// Activations written by other blocks are read with ld.global.cg (L2), never through L1.
__device__ __forceinline__ void grid_arrive(SyncState* s) {
  __syncthreads();
  if (threadIdx.x == 0) red_release_add(&s->bar, 1u);
}

// Returns false (for the whole block) if the wait failed.
__device__ __forceinline__ bool grid_wait(SyncState* s, uint32_t generation, long long timeout_cycles, uint32_t info,
                                          int* smem_flag) {
  if (threadIdx.x == 0) {
    bool ok = spin_until_geq(s, &s->bar, generation * gridDim.x, timeout_cycles, kErrBarrierTimeout, info);
    *smem_flag = ok ? 1 : 0;
  }
  __syncthreads();
  return *smem_flag != 0;
}

// Block-level bounded wait on a counter/flag written by other blocks.
__device__ __forceinline__ bool block_wait_geq(SyncState* s, const uint32_t* p, uint32_t target, long long timeout_cycles,
                                               uint32_t code, uint32_t info, int* smem_flag) {
  __syncthreads();  // every thread has read the previous value of *smem_flag
  if (threadIdx.x == 0) {
    bool ok = spin_until_geq(s, p, target, timeout_cycles, code, info);
    *smem_flag = ok ? 1 : 0;
  }
  __syncthreads();
  return *smem_flag != 0;
}

#endif  // __CUDACC__

}  // namespace monolith
