"""The one JSON reader for every file the project reads (configs, pack metadata, maps, results,
X-ray metadata, prompt sets): a size bound before reading, a depth bound, no bare NaN/Infinity
(not JSON), no duplicate keys (the second would silently win), no integer of more digits than
any real field needs, and every failure one MonolithError line naming the file.

`json.loads` alone turns a 100k-deep nesting into a RecursionError traceback, a 5,000-digit
integer into a ValueError traceback, and accepts `NaN` and duplicate keys without a word.
"""
from __future__ import annotations

import errno
import json
import math
from pathlib import Path

from monolith.errors import MonolithError

MAX_BYTES = 64 << 20   # larger than any JSON file the project writes (results files are < 1 MB)
MAX_DEPTH = 64         # the deepest file the project writes nests < 10 levels
MAX_INT_DIGITS = 40    # a sha256 is a string; no count, size or offset needs more digits


class _Refused(ValueError):
    pass


class NotJSON(MonolithError):
    """The text is not plain, bounded JSON; `detail` says why without naming the file."""

    def __init__(self, what: str, verb: str, detail: str):
        super().__init__(f"{what} {verb}: {detail}")
        self.detail = detail


def _int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(s.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(s)


def _float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise _Refused(f"the number {s[:40]} is out of range")
    return x


def _constant(s: str):
    raise _Refused(f"bare {s} (JSON has no NaN/Infinity)")


def _pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"duplicate key {k!r}")
        out[k] = v
    return out


def _depth(obj) -> int:
    """Nesting depth, iteratively (no recursion on hostile input)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict | list):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def loads(text: str | bytes, what: str, *, max_bytes: int = MAX_BYTES, finite: bool = True):
    """Parse JSON text; MonolithError '<what> ...' on anything but plain, bounded JSON (NotJSON
    for the text itself). finite=False lets a number beyond double range through as +-inf, as a
    browser's JSON.parse does, for a validator that names the field."""
    if isinstance(text, bytes | bytearray):
        if len(text) > max_bytes:
            raise MonolithError(f"{what}: {len(text):,} bytes of JSON is more than the {max_bytes:,} allowed")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise NotJSON(what, "is not valid JSON", f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if len(text) > max_bytes:
        raise MonolithError(f"{what}: {len(text):,} characters of JSON is more than the {max_bytes:,} allowed")
    try:
        obj = json.loads(text, parse_int=_int, parse_float=_float if finite else float, parse_constant=_constant,
                         object_pairs_hook=_pairs)
    except _Refused as e:
        raise NotJSON(what, "is not acceptable JSON", str(e)) from None
    except json.JSONDecodeError as e:
        raise NotJSON(what, "is not valid JSON", f"{e.msg} at line {e.lineno}, column {e.colno}") from None
    except RecursionError:
        raise NotJSON(what, "is not acceptable JSON", f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:
        raise NotJSON(what, "is not valid JSON", str(e)[:120]) from None
    if _depth(obj) > MAX_DEPTH:
        raise NotJSON(what, "is not acceptable JSON", f"nested more than {MAX_DEPTH} levels deep")
    return obj


def read_bytes(path: str | Path, what: str | None = None, *, max_bytes: int = MAX_BYTES,
               head: bool = False) -> bytes:
    """A file's bytes, at most max_bytes (with head=True: its first max_bytes bytes, however long
    it is); one line for every way reading can fail (not found, a symbolic link loop, permission
    denied, a directory)."""
    path = Path(path)
    what = what or str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + (not head))
    except FileNotFoundError:
        raise MonolithError(f"{what}: not found") from None
    except PermissionError:
        raise MonolithError(f"{what}: permission denied") from None
    except IsADirectoryError:
        raise MonolithError(f"{what}: is a directory, not a file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise MonolithError(f"{what}: a symbolic link loop") from None
        raise MonolithError(f"{what}: cannot be read ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise MonolithError(f"{what}: larger than the {max_bytes:,} bytes allowed")
    return data


def load(path: str | Path, what: str | None = None, *, max_bytes: int = MAX_BYTES):
    """Read and parse a JSON file (see loads)."""
    what = what or str(path)
    return loads(read_bytes(path, what, max_bytes=max_bytes), what, max_bytes=max_bytes)


def load_object(path: str | Path, what: str | None = None, *, max_bytes: int = MAX_BYTES) -> dict:
    """A JSON file that must hold an object."""
    what = what or str(path)
    return expect(load(path, what, max_bytes=max_bytes), dict, what)


_KIND = {bool: "true or false", dict: "an object", list: "an array", str: "a string", int: "an integer",
         float: "a number"}


def kind(o) -> str:
    """A JSON value's kind in words (for error messages)."""
    if o is None:
        return "null"
    return next((name for t, name in _KIND.items() if isinstance(o, t)), type(o).__name__)


def expect(o, typ, what: str):
    """`o` if it is a `typ` (a type or tuple of types; bool is never an int here), else a
    MonolithError '<what> must be <kind>, got <kind>'."""
    types = typ if isinstance(typ, tuple) else (typ,)
    ok = isinstance(o, types) and not (isinstance(o, bool) and bool not in types)
    if not ok:
        want = " or ".join(_KIND.get(t, t.__name__) for t in types)
        raise MonolithError(f"{what} must be {want}, got {kind(o)}")
    return o


def field(obj: dict, key: str, typ, what: str):
    """obj[key] checked by `expect`; a missing key is named as missing."""
    if key not in obj:
        raise MonolithError(f"{what}: field {key!r} is missing")
    return expect(obj[key], typ, f"{what}: field {key!r}")


def non_finite(o, where: str = "") -> list[str]:
    """Every NaN/Infinity in a JSON-bound object, by JSON path (JSON has no such numbers: a
    writer that turned them into null would hide a failed measurement)."""
    out, stack = [], [(o, where)]
    while stack:
        x, w = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            out.append(f"{w or 'the document'} is {x}: JSON holds finite numbers only")
        elif isinstance(x, dict):
            stack.extend((v, f"{w}.{k}" if w else str(k)) for k, v in reversed(list(x.items())))
        elif isinstance(x, list | tuple):
            stack.extend((v, f"{w}[{i}]") for i, v in reversed(list(enumerate(x))))
    return out


def write(path: str | Path, obj, what: str | None = None, **dump_kw) -> Path:
    """Write `obj` as JSON (indent 1), refusing NaN/Infinity by path instead of writing a bare
    `NaN` (not JSON) or a silent null."""
    path = Path(path)
    bad = non_finite(obj)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise MonolithError(f"{what or path}: not written: {bad[0]}{more}")
    path.write_text(json.dumps(obj, indent=1, allow_nan=False, **dump_kw) + "\n")
    return path
