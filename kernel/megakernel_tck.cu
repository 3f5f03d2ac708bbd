// The tensor-core variant with k vectors per pass (fp8-stream-tc-k2/-k4/-k8: VariantCfg's TcKCfg in
// kernel/decode_step.cuh, Policy::kVecs, kernel/stream_mma.cuh; issue 48 step 4, notes/ktoken.md §7a),
// in a translation unit of its own (kernel/variant_units.def's TcK rows; variants.json "config": "tck"),
// so that fp8-stream-tc's and every shipped kernel's objects stay as they are. Compile-only: the table
// marks the rows not launched, so megakernel.cu's kernel_for gives the host no kernel for these ids
// (and the engine refuses them before any GPU work: monolith/kernel_spec.py check_runnable), because
// the hops, attention, O and the LM head carry one vector. What this unit proves: the k-column rounds
// compile within the register cap and the per-k shared-memory budget (schedule_stream.cuh asserts it
// by name), and the lock (kernel/sass.lock) tracks their machine code. sm_120a compiles k <= 2 only;
// its k = 4 and 8 kernels are empty (stream_compiled).
// The X-ray build: kernel/megakernel_tck_xray.cu.
#include "step_unit.cuh"

MONOLITH_STEP_UNIT(TcK)
