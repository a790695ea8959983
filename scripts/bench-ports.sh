#!/usr/bin/env bash
# `portdrift ports` on a generated 10,000-Service cluster (synth_node's cluster.json:
# consecutive nodePorts from 20000, 4 endpoints each, a 47 MB file), from the file and
# from the fake API server over HTTP: wall time and peak memory with /usr/bin/time,
# and repeated runs with hyperfine when it is installed.
#
#   scripts/bench-ports.sh [SERVICES]
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}
work=$(mktemp -d)
api_pid=
cleanup() {
  [ -z "$api_pid" ] || kill "$api_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
target/release/examples/synth_node --services "$services" --out "$work/node"
range=20000-32767

# The fake API server serves the same number of Services (its own generator), until
# its stdin closes.
target/release/examples/fake_apiserver --services "$services" --endpoints 4 --dir "$work" \
  < <(sleep 600) 2>/dev/null &
api_pid=$!
for _ in $(seq 100); do [ -f "$work/kubeconfig" ] && break; sleep 0.1; done
[ -f "$work/kubeconfig" ] || { echo "the fake API server did not start" >&2; exit 1; }

pd=target/release/portdrift
file_text="$pd ports --cluster-state $work/node/cluster.json --nodeport-range $range"
file_json="$file_text --format json"
api_text="$pd ports --kubeconfig $work/kubeconfig --nodeport-range $range"
for run in "$file_text" "$file_json" "$api_text"; do
  for _ in 1 2 3; do
    # The exit status is 1 when ports collide; only the cost matters here.
    /usr/bin/time -f "wall %e s, peak RSS %M KiB: $run" $run >/dev/null || true
  done
done
echo "rows: $($file_text | grep -c '^[0-9]')"

if command -v hyperfine >/dev/null; then
  hyperfine --warmup 1 --runs 10 -N -i "$file_text" "$file_json" "$api_text"
fi
