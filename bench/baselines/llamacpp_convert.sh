#!/usr/bin/env bash
# llama.cpp's GGUF files of our checkpoint, BF16 and Q8_0, with llama.cpp's own
# convert_hf_to_gguf.py (CPU only: no GPU, no llama-bench). llamacpp.sh calls it before it
# benchmarks; `monolith m6` calls it earlier, beside a process's oracles, so the llama.cpp row's
# window holds llama-bench alone. A kind already converted from the same checkpoint files (their
# names, sizes and mtimes) by the same converter is kept, not converted again.
#
# usage: bench/baselines/llamacpp_convert.sh LLAMA_DIR CHECKPOINT_DIR WORK
#   LLAMA_DIR: a dir holding convert_hf_to_gguf.py and gguf-py/ (a PACK= dir, or the vendored
#              llama.cpp of an sdist). Writes WORK/model-<kind>.gguf and WORK/convert.json:
#              {"kinds": {kind: {"status", "seconds", "gguf", "bytes", "converted_unix", "reason"}},
#              "ckpt", "ckpt_stamp", "converter"}. Exit 0 when every kind is there, else 1.
#   env: PY (python3), KINDS ("bf16 q8_0").
set -uo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ $# -eq 3 ] || { echo "llamacpp_convert: usage: $0 LLAMA_DIR CHECKPOINT_DIR WORK (--help)" >&2; exit 2; }
LL="$1"
CKPT="$2"
WORK="$3"
PY="${PY:-python3}"
KINDS="${KINDS:-bf16 q8_0}"
[ -f "$LL/convert_hf_to_gguf.py" ] || { echo "llamacpp_convert: no convert_hf_to_gguf.py in $LL" >&2; exit 2; }
[ -d "$CKPT" ] || { echo "llamacpp_convert: checkpoint directory not found: $CKPT" >&2; exit 2; }
mkdir -p "$WORK" || exit 2
LOG="$WORK/convert.log"
STATE="$WORK/convert.json"
CKPT_ABS="$(cd "$CKPT" && pwd -P)"
# what the GGUFs are made of: the checkpoint's files (name, size, mtime) and the converter
STAMP="$(find "$CKPT_ABS" -maxdepth 1 -type f -printf '%f %s %T@\n' | sort | sha256sum | cut -c1-16)"
CONVERTER="$(cd "$LL" && pwd -P)/convert_hf_to_gguf.py $(sha256sum <"$LL/convert_hf_to_gguf.py" | cut -c1-16)"

# record KIND STATUS SECONDS GGUF REASON: one kind's entry in convert.json (a kind of another
# checkpoint or converter is dropped); python composes the JSON, the file is replaced atomically
record() {
  "$PY" - "$STATE" "$CKPT_ABS" "$STAMP" "$CONVERTER" "$@" <<'EOF'
import json, os, sys, time
state, ckpt, stamp, conv, kind, status, seconds, gguf, reason = sys.argv[1:]
try:
    doc = json.load(open(state))
except (OSError, ValueError):
    doc = {}
if (doc.get("ckpt"), doc.get("ckpt_stamp"), doc.get("converter")) != (ckpt, stamp, conv):
    doc = {}
doc.update(schema="monolith-llamacpp-convert/1", ckpt=ckpt, ckpt_stamp=stamp, converter=conv)
doc.setdefault("kinds", {})[kind] = {
    "status": status, "seconds": float(seconds), "gguf": gguf,
    "bytes": os.path.getsize(gguf) if status == "ok" else None,
    "converted_unix": time.time(), "pid": os.getppid(), "reason": reason or None}
tmp = f"{state}.{os.getpid()}.tmp"
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, state)
EOF
}

# kept KIND GGUF: 0 when convert.json holds KIND converted from these files by this converter,
# and the GGUF is still there at the size it had
kept() {
  "$PY" - "$STATE" "$CKPT_ABS" "$STAMP" "$CONVERTER" "$1" "$2" <<'EOF'
import json, os, sys
state, ckpt, stamp, conv, kind, gguf = sys.argv[1:]
try:
    doc = json.load(open(state))
except (OSError, ValueError):
    sys.exit(1)
k = (doc.get("kinds") or {}).get(kind) or {}
same = (doc.get("ckpt"), doc.get("ckpt_stamp"), doc.get("converter")) == (ckpt, stamp, conv)
ok = same and k.get("status") == "ok" and k.get("gguf") == gguf and os.path.isfile(gguf) \
    and os.path.getsize(gguf) == k.get("bytes")
sys.exit(0 if ok else 1)
EOF
}

rc=0
for kind in $KINDS; do
  GGUF="$WORK/model-$kind.gguf"
  if kept "$kind" "$GGUF"; then
    echo "llamacpp_convert: $kind kept ($GGUF, converted earlier from the same files)"
    continue
  fi
  t0=$(date +%s.%N)
  if PYTHONPATH="$LL/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$LL/convert_hf_to_gguf.py" "$CKPT_ABS" \
    --outtype "$kind" --outfile "$GGUF.tmp" >>"$LOG" 2>&1 && mv -f "$GGUF.tmp" "$GGUF"; then
    s=$("$PY" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)")
    record "$kind" ok "$s" "$GGUF" ""
    echo "llamacpp_convert: $kind converted in $s s -> $GGUF"
  else
    s=$("$PY" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)")
    rm -f "$GGUF.tmp"
    record "$kind" failed "$s" "$GGUF" "convert failed: $(tail -c 300 "$LOG" | tr '\n' ' ')"
    echo "llamacpp_convert: $kind FAILED after $s s (log $LOG)"
    rc=1
  fi
done
exit $rc
