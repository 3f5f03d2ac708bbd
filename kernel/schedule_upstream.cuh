// monolith: the upstream schedule (`bf16-upstream`, `bf16-upstream-l2pre`, `fp8-upstream`), one
// part of kernel/megakernel.cu: included inside its build namespace after the shared helpers
// (step_inputs_ok, the argmax, prefetch_next_phases, the X-ray macros); not a stand-alone header.
//
// upstream_step, per layer (the schedule in megakernel.cu's header comment):
//   qkv                                              (the layer loop's body)
//   -- grid barrier 1 --     UpstreamBlock::attn: head_attention on blocks 0..15
//   -- flag sync 2 --        O projection + residual (the layer loop's body)
//   -- grid barrier 2 --     gate/up + SiLU          (the layer loop's body)
//   -- grid barrier 3 --     down + residual         (the layer loop's body)
//   -- grid barrier 4 --
// then UpstreamBlock::lm_head_argmax. Each phase's first weight loads are issued before the
// barrier or flag that guards its input (with Cfg::kPreloadL2: an L2 bulk prefetch there, and the
// register loads after the wait). A phase returns false where the step ends: a failed wait (every
// thread of the block returns together) or the stop point of a diagnostic step.
//
// Everything here is inlined into one kernel function whose machine code kernel/sass.lock holds.
// A member function is optimized on its own before it is inlined; to compile as the one body
// does, each member first copies the members it reads into locals (a lambda inside then
// captures locals, not `this`, and no wait or store in between can be taken to change them).
// qkv, O, gate/up and down stay in the loop body: as members they compile to other machine code
// (address arithmetic hoisted out of the layer loop in another order; O, gate/up and down also
// take more registers, and bf16-upstream spills on sm_90a; qkv moves only sm_120a's code).
#pragma once

namespace upstream {

// One block's shared memory in the upstream schedule (only the upstream kernels reference it).
__shared__ __align__(16) float s_x[kSmemX];
__shared__ __align__(16) float s_part[kSmemPartials];
__shared__ __align__(16) float s_scores[kSmemScores];
__shared__ __align__(16) float s_acc[kSmemAttnAcc];
__shared__ float s_red[kSmemRed];
__shared__ float s_q[kHeadDim], s_tmp[kHeadDim];
__shared__ int s_flag;
__shared__ int s_bestidx[kWarps];

// What the members below share with upstream_step: the parameters, this block's identity, the
// barrier count and the X-ray recorder, as references to upstream_step's locals.
template <class Cfg>
struct UpstreamBlock {
  // The variant's weight format: bf16 (p.w, p.embed) or E4M3 codes with row scales (p.codes,
  // p.row_scales, p.embed_codes, p.embed_scales); every GEMV below is written once for both.
  using Fmt = typename Cfg::Weights;
  using Elem = typename Fmt::Elem;
  static constexpr int kRq = Cfg::kRowsPerIterQKV, kRg = Cfg::kRowsPerIterGateUp, kUo = Cfg::kUnitsPerIterO,
                       kUd = Cfg::kUnitsPerIterDown;

  const StepParams& p;
  const int &tid, &warp, &lane, &G, &b;
  SyncState* const& S;
  float* const& scr;
  float* const& hidden;
  const int& pos;
  const Elem* const& w_all;
  const Elem* const& embed;
  const float* const& rope_row;
  uint32_t& gen;  // grid barriers passed in this launch
  const long long& tmo;
#if defined(MONOLITH_XRAY) && defined(__CUDACC__)
  XrayRecorderFor<false>& xr;  // upstream_step's (XRAY_END names it)
#endif

  // Segment (byte/element offset `off`, first scale `sc`) of layer L's packed weights.
  __device__ __forceinline__ Mat<Fmt> seg(int L, int64_t off, int sc) const {
    return {w_all + int64_t(L) * kLayerElems + off, Fmt::kRowScale ? p.row_scales + int64_t(L) * kLayerRows + sc : nullptr};
  }
  // A grid barrier in two intervals for the X-ray: the arrival (its release fence) and the wait.
  __device__ __forceinline__ bool barrier(int layer, uint32_t which) {
    grid_arrive(S);
    XRAY_END(arrive, layer);
    return grid_wait(S, ++gen, tmo, uint32_t(layer) * 16u + which, &s_flag);
  }

  // ---- attention of head h = b (the blocks b < kAttnBlocks) -------------------------------
  // QK-norm + RoPE, the K/V append (the leader of the head pair, then flag sync 1), scores of the
  // cached positions, softmax, V; the result to scr and attn_done (flag sync 2). False when its
  // flag wait failed (every thread of the block returns together).
  __device__ __forceinline__ bool head_attention(int L, const uint16_t* N) {
    const StepParams& p = this->p;
    const int tid = this->tid, warp = this->warp, lane = this->lane, b = this->b, pos = this->pos;
    SyncState* const S = this->S;
    float* const scr = this->scr;
    const float* const rope_row = this->rope_row;
    const long long tmo = this->tmo;
    const int h = b, kvh = h / kHeadsPerKV;
    const bool leader = (h % kHeadsPerKV) == 0;
    uint16_t* kcache = p.kv + ((int64_t(L) * 2 + 0) * kNumKVHeads + kvh) * int64_t(kContextCap) * kHeadDim;
    uint16_t* vcache = p.kv + ((int64_t(L) * 2 + 1) * kNumKVHeads + kvh) * int64_t(kContextCap) * kHeadDim;
    float* s_k = s_acc;                // this position's K (bf16-rounded), free until the V pass
    float* s_ktmp = s_acc + kHeadDim;  // K before RoPE
    // q, k and v of this head in one round trip through L2, both QK-norms in one reduction.
    float qv = 0.f, kv = 0.f, vv = 0.f;
    if (tid < kHeadDim) {
      qv = ldcg_f32(scr + kScrQKV + h * kHeadDim + tid);
      kv = ldcg_f32(scr + kScrQKV + kQDim + kvh * kHeadDim + tid);
      vv = ldcg_f32(scr + kScrQKV + kQDim + kKVDim + kvh * kHeadDim + tid);
    }
    const float2 ss = block_sum2(qv * qv, kv * kv, s_red);
    if (tid < kHeadDim) {
      s_tmp[tid] = qv * rsqrtf(ss.x / float(kHeadDim) + kRmsEps) * __uint_as_float(uint32_t(N[kNormQ + tid]) << 16);
      s_ktmp[tid] = kv * rsqrtf(ss.y / float(kHeadDim) + kRmsEps) * __uint_as_float(uint32_t(N[kNormK + tid]) << 16);
    }
    __syncthreads();
    if (tid < kHeadDim) {
      // RoPE, rotate-half pairing (i, i + 64)
      const int i = tid & 63;
      const float c = rope_row[i], sn = rope_row[64 + i];
      const bool lo = tid < 64;
      const float q = lo ? s_tmp[tid] * c - s_tmp[tid + 64] * sn : s_tmp[tid] * c + s_tmp[tid - 64] * sn;
      s_q[tid] = q;
      scr[kScrQRot + h * kHeadDim + tid] = q;
      if (leader) {
        // Append this position's K and V to the cache; the score of this position uses the
        // same bf16-rounded K in both heads of the pair.
        const float k = lo ? s_ktmp[tid] * c - s_ktmp[tid + 64] * sn : s_ktmp[tid] * c + s_ktmp[tid - 64] * sn;
        const __nv_bfloat16 kb = __float2bfloat16_rn(k);
        kcache[int64_t(pos) * kHeadDim + tid] = __bfloat16_as_ushort(kb);
        vcache[int64_t(pos) * kHeadDim + tid] = __bfloat16_as_ushort(__float2bfloat16_rn(vv));
        scr[kScrKRot + kvh * kHeadDim + tid] = k;
        s_k[tid] = __bfloat162float(kb);
      }
    }
    __syncthreads();
    if (leader && tid == 0) {  // flag sync 1: K/V of this position are in the cache
      st_release(&S->kv_flag[kvh], uint32_t(L + 1));
    }
    // Scores of the cached positions 0..pos-1 (prefetched into L2 at the start of the layer):
    // one thread per position, 16 x 16-byte loads of its K row. They do not need this
    // position's K, so the second head of the pair does them before waiting on the flag.
    const float scale = rsqrtf(float(kHeadDim));
    float mx = -INFINITY;
    for (int t = tid; t < pos; t += kThreads) {
      const uint4* krow = reinterpret_cast<const uint4*>(kcache + int64_t(t) * kHeadDim);
      uint4 kw[kHeadDim / 8];
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) kw[j] = __ldcg(krow + j);
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        const float4* q4 = reinterpret_cast<const float4*>(s_q + j * 8);
        acc = dot8_bf16(kw[j], q4[0], q4[1], acc);
      }
      acc *= scale;
      s_scores[t] = acc;
      mx = fmaxf(mx, acc);
    }
    if (!leader) {
      XRAY_END(attn, L);
      // tour:begin flagwait
      if (!block_wait_geq(S, &S->kv_flag[kvh], uint32_t(L + 1), tmo, kErrFlagKVTimeout, L * 16 + 2, &s_flag))
        return false;
      // tour:end flagwait
      XRAY_END(flag_kv, L);
      if (tid < kHeadDim) s_k[tid] = __uint_as_float(uint32_t(__ldcg(kcache + int64_t(pos) * kHeadDim + tid)) << 16);
      __syncthreads();
    }
    if (warp == 0) {  // score of this position
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < kHeadDim / 32; ++i) acc = fmaf(s_q[lane + 32 * i], s_k[lane + 32 * i], acc);
      acc = warp_sum(acc) * scale;
      if (lane == 0) {
        s_scores[pos] = acc;
        mx = fmaxf(mx, acc);
      }
    }
    mx = warp_max(mx);
    __syncthreads();
    if (lane == 0) s_red[warp] = mx;
    __syncthreads();
    mx = s_red[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_red[w]);
    float sum = 0.f;
    for (int t = tid; t <= pos; t += kThreads) {
      const float e = __expf(s_scores[t] - mx);
      s_scores[t] = e;
      sum += e;
    }
    const float denom = block_sum(sum, s_red + kWarps);
    // V: warp w takes positions w, w + 16, ...; lane covers dims 4*lane .. 4*lane + 3.
    // V: each half-warp reads one V row (16 lanes x 16 B), so a warp covers 2 positions per
    // load and kVUnroll loads are in flight: one memory round trip per 2*16*kVUnroll positions.
    constexpr int kVUnroll = Cfg::kVUnroll;
    const int half = lane >> 4, l16 = lane & 15;
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int t0 = 2 * warp + half; t0 <= pos; t0 += 2 * kWarps * kVUnroll) {
      uint4 vv[kVUnroll];
      float pt[kVUnroll];
#pragma unroll
      for (int u = 0; u < kVUnroll; ++u) {
        const int t = t0 + u * 2 * kWarps;
        const bool in = t <= pos;
        vv[u] = in ? __ldcg(reinterpret_cast<const uint4*>(vcache + int64_t(t) * kHeadDim) + l16) : make_uint4(0, 0, 0, 0);
        pt[u] = in ? s_scores[t] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kVUnroll; ++u) {
        const uint32_t w4[4] = {vv[u].x, vv[u].y, vv[u].z, vv[u].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          o[2 * i] = fmaf(pt[u], __uint_as_float(w4[i] << 16), o[2 * i]);
          o[2 * i + 1] = fmaf(pt[u], __uint_as_float(w4[i] & 0xffff0000u), o[2 * i + 1]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] += __shfl_xor_sync(0xffffffffu, o[i], 16);  // fixed order: deterministic
    __syncthreads();  // s_acc held K in the leader until here
    if (half == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s_acc[warp * kHeadDim + l16 * 8 + i] = o[i];
    }
    __syncthreads();
    if (tid < kHeadDim) {
      float a = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) a += s_acc[w * kHeadDim + tid];
      scr[kScrAttn + h * kHeadDim + tid] = a / denom;
    }
    __syncthreads();
    if (tid == 0) {
      red_release_add(&S->attn_done, 1u);
    }
    XRAY_END(attn, L);
    return true;
  }

  // ---- attn: grid barrier 1, then the 16 heads on blocks 0..15; the other blocks go on to O
  // (whose rows they hold), or with kL2PrefetchMode 1/2 first ask L2 for the next phases' weights.
  __device__ __forceinline__ bool attn(int L, const Elem* W, const uint16_t* N) {
    const StepParams& p = this->p;
    const int warp = this->warp, G = this->G, b = this->b;
    if (!barrier(L, 1)) return false;
    XRAY_END(bar_qkv, L);
    if (p.stop_layer == L && p.stop_phase == kStopQKV) return false;
    if (b < kAttnBlocks) {
      if (!head_attention(L, N)) return false;
    } else {
      // modes 1 and 2: upstream's productive wait, while 16 blocks do attention (23 / 31.5 MB)
      if constexpr (Cfg::kL2PrefetchMode == 1 || Cfg::kL2PrefetchMode == 2) {
        if (warp == 0) prefetch_next_phases(W, L, Cfg::kL2PrefetchMode == 2, b, G);
      }
      XRAY_END(prefetch, L);
    }
    return true;
  }

  // ---- final norm + LM head + argmax (every block: its rows; the last block to finish reduces) --
  __device__ __forceinline__ void lm_head_argmax() {
    const StepParams& p = this->p;
    const int tid = this->tid, warp = this->warp, lane = this->lane, G = this->G, b = this->b;
    const int pos = this->pos;
    float* const scr = this->scr;
    float* const hidden = this->hidden;
    const Elem* const embed = this->embed;
    constexpr int kRh = Cfg::kRowsPerIterHead;
    const int v0 = int(part_begin(kVocab, G, b)), v1 = int(part_begin(kVocab, G, b + 1));
    // Bytes of LM-head rows in flight per block per iteration: the L2 prefetch distance
    // (kHeadPrefetchDistance iterations ahead, grid-wide) was sized for bf16's 128 KB (VariantCfg).
    static_assert(kWarps * kRh * kChunk * sizeof(Elem) == 128 * 1024,
                  "an LM-head iteration streams 128 KB per block whatever the weight format");
    static_assert(kRh * kLoadsPerChunkOf<Fmt> <= 16, "at most 16 loads (64 registers) of LM-head rows per lane");
    const Mat<Fmt> head{embed, p.embed_scales};
    if constexpr (Fmt::kRowScale) {
      // The block's 1,151 LM-head scales (4.6 KB) into L2 at once: the codes of later iterations
      // come from the L2 prefetch, and their scale loads must not be the ones that go to DRAM.
      if (tid == 0) prefetch_l2_span(p.embed_scales + v0, int64_t(v1 - v0) * 4);
    }
    RowRegs<Fmt, kRh> pre_head;  // first LM-head rows in flight while the final norm runs
    preload_k1024<Fmt, kRh>(head, v0 + warp * kRh, v1, pre_head);
    rmsnorm_to_smem<false>(hidden, p.final_norm, s_x, s_red);
    if (b == 0)
      for (int i = tid; i < kHidden; i += kThreads) scr[kScrFinalNorm + i] = s_x[i];
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    {
      constexpr int kR = kRh;
      // Rows are visited in increasing order per warp and only a strictly larger logit replaces
      // the best: ties keep the lowest index, as torch.argmax does.
      gemv_k1024<Fmt, kR, Cfg::kHeadPrefetchDistance>(head, v0, v1, s_x, pre_head,
                     [&](int r, const float* acc, int end) {
  #pragma unroll
                       for (int i = 0; i < kR; ++i) {
                         if (r + i < end) {
                           p.logits[r + i] = acc[i];
                           if (acc[i] > best) {
                             best = acc[i];
                             best_i = r + i;
                           }
                         }
                       }
                     });
    }
    __syncthreads();
    if (lane == 0) {
      s_red[warp] = best;
      s_bestidx[warp] = best_i;
    }
    __syncthreads();
    if (tid == 0) {
      float bv = s_red[0];
      int bi = s_bestidx[0];
      for (int w = 1; w < kWarps; ++w) {
        if (s_red[w] > bv || (s_red[w] == bv && s_bestidx[w] < bi)) {
          bv = s_red[w];
          bi = s_bestidx[w];
        }
      }
      s_flag = publish_block_argmax(p, bv, bi) ? 1 : 0;
    }
    __syncthreads();
    XRAY_END(lmhead, kNumLayers);
    if (s_flag == 0) return;
    if (warp == 0) finish_argmax(p, pos);
    XRAY_END(argmax, kNumLayers);
  }
};

}  // namespace upstream

// ---- the bf16-upstream schedule -----------------------------------------------------------
template <class Cfg>
__device__ __forceinline__ void upstream_step(const StepParams& p) {
  using namespace upstream;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int G = gridDim.x, b = blockIdx.x;
  SyncState* S = p.sync;
  float* scr = p.scr;
  float* hidden = scr + kScrHidden;
  XRAY_INIT(p.xray, false);  // bf16 / fp8 layers only
  XRAY_BEGIN();

  int pos, token;
  if (!step_inputs_ok(p, &pos, &token)) return;
  if (p.stop_phase == kFaultBlock0Exits && b == 0) return;
  using U = UpstreamBlock<Cfg>;
  using Fmt = typename U::Fmt;
  using Elem = typename U::Elem;
  const Elem* const w_all = weights_of<Fmt>(p);
  const Elem* const embed = embed_of<Fmt>(p);
  const Elem* emb_row = embed + int64_t(token) * kHidden;
  const float emb_scale = Fmt::kRowScale ? __ldg(p.embed_scales + token) : 0.f;
  const float* rope_row = p.rope + int64_t(pos) * kHeadDim;
  uint32_t gen = 0;  // grid barriers passed in this launch
  const long long tmo = p.timeout_cycles;

  const int q0 = int(part_begin(kQKVRows, G, b)), q1 = int(part_begin(kQKVRows, G, b + 1));
  const int h0 = int(part_begin(kHidden, G, b)), h1 = int(part_begin(kHidden, G, b + 1));
  // O-projection rows go to the blocks that do not do attention: they are idle during it and
  // can have their O weights in flight early; the attention blocks go straight to barrier 2.
  const int ob = b - kAttnBlocks, og = G - kAttnBlocks;
  const int o0 = ob < 0 ? 0 : int(part_begin(kHidden, og, ob)), o1 = ob < 0 ? 0 : int(part_begin(kHidden, og, ob + 1));
  const int g0 = 2 * int(part_begin(kIntermediate, G, b)), g1 = 2 * int(part_begin(kIntermediate, G, b + 1));
  U u{p, tid, warp, lane, G, b, S, scr, hidden, pos, w_all, embed, rope_row, gen, tmo,
#if defined(MONOLITH_XRAY) && defined(__CUDACC__)
      xr,
#endif
  };

  RowRegs<Fmt, U::kRq> pre_qkv;  // next qkv phase's first loads, issued before the barrier that precedes it
  if constexpr (!Cfg::kPreloadL2) preload_k1024<Fmt, U::kRq>(u.seg(0, kOffQKV, kScQKV), q0 + warp * U::kRq, q1, pre_qkv);

  for (int L = 0; L < kNumLayers; ++L) {
    const Elem* W = w_all + int64_t(L) * kLayerElems;
    const uint16_t* N = p.norms + int64_t(L) * kNormLayerElems;
    if constexpr (Cfg::kPreloadL2) preload_k1024<Fmt, U::kRq>(u.seg(L, kOffQKV, kScQKV), q0 + warp * U::kRq, q1, pre_qkv);

    // ---------------- qkv ----------------
    // The attention of a layer reads K/V of positions 0..pos-1, written by earlier steps and
    // long evicted from L2. Ask for the NEXT layer's history now, a whole layer ahead: issued
    // later it would queue behind the 31.5 MB weight prefetch and stall the attention chain.
    if (b < kAttnBlocks && b % kHeadsPerKV == 0 && tid == 0 && pos > 0) {
      for (int l = (L == 0 ? 0 : L + 1); l <= L + 1 && l < kNumLayers; ++l) prefetch_kv_history(p.kv, l, b / kHeadsPerKV, pos);
    }
    if constexpr (Cfg::kL2PrefetchMode == 3) {
      // mode 3: requested before this layer's qkv GEMV, so the burst drains while qkv runs
      if (b >= kAttnBlocks && warp == 0) prefetch_next_phases(W, L, true, b, G);
    }
    if (L == 0) {
      // the token's embedding row, dequantized in the variant's format (fp8: code * row scale,
      // bit for bit the packer's dequantized value)
      rmsnorm_to_smem_by([&](int i) { return Fmt::value(emb_row, i, emb_scale); }, N + kNormInLn, s_x, s_red);
      // Seed the residual stream with the embedding row (this block's slice; read after barrier 1).
      for (int i = h0 + tid; i < h1; i += kThreads) hidden[i] = Fmt::value(emb_row, i, emb_scale);
    } else {
      rmsnorm_to_smem<false>(hidden, N + kNormInLn, s_x, s_red);
    }
    if (b == 0)
      for (int i = tid; i < kHidden; i += kThreads) scr[kScrNormIn + i] = s_x[i];
    {
      float* qkv = scr + kScrQKV;
      gemv_k1024<Fmt, U::kRq, 0>(u.seg(L, kOffQKV, kScQKV), q0, q1, s_x, pre_qkv, [&](int r, const float* acc, int end) {
#pragma unroll
        for (int i = 0; i < U::kRq; ++i)
          if (r + i < end) qkv[r + i] = acc[i];
      });
    }
    XRAY_END(qkv, L);

    // ---------------- grid barrier 1, attention / L2 prefetch ----------------
    if (!u.attn(L, W, N)) return;

    // ---------------- O projection + residual ----------------
    UnitRegs<Fmt, U::kUo> pre_o;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && o1 > o0)
        prefetch_l2_bulk(W + kOffO + int64_t(o0) * kQDim, uint32_t(o1 - o0) * kQDim * uint32_t(sizeof(Elem)));
    } else {
      preload_chunked<Fmt, kQDim / kChunk, U::kUo>(u.seg(L, kOffO, kScO), o0, o1, warp * U::kUo, pre_o);
    }
    // the residual rows this block will update, stable since barrier 1: read them before the wait
    const float resid_o = tid < o1 - o0 ? ldcg_f32(hidden + o0 + tid) : 0.f;
    const float sc_o = chunked_row_scale<Fmt>(u.seg(L, kOffO, kScO), o0, o1);  // fp8: this thread's O row's scale
    if (!block_wait_geq(S, &S->attn_done, uint32_t(kAttnBlocks * (L + 1)), tmo, kErrFlagAttnTimeout, L * 16 + 3,
                        &s_flag))
      return;
    XRAY_END(flag_attn, L);
    if (p.stop_layer == L && p.stop_phase == kStopAttn) return;
    if constexpr (Cfg::kPreloadL2) preload_chunked<Fmt, kQDim / kChunk, U::kUo>(u.seg(L, kOffO, kScO), o0, o1, warp * U::kUo, pre_o);
    if (o1 > o0) {
      load_to_smem(scr + kScrAttn, s_x, kQDim);
      gemv_chunked<Fmt, kQDim / kChunk, U::kUo>(u.seg(L, kOffO, kScO), o0, o1, s_x, s_part, pre_o, sc_o,
                                             [&](int r, float d) { hidden[r] = resid_o + d; });
    }
    RowRegs<Fmt, U::kRg> pre_gu;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && g1 > g0)
        prefetch_l2_bulk(W + kOffGateUp + int64_t(g0) * kHidden, uint32_t(g1 - g0) * kHidden * uint32_t(sizeof(Elem)));
    } else {
      preload_k1024<Fmt, U::kRg>(u.seg(L, kOffGateUp, kScGateUp), g0 + warp * U::kRg, g1, pre_gu);
    }
    XRAY_END(oproj, L);
    if (!u.barrier(L, 4)) return;
    XRAY_END(bar_o, L);
    if (p.stop_layer == L && p.stop_phase == kStopO) return;
    if constexpr (Cfg::kPreloadL2) preload_k1024<Fmt, U::kRg>(u.seg(L, kOffGateUp, kScGateUp), g0 + warp * U::kRg, g1, pre_gu);

    // ---------------- gate/up + SiLU ----------------
    rmsnorm_to_smem<false>(hidden, N + kNormPostLn, s_x, s_red);
    if (b == 0)
      for (int i = tid; i < kHidden; i += kThreads) scr[kScrNormPost + i] = s_x[i];
    {
      float* act = scr + kScrAct;
      // rows 2i (gate i) and 2i+1 (up i) are streamed together by one warp
      static_assert(U::kRg % 2 == 0, "gate and up rows of a pair stay in one warp");
      gemv_k1024<Fmt, U::kRg, 0>(u.seg(L, kOffGateUp, kScGateUp), g0, g1, s_x, pre_gu, [&](int r, const float* acc, int end) {
#pragma unroll
        for (int i = 0; i < U::kRg; i += 2) {
          if (r + i < end) {
            const float g = acc[i], u = acc[i + 1];
            act[(r + i) / 2] = g / (1.f + __expf(-g)) * u;
          }
        }
      });
    }
    UnitRegs<Fmt, U::kUd> pre_dn;
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && h1 > h0)
        prefetch_l2_bulk(W + kOffDown + int64_t(h0) * kIntermediate,
                         uint32_t(h1 - h0) * kIntermediate * uint32_t(sizeof(Elem)));
    } else {
      preload_chunked<Fmt, kIntermediate / kChunk, U::kUd>(u.seg(L, kOffDown, kScDown), h0, h1, warp * U::kUd, pre_dn);
    }
    const float resid_d = tid < h1 - h0 ? ldcg_f32(hidden + h0 + tid) : 0.f;  // stable since barrier 2
    const float sc_d = chunked_row_scale<Fmt>(u.seg(L, kOffDown, kScDown), h0, h1);  // fp8: this thread's down row's scale
    XRAY_END(gateup, L);
    if (!u.barrier(L, 5)) return;
    XRAY_END(bar_gateup, L);
    if (p.stop_layer == L && p.stop_phase == kStopGateUp) return;
    if constexpr (Cfg::kPreloadL2)
      preload_chunked<Fmt, kIntermediate / kChunk, U::kUd>(u.seg(L, kOffDown, kScDown), h0, h1, warp * U::kUd, pre_dn);

    // ---------------- down + residual ----------------
    load_to_smem(scr + kScrAct, s_x, kIntermediate);
    gemv_chunked<Fmt, kIntermediate / kChunk, U::kUd>(u.seg(L, kOffDown, kScDown), h0, h1, s_x, s_part, pre_dn, sc_d,
                                                   [&](int r, float d) { hidden[r] = resid_d + d; });
    // Next layer's first qkv loads (an empty row range after the last layer keeps the
    // definition unconditional, so the registers are not live across the whole loop).
    if constexpr (Cfg::kPreloadL2) {
      if (tid == 0 && L + 1 < kNumLayers)
        prefetch_l2_bulk(W + kLayerElems + kOffQKV + int64_t(q0) * kHidden,
                         uint32_t(q1 - q0) * kHidden * uint32_t(sizeof(Elem)));
    } else {
      // (the scale pointer of layer kNumLayers is formed but never read: the row range is empty)
      preload_k1024<Fmt, U::kRq>(u.seg(L + 1, kOffQKV, kScQKV), q0 + warp * U::kRq, L + 1 < kNumLayers ? q1 : 0, pre_qkv);
    }
    XRAY_END(down, L);
    if (!u.barrier(L, 6)) return;
    XRAY_END(bar_down, L);
    if (p.stop_layer == L && p.stop_phase == kStopDown) return;
  }

  u.lm_head_argmax();
}
