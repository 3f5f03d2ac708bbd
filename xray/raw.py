"""The raw trace file: what the kernel recorded for one token, before any analysis.

File format (.npz, numpy's zip of arrays, opened with allow_pickle=False so a file can never
run code): `meta_json` (a 0-d unicode array holding the meta dict as JSON) and the event
columns. Events are sorted by (block, c0) and the time columns are stored as deltas between
consecutive events of the same block plus durations: the absolute stamps are 40+-bit numbers
that zip barely compresses, their deltas are small and compress ~10x. load_raw undoes this
exactly (lossless int64 arithmetic) and returns the contract's [N, 8] int64 array.
"""
from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np

from monolith.errors import MonolithError

RAW_FORMAT = "monolith-xray-raw"
RAW_VERSION = 1
COLUMNS = ("block", "smid", "phase", "layer", "g0", "g1", "c0", "c1")
COL = {name: i for i, name in enumerate(COLUMNS)}
# Bounds shared by every reader of traces (raw here, the page format in export.py and in the page's
# web/src/trace.ts, which a test compares with these): readers allocate per SM and per block, so a
# file may not ask for more than a GPU has, and ids must fit the kernel's u16 record fields.
MAX_SM_COUNT = 1024   # H200 132, RTX 5090 170
MAX_BLOCKS = 65536    # block ids are u16 in the kernel's record
MAX_ID = 65535        # phase and layer ids: u16 in the kernel's record
# A raw trace's arrays are sized from their .npz member headers before any is read: a few MB of
# zip can declare gigabytes. A real token has ~50k events (132 blocks x ~400); 4 Mi is 80x that.
MAX_EVENTS = 1 << 22
MAX_META_CHARS = 1 << 24  # a synthetic trace carries its generator's answers (~1.4 M characters)
# %globaltimer's update period: 32 ns on the GPUs this project runs on, about 1 us on older
# parts. A tick outside [1 ns, 10 us] is a corrupt file, and would move every clock fit.
TICK_NS_RANGE = (1, 10_000)
REQUIRED_META = {
    "variant": str, "gpu": str, "sm_count": int, "blocks": int, "threads": int, "position": int,
    "sm_clock_mhz": (int, float, type(None)), "token_time_us": (int, float),
}
# sm_clock_mhz may be null (nvidia-smi absent). Optional: build, weights (dict|str), created (iso
# str), synthetic (bool), globaltimer_tick_ns (int, default 32), xray_max_events (per-block slots,
# for the truncation check), truth (synthetic traces only: the generator's answers).


def _check_events(events, where: str) -> np.ndarray:
    ev = np.asarray(events)
    if ev.ndim != 2 or ev.shape[1] != 8:
        raise MonolithError(f"{where}: events must have shape [N, 8] ({', '.join(COLUMNS)}), got {list(ev.shape)}")
    if not np.issubdtype(ev.dtype, np.integer):
        raise MonolithError(f"{where}: events must be integers, got dtype {ev.dtype}")
    ev = ev.astype(np.int64)
    if len(ev) == 0:
        raise MonolithError(f"{where}: the trace has no events (was the kernel built with -DMONOLITH_XRAY?)")
    for c in ("block", "smid", "phase", "layer"):
        col = ev[:, COL[c]]
        if col.min() < 0 or col.max() > 0xFFFF:
            raise MonolithError(f"{where}: column {c} out of u16 range [{col.min()}, {col.max()}]")
    for a, b in (("g0", "g1"), ("c0", "c1")):
        bad = np.nonzero(ev[:, COL[b]] < ev[:, COL[a]])[0]
        if len(bad):
            i = int(bad[0])
            raise MonolithError(f"{where}: event {i} ends before it starts ({b} < {a}: {ev[i, COL[b]]} < {ev[i, COL[a]]}); "
                                f"{len(bad)} such events (unwritten or torn records?)")
    return ev


def check_meta(meta, where: str = "meta") -> dict:
    if not isinstance(meta, dict):
        raise MonolithError(f"{where}: must be a dict, got {type(meta).__name__}")
    for key, typ in REQUIRED_META.items():
        if key not in meta:
            raise MonolithError(f"{where}: missing key {key!r} (required: {', '.join(REQUIRED_META)})")
        if isinstance(meta[key], bool) or not isinstance(meta[key], typ):
            raise MonolithError(f"{where}: key {key!r} has type {type(meta[key]).__name__}, value {meta[key]!r}")
    if not 1 <= meta["sm_count"] <= MAX_SM_COUNT:
        raise MonolithError(f"{where}: sm_count must be in [1, {MAX_SM_COUNT}], got {meta['sm_count']}")
    if not 1 <= meta["blocks"] <= MAX_BLOCKS:
        raise MonolithError(f"{where}: blocks must be in [1, {MAX_BLOCKS}], got {meta['blocks']}")
    if meta["threads"] < 1 or meta["position"] < 0:
        raise MonolithError(f"{where}: threads must be >= 1 and position >= 0 ({meta['threads']}, {meta['position']})")
    if not (math.isfinite(meta["token_time_us"]) and meta["token_time_us"] > 0):
        raise MonolithError(f"{where}: token_time_us must be a finite number > 0, got {meta['token_time_us']}")
    clk = meta["sm_clock_mhz"]
    if clk is not None and not (math.isfinite(clk) and clk > 0):
        raise MonolithError(f"{where}: sm_clock_mhz must be a finite number > 0 or null, got {clk}")
    tick = meta.get("globaltimer_tick_ns")
    lo, hi = TICK_NS_RANGE
    if tick is not None and (isinstance(tick, bool) or not isinstance(tick, int) or not lo <= tick <= hi):
        raise MonolithError(f"{where}: globaltimer_tick_ns must be an integer in [{lo}, {hi}] ns, got {tick!r}")
    cap = meta.get("xray_max_events")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_EVENTS):
        raise MonolithError(f"{where}: xray_max_events must be an integer in [1, {MAX_EVENTS}], got {cap!r}")
    return meta


def validate_raw(meta, events, where: str = "raw trace") -> tuple[dict, np.ndarray]:
    """Check a (meta, events) pair against the contract and the phase table."""
    from monolith.xray.phases import by_id

    meta = check_meta(meta, f"{where}: meta")
    ev = _check_events(events, where)
    phases = by_id()
    unknown = sorted(set(np.unique(ev[:, COL["phase"]]).tolist()) - set(phases))
    if unknown:
        raise MonolithError(f"{where}: unknown phase ids {unknown} (kernel/xray_phases.def has {sorted(phases)})")
    if ev[:, COL["block"]].max() >= meta["blocks"]:
        raise MonolithError(f"{where}: block id {ev[:, COL['block']].max()} >= meta blocks {meta['blocks']}")
    if ev[:, COL["smid"]].max() >= meta["sm_count"]:
        raise MonolithError(f"{where}: smid {ev[:, COL['smid']].max()} >= meta sm_count {meta['sm_count']}")
    return meta, ev


def save_raw(path, meta: dict, events) -> Path:
    meta, ev = validate_raw(meta, events, f"save_raw({path})")
    ev = ev[np.lexsort((ev[:, COL["c0"]], ev[:, COL["block"]]))]
    first = np.ones(len(ev), bool)
    first[1:] = ev[1:, COL["block"]] != ev[:-1, COL["block"]]

    def delta(col):  # per-block delta; the first event of each block keeps its absolute value
        d = np.diff(col, prepend=0)
        d[first] = col[first]
        return d

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    m = dict(meta, format=RAW_FORMAT, version=RAW_VERSION)
    with open(p, "wb") as f:
        np.savez_compressed(
            f, meta_json=np.array(json.dumps(m, sort_keys=True, default=str)),
            block=ev[:, 0].astype(np.uint16), smid=ev[:, 1].astype(np.uint16),
            phase=ev[:, 2].astype(np.uint16), layer=ev[:, 3].astype(np.uint16),
            g0_delta=delta(ev[:, 4]), g_dur=ev[:, 5] - ev[:, 4],
            c0_delta=delta(ev[:, 6]), c_dur=ev[:, 7] - ev[:, 6],
        )
    return p


_NEED = ("meta_json", "block", "smid", "phase", "layer", "g0_delta", "g_dur", "c0_delta", "c_dur")


def _member_sizes(zf: zipfile.ZipFile, p: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of each needed array, read from its .npy header inside the zip (a few
    hundred bytes each) so that nothing is inflated before its size is known to be sane."""
    out = {}
    for k in _NEED:
        try:
            with zf.open(k + ".npy") as f:
                version = np.lib.format.read_magic(f)
                read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
                if version not in read:
                    raise ValueError(f"npy format version {version} is not known")
                shape, _, dtype = read[version](f, max_header_size=10_000)
        except KeyError:
            continue
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise MonolithError(f"{p}: array {k} has a corrupt header: {e}") from None
        if dtype.hasobject:
            raise MonolithError(f"{p}: array {k} holds Python objects: not a raw trace")
        out[k] = (shape, dtype)
    return out


def _check_sizes(sizes: dict, p: Path) -> None:
    for k, (shape, dtype) in sizes.items():
        if k == "meta_json":
            if shape != () or dtype.kind != "U" or dtype.itemsize // 4 > MAX_META_CHARS:
                raise MonolithError(f"{p}: meta_json must be one string of at most {MAX_META_CHARS:,} characters, "
                                    f"got {dtype} {list(shape)}")
        elif len(shape) != 1 or shape[0] > MAX_EVENTS or dtype.kind not in "iu" or dtype.itemsize > 8:
            raise MonolithError(f"{p}: column {k} must be at most {MAX_EVENTS:,} integers, got {dtype} {list(shape)}")


def load_raw(path) -> tuple[dict, np.ndarray]:
    """Return (meta, events int64 [N, 8]); raise MonolithError naming what is wrong. Array sizes
    are checked from the members' headers before anything is inflated."""
    from monolith import jsonio

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise MonolithError(f"raw trace not found: {p}")
    head = jsonio.read_bytes(p, f"raw trace {p}", max_bytes=4, head=True)
    if head != b"PK\x03\x04":
        raise MonolithError(f"{p}: not a raw trace (.npz): the file is not a zip archive")
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise MonolithError(f"{p}: not a raw trace (.npz) or truncated: {e}") from None
    with zf:
        sizes = _member_sizes(zf, p)
        missing = [k for k in _NEED if k not in sizes]
        if missing:
            raise MonolithError(f"{p}: missing arrays {missing} (has {[n.removesuffix('.npy') for n in zf.namelist()]})")
        _check_sizes(sizes, p)
        try:
            with np.load(p, allow_pickle=False) as z:
                cols = {k: z[k] for k in _NEED}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise MonolithError(f"{p}: corrupt array data: {e}") from None
    meta = jsonio.loads(str(cols["meta_json"]), f"{p}: meta_json")
    if not isinstance(meta, dict) or meta.get("format") != RAW_FORMAT:
        raise MonolithError(f"{p}: meta.format is {meta.get('format') if isinstance(meta, dict) else None!r}, expected {RAW_FORMAT!r}")
    if meta.get("version") != RAW_VERSION:
        raise MonolithError(f"{p}: raw trace version {meta.get('version')!r} is not supported (expected {RAW_VERSION})")
    n = len(cols["block"])
    lens = {k: len(v) for k, v in cols.items() if k != "meta_json"}
    if len(set(lens.values())) != 1:
        raise MonolithError(f"{p}: event columns have different lengths {lens}")
    block = cols["block"].astype(np.int64)
    first = np.ones(n, bool)
    first[1:] = block[1:] != block[:-1]

    def undelta(d):  # cumulative sum restarted at each block's first event
        d = d.astype(np.int64).copy()
        starts = np.nonzero(first)[0]
        cs = np.cumsum(d)
        base = np.repeat(cs[starts] - d[starts], np.diff(np.append(starts, n)))
        return cs - base

    g0, c0 = undelta(cols["g0_delta"]), undelta(cols["c0_delta"])
    ev = np.stack([block, cols["smid"].astype(np.int64), cols["phase"].astype(np.int64),
                   cols["layer"].astype(np.int64), g0, g0 + cols["g_dur"], c0, c0 + cols["c_dur"]], axis=1)
    meta.pop("format")
    meta.pop("version")
    return validate_raw(meta, ev, str(p))


# ---------------------------------------------------------------- the kernel's buffer
# kernel/xray.cuh writes one of two record layouts into each block's kXrayMaxEvents 40-byte slots;
# the first 64-bit word tells which (COMPACT_MAGIC, else the 40-byte layout or nothing at all).
SLOT_BYTES = 40
COMPACT_MAGIC = 0x32305241584E4D4D  # kXrayCompactMagic
COMPACT_HEADER_WORDS = 8
FULL_DTYPE = np.dtype([("g0", "<u8"), ("g1", "<u8"), ("c0", "<u8"), ("c1", "<u8"),
                       ("phase", "<u2"), ("layer", "<u2"), ("block", "<u2"), ("smid", "<u2")])
NOMINAL_SM_GHZ = 1.98  # H200 (NOTES.md, facts): only for a block without an end anchor


def compact_capacity(slots_per_block: int) -> int:
    """Records a block can hold in the compact layout (kXrayCompactRecords)."""
    return slots_per_block * SLOT_BYTES // 8 - COMPACT_HEADER_WORDS


def _decode_compact(words: np.ndarray, block: int, tick_ns: int, where: str) -> tuple[np.ndarray, dict]:
    w = [int(x) for x in words[:COMPACT_HEADER_WORDS]]
    smid, blk = w[1] & 0xFFFFFFFF, w[1] >> 32
    if blk != block:
        raise MonolithError(f"{where}: block {block}'s region says it is block {blk} (a torn or misplaced buffer)")
    recs = words[COMPACT_HEADER_WORDS:]
    zero = np.nonzero(recs == 0)[0]
    recs = recs[: int(zero[0]) if len(zero) else len(recs)].astype(np.uint64)
    if len(zero) and np.any(words[COMPACT_HEADER_WORDS + int(zero[0]):] != 0):
        raise MonolithError(f"{where}: block {block} has records after an unwritten one (a torn buffer)")

    def anchor(i):  # {g, c, cycles between the two reads around the tick, edge}
        g, c, u = w[i], w[i + 1], w[i + 2]
        edge = bool(u >> 32)
        # g in the convention of an ordinary stamp (a tick's floor, which the analyzer corrects by
        # half a tick): a tick edge is exact, so it is stored half a tick early
        return {"g": g - tick_ns // 2 if edge else g, "c": c, "cycles": u & 0xFFFFFFFF, "edge": edge}

    a0 = anchor(2)
    a1 = anchor(5) if w[5] != 0 else None
    if w[2] == 0:
        raise MonolithError(f"{where}: block {block} has no begin anchor")
    phase = (recs >> np.uint64(48)).astype(np.int64) - 1
    layer = ((recs >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
    lo = (recs & np.uint64(0xFFFFFFFF)).astype(np.int64)
    if np.any(phase < 0):
        raise MonolithError(f"{where}: block {block} has a record with no phase (a torn buffer)")
    # unwrap the low 32 bits against the previous stamp; a cut may name an earlier cycle than the
    # record before it: clamp (the interval is then empty), as the 40-byte layout did in the kernel
    c = np.empty(len(lo) + 1, np.int64)
    c[0] = a0["c"]
    for i, x in enumerate(lo.tolist()):
        d = (x - (int(c[i]) & 0xFFFFFFFF)) & 0xFFFFFFFF
        if d >= 1 << 31:
            d -= 1 << 32
        c[i + 1] = max(int(c[i]), int(c[i]) + d)
    if a1 is not None and a1["c"] > a0["c"]:
        rate = (a1["g"] - a0["g"]) / (a1["c"] - a0["c"])  # ns per cycle
    else:
        rate = 1.0 / NOMINAL_SM_GHZ
    g = a0["g"] + np.rint((c - a0["c"]) * rate).astype(np.int64)
    n = len(lo)
    ev = np.stack([np.full(n, block), np.full(n, smid), phase, layer, g[:-1], g[1:], c[:-1], c[1:]], axis=1)
    info = {"block": block, "smid": smid, "begin": a0, "end": a1, "ghz": (1.0 / rate) if rate > 0 else None}
    return ev.astype(np.int64), info


def decode_buffer(buf, blocks: int, slots_per_block: int, tick_ns: int = 32, where: str = "X-ray buffer") -> tuple[np.ndarray, dict]:
    """The kernel's X-ray buffer (bytes: blocks x slots_per_block x 40) -> (events int64 [N, 8] as
    the raw contract has them, meta additions).

    Compact blocks (kernel/xray.cuh kCompact): c0/c1 are the clock64 stamps (unwrapped from their
    low 32 bits); g0/g1 are derived: each block's clock64 mapped linearly onto its two %globaltimer
    anchors (begin, end), so the analyzer's per-SM fit reproduces that map. The meta additions say
    so (xray_record, clock_anchors) and give the layout's capacity (xray_max_events: records per
    block). 40-byte blocks (kFull) are returned as the kernel wrote them."""
    raw = np.frombuffer(bytes(buf) if not isinstance(buf, np.ndarray) else buf.tobytes(), dtype=np.uint8)
    if len(raw) != blocks * slots_per_block * SLOT_BYTES:
        raise MonolithError(f"{where}: {len(raw)} bytes, expected {blocks} blocks x {slots_per_block} slots x {SLOT_BYTES}")
    region = slots_per_block * SLOT_BYTES
    parts, kinds, anchors = [], set(), {}
    for b in range(blocks):
        words = raw[b * region:(b + 1) * region].view("<u8")
        if words[0] == COMPACT_MAGIC:
            ev, info = _decode_compact(words, b, tick_ns, where)
            kinds.add("compact")
            anchors[b] = info
        elif not words.any():
            continue
        else:
            rec = raw[b * region:(b + 1) * region].view(FULL_DTYPE)
            rec = rec[(rec["g0"] != 0) | (rec["g1"] != 0)]
            ev = np.stack([rec[f].astype(np.int64) for f in COLUMNS], axis=1) if len(rec) else np.zeros((0, 8), np.int64)
            kinds.add("full")
        parts.append(ev)
    if len(kinds) > 1:
        raise MonolithError(f"{where}: blocks wrote different record layouts {sorted(kinds)}")
    events = np.concatenate(parts) if parts else np.zeros((0, 8), np.int64)
    kind = kinds.pop() if kinds else "none"
    add: dict = {"xray_record": kind}
    if kind == "compact":
        add["xray_max_events"] = compact_capacity(slots_per_block)
        add["clock_anchors"] = anchor_summary(anchors)
    elif kind == "full":
        add["xray_max_events"] = slots_per_block
    return events, add


def anchor_summary(anchors: dict) -> dict:
    """What the meta keeps of the per-block anchors: the mapping's facts, per block and overall."""
    ends = [a for a in anchors.values() if a["end"] is not None]
    cyc = [x["cycles"] for a in anchors.values() for x in (a["begin"], a["end"]) if x is not None and x["edge"]]
    ghz = [a["ghz"] for a in ends if a["ghz"]]
    return {
        "method": "per block, clock64 mapped linearly onto two %globaltimer tick edges (kernel entry, last "
                  "token-scope phase)",
        "blocks": len(anchors), "blocks_without_end": len(anchors) - len(ends),
        "edges": sum(1 for a in anchors.values() for x in (a["begin"], a["end"]) if x is not None and x["edge"]),
        "edge_window_cycles_max": max(cyc) if cyc else None,
        "sm_ghz": {"median": float(np.median(ghz)), "min": float(min(ghz)), "max": float(max(ghz))} if ghz else None,
        "per_block": {str(b): [a["begin"]["g"], a["begin"]["c"], a["end"]["g"] if a["end"] else None,
                               a["end"]["c"] if a["end"] else None] for b, a in sorted(anchors.items())},
    }
