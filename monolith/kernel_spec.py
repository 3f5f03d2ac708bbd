"""What Python knows about the kernel, read from kernel/ itself so nothing is written twice.

- `kernel/variants.json`: the variant list and `build_flags(variant)`, the one place nvcc flags
  are made. The runtime loader (monolith.megakernel.load_extension) and CI's
  scripts/compile_all.py both call it, so CI compiles exactly the configuration that runs.
- `kernel/config.cuh`: every `constexpr` shape (`config_constants()`).
- `kernel/sync.cuh`: `enum ErrorCode` (`error_codes()`); `describe_error()` turns a code and
  its `error_info` word into the host's message.
- `kernel/xray.cuh`: `kXrayMaxEvents`, the X-ray's per-block record slots (`xray_max_events()`).
- `kernel/policy.cuh`: `kTcVecsMax` / `kTcVecsMaxSm120`, the vectors per pass a build takes
  (`kpass_limits()`); `check_runnable(spec)` refuses, in one line, a variant the kernel compiles but
  cannot run (k vectors per pass, issue 48: variants.json "vectors" > 1).

variants.json schema (the kernel owner adds variants; unknown keys are kept and ignored here):
  {"source": "kernel/megakernel.cu",              # the one kernel source
   "xray_source": "kernel/megakernel_xray.cu",    # optional; else source + -DMONOLITH_XRAY
   "extra_flags": ["-std=c++17", "-O3", ...],     # nvcc flags of every variant
   "variants": [{"name": "bf16-upstream", "id": 0,   # id: the launch-time template selector
                 "defines": ["NAME=1", ...],        # this variant's -D flags (may be empty)
                 "weights": "bf16", "description": "...", ...}]}
  A tensor-core variant ("gemv": "mma") may name "vectors": k (1..kTcVecsMax = 8, default 1), the vectors
  per pass of its GEMV rounds (kernel/policy.cuh Policy::kVecs).
"""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from monolith import REPO_ROOT
from monolith.errors import MonolithError

KERNEL_DIR = REPO_ROOT / "kernel"
VARIANTS_FILE = KERNEL_DIR / "variants.json"


# ---------------------------------------------------------------- variants and build flags


def load_variants(path: Path | str = VARIANTS_FILE) -> dict:
    """Parse and check variants.json; ValueError naming the problem."""
    path = Path(path)
    from monolith import jsonio

    try:
        spec = jsonio.load(path)
    except MonolithError as e:  # this module's contract: ValueError naming the problem
        raise ValueError(str(e)) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("source"), str) or "variants" not in spec:
        raise ValueError(f"{path}: needs 'source' (a path) and 'variants'")
    extra = spec.get("extra_flags", [])
    if not isinstance(extra, list) or not all(isinstance(f, str) and f.startswith("-") for f in extra):
        raise ValueError(f"{path}: 'extra_flags' must be a list of flags like \"-O3\"")
    if "xray_source" in spec and not isinstance(spec["xray_source"], str):
        raise ValueError(f"{path}: 'xray_source' must be a path")
    variants = spec["variants"]
    if not isinstance(variants, list) or not variants:
        raise ValueError(f"{path}: 'variants' must be a non-empty list")
    names, ids = set(), set()
    for i, v in enumerate(variants):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not v["name"]:
            raise ValueError(f"{path}: variant #{i} needs a 'name'")
        n = v["name"]
        defs = v.get("defines", [])
        if not isinstance(defs, list) or not all(isinstance(d, str) and d and not d.startswith("-") for d in defs):
            raise ValueError(f"{path}: variant {n!r}: 'defines' must be a list like [\"NAME=1\"] (no leading -D)")
        unknown = sorted({d.split("=", 1)[0] for d in defs} - set(KNOWN_DEFINES))
        if unknown:
            raise ValueError(f"{path}: variant {n!r}: unknown kernel define {unknown[0]}; the kernel reads "
                             f"{', '.join(sorted(KNOWN_DEFINES))} (retired knobs: docs/EXPERIMENTS.md)")
        if n in names:
            raise ValueError(f"{path}: variant {n!r} is listed twice")
        if "vectors" in v:
            k, most = v["vectors"], kpass_limits()["max"]
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= most or v.get("gemv") != "mma":
                raise ValueError(f"{path}: variant {n!r}: 'vectors' must be an integer 1..{most} of a tensor-core "
                                 f"variant (\"gemv\": \"mma\"), got {k!r}")
        vid = v.get("id")
        if vid is not None:
            if isinstance(vid, bool) or not isinstance(vid, int) or vid < 0 or vid in ids:
                raise ValueError(f"{path}: variant {n!r}: 'id' must be a unique integer >= 0, got {vid!r}")
            ids.add(vid)
        names.add(n)
    return spec


@lru_cache(maxsize=4)
def _variants_cached(path: str, mtime: float) -> dict:
    return load_variants(path)


def variants(path: Path | str | None = None) -> dict:
    """variants.json (default: kernel/variants.json), parsed once per file version."""
    p = Path(path or VARIANTS_FILE)
    return _variants_cached(str(p), p.stat().st_mtime)


def variant_spec(name: str, path: Path | str | None = None) -> dict:
    vs = variants(path)["variants"]
    for v in vs:
        if v["name"] == name:
            return v
    raise MonolithError(f"unknown kernel variant {name!r}; known: {[v['name'] for v in vs]}")


# Extra preprocessor defines for a diagnostic build, e.g. MONOLITH_NVCC_DEFINES="MONOLITH_RING_RELEASE=512"
# (compute-sanitizer racecheck with every consumer thread arriving on the ring's `empty` barrier:
# scripts/gpu.sh stage racecheck-stream). Never set by default: CI (scripts/compile_all.py) and
# every measured run build without it. Where it is set, the defines enter the nvcc flags and so
# the build hash (another build dir), ext.build_info["extra_defines"], every result that records
# the engine's info or environment (harness rows, quality, X-ray meta, dev_bench, envinfo.collect).
EXTRA_DEFINES_ENV = "MONOLITH_NVCC_DEFINES"
# The X-ray source defines MONOLITH_XRAY itself; a -D of it would redefine it in that build.
RESERVED_DEFINES = frozenset({"MONOLITH_XRAY"})
# The build switches the kernel reads (kernel/): every other name is refused, so a retired knob
# (docs/EXPERIMENTS.md) or a typo cannot build silently as the default kernel. The measured choices
# are constants of kernel/policy.cuh, not defines.
KNOWN_DEFINES = {
    "MONOLITH_RING_RELEASE": "who returns a ring slot: 16 lanes (default), 1 thread, or 512 threads "
                             "(racecheck's reference build, scripts/gpu.sh racecheck-stream)",
    "MONOLITH_XRAY_SUB": "the X-ray build's diagnostic sub-intervals: 1, 2 or 3 (kernel/xray_phases.def)",
    "MONOLITH_RING_DEPTH_SM90": "the sm_90 ring's depth in 16 KB slots, kStagesSm90Min .. kStagesSm90Max of "
                                "kernel/config.cuh (default 12; scripts/ring_sweep.py)",
}
# Defines whose value must be an integer in a range of kernel/config.cuh's constants (checked before
# nvcc runs; the kernel asserts the same range): name -> (the constants naming the least, the most).
DEFINE_RANGES = {"MONOLITH_RING_DEPTH_SM90": ("kStagesSm90Min", "kStagesSm90Max")}
_DEFINE_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:=([A-Za-z0-9_.+\-]+))?")


def parse_extra_defines(text: str | None, known: dict | frozenset | None = None) -> list[str]:
    """MONOLITH_NVCC_DEFINES's value -> ["NAME", "NAME=VALUE", ...]: tokens separated by
    whitespace or commas, each a C identifier optionally followed by `=` and a value of letters,
    digits, `_ . + -` (no -D, quotes, spaces, shell or preprocessor syntax). None or blank: [].
    A token of another shape, a name given twice, a reserved name, or (after every token's shape
    is checked) a name not in `known` (default KNOWN_DEFINES) is a MonolithError."""
    known = KNOWN_DEFINES if known is None else known
    out: list[str] = []
    names: set[str] = set()
    for tok in (t for t in re.split(r"[\s,]+", text or "") if t):
        m = _DEFINE_TOKEN.fullmatch(tok)
        if m is None:
            raise MonolithError(f"{EXTRA_DEFINES_ENV}: {tok!r} is not NAME or NAME=VALUE (NAME a C identifier, "
                                "VALUE letters, digits, _ . + -; no -D prefix; tokens separated by spaces or "
                                f"commas), in {text!r}")
        name = m.group(1)
        if name in RESERVED_DEFINES:
            raise MonolithError(f"{EXTRA_DEFINES_ENV}: {name} is set by the build itself; refusing to define it")
        if name in names:
            raise MonolithError(f"{EXTRA_DEFINES_ENV}: {name} is given twice, in {text!r}")
        names.add(name)
        out.append(tok)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise MonolithError(f"{EXTRA_DEFINES_ENV}: unknown kernel define {sorted(unknown)[0]}; the kernel reads "
                            f"{', '.join(sorted(known))} (retired knobs: docs/EXPERIMENTS.md)")
    for tok in out:
        name, _, value = tok.partition("=")
        if name in DEFINE_RANGES:
            check_define_range(name, value)
    return out


def check_define_range(name: str, value: str) -> int:
    """A ranged define's value (DEFINE_RANGES) as an int; MonolithError in one line when it is not an
    integer within the range kernel/config.cuh gives it."""
    lo_name, hi_name = DEFINE_RANGES[name]
    k = config_constants()
    lo, hi = int(k[lo_name]), int(k[hi_name])
    if not re.fullmatch(r"\d+", value or "") or not lo <= int(value) <= hi:
        raise MonolithError(f"{EXTRA_DEFINES_ENV}: {name}={value or '(no value)'} cannot build: it takes an integer "
                            f"from {lo} to {hi} (kernel/config.cuh {lo_name} .. {hi_name})")
    return int(value)


def env_extra_defines(environ: dict | None = None) -> list[str]:
    """The extra defines MONOLITH_NVCC_DEFINES asks for (os.environ by default); [] when unset."""
    env = os.environ if environ is None else environ
    return parse_extra_defines(env.get(EXTRA_DEFINES_ENV))


def build_flags(variant: str | dict, *, xray: bool = False, spec: dict | None = None,
                extra_defines: list[str] | tuple[str, ...] = ()) -> list[str]:
    """nvcc flags (without the arch) of one variant's build: the common `extra_flags`, then the
    variant's `-D` defines, then `-DMONOLITH_XRAY` for the X-ray build when there is no separate
    `xray_source` (which defines it itself), then `extra_defines` (parse_extra_defines's tokens:
    a diagnostic build, none by default; a name the flags already define is refused). The one
    place these flags are made."""
    spec = spec if spec is not None else variants()
    if isinstance(variant, str):
        v = next((x for x in spec["variants"] if x["name"] == variant), None)
        if v is None:
            raise MonolithError(f"unknown kernel variant {variant!r}; known: {[x['name'] for x in spec['variants']]}")
    else:
        v = variant
    flags = [*spec.get("extra_flags", []), *(f"-D{d}" for d in v.get("defines", []))]
    if xray and not spec.get("xray_source"):
        flags.append("-DMONOLITH_XRAY")
    if extra_defines:
        extra = parse_extra_defines(" ".join(extra_defines))
        have = {f[2:].split("=", 1)[0] for f in flags if f.startswith("-D")}
        clash = sorted(have & {d.split("=", 1)[0] for d in extra})
        if clash:
            raise MonolithError(f"{EXTRA_DEFINES_ENV}: {', '.join(clash)} already defined by kernel/variants.json "
                                f"for {v.get('name', 'this variant')} ({flags}); refusing a second definition")
        flags += [f"-D{d}" for d in extra]
    return flags


# Per-arch ptxas flags of the kernel builds (not the probes). sm_120a: both archs cap the streaming
# kernels at 96 registers (17 warps are allocated as 20), and sm_120a's instruction selection needs a
# few more than sm_90a's; ptxas's least aggressive register-usage level halves what its default spills
# there (24 -> 12 B, NOTES.md nineteenth session). sm_90a, the measured arch, keeps the default.
ARCH_PTXAS_FLAGS = {"sm_120a": ["-Xptxas", "--register-usage-level=0"]}


def gencode(arch: str) -> str:
    """The -gencode flag of one target arch ("sm_90a" -> machine code for sm_90a, nothing else)."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise MonolithError(f"bad arch {arch!r}: expected e.g. sm_90a or sm_120a")
    cc = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{cc},code=sm_{cc}"


def arch_flags(arch: str) -> list[str]:
    """nvcc flags of a kernel build for one target arch: its -gencode, then ARCH_PTXAS_FLAGS[arch]."""
    return [gencode(arch), *ARCH_PTXAS_FLAGS.get(arch, [])]


def build_sources(spec: dict | None = None, repo: Path = REPO_ROOT) -> tuple[Path, Path | None]:
    """(plain source, X-ray source or None when the X-ray build is the plain source + a define)."""
    spec = spec if spec is not None else variants()
    return repo / spec["source"], (repo / spec["xray_source"]) if spec.get("xray_source") else None


def config_sources(config: str, spec: dict | None = None, repo: Path = REPO_ROOT) -> tuple[Path, Path]:
    """(plain source, X-ray source) of the translation unit that holds the variants whose "config" is
    `config` (variants.json "config_sources": the sm_120 configuration's variants are compiled only
    into an extension that runs them, and by CI)."""
    spec = spec if spec is not None else variants()
    src = (spec.get("config_sources") or {}).get(config)
    if not isinstance(src, dict) or not isinstance(src.get("source"), str) or not isinstance(src.get("xray_source"), str):
        raise MonolithError(f"variants.json: no config_sources entry for configuration {config!r}")
    return repo / src["source"], repo / src["xray_source"]


# ---------------------------------------------------------------- header constants


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def config_constants(path: Path | str = KERNEL_DIR / "config.cuh") -> dict[str, float]:
    """Evaluate every `constexpr <int|int64_t|float> kName = <expr>;` of the header, in order
    (an expression may use the names defined before it), as the default build compiles it: a build
    switch's default, `#define MONOLITH_NAME <expr>` (under its #ifndef), is evaluated in the same
    order and may appear in a later expression; only the k-names are returned."""
    env: dict[str, float] = {}
    text = _strip_comments(Path(path).read_text())
    rx = re.compile(r"constexpr\s+(?:int64_t|int|float)\s+(k\w+)\s*=\s*([^;]+);"
                    r"|^[ \t]*#[ \t]*define[ \t]+(MONOLITH_\w+)[ \t]+([^\n]+)$", re.M)
    for m in rx.finditer(text):
        name, raw = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4).strip())
        expr = re.sub(r"int64_t\(([^)]*)\)", r"(\1)", raw)
        expr = re.sub(r"(\d(?:\.\d*)?(?:e-?\d+)?)f\b", r"\1", expr)
        if not re.fullmatch(r"[\w\s.+\-*/()%]+", expr):
            raise ValueError(f"{path}: cannot evaluate {name} = {raw!r}")
        env[name] = eval(expr, {"__builtins__": {}}, dict(env))  # noqa: S307 (checked: names, numbers, arithmetic)
    return {k: v for k, v in env.items() if k.startswith("k")}


def _int_literal(s: str) -> int:
    s = s.strip().rstrip("uUlL")
    return int(s, 0)


def error_codes(path: Path | str = KERNEL_DIR / "sync.cuh") -> dict[str, int]:
    """`enum ErrorCode` of kernel/sync.cuh as {name: value} (implicit values count up like C++)."""
    text = _strip_comments(Path(path).read_text())
    m = re.search(r"enum\s+(?:class\s+)?ErrorCode\b[^{]*\{(.*?)\}", text, flags=re.S)
    if not m:
        raise ValueError(f"{path}: no `enum ErrorCode {{...}}`")
    out, nxt = {}, 0
    for item in (x.strip() for x in m.group(1).split(",")):
        if not item:
            continue
        em = re.fullmatch(r"(k\w+)\s*(?:=\s*(\w+))?", item)
        if not em:
            raise ValueError(f"{path}: cannot read ErrorCode entry {item!r}")
        val = _int_literal(em.group(2)) if em.group(2) else nxt
        out[em.group(1)] = val
        nxt = val + 1
    if out.get("kOk") != 0:
        raise ValueError(f"{path}: ErrorCode must have kOk = 0, got {out}")
    return out


def xray_max_events(path: Path | str = KERNEL_DIR / "xray.cuh") -> int:
    """kXrayMaxEvents: record slots per block and token in the X-ray buffer."""
    m = re.search(r"constexpr\s+int\s+kXrayMaxEvents\s*=\s*(\w+)\s*;", _strip_comments(Path(path).read_text()))
    if not m:
        raise ValueError(f"{path}: no `constexpr int kXrayMaxEvents = N;`")
    return _int_literal(m.group(1))


# ---------------------------------------------------------------- k vectors per pass (issue 48)


def kpass_limits(path: Path | str = KERNEL_DIR / "policy.cuh") -> dict[str, int]:
    """{"max": kTcVecsMax, "max_sm120": kTcVecsMaxSm120} of kernel/policy.cuh: the vectors per pass the
    tensor-core rounds take, on any arch and in the sm_120 configuration (notes/ktoken.md §1)."""
    text = _strip_comments(Path(path).read_text())
    out = {}
    for key, name in (("max", "kTcVecsMax"), ("max_sm120", "kTcVecsMaxSm120")):
        m = re.search(rf"constexpr\s+int\s+{name}\s*=\s*(\w+)\s*;", text)
        if not m:
            raise ValueError(f"{path}: no `constexpr int {name} = N;`")
        out[key] = _int_literal(m.group(1))
    return out


def vectors(spec: dict) -> int:
    """A variant's vectors per pass (variants.json "vectors"; 1 where absent)."""
    return int(spec.get("vectors", 1))


# What a variant of k > 1 vectors per pass is missing before it can run: the kernel carries k vectors
# through its tensor-core GEMV rounds only (notes/ktoken.md §7a says what remains and its cost).
KPASS_NOT_BUILT = "the hops, attention (k queries), O and the k-row LM head carry one vector"


def check_runnable(spec: dict, capability: tuple[int, int] | None = None) -> None:
    """Refuse, in one line (MonolithError), a variant the kernel compiles but cannot run here: more
    vectors per pass than an sm_120 GPU's configuration takes (capability 12.x), or any k > 1 (its
    kernels are compiled, never launched). None: the variant runs."""
    k, name = vectors(spec), spec.get("name", "this variant")
    if k <= 1:
        return
    lim = kpass_limits()
    if capability is not None and int(capability[0]) >= 12 and k > lim["max_sm120"]:
        raise MonolithError(f"{name}: sm_120 takes at most {lim['max_sm120']} vectors per pass (notes/ktoken.md §1: "
                            f"4 ring slots beside k vectors' state in 99 KB), this variant has {k}; refusing")
    raise MonolithError(f"{name}: k = {k} vectors per pass is built only in the tensor-core GEMV rounds "
                        f"({KPASS_NOT_BUILT}: notes/ktoken.md §7a); its kernels compile but never run; refusing")


# ---------------------------------------------------------------- error messages

# What the host says for each code, by the kernel's name for it. A code without an entry here
# (a new one) is shown by its name; the names and values always come from kernel/sync.cuh.
ERROR_TEXT = {
    "kErrBarrierTimeout": "grid barrier timed out",
    "kErrFlagKVTimeout": "K/V flag wait timed out",
    "kErrFlagAttnTimeout": "attention-done wait timed out",
    "kErrBadToken": "token id out of range",
    "kErrBadPosition": "position outside the KV cache",
    "kErrCounterTimeout": "dependency wait (tagged or counted words) timed out",
    "kErrRingTimeout": "weight ring wait timed out",
}


def describe_error(code: int, info: int, waits: dict[int, str] | None = None,
                   codes: dict[str, int] | None = None) -> str:
    """The host's text for SyncState.error / error_info. A wait that timed out (a code named
    k...Timeout) reports error_info = layer * 16 + wait id, and `waits` names the wait ids;
    other codes report the offending value."""
    codes = codes if codes is not None else error_codes()
    name = next((k for k, v in codes.items() if v == code), None)
    if name is None:
        return f"unknown error code {code} (kernel/sync.cuh has {sorted(codes.values())}), info {info}"
    text = ERROR_TEXT.get(name, name)
    if name.endswith("Timeout"):
        wait = (waits or {}).get(info % 16, f"wait {info % 16}")
        return f"{text} ({name}; layer {info // 16}, {wait})"
    return f"{text} ({name}; value {info})"
