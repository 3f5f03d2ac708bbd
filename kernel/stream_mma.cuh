// monolith: the tensor-core GEMV of the streaming rounds (Policy::kTcGemv: fp8-stream-tc, the k-pass
// kernel of issue 48; notes/ktoken.md "The k-pass kernel: design and pricing", §2; Policy::kVecs = k
// vectors per pass: fp8-stream-tc-k2/-k4/-k8, compiled, not run: §7a).
// Part of the streaming schedule (kernel/schedule_stream.cuh includes it inside the build namespace,
// after stream_gemv.cuh); not a stand-alone header.
//
// A round's E4M3 rows are the A operand of mma.sync.m16n8k16 (16 rows x 16 K per tile, widened to f16
// by one cvt per byte pair in registers), the input vectors B's columns (n = 8: kK of them, the
// others zero), C fp32. One code path for every k: k = 1 is this code with 7 zero columns.
//   words   a K = 1024 row is 32 words of 32 elements (a down row: 96); word c of a row holds its
//           elements in 32-byte chunk c ^ (line & 3) of the row's line (the engine swizzles the codes
//           of every tensor-core phase at upload: monolith/megakernel.py tc_swizzle_; `line` counts
//           the matrix's 1,024-byte lines, a down row being 3). Lane (g, t) reads 8 bytes of a chunk
//           (elements 8t .. 8t + 7 of the word) from the rows g and g + 8 of its tile: a half-warp's
//           16 loads hit 4 consecutive lines at 4 different chunks, all 32 banks once.
//   k-steps the word's two mma take elements 8t .. 8t + 3, then 8t + 4 .. 8t + 7 of lane t as their
//           fragment's K (2t, 2t + 1) and (2t + 8, 2t + 9): a permutation of the word's 16 + 16
//           elements, the same for A and B, so each product is a weight times its own input.
//   inputs  B's column j is vector j as store_xe's words (xvec.cuh: f16 in element order, word i
//           lifted by 2^-E_i, its factor 2^E_i), at tc_words_at / tc_factors_at below: lane (g, t)
//           with g < kK loads vector g's elements 8t .. 8t + 7 of the word (one 16-byte load), every
//           other lane zeros. A word's two mma go into a fresh C, which is added to the item's sums
//           times its column's factor (fp32): the lift never leaves a word, so it may differ per word
//           and per vector.
//   warps   K ranges of 1024 / kTcRanges (8 words); warp w keeps range w % kTcRanges and takes the
//           tiles w / kTcRanges, + 16 / kTcRanges, ... of the round (an item: one tile x one range).
//   sums    each item's C column j goes to the partials part[tc_part_at(k, range, j, row)] (row: the
//           row's index in the round); after the round's barrier one thread per row adds a column's
//           ranges in order 0 .. kTcRanges - 1 (tc_combine), then the caller applies the row scale
//           and the norm, as the CUDA-core rounds do. (The phases' epilogues take column 0: the hops
//           carry one vector, notes/ktoken.md §7a.)
// Why a column's bits do not depend on the other columns or on k (batch invariance, monolith/kpass.py):
// C's column j reads B's column j only, column j's factor is vector j's, and every order around the
// mma is fixed by the code, not by k (words in ascending K within a range, ranges in order, then the
// scale); k moves only where vector j's words and sums sit. tests/test_kernel_tc_host.py replays the
// rounds at k = 1, 2, 4, 8 from these formulas and checks it on the CPU. The hardware's order inside
// one mma is not documented: probes/gemv_k.cu found column j alone equal to column j beside 7 random
// neighbours, bitwise, on the H100 (results/ktoken/ktoken_summary.json gemv.invariance).
// Rows of a tile past the round's rows read nothing (their A is zero) and are not stored.
#pragma once

constexpr int kTcRanges = 4;  // K ranges per row: 4 partial sums per output
constexpr int kTcRangeWords = kHidden / 32 / kTcRanges;  // 32-element words per K range of a 1,024 row
constexpr int kTcTileStride = kStreamConsumerWarps / kTcRanges;  // a warp's next tile
// rows of a round's partials: a round of kRoundSlots slots of 16 E4M3 rows (qkv, down; an E4M3 MLP-1
// round is kMlpRoundUnits <= 3 slots in one piece)
constexpr int kTcRowsMax = kRoundSlots * 16;
static_assert(kTcVecsMax == 8, "B's columns are 8");
static_assert(kStreamConsumerWarps % kTcRanges == 0 && kTcRangeWords * 32 * kTcRanges == kHidden,
              "every warp keeps one K range of whole words across its items");

// The partials of k vectors: column j of range r at part[tc_part_at(k, r, j, row)]. k > 1 pads a
// column's rows by 4 floats: a warp's store of C register u (columns 2t + (u & 1), rows g + const or
// 3 g + const) then hits 32 different banks (column offsets 8 t, rows g / 3 g: distinct mod 32); k = 1
// stores one column (lanes t = 0), conflict-free unpadded. Both buffers of sm.part (StreamSmemK sizes
// them per k): a round's sums are read before the next round's opening barrier, so the tensor-core
// rounds need no second buffer.
__host__ __device__ constexpr int tc_col_stride(int k) { return kTcRowsMax + 4 * (k > 1); }
__host__ __device__ constexpr int tc_part_at(int k, int r, int j, int row) { return (r * k + j) * tc_col_stride(k) + row; }
__host__ __device__ constexpr int tc_part_floats(int k) { return kTcRanges * k * tc_col_stride(k); }
static_assert(tc_part_floats(1) <= 2 * kRoundRbMax * kPartBlk, "k = 1's partials fit today's sm.part");

// The input vectors of k vectors (B), in a buffer of kWords 32-element words per vector: vector 0
// exactly as store_xe writes a vector (its kWords words of 16 floats (32 f16) from float 0, then its
// kWords factors), so the phases' writers of vector 0 are today's; vector v >= 1's words from
// tc_words_at(kWords, v), its factors from tc_factors_at(kWords, k, v). Bank-conflict-free loads:
//   words    a quarter-warp's 16-byte loads read word w of vectors 2q and 2q + 1 (lanes g = 2q, 2q + 1,
//            t = 0..3): their starts are 16 floats apart mod 32 (tc_words_at(v) = 16 v mod 32), so the
//            two 64-byte words fill the 32 banks once;
//   factors  fa (column 2t) reads factor w of vectors 0, 2, 4, 6, fb (column 2t + 1) of 1, 3, 5, 7:
//            vector v's factors start at 4 v mod 32, so each load's 4 addresses sit on 4 banks.
// The writer of vectors 1 .. k - 1 comes with the hops that carry them (notes/ktoken.md §7a).
__host__ __device__ constexpr int tc_words_at(int kWords, int v) {
  return v == 0 ? 0 : 17 * kWords + 16 + (v - 1) * (16 * kWords + 16);
}
// the first factor of vector 1 (4 mod 32), after the words of vectors 1 .. k - 1
__host__ __device__ constexpr int tc_factor_base(int kWords, int k) {
  return tc_words_at(kWords, k) + 4 + tc_words_at(kWords, k) % 32;
}
__host__ __device__ constexpr int tc_factors_at(int kWords, int k, int v) {
  return v == 0 ? 16 * kWords : tc_factor_base(kWords, k) + (v - 1) * (kWords + 4);
}
// the floats of a buffer of k vectors
__host__ __device__ constexpr int tc_vec_floats(int kWords, int k) {
  return k == 1 ? 17 * kWords : tc_factors_at(kWords, k, k);
}
template <int kWords>
constexpr bool tc_layout_ok() {
  for (int k = 2; k <= kTcVecsMax; ++k) {
    for (int v = 0; v < k; ++v) {
      if (tc_words_at(kWords, v) % 32 != 16 * (v % 2) || tc_factors_at(kWords, k, v) % 32 != 4 * v) return false;
      if (v > 0 && tc_words_at(kWords, v) < tc_words_at(kWords, v - 1) + 16 * kWords) return false;  // no overlap
      const int prev_end = v == 1 ? tc_words_at(kWords, k) : tc_factors_at(kWords, k, v - 1) + kWords;
      if (v > 0 && tc_factors_at(kWords, k, v) < prev_end) return false;
    }
  }
  return tc_words_at(kWords, 1) >= 17 * kWords && tc_factors_at(kWords, 1, 0) == 16 * kWords;
}
static_assert(tc_layout_ok<kHidden / 32>() && tc_layout_ok<kIntermediate / 32>(),
              "k vectors: vector 0 where store_xe puts it, the others apart, starts at 16 v and 4 v mod 32");
static_assert(Policy<WeightsE4M3, KernelKind::kShort, false, true>::kMlpRoundUnits <= kRoundSlots &&
                  Policy<WeightsE4M3, KernelKind::kShort, true, true>::kMlpRoundUnits <= kRoundSlots,
              "an E4M3 MLP-1 round (one slot per unit) is one piece: its rows fit the partials");

// two E4M3 codes (low byte: the lower element) -> f16x2 (low half: the lower element); exact
__device__ __forceinline__ uint32_t tc_f16x2(uint32_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(two & 0xFFFFu)));
  return r;
}
// d += A (a0: row g, K 2t..; a1: row g + 8, K 2t..; a2: row g, K 2t + 8..; a3: row g + 8, K 2t + 8..)
// x B (b0: K 2t, 2t + 1 of column g; b1: K 2t + 8, 2t + 9)
__device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The rows [0, nr) of a round of E4M3 K = 1024 lines on the tensor cores: line t of the round is row t
// of slot slot_at(base + t / 16) (16 lines per slot), its swizzle key (key0 + t) & 3. Rows, tiles and
// inputs:
//   kDown false (qkv, MLP-1): tile tt holds the round's rows 16 tt .. 16 tt + 15; every row's input
//       is the vector at xb (store_xe's words, kWords of them);
//   kDown true: line t is segment seg0 + t of down's rows (columns 1024 ((seg0 + t) % 3) ..), and a
//       tile holds 16 lines of one segment (B is that segment's third of sm.act): tile tt is segment
//       tt % 3's lines 16 (tt / 3) .., 3 apart.
// The partials of line t go to part row 16 base + t (base: the first slot of a round's piece).
// kK: the pass's vectors (B's columns 0 .. kK - 1, at tc_words_at / tc_factors_at of xb); each column's
// partials at tc_part_at(kK, ...).
template <bool kDown, int kK, class SlotAt>
__device__ __forceinline__ void tc_round(const SlotAt& slot_at, int base, int nr, int key0, int seg0, const float* xb,
                                         int kWords, float* part) {
  static_assert(kK >= 1 && kK <= kTcVecsMax, "B's columns are 8");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int kr = warp % kTcRanges;
  const int ntiles = kDown ? 3 * (((nr + 2) / 3 + 15) / 16) : (nr + 15) / 16;
  for (int tt = warp / kTcRanges; tt < ntiles; tt += kTcTileStride) {
    const int seg = kDown ? tt % 3 : 0;
    int row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row[h] = kDown ? (seg - seg0 + 3) % 3 + 3 * (16 * (tt / 3) + g + 8 * h) : 16 * tt + g + 8 * h;
    const uint8_t* ln[2];
    int key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ln[h] = reinterpret_cast<const uint8_t*>(slot_at(base + (row[h] >> 4))) + (row[h] & 15) * kHidden + 8 * t;
      key[h] = (key0 + row[h]) & 3;
    }
    const int w0 = (kDown ? 32 * seg : 0) + kTcRangeWords * kr;  // the range's first word of the input vector
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 2  // (4: 32 B of spills at the 96-register cap on sm_90a; 2: none)
    for (int j = 0; j < kTcRangeWords; ++j) {
      const int c = kTcRangeWords * kr + j;  // the word's chunk in the line
      uint2 w[2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        w[h] = row[h] < nr ? *reinterpret_cast<const uint2*>(ln[h] + ((c ^ key[h]) << 5)) : make_uint2(0u, 0u);
      // B: vector g's elements 8t .. 8t + 7 of word w0 + j (lanes g < kK); the factors of this lane's
      // columns 2t, 2t + 1 (vectors 2t, 2t + 1)
      const uint4 bx = g < kK ? reinterpret_cast<const uint4*>(xb + tc_words_at(kWords, kK == 1 ? 0 : g))[4 * (w0 + j) + t]
                              : make_uint4(0u, 0u, 0u, 0u);
      const float fa = 2 * t < kK ? xb[tc_factors_at(kWords, kK, kK == 1 ? 0 : 2 * t) + w0 + j] : 0.f;
      const float fb = 2 * t + 1 < kK ? xb[tc_factors_at(kWords, kK, 2 * t + 1) + w0 + j] : 0.f;
      float cw[4] = {0.f, 0.f, 0.f, 0.f};
      tc_mma(cw, tc_f16x2(w[0].x), tc_f16x2(w[1].x), tc_f16x2(w[0].x >> 16), tc_f16x2(w[1].x >> 16), bx.x, bx.y);
      tc_mma(cw, tc_f16x2(w[0].y), tc_f16x2(w[1].y), tc_f16x2(w[0].y >> 16), tc_f16x2(w[1].y >> 16), bx.z, bx.w);
      acc[0] = fmaf(cw[0], fa, acc[0]);  // (row g, column 2t)
      acc[1] = fmaf(cw[1], fb, acc[1]);  // (row g, column 2t + 1)
      acc[2] = fmaf(cw[2], fa, acc[2]);  // (row g + 8, column 2t)
      acc[3] = fmaf(cw[3], fb, acc[3]);  // (row g + 8, column 2t + 1)
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int col = 2 * t + (u & 1), r = row[u >> 1];
      if (col < kK && r < nr) part[tc_part_at(kK, kr, col, 16 * base + r)] = acc[u];
    }
  }
}

// Row t's value in column col of the round's partials of kK columns: its K ranges added in order (after
// the round's barrier, one thread per row).
template <int kK>
__device__ __forceinline__ float tc_combine(const float* part, int t, int col = 0) {
  float v = part[tc_part_at(kK, 0, col, t)];
#pragma unroll
  for (int kr = 1; kr < kTcRanges; ++kr) v += part[tc_part_at(kK, kr, col, t)];
  return v;
}
