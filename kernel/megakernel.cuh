// monolith: host-side API of the megakernel (no torch, no pybind: bindings.cpp wraps this).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#include "config.cuh"
#include "ring.cuh"
#include "sync.cuh"
#include "xray.cuh"

namespace monolith {

// Variants are compile-time configurations of one kernel source (megakernel.cu), never copies.
enum Variant : int {
  kVariantBf16Upstream = 0,       // the upstream design: 4 grid barriers + 2 flag syncs per layer
  kVariantBf16UpstreamL2Pre = 1,  // M4 step 0: the same, next-phase weights asked into L2 (not registers) before each wait
  kVariantBf16Stream = 2,         // the streaming schedule (kernel/schedule_stream.cuh)
  kVariantFp8Upstream = 3,        // the upstream schedule on E4M3 weights with fp32 row scales (rowmajor-v1)
  kVariantFp8Stream = 4,          // the streaming schedule on the same E4M3 codes (rows in the stream order)
  kVariantNvfp4Stream = 5,        // the streaming schedule on NVFP4 layers (nvfp4-rowmajor-v1) with the FP8 LM head
  // the sm_120 configuration of the three streaming variants (4-slot ring, Policy<..., true>) on any
  // arch: what an sm_120 GPU runs for 2, 4 and 5, built for sm_90a too so that an H200 can run it
  kVariantBf16StreamSm120 = 6,
  kVariantFp8StreamSm120 = 7,
  kVariantNvfp4StreamSm120 = 8,
  // fp8-stream with its K = 1024 GEMV rounds on the tensor cores (issue 48, the k-pass kernel at k = 1)
  kVariantFp8StreamTc = 9,
  // the same with k = 2, 4, 8 vectors per pass in its tensor-core rounds: compiled, not launched (issue 48
  // step 4: kernel/megakernel_tck.cu)
  kVariantFp8StreamTcK2 = 10,
  kVariantFp8StreamTcK4 = 11,
  kVariantFp8StreamTcK8 = 12,
};

struct StepParams {
  const uint16_t* w;           // packed layer weights, bf16 bits [kNumLayers * kLayerElems]
  const uint16_t* norms;       // packed norm vectors, bf16 bits [kNumLayers * kNormLayerElems]
  const uint16_t* embed;       // [kVocab, kHidden] bf16 bits; also the (tied) LM head
  const uint16_t* final_norm;  // [kHidden] bf16 bits
  const float* rope;           // [kContextCap][128]: cos of the 64 frequencies, then sin
  uint16_t* kv;                // [kNumLayers][2][kNumKVHeads][kContextCap][kHeadDim] bf16 bits
  float* scr;                  // fp32 scratch, kScrElems
  long long* acc;              // stream: residual words [kAccBuffers][kHidden] + snapshot [kAccBuffers][kHidden]
                               // (all zero at the first launch and after every reset)
  float* logits;               // [kVocab] fp32
  SyncState* sync;
  const int32_t* token_in;     // token this launch consumes (device memory)
  int32_t* token_out;          // greedy prediction (device memory), written by the last block
  XrayEvent* xray;             // [grid][kXrayMaxEvents] or nullptr (ignored by the plain build)
  long long timeout_cycles;    // bound on every spin-wait, in SM clock cycles
  int stop_layer;              // phase diff: every block leaves after (stop_layer, stop_phase)
  int stop_phase;              // StopPhase; kStopNever for a normal step
  int jitter_ns;               // bf16-stream stress test: each block sleeps a pseudo-random 0..jitter_ns
                               // ns before each phase (0: off); tokens must not change
  // Weights with one scale per output row (the fp8 variants; nullptr for bf16 ones, which read w
  // and embed). Layout rowmajor-v1 (quant/fp8_layout.py): the codes have the rows and element
  // offsets of `w`, one byte per weight. Added last so the bf16 variants' fields keep their offsets.
  // NVFP4 (nvfp4-stream, layout nvfp4-rowmajor-v1 of quant/nvfp4_layout.py) reads the same four
  // fields, so the parameter block of every other variant stays as it is: codes = every layer's
  // codes [kNumLayers][kNvLayerCodeBytes] followed by every layer's block scales
  // [kNumLayers][kNvLayerBscaleBytes] (one allocation); row_scales = the tensor scales
  // [kNumLayers][kNvTscaleSlots]; embed_codes / embed_scales = the FP8 LM head, as fp8's.
  const uint8_t* codes;        // [kNumLayers * kLayerElems] layer weights, E4M3 codes
  const float* row_scales;     // [kNumLayers * kLayerRows] fp32, per layer in row order (kScQKV ...)
  const uint8_t* embed_codes;  // [kVocab, kHidden] E4M3 codes; also the (tied) LM head
  const float* embed_scales;   // [kVocab] fp32
};

// The same three functions in each build's namespace (megakernel.cu, compiled plain and X-ray).
// position: the host's; streaming variants with a long kernel use it from kLongKernelFrom on.
// max_coresident_blocks: blocks of this variant that fit co-resident on the whole device
// (occupancy API x SMs).
namespace plain_build {
cudaError_t launch_step(const StepParams& p, int variant, int blocks, int position, cudaStream_t stream);
int max_coresident_blocks(int variant, int device, cudaError_t* err);
cudaError_t kernel_attributes(int variant, cudaFuncAttributes* out);
}  // namespace plain_build
namespace xray_build {
cudaError_t launch_step(const StepParams& p, int variant, int blocks, int position, cudaStream_t stream);
int max_coresident_blocks(int variant, int device, cudaError_t* err);
cudaError_t kernel_attributes(int variant, cudaFuncAttributes* out);
}  // namespace xray_build

}  // namespace monolith
