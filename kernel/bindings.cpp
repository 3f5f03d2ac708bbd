// monolith: Python bindings of the megakernel (pybind11 only: no torch headers, so the
// extension builds in seconds). Python owns every buffer (torch tensors) and passes raw device
// pointers and the current CUDA stream; monolith/megakernel.py validates shapes, dtypes and
// devices before anything reaches here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "megakernel.cuh"

namespace py = pybind11;
using namespace monolith;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
T* ptr(uint64_t v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(v));
}

void launch(int variant, int blocks, bool xray_build, uint64_t w, uint64_t norms, uint64_t embed, uint64_t final_norm,
            uint64_t rope, uint64_t kv, uint64_t scr, uint64_t acc, uint64_t logits, uint64_t sync, uint64_t token_in,
            uint64_t token_out, uint64_t xray, long long timeout_cycles, int stop_layer, int stop_phase,
            int jitter_ns, uint64_t stream, uint64_t codes, uint64_t row_scales, uint64_t embed_codes,
            uint64_t embed_scales, int position) {
  StepParams p{};
  p.w = ptr<const uint16_t>(w);
  p.norms = ptr<const uint16_t>(norms);
  p.embed = ptr<const uint16_t>(embed);
  p.final_norm = ptr<const uint16_t>(final_norm);
  p.rope = ptr<const float>(rope);
  p.kv = ptr<uint16_t>(kv);
  p.scr = ptr<float>(scr);
  p.acc = ptr<long long>(acc);
  p.logits = ptr<float>(logits);
  p.sync = ptr<SyncState>(sync);
  p.token_in = ptr<const int32_t>(token_in);
  p.token_out = ptr<int32_t>(token_out);
  p.xray = ptr<XrayEvent>(xray);
  p.timeout_cycles = timeout_cycles;
  p.stop_layer = stop_layer;
  p.stop_phase = stop_phase;
  p.jitter_ns = jitter_ns;
  p.codes = ptr<const uint8_t>(codes);  // fp8 variants (0 for bf16 ones)
  p.row_scales = ptr<const float>(row_scales);
  p.embed_codes = ptr<const uint8_t>(embed_codes);
  p.embed_scales = ptr<const float>(embed_scales);
  auto s = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream));
  // position: the host's, which picks a streaming variant's long-position kernel (megakernel.cu)
  cudaError_t e = xray_build ? xray_build::launch_step(p, variant, blocks, position, s)
                             : plain_build::launch_step(p, variant, blocks, position, s);
  check(e, "megakernel launch");
}

int max_coresident(int variant, bool xray_build, int device) {
  cudaError_t e = cudaSuccess;
  int n = xray_build ? xray_build::max_coresident_blocks(variant, device, &e)
                     : plain_build::max_coresident_blocks(variant, device, &e);
  check(e, "occupancy query");
  return n;
}

py::dict attributes(int variant, bool xray_build) {
  cudaFuncAttributes a{};
  check(xray_build ? xray_build::kernel_attributes(variant, &a) : plain_build::kernel_attributes(variant, &a),
        "cudaFuncGetAttributes");
  py::dict d;
  d["num_regs"] = a.numRegs;
  d["shared_size_bytes"] = a.sharedSizeBytes;
  d["local_size_bytes"] = a.localSizeBytes;
  d["max_threads_per_block"] = a.maxThreadsPerBlock;
  d["binary_version"] = a.binaryVersion;
  return d;
}

// The kernel's own view of the shapes and layouts; Python packs weights with these numbers and
// refuses to run if they disagree with monolith/config.py.
py::dict constants() {
  py::dict d;
  d["hidden"] = kHidden;
  d["intermediate"] = kIntermediate;
  d["num_layers"] = kNumLayers;
  d["num_q_heads"] = kNumQHeads;
  d["num_kv_heads"] = kNumKVHeads;
  d["head_dim"] = kHeadDim;
  d["vocab"] = kVocab;
  d["context_cap"] = kContextCap;
  d["threads"] = kThreads;
  d["min_blocks"] = kMinBlocks;
  d["min_stream_blocks"] = kMinStreamBlocks;
  d["groups"] = kGroups;  // stream schedule: KV groups (the default grid is a multiple of it)
  d["stream_threads"] = kStreamThreads;
  d["acc_buffers"] = kAccBuffers;
  d["acc_words"] = kAccWords;
  d["fix_shift"] = kFixShift;
  // the weight ring per configuration (kernel/policy.cuh: sm_120 devices and the *-sm120 variants
  // run the sm_120 one) and the per-block shared memory each is asserted against
  d["stages_sm90"] = kStagesSm90;
  d["stages_sm120"] = kStagesSm120;
  d["ring_bytes_sm90"] = kRingBytesSm90;
  d["ring_bytes_sm120"] = kRingBytesSm120;
  d["smem_per_block_sm90"] = kSmemPerBlockSm90;
  d["smem_per_block_sm120"] = kSmemPerBlockSm120;
  d["max_grid"] = kMaxGrid;
  d["layer_elems"] = kLayerElems;
  d["off_qkv"] = kOffQKV;
  d["off_o"] = kOffO;
  d["off_gateup"] = kOffGateUp;
  d["off_down"] = kOffDown;
  d["norm_layer_elems"] = kNormLayerElems;
  d["norm_in_ln"] = kNormInLn;
  d["norm_post_ln"] = kNormPostLn;
  d["norm_q"] = kNormQ;
  d["norm_k"] = kNormK;
  d["sc_qkv"] = kScQKV;  // fp8 layout rowmajor-v1: per-layer scale offsets (quant/fp8_layout.py)
  d["sc_o"] = kScO;
  d["sc_gateup"] = kScGateUp;
  d["sc_down"] = kScDown;
  d["layer_rows"] = kLayerRows;
  d["nv_layer_code_bytes"] = kNvLayerCodeBytes;  // nvfp4 layout nvfp4-rowmajor-v1 (quant/nvfp4_layout.py)
  d["nv_layer_bscale_bytes"] = kNvLayerBscaleBytes;
  d["bs_qkv"] = kBsQKV;
  d["bs_o"] = kBsO;
  d["bs_gateup"] = kBsGateUp;
  d["bs_down"] = kBsDown;
  d["nv_tscale_slots"] = kNvTscaleSlots;
  d["scr_elems"] = kScrElems;
  d["scr_hidden"] = kScrHidden;
  d["scr_qkv"] = kScrQKV;
  d["scr_qrot"] = kScrQRot;
  d["scr_krot"] = kScrKRot;
  d["scr_attn"] = kScrAttn;
  d["scr_act"] = kScrAct;
  d["scr_norm_in"] = kScrNormIn;
  d["scr_norm_post"] = kScrNormPost;
  d["scr_final_norm"] = kScrFinalNorm;
  d["sync_bytes"] = int(sizeof(SyncState));
  d["xray_max_events"] = kXrayMaxEvents;
  d["xray_event_bytes"] = int(sizeof(XrayEvent));
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "monolith megakernel (one launch per Qwen3-0.6B decode step)";
  m.def("launch", &launch, "launch one decode step on a stream");
  m.def("max_coresident", &max_coresident, "blocks that fit co-resident on the device");
  m.def("attributes", &attributes, "compiled kernel attributes (registers, shared memory, local memory)");
  m.def("constants", &constants, "shapes and layouts compiled into the kernel");
}
