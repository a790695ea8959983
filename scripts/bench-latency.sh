#!/usr/bin/env bash
# How soon a rule change shows in /findings on a quiet large node: `portdrift run`
# (release build, scanning every 5 minutes) on a generated node loaded into a private
# network namespace (never the host's rules), its cluster served by the fake API server.
# Once the first scan is done and the node is quiet, a stale NodePort rule is injected
# (iptables mode: `iptables-nft -A KUBE-NODEPORTS ... -j DNAT`; nftables mode: a
# `service-nodeports` element to a DNAT chain, with `nft -f`), and /findings is polled
# every 50 ms until it reports it. The agent rescans on the kernel's nf_tables change
# notification, not on its interval.
#
#   scripts/bench-latency.sh [SERVICES] [TRIES]   (default 10000 3; needs root, curl, python3)
#   MODES="iptables-nft nftables" (default)
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}
tries=${2:-3}
listen=127.0.0.1:9742

# Prints how many findings of `kind` on `port` /findings reports (0 when it does not answer).
count_findings() {
  curl -sf "http://$listen/findings" | python3 -c '
import json, sys
kind, port = sys.argv[1], int(sys.argv[2])
print(sum(1 for f in json.load(sys.stdin)["findings"] if f["kind"] == kind and f["port"] == port))' "$1" "$2" 2>/dev/null || echo 0
}

scans() {
  curl -sf "http://$listen/metrics" | awk '/^portdrift_scans_total/ {print $2}' || echo 0
}

if [[ ${1:-} == --inside ]]; then
  mode=$2 work=$3 tries=$4
  ip link set lo up
  if [[ $mode == iptables-nft ]]; then
    grep -o -- '--nfacct-name  *[^ ]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
      while read -r name; do nfacct add "$name" >/dev/null; done
    iptables-nft-restore <"$work/node/iptables-nft-save.txt"
  else
    nft -f "$work/node/kube-proxy.nft"
  fi
  mkdir -p "$work/api-$mode"
  (sleep 3600 | target/release/examples/fake_apiserver \
    --objects "$work/node/cluster.json" --dir "$work/api-$mode" 2>"$work/api-$mode/log") &
  api=$!
  for _ in $(seq 600); do [[ -f $work/api-$mode/kubeconfig ]] && break; sleep 0.1; done
  [[ -f $work/api-$mode/kubeconfig ]] || { echo "the fake API server did not start" >&2; exit 1; }
  target/release/portdrift run --node worker-1 --listen "$listen" --findings-listen "$listen" --interval 5m \
    --kubeconfig "$work/api-$mode/kubeconfig" --kube-proxy-healthz off --startup-jitter 0s \
    --nodeport-range 20000-32767 2>"$work/agent-$mode.log" &
  agent=$!
  # The API server's pipeline goes too: left running, it would hold this script's output
  # open after the run.
  trap 'kill $agent 2>/dev/null; pkill -P $api 2>/dev/null; kill $api 2>/dev/null || true' EXIT
  for _ in $(seq 1200); do [[ $(scans) -ge 1 ]] && break; sleep 0.1; done
  [[ $(scans) -ge 1 ]] || { echo "the agent did not finish its first scan" >&2; exit 1; }
  for ((try = 0; try < tries; try++)); do
    port=$((31900 + try))
    sleep 5 # quiet: nothing changes
    # Timed from when the rule exists: the injecting command returns after its commit
    # (iptables-nft itself takes about 0.4 s on a 10,000-Service node).
    if [[ $mode == iptables-nft ]]; then
      iptables-nft -w -t nat -A KUBE-NODEPORTS -p tcp -m comment --comment "gone/stale-$try:http" \
        -m tcp --dport "$port" -j DNAT --to-destination "10.250.0.$((try + 1)):8080"
    else
      chain="external-STALE$try-gone/stale-$try/tcp/http"
      nft -f - <<EOF
add chain ip kube-proxy $chain
add rule ip kube-proxy $chain meta l4proto tcp dnat to 10.250.0.$((try + 1)):8080
add element ip kube-proxy service-nodeports { tcp . $port : goto $chain }
EOF
    fi
    start=$(date +%s%N)
    seen=""
    for _ in $(seq 600); do
      if [[ $(count_findings stale-nodeport "$port") -ge 1 ]]; then
        seen=$(( ($(date +%s%N) - start) / 1000000 ))
        break
      fi
      sleep 0.05
    done
    echo "$mode: stale NodePort $port in /findings after ${seen:-more than 30000} ms (interval 5m)"
  done
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench-latency: needs root (it creates network namespaces)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
target/release/examples/synth_node --services "$services" --endpoints 5 --out "$work/node" 2>/dev/null
echo "node: $services Services x 5 endpoints; $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
for mode in ${MODES:-iptables-nft nftables}; do
  unshare -n bash "$0" --inside "$mode" "$work" "$tries"
done
