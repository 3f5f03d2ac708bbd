"""Split one of the twenty-second session's harness runs into the two headline files.
Usage (repo root): python3 results/logs/2026-12-02-s22/split.py call5 m4_stream_s22b.json "device call 5"
(call 2 was: call2 m4_stream_s22.json "device call 2")."""
import copy
import json
import sys

D = "results/logs/2026-12-02-s22"
CALL, NAME, LABEL = sys.argv[1:4]
run = json.load(open(f"{D}/{CALL}/results/{NAME}"))
old_nvfp4 = json.load(open(f"{D}/m5_nvfp4-before-s22.json"))  # the twenty-first session's row
rows = {r["engine"]: r for r in run["rows"]}
src = f"{D}/{CALL}/results/{NAME}"


def out(path, engines, note):
    d = {k: copy.deepcopy(v) for k, v in run.items() if k != "rows"}
    d["rows"] = [copy.deepcopy(rows[e]) for e in engines]
    d["note"] = note
    return path, d


q = copy.deepcopy(next(r for r in old_nvfp4["rows"] if r["engine"] == "megakernel-nvfp4-stream")["quality"])
q["source"] = q["source"].replace(
    "this row's gate lists",
    "twenty-second session: MONOLITH_SLOT_LANDED's default -1 changes only the E4M3 kernel, and "
    "MONOLITH_SEED_RANGE only which block adds each residual seed, an integer atomic: no value "
    "changes; this row's gate lists",
)
assert "twenty-second" in q["source"]
files = [
    out("results/m4_stream_bf16.json", ["megakernel-bf16-upstream", "megakernel-bf16-stream"],
        f"twenty-second session, {LABEL}: rows taken from {src} (one harness run of all four "
        "engines; the other rows of that run are in the sibling file)"),
    out("results/m5_nvfp4.json", ["megakernel-fp8-stream", "megakernel-nvfp4-stream"],
        f"twenty-second session, {LABEL}: rows taken from {src} (one harness run of all four "
        "engines; the other rows of that run are in the sibling file), nvfp4's quality carried with its source"),
]
files[1][1]["rows"][1]["quality"] = q
for path, d in files:
    json.dump(d, open(path, "w"), indent=2)
    print("wrote", path)
