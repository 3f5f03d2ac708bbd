// Tensor-core primitives (warp-level mma.sync; sm_80 and later, so sm_90a and sm_120a alike).
// Fragment coordinates of m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4 g + c:
//   A (16 x 16, row-major): a[0] = rows g, k 2c..2c+1; a[1] = row g + 8, same k; a[2] = row g,
//                           k 2c+8..2c+9; a[3] = row g + 8, k 2c+8..2c+9 (two bf16 per word, low first)
//   B (16 x 8, column):     b0 = k 2c..2c+1 of column g; b1 = k 2c+8..2c+9 of column g
//   C (16 x 8, fp32):       d[0], d[1] = row g, columns 2c, 2c+1; d[2], d[3] = row g + 8, same columns
// The attention split's scores use it (MONOLITH_ATTN_MMA, kernel/schedule_stream.cuh; the probe
// is probes/attn_split.cu's A5).
#pragma once
#include <cstdint>

namespace monolith {

// d += a * b: bf16 inputs, fp32 accumulate
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace monolith
