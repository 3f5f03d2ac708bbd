"""What every packed weight file has in common, whatever its format (quant/pack_fp8.py,
quant/pack_nvfp4.py): the atomic write, reading and refusing the header, refusing a pack made
from other weights or holding a tensor of another shape, a pack's identity (digest), and the
Checkpoint of its dequantized weights (a gate's oracle). The formats supply only what differs:
their layout module (FILE, META_KEY, LAYOUT), their header check and their tensor shapes.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from monolith.checkpoint import WEIGHTS_FILE, Checkpoint, load_checkpoint, validate_config
from monolith.errors import MonolithError


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def read_meta(file: Path, key: str) -> dict:
    """The JSON object a packer wrote under `key` in the safetensors header; one clear line otherwise."""
    from safetensors import safe_open

    from monolith import jsonio

    try:
        with safe_open(str(file), framework="pt") as f:
            raw = (f.metadata() or {}).get(key)
    except Exception as e:  # noqa: BLE001  (any parse failure is the same user error)
        raise MonolithError(f"{file}: not a valid safetensors file ({e})") from e
    if raw is None:
        raise MonolithError(f"{file}: no '{key}' metadata: not a monolith packed file")
    return jsonio.expect(jsonio.loads(raw, f"{file}: '{key}' metadata"), dict, f"{file}: '{key}' metadata")


def check_fields(meta: dict, where) -> None:
    """The fields every packer writes and every reader indexes: objects, named when they are not."""
    from monolith import jsonio

    for k in ("source", "config", "formats"):
        jsonio.field(meta, k, dict, f"{where}: metadata")
    jsonio.field(meta["source"], "sha256", str, f"{where}: metadata: source")


def write_packed(out, layout, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """<out>/<layout.FILE> replaced atomically (written beside it, then renamed); `out` created."""
    from safetensors.torch import save_file

    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MonolithError(f"--out {out}: cannot be created ({e.strerror or e})") from None
    tmp = out / (layout.FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={layout.META_KEY: json.dumps(meta)})
    os.chmod(tmp, 0o644)
    tmp.replace(out / layout.FILE)


def open_packed(path, layout, *, fmt: str, check_meta: Callable[[dict, str], None],
                expected_shapes: Callable[[dict], dict[str, tuple[list[int], str]]],
                model=None) -> tuple[Path, dict, dict[str, torch.Tensor]]:
    """(file, meta, tensors) of a packed dir (or its .safetensors file) of format `fmt`, after the
    refusals every format shares: no file, a header `check_meta` refuses, a layer count that is not
    its config's, a source checkpoint other than `model`'s (a dir or a Checkpoint; None: not
    checked), a tensor set, shape or dtype other than `expected_shapes(meta)`."""
    from safetensors.torch import load_file

    path = Path(path)
    file = path / layout.FILE if path.is_dir() else path
    if not file.is_file():
        raise MonolithError(f"packed {fmt} weights not found: {file} (write them with "
                            f"`monolith pack --format {fmt} --model DIR --out DIR`)")
    meta = read_meta(file, layout.META_KEY)
    check_meta(meta, str(file))
    check_fields(meta, file)
    n = meta.get("num_layers")
    validate_config(meta.get("config") or {}, allow_reduced_depth=True)
    if not isinstance(n, int) or n != meta["config"].get("num_hidden_layers"):
        raise MonolithError(f"{file}: num_layers {n!r} does not match its config")
    if model is not None:
        if isinstance(model, Checkpoint):
            have, mpath = model.sha256(), model.path
        else:
            mpath = Path(model)
            if not (mpath / WEIGHTS_FILE).is_file():
                raise MonolithError(f"--model {mpath}: {WEIGHTS_FILE} not found")
            have = sha256_file(mpath / WEIGHTS_FILE)
        if have != meta["source"]["sha256"]:
            raise MonolithError(f"{file} was packed from a different checkpoint (source sha256 "
                                f"{meta['source']['sha256'][:12]}…, --model {mpath} has {have[:12]}…); re-pack it")
    tensors = load_file(str(file))
    want = expected_shapes(meta)
    if set(tensors) != set(want):
        raise MonolithError(f"{file}: tensors {sorted(tensors)} do not match layout {layout.LAYOUT} ({sorted(want)})")
    for k, (shape, dtype) in want.items():
        t = tensors[k]
        if list(t.shape) != shape or str(t.dtype).removeprefix("torch.") != dtype:
            raise MonolithError(f"{file}: tensor {k} is {str(t.dtype).removeprefix('torch.')} {list(t.shape)}, "
                                f"layout {layout.LAYOUT} needs {dtype} {shape}")
    return file, meta, tensors


E4M3_NAN_LOW7 = 0x7F  # E4M3 (fn) has no inf; S.1111.111 (0x7F, 0xFF) is NaN


def e4m3_nan_at(codes: torch.Tensor) -> tuple[int, ...] | None:
    """Index of the first E4M3 NaN code (0x7F or 0xFF) in a uint8 tensor, or None."""
    bad = (codes & 0x7F) == E4M3_NAN_LOW7
    if not bool(bad.any()):
        return None
    return tuple(int(i) for i in bad.nonzero()[0])


def first_non_finite(t: torch.Tensor) -> tuple[tuple[int, ...], float] | None:
    """(index, value) of the first NaN/Inf in a float tensor, or None."""
    bad = ~torch.isfinite(t)
    if not bool(bad.any()):
        return None
    idx = tuple(int(i) for i in bad.nonzero()[0])
    return idx, float(t[idx])


def check_fp8_rows(name: str, codes: torch.Tensor, scales: torch.Tensor, where) -> float:
    """An E4M3 matrix with one fp32 scale per row: refuses NaN codes and non-finite scales
    (naming matrix, row and column); returns the largest |dequantized value| it can hold."""
    bad = first_non_finite(scales)
    if bad is not None:
        raise MonolithError(f"{where}: {name} has a non-finite row scale {bad[1]} at row {bad[0][0]}: the pack is corrupt")
    at = e4m3_nan_at(codes)
    if at is not None:
        raise MonolithError(f"{where}: {name} holds the E4M3 NaN code 0x{int(codes[at]):02X} at row {at[0]}, "
                            f"column {at[1]}: the pack is corrupt")
    return 448.0 * float(scales.abs().max()) if scales.numel() else 0.0


def check_stored(name: str, t: torch.Tensor, where) -> float:
    """A tensor stored as is (bf16 norms, a bf16 head): finite; returns its largest magnitude."""
    bad = first_non_finite(t)
    if bad is not None:
        raise MonolithError(f"{where}: {name} has a non-finite value {bad[1]} at index {list(bad[0])}: "
                            "the pack is corrupt")
    return float(t.abs().max()) if t.numel() else 0.0


@dataclass
class Packed:
    """A pack in memory: read from `path`, or made by a packer's pack_in_memory (path None).
    A format's subclass names its FILE and reads its matrices (`dequantized`)."""
    path: Path | None
    meta: dict
    tensors: dict[str, torch.Tensor]
    FILE: ClassVar[str] = ""

    @property
    def num_layers(self) -> int:
        return int(self.meta["num_layers"])

    @property
    def source_sha256(self) -> str:
        return self.meta["source"]["sha256"]

    def dequantized(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def stored(self, f: dict) -> torch.Tensor:
        """fp32 value of a tensor the format map says is stored as is (norms: bf16, widened exactly)."""
        buf = self.tensors[f["tensor"]]
        buf = buf[f["layer"]] if f["layer"] is not None else buf
        n = 1
        for d in f["shape"]:
            n *= d
        return buf.reshape(-1)[f["offset"]:f["offset"] + n].reshape(f["shape"]).float()

    def fp8_view(self, name: str, scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes uint8 [rows, cols], scales fp32 [rows]) of a matrix the format map stores in the
        row-scaled fp8 scheme `scheme`, as strided views into the packed buffers (no copy): the fp8
        pack's matrices and the LM head / FP8 projections of an nvfp4 pack read through it."""
        f = self.meta["formats"].get(name)
        if f is None or f["format"] != scheme:
            raise MonolithError(f"{name} is not an fp8 matrix in {self.path} (format {f and f['format']!r})")
        buf = self.tensors[f["tensor"]]
        buf = buf[f["layer"]] if f["layer"] is not None else buf.reshape(-1)
        codes = buf.as_strided((f["rows"], f["cols"]), (f["row_stride_bytes"], 1),
                               buf.storage_offset() + f["byte_offset"])
        sbuf = self.tensors[f["scale_tensor"]]
        sbuf = sbuf[f["layer"]] if f["layer"] is not None else sbuf
        scales = sbuf.as_strided((f["rows"],), (f["scale_stride"],), sbuf.storage_offset() + f["scale_offset"])
        return codes, scales

    def dequantized_tensors(self) -> dict[str, torch.Tensor]:
        """Checkpoint-like dict: every HF tensor name -> fp32 (what the kernel computes with)."""
        return {name: self.dequantized(name) for name in self.meta["formats"]}

    def digest(self) -> str:
        """sha256 of the file, or for an in-memory pack of its tensors' bytes (name, dtype, shape and
        data of each, in name order): the identity results record for the packed weights."""
        if self.path is not None:
            return sha256_file(self.path / self.FILE)
        h = hashlib.sha256()
        for name in sorted(self.tensors):
            t = self.tensors[name].contiguous()
            h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().data)
        return h.hexdigest()


@dataclass
class DequantizedPacked(Checkpoint):
    """A Checkpoint whose tensors are a pack's weights dequantized to fp32. Engines that honour
    `weight_dtype` (the reference, and so the gate's oracle) keep them in fp32: rounding them to
    bf16 would compute a third model, neither the kernel's nor the original."""
    packed: Packed | None = None
    weight_dtype: torch.dtype = torch.float32
    source: dict = field(default_factory=dict)

    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = self.packed.digest()
        return self._sha256

    def _describe(self, kind: str, **extra) -> dict:
        m = self.packed.meta
        where = str(self.packed.path) if self.packed.path is not None else "in memory (packed from the source below)"
        return {"kind": kind, "path": where, "num_layers": self.shape.num_layers,
                "sha256": self.sha256(), "scheme": m["scheme"], "layout": m["layout"], "head": m["head"],
                **extra, "seed": self.source.get("seed"), "recipe": self.source.get("recipe"),
                "source": self.source}


def dequantized_from(packed, model, *, packed_cls: type[Packed], load: Callable, ckpt_cls: type[DequantizedPacked],
                     fmt: str) -> DequantizedPacked:
    """The packed model as a Checkpoint: config and tokenizer from `model` (whose hash must match
    the pack's source), tensors = the packed weights dequantized (fp32). `packed`: a pack in memory
    or a path for `load(path, model=...)`."""
    src = model if isinstance(model, Checkpoint) else load_checkpoint(model, allow_reduced_depth=True)
    pk = packed if isinstance(packed, packed_cls) else load(packed, model=src)
    if isinstance(packed, packed_cls) and pk.source_sha256 != src.sha256():
        raise MonolithError(f"{pk.path or f'the in-memory {fmt} pack'} was packed from a different checkpoint "
                            f"than {src.path}; re-pack it")
    return ckpt_cls(path=src.path, shape=src.shape, config=src.config, tensors=pk.dequantized_tensors(),
                    tokenizer_path=src.tokenizer_path, packed=pk, source=src.describe())
