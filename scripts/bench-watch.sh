#!/usr/bin/env bash
# Cost of the API side of the desired state at production scale: a fake API server
# (tests/support/fake_apiserver.rs, in its own process) serves 10,000 NodePort Services
# and 10,000 EndpointSlices with 5 endpoints each (50,000 endpoints), with the baggage
# real objects carry (managedFields, last-applied-configuration, targetRefs). Measured,
# in a separate process under /usr/bin/time -v:
#   - watch: reflectors until synced, then one desired-state build (the daemon's start);
#   - once:  load_once, the one-shot paged list of `portdrift scan`.
# Targets: under 3 s and 96 MiB peak RSS.
#
#   scripts/bench-watch.sh [SERVICES] [ENDPOINTS_PER_SERVICE] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}
endpoints=${2:-5}
runs=${3:-3}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --quiet --example fake_apiserver --example watch_sync
# The server runs until its stdin closes; a never-written FIFO keeps it open.
mkfifo "$work/stdin"
target/release/examples/fake_apiserver --services "$services" --endpoints "$endpoints" --dir "$work" \
  <"$work/stdin" &
server_pid=$!
exec 3>"$work/stdin"
for _ in $(seq 600); do
  [ -f "$work/kubeconfig" ] && break
  sleep 0.1
done
[ -f "$work/kubeconfig" ] || { echo "the fake API server did not start" >&2; exit 1; }

for mode in watch once; do
  flag=()
  [ "$mode" = once ] && flag=(--once)
  for _ in $(seq "$runs"); do
    if ! /usr/bin/time -v target/release/examples/watch_sync --kubeconfig "$work/kubeconfig" "${flag[@]}" \
      2>"$work/time.txt"; then
      cat "$work/time.txt" >&2
      exit 1
    fi
    awk -F': ' '/Maximum resident set size/ {printf "  %s: peak RSS %.1f MiB\n", "'"$mode"'", $2 / 1024}
                /Elapsed \(wall clock\)/ {print "  '"$mode"': wall " $2}' "$work/time.txt"
  done
done
exec 3>&-
