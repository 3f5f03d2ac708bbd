#!/usr/bin/env bash
# Stops this RunPod pod after MAX_POD_HOURS (default 6, fractions allowed) so that a forgotten
# pod cannot bill for days. Runs on the pod, where RunPod sets RUNPOD_POD_ID and installs
# runpodctl with a pod-scoped key. bootstrap.sh starts it in the background.
set -euo pipefail

log() { printf '%s watchdog: %s\n' "$(date -u +%FT%TZ)" "$*"; }

if [[ -z "${RUNPOD_POD_ID:-}" ]]; then
  log "RUNPOD_POD_ID is not set: refusing to start (nothing to stop)" >&2
  exit 2
fi
hours="${MAX_POD_HOURS:-6}"
if ! [[ "$hours" =~ ^([0-9]+([.][0-9]*)?|[.][0-9]+)$ ]]; then
  log "MAX_POD_HOURS='$hours' is not a non-negative number" >&2
  exit 2
fi
command -v runpodctl >/dev/null || { log "runpodctl not found on PATH" >&2; exit 2; }

secs=$(awk -v h="$hours" 'BEGIN { printf "%.3f", h * 3600 }')
log "pod $RUNPOD_POD_ID will be stopped in ${secs}s (MAX_POD_HOURS=$hours)"

# sleep in the background and wait, so a TERM to this script also ends the sleep.
sleep "$secs" &
sleeper=$!
trap 'kill "$sleeper" 2>/dev/null; log "cancelled"; exit 0' TERM INT
wait "$sleeper"
trap - TERM INT

# A stop can fail transiently (API hiccup): retry, since the whole point is not to keep billing.
for attempt in 1 2 3 4 5; do
  if runpodctl stop pod "$RUNPOD_POD_ID"; then
    log "stop requested for $RUNPOD_POD_ID"
    exit 0
  fi
  log "stop attempt $attempt failed; retrying"
  sleep "${WATCHDOG_RETRY_S:-30}"
done
log "could not stop $RUNPOD_POD_ID: stop it by hand (monolith pod stop $RUNPOD_POD_ID)" >&2
exit 1
