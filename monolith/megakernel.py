"""The megakernel engine: packs a checkpoint the way the kernel streams it, builds the CUDA
extension for the GPU present, and runs one kernel launch per token.

One engine class per weight format, mirroring the kernel's weight types (kernel/dequant.cuh):
Bf16Engine (WeightsBf16), Fp8Engine (WeightsE4M3), Nvfp4Engine (WeightsNvfp4). Each holds what is
particular to its format, beside the packing it uploads: which packs it accepts (`_pack`, every
refusal before any GPU work), the buffers it fills (`_upload`), its byte model and its gate's
oracle. MegakernelEngine, their base, owns the rest: the build, the grid checks, the launch, the
host-side error checks and the X-ray; `MegakernelEngine(ckpt, variant=...)` returns the class of
the variant's format (kernel/variants.json "weights").

The extension (kernel/bindings.cpp + kernel/megakernel.cu + its X-ray build) is compiled on
first use with torch's ninja-based loader into build/ext-<hash>/. Python owns every buffer;
the kernel gets raw pointers (a null pointer for every buffer the format does not use).
Everything that can be checked on the host is checked here before a launch: shapes and dtypes
of the checkpoint, token ids, the context cap, and whether the grid can be co-resident (a
persistent grid that cannot is a hang, so we refuse instead).
"""
from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import numpy as np
import torch

from monolith import REPO_ROOT, kernel_spec
from monolith import config as C
from monolith import stop_phase as SP
from monolith.engine import Engine
from monolith.errors import MonolithError

KERNEL_DIR = kernel_spec.KERNEL_DIR

# ---- packed layout: the same formulas as kernel/config.cuh (tests/test_kernel_host.py parses
# the header and checks every number below against it) ------------------------------------------
QKV_ROWS = C.Q_DIM + 2 * C.KV_DIM
GATEUP_ROWS = 2 * C.INTERMEDIATE
OFF_QKV = 0
OFF_O = OFF_QKV + QKV_ROWS * C.HIDDEN
OFF_GATEUP = OFF_O + C.HIDDEN * C.Q_DIM
OFF_DOWN = OFF_GATEUP + GATEUP_ROWS * C.HIDDEN
LAYER_ELEMS = OFF_DOWN + C.HIDDEN * C.INTERMEDIATE
NORM_IN_LN, NORM_POST_LN = 0, C.HIDDEN
NORM_Q = 2 * C.HIDDEN
NORM_K = NORM_Q + C.HEAD_DIM
NORM_LAYER_ELEMS = NORM_K + C.HEAD_DIM
THREADS = 512
# The StopPhase codes a launch passes, from kernel/config.cuh's enum (read once, at import: a launch
# costs no file access). kStopNever: a whole step; the fault codes: inject_stuck_barrier.
STOP_NEVER = SP.code("kStopNever")
FAULT_BLOCK0_EXITS = SP.code("kFaultBlock0Exits")
FAULT_BLOCK0_AFTER = SP.code("kFaultBlock0After")
XRAY_FIELDS = ["block", "smid", "phase", "layer", "g0", "g1", "c0", "c1"]
# One XrayEvent (kernel/xray.cuh): u64 g0, g1, c0, c1; u16 phase, layer, block, smid.
XRAY_EVENT_DTYPE = np.dtype([("g0", "<u8"), ("g1", "<u8"), ("c0", "<u8"), ("c1", "<u8"),
                             ("phase", "<u2"), ("layer", "<u2"), ("block", "<u2"), ("smid", "<u2")])
# Error codes and their names are parsed from kernel/sync.cuh (monolith.kernel_spec.error_codes);
# a wait that times out reports error_info = layer * 16 + wait id, the id being the literal the
# kernel passes to that wait (`L * 16 + id`). Wait ids per variant, by name: a variant with its
# own schedule adds its table here (tests check that every variant in variants.json has one).
WAITS: dict[str, dict[int, str]] = {
    "bf16-upstream": {1: "barrier after qkv", 2: "flag kv", 3: "flag attention", 4: "barrier after oproj",
                      5: "barrier after gate/up", 6: "barrier after down"},
    # bf16-stream: counter waits of the consumers (kernel/schedule_stream.cuh) and the ring's two
    # sides; layer 28 = the LM head
    "bf16-stream": {7: "residual words of the previous layer's MLP (tagged)",
                    8: "the group's q/k/v rows (tagged)", 9: "the group's attention splits (tagged)",
                    10: "residual words after attention + O (counted)", 11: "the layer's MLP activations (tagged)",
                    12: "a weight slot to land (ring full)", 13: "a ring slot to be freed (producer)"},
}
WAITS["bf16-upstream-l2pre"] = WAITS["bf16-upstream"]
WAITS["fp8-upstream"] = WAITS["bf16-upstream"]  # the same schedule on fp8 weights
WAITS["fp8-stream"] = WAITS["bf16-stream"]  # likewise
WAITS["nvfp4-stream"] = WAITS["bf16-stream"]  # likewise
for _base in ("bf16-stream", "fp8-stream", "nvfp4-stream"):  # their sm_120 configurations: the same waits
    WAITS[f"{_base}-sm120"] = WAITS["bf16-stream"]
WAITS["fp8-stream-tc"] = WAITS["bf16-stream"]  # the same schedule, its GEMV rounds on the tensor cores
for _k in (2, 4, 8):  # k vectors per pass: the same schedule (compiled, refused by the engine: check_runnable)
    WAITS[f"fp8-stream-tc-k{_k}"] = WAITS["bf16-stream"]


def variant_spec(name: str) -> dict:
    return kernel_spec.variant_spec(name)


# ---- the streaming schedule's row order, shared by bf16 values and E4M3 codes (one element
# per weight); NVFP4's packed nibbles move the same rows (stream_order_nvfp4) ------------------
def _group_qkv_rows(rows: torch.Tensor) -> torch.Tensor:
    """[QKV_ROWS, ...] in q | k | v order -> the same rows grouped by KV head g: q head 2g, q head
    2g+1, k head g, v head g (the streaming schedule's qkv order)."""
    hd, g = C.HEAD_DIM, C.NUM_KV_HEADS
    q = rows[:C.Q_DIM].reshape(g, 2 * hd, *rows.shape[1:])
    k = rows[C.Q_DIM:C.Q_DIM + C.KV_DIM].reshape(g, hd, *rows.shape[1:])
    v = rows[C.Q_DIM + C.KV_DIM:].reshape(g, hd, *rows.shape[1:])
    return torch.cat([q, k, v], dim=1).reshape(rows.shape)


def stream_order_(w: torch.Tensor, num_layers: int) -> torch.Tensor:
    """Reorder, in place, a flat per-layer weight buffer in the upstream element order (bf16 values
    or E4M3 codes: one element per weight) into the streaming schedule's order; returns w."""
    hd, g = C.HEAD_DIM, C.NUM_KV_HEADS
    for i in range(num_layers):
        base = i * LAYER_ELEMS
        qkv = w[base + OFF_QKV: base + OFF_O].view(QKV_ROWS, C.HIDDEN)
        grouped = _group_qkv_rows(qkv).reshape(-1)                  # [g][512][1024]
        o = w[base + OFF_O: base + OFF_GATEUP].view(C.HIDDEN, g, 2 * hd).permute(1, 0, 2).reshape(-1)
        w[base + OFF_QKV: base + OFF_O] = grouped
        w[base + OFF_O: base + OFF_GATEUP] = o
    return w


# The tensor-core GEMV (variants.json "gemv": "mma"; kernel/stream_mma.cuh): the segments whose E4M3
# codes its rounds read as mma fragments (Policy::kTcPhases of kernel/policy.cuh: qkv, MLP-1's gate/up,
# down), each a stack of 1,024-byte lines (a down row is 3). Within line l (counted from the segment's
# start), 32-byte chunk c moves to c ^ (l & 3): a half-warp's fragment loads of 4 consecutive lines
# then hit 4 different chunks, every bank once (tests/test_kernel_tc_host.py models the loads).
TC_LINE, TC_CHUNK = 1024, 32
TC_SEGMENTS = {"qkv": (OFF_QKV, OFF_O), "gateup": (OFF_GATEUP, OFF_DOWN), "down": (OFF_DOWN, LAYER_ELEMS)}


def tc_swizzle_(codes: torch.Tensor, num_layers: int) -> torch.Tensor:
    """In place, the flat stream-ordered codes [num_layers * LAYER_ELEMS] (one byte per weight) in the
    tensor-core rounds' chunk order (TC_SEGMENTS); returns codes. An involution: applied twice, the
    codes are back."""
    chunks = TC_LINE // TC_CHUNK
    for i in range(num_layers):
        base = i * LAYER_ELEMS
        for a, b in TC_SEGMENTS.values():
            assert (b - a) % (4 * TC_LINE) == 0 and a % TC_LINE == 0, "segments are whole groups of 4 lines"
            seg = codes[base + a: base + b].view(-1, 4, chunks, TC_CHUNK)  # [line // 4][line % 4][chunk][byte]
            for key in range(1, 4):
                idx = torch.arange(chunks, device=codes.device) ^ key
                seg[:, key] = seg[:, key][:, idx]
    return codes


def rope_table(context_cap: int = C.CONTEXT_CAP, theta: float = C.ROPE_THETA, head_dim: int = C.HEAD_DIM) -> torch.Tensor:
    """[cap, head_dim] fp32: cos of the head_dim/2 frequencies, then their sin (HF's formula:
    inv_freq in fp32, angle = position * inv_freq in fp32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    ang = torch.arange(context_cap, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=1).contiguous()


def kv_bytes_per_position(num_layers: int = C.NUM_LAYERS) -> int:
    return num_layers * 2 * C.KV_DIM * 2


def bytes_per_token(position: int, num_layers: int = C.NUM_LAYERS, weights: str = "bf16") -> int:
    """Bytes one step reads from DRAM: all layer weights and norms, the LM head (= embedding),
    the embedding row of the input token (the format's weight_bytes), and K/V of positions
    0..position."""
    return engine_class_for(weights).weight_bytes(num_layers) + (position + 1) * kv_bytes_per_position(num_layers)


def time_model_bytes(weights: str = "bf16") -> dict:
    """bytes_layer / bytes_head of the time model (bench/bytemodel.py predict_us) for a format."""
    return engine_class_for(weights).time_model_bytes()


def _arch_flags() -> list[str]:
    major, minor = torch.cuda.get_device_capability()
    if major == 9:
        return kernel_spec.arch_flags("sm_90a")
    if major == 12:
        return kernel_spec.arch_flags(f"sm_{major}{minor}a")
    raise MonolithError(f"monolith's kernel targets Hopper (sm_90a) and RTX 50-series (sm_120a); this GPU is sm_{major}{minor}")


_EXT: dict[str, object] = {}


def load_extension(variant: str = "bf16-upstream", verbose: bool = False):
    """Build (once, cached by source hash and flags) and import the extension for `variant`.

    One extension holds every variant whose flags are the same (variants are template
    instantiations selected at launch by id) plus its X-ray build (megakernel_xray.cu). Its nvcc
    flags are kernel_spec.build_flags(variant) + the arch: exactly what scripts/compile_all.py
    compiles in CI, unless MONOLITH_NVCC_DEFINES names extra defines (a diagnostic build, e.g.
    "MONOLITH_RING_RELEASE=512" for racecheck; never set by default): they are checked first (a
    malformed value is a MonolithError), enter the flags and so the hash (their own build dir),
    and are listed in build_info["extra_defines"] ([] for the measured build)."""
    extra = kernel_spec.env_extra_defines()  # before the GPU check: a bad value is refused anywhere
    if not torch.cuda.is_available():
        raise MonolithError("the megakernel needs a CUDA GPU; none is visible (use --engine reference on CPU)")
    from torch.utils.cpp_extension import load

    cuda_flags = [*kernel_spec.build_flags(variant, extra_defines=extra), *_arch_flags()]
    # a variant of a configuration of its own (variants.json "config": the sm_120 one's) adds that
    # configuration's translation units; every other extension skips their compile
    config = variant_spec(variant).get("config")
    h = hashlib.sha256(" ".join(cuda_flags + ([f"config={config}"] if config else [])).encode())
    for f in sorted(KERNEL_DIR.glob("*")):
        if f.suffix in {".cu", ".cuh", ".cpp", ".def", ".h"}:
            h.update(f.name.encode() + f.read_bytes())
    tag = h.hexdigest()[:12]
    if tag in _EXT:
        return _EXT[tag]
    plain, xray = kernel_spec.build_sources()
    sources = [KERNEL_DIR / "bindings.cpp", plain, xray or KERNEL_DIR / "megakernel_xray.cu"]
    if config:
        sources += list(kernel_spec.config_sources(config))
    build_dir = REPO_ROOT / "build" / f"ext-{tag}"
    build_dir.mkdir(parents=True, exist_ok=True)
    # the host compiler sees the extra defines too: bindings.cpp's constants() (the ring's depth the
    # host sizes and checks: stream_ring) must describe the kernels this build compiles
    ext = load(name=f"monolith_mk_{tag}", sources=[str(s) for s in sources], extra_cuda_cflags=cuda_flags,
               extra_cflags=["-O2", "-std=c++17", *(f"-D{d}" for d in extra)], extra_include_paths=[str(KERNEL_DIR)],
               build_directory=str(build_dir), verbose=verbose)
    ext.build_info = {"tag": tag, "nvcc_flags": cuda_flags, "build_dir": str(build_dir), "extra_defines": extra,
                      "config_sources": config or None}
    _EXT[tag] = ext
    return ext


def expected_constants() -> dict:
    """The layout this module packs for, as the extension's constants() names it (the fp8 scale
    offsets: quant/fp8_layout.py, the packer's contract)."""
    from monolith.quant import fp8_layout as F
    from monolith.quant import nvfp4_layout as NL

    return {"sc_qkv": F.SC_QKV, "sc_o": F.SC_O, "sc_gateup": F.SC_GATEUP, "sc_down": F.SC_DOWN,
            "layer_rows": F.LAYER_SCALES,
            "nv_layer_code_bytes": NL.LAYER_CODE_BYTES, "nv_layer_bscale_bytes": NL.LAYER_BSCALE_BYTES,
            "bs_qkv": NL.BSCALE_OFFSETS["qkv"], "bs_o": NL.BSCALE_OFFSETS["o"],
            "bs_gateup": NL.BSCALE_OFFSETS["gateup"], "bs_down": NL.BSCALE_OFFSETS["down"],
            "nv_tscale_slots": NL.TSCALE_SLOTS,"hidden": C.HIDDEN, "intermediate": C.INTERMEDIATE, "num_layers": C.NUM_LAYERS, "vocab": C.VOCAB,
              "num_q_heads": C.NUM_Q_HEADS, "num_kv_heads": C.NUM_KV_HEADS, "head_dim": C.HEAD_DIM,
              "groups": C.NUM_KV_HEADS,
              "context_cap": C.CONTEXT_CAP, "threads": THREADS, "layer_elems": LAYER_ELEMS, "off_qkv": OFF_QKV,
              "off_o": OFF_O, "off_gateup": OFF_GATEUP, "off_down": OFF_DOWN, "norm_layer_elems": NORM_LAYER_ELEMS,
              "norm_in_ln": NORM_IN_LN, "norm_post_ln": NORM_POST_LN, "norm_q": NORM_Q, "norm_k": NORM_K,
              "xray_event_bytes": XRAY_EVENT_DTYPE.itemsize}


def default_blocks(spec: dict, sm_count: int, groups: int, min_blocks: int) -> int:
    """The grid a variant runs on when no `blocks=` is given.

    upstream schedule: one block per SM (its phases split rows over whatever grid it gets).
    stream schedule: the largest multiple of the KV-group count (8) that is <= the SM count and
    >= min_stream_blocks; one block per SM if there is none (the range check then refuses it).
    Why: with a multiple of 8 every group has the same number of blocks, and on the H200 (132
    SMs -> 128) every partition is exact: 512 qkv rows / 16 blocks of a group, 1,024 O rows / 16,
    384 MLP units / 128, 1,024 down rows / 128. At 132, 4 groups have 17 blocks and the phases
    wait for their slowest block. Measured on the H200 (dev timings, NOTES.md M4), 128 vs 132
    blocks: 1,471 vs 1,464 tok/s (launch sweep), 1,564 vs 1,534, 1,590 vs 1,577, 1,654 vs 1,631,
    1,655 vs 1,648 (later builds). The upstream schedule keeps one block per SM."""
    if spec.get("schedule") != "stream":
        return int(sm_count)
    b = int(sm_count) - int(sm_count) % int(groups)
    return b if b >= min_blocks else int(sm_count)


def stream_ring(spec: dict, capability: tuple[int, int], k: dict) -> dict:
    """The weight ring a streaming variant runs with on a GPU of this compute capability
    (kernel/policy.cuh: Policy::kStages): an sm_120 GPU (12.x, 99 KB of shared memory per block)
    runs the sm_120 configuration, and so does a variant whose variants.json "config" is "sm120"
    (the same configuration on any GPU); every other GPU the sm_90 one. `k`: the extension's
    constants() (stages_*, ring_bytes_*, smem_per_block_*)."""
    cfg = "sm120" if spec.get("config") == "sm120" or int(capability[0]) >= 12 else "sm90"
    return {"config": cfg, "stages": int(k[f"stages_{cfg}"]), "ring_bytes": int(k[f"ring_bytes_{cfg}"]),
            "smem_per_block_budget": int(k[f"smem_per_block_{cfg}"])}


def check_smem_fits(variant: str, ring: dict, static_bytes: int, optin: int | None, gpu: str) -> None:
    """Refuse, in one line, a streaming configuration whose ring (dynamic shared memory) and block
    state (the kernel's static shared memory) exceed the GPU's opt-in shared memory per block
    (cudaDevAttrMaxSharedMemoryPerBlockOptin). optin None: not reported, nothing to check."""
    need = int(ring["ring_bytes"]) + int(static_bytes)
    if optin is not None and need > int(optin):
        raise MonolithError(
            f"{variant} cannot launch on {gpu}: its {ring['config']} configuration needs {need / 1024:.1f} KB of shared "
            f"memory per block ({ring['stages']}-slot ring {ring['ring_bytes'] // 1024} KB + block state "
            f"{static_bytes / 1024:.1f} KB), the GPU allows {int(optin) / 1024:.1f} KB; refusing")


def check_constants(k: dict) -> None:
    """The compiled kernel's layout must be exactly the one this module packs for."""
    bad = {name: (v, k.get(name)) for name, v in expected_constants().items() if k.get(name) != v}
    if bad:
        raise MonolithError(f"kernel/config.cuh and monolith/config.py disagree (python, kernel): {bad}")


class MegakernelEngine(Engine):
    """One persistent-kernel launch per token. See monolith.engine.Engine for the contract.

    The base of the per-format engines: `MegakernelEngine(ckpt, variant=...)` constructs the
    class of the variant's weight format (engine_class), so every caller keeps one entry point.
    A subclass fills `_pack` (the pack it runs on, refusing what the kernel cannot run, before any
    GPU work) and `_upload` (its buffers on the device); the launch reads the same attributes
    for every format: w, norms, embed, final_norm, codes, row_scales, embed_codes, embed_scales."""

    context_cap, vocab_size = C.CONTEXT_CAP, C.VOCAB  # Engine checks both before any launch
    weight_format: str | None = None  # kernel/variants.json "weights"; set by each subclass
    kernel_weights: str | None = None  # the kernel's weight type (kernel/dequant.cuh)
    gate_oracle: str | None = None  # info["gate_oracle"] where the gate's oracle is not the checkpoint

    def __new__(cls, ckpt=None, variant: str = "bf16-upstream", *args, **kwargs):
        if cls is MegakernelEngine:
            try:
                cls = engine_class(variant)
            except MonolithError:  # an unknown variant or format: __init__ refuses it, in order
                pass
        return super().__new__(cls)

    def __init__(self, ckpt, variant: str = "bf16-upstream", xray: bool = False, blocks: int | None = None,
                 timeout_s: float = 1.0, device: str = "cuda", packed=None):
        """ckpt: the checkpoint. `packed`: the packed weights of a quantized format (see the
        subclass's _pack: a `monolith pack` dir/file or a Packed* made from ckpt; None: ckpt's own
        pack when ckpt is that format's dequantized checkpoint, else ckpt packed in memory)."""
        if ckpt.shape.num_layers != C.NUM_LAYERS:
            raise MonolithError(f"the kernel is compiled for {C.NUM_LAYERS} layers; checkpoint has {ckpt.shape.num_layers}")
        self.spec = variant_spec(variant)
        # a variant the kernel compiles but cannot run (k vectors per pass), refused before any GPU work
        kernel_spec.check_runnable(self.spec, torch.cuda.get_device_capability(device)
                                   if torch.cuda.is_available() and str(device).startswith("cuda") else None)
        self.weight_format = self.spec.get("weights", "bf16")
        if self.weight_format != type(self).weight_format:
            if type(self).weight_format is None:
                raise MonolithError(f"variant {variant}: weight format {self.weight_format!r} is not known to this engine")
            raise MonolithError(f"variant {variant} reads {self.weight_format} weights; {type(self).__name__} runs "
                                f"{type(self).weight_format} variants (MegakernelEngine(ckpt, variant=...) picks the class)")
        pack = self._pack(ckpt, variant, packed)  # before any GPU work: refusals are cheap
        self.ext = load_extension(variant)
        self.k = dict(self.ext.constants())
        check_constants(self.k)
        self.variant, self.variant_id, self.xray = variant, int(self.spec["id"]), bool(xray)
        self.stream = self.spec.get("schedule") == "stream"
        self.jitter_ns = 0  # stress test only (bf16-stream): random per-block sleeps before each phase
        self.threads = self.k["stream_threads"] if self.stream else THREADS
        min_blocks = self.k["min_stream_blocks"] if self.stream else self.k["min_blocks"]
        self.device = torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        self.sm_count = props.multi_processor_count
        # default grid: default_blocks (stream: a multiple of the KV groups, 128 on 132 SMs)
        self.blocks = int(blocks or default_blocks(self.spec, self.sm_count, self.k["groups"], min_blocks))
        if not (min_blocks <= self.blocks <= self.k["max_grid"]):
            raise MonolithError(f"blocks must be in [{min_blocks}, {self.k['max_grid']}], got {self.blocks}")
        # the ring of the configuration this device runs (dynamic shared memory: megakernel.cu sizes
        # it the same way, from the device), refused in one line where it and the block state
        # exceed the device's opt-in shared memory per block
        self.ring = stream_ring(self.spec, (props.major, props.minor), self.k) if self.stream else None
        if self.ring is not None:
            static = int(dict(self.ext.attributes(self.variant_id, self.xray))["shared_size_bytes"])
            check_smem_fits(variant, self.ring, static, getattr(props, "shared_memory_per_block_optin", None), props.name)
        fit = self.ext.max_coresident(self.variant_id, self.xray, self.device.index or 0)
        if self.blocks > fit:
            raise MonolithError(
                f"a grid of {self.blocks} blocks x {self.threads} threads cannot be co-resident on {props.name}: "
                f"the occupancy API allows {fit}. A persistent kernel with grid barriers would hang; refusing.")
        # ~2 GHz SM clock: the bound is in cycles so the plain build needs no global timer.
        self.timeout_cycles = int(timeout_s * 2.0e9)
        self.name = f"megakernel-{variant}" + ("-xray" if xray else "")
        self.weights = ckpt.describe() if hasattr(ckpt, "describe") else {}

        # every weight pointer the kernel takes; a format leaves those it does not read None (null)
        self.w = self.embed = self.codes = self.row_scales = self.embed_codes = self.embed_scales = None
        self._upload(ckpt, pack, self.device)
        dev = self.device
        self.rope = rope_table().to(dev)
        self.kv = torch.zeros(C.NUM_LAYERS * 2 * C.KV_DIM * C.CONTEXT_CAP, dtype=torch.bfloat16, device=dev)
        self.scr = torch.zeros(self.k["scr_elems"], dtype=torch.float32, device=dev)
        self.logits_buf = torch.zeros(C.VOCAB, dtype=torch.float32, device=dev)
        self.sync = torch.zeros(self.k["sync_bytes"] // 4, dtype=torch.int32, device=dev)
        # stream: the words that carry their own readiness (kernel/config.cuh: counted residual
        # words + their snapshot, tagged q/k/v, attention partials, activations, residual); reset()
        # zeroes all, which every launch's tags and counts are relative to
        self.acc = torch.zeros(self.k["acc_words"], dtype=torch.int64, device=dev)
        self.xray_buf = torch.zeros(self.blocks * self.k["xray_max_events"] * XRAY_EVENT_DTYPE.itemsize,
                                    dtype=torch.uint8, device=dev) if xray else None
        self._scratch_tokens = torch.zeros(C.CONTEXT_CAP + 1, dtype=torch.int32, device=dev)
        attrs = dict(self.ext.attributes(self.variant_id, self.xray))
        self.info = {"variant": variant, "xray": self.xray, "blocks": self.blocks, "threads": self.threads,
                     # The gate's near-tie tolerance for this engine (logits). The kernel computes in
                     # fp32 like the oracle; it differs only by its bf16 KV cache and summation order
                     # (phase diff: 0.8% relative on the last layer's residual), so it gets a
                     # tolerance 4x tighter than the 2.0 used for bf16-compute engines.
                     "gate_tolerance": 0.5,
                     "sm_count": self.sm_count, "coresident_limit": fit, "kernel_attributes": attrs, "ring": self.ring,
                     "build": self.ext.build_info, "context_cap": C.CONTEXT_CAP,
                     "grid_barriers_per_layer": self.spec["grid_barriers_per_layer"],
                     "flag_syncs_per_layer": self.spec["flag_syncs_per_layer"],
                     "weight_format": self.weight_format,
                     "time_model": {**self.time_model_bytes(),
                                    "syncs_per_layer": self.spec["grid_barriers_per_layer"] + self.spec["flag_syncs_per_layer"]}}
        if self.ext.build_info.get("extra_defines"):  # MONOLITH_NVCC_DEFINES: a diagnostic build
            self.info["diagnostic_build"] = (f"extra nvcc defines {self.ext.build_info['extra_defines']} "
                                             f"({kernel_spec.EXTRA_DEFINES_ENV}): not the measured kernel")
        if self.gate_oracle is not None:
            # the gate checks the implementation against fp32 on these dequantized weights
            self.info["gate_oracle"] = self.gate_oracle
        if self.spec.get("experimental"):
            self.info["experimental"] = True
        self.reset()

    # ---- the format's part (each subclass) ------------------------------------------------
    def _pack(self, ckpt, variant: str, packed):
        """The pack this format runs on (None where the checkpoint's own tensors are uploaded),
        refusing, before any GPU work, what the kernel cannot run."""
        raise NotImplementedError

    def _upload(self, ckpt, pack, dev: torch.device) -> None:
        """Fill the weight buffers the format's kernel reads (and self.weights, what they are)."""
        raise NotImplementedError

    @classmethod
    def weight_bytes(cls, num_layers: int = C.NUM_LAYERS) -> int:
        """DRAM bytes of one step's weights: layers and norms, LM head, final norm, one embedding row."""
        raise NotImplementedError

    @classmethod
    def time_model_bytes(cls) -> dict:
        """bytes_layer / bytes_head of the time model (bench/bytemodel.py predict_us)."""
        raise NotImplementedError

    @staticmethod
    def _ptr(t) -> int:
        return 0 if t is None else t.data_ptr()

    # ---- low level ----------------------------------------------------------------------
    def _launch(self, in_ptr: int, out_ptr: int, pos: int, stop: tuple[int, int] = (STOP_NEVER, STOP_NEVER),
                record: bool = True) -> None:
        """One step at position `pos` (the host's count; the kernel reads its own from the sync
        state). The position picks a streaming variant's long-position kernel from
        kLongKernelFrom on (kernel/megakernel.cu decode_step_long); both kernels are correct at
        any position and give the same bits below it. stop: (stop_layer, stop_phase), stop_phase a
        StopPhase of kernel/config.cuh (STOP_NEVER and the codes above)."""
        xray_ptr = self.xray_buf.data_ptr() if (self.xray_buf is not None and record) else 0
        p = self._ptr
        self.ext.launch(self.variant_id, self.blocks, self.xray, p(self.w), self.norms.data_ptr(),
                        p(self.embed), self.final_norm.data_ptr(), self.rope.data_ptr(), self.kv.data_ptr(),
                        self.scr.data_ptr(), self.acc.data_ptr(), self.logits_buf.data_ptr(), self.sync.data_ptr(),
                        in_ptr, out_ptr, xray_ptr,
                        self.timeout_cycles, stop[0], stop[1], self.jitter_ns,
                        torch.cuda.current_stream(self.device).cuda_stream,
                        p(self.codes), p(self.row_scales), p(self.embed_codes), p(self.embed_scales), pos)

    def _sync_state(self) -> dict:
        s = self.sync.cpu().tolist()
        return {"bar": s[0], "attn_done": s[1], "done": s[2], "error": s[3], "error_info": s[4], "pos": s[5],
                "steps": s[6], "kv_flag": s[8:16]}

    def check(self) -> None:
        """One host sync: raise a clear error if any launch since the last check failed."""
        torch.cuda.synchronize(self.device)
        st = self._sync_state()
        if st["error"]:
            what = kernel_spec.describe_error(st["error"], st["error_info"], WAITS.get(self.variant, {}))
            self.reset()
            raise MonolithError(f"megakernel step failed: {what}; engine state reset")
        if st["pos"] != self.position:  # the last block advances it: a step that never finished
            got = st["pos"]
            self.reset()
            raise MonolithError(f"megakernel step did not complete: the kernel is at position {got}, the host "
                                f"expected {self.position} (no block reduced the argmax); engine state reset")

    def _set_position(self, pos: int) -> None:
        self.sync.zero_()
        self.acc.zero_()
        self.sync[5] = pos
        self.position = pos

    def seek(self, position: int) -> None:
        """Jump to `position` without running the steps before it, for the sanitizer's long-position
        run (tests/gpu/sanitize_step.py): a 16-block grid reaches several attention splits per block
        only past position 128, and 300 prefill steps under a sanitizer take too long. The K/V cache
        keeps what it holds (zeros after construction), so the outputs mean nothing; only the code
        paths of that position run. A position outside [0, context cap) is refused."""
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < C.CONTEXT_CAP:
            raise MonolithError(f"seek: position must be an int in [0, {C.CONTEXT_CAP}), got {position!r}")
        self._set_position(position)

    def _forced(self, tokens: torch.Tensor, want_logits: bool = False):
        # tokens: int64, already range-checked by Engine.check_tokens, so the int32 cast is exact
        toks = tokens.to(self.device, torch.int32)
        n = toks.numel()
        preds = torch.empty(n, dtype=torch.int32, device=self.device)
        out = torch.empty(n, C.VOCAB, dtype=torch.float32, device=self.device) if want_logits else None
        for i in range(n):
            self._launch(toks.data_ptr() + 4 * i, preds.data_ptr() + 4 * i, self.position + i)
            if out is not None:
                out[i].copy_(self.logits_buf, non_blocking=True)
        self.position += n
        self.check()
        return preds.long(), out

    # ---- Engine interface (Engine's public methods check ids and room, then call these) ---
    def reset(self) -> None:
        self._set_position(0)

    def _prefill(self, tokens: torch.Tensor) -> int:
        preds, _ = self._forced(tokens)
        return int(preds[-1])

    def _decode(self, first_token: int, n: int) -> torch.Tensor:
        buf = torch.empty(n + 1, dtype=torch.int32, device=self.device)
        buf[0] = first_token
        base = buf.data_ptr()
        for i in range(n):  # stream-ordered launches: no host sync per token
            self._launch(base + 4 * i, base + 4 * (i + 1), self.position + i)
        self.position += n
        self.check()
        return buf[1:].long()

    def _teacher_forced(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._forced(tokens)[0]

    def _logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._forced(tokens, want_logits=True)[1]

    def bytes_per_token(self, position: int) -> int:
        return bytes_per_token(position, weights=self.weight_format)

    # ---- test and instrument modes --------------------------------------------------------
    def step_until(self, token: int, stop_layer: int, stop_phase: int) -> dict[str, torch.Tensor]:
        """Run one step that stops after (layer, phase) and return the intermediate buffers
        (phase diff against the reference). Does not advance the position."""
        token = int(self.check_tokens([token])[0])
        self.check_room(1)
        pos = self.position
        tok = torch.tensor([token], dtype=torch.int32, device=self.device)
        self.scr.fill_(float("nan"))  # poison: a buffer the kernel did not write stays NaN
        self._launch(tok.data_ptr(), self._scratch_tokens.data_ptr(), pos, stop=(stop_layer, stop_phase), record=False)
        self.check()
        k = self.k
        s = self.scr

        def seg(off: int, n: int) -> torch.Tensor:
            return s[off: off + n].clone()

        self._set_position(pos)

        L = stop_layer
        kv = self.kv.view(C.NUM_LAYERS, 2, C.NUM_KV_HEADS, C.CONTEXT_CAP, C.HEAD_DIM)
        return {"normed_in": seg(k["scr_norm_in"], C.HIDDEN), "qkv": seg(k["scr_qkv"], QKV_ROWS),
                "q": seg(k["scr_qrot"], C.Q_DIM).view(C.NUM_Q_HEADS, C.HEAD_DIM),
                "k": seg(k["scr_krot"], C.KV_DIM).view(C.NUM_KV_HEADS, C.HEAD_DIM),
                "k_cache": kv[L, 0, :, pos].float().clone(), "v_cache": kv[L, 1, :, pos].float().clone(),
                "attn_out": seg(k["scr_attn"], C.Q_DIM), "hidden": seg(k["scr_hidden"], C.HIDDEN),
                "normed_post": seg(k["scr_norm_post"], C.HIDDEN), "mlp_act": seg(k["scr_act"], C.INTERMEDIATE)}

    def inject_stuck_barrier(self, timeout_s: float = 0.05, layer: int = 0, after_phase: int | None = None) -> None:
        """Test hook: launch a step in which block 0 leaves early: at once (after_phase None), or
        (bf16-stream) after its part of (layer, after_phase), a StopPhase. The blocks that need
        its output must time out at that wait and the host must raise (the kernel never hangs).
        The engine is reset afterwards either way."""
        saved = self.timeout_cycles
        self.timeout_cycles = int(timeout_s * 2.0e9)
        tok = torch.zeros(1, dtype=torch.int32, device=self.device)
        if after_phase is None:
            stop = (0, FAULT_BLOCK0_EXITS)
        else:
            stop = (layer, FAULT_BLOCK0_AFTER + after_phase)
        try:
            self._launch(tok.data_ptr(), self._scratch_tokens.data_ptr(), self.position, stop=stop, record=False)
            if after_phase is not None:
                self.position += 1  # every other block runs the whole step: the kernel should advance
            self.check()
        finally:
            self.timeout_cycles = saved
            self.reset()

    def record_xray(self, prompt_tokens: list[int], position: int = 128, window: int = 16) -> tuple[dict, np.ndarray]:
        """Decode from the prompt up to `position` and return the trace of the step that consumes
        that position: (meta, events int64 [N, 8]: block, smid, phase, layer, g0, g1, c0, c1).

        The traced step is the last of `window` + 1 back-to-back launches timed with CUDA events,
        so it runs in the steady state of a decode loop, and meta["token_time_us"] is the mean
        per-token time of that window (what the trace span is compared with). The buffer is
        cleared just before the traced launch (the block that finishes last, and so records the
        argmax phase, changes from launch to launch)."""
        if not self.xray:
            raise MonolithError("record_xray needs MegakernelEngine(..., xray=True)")
        if not (len(prompt_tokens) <= position < C.CONTEXT_CAP):
            raise MonolithError(f"position {position} must be >= prompt length {len(prompt_tokens)} and < {C.CONTEXT_CAP}")
        self.reset()
        nxt = self.prefill(prompt_tokens)
        window = max(0, min(window, position - self.position))
        if position - window > self.position:
            nxt = int(self.decode(nxt, position - window - self.position)[-1])
        self.xray_buf.zero_()
        buf = torch.empty(window + 2, dtype=torch.int32, device=self.device)
        buf[0] = nxt
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        e0.record()
        for i in range(window + 1):
            if i == window:  # stream-ordered: clears slots an earlier launch's last block filled
                self.xray_buf.zero_()
            self._launch(buf.data_ptr() + 4 * i, buf.data_ptr() + 4 * (i + 1), self.position + i)
        e1.record()
        self.position += window + 1
        self.check()
        # the kernel's record layout (kernel/xray.cuh): decoded by monolith.xray.raw, which also says
        # how g0/g1 were obtained (meta xray_record, clock_anchors) and the layout's capacity
        from monolith.xray.raw import decode_buffer

        events, layout = decode_buffer(self.xray_buf.cpu().numpy(), self.blocks, self.k["xray_max_events"])
        props = torch.cuda.get_device_properties(self.device)
        meta = {"variant": self.variant, "gpu": props.name, "sm_count": self.sm_count, "blocks": self.blocks,
                "threads": self.threads, "position": position,
                "token_time_us": e0.elapsed_time(e1) * 1000.0 / (window + 1),
                "token_time_method": f"CUDA events around {window + 1} back-to-back launches ending with the traced one",
                "sm_clock_mhz": _sm_clock_mhz(), "build": self.ext.build_info, "weights": self.weights,
                "xray_max_events": self.k["xray_max_events"], **layout,
                "kernel_attributes": self.info["kernel_attributes"], "next_token": int(buf[-1].item()),
                "created": datetime.now(UTC).isoformat(timespec="seconds")}
        return meta, events


# ==== bf16: the checkpoint's own values (kernel WeightsBf16) ====================================
def pack_layer_weights(tensors: dict[str, torch.Tensor], num_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack every layer's matrices into the order the kernel streams them (see kernel/config.cuh):
    [q|k|v rows][o][gate/up rows interleaved: 2r = gate r, 2r+1 = up r][down], and the norm
    vectors [input_ln][post_ln][q_norm][k_norm]. Returns two flat bf16 tensors."""
    w = torch.empty(num_layers * LAYER_ELEMS, dtype=torch.bfloat16)
    n = torch.empty(num_layers * NORM_LAYER_ELEMS, dtype=torch.bfloat16)
    for i in range(num_layers):
        t = {k[len(f"model.layers.{i}."):]: v for k, v in tensors.items() if k.startswith(f"model.layers.{i}.")}
        base = i * LAYER_ELEMS
        qkv = torch.cat([t["self_attn.q_proj.weight"], t["self_attn.k_proj.weight"], t["self_attn.v_proj.weight"]])
        w[base + OFF_QKV: base + OFF_O] = qkv.reshape(-1)
        w[base + OFF_O: base + OFF_GATEUP] = t["self_attn.o_proj.weight"].reshape(-1)
        gu = torch.stack([t["mlp.gate_proj.weight"], t["mlp.up_proj.weight"]], dim=1)  # [3072, 2, 1024]
        w[base + OFF_GATEUP: base + OFF_DOWN] = gu.reshape(-1)
        w[base + OFF_DOWN: base + LAYER_ELEMS] = t["mlp.down_proj.weight"].reshape(-1)
        nb = i * NORM_LAYER_ELEMS
        n[nb + NORM_IN_LN: nb + NORM_POST_LN] = t["input_layernorm.weight"]
        n[nb + NORM_POST_LN: nb + NORM_Q] = t["post_attention_layernorm.weight"]
        n[nb + NORM_Q: nb + NORM_K] = t["self_attn.q_norm.weight"]
        n[nb + NORM_K: nb + NORM_LAYER_ELEMS] = t["self_attn.k_norm.weight"]
    return w, n


def pack_layer_weights_stream(tensors: dict[str, torch.Tensor], num_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The streaming schedule's order (kernel/config.cuh, "the streaming schedule"): the same
    per-layer offsets, rows grouped by the KV group that streams them.
      qkv  [8 groups][512 rows][1024]: q head 2g, q head 2g+1, k head g, v head g
      o    [8 groups][1024 rows][256]: o_proj columns 256g .. 256g+255 (the group's two heads)
      gate/up interleaved and down row-major, as in the upstream layout."""
    w, n = pack_layer_weights(tensors, num_layers)
    return stream_order_(w, num_layers), n


PACKERS = {"upstream": pack_layer_weights, "stream": pack_layer_weights_stream}


class Bf16Engine(MegakernelEngine):
    """bf16 variants (bf16-upstream, bf16-upstream-l2pre, bf16-stream): the checkpoint packed in
    memory in the variant's layout (PACKERS), embedding and final norm as they are."""

    weight_format, kernel_weights = "bf16", "WeightsBf16"

    def _pack(self, ckpt, variant: str, packed):
        if packed is not None or getattr(ckpt, "packed", None) is not None:  # a dequantized checkpoint
            raise MonolithError(f"variant {variant} reads bf16 weights; refusing fp8 weights (it would round their "
                                "dequantized values to bf16: a third model). Use an fp8 variant")
        return None

    def _upload(self, ckpt, pack, dev: torch.device) -> None:
        t = ckpt.tensors
        w, n = PACKERS[self.spec.get("layout", "upstream")](t, C.NUM_LAYERS)
        self.w, self.norms = w.to(dev), n.to(dev)
        self.embed = t["model.embed_tokens.weight"].to(dev, torch.bfloat16).contiguous()
        self.final_norm = t["model.norm.weight"].to(dev, torch.bfloat16).contiguous()

    @classmethod
    def weight_bytes(cls, num_layers: int = C.NUM_LAYERS) -> int:
        layers = num_layers * (LAYER_ELEMS + NORM_LAYER_ELEMS) * 2
        head = C.VOCAB * C.HIDDEN * 2 + C.HIDDEN * 2
        return layers + head + C.HIDDEN * 2

    @classmethod
    def time_model_bytes(cls) -> dict:
        return {"bytes_layer": (LAYER_ELEMS + NORM_LAYER_ELEMS) * 2, "bytes_head": C.VOCAB * C.HIDDEN * 2}


# ==== fp8: E4M3 codes + fp32 row scales (kernel WeightsE4M3) ====================================
# fp8 variants ("weights": "fp8" in kernel/variants.json) read quant/pack_fp8.py's packed tensors;
# their variants.json layout names the fp8 layout (quant/fp8_layout.py) they were written for.
FP8_LAYOUTS = {"fp8-rowmajor-v1": "rowmajor-v1"}


def stream_order_scales_(scales: torch.Tensor) -> torch.Tensor:
    """The per-row scales [num_layers, LAYER_SCALES] (layout rowmajor-v1) in the streaming order,
    in place: only the qkv rows move (O's scales belong to its output rows, which stay)."""
    from monolith.quant import fp8_layout as F

    qkv = scales[:, F.SC_QKV: F.SC_QKV + QKV_ROWS]
    qkv.copy_(_group_qkv_rows(qkv.transpose(0, 1).contiguous()).transpose(0, 1))
    return scales


class Fp8Engine(MegakernelEngine):
    """fp8 variants (fp8-upstream, fp8-stream): `packed` (a `monolith pack --format fp8` dir/file or
    a PackedFP8 made from ckpt), else ckpt's own pack when ckpt is the dequantized fp8 checkpoint
    (its gate's oracle, quant/pack_fp8.dequantized_checkpoint), else ckpt packed in memory
    (seconds). A streaming variant reorders the file's rowmajor-v1 rows on upload."""

    weight_format, kernel_weights = "fp8", "WeightsE4M3"
    gate_oracle = "fp32 reference on the fp8 weights dequantized (quant/pack_fp8.py)"

    def _pack(self, ckpt, variant: str, packed):
        """The PackedFP8 the variant runs on, refusing what it cannot run: a pack of another layout
        or with a bf16 LM head, a pack made from other weights than ckpt."""
        from monolith.quant import fp8_layout as F
        from monolith.quant import pack_fp8

        own = getattr(ckpt, "packed", None)  # quant.pack_fp8.DequantizedCheckpoint

        want = FP8_LAYOUTS.get(self.spec.get("layout", ""))
        if want is None:
            raise MonolithError(f"variant {variant}: its layout {self.spec.get('layout')!r} is not an fp8 layout this "
                                f"engine packs ({sorted(FP8_LAYOUTS)})")
        if packed is not None:
            src = getattr(own, "meta", {}).get("source", {}).get("sha256") if own is not None else None
            pk = packed if isinstance(packed, pack_fp8.PackedFP8) else pack_fp8.load_packed_fp8(
                packed, model=None if own is not None else ckpt)
            if own is not None and pk.source_sha256 != src:
                raise MonolithError("the packed fp8 weights given and the checkpoint's own pack come from different sources")
            if own is None and isinstance(packed, pack_fp8.PackedFP8) and pk.source_sha256 != ckpt.sha256():
                raise MonolithError(f"the packed fp8 weights were made from another checkpoint (source sha256 "
                                    f"{pk.source_sha256[:12]}…, this checkpoint {ckpt.sha256()[:12]}…); re-pack them")
        elif own is not None:
            pk = own
        else:
            pk = pack_fp8.pack_in_memory(ckpt)
        pack_fp8.check_meta(pk.meta, str(pk.path or "in-memory fp8 pack"))
        if pk.meta["layout"] != want:
            raise MonolithError(f"variant {variant} reads fp8 layout {want!r}; the pack is {pk.meta['layout']!r}")
        if pk.meta["head"] != "fp8":
            raise MonolithError(f"variant {variant} reads an fp8 LM head; this pack keeps the head in "
                                f"{pk.meta['head']} (`--head {pk.meta['head']}`): no kernel variant reads that yet")
        if pk.num_layers != C.NUM_LAYERS:
            raise MonolithError(f"the kernel is compiled for {C.NUM_LAYERS} layers; the fp8 pack has {pk.num_layers}")
        for name, (shape, dtype) in pack_fp8._expected_shapes(C.NUM_LAYERS, "fp8").items():
            t = pk.tensors.get(name)
            if t is None or list(t.shape) != shape or str(t.dtype).removeprefix("torch.") != dtype:
                raise MonolithError(f"fp8 pack tensor {name}: expected {dtype} {shape}, got "
                                    f"{None if t is None else (str(t.dtype), list(t.shape))}")
        assert F.LAYER_BYTES == LAYER_ELEMS and F.NORM_LAYER_ELEMS == NORM_LAYER_ELEMS  # one row order for both
        return pk

    def _upload(self, ckpt, pack, dev: torch.device) -> None:
        from monolith.quant import fp8_layout as F

        pt = pack.tensors
        codes, scales = pt[F.T_LAYER_CODES], pt[F.T_LAYER_SCALES]
        if self.stream:  # the file's rowmajor-v1 rows, in the streaming schedule's order
            codes = stream_order_(codes.clone().view(-1), C.NUM_LAYERS)
            scales = stream_order_scales_(scales.clone())
        if self.spec.get("gemv") == "mma":  # the tensor-core rounds' chunk order (tc_swizzle_)
            codes = tc_swizzle_(codes, C.NUM_LAYERS)
        self.codes = codes.to(dev).contiguous().view(-1)
        self.row_scales = scales.to(dev).contiguous().view(-1)
        self.embed_codes = pt[F.T_EMBED_CODES].to(dev).contiguous()
        self.embed_scales = pt[F.T_EMBED_SCALES].to(dev).contiguous()
        self.norms = pt[F.T_NORMS].to(dev).contiguous().view(-1)
        self.final_norm = pt[F.T_FINAL_NORM].to(dev).contiguous()
        m = pack.meta
        self.weights = {"kind": "fp8-packed", "scheme": m["scheme"], "layout": m["layout"], "head": m["head"],
                        "packed": str(pack.path) if pack.path is not None else "in memory",
                        "source": m["source"].get("weights") or {"sha256": m["source"]["sha256"]}}

    @classmethod
    def weight_bytes(cls, num_layers: int = C.NUM_LAYERS) -> int:
        """The E4M3 codes + fp32 row scales of quant/fp8_layout.py (layers, LM head and embedding row)."""
        from monolith.quant import fp8_layout

        return fp8_layout.bytes_per_token(num_layers, "fp8")

    @classmethod
    def time_model_bytes(cls) -> dict:
        from monolith.quant import fp8_layout as F

        return {"bytes_layer": F.LAYER_BYTES + 4 * F.LAYER_SCALES + 2 * F.NORM_LAYER_ELEMS,
                "bytes_head": F.EMBED_BYTES + 4 * F.EMBED_SCALES}


# ==== nvfp4: E2M1 codes + E4M3 block scales + fp32 tensor scales (kernel WeightsNvfp4) ===========
# nvfp4 variants ("weights": "nvfp4") read quant/pack_nvfp4.py's packs of these layouts
NVFP4_LAYOUTS = {"nvfp4-rowmajor-v1": "nvfp4-rowmajor-v1"}


def stream_order_nvfp4(codes: torch.Tensor, bscales: torch.Tensor) -> torch.Tensor:
    """The nvfp4-rowmajor-v1 codes [n, LAYER_CODE_BYTES] and block scales [n, LAYER_BSCALE_BYTES]
    (quant/nvfp4_layout.py) in the streaming schedule's order, as the one uint8 buffer the kernel
    reads (StepParams::codes): every layer's codes, then every layer's block scales. The same row
    moves as stream_order_ makes for bf16/fp8: qkv rows grouped by KV head (codes rows of 512 B,
    scale rows of 64 B), O by the group's 256 columns ([8 groups][1024 rows][128 B] of codes,
    [8][1024][16 B] of scales); gate/up and down stay. The inputs are not modified."""
    from monolith.quant import nvfp4_layout as NL

    g, n = C.NUM_KV_HEADS, codes.shape[0]
    out = torch.empty(n * (NL.LAYER_CODE_BYTES + NL.LAYER_BSCALE_BYTES), dtype=torch.uint8)
    oc = out[:n * NL.LAYER_CODE_BYTES].view(n, NL.LAYER_CODE_BYTES)
    ob = out[n * NL.LAYER_CODE_BYTES:].view(n, NL.LAYER_BSCALE_BYTES)
    oc.copy_(codes)
    ob.copy_(bscales)
    for buf, offs, row_bytes in ((oc, NL.CODE_OFFSETS, NL.CODE_ROW_BYTES), (ob, NL.BSCALE_OFFSETS, NL.BSCALE_ROW_BYTES)):
        for i in range(n):
            qkv = buf[i, offs["qkv"]:offs["o"]].view(QKV_ROWS, row_bytes["qkv"])
            qkv.copy_(_group_qkv_rows(qkv.clone()))
            o = buf[i, offs["o"]:offs["gateup"]]
            o.copy_(o.clone().view(C.HIDDEN, g, row_bytes["o"] // g).permute(1, 0, 2).reshape(-1))
    return out


class Nvfp4Engine(MegakernelEngine):
    """nvfp4 variants (nvfp4-stream): all-NVFP4 layers and an FP8 LM head, from `packed` (a
    `monolith pack --format nvfp4` dir or file, or a PackedNVFP4 made from ckpt), else ckpt's own
    pack when ckpt is the dequantized nvfp4 checkpoint (its gate's oracle,
    quant/pack_nvfp4.dequantized_checkpoint), else ckpt packed in memory (minutes on a CPU: the
    block-scale search). Mixed packs (layout_version 2) are refused."""

    weight_format, kernel_weights = "nvfp4", "WeightsNvfp4"
    gate_oracle = "fp32 reference on the nvfp4 weights dequantized (quant/pack_nvfp4.py)"

    def _pack(self, ckpt, variant: str, packed):
        """The PackedNVFP4 the variant runs on. Refuses what the kernel cannot run: another layout,
        a mixed pack (layout_version 2), another layer count, a pack made from other weights than
        ckpt, an fp8 pack."""
        from monolith.quant import nvfp4_layout as NL
        from monolith.quant import pack_nvfp4

        own = getattr(ckpt, "packed", None)
        if own is not None and not isinstance(own, pack_nvfp4.PackedNVFP4):
            raise MonolithError(f"variant {variant} reads nvfp4 weights; the checkpoint given is another format's "
                                f"dequantized pack ({type(own).__name__}): use that format's variant")
        want = NVFP4_LAYOUTS.get(self.spec.get("layout", ""))
        if want is None:
            raise MonolithError(f"variant {variant}: its layout {self.spec.get('layout')!r} is not an nvfp4 layout this "
                                f"engine packs ({sorted(NVFP4_LAYOUTS)})")
        if packed is not None:
            if not isinstance(packed, pack_nvfp4.PackedNVFP4) and hasattr(packed, "meta"):
                raise MonolithError(f"variant {variant} reads nvfp4 weights; got a {type(packed).__name__}")
            pk = packed if isinstance(packed, pack_nvfp4.PackedNVFP4) else pack_nvfp4.load_packed_nvfp4(
                packed, model=None if own is not None else ckpt)
            src = own.source_sha256 if own is not None else ckpt.sha256()
            if pk.source_sha256 != src:
                raise MonolithError(f"the packed nvfp4 weights were made from another checkpoint (source sha256 "
                                    f"{pk.source_sha256[:12]}…, this checkpoint {src[:12]}…); re-pack them")
        elif own is not None:
            pk = own
        else:
            pk = pack_nvfp4.pack_in_memory(ckpt)
        where = str(pk.path or "in-memory nvfp4 pack")
        pack_nvfp4.check_meta(pk.meta, where)
        if pk.meta["layout"] != want:
            raise MonolithError(f"variant {variant} reads nvfp4 layout {want!r}; the pack is {pk.meta['layout']!r}")
        if pk.meta["layout_version"] != NL.LAYOUT_VERSION or pk.fp8_projections:
            raise MonolithError(
                f"{where}: a mixed pack (layout_version {pk.meta['layout_version']}, {len(pk.fp8_projections)} projections "
                f"kept FP8: kinds {(pk.meta.get('mixed') or {}).get('fp8_kinds')}); variant {variant} reads all-NVFP4 "
                f"packs (layout_version {NL.LAYOUT_VERSION}) only: no kernel variant reads mixed packs yet. Pack without "
                "--map / --fp8-kinds")
        if pk.num_layers != C.NUM_LAYERS:
            raise MonolithError(f"the kernel is compiled for {C.NUM_LAYERS} layers; the nvfp4 pack has {pk.num_layers}")
        for name, (shape, dtype) in pack_nvfp4._expected_shapes(C.NUM_LAYERS).items():
            t = pk.tensors.get(name)
            if t is None or list(t.shape) != shape or str(t.dtype).removeprefix("torch.") != dtype:
                raise MonolithError(f"nvfp4 pack tensor {name}: expected {dtype} {shape}, got "
                                    f"{None if t is None else (str(t.dtype), list(t.shape))}")
        # the kernel's element offsets, halved, are the codes' byte offsets (kernel/config.cuh)
        assert NL.LAYER_CODE_BYTES * 2 == LAYER_ELEMS and NL.NORM_LAYER_ELEMS == NORM_LAYER_ELEMS
        return pk

    def _upload(self, ckpt, pack, dev: torch.device) -> None:
        from monolith.quant import nvfp4_layout as NL

        pt = pack.tensors
        # codes then block scales, in the streaming order, one allocation (StepParams::codes);
        # the tensor scales are the kernel's row_scales (kernel/megakernel.cuh)
        self.codes = stream_order_nvfp4(pt[NL.T_LAYER_CODES], pt[NL.T_LAYER_BSCALES]).to(dev)
        self.row_scales = pt[NL.T_LAYER_TSCALES].to(dev).contiguous().view(-1)
        self.embed_codes = pt[NL.T_EMBED_CODES].to(dev).contiguous()
        self.embed_scales = pt[NL.T_EMBED_SCALES].to(dev).contiguous()
        self.norms = pt[NL.T_NORMS].to(dev).contiguous().view(-1)
        self.final_norm = pt[NL.T_FINAL_NORM].to(dev).contiguous()
        m = pack.meta
        self.weights = {"kind": "nvfp4-packed", "scheme": m["scheme"], "layout": m["layout"],
                        "layout_version": m["layout_version"], "head": m["head"],
                        "search": m["search"]["enabled"],
                        "packed": str(pack.path) if pack.path is not None else "in memory",
                        "source": m["source"].get("weights") or {"sha256": m["source"]["sha256"]}}

    @classmethod
    def weight_bytes(cls, num_layers: int = C.NUM_LAYERS) -> int:
        """All-NVFP4 layers (codes, block and tensor scales) + the FP8 LM head."""
        from monolith.quant import nvfp4_layout

        return nvfp4_layout.bytes_per_token(num_layers)

    @classmethod
    def time_model_bytes(cls) -> dict:
        from monolith.quant import nvfp4_layout as NL

        return {"bytes_layer": NL.LAYER_CODE_BYTES + NL.LAYER_BSCALE_BYTES + 4 * NL.TSCALE_SLOTS + 2 * NL.NORM_LAYER_ELEMS,
                "bytes_head": NL.EMBED_BYTES + 4 * NL.EMBED_SCALES}


# kernel/variants.json "weights" -> the engine class of that format
ENGINES: dict[str, type[MegakernelEngine]] = {c.weight_format: c for c in (Bf16Engine, Fp8Engine, Nvfp4Engine)}


def engine_class_for(weights: str) -> type[MegakernelEngine]:
    """The engine class of a weight format ("bf16", "fp8", "nvfp4")."""
    if weights not in ENGINES:
        raise MonolithError(f"weight format {weights!r} is not known to this engine; known: {sorted(ENGINES)}")
    return ENGINES[weights]


def engine_class(variant: str) -> type[MegakernelEngine]:
    """The engine class that runs `variant` (its kernel/variants.json "weights")."""
    return engine_class_for(variant_spec(variant).get("weights", "bf16"))


def megakernel_engine(ckpt, variant: str = "bf16-upstream", xray: bool = False, blocks: int | None = None,
                      timeout_s: float = 1.0, device: str = "cuda", packed=None) -> MegakernelEngine:
    """The factory behind MegakernelEngine(...): the variant's format class, constructed."""
    return engine_class(variant)(ckpt, variant=variant, xray=xray, blocks=blocks, timeout_s=timeout_s,
                                 device=device, packed=packed)


def _sm_clock_mhz() -> float | None:
    import subprocess

    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        return float(r.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
