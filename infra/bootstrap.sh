#!/usr/bin/env bash
# Prepare a fresh RunPod pod for monolith: clone (or update) the repo, check the GPU driver,
# check or install the pinned CUDA toolkit, pip install the project, start the stop-watchdog.
# Safe to run again (after a pod restart, or by mistake): every step checks before it acts.
#
#   bash infra/bootstrap.sh [--stub-install] [REPO_URL [BRANCH]]
#
# Env (all optional): MONOLITH_REPO_URL, MONOLITH_BRANCH (main), MONOLITH_DIR
# (/workspace/monolith), MONOLITH_STATE_DIR (/workspace/.monolith: pid file, logs, env.sh),
# CUDA_VERSION (13.0), MIN_DRIVER (580), TORCH_INDEX_URL, PYTHON (python3), MAX_POD_HOURS (6),
# BOOTSTRAP_STUB_INSTALL=1 (same as --stub-install: print the install steps instead of running
# them; the tests use it), BOOTSTRAP_NO_WATCHDOG=1 (not on RunPod: skip the watchdog).
set -euo pipefail

STUB="${BOOTSTRAP_STUB_INSTALL:-0}"
args=()
for a in "$@"; do
  case "$a" in
    --stub-install) STUB=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) args+=("$a") ;;
  esac
done
REPO_URL="${args[0]:-${MONOLITH_REPO_URL:-}}"
BRANCH="${args[1]:-${MONOLITH_BRANCH:-main}}"
DIR="${MONOLITH_DIR:-/workspace/monolith}"
STATE="${MONOLITH_STATE_DIR:-/workspace/.monolith}"
CUDA_VERSION="${CUDA_VERSION:-13.0}"
MIN_DRIVER="${MIN_DRIVER:-580}"
PYTHON="${PYTHON:-python3}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu${CUDA_VERSION//./}}"

log() { printf '[bootstrap] %s\n' "$*"; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

mkdir -p "$STATE"
# One bootstrap at a time: a second concurrent run would race on clone and pip.
exec 9>"$STATE/bootstrap.lock"
flock -n 9 || die "another bootstrap is running (lock $STATE/bootstrap.lock)"

clone_or_update() {
  if [[ -d "$DIR/.git" ]]; then
    if [[ -n "$(git -C "$DIR" status --porcelain --untracked-files=no)" ]]; then
      log "$DIR has local changes: leaving the checkout as it is"
      return
    fi
    local src="${REPO_URL:-origin}"
    log "updating $DIR from $src ($BRANCH)"
    git -C "$DIR" fetch -q "$src" "$BRANCH"
    git -C "$DIR" checkout -q "$BRANCH" 2>/dev/null || git -C "$DIR" checkout -q -b "$BRANCH" FETCH_HEAD
    git -C "$DIR" merge -q --ff-only FETCH_HEAD
  else
    [[ -n "$REPO_URL" ]] || die "no repository: pass REPO_URL (a git URL or a git bundle) or set MONOLITH_REPO_URL"
    log "cloning $REPO_URL ($BRANCH) into $DIR"
    git clone -q --branch "$BRANCH" "$REPO_URL" "$DIR"
  fi
}

check_driver() {
  if ! command -v nvidia-smi >/dev/null; then
    [[ "$STUB" == 1 ]] && { log "stub: no nvidia-smi, driver check skipped"; return; }
    die "nvidia-smi not found: this is not a GPU pod"
  fi
  local v
  v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
  [[ "$v" =~ ^[0-9]+ ]] || die "cannot read the driver version from nvidia-smi ('$v')"
  (( ${v%%.*} >= MIN_DRIVER )) || die "driver $v is older than R$MIN_DRIVER, which CUDA $CUDA_VERSION needs: terminate this pod and create another (monolith pod create filters hosts by CUDA version)"
  log "driver $v ok (>= R$MIN_DRIVER)"
}

nvcc_release() {  # prints e.g. 13.0 for the first nvcc found, nothing if none
  local n
  for n in "$(command -v nvcc || true)" "/usr/local/cuda-$CUDA_VERSION/bin/nvcc"; do
    if [[ -n "$n" && -x "$n" ]]; then
      "$n" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p' | head -n1
      return
    fi
  done
}

install_cuda_toolkit() {  # NVIDIA's apt repository for the image's Ubuntu release
  if [[ "$STUB" == 1 ]]; then log "stub: would install cuda-toolkit-${CUDA_VERSION//./-}"; return; fi
  local distro arch keyring=/tmp/cuda-keyring.deb
  # shellcheck disable=SC1091  # os-release exists on every Ubuntu image
  distro="ubuntu$(. /etc/os-release && echo "${VERSION_ID//./}")"
  arch="$(uname -m)"; [[ "$arch" == aarch64 ]] && arch=sbsa
  wget -q -O "$keyring" "https://developer.download.nvidia.com/compute/cuda/repos/$distro/$arch/cuda-keyring_1.1-1_all.deb"
  dpkg -i "$keyring"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "cuda-toolkit-${CUDA_VERSION//./-}"
}

ensure_cuda() {
  local have
  have="$(nvcc_release)"
  if [[ "$have" == "$CUDA_VERSION" ]]; then
    log "nvcc $have found"
  else
    log "nvcc ${have:-absent}, need $CUDA_VERSION: installing"
    install_cuda_toolkit
  fi
  # Later shells get the same toolkit: source this file (the README says so).
  # shellcheck disable=SC2016  # $CUDA_HOME/$PATH must expand when env.sh is sourced, not now
  printf 'export CUDA_HOME=/usr/local/cuda-%s\nexport PATH="$CUDA_HOME/bin:$PATH"\n' "$CUDA_VERSION" > "$STATE/env.sh"
  export CUDA_HOME="/usr/local/cuda-$CUDA_VERSION" PATH="/usr/local/cuda-$CUDA_VERSION/bin:$PATH"
}

install_project() {
  if [[ "$STUB" == 1 ]]; then log "stub: would pip install -e $DIR"; return; fi
  (cd "$DIR" && "$PYTHON" -m pip install -q --extra-index-url "$TORCH_INDEX_URL" -e .)
}

start_watchdog() {
  local pidf="$STATE/watchdog.pid" pid
  if [[ -f "$pidf" ]]; then
    pid="$(cat "$pidf")"
    # A stale pid file after a pod restart may name some other process: check its command line.
    if kill -0 "$pid" 2>/dev/null && grep -q watchdog.sh "/proc/$pid/cmdline" 2>/dev/null; then
      log "watchdog already running (pid $pid)"
      return
    fi
  fi
  if [[ "${BOOTSTRAP_NO_WATCHDOG:-0}" == 1 ]]; then log "watchdog skipped (BOOTSTRAP_NO_WATCHDOG=1)"; return; fi
  [[ -n "${RUNPOD_POD_ID:-}" ]] || die "RUNPOD_POD_ID is not set: not a RunPod pod? (BOOTSTRAP_NO_WATCHDOG=1 skips the watchdog)"
  # setsid: own session, so closing the SSH login does not kill it; nohup for SIGHUP anyway;
  # 9>&- so the watchdog does not inherit (and hold for hours) the bootstrap lock.
  setsid nohup bash "$DIR/infra/watchdog.sh" >>"$STATE/watchdog.log" 2>&1 </dev/null 9>&- &
  echo $! >"$pidf"
  log "watchdog started (pid $!, stops the pod after ${MAX_POD_HOURS:-6} h; log $STATE/watchdog.log)"
}

clone_or_update
check_driver
ensure_cuda
install_project
start_watchdog
log "done: cd $DIR && source $STATE/env.sh"
