"""The sm_120 configuration's functional proof on an sm_90 GPU (issue 45, item 2), in one command.

usage: python scripts/sm120_proof.py [--out results/sm120_proof.json] [--steps tests,bitwise,gate,sanitize]
       [--budget SECONDS] [--dry-run]

The variants `bf16-stream-sm120`, `fp8-stream-sm120` and `nvfp4-stream-sm120` build the sm_120
configuration (a 4-slot ring within 99 KB per block) for whatever GPU runs them. Steps, each a
subprocess with its own time cap, each a verdict in the JSON (a step that cannot finish is
`failed` with the reason, never skipped silently):
  tests     tests/test_kernel_gpu.py on the three variants: phase diff against fp32, determinism,
            launch shapes, the stuck-barrier and every-wait fault injection, the random-delay stress
  bitwise   scripts/dev_bench.py on every base variant and its -sm120 twin at 128, 96 and 64 blocks
            after a 250-token prompt (64 tokens: the short kernel, then the long one from position
            256): every format must decode the same tokens at every ring depth and block count
  gate      `monolith bench` of the three -sm120 engines: the harness gate (20 prompts x 256 tokens
            against the fp32 oracle of each engine's weights, determinism x 3), then their speed,
            which prices the smaller ring on this GPU (not a speed claim for sm_120)
  sanitize  compute-sanitizer memcheck and synccheck on the reduced step of each -sm120 variant
            (scripts/gpu.sh sanitize-stream)
Writes --out (JSON: the environment, each step's command, rc, seconds, verdict and its output's
tail) and prints a table last. Exit 1 when a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("bf16-stream-sm120", "fp8-stream-sm120", "nvfp4-stream-sm120")
STEPS = ("tests", "bitwise", "gate", "sanitize")
SANITIZE_RUN_S = 45  # one tool on one variant's reduced step (16 blocks, a 2-token prompt), at least
TEST_K = "deterministic or launch_shape or full_step or stuck_barrier or each_wait or random_delays or phase_diff_after"


def bitwise_groups(ref: dict) -> dict[str, list[str]]:
    """tokens-ref keys ("variant/blocks/prompt_len") grouped by (format's base variant, prompt):
    {"fp8-stream/250": ["fp8-stream/128/250", "fp8-stream-sm120/64/250", ...]}."""
    groups: dict[str, list[str]] = {}
    for key in sorted(ref):
        variant, _blocks, prompt = key.split("/")
        groups.setdefault(f"{variant.removesuffix('-sm120')}/{prompt}", []).append(key)
    return groups


def bitwise_verdict(ref: dict) -> dict:
    """Every group's keys decoded the same tokens; a group with one member proves nothing and fails."""
    out = {"groups": {}, "passed": True}
    for g, keys in bitwise_groups(ref).items():
        distinct = {json.dumps(ref[k]) for k in keys}
        ok = len(keys) > 1 and any(k.split("/")[0].endswith("-sm120") for k in keys) and len(distinct) == 1
        out["groups"][g] = {"keys": keys, "distinct_token_sequences": len(distinct), "passed": ok}
        out["passed"] &= ok
    if not out["groups"]:
        out["passed"] = False
    return out


def commands(out_dir: Path, budget: float) -> dict[str, tuple[list[str], float, dict]]:
    py = sys.executable
    v = ",".join(VARIANTS)
    base = ",".join(x for v_ in VARIANTS for x in (v_.removesuffix("-sm120"), v_))
    return {
        "tests": (
            [py, "-m", "pytest", "-q", "-m", "gpu", "tests/test_kernel_gpu.py", "-k", TEST_K, "-p", "no:cacheprovider"],
            0.3 * budget,
            {"MONOLITH_TEST_VARIANTS": v},
        ),
        "bitwise": (
            [
                py,
                "scripts/dev_bench.py",
                "--variant",
                base,
                "--blocks",
                "128,96,64",
                "--prompt-len",
                "250",
                "--tokens",
                "64",
                "--runs",
                "2",
                "--tokens-ref",
                str(out_dir / "tokens.json"),
                "--out",
                str(out_dir / "dev.json"),
            ],
            0.15 * budget,
            {},
        ),
        "gate": (
            [
                py,
                "-m",
                "monolith",
                "bench",
                "--engine",
                ",".join(f"megakernel-{x}" for x in VARIANTS),
                "--runs",
                "3",
                "--max-total",
                str(int(0.3 * budget) - 10),
                "--out",
                str(out_dir / "gate.json"),
            ],
            0.3 * budget,
            {},
        ),
        "sanitize": (
            ["bash", "scripts/gpu.sh", "sanitize-stream"],
            max(0.25 * budget, 6 * SANITIZE_RUN_S + 20),
            {
                "SANITIZE_VARIANTS": v,
                "SANITIZE_TOOLS": "memcheck synccheck",
                "SANITIZE_TIMEOUT": str(max(SANITIZE_RUN_S, int(0.25 * budget / 6))),
                "OUT": str(out_dir / "sanitize"),
            },
        ),
    }


def run_step(name: str, argv: list[str], cap: float, env_add: dict, out_dir: Path) -> dict:
    t0 = time.monotonic()
    env = {**os.environ, **env_add}
    try:
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=cap)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"{e.stdout or ''}{e.stderr or ''}\n[sm120-proof] {name}: over its cap of {cap:.0f} s"
        text = text if isinstance(text, str) else text.decode(errors="replace")
    row = {
        "step": name,
        "argv": argv,
        "env": env_add,
        "cap_s": round(cap),
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "output_tail": text[-4000:],
    }
    row["passed"] = rc == 0
    if name == "bitwise":
        ref = out_dir / "tokens.json"
        row["bitwise"] = bitwise_verdict(json.loads(ref.read_text())) if ref.is_file() else {"passed": False}
        row["passed"] = row["passed"] and row["bitwise"]["passed"]
    if name == "sanitize":
        summaries = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln]
        row["summaries"] = summaries
        row["passed"] = row["passed"] and bool(summaries) and all("0 errors" in ln for ln in summaries)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--out", default="results/sm120_proof.json")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for all steps together (split by step)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args(argv)
    steps = [s for s in a.steps.split(",") if s]
    if bad := [s for s in steps if s not in STEPS]:
        print(f"sm120-proof: unknown step(s) {', '.join(bad)}; choose from {', '.join(STEPS)}")
        return 2
    out = Path(a.out)
    if out.suffix != ".json":
        print(f"sm120-proof: --out must end in .json: {out}")
        return 2
    work = out.with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    cmds = commands(work, a.budget)
    if a.dry_run:
        for s in steps:
            argv_, cap, env_add = cmds[s]
            print(f"{s:9s} cap {cap:4.0f} s  {' '.join(f'{k}={v}' for k, v in env_add.items())} {' '.join(argv_)}")
        return 0
    from monolith import envinfo, jsonio

    doc = {
        "schema": "monolith-sm120-proof/1",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "the sm_120 configuration built for this GPU: a functional proof, not a speed claim for sm_120",
        "env": envinfo.collect("cuda"),
        "variants": list(VARIANTS),
        "steps": [],
    }
    for s in steps:
        print(f"[sm120-proof] {s} ...", flush=True)
        doc["steps"].append(run_step(s, *cmds[s], work))
        jsonio.write(out, doc)  # after every step: a cut-off run keeps what it measured
    print(f"\n{'step':10s} {'rc':>4s} {'s':>7s}  verdict")
    for r in doc["steps"]:
        print(f"{r['step']:10s} {r['rc']:4d} {r['seconds']:7.1f}  {'passed' if r['passed'] else 'FAILED'}")
    print(f"[sm120-proof] wrote {out}")
    return 0 if all(r["passed"] for r in doc["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
