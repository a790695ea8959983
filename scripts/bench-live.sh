#!/usr/bin/env bash
# Live scan against the dump it is built on, side by side, on a generated node loaded into
# a private network namespace (never the host's rules): wall time and peak memory of
# `iptables-nft-save` alone, and of `portdrift scan` (which runs every save tool, reads the
# sockets, parses and diffs), measured in one run by /usr/bin/time and, when installed,
# hyperfine.
#
#   scripts/bench-live.sh [SERVICES]      (default 10000; needs root, iptables, util-linux)
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}

if [[ ${1:-} == --inside ]]; then
  # In the namespace: load the generated rules, then measure.
  work=$2
  ip link set lo up
  # kube-proxy's nfacct counters must exist before rules that name them load.
  grep -o -- '--nfacct-name  *[^ ]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
    while read -r name; do nfacct add "$name"; done
  start=$(date +%s%N)
  iptables-nft-restore <"$work/node/iptables-nft-save.txt"
  echo "loaded $(wc -l <"$work/node/iptables-nft-save.txt") lines with iptables-nft-restore in $(( ($(date +%s%N) - start) / 1000000 )) ms"
  bin=target/release/portdrift
  scan=("$bin" scan --cluster-state "$work/node/cluster.json" --node worker-1 --nodeport-range 20000-32767)
  for _ in 1 2 3; do
    /usr/bin/time -f "iptables-nft-save: wall %e s, peak RSS %M KiB" iptables-nft-save >/dev/null
    /usr/bin/time -f "portdrift scan (live): wall %e s, peak RSS %M KiB" "${scan[@]}" >/dev/null
  done
  if command -v hyperfine >/dev/null; then
    hyperfine --warmup 1 --runs 5 -N "iptables-nft-save" "${scan[*]}"
  fi
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench-live: needs root (it creates a network namespace)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --bin portdrift --example synth_node
target/release/examples/synth_node --services "$services" --out "$work/node"
unshare -n bash "$0" --inside "$work"
