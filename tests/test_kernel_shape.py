"""scripts/kernel_shape.py: the kernel's size limits on the real kernel/ tree (no file over 900 lines,
every function under 300, at most 4 MONOLITH_* macros read, and those the ones kernel_spec accepts),
and its brace matcher and macro scan on small C++/CUDA snippets, so each limit can fail."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from monolith import REPO_ROOT, kernel_spec

SCRIPT = REPO_ROOT / "scripts" / "kernel_shape.py"
_spec = importlib.util.spec_from_file_location("kernel_shape", SCRIPT)
ks = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kernel_shape", ks)  # dataclasses look their module up
_spec.loader.exec_module(ks)
ks = sys.modules["kernel_shape"]


def fns(src: str) -> dict[str, tuple[int, int]]:
    """{name: (first line, lines)} of the functions in src (dedented)."""
    return {f.name: (f.start, f.lines) for f in ks.functions(textwrap.dedent(src))}


def body(n: int) -> str:
    """n statement lines."""
    return "".join(f"  x += {i};\n" for i in range(n))


# ------------------------------------------------------------------------------- the real tree
@pytest.fixture(scope="module")
def real():
    return ks.shape(REPO_ROOT / "kernel", REPO_ROOT)


def test_no_kernel_file_over_900_lines(real):
    files, _ = real
    assert files and all(f.path.startswith("kernel/") for f in files)
    over = [f"{f.path}: {f.lines}" for f in files if f.lines > 900]
    assert not over, over


def test_every_kernel_function_under_300_lines(real):
    files, _ = real
    assert any(f.longest for f in files)
    over = [
        f"{f.path}:{f.longest.start} {f.longest.name}: {f.longest.lines}"
        for f in files
        if f.longest and f.longest.lines >= 300 and not ks.priced(f)
    ]
    assert not over, over


def test_a_priced_exception_has_its_evidence_and_does_not_grow(real):
    """The functions over the limit whose split measured as a loss: each names a committed record,
    and none is longer than when it was priced."""
    files, _ = real
    for (path, name), (bound, evidence) in ks.PRICED.items():
        assert (REPO_ROOT / evidence).is_file(), evidence
        f = next(f for f in files if f.path == path)
        assert f.longest.name == name and f.longest.lines <= bound, (path, f.longest)


def test_at_most_4_macros_read_and_they_are_the_ones_kernel_spec_accepts(real):
    _, macros = real
    assert len(macros.reads) <= 4, sorted(macros.reads)
    # what a build may set: kernel_spec's known defines plus the one the X-ray build sets itself
    assert set(macros.reads) == set(kernel_spec.KNOWN_DEFINES) | set(kernel_spec.RESERVED_DEFINES)


def test_script_on_the_real_tree_agrees_with_its_limits(real):
    files, macros = real
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO_ROOT)
    bad = ks.violations(files, macros)
    assert r.returncode == (1 if bad else 0), r.stderr
    assert r.stderr.splitlines() == [f"kernel_shape: {b}" for b in bad]
    for f in files:
        assert f.path in r.stdout
    for m in macros.reads:
        assert m in r.stdout


def test_help():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--function-limit" in r.stdout and "--max-macros" in r.stdout


# ------------------------------------------------------------------------------- functions
@pytest.mark.parametrize("n, caught", [(297, False), (298, True), (299, True)])
def test_a_300_line_function_is_caught(tmp_path, n, caught):
    """A function of n + 2 lines (signature, n statements, brace): 300 and 301 break 'under 300'."""
    (tmp_path / "kernel").mkdir()
    src = "#pragma once\n__device__ void small() { }\n\n__global__ void big(int* p) {\n" + body(n) + "}\n"
    (tmp_path / "kernel" / "k.cuh").write_text(src)
    assert fns(src)["big"] == (4, n + 2)
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--kernel-dir", str(tmp_path / "kernel")], capture_output=True, text=True
    )
    assert "kernel/k.cuh" in r.stdout and "big" in r.stdout
    if caught:
        assert r.returncode == 1
        assert r.stderr == f"kernel_shape: kernel/k.cuh:4: big is {n + 2} lines (must be under 300)\n"
    else:
        assert r.returncode == 0 and r.stderr == ""


def test_file_over_900_lines_and_too_many_macros_each_one_line(tmp_path):
    k = tmp_path / "kernel"
    k.mkdir()
    (k / "big.cuh").write_text("// x\n" * 901)
    (k / "knobs.cu").write_text("".join(f"#if MONOLITH_K{i}\nint a{i};\n#endif\n" for i in range(5)))
    r = subprocess.run([sys.executable, str(SCRIPT), "--kernel-dir", str(k)], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "kernel_shape: kernel/big.cuh: 901 lines (at most 900)",
        "kernel_shape: kernel reads 5 MONOLITH_* macros (at most 4): "
        "MONOLITH_K0, MONOLITH_K1, MONOLITH_K2, MONOLITH_K3, MONOLITH_K4",
    ]


def test_lambdas_inside_a_function_count_toward_it():
    src = """\
    __device__ void outer(int* p) {
      auto f = [&](int i) {
        if (i) { p[i] = 1; }
        return [=] { return i; };
      };
      auto g = [] {
        return 2;
      };
      f(g());
    }
    __device__ void after() {}
    """
    assert fns(src) == {"outer": (1, 10), "after": (11, 1)}


def test_member_functions_of_a_struct_are_functions():
    src = """\
    struct __align__(16) Ring {
      int a_, b_;
      Ring(int a, int b) : a_(a), b_{b} {
        a_ += 1;
      }
      __device__ int size() const noexcept {
        return a_;
      }
      auto twice() -> decltype(a_) { return 2 * a_; }
      int operator()(int i) const { return i; }
      struct Inner {
        void deep() {
        }
      };
     private:
      static void hidden() {}
    };
    """
    got = fns(src)
    assert got == {
        "Ring": (3, 3),
        "size": (6, 3),
        "twice": (9, 1),
        "operator()": (10, 1),
        "deep": (12, 2),
        "hidden": (16, 1),
    }


def test_a_template_signature_over_several_lines_starts_at_template():
    src = """\
    namespace monolith {

    template <class W, int kRows = (3 > 2 ? 4 : 1),
              bool kFlag = true>
    __device__ __forceinline__ typename W::Elem
    gemv(const W& w,
         int rows) {
      return w.at(rows);
    }
    template <> void gemv<int>(int) {}
    __global__ void __launch_bounds__(512, 1) decode_step(int a) {
    }
    }  // namespace monolith
    """
    got = fns(src)
    assert got["gemv"] == (3, 7)
    assert got["gemv<int>"] == (10, 1)
    assert got["decode_step"] == (11, 2)


def test_braces_in_comments_and_literals_are_ignored():
    src = r"""
    __device__ void a() {
      // } a brace in a line comment
      /* { and } in a block comment
         } */
      const char* s = "}}} \" {";
      char c = '}', d = '\'', e = '{';
      int big = 1'000'000;  char f = '}';
      const char* r = R"x(} ")" {)x";
    }
    __device__ void b() {
      return;
    }
    """
    assert fns(src) == {"a": (2, 9), "b": (11, 3)}


def test_if_blocks_are_read_branch_by_branch():
    src = """\
    __device__ void f(int x) {
    #if defined(A)
      if (x) {
    #elif B
      while (x) {
    #else
      for (;;) {
    #endif
        x--;
      }
    }
    #if 0
    void hidden_under_if0() {
    }
    #else
    void in_else() {
    #ifdef C
      {
    #endif
      x();
    #ifdef C
      }
    #endif
    }
    #endif
    void last() {}
    """
    assert fns(src) == {"f": (1, 11), "hidden_under_if0": (13, 2), "in_else": (16, 9), "last": (26, 1)}


def test_namespace_and_extern_c_blocks_and_initializers_are_not_functions():
    src = """\
    namespace a::b {
    namespace {
    constexpr int kTable[] = {1, 2, 3};
    enum class Kind : int { kA, kB };
    struct P { int x; } kP{4};
    }  // namespace
    extern "C" {
    __global__ void kernel(int* p) {
      p[0] = 1;
    }
    }
    extern "C" __global__ void kernel2() {
    }
    inline auto lam = [](int i) {
      return i;
    };
    }  // namespace a::b
    """
    assert fns(src) == {"kernel": (8, 3), "kernel2": (12, 2), "lam": (14, 3)}


def test_strip_literals_keeps_length_and_lines():
    src = 'a = "x\\"{" /* { \n } */ + \'}\'; // {\nb'
    out = ks.strip_literals(src)
    assert len(out) == len(src) and out.count("\n") == src.count("\n")
    assert "{" not in out and "}" not in out and out.startswith('a = "') and out.endswith("b")


# ------------------------------------------------------------------------------- macros
def test_macro_reads():
    sources = {
        "kernel/guarded.cuh": textwrap.dedent("""\
            #ifndef MONOLITH_GUARD_H
            #define MONOLITH_GUARD_H
            #if defined(MONOLITH_A) && MONOLITH_B == 1
            #elif MONOLITH_C
            #endif
            #ifdef MONOLITH_D
            #endif
            // MONOLITH_IN_COMMENT=1
            const char* s = "MONOLITH_IN_STRING";
            int x = MONOLITH_E;
            #define DERIVED (MONOLITH_F + 1)
            #endif
            """),
        "kernel/own.cuh": textwrap.dedent("""\
            #pragma once
            #if __CUDA_ARCH__ >= 1000
            #define MONOLITH_HAS_X 1
            #else
            #define MONOLITH_HAS_X 0
            #endif
            #if MONOLITH_HAS_X
            #endif
            #ifndef MONOLITH_DEFAULTED
            #define MONOLITH_DEFAULTED 16
            #endif
            constexpr int k = MONOLITH_DEFAULTED;
            """),
        "kernel/build.cu": '#define MONOLITH_TU_SWITCH 1\n#include "guarded.cuh"\n',
        "kernel/user.cuh": "#if defined(MONOLITH_TU_SWITCH)\n#endif\n",
    }
    scan = ks.scan_macros(sources)
    assert scan.guards == {"MONOLITH_GUARD_H"}
    assert set(scan.own) == {"MONOLITH_HAS_X"}
    assert set(scan.reads) == {
        "MONOLITH_A",
        "MONOLITH_B",
        "MONOLITH_C",
        "MONOLITH_D",
        "MONOLITH_E",
        "MONOLITH_F",
        "MONOLITH_DEFAULTED",
        "MONOLITH_TU_SWITCH",
    }
    assert scan.reads["MONOLITH_DEFAULTED"] == [("kernel/own.cuh", 9), ("kernel/own.cuh", 12)]
    assert scan.reads["MONOLITH_TU_SWITCH"] == [("kernel/user.cuh", 1)]
    assert scan.reads["MONOLITH_E"] == [("kernel/guarded.cuh", 10)]


def test_table_lists_every_file(tmp_path: Path):
    k = tmp_path / "kernel"
    k.mkdir()
    (k / "a.cuh").write_text("void f() {\n}\n#if MONOLITH_Q\n#endif\n")
    (k / "notes.json").write_text("{}\n")
    files, macros = ks.shape(k, tmp_path)
    out = ks.table(files, macros)
    assert "kernel/a.cuh" in out and "kernel/notes.json" in out and "MONOLITH_Q  kernel/a.cuh:3" in out
    assert ks.violations(files, macros) == []


def test_a_file_included_inside_a_function_body_counts_toward_it(tmp_path: Path):
    """A phase #included into a function is that function's code: 10 + 295 + 10 lines is one
    function of ~314 lines, caught; the same include at namespace scope adds nothing."""
    k = tmp_path / "kernel"
    k.mkdir()
    (k / "phase.cuh").write_text(body(295))
    (k / "nested.cuh").write_text('#include "phase.cuh"\n')
    (k / "a.cuh").write_text("void f() {\n" + body(5) + '#include "nested.cuh"\n' + body(5) + "}\n")
    (k / "b.cuh").write_text('#include "phase.cuh"\nvoid g() {\n' + body(5) + "}\n")
    files, macros = ks.shape(k, tmp_path)
    longest = {f.path: f.longest for f in files}
    assert longest["kernel/a.cuh"].lines == 12 + 295  # f's own 13 lines, the include line replaced by 295
    assert longest["kernel/b.cuh"].lines == 7
    assert any("a.cuh:1: f is 307 lines" in v for v in ks.violations(files, macros))
