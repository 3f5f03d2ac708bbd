#!/usr/bin/env bash
# M6 in one lease, a layer over scripts/lease.sh: `start` writes the final matrix as a queue of
# steps (M6_LEASE_BEFORE's command, one step per engine group, the merge) and starts it with
# `lease.sh start`, so the groups run one after another in a process session of their own, on after
# the device call that started them returns. `poll SECONDS` is `lease.sh poll SECONDS` plus M6's
# part: every poll returns the rows finished so far as m6rows.tgz; once the queue is done, the
# merged final.json/.md and the logs (m6logs.tgz). Each poll is one device call that keeps the
# machine warm; a group never waits on a call, so a 10-minute call limit cannot cut a row in half.
#
# usage: scripts/m6_lease.sh start            (then, in the next calls:)
#        scripts/m6_lease.sh poll 560          (until it prints "m6-lease: done"; every poll returns
#                                              the rows finished so far as m6rows.tgz)
#   env: M6_LEASE_DIR (default /tmp/m6lease: the queue's LEASE_DIR), M6_LLAMACPP (a llama-bench pack
#        dir, e.g. .llamacpp), M6_LEASE_GROUPS (';'-separated groups of ','-separated engines, one
#        process each; default: the variants; then every baseline, which share one bf16 oracle),
#        M6_LEASE_BEFORE (a command run first, e.g. a functional proof that belongs to the same
#        lease; its status is logged, it never stops M6).
#   Steps: before, group1 ... groupN, merge; each step's output in lease.tgz (lease.sh --help).
#   Each group learns the later groups' engines (M6_LATER_ENGINES): the first group's oracles hide
#   hf-compile's cold compile and llama.cpp's conversions (bench/m6.py AHEAD_ENGINES).
set -uo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$SELF")/.." || exit 1
D=${M6_LEASE_DIR:-/tmp/m6lease}
GPU_SH=${M6_LEASE_GPU_SH:-scripts/gpu.sh}  # (a test substitutes a fake)
# Two processes, so a crash in one cannot take the other's rows (a kernel fault poisons its process's
# CUDA context: one process would lose every baseline to a variant's fault, for ~15 s saved). Each
# fp32 oracle (~40 s on an H100) is computed once per lease: the second process reads the first's
# from $D/rows/oracles/ (bench/oracle_cache.py). Price and prediction: notes/m6_budget.md,
# `monolith m6 --plan` (which reads this line).
GROUPS_DEFAULT="bf16-upstream,fp8-upstream,bf16-stream,fp8-stream,nvfp4-stream;reference-graph,hf-compile,llamacpp,hf-eager,hf-static"

usage() { sed -n '2,20p' "$SELF" | sed 's/^# \{0,1\}//'; }
lease() { LEASE_DIR=$D bash scripts/lease.sh "$@"; }

write_steps() {  # write_steps GROUP...: the queue, one step a line (scripts/lease.sh's format)
  local i=0 later rows ind
  rows=$(printf %q "$D/rows")
  # torch's compile caches of this lease only: the warming process (bench/baselines/hf_warm.py) fills
  # them cold, the process that measures hf-compile reads them
  ind=$(printf %q "${TORCHINDUCTOR_CACHE_DIR:-$D/inductor}")
  case ${M6_LEASE_BEFORE:-} in
    '') ;;
    *$'\n'*) echo "before bash -c $(printf %q "$M6_LEASE_BEFORE")" ;;  # one line in the queue
    *) echo "before $M6_LEASE_BEFORE" ;;
  esac
  # poll reads a running group's engines back from its line: M6_ENGINES stays unquoted and
  # space-delimited (start admits only [A-Za-z0-9._-] names)
  for g in "$@"; do
    i=$((i + 1))
    later=$(IFS=','; echo "${*:i+1}")  # the engines of the groups after this one
    echo "group$i mkdir -p $rows && OUT=$(printf %q "$D/out-$i") M6_ENGINES=$g M6_ROWS=$rows" \
      "M6_LATER_ENGINES=$later TORCHINDUCTOR_CACHE_DIR=$ind bash $(printf %q "$GPU_SH") m6"
  done
  echo "merge OUT=$(printf %q "$D/merged") M6_ROWS=$rows bash $(printf %q "$GPU_SH") m6merge"
}

case "${1:-}" in
  start)
    # blanks around the separators are dropped; one inside a name is an error
    spec=$(sed -E 's/[[:space:]]*([,;])[[:space:]]*/\1/g; s/^[[:space:]]+|[[:space:]]+$//g' <<<"${M6_LEASE_GROUPS:-$GROUPS_DEFAULT}")
    e='[A-Za-z0-9._-]+'
    [[ $spec =~ ^$e(,$e)*(\;$e(,$e)*)*$ ]] || {
      echo "m6-lease: M6_LEASE_GROUPS='$spec': ';'-separated groups of ','-separated engines, none empty"
      exit 2
    }
    IFS=';' read -ra groups <<<"$spec"
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
    q=$(mktemp) || exit 1
    write_steps "${groups[@]}" >"$q"
    lease start "$q"
    rc=$?
    rm -f "$q"
    exit "$rc"
    ;;
  poll)
    [ -e "$D/state" ] || { echo "m6-lease: nothing started in $D"; exit 2; }
    lease poll "${2:-540}" || exit
    out=${OUT:-/tmp/monolith-out}
    mkdir -p "$out"
    # the rows finished so far come back with every poll: if the lease ends before the matrix does,
    # the finished rows are not lost with the machine
    [ -d "$D/rows" ] && tar czf "$out/m6rows.tgz" -C "$D" rows
    state=$(cat "$D/state")
    case $state in
      done*)
        cp "$D"/merged/final.json "$D"/merged/final.md "$out"/ 2>/dev/null
        logs=(log.txt out)
        for f in "$D"/out-* "$D"/merged; do [ -e "$f" ] && logs+=("$(basename "$f")"); done
        tar czf "$out/m6logs.tgz" -C "$D" "${logs[@]}"
        rc=$(sed -n 's/^step merge rc=\([0-9]*\) .*/\1/p' "$D/log.txt" | tail -n 1)
        echo "m6-lease: done rc=${rc:-none (no merge)}; rows, final.json/.md and logs in $out"
        ;;
      'running group'*)
        k=${state#running group}
        n=$(grep -c '^group[0-9]* ' "$D/steps")
        engines=$(sed -n "s/^group$k .* M6_ENGINES=\([^ ]*\) .*/\1/p" "$D/steps")
        echo "m6-lease: running group $k/$n: $engines"
        ;;
      *) echo "m6-lease: $state" ;;
    esac
    exit 0
    ;;
  -h | --help) usage ;;
  *) usage; exit 2 ;;
esac
