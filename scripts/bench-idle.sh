#!/usr/bin/env bash
# What the agent costs on a quiet large node: `portdrift run` (release build) on a
# generated 10,000-Service node loaded into a private network namespace (never the host's
# rules), its cluster served by the fake API server, scanning every 30 s. Nothing changes
# while it runs, as on a node between deploys.
#
# Measured with /usr/bin/time (CPU of the agent and every tool it ran), ps and the
# kernel's VmHWM (the agent's own resident memory, now and at its peak)
# over two runs of different lengths: the difference between them is the steady cost,
# without the start-up (the initial API list and the first full read of the rules).
#
#   scripts/bench-idle.sh [SERVICES] [SHORT_S] [LONG_S]   (default 10000 45 165; needs root)
set -euo pipefail
cd "$(dirname "$0")/.."
services=${1:-10000}
short=${2:-45}
long=${3:-165}

if [[ ${1:-} == --inside ]]; then
  work=$2 short=$3 long=$4
  ip link set lo up
  grep -o -- '--nfacct-name  *[^ ]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
    while read -r name; do nfacct add "$name"; done
  iptables-nft-restore <"$work/node/iptables-nft-save.txt"
  echo "loaded $(wc -l <"$work/node/iptables-nft-save.txt") iptables-nft lines"
  mkdir -p "$work/api"
  # The fake API server serves until its stdin closes.
  (sleep $((short + long + 120)) | target/release/examples/fake_apiserver \
    --objects "$work/node/cluster.json" --dir "$work/api" 2>"$work/api/log") &
  for _ in $(seq 600); do [[ -f $work/api/kubeconfig ]] && break; sleep 0.1; done
  [[ -f $work/api/kubeconfig ]] || { echo "the fake API server did not start" >&2; exit 1; }
  for seconds in "$short" "$long"; do
    /usr/bin/time -o "$work/time-$seconds" -f "%U %S %M" \
      target/release/portdrift run --node worker-1 \
      --listen 127.0.0.1:9741 --interval 30s --kubeconfig "$work/api/kubeconfig" \
      --kube-proxy-healthz off --nodeport-range 20000-32767 2>"$work/agent-$seconds.log" &
    timer=$!
    # Start-up (the initial list and the first full read) is over well within 40 s here;
    # from then on, the largest resident size seen at each second is the idle agent's.
    sleep 40
    agent=$(pgrep -P "$timer" -x portdrift)
    idle_max=0
    for _ in $(seq $((seconds - 40))); do
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
      (( rss > idle_max )) && idle_max=$rss
      sleep 1
    done
    # The agent's own memory (the tree's peak below is the largest process in it, which
    # is iptables-nft-save during a full read).
    own=$(ps -o rss= -p "$agent")
    peak=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
    curl -s 127.0.0.1:9741/metrics >"$work/metrics-$seconds.txt"
    kill -TERM "$agent"
    wait "$timer" || true
    read -r user sys tree <"$work/time-$seconds"
    printf 'run of %4s s: CPU %6.2f s (user %s, sys %s); agent RSS at the end %d KiB, largest after start-up %d KiB (%.1f MiB), peak with start-up %d KiB (%.1f MiB); largest process of the tree %d KiB\n' \
      "$seconds" "$(echo "$user + $sys" | bc)" "$user" "$sys" "$own" "$idle_max" "$(echo "$idle_max / 1024" | bc -l)" \
      "$peak" "$(echo "$peak / 1024" | bc -l)" "$tree"
    grep -E '^portdrift_scan(_phase)?_duration_seconds_(sum|count)|^portdrift_scans_total' "$work/metrics-$seconds.txt" | sed 's/^/    /'
  done
  read -r u1 s1 _ <"$work/time-$short"
  read -r u2 s2 _ <"$work/time-$long"
  echo "steady cost: $(echo "scale=3; ($u2 + $s2 - $u1 - $s1) * 100 / ($long - $short)" | bc)% of one core" \
    "(CPU seconds of the long run minus the short one, over the $((long - short)) s between them)"
  grep -h 'summary' "$work/agent-$long.log" | tail -1 || true
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench-idle: needs root (it creates a network namespace)" >&2; exit 2; }
command -v bc >/dev/null || { echo "bench-idle: needs bc" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
target/release/examples/synth_node --services "$services" --out "$work/node"
echo "node: $services Services; $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
unshare -n bash "$0" --inside "$work" "$short" "$long"
