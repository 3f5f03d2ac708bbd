#!/usr/bin/env bash
# Records whether Nsight Compute can read hardware counters on this machine (containers often
# lack the permission: ERR_NVGPUCTRPERM). Prints ONE JSON object on stdout and always exits 0,
# so a missing profiler never fails the probe run; the verdict goes into results/m0_probes.json.
#
# usage: probes/ncu_check.sh [path/to/ncu_tiny binary]   (built from probes/ncu_tiny.cu if absent)
# env:   NCU (ncu executable, default: ncu on PATH or /usr/local/cuda/bin/ncu), NVCC, ARCH (sm_90a)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-}"
arch="${ARCH:-sm_90a}"
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()[-600:]))'; }
verdict() {  # status counters_available detail
  printf '{"probe": "ncu", "ok": true, "status": "%s", "counters_available": %s, "ncu": %s, "detail": %s}\n' \
    "$1" "$2" "$(printf '%s' "${ncu_version:-}" | json_str)" "$(printf '%s' "$3" | json_str)"
  exit 0
}

ncu="${NCU:-$(command -v ncu || true)}"
[ -z "$ncu" ] && [ -x /usr/local/cuda/bin/ncu ] && ncu=/usr/local/cuda/bin/ncu
[ -z "$ncu" ] && verdict "ncu not found" false "no ncu on PATH or in /usr/local/cuda/bin"
ncu_version="$("$ncu" --version 2>&1 | tail -n 1)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -z "$bin" ]; then
  nvcc="${NVCC:-nvcc}"
  bin="$tmp/ncu_tiny"
  cc="${arch#sm_}"
  if ! "$nvcc" -std=c++17 -O3 "-gencode=arch=compute_${cc},code=sm_${cc}" -o "$bin" "$here/ncu_tiny.cu" \
      >"$tmp/build.log" 2>&1; then
    verdict "build failed" false "$(cat "$tmp/build.log")"
  fi
fi

# --clock-control none: keep the clocks as they are (ncu locks them to base by default, which
# would make its numbers disagree with our timings).
timeout 120 "$ncu" --clock-control none --metrics dram__bytes_read.sum,sm__cycles_elapsed.avg \
  --csv "$bin" >"$tmp/out.txt" 2>&1
rc=$?
out="$(cat "$tmp/out.txt")"
if grep -q "ERR_NVGPUCTRPERM" <<<"$out"; then
  verdict "permission denied" false "ERR_NVGPUCTRPERM: profiling counters are restricted to admin on this machine"
fi
if [ $rc -ne 0 ]; then
  verdict "ncu failed (rc $rc)" false "$out"
fi
if grep -q "dram__bytes_read.sum" <<<"$out"; then
  line="$(grep 'dram__bytes_read.sum' <<<"$out" | head -n 1)"
  verdict "counters available" true "$line"
fi
verdict "no metric in output" false "$out"
