"""Split the twenty-fifth session's harness run (device call 2) into the two headline files.
Usage (repo root): python3 results/logs/2026-12-03-s25/split.py"""
import copy
import json

D = "results/logs/2026-12-03-s25"
src = f"{D}/call2/results/m4_stream_s25.json"
run = json.load(open(src))
old_nvfp4 = json.load(open(f"{D}/m5_nvfp4-before-s25.json"))  # the twenty-second session's rows
rows = {r["engine"]: r for r in run["rows"]}


def out(path, engines, note):
    d = {k: copy.deepcopy(v) for k, v in run.items() if k != "rows"}
    d["rows"] = [copy.deepcopy(rows[e]) for e in engines]
    d["note"] = note
    return path, d


q = copy.deepcopy(next(r for r in old_nvfp4["rows"] if r["engine"] == "megakernel-nvfp4-stream")["quality"])
q["source"] = q["source"].replace(
    "this row's gate lists",
    "twenty-fifth session: the default's wide-attention kernel is built for bf16 and E4M3 only "
    "(MONOLITH_ATTN_WIDE_FORMATS=3), so nvfp4-stream's kernels keep the twenty-second session's sm_90a "
    "SASS (12a8eb03e25a, long ba82565e9565); this row's gate lists",
)
assert "twenty-fifth" in q["source"]
note = ("twenty-fifth session, device call 2: rows taken from " + src + " (one harness run of all four engines; "
        "the other rows of that run are in the sibling file). The default now has MONOLITH_ATTN_WIDE=3, MIN=2, "
        "EVEN=1, FLAT=4, FORMATS=3: a third kernel for bf16-stream and fp8-stream from position 1,024 on; "
        "positions 1-256 run the same SASS as the twenty-second session's rows")
files = [
    out("results/m4_stream_bf16.json", ["megakernel-bf16-upstream", "megakernel-bf16-stream"], note),
    out("results/m5_nvfp4.json", ["megakernel-fp8-stream", "megakernel-nvfp4-stream"],
        note + "; nvfp4's quality carried with its source"),
]
files[1][1]["rows"][1]["quality"] = q
for path, d in files:
    json.dump(d, open(path, "w"), indent=2)
    print("wrote", path)
