"""How the twenty-fifth session's harness run (device call 2) became the two headline files.
Usage (repo root): python3 results/logs/2026-12-03-s25/split.py  (scripts/split_headline.py does the work)"""
import subprocess
import sys

D = "results/logs/2026-12-03-s25"
subprocess.run([
    sys.executable, "scripts/split_headline.py", f"{D}/call2/results/m4_stream_s25.json",
    "--previous-nvfp4", f"{D}/m5_nvfp4-before-s25.json",  # the twenty-second session's rows
    "--label", "twenty-fifth session, device call 2",
    "--about", "The default now has MONOLITH_ATTN_WIDE=3, MIN=2, EVEN=1, FLAT=4, FORMATS=3: a third kernel for "
               "bf16-stream and fp8-stream from position 1,024 on; positions 1-256 run the same SASS as the "
               "twenty-second session's rows",
    "--quality-why", "twenty-fifth session: the default's wide-attention kernel is built for bf16 and E4M3 only "
                     "(MONOLITH_ATTN_WIDE_FORMATS=3), so nvfp4-stream's kernels keep the twenty-second session's "
                     "sm_90a SASS (12a8eb03e25a, long ba82565e9565)",
], check=True)
