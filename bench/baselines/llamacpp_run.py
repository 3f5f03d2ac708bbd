"""Run llama-bench's text-generation test with NVML's energy counter polled beside it (llamacpp.sh
step 5). usage: python -m monolith.bench.baselines.llamacpp_run BENCH GGUF N_GEN REPS OUT_JSON

llama-bench reports each repetition's duration (`samples_ns`) but no timestamps. Its tg test
prints its result line (`-o jsonl`) right after the last timed repetition, so the repetitions
occupy the summed `samples_ns` before the moment that line is read: the energy counter, read every
10 ms with host timestamps, is cut over exactly that interval (bench/power.py energy_between).
The warm-up repetition, the model load and the teardown fall outside it. Each test in OUT_JSON
gains `monolith_energy` (the row's `energy`, notes/CONTRACTS.md) with `line_before_exit_s`: how
long before the process ended the line was read (near 0: the line may have been held in a buffer
and the window moved late by up to that much).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from monolith import jsonio
from monolith.bench import power
from monolith.errors import MonolithError


def parse_output(lines: list[tuple[float, str]]) -> list[tuple[float, dict]]:
    """(read time, test) for every test object in llama-bench's output: one per line (jsonl), or
    one JSON array (json) stamped with the time its last line was read."""
    tests = []
    for t, line in lines:
        s = line.strip()
        if s.startswith("{"):
            try:
                tests.append((t, jsonio.loads(s, "llama-bench output")))
            except MonolithError:
                pass
    if tests:
        return tests
    text = "".join(line for _, line in lines).strip()
    try:
        arr = jsonio.loads(text, "llama-bench output") if text else []
    except MonolithError:
        return []
    last = lines[-1][0] if lines else 0.0
    return [(last, d) for d in (arr if isinstance(arr, list) else [arr]) if isinstance(d, dict)]


def energy_of_test(test: dict, t_line: float, t_exit: float, samples, meter_error: str | None) -> dict:
    tg = test.get("n_gen", 0) > 0 and test.get("n_prompt", 0) == 0
    if not tg:
        return power.not_measured("not a text-generation test")
    if meter_error:
        return power.not_measured(meter_error)
    ns = [float(x) for x in test.get("samples_ns") or []]
    if not ns:
        return power.not_measured("llama-bench gave no samples_ns (repetition durations)")
    decode_s = sum(ns) / 1e9
    tokens = int(test["n_gen"]) * len(ns)
    joules = power.energy_between(samples, t_line - decode_s, t_line)
    if joules is None or joules <= 0:
        return power.not_measured(f"the counter's readings do not cover the repetitions' {decode_s:.2f} s")
    mean_w = joules / decode_s
    return {"method": power.NVML_METHOD, "joules": joules, "window_s": decode_s, "decode_s": decode_s,
            "tokens": tokens, "mean_w": mean_w, "tok_per_joule": tokens / joules,
            "line_before_exit_s": round(t_exit - t_line, 3), "readings": len(samples),
            "window": "llama-bench's summed samples_ns before its tg result line was read"}


def run(bench: str, gguf: str, n_gen: int, reps: int, out: str, nvml=None) -> int:
    cmd = [bench, "-m", gguf, "-p", "0", "-n", str(n_gen), "-r", str(reps), "-ngl", "99", "-o", "jsonl"]
    lines: list[tuple[float, str]] = []
    with power.EnergyMeter(0, nvml=nvml) as meter:
        meter.poll()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            lines.append((time.perf_counter(), line))
        rc = proc.wait()
        t_exit = time.perf_counter()
        time.sleep(0.05)  # one more reading after the end
    tests = []
    for t_line, test in parse_output(lines):
        test["monolith_energy"] = energy_of_test(test, t_line, t_exit, meter.samples,
                                              None if meter.available else meter.error)
        tests.append(test)
    with open(out, "w") as f:
        json.dump(tests, f, indent=1)
    return rc if tests else (rc or 1)


def main(argv=None) -> int:
    a = sys.argv[1:] if argv is None else argv
    if len(a) != 5:
        print(__doc__.split("\n")[1], file=sys.stderr)
        return 2
    return run(a[0], a[1], int(a[2]), int(a[3]), a[4])


if __name__ == "__main__":
    raise SystemExit(main())
