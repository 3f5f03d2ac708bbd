// monolith: global-memory loads and L2 hints used by the megakernel.
// Weights are read exactly once per token and never by the same SM twice, so they bypass L1
// (`L1::no_allocate`) through the read-only path (`.nc`). 16-byte loads, many in flight per
// thread: a one-block-per-SM grid only reaches DRAM bandwidth with deep memory-level
// parallelism (NOTES.md, Facts: 132x512 threads with 1 load in flight read at 2.45 TB/s, with 4 at 4.35).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>

namespace monolith {

__device__ __forceinline__ uint4 ld_weights_16B(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Bulk L2 prefetch (sm_90+): one instruction asks the copy engine to pull `bytes` (multiple of
// 16, 16-byte aligned) into L2 without occupying registers or issue slots of the block.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// Prefetch [p, p + bytes) into L2 in chunks of at most `chunk` bytes, the chunks spread over the
// threads of the calling group (thread `rank` of `size`).
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes, int rank, int size,
                                                  int64_t chunk = 64 * 1024) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = int64_t(rank) * chunk; off < bytes; off += int64_t(size) * chunk) {
    int64_t n = bytes - off < chunk ? bytes - off : chunk;
    prefetch_l2_bulk(c + off, uint32_t(n & ~int64_t(15)));
  }
}

// 8 bf16 packed in a uint4 -> dot with 8 fp32 activations. bf16 -> fp32 is a 16-bit shift, so
// the conversion costs one integer op per element and the FMA runs in fp32.
__device__ __forceinline__ float dot8_bf16(const uint4 w, const float4 a0, const float4 a1, float acc) {
  acc = fmaf(__uint_as_float(w.x << 16), a0.x, acc);
  acc = fmaf(__uint_as_float(w.x & 0xffff0000u), a0.y, acc);
  acc = fmaf(__uint_as_float(w.y << 16), a0.z, acc);
  acc = fmaf(__uint_as_float(w.y & 0xffff0000u), a0.w, acc);
  acc = fmaf(__uint_as_float(w.z << 16), a1.x, acc);
  acc = fmaf(__uint_as_float(w.z & 0xffff0000u), a1.y, acc);
  acc = fmaf(__uint_as_float(w.w << 16), a1.z, acc);
  acc = fmaf(__uint_as_float(w.w & 0xffff0000u), a1.w, acc);
  return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// (value, index) argmax over the warp: larger value wins, ties keep the lower index (torch.argmax).
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace monolith
