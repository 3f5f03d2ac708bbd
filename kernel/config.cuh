// monolith: every Qwen3-0.6B shape and launch constant, in one place.
// monolith/config.py mirrors the model constants; tests/test_kernel_host.py parses this file and
// asserts both agree, and monolith/megakernel.py packs weights with the offsets derived here.
#pragma once
#include <cstdint>

namespace monolith {

// ---- model (Qwen3-0.6B) ------------------------------------------------------------------
constexpr int kHidden = 1024;
constexpr int kIntermediate = 3072;
constexpr int kNumLayers = 28;
constexpr int kNumQHeads = 16;
constexpr int kNumKVHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kVocab = 151936;
constexpr float kRmsEps = 1e-6f;
constexpr int kContextCap = 4096;  // KV-cache capacity in positions (the project asks >= 2048; NOTES.md, Choices)

constexpr int kQDim = kNumQHeads * kHeadDim;    // 2048
constexpr int kKVDim = kNumKVHeads * kHeadDim;  // 1024
constexpr int kQKVRows = kQDim + 2 * kKVDim;    // 4096: q, k, v rows fused into one GEMV
constexpr int kGateUpRows = 2 * kIntermediate;  // 6144: gate/up rows interleaved (2r = gate r, 2r+1 = up r)
constexpr int kHeadsPerKV = kNumQHeads / kNumKVHeads;

// ---- packed bf16 weights: one buffer, layer after layer, in the order blocks stream them ----
// Per layer: [qkv 4096x1024][o 1024x2048][gate/up 6144x1024][down 1024x3072], row-major.
// Each block reads a contiguous range of rows of each matrix, so a block's stream is contiguous.
constexpr int64_t kOffQKV = 0;
constexpr int64_t kOffO = kOffQKV + int64_t(kQKVRows) * kHidden;
constexpr int64_t kOffGateUp = kOffO + int64_t(kHidden) * kQDim;
constexpr int64_t kOffDown = kOffGateUp + int64_t(kGateUpRows) * kHidden;
constexpr int64_t kLayerElems = kOffDown + int64_t(kHidden) * kIntermediate;
constexpr int64_t kLayerBytes = kLayerElems * 2;

// Small per-layer vectors (bf16), packed separately: [input_ln 1024][post_ln 1024][q_norm 128][k_norm 128]
constexpr int kNormInLn = 0;
constexpr int kNormPostLn = kNormInLn + kHidden;
constexpr int kNormQ = kNormPostLn + kHidden;
constexpr int kNormK = kNormQ + kHeadDim;
constexpr int kNormLayerElems = kNormK + kHeadDim;  // 2304

// ---- packed fp8 weights (scheme fp8-e4m3-rowscale, layout rowmajor-v1: quant/fp8_layout.py) ----
// Codes: one byte per weight, the same rows in the same order as the bf16 buffer above, so every
// element offset (kOffQKV .. kLayerElems) is also the codes' byte offset. Scales: one fp32 per
// output row, per layer in the same row order (the scale of segment row r at kSc<segment> + r).
constexpr int kScQKV = 0;
constexpr int kScO = kScQKV + kQKVRows;
constexpr int kScGateUp = kScO + kHidden;
constexpr int kScDown = kScGateUp + kGateUpRows;
constexpr int kLayerRows = kScDown + kHidden;  // 12288 scales per layer
static_assert(kLayerRows == kQKVRows + kHidden + kGateUpRows + kHidden, "one scale per row of each segment");
static_assert((kScO * 4) % 16 == 0 && (kScGateUp * 4) % 16 == 0 && (kScDown * 4) % 16 == 0 && (kLayerRows * 4) % 16 == 0,
              "every scale segment starts 16-byte aligned");

// ---- packed nvfp4 weights (scheme nvfp4-e2m1-b16-e4m3, layout nvfp4-rowmajor-v1: quant/nvfp4_layout.py) ----
// Codes: two E2M1 per byte (element 2j in the low nibble of byte j), the rows and row order of the
// bf16 buffer, so every element offset above (kOffQKV .. kLayerElems), halved, is the codes' byte
// offset. Block scales: one E4M3 byte per 16 weights of a row, the same rows in the same order in a
// buffer of their own (K / 16 bytes per row; segment offsets below). Tensor scales: one fp32 per
// matrix, kNvTscaleSlots per layer in the order q, k, v, o, gate, up, down, pad.
// tests/test_kernel_nvfp4_host.py checks every number here against quant/nvfp4_layout.py.
constexpr int kNvBlock = 16;                                       // weights per block scale
constexpr int64_t kNvLayerCodeBytes = kLayerElems / 2;             // 7,864,320
constexpr int kBsQKV = 0;
constexpr int kBsO = kBsQKV + kQKVRows * (kHidden / kNvBlock);
constexpr int kBsGateUp = kBsO + kHidden * (kQDim / kNvBlock);
constexpr int kBsDown = kBsGateUp + kGateUpRows * (kHidden / kNvBlock);
constexpr int kNvLayerBscaleBytes = kBsDown + kHidden * (kIntermediate / kNvBlock);  // 983,040
constexpr int kNvTscaleSlots = 8;
constexpr int kTsQ = 0;
constexpr int kTsK = 1;
constexpr int kTsV = 2;
constexpr int kTsO = 3;
constexpr int kTsGate = 4;
constexpr int kTsUp = 5;
constexpr int kTsDown = 6;
static_assert(kLayerElems % 2 == 0 && kNvLayerCodeBytes % 16 == 0 && kNvLayerBscaleBytes % 16 == 0,
              "every layer's codes and block scales start 16-byte aligned");
static_assert(kBsO % 16 == 0 && kBsGateUp % 16 == 0 && kBsDown % 16 == 0 && (kNvTscaleSlots * 4) % 16 == 0,
              "every block-scale segment and every layer's tensor scales start 16-byte aligned");

// ---- launch ------------------------------------------------------------------------------
constexpr int kThreads = 512;  // 16 warps: enough loads in flight per SM with one block per SM
constexpr int kWarps = kThreads / 32;
constexpr int kAttnBlocks = kNumQHeads;  // one block per q head does attention
constexpr int kMinBlocks = 2 * kAttnBlocks;  // O rows go to the non-attention blocks: keep >= 16 of them
constexpr int kChunk = 1024;          // a warp's unit of a GEMV row: 1024 bf16 = 32 lanes x 4 x 16 B
constexpr int kLoadsPerChunk = kChunk / (32 * 8);  // 4 independent 16-byte loads per lane per unit
constexpr int kMaxChunkedRows = 64;   // rows per block in phases whose rows span >1 chunk (O, down)

static_assert(kHidden / (kMinBlocks - kAttnBlocks) <= kMaxChunkedRows, "O/down rows per block fit the partial-sum buffer");
static_assert(kHidden % kChunk == 0 && kQDim % kChunk == 0 && kIntermediate % kChunk == 0,
              "every GEMV reduction length must be a whole number of 1024-wide chunks");
static_assert(kLoadsPerChunk * 32 * 8 == kChunk, "a chunk is exactly 4 x 16 B per lane");
static_assert(kHeadDim == 128, "attention maps head_dim onto 32 lanes x 4");
static_assert(kNumQHeads % kNumKVHeads == 0 && kHeadsPerKV == 2, "flag sync pairs two q heads per KV head");
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
static_assert((kLayerBytes % 16) == 0 && (kOffO * 2) % 16 == 0 && (kOffGateUp * 2) % 16 == 0 &&
                  (kOffDown * 2) % 16 == 0,
              "every matrix starts 16-byte aligned so rows can be read with 16-byte loads");

// ---- fp32 scratch in device memory (activations shared between blocks) -------------------
constexpr int kScrHidden = 0;                             // residual stream [1024]
constexpr int kScrQKV = kScrHidden + kHidden;             // raw q|k|v projections [4096]
constexpr int kScrQRot = kScrQKV + kQKVRows;              // q after QK-norm + RoPE [2048] (diff/debug)
constexpr int kScrAttn = kScrQRot + kQDim;                // attention output [2048]
constexpr int kScrAct = kScrAttn + kQDim;                 // silu(gate) * up [3072]
constexpr int kScrNormIn = kScrAct + kIntermediate;       // block 0's normed input [1024] (diff/debug)
constexpr int kScrNormPost = kScrNormIn + kHidden;        // block 0's post-attention norm [1024]
constexpr int kScrFinalNorm = kScrNormPost + kHidden;     // block 0's final norm [1024]
constexpr int kScrKRot = kScrFinalNorm + kHidden;         // k after QK-norm + RoPE [1024], fp32 (diff)
constexpr int kScrBlockMax = kScrKRot + kKVDim;           // per-block argmax value [kMaxGrid]
constexpr int kMaxGrid = 1024;
constexpr int kScrBlockIdx = kScrBlockMax + kMaxGrid;     // per-block argmax index (as int bits)
constexpr int kScrElems = kScrBlockIdx + kMaxGrid;

// ---- shared memory budget ----------------------------------------------------------------
// x vector (largest GEMV input, 3072 fp32) + chunk partials + attention scores (context cap
// fp32) + per-warp attention accumulators + a small reduction area.
constexpr int kSmemX = kIntermediate;
constexpr int kSmemPartials = kMaxChunkedRows * (kIntermediate / kChunk);
constexpr int kSmemScores = kContextCap;
constexpr int kSmemAttnAcc = kWarps * kHeadDim;
constexpr int kSmemRed = 64;
constexpr int kSmemBytes = (kSmemX + kSmemPartials + kSmemScores + kSmemAttnAcc + kSmemRed + 2 * kHeadDim) * 4;
static_assert(kSmemBytes <= 48 * 1024, "static shared memory must stay under 48 KB (no opt-in needed)");

// ---- the streaming schedule (bf16-stream) -------------------------------------------------
// Packed weights: the same per-layer offsets as above (kOffQKV ... kLayerElems), but the rows
// are ordered for the blocks that stream them (monolith/megakernel.py, pack_layer_weights_stream):
//   qkv   [8 KV groups][512 rows][1024]: group g = q head 2g, q head 2g+1, k head g, v head g
//   o     [8 KV groups][1024 rows][256]: the O columns that multiply group g's two heads
//   gate/up and down as above (2j = gate j, 2j+1 = up j; down row-major)
constexpr int kStreamConsumerWarps = 16;
constexpr int kStreamConsumerThreads = kStreamConsumerWarps * 32;
constexpr int kStreamThreads = kStreamConsumerThreads + 32;  // + one producer warp (lane 0 issues copies)
constexpr int kSlotBytes = 16 * 1024;   // one bulk copy; 8 rows of K=1024 bf16
// The ring's depth is a configuration (Policy::kStages picks one per kernel): sm_90 keeps 12 slots
// (192 KB in flight per SM); sm_120's per-block limit of 99 KB holds 4 beside the block's ~33 KB of
// StreamSmem (schedule_stream.cuh asserts both budgets by name). A round of slots must fit in the
// ring (Policy's kRoundSlots note), so the shallow ring also bounds the rounds.
// An experiment build may give the sm_90 ring another depth: -DMONOLITH_RING_DEPTH_SM90=N through
// MONOLITH_NVCC_DEFINES (scripts/ring_sweep.py). monolith/kernel_spec.py refuses a depth outside
// kStagesSm90Min .. kStagesSm90Max before nvcc runs, the assert below where it does. What every
// depth must hold is asserted per Policy (stream_step: ring_fits, the block's shared memory); the
// rules of the shipped depth alone (a round leaves the producer half the ring: stream_gemv.cuh;
// NVFP4's per-stage scales do not fit beside the ring: schedule_stream.cuh) at kStagesSm90Shipped.
// The host sizes the ring from the build: megakernel.cu launches with Policy::kRingBytes, and
// bindings.cpp's constants() is compiled with the same defines (monolith/megakernel.py
// load_extension). kernel_spec.config_constants() reads the default build.
constexpr int kStagesSm90Shipped = 12;
#ifndef MONOLITH_RING_DEPTH_SM90
#define MONOLITH_RING_DEPTH_SM90 kStagesSm90Shipped
#endif
constexpr int kStagesSm90 = MONOLITH_RING_DEPTH_SM90;
constexpr int kStagesSm90Min = 6;   // MLP-1's sm_90 round (3 bf16 units, 6 slots: stream_gemv.cuh) held whole
constexpr int kStagesSm90Max = 12;  // the deepest ring of 16 KB slots beside ~32 KB of block state in 227 KB
static_assert(kStagesSm90 >= kStagesSm90Min && kStagesSm90 <= kStagesSm90Max,
              "MONOLITH_RING_DEPTH_SM90: the sm_90 ring takes kStagesSm90Min (6) to kStagesSm90Max (12) slots");
constexpr int kStagesSm120 = 4;
constexpr int kRingBytesSm90 = kStagesSm90 * kSlotBytes;
constexpr int kRingBytesSm120 = kStagesSm120 * kSlotBytes;
constexpr int kSmemPerBlockSm90 = 227 * 1024;   // the opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin)
constexpr int kSmemPerBlockSm120 = 99 * 1024;
constexpr int kGroups = kNumKVHeads;    // a group computes one KV head's q/k/v rows, attention, O columns
constexpr int kGroupRows = (kHeadsPerKV + 2) * kHeadDim;  // 512 qkv rows per group
constexpr int kGroupCols = kHeadsPerKV * kHeadDim;        // 256 O columns per group
constexpr int kSplitPositions = 64;     // positions per attention split (one 16 KB K chunk + one V chunk)
constexpr int kMaxSplits = kContextCap / kSplitPositions;
constexpr int kMergeBatch = 4;          // attention partials a merging thread gathers per L2 round trip
// The first position whose KV group may merge more than one batch of partials (pos + 1 entries in
// 64-position splits): from here on the host launches a streaming variant's long kernel
// (megakernel.cu decode_step_long); below it the two kernels compute the same bits.
constexpr int kLongKernelFrom = kMergeBatch * kSplitPositions;
constexpr int kMlpUnitCols = 8;         // intermediate columns per MLP unit: 16 gate/up rows (2 slots)
constexpr int kMlpUnits = kIntermediate / kMlpUnitCols;  // 384: 2.9 per block at 132 blocks
constexpr int kMinStreamBlocks = 2 * kGroups;
// Data that carries its own readiness (the streaming schedule has no grid barrier and no release
// fence: under a full ring a release costs ~1.2 us more than idle, NOTES.md M4). Two kinds of
// 64-bit words in one int64 buffer (StepParams::acc, zeroed by the host at reset):
//  - counted words (the residual after attention + O, reduced over the 8 KV groups): a
//    contribution adds (round(x * 2^kFixShift) << kCountBits) + 1 with an int64 atomic, so the
//    order of the adds cannot change a bit, and a reader knows the sum is complete when the count
//    field, relative to the word before this stage, reaches the number of contributors;
//  - tagged words {fp32 value, uint32 tag} written once with one 64-bit store, the tag naming the
//    launch and layer (tag = steps * 32 + layer + 1, never 0): q/k/v, attention partials, the
//    MLP activations and the residual after the MLP. A reader polls until the tag is its own.
constexpr int kFixShift = 24;           // resolution 6e-8; value field 52 bits: range +-1.3e8
constexpr int kCountBits = 12;          // contributors per stage: kGroups + 1
constexpr int kAccBuffers = 2;          // O stage of layer L lives in buffer L % 2, on top of layer L-2's
constexpr int kAccO = 0;                                           // [2][kHidden] counted words
constexpr int kAccSnap = kAccO + kAccBuffers * kHidden;            // [2][kHidden] end-of-launch snapshot
constexpr int kTagQKV = kAccSnap + kAccBuffers * kHidden;          // [kQKVRows] standard q|k|v order
constexpr int kPartStride = 2 + kHeadDim;                          // (m, l, o[128]) per split and head
constexpr int kTagAttnPart = kTagQKV + kQKVRows;                   // [group][split][head][kPartStride]
constexpr int kTagAct = kTagAttnPart + kGroups * kMaxSplits * kHeadsPerKV * kPartStride;  // [kIntermediate]
constexpr int kTagResid = kTagAct + kIntermediate;                 // [kHidden] residual after the MLP
constexpr int kAccWords = kTagResid + kHidden;
constexpr int kLayerTagBits = 5;        // tag = steps << 5 | (layer + 1)
static_assert(kNumLayers + 1 <= (1 << kLayerTagBits), "layer + 1 fits the tag's layer field");
static_assert(kGroups + 1 < (1 << kCountBits), "a stage's contributor count fits the count field");
static_assert(kSlotBytes == 8 * kHidden * 2, "a K=1024 slot holds 8 whole rows");
static_assert(kSlotBytes == 32 * kGroupCols * 2, "an O slot holds 32 whole rows of a group's columns");
static_assert(kSlotBytes == kSplitPositions * kHeadDim * 2, "a K or V slot holds one split's positions");
static_assert(2 * kMlpUnitCols * kHidden * 2 == 2 * kSlotBytes, "an MLP unit is 2 gate/up slots (16 rows)");
static_assert(kIntermediate % kHidden == 0, "down rows are cut into whole 1024-wide segments");
static_assert(kContextCap % kSplitPositions == 0, "splits tile the context");
static_assert(kStreamConsumerThreads * 2 == kHidden, "each consumer thread holds 2 residual elements");
static_assert(kIntermediate % kStreamConsumerThreads == 0, "each consumer thread gathers whole activations");
static_assert(kRingBytesSm90 + 32 * 1024 <= kSmemPerBlockSm90, "ring + static shared memory must fit an sm_90 block");
static_assert(kStagesSm90Max * kSlotBytes + 32 * 1024 <= kSmemPerBlockSm90 &&
                  (kStagesSm90Max + 1) * kSlotBytes + 32 * 1024 > kSmemPerBlockSm90,
              "kStagesSm90Max is the deepest sm_90 ring beside 32 KB of block state");
static_assert(kStagesSm90Shipped >= kStagesSm90Min && kStagesSm90Shipped <= kStagesSm90Max, "the shipped depth builds");
static_assert(kRingBytesSm120 + 32 * 1024 <= kSmemPerBlockSm120, "ring + static shared memory must fit an sm_120 block");

// ---- the phases a test can stop after (phase diff) ----------------------------------------
enum StopPhase : int { kStopQKV = 0, kStopAttn = 1, kStopO = 2, kStopGateUp = 3, kStopDown = 4, kStopNever = 99,
                       // fault injection for the hang test: block 0 leaves at once, so every other
                       // block must time out at the first barrier and report it (never hang)
                       kFaultBlock0Exits = 100,
                       // bf16-stream fault injection: block 0 alone leaves after (stop_layer,
                       // stop_phase - kFaultBlock0After); the wait that needs it must time out
                       kFaultBlock0After = 110 };

}  // namespace monolith
