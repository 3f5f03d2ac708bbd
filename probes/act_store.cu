// Probe: what the down phase's activation store costs, alone (eighteenth session).
//
// Why: fp8's down phase on f16 inputs (MONOLITH_E4M3_HALF2=8) was 2.3 % slower per token than on
// fp32 inputs, and its X-ray put the whole loss in the activation hop (s_mlp -> s_wait_act, the last
// block sees it after 1.04 us instead of 0.51) while down's own work did not change. Between the
// gather of the 3,072 activations (6 tagged words per thread) and the barrier that publishes them,
// the two builds differ only in how each thread stores its 6 values into shared memory: fp32
// (nv_swz, one STS each) or store_xe (per 32-element word one redux.sync for the word's largest
// |x|, a scaled f16 store, lane 0 the word's factor). NVFP4's default (store_xh2) has the same shape.
// This probe times those stores between two block barriers, with nothing else running.
//
// Shapes (kernel/xvec.cuh's own functions where the kernel has them):
//   0 null         the two barriers only
//   1 fp32         sm[nv_swz(i)] = v   (the default fp8 / bf16 build's activation store)
//   2 store_xe     fp8's f16 words (MONOLITH_E4M3_HALF2 bit 8): 6 redux.sync per thread
//   3 store_xh2    NVFP4's half2 words (its default): 6 redux.sync per thread
//   4 warp-local   no redux: each warp writes its 6 x 32 fp32 values to its own scratch, __syncwarp,
//                  then lanes 0..11 each take 16 consecutive elements (2 per 32-element word), find
//                  their max |x| alone, and store them as f16 with one factor per 16 elements
//                  (the layout store_xe's readers use, factors per 16 instead of per 32)
//   5 xe_swz       store_xe's lift (2^-E) at store_xh2's places     } call 5 put store_xe 250 cycles
//   6 xh2_lin      store_xh2's lift (2^(14-E)) at store_xe's places } above store_xh2: lift or places?
//   7 xe_pair      store_xe with lanes 2j, 2j + 1 paired by one shuffle: even lanes store a half2
// Measured (results/m4_act_store.json, NOTES.md eighteenth session): the redux stores cost ~250-280
// cycles more than fp32; lift and places do not matter; shapes 4 and 7 cost more.
// Layout as the kernel's: 128 blocks x 512 threads (16 warps; the kernel's producer warp left
// out), thread t holds elements t + 512 k, k < 6, of a 3,072-vector.
// Stamps (thread 0, clock64): after the first barrier and after the second; median over blocks
// and rounds (the first eighth skipped), minus shape 0's. Check, the last round of each shape:
// every element of every block's vector decoded (f16 x factor) against the fp32 input, error at
// most 2^-11 of its 32-element word's largest |x| (f16's half ulp at the lifted scale); fp32 exact.
// Compile: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernel -I probes -o /tmp/act_store probes/act_store.cu
// Run:     /tmp/act_store [--json] [--rounds N]
#define PROBE_NAME "act_store"
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

#include "probe_common.cuh"
#include "xvec.cuh"  // nv_swz, store_xe, store_xh2, store_word_f16, word_exp, pow2f: the kernel's stores

using namespace monolith;

constexpr int kThreads = 512, kPer = 6, kN = kThreads * kPer, kWords = kN / 32, kBlocks = 128;
static_assert(kN == 3072, "the intermediate size");
constexpr int kShapes = 8;
// shared memory: the vector (fp32: kN floats; f16 forms: kN / 2 floats + factors) and shape 4's
// per-warp scratch (16 warps x 192 floats)
constexpr int kVecFloats = kN, kScratchFloats = kThreads / 32 * kPer * 32;

__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// shape 4: this warp's 6 words through its scratch; factors per 16 elements after the kN / 2 halves'
// floats (kN / 16 of them)
__device__ __forceinline__ void store_warp_local(float* vec, float* scratch, const float v[kPer]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s = scratch + warp * kPer * 32;
#pragma unroll
  for (int k = 0; k < kPer; ++k) s[32 * k + lane] = v[k];
  __syncwarp();
  if (lane < 2 * kPer) {
    const int k = lane >> 1, h = lane & 1;
    const float4* src = reinterpret_cast<const float4*>(s + 32 * k + 16 * h);
    float x[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 f = src[q];
      x[4 * q] = f.x, x[4 * q + 1] = f.y, x[4 * q + 2] = f.z, x[4 * q + 3] = f.w;
    }
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) m = fmaxf(m, fabsf(x[j]));
    const int e = min(max(int(__float_as_uint(m) >> 23) - 127, -kNvXExpClamp), kNvXExpClamp);
    const float lift = pow2f(-e);
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = pack_h2(x[2 * j] * lift, x[2 * j + 1] * lift);
    const int e0 = 32 * (warp + 16 * k) + 16 * h;  // element index of the group
    uint4* dst = reinterpret_cast<uint4*>(vec) + e0 / 8;
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    vec[kN / 2 + e0 / 16] = pow2f(e);
  }
}

// shape 7 (probe-only experiment; shapes 5 and 6 are xvec.cuh's store_word_f16 with lift and places swapped)
__device__ __forceinline__ void store_xe_pair(float* buf, int i, float v) {
  const int lane = threadIdx.x & 31;
  const int e = word_exp(v);
  const float x = v * pow2f(-e), y = __shfl_xor_sync(0xffffffffu, x, 1);
  if (!(lane & 1)) reinterpret_cast<uint32_t*>(buf)[16 * i + (lane >> 1)] = pack_h2(x, y);
  if (lane == 0) buf[kWords * 16 + i] = pow2f(e);
}

__global__ void __launch_bounds__(kThreads) act_store(const float* in, int shape, int rounds,
                                                      unsigned long long* stamps, float* out) {
  extern __shared__ float smem[];
  float* vec = smem;
  float* scratch = smem + kVecFloats;
  const int t = threadIdx.x, b = blockIdx.x;
  float base[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) base[k] = in[b * kN + t + k * kThreads];
  for (int r = 0; r < rounds; ++r) {
    float v[kPer];
    const float f = 1.f + float(r & 15) * 0x1p-8f;  // a new vector each round, same words' exponents mostly
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = base[k] * f;
    __syncthreads();
    const unsigned long long t0 = clock64();
    if (shape == 1) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) vec[nv_swz(t + k * kThreads)] = v[k];
    } else if (shape == 2) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) store_xe<kWords>(vec, (t + k * kThreads) >> 5, v[k]);
    } else if (shape == 3) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) store_xh2<kWords>(vec, (t + k * kThreads) >> 5, v[k]);
    } else if (shape == 4) {
      store_warp_local(vec, scratch, v);
    } else if (shape == 5) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) store_word_f16<kWords, 0, true>(vec, (t + k * kThreads) >> 5, v[k]);
    } else if (shape == 6) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) store_word_f16<kWords, kE2M1UnbiasLog2, false>(vec, (t + k * kThreads) >> 5, v[k]);
    } else if (shape == 7) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) store_xe_pair(vec, (t + k * kThreads) >> 5, v[k]);
    }
    __syncthreads();
    const unsigned long long t1 = clock64();
    if (t == 0) stamps[size_t(b) * rounds + r] = t1 - t0;
  }
  // the last round's vector, decoded here (each shape's own layout), for the host's check
  for (int i = t; i < kN; i += kThreads) {
    float x = 0.f;
    if (shape == 1) {
      x = vec[nv_swz(i)];
    } else if (shape == 2 || shape == 4 || shape == 6 || shape == 7) {  // linear places
      const float fac = shape == 4 ? vec[kN / 2 + i / 16] : vec[kWords * 16 + i / 32] * (shape == 6 ? pow2f(-kE2M1UnbiasLog2) : 1.f);
      x = __half2float(reinterpret_cast<const __half*>(vec)[i]) * fac;
    } else if (shape == 3 || shape == 5) {
      // store_xh2's placement: word w = i / 32, lane l = i % 32 = 8 c + 4 hi + k
      const int w = i >> 5, l = i & 31, c = l >> 3, k = l & 3, hi = (l >> 2) & 1;
      const float fac = vec[kWords * 16 + w] * (shape == 3 ? pow2f(-kE2M1UnbiasLog2) : 1.f);
      x = __half2float(reinterpret_cast<const __half*>(vec)[2 * (16 * w + 4 * (c ^ ((w >> 1) & 3)) + k) + hi]) * fac;
    }
    out[size_t(b) * kN + i] = x;
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) g_json |= strcmp(argv[i], "--json") == 0;
  const int rounds = probe_int_arg(argc, argv, "--rounds", 2000, 16, 100000);
  const char* names[kShapes] = {"null", "fp32", "store_xe", "store_xh2", "warp_local", "xe_swz", "xh2_lin", "xe_pair"};
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t smem = size_t(kVecFloats + kScratchFloats) * sizeof(float);
  probe_require_smem(prop, smem);
  CUDA_CHECK(cudaFuncSetAttribute(act_store, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // activations like the kernel's: magnitudes over a few binades, both signs, some exact zeros
  std::vector<float> h_in(size_t(kBlocks) * kN);
  uint32_t s = 12345u;
  for (auto& x : h_in) {
    s = s * 1664525u + 1013904223u;
    const float u = float(s >> 8) * 0x1p-24f;
    s = s * 1664525u + 1013904223u;
    x = (s >> 31) ? 0.f : (u - 0.5f) * std::ldexp(1.f, int((s >> 8) % 12) - 6);
    if ((s & 255u) == 0u) x = 0.f;
  }
  float *d_in, *d_out;
  unsigned long long* d_st;
  CUDA_CHECK(cudaMalloc(&d_in, h_in.size() * 4));
  CUDA_CHECK(cudaMalloc(&d_out, h_in.size() * 4));
  CUDA_CHECK(cudaMalloc(&d_st, size_t(kBlocks) * rounds * 8));
  CUDA_CHECK(cudaMemcpy(d_in, h_in.data(), h_in.size() * 4, cudaMemcpyHostToDevice));
  double med[kShapes], p90[kShapes], maxerr[kShapes];
  const float last_f = 1.f + float((rounds - 1) & 15) * 0x1p-8f;
  for (int sh = 0; sh < kShapes; ++sh) {
    act_store<<<kBlocks, kThreads, smem>>>(d_in, sh, rounds, d_st, d_out);  // warm-up
    CUDA_CHECK(cudaGetLastError());
    act_store<<<kBlocks, kThreads, smem>>>(d_in, sh, rounds, d_st, d_out);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> st(size_t(kBlocks) * rounds);
    std::vector<float> out(h_in.size());
    CUDA_CHECK(cudaMemcpy(st.data(), d_st, st.size() * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> c;
    for (int b = 0; b < kBlocks; ++b)
      for (int r = rounds / 8; r < rounds; ++r) c.push_back(double(st[size_t(b) * rounds + r]));  // skip the first eighth
    med[sh] = probe_median(c);
    p90[sh] = probe_quantile(c, 0.9);
    // error against the word's largest |x| (the lift puts it in [1, 2), or [2^14, 2^15) for
    // NVFP4's): f16 rounds every value of the word to within half an ulp at that scale, 2^-11 of it
    maxerr[sh] = 0.0;
    if (sh > 0) {
      for (size_t w0 = 0; w0 < out.size(); w0 += 32) {
        double m = 0.0;
        for (size_t i = w0; i < w0 + 32; ++i) m = std::max(m, std::fabs(double(h_in[i] * last_f)));
        for (size_t i = w0; i < w0 + 32; ++i) {
          const double err = std::fabs(double(out[i]) - double(h_in[i] * last_f));
          maxerr[sh] = std::max(maxerr[sh], m > 0.0 ? err / m : (out[i] != 0.f ? 1.0 : 0.0));
        }
      }
    }
  }
  bool ok = true;
  for (int sh = 1; sh < kShapes; ++sh) ok = ok && maxerr[sh] <= (sh == 1 ? 0.0 : 0x1p-11);
  if (g_json) {
    printf("{\"probe\": \"" PROBE_NAME "\", \"ok\": %s, \"gpu\": \"%s\", \"blocks\": %d, \"threads\": %d, \"rounds\": %d, "
           "\"unit\": \"cycles between two block barriers, thread 0, median over blocks and rounds\", \"shapes\": [",
           ok ? "true" : "false", prop.name, kBlocks, kThreads, rounds);
    for (int sh = 0; sh < kShapes; ++sh)
      printf("%s{\"shape\": %d, \"name\": \"%s\", \"cycles_median\": %.0f, \"cycles_p90\": %.0f, \"over_null\": %.0f, "
             "\"max_rel_err\": %.3g}", sh ? ", " : "", sh, names[sh], med[sh], p90[sh], med[sh] - med[0], maxerr[sh]);
    printf("]}\n");
  } else {
    printf("act_store: %d blocks x %d threads, %d rounds (%s)\n", kBlocks, kThreads, rounds, ok ? "check ok" : "CHECK FAILED");
    printf("%-12s %10s %10s %10s %12s\n", "shape", "median", "p90", "-null", "max rel err");
    for (int sh = 0; sh < kShapes; ++sh)
      printf("%-12s %10.0f %10.0f %10.0f %12.3g\n", names[sh], med[sh], p90[sh], med[sh] - med[0], maxerr[sh]);
  }
  return ok ? 0 : 2;
}
