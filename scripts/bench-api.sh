#!/usr/bin/env bash
# What agents cost the API server: N agents' watches start at once against the fake API
# server (crates/portdrift-test-support/src/fake_apiserver.rs, in its own process)
# holding SERVICES NodePort Services with ENDPOINTS endpoints each (one EndpointSlice
# per Service) and N Nodes; once every agent is synced, the server ends every watch
# with 410 Gone and every agent relists. The agents are N of portdrift's API views (examples/watch_sync.rs --agents:
# each its own client and stores, as a separate agent would have) in one process.
#
# It prints, for the start-up and for the relist, the requests by kind and parameters
# (resourceVersion shown as none, 0 or <n>; selectors left out) with their count and
# response body bytes, in total, per agent and per 1,000 nodes (one agent per node);
# then the wall times. Bookmarks come once a minute, as from the API server's watch
# cache, so they hardly count here.
#
#   scripts/bench-api.sh                     # N=100 SERVICES=10000 ENDPOINTS=5
#   N=10 SERVICES=1000 scripts/bench-api.sh
#   STREAMING=0 scripts/bench-api.sh         # a server that refuses streaming lists (before 1.32)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh
agents=${N:-100}
services=${SERVICES:-10000}
endpoints=${ENDPOINTS:-5}
no_streaming=()
[ "${STREAMING:-1}" = 0 ] && no_streaming=(--no-streaming-lists)
bench_scratch

cargo build --release --quiet --example fake_apiserver --example watch_sync

# The server reads control lines on its stdin (a FIFO held open on fd 3); when fd 3 is
# closed it writes the traffic report and exits.
mkfifo "$work/control"
bench_start_apiserver "$work/control" "$work/server.log" --services "$services" --endpoints "$endpoints" \
  --nodes "$agents" --dir "$work" --bookmark-every 60 --traffic-report "$work/traffic.tsv" \
  "${no_streaming[@]}"
server=$apiserver_pid
exec 3>"$work/control"
bench_await_apiserver "$work" 1200 "$work/server.log"

/usr/bin/time -v target/release/examples/watch_sync --kubeconfig "$work/kubeconfig" \
  --agents "$agents" --relist --synced-file "$work/synced" >"$work/agents.json" 2>"$work/time.txt" &
client=$!
pids+=("$client")
until [ -f "$work/synced" ]; do
  if ! kill -0 "$client" 2>/dev/null; then
    cat "$work/time.txt" >&2
    echo "the agents stopped before they were synced" >&2
    exit 1
  fi
  sleep 0.05
done
printf 'phase relist\ngone\n' >&3
if ! wait "$client"; then
  cat "$work/time.txt" >&2
  exit 1
fi
exec 3>&-
wait "$server"

echo "$agents agents, $services Services, $((services * endpoints)) endpoints"
echo
awk -F'\t' -v agents="$agents" '
  function mib(b) { return sprintf("%.1f MiB", b / 1048576) }
  function kib(b) { return sprintf("%.1f KiB", b / 1024) }
  function gib(b) { return sprintf("%.2f GiB", b / 1073741824) }
  { n[$1]++; sig[$1, n[$1]] = $2; req[$1, n[$1]] = $3; bytes[$1, n[$1]] = $4
    treq[$1] += $3; tbytes[$1] += $4 }
  END {
    split("startup relist", phases, " ")
    for (p = 1; p <= 2; p++) {
      ph = phases[p]
      printf "%s\n", (ph == "startup" ? "start-up (until every agent is synced)" : "relist (after the 410, until every agent is fresh again)")
      printf "  %-72s %9s %9s %12s %12s\n", "request", "requests", "/agent", "bytes", "/agent"
      for (i = 1; i <= n[ph]; i++)
        printf "  %-72s %9d %9.2f %12s %12s\n", sig[ph, i], req[ph, i], req[ph, i] / agents, mib(bytes[ph, i]), kib(bytes[ph, i] / agents)
      printf "  %-72s %9d %9.2f %12s %12s\n", "total", treq[ph], treq[ph] / agents, mib(tbytes[ph]), kib(tbytes[ph] / agents)
      printf "  per 1,000 nodes: %d requests, %s\n\n", treq[ph] / agents * 1000, gib(tbytes[ph] / agents * 1000)
    }
  }' "$work/traffic.tsv"
awk -F'[:,{}]' '{
    for (i = 1; i < NF; i++) { gsub(/"/, "", $i); v[$i] = $(i + 1) }
    printf "sync of all agents %s s, relist of all agents %s s", v["sync_s"], v["relist_s"]
  }' "$work/agents.json"
awk -F': ' '
  /Elapsed \(wall clock\)/ {wall = $2}
  /Maximum resident set size/ {rss = $2 / 1024}
  END {printf "; the agents'"'"' process: wall %s, peak RSS %.0f MiB\n", wall, rss}' "$work/time.txt"
