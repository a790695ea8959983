#!/usr/bin/env bash
# Collects a portdrift bundle from a node with nothing but kubectl: the node's netfilter
# dumps, listening sockets, port sysctls and kube-proxy's health (through a debug pod,
# `kubectl debug node/NODE`), and the cluster's Services and EndpointSlices. Then, on
# any machine with portdrift:
#
#   scripts/collect-snapshot.sh worker-1 bundle-worker-1
#   portdrift scan --from bundle-worker-1
#
# Options: --image IMAGE (the debug pod's image, default busybox:1.36: it needs sh,
# tar, gzip, base64 and wget), --timeout SECONDS (for the pod to finish, default 180).
# KUBECTL names the kubectl to use (default: kubectl), with the current context.
#
# What it needs in the cluster: create pods (the debug pod runs privileged, with the
# node's network and PID namespaces and its filesystem at /host, as
# `kubectl debug --profile=sysadmin` makes it), read its logs, delete it; and list
# services and endpointslices. The rule dumps run the node's own iptables-*-save and
# nft (through chroot /host): a tool the node does not have leaves no file, and
# portdrift reports that source as absent. Nothing on the node is changed: the legacy
# tools are never given -t, which would create the table.
set -euo pipefail

kubectl=${KUBECTL:-kubectl}
image=busybox:1.36
timeout=180
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --image) image=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ ${#args[@]} -ne 2 ]; then
  echo "usage: $0 [--image IMAGE] [--timeout SECONDS] NODE OUT_DIR" >&2
  exit 2
fi
node=${args[0]}
out=${args[1]}
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "$out is not empty" >&2
  exit 2
fi
mkdir -p "$out"

# Runs in the debug pod (busybox sh). Its stdout is the bundle, a base64 tar.gz between
# two markers, so that nothing else in the log can corrupt it. Each dump is written
# only when its tool exists; an empty dump (no tables in that backend) is dropped, as
# `portdrift snapshot` does.
# shellcheck disable=SC2016 # Expanded in the pod, not here.
remote='
set -u
b=/tmp/bundle
mkdir -p "$b/proc/net" "$b/proc/sys/net/ipv4"
host() { chroot /host "$@"; }
for tool in iptables-nft-save iptables-legacy-save ip6tables-nft-save ip6tables-legacy-save; do
  if host sh -c "command -v $tool" >/dev/null 2>&1; then
    host "$tool" >"$b/$tool.txt" 2>"$b/$tool.err" || echo "$tool failed: $(cat "$b/$tool.err")" >&2
    [ -s "$b/$tool.txt" ] || rm -f "$b/$tool.txt"
    rm -f "$b/$tool.err"
  fi
done
# kube-proxy nftables mode: its two tables, by name (the whole ruleset would also
# print iptables-nft tables, which is slow and large on a big node).
if host sh -c "command -v nft" >/dev/null 2>&1; then
  for family in ip ip6; do
    host nft -j list table "$family" kube-proxy 2>/dev/null && echo
  done >"$b/nft.json"
  [ -s "$b/nft.json" ] || rm -f "$b/nft.json"
fi
for f in tcp tcp6 udp udp6; do
  cat "/proc/net/$f" >"$b/proc/net/$f" 2>/dev/null || rm -f "$b/proc/net/$f"
done
for f in ip_local_port_range ip_local_reserved_ports; do
  cat "/proc/sys/net/ipv4/$f" >"$b/proc/sys/net/ipv4/$f" 2>/dev/null || rm -f "$b/proc/sys/net/ipv4/$f"
done
wget -q -T 5 -O "$b/kube-proxy-healthz.json" http://127.0.0.1:10256/healthz 2>/dev/null ||
  rm -f "$b/kube-proxy-healthz.json"
echo "==== portdrift bundle begin"
tar -C "$b" -czf - . | base64
echo "==== portdrift bundle end"
'

echo "starting a debug pod on node/$node (image $image)" >&2
started=$("$kubectl" debug "node/$node" --image="$image" --profile=sysadmin --attach=false \
  -- sh -c "$remote" 2>&1)
pod=$(grep -o 'node-debugger-[A-Za-z0-9.-]*' <<<"$started" | head -n1 || true)
if [ -z "$pod" ]; then
  echo "kubectl debug did not start a pod: $started" >&2
  exit 1
fi
cleanup() { "$kubectl" delete pod "$pod" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "waiting for pod/$pod (up to ${timeout}s)" >&2
"$kubectl" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$pod" --timeout="${timeout}s" >/dev/null
# The logs are read after the pod finished, so that nothing is missed the way an attach
# can miss a container's first output.
"$kubectl" logs "$pod" >"$out/.debug-pod.log"
sed -n '/^==== portdrift bundle begin$/,/^==== portdrift bundle end$/p' "$out/.debug-pod.log" |
  sed '1d;$d' | base64 -d | tar -C "$out" -xzf -
# What the pod said besides the bundle (a tool that failed) goes to stderr.
sed '/^==== portdrift bundle begin$/,/^==== portdrift bundle end$/d' "$out/.debug-pod.log" >&2
rm -f "$out/.debug-pod.log"

echo "$node" >"$out/node"
"$kubectl" get services,endpointslices -A -o json >"$out/cluster.json"
echo "wrote $out: portdrift scan --from $out" >&2
