// monolith X-ray: in-kernel phase tracer.
//
// Built only with -DMONOLITH_XRAY. Lane 0 of warp 0 of every block stamps the start and end of
// each phase (%globaltimer for a clock shared by all SMs, clock64 for cycle resolution, %smid
// for placement) and writes one 40-byte record per interval into a preallocated buffer:
// events[block * kXrayMaxEvents + i]. Without the flag every macro expands to nothing, and the
// plain build's SASS contains no %globaltimer read (tests/test_kernel_gpu.py checks it).
// Phase ids come from kernel/xray_phases.def, the table the analyzer and the page also read.
#pragma once
#include <cstdint>

namespace monolith {

enum XrayPhase : uint16_t {
#define XRAY_PHASE(id, name, kind, scope) kPhase_##name = id,
#include "xray_phases.def"
#undef XRAY_PHASE
};

struct XrayEvent {     // 40 bytes; layout mirrored by monolith/megakernel.py (XRAY_EVENT_DTYPE)
  uint64_t g0, g1;     // %globaltimer at start / end (ns)
  uint64_t c0, c1;     // clock64 at start / end (SM cycles)
  uint16_t phase, layer, block, smid;
};
static_assert(sizeof(XrayEvent) == 40, "the host parses 40-byte records");

// Per block per token: bf16-upstream 28 layers x at most 13 intervals (with the barrier
// arrivals); bf16-stream 28 x 11 plus the ring stalls longer than kXrayRingStallCycles; with margin.
constexpr int kXrayMaxEvents = 1024;
// A consumer wait for a weight slot shorter than this stays inside its work interval (recording
// every short wait would cost a record per 16 KB chunk); longer ones become a `ring` interval.
constexpr long long kXrayRingStallCycles = 200;

#if defined(MONOLITH_XRAY) && defined(__CUDACC__)
__device__ __forceinline__ uint64_t xray_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t xray_smid() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Phases are contiguous: XRAY_BEGIN() opens the first interval at kernel entry and every
// XRAY_END(phase, layer) closes the current one (naming it) and opens the next.
struct XrayRecorder {
  XrayEvent* out;  // this block's slots, or nullptr when this launch is not traced
  int n;
  uint64_t g0, c0;
  __device__ __forceinline__ void begin() {
    if (out != nullptr && threadIdx.x == 0) {
      c0 = clock64();
      g0 = xray_globaltimer();
    }
  }
  __device__ __forceinline__ void end(uint16_t phase, int layer) {
    if (out != nullptr && threadIdx.x == 0 && n < kXrayMaxEvents) {
      XrayEvent e;
      e.g1 = xray_globaltimer();
      e.c1 = clock64();
      e.g0 = g0;
      e.c0 = c0;
      e.phase = phase;
      e.layer = uint16_t(layer);
      e.block = uint16_t(blockIdx.x);
      e.smid = uint16_t(xray_smid());
      out[n++] = e;
      g0 = e.g1;  // the next interval starts where this one ended: a block's phases tile its token
      c0 = e.c1;
    }
  }
  __device__ __forceinline__ void stamp(uint64_t& g, uint64_t& c) const {
    if (out != nullptr && threadIdx.x == 0) {
      c = clock64();
      g = xray_globaltimer();
    }
  }
  // Close the current interval at an earlier cycle c of this SM (clamped to the interval), naming
  // it; the next interval starts there. %globaltimer at c is interpolated between the interval's
  // start and now (the analyzer fits globaltimer on clock64 per SM anyway).
  __device__ __forceinline__ void cut(uint16_t phase, int layer, uint64_t c) {
    if (out != nullptr && threadIdx.x == 0 && n < kXrayMaxEvents) {
      const uint64_t c1 = clock64(), g1 = xray_globaltimer();
      c = c < c0 ? c0 : (c > c1 ? c1 : c);
      const uint64_t g = c1 > c0 ? g0 + uint64_t(double(g1 - g0) * double(c - c0) / double(c1 - c0)) : g1;
      XrayEvent e{g0, g, c0, c, phase, uint16_t(layer), uint16_t(blockIdx.x), uint16_t(xray_smid())};
      out[n++] = e;
      g0 = g;
      c0 = c;
    }
  }
  // A stall that began at (g, c): if it was long, close the work interval at its start and
  // record the stall as its own interval.
  __device__ __forceinline__ void stall(uint16_t work_phase, uint16_t stall_phase, int layer, uint64_t g, uint64_t c) {
    if (out != nullptr && threadIdx.x == 0 && (long long)(clock64() - c) > kXrayRingStallCycles) {
      if (n < kXrayMaxEvents) {  // the work interval ends where the stall began
        XrayEvent e{g0, g, c0, c, work_phase, uint16_t(layer), uint16_t(blockIdx.x), uint16_t(xray_smid())};
        out[n++] = e;
      }
      g0 = g;
      c0 = c;
      end(stall_phase, layer);  // [stall start, now]
    }
  }
};
#define XRAY_INIT(buf) \
  XrayRecorder xr{(buf) != nullptr ? (buf) + size_t(blockIdx.x) * kXrayMaxEvents : nullptr, 0, 0, 0}
#define XRAY_BEGIN() xr.begin()
#define XRAY_END(phase, layer) xr.end(kPhase_##phase, (layer))
#define XRAY_STAMP(g, c) \
  uint64_t g = 0, c = 0; \
  xr.stamp(g, c)
#define XRAY_STALL(work_phase, stall_phase, layer, g, c) xr.stall((work_phase), (stall_phase), (layer), (g), (c))
// MONOLITH_XRAY_SUB=1: the diagnostic sub-intervals of xray_phases.def (x_words, x_open, x_dot,
// x_out), only in that X-ray build; =2: x_open, x_dot, x_out, x_prenorm, x_slots (and x_count where
// the landed count is on); =3 (ninth session): only the attention's x_att_* (a block's first split;
// the others would overflow the 1,024 events of a block that records level 1 or 2 as well).
// XRAY_SUB closes the current interval like XRAY_END.
// XRAY_WORDS_NOTE: once a warp's lanes have their words of a hop, its lane 0 raises the block's
// latest cycle (a shared word); XRAY_WORDS_CUT: thread 0, after the barrier every thread passed,
// records [thread 0's words, the last thread's words] as x_words and clears the word.
#if defined(MONOLITH_XRAY_SUB) && (MONOLITH_XRAY_SUB == 1 || MONOLITH_XRAY_SUB == 2)
#define XRAY_SUB(phase, layer) xr.end(kPhase_##phase, (layer))
#else
#define XRAY_SUB(phase, layer) ((void)0)
#endif
#if defined(MONOLITH_XRAY_SUB) && MONOLITH_XRAY_SUB == 3
#define XRAY_SUB3(phase, layer) xr.end(kPhase_##phase, (layer))
#else
#define XRAY_SUB3(phase, layer) ((void)0)
#endif
// Level 2 adds thread 0's x_prenorm and x_slots inside a hop's gather; they replace x_words (its
// cut could only land after them, so level 2 does not record it).
#if defined(MONOLITH_XRAY_SUB) && MONOLITH_XRAY_SUB == 2
#define XRAY_SUB2(phase, layer) xr.end(kPhase_##phase, (layer))
#else
#define XRAY_SUB2(phase, layer) ((void)0)
#endif
#if defined(MONOLITH_XRAY_SUB) && MONOLITH_XRAY_SUB == 1
#define XRAY_WORDS_NOTE(word) \
  do { \
    __syncwarp(); /* the warp's last lane is in: lane 0 notes the time (16 shared atomics, not 512) */ \
    if ((threadIdx.x & 31) == 0) atomicMax((word), (unsigned long long)clock64()); \
  } while (0)
#define XRAY_WORDS_CUT(word, layer) \
  do { \
    if (threadIdx.x == 0) { \
      xr.cut(kPhase_x_words, (layer), *(word)); \
      *(word) = 0ull; \
    } \
  } while (0)
#else
#define XRAY_WORDS_NOTE(word) ((void)0)
#define XRAY_WORDS_CUT(word, layer) ((void)0)
#endif
#else
#define XRAY_SUB(phase, layer) ((void)0)
#define XRAY_SUB2(phase, layer) ((void)0)
#define XRAY_SUB3(phase, layer) ((void)0)
#define XRAY_WORDS_NOTE(word) ((void)0)
#define XRAY_WORDS_CUT(word, layer) ((void)0)
#define XRAY_INIT(buf) ((void)(buf))
#define XRAY_BEGIN() ((void)0)
#define XRAY_END(phase, layer) ((void)0)
#define XRAY_STAMP(g, c) ((void)0)
#define XRAY_STALL(work_phase, stall_phase, layer, g, c) ((void)0)
#endif

}  // namespace monolith
