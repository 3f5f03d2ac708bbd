#!/usr/bin/env bash
# A queue of GPU steps that outlives the device call that starts it: `start STEPS_FILE` runs the
# steps one after another in a process session of its own (setsid); each later `poll SECONDS` (one
# device call, which keeps the machine warm) waits up to SECONDS and returns what the finished steps
# wrote so far. A step never waits on a call, so the 10-minute call limit cuts none in half, and a
# lease that ends early loses only the step it was in.
#
# usage: scripts/lease.sh start STEPS_FILE    (a line per step: NAME<space>COMMAND, run by bash in the
#                                             repository root; `#` lines and blank lines are skipped)
#        scripts/lease.sh poll SECONDS        (until it prints "lease: done")
#        scripts/lease.sh skip NAME           (drop a step that has not started yet)
#   Each step sees LEASE_OUT (its own folder, $LEASE_DIR/out/NAME) and GPU_NAME (nvidia-smi's name
#   of GPU 0; a step meant for one GPU model tests it itself and exits 0 with a message elsewhere).
#   Every poll copies $LEASE_DIR/out (each step's log.txt and files) and the queue's log into
#   $OUT/lease.tgz, and prints each finished step's status and seconds. $LEASE_DIR/state says
#   `running NAME` (or `running (starting)`) until the queue ends, then `done`; $LEASE_DIR/steps is
#   the queue as started. A layer over the queue (scripts/m6_lease.sh) reads both.
#   env: LEASE_DIR (default /tmp/lease; one folder per caller, one queue at a time in each),
#        OUT (default /tmp/monolith-out).
set -uo pipefail
# the driver is this file run again from the repository root: its path must not depend on the caller's
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$SELF")/.." || exit 1
D=${LEASE_DIR:-/tmp/lease}
STATE="$D/state"
LOG="$D/log.txt"

usage() { sed -n '2,19p' "$SELF" | sed 's/^# \{0,1\}//'; }

drive() {  # every step in order; its status (rc, seconds) into the log, its output into its folder
  local t0=$SECONDS name cmd rc s
  export GPU_NAME
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  echo "gpu: ${GPU_NAME:-none}"
  # as scripts/gpu.sh: the carried wheels (.whl) on the Python path of every step, the carried
  # ../shared/data copy (.data) where the package looks for it
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD
  fi
  if [ -d .data ] && [ ! -e ../shared/data/wikitext-2-raw-v1-test.txt ]; then mkdir -p ../shared/data && cp .data/* ../shared/data/; fi
  export PYTHONUNBUFFERED=1
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    name=${line%% *}
    cmd=${line#* }
    if [ -e "$D/skip-$name" ]; then echo "step $name skipped"; continue; fi
    echo "running $name" >"$STATE"
    echo "=== $name (at $((SECONDS - t0)) s): $cmd"
    export LEASE_OUT="$D/out/$name"
    mkdir -p "$LEASE_OUT"
    s=$SECONDS
    bash -c "$cmd" >"$LEASE_OUT/log.txt" 2>&1 </dev/null
    rc=$?
    echo "step $name rc=$rc $((SECONDS - s)) s (at $((SECONDS - t0)) s)"
  done <"$D/steps"
  echo "=== all steps done (at $((SECONDS - t0)) s)"
  echo "done" >"$STATE"
}

case "${1:-}" in
  start)
    [ -f "${2:-}" ] || { echo "lease: start needs a steps file (got '${2:-}')"; exit 2; }
    [ -e "$STATE" ] && grep -q '^running' "$STATE" && { echo "lease: already running ($(cat "$STATE"))"; exit 2; }
    rm -rf "$D" && mkdir -p "$D/out" || exit 1
    cp "$2" "$D/steps"
    echo "running (starting)" >"$STATE"  # before the session starts: a poll right after sees it
    setsid nohup bash "$SELF" _drive </dev/null >/dev/null 2>&1 &
    echo "lease: started $(grep -cvE '^(#|$)' "$D/steps") step(s) (log $LOG)"
    ;;
  _drive) drive >>"$LOG" 2>&1 ;;
  skip)
    [ -n "${2:-}" ] || { echo "lease: skip needs a step name"; exit 2; }
    touch "$D/skip-$2" && echo "lease: $2 will be skipped if it has not started"
    ;;
  poll)
    limit=${2:-540}
    [[ $limit =~ ^[0-9]+$ ]] || { echo "lease: poll needs a whole number of seconds (got '$limit')"; exit 2; }
    [ -e "$STATE" ] || { echo "lease: nothing started in $D"; exit 2; }
    while grep -q '^running' "$STATE" && [ "$SECONDS" -lt "$limit" ]; do sleep 2; done
    echo "lease: $(cat "$STATE") after this poll's $SECONDS s"
    grep -E '^(gpu:|step |===)' "$LOG" | tail -n 20
    out=${OUT:-/tmp/monolith-out}
    mkdir -p "$out"
    tar czf "$out/lease.tgz" -C "$D" log.txt out
    grep -q '^done' "$STATE" && echo "lease: done; every step's folder in $out/lease.tgz"
    exit 0
    ;;
  -h | --help) usage ;;
  *) usage; exit 2 ;;
esac
