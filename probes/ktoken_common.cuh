// What the k-token probes (issue 48: hop_k.cu, gemv_k.cu) share: the bulk-copy ring loader the
// kernel's producer resembles, with the kernel's hop hold, written here so that these probes do
// not depend on kernel/ headers (they measure the protocol, not one revision of the kernel).
// Needs probe_common.cuh (globaltimer) before it.
#pragma once
#include <cstdint>

namespace kt {

__device__ __forceinline__ uint32_t saddr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok)
               : "r"(saddr(bar)), "r"(parity)
               : "memory");
  return ok != 0;
}
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(saddr(dst)),
      "l"(src), "r"(bytes), "r"(saddr(bar)), "l"(pol)
      : "memory");
}

// One thread keeps kSlots bulk copies of kSlotBytes in flight into `ring`, cycling over `src`
// (far larger than the L2), until *stop turns non-zero; then drains its copies (no copy may land
// after the block exits) and adds its bytes to *loaded. The hop hold (docs/DESIGN.md §4): while
// *hold is odd and a new value, no copy is issued for at most hold_cycles (0: no hold). Every wait
// is bounded by timeout_ns.
template <int kSlots, int kSlotBytes>
__device__ void ring_loader(const uint8_t* src, size_t src_bytes, uint8_t* ring, uint64_t* full, volatile int* stop,
                            volatile int* hold, long long hold_cycles, uint64_t timeout_ns, unsigned long long* loaded) {
  const uint64_t pol = evict_first();
  const size_t chunks = src_bytes / kSlotBytes;
  size_t c = size_t(blockIdx.x) * 997;  // blocks start at different places
  unsigned long long bytes = 0;
  int held_seen = 0;
  uint32_t k = 0;
  for (; !*stop; ++k) {
    const int s = int(k % kSlots);
    if (k >= uint32_t(kSlots)) {
      const uint32_t par = ((k / kSlots) - 1u) & 1u;
      const uint64_t t0 = globaltimer();
      while (!mbar_try_wait(&full[s], par))
        if (globaltimer() - t0 > timeout_ns) return;
    }
    if (hold_cycles > 0) {
      const int h = *hold;
      if ((h & 1) && h != held_seen) {
        held_seen = h;
        const long long t0 = clock64();
        while (*hold == h && clock64() - t0 < hold_cycles && !*stop) {
        }
      }
    }
    mbar_arrive_expect_tx(&full[s], kSlotBytes);
    bulk_g2s(ring + size_t(s) * kSlotBytes, src + (c++ % chunks) * kSlotBytes, kSlotBytes, &full[s], pol);
    bytes += kSlotBytes;
  }
  for (uint32_t j = k > uint32_t(kSlots) ? k - kSlots : 0u; j < k; ++j) {
    const uint64_t t0 = globaltimer();
    while (!mbar_try_wait(&full[j % kSlots], (j / kSlots) & 1u))
      if (globaltimer() - t0 > timeout_ns) break;
  }
  atomicAdd(loaded, bytes);
}

}  // namespace kt
