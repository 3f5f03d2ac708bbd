#!/usr/bin/env bash
# What a device call would copy: tracked files + untracked files git does not ignore + the carried
# paths given as arguments. The device tool refuses a copy above 64 MiB (results/logs/README.md).
#   scripts/tree_size.sh [.data .whl ...]
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
carry=0
for p in "$@"; do carry=$((carry + $(du -sb "$p" | cut -f1))); done
cap=$((64 * 1024 * 1024))
awk -v t="$tree" -v c="$carry" -v m="$cap" 'BEGIN { printf "tree %.1f MB + carry %.1f MB = %.1f MB of the %.1f MB cap\n", t / 1e6, c / 1e6, (t + c) / 1e6, m / 1e6 }'
[ $((tree + carry)) -le $cap ] || { echo "over the cap: the device tool will refuse this call" >&2; exit 1; }
