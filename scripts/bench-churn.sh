#!/usr/bin/env bash
# What the agent costs on a busy node: `portdrift run` (release build) on a generated
# node loaded into a private network namespace (never the host's rules), its cluster
# served by the fake API server, scanning every 30 s, while a loop plays kube-proxy's
# iptables-mode syncs: once a second it rewrites the whole KUBE-NODEPORTS chain with
# `iptables-nft-restore --noflush`, as each sync does.
#
# Over the window it reports the agent's CPU (utime + stime + children's, from
# /proc/PID/stat, as ps and time read it), its largest resident size (VmRSS each
# second), and the scans it ran. Halfway through, a stale NodePort rule (a Service that
# does not exist, port 32700) joins the rewritten chain: the time until `/findings`
# shows it is printed; then it leaves the chain again, and the time until it is gone.
#
#   scripts/bench-churn.sh [SERVICES...]   (default 1000 10000; needs root)
#   WINDOW=120 (seconds of churn per size)
# Only kube-proxy's iptables mode (iptables-nft) is played so far.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${WINDOW:-120}
stale_port=32700

# Polls /findings until its stale rule is there (want=1) or gone (want=0); seconds taken.
wait_for_stale() {
  local want=$1 start now
  start=$(date +%s.%N)
  for _ in $(seq 600); do
    if curl -s 127.0.0.1:9741/findings | grep -Eq "\"port\": *$stale_port\b"; then
      [[ $want == 1 ]] && break
    else
      [[ $want == 0 ]] && break
    fi
    sleep 0.2
  done
  now=$(date +%s.%N)
  echo "scale=1; ($now - $start) / 1" | bc
}

if [[ ${1:-} == --inside ]]; then
  work=$2 window=$3
  ip link set lo up
  grep -o -- '--nfacct-name  *[^ ]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
    while read -r name; do nfacct add "$name"; done
  iptables-nft-restore <"$work/node/iptables-nft-save.txt"
  echo "loaded $(wc -l <"$work/node/iptables-nft-save.txt") iptables-nft lines, $(grep -c '^-A KUBE-NODEPORTS ' "$work/node/iptables-nft-save.txt") in KUBE-NODEPORTS"
  # One sync's rewrite of KUBE-NODEPORTS, and the same with a stale rule for a Service
  # that does not exist, jumping to an existing Service's chain.
  { printf '*nat\n:KUBE-NODEPORTS - [0:0]\n'; grep '^-A KUBE-NODEPORTS ' "$work/node/iptables-nft-save.txt"; echo COMMIT; } >"$work/sync.txt"
  target=$(grep -m1 -o -- '-j KUBE-EXT-[A-Z0-9]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}')
  sed "/^COMMIT/i -A KUBE-NODEPORTS -p tcp -m comment --comment \"gone/deleted:http\" -m tcp --dport $stale_port -j $target" \
    "$work/sync.txt" >"$work/sync-stale.txt"
  cp "$work/sync.txt" "$work/current.txt"
  mkdir -p "$work/api"
  (sleep $((window + 600)) | target/release/examples/fake_apiserver \
    --objects "$work/node/cluster.json" --dir "$work/api" 2>"$work/api/log") &
  for _ in $(seq 600); do [[ -f $work/api/kubeconfig ]] && break; sleep 0.1; done
  [[ -f $work/api/kubeconfig ]] || { echo "the fake API server did not start" >&2; exit 1; }
  target/release/portdrift run --node worker-1 \
    --listen 127.0.0.1:9741 --interval 30s --kubeconfig "$work/api/kubeconfig" \
    --kube-proxy-healthz off --startup-jitter 0s --nodeport-range 20000-32767 2>"$work/agent.log" &
  agent=$!
  until [ "$(curl -s 127.0.0.1:9741/metrics | awk '/^portdrift_scans_total/ {print $2}')" -ge 1 ] 2>/dev/null; do
    sleep 1
  done
  sleep 5
  # kube-proxy's syncs: the current chain, rewritten every second.
  (while true; do iptables-nft-restore --noflush <"$work/current.txt"; sleep 1; done) &
  churn=$!
  scans() { curl -s 127.0.0.1:9741/metrics | awk '/^portdrift_scans_total/ {print $2}'; }
  ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$agent/stat"; }
  s0=$(scans) t0=$(ticks) rss_max=0 appeared=- gone=-
  started=$(date +%s)
  while (($(date +%s) - started < window)); do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
    ((rss > rss_max)) && rss_max=$rss
    if [[ $appeared == - ]] && (($(date +%s) - started >= window / 2)); then
      cp "$work/sync-stale.txt" "$work/current.tmp" && mv "$work/current.tmp" "$work/current.txt"
      appeared=$(wait_for_stale 1)
      cp "$work/sync.txt" "$work/current.tmp" && mv "$work/current.tmp" "$work/current.txt"
      gone=$(wait_for_stale 0)
    fi
    sleep 1
  done
  t1=$(ticks) s1=$(scans) took=$(($(date +%s) - started))
  kill "$churn" "$agent"
  hz=$(getconf CLK_TCK)
  echo "over ${took} s of syncs: agent CPU $(echo "scale=2; ($t1 - $t0) / $hz" | bc) s = $(echo "scale=1; ($t1 - $t0) * 100 / $hz / $took" | bc)% of one core;" \
    "RSS at most $(echo "scale=1; $rss_max / 1024" | bc) MiB; $((s1 - s0)) scans;" \
    "stale rule in /findings after ${appeared} s, gone after ${gone} s"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench-churn: needs root (it creates a network namespace)" >&2; exit 2; }
command -v bc >/dev/null || { echo "bench-churn: needs bc" >&2; exit 2; }
cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); iptables-nft mode; a KUBE-NODEPORTS rewrite a second"
for services in "${@:-1000 10000}"; do
  for n in $services; do
    work=$(mktemp -d)
    target/release/examples/synth_node --services "$n" --out "$work/node" >/dev/null
    echo "== $n Services"
    unshare -n bash "$0" --inside "$work" "$window"
    rm -rf "$work"
  done
done
