#!/usr/bin/env bash
# Cost of one live read and check of a full-size set of Cilium's service maps: fills
# cilium_lb4_services_v2 to Cilium's default size, 65,536 entries (2,048 NodePort
# Services with 7 endpoints each; per Service a ClusterIP frontend, the NodePort
# surrogate 0.0.0.0:PORT and a frontend on each of 2 node addresses, each a master and 7
# slots), with its 14,336 backends and 8,192 reverse-NAT entries, then times
#
#   portdrift scan --bpf-root D --cluster-state <the matching cluster.json> --format json
#
# (the whole process: every map read twice with bpftool, decoded, checked against the
# 2,048 Services; the sockets of an empty network namespace), the same scan of a
# snapshot of the maps (`scan --from`: decode and check, no bpftool), and bpftool
# alone: the services map's dump, and the six calls of one read (show and dump of the
# three maps).
# hyperfine gives the wall times (median of RUNS, default 7), /usr/bin/time the peak RSS.
#
# The services map is full at Cilium's size, so the scan reports exactly one finding,
# map-nearly-full (critical), and exits 1; any other finding fails the script.
#
#   sudo scripts/bench-cilium-maps.sh            # RUNS=10 for more runs
#
# Root only: everything happens in a private mount and network namespace on a BPF
# filesystem of its own, mounted on a temporary directory; the host's /sys/fs/bpf is
# never touched, and the maps go with the namespace. Needs bpftool, unshare, python3,
# /usr/bin/time and hyperfine (apt-get install hyperfine).
set -euo pipefail

runs=${RUNS:-7}

if [ -z "${PORTDRIFT_BENCH_INNER:-}" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "bench-cilium-maps: run as root" >&2
		exit 1
	fi
	for tool in bpftool unshare python3 hyperfine /usr/bin/time; do
		command -v "$tool" >/dev/null || { echo "bench-cilium-maps: $tool is not installed" >&2; exit 1; }
	done
	cd "$(dirname "$0")/.."
	cargo build --release --quiet --bin portdrift
	work=$(mktemp -d -t portdrift-bench-cilium.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	mkdir "$work/bpf"
	python3 - "$work" <<'PY'
import json, struct, sys
work = sys.argv[1]
g = f"{work}/bpf/tc/globals"
SERVICES, PER, ADDRS = 2048, 7, ["192.168.50.10", "10.0.1.21"]
NODEPORT, ROUTABLE = 0x02, 0x40
def ip(a): return bytes(int(x) for x in a.split("."))
def hx(b): return " ".join(f"{x:02x}" for x in b)
lines = []
for name, key, value in [("cilium_lb4_services_v2", 12, 12), ("cilium_lb4_backends_v3", 4, 12),
                         ("cilium_lb4_reverse_nat", 2, 6)]:
    lines.append(f"map create {g}/{name} type hash key {key} value {value} entries 65536 name {name[:15]} flags 1")
def svc(addr, port, rev, flags, ids):
    # lb4_key: addr, dport (BE), slot (LE), proto, scope, pad; lb4_service: word (LE),
    # count (LE), rev_nat (BE), flags, flags2, qcount (LE).
    for slot, word in [(0, 0)] + [(i + 1, b) for i, b in enumerate(ids)]:
        k = ip(addr) + struct.pack(">H", port) + struct.pack("<H", slot) + bytes([6, 0, 0, 0])
        count, fl = (len(ids), flags) if slot == 0 else (0, 0)
        v = struct.pack("<IH", word, count) + struct.pack(">H", rev) + bytes([fl, 0]) + struct.pack("<H", 0)
        lines.append(f"map update pinned {g}/cilium_lb4_services_v2 key hex {hx(k)} value hex {hx(v)}")
    lines.append(f"map update pinned {g}/cilium_lb4_reverse_nat key hex {hx(struct.pack('>H', rev))} "
                 f"value hex {hx(ip(addr) + struct.pack('>H', port))}")
items = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
          "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1",
                   "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}]
rev = 0
for s in range(SERVICES):
    node_port, cluster_ip = 30000 + s, f"10.96.{8 + s // 250}.{s % 250 + 1}"
    ids, eps = [], []
    for e in range(PER):
        bid = s * PER + e + 1
        pod = f"10.{244 + bid // 65000}.{bid // 250 % 256}.{bid % 250 + 1}"
        v = ip(pod) + struct.pack(">H", 8080) + bytes([6, 0, 0, 0, 0, 0])
        lines.append(f"map update pinned {g}/cilium_lb4_backends_v3 key hex {hx(struct.pack('<I', bid))} value hex {hx(v)}")
        ids.append(bid)
        eps.append({"addresses": [pod], "nodeName": f"node-{e % 3}",
                    "conditions": {"ready": True, "serving": True, "terminating": False}})
    for addr, port, flags in [(cluster_ip, 80, 0), ("0.0.0.0", node_port, NODEPORT)] + \
            [(a, node_port, NODEPORT | ROUTABLE) for a in ADDRS]:
        rev += 1
        svc(addr, port, rev, flags, ids)
    name = f"svc-{s}"
    items.append({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": name, "namespace": "bench", "creationTimestamp": "2026-01-01T00:00:00Z"},
                  "spec": {"type": "NodePort", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                           "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080,
                                      "nodePort": node_port}]}})
    items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": f"{name}-x", "namespace": "bench",
                               "labels": {"kubernetes.io/service-name": name}},
                  "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                  "endpoints": eps})
open(f"{work}/maps.batch", "w").write("\n".join(lines) + "\n")
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(f"{work}/cluster.json", "w"))
PY
	PORTDRIFT_BENCH_INNER=$work PORTDRIFT=$PWD/target/release/portdrift \
		unshare --mount --net --propagation private "$0"
	exit $?
fi

# Inside the namespace.
work=$PORTDRIFT_BENCH_INNER
d=$work/bpf
g=$d/tc/globals
mount -t bpf bpf "$d"
mkdir -p "$g"
start=$(date +%s%N)
bpftool batch file "$work/maps.batch" >/dev/null
echo "filled the maps ($(wc -l <"$work/maps.batch") bpftool batch lines) in $((($(date +%s%N) - start) / 1000000)) ms"
for m in cilium_lb4_services_v2 cilium_lb4_backends_v3 cilium_lb4_reverse_nat; do
	printf '  %s: %s entries of %s\n' "$m" "$(bpftool -j map dump pinned "$g/$m" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" \
		"$(bpftool -j map show pinned "$g/$m" | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_entries"])')"
done

scan="$PORTDRIFT scan --bpf-root $d --cluster-state $work/cluster.json --node node-0 --kube-proxy-healthz off --kube-proxy-metrics off --format json"

# The report: exactly one finding, the full services map; complete.
rc=0
$scan >"$work/report.json" || rc=$?
python3 - "$work/report.json" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
found = [(f["kind"], f["severity"], f["target"]) for f in r["findings"]]
c = r["coverage"]
print(f"scan: exit {sys.argv[2]}, proxy_mode {c['proxy_mode']}, complete {c['complete']}, findings {found}")
print(f"  {c['proxy_mode_evidence']}")
ok = found == [("map-nearly-full", "critical", "cilium_lb4_services_v2")] and c["complete"] and sys.argv[2] == "1"
sys.exit(0 if ok else "bench-cilium-maps: not the one expected finding")
PY

# The same maps from a bundle: the decode and check alone, without bpftool.
$PORTDRIFT snapshot --out "$work/bundle" --bpf-root "$d" --cluster-state "$work/cluster.json" --node node-0 \
	--kube-proxy-healthz off --kube-proxy-metrics off >/dev/null
from="$PORTDRIFT scan --from $work/bundle --format json"
echo "bpftool's JSON of one read (the snapshot's bpf/): $(du -cb "$work"/bundle/bpf/*.json | tail -n 1 | awk '{printf "%.1f MB", $1 / 1e6}')"

one_read="for m in cilium_lb4_services_v2 cilium_lb4_backends_v3 cilium_lb4_reverse_nat; do bpftool -j map show pinned $g/\$m; bpftool -j map dump pinned $g/\$m; done >/dev/null"
hyperfine --warmup 1 --runs "$runs" -i --export-json "$work/hyperfine.json" \
	-n "portdrift scan (live)" "$scan" \
	-n "portdrift scan --from (its snapshot)" "$from" \
	-n "bpftool dump (services map)" "bpftool -j map dump pinned $g/cilium_lb4_services_v2" \
	-n "bpftool, one read (6 calls)" "bash -c '$one_read'" >"$work/hyperfine.log" 2>&1
python3 - "$work/hyperfine.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    t = sorted(r["times"])
    print(f"{r['command']}: median {r['median']*1000:.0f} ms (min {t[0]*1000:.0f}, max {t[-1]*1000:.0f}; "
          f"{len(t)} runs), user {r['user']*1000:.0f} ms, system {r['system']*1000:.0f} ms (means)")
PY

# Peak RSS: GNU time's %M is the largest of the process and its waited-for children
# (bpftool), so bpftool's own is measured apart.
rss() {
	local what=$1
	shift
	for _ in $(seq "$runs"); do
		/usr/bin/time -f '%M' -o "$work/rss" "$@" >/dev/null 2>&1 || true
		# The last line: before it, time notes a non-zero exit.
		tail -n 1 "$work/rss"
	done | sort -n | awk -v what="$what" '{ a[NR] = $1 } END { printf "%s: peak RSS median %.1f MiB (min %.1f, max %.1f)\n", what, a[int((NR + 1) / 2)] / 1024, a[1] / 1024, a[NR] / 1024 }'
}
# shellcheck disable=SC2086 # $scan is a word list
rss "portdrift scan (largest of it and its bpftool children)" $scan
# shellcheck disable=SC2086
rss "portdrift scan --from (its snapshot)" $from
rss "bpftool dump (services map)" bpftool -j map dump pinned "$g/cilium_lb4_services_v2"
echo "machine: $(nproc) cores, kernel $(uname -r), $(bpftool version | head -n 1)"
