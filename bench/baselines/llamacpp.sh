#!/usr/bin/env bash
# llama.cpp baseline: build from the source vendored in a llama-cpp-python sdist (CUDA,
# sm_90a), convert our checkpoint with its convert_hf_to_gguf.py to BF16 and Q8_0
# (llamacpp_convert.sh: a kind converted earlier from the same files is kept), run
# llama-bench text generation (batch 1, 256 tokens, 5 repetitions), write one JSON.
# Any step that cannot run writes {"status": "not run", "reason": ...} and exits 0, so a
# missing toolchain is a row in the results, not a broken session.
#
# usage: bench/baselines/llamacpp.sh SDIST_OR_DIR [CHECKPOINT_DIR] [OUT_JSON]
#   env: LLAMA_CPP_SDIST (instead of arg 1), MONOLITH_CKPT, WORK (default build/llamacpp),
#        JOBS (default nproc), N_GEN (256), REPS (5), CUDA_ARCH (90a),
#        CMAKE_EXTRA (more cmake flags, e.g. -DCUDAToolkit_ROOT=... -G Ninja),
#        PACK=DIR   build only, then copy llama-bench + the converter into DIR (small enough to
#                   carry to a GPU machine whose session time is too short for the build),
#        LLAMA_BENCH=PATH  use that prebuilt llama-bench (e.g. DIR/bin/llama-bench from PACK);
#                   arg 1 may then be the packed DIR (it holds convert_hf_to_gguf.py).
# Build flags: static libraries, CUDA for one architecture, no tests/examples/server, no VMM
# (the CUDA VMM pool needs libcuda at link time, which a driverless build machine lacks; the
# pool is an allocator choice, not on the per-token path), no NCCL, no -march=native (the
# binary may run on another host's CPU).
set -uo pipefail

SRC_IN="${1:-${LLAMA_CPP_SDIST:-}}"
CKPT="${2:-${MONOLITH_CKPT:-checkpoints/synth-seed0}}"
OUT="${3:-results/llamacpp.json}"
WORK="${WORK:-build/llamacpp}"
JOBS="${JOBS:-$(nproc)}"
N_GEN="${N_GEN:-256}"
REPS="${REPS:-5}"
CUDA_ARCH="${CUDA_ARCH:-90a}"
PY="${PY:-python3}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"  # monolith's package (llamacpp_run.py) from this checkout
mkdir -p "$WORK" "$(dirname "$OUT")"
LOG="$WORK/llamacpp.log"
: >"$LOG"

# write_json STATUS REASON [VERSION] [RESULT_FILES...]: JSON composed by python (safe quoting).
write_json() {
  local status="$1" reason="$2" version="${3:-}"
  shift 3 || shift $#
  "$PY" - "$OUT" "$status" "$reason" "$version" "$CUDA_ARCH" "$N_GEN" "$REPS" "$@" <<'EOF'
import datetime, json, os, sys
out, status, reason, version, arch, n_gen, reps, *files = sys.argv[1:]
conversion = None  # llamacpp_convert.sh's seconds per kind, and whether they ran before this script
try:
    t0 = float(os.environ["CONVERT_T0"])
    kinds = json.load(open(os.environ["CONVERT_JSON"])).get("kinds") or {}
    conversion = {k: {"status": v.get("status"), "seconds": v.get("seconds"),
                      "ahead": v.get("converted_unix", t0) < t0,
                      "converted": datetime.datetime.fromtimestamp(v["converted_unix"], datetime.timezone.utc)
                      .isoformat(timespec="seconds") if v.get("converted_unix") else None}
                  for k, v in kinds.items()}
except (KeyError, OSError, ValueError):
    pass
results = {}
for f in files:
    kind, path = f.split("=", 1)
    try:
        results[kind] = json.load(open(path))
    except Exception as e:  # keep the failure visible in the JSON
        results[kind] = {"error": f"{type(e).__name__}: {e}"}
doc = {"engine": "llamacpp", "status": status, "reason": reason or None, "version": version or None,
       "cuda_arch": arch, "n_gen": int(n_gen), "repetitions": int(reps), "batch": 1,
       "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "tool": "llama-bench -p 0 -n N_GEN -r REPS -ngl 99 -o jsonl (bench/baselines/llamacpp_run.py: NVML energy)",
       "conversion": conversion, "results": results}
json.dump(doc, open(out, "w"), indent=1)
print(f"llamacpp: wrote {out} ({status}{': ' + reason if reason else ''})")
EOF
}

not_run() {
  write_json "not run" "$1" ""
  exit 0
}

log_tail() { tail -c 600 "$LOG" | tr '\n' ' '; }

# 1. source
[ -n "$SRC_IN" ] || not_run "no llama-cpp-python sdist given (arg 1 or LLAMA_CPP_SDIST)"
[ -e "$SRC_IN" ] || not_run "sdist not found: $SRC_IN"
if [ -f "$SRC_IN" ]; then
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  tar -xf "$SRC_IN" -C "$WORK/src" >>"$LOG" 2>&1 || not_run "cannot extract $SRC_IN: $(log_tail)"
  ROOT="$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
else
  ROOT="$SRC_IN"
fi
if [ -f "$ROOT/vendor/llama.cpp/CMakeLists.txt" ]; then
  LL="$ROOT/vendor/llama.cpp"
elif [ -f "$ROOT/convert_hf_to_gguf.py" ] && { [ -f "$ROOT/CMakeLists.txt" ] || [ -n "${LLAMA_BENCH:-}" ]; }; then
  LL="$ROOT"
else
  not_run "no vendor/llama.cpp (with CMakeLists.txt) inside $SRC_IN"
fi
PKG_VERSION="$(sed -n 's/^Version: //p' "$ROOT/PKG-INFO" "$LL/PKG-INFO" 2>/dev/null | head -n 1)"
CMAKE_FLAGS=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF
  -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_NCCL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)

if [ -n "${LLAMA_BENCH:-}" ]; then
  # 2-3. prebuilt (PACK mode elsewhere): say where it came from
  BENCH="$LLAMA_BENCH"
  [ -x "$BENCH" ] || not_run "LLAMA_BENCH=$BENCH is not an executable"
  BUILT="prebuilt: $(tr '\n' ' ' <"$(dirname "$BENCH")/../BUILD-INFO.txt" 2>/dev/null || echo 'no BUILD-INFO.txt')"
else
  # 2. toolchain
  for tool in cmake nvcc c++; do
    command -v "$tool" >/dev/null 2>&1 || not_run "$tool not found on PATH (needed to build llama.cpp with CUDA)"
  done
  # 3. build (only llama-bench; CUDA for this one architecture keeps the build short)
  BUILD="$WORK/build"
  T0=$SECONDS
  # shellcheck disable=SC2086  # CMAKE_EXTRA is a list of flags
  cmake -S "$LL" -B "$BUILD" "${CMAKE_FLAGS[@]}" ${CMAKE_EXTRA:-} >>"$LOG" 2>&1 || not_run "cmake configure failed: $(log_tail)"
  cmake --build "$BUILD" -j "$JOBS" --target llama-bench >>"$LOG" 2>&1 || not_run "build failed: $(log_tail)"
  BENCH="$BUILD/bin/llama-bench"
  [ -x "$BENCH" ] || not_run "llama-bench not built at $BENCH"
  BUILT="built here in $((SECONDS - T0)) s with $JOBS jobs; flags: ${CMAKE_FLAGS[*]} ${CMAKE_EXTRA:-}"
  if [ -n "${PACK:-}" ]; then
    rm -rf "$PACK" && mkdir -p "$PACK/bin" || exit 1
    cp "$BENCH" "$PACK/bin/" && strip "$PACK/bin/llama-bench" 2>/dev/null
    cp -r "$LL/convert_hf_to_gguf.py" "$LL/conversion" "$LL/gguf-py" "$PACK/" || exit 1
    [ -f "$ROOT/PKG-INFO" ] && cp "$ROOT/PKG-INFO" "$PACK/"
    printf 'llama-cpp-python %s; %s; on %s (%s)\n' "${PKG_VERSION:-unknown}" "$BUILT" "$(hostname)" \
      "$(nvcc --version | tail -n 1)" >"$PACK/BUILD-INFO.txt"
    echo "llamacpp: packed into $PACK ($(du -sh "$PACK" | cut -f1))"
    exit 0
  fi
fi
# llama-bench links cuBLAS and the CUDA runtime dynamically. Where those come from pip wheels
# (torch's nvidia-* dependencies: site-packages/nvidia/cu13/lib, or nvidia/<lib>/lib for CUDA 12)
# the loader does not search them: append every such dir (a library already on the path wins).
# A library still missing is a not-run row naming it, rather than llama-bench failing per model.
NV_LIBS="$("$PY" -c 'import glob, os, nvidia
print(":".join(sorted({os.path.dirname(p) for b in nvidia.__path__ for p in glob.glob(os.path.join(b, "*", "lib", "lib*.so*"))})))' 2>/dev/null)"
[ -n "$NV_LIBS" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$NV_LIBS"
{ echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "ldd $BENCH:"; ldd "$BENCH"; } >>"$LOG" 2>&1
MISSING="$(ldd "$BENCH" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ' | sed 's/ $//')"
[ -z "$MISSING" ] || not_run "llama-bench needs libraries not found (LD_LIBRARY_PATH and site-packages/nvidia searched): $MISSING"
[ -d "$CKPT" ] || not_run "checkpoint directory not found: $CKPT"
VERSION="llama-cpp-python ${PKG_VERSION:-unknown}; $("$BENCH" --version 2>&1 | head -n 2 | tr '\n' ' '); $BUILT"

# 4. convert the same checkpoint (gguf-py from the same source tree): llamacpp_convert.sh, which
# keeps a kind already converted from the same files (`monolith m6` converts beside its oracles);
# the output JSON says, per kind, how long the conversion took and whether it ran before this script
CONVERT_T0=$(date +%s.%N)
export CONVERT_T0 CONVERT_JSON="$WORK/convert.json"
bash "$(dirname "$0")/llamacpp_convert.sh" "$LL" "$CKPT" "$WORK" >>"$LOG" 2>&1
FILES=()
for kind in bf16 q8_0; do
  GGUF="$WORK/model-$kind.gguf"
  if [ -f "$GGUF" ]; then
    # 5. text generation only (-p 0), 256 tokens, batch 1 by construction, all layers on the GPU,
    # with NVML's energy counter polled beside it (llamacpp_run.py: the repetitions' joules)
    if PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m monolith.bench.baselines.llamacpp_run "$BENCH" "$GGUF" "$N_GEN" "$REPS" "$WORK/bench-$kind.json" 2>>"$LOG"; then
      FILES+=("$kind=$WORK/bench-$kind.json")
    else
      echo "llama-bench failed for $kind" >>"$LOG"
    fi
  else
    echo "convert failed for $kind" >>"$LOG"
  fi
done
[ "${#FILES[@]}" -gt 0 ] || { write_json "not run" "convert or llama-bench failed: $(log_tail)" "$VERSION"; exit 0; }
write_json "ok" "" "$VERSION" "${FILES[@]}"
