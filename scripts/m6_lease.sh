#!/usr/bin/env bash
# M6 in one lease, without depending on the gaps between device calls: `start` launches every
# engine group of the final matrix one after another in a process session of its own (setsid), so
# it runs on after the device call that started it returns; `poll SECONDS` waits up to SECONDS for
# it (printing progress), and once it has finished copies the rows, the merged final.json/.md and
# the logs into $OUT. Each poll is one device call that keeps the machine warm; the groups never
# wait on a call, so a 10-minute call limit cannot cut a row in half.
#
# usage: scripts/m6_lease.sh start            (then, in the next calls:)
#        scripts/m6_lease.sh poll 560          (until it prints "m6-lease: done"; every poll returns
#                                              the rows finished so far as m6rows.tgz)
#   env: M6_LEASE_DIR (default /tmp/m6lease), M6_LLAMACPP (a llama-bench pack dir, e.g. .llamacpp),
#        M6_LEASE_GROUPS (';'-separated engine groups, one process each; default: the variants; then
#        every baseline, which share one bf16 oracle), M6_LEASE_BEFORE (a command run first, e.g. a
#        functional proof that belongs to the same lease; its status is logged, it never stops M6).
#   Each group learns the later groups' engines (M6_LATER_ENGINES): the first group's oracles hide
#   hf-compile's cold compile and llama.cpp's conversions (bench/m6.py AHEAD_ENGINES).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
D=${M6_LEASE_DIR:-/tmp/m6lease}
ROWS="$D/rows"
LOG="$D/log.txt"
STATE="$D/state"
GPU_SH=${M6_LEASE_GPU_SH:-scripts/gpu.sh}  # (a test substitutes a fake)
# Two processes, so a crash in one cannot take the other's rows (a kernel fault poisons its process's
# CUDA context: one process would lose every baseline to a variant's fault, for ~15 s saved). Each
# fp32 oracle (~40 s on an H100) is computed once per lease: the second process reads the first's
# from $ROWS/oracles/ (bench/oracle_cache.py). Price and prediction: notes/m6_budget.md,
# `monolith m6 --plan`.
GROUPS_DEFAULT="bf16-upstream,fp8-upstream,bf16-stream,fp8-stream,nvfp4-stream;reference-graph,hf-compile,llamacpp,hf-eager,hf-static"

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

drive() {  # the whole matrix, in order; every group's status goes to the log and the state file
  mkdir -p "$ROWS"
  local t0=$SECONDS i=0 rc
  echo "running" >"$STATE"
  if [ -n "${M6_LEASE_BEFORE:-}" ]; then
    echo "=== before: $M6_LEASE_BEFORE"
    bash -c "$M6_LEASE_BEFORE"
    echo "before rc=$? at $((SECONDS - t0)) s"
  fi
  IFS=';' read -ra groups <<<"${M6_LEASE_GROUPS:-$GROUPS_DEFAULT}"
  # torch's compile caches of this lease only: the warming process (bench/baselines/hf_warm.py) fills
  # them cold, the process that measures hf-compile reads them
  export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$D/inductor}"
  for g in "${groups[@]}"; do
    i=$((i + 1))
    later=$(IFS=','; echo "${groups[*]:i}")  # the engines of the groups after this one
    echo "running group $i/${#groups[@]}: $g" >"$STATE"
    echo "=== group $i/${#groups[@]}: $g (at $((SECONDS - t0)) s)"
    OUT="$D/out-$i" M6_ENGINES="$g" M6_ROWS="$ROWS" M6_LATER_ENGINES="$later" bash "$GPU_SH" m6
    rc=$?
    echo "group $i rc=$rc at $((SECONDS - t0)) s"
  done
  echo "=== merge (at $((SECONDS - t0)) s)"
  OUT="$D/merged" M6_ROWS="$ROWS" bash "$GPU_SH" m6merge
  rc=$?
  echo "merge rc=$rc at $((SECONDS - t0)) s"
  echo "done rc=$rc" >"$STATE"
}

case "${1:-}" in
  start)
    [ -e "$STATE" ] && grep -q '^running' "$STATE" && { echo "m6-lease: already running ($(cat "$STATE"))"; exit 2; }
    # the llama.cpp rows need a pack (a lease is too short to build one): refuse a named one that is
    # missing now rather than find a "not run" row after the lease
    if [ -n "${M6_LLAMACPP:-}" ]; then
      [ -x "$M6_LLAMACPP/bin/llama-bench" ] || [ -f "$M6_LLAMACPP/pack.tar.xz" ] || [ -f "$M6_LLAMACPP" ] || {
        echo "m6-lease: M6_LLAMACPP=$M6_LLAMACPP holds no bin/llama-bench or pack.tar.xz (carry it, notes/harness.md)"
        exit 2
      }
    else
      echo "m6-lease: M6_LLAMACPP not set: the llama.cpp rows will say not run"
    fi
    rm -rf "$D" && mkdir -p "$D" || exit 1
    echo "running" >"$STATE"  # before the session starts: a poll right after this call sees it
    setsid nohup bash "$0" _drive </dev/null >/dev/null 2>&1 &
    echo "m6-lease: started (log $LOG)"
    ;;
  _drive) drive >>"$LOG" 2>&1 ;;
  poll)
    limit=${2:-540}
    [ -e "$STATE" ] || { echo "m6-lease: nothing started in $D"; exit 2; }
    while grep -q '^running' "$STATE" && [ "$SECONDS" -lt "$limit" ]; do sleep 2; done
    echo "m6-lease: $(cat "$STATE") after this poll's $SECONDS s"
    grep -E '^(===|group|merge|before)' "$LOG" | tail -n 12
    out=${OUT:-/tmp/monolith-out}
    mkdir -p "$out"
    # the rows finished so far come back with every poll: if the lease ends before the matrix does,
    # the finished rows are not lost with the machine
    [ -d "$D/rows" ] && tar czf "$out/m6rows.tgz" -C "$D" rows
    if grep -q '^done' "$STATE"; then
      cp "$D"/merged/final.json "$D"/merged/final.md "$out"/ 2>/dev/null
      logs=(log.txt)
      for f in "$D"/out-* "$D"/merged; do [ -e "$f" ] && logs+=("$(basename "$f")"); done
      tar czf "$out/m6logs.tgz" -C "$D" "${logs[@]}"
      echo "m6-lease: done; rows, final.json/.md and logs in $out"
    fi
    ;;
  -h | --help) usage ;;
  *) usage; exit 2 ;;
esac
