// monolith: the streaming schedule's O phase: this block's O rows against the group's 256 merged
// attention columns (sm.attn), added into the counted residual words acc_o.
// Stream order: a block's O rows o0 .. o1 follow its attention splits' K/V slots in StreamPlan's list
// (stream_plan.cuh; issued in that order by stream_producer): one slot per round (E4M3: 64 rows,
// NVFP4: 128) or up to kRoundSlots slots of 32 rows (bf16); the acquires here take them in that
// order, and phase_merge.cuh's pretest tests the slots of the first round.
//
// Not a stand-alone header: a fragment of stream_consumer's body (kernel/schedule_stream.cuh), included
// in the layer loop, after phase_merge.cuh. It reads and writes the consumer's locals as if written
// there; the compiler sees the same tokens as one function, as the SASS lock (kernel/sass.lock)
// requires: a phase made a function of its own compiles to PTX with other register orders, and so to
// other machine code.

if constexpr (kNv) {
  // NVFP4: 128 rows of the group's 256 columns per slot (128 code bytes each), one slot per
  // round; a row is 8 lanes (lane l8 = lane % 8: the row's word l8 = columns 32 l8 .., blocks
  // 2 l8, 2 l8 + 1), warp w takes rows 8 w + lane / 8 and + 4. The eight lanes' sums meet in
  // an xor tree 4, 2, 1: kernel_gemv(..., lanes=8) of quant/nvfp4_kernel_model.py.
  const int l8 = lane & 7;
  const NvIn<kNv> at = load_nv_in<kNv, kGroupCols / 32>(sm.attn, l8);
  for (int o = s.o0, i = 0; o < s.o1; o += F::kRowsO, ++i) {
    const int nr = min(F::kRowsO, s.o1 - o);
    const int r0 = 8 * warp + (lane >> 3), r1 = r0 + 4;
    uint32_t b0 = bso[0], b1 = bso[1];  // later slots' scales: issued before the slot wait
    if (i > 0) {
      const uint16_t* bs = reinterpret_cast<const uint16_t*>(BS + kBsO + int64_t(g * kHidden + o) * F::kBsRowO) + l8;
      b0 = r0 < nr ? __ldg(bs + r0 * (F::kBsRowO / 2)) : 0u;
      b1 = r1 < nr ? __ldg(bs + r1 * (F::kBsRowO / 2)) : 0u;
    }
    if (!acquire_n(1, kPhase_s_oproj, L, true, false, i == 0)) return;  // i = 0: after the barrier above
    const uint4* slot = slot_at(0);
    float a0 = r0 < nr ? nv_dot(slot[r0 * (F::kRowBytesO / 16) + l8], at, b0) : 0.f;
    float a1 = r1 < nr ? nv_dot(slot[r1 * (F::kRowBytesO / 16) + l8], at, b1) : 0.f;
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) {  // within each group of 8 lanes, fixed order
      a0 += __shfl_xor_sync(0xffffffffu, a0, m);
      a1 += __shfl_xor_sync(0xffffffffu, a1, m);
    }
    if (l8 == 0) {
      if (r0 < nr) resid_add(acc_o + o + r0, to_fix(a0 * tso));
      if (r1 < nr) resid_add(acc_o + o + r1, to_fix(a1 * tso));
    }
    if (o + F::kRowsO >= s.o1) hop_mark();
    release_n(1);
  }
} else if constexpr (F::kRb == 2) {
  // E4M3: 64 rows of the group's 256 columns per slot, one slot per round; half-warp hw of warp
  // w takes rows 4 w + hw and 4 w + 2 + hw, lane l16 16 columns (one 16-byte word) of each
  const int hw = lane >> 4, l16 = lane & 15;
  const float4* at4 = reinterpret_cast<const float4*>(sm.attn);
  const float4 at[4] = {at4[x4_swz(4 * l16)], at4[x4_swz(4 * l16 + 1)], at4[x4_swz(4 * l16 + 2)], at4[x4_swz(4 * l16 + 3)]};
  const XE16 ate = kE4H2O ? load_xe16<kGroupCols / 32>(sm.attn, 16 * l16) : XE16{};  // kE4H2O: as half2 (at unused)
  for (int o = s.o0, i = 0; o < s.o1; o += F::kRowsO, ++i) {
    const int nr = min(F::kRowsO, s.o1 - o);
    const int r0 = 4 * warp + hw, r1 = r0 + 2;
    // the two rows' scales (issued before the slot wait; the first slot's before the merge's)
    const float s0 = (l16 == 0 && r0 < nr) ? (i == 0 ? sco[0] : __ldg(SC + kScO + o + r0)) : 0.f;
    const float s1 = (l16 == 0 && r1 < nr) ? (i == 0 ? sco[1] : __ldg(SC + kScO + o + r1)) : 0.f;
    if (!acquire_n(1, kPhase_s_oproj, L, true, i == 0, i == 0)) return;  // i = 0: after the barrier above
    if (i == 0) XRAY_SUB2(x_bar, L);
    const uint4* slot = slot_at(0);
    float a0 = r0 < nr ? (kE4H2O ? hdot16_e4m3(slot[r0 * 16 + l16], ate.w, ate.f) : dot16_e4m3(slot[r0 * 16 + l16], at, 0.f)) : 0.f;
    float a1 = r1 < nr ? (kE4H2O ? hdot16_e4m3(slot[r1 * 16 + l16], ate.w, ate.f) : dot16_e4m3(slot[r1 * 16 + l16], at, 0.f)) : 0.f;
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) {  // within each half-warp, fixed order
      a0 += __shfl_xor_sync(0xffffffffu, a0, m);
      a1 += __shfl_xor_sync(0xffffffffu, a1, m);
    }
    if (i == 0) XRAY_SUB2(x_dot, L);
    if (l16 == 0) {
      if (r0 < nr) resid_add(acc_o + o + r0, to_fix(a0 * s0));
      if (r1 < nr) resid_add(acc_o + o + r1, to_fix(a1 * s1));
    }
    if (o + F::kRowsO >= s.o1) hop_mark();
    if (i == 0) XRAY_SUB2(x_out, L);
    release_n(1);
  }
} else {
  // lane's 8 attention values are the same for every O row: registers
  const float4 at0 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane)];
  const float4 at1 = reinterpret_cast<const float4*>(sm.attn)[x4_swz(2 * lane + 1)];
  for (int o = s.o0; o < s.o1; o += 32 * kRoundSlots) {
    const int nr = min(32 * kRoundSlots, s.o1 - o), n = (nr + 31) / 32;
    if (!acquire_n(n, kPhase_s_oproj, L, true, o == s.o0, o == s.o0)) return;  // the first: after the barrier above
    if (o == s.o0) XRAY_SUB2(x_bar, L);
    float a[2 * kRoundSlots];
#pragma unroll
    for (int i = 0; i < kRoundSlots; ++i) {  // slot i, rows 2 w and 2 w + 1
      const uint4* slot = slot_at(i);
      a[2 * i] = i < n ? dot8_bf16(slot[(2 * warp) * 32 + lane], at0, at1, 0.f) : 0.f;
      a[2 * i + 1] = i < n ? dot8_bf16(slot[(2 * warp + 1) * 32 + lane], at0, at1, 0.f) : 0.f;
    }
    // values 0..3 and 4..7: lane 8 v holds the sum of value v (of its group of four)
    const float lo4 = warp_sum4(a[0], a[1], a[2], a[3]), hi4 = warp_sum4(a[4], a[5], a[6], a[7]);
    if (o == s.o0) XRAY_SUB2(x_dot, L);
    if ((lane & 7) == 0) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = 4 * k + (lane >> 3);
        const int rr = 32 * (i >> 1) + 2 * warp + (i & 1);
        if (rr < nr) resid_add(acc_o + o + rr, to_fix(k == 0 ? lo4 : hi4));
      }
    }
    if (o + 32 * kRoundSlots >= s.o1) hop_mark();
    if (o == s.o0) XRAY_SUB2(x_out, L);
    release_n(n);
  }
}
