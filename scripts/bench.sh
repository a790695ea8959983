#!/usr/bin/env bash
# What a live scan costs next to the dump tools it replaces, side by side in one run, on
# generated kube-proxy-exact nodes (5 endpoints per Service) loaded into private network
# namespaces (never the host's rules). For each size: in iptables mode (iptables-nft
# backend) `iptables-nft-save` alone, the netlink read alone (`portdrift dev
# iptables-save`, which prints what it read as the tool would), `portdrift scan`
# reading over netlink (the default) and `portdrift scan --iptables-via save`; in nftables mode
# `nft -j list table ip kube-proxy` alone, `portdrift scan` reading over netlink (the
# default), and `portdrift scan --nftables-via nft`. Wall time, user and system CPU time
# (children included) and peak RSS come from /usr/bin/time; each is the median of RUNS.
# User time is the program's own work; system time is mostly the kernel answering the
# dumps, which is where a large node's cost stops being linear.
#
# iptables mode is measured in two chain orders, which the kernel keeps from the restore
# that made them and which change what the dump tools cost: `grouped` (each Service's
# KUBE-SVC, KUBE-EXT and KUBE-SEP chains together, as kube-proxy writes them in one
# restore: the order on a node it programmed) first, then `sorted` (by name, as a saved
# dump restored again has them).
#
#   scripts/bench.sh [SERVICES...]     (default: 1000 10000 30000; needs root)
#   RUNS=3 (default); MODES="iptables-nft nftables" (default); ORDERS="grouped sorted" (default);
#   VIA=0 leaves out the scans through the dump tools (--iptables-via save, --nftables-via nft)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}

# Runs "$@" RUNS times under /usr/bin/time; prints "wall user sys rss_mib" (medians).
measure() {
  local out=() i
  for ((i = 0; i < runs; i++)); do
    # A scan with findings exits 1: still a measurement.
    out+=("$({ /usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null || true; } | tail -1)")
  done
  printf '%s\n' "${out[@]}" | awk '
    { wall[NR] = $1; user[NR] = $2; sys[NR] = $3; rss[NR] = $4 / 1024 }
    function median(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return a[int((n + 1) / 2)]
    }
    END { printf "%.2f %.2f %.2f %.0f\n", median(wall, NR), median(user, NR), median(sys, NR), median(rss, NR) }'
}

row() { # services mode what measurements...
  local services=$1 mode=$2 what=$3
  shift 3
  read -r wall user sys rss < <(measure "$@")
  printf '| %s | %s | %s | `%s` | %s | %s | %s | %s |\n' "$services" "$mode" "$order" "$what" "$wall" "$user" "$sys" "$rss"
}

if [[ ${1:-} == --inside ]]; then
  mode=$2 node=$3 services=$4 order=${5:--}
  ip link set lo up
  bin=target/release/portdrift
  scan=("$bin" scan --cluster-state "$node/cluster.json" --node worker-1
    --nodeport-range 20000-65535 --kube-proxy-healthz off --kube-proxy-metrics off --format json)
  if [[ $mode == iptables-nft ]]; then
    grep -o -- '--nfacct-name  *[^ ]*' "$node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
      while read -r name; do nfacct add "$name" >/dev/null; done
    iptables-nft-restore <"$node/iptables-nft-save.txt"
    row "$services" "$mode" "iptables-nft-save" iptables-nft-save
    row "$services" "$mode" "portdrift dev iptables-save (netlink read)" "$bin" dev iptables-save
    row "$services" "$mode" "portdrift scan (netlink)" "${scan[@]}"
    [[ ${VIA:-1} == 0 ]] || row "$services" "$mode" "portdrift scan --iptables-via save" "${scan[@]}" --iptables-via save
  else
    nft -f "$node/kube-proxy.nft"
    row "$services" "$mode" "nft -j list table ip kube-proxy" nft -j list table ip kube-proxy
    row "$services" "$mode" "portdrift scan (netlink)" "${scan[@]}"
    [[ ${VIA:-1} == 0 ]] || row "$services" "$mode" "portdrift scan --nftables-via nft" "${scan[@]}" --nftables-via nft
  fi
  # The scan must have read the node and found it clean.
  # (A port-range overlap is the host's ephemeral range against the wide NodePort range
  # the generator needs, not the node's rules.)
  findings=$("${scan[@]}" | python3 -c 'import json,sys; print(sum(1 for f in json.load(sys.stdin)["findings"] if f["kind"] != "port-range-overlap"))') || true
  [[ $findings == 0 ]] || echo "warning: $findings findings on a clean node ($mode, $services)" >&2
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench: needs root (it creates network namespaces)" >&2; exit 2; }
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000 10000 30000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --bin portdrift --example synth_node
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; kernel $(uname -r); $(iptables --version); $(nft --version)"
echo "median of $runs runs"
echo
echo "| Services | mode | chain order | command | wall s | user s | system s | peak RSS MiB |"
echo "|---:|---|---|---|---:|---:|---:|---:|"
for services in "${sizes[@]}"; do
  for mode in ${MODES:-iptables-nft nftables}; do
    if [[ $mode == iptables-nft ]]; then orders=${ORDERS:-grouped sorted}; else orders=-; fi
    for order in $orders; do
      node="$work/$services-$order"
      flags=()
      [[ $order == grouped ]] && flags=(--grouped)
      target/release/examples/synth_node --services "$services" --endpoints 5 "${flags[@]}" --out "$node" 2>/dev/null
      unshare -n bash "$0" --inside "$mode" "$node" "$services" "$order"
      rm -rf "$node"
    done
  done
done
