"""NVFP4 sensitivity sweep and the mixed NVFP4/FP8 map it proposes (issue 14, item 2).

`monolith pack --sensitivity --model DIR --out FILE.json [--device cuda|cpu] [--per-layer] ...`

What one unit of the sweep is
-----------------------------
- Default, per kind: one unit = one projection kind (q, k, v, o, gate, up, down) in every layer at
  once, 7 units. `--per-layer`: one unit = one (layer, kind) matrix, 7 x 28 = 196 units.
- Why per kind by default: GPU time. Each unit is a full pass of the fp32 reference (the one
  engine that can run an arbitrary checkpoint of dequantized weights), 2,452 steps at the default
  protocol (1,024 KL positions + 20 prompts of ~40 tokens + 31 teacher-forced tokens each), ~16 s
  at ~6.5 ms per CUDA-graph step on an H200. 7 units + 4 endpoints + the reference are 12 passes,
  ~3.2 min of steps (~4-5 min with engine builds and packing), inside one device call. 196 units
  are ~53 min: several sessions' worth of device time for a finer map that a kernel would also
  have to support (a per-kind map is one kernel variant: the same formats in every layer).

What a unit's checkpoint is
---------------------------
The unit's matrices NVFP4-quantized and dequantized (pack_nvfp4's numbers, block-scale search on
unless `--no-search`), in fp32; every other tensor the original bf16 weights, the LM head
included. `reference-fp32` runs it: fp32 compute, so the figure is the quantizer's alone (no
kernel, no bf16 rounding of the dequantized values). Endpoints measured the same way, for scale:
`head-fp8` (only the tied embedding/LM head FP8: the floor under every nvfp4 pack, whose head is
always FP8), `all-fp8` (pack_fp8's weights), `all-nvfp4` (pack_nvfp4's, head FP8) and `mixed`
(the proposed map, packed as `monolith pack --format nvfp4 --map FILE.json` would pack it: the
additive prediction below checked by a measurement).

The reference runs once
-----------------------
`reference-fp32` on the original bf16 weights runs one pass (`reference_pass`); its logits at the
scored positions and its greedy sequences are kept in memory (on the device: 1,024 x 151,936 fp32
logits are 622 MB) and every unit is compared with them (`measure`). The figures are the ones
eval/quality.py's `perplexity_kl` and `agreement` (teacher-forced, no free run) give for the same
engine pair; its functions do the arithmetic (`windows`, `nll`, `kl`), and a CPU test checks the
equality. Windows are fed only up to their last scored position (the model is causal, so the
logits are the same), which makes the KL slice cost exactly `positions` steps.

- KL: mean KL(reference || unit) of the next-token distribution over the first `positions` scored
  positions of WikiText-2 raw test, windows of `context` tokens (stride = context: disjoint).
- Agreement: the reference decodes `agree_tokens` greedy tokens after each of the first `prompts`
  quality prompts; the unit is teacher-forced on that sequence; argmax match rate.
- Perplexity ratio on the same slice comes for free from the same logits and is recorded.

The proposed map
----------------
Units ranked by KL, largest first. The walk goes down the ranking and keeps each unit FP8 unless
- the KL budget is already met: the predicted KL of the units left NVFP4 (the sum of their single-unit
  KLs: an additive model that ignores interactions and the FP8 head) is at or below `kl_budget`
  (default `fp8`: the all-FP8 endpoint's measured KL, i.e. NVFP4 may add at most what FP8 costs in
  all; a number in nats, or `none`): the walk stops; or
- the unit would take the FP8 share of the layers' weights past `fp8_fraction` (default 0.25): it
  stays NVFP4 (`skipped_for_fraction`) and the walk goes on with the next, smaller units. So every
  FP8 unit is more sensitive than every NVFP4 unit that would have fitted beside it.
  Why 0.25: every FP8 weight costs 1 + 4/K bytes instead of 0.5625, so 25 % FP8 gives back a quarter
  of what NVFP4 saves over FP8 (404.0 -> ~452 MB per token at 28 layers, the LM head unchanged),
  and in per-kind units it holds one MLP kind (20 % of the weights each), or two attention kinds
  other than q with o (q and o 13.3 %, k and v 6.7 % each). On weights as sensitive as synth-seed0
  (FP8 alone: KL 1.43) the cap decides; on a trained checkpoint the budget may stop earlier.
The LM head stays FP8 always (it is not a unit). `stopped_by` says which rule ended the walk; the
`mixed` endpoint is the map measured.

Output
------
JSON, schema `monolith-nvfp4-sensitivity/1`: `weights` (path, sha256), `protocol`, `reference`,
`units` (each: kind, layers, weights, kl, ppl_ratio, agreement, rel_mse, rank, format), `endpoints`,
`map` (`formats`: every projection's HF name -> fp8 | nvfp4, what `monolith pack --map` reads;
`fp8`, `fp8_units`, `ranking`, the rule, budget, prediction, bytes per token), `seconds`, `status`
(`partial` while units are still running: the file is rewritten after each unit, so a run cut by
a time limit still leaves its measured units). A PNG beside it (`plot`): per-unit KL bars on a log
scale with the FP8 units highlighted and the endpoints as lines, agreement below.
"""
from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch

from monolith.checkpoint import Checkpoint
from monolith.errors import MonolithError
from monolith.figures import pyplot, save_png
from monolith.quant import fp8_layout as F8
from monolith.quant import nvfp4_layout as L

SCHEMA = "monolith-nvfp4-sensitivity/1"
ENGINE = "reference-fp32"
POSITIONS = 1024
CONTEXT = 512
PROMPTS = 20
AGREE_TOKENS = 32
FP8_FRACTION = 0.25
KL_BUDGET = "fp8"
KINDS = L.TSCALE_ORDER
EMBED = "model.embed_tokens.weight"
ENDPOINTS = ("head-fp8", "all-fp8", "all-nvfp4", "mixed")
STEP_MS_H200 = 6.5   # reference-fp32 (CUDA graph) per step on the H200, the estimate's unit (NOTES.md, M3)
MAP_RULE = ("walk the units by single-unit KL, largest first: stop once the predicted KL of the units left NVFP4 "
            "(sum of their single-unit KLs) is <= kl_budget; a unit that would take the FP8 share of the layers' "
            "weights past fp8_fraction stays NVFP4 and the walk goes on; every other unit stays FP8; the LM head is "
            "FP8 always")


# ---- units ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    name: str                 # "q" (per kind) or "L3.q" (per layer)
    kind: str
    layers: tuple[int, ...]

    def matrices(self) -> list[str]:
        return [f"model.layers.{i}.{L.SUFFIX_OF[self.kind]}" for i in self.layers]

    def weights(self) -> int:
        _seg, _r0, _step, rows, cols = L.PROJECTIONS[L.SUFFIX_OF[self.kind]]
        return rows * cols * len(self.layers)


def sweep_units(num_layers: int, per_layer: bool = False) -> list[Unit]:
    """Per kind (7 units, each in every layer) or per (layer, kind) (7 x num_layers), in the order
    the sweep runs and the plot draws them."""
    if per_layer:
        return [Unit(f"L{i}.{k}", k, (i,)) for i in range(num_layers) for k in KINDS]
    return [Unit(k, k, tuple(range(num_layers))) for k in KINDS]


@dataclass
class SweepCheckpoint(Checkpoint):
    """The original checkpoint with some tensors replaced by dequantized fp32 values. Engines that
    honour `weight_dtype` (reference-fp32) keep everything in fp32: the bf16 originals widen exactly,
    so only the replaced tensors differ from the reference's weights."""
    weight_dtype: torch.dtype = torch.float32
    label: str = ""
    replaced: tuple[str, ...] = ()
    base: dict = field(default_factory=dict)

    def sha256(self) -> str:
        """An identity, not a file's hash: the source's sha256, the label and the replaced names."""
        if self._sha256 is None:
            h = hashlib.sha256(f"{self.base.get('sha256')}:{self.label}:{','.join(self.replaced)}".encode())
            self._sha256 = h.hexdigest()
        return self._sha256

    def describe(self) -> dict:
        return {"kind": "nvfp4-sensitivity-unit", "label": self.label, "replaced": len(self.replaced),
                "sha256": self.sha256(), "num_layers": self.shape.num_layers, "source": self.base}


def unit_checkpoint(ckpt: Checkpoint, replacements: dict[str, torch.Tensor], label: str) -> SweepCheckpoint:
    """`ckpt` with `replacements` (HF name -> fp32 tensor of the same shape) swapped in; the other
    tensors are the original objects (no copy)."""
    for name, t in replacements.items():
        if name not in ckpt.tensors or tuple(t.shape) != tuple(ckpt.tensors[name].shape):
            raise MonolithError(f"unit {label}: {name} is not a tensor of this checkpoint with shape {list(t.shape)}")
    tensors = dict(ckpt.tensors)
    tensors.update({k: v.float() for k, v in replacements.items()})
    return SweepCheckpoint(path=ckpt.path, shape=ckpt.shape, config=ckpt.config, tensors=tensors,
                           tokenizer_path=ckpt.tokenizer_path, label=label, replaced=tuple(sorted(replacements)),
                           base=ckpt.describe())


# ---- the reference, once ----------------------------------------------------------------------
@dataclass
class ReferencePass:
    """What every unit is compared with: per window the tokens fed, the first scored row, the
    targets and the reference's logits of the scored rows; per prompt the greedy sequence."""
    windows: list[tuple[list[int], int, torch.Tensor, torch.Tensor]]
    nll_sum: float
    positions: int
    prompts: list[list[int]]
    sequences: list[list[int]]
    agree_tokens: int
    steps: int
    seconds: float
    engine: str = ENGINE
    info: dict = field(default_factory=dict)

    @property
    def ppl(self) -> float:
        return _exp(self.nll_sum / max(self.positions, 1))

    def steps_per_pass(self) -> int:
        """Engine steps one unit costs (the same as the reference's pass)."""
        return self.steps


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def plan_windows(n_tokens: int, context: int, stride: int, positions: int) -> list[tuple[int, int, int]]:
    """(start, first, stop) per window: eval/quality.py's windows and scored slice (perplexity_kl_many
    with max_positions = kl_positions = positions); rows first..stop-1 of window tokens[start:start+stop]
    are scored. Only tokens[start:start+stop] need to be fed."""
    from monolith.eval import quality

    out, count = [], 0
    for start, end, first in quality.windows(n_tokens, context, stride):
        stop = min(end - start - 1, first + positions - count)
        if stop - first <= 0:
            break
        out.append((start, first, stop))
        count += stop - first
        if count >= positions:
            break
    return out


@torch.inference_mode()
def reference_pass(ref, text_tokens: list[int], prompts: list[list[int]], *, positions: int = POSITIONS,
                   context: int = CONTEXT, stride: int | None = None, agree_tokens: int = AGREE_TOKENS,
                   progress: Callable[[int], None] | None = None) -> ReferencePass:
    """Run the reference once over the KL slice and the agreement prompts; keep what `measure` needs."""
    from monolith.eval import quality

    t0 = time.perf_counter()
    wins, nll_sum, count, steps = [], 0.0, 0, 0
    for start, first, stop in plan_windows(len(text_tokens), context, stride or context, positions):
        feed = text_tokens[start:start + stop]
        ref.reset()
        lr = ref.logits(feed)[first:stop]
        tgt = torch.as_tensor(text_tokens[start + first + 1:start + stop + 1], dtype=torch.long, device=lr.device)
        nll_sum += float(quality.nll(lr, tgt).sum())
        wins.append((feed, first, tgt, lr))
        count += stop - first
        steps += len(feed)
        if progress:
            progress(len(feed))
    seqs = []
    for p in prompts:
        ref.reset()
        f = ref.prefill(p)
        seqs.append([f, *ref.decode(f, agree_tokens - 1).tolist()])
        steps += len(p) + agree_tokens - 1
        if progress:
            progress(len(p) + agree_tokens - 1)
    return ReferencePass(windows=wins, nll_sum=nll_sum, positions=count, prompts=[list(p) for p in prompts],
                         sequences=seqs, agree_tokens=agree_tokens, steps=steps, seconds=time.perf_counter() - t0,
                         engine=getattr(ref, "name", ENGINE), info=dict(getattr(ref, "info", {}) or {}))


@torch.inference_mode()
def measure(engine, rp: ReferencePass, progress: Callable[[int], None] | None = None) -> dict:
    """KL, perplexity ratio and greedy agreement of `engine` against the cached reference pass."""
    from monolith.eval import quality

    t0 = time.perf_counter()
    nll_sum = kl_sum = 0.0
    for feed, first, tgt, lr in rp.windows:
        engine.reset()
        le = engine.logits(feed)[first:]
        nll_sum += float(quality.nll(le, tgt.to(le.device)).sum())
        kl_sum += float(quality.kl(lr, le.to(lr.device)).sum())
        del le
        if progress:
            progress(len(feed))
    match = total = 0
    for p, seq in zip(rp.prompts, rp.sequences, strict=True):
        engine.reset()
        g = engine.prefill(p)
        preds = [g, *engine.teacher_forced(seq[:-1]).tolist()]
        match += sum(int(a == b) for a, b in zip(preds, seq, strict=False))
        total += len(seq)
        if progress:
            progress(len(p) + len(seq) - 1)
    n = max(rp.positions, 1)
    return {"kl": kl_sum / n, "kl_positions": rp.positions, "ppl": _exp(nll_sum / n),
            "ppl_ratio": _exp((nll_sum - rp.nll_sum) / n),
            "agreement": match / total if total else None, "agreement_tokens": total,
            "seconds": round(time.perf_counter() - t0, 2)}


# ---- the map ----------------------------------------------------------------------------------
def resolve_kl_budget(spec, endpoints: dict) -> tuple[float | None, str]:
    """`fp8` (the all-fp8 endpoint's KL), `none`, or a number of nats -> (budget, how it was set)."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "none"):
        return None, "none (only the fp8 fraction cap)"
    if isinstance(spec, str) and spec.strip().lower() == "fp8":
        kl = (endpoints.get("all-fp8") or {}).get("kl")
        if kl is None:
            raise MonolithError("--kl-budget fp8 needs the all-fp8 endpoint's KL")
        return float(kl), "fp8: the all-FP8 endpoint's measured KL"
    try:
        v = float(spec)
    except (TypeError, ValueError):
        raise MonolithError(f"--kl-budget {spec!r}: give nats (a number >= 0), 'fp8' or 'none'") from None
    if not v >= 0:
        raise MonolithError(f"--kl-budget {spec!r}: give nats (a number >= 0), 'fp8' or 'none'")
    return v, f"{v:g} nats (given)"


def propose_map(units: list[dict], num_layers: int, *, fp8_fraction: float = FP8_FRACTION,
                kl_budget: float | None = None, kl_budget_rule: str = "") -> dict:
    """units: the sweep's per-unit results (name, kind, layers, weights, kl). The map (module
    docstring): which units stay FP8 and every projection's format."""
    from monolith.quant.pack_nvfp4 import projection_names

    if not 0.0 <= fp8_fraction <= 1.0:
        raise MonolithError(f"--fp8-fraction {fp8_fraction}: a share of the layers' weights, 0..1")
    names = projection_names(num_layers)
    covered = sorted(m for u in units for m in _unit_of(u).matrices())
    if covered != sorted(names):
        raise MonolithError(f"the units cover {len(covered)} matrices, not the {len(names)} projections once each")
    total = sum(u["weights"] for u in units)
    ranked = sorted(units, key=lambda u: (-u["kl"], u["name"]))
    left_kl = sum(u["kl"] for u in units)
    fp8_units, skipped, w = [], [], 0
    budget_met = False
    for u in ranked:
        if kl_budget is not None and left_kl <= kl_budget:
            budget_met = True
            break
        if w + u["weights"] > fp8_fraction * total * (1 + 1e-12):
            skipped.append(u["name"])
            continue
        fp8_units.append(u["name"])
        w += u["weights"]
        left_kl -= u["kl"]
    stopped_by = "kl_budget" if budget_met else "fp8_fraction" if skipped else "every unit is FP8"
    fp8 = sorted(m for u in units if u["name"] in fp8_units for m in _unit_of(u).matrices())
    formats = {n: ("fp8" if n in set(fp8) else "nvfp4") for n in names}
    return {"formats": formats, "fp8": fp8, "fp8_units": fp8_units,
            "nvfp4_units": [u["name"] for u in ranked if u["name"] not in fp8_units],
            "skipped_for_fraction": skipped,
            "ranking": [u["name"] for u in ranked], "head": "fp8",
            "fp8_weight_fraction": w / total if total else 0.0, "fp8_fraction": fp8_fraction,
            "kl_budget": kl_budget, "kl_budget_rule": kl_budget_rule, "stopped_by": stopped_by,
            "predicted_kl": sum(u["kl"] for u in units if u["name"] not in fp8_units),
            "prediction": "sum of the single-unit KLs of the units left NVFP4 (additive; interactions and the "
                          "FP8 head ignored): endpoints.mixed is the measurement",
            "rule": MAP_RULE,
            "bytes_per_token": L.bytes_per_token(num_layers, fp8),
            "bytes_per_token_all_nvfp4": L.bytes_per_token(num_layers),
            "bytes_per_token_all_fp8": F8.bytes_per_token(num_layers)}


def _unit_of(u: dict) -> Unit:
    return Unit(u["name"], u["kind"], tuple(u["layers"]))


# ---- reading a map for `monolith pack --map` --------------------------------------------------
_FORMAT_NAMES = {"fp8": "fp8", F8.SCHEME: "fp8", "nvfp4": "nvfp4", L.SCHEME: "nvfp4"}


def load_map(path, ckpt: Checkpoint) -> tuple[tuple[str, ...], dict]:
    """(FP8 projection names, where the map came from) of a map file: this module's JSON (its
    `map.formats`; refused if partial or measured on other weights) or a plain {"formats": {HF
    name: fp8 | nvfp4}} (names left out are nvfp4). Refuses an unknown format, a name that is no
    projection of `ckpt`, and the LM head as anything but fp8 (one line each)."""
    from monolith import jsonio
    from monolith.quant.pack_nvfp4 import check_fp8_names

    path = Path(path)
    what = f"--map {path}"
    if not path.exists() and not path.is_symlink():
        raise MonolithError(f"--map {path}: file not found (write one with `monolith pack --sensitivity`)")
    raw = jsonio.read_bytes(path, what)
    doc = jsonio.loads(raw, what)
    src = {"path": str(path), "sha256": hashlib.sha256(raw).hexdigest()}
    if not isinstance(doc, dict):
        raise MonolithError(f"--map {path}: a JSON object with 'formats' or a {SCHEMA} file")
    if doc.get("schema") == SCHEMA:
        if doc.get("status") != "complete":
            raise MonolithError(f"--map {path}: the sweep is {doc.get('status')!r}, not complete: no map to read")
        weights = jsonio.expect(doc.get("weights") or {}, dict, f"{what}: 'weights'")
        have = weights.get("sha256")
        if have != ckpt.sha256():
            raise MonolithError(f"--map {path} was measured on other weights (sha256 {str(have)[:12]}…, --model has "
                                f"{ckpt.sha256()[:12]}…); run the sweep on these weights")
        m = jsonio.expect(doc.get("map") or {}, dict, f"{what}: 'map'")
        formats = m.get("formats")
        ends = jsonio.expect(doc.get("endpoints") or {}, dict, f"{what}: 'endpoints'")
        mixed = jsonio.expect(ends.get("mixed") or {}, dict, f"{what}: 'endpoints.mixed'")
        proto = jsonio.expect(doc.get("protocol") or {}, dict, f"{what}: 'protocol'")
        units = {}
        for i, u in enumerate(jsonio.expect(doc.get("units") or [], list, f"{what}: 'units'")):
            u = jsonio.expect(u, dict, f"{what}: units[{i}]")
            units[jsonio.field(u, "name", str, f"{what}: units[{i}]")] = {"kl": u.get("kl"), "agreement": u.get("agreement")}
        src.update(schema=SCHEMA, rule=m.get("rule"), fp8_units=m.get("fp8_units"), stopped_by=m.get("stopped_by"),
                   fp8_fraction=m.get("fp8_fraction"), kl_budget=m.get("kl_budget"),
                   predicted_kl=m.get("predicted_kl"), measured_kl=mixed.get("kl"), unit_kind=proto.get("unit"),
                   units=units)
    elif doc.get("schema") is not None:
        raise MonolithError(f"--map {path}: schema {doc.get('schema')!r} is not known (this monolith reads {SCHEMA})")
    else:
        formats = doc.get("formats")
        src["schema"] = "formats"
    if not isinstance(formats, dict):
        raise MonolithError(f"--map {path}: no 'formats' object (HF name -> fp8 or nvfp4)")
    fp8, names = [], []
    for name, fmt in formats.items():
        kind = _FORMAT_NAMES.get(fmt) if isinstance(fmt, str) else None
        if kind is None:
            raise MonolithError(f"--map {path}: {name} has format {fmt!r}; known: fp8, nvfp4 "
                                f"({F8.SCHEME}, {L.SCHEME})")
        if name == EMBED:
            if kind != "fp8":
                raise MonolithError(f"--map {path}: the LM head/embedding stays FP8 in an nvfp4 pack (issue 14)")
            continue
        names.append(name)
        if kind == "fp8":
            fp8.append(name)
    check_fp8_names(names, ckpt.shape.num_layers, where=f"--map {path}")
    return tuple(sorted(fp8)), src


# ---- the sweep --------------------------------------------------------------------------------
def _free(device) -> None:
    gc.collect()
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _rel_mse(ckpt: Checkpoint, replaced: dict[str, torch.Tensor]) -> float:
    err = ref = 0.0
    for name, dq in replaced.items():
        w = ckpt.tensors[name].double()
        err += float((w - dq.double()).square().sum())
        ref += float(w.square().sum())
    return err / ref if ref else 0.0


def sweep(ckpt: Checkpoint, tok=None, *, device: str = "cpu", per_layer: bool = False, positions: int = POSITIONS,
          context: int = CONTEXT, stride: int | None = None, prompts: int = PROMPTS, agree_tokens: int = AGREE_TOKENS,
          text=None, text_tokens: list[int] | None = None, quality_prompts: list[list[int]] | None = None,
          search: bool = True, fp8_fraction: float = FP8_FRACTION, kl_budget=KL_BUDGET,
          build: Callable | None = None, out: Path | None = None, progress: bool = True,
          log: Callable[[str], None] | None = None, nvfp4_pack=None, fp8_pack=None) -> dict:
    """The sweep (module docstring). `build(checkpoint)` makes an engine (default: reference-fp32 on
    `device`); it is called once for the reference and once per unit and endpoint. With `out`, the
    JSON is written after every unit (status partial) and at the end (complete). `nvfp4_pack` /
    `fp8_pack`: in-memory packs of `ckpt` to reuse (made here when None). Returns the doc."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from monolith.console import make_console
    from monolith.quant import pack_fp8 as P8
    from monolith.quant import pack_nvfp4 as NV

    t0 = time.perf_counter()
    if positions < 1 or context < 2 or prompts < 0 or agree_tokens < 1:
        raise MonolithError("--positions >= 1, --context >= 2, --prompts >= 0 and agree tokens >= 1, please")
    if not 0.0 <= fp8_fraction <= 1.0:
        raise MonolithError(f"--fp8-fraction {fp8_fraction}: a share of the layers' weights, 0..1")
    resolve_kl_budget(kl_budget, {"all-fp8": {"kl": 0.0}})  # refuse a malformed budget before any work
    if build is None:
        from monolith.bench.baselines import registry

        def build(c):
            return registry.build(ENGINE, c, device)
    n = ckpt.shape.num_layers
    units = sweep_units(n, per_layer)
    text_desc: dict = {"source": "given as tokens"}
    if text_tokens is None:
        from monolith.eval import quality

        tpath = Path(text) if text else quality.default_text_path()
        text_tokens = quality.text_tokens(tok, tpath)
        text_desc = {"path": str(tpath), "sha256": hashlib.sha256(tpath.read_bytes()).hexdigest()}
    if quality_prompts is None and prompts > 0:
        from monolith.bench.suite import prompt_tokens
        quality_prompts = prompt_tokens("quality", tok)
    qp = [list(p) for p in (quality_prompts or [])[:prompts]]

    con = make_console(stderr=True)
    say = log or (con.print if progress else (lambda _m: None))
    doc = {"schema": SCHEMA, "status": "partial", "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "weights": ckpt.describe(), "device": str(device),
           "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if str(device).startswith("cuda") and torch.cuda.is_available() else None}
    steps_est = sum(stop for _st, _f, stop in plan_windows(len(text_tokens), context, stride or context, positions))
    steps_est += sum(len(p) + agree_tokens - 1 for p in qp)
    runs = 1 + len(units) + len(ENDPOINTS)
    doc["protocol"] = {
        "engine": f"{ENGINE} (fp32 compute) on every checkpoint", "device": str(device),
        "reference": f"{ENGINE} on the original bf16 weights, run once; its logits at the scored positions and its "
                     "greedy sequences are cached and every unit is compared with them",
        "unit": "per layer: one (layer, kind) matrix" if per_layer else "per kind: one projection kind in every layer",
        "units": len(units), "unit_checkpoint": "the unit's matrices NVFP4-quantized and dequantized (fp32), every "
                                                "other tensor the original bf16 weights (the LM head included)",
        "text": {**text_desc, "tokens": len(text_tokens)}, "context": context, "stride": stride or context,
        "positions_asked": positions, "prompts": len(qp), "agree_tokens": agree_tokens,
        "kl": "mean KL(reference || unit) of the next-token distribution over the scored positions (nats)",
        "agreement": "unit teacher-forced on the reference's greedy sequence after each prompt; argmax match rate",
        "nvfp4": {"scheme": L.SCHEME, "search": bool(search), "offsets": list(L.SEARCH_OFFSETS) if search else [0]},
        "fp8": {"scheme": F8.SCHEME, "layout": F8.LAYOUT},
        "steps_per_pass": steps_est, "passes": runs,
        "estimate_h200_s": round(runs * steps_est * STEP_MS_H200 / 1000, 1),
        "estimate_rule": f"passes x steps per pass x {STEP_MS_H200} ms (reference-fp32 in a CUDA graph on an H200), "
                         "without engine builds and packing"}
    say(f"sensitivity sweep: {len(units)} units ({doc['protocol']['unit']}) + {len(ENDPOINTS)} endpoints + the "
        f"reference = {runs} passes of {steps_est:,} steps each on {device}")

    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=con, disable=not progress, transient=False) as bar:
        runs_task = bar.add_task("sweep (reference, units, endpoints)", total=runs)
        steps_task = bar.add_task("  steps", total=steps_est)

        def stepper(label):
            bar.reset(steps_task, total=steps_est, description=f"  {label}: steps")
            return lambda k: bar.advance(steps_task, k)

        bar.update(runs_task, description="quantizing (nvfp4 and fp8 packs in memory)")
        t1 = time.perf_counter()
        for pk, what in ((nvfp4_pack, "nvfp4_pack"), (fp8_pack, "fp8_pack")):
            if pk is not None and pk.source_sha256 != ckpt.sha256():
                raise MonolithError(f"sweep: {what} was packed from other weights than {ckpt.path}")
        if nvfp4_pack is not None and nvfp4_pack.meta["search"]["enabled"] != bool(search):
            raise MonolithError(f"sweep: nvfp4_pack has search {nvfp4_pack.meta['search']['enabled']}, the sweep {search}")
        if nvfp4_pack is not None and nvfp4_pack.fp8_projections:
            raise MonolithError("sweep: nvfp4_pack is a mixed pack; the units need every projection in nvfp4")
        nv = nvfp4_pack if nvfp4_pack is not None else NV.pack_in_memory(ckpt, search=search)
        f8 = fp8_pack if fp8_pack is not None else P8.pack_in_memory(ckpt)
        if f8.meta["head"] != "fp8":
            raise MonolithError("sweep: fp8_pack has a bf16 head; the endpoints need pack_fp8's fp8 head")
        doc["pack_seconds"] = round(time.perf_counter() - t1, 1)

        bar.update(runs_task, description="reference (original bf16 weights)")
        ref = build(ckpt)
        rp = reference_pass(ref, text_tokens, qp, positions=positions, context=context, stride=stride,
                            agree_tokens=agree_tokens, progress=stepper("reference"))
        ref_name = getattr(ref, "name", ENGINE)
        del ref
        _free(device)
        bar.advance(runs_task)
        doc["protocol"]["kl_positions"] = rp.positions
        doc["reference"] = {"engine": ref_name, "info": rp.info, "ppl": rp.ppl, "positions": rp.positions,
                            "agreement_tokens": sum(len(s) for s in rp.sequences), "steps": rp.steps,
                            "seconds": round(rp.seconds, 2)}
        say(f"reference: {rp.steps:,} steps in {rp.seconds:.1f} s (ppl {rp.ppl:.4g})")

        def run(label: str, c: Checkpoint) -> dict:
            bar.update(runs_task, description=label)
            tb = time.perf_counter()
            e = build(c)
            t_build = time.perf_counter() - tb
            r = measure(e, rp, progress=stepper(label))
            del e
            _free(device)
            bar.advance(runs_task)
            ag = "-" if r["agreement"] is None else f"{r['agreement']:.1%}"
            say(f"{label:>12}: KL {r['kl']:.4g}  agreement {ag}  ppl ratio {r['ppl_ratio']:.4g}  "
                f"({t_build:.1f} s build + {r['seconds']:.1f} s)")
            return {**r, "build_seconds": round(t_build, 2)}

        results = []
        doc["units"] = results
        for u in units:
            reps = {m: nv.dequantized(m) for m in u.matrices()}
            r = run(f"unit {u.name}", unit_checkpoint(ckpt, reps, u.name))
            results.append({"name": u.name, "kind": u.kind, "layers": list(u.layers), "matrices": len(reps),
                            "weights": u.weights(), "rel_mse": _rel_mse(ckpt, reps), **r})
            del reps
            if out is not None:
                _write_json(out, doc)

        ends: dict[str, dict] = {}
        doc["endpoints"] = ends
        ends["head-fp8"] = {"what": "only the tied embedding/LM head FP8 (fp8-e4m3-rowscale), the rest bf16",
                            **run("head-fp8", unit_checkpoint(ckpt, {EMBED: f8.dequantized(EMBED)}, "head-fp8"))}
        c = P8.dequantized_checkpoint(f8, ckpt)
        ends["all-fp8"] = {"what": "pack_fp8: every projection and the head FP8", **run("all-fp8", c)}
        del c, f8
        c = NV.dequantized_checkpoint(nv, ckpt)
        ends["all-nvfp4"] = {"what": "pack_nvfp4: every projection NVFP4, the head FP8", **run("all-nvfp4", c)}
        del c, nv
        _free(device)

        budget, budget_rule = resolve_kl_budget(kl_budget, ends)
        m = propose_map(results, n, fp8_fraction=fp8_fraction, kl_budget=budget, kl_budget_rule=budget_rule)
        rank = {name: i + 1 for i, name in enumerate(m["ranking"])}
        for r in results:
            r["rank"], r["format"] = rank[r["name"]], "fp8" if r["name"] in m["fp8_units"] else "nvfp4"
        doc["map"] = m
        if m["fp8"]:
            mp = NV.pack_in_memory(ckpt, search=search, fp8=m["fp8"],
                                   map_source={"source": "the sensitivity sweep's proposal (in memory)"})
            c = NV.dequantized_checkpoint(mp, ckpt)
            ends["mixed"] = {"what": f"the proposed map packed: FP8 units {', '.join(m['fp8_units'])}, the rest "
                                     "NVFP4, the head FP8", **run("mixed", c)}
            del c, mp
        else:
            ends["mixed"] = {**ends["all-nvfp4"], "what": "the proposed map keeps nothing FP8: the all-nvfp4 endpoint"}
            bar.advance(runs_task)
        _free(device)
    doc["status"] = "complete"
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    if out is not None:
        _write_json(out, doc)
    return doc


# ---- the plot ---------------------------------------------------------------------------------
def plot(doc: dict, path) -> Path:
    """PNG: per-unit KL bars (log scale; FP8 units of the map highlighted) with the endpoints as
    horizontal lines, and per-unit agreement below."""
    plt = pyplot()
    units = doc["units"]
    names = [u["name"] for u in units]
    fp8 = set(doc["map"]["fp8_units"])
    kls = [max(u["kl"], 1e-12) for u in units]
    colors = ["#d62728" if n in fp8 else "#1f77b4" for n in names]
    w = max(8.0, 0.09 * len(units) + 3) if len(units) > 20 else 8.0
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(w, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    x = range(len(units))
    ax.bar(x, kls, color=colors)
    ax.set_yscale("log")
    styles = {"head-fp8": ":", "all-fp8": "--", "all-nvfp4": "-.", "mixed": "-"}
    for name, st in styles.items():
        e = doc.get("endpoints", {}).get(name)
        if e and e.get("kl", 0) > 0:
            ax.axhline(e["kl"], color="0.3", ls=st, lw=1, label=f"{name}: KL {e['kl']:.3g}")
    if len(units) <= 28:
        for i, k in enumerate(kls):
            ax.annotate(f"{k:.3g}", (i, k), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("KL(ref || unit NVFP4), nats")
    m, p = doc["map"], doc["protocol"]
    ax.set_title(f"NVFP4 sensitivity ({p['unit']}, {p.get('kl_positions', p['positions_asked'])} positions, "
                 f"{p['prompts']} prompts x {p['agree_tokens']} tokens)\nred: kept FP8 by the map "
                 f"({m['fp8_weight_fraction']:.0%} of the weights, stopped by {m['stopped_by']})", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ag = [100 * (u["agreement"] or 0.0) for u in units]
    ax2.bar(x, ag, color=colors)
    ax2.set_ylabel("agreement %")
    ax2.set_ylim(0, 100)
    ax2.set_xticks(list(x))
    total = sum(u["weights"] for u in units) or 1
    labels = names if len(units) > 20 else [f"{u['name']}\n{u['weights'] / total:.0%} of W" for u in units]
    ax2.set_xticklabels(labels, rotation=90 if len(units) > 20 else 0, fontsize=6 if len(units) > 20 else 8)
    return save_png(fig, path, dpi=110)
