#!/usr/bin/env bash
# `make deps`: the system tools that `make test` needs beyond Python packages.
#   installed with apt-get when missing (Debian/Ubuntu package names):
#     chromium     the page's browser tests (playwright-core drives it; CHROMIUM=path overrides)
#     nginx        the deploy config's test on loopback (NGINX=path overrides)
#     webkit2gtk-driver  WebKitWebDriver + MiniBrowser: the page's smoke test in WebKit (Selenium drives it)
#     xvfb         a virtual display for MiniBrowser (xvfb-run) where there is none
#     the shellcheck linter, for the shell scripts (a test fails without it)
#     patch        scripts/gpu.sh abpatch applies a diff to a copy of the tree (its test runs it)
#     python3-venv `make install`'s virtual environment (only when the interpreter lacks ensurepip)
#   checked, never installed (a clear line says what to do):
#     node >= 20.19 and npm (vite 8), nvcc (CUDA 13.0; NVCC=path overrides)
# Installs as root, or through `sudo -n` when that works without a password; otherwise prints
# the one command to run and exits 1. Exits 0 when everything is present (installs nothing).
set -uo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
NGINX=${NGINX:-/usr/sbin/nginx}
WEBKIT_DRIVER=${WEBKIT_DRIVER:-/usr/bin/WebKitWebDriver}
NVCC=${NVCC:-nvcc}
PYTHON=${PYTHON:-python3}

apt_missing() {  # the apt packages whose tool is absent
  local out=()
  [ -x "$CHROMIUM" ] || out+=(chromium)
  [ -x "$NGINX" ] || out+=(nginx)
  [ -x "$WEBKIT_DRIVER" ] || out+=(webkit2gtk-driver)
  command -v xvfb-run >/dev/null 2>&1 || out+=(xvfb)
  command -v shellcheck >/dev/null 2>&1 || out+=(shellcheck)
  command -v patch >/dev/null 2>&1 || out+=(patch)
  "$PYTHON" -c "import ensurepip" >/dev/null 2>&1 || out+=(python3-venv)
  echo "${out[@]}"
}

read -r -a missing <<<"$(apt_missing)"
if [ ${#missing[@]} -gt 0 ]; then
  as=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then as=(sudo -n); else as=(none); fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps: missing ${missing[*]} and there is no apt-get here: install them with this system's package manager" >&2
    exit 1
  fi
  if [ "${as[*]}" = none ]; then
    echo "deps: missing ${missing[*]}; not root and sudo needs a password. Run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]} with apt-get (a few minutes the first time)"
  export DEBIAN_FRONTEND=noninteractive
  "${as[@]}" apt-get update -q || { echo "deps: apt-get update failed" >&2; exit 1; }
  "${as[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || { echo "deps: apt-get install ${missing[*]} failed" >&2; exit 1; }
  read -r -a still <<<"$(apt_missing)"
  if [ ${#still[@]} -gt 0 ]; then
    echo "deps: still missing after apt-get: ${still[*]} (expected $CHROMIUM, $NGINX, $WEBKIT_DRIVER, xvfb-run, shellcheck on PATH)" >&2
    exit 1
  fi
fi

bad=0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "deps: node and npm are needed for the page (node >= 20.19): https://nodejs.org or your distribution's nodesource packages" >&2
  bad=1
elif ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "deps: node $(node --version) is too old for vite 8: need >= 20.19" >&2
  bad=1
fi
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "deps: $NVCC not found: the kernel compile test needs the CUDA 13.0 toolkit (no GPU needed); set NVCC=/path/to/nvcc" >&2
  bad=1
fi
[ "$bad" = 0 ] && echo "deps: chromium, nginx, WebKitWebDriver, xvfb-run, shellcheck, node $(node --version), npm, $NVCC present"
exit "$bad"
