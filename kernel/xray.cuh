// monolith X-ray: in-kernel phase tracer.
//
// Built only with -DMONOLITH_XRAY. Thread 0 of every block stamps the end of each phase; the
// phases of a block tile its token (XRAY_BEGIN opens the first interval at kernel entry, every
// XRAY_END(phase, layer) closes the current one, naming it, and opens the next). Without the flag
// every macro expands to nothing, and the plain build's SASS contains no %globaltimer read
// (tests/test_kernel_gpu.py checks it). Phase ids come from kernel/xray_phases.def, the table the
// analyzer and the page also read.
//
// The buffer: kXrayMaxEvents 40-byte slots per block (events[block * kXrayMaxEvents + i]); the
// host allocates and zeroes it before the traced launch. What a block writes there is one of two
// record layouts, picked by kXrayRecord below (the host tells them apart by the first word; the
// decoder is monolith/xray/raw.py decode_buffer):
//
// kCompact (the shipped X-ray): the block's region read as 64-bit words.
//   w[0]      kXrayCompactMagic
//   w[1]      block << 32 | %smid
//   w[2..4]   begin anchor: %globaltimer just after one of its ticks, the clock64 of that tick
//             (the midpoint of the two reads around it), and edge << 32 | the cycles between them
//   w[5..7]   end anchor, the same, taken when the block closes its last token-scope phase
//   w[8 + i]  record i: (phase + 1) << 48 | layer << 32 | low 32 bits of clock64 at its end
//   A stamp on the hot path is one clock64 read (CS2R, fixed latency) and one 8-byte store; the
//   recorder keeps 3 registers (pointer and count) live across the kernel. %globaltimer (a slow
//   S2UR read, 32 ns ticks on the H200) is read only at the two anchors; the host maps each
//   block's clock64 onto it linearly between them. A phase's start is the previous record's end
//   (the begin anchor's clock for the first one).
// kCompactLean: kCompact's records, the block's word pointer recomputed at each stamp from the
//   kernel's parameter (a constant-bank load) rather than held in two registers.
// kXrayNvSmem (below): kCompact's records; in the NVFP4 stream kernels the recorder's pointer and
//   count live in shared memory instead (no register live across the kernel).
// kFull: the former layout, 40 bytes per interval (XrayEvent: %globaltimer and clock64 at start
//   and end, phase, layer, block, %smid; a %globaltimer and %smid read at every stamp). Kept as
//   the reference of the overhead A/B (scripts/xray_overhead.py builds it by editing this line).
#pragma once
#include <cstdint>
#include <type_traits>

namespace monolith {

enum XrayPhase : uint16_t {
#define XRAY_PHASE(id, name, kind, scope) kPhase_##name = id,
#include "xray_phases.def"
#undef XRAY_PHASE
};

struct XrayEvent {     // 40 bytes: kFull's record and the buffer's slot (monolith/megakernel.py XRAY_EVENT_DTYPE)
  uint64_t g0, g1;     // %globaltimer at start / end (ns)
  uint64_t c0, c1;     // clock64 at start / end (SM cycles)
  uint16_t phase, layer, block, smid;
};
static_assert(sizeof(XrayEvent) == 40, "the host parses 40-byte records");

// Slots per block per token (40 bytes each). kFull records one slot per interval: bf16-upstream
// 28 layers x at most 13 intervals, the stream variants 28 x 14 plus the ring stalls longer than
// kXrayRingStallCycles, with margin. kCompact packs five 8-byte records into a slot.
constexpr int kXrayMaxEvents = 1024;
// A consumer wait for a weight slot shorter than this stays inside its work interval (recording
// every short wait would cost a record per 16 KB chunk); longer ones become a `ring` interval.
constexpr long long kXrayRingStallCycles = 200;

enum class XrayRecord : int { kCompact = 0, kFull = 1, kCompactLean = 2 };
// The shipped record layout (see above). scripts/xray_overhead.py rewrites this line in a copy of
// kernel/ to build the A/B's alternatives; keep it on one line.
constexpr XrayRecord kXrayRecord = XrayRecord::kCompact;

// Whether the NVFP4 stream kernels record s_gather (the rest of a hop's wait: thread 0's words in
// -> the opening barrier every thread passed; 3.2 records per block per layer, each right after a
// hop's opening barrier, on the hop chain). false: those kernels record none; a hop's wait then ends
// at thread 0's words, its gather counts into the phase it opens, and the analyzer's block-level
// ready times fall back to the wait ends (xray/analyze.py _ready_ends). The other kernels record it
// either way. scripts/xray_overhead.py's alt `nvnogather` rewrites this line; keep it on one line.
constexpr bool kXrayNvGather = true;
#if defined(MONOLITH_XRAY_SUB)
static_assert(kXrayNvGather, "the MONOLITH_XRAY_SUB builds cut their x_words out of s_gather: they record it");
#endif

// Where the NVFP4 stream kernels' compact recorder keeps its state (the block's word pointer and the
// next word's index: 3 registers live across the kernel, which runs at the 96-register cap): false,
// in registers as every kernel does; true, in 16 bytes of static shared memory that thread 0 alone
// reads and writes (volatile: reloaded at each stamp, ~1 LDS + 1 STS per stamp instead). The other
// kernels keep registers either way. scripts/xray_overhead.py's alt `nvsmemptr` rewrites this line;
// keep it on one line.
constexpr bool kXrayNvSmem = false;
static_assert(!kXrayNvSmem || kXrayRecord == XrayRecord::kCompact, "kXrayNvSmem is a variant of kCompact");

constexpr uint64_t kXrayCompactMagic = 0x32305241584e4d4dull;  // "MMNXAR02", little-endian bytes
constexpr int kXrayCompactHeaderWords = 8;
constexpr int kXrayCompactWords = kXrayMaxEvents * int(sizeof(XrayEvent) / sizeof(uint64_t));
constexpr int kXrayCompactRecords = kXrayCompactWords - kXrayCompactHeaderWords;
// An anchor waits for the next %globaltimer tick at most this many clock64 cycles (a 32 ns tick is
// ~64 cycles at 1.98 GHz); on a GPU whose timer ticks slower it takes an unaligned stamp instead.
constexpr long long kXrayAnchorSpinCycles = 256;

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
__device__ __forceinline__ uint64_t xray_clock() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}
__device__ __forceinline__ constexpr bool xray_token_end(uint16_t phase) {
  return phase == kPhase_lmhead || phase == kPhase_argmax;
}

template <XrayRecord kRec>
struct XrayRecorderT;

// Where a compact recorder's block words are: kept in a register pair (kCompact), or recomputed at
// each stamp from the kernel's parameter and blockIdx (kCompactLean: a constant-bank load instead
// of two registers live across the whole kernel).
template <bool kLean>
struct XrayCompactWords {
  uint64_t* out;
  __device__ __forceinline__ explicit XrayCompactWords(XrayEvent* const& buf)
      : out(buf != nullptr ? reinterpret_cast<uint64_t*>(buf + size_t(blockIdx.x) * kXrayMaxEvents) : nullptr) {}
  __device__ __forceinline__ uint64_t* words() const { return out; }
};
template <>
struct XrayCompactWords<true> {
  XrayEvent* const& buf;  // the kernel's parameter
  __device__ __forceinline__ explicit XrayCompactWords(XrayEvent* const& b) : buf(b) {}
  __device__ __forceinline__ uint64_t* words() const {
    return reinterpret_cast<uint64_t*>(buf + size_t(blockIdx.x) * kXrayMaxEvents);
  }
};

// %globaltimer just after one of its ticks and the clock64 of that tick: w = {g, c, edge << 32 | the
// cycles between the two reads around the tick}. The tick fell between the read issued at `lo`
// (which still saw g_first) and the one issued at `c`; with no tick within the bound, an unaligned
// stamp (edge 0, the floor of a tick: the host corrects it by half a tick).
__device__ __forceinline__ void xray_anchor(uint64_t* w) {
  const uint64_t c_start = xray_clock();
  const uint64_t g_first = xray_globaltimer();
  uint64_t lo = c_start, c = xray_clock(), g = xray_globaltimer();
  while (g == g_first && (long long)(c - c_start) < kXrayAnchorSpinCycles) {
    lo = c;
    c = xray_clock();
    g = xray_globaltimer();
  }
  const bool edge = g != g_first;
  if (!edge) lo = c;
  w[0] = g;
  w[1] = lo + (c - lo) / 2;
  w[2] = (uint64_t(edge) << 32) | uint32_t(c - lo);
}
__device__ __forceinline__ uint64_t xray_compact_record(uint16_t phase, int layer, uint64_t c) {
  return (uint64_t(phase + 1u) << 48) | (uint64_t(uint16_t(layer)) << 32) | uint32_t(c);
}

template <bool kLean>
struct XrayCompactRecorder : XrayCompactWords<kLean> {
  using XrayCompactWords<kLean>::words;
  int n;  // next word; kXrayCompactWords when this launch is not traced (one compare per stamp)
  __device__ __forceinline__ explicit XrayCompactRecorder(XrayEvent* const& buf)
      : XrayCompactWords<kLean>(buf), n(buf != nullptr ? kXrayCompactHeaderWords : kXrayCompactWords) {}
  __device__ __forceinline__ bool on() const { return threadIdx.x == 0 && n < kXrayCompactWords; }
  __device__ __forceinline__ void anchor(uint64_t* w) const { xray_anchor(w); }
  __device__ __forceinline__ void begin() {
    if (on()) {
      uint64_t* w = words();
      w[0] = kXrayCompactMagic;
      w[1] = (uint64_t(blockIdx.x) << 32) | xray_smid();
      anchor(w + 2);
    }
  }
  __device__ __forceinline__ void put(uint16_t phase, int layer, uint64_t c) {
    words()[n++] = xray_compact_record(phase, layer, c);
  }
  template <uint16_t kPhase>
  __device__ __forceinline__ void end(int layer) {
    if (on()) {
      put(kPhase, layer, xray_clock());
      if constexpr (xray_token_end(kPhase)) anchor(words() + 5);
    }
  }
  __device__ __forceinline__ void stamp(uint64_t& g, uint64_t& c) const {
    (void)g;
    c = xray_clock();
  }
  // Close the current interval at an earlier cycle c of this SM, naming it (the host clamps c
  // between the previous record and the next).
  __device__ __forceinline__ void cut(uint16_t phase, int layer, uint64_t c) {
    if (on()) put(phase, layer, c);
  }
  // A stall that began at cycle c: if it was long, close the work interval at its start and
  // record the stall as its own interval.
  __device__ __forceinline__ void stall(uint16_t work_phase, uint16_t stall_phase, int layer, uint64_t g, uint64_t c) {
    (void)g;
    if (on()) {
      const uint64_t now = xray_clock();
      if ((long long)(now - c) > kXrayRingStallCycles) {
        put(work_phase, layer, c);
        if (n < kXrayCompactWords) put(stall_phase, layer, now);
      }
    }
  }
};

template <>
struct XrayRecorderT<XrayRecord::kCompact> : XrayCompactRecorder<false> {
  using XrayCompactRecorder<false>::XrayCompactRecorder;
};
template <>
struct XrayRecorderT<XrayRecord::kCompactLean> : XrayCompactRecorder<true> {
  using XrayCompactRecorder<true>::XrayCompactRecorder;
};

template <>
struct XrayRecorderT<XrayRecord::kFull> {
  XrayEvent* out;  // this block's slots, or nullptr when this launch is not traced
  int n;
  uint64_t g0, c0;
  __device__ __forceinline__ explicit XrayRecorderT(XrayEvent* buf)
      : out(buf != nullptr ? buf + size_t(blockIdx.x) * kXrayMaxEvents : nullptr), n(0), g0(0), c0(0) {}
  __device__ __forceinline__ void begin() {
    if (out != nullptr && threadIdx.x == 0) {
      c0 = clock64();
      g0 = xray_globaltimer();
    }
  }
  __device__ __forceinline__ void close(uint16_t phase, int layer) {
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
  template <uint16_t kPhase>
  __device__ __forceinline__ void end(int layer) {
    close(kPhase, layer);
  }
  __device__ __forceinline__ void stamp(uint64_t& g, uint64_t& c) const {
    if (out != nullptr && threadIdx.x == 0) {
      c = clock64();
      g = xray_globaltimer();
    }
  }
  // Close the current interval at an earlier cycle c of this SM (clamped to the interval), naming
  // it; %globaltimer at c is interpolated between the interval's start and now.
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
  __device__ __forceinline__ void stall(uint16_t work_phase, uint16_t stall_phase, int layer, uint64_t g, uint64_t c) {
    if (out != nullptr && threadIdx.x == 0 && (long long)(clock64() - c) > kXrayRingStallCycles) {
      if (n < kXrayMaxEvents) {  // the work interval ends where the stall began
        XrayEvent e{g0, g, c0, c, work_phase, uint16_t(layer), uint16_t(blockIdx.x), uint16_t(xray_smid())};
        out[n++] = e;
      }
      g0 = g;
      c0 = c;
      close(stall_phase, layer);  // [stall start, now]
    }
  }
};

using XrayRecorder = XrayRecorderT<kXrayRecord>;

// kXrayNvSmem's recorder: kCompact's records and anchors, its state in static shared memory. Only
// thread 0 touches the state, so no barrier orders it; volatile keeps the compiler from caching it
// in registers between stamps (which would bring back the live registers this is meant to save).
// A stamp reads clock64 before it loads the state, so the load's latency does not delay the time.
struct XrayCompactSmemState {
  uint64_t* out;  // the block's words, or nullptr when this launch is not traced
  int n;          // next word; kXrayCompactWords when this launch is not traced
};
struct XrayCompactSmemRecorder {
  // A pointer loaded from shared memory is generic to the compiler (a generic ST, not an STG): the
  // records go out with an explicit global store instead.
  __device__ __forceinline__ static void st_global(uint64_t* p, uint64_t v) {
    asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v));
  }
  __device__ __forceinline__ static volatile XrayCompactSmemState& st() {
    __shared__ XrayCompactSmemState s;
    return s;
  }
  __device__ __forceinline__ explicit XrayCompactSmemRecorder(XrayEvent* const& buf) {
    if (threadIdx.x == 0) {
      volatile XrayCompactSmemState& s = st();
      s.out = buf != nullptr ? reinterpret_cast<uint64_t*>(buf + size_t(blockIdx.x) * kXrayMaxEvents) : nullptr;
      s.n = buf != nullptr ? kXrayCompactHeaderWords : kXrayCompactWords;
    }
  }
  __device__ __forceinline__ void begin() {
    if (threadIdx.x == 0) {
      volatile XrayCompactSmemState& s = st();
      if (s.n < kXrayCompactWords) {
        uint64_t* w = s.out;
        w[0] = kXrayCompactMagic;
        w[1] = (uint64_t(blockIdx.x) << 32) | xray_smid();
        xray_anchor(w + 2);
      }
    }
  }
  template <uint16_t kPhase>
  __device__ __forceinline__ void end(int layer) {
    if (threadIdx.x == 0) {
      const uint64_t c = xray_clock();
      volatile XrayCompactSmemState& s = st();
      const int n = s.n;
      uint64_t* const w = s.out;  // loaded with n, before the test: one shared round trip, not two
      if (n < kXrayCompactWords) {
        st_global(w + n, xray_compact_record(kPhase, layer, c));
        s.n = n + 1;
        if constexpr (xray_token_end(kPhase)) xray_anchor(w + 5);
      }
    }
  }
  __device__ __forceinline__ void stamp(uint64_t& g, uint64_t& c) const {
    (void)g;
    c = xray_clock();
  }
  __device__ __forceinline__ void cut(uint16_t phase, int layer, uint64_t c) {
    if (threadIdx.x == 0) {
      volatile XrayCompactSmemState& s = st();
      const int n = s.n;
      uint64_t* const w = s.out;
      if (n < kXrayCompactWords) {
        st_global(w + n, xray_compact_record(phase, layer, c));
        s.n = n + 1;
      }
    }
  }
  __device__ __forceinline__ void stall(uint16_t work_phase, uint16_t stall_phase, int layer, uint64_t g, uint64_t c) {
    (void)g;
    if (threadIdx.x == 0) {
      const uint64_t now = xray_clock();
      if ((long long)(now - c) > kXrayRingStallCycles) {
        volatile XrayCompactSmemState& s = st();
        const int n = s.n;
        uint64_t* const w = s.out;
        if (n < kXrayCompactWords) {
          st_global(w + n, xray_compact_record(work_phase, layer, c));
          if (n + 1 < kXrayCompactWords) st_global(w + n + 1, xray_compact_record(stall_phase, layer, now));
          s.n = n + 1 < kXrayCompactWords ? n + 2 : n + 1;
        }
      }
    }
  }
};

// The recorder of a kernel whose layers are NVFP4 (kNvfp4Kernel) or not. The flag is an explicit
// argument of XRAY_INIT at every use site (nothing here supplies a default, so a use without it does
// not compile), and the recorder carries it: XRAY_GATHER reads it from xr's type, not from a name in
// scope. The base is the recorder itself; the wrapper adds no member.
template <bool kNvfp4Kernel>
struct XrayRecorderFor : std::conditional_t<kXrayNvSmem && kNvfp4Kernel, XrayCompactSmemRecorder, XrayRecorder> {
  using Base = std::conditional_t<kXrayNvSmem && kNvfp4Kernel, XrayCompactSmemRecorder, XrayRecorder>;
  using Base::Base;
  static constexpr bool kNvfp4 = kNvfp4Kernel;
};

// XRAY_INIT(buf, nvfp4): buf, the kernel's XrayEvent* parameter; nvfp4, a constant bool, true in a
// kernel whose layers are NVFP4 (the stream consumer passes its kNv, the upstream schedule false).
#define XRAY_INIT(buf, nvfp4) XrayRecorderFor<(nvfp4)> xr(buf)
#define XRAY_BEGIN() xr.begin()
#define XRAY_END(phase, layer) xr.end<kPhase_##phase>((layer))
#define XRAY_STAMP(g, c) \
  uint64_t g = 0, c = 0; \
  xr.stamp(g, c)
#define XRAY_STALL(work_phase, stall_phase, layer, g, c) xr.stall((work_phase), (stall_phase), (layer), (g), (c))
// A stream hop's s_gather: dropped in an NVFP4 kernel (the flag XRAY_INIT gave xr) unless kXrayNvGather.
#define XRAY_GATHER(layer) \
  do { \
    if constexpr (kXrayNvGather || !std::remove_reference_t<decltype(xr)>::kNvfp4) XRAY_END(s_gather, layer); \
  } while (0)
// MONOLITH_XRAY_SUB=1: the diagnostic sub-intervals of xray_phases.def (x_words, x_open, x_dot,
// x_out), only in that X-ray build; =2: x_open, x_dot, x_out, x_prenorm, x_slots (and x_count where
// the landed count is on); =3: only the attention's x_att_* (a block's first split).
// XRAY_SUB closes the current interval like XRAY_END.
// XRAY_WORDS_NOTE: once a warp's lanes have their words of a hop, its lane 0 raises the block's
// latest cycle (a shared word); XRAY_WORDS_CUT: thread 0, after the barrier every thread passed,
// records [thread 0's words, the last thread's words] as x_words and clears the word.
#if defined(MONOLITH_XRAY_SUB) && (MONOLITH_XRAY_SUB == 1 || MONOLITH_XRAY_SUB == 2)
#define XRAY_SUB(phase, layer) xr.end<kPhase_##phase>((layer))
#else
#define XRAY_SUB(phase, layer) ((void)0)
#endif
#if defined(MONOLITH_XRAY_SUB) && MONOLITH_XRAY_SUB == 3
#define XRAY_SUB3(phase, layer) xr.end<kPhase_##phase>((layer))
#else
#define XRAY_SUB3(phase, layer) ((void)0)
#endif
// Level 2 adds thread 0's x_prenorm and x_slots inside a hop's gather; they replace x_words (its
// cut could only land after them, so level 2 does not record it).
#if defined(MONOLITH_XRAY_SUB) && MONOLITH_XRAY_SUB == 2
#define XRAY_SUB2(phase, layer) xr.end<kPhase_##phase>((layer))
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
// the flag checked as in the X-ray build (a constant bool), in an unevaluated operand: no code
#define XRAY_INIT(buf, nvfp4) ((void)(buf), (void)sizeof(std::bool_constant<(nvfp4)>))
#define XRAY_BEGIN() ((void)0)
#define XRAY_END(phase, layer) ((void)0)
#define XRAY_STAMP(g, c) ((void)0)
#define XRAY_STALL(work_phase, stall_phase, layer, g, c) ((void)0)
#define XRAY_GATHER(layer) ((void)0)
#endif

}  // namespace monolith
