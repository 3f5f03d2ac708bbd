#!/usr/bin/env bash
# One call on the GPU machine: build, gate, benchmark, trace. Stages run in the order given
# (default: all). Logs and results go under $OUT (results.tgz + log), a short table last.
#   scripts/gpu.sh [env] [probes] [parity] [kernel] [sanitize] [sanitize-stream] [racecheck-first] [racecheck-stream] [sweep] [devbench] [m4dev] [xraydev] [abdev] [abpatch] [m4] [m3] [m3quality] [m5quality] [m5sens] [hop] [fold] [attn] [round] [actstore] [l2part] [tcclock] [xraylong] [mbar] [ncu] [m1] [quality] [llamacpp] [m1rest] [m1llama] [xray] [overhead] [all]
#   explicit only (not in all): [m5] [m6] [m6merge] [m7] [m8]: the milestone commands `monolith m5` ... `m8`;
#   [xrayoverhead]: scripts/xray_overhead.py
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/monolith-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1
# Carried: wheels the image lacks (.whl) and a copy of ../shared/data (.data).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
if [ -d .data ] && [ ! -e ../shared/data/wikitext-2-raw-v1-test.txt ]; then mkdir -p ../shared/data && cp .data/* ../shared/data/; fi
stages=("$@"); [ ${#stages[@]} -eq 0 ] && stages=(all)
summary=()
# whatever happens (a stage fails, the outer timeout fires), what was measured comes back
# Only what this call wrote: the whole results/ tree (every session's logs and traces) outgrew
# what a device call may bring back (eleventh session: results.tgz was left out for its size).
stamp="$OUT/.gpu-sh-start"; [ -e "$stamp" ] || touch "$stamp"
pack() {
  local new; new=$(find results -type f -newer "$stamp" 2>/dev/null; ls build/*/*.log 2>/dev/null)
  # shellcheck disable=SC2086
  if [ -n "$new" ]; then tar czf "$OUT/results.tgz" $new; fi
}
trap 'pack; exit 124' TERM INT
defines_env() {  # defines_env SET: defs=(env ...) building SET ("base": the plain build; else MONOLITH_NVCC_DEFINES)
  if [ "$1" = base ]; then defs=(env -u MONOLITH_NVCC_DEFINES); else defs=(env MONOLITH_NVCC_DEFINES="$1"); fi
}
run() {  # run NAME CMD...: log, time, keep going on failure
  local name=$1; shift
  local t0=$SECONDS
  echo "=== [$name] $*" | tee -a "$OUT/log.txt"
  # in the background + wait: a TERM from an outer timeout interrupts `wait` at once (the trap
  # packs the results), where a foreground pipeline would hold the trap until it ended
  "$@" 2>&1 | tee -a "$OUT/log.txt" &
  wait $!
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
  return "$rc"
}
want() { for s in "${stages[@]}"; do [ "$s" = "$1" ] || [ "$s" = all ] && return 0; done; return 1; }
only() { for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }  # named stages, never `all`
logged() {  # logged FILE CMD...: CMD's output into FILE as well (one log per sanitizer run); CMD's status
  local f=$1; shift
  "$@" 2>&1 | tee "$f"
  return "${PIPESTATUS[0]}"
}
# Extra -D defines (monolith/kernel_spec.py) make a diagnostic kernel, never the default: exported
# by the caller, every stage would build and measure it. Results name it (build info, env); the
# log says so first.
if [ -n "${MONOLITH_NVCC_DEFINES:-}" ]; then
  echo "WARNING: MONOLITH_NVCC_DEFINES=$MONOLITH_NVCC_DEFINES: every stage builds this diagnostic kernel" | tee -a "$OUT/log.txt"
fi

if want env; then
  run env bash -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv; nvcc --version | tail -2; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"'
fi
run synth python3 -c "from monolith.checkpoint import ensure_checkpoint; print(ensure_checkpoint(None, progress=False))"
want probes && run probes python3 -m monolith probe --out results/m0_probes.json
want parity && run parity python3 -m monolith.parity --device cuda --out results/m0_ref_vs_hf.json
want kernel && run kernel-tests python3 -m pytest -q -m gpu -x tests/test_kernel_gpu.py -s
if want sanitize; then
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/sanitize_step.py
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 python3 tests/gpu/sanitize_step.py
fi
# racecheck's first hazards, with source lines (the full run can outlast its cap)
if want racecheck-first; then
  run racecheck-first env MONOLITH_VARIANT=bf16-stream MONOLITH_SANITIZE_BLOCKS=16 MONOLITH_SANITIZE_PROMPT=1 \
    timeout "${SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 12 \
    --error-exitcode 9 python3 tests/gpu/sanitize_step.py
fi
# the streaming schedule's reduced configuration: 16 blocks, a 2-token prompt, each tool capped
# (SANITIZE_TOOLS: which of the three, e.g. "memcheck synccheck" beside racecheck-stream's reduced run)
# SANITIZE_VARIANTS: comma list (default bf16-stream); MONOLITH_SANITIZE_START=300 (exported) puts the
# prompt and both steps past kLongKernelFrom = 256, i.e. on the long-position kernel.
if want sanitize-stream; then
  IFS=, read -ra sz_variants <<< "${SANITIZE_VARIANTS:-bf16-stream}"
  for variant in "${sz_variants[@]}"; do
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      run "$tool-$variant" env MONOLITH_VARIANT="$variant" MONOLITH_SANITIZE_BLOCKS=16 MONOLITH_SANITIZE_PROMPT=2 \
        timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 tests/gpu/sanitize_step.py
    done
  done
fi
# The ring's WAR reports (consumer reads in half_row_lane, the producer's next cp.async.bulk into the
# slot) against who arrives on the slot's `empty` mbarrier: first a build where every consumer
# thread arrives (MONOLITH_RING_RELEASE=512 through MONOLITH_NVCC_DEFINES: its own build dir, named
# in the build info), then the default build (lane 0 of each warp after __syncwarp) for the
# contrast. The question: is racecheck blind to __syncwarp / bar.sync ordering the consumers' reads
# before one thread's arrive (reports with 16 and 1, none with 512), or is there a real WAR.
# Fourth session (results/logs/2026-12-01-s4): the default build's first step reported the WARs,
# the 512 build none before its 150 s cap cut the run. Here 16 blocks and the reduced step only
# (MONOLITH_SANITIZE_FULL=0: layers 0-1 at position 0, no 28-layer step) so that racecheck ends.
# The extension is built first, outside the sanitizer: the cap times racecheck, not nvcc.
# --racecheck-report analysis (racecheck's default, said out loud): hazard reports are per byte,
# and racecheck-first's print limit went on 12 consecutive bytes of one race; analysis reports
# each race once (its two source lines, its hazard count), so --print-limit 20 shows up to 20
# distinct races and the RACECHECK SUMMARY line counts them all. Each run: its own log in $OUT.
# RACECHECK_VARIANTS: comma list (bf16-stream,fp8-stream for both formats); RACECHECK_RELEASES:
# MONOLITH_RING_RELEASE values in order, `default` = the build without extra defines. Two runs at
# the full SANITIZE_TIMEOUT outlast one 10-minute device call: give them a call each if needed.
if want racecheck-stream; then
  IFS=, read -ra rc_variants <<< "${RACECHECK_VARIANTS:-bf16-stream}"
  IFS=, read -ra rc_releases <<< "${RACECHECK_RELEASES:-512,default}"
  for variant in "${rc_variants[@]}"; do
    for rel in "${rc_releases[@]}"; do
      if [ "$rel" = default ]; then defs=(env -u MONOLITH_NVCC_DEFINES); else defs=(env MONOLITH_NVCC_DEFINES="MONOLITH_RING_RELEASE=$rel"); fi
      rlog="$OUT/racecheck-stream-$variant-r$rel.log"; rm -f "$rlog"
      run "rc-build-$variant-r$rel" "${defs[@]}" python3 -c \
        "import sys; from monolith.megakernel import load_extension as L; print(L(sys.argv[1]).build_info)" "$variant" &&
      run "racecheck-$variant-r$rel" logged "$rlog" "${defs[@]}" MONOLITH_VARIANT="$variant" MONOLITH_SANITIZE_BLOCKS=16 \
        MONOLITH_SANITIZE_FULL=0 timeout -k 20 "${SANITIZE_TIMEOUT:-420}" compute-sanitizer --tool racecheck \
        --racecheck-report analysis --print-limit 20 --error-exitcode 9 python3 tests/gpu/sanitize_step.py
      # the sanitizer's own count under the run's rc in the table
      rc_line=$(grep -hE "RACECHECK SUMMARY|ERROR SUMMARY" "$rlog" 2>/dev/null | tail -n 1)
      [ -n "$rc_line" ] && summary+=("  ${rc_line#========= }")
    done
  done
fi
if want sweep; then
  run launch-sweep python3 scripts/dev_bench.py --blocks "${BLOCKS:-132,128,120,116,100,96,80,66,48,33}" \
    --out results/m1_launch_sweep.json
fi
if want devbench; then
  run devbench python3 scripts/dev_bench.py --blocks "${BLOCKS:-132,128,116,96,66}"
  run devbench-xray python3 scripts/dev_bench.py --blocks 132 --xray
fi
# M4 development: the kernel tests on the variants named (default: the streaming schedule), then
# dev timings of the upstream schedule, its step-0 A/B, and the streaming schedule
if want m4dev; then
  run kernel-tests-m4 env MONOLITH_TEST_VARIANTS="${M4_TEST_VARIANTS:-bf16-stream}" \
    python3 -m pytest -q -m gpu -x tests/test_kernel_gpu.py -s
  run devbench-m4 python3 scripts/dev_bench.py --variant "${M4_VARIANTS:-bf16-upstream,bf16-upstream-l2pre,bf16-stream}" \
    --blocks 132 --runs 3 --prompt-len "${M4_PROMPT:-2}" --out results/m4_devbench.json
fi
# development X-ray: raw traces at position 128 straight into $OUT (analyzed off the GPU with
# `monolith xray`), one per variant named
want xraydev && run xray-dev python3 scripts/xray_raw.py --variant "${XRAY_VARIANTS:-bf16-stream}" --position 128 \
  --out "$OUT/xray"
# A/B of diagnostic builds in one call (fifth session): AB_DEFINES, ';'-separated
# MONOLITH_NVCC_DEFINES values in order (`base` = the default build; put it first: its decoded
# tokens become the reference every other build must match bitwise, since the knobs move timing
# only). Each build: dev timings of AB_VARIANTS at 128 blocks (median of 3), then its X-ray raw
# traces at position 128 in results/ab/xray-<i>/ (inside results.tgz; analyzed off the GPU).
# AB_DEV_ARGS: more dev_bench arguments for every set (e.g. "--prompt-len 2040 --tokens 32" for long
# positions); AB_TOKENS_REF=0 skips the bitwise token check (a knob that sums in another order).
if want abdev; then
  IFS=';' read -ra ab_sets <<< "${AB_DEFINES:-base}"
  ab_ref=results/ab/tokens-ref.json; rm -rf results/ab; mkdir -p results/ab
  ref_args=(--tokens-ref "$ab_ref"); [ "${AB_TOKENS_REF:-1}" = 0 ] && ref_args=()
  read -ra dev_args <<< "${AB_DEV_ARGS:-}"
  i=0
  for d in "${ab_sets[@]}"; do
    defines_env "$d"
    echo "ab$i: ${d}" >> results/ab/sets.txt
    # AB_TESTS: a pytest -k expression run on each build first (correctness before timing)
    if [ -n "${AB_TESTS:-}" ]; then
      run "ab$i-tests" "${defs[@]}" MONOLITH_TEST_VARIANTS="${AB_VARIANTS:-bf16-stream,fp8-stream}" \
        python3 -m pytest -q -m gpu tests/test_kernel_gpu.py -k "$AB_TESTS"
    fi
    run "ab$i-dev" "${defs[@]}" python3 scripts/dev_bench.py --variant "${AB_VARIANTS:-bf16-stream,fp8-stream}" \
      --blocks 128 --runs 3 ${ref_args[@]+"${ref_args[@]}"} ${dev_args[@]+"${dev_args[@]}"} --out "results/ab/dev-$i.json"
    # AB_XRAY_POS: the X-ray's position (default 128); AB_XRAY=0: none; AB_XRAY_DEFINES: defines added
    # to the set's for its X-ray only (e.g. MONOLITH_XRAY_SUB=3: the attention split's cuts)
    if [ "${AB_XRAY:-1}" != 0 ]; then
      xdefs=("${defs[@]}")
      if [ -n "${AB_XRAY_DEFINES:-}" ]; then
        if [ "$d" = base ]; then xdefs=(env MONOLITH_NVCC_DEFINES="$AB_XRAY_DEFINES"); else xdefs=(env MONOLITH_NVCC_DEFINES="$d,$AB_XRAY_DEFINES"); fi
      fi
      run "ab$i-xray" "${xdefs[@]}" python3 scripts/xray_raw.py --variant "${AB_VARIANTS:-bf16-stream,fp8-stream}" \
        --position "${AB_XRAY_POS:-128}" --out "results/ab/xray-$i"
    fi
    i=$((i + 1))
  done
fi
# A/B of a code change that is not a knob (fourteenth session): AB_PATCH, a `git diff` of the change
# (paths relative to the repository root), is applied to a copy of this tree (AB_TREE, default
# /tmp/ab-patch; build/, checkpoints/ and results/ left out, the checkpoints linked). Dev timings
# of AB_VARIANTS at 128 blocks: this tree, the patched copy, this tree again (the machine's drift),
# the patched build's tokens checked bitwise against this tree's (AB_TOKENS_REF=0: not checked);
# then each build's X-ray in results/ab/xray-base/ and xray-patch/ (AB_XRAY=0: none). Everything
# lands under results/ab/, so it comes back in results.tgz (a call returns only a few files).
if want abpatch; then
  rm -rf results/ab; mkdir -p results/ab
  ab_root=$PWD ab_tree=${AB_TREE:-/tmp/ab-patch} ab_v=${AB_VARIANTS:-bf16-stream,fp8-stream}
  ab_patch=$(realpath -e "${AB_PATCH:-/nonexistent}" 2>/dev/null)
  ab_ref=(); [ "${AB_TOKENS_REF:-1}" = 0 ] || ab_ref=(--tokens-ref "$ab_root/results/ab/tokens-ref.json")
  in_tree() {  # in_tree DIR CMD...: CMD in DIR, with DIR's package first on the Python path
    local dir=$1; shift
    (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" exec "$@")
  }
  make_tree() {  # a copy of this tree without build/, checkpoints/, results/, with the patch applied
    rm -rf "$ab_tree" && mkdir -p "$ab_tree/results" &&
      tar --exclude=./build --exclude=./checkpoints --exclude=./results -cf - . | (cd "$ab_tree" && tar xf -) &&
      ln -sfn "$ab_root/checkpoints" "$ab_tree/checkpoints" && in_tree "$ab_tree" patch -p1 --forward --batch -i "$ab_patch"
  }
  if [ -z "$ab_patch" ]; then
    echo "abpatch: AB_PATCH='${AB_PATCH:-}' is not a file (a git diff of the change, relative to the repository root)" |
      tee -a "$OUT/log.txt"
    summary+=("abpatch                rc=2   no AB_PATCH")
  elif run abpatch-tree make_tree; then
    # AB_PROMPTS: comma list of prompt lengths (each its own rows; default dev_bench's), e.g. 128,1500
    IFS=, read -ra ab_prompts <<< "${AB_PROMPTS:-default}"
    for side in base patch base2; do
      dir=$ab_root; [ "$side" = patch ] && dir=$ab_tree
      for pl in "${ab_prompts[@]}"; do
        pl_args=(); sfx=""; [ "$pl" = default ] || { pl_args=(--prompt-len "$pl"); sfx="-p$pl"; }
        run "abpatch-dev-$side$sfx" in_tree "$dir" python3 scripts/dev_bench.py --variant "$ab_v" --blocks 128 --runs 3 \
          ${pl_args[@]+"${pl_args[@]}"} ${ab_ref[@]+"${ab_ref[@]}"} --out "$ab_root/results/ab/dev-$side$sfx.json" || break 2
      done
    done
    if [ "${AB_XRAY:-1}" != 0 ]; then
      for side in base patch; do
        dir=$ab_root; [ "$side" = patch ] && dir=$ab_tree
        run "abpatch-xray-$side" in_tree "$dir" python3 scripts/xray_raw.py --variant "$ab_v" \
          --position "${AB_XRAY_POS:-128}" --out "$ab_root/results/ab/xray-$side"
      done
    fi
  fi
fi
# M4: the streaming schedule against bf16-upstream in one harness session (gate, determinism,
# benchmark, sweep), then the X-ray raw traces of both at position 128 (analyzed off the GPU).
# M4_ENGINES / M4_XRAY / M4_OUT pick the engines, traces and result file (a new session's run
# writes its own file: results/m4_stream_bf16.json is the first M4 session's record).
# M4_TIMELINES=DIR: the harness also writes each engine's 256-token timeline there (the page's race
# reads results/timelines/<engine>.json; until the twenty-sixth session only M1's engines had one).
if want m4; then
  m4_tl=(); [ -z "${M4_TIMELINES:-}" ] || m4_tl=(--timelines "$M4_TIMELINES")
  run m4 python3 -m monolith m4 --steps "${M4_STEPS:-bench,xray}" \
    --engines "${M4_ENGINES:-megakernel-bf16-upstream,megakernel-bf16-stream}" \
    --out "${M4_OUT:-results/m4_stream_bf16.json}" --xray-variants "${M4_XRAY:-bf16-stream,bf16-upstream}" \
    ${m4_tl[@]+"${m4_tl[@]}"}
fi
# M3 (issue 12): fp8-upstream's GPU tests (phase diff against fp32 on the dequantized weights,
# determinism, launch shape, refusals, every E4M3 code through the kernel), dev timings beside
# bf16-upstream, one harness session (each engine gated against the oracle of its own weights)
# into results/m3_fp8.json, then the X-ray of fp8-upstream at position 128 (results/xray): `monolith m3`,
# whose steps are tests, pack, devbench, bench, quality, xray. M3_STEPS picks a subset so that each
# device call stays under its 10 minutes.
if want m3; then
  run m3 env MONOLITH_TEST_VARIANTS="${M3_TEST_VARIANTS:-fp8-upstream}" python3 -m monolith m3 \
    --steps "${M3_STEPS:-tests,devbench,bench,xray}" \
    --engines "${M3_ENGINES:-megakernel-bf16-upstream,megakernel-fp8-upstream}" --out "${M3_OUT:-results/m3_fp8.json}"
fi
# M3 quality (issue 12, item 5; NOTES.md, Facts: protocols, in full): two pairs, each fp8 schedule on
# the packed fp8 weights beside its bf16 schedule (the floor) on the original weights: fp8-upstream
# with bf16-upstream, fp8-stream with bf16-stream; all four against fp32 on the bf16 weights (the
# reference runs once for every engine): WikiText-2 perplexity (context = stride = 512, 10,000
# scored positions = the KL positions), 64-token greedy agreement on 100 prompts. Needs the
# WikiText-2 text (carry .data). Estimate: ~20,500 fp32-reference steps (~6-7.5 ms each) + ~30,800
# steps per megakernel + pack/setup: ~4-5 min for the upstream pair, ~1 min more for the two stream
# engines: ~5-6 min (+ the extension builds on a fresh machine).
if want m3quality; then
  run m3-quality python3 -m monolith m3 --steps quality
fi
# M5 quality (issue 14; the M3 protocol above, in full): nvfp4-stream on the packed nvfp4 weights
# (all-NVFP4 layers, FP8 LM head, block-scale search on) beside bf16-stream (the floor, same schedule)
# on the original weights, both against fp32 on the bf16 weights, one reference pass. Needs the
# WikiText-2 text (carry .data). Estimate: the pack ~30-45 s (CPU, the search), then M3's 218 s
# less two megakernel engines: ~20,500 reference steps (~6-7.5 ms each) + ~30,800 steps per
# megakernel: ~3-3.5 min; ~4 min in all (+ the two extension builds on a fresh machine).
if want m5quality; then
  run m5-quality python3 -m monolith m5 --steps quality
fi
# One grid hop alone (probes/hop_latency.cu, issue 11): where the stream schedule's ~1.4 us between the
# last producer's store and the first ready block goes (load, producers' spread, polling strategy). Seconds.
# A standalone probe (probes/NAME.cu): built for sm_90a, its JSON into results/, its table into the log
probe_run() {  # probe_run STAGE PROBE RESULTS_JSON
  run "$1" bash -c "nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I kernel -I probes \
    -o /tmp/$2 probes/$2.cu && /tmp/$2 --json > $3; /tmp/$2"
}
want hop && probe_run hop-probe hop_latency results/m4_hop_latency.json
# MLP-1 -> down folded into one hop, pre-reduced inside thread-block clusters over DSMEM
# (probes/cluster_fold.cu, twelfth session): direct split-K atomics against cluster sizes 2-16. Seconds.
want fold && probe_run fold-probe cluster_fold results/m4_cluster_fold.json
# One attention split alone (probes/attn_split.cu, issue 11, fifth session): the kernel's shape against
# flash-decoding inside the block, both checked against a CPU reference; seconds.
want attn && probe_run attn-probe attn_split results/m4_attn_split.json
# X-rays at a long position (ninth session: where the 2,048/16 sweep's extra ~6 us per layer goes;
# XRAY_LONG_POS, default 2040; XRAY_LONG_VARIANTS, default bf16-stream) into results/xray-long
if want xraylong; then
  run xray-long python3 scripts/xray_raw.py --variant "${XRAY_LONG_VARIANTS:-bf16-stream}" \
    --position "${XRAY_LONG_POS:-2040}" --out results/xray-long
fi
# One bf16 GEMV round of the consumers alone, loader idle / streaming / spinning
# (probes/round_gemv.cu, ninth session: the X-ray's x_dot against the round's own cost); seconds.
want round && probe_run round-probe round_gemv results/m4_round_gemv.json
# The activation store between the gather and its barrier, alone (probes/act_store.cu, eighteenth
# session: fp32 / store_xe / store_xh2 / a warp-local f16 store without redux); seconds.
want actstore && probe_run act-store act_store results/m4_act_store.json
# Two halves of the L2 (probes/l2_partition.cu, nineteenth session): each SM's L2-hit latency per line,
# and SM-to-SM round trips by the SMs' sides and the lines' home side; seconds.
want l2part && probe_run l2-partition l2_partition results/m4_l2_partition.json
# Does issuing mma.sync lower the SM clock (probes/tc_clock.cu, ninth session)? seconds.
want tcclock && probe_run tc-clock tc_clock results/m4_tc_clock.json
# mbarrier / store / load cost per operation with 0-12 bulk copies landing in the SM (probes/mbar_cost.cu,
# sixth session: what the sub-interval X-ray's ~0.15 us per slot test is); seconds.
want mbar && probe_run mbar-probe mbar_cost results/m4_mbar_cost.json
# Nsight Compute on one decode step (issue 11, seventh session): warp-state samples per SASS instruction
# (where thread 0's slot tests and every hop's polls stall, which the X-ray's clock stamps cannot say).
# One launch at position NCU_SKIP (prefill 2 + decode), NCU_VARIANT at 128 blocks. --clock-control none:
# the GPU's clocks stay as they are (ncu locks them to base by default). The report and its CSV pages go
# to $OUT/ncu (not committed: binary, MBs); scripts/ncu_stalls.py summarises the SASS page here.
# Twenty-fourth session (its call 5 compared the long and the wide kernel this way, by hand):
#   NCU_PROMPT_LEN=N  the launch at position N + 2 after an N-token prompt (the long / wide kernels)
#   NCU_SETS          ';'-separated define sets as AB_DEFINES ("base": the plain build), each profiled
#                     into $OUT/ncu/VARIANT-I.* (sets.txt names them); unset: the environment's build
#   NCU_SECTIONS      sections instead of --set full, e.g. "WarpStateStats SourceCounters SpeedOfLight"
#                     (20 replay passes: ~1 min a launch at 1,100 instead of ~2)
# Each build is made before ncu starts (the compile is not run under the profiler).
if want ncu; then
  mkdir -p "$OUT/ncu"
  ncu_what=(--set full)
  if [ -n "${NCU_SECTIONS:-}" ]; then ncu_what=(); for sec in $NCU_SECTIONS; do ncu_what+=(--section "$sec"); done; fi
  ncu_skip=${NCU_SKIP:-129} ncu_dev=(--tokens 130)
  if [ -n "${NCU_PROMPT_LEN:-}" ]; then ncu_skip=$((NCU_PROMPT_LEN + 2)) ncu_dev=(--prompt-len "$NCU_PROMPT_LEN" --tokens 4); fi
  ncu_sets=(env); [ -z "${NCU_SETS:-}" ] || IFS=';' read -ra ncu_sets <<< "$NCU_SETS"
  i=0
  for d in "${ncu_sets[@]}"; do
    if [ -z "${NCU_SETS:-}" ]; then  # the environment's build, as before NCU_SETS
      sfx="" defs=(env)
    else
      sfx="-$i"; defines_env "$d"; echo "ncu$sfx: $d" >> "$OUT/ncu/sets.txt"
    fi
    for v in ${NCU_VARIANT:-bf16-stream}; do
      n="$v$sfx"
      run "ncu-build-$n" "${defs[@]}" python3 -c "from monolith.megakernel import load_extension; load_extension('$v')"
      run "ncu-$n" "${defs[@]}" ncu --clock-control none "${ncu_what[@]}" --import-source yes -k regex:decode_step \
        --launch-skip "$ncu_skip" --launch-count 1 -f -o "$OUT/ncu/$n" \
        python3 scripts/dev_bench.py --variant "$v" --blocks 128 --runs 1 "${ncu_dev[@]}"
      ncu -i "$OUT/ncu/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$n.sass.csv" 2> "$OUT/ncu/$n.err" ||
        ncu -i "$OUT/ncu/$n.ncu-rep" --page source --csv > "$OUT/ncu/$n.sass.csv" 2>> "$OUT/ncu/$n.err"
      ncu -i "$OUT/ncu/$n.ncu-rep" --page details --csv > "$OUT/ncu/$n.details.csv" 2>> "$OUT/ncu/$n.err"
      gzip -f "$OUT/ncu/$n.sass.csv"; head -c 600 "$OUT/ncu/$n.err"; ls -la "$OUT/ncu"
    done
    i=$((i + 1))
  done
fi
# NVFP4 sensitivity (issue 14 item 2; notes/m5_sensitivity.md): 7 per-kind units + 4 endpoints + the
# reference, reference-fp32 in a CUDA graph, the reference's logits cached so it runs once. Needs the
# WikiText-2 text (carry .data). Estimate ~4-5 min. Writes results/m5_nvfp4_sensitivity.{json,png}
# (rewritten after every unit, so a cut call keeps what it measured).
want m5sens && run m5-sensitivity python3 -m monolith m5 --steps sensitivity
want m1 && run m1 python3 -m monolith m1
# Quality, full protocol, bf16 pairs: HF transformers (its parallel forward) and the megakernel,
# each against the bf16 reference. (The fp32 sanity pair runs inside `monolith m1`.)
if want quality; then
  run quality-hf-bf16 python3 -m monolith eval quality --engine hf-parallel --ref reference-graph --no-free-running \
    --out results/m1_quality_hf_vs_reference_bf16.json
  run quality-megakernel python3 -m monolith eval quality --engine megakernel-bf16-upstream --ref reference-graph \
    --out results/m1_quality_megakernel.json
fi
# llama.cpp: prebuilt llama-bench + converter carried in .llamacpp (LLAMA_CPP_PACK), or built from an sdist
if want llamacpp; then
  NV=$(python3 -c "import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib'))" 2>/dev/null)
  export LD_LIBRARY_PATH="${NV:+$NV:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # the pack travels compressed (carry limit); PACK mode of llamacpp.sh made it
  [ -f .llamacpp/pack.tar.xz ] && [ ! -x .llamacpp/bin/llama-bench ] && tar xJf .llamacpp/pack.tar.xz -C .llamacpp
  if [ -x .llamacpp/bin/llama-bench ]; then
    ldd .llamacpp/bin/llama-bench | grep -E "cublas|cudart|not found"
    run llamacpp env LLAMA_BENCH=.llamacpp/bin/llama-bench WORK=/tmp/llamacpp \
      bash bench/baselines/llamacpp.sh .llamacpp checkpoints/synth-seed0 results/llamacpp.json
  else
    run llamacpp env WORK=/tmp/llamacpp bash bench/baselines/llamacpp.sh "${LLAMA_CPP_SDIST:-}" \
      checkpoints/synth-seed0 results/llamacpp.json
  fi
  tail -n 30 /tmp/llamacpp/llamacpp.log 2>/dev/null
fi
# M1 rows the first session's cap cut (HF static/eager/compile) + the quality sanity, merged into m1_baselines
# shellcheck disable=SC2086  # M1_EXTRA is a list of flags
want m1rest && run m1-rest python3 -m monolith m1 --engines "${M1_ENGINES:-hf-static,hf-compile,hf-eager}" --merge \
  --max-total "${M1_MAX_TOTAL:-360}" ${M1_EXTRA:-}
# llama.cpp rows (from the llamacpp stage's JSON) merged into m1_baselines
want m1llama && run m1-llamacpp python3 -m monolith m1 --engines llamacpp --merge --no-quality
want xray && run xray python3 -m monolith m2
# M2 overhead check through the harness: plain and X-ray builds gated and timed in one session
want overhead && run overhead python3 -m monolith bench --engine megakernel-bf16-upstream,megakernel-bf16-upstream-xray \
  --out results/m2_xray_overhead_harness.json
# The X-ray's overhead (issue 49): plain vs X-ray tok/s of every shipped variant at 16/128/1024/2048
# and the A/B of kernel/xray.cuh's record layouts, one trace each (XO_ARGS: more arguments)
# shellcheck disable=SC2086  # XO_ARGS is a list of flags
only xrayoverhead && run xray-overhead python3 scripts/xray_overhead.py --out "$OUT/xray_overhead" ${XO_ARGS:-}
# The milestone commands, explicit only. M5: NVFP4 end to end (M5_STEPS picks steps).
only m5 && run m5 python3 -m monolith m5 --steps "${M5_STEPS:-sensitivity,pack,tests,bench,quality,xray}"
# M6: the final matrix's rows for M6_ENGINES (default all; M6_QUICK=1: the trial) into M6_ROWS (default
# /tmp/m6rows: a later call on the same warm machine adds its rows there), llama.cpp from M6_LLAMACPP (a
# llama-bench pack dir or an sdist), M6_QUALITY (file|measure|none). The rows come back as
# $OUT/m6rows.tgz (a call returns at most 8 files); m6merge writes $OUT/final.json (+ .md) from them
# (merge here with `monolith m6 --merge DIR` to publish results/final.json).
if only m6; then
  m6_args=(--rows-dir "${M6_ROWS:-/tmp/m6rows}")
  [ -n "${M6_ENGINES:-}" ] && m6_args+=(--engines "$M6_ENGINES")
  [ "${M6_QUICK:-0}" = 1 ] && m6_args+=(--quick)
  [ -n "${M6_LLAMACPP:-}" ] && m6_args+=(--llamacpp "$M6_LLAMACPP")
  [ -n "${M6_QUALITY:-}" ] && m6_args+=(--quality "$M6_QUALITY")
  run m6 python3 -m monolith m6 "${m6_args[@]}"
fi
only m6merge && run m6-merge python3 -m monolith m6 --merge "${M6_ROWS:-/tmp/m6rows}" --out "$OUT/final.json"
if only m6 || only m6merge; then
  m6_rows=${M6_ROWS:-/tmp/m6rows}
  [ -d "$m6_rows" ] && tar czf "$OUT/m6rows.tgz" -C "$(dirname "$m6_rows")" "$(basename "$m6_rows")"
fi
only m7 && run m7 python3 -m monolith m7
only m8 && run m8 python3 -m monolith m8
pack
echo; echo "==== summary"; printf '%s\n' "${summary[@]}"; grep -h "^\[dev\]" "$OUT/log.txt" || true
