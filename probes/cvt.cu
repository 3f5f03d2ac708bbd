/*
Probe: E4M3 and E2M1 decode, checked value by value against a CPU reference, then timed.

It tests kernel/dequant.cuh itself (included below), so the megakernel uses exactly the decode
this probe verified:
- e4m3x2_to_half2 (hardware `cvt.rn.f16x2.e4m3x2` on sm_89+): all 65,536 byte pairs, bit-exact
  against the CPU decoder, including byte order (low byte -> low half). NaN inputs (0x7F, 0xFF)
  must give an f16 NaN; the bits the hardware returns are recorded.
- e4m3_to_f16_bits_sw (the software fallback) against the same reference, bit-exact incl. NaN sign.
- e2m1x8_to_half2x4: the sm_90 bit trick (or the native `cvt.rn.f16x2.e2m1x2` when built for
  sm_100a/sm_120a): every code in every nibble position, bit-exact against e2m1 / e2m1_unbias().
- e4m3_to_float (scales), dot8_e4m3 / dot8_e2m1_biased / nvfp4_group_scale against fp64 dots.
- Throughput of decode + fp32 FMA from shared memory (ALU-bound on purpose): weights/s and the
  weight bytes/s it could sustain, next to a bf16 dot for scale. If a path cannot decode faster
  than DRAM delivers (4.8 TB/s spec on the H200), it is a bottleneck and the kernel must know.

Compile:
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o cvt probes/cvt.cu
  (sm_120a: -gencode=arch=compute_120a,code=sm_120a compiles the native e2m1 cvt path)
Run:
  ./cvt            human-readable
  ./cvt --json     one JSON object on stdout (probes/run.py)
*/
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../kernel/dequant.cuh"

#define PROBE_NAME "cvt"
#include "probe_common.cuh"

// ------------------------------- CPU reference (independent of dequant.cuh) -----------------
// Decoded from the format definition with fp64 arithmetic; f16 bits produced by a generic exact
// encoder, so no bit trick is shared between the reference and the code under test.

static double ref_e4m3(uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0xF && m == 7) return NAN;
  if (e == 0) return sign * m * std::ldexp(1.0, -9);
  return sign * (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}

static double ref_e2m1(uint8_t code) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return ((code & 8) ? -1.0 : 1.0) * mag[code & 7];
}

// Exact double -> IEEE half bits. Returns false if x is not exactly representable.
static bool f16_bits_exact(double x, uint16_t* out) {
  if (std::isnan(x)) { *out = 0x7FFF; return true; }
  uint16_t s = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (a == 0.0) { *out = s; return true; }
  int e;
  double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp16 = e - 1 + 15;        // biased exponent for 1.xxx form
  if (exp16 >= 31) return false;
  if (exp16 >= 1) {
    double mant = (f * 2.0 - 1.0) * 1024.0;
    if (mant != std::floor(mant)) return false;
    *out = uint16_t(s | (exp16 << 10) | int(mant));
    return true;
  }
  double mant = a / std::ldexp(1.0, -24);  // subnormal: multiples of 2^-24
  if (mant != std::floor(mant) || mant >= 1024.0) return false;
  *out = uint16_t(s | int(mant));
  return true;
}

static double h2d(uint16_t bits) {
  const int s = bits >> 15, e = (bits >> 10) & 0x1F, m = bits & 0x3FF;
  double v;
  if (e == 0) v = m * std::ldexp(1.0, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = (1.0 + m / 1024.0) * std::ldexp(1.0, e - 15);
  return s ? -v : v;
}
static bool is_f16_nan(uint16_t b) { return ((b >> 10) & 0x1F) == 0x1F && (b & 0x3FF) != 0; }

// ------------------------------- device kernels under test ----------------------------------

__global__ void k_e4m3_pairs(uint32_t* hw, uint32_t* sw) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u) return;
  hw[i] = monolith::half2_as_u32(monolith::e4m3x2_to_half2(uint16_t(i)));
  sw[i] = uint32_t(monolith::e4m3_to_f16_bits_sw(uint8_t(i & 0xFF))) |
          (uint32_t(monolith::e4m3_to_f16_bits_sw(uint8_t(i >> 8))) << 16);
}

__global__ void k_e4m3_scale(float* out) {
  const int i = threadIdx.x;
  if (i < 256) out[i] = monolith::e4m3_to_float(uint8_t(i));
}

__global__ void k_e2m1_words(const uint32_t* words, int n, uint4* out, float* unbias) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) *unbias = monolith::e2m1_unbias();
  if (i >= n) return;
  __half2 p[4];
  monolith::e2m1x8_to_half2x4(words[i], p);
  out[i] = make_uint4(monolith::half2_as_u32(p[0]), monolith::half2_as_u32(p[1]),
                      monolith::half2_as_u32(p[2]), monolith::half2_as_u32(p[3]));
}

// One thread per test case: 16 weights (a full NVFP4 group, or 2 x 8 E4M3) against 16 activations.
__global__ void k_dots(const uint4* w8, const uint32_t* w4, const uint8_t* s4, const float* gscale,
                       const float* act, int n, float* out8, float* out4) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float4* a = reinterpret_cast<const float4*>(act + 16 * i);
  const uint4 w = w8[i];
  float acc = 0.f;
  acc = monolith::dot8_e4m3(make_uint2(w.x, w.y), a[0], a[1], acc);
  acc = monolith::dot8_e4m3(make_uint2(w.z, w.w), a[2], a[3], acc);
  out8[i] = acc;
  float g = 0.f;
  g = monolith::dot8_e2m1_biased(w4[2 * i], a[0], a[1], g);
  g = monolith::dot8_e2m1_biased(w4[2 * i + 1], a[2], a[3], g);
  out4[i] = g * monolith::nvfp4_group_scale(s4[i], gscale[i]);
}

// ------------------------------- throughput (ALU-bound) -------------------------------------
// Weights come from shared memory (LDS.128: 128 B/clk/SM, several times what DRAM delivers per
// SM) so the decode + FMA instruction count is what limits. Activations stay in registers.
constexpr int kTputSmemVecs = 2048;  // 32 KB of weights per block

template <int MODE>  // 0 = bf16, 1 = e4m3, 2 = e2m1
__global__ void __launch_bounds__(256) k_tput(const uint4* src, int iters, float* sink) {
  __shared__ uint4 sw[kTputSmemVecs];
  for (int i = threadIdx.x; i < kTputSmemVecs; i += blockDim.x) sw[i] = src[i];
  __syncthreads();
  const float t = float(threadIdx.x & 7);
  float4 a0 = make_float4(t, t + 1.f, t + 2.f, t + 3.f), a1 = make_float4(t - 1.f, t - 2.f, 0.5f, 0.25f);
  float acc0 = 0.f, acc1 = 0.f;
  int idx = threadIdx.x;
  for (int it = 0; it < iters; ++it) {
    const uint4 w = sw[idx];
    idx = (idx + 256) & (kTputSmemVecs - 1);
    if (MODE == 0) {  // 8 bf16 per 16 bytes: bf16 -> f32 is a shift or a mask
      const uint32_t v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc0 = fmaf(__uint_as_float(v[j] << 16), j & 1 ? a0.x : a1.x, acc0);
        acc1 = fmaf(__uint_as_float(v[j] & 0xFFFF0000u), j & 1 ? a0.y : a1.y, acc1);
      }
    } else if (MODE == 1) {  // 16 e4m3 per 16 bytes
      acc0 = monolith::dot8_e4m3(make_uint2(w.x, w.y), a0, a1, acc0);
      acc1 = monolith::dot8_e4m3(make_uint2(w.z, w.w), a1, a0, acc1);
    } else {  // 32 e2m1 per 16 bytes
      acc0 = monolith::dot8_e2m1_biased(w.x, a0, a1, acc0);
      acc1 = monolith::dot8_e2m1_biased(w.y, a1, a0, acc1);
      acc0 = monolith::dot8_e2m1_biased(w.z, a0, a1, acc0);
      acc1 = monolith::dot8_e2m1_biased(w.w, a1, a0, acc1);
    }
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc0 + acc1;  // keeps the work observable
}

template <int MODE>
static double time_tput(int blocks, int iters, const uint4* src, float* sink, int reps) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  k_tput<MODE><<<blocks, 256>>>(src, iters, sink);  // warm-up
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(e0));
    k_tput<MODE><<<blocks, 256>>>(src, iters, sink);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;  // seconds
}

// ------------------------------- main -------------------------------------------------------

struct Mismatch { uint32_t input; uint32_t got; uint32_t want; };

static std::string mismatches_json(const std::vector<Mismatch>& v) {
  std::string s = "[";
  char buf[96];
  for (size_t i = 0; i < v.size() && i < 8; ++i) {
    snprintf(buf, sizeof buf, "%s{\"input\": %u, \"got\": %u, \"want\": %u}", i ? ", " : "",
             v[i].input, v[i].got, v[i].want);
    s += buf;
  }
  return s + "]";
}

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) g_json = true;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: cvt [--json] [--reps N]\n");
      return 0;
    }
  }
  int dev = 0, sms = 0, cc_major = 0, cc_minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));

  // ---- E4M3 pairs: hardware cvt and software fallback
  uint32_t *d_hw, *d_sw;
  CUDA_CHECK(cudaMalloc(&d_hw, 65536 * 4));
  CUDA_CHECK(cudaMalloc(&d_sw, 65536 * 4));
  k_e4m3_pairs<<<256, 256>>>(d_hw, d_sw);
  CUDA_CHECK(cudaGetLastError());
  std::vector<uint32_t> hw(65536), sw(65536);
  CUDA_CHECK(cudaMemcpy(hw.data(), d_hw, 65536 * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(sw.data(), d_sw, 65536 * 4, cudaMemcpyDeviceToHost));
  std::vector<Mismatch> mm_hw, mm_sw;
  uint16_t nan_bits_7f = 0, nan_bits_ff = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    for (int half = 0; half < 2; ++half) {
      const uint8_t b = uint8_t(half ? i >> 8 : i & 0xFF);
      const double v = ref_e4m3(b);
      uint16_t want;
      if (!f16_bits_exact(v, &want)) { fprintf(stderr, "reference not exact for %u\n", b); return 1; }
      const uint16_t got = uint16_t(half ? hw[i] >> 16 : hw[i] & 0xFFFF);
      const uint16_t got_sw = uint16_t(half ? sw[i] >> 16 : sw[i] & 0xFFFF);
      if (std::isnan(v)) {
        if (b == 0x7F) nan_bits_7f = got;
        if (b == 0xFF) nan_bits_ff = got;
        if (!is_f16_nan(got)) mm_hw.push_back({i, got, want});
        // the software path promises sign-preserving 0x7FFF
        if (got_sw != uint16_t((b & 0x80 ? 0x8000 : 0) | 0x7FFF)) mm_sw.push_back({i, got_sw, want});
      } else {
        if (got != want) mm_hw.push_back({i, got, want});
        if (got_sw != want) mm_sw.push_back({i, got_sw, want});
      }
    }
  }

  // ---- E4M3 scales -> float
  float* d_scale;
  CUDA_CHECK(cudaMalloc(&d_scale, 256 * 4));
  k_e4m3_scale<<<1, 256>>>(d_scale);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> scale(256);
  CUDA_CHECK(cudaMemcpy(scale.data(), d_scale, 256 * 4, cudaMemcpyDeviceToHost));
  int mm_scale = 0;
  for (int b = 0; b < 256; ++b) {
    const double v = ref_e4m3(uint8_t(b));
    if (std::isnan(v) ? !std::isnan(scale[b]) : double(scale[b]) != v) ++mm_scale;
  }

  // ---- E2M1: every code in every nibble (low 16 bits enumerate all 4-code combinations; the
  //      high 16 bits repeat them, and repeat their complement, so each nibble sees all 16 codes
  //      next to different neighbours).
  const int nw = 2 * 65536;
  std::vector<uint32_t> words(nw);
  for (uint32_t i = 0; i < 65536; ++i) {
    words[i] = i | (i << 16);
    words[65536 + i] = i | ((~i & 0xFFFFu) << 16);
  }
  uint32_t* d_words;
  uint4* d_dec;
  float* d_unbias;
  CUDA_CHECK(cudaMalloc(&d_words, nw * 4));
  CUDA_CHECK(cudaMalloc(&d_dec, nw * 16));
  CUDA_CHECK(cudaMalloc(&d_unbias, 4));
  CUDA_CHECK(cudaMemcpy(d_words, words.data(), nw * 4, cudaMemcpyHostToDevice));
  k_e2m1_words<<<(nw + 255) / 256, 256>>>(d_words, nw, d_dec, d_unbias);
  CUDA_CHECK(cudaGetLastError());
  std::vector<uint4> dec(nw);
  float unbias = 0.f;
  CUDA_CHECK(cudaMemcpy(dec.data(), d_dec, nw * 16, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&unbias, d_unbias, 4, cudaMemcpyDeviceToHost));
  std::vector<Mismatch> mm_e2m1;
  bool unbias_ok = (unbias == 1.0f || unbias == 16384.0f);
  for (int i = 0; i < nw && unbias_ok; ++i) {
    const uint32_t got4[4] = {dec[i].x, dec[i].y, dec[i].z, dec[i].w};
    for (int k = 0; k < 4; ++k) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t code = uint8_t((words[i] >> (4 * (k + 4 * half))) & 0xF);
        uint16_t want;
        if (!f16_bits_exact(ref_e2m1(code) / unbias, &want)) { fprintf(stderr, "e2m1 ref\n"); return 1; }
        const uint16_t got = uint16_t(half ? got4[k] >> 16 : got4[k] & 0xFFFF);
        if (got != want) mm_e2m1.push_back({words[i], got, want});
      }
    }
  }
  // the 16 single-code values, for the record (value after unbias, as the kernel will see it)
  std::string e2m1_values = "[";
  for (int c = 0; c < 16; ++c) {
    const uint16_t lo = uint16_t(dec[c].x & 0xFFFF);  // word c: code c in nibble 0 -> pair 0 low
    char buf[32];
    snprintf(buf, sizeof buf, "%s%g", c ? ", " : "", h2d(lo) * unbias);
    e2m1_values += buf;
  }
  e2m1_values += "]";

  // ---- dot products vs fp64
  const int nd = 4096;
  std::vector<uint4> w8(nd);
  std::vector<uint32_t> w4(2 * nd);
  std::vector<uint8_t> s4(nd);
  std::vector<float> gs(nd), act(16 * nd);
  uint64_t lcg = 0x9E3779B97F4A7C15ull;
  auto rnd = [&]() { lcg = lcg * 6364136223846793005ull + 1442695040888963407ull; return uint32_t(lcg >> 32); };
  for (int i = 0; i < nd; ++i) {
    uint32_t v[4];
    for (int j = 0; j < 4; ++j) {
      uint32_t x = rnd();
      for (int k = 0; k < 4; ++k)  // avoid NaN bytes in the dot test (they are covered above)
        if (((x >> (8 * k)) & 0x7F) == 0x7F) x ^= 1u << (8 * k);
      v[j] = x;
    }
    w8[i] = make_uint4(v[0], v[1], v[2], v[3]);
    w4[2 * i] = rnd();
    w4[2 * i + 1] = rnd();
    s4[i] = uint8_t(0x08 + rnd() % 0x70);  // positive normal scales 2^-6 .. 2^8
    gs[i] = std::ldexp(1.0f + (rnd() % 1000) / 1000.0f, -int(rnd() % 8));
    for (int k = 0; k < 16; ++k) act[16 * i + k] = float(int(rnd() % 2001) - 1000) / 250.0f;
  }
  uint4* d_w8;
  uint32_t* d_w4;
  uint8_t* d_s4;
  float *d_gs, *d_act, *d_o8, *d_o4;
  CUDA_CHECK(cudaMalloc(&d_w8, nd * 16));
  CUDA_CHECK(cudaMalloc(&d_w4, nd * 8));
  CUDA_CHECK(cudaMalloc(&d_s4, nd));
  CUDA_CHECK(cudaMalloc(&d_gs, nd * 4));
  CUDA_CHECK(cudaMalloc(&d_act, nd * 64));
  CUDA_CHECK(cudaMalloc(&d_o8, nd * 4));
  CUDA_CHECK(cudaMalloc(&d_o4, nd * 4));
  CUDA_CHECK(cudaMemcpy(d_w8, w8.data(), nd * 16, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_w4, w4.data(), nd * 8, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_s4, s4.data(), nd, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_gs, gs.data(), nd * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_act, act.data(), nd * 64, cudaMemcpyHostToDevice));
  k_dots<<<(nd + 127) / 128, 128>>>(d_w8, d_w4, d_s4, d_gs, d_act, nd, d_o8, d_o4);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> o8(nd), o4(nd);
  CUDA_CHECK(cudaMemcpy(o8.data(), d_o8, nd * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(o4.data(), d_o4, nd * 4, cudaMemcpyDeviceToHost));
  double worst8 = 0, worst4 = 0;
  for (int i = 0; i < nd; ++i) {
    const uint8_t* b8 = reinterpret_cast<const uint8_t*>(&w8[i]);
    double r8 = 0, abs8 = 0, r4 = 0, abs4 = 0;
    for (int k = 0; k < 16; ++k) {
      r8 += ref_e4m3(b8[k]) * act[16 * i + k];
      abs8 += std::fabs(ref_e4m3(b8[k]) * act[16 * i + k]);
      const uint8_t code = uint8_t((w4[2 * i + k / 8] >> (4 * (k % 8))) & 0xF);
      r4 += ref_e2m1(code) * act[16 * i + k];
      abs4 += std::fabs(ref_e2m1(code) * act[16 * i + k]);
    }
    const double sc = ref_e4m3(s4[i]) * gs[i];
    r4 *= sc;
    abs4 *= sc;
    // error relative to the sum of |terms| (fp32 accumulation bound), not to a cancelled result
    worst8 = std::max(worst8, std::fabs(o8[i] - r8) / std::max(abs8, 1e-30));
    worst4 = std::max(worst4, std::fabs(o4[i] - r4) / std::max(abs4, 1e-30));
  }
  const double dot_tol = 1e-5;  // 16 fp32 FMAs + one scale product: a few ulp of 2^-24 each

  // ---- throughput
  const int blocks = sms * 4, iters = 4096;
  uint4* d_src;
  float* d_sink;
  CUDA_CHECK(cudaMalloc(&d_src, kTputSmemVecs * 16));
  CUDA_CHECK(cudaMalloc(&d_sink, size_t(blocks) * 256 * 4));
  {
    std::vector<uint32_t> src(kTputSmemVecs * 4);
    for (auto& x : src) { x = rnd() & 0x77777777u; }  // no e4m3 NaNs, moderate bf16 values
    CUDA_CHECK(cudaMemcpy(d_src, src.data(), kTputSmemVecs * 16, cudaMemcpyHostToDevice));
  }
  const double vecs = double(blocks) * 256 * iters;  // 16-byte vectors processed
  const double t_bf16 = time_tput<0>(blocks, iters, d_src, d_sink, reps);
  const double t_e4m3 = time_tput<1>(blocks, iters, d_src, d_sink, reps);
  const double t_e2m1 = time_tput<2>(blocks, iters, d_src, d_sink, reps);
  struct Tp { const char* name; double t; int per_vec; };
  const Tp tps[3] = {{"bf16", t_bf16, 8}, {"e4m3", t_e4m3, 16}, {"e2m1", t_e2m1, 32}};

  const bool ok_e4m3 = mm_hw.empty(), ok_sw = mm_sw.empty(), ok_e2m1 = unbias_ok && mm_e2m1.empty();
  const bool ok_dot = worst8 < dot_tol && worst4 < dot_tol;
  const bool ok = ok_e4m3 && ok_sw && ok_e2m1 && mm_scale == 0 && ok_dot;
  const char* e2m1_path = unbias == 1.0f ? "native cvt.rn.f16x2.e2m1x2" : "bit trick (f16 = e2m1 * 2^-14)";

  if (g_json) {
    printf("{\"probe\": \"cvt\", \"ok\": %s, \"device\": \"%s\", \"cc\": \"%d.%d\", \"sm_count\": %d, ",
           ok ? "true" : "false", prop.name, cc_major, cc_minor, sms);
    printf("\"e4m3\": {\"ok\": %s, \"checked\": %d, \"mismatches\": %zu, \"first\": %s, "
           "\"nan_bits_0x7f\": %u, \"nan_bits_0xff\": %u, \"path\": \"%s\"}, ",
           ok_e4m3 ? "true" : "false", 2 * 65536, mm_hw.size(), mismatches_json(mm_hw).c_str(),
           nan_bits_7f, nan_bits_ff, cc_major * 10 + cc_minor >= 89 ? "cvt.rn.f16x2.e4m3x2" : "software");
    printf("\"e4m3_sw\": {\"ok\": %s, \"mismatches\": %zu, \"first\": %s}, ", ok_sw ? "true" : "false",
           mm_sw.size(), mismatches_json(mm_sw).c_str());
    printf("\"e4m3_scale\": {\"ok\": %s, \"mismatches\": %d}, ", mm_scale == 0 ? "true" : "false", mm_scale);
    printf("\"e2m1\": {\"ok\": %s, \"path\": \"%s\", \"unbias\": %g, \"checked\": %d, \"mismatches\": %zu, "
           "\"first\": %s, \"values\": %s}, ",
           ok_e2m1 ? "true" : "false", e2m1_path, unbias, nw * 8, mm_e2m1.size(),
           mismatches_json(mm_e2m1).c_str(), e2m1_values.c_str());
    printf("\"dot\": {\"ok\": %s, \"cases\": %d, \"worst_rel_e4m3\": %.3e, \"worst_rel_nvfp4\": %.3e, "
           "\"tol\": %.1e}, ",
           ok_dot ? "true" : "false", nd, worst8, worst4, dot_tol);
    printf("\"throughput\": {\"blocks\": %d, \"threads\": 256, \"source\": \"shared memory\"", blocks);
    for (const Tp& tp : tps)
      printf(", \"%s\": {\"s\": %.6e, \"gweights_per_s\": %.1f, \"weight_tbs\": %.3f}", tp.name, tp.t,
             vecs * tp.per_vec / tp.t * 1e-9, vecs * 16 / tp.t * 1e-12);
    printf("}}\n");
  } else {
    printf("device: %s (cc %d.%d, %d SMs)\n", prop.name, cc_major, cc_minor, sms);
    printf("e4m3x2 -> half2 (hardware): %zu mismatches of %d; NaN bits 0x7F -> 0x%04x, 0xFF -> 0x%04x  %s\n",
           mm_hw.size(), 2 * 65536, nan_bits_7f, nan_bits_ff, ok_e4m3 ? "OK" : "FAIL");
    printf("e4m3 software fallback:     %zu mismatches  %s\n", mm_sw.size(), ok_sw ? "OK" : "FAIL");
    printf("e4m3 scale -> float:        %d mismatches  %s\n", mm_scale, mm_scale ? "FAIL" : "OK");
    printf("e2m1x8 -> half2x4 (%s, unbias %g): %zu mismatches of %d  %s\n", e2m1_path, unbias,
           mm_e2m1.size(), nw * 8, ok_e2m1 ? "OK" : "FAIL");
    printf("  codes 0..15 -> %s\n", e2m1_values.c_str());
    printf("dot products: worst rel err e4m3 %.2e, nvfp4 %.2e (tol %.0e)  %s\n", worst8, worst4, dot_tol,
           ok_dot ? "OK" : "FAIL");
    printf("decode+FMA throughput from shared memory (%d x 256):\n", blocks);
    for (const Tp& tp : tps)
      printf("  %-5s %8.1f Gweights/s = %6.2f TB/s of weights\n", tp.name, vecs * tp.per_vec / tp.t * 1e-9,
             vecs * 16 / tp.t * 1e-12);
  }
  return ok ? 0 : 1;
}
