"""FP8 (E4M3, one fp32 scale per output row) packer, loader and dequantizer (issue 12).

`monolith pack --format fp8 --model DIR --out DIR` writes <out>/model.fp8.safetensors in the
layout `rowmajor-v1` of quant/fp8_layout.py (read its docstring: it is the kernel's contract).

- `quantize_rows(w)` -> (codes uint8, scales fp32): the one quantizer (symmetric, per row,
  round to nearest even, clamp at +-448, zero rows and tiny rows never divide by zero).
- `dequantize_rows(codes, scales)`: fp32(e4m3) * scale, the numbers the kernel multiplies.
- `pack_fp8(model, out)`: vectorised torch on CPU, a few seconds for Qwen3-0.6B.
- `load_packed_fp8(dir, model=...)`: refuses an unknown format/scheme/layout/version and a
  source hash that differs from `model`'s model.safetensors.
- `dequantized_checkpoint(dir, model)`: a Checkpoint whose tensors are the dequantized fp32
  weights (norms exact in fp32): the fp8 gate's oracle and the fp8 side of the quality runs.
"""
from __future__ import annotations

import time
from datetime import UTC, datetime

import torch

from monolith import config as C
from monolith.checkpoint import WEIGHTS_FILE, Checkpoint, check_activation_bounds, load_checkpoint
from monolith.config import ModelShape
from monolith.errors import MonolithError
from monolith.quant import fp8_layout as L
from monolith.quant.packfile import (
    DequantizedPacked,
    Packed,
    check_fp8_rows,
    check_stored,
    dequantized_from,
    open_packed,
    write_packed,
)

_CHUNK_ROWS = 16_384  # fp32 temporaries of a chunk: 64 MB at K = 1024


# ---- the quantizer ----------------------------------------------------------------------------
def row_scales(w: torch.Tensor) -> torch.Tensor:
    """fp32 [rows]: amax / 448, 1.0 for an all-zero row, at least 2^-126 otherwise."""
    amax = w.float().abs().amax(dim=1)
    s = amax / L.E4M3_MAX
    s = torch.where(s < L.MIN_SCALE, torch.full_like(s, L.MIN_SCALE), s)
    return torch.where(amax == 0, torch.full_like(s, L.ZERO_ROW_SCALE), s)


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [rows, K] (bf16 or fp32, finite) -> codes uint8 [rows, K], scales fp32 [rows]."""
    if w.dim() != 2:
        raise MonolithError(f"quantize_rows needs a matrix, got shape {list(w.shape)}")
    codes = torch.empty(w.shape, dtype=torch.uint8)
    scales = torch.empty(w.shape[0], dtype=torch.float32)
    for r0 in range(0, w.shape[0], _CHUNK_ROWS):
        wf = w[r0:r0 + _CHUNK_ROWS].to(torch.float32, copy=True)  # a copy even for fp32 input: divided in place
        if not torch.isfinite(wf).all():
            bad = (~torch.isfinite(wf)).nonzero()[0].tolist()
            raise MonolithError(f"non-finite weight {wf[bad[0], bad[1]].item()} at row {r0 + bad[0]}, column {bad[1]}:"
                                " refusing to quantize")
        s = row_scales(wf)
        scales[r0:r0 + len(s)] = s
        codes[r0:r0 + len(s)] = encode_rows(wf, s, inplace=True)
    return codes, scales


def encode_rows(wf: torch.Tensor, scales: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """codes uint8 = e4m3_rn(clamp(wf / scale[row], -448, 448)) for fp32 `wf` [rows, K]. The
    explicit clamp saturates at +-448 whatever torch's own cast does past the range (older torch
    versions give NaN there)."""
    x = wf if inplace else wf.clone()
    return x.div_(scales[:, None]).clamp_(-L.E4M3_MAX, L.E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def dequantize_rows(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 [rows, K] = fp32(e4m3(code)) * scale[row] (one fp32 multiply per weight)."""
    return codes.view(torch.float8_e4m3fn).float() * scales.float()[:, None]


def e4m3_values() -> torch.Tensor:
    """fp32 [256]: the value of each code (NaN at 0x7F and 0xFF), through torch's float8 type."""
    return torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


# ---- packing ----------------------------------------------------------------------------------
def _layer_tensor(tensors: dict, i: int, suffix: str) -> torch.Tensor:
    return tensors[f"model.layers.{i}.{suffix}"]


def layer_rows(tensors: dict, i: int) -> dict[str, torch.Tensor]:
    """Layer i's segments as bf16 row blocks in stream order (the bf16 packer's order)."""
    t = lambda s: _layer_tensor(tensors, i, s)  # noqa: E731
    return {
        "qkv": torch.cat([t("self_attn.q_proj.weight"), t("self_attn.k_proj.weight"), t("self_attn.v_proj.weight")]),
        "o": t("self_attn.o_proj.weight"),
        "gateup": torch.stack([t("mlp.gate_proj.weight"), t("mlp.up_proj.weight")], dim=1).reshape(L.GATEUP_ROWS, C.HIDDEN),
        "down": t("mlp.down_proj.weight"),
    }


def format_map(num_layers: int, head: str) -> dict[str, dict]:
    """HF tensor name -> where and how it is stored (the metadata's `formats`)."""
    out: dict[str, dict] = {}
    if head == "fp8":
        out["model.embed_tokens.weight"] = {"format": L.SCHEME, "tensor": L.T_EMBED_CODES, "layer": None,
                                            "byte_offset": 0, "rows": C.VOCAB, "cols": C.HIDDEN,
                                            "row_stride_bytes": C.HIDDEN, "scale_tensor": L.T_EMBED_SCALES,
                                            "scale_offset": 0, "scale_stride": 1}
    else:
        out["model.embed_tokens.weight"] = {"format": "bf16", "tensor": L.T_EMBED_BF16, "layer": None,
                                            "offset": 0, "shape": [C.VOCAB, C.HIDDEN]}
    out["model.norm.weight"] = {"format": "bf16", "tensor": L.T_FINAL_NORM, "layer": None, "offset": 0,
                                "shape": [C.HIDDEN]}
    for i in range(num_layers):
        for suffix, (seg, row0, step, rows, cols) in L.PROJECTIONS.items():
            seg_k = L.SEGMENTS[seg][1]
            out[f"model.layers.{i}.{suffix}"] = {
                "format": L.SCHEME, "tensor": L.T_LAYER_CODES, "layer": i, "segment": seg,
                "byte_offset": L.BYTE_OFFSETS[seg] + row0 * seg_k, "rows": rows, "cols": cols,
                "row_stride_bytes": step * seg_k, "scale_tensor": L.T_LAYER_SCALES,
                "scale_offset": L.SCALE_OFFSETS[seg] + row0, "scale_stride": step}
        for suffix, (off, n) in L.NORM_FIELDS.items():
            out[f"model.layers.{i}.{suffix}"] = {"format": "bf16", "tensor": L.T_NORMS, "layer": i, "offset": off,
                                                 "shape": [n]}
    return out


def pack_tensors(tensors: dict[str, torch.Tensor], num_layers: int, head: str = "fp8",
                 progress: bool = False) -> dict[str, torch.Tensor]:
    """The packed tensors (no I/O): every projection and, with head='fp8', the embedding."""
    from rich.progress import Progress

    if head not in ("fp8", "bf16"):
        raise MonolithError(f"--head must be fp8 or bf16, got {head!r}")
    codes = torch.empty(num_layers, L.LAYER_BYTES, dtype=torch.uint8)
    scales = torch.empty(num_layers, L.LAYER_SCALES, dtype=torch.float32)
    norms = torch.empty(num_layers, L.NORM_LAYER_ELEMS, dtype=torch.bfloat16)
    out = {L.T_LAYER_CODES: codes, L.T_LAYER_SCALES: scales, L.T_NORMS: norms,
           L.T_FINAL_NORM: tensors["model.norm.weight"].to(torch.bfloat16).contiguous()}
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"pack fp8 ({num_layers} layers + {'fp8' if head == 'fp8' else 'bf16'} head)",
                            total=num_layers + 1)
        for i in range(num_layers):
            for seg, w in layer_rows(tensors, i).items():
                c, s = quantize_rows(w)
                b0, s0 = L.BYTE_OFFSETS[seg], L.SCALE_OFFSETS[seg]
                codes[i, b0:b0 + c.numel()] = c.reshape(-1)
                scales[i, s0:s0 + s.numel()] = s
            for suffix, (off, n) in L.NORM_FIELDS.items():
                norms[i, off:off + n] = _layer_tensor(tensors, i, suffix)
            bar.advance(task)
        emb = tensors["model.embed_tokens.weight"]
        if head == "fp8":
            out[L.T_EMBED_CODES], out[L.T_EMBED_SCALES] = quantize_rows(emb)
        else:
            out[L.T_EMBED_BF16] = emb.to(torch.bfloat16).contiguous()
        bar.advance(task)
    return out


def pack_fp8(model, out, *, head: str = "fp8", progress: bool = True) -> dict:
    """Pack checkpoint dir `model` into `out` (created; its model.fp8.safetensors replaced
    atomically). Returns the metadata written."""
    t0 = time.perf_counter()
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model, allow_reduced_depth=True)
    t_load = time.perf_counter() - t0
    packed = pack_tensors(ckpt.tensors, ckpt.shape.num_layers, head=head, progress=progress)
    t_pack = time.perf_counter() - t0 - t_load
    meta = _pack_meta(ckpt, packed, head, t_pack, t_load)
    write_packed(out, L, packed, meta)
    return meta


def pack_in_memory(model, *, head: str = "fp8", progress: bool = False) -> PackedFP8:
    """The pack `pack_fp8` would write, kept in memory (path None): what an fp8 kernel engine and
    its gate's oracle use when no packed file is given (packing takes seconds). Same tensors, same
    metadata, so `dequantized_checkpoint` and the engine treat it like a loaded file."""
    t0 = time.perf_counter()
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model, allow_reduced_depth=True)
    t_load = time.perf_counter() - t0
    packed = pack_tensors(ckpt.tensors, ckpt.shape.num_layers, head=head, progress=progress)
    meta = _pack_meta(ckpt, packed, head, time.perf_counter() - t0 - t_load, t_load)
    return PackedFP8(path=None, meta=meta, tensors=packed)


def _pack_meta(ckpt: Checkpoint, packed: dict[str, torch.Tensor], head: str, t_pack: float, t_load: float) -> dict:
    return {
        "format": L.FORMAT, "scheme": L.SCHEME, "layout": L.LAYOUT, "layout_version": L.LAYOUT_VERSION,
        "element": L.ELEMENT, "scale_dtype": L.SCALE_DTYPE, "rounding": "nearest-even after clamp to +-448",
        "symmetric": True, "head": head, "num_layers": ckpt.shape.num_layers,
        "source": {"sha256": ckpt.sha256(), "file": WEIGHTS_FILE, "path": str(ckpt.path),
                   "weights": ckpt.describe()},
        "config": ckpt.config,
        "tensors": {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)} for k, v in packed.items()},
        "formats": format_map(ckpt.shape.num_layers, head),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "pack_seconds": round(t_pack, 2), "load_seconds": round(t_load, 2),
    }


# ---- loading ----------------------------------------------------------------------------------
class PackedFP8(Packed):
    FILE = L.FILE

    def matrix(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes uint8 [rows, cols], scales fp32 [rows]) of an fp8 matrix, read through the
        format map (strided views into the packed buffers, no copy)."""
        return self.fp8_view(name, L.SCHEME)

    def dequantized(self, name: str) -> torch.Tensor:
        """fp32 value of any stored tensor: fp8 matrices dequantized, bf16 tensors widened (exact)."""
        f = self.meta["formats"][name]
        return dequantize_rows(*self.matrix(name)) if f["format"] == L.SCHEME else self.stored(f)

    def bytes_per_token(self) -> int:
        return L.bytes_per_token(self.num_layers, self.meta["head"])


def check_meta(meta: dict, where: str) -> None:
    """Refuse anything this code does not know how to read, one line per refusal."""
    known = {"format": L.FORMAT, "scheme": L.SCHEME, "layout": L.LAYOUT, "layout_version": L.LAYOUT_VERSION,
             "element": L.ELEMENT, "scale_dtype": L.SCALE_DTYPE}
    for key, want in known.items():
        got = meta.get(key, "<missing>")
        if got != want:
            raise MonolithError(f"{where}: {key} {got!r} is not known (this monolith reads {key} {want!r}); "
                                "re-pack with `monolith pack --format fp8`")
    if meta.get("head") not in ("fp8", "bf16"):
        raise MonolithError(f"{where}: head format {meta.get('head')!r} is not known (fp8 or bf16)")


def _expected_shapes(n: int, head: str) -> dict[str, tuple[list[int], str]]:
    out = {L.T_LAYER_CODES: ([n, L.LAYER_BYTES], "uint8"), L.T_LAYER_SCALES: ([n, L.LAYER_SCALES], "float32"),
           L.T_NORMS: ([n, L.NORM_LAYER_ELEMS], "bfloat16"), L.T_FINAL_NORM: ([C.HIDDEN], "bfloat16")}
    if head == "fp8":
        out[L.T_EMBED_CODES] = ([C.VOCAB, C.HIDDEN], "uint8")
        out[L.T_EMBED_SCALES] = ([C.VOCAB], "float32")
    else:
        out[L.T_EMBED_BF16] = ([C.VOCAB, C.HIDDEN], "bfloat16")
    return out


def load_packed_fp8(path, *, model=None) -> PackedFP8:
    """Read a packed dir (or its .safetensors file). With `model` (a checkpoint dir or a
    Checkpoint), refuse a pack made from different weights."""
    file, meta, tensors = open_packed(path, L, fmt="fp8", check_meta=check_meta, model=model,
                                      expected_shapes=lambda m: _expected_shapes(m["num_layers"], m["head"]))
    if meta.get("formats") != format_map(meta["num_layers"], meta["head"]):
        raise MonolithError(f"{file}: its per-matrix format map differs from layout {L.LAYOUT}'s")
    p = PackedFP8(path=file.parent, meta=meta, tensors=tensors)
    check_values(p, file)
    return p


def check_values(p: PackedFP8, where) -> None:
    """Every dequantized weight finite (no NaN code, no non-finite scale) and small enough that
    the activations stay in range (checkpoint.check_activation_bounds), before any engine runs."""
    maxabs = {}
    for name, f in p.meta["formats"].items():
        maxabs[name] = (check_fp8_rows(name, *p.matrix(name), where) if f["format"] == L.SCHEME
                        else check_stored(name, p.stored(f), where))
    check_activation_bounds(maxabs, ModelShape(num_layers=p.num_layers), where=str(where))


# ---- the fp8 oracle's weights -----------------------------------------------------------------
class DequantizedCheckpoint(DequantizedPacked):
    """The packed fp8 weights dequantized to fp32 as a Checkpoint (the fp8 gate's oracle; see
    quant/packfile.DequantizedPacked)."""

    def describe(self) -> dict:
        return self._describe("fp8-dequantized")


def dequantized_checkpoint(packed, model) -> DequantizedCheckpoint:
    """The fp8 model as a Checkpoint: config and tokenizer from `model` (whose hash must match
    the pack's source), tensors = the packed weights dequantized (fp32)."""
    return dequantized_from(packed, model, packed_cls=PackedFP8, load=load_packed_fp8,
                            ckpt_cls=DequantizedCheckpoint, fmt="fp8")


# ---- error statistics (NOTES.md numbers) ------------------------------------------------------
def error_stats(ckpt: Checkpoint, packed: PackedFP8, outlier_cols: list[int] | None = None) -> dict:
    """Per matrix type: relative MSE ||W - W_dq||^2 / ||W||^2 (over all layers), worst layer, the
    share of weights quantized to zero and in E4M3's subnormal range; with `outlier_cols` (input
    channels), the relative MSE on those columns and on the rest, separately."""
    names = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
             "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
             "down": "mlp.down_proj.weight"}
    out = {}
    groups = {t: [f"model.layers.{i}.{s}" for i in range(packed.num_layers)] for t, s in names.items()}
    if packed.meta["head"] == "fp8":
        groups["embed"] = ["model.embed_tokens.weight"]
    for t, tnames in groups.items():
        err = ref = zero = sub = n = 0.0
        per_layer = []
        oc = {"err_out": 0.0, "ref_out": 0.0, "err_in": 0.0, "ref_in": 0.0}
        for name in tnames:
            w = ckpt.tensors[name].float()
            codes, _ = packed.matrix(name)
            dq = packed.dequantized(name)
            e2 = (w - dq).square()
            e, r = float(e2.sum(dtype=torch.float64)), float(w.square().sum(dtype=torch.float64))
            per_layer.append(e / r)
            err, ref, n = err + e, ref + r, n + w.numel()
            exp_bits = (codes >> 3) & 0xF
            zero += float(((codes & 0x7F) == 0).sum() - (w == 0).sum())
            sub += float(((exp_bits == 0) & ((codes & 0x7) != 0)).sum())
            if outlier_cols is not None and t in ("q", "k", "v", "gate", "up"):
                m = torch.zeros(w.shape[1], dtype=torch.bool)
                m[outlier_cols] = True
                oc["err_out"] += float(e2[:, m].sum(dtype=torch.float64))
                oc["ref_out"] += float(w[:, m].square().sum(dtype=torch.float64))
                oc["err_in"] += float(e2[:, ~m].sum(dtype=torch.float64))
                oc["ref_in"] += float(w[:, ~m].square().sum(dtype=torch.float64))
        out[t] = {"rel_mse": err / ref, "rel_mse_worst_layer": max(per_layer), "flushed_to_zero_frac": zero / n,
                  "subnormal_frac": sub / n, "weights": int(n)}
        if oc["ref_out"]:
            out[t]["rel_mse_outlier_cols"] = oc["err_out"] / oc["ref_out"]
            out[t]["rel_mse_other_cols"] = oc["err_in"] / oc["ref_in"]
    return out
