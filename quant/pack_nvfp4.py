"""NVFP4 (E2M1 elements, one E4M3 scale per 16 weights, one fp32 scale per tensor) packer, loader
and dequantizer (issue 14, item 1). The LM head / embedding stays FP8 (quant/pack_fp8.py's).

`monolith pack --format nvfp4 --model DIR --out DIR` writes <out>/model.nvfp4.safetensors in the
layout `nvfp4-rowmajor-v1` of quant/nvfp4_layout.py (read its docstring: the kernel's contract).

- `quantize_matrix(w, search=True)` -> NVFP4Matrix (packed codes, block scales, tensor scale,
  and per-block error of the max-based and the stored scale): NVIDIA's recipe plus a per-block
  MSE search over nvfp4_layout.SEARCH_OFFSETS.
- `dequantize_matrix(codes, bscales, g)`: fl32(e2m1 * e4m3(s) * g), the numbers the kernel multiplies.
- `pack_nvfp4(model, out)`: vectorised torch on CPU (chunks of blocks, every candidate scale
  evaluated for every block at once).
- `load_packed_nvfp4(dir, model=...)`: refuses an unknown format/scheme/layout/version and a
  source hash that differs from `model`'s model.safetensors.
- `dequantized_checkpoint(dir, model)`: a Checkpoint of the dequantized fp32 weights (the oracle).
- Mixed packs (layout_version 2, nvfp4_layout's docstring): `pack_nvfp4(..., fp8=names)` keeps
  those projections FP8 (pack_fp8's quantizer, its rowmajor-v1 rows in `layers.fp8.*`);
  `check_fp8_names` refuses names that are not projections of the checkpoint; `fp8_names_for_kinds`
  turns `--fp8-kinds q,k` into names; the loader and `dequantized` read either format per matrix.
"""
from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import torch

from monolith import config as C
from monolith.checkpoint import WEIGHTS_FILE, Checkpoint, check_activation_bounds, load_checkpoint
from monolith.config import ModelShape
from monolith.errors import MonolithError
from monolith.quant import nvfp4_layout as L
from monolith.quant import pack_fp8 as P8
from monolith.quant.packfile import (
    DequantizedPacked,
    Packed,
    check_fp8_rows,
    check_stored,
    dequantized_from,
    e4m3_nan_at,
    open_packed,
    write_packed,
)

_CHUNK_BLOCKS = 1 << 18  # 4 M weights per chunk: ~16 MB per fp32 temporary, ~32 MB per float64 one

SEARCH_RULE = ("per block, the E4M3 block-scale code s_max + offset for offset in SEARCH_OFFSETS (clamped to "
               "0..0x7E), codes re-rounded for each candidate, error sum((w - w_dq)^2) in float64; the first "
               "strictly smallest wins (offset 0, the max-based scale, on ties)")


# ---- E2M1 -------------------------------------------------------------------------------------
def e2m1_values() -> torch.Tensor:
    """fp32 [16]: the value of each 4-bit code (8..15 are 0..7 negated; code 8 is -0)."""
    mag = torch.tensor(L.E2M1_MAGNITUDES, dtype=torch.float32)
    return torch.cat([mag, -mag])


# index int(2 * magnitude) (0..12) -> code 0..7 (only grid magnitudes are looked up)
_MAG2_TO_CODE = torch.zeros(13, dtype=torch.uint8)
for _c, _m in enumerate(L.E2M1_MAGNITUDES):
    _MAG2_TO_CODE[int(2 * _m)] = _c


def e2m1_round_magnitude(a: torch.Tensor) -> torch.Tensor:
    """Round |x| (fp32, >= 0, NaN-free) to the nearest E2M1 magnitude, ties to the even code,
    saturating at 6. The grid's step is 0.5 below 2, 1 in [2, 4), 2 in [4, 6]: dividing by the
    step is exact (a power of two, built from its exponent bits), and torch.round rounds half to
    even, which on each segment is the even code (a segment starts at an even code and each step
    adds one code; the boundaries 2 and 4 are grid points, never ties). Returns a new tensor."""
    a = a.clamp(max=L.E2M1_MAX)
    k = (a >= 2.0).to(torch.int32).add_((a >= 4.0).to(torch.int32))
    step = ((k + 126) << 23).view(torch.float32)          # 2^(k-1): 0.5, 1, 2
    return a.div_(step).round_().mul_(step)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """fp32 values (already divided by their scale) -> uint8 codes 0..15 (sign bit 8 from the
    sign of x, so -0.0 and small negatives give code 8)."""
    q = e2m1_round_magnitude(x.abs())
    code = _MAG2_TO_CODE[(q * 2).to(torch.int64)]
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., 2n] (0..15) -> bytes [..., n]: element 2j low nibble, 2j+1 high nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """bytes [..., n] -> codes [..., 2n] (inverse of pack_nibbles)."""
    out = torch.stack([packed & 0xF, packed >> 4], dim=-1)
    return out.reshape(*packed.shape[:-1], 2 * packed.shape[-1])


# ---- E4M3 block scales ------------------------------------------------------------------------
_E4M3 = P8.e4m3_values()  # fp32 [256], NaN at 0x7F/0xFF (never used: codes stay 0..0x7E)


def e4m3_code(x: torch.Tensor) -> torch.Tensor:
    """Positive fp32 -> E4M3 code 0..0x7E, round to nearest even, saturating at 448."""
    return x.clamp(max=L.E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def tensor_scale(w: torch.Tensor) -> float:
    """g = amax / (6 * 448) in fp32; 1.0 for an all-zero matrix; at least 2^-126 otherwise (no
    subnormal g, whose reciprocal a kernel could not hold)."""
    amax = w.abs().amax().float()
    if amax.item() == 0.0:
        return L.ZERO_TENSOR_SCALE
    g = amax / torch.tensor(L.E2M1_MAX * L.E4M3_MAX, dtype=torch.float32)
    return max(float(g), 2.0 ** -126)


# A candidate replaces the best so far only if its fp32-evaluated error is smaller by more than
# this factor: the fp32 evaluation (one rounding per difference and per square, a 16-term sum of
# non-negative terms) is within 20 * 2^-24 of the exact error, so a candidate that wins by more
# than 2^-18 is better in exact arithmetic too, and the stored scale is never worse than the
# max-based one (what tests/test_quant_nvfp4.py asserts in float64).
_WIN_MARGIN = 1.0 + 2.0 ** -18


def _block_candidate(aw: torch.Tensor, s: torch.Tensor, g: torch.Tensor):
    """For blocks aw = |w| [N, 16] and candidate scales s [N] (fp32 E4M3 values): the rounded
    magnitudes q and the dequantized magnitudes fl32(q * s * g); a scale of 0 gives all zeros."""
    d = s * g                                             # fl32(s * g)
    pos = d > 0
    q = e2m1_round_magnitude(aw / torch.where(pos, d, torch.ones_like(d))[:, None])
    q.mul_(pos[:, None])
    dq = (q * s[:, None]).mul_(g)                         # q * s exact, one rounding by g
    return q, dq


def block_errors(aw: torch.Tensor, dq: torch.Tensor) -> torch.Tensor:
    """float64 [N]: sum over each block of (|w| - |w_dq|)^2 (the sign always matches)."""
    return (aw.double() - dq.double()).square_().sum(1)


@dataclass
class NVFP4Matrix:
    codes: torch.Tensor      # uint8 [R, K/2] packed nibbles
    bscales: torch.Tensor    # uint8 [R, K/16] E4M3 block-scale codes
    g: float                 # fp32 tensor scale
    err_max: torch.Tensor    # float64 [R*K/16] block error with the max-based scale
    err: torch.Tensor        # float64 [R*K/16] block error with the stored scale
    offset: torch.Tensor     # int8 [R*K/16] stored code - max-based code


def quantize_matrix(w: torch.Tensor, *, search: bool = True, g: float | None = None,
                    offsets=L.SEARCH_OFFSETS) -> NVFP4Matrix:
    """w [R, K] (bf16 or fp32, finite, K % 16 == 0) -> NVFP4Matrix. search=False is NVIDIA's
    max-based recipe alone; `g` overrides the tensor scale (tests)."""
    if w.dim() != 2 or w.shape[1] % L.BLOCK:
        raise MonolithError(f"quantize_matrix needs a matrix with K % {L.BLOCK} == 0, got shape {list(w.shape)}")
    R, K = w.shape
    flat = w.reshape(-1, L.BLOCK)
    N = flat.shape[0]
    if g is None:
        if not torch.isfinite(w).all():
            bad = (~torch.isfinite(w)).nonzero()[0].tolist()
            raise MonolithError(f"non-finite weight {w[bad[0], bad[1]].item()} at row {bad[0]}, column {bad[1]}:"
                                " refusing to quantize")
        g = tensor_scale(w)
    gt = torch.tensor(g, dtype=torch.float32)
    codes = torch.empty(N, L.BLOCK, dtype=torch.uint8)
    bsc = torch.empty(N, dtype=torch.uint8)
    err_max = torch.empty(N, dtype=torch.float64)
    err_best = torch.empty(N, dtype=torch.float64)
    off_best = torch.zeros(N, dtype=torch.int8)
    offsets = tuple(offsets) if search else (0,)
    assert offsets[0] == 0, "the max-based scale is evaluated first (it wins ties)"
    for n0 in range(0, N, _CHUNK_BLOCKS):
        wb = flat[n0:n0 + _CHUNK_BLOCKS].to(torch.float32)
        if not torch.isfinite(wb).all():
            i = int((~torch.isfinite(wb)).any(1).nonzero()[0])
            blk = n0 + i
            raise MonolithError(f"non-finite weight in block {blk} (row {blk * L.BLOCK // K}): refusing to quantize")
        aw = wb.abs()
        c0 = e4m3_code((aw.amax(1) / L.E2M1_MAX) / gt).to(torch.int16)
        best_q = best_dq = best_c = best_e = None
        for off in offsets:
            c = (c0 + off).clamp(0, L.MAX_SCALE_CODE)
            q, dq = _block_candidate(aw, _E4M3[c.long()], gt)
            e = (aw - dq).square_().sum(1)                # fp32: see _WIN_MARGIN
            if best_q is None:
                best_q, best_dq, best_c, best_e = q, dq, c, e
                err_max[n0:n0 + len(e)] = block_errors(aw, dq)
                continue
            better = e * _WIN_MARGIN < best_e
            best_q = torch.where(better[:, None], q, best_q)
            best_dq = torch.where(better[:, None], dq, best_dq)
            best_c = torch.where(better, c, best_c)
            best_e = torch.where(better, e, best_e)
        err_best[n0:n0 + len(best_e)] = block_errors(aw, best_dq) if len(offsets) > 1 else err_max[n0:n0 + len(best_e)]
        mag = _MAG2_TO_CODE[(best_q * 2).to(torch.int64)]
        # sign bit from the weight (so -0.0 and negatives rounding to 0 keep it, like e2m1_encode),
        # except in a block whose scale is 0: stored as all +0
        neg = torch.signbit(wb) & (_E4M3[best_c.long()] > 0)[:, None]
        codes[n0:n0 + len(mag)] = mag | (neg.to(torch.uint8) << 3)
        bsc[n0:n0 + len(mag)] = best_c.to(torch.uint8)
        off_best[n0:n0 + len(mag)] = (best_c - c0).to(torch.int8)
    return NVFP4Matrix(codes=pack_nibbles(codes.view(R, K)), bscales=bsc.view(R, K // L.BLOCK), g=g,
                       err_max=err_max, err=err_best, offset=off_best)


def dequantize_matrix(codes: torch.Tensor, bscales: torch.Tensor, g: float) -> torch.Tensor:
    """fp32 [R, K] = fl32((e2m1(code) * e4m3(s_block)) * g) from packed codes [R, K/2] and block
    scales [R, K/16] (the inner product is exact: at most 6 significant bits)."""
    R = codes.shape[0]
    v = e2m1_values()[unpack_nibbles(codes).long()].view(R, -1, L.BLOCK)
    s = _E4M3[bscales.long()].view(R, -1, 1)
    return ((v * s) * torch.tensor(g, dtype=torch.float32)).view(R, -1)


# ---- the mixed map's names ---------------------------------------------------------------------
KINDS = L.TSCALE_ORDER           # q, k, v, o, gate, up, down


def projection_names(num_layers: int) -> list[str]:
    """Every projection's HF name, layer by layer in KINDS order."""
    return [f"model.layers.{i}.{L.SUFFIX_OF[t]}" for i in range(num_layers) for t in KINDS]


def kind_of(name: str) -> str:
    """'model.layers.3.mlp.down_proj.weight' -> 'down' (a projection name only)."""
    suffix = name.split(".", 3)[3]
    return next(t for t, s in L.SUFFIX_OF.items() if s == suffix)


def check_fp8_names(names, num_layers: int, where: str = "the map") -> tuple[str, ...]:
    """The sorted FP8 projection names, after refusing anything that is not a projection of this
    `num_layers`-layer checkpoint (a norm, the LM head, a layer past the last, a typo)."""
    known = set(projection_names(num_layers))
    out = set()
    for name in names:
        if name not in known:
            why = ("the LM head/embedding is FP8 in every nvfp4 pack (issue 14), not a map entry"
                   if name == "model.embed_tokens.weight" else
                   "norms stay bf16" if "norm" in name else
                   f"no projection of this {num_layers}-layer checkpoint has that name")
            raise MonolithError(f"{where} names {name!r}: {why}")
        out.add(name)
    return tuple(sorted(out))


def fp8_names_for_kinds(kinds, num_layers: int) -> tuple[str, ...]:
    """`--fp8-kinds q,k` -> those kinds' HF names in every layer; refuses an unknown kind."""
    items = kinds.split(",") if isinstance(kinds, str) else list(kinds)
    ks = [k.strip() for k in items if k and k.strip()]
    bad = [k for k in ks if k not in KINDS]
    if bad or not ks:
        raise MonolithError(f"--fp8-kinds {kinds!r}: kinds are {', '.join(KINDS)} (comma-separated)")
    return tuple(sorted(f"model.layers.{i}.{L.SUFFIX_OF[k]}" for i in range(num_layers) for k in ks))


def mixed_summary(fp8: tuple[str, ...], num_layers: int) -> dict:
    """The `mixed` metadata's derived fields: the kinds FP8 in every layer, and whether every layer
    has the same FP8 kinds (a per-kind map, what a kernel variant can be built for)."""
    by_layer = [frozenset(kind_of(n) for n in fp8 if n.startswith(f"model.layers.{i}.")) for i in range(num_layers)]
    return {"fp8": list(fp8), "fp8_kinds": [k for k in KINDS if all(k in s for s in by_layer)],
            "per_kind": len(set(by_layer)) <= 1, "fp8_layout": P8.L.LAYOUT, "fp8_scheme": P8.L.SCHEME,
            "fp8_tensors": [L.T_FP8_CODES, L.T_FP8_SCALES]}


def format_summary(meta: dict) -> dict:
    """The pack's format map, one line per projection kind (what results files and NOTES quote):
    kind -> "nvfp4", "fp8" or "mixed" (FP8 in some layers only), plus the embedding / LM head
    (always FP8) and the norms (bf16). Read from the metadata's `mixed` section (layout_version 2);
    layout_version 1 is every projection NVFP4."""
    fp8 = tuple((meta.get("mixed") or {}).get("fp8", ()))
    n = meta["num_layers"]
    per_kind = collections.Counter(kind_of(name) for name in fp8)
    kinds = {k: "nvfp4" if per_kind[k] == 0 else "fp8" if per_kind[k] == n else "mixed" for k in KINDS}
    return {"layers": kinds, "embedding_lm_head": P8.L.SCHEME, "norms": "bf16", "fp8_projections": len(fp8)}


# ---- packing ----------------------------------------------------------------------------------
def _fp8_entry(name: str, seg: str, row0: int, step: int, rows: int, cols: int, i: int) -> dict:
    """A layer FP8 projection's format-map entry (layout_version 2): fp8 rowmajor-v1's place, in the
    `layers.fp8.*` tensors."""
    seg_k = P8.L.SEGMENTS[seg][1]
    return {"format": P8.L.SCHEME, "tensor": L.T_FP8_CODES, "layer": i, "segment": seg,
            "byte_offset": P8.L.BYTE_OFFSETS[seg] + row0 * seg_k, "rows": rows, "cols": cols,
            "row_stride_bytes": step * seg_k, "scale_tensor": L.T_FP8_SCALES,
            "scale_offset": P8.L.SCALE_OFFSETS[seg] + row0, "scale_stride": step}


def format_map(num_layers: int, fp8=()) -> dict[str, dict]:
    """HF tensor name -> format and place (the metadata's `formats`). Every projection nvfp4 except
    those named in `fp8` (fp8 rowmajor-v1 rows in layers.fp8.*), the embedding/LM head fp8
    (fp8_layout's entry), norms bf16."""
    out: dict[str, dict] = {}
    fp8 = set(fp8)
    f8 = P8.format_map(num_layers, "fp8")
    out["model.embed_tokens.weight"] = f8["model.embed_tokens.weight"]
    out["model.norm.weight"] = f8["model.norm.weight"]
    for i in range(num_layers):
        for suffix, (seg, row0, step, rows, cols) in L.PROJECTIONS.items():
            name = f"model.layers.{i}.{suffix}"
            if name in fp8:
                out[name] = _fp8_entry(name, seg, row0, step, rows, cols, i)
                continue
            cb, sb = L.CODE_ROW_BYTES[seg], L.BSCALE_ROW_BYTES[seg]
            out[name] = {
                "format": L.SCHEME, "tensor": L.T_LAYER_CODES, "layer": i, "segment": seg,
                "byte_offset": L.CODE_OFFSETS[seg] + row0 * cb, "rows": rows, "cols": cols,
                "row_stride_bytes": step * cb,
                "bscale_tensor": L.T_LAYER_BSCALES, "bscale_offset": L.BSCALE_OFFSETS[seg] + row0 * sb,
                "bscale_row_stride": step * sb,
                "tscale_tensor": L.T_LAYER_TSCALES, "tscale_index": L.TSCALE_INDEX[suffix]}
        for suffix in L.NORM_FIELDS:
            name = f"model.layers.{i}.{suffix}"
            out[name] = f8[name]
    return out


def pack_tensors(tensors: dict, num_layers: int, *, search: bool = True, progress: bool = True,
                 stats: dict | None = None, fp8=()) -> dict[str, torch.Tensor]:
    """The packed safetensors dict of nvfp4-rowmajor-v1 (layout_version 2 when `fp8` names
    projections to keep FP8: their rows in layers.fp8.*, zeros and a 0.0 tensor scale in the nvfp4
    buffers). With `stats` (a dict), fills stats[HF name] = {"err_max": float, "err": float,
    "ref": float, "offsets": {offset: count}} for the nvfp4 matrices."""
    from rich.progress import Progress

    n = num_layers
    fp8 = set(check_fp8_names(fp8, n)) if fp8 else set()
    out = {L.T_LAYER_CODES: torch.zeros(n, L.LAYER_CODE_BYTES, dtype=torch.uint8),
           L.T_LAYER_BSCALES: torch.zeros(n, L.LAYER_BSCALE_BYTES, dtype=torch.uint8),
           L.T_LAYER_TSCALES: torch.ones(n, L.TSCALE_SLOTS, dtype=torch.float32),
           L.T_NORMS: torch.empty(n, L.NORM_LAYER_ELEMS, dtype=torch.bfloat16),
           L.T_FINAL_NORM: tensors["model.norm.weight"].to(torch.bfloat16).contiguous()}
    if fp8:
        out[L.T_FP8_CODES] = torch.zeros(n, P8.L.LAYER_BYTES, dtype=torch.uint8)
        out[L.T_FP8_SCALES] = torch.full((n, P8.L.LAYER_SCALES), L.ABSENT_SCALE, dtype=torch.float32)
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"pack nvfp4 ({n} layers x 7 matrices, {len(fp8)} of them fp8, + fp8 head)",
                            total=n * len(L.PROJECTIONS) + 1)
        for i in range(n):
            for suffix, (seg, row0, step, rows, _cols) in L.PROJECTIONS.items():
                name = f"model.layers.{i}.{suffix}"
                w = tensors[name]
                if name in fp8:  # pack_fp8's quantizer and rowmajor-v1 place (quantize_rows is per row)
                    k = P8.L.SEGMENTS[seg][1]
                    c, sc = P8.quantize_rows(w)
                    b0, s0 = P8.L.BYTE_OFFSETS[seg], P8.L.SCALE_OFFSETS[seg]
                    out[L.T_FP8_CODES][i, b0:b0 + P8.L.SEGMENTS[seg][0] * k].view(-1, k)[row0::step][:rows] = c
                    out[L.T_FP8_SCALES][i, s0:s0 + P8.L.SEGMENTS[seg][0]][row0::step][:rows] = sc
                    out[L.T_LAYER_TSCALES][i, L.TSCALE_INDEX[suffix]] = L.ABSENT_SCALE
                    bar.advance(task)
                    continue
                m = quantize_matrix(w, search=search)
                cb, sb = L.CODE_ROW_BYTES[seg], L.BSCALE_ROW_BYTES[seg]
                cseg = out[L.T_LAYER_CODES][i, L.CODE_OFFSETS[seg]:L.CODE_OFFSETS[seg] + L.SEGMENTS[seg][0] * cb]
                sseg = out[L.T_LAYER_BSCALES][i, L.BSCALE_OFFSETS[seg]:L.BSCALE_OFFSETS[seg] + L.SEGMENTS[seg][0] * sb]
                cseg.view(-1, cb)[row0::step][:rows] = m.codes
                sseg.view(-1, sb)[row0::step][:rows] = m.bscales
                out[L.T_LAYER_TSCALES][i, L.TSCALE_INDEX[suffix]] = m.g
                if stats is not None:
                    stats[name] = {"err_max": float(m.err_max.sum()), "err": float(m.err.sum()),
                                   "ref": float(w.double().square().sum()),
                                   "offsets": {int(k): int(v) for k, v in zip(*torch.unique(m.offset, return_counts=True),
                                                                              strict=True)}}
                bar.advance(task)
            for suffix, (off, k) in L.NORM_FIELDS.items():
                out[L.T_NORMS][i, off:off + k] = tensors[f"model.layers.{i}.{suffix}"]
        out[L.T_EMBED_CODES], out[L.T_EMBED_SCALES] = P8.quantize_rows(tensors["model.embed_tokens.weight"])
        bar.advance(task)
    return out


def _pack_meta(ckpt: Checkpoint, packed: dict, search: bool, t_pack: float, t_load: float, fp8=(),
               map_source: dict | None = None) -> dict:
    n = ckpt.shape.num_layers
    fp8 = check_fp8_names(fp8, n) if fp8 else ()
    meta = {
        "format": L.FORMAT, "scheme": L.SCHEME, "layout": L.LAYOUT,
        "layout_version": L.LAYOUT_VERSION_MIXED if fp8 else L.LAYOUT_VERSION,
        "element": L.ELEMENT, "block": L.BLOCK, "block_scale_dtype": L.BLOCK_SCALE_DTYPE,
        "tensor_scale_dtype": L.TENSOR_SCALE_DTYPE,
        "rounding": "nearest-even onto E2M1 after |w| / fl32(s * g), saturating at 6",
        "tensor_scale": "amax / (6 * 448)", "block_scale": "e4m3_rn(amax_block / 6 / g), then the search",
        "search": {"enabled": bool(search), "offsets": list(L.SEARCH_OFFSETS) if search else [0],
                   "unit": "E4M3 code steps from the max-based block scale", "rule": SEARCH_RULE},
        "head": "fp8", "num_layers": ckpt.shape.num_layers,
        "source": {"sha256": ckpt.sha256(), "file": WEIGHTS_FILE, "path": str(ckpt.path), "weights": ckpt.describe()},
        "config": ckpt.config,
        "tensors": {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)} for k, v in packed.items()},
        "formats": format_map(n, fp8),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "pack_seconds": round(t_pack, 2), "load_seconds": round(t_load, 2),
    }
    if fp8:
        meta["mixed"] = {**mixed_summary(fp8, n), "map": map_source or {"source": "given as names"}}
    return meta


def pack_nvfp4(model, out, *, search: bool = True, progress: bool = True, stats: dict | None = None, fp8=(),
               map_source: dict | None = None) -> dict:
    """Pack checkpoint dir (or Checkpoint) `model` into `out` (created; its model.nvfp4.safetensors
    replaced atomically). `fp8`: projections to keep FP8 (a mixed pack, layout_version 2);
    `map_source`: where that map came from (recorded in the metadata). Returns the metadata written."""
    t0 = time.perf_counter()
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model, allow_reduced_depth=True)
    t_load = time.perf_counter() - t0
    fp8 = check_fp8_names(fp8, ckpt.shape.num_layers) if fp8 else ()  # refused before any quantization
    packed = pack_tensors(ckpt.tensors, ckpt.shape.num_layers, search=search, progress=progress, stats=stats, fp8=fp8)
    meta = _pack_meta(ckpt, packed, search, time.perf_counter() - t0 - t_load, t_load, fp8, map_source)
    write_packed(out, L, packed, meta)
    return meta


def pack_in_memory(model, *, search: bool = True, progress: bool = False, fp8=(),
                   map_source: dict | None = None) -> PackedNVFP4:
    """What `pack_nvfp4` would write, kept in memory (path None)."""
    t0 = time.perf_counter()
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model, allow_reduced_depth=True)
    t_load = time.perf_counter() - t0
    fp8 = check_fp8_names(fp8, ckpt.shape.num_layers) if fp8 else ()
    packed = pack_tensors(ckpt.tensors, ckpt.shape.num_layers, search=search, progress=progress, fp8=fp8)
    meta = _pack_meta(ckpt, packed, search, time.perf_counter() - t0 - t_load, t_load, fp8, map_source)
    return PackedNVFP4(path=None, meta=meta, tensors=packed)


# ---- loading ----------------------------------------------------------------------------------
class PackedNVFP4(Packed):
    FILE = L.FILE

    def matrix(self, name: str) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(codes uint8 [rows, cols/2], block scales uint8 [rows, cols/16], tensor scale) of an
        nvfp4 matrix, through the format map (strided views, no copy)."""
        f = self.meta["formats"].get(name)
        if f is None or f["format"] != L.SCHEME:
            raise MonolithError(f"{name} is not an nvfp4 matrix in {self.path} (format {f and f['format']!r})")
        i = f["layer"]
        buf = self.tensors[f["tensor"]][i]
        codes = buf.as_strided((f["rows"], f["cols"] // 2), (f["row_stride_bytes"], 1),
                               buf.storage_offset() + f["byte_offset"])
        sbuf = self.tensors[f["bscale_tensor"]][i]
        bsc = sbuf.as_strided((f["rows"], f["cols"] // L.BLOCK), (f["bscale_row_stride"], 1),
                              sbuf.storage_offset() + f["bscale_offset"])
        g = float(self.tensors[f["tscale_tensor"]][i, f["tscale_index"]])
        return codes, bsc, g

    def fp8_matrix(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes uint8 [rows, cols], scales fp32 [rows]) of an fp8 matrix (the LM head, or a
        projection of a mixed pack), through the format map (strided views, no copy)."""
        return self.fp8_view(name, P8.L.SCHEME)

    @property
    def fp8_projections(self) -> tuple[str, ...]:
        """HF names of the projections kept FP8 (empty for an all-nvfp4 pack)."""
        return tuple((self.meta.get("mixed") or {}).get("fp8", ()))

    def dequantized(self, name: str) -> torch.Tensor:
        """fp32 value of any stored tensor: nvfp4 and fp8 matrices dequantized, bf16 widened."""
        f = self.meta["formats"][name]
        if f["format"] == L.SCHEME:
            return dequantize_matrix(*self.matrix(name))
        if f["format"] == P8.L.SCHEME:
            return P8.dequantize_rows(*self.fp8_matrix(name))
        return self.stored(f)

    def bytes_per_token(self) -> int:
        return L.bytes_per_token(self.num_layers, self.fp8_projections)


def check_meta(meta: dict, where: str) -> None:
    """Refuse anything this code does not know how to read, one line per refusal. layout_version 1
    (all nvfp4) or 2 (mixed: a `mixed` section naming the FP8 projections, checked here by name)."""
    known = {"format": L.FORMAT, "scheme": L.SCHEME, "layout": L.LAYOUT,
             "layout_version": (L.LAYOUT_VERSION, L.LAYOUT_VERSION_MIXED),
             "element": L.ELEMENT, "block": L.BLOCK, "block_scale_dtype": L.BLOCK_SCALE_DTYPE,
             "tensor_scale_dtype": L.TENSOR_SCALE_DTYPE, "head": "fp8"}
    for key, want in known.items():
        got = meta.get(key, "<missing>")
        if got not in (want if isinstance(want, tuple) else (want,)):
            raise MonolithError(f"{where}: {key} {got!r} is not known (this monolith reads {key} "
                                f"{' or '.join(map(repr, want)) if isinstance(want, tuple) else repr(want)}); "
                                "re-pack with `monolith pack --format nvfp4`")
    mixed = meta.get("mixed")
    if meta["layout_version"] == L.LAYOUT_VERSION:
        if mixed is not None:
            raise MonolithError(f"{where}: layout_version 1 with a 'mixed' section (mixed packs are version 2)")
        return
    if not isinstance(mixed, dict) or not isinstance(mixed.get("fp8"), list) or not mixed["fp8"]:
        raise MonolithError(f"{where}: layout_version 2 without a 'mixed' section naming its FP8 projections")
    n = meta.get("num_layers")
    check_fp8_names(mixed["fp8"], n if isinstance(n, int) else 0, where=f"{where}: its mixed map")
    if mixed.get("fp8_layout") != P8.L.LAYOUT or mixed.get("fp8_scheme") != P8.L.SCHEME:
        raise MonolithError(f"{where}: mixed section's fp8 layout/scheme {mixed.get('fp8_layout')!r}/"
                            f"{mixed.get('fp8_scheme')!r} is not known ({P8.L.LAYOUT}/{P8.L.SCHEME})")


def _expected_shapes(n: int, mixed: bool = False) -> dict[str, tuple[list[int], str]]:
    out = {L.T_LAYER_CODES: ([n, L.LAYER_CODE_BYTES], "uint8"),
           L.T_LAYER_BSCALES: ([n, L.LAYER_BSCALE_BYTES], "uint8"),
           L.T_LAYER_TSCALES: ([n, L.TSCALE_SLOTS], "float32"),
           L.T_NORMS: ([n, L.NORM_LAYER_ELEMS], "bfloat16"), L.T_FINAL_NORM: ([C.HIDDEN], "bfloat16"),
           L.T_EMBED_CODES: ([C.VOCAB, C.HIDDEN], "uint8"), L.T_EMBED_SCALES: ([C.VOCAB], "float32")}
    if mixed:
        out[L.T_FP8_CODES] = ([n, P8.L.LAYER_BYTES], "uint8")
        out[L.T_FP8_SCALES] = ([n, P8.L.LAYER_SCALES], "float32")
    return out


def _check_markers(p: PackedNVFP4, where) -> None:
    """A mixed pack's zero markers agree with its map: every FP8 projection has tensor scale 0.0 in
    layers.tscales, every nvfp4 projection has no non-zero fp8 row scale (one line per refusal)."""
    fp8 = set(p.fp8_projections)
    for name in projection_names(p.num_layers):
        f = p.meta["formats"][name]
        i, suffix = f["layer"], name.split(".", 3)[3]
        g = float(p.tensors[L.T_LAYER_TSCALES][i, L.TSCALE_INDEX[suffix]])
        if name in fp8 and g != L.ABSENT_SCALE:
            raise MonolithError(f"{where}: {name} is FP8 in the map but has nvfp4 tensor scale {g} (want 0.0)")
        if name not in fp8:
            seg, row0, step, rows, _ = L.PROJECTIONS[suffix]
            s0 = P8.L.SCALE_OFFSETS[seg]
            sc = p.tensors[L.T_FP8_SCALES][i, s0:s0 + P8.L.SEGMENTS[seg][0]][row0::step][:rows]
            if bool((sc != L.ABSENT_SCALE).any()):
                raise MonolithError(f"{where}: {name} is nvfp4 in the map but has fp8 row scales in {L.T_FP8_SCALES}")


def load_packed_nvfp4(path, *, model=None) -> PackedNVFP4:
    """Read a packed dir (or its .safetensors file): layout_version 1 (all nvfp4) or 2 (mixed).
    With `model` (a checkpoint dir or a Checkpoint), refuse a pack made from different weights."""
    file, meta, tensors = open_packed(path, L, fmt="nvfp4", check_meta=check_meta, model=model,
                                      expected_shapes=lambda m: _expected_shapes(m["num_layers"], "mixed" in m))
    fp8 = tuple((meta.get("mixed") or {}).get("fp8", ()))
    if meta.get("formats") != format_map(meta["num_layers"], fp8):
        raise MonolithError(f"{file}: its per-matrix format map differs from layout {L.LAYOUT}'s "
                            f"(layout_version {meta['layout_version']}, {len(fp8)} FP8 projections)")
    p = PackedNVFP4(path=file.parent, meta=meta, tensors=tensors)
    if fp8:
        _check_markers(p, file)
    check_values(p, file)
    return p


def check_values(p: PackedNVFP4, where) -> None:
    """Every dequantized weight finite (no E4M3 NaN block-scale code, no non-finite tensor or row
    scale; E2M1 has no NaN) and small enough that the activations stay in range
    (checkpoint.check_activation_bounds), before any engine runs."""
    maxabs = {}
    for name, f in p.meta["formats"].items():
        if f["format"] == L.SCHEME:
            codes, bsc, g = p.matrix(name)
            if not math.isfinite(g):
                raise MonolithError(f"{where}: {name} has a non-finite tensor scale {g}: the pack is corrupt")
            at = e4m3_nan_at(bsc)
            if at is not None:
                raise MonolithError(f"{where}: {name} holds the E4M3 NaN code 0x{int(bsc[at]):02X} in its block "
                                    f"scales at row {at[0]}, block {at[1]}: the pack is corrupt")
            # |E4M3| grows with the code's low 7 bits, so the largest of those gives the largest scale
            top = int((bsc & 0x7F).max()) if bsc.numel() else 0
            maxabs[name] = L.E2M1_MAX * float(_E4M3[top]) * abs(g)
        elif f["format"] == P8.L.SCHEME:
            maxabs[name] = check_fp8_rows(name, *p.fp8_matrix(name), where)
        else:
            maxabs[name] = check_stored(name, p.stored(f), where)
    check_activation_bounds(maxabs, ModelShape(num_layers=p.num_layers), where=str(where))


# ---- the nvfp4 oracle's weights ---------------------------------------------------------------
class DequantizedNVFP4Checkpoint(DequantizedPacked):
    """The packed nvfp4 (layers) / fp8 (LM head) weights dequantized to fp32 as a Checkpoint (the
    nvfp4 gate's oracle; see quant/packfile.DequantizedPacked)."""

    def describe(self) -> dict:
        m = self.packed.meta
        extra = {"layout_version": m["layout_version"], "format_map": format_summary(m)}
        if m.get("mixed"):
            extra["fp8_projections"] = len(m["mixed"]["fp8"])
            extra["fp8_kinds"] = m["mixed"]["fp8_kinds"]
        return self._describe("nvfp4-dequantized", search=m["search"]["enabled"], **extra)


def dequantized_checkpoint(packed, model) -> DequantizedNVFP4Checkpoint:
    return dequantized_from(packed, model, packed_cls=PackedNVFP4, load=load_packed_nvfp4,
                            ckpt_cls=DequantizedNVFP4Checkpoint, fmt="nvfp4")


# ---- error statistics -------------------------------------------------------------------------
def summarize_stats(stats: dict, num_layers: int) -> dict:
    """Per matrix type (q..down): relative MSE sum(err)/sum(W^2) with max-based scales and with
    the search, their ratio, and how often each search offset won."""
    out = {}
    for t, suffix in L.SUFFIX_OF.items():
        # a mixed pack's FP8 projections have no nvfp4 statistics; a kind that is FP8 everywhere is left out
        rows = [stats[nm] for i in range(num_layers) if (nm := f"model.layers.{i}.{suffix}") in stats]
        if not rows:
            continue
        em, e, r = (sum(x[k] for x in rows) for k in ("err_max", "err", "ref"))
        offs: dict[int, int] = {}
        for x in rows:
            for k, v in x["offsets"].items():
                offs[int(k)] = offs.get(int(k), 0) + v
        total = sum(offs.values())
        # an exact search (e == 0) has no finite gain: null, never Infinity (JSON has none)
        out[t] = {"rel_mse_max": em / r if r else 0.0, "rel_mse_search": e / r if r else 0.0,
                  "gain": em / e if e else (1.0 if em == 0 else None),
                  "offsets": {str(k): v / total for k, v in sorted(offs.items())}}
    return out
