"""What long commands print (issue 13, item 4): progress while the oracle runs, no H200
prediction and no None fields for a CPU run, tables as wide as their content in a log."""
import io

from harness_fakes import FakeEngine

from monolith import results
from monolith.bench import decode, suite
from monolith.console import WIDE, make_console
from monolith.eval import correctness


def test_oracle_reports_each_prompt(monkeypatch):
    lines = []
    monkeypatch.setattr(suite, "log", lines.append)
    correctness.oracle_runs(FakeEngine(), [[1, 2], [3], [4, 5]], 6, progress=suite._oracle_progress(3, 6, 0.0))
    assert [ln.split(" (")[0] for ln in lines] == ["  oracle: prompt 1/3", "  oracle: prompt 2/3", "  oracle: prompt 3/3"]
    assert all("tok/s" in ln for ln in lines)


def test_cpu_runs_carry_no_gpu_prediction():
    cfg = decode.BenchConfig(runs=2, tokens=4, prompts=2, warmup_tokens=2, sweep_positions=(4,), sweep_window=2,
                             sweep_reps=1, power=False)
    row = decode.bench_engine(FakeEngine(), [[1, 2], [3, 4]], cfg, sweep_seq=list(range(1, 20)), bw_tbs=4.53, log=lambda m: None)
    assert row["timer"] == "perf_counter (CPU)"
    assert row["predicted_us_per_token"] is None and row["prediction"]["kind"].startswith("none: the time model predicts a GPU")
    assert row["sweep"]["4"]["predicted_us_per_token"] is None


def test_markdown_leaves_out_what_a_cpu_run_did_not_read():
    env = {"gpu": "none (CPU)", "cpu": "x86_64", "driver": None, "cuda": None, "torch": "2.13.0+cpu", "python": "3.11.7",
           "sm_clock_mhz": None, "mem_clock_mhz": None, "power_limit_w": None, "temperature_c": None}
    md = results.render_md(results.new_doc(env, {"kind": "synthetic", "seed": 0}, {"title": "t"}))
    line = next(ln for ln in md.splitlines() if ln.startswith("Written by the harness"))
    assert "None" not in line and "GPU: none (CPU) · CPU: x86_64 · torch 2.13.0+cpu" in line
    gpu = dict(env, gpu="NVIDIA H200", driver="580", cuda="13.0", sm_clock_mhz=1980)
    assert "GPU: NVIDIA H200 · CPU: x86_64 · driver 580 · CUDA 13.0 · torch 2.13.0+cpu · SM 1980 MHz" in results.render_md(
        results.new_doc(gpu, {}, {}))


def test_markdown_names_a_grid_other_than_one_block_per_sm():
    """The row's info carries the blocks the engine ran on (MegakernelEngine.info); the table says
    so where that is not one per SM (stream variants default to 128 on 132 SMs)."""
    doc = results.new_doc({"gpu": "NVIDIA H200"}, {}, {})
    for engine, blocks in (("megakernel-bf16-stream", 128), ("megakernel-bf16-upstream", 132)):
        row = results.base_row(engine, engine)
        row["info"] = {"blocks": blocks, "sm_count": 132}
        doc["rows"].append(row)
    md = results.render_md(doc).splitlines()
    assert "128 blocks on 132 SMs" in next(ln for ln in md if ln.startswith("| megakernel-bf16-stream |"))
    assert "blocks on" not in next(ln for ln in md if ln.startswith("| megakernel-bf16-upstream |"))


def test_console_is_wide_when_not_a_terminal(monkeypatch):
    from rich.markup import escape
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    con = make_console(file=buf)
    assert not con.is_terminal and con.width == WIDE
    t = Table()
    for c in ("target", "arch", "status", "kernels", "max regs", "spill st/ld B", "s"):
        t.add_column(c, no_wrap=True)
    t.add_row(escape("kernel bf16-upstream+bf16-upstream-l2pre+bf16-stream [xray]"), "sm_120a", "ok", "3", "128", "0/0", "41.2")
    con.print(t)
    assert "…" not in buf.getvalue() and "bf16-stream [xray]" in buf.getvalue()
    monkeypatch.setenv("COLUMNS", "60")
    assert make_console(file=io.StringIO()).width == 60
