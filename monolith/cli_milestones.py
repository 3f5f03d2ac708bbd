"""`monolith m3` ... `monolith m8`: each milestone end to end on the machine present, composed from
the harness's own functions (bench/suite.py, quant/fp8_quality.py, the X-ray recorder, bench/m6.py,
bench/final.py). Each step is announced as it starts, a failed step does not stop the others, and a
summary table ends every run (exit 1 if a step failed). What the machine cannot do is refused in
one line, exit 2, before anything runs (monolith/cli.py turns MonolithError into that)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import typer
from rich.table import Table

from monolith import REPO_ROOT, jsonio
from monolith.console import make_console
from monolith.errors import MonolithError

RESULTS = REPO_ROOT / "results"
con = make_console(highlight=False)


def require_gpu(cmd: str, what: str = "") -> None:
    """One line and exit 2 where no CUDA GPU is visible: the GPU milestones never start a CPU
    stand-in (the fp32 oracle alone runs ~3 tok/s on a CPU)."""
    try:
        import torch
    except ImportError as e:
        raise MonolithError(f"monolith {cmd} needs torch with CUDA: {e}") from None
    if not torch.cuda.is_available():
        raise MonolithError(f"monolith {cmd} runs on a CUDA GPU and none is visible here{what}")


def parse_steps(cmd: str, steps: str, known: tuple[str, ...]) -> list[str]:
    got = [s.strip() for s in steps.split(",") if s.strip()]
    bad = [s for s in got if s not in known]
    if bad or not got:
        raise MonolithError(f"monolith {cmd} --steps: unknown {', '.join(bad) or '(none given)'}; "
                            f"known: {','.join(known)}")
    return [s for s in known if s in got]  # the milestone's order, whatever the order given


class Steps:
    """Run named steps, announce each, record status and seconds, print the summary table last."""

    def __init__(self, cmd: str):
        self.cmd, self.rows = cmd, []

    def run(self, name: str, fn, what: str = "") -> object:
        con.rule(f"[bold]monolith {self.cmd}[/] · {name}" + (f": {what}" if what else ""))
        t0 = time.perf_counter()
        out = None
        try:
            out = fn()
            status, detail = "ok", out if isinstance(out, str) else ""
        except typer.Exit as e:
            status, detail = ("ok", "") if e.exit_code == 0 else ("failed", f"exit {e.exit_code}")
        except Exception as e:  # noqa: BLE001  (a failed step is a row of the summary, the others still run)
            status, detail = "failed", f"{type(e).__name__}: {e}"
            con.print(traceback.format_exc()[-1500:], markup=False)
        self.rows.append((name, status, time.perf_counter() - t0, detail))
        return out

    def finish(self) -> None:
        t = Table(title=f"monolith {self.cmd}: summary")
        for c in ("step", "status", "seconds", "detail"):
            t.add_column(c, justify="right" if c == "seconds" else "left")
        for name, status, s, detail in self.rows:
            colour = "green" if status == "ok" else "red"
            t.add_row(name, f"[{colour}]{status}[/]", f"{s:.1f}", detail[:160])
        con.print(t)
        if any(r[1] != "ok" for r in self.rows):
            raise typer.Exit(1)


def _run(cmd: list[str], env: dict | None = None) -> str:
    """A subprocess whose output streams through; non-zero exit is a failed step."""
    import os

    con.print(f"$ {' '.join(cmd)}", markup=False)
    rc = subprocess.call(cmd, cwd=REPO_ROOT, env={**os.environ, **(env or {})})
    if rc != 0:
        raise RuntimeError(f"{cmd[0] if cmd[0] != sys.executable else 'python'} {' '.join(cmd[1:4])} ... exit {rc}")
    return ""


def _suffix(model: str | None) -> str:
    """Result-file suffix: none for the synthetic checkpoint, _<dir name> for a real one (so a real
    checkpoint's run never overwrites the committed synthetic results)."""
    if model is None:
        return ""
    return "_" + re.sub(r"[^A-Za-z0-9]+", "-", Path(model).resolve().name).strip("-").lower()


def _bench(engines: str, model, out: Path, quick: bool, title: str, timelines: Path | None = None) -> str:
    from monolith.cli_harness import _suite

    doc = _suite(engines, model, None, out, 5, 256, 20, quick, None, None, 20, 256, None, timelines, None, True,
                 False, None, title)
    return ", ".join(f"{r['engine'].removeprefix('megakernel-')} {r['tok_s']['median']:,.0f} tok/s"
                     if r.get("status") == "ok" else f"{r['engine']} {r['status']}" for r in doc["rows"])


def _pack(fmt: str, model, out: Path, map_file: Path | None = None) -> str:
    from monolith.checkpoint import ensure_checkpoint, load_checkpoint

    ckpt = load_checkpoint(ensure_checkpoint(model), allow_reduced_depth=True)
    if fmt == "fp8":
        from monolith.quant.pack_fp8 import pack_fp8
        meta = pack_fp8(ckpt, out, progress=True)
    else:
        from monolith.quant.pack_nvfp4 import pack_nvfp4
        fp8, source = (), None
        if map_file is not None:
            from monolith.quant.sensitivity import load_map
            fp8, source = load_map(map_file, ckpt)
        meta = pack_nvfp4(ckpt, out, search=True, progress=True, fp8=fp8, map_source=source)
    return f"{meta['scheme']}, {meta['num_layers']} layers -> {out}"


def _quality(fmt: str, packed: Path, model, engines: list[str], floors: list[str], out: Path, quick: bool) -> str:
    import torch

    from monolith.bench.suite import load_inputs
    from monolith.quant.fp8_quality import packed_quality

    ckpt, tok = load_inputs(model)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    kw = dict(positions=512, prompts=4, agree_tokens=16) if quick else dict(positions=10_000, prompts=100, agree_tokens=64)
    res = packed_quality(ckpt, tok, packed, dev, fmt=fmt, engine=engines, ref="reference-fp32", floor=floors,
                         context=512, stride=512, free_running=True, **kw)
    if quick:
        res["quick"] = "reduced protocol: not the gate's measurement"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    return "; ".join(f"{p['roles']['engine'].split(' ')[0]}: {p['gates']['summary']}" for p in res["pairs"])[:400]


def _xray(model, variant: str, real: bool) -> str:
    from monolith import cli_xray

    if real:  # a real checkpoint's trace stays beside its results, away from the page's traces
        d = RESULTS / f"xray{_suffix(model)}"
        raw = cli_xray.record(model, variant, 128, cli_xray.DEFAULT_PROMPT, d)
        cli_xray.process_raw(raw, out_dir=d, page_dir=d, png=True, summary_path=None, quiet=True)
    else:
        raw = cli_xray.record(model, variant, 128, cli_xray.DEFAULT_PROMPT, cli_xray.RAW_DIR)
        cli_xray.process_raw(raw, out_dir=cli_xray.RAW_DIR, page_dir=cli_xray.PAGE_DIR, png=True,
                             summary_path=cli_xray.M2_SUMMARY, quiet=True)
    return str(raw)


def _kernel_tests(variants: str) -> str:
    """The kernel's GPU tests on `variants` (MONOLITH_TEST_VARIANTS, when set, wins)."""
    import os

    return _run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-x", "tests/test_kernel_gpu.py"],
                env={"MONOLITH_TEST_VARIANTS": os.environ.get("MONOLITH_TEST_VARIANTS", variants)})


def experiment_table(pattern: str = "m4_*.json") -> Table:
    """Every committed M4 results file's rows: the streaming experiments side by side."""
    from monolith import results

    t = Table(title=f"M4 experiments (results/{pattern})")
    for c in ("file", "engine", "status", "tok/s median", "gate", "created"):
        t.add_column(c, justify="right" if c == "tok/s median" else "left")
    for f in sorted(RESULTS.glob(pattern)):
        try:
            d = jsonio.load(f)
        except MonolithError:  # an unreadable file is not an experiment row
            continue
        if not isinstance(d, dict) or d.get("schema") != results.SCHEMA:
            continue
        for r in d.get("rows", []):
            med = (r.get("tok_s") or {}).get("median")
            g = r.get("gate") or {}
            t.add_row(f.name, r.get("engine", "?"), r.get("status", "?"), "–" if med is None else f"{med:,.1f}",
                      {True: "pass", False: "FAIL", None: "n/a"}.get(g.get("passed"), "?") if g else "–",
                      str(d.get("created", ""))[:16])
    return t


M3_STEPS = ("tests", "pack", "devbench", "bench", "quality", "xray")
M4_STEPS = ("tests", "bench", "xray", "table")
M5_STEPS = ("sensitivity", "pack", "tests", "bench", "quality", "xray")
M8_TESTS = ("tests/test_deploy_config.py", "tests/test_post.py", "tests/test_readme_table.py")


def register(app: typer.Typer) -> None:
    @app.command()
    def m3(
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0); a real checkpoint's "
                                  "results get its name as a suffix (results/m3_fp8_<name>.json)"),
        steps: str = typer.Option("tests,pack,bench,quality,xray", help=f"subset of {','.join(M3_STEPS)}"),
        engines: str = typer.Option("megakernel-bf16-upstream,megakernel-fp8-upstream", help="the bench step's engines"),
        out: Path = typer.Option(None, help="the bench step's results JSON (default results/m3_fp8<suffix>.json)"),
        pack_dir: Path = typer.Option(Path("/tmp/monolith-fp8pack"), help="where the FP8 pack is written"),
        quick: bool = typer.Option(False, help="the harness's quick protocol (not headline) and a reduced quality run"),
    ):
        """M3 FP8 end to end on a GPU: the kernel tests, pack, gate + benchmark, quality against bf16
        (both schedules, each beside its bf16 floor), the X-ray of fp8-upstream at position 128."""
        todo = parse_steps("m3", steps, M3_STEPS)
        require_gpu("m3", " (pack and quality alone run on a CPU: monolith pack / monolith eval quality --fp8)")
        sfx = _suffix(model)
        s = Steps("m3")
        if "tests" in todo:
            s.run("tests", lambda: _kernel_tests("fp8-upstream"), "the kernel's GPU tests on fp8-upstream")
        if "pack" in todo or "quality" in todo:
            s.run("pack", lambda: _pack("fp8", model, pack_dir), "E4M3 weights, one fp32 scale per row")
        if "devbench" in todo:
            s.run("devbench", lambda: _run([sys.executable, "scripts/dev_bench.py", "--variant",
                                            "bf16-upstream,fp8-upstream", "--blocks", "132", "--runs", "3",
                                            "--out", f"results/m3_devbench{sfx}.json"]), "dev timings")
        if "bench" in todo:
            s.run("bench", lambda: _bench(engines, model, out or RESULTS / f"m3_fp8{sfx}.json", quick,
                                          "M3: fp8-upstream beside bf16-upstream, each gated against its own oracle"),
                  "gate + benchmark")
        if "quality" in todo:
            s.run("quality", lambda: _quality("fp8", pack_dir, model,
                                              ["megakernel-fp8-upstream", "megakernel-fp8-stream"],
                                              ["megakernel-bf16-upstream", "megakernel-bf16-stream"],
                                              RESULTS / f"m3_fp8_quality{sfx}.json", quick),
                  "perplexity ratio, 64-token agreement on 100 prompts, KL over 10k positions")
        if "xray" in todo:
            s.run("xray", lambda: _xray(model, "fp8-upstream", model is not None), "fp8-upstream at position 128")
        s.finish()

    @app.command()
    def m4(
        steps: str = typer.Option("tests,bench,xray,table", help=f"subset of {','.join(M4_STEPS)}"),
        engines: str = typer.Option("megakernel-bf16-upstream,megakernel-bf16-stream,megakernel-fp8-stream",
                                    help="the bench step's engines"),
        out: Path = typer.Option(RESULTS / "m4_stream.json", help="the bench step's results JSON"),
        xray_variants: str = typer.Option("bf16-stream,bf16-upstream", help="variants traced at position 128"),
        timelines: Path = typer.Option(None, help="also write each engine's race timeline here"),
        quick: bool = typer.Option(False, help="the harness's quick protocol (not headline)"),
    ):
        """M4 end to end on a GPU: the streaming variants' kernel tests, gate + benchmark beside
        bf16-upstream (sweep included), their X-rays, then the table of every M4 experiment."""
        todo = parse_steps("m4", steps, M4_STEPS)
        if todo != ["table"]:
            require_gpu("m4", " (the experiment table alone: monolith m4 --steps table)")
        s = Steps("m4")
        if "tests" in todo:
            s.run("tests", lambda: _kernel_tests("bf16-stream,fp8-stream"), "the kernel's GPU tests, streaming variants")
        if "bench" in todo:
            s.run("bench", lambda: _bench(engines, None, out, quick, "M4: the streaming schedule against upstream",
                                          timelines), "gate + benchmark + sweep")
        if "xray" in todo:
            for v in [x.strip() for x in xray_variants.split(",") if x.strip()]:
                s.run(f"xray {v}", lambda v=v: _xray(None, v, False), f"{v} at position 128")
        if "table" in todo:
            s.run("table", lambda: con.print(experiment_table()) or "", "every committed M4 result")
        s.finish()

    @app.command()
    def m5(
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        steps: str = typer.Option("sensitivity,pack,tests,bench,quality,xray", help=f"subset of {','.join(M5_STEPS)}"),
        engines: str = typer.Option("megakernel-bf16-stream,megakernel-nvfp4-stream", help="the bench step's engines"),
        out: Path = typer.Option(None, help="the bench step's results JSON (default results/m5_nvfp4<suffix>.json)"),
        pack_dir: Path = typer.Option(Path("/tmp/monolith-nvfp4pack"), help="where the NVFP4 pack is written"),
        mixed: bool = typer.Option(False, help="pack with the sensitivity step's FP8/NVFP4 map (default: all NVFP4, "
                                   "the committed configuration)"),
        quick: bool = typer.Option(False, help="the harness's quick protocol (not headline) and a reduced quality run"),
    ):
        """M5 NVFP4 end to end on a GPU: the sensitivity map (each projection kind NVFP4 alone), pack,
        the kernel tests, gate + benchmark beside bf16-stream, quality against bf16, the X-ray."""
        todo = parse_steps("m5", steps, M5_STEPS)
        require_gpu("m5", " (the sensitivity sweep runs on a CPU on a truncated checkpoint: "
                          "monolith pack --sensitivity --device cpu)")
        sfx = _suffix(model)
        sens = RESULTS / f"m5_nvfp4_sensitivity{sfx}.json"
        s = Steps("m5")
        if "sensitivity" in todo:
            from monolith.checkpoint import ensure_checkpoint
            s.run("sensitivity", lambda: _run([sys.executable, "-m", "monolith", "pack", "--sensitivity", "--model",
                                               str(ensure_checkpoint(model)), "--device", "cuda", "--out", str(sens),
                                               "--positions", "1024", "--context", "512", "--prompts", "20",
                                               "--agree-tokens", "32"]),
                  "each projection kind NVFP4 alone: KL, agreement, the proposed map")
        if "pack" in todo or "quality" in todo:
            s.run("pack", lambda: _pack("nvfp4", model, pack_dir, sens if mixed else None),
                  "E2M1, E4M3 scale per 16 weights" + (", the sensitivity map's FP8 units" if mixed else ""))
        if "tests" in todo:
            s.run("tests", lambda: _kernel_tests("nvfp4-stream"), "the kernel's GPU tests on nvfp4-stream")
        if "bench" in todo:
            s.run("bench", lambda: _bench(engines, model, out or RESULTS / f"m5_nvfp4{sfx}.json", quick,
                                          "M5: nvfp4-stream (experimental) beside bf16-stream"), "gate + benchmark")
        if "quality" in todo:
            s.run("quality", lambda: _quality("nvfp4", pack_dir, model, ["megakernel-nvfp4-stream"],
                                              ["megakernel-bf16-stream"], RESULTS / f"m5_nvfp4_quality{sfx}.json",
                                              quick), "against fp32 on the bf16 weights, bf16-stream as the floor")
        if "xray" in todo:
            s.run("xray", lambda: _xray(model, "nvfp4-stream", model is not None), "nvfp4-stream at position 128")
        s.finish()

    @app.command()
    def m6(
        engines: str = typer.Option(None, help="comma-separated: bf16-upstream, fp8-upstream, bf16-stream, fp8-stream, "
                                    "nvfp4-stream, llamacpp, hf-eager, hf-static, hf-compile, reference-graph "
                                    "(default: all; with --quick: fp8-stream,hf-eager)"),
        rows_dir: Path = typer.Option(REPO_ROOT / "build" / "m6-rows", help="one row-<engine>.json per engine goes here "
                                      "(several device calls on one machine write into one DIR)"),
        merge: Path = typer.Option(None, help="merge the row files in DIR into --out (no GPU needed); refuses rows of "
                                   "two GPUs or a window over 30 minutes"),
        out: Path = typer.Option(RESULTS / "final.json", help="--merge: the matrix JSON (final.md beside it)"),
        publish: bool = typer.Option(True, help="--merge: copy the rows' timelines to results/timelines/ and X-ray raws "
                                     "to results/xray/ (only when --out is in this repository's results/)"),
        model: str = typer.Option(None, help="checkpoint dir (default: synthetic seed 0)"),
        quick: bool = typer.Option(False, help="a trial: 3 prompts x 64 tokens, 3 runs, gate 2 x 64; never headline"),
        llamacpp: Path = typer.Option(None, help="llama-bench pack dir (llamacpp.sh PACK=; pack.tar.xz is unpacked) "
                                      "or a llama-cpp-python sdist to build from"),
        quality: str = typer.Option("file", help="quantized rows' quality gate: file (the committed M3/M5 quality runs, "
                                    "same weights only), measure (run it now: minutes), none"),
        xray: bool = typer.Option(True, help="one X-ray per monolith variant at position 128 (instrumented build)"),
        budget: float = typer.Option(90.0, help="seconds for a slow engine's gate and again for its timed runs "
                                     "(engines under 100 tok/s get fewer runs, never fewer prompts)"),
        device: str = typer.Option("cuda", help="cuda; cpu only for a rehearsal of the flow (rows without a GPU UUID)"),
        plan: Path = typer.Option(None, help="predict the next lease from the seconds each engine took in SRC (a rows "
                                  "dir or a final.json) and say whether it fits (no GPU needed; notes/m6_budget.md)"),
        groups: str = typer.Option(None, help="--plan: ';'-separated engine groups (default: scripts/m6_lease.sh's, or "
                                   "$M6_LEASE_GROUPS)"),
        assume: list[str] = typer.Option(None, help="--plan: ENGINE=SECONDS for an engine SRC has no row of (repeat)"),
        lease_s: float = typer.Option(1800.0, help="--plan: the session's device seconds"),
        start_s: float = typer.Option(360.0, help="--plan: device seconds a machine's start takes"),
    ):
        """M6, the final matrix: every variant and baseline gated and measured on one GPU, one row file
        per engine (--rows-dir), then --merge DIR -> results/final.json + final.md."""
        from monolith.bench import final

        if plan is not None:
            from monolith.bench import m6plan

            spec = groups or os.environ.get("M6_LEASE_GROUPS")
            p = m6plan.plan(m6plan.load_units(plan), m6plan.parse_groups(spec) if spec else m6plan.default_groups(),
                            assume=m6plan.parse_assume(assume), lease_s=lease_s, start_s=start_s)
            for line in m6plan.render(p, str(plan)):
                con.print(line, markup=False, highlight=False)
            return
        if merge is not None:
            root = REPO_ROOT if publish and Path(out).resolve().is_relative_to((REPO_ROOT / "results").resolve()) else None
            with con.status("merging row files"):
                doc = final.merge(merge, out, publish_root=root)
            _matrix_table(doc)
            con.print(f"wrote {out} and {Path(out).with_suffix('.md')}")
            return
        if quality not in ("file", "measure", "none"):
            raise MonolithError(f"--quality {quality!r}: one of file, measure, none")
        if device != "cpu":
            require_gpu("m6", " (merge row files with monolith m6 --merge DIR)")
        from monolith.bench import m6 as M6

        names = M6.parse_engines(engines, quick)
        files = M6.run(M6.M6Config(engines=names, rows_dir=rows_dir, model=model, device=device, quick=quick,
                                   budget_s=budget, llamacpp=str(llamacpp) if llamacpp else None, quality=quality,
                                   xray=xray, log=lambda m: con.print(m, markup=False, highlight=False)))
        docs = [jsonio.load(f) for f in files]
        _matrix_table({"rows": [r for d in docs for r in d["rows"]]})
        con.print(f"rows in {rows_dir}; merge them with: monolith m6 --merge {rows_dir}")

    @app.command()
    def m7(
        install: bool = typer.Option(True, help="npm ci first if web/node_modules is missing"),
    ):
        """M7 the page: typecheck, unit tests, build and the browser tests (make -C web test). CPU only."""
        for tool in ("node", "npm", "make"):
            if shutil.which(tool) is None:
                raise MonolithError(f"monolith m7 needs {tool} on PATH (make deps installs the page's tools)")
        s = Steps("m7")
        if install and not (REPO_ROOT / "web" / "node_modules").is_dir():
            s.run("install", lambda: _run(["npm", "--prefix", "web", "ci"]), "npm ci (web/package-lock.json)")
        s.run("page", lambda: _run(["make", "-C", "web", "test"]), "typecheck, unit, build, browser tests")
        s.finish()

    @app.command()
    def m8():
        """M8 ship: the deploy artifacts' tests, the write-up's checks (post/draft.md, README's table
        against final.md), and results/final.json against its schema. CPU only."""
        from monolith.bench import final

        s = Steps("m8")

        def check_final() -> str:
            p = RESULTS / "final.json"
            if not p.is_file():
                raise MonolithError("results/final.json is not there: run monolith m6, then monolith m6 --merge DIR")
            errs = final.validate_final(jsonio.load(p))
            if errs:
                raise MonolithError("; ".join(errs[:5]))
            return "valid"

        def check_post() -> str:
            p = REPO_ROOT / "post" / "draft.md"
            if not p.is_file():
                raise MonolithError("post/draft.md is not there")
            n = len(re.findall(r"\b\w[\w'’.,-]*\b", p.read_text()))
            if not 1200 <= n <= 1800:
                raise MonolithError(f"post/draft.md has ~{n} words, not 1,200-1,800")
            return f"~{n} words"

        s.run("final.json", check_final, "the matrix against its schema (bench/final.py validate_final)")
        s.run("post", check_post, "the write-up exists and is 1,200-1,800 words")
        tests = [t for t in M8_TESTS if (REPO_ROOT / t).is_file()]
        s.run("tests", lambda: _run([sys.executable, "-m", "pytest", "-q", "-m", "not gpu", *tests]),
              ", ".join(Path(t).name for t in tests))
        s.finish()


def _matrix_table(doc: dict) -> None:
    t = Table(title="M6 rows" + (f" · {doc['final']['gpu']}" if doc.get("final") else ""))
    for c in ("engine", "status", "tok/s", "runs", "tok/J", "gate", "quality gate", "note"):
        t.add_column(c, justify="right" if c in ("tok/s", "runs", "tok/J") else "left")
    for r in doc.get("rows", []):
        ts = r.get("tok_s") or {}
        g = r.get("gate") or {}
        q = ((r.get("gates") or {}).get("quality") or {})
        t.add_row(r["engine"], r.get("status", "?"), "–" if not ts else f"{ts['median']:,.1f}",
                  str(len(ts.get("runs") or [])) if ts else "–",
                  "–" if r.get("tok_per_joule") is None else f"{r['tok_per_joule']:.2f}",
                  {True: "pass", False: "FAIL", None: "n/a"}.get(g.get("passed"), "?") if g else "–",
                  {True: "pass", False: "FAIL", None: "not measured"}.get(q.get("passed"), "?") if q else "–",
                  (r.get("speed_label") or r.get("runs_note") or r.get("reason") or "")[:60])
    con.print(t)
