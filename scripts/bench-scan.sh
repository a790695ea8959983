#!/usr/bin/env bash
# Whole-process cost of one offline scan of a generated node (default 10,000 NodePort
# Services, 4 endpoints each: ~232,000 iptables-save lines, a 47 MB cluster.json):
# wall time and peak memory with /usr/bin/time, for the full scan and for the rules
# alone, and repeated runs with hyperfine when it is installed.
#
#   scripts/bench-scan.sh [SERVICES]
#
# The in-process figure (parse + diff only) comes from `cargo bench --bench scan`.
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --release --quiet --bin portdrift --example synth_node
target/release/examples/synth_node --services "$services" --out "$work/node"
mkdir -p "$work/rules-only"
cp "$work/node/iptables-nft-save.txt" "$work/rules-only/"

scan() { target/release/portdrift scan --from "$1" --nodeport-range 20000-32767 >/dev/null; }

for bundle in node rules-only; do
  for _ in 1 2 3; do
    /usr/bin/time -f "$bundle: wall %e s, peak RSS %M KiB" \
      target/release/portdrift scan --from "$work/$bundle" --nodeport-range 20000-32767 >/dev/null
  done
done
scan "$work/node"

if command -v hyperfine >/dev/null; then
  hyperfine --warmup 1 --runs 10 -N \
    "target/release/portdrift scan --from $work/node --nodeport-range 20000-32767" \
    "target/release/portdrift scan --from $work/rules-only --nodeport-range 20000-32767"
fi
