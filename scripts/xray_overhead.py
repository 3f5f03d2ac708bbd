"""The X-ray's overhead on every shipped variant, and an A/B of its record layouts, in one GPU call.

usage: python scripts/xray_overhead.py [--variants V,...] [--positions 16,128,1024,2048]
       [--alts compact,full] [--tokens 64] [--runs 5] [--trace-position 128]
       [--fidelity-layer L [--fidelity-reps 31] [--fidelity-traces 5]] [--out DIR]

Builds: the extension as monolith.megakernel.load_extension builds it (plain + the shipped X-ray,
kernel/xray.cuh as committed) and, for every other --alts name, the same sources copied to
build/xray-ab/<alt>/kernel with xray.cuh's one-line constants set to the alt's values (its
`constexpr XrayRecord kXrayRecord = ...;` layout line, its `constexpr bool kXrayNvGather = ...;` and
`constexpr bool kXrayNvSmem = ...;` lines; no new define). All builds compile at once, in parallel
processes.
Alternatives (kernel/xray.cuh): compact (8-byte clock64 records, %globaltimer only at two anchors
per block), lean (compact, the block's record pointer recomputed from the kernel parameter at each
stamp instead of held in two registers), full (40-byte records, %globaltimer, clock64 and %smid at
every stamp), nvnogather (compact; the NVFP4 stream kernels record no s_gather, the three to
four stamps per block and layer that sit right after a hop's opening barrier; every other
variant's X-ray kernel is compact's), nvsmemptr (compact's records; the NVFP4 stream kernels keep
the recorder's word pointer and count in shared memory instead of 3 registers live across the
kernel; every other variant's X-ray kernel is compact's) and nvsmemnogather (both NVFP4 changes).

Timing (monolith.xray.overhead): per variant one engine; its plain kernel and each build's X-ray
kernel decode the same `--tokens`-launch window from each position (seek), runs interleaved,
median of --runs after a warm-up; the X-ray builds must decode the plain build's tokens
bitwise (gate). Then one trace per (variant, alt) at --trace-position, its span against the
plain kernel's token time there, and the compact trace's per-phase sums against the full one's
(fidelity). Writes DIR/xray_overhead.json and DIR/traces/<alt>/<variant>.raw.npz; prints a table
last. Dev timing, not a headline number (those come from `monolith bench`).

--fidelity-layer L (monolith.xray.fidelity; 0: off): at every --positions entry, launches of the
plain kernel and of each X-ray build stopped after each phase of layer L (and after layer L-1's
last), against full traced launches of each X-ray build in the same protocol. The stop points and
the records that close them follow the variant's schedule (kernel/variants.json). JSON
variants.<v>.phase_fidelity: per position and X-ray build, per segment between stop points the plain
difference (µs), the trace's, the error and relative error, the token span against the plain
build's time per token from the overhead rows, and pass/fail under fidelity.PASS_RULE;
phase_fidelity.pass is the shipped layout's verdict at every position. A variant that cannot be
measured (a missing record, a failed launch) fails the script; a rule's FAIL is reported, not fatal.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monolith.errors import MonolithError  # noqa: E402

SHIPPED = ("bf16-upstream", "fp8-upstream", "bf16-stream", "fp8-stream", "nvfp4-stream")
# xray.cuh's one-line constants that an alt sets: (type, name, the regex of a value), each on a line
# of its own, `constexpr TYPE NAME = VALUE;`
XRAY_CONSTANTS = (("XrayRecord", "kXrayRecord", r"XrayRecord::k\w+"), ("bool", "kXrayNvGather", "true|false"),
                  ("bool", "kXrayNvSmem", "true|false"))
# alt name -> the values of XRAY_CONSTANTS, in that order
ALTS = {"compact": ("XrayRecord::kCompact", "true", "false"), "full": ("XrayRecord::kFull", "true", "false"),
        "lean": ("XrayRecord::kCompactLean", "true", "false"), "nvnogather": ("XrayRecord::kCompact", "false", "false"),
        "nvsmemptr": ("XrayRecord::kCompact", "true", "true"),
        "nvsmemnogather": ("XrayRecord::kCompact", "false", "true")}


KERNEL_SUFFIXES = {".cu", ".cuh", ".cpp", ".def", ".h", ".json"}


def _constant_line(type_: str, name: str, value_re: str) -> re.Pattern:
    return re.compile(rf"^constexpr {type_} {name} = ({value_re});$", re.M)


def shipped_alt(kernel_dir: Path) -> str:
    """The alt name of what kernel/xray.cuh ships (its layout, s_gather and shared-state constants)."""
    text = (kernel_dir / "xray.cuh").read_text()
    values = []
    for type_, name, value_re in XRAY_CONSTANTS:
        m = _constant_line(type_, name, value_re).search(text)
        if not m:
            raise MonolithError(f"{kernel_dir / 'xray.cuh'}: no `constexpr {type_} {name} = {value_re};` line")
        values.append(m.group(1))
    inv = {v: k for k, v in ALTS.items()}
    if tuple(values) not in inv:
        ships = ", ".join(f"{name} = {v}" for (_, name, _), v in zip(XRAY_CONSTANTS, values, strict=True))
        raise MonolithError(f"kernel/xray.cuh ships {ships}, which this script does not know ({sorted(ALTS)})")
    return inv[tuple(values)]


def alt_kernel_dir(alt: str, root: Path = REPO) -> Path:
    """A copy of kernel/ whose xray.cuh records the `alt` layout (written under build/)."""
    src = root / "kernel"
    dst = root / "build" / "xray-ab" / alt / "kernel"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix in KERNEL_SUFFIXES:
            shutil.copy2(f, dst / f.name)
    text = (dst / "xray.cuh").read_text()
    for (type_, name, value_re), value in zip(XRAY_CONSTANTS, ALTS[alt], strict=True):
        text, n = _constant_line(type_, name, value_re).subn(f"constexpr {type_} {name} = {value};", text)
        if n != 1:
            raise MonolithError(f"{src / 'xray.cuh'}: expected one {name} line, found {n}")
    (dst / "xray.cuh").write_text(text)
    return dst


def build_alt(alt: str, variant: str = "bf16-stream", verbose: bool = False):
    """The extension built from alt_kernel_dir(alt) with the loader's flags (own name and dir)."""
    from torch.utils.cpp_extension import load

    from monolith import kernel_spec
    from monolith import megakernel as M

    kdir = REPO / "build" / "xray-ab" / alt / "kernel"
    if not (kdir / "xray.cuh").is_file():
        kdir = alt_kernel_dir(alt)
    flags = [*kernel_spec.build_flags(variant), *M._arch_flags()]
    h = hashlib.sha256(" ".join(flags).encode())
    for f in sorted(kdir.glob("*")):
        if f.suffix in {".cu", ".cuh", ".cpp", ".def", ".h"}:
            h.update(f.name.encode() + f.read_bytes())
    tag = h.hexdigest()[:12]
    spec = kernel_spec.variants()
    sources = [kdir / "bindings.cpp", kdir / Path(spec["source"]).name, kdir / Path(spec["xray_source"]).name]
    bdir = REPO / "build" / f"ext-xab-{alt}-{tag}"
    bdir.mkdir(parents=True, exist_ok=True)
    ext = load(name=f"monolith_mk_xab_{alt}_{tag}", sources=[str(s) for s in sources], extra_cuda_cflags=flags,
               extra_cflags=["-O2", "-std=c++17"], extra_include_paths=[str(kdir)], build_directory=str(bdir),
               verbose=verbose)
    ext.build_info = {"tag": tag, "nvcc_flags": flags, "build_dir": str(bdir), "extra_defines": [],
                      "xray_record": alt, "kernel_dir": str(kdir.relative_to(REPO))}
    return ext


def build_all(alts: list[str], shipped: str) -> list[str]:
    """Compile every build at once (one process each; each runs its own ninja). Returns the alts
    that built; a failed alternative is dropped (its log printed), a failed shipped build is fatal."""
    procs = []
    (REPO / "build").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x)}
    for alt in alts:
        if alt == shipped:
            code = "from monolith.megakernel import load_extension as L; print(L('bf16-stream').build_info['tag'])"
        else:
            alt_kernel_dir(alt)
            code = f"import sys; sys.path.insert(0, 'scripts'); import xray_overhead as X; X.build_alt({alt!r})"
        log = open(REPO / "build" / f"xray-ab-{alt}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((alt, subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log,
                                         stderr=subprocess.STDOUT),
                      log))
    bad = []
    for alt, p, log in procs:
        rc = p.wait()
        log.close()
        if rc != 0:
            bad.append(alt)
            print((REPO / "build" / f"xray-ab-{alt}.log").read_text()[-4000:], flush=True)
    if shipped in bad:
        raise MonolithError(f"the shipped build failed (log build/xray-ab-{shipped}.log)")
    if bad:
        print(f"[xo] build failed, left out of the A/B: {bad} (logs build/xray-ab-<alt>.log)", flush=True)
    return [a for a in alts if a not in bad]


_PACKS: dict = {}


def make_engine(ckpt, variant: str):
    """The variant's engine with its X-ray buffer; a quantized format packed once per run."""
    from monolith.megakernel import MegakernelEngine, variant_spec

    fmt = variant_spec(variant).get("weights", "bf16")
    if fmt == "nvfp4" and fmt not in _PACKS:  # the block-scale search moves values, not the timing
        from monolith.quant import pack_nvfp4
        _PACKS[fmt] = pack_nvfp4.pack_in_memory(ckpt, search=False)
    elif fmt == "fp8" and fmt not in _PACKS:
        from monolith.quant import pack_fp8
        _PACKS[fmt] = pack_fp8.pack_in_memory(ckpt)
    return MegakernelEngine(ckpt, variant=variant, xray=True, packed=_PACKS.get(fmt))


def trace_fidelity(mk, ext, alt: str, position: int, prompt: list[int], out_dir: Path) -> dict:
    """One trace with `ext`'s X-ray: saved raw, analyzed; what the span and phases say."""
    from monolith.xray.analyze import analyze
    from monolith.xray.raw import save_raw

    own = mk.ext
    mk.ext = ext
    try:
        meta, ev = mk.record_xray(prompt, position)
    finally:
        mk.ext = own
    meta = dict(meta, build=getattr(ext, "build_info", {}))
    path = save_raw(out_dir / alt / f"{mk.variant}.raw.npz", meta, ev)
    summ = analyze(meta, ev)
    phases = {p["name"]: round(p["mean_per_block_us"], 3) for p in summ["phases"] if p.get("count")}
    return {"raw": str(path), "events": int(len(ev)), "xray_record": meta.get("xray_record"),
            "trace_span_us": round(summ["trace_span_us"], 3), "token_time_us": round(summ["token_time_us"], 3),
            "layer_median_us": summ["layers"]["median_us"], "warnings": summ["warnings"],
            "clock_alignment": {k: summ["clock_alignment"].get(k) for k in ("method", "residual_ns", "sm_ghz")},
            "phase_mean_per_block_us": phases}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(SHIPPED))
    ap.add_argument("--positions", default="16,128,1024,2048")
    ap.add_argument("--alts", default="compact,full,lean", help=f"X-ray builds to time ({', '.join(ALTS)})")
    ap.add_argument("--tokens", type=int, default=64, help="decode launches per timed window")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace-position", type=int, default=128, help="position of the fidelity traces (0: none)")
    ap.add_argument("--fidelity-layer", type=int, default=0,
                    help="per-phase fidelity of this layer (1..27) at every position: stopped plain and X-ray "
                         "launches against traced ones (0: off)")
    ap.add_argument("--fidelity-reps", type=int, default=31, help="stopped launches per build, stop point and position")
    ap.add_argument("--fidelity-traces", type=int, default=5, help="traced launches per X-ray build and position")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/monolith-out") + "/xray_overhead")
    a = ap.parse_args(argv)
    try:
        alts = [x for x in a.alts.split(",") if x]
        unknown = [x for x in alts if x not in ALTS]
        if unknown or not alts:
            raise MonolithError(f"--alts: unknown {unknown} (known: {', '.join(ALTS)})")
        variants = [v for v in a.variants.split(",") if v]
        positions = [int(p) for p in a.positions.split(",") if p]
        fid = None
        if a.fidelity_layer:
            from monolith.config import NUM_LAYERS
            from monolith.xray import fidelity as F

            if not 1 <= a.fidelity_layer < NUM_LAYERS:
                raise MonolithError(f"--fidelity-layer: 1..{NUM_LAYERS - 1}, or 0 for none; got {a.fidelity_layer}")
            if a.fidelity_reps < 4 or a.fidelity_traces < 1:
                raise MonolithError(f"--fidelity-reps >= 4 and --fidelity-traces >= 1; got {a.fidelity_reps}, "
                                    f"{a.fidelity_traces}")
            for v in variants:  # every variant's schedule before any GPU work: refusals are cheap
                F.schedule_of(v)
            fid = {"layer": a.fidelity_layer, "reps": a.fidelity_reps, "traces": a.fidelity_traces}
        return run(variants, positions, alts, a.tokens, a.runs, a.trace_position, Path(a.out), fid)
    except MonolithError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(variants, positions, alts, tokens, runs, trace_position, out: Path, fidelity_args: dict | None = None) -> int:
    import torch

    from monolith.checkpoint import ensure_checkpoint, load_checkpoint
    from monolith.envinfo import collect
    from monolith.megakernel import load_extension

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    shipped = shipped_alt(REPO / "kernel")
    print(f"[xo] building {alts} (shipped layout: {shipped}) ...", flush=True)
    if shipped not in alts:
        alts = [shipped, *alts]  # the shipped build is the plain kernel's and the reference
    alts = build_all(alts, shipped)
    exts = {alt: (load_extension("bf16-stream") if alt == shipped else build_alt(alt)) for alt in alts}
    print(f"[xo] builds ready in {time.time() - t0:.0f} s: " +
          ", ".join(f"{k}={v.build_info['tag']}" for k, v in exts.items()), flush=True)
    ckpt = load_checkpoint(ensure_checkpoint(None, progress=False))
    prompt = [9707, 1879]
    doc = {"schema": "monolith-xray-overhead/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
           "note": "dev timing (CUDA events), not a headline; see monolith/xray/overhead.py METHOD",
           "env": collect(), "weights": ckpt.describe(), "shipped_layout": shipped, "alts": alts,
           "builds": {k: v.build_info for k, v in exts.items()}, "variants": {}}
    failures = []
    doc["trace_position"] = trace_position
    doc["fidelity_layer"] = (fidelity_args or {}).get("layer", 0)
    for v in variants:
        try:
            res = measure_variant(ckpt, v, exts, alts, shipped, positions, tokens, runs, trace_position, prompt, out,
                                  failures, fidelity_args)
        except MonolithError as e:
            print(f"[xo] {v}: FAILED: {e}", flush=True)
            res = {"error": str(e)}
            failures.append(v)
        doc["variants"][v] = res
        (out / "xray_overhead.json").write_text(json.dumps(doc, indent=1))
        torch.cuda.empty_cache()
    doc["seconds"] = round(time.time() - t0, 1)
    (out / "xray_overhead.json").write_text(json.dumps(doc, indent=1))
    print_table(doc)
    print(f"[xo] wrote {out / 'xray_overhead.json'} in {doc['seconds']} s" + (f"; FAILED: {failures}" if failures else ""))
    return 1 if failures else 0


def measure_variant(ckpt, v, exts, alts, shipped, positions, tokens, runs, trace_position, prompt, out, failures,
                    fidelity_args: dict | None = None) -> dict:
    from monolith.xray import overhead as O

    tv = time.time()
    mk = make_engine(ckpt, v)
    try:
        attrs = {alt: dict(exts[alt].attributes(mk.variant_id, True)) for alt in alts}
        attrs["plain"] = dict(exts[shipped].attributes(mk.variant_id, False))
        for alt in alts:
            fit = exts[alt].max_coresident(mk.variant_id, True, mk.device.index or 0)
            if fit < mk.blocks:
                raise MonolithError(f"{v}: the {alt} X-ray build fits {fit} co-resident blocks < {mk.blocks}")
        builds = ["plain", *alts]
        timer = O.engine_timer(mk, ext_of=exts, tokens=tokens)
        res = O.measure(timer, builds, positions, runs=runs, tokens=tokens,
                        progress=lambda s, v=v: print(f"[xo] {v} {s}", flush=True))
        res["kernel_attributes"] = {k: {x: a.get(x) for x in ("num_regs", "local_size_bytes", "shared_size_bytes")}
                                    for k, a in attrs.items()}
        res["blocks"] = mk.blocks
        if trace_position:
            res["traces"] = {}
            for alt in alts:
                try:
                    res["traces"][alt] = trace_fidelity(mk, exts[alt], alt, trace_position, prompt, out / "traces")
                except MonolithError as e:
                    res["traces"][alt] = {"error": str(e)}
                    failures.append(f"{v}/{alt} trace")
            plain_us = next((r["us_per_token"] for r in res["rows"]
                             if r["build"] == "plain" and r["position"] == trace_position), None)
            res["fidelity"] = fidelity(res["traces"], plain_us, shipped)
        if fidelity_args:
            res["phase_fidelity"] = phase_fidelity(mk, v, exts, alts, shipped, res, fidelity_args, failures)
        res["seconds"] = round(time.time() - tv, 1)
        if not all(all(x.values()) for x in res["tokens_equal"].values()):
            failures.append(f"{v} tokens")
        return res
    finally:
        del mk


def phase_fidelity(mk, v, exts, alts, shipped, res, args: dict, failures) -> dict:
    """monolith.xray.fidelity at every measured position: plain = the engine's own plain kernel (as
    the overhead rows time it), each alt its build's X-ray kernel; the plain time per token from the
    overhead rows just measured."""
    from monolith.xray import fidelity as F

    plain_us = {r["position"]: r["us_per_token"] for r in res["rows"] if r["build"] == "plain"}
    builds = {"plain": (mk.ext, False), **{a: (exts[a], True) for a in alts}}
    try:
        return F.measure_variant(mk, v, builds, alts, res["positions"], args["layer"], plain_us, shipped,
                                 reps=args["reps"], traces=args["traces"],
                                 progress=lambda s, v=v: print(f"[xo] {v} {s}", flush=True))
    except MonolithError as e:
        print(f"[xo] {v}: phase fidelity FAILED: {e}", flush=True)
        failures.append(f"{v} phase fidelity")
        return {"error": str(e)}


def fidelity(traces: dict, plain_us: float | None, shipped: str) -> dict:
    """The shipped trace's span against the plain kernel's token time at that position, and its
    per-phase means per block against each other layout's (what a cheaper stamp moved)."""
    out: dict = {}
    base = traces.get(shipped) or {}
    if plain_us and "trace_span_us" in base:
        out["span_vs_plain_token"] = round(base["trace_span_us"] / plain_us, 4)
    for alt, t in traces.items():
        if alt == shipped or "phase_mean_per_block_us" not in t or "phase_mean_per_block_us" not in base:
            continue
        a, b = base["phase_mean_per_block_us"], t["phase_mean_per_block_us"]
        out[f"phase_us_{shipped}_minus_{alt}"] = {k: round(a.get(k, 0.0) - b.get(k, 0.0), 3) for k in sorted(set(a) | set(b))}
    return out


def print_table(doc: dict) -> None:
    alts = doc["alts"]
    print("\n==== X-ray overhead (% of plain tok/s; > 3 % marked *)")
    head = f"{'variant':<14} {'pos':>5} {'plain':>7} " + " ".join(f"{a:>16}" for a in alts) + "  regs plain/" + "/".join(alts)
    print(head)
    for v, res in doc["variants"].items():
        if "rows" not in res:
            print(f"{v:<14} error: {res.get('error')}")
            continue
        by = {(r["build"], r["position"]): r for r in res["rows"]}
        regs = "/".join(str(res["kernel_attributes"][k]["num_regs"]) for k in ["plain", *alts])
        for p in res["positions"]:
            cells = []
            for a in alts:
                pct = res["overhead_pct"][a][str(p)]
                eq = "" if res["tokens_equal"][a][str(p)] else " !tok"
                cells.append(f"{by[(a, p)]['tok_s']:>6.0f} {pct:+5.1f}%{'*' if pct > 3 else ' '}{eq}")
            print(f"{v:<14} {p:>5} {by[('plain', p)]['tok_s']:>7.0f} " + " ".join(f"{c:>16}" for c in cells) + f"  {regs}")
        f = res.get("fidelity") or {}
        if "span_vs_plain_token" in f:
            print(f"{'':<14} trace span / plain token time at {doc.get('trace_position', '')}: {f['span_vs_plain_token']:.3f}")
        print_phase_fidelity(res.get("phase_fidelity"))
    fids = {v: r["phase_fidelity"] for v, r in doc["variants"].items() if "phase_fidelity" in r}
    if fids:
        print(f"\n==== phase fidelity, layer {doc.get('fidelity_layer')} (shipped layout; {fidelity_rule()})")
        for v, pf in fids.items():
            print(f"{v:<14} " + (f"error: {pf['error']}" if "error" in pf else ("PASS" if pf["pass"] else "FAIL")))


def fidelity_rule() -> str:
    from monolith.xray import fidelity as F

    return F.PASS_RULE


def print_phase_fidelity(pf: dict | None) -> None:
    """Per position and X-ray build: the token span against plain and the worst segment."""
    if not pf:
        return
    if "error" in pf:
        print(f"{'':<14} phase fidelity: error: {pf['error']}")
        return
    for pos, by_alt in pf["positions"].items():
        for alt, r in by_alt.items():
            worst = max(r["segments"], key=lambda x: abs(x["error_us"]) - x["limit_us"])
            print(f"{'':<14} fidelity L{pf['layer']} at {pos} ({alt}): span {r['token']['trace_span_us']:.1f} vs "
                  f"plain {r['token']['plain_token_us']:.1f} µs/token ({r['token']['rel_error'] * 100:+.2f}%); "
                  f"worst {worst['from']}->{worst['to']} trace {worst['trace_us']:.2f} vs plain "
                  f"{worst['plain_us']:.2f} µs: " + ("pass" if r["pass"] else f"FAIL {r['failed']}"))


if __name__ == "__main__":
    sys.exit(main())
