"""Split one harness run of the four headline engines into the two headline files, as every
session that changes a default does (one `monolith bench` run, so that the baselines are measured
beside the new build): results/m4_stream_bf16.json gets bf16-upstream and bf16-stream,
results/m5_nvfp4.json fp8-stream and nvfp4-stream. Each file keeps the run's env, protocol and
weights, and a note naming the run it came from. NVFP4's quality is not re-measured by the harness:
its columns are carried from the previous headline file with a sentence (--quality-why) saying why
they still hold, inserted before the carried source's "this row's gate lists" (refused if absent,
so a carried source never loses its history).
usage: python3 scripts/split_headline.py RUN.json --previous-nvfp4 OLD_m5_nvfp4.json
       --label "twenty-fifth session, device call 2" --quality-why "..." [--about "..."]
Then `python -m monolith.results --render` the two files (their Markdown tables)."""
import argparse
import copy
import json
from pathlib import Path

BF16_ENGINES = ["megakernel-bf16-upstream", "megakernel-bf16-stream"]
NVFP4_ENGINES = ["megakernel-fp8-stream", "megakernel-nvfp4-stream"]
QUALITY_MARK = "this row's gate lists"


def split(run: dict, src: str, previous_nvfp4: dict, label: str, quality_why: str, about: str = "") -> dict:
    """-> {"bf16": doc, "nvfp4": doc}: the run's rows by engine, nvfp4's quality carried."""
    rows = {r["engine"]: r for r in run["rows"]}
    missing = [e for e in BF16_ENGINES + NVFP4_ENGINES if e not in rows]
    if missing:
        raise SystemExit(f"split_headline: {src} has no row for {', '.join(missing)}")
    q = copy.deepcopy(next(r for r in previous_nvfp4["rows"] if r["engine"] == NVFP4_ENGINES[1])["quality"])
    if QUALITY_MARK not in q["source"]:
        raise SystemExit(f"split_headline: the previous nvfp4 quality source has no {QUALITY_MARK!r} to insert before")
    q["source"] = q["source"].replace(QUALITY_MARK, f"{quality_why}; {QUALITY_MARK}")
    note = (f"{label}: rows taken from {src} (one harness run of all four engines; the other rows of that run "
            f"are in the sibling file)" + (f". {about}" if about else ""))

    def doc(engines, note):
        d = {k: copy.deepcopy(v) for k, v in run.items() if k != "rows"}
        d["rows"] = [copy.deepcopy(rows[e]) for e in engines]
        d["note"] = note
        return d

    out = {"bf16": doc(BF16_ENGINES, note), "nvfp4": doc(NVFP4_ENGINES, note + "; nvfp4's quality carried with its source")}
    out["nvfp4"]["rows"][1]["quality"] = q
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="the harness run (monolith bench --out) with all four headline engines")
    ap.add_argument("--previous-nvfp4", required=True, help="the m5_nvfp4.json whose nvfp4 quality is carried")
    ap.add_argument("--label", required=True, help='e.g. "twenty-fifth session, device call 2"')
    ap.add_argument("--quality-why", required=True, help="why nvfp4's carried quality still holds for this build")
    ap.add_argument("--about", default="", help="a sentence on what the run measured, appended to the note")
    ap.add_argument("--out-bf16", default="results/m4_stream_bf16.json")
    ap.add_argument("--out-nvfp4", default="results/m5_nvfp4.json")
    a = ap.parse_args()
    docs = split(json.loads(Path(a.run).read_text()), a.run, json.loads(Path(a.previous_nvfp4).read_text()),
                 a.label, a.quality_why, a.about)
    for key, path in (("bf16", a.out_bf16), ("nvfp4", a.out_nvfp4)):
        Path(path).write_text(json.dumps(docs[key], indent=2))
        print("wrote", path)


if __name__ == "__main__":
    main()
