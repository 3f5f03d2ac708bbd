"""The kernel's shape: every file in kernel/ with its line count and its longest function, and the
MONOLITH_* macros the kernel reads, checked against three limits.

Limits (each a flag): no file over 900 lines; every function shorter than 300 lines; at most 4
MONOLITH_* macros read. Prints one table; exits 1 with one line per violation, 0 when none.

Functions are found by a small brace matcher, not a C++ parser:
- comments and the insides of string, character and raw-string literals are blanked first (same
  length, same newlines), so no brace, quote or macro name inside them counts;
- preprocessor directives (with their continuation lines) are not code; each `#if` chain is read
  branch by branch, one pass per branch index (pass k takes branch min(k, last) of every chain, an
  absent `#else` counting as an empty branch), so every branch is seen with balanced braces and a
  function under any branch is measured;
- at file, namespace, `extern "C"` and class/struct/union scope a `{` opens: a nested scope
  (namespace, linkage block, class body: its member functions are functions), an enum body, an
  initializer, or a function body (its head has a parameter list: `name(...)` or a lambda's `[...]`,
  optionally followed by qualifiers, a trailing return type or a constructor's initializer list);
- everything inside a function body, lambdas and local classes included, belongs to that function.
A function's length runs from its declaration's first line (a `template <...>` line included) to
its closing brace, both counted, plus the lines of every `#include "..."` inside its body (a file the
preprocessor pastes into a function is that function's code).

A macro read: an identifier MONOLITH_[A-Z0-9_]+ in `#if/#ifdef/#ifndef/#elif` (so `defined(...)`
too), in a `#define`'s body, or in code. Not a read: an include guard, and a macro a kernel header
#defines itself other than as a default under its own `#ifndef` (every includer sees the header's
value, so no build sets it from outside). A `#define` in a translation unit (.cu/.cpp) is a build
configuration, like a -D flag: the headers' reads of it count.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
C_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".def", ".inc"})
HEADER_SUFFIXES = frozenset({".cuh", ".h", ".hpp", ".hh", ".def", ".inc"})
MACRO = re.compile(r"\bMONOLITH_[A-Z0-9_]+\b")
_RAW_PREFIXES = frozenset({"R", "LR", "uR", "UR", "u8R"})
_TOKEN = re.compile(r"""[A-Za-z_]\w*|\d(?:[\w.]|'(?=\w))*|"[^"]*"|'[^'\n]*'|::|->|\S""")
_DIRECTIVE = re.compile(r"^\s*#\s*([A-Za-z_]\w*)?(.*)$", re.S)
# Identifiers whose parenthesized group is not a parameter list.
_NOT_NAMES = frozenset(
    {
        "sizeof",
        "alignof",
        "decltype",
        "alignas",
        "__align__",
        "__launch_bounds__",
        "__attribute__",
        "__declspec",
        "noexcept",
        "throw",
        "requires",
        "static_assert",
        "typeof",
        "__typeof__",
        "__cluster_dims__",
        "if",
        "for",
        "while",
        "switch",
        "return",
    }
)
_LEADING = frozenset(
    {"typedef", "static", "inline", "constexpr", "export", "extern", "__device__", "__host__", "const", "volatile"}
)
_ACCESS = frozenset({"public", "private", "protected"})


# ------------------------------------------------------------------------------------ lexing
def strip_literals(text: str) -> str:
    """`text` with comments blanked and the insides of string/char/raw-string literals blanked (the
    quotes stay, so each literal is still one token). Same length and newlines as `text`."""
    out = list(text)
    n = len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    i = 0
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = i
            while True:  # a backslash-newline continues a // comment
                j = text.find("\n", j)
                if j < 0:
                    j = n
                    break
                if text[j - 1] != "\\":
                    break
                j += 1
            blank(i, j)
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c.isalpha() or c == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j < n and text[j] == '"' and text[i:j] in _RAW_PREFIXES:
                p = text.find("(", j + 1)
                delim = text[j + 1 : p] if p >= 0 else ""
                close = text.find(")" + delim + '"', p + 1) if p >= 0 else -1
                end = n if close < 0 else close + len(delim) + 1
                blank(j + 1, end)
                i = end + 1
            else:
                i = j
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1  # a pp-number: digit separators (1'000) are not character literals
            while j < n:
                d = text[j]
                if d.isalnum() or d in "_.":
                    j += 1
                elif d == "'" and j + 1 < n and (text[j + 1].isalnum() or text[j + 1] == "_"):
                    j += 2
                elif d in "+-" and text[j - 1] in "eEpP":
                    j += 1
                else:
                    break
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n)
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Directive:
    line: int  # 1-based, of the '#'
    last: int  # its last line (continuations)
    kind: str  # if, ifdef, define, endif, ... ('' for a null directive)
    rest: str  # the text after the keyword, continuations joined


def directives(stripped: str) -> tuple[list[Directive], set[int]]:
    """The preprocessor directives of stripped text and the set of lines they cover."""
    lines = stripped.split("\n")
    out: list[Directive] = []
    covered: set[int] = set()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("#"):
            j = i
            while lines[j].rstrip().endswith("\\") and j + 1 < len(lines):
                j += 1
            text = " ".join(ln.rstrip().rstrip("\\") for ln in lines[i : j + 1])
            m = _DIRECTIVE.match(text)
            out.append(Directive(i + 1, j + 1, m.group(1) or "", m.group(2).strip()))
            covered.update(range(i + 1, j + 2))
            i = j + 1
        else:
            i += 1
    return out, covered


@dataclass(frozen=True)
class Token:
    text: str
    line: int

    @property
    def ident(self) -> bool:
        return self.text[0].isalpha() or self.text[0] == "_"

    @property
    def literal(self) -> bool:
        return self.text[0] in "\"'"


def _branch_passes(dirs: list[Directive], nlines: int) -> list[list[bool]]:
    """Per pass, which lines are live code: pass k takes branch min(k, last) of every #if chain."""
    ctx: list[tuple] = [()] * (nlines + 2)
    nbranch: dict[int, int] = {}
    has_else: dict[int, bool] = {}
    stack: list[list[int]] = []
    events = {d.line: d for d in dirs}
    chain = 0
    for ln in range(1, nlines + 1):
        d = events.get(ln)
        if d is not None:
            if d.kind in ("if", "ifdef", "ifndef"):
                stack.append([chain, 0])
                nbranch[chain], has_else[chain] = 1, False
                chain += 1
            elif d.kind in ("elif", "elifdef", "elifndef", "else") and stack:
                stack[-1][1] += 1
                nbranch[stack[-1][0]] += 1
                has_else[stack[-1][0]] |= d.kind == "else"
            elif d.kind == "endif" and stack:
                cid = stack.pop()[0]
                nbranch[cid] += 0 if has_else[cid] else 1
        ctx[ln] = tuple((c, b) for c, b in stack)
    for c, _ in stack:  # an unterminated chain
        nbranch[c] += 0 if has_else[c] else 1
    npass = max(nbranch.values(), default=1)
    return [[all(b == min(k, nbranch[c] - 1) for c, b in ctx[ln]) for ln in range(nlines + 2)] for k in range(npass)]


def _tokens(stripped: str, live: list[bool], covered: set[int]) -> list[Token]:
    lines = stripped.split("\n")
    kept = "\n".join(ln if live[i + 1] and (i + 1) not in covered else "" for i, ln in enumerate(lines))
    starts = [0]
    for i, ch in enumerate(kept):
        if ch == "\n":
            starts.append(i + 1)
    return [Token(m.group(), bisect.bisect_right(starts, m.start())) for m in _TOKEN.finditer(kept)]


# ------------------------------------------------------------------------------------ functions
@dataclass(frozen=True)
class Function:
    name: str
    start: int  # the declaration's first line (its template line included)
    end: int  # the closing brace's line
    included: int = 0  # lines #included inside the body (a file pasted into a function is part of it)

    @property
    def lines(self) -> int:
        return self.end - self.start + 1 + self.included


def _close(toks: list[Token], i: int, open_: str, close: str) -> int:
    """Index of the token closing the group opened at toks[i] (the last token if unbalanced)."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _skip_template(h: list[Token]) -> list[Token]:
    """h without its leading `template <...>` clauses (and `[[...]]` attributes)."""
    while h:
        if h[0].text == "template" and len(h) > 1 and h[1].text == "<":
            depth, j = 0, 1
            while j < len(h):
                t = h[j].text
                if t == "(":
                    j = _close(h, j, "(", ")")
                elif t == "<":
                    depth += 1
                elif t == ">":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= len(h):
                return h
            h = h[j + 1 :]
        elif h[0].text == "[" and len(h) > 1 and h[1].text == "[":
            h = h[_close(h, 0, "[", "]") + 1 :]
        else:
            return h
    return h


def _name_before(h: list[Token], k: int) -> str:
    """The (qualified) name that ends at h[k]."""
    parts = [h[k].text]
    j = k - 1
    if j >= 0 and h[j].text == "~":
        parts.insert(0, "~")
        j -= 1
    while j >= 1 and h[j].text == "::" and h[j - 1].ident:
        parts[:0] = [h[j - 1].text, "::"]
        j -= 2
    return "".join(parts)


def _classify(head: list[Token]) -> tuple[str, str]:
    """What a `{` at declaration scope opens, from the tokens before it since the last declaration:
    ('scope', '') namespace / linkage block / class body, ('skip', '') enum or stray block,
    ('function', name), or ('init', '') an initializer (the declaration goes on after it)."""
    h = _skip_template(head)
    if not h:
        return "skip", ""
    if h[0].text == "extern" and len(h) > 1 and all(t.literal for t in h[1:]):
        return "scope", ""
    texts = [t.text for t in h]
    if "namespace" in texts[:2]:
        return "scope", ""
    first = next((t.text for t in h if t.text not in _LEADING), "")
    if first in ("struct", "class", "union"):
        return "scope", ""
    if first == "enum":
        return "skip", ""
    # top-level walk: parameter-list candidates, a constructor's ':', '=' after the parameters
    name, after_params, ctor_init, i = "", False, False, 0
    while i < len(h):
        t = h[i].text
        if t in ("(", "[", "{"):
            end = _close(h, i, t, {"(": ")", "[": "]", "{": "}"}[t])
            if t == "(" and not after_params and i > 0:
                p = h[i - 1]
                if p.ident and p.text not in _NOT_NAMES:
                    name, after_params = _name_before(h, i - 1), True
                elif p.text == "]":
                    lhs = [k for k in range(i) if h[k].text == "="]
                    name = _name_before(h, lhs[0] - 1) if lhs and lhs[0] > 0 and h[lhs[0] - 1].ident else "lambda"
                    after_params = True
                elif p.text == ">":  # f<T>(...)
                    depth, k = 0, i - 1
                    while k > 0:
                        depth += {">": 1, "<": -1}.get(h[k].text, 0)
                        if depth == 0:
                            break
                        k -= 1
                    if k > 0 and h[k - 1].ident and h[k - 1].text not in _NOT_NAMES:
                        name, after_params = _name_before(h, k - 1) + "".join(t.text for t in h[k:i]), True
            i = end + 1
            continue
        if t == "operator" and not after_params:
            j = i + 1
            sym = ""
            if j + 1 < len(h) and h[j].text == "(" and h[j + 1].text == ")":
                sym, j = "()", j + 2
            while j < len(h) and h[j].text != "(":
                sym += h[j].text if not h[j].ident or not sym or not sym[-1].isalnum() else " " + h[j].text
                j += 1
            if j < len(h):
                name, after_params = _name_before(h, i) + (" " if sym[:1].isalpha() else "") + sym, True
                i = _close(h, j, "(", ")") + 1
                continue
        if after_params and t == ":":
            ctor_init = True
        if after_params and t == "=" and not ctor_init:
            return "init", ""  # `... f(x) = ...`: not a parameter list
        i += 1
    last = h[-1].text
    if ctor_init:  # `X(...) : a_(1), b_{2} {`: an element's brace follows its name
        return ("function", name) if last in (")", "}") else ("init", "")
    if after_params:
        return "function", name
    if last == "]":  # `auto f = [&] {`
        k = _close_back(h, len(h) - 1)
        if k > 0 and h[k - 1].text in ("=", "(", ",", "return"):
            lhs = [j for j in range(k) if h[j].text == "="]
            return "function", _name_before(h, lhs[0] - 1) if lhs and lhs[0] > 0 and h[lhs[0] - 1].ident else "lambda"
    return "init", ""


def _close_back(h: list[Token], k: int) -> int:
    depth = 0
    for j in range(k, -1, -1):
        depth += {"]": 1, "[": -1}.get(h[j].text, 0)
        if depth == 0:
            return j
    return 0


def _scope(toks: list[Token], i: int, end: int, out: list[Function]) -> None:
    head = i
    while i < end:
        t = toks[i].text
        if t in (";", "}"):
            head = i + 1
        elif t == ":" and i == head + 1 and toks[head].text in _ACCESS:
            head = i + 1
        elif t in ("(", "["):
            i = _close(toks, i, t, ")" if t == "(" else "]")
        elif t == "{":
            close = _close(toks, i, "{", "}")
            kind, name = _classify(toks[head:i])
            if kind == "scope":
                _scope(toks, i + 1, close, out)
            elif kind == "function":
                out.append(Function(name, toks[head].line if head < i else toks[i].line, toks[close].line))
            if kind != "init":
                head = close + 1
            i = close
        i += 1


def functions(text: str) -> list[Function]:
    """Every function defined in C++/CUDA source `text` (see the module's docstring), in order."""
    stripped = strip_literals(text)
    dirs, covered = directives(stripped)
    nlines = stripped.count("\n") + 1
    found: dict[tuple[str, int], Function] = {}
    for live in _branch_passes(dirs, nlines):
        toks = _tokens(stripped, live, covered)
        out: list[Function] = []
        _scope(toks, 0, len(toks), out)
        for f in out:
            key = (f.name, f.start)
            if key not in found or f.lines > found[key].lines:
                found[key] = f
    return sorted(found.values(), key=lambda f: (f.start, f.name))


# ------------------------------------------------------------------------------------ macros
@dataclass(frozen=True)
class MacroScan:
    reads: dict[str, list[tuple[str, int]]]  # macro -> [(file, line)] where the kernel reads it
    own: dict[str, tuple[str, int]]  # macro a kernel header defines for itself -> (file, line) of a define
    guards: set[str]  # include guards


def _guard(dirs: list[Directive]) -> str | None:
    if len(dirs) < 3 or dirs[-1].kind != "endif":
        return None
    a, b = dirs[0], dirs[1]
    m = (
        re.fullmatch(r"(\w+)", a.rest)
        if a.kind == "ifndef"
        else re.fullmatch(r"!\s*defined\s*\(?\s*(\w+)\s*\)?", a.rest)
        if a.kind == "if"
        else None
    )
    if m and b.kind == "define" and b.rest == m.group(1):
        return m.group(1)
    return None


def scan_macros(sources: dict[str, str]) -> MacroScan:
    """MONOLITH_* reads over {path: text} (see the module's docstring for what counts)."""
    reads: dict[str, list[tuple[str, int]]] = {}
    own: dict[str, tuple[str, int]] = {}
    guards: set[str] = set()
    for path, text in sources.items():
        stripped = strip_literals(text)
        dirs, covered = directives(stripped)
        guard = _guard(dirs)
        if guard:
            guards.add(guard)
        header = Path(path).suffix in HEADER_SUFFIXES
        conds: list[str] = []  # the enclosing conditions' texts
        for d in dirs:
            if d.kind in ("if", "ifdef", "ifndef"):
                conds.append(f"{d.kind} {d.rest}")
            elif d.kind in ("elif", "elifdef", "elifndef", "else") and conds:
                conds[-1] = f"{d.kind} {d.rest}"
            elif d.kind == "endif" and conds:
                conds.pop()
            if d.kind in ("if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"):
                names = MACRO.findall(d.rest)
            elif d.kind == "define":
                m = re.match(r"(\w+)(\([^)]*\))?(.*)", d.rest, re.S)
                name = m.group(1) if m else ""
                names = MACRO.findall(m.group(3)) if m else []
                default = any(
                    re.fullmatch(rf"ifndef {re.escape(name)}|if !\s*defined\s*\(?\s*{re.escape(name)}\s*\)?", c)
                    for c in conds
                )
                if header and MACRO.fullmatch(name) and name != guard and not default:
                    own.setdefault(name, (path, d.line))
            else:
                names = []
            for nm in names:
                if nm != guard:
                    reads.setdefault(nm, []).append((path, d.line))
        for i, ln in enumerate(stripped.split("\n"), start=1):
            if i not in covered:
                for nm in MACRO.findall(ln):
                    reads.setdefault(nm, []).append((path, i))
    reads = {k: sorted(set(v)) for k, v in sorted(reads.items()) if k not in own and k not in guards}
    return MacroScan(reads, own, guards)


# ------------------------------------------------------------------------------------ the tree
@dataclass(frozen=True)
class FileShape:
    path: str  # relative to the repository root
    lines: int
    longest: Function | None


def _line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def kernel_files(kernel_dir: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(kernel_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        out += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".") and not f.endswith(".pyc")]
    return sorted(out)


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _included_lines(lines: list[str], lo: int, hi: int, base: Path, seen: frozenset[Path]) -> int:
    """Lines that the `#include "..."`s among lines[lo:hi] paste in, beyond their own line (recursively,
    each file once per chain)."""
    extra = 0
    for line in lines[lo:hi]:
        m = _INCLUDE.match(line)
        inc = (base / m.group(1)).resolve() if m else None
        if inc is None or inc in seen or not inc.is_file():
            continue
        sub = inc.read_text(encoding="utf-8", errors="replace")
        sub_lines = sub.split("\n")
        extra += _line_count(sub) - 1 + _included_lines(sub_lines, 0, len(sub_lines), inc.parent, seen | {inc})
    return extra


def with_includes(f: Function, text: str, base: Path) -> Function:
    """`f` with the lines of every `#include "..."` inside its body added: a phase pasted into a
    function by the preprocessor makes that function longer."""
    lines = text.split("\n")
    # 0-based indices of the lines strictly inside the declaration's first line and the closing brace
    return Function(f.name, f.start, f.end, f.included + _included_lines(lines, f.start, f.end - 1, base, frozenset()))


def shape(kernel_dir: Path, root: Path | None = None) -> tuple[list[FileShape], MacroScan]:
    root = root or kernel_dir.parent
    files, sources = [], {}
    for p in kernel_files(kernel_dir):
        rel = p.relative_to(root).as_posix() if p.is_relative_to(root) else p.as_posix()
        text = p.read_text(encoding="utf-8", errors="replace")
        longest = None
        if p.suffix in C_SUFFIXES:
            sources[rel] = text
            longest = max(
                (with_includes(f, text, p.parent) for f in functions(text)), key=lambda f: f.lines, default=None
            )
        files.append(FileShape(rel, _line_count(text), longest))
    return files, scan_macros(sources)


# Functions over the limit whose split was built and measured as a loss: (file, function) -> (the most
# lines allowed, the evidence). Such a function may not grow; the table names the evidence. Splitting
# stream_consumer's phases into functions moves ptxas' register allocation at the 96-register cap and
# cost 2.5-3.7 % (bitwise-equal tokens; docs/EXPERIMENTS.md, "the stream phases as types").
PRICED: dict[tuple[str, str], tuple[int, str]] = {
    ("kernel/schedule_stream.cuh", "stream_consumer"): (1418, "results/house_ab/README.md"),
}


def priced(f: FileShape) -> tuple[int, str] | None:
    """The recorded bound and evidence of f's longest function, if it is a priced exception."""
    return PRICED.get((f.path, f.longest.name)) if f.longest else None


def violations(
    files: list[FileShape],
    macros: MacroScan,
    *,
    max_file_lines: int = 900,
    function_limit: int = 300,
    max_macros: int = 4,
) -> list[str]:
    """One line per broken limit."""
    out = [f"{f.path}: {f.lines} lines (at most {max_file_lines})" for f in files if f.lines > max_file_lines]
    out += [
        f"{f.path}:{f.longest.start}: {f.longest.name} is {f.longest.lines} lines (must be under {function_limit})"
        for f in files
        if f.longest and f.longest.lines >= function_limit and not priced(f)
    ]
    out += [
        f"{f.path}:{f.longest.start}: {f.longest.name} is {f.longest.lines} lines (priced at {priced(f)[0]}: it may not grow)"
        for f in files
        if priced(f) and f.longest.lines > priced(f)[0]
    ]
    if len(macros.reads) > max_macros:
        out.append(
            f"kernel reads {len(macros.reads)} MONOLITH_* macros (at most {max_macros}): {', '.join(macros.reads)}"
        )
    return out


def _where(uses: list[tuple[str, int]], limit: int = 6) -> str:
    by_file: dict[str, list[int]] = {}
    for path, line in uses:
        by_file.setdefault(path, []).append(line)
    parts = [f"{p}:{','.join(map(str, ls))}" for p, ls in by_file.items()]
    return " ".join(parts[:limit]) + (f" (+{len(parts) - limit} files)" if len(parts) > limit else "")


def table(files: list[FileShape], macros: MacroScan) -> str:
    w = max([len(f.path) for f in files] + [len("file")])
    fw = max([len(f.longest.name) for f in files if f.longest] + [len("longest function")])
    rows = [f"{'file':<{w}}  {'lines':>5}  {'longest function':<{fw}}  {'lines':>5}"]
    for f in files:
        fn = (f.longest.name, str(f.longest.lines)) if f.longest else ("-", "-")
        note = f"  (over the limit, priced: {priced(f)[1]})" if priced(f) else ""
        rows.append(f"{f.path:<{w}}  {f.lines:>5}  {fn[0]:<{fw}}  {fn[1]:>5}{note}")
    rows.append(f"{'total':<{w}}  {sum(f.lines for f in files):>5}")
    rows.append("")
    rows.append(f"MONOLITH_* macros read in kernel/: {len(macros.reads)}")
    mw = max([len(m) for m in list(macros.reads) + list(macros.own)] + [1])
    rows += [f"  {m:<{mw}}  {_where(uses)}" for m, uses in macros.reads.items()]
    if macros.own:
        rows.append("defined by kernel headers themselves (not build switches):")
        rows += [f"  {m:<{mw}}  {p}:{ln}" for m, (p, ln) in macros.own.items()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Print every file in kernel/ with its line count and longest function, and the MONOLITH_* "
        "macros the kernel reads; exit 1 with one line per broken limit."
    )
    ap.add_argument("--kernel-dir", type=Path, default=REPO_ROOT / "kernel", help="default: %(default)s")
    ap.add_argument(
        "--max-file-lines", type=int, default=900, help="no file over this many lines (default %(default)s)"
    )
    ap.add_argument(
        "--function-limit",
        type=int,
        default=300,
        help="every function shorter than this many lines (default %(default)s)",
    )
    ap.add_argument(
        "--max-macros", type=int, default=4, help="at most this many MONOLITH_* macros read (default %(default)s)"
    )
    args = ap.parse_args(argv)
    if not args.kernel_dir.is_dir():
        print(f"kernel_shape: {args.kernel_dir} is not a directory", file=sys.stderr)
        return 2
    kdir = args.kernel_dir.resolve()
    files, macros = shape(kdir, kdir.parent)
    print(table(files, macros))
    bad = violations(
        files,
        macros,
        max_file_lines=args.max_file_lines,
        function_limit=args.function_limit,
        max_macros=args.max_macros,
    )
    for line in bad:
        print(f"kernel_shape: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
