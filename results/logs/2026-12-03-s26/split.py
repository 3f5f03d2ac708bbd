"""How the twenty-sixth session's harness run (device call 3) became the two headline files.
Usage (repo root): python3 results/logs/2026-12-03-s26/split.py  (scripts/split_headline.py does the work)"""
import subprocess
import sys

D = "results/logs/2026-12-03-s26"
subprocess.run([
    sys.executable, "scripts/split_headline.py", f"{D}/call3/results/m4_stream_s26.json",
    "--previous-nvfp4", f"{D}/m5_nvfp4-before-s26.json",  # the twenty-fifth session's rows
    "--label", "twenty-sixth session, device call 3",
    "--about", "The default now has MONOLITH_MERGE_ML_LANES=1: the merge before O reads each partial's (m, l) "
               "once per warp and, in the long and wide kernels, 8 partials per round trip (bf16-stream and "
               "fp8-stream; the same bits as the twenty-fifth session's build)",
    "--quality-why", "twenty-sixth session: MONOLITH_MERGE_ML_LANES is built for bf16 and E4M3 only, so "
                     "nvfp4-stream's kernels keep the twenty-second session's sm_90a SASS (12a8eb03e25a, long "
                     "ba82565e9565)",
], check=True)
