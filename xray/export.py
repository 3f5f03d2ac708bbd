"""Export an X-ray trace: the page format (gzipped columnar JSON, xray/FORMAT.md) and
Chrome trace-event JSON (opens in Perfetto / chrome://tracing).

`validate_page_trace` implements the rules of FORMAT.md one for one; the page implements the
same rules in TypeScript, so any change here is a change to FORMAT.md and a version bump.
"""
from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path

import numpy as np

from monolith.errors import MonolithError
from monolith.xray.analyze import align
from monolith.xray.phases import load_phases
from monolith.xray.raw import COL, MAX_BLOCKS, MAX_ID, MAX_SM_COUNT, validate_raw

PAGE_FORMAT = "monolith-xray"
PAGE_VERSION = 1
COLUMNS = ("block", "phase", "layer", "start_ns", "dur_ns")
MAX_TRACE_BYTES = 32 * 1024 * 1024   # JSON text, after gzip: checked while inflating, before parsing
MAX_SAFE_INT = 2**53 - 1             # JavaScript's exact integers: the page reads every number as a double
_META_COPY = ("variant", "gpu", "sm_count", "blocks", "threads", "position", "sm_clock_mhz", "token_time_us",
              "build", "weights", "created", "synthetic", "xray_overhead")
_COLOR = re.compile(r"^#[0-9a-fA-F]{6}$")

# ---------------------------------------------------------------- page format


def to_page(meta: dict, events: np.ndarray, summary: dict | None = None, method: str = "clock64-fit") -> dict:
    meta, ev = validate_raw(meta, events)
    al = align(meta, ev, method)
    # round the ends, not the durations, so that back-to-back intervals stay back-to-back
    s = np.rint(al["start_ns"]).astype(np.int64)
    e = np.rint(al["end_ns"]).astype(np.int64)
    order = np.lexsort((s, ev[:, COL["block"]]))  # by block, then time: compresses best
    blocks = {}
    for b, m in zip(ev[:, COL["block"]].tolist(), ev[:, COL["smid"]].tolist(), strict=True):
        blocks.setdefault(b, m)
    pm = {k: meta[k] for k in _META_COPY if k in meta}
    pm["trace_span_us"] = round(float(e.max() - s.min()) / 1e3, 3)
    pm["clock_alignment"] = {"method": al["method"], "residual_ns": round(al["residual_ns"]["rms"], 2),
                             "residual_max_ns": round(al["residual_ns"]["max"], 2), "tick_ns": al["tick_ns"]}
    page = {
        "format": PAGE_FORMAT, "version": PAGE_VERSION, "meta": pm,
        "phases": [p.as_dict() for p in load_phases()],
        "blocks": [{"block": int(b), "sm": int(m)} for b, m in sorted(blocks.items())],
        "events": {
            "block": ev[order, COL["block"]].tolist(), "phase": ev[order, COL["phase"]].tolist(),
            "layer": ev[order, COL["layer"]].tolist(), "start_ns": s[order].tolist(),
            "dur_ns": (e - s)[order].tolist(),
        },
    }
    if summary is not None:
        page["summary"] = page_summary(summary)
    return page


def page_summary(summ: dict) -> dict:
    """The few analyzer numbers the page shows (budget bar, barrier share); optional in the format."""
    r = lambda x: None if x is None else round(float(x), 4)  # noqa: E731
    bs = summ["barrier_share"]
    return {
        "phases": [{"name": p["name"], "sum_us": r(p.get("sum_us", 0)), "mean_per_block_us": r(p.get("mean_per_block_us", 0)),
                    "span_total_us": r(p.get("span_total_us", 0)), "eff_bw_tbs": r(p.get("eff_bw_tbs"))}
                   for p in summ["phases"]],
        "layer_us": r(bs["layer_us"]), "wait_us_per_layer": r(bs["wait_us_per_layer"]),
        "grid_barrier_us_per_layer": r(bs["grid_barrier_us_per_layer"]),
        "wait_share": r(bs["wait_share"]), "upstream_share": r(bs["upstream"]["share"]),
        "idle_sms": summ["idle"]["idle_sms"], "span_vs_token_time": r(summ["span_vs_token_time"]["ratio"]),
        "bw_method": (summ.get("bandwidth") or {}).get("method", {}).get("per_phase"),
    }


def dumps_page(page: dict) -> bytes:
    # mtime=0: the same trace gives the same bytes (clean git diffs)
    return gzip.compress(json.dumps(page, separators=(",", ":")).encode(), compresslevel=9, mtime=0)


def write_page(page: dict, path) -> Path:
    validate_page_trace(page)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(dumps_page(page))
    return p


TOO_BIG = f"larger than {MAX_TRACE_BYTES} bytes of JSON (the reader's limit)"


def _gunzip_capped(data: bytes, where: str) -> bytes:
    """One gzip member, inflated to at most MAX_TRACE_BYTES: a small file that inflates to
    gigabytes is refused while inflating, never held in memory."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip wrapper: zlib checks the CRC-32 and length
    try:
        out = d.decompress(data, MAX_TRACE_BYTES + 1)
    except zlib.error as e:
        msg = "CRC check failed" if "check" in str(e) else str(e)
        raise MonolithError(f"{where}: corrupt gzip: {msg}") from None
    if len(out) > MAX_TRACE_BYTES:
        raise MonolithError(f"{where}: decompressed trace is {TOO_BIG}")
    if not d.eof:
        raise MonolithError(f"{where}: truncated gzip (the file ends before the compressed stream does)")
    if d.unused_data:
        raise MonolithError(f"{where}: corrupt gzip: data after the end of the compressed stream")
    return out


def parse_page_bytes(data: bytes, where: str = "trace") -> dict:
    """Rules 1-2: gzip (by its magic bytes) or plain UTF-8 JSON text, at most MAX_TRACE_BYTES."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip_capped(data, where)
    elif len(data) > MAX_TRACE_BYTES:
        raise MonolithError(f"{where}: trace is {TOO_BIG}")
    # NaN / Infinity are not JSON (Python's parser would take them; the browser's does not);
    # the shared reader also bounds the depth and the integers' digits
    from monolith import jsonio

    try:  # numbers past double range stay +-inf, as in the browser: the validator names the field
        obj = jsonio.loads(bytes(data), where, max_bytes=MAX_TRACE_BYTES, finite=False)
    except jsonio.NotJSON as e:
        raise MonolithError(f"{where}: not JSON: {e.detail}") from None
    return validate_page_trace(obj, where)


def read_page(path) -> dict:
    from monolith import jsonio

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise MonolithError(f"page trace not found: {p}")
    return parse_page_bytes(jsonio.read_bytes(p, f"page trace {p}", max_bytes=MAX_TRACE_BYTES), str(p))


def _is_int(x) -> bool:
    """An integer as JSON means it on both sides: no fractional part, exact in a double
    (JavaScript reads 5.0 as 5 and 1e300 as an integer it cannot hold exactly)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    if isinstance(x, float) and not (math.isfinite(x) and x.is_integer()):
        return False
    return abs(x) <= MAX_SAFE_INT


def _is_num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


_MISSING = object()


def _show(x) -> str:
    """A value in a message, written the way the page writes it (JSON.stringify; a missing
    field shows as None), so both readers give the same message for the same file."""
    if x is _MISSING:
        return "None"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "null"
        if x.is_integer() and abs(x) < 1e21:
            return str(int(x))
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(x))
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def validate_page_trace(obj, where: str = "trace") -> dict:
    """Rules 3-11 of FORMAT.md. Returns obj unchanged or raises MonolithError naming the rule."""
    def fail(msg):
        raise MonolithError(f"{where}: {msg}")

    if not isinstance(obj, dict):
        fail(f"top level must be a JSON object, got {type(obj).__name__}")
    if obj.get("format") != PAGE_FORMAT:
        fail(f"not a {PAGE_FORMAT} trace (format = {_show(obj.get('format', _MISSING))})")
    if not _is_int(obj.get("version")):
        fail(f"version must be an integer, got {_show(obj.get('version', _MISSING))}")
    if obj["version"] != PAGE_VERSION:
        fail(f"unsupported version {_show(obj['version'])} (this reader supports {PAGE_VERSION})")
    for key, typ, tname in (("meta", dict, "object"), ("phases", list, "array"), ("blocks", list, "array"),
                            ("events", dict, "object")):
        if key not in obj:
            fail(f"missing field {key!r}")
        if not isinstance(obj[key], typ):
            fail(f"{key} must be an {tname}, got {type(obj[key]).__name__}")
    meta = obj["meta"]
    for key, ok, want in (("variant", lambda v: isinstance(v, str) and v != "", "a non-empty string"),
                          ("gpu", lambda v: isinstance(v, str), "a string"),
                          ("sm_count", lambda v: _is_int(v) and 1 <= v <= MAX_SM_COUNT, f"an integer in [1, {MAX_SM_COUNT}]"),
                          ("blocks", lambda v: _is_int(v) and 1 <= v <= MAX_BLOCKS, f"an integer in [1, {MAX_BLOCKS}]"),
                          ("position", lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
                          ("token_time_us", lambda v: v is None or (_is_num(v) and v > 0), "a finite number > 0 or null")):
        if key not in meta:
            fail(f"missing field meta.{key}")
        if not ok(meta[key]):
            fail(f"meta.{key} must be {want}, got {_show(meta[key])}")
    if "summary" in obj and not isinstance(obj["summary"], dict):
        fail("summary must be an object when present")

    phases = obj["phases"]
    if not phases:
        fail("phases must not be empty")
    ids, names = set(), set()
    for i, p in enumerate(phases):
        at = f"phases[{i}]"
        if not isinstance(p, dict):
            fail(f"{at} must be an object")
        for k in ("id", "name", "kind", "scope", "color"):
            if k not in p:
                fail(f"missing field {at}.{k}")
        if not _is_int(p["id"]) or not 0 <= p["id"] <= MAX_ID:
            fail(f"{at}.id must be an integer in [0, {MAX_ID}], got {_show(p['id'])}")
        if p["id"] in ids:
            fail(f"{at}.id {_show(p['id'])} is a duplicate phase id")
        if not isinstance(p["name"], str) or not p["name"] or p["name"] in names:
            fail(f"{at}.name must be a unique non-empty string, got {_show(p['name'])}")
        if p["kind"] not in ("work", "wait"):
            fail(f"{at}.kind must be \"work\" or \"wait\", got {_show(p['kind'])}")
        if p["scope"] not in ("layer", "token"):
            fail(f"{at}.scope must be \"layer\" or \"token\", got {_show(p['scope'])}")
        if not isinstance(p["color"], str) or not _COLOR.match(p["color"]):
            fail(f"{at}.color must be \"#rrggbb\", got {_show(p['color'])}")
        ids.add(p["id"])
        names.add(p["name"])

    block_ids = set()
    for i, b in enumerate(obj["blocks"]):
        at = f"blocks[{i}]"
        if not isinstance(b, dict):
            fail(f"{at} must be an object")
        for k in ("block", "sm"):
            if k not in b:
                fail(f"missing field {at}.{k}")
        if not _is_int(b["block"]) or not 0 <= b["block"] < meta["blocks"] or b["block"] in block_ids:
            fail(f"{at}.block must be a unique integer in [0, meta.blocks={_show(meta['blocks'])}), got {_show(b['block'])}")
        if not _is_int(b["sm"]) or not 0 <= b["sm"] < meta["sm_count"]:
            fail(f"{at}.sm must be an integer in [0, meta.sm_count={_show(meta['sm_count'])}), got {_show(b['sm'])}")
        block_ids.add(b["block"])

    evs = obj["events"]
    for c in COLUMNS:
        if c not in evs:
            fail(f"missing field events.{c}")
        if not isinstance(evs[c], list):
            fail(f"events.{c} must be an array, got {type(evs[c]).__name__}")
    lens = {c: len(evs[c]) for c in COLUMNS}
    if len(set(lens.values())) != 1:
        fail(f"event columns differ in length: {lens}")
    if lens["block"] == 0:
        fail("events are empty")
    for c in COLUMNS:
        col = evs[c]
        bad = next((i for i, v in enumerate(col) if not _is_int(v)), None)
        if bad is not None:
            fail(f"events.{c}[{bad}] must be an integer, got {_show(col[bad])}")
    checks = (("phase", lambda v: v in ids, "unknown phase id"), ("block", lambda v: v in block_ids, "unknown block (not in blocks)"),
              ("layer", lambda v: 0 <= v <= MAX_ID, f"layer outside [0, {MAX_ID}]"), ("start_ns", lambda v: v >= 0, "negative start"),
              ("dur_ns", lambda v: v >= 0, "negative duration"))
    for c, ok, msg in checks:
        bad = next((i for i, v in enumerate(evs[c]) if not ok(v)), None)
        if bad is not None:
            fail(f"events.{c}[{bad}]: {msg} {_show(evs[c][bad])}")
    return obj


# ---------------------------------------------------------------- Chrome / Perfetto


def to_perfetto(meta: dict, events: np.ndarray, method: str = "clock64-fit") -> dict:
    """Chrome trace-event JSON: pid = SM, tid = block, "X" events in µs (ns precision)."""
    meta, ev = validate_raw(meta, events)
    al = align(meta, ev, method)
    s, e = al["start_ns"], al["end_ns"]
    ph = {p.id: p for p in load_phases()}
    out = []
    sms = sorted(set(ev[:, COL["smid"]].tolist()))
    for sm in range(int(meta["sm_count"])):
        idle = sm not in sms
        out.append({"ph": "M", "name": "process_name", "pid": sm, "args": {"name": f"SM {sm}" + (" (idle: no block)" if idle else "")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": sm, "args": {"sort_index": sm}})
        if idle:  # an explicit bar so that the idle SM is visible, not just absent
            out.append({"ph": "X", "name": "idle (no block)", "cat": "idle", "pid": sm, "tid": 0,
                        "ts": 0.0, "dur": round(float(e.max()) / 1e3, 3)})
    seen = set()
    for i in np.lexsort((s, ev[:, COL["block"]])):
        b, sm, p, layer = (int(ev[i, COL[k]]) for k in ("block", "smid", "phase", "layer"))
        if b not in seen:
            seen.add(b)
            out.append({"ph": "M", "name": "thread_name", "pid": sm, "tid": b, "args": {"name": f"block {b}"}})
        # 10 ns resolution: below the clock fit's residual (~13 ns rms) and globaltimer's 32 ns
        # tick, and ~17 % smaller gzipped than 1 ns (the committed traces' 5 MB budget)
        out.append({"ph": "X", "name": ph[p].name, "cat": ph[p].kind, "pid": sm, "tid": b,
                    "ts": round(float(s[i]) / 1e3, 2), "dur": round(float(e[i] - s[i]) / 1e3, 2),
                    "args": {"layer": layer}})
    other = {k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in meta.items() if k != "truth"}
    other["clock_alignment"] = al["method"]
    return {"traceEvents": out, "displayTimeUnit": "ns", "otherData": other}


def write_perfetto(obj: dict, path) -> Path:
    """`.json.gz` is gzipped at level 9 (Perfetto's UI opens it directly; the committed traces'
    5 MB budget); anything else is plain JSON."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj, separators=(",", ":")).encode()
    p.write_bytes(gzip.compress(data, 9, mtime=0) if p.name.endswith(".gz") else data)
    return p
