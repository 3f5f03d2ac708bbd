"""How the twenty-eighth session's harness run (device call 5) became results/m4_stream_bf16.json.
Only bf16-stream's short kernel changed (MONOLITH_SLOT_PRETEST_O=-1); fp8-stream's and nvfp4-stream's
kernels kept their sm_90a SASS, so results/m5_nvfp4.json keeps the twenty-seventh session's rows, and
this run measured the two bf16 engines alone (the ratio's baseline beside the new build).
Usage (repo root): python3 results/logs/2026-12-03-s28/headline.py"""
import json
from pathlib import Path

D = "results/logs/2026-12-03-s28"
run = json.loads(Path(f"{D}/call5/results/m4_stream_s28.json").read_text())
run["note"] = (f"twenty-eighth session, device call 5: {D}/call5/results/m4_stream_s28.json (one harness run of "
               "bf16-upstream and bf16-stream). bf16-stream's short kernel (positions below 256) with "
               "MONOLITH_SLOT_PRETEST_O=-1, sm_90a 901fc18c94b4; its long and wide kernels and every fp8 / NVFP4 "
               "kernel unchanged (results/m5_nvfp4.json keeps the twenty-seventh session's run)")
Path("results/m4_stream_bf16.json").write_text(json.dumps(run, indent=1) + "\n")
