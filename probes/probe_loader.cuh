// What the probes that load the SM the way the kernel's producer does share: one thread keeps
// kSlots bulk copies of kSlotBytes in flight into a shared-memory ring (cp.async.bulk, L2
// evict-first), cycling over a source far larger than the L2, until *stop turns non-zero; then it
// waits for its last copies to land (no copy may write into shared memory after the block exits)
// and adds the bytes it copied to *loaded. Every wait is bounded by timeout_ns.
// Needs probe_common.cuh (globaltimer) and kernel/ring.cuh before it; `full` holds kSlots
// mbarriers initialised with a count of 1.
#pragma once

template <int kSlots, int kSlotBytes>
__device__ void probe_ring_loader(const uint8_t* src, size_t src_bytes, uint8_t* ring, uint64_t* full,
                                  volatile int* stop, uint64_t timeout_ns, unsigned long long* loaded) {
  const uint64_t pol = monolith::l2_evict_first_policy();
  const size_t chunks = src_bytes / kSlotBytes;
  size_t c = size_t(blockIdx.x) * 997;  // blocks start at different places
  unsigned long long bytes = 0;
  uint32_t k = 0;
  for (; !*stop; ++k) {
    const int s = int(k % kSlots);
    if (k >= uint32_t(kSlots)) {
      const uint32_t par = ((k / kSlots) - 1u) & 1u;
      const uint64_t t0 = globaltimer();
      while (!monolith::mbar_try_wait(&full[s], par))
        if (globaltimer() - t0 > timeout_ns) return;
    }
    monolith::mbar_arrive_expect_tx(&full[s], kSlotBytes);
    monolith::bulk_copy_g2s(ring + size_t(s) * kSlotBytes, src + (c++ % chunks) * kSlotBytes, kSlotBytes, &full[s], pol);
    bytes += kSlotBytes;
  }
  for (uint32_t j = k > uint32_t(kSlots) ? k - kSlots : 0u; j < k; ++j) {
    const uint64_t t0 = globaltimer();
    while (!monolith::mbar_try_wait(&full[j % kSlots], (j / kSlots) & 1u))
      if (globaltimer() - t0 > timeout_ns) break;
  }
  atomicAdd(loaded, bytes);
}
