#!/usr/bin/env bash
# Cost of the API side of the desired state at production scale. A fake API server
# (crates/portdrift-test-support/src/fake_apiserver.rs, in its own process) serves
# 10,000 NodePort Services and 10,000 EndpointSlices with 5 endpoints each (50,000
# endpoints), with the baggage real objects carry (managedFields,
# last-applied-configuration, targetRefs). Measured in a separate process
# (examples/watch_sync.rs, with the binary's allocator) under /usr/bin/time -v:
#   - watch:  reflectors until synced (streaming lists), then one desired-state build
#             (the daemon's start);
#   - lists:  the same where the API server has no streaming lists: whole lists with
#             resourceVersion=0 from its cache (decoded object by object as they arrive),
#             then watches;
#   - once:   load_once, the one-shot paged list of `portdrift scan`;
#   - relist: the watch, then one full relist after a 410 Gone (the reflectors hold the
#             old and the new list at once until the new one is complete);
#   - kept:   the watch, then 5 s for jemalloc to return what the sync freed (it does
#             so at once with .cargo/config.toml's decay, and its background thread runs
#             as in the daemon): the resident set the synced view keeps over the one
#             before the watches started, per Service (once; docs/performance.md, Sizing).
# Targets for watch and once: under 3 s and 96 MiB peak RSS; lists within 1.2x of
# watch. Measured on the 2-core development VM (server and client on one machine),
# shared with other builds (load average 2-6), 2026-12-06, 10,000 Services and 50,000
# endpoints, 3 runs: watch 0.38-0.57 s wall at 44.0-44.9 MiB; lists 0.34-0.38 s at
# 43.9-44.7 MiB; once 0.58-0.62 s at 71.4-71.5 MiB; kept 20.7-20.9 MiB (2,171-2,195
# bytes per Service) at a 44.2 MiB peak; relist 9.6-11.6 s at 44.2-44.3 MiB. Before lists from the
# cache were decoded as they arrive (kube-rs's Api::list held the body and every full
# object first), lists took 0.67 s at 220.3 MiB (one run, the same day). Before
# streaming lists, on the machine unshared (consistent lists in pages of 250): watch
# 0.4-0.5 s at 85 MiB, once 0.3 s at 77 MiB, relist 90-92 MiB.
#
#   scripts/bench-watch.sh [SERVICES] [ENDPOINTS_PER_SERVICE] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh
services=${1:-10000}
endpoints=${2:-5}
runs=${3:-3}
bench_scratch

cargo build --release --quiet --example fake_apiserver --example watch_sync

# Starts a fake API server serving the cluster into DIR; extra flags follow. It serves
# until killed (its stdin, a FIFO that is never written, stays open).
serve() {
  local dir=$1
  shift
  mkdir -p "$dir"
  mkfifo "$dir/stdin"
  bench_start_apiserver "$dir/stdin" /dev/null --services "$services" --endpoints "$endpoints" --dir "$dir" "$@"
  sleep 1000000 >"$dir/stdin" &
  pids+=($!)
  bench_await_apiserver "$dir" 600
}

# Runs watch_sync against DIR's server RUNS times: its figures, wall time, peak RSS.
measure() {
  local name=$1 dir=$2
  shift 2
  for _ in $(seq "$runs"); do
    if ! /usr/bin/time -v target/release/examples/watch_sync --kubeconfig "$dir/kubeconfig" "$@" \
      2>"$work/time.txt"; then
      cat "$work/time.txt" >&2
      exit 1
    fi
    awk -F': ' -v name="$name" '
      /Elapsed \(wall clock\)/ {wall = $2}
      /Maximum resident set size/ {rss = $2 / 1024}
      END {printf "  %s: wall %s, peak RSS %.1f MiB\n", name, wall, rss}' "$work/time.txt"
  done
}

echo "$services Services, $((services * endpoints)) endpoints"
serve "$work/steady"
measure watch "$work/steady"
measure lists "$work/steady" --no-streaming-lists
measure once "$work/steady" --once
saved_runs=$runs
runs=1
measure kept "$work/steady" --settle 5
runs=$saved_runs
# A 410 every 3 s, or every second per 1,000 Services: a relist that takes longer than
# the period would be cut short by the next one, and never complete.
serve "$work/gone" --gone-every $((services / 1000 > 3 ? services / 1000 : 3))
measure relist "$work/gone" --relist
# The project's goals (docs/performance.md): what the synced view keeps at most 1,000
# bytes a Service with 5 endpoints (tests/memory_budget.rs counts it exactly); the sync
# where streaming lists are refused at most 1.2x the streaming sync's peak.
echo "goals: kept <= 1,000 bytes per Service with 5 endpoints (allocator count); lists peak <= 1.2x watch peak"
