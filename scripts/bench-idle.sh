#!/usr/bin/env bash
# What the agent costs on a quiet large node: `portdrift run` (release build) on a
# generated 10,000-Service node loaded into a private network namespace (never the host's
# rules), its cluster served by the fake API server, scanning every 30 s. Nothing changes
# while it runs, as on a node between deploys.
#
# After start-up (the initial API list and the first full read of the rules), the idle
# agent is measured over a window: its CPU and its children's from the kernel's own
# accounting (/proc/PID/stat, as ps and time read it), its resident size each second
# (VmRSS) and at its peak (VmHWM); /usr/bin/time gives the whole run's totals.
#
#   scripts/bench-idle.sh [SERVICES] [WINDOW_S]   (default 10000 120; needs root)
#   MODE=iptables-nft (default) or MODE=nftables (kube-proxy's nftables mode: the agent
#   then also keeps the constant verdict maps between reads)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh
services=${1:-10000}
window=${2:-120}
mode=${MODE:-iptables-nft}

if [[ ${1:-} == --inside ]]; then
  work=$2 window=$3 mode=$4
  ip link set lo up
  if [[ $mode == nftables ]]; then
    nft -f "$work/node/kube-proxy.nft"
    echo "loaded $(wc -l <"$work/node/kube-proxy.nft") lines of kube-proxy's nftables tables"
  else
    bench_restore_iptables_nft "$work/node/iptables-nft-save.txt"
    echo "loaded $(wc -l <"$work/node/iptables-nft-save.txt") iptables-nft lines"
  fi
  bench_serve_node_cluster "$work" $((window + 300))
  bench_start_agent "$work" /usr/bin/time -o "$work/time" -f "%U %S %M"
  timer=$agent_job
  started=$(date +%s)
  bench_await_first_scan
  startup=$(( $(date +%s) - started ))
  agent=$(pgrep -P "$timer" -x portdrift)
  # Let what the start-up freed be returned, then measure the idle agent: the CPU the
  # kernel accounts to it and its waited-for children (utime, stime, cutime, cstime of
  # /proc/PID/stat, in clock ticks) across the window, and its resident size each second.
  sleep 15
  t0=$(bench_cpu_ticks "$agent")
  idle_max=0
  for _ in $(seq "$window"); do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
    (( rss > idle_max )) && idle_max=$rss
    sleep 1
  done
  t1=$(bench_cpu_ticks "$agent")
  peak=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
  resting=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
  curl -s 127.0.0.1:9741/metrics >"$work/metrics.txt"
  kill -TERM "$agent"
  wait "$timer" || true
  read -r user sys tree <"$work/time"
  hz=$(getconf CLK_TCK)
  echo "start-up: ${startup} s to the first scan; whole run: CPU $(echo "$user + $sys" | bc) s (user $user, sys $sys), largest process of the tree $tree KiB"
  echo "idle, over ${window} s: CPU $(echo "scale=3; ($t1 - $t0) / $hz" | bc) s = $(echo "scale=3; ($t1 - $t0) * 100 / $hz / $window" | bc)% of one core;" \
    "agent RSS at most $idle_max KiB ($(echo "scale=1; $idle_max / 1024" | bc) MiB), $resting KiB at the end; its peak with start-up $peak KiB ($(echo "scale=1; $peak / 1024" | bc) MiB)"
  # The project's goals at 10,000 Services (docs/performance.md).
  echo "goals at 10,000 Services: resting RSS <= 64 MiB in either mode; start-up peak <= 96 MiB in nftables mode"
  grep -E '^portdrift_scan(_phase)?_duration_seconds_(sum|count)|^portdrift_scans_total' "$work/metrics.txt" | sed 's/^/    /'
  grep -h 'summary' "$work/agent.log" | tail -1 || true
  exit 0
fi

bench_require_root_and_bc bench-idle
bench_scratch
cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
target/release/examples/synth_node --services "$services" --out "$work/node"
echo "node: $services Services, $mode mode; $(bench_machine)"
unshare -n bash "$0" --inside "$work" "$window" "$mode"
