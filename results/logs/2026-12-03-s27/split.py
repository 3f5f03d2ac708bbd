"""How the twenty-seventh session's harness run (device call 4) became the two headline files.
Usage (repo root): python3 results/logs/2026-12-03-s27/split.py  (scripts/split_headline.py does the work)"""
import subprocess
import sys

D = "results/logs/2026-12-03-s27"
subprocess.run([
    sys.executable, "scripts/split_headline.py", f"{D}/call4/results/m4_stream_s27.json",
    "--previous-nvfp4", f"{D}/m5_nvfp4-before-s27.json",  # the twenty-sixth session's rows
    "--label", "twenty-seventh session, device call 4",
    "--about", "The twenty-sixth session's kernels again (the same sm_90a SASS), measured once more with "
               "the four streaming engines' 256-token timelines for the page's race (results/timelines/)",
    "--quality-why", "twenty-seventh session: nvfp4-stream's kernels keep the twenty-second session's sm_90a "
                     "SASS (12a8eb03e25a, long ba82565e9565)",
], check=True)
