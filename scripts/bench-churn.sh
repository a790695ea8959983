#!/usr/bin/env bash
# What the agent costs on a busy node: `portdrift run` (release build) on a generated
# node loaded into a private network namespace (never the host's rules), its cluster
# served by the fake API server, scanning every 30 s, while kube-proxy's syncs are played
# once a second, in either of kube-proxy's modes:
#
# - iptables-nft: each sync rewrites the whole KUBE-NODEPORTS chain (nat, and filter's
#   health-check one) in one transaction, as `iptables-restore --noflush` does. The node
#   is generated with its chains grouped by Service, the order kube-proxy writes them in.
#   `iptables-nft-restore` itself cannot keep up (at 10,000 Services it reads the whole
#   ruleset first and takes ~9 s a sync), so scripts/nft-replay.py captures the chains
#   once from the kernel and replays the same transaction as prebuilt netlink bytes; the
#   script checks that a replay leaves exactly the loaded rules.
# - nftables: each sync is one transaction as a kube-proxy nftables-mode sync after
#   endpoints moved: 200 `service-nodeports` elements deleted and added again, and the
#   endpoint chains of 10 Services flushed and refilled; replayed the same way, as
#   `nft -f` of it takes ~1.1 s at 10,000 Services.
#
# Over the window it reports the syncs a second reached and how long one took, the
# agent's CPU (utime + stime + children's, from /proc/PID/stat, as ps and time read it;
# in CPU-seconds, so a shared machine does not skew it), its resident size just before
# the churn starts and its largest during it (the kernel's VmHWM, reset as the churn
# starts, so a read's brief peak counts; VmRSS sampled each second is printed too), and
# the scans it ran.
# Halfway through, a stale NodePort (a Service that does not exist, port 32700, jumping
# to an existing Service's chain) joins the syncs: the time until `/findings` shows it is
# printed; then the syncs drop it again, and the time until it is gone. That is done
# STALE_ROUNDS times (default 3), each after a random pause of up to 14 s, and the
# median is the figure: one round measures where in the agent's cycle of scans the
# change landed as much as the agent. In iptables mode
# it is a KUBE-NODEPORTS rule commented "gone/deleted:http"; in nftables mode a
# `service-nodeports` element with that comment (kube-proxy comments the elements of its
# other maps so; portdrift takes the comment as the Service). Each wait gives up after
# 240 s, printed as ">SECONDS"; the agent's log lines about its reads are counted.
#
#   scripts/bench-churn.sh [SERVICES...]   (default 1000 10000; needs root, python3)
#   MODE=iptables-nft|nftables|both (default both)   WINDOW=120 (seconds of churn)
#   PORTDRIFT=path/to/portdrift (default: target/release/portdrift, built here), to
#   measure another build (before/after a change); PERF=1 adds a perf profile of the
#   agent for 20 s after the window, with the churn still running; AGENT_LOG=PATH keeps
#   the agent's log of each run as PATH.SERVICES.MODE; STALE_ROUNDS=3 (rounds of the
#   stale rule)
# Ends with one markdown table row per (Services, mode).
set -euo pipefail
# set -e alone would end a run without a word.
trap 'echo "bench-churn: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
window=${WINDOW:-120}
rounds=${STALE_ROUNDS:-3}
mode=${MODE:-both}
stale_comment=gone/deleted:http
replay=scripts/nft-replay.py

# The NodePorts: one a Service from 20000 up (then the health-check ports of a tenth of
# them), scanned as --nodeport-range 20000-32767, the stale one at 32700. Past 12,000
# Services they would reach the stale port, and then the last port there is: they start
# lower, in a range widened to 65535 (as clusters of that size widen it), and the stale
# one sits below them.
# NodePorts that low cover the ports the kernel hands out to local clients, which
# kube-proxy's rules would take too (a NodePort is DNATed on any local address): the
# agent's port and the fake API server's are kept below them.
ports_for() {
  local n=$1
  agent_port=9741
  if ((n <= 12000)); then
    first_port=20000 nodeport_range=20000-32767 stale_port=32700
  else
    first_port=$((65535 - n * 12 / 10))
    stale_port=$((first_port - 100)) nodeport_range="$((first_port - 200))-65535"
    ((first_port > 5000)) || { echo "bench-churn: too many Services for the port space" >&2; exit 2; }
    agent_port=4741
  fi
}

# Polls /findings until its stale rule is there (want=1) or gone (want=0), for at most
# 240 s; prints the seconds taken, or ">SECONDS" if it gave up.
wait_for_stale() {
  local want=$1 start now seen findings
  start=$(date +%s.%N)
  while (($(date +%s) - ${start%.*} < 240)); do
    seen=0
    # Read whole first: grep -q may stop reading early, failing curl and the pipeline.
    findings=$(curl -s --max-time 5 127.0.0.1:$agent_port/findings || true)
    grep -Eq "\"port\": *$stale_port\b" <<<"$findings" && seen=1
    [[ $seen == "$want" ]] && break
    sleep 0.2
  done
  now=$(date +%s.%N)
  [[ $seen == "$want" ]] || printf '>'
  echo "scale=1; ($now - $start) / 1" | bc
}

# The middle of its arguments (numbers, ">N" for a wait that gave up, "-" for none),
# the upper one of an even count; a wait that gave up sorts above every number.
median() {
  printf '%s\n' "$@" | sed 's/^>/9999/; s/^-$/99999/' | sort -g |
    awk '{ v[NR] = $0 } END { m = v[int(NR / 2) + 1]; if (m >= 99999) m = "-"; else if (m >= 9999) m = ">" (m - 9999); print m }'
}

# The KUBE-NODEPORTS rules of a save dump, filter's then nat's.
nodeports() {
  local t
  for t in filter nat; do
    awk -v t="*$t" '/^\*/ { on = ($0 == t) } on && /^-A KUBE-NODEPORTS /' "$1"
  done
}

# iptables-nft mode: loads the node; writes sync.batch (one sync's rewrite of both
# KUBE-NODEPORTS chains) and stale.batch (the same with the stale rule appended), and
# checks that replaying them leaves exactly the loaded rules, plus the stale one.
setup_iptables() {
  local work=$1 target
  grep -o -- '--nfacct-name  *[^ ]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}' | sort -u |
    while read -r name; do nfacct add "$name"; done
  iptables-nft-restore <"$work/node/iptables-nft-save.txt"
  nodeports "$work/node/iptables-nft-save.txt" >"$work/want.txt"
  echo "loaded $(wc -l <"$work/node/iptables-nft-save.txt") iptables-nft lines, $(wc -l <"$work/want.txt") in the KUBE-NODEPORTS chains"
  local chains=(--chain nat:KUBE-NODEPORTS --chain filter:KUBE-NODEPORTS)
  python3 "$replay" capture "${chains[@]}" --out "$work/sync.batch"
  target=$(grep -m1 -o -- '-j KUBE-EXT-[A-Z0-9]*' "$work/node/iptables-nft-save.txt" | awk '{print $2}')
  iptables-nft -t nat -A KUBE-NODEPORTS -p tcp -m comment --comment "$stale_comment" -m tcp --dport "$stale_port" -j "$target"
  python3 "$replay" capture "${chains[@]}" --out "$work/stale.batch" >/dev/null
  python3 "$replay" send "$work/sync.batch" >/dev/null
  iptables-nft-save >"$work/live.txt"
  nodeports "$work/live.txt" | cmp -s - "$work/want.txt" ||
    { echo "replaying the sync does not give back the loaded KUBE-NODEPORTS rules" >&2; return 1; }
  python3 "$replay" send "$work/stale.batch" >/dev/null
  iptables-nft-save >"$work/live.txt"
  [[ $(nodeports "$work/live.txt" | diff "$work/want.txt" - | grep -c '^[<>]') == 1 &&
    $(nodeports "$work/live.txt" | grep -c -- "--dport $stale_port ") == 1 ]] ||
    { echo "the stale sync does not add exactly the stale rule" >&2; return 1; }
  python3 "$replay" send "$work/sync.batch" >/dev/null
  echo "replay checked: the sync gives back the loaded chains, the stale one adds one rule"
  cp "$work/sync.batch" "$work/unstale.batch"
  echo "$work/sync.batch" >"$work/select"
}

# nftables mode: loads the node; writes sync.batch (one sync, as kube-proxy's after
# endpoints moved: the 200 lowest service-nodeports elements deleted and added again, the
# endpoint chains of 10 Services flushed and refilled), stale.batch (the same adding the
# stale element) and unstale.batch (the same removing it: it adds it first, so that the
# removal is valid whether or not the element is there and can be committed repeatedly).
# `nft -f` of such a sync takes ~1.1 s at 10,000 Services (it lists the table's chains
# and maps first, and the kernel validates the table on commit), too slow for one a
# second, so these too are replayed netlink batches.
setup_nftables() {
  local work=$1 nft=$1/node/kube-proxy.nft target
  nft -f "$nft"
  echo "loaded $(wc -l <"$nft") lines of kube-proxy's nftables table"
  # The first 10 Services (by their service-HASH-ns/name/proto/port chains): their
  # endpoint-HASH-ns/name/proto/port__ip/port chains.
  local chains=()
  mapfile -t chains < <(awk -v n=10 '
    function mine(c) { return c ~ /^endpoint-/ && (i = index(c, "__")) && substr(c, 19, i - 19) in svc }
    FNR == NR { if ($1 == "add" && $2 == "chain" && $5 ~ /^service-.*\// && picked++ < n) svc[substr($5, 18)] = 1; next }
    $1 == "add" && $2 == "chain" && mine($5) { print "--chain"; print "kube-proxy:" $5 }' "$nft" "$nft")
  local sync=("${chains[@]}" --map kube-proxy:service-nodeports --replace 200)
  python3 "$replay" capture "${sync[@]}" --out "$work/sync.batch"
  nft list table ip kube-proxy >"$work/before.txt"
  python3 "$replay" send "$work/sync.batch" >/dev/null
  nft list table ip kube-proxy >"$work/after.txt"
  cmp -s "$work/before.txt" "$work/after.txt" || { echo "replaying the sync changes the table" >&2; return 1; }
  target=$(sed -n 's/^add chain ip kube-proxy \(external-[^ ]*\).*/\1/p; T; q' "$nft")
  nft add element ip kube-proxy service-nodeports "{ tcp . $stale_port comment \"$stale_comment\" : goto $target }"
  python3 "$replay" capture "${sync[@]}" --add-port "$stale_port" --out "$work/stale.batch" >/dev/null
  python3 "$replay" capture "${sync[@]}" --add-port "$stale_port" --remove-port "$stale_port" --out "$work/unstale.batch" >/dev/null
  python3 "$replay" send "$work/unstale.batch" >/dev/null
  nft list table ip kube-proxy | cmp -s - "$work/before.txt" ||
    { echo "the unstale sync does not give back the loaded table" >&2; return 1; }
  python3 "$replay" send "$work/stale.batch" >/dev/null
  [[ $(nft list table ip kube-proxy | diff "$work/before.txt" - | grep -c '^[<>]') == 1 &&
    $(nft list map ip kube-proxy service-nodeports | grep -c "tcp . $stale_port comment") == 1 ]] ||
    { echo "the stale sync does not add exactly the stale element" >&2; return 1; }
  python3 "$replay" send "$work/unstale.batch" >/dev/null
  echo "replay checked: the sync leaves the table as loaded, the stale one adds one element"
  echo "$work/sync.batch" >"$work/select"
}

if [[ ${1:-} == --inside ]]; then
  work=$2 window=$3 mode=$4 portdrift=$5 services=$6
  ports_for "$services"
  if ((agent_port != 9741)); then
    sysctl -qw net.ipv4.ip_local_port_range="2000 4500"
  fi
  agent='' churn='' api=''
  # Whatever happens, nothing started here outlives the namespace's script.
  cleanup() {
    local pid
    for pid in $churn $agent $api; do kill "$pid" 2>/dev/null || true; done
    exec 3>&- 2>/dev/null || true
    wait 2>/dev/null || true
  }
  trap cleanup EXIT
  ip link set lo up
  if [[ $mode == nftables ]]; then
    setup_nftables "$work"
    order=n/a
  else
    setup_iptables "$work"
    order=grouped
  fi
  mkdir -p "$work/api"
  # The fake API server serves until its stdin closes: a FIFO held open by fd 3.
  mkfifo "$work/api/stdin"
  target/release/examples/fake_apiserver --objects "$work/node/cluster.json" --dir "$work/api" \
    <"$work/api/stdin" 2>"$work/api/log" &
  api=$!
  exec 3>"$work/api/stdin"
  for _ in $(seq 600); do [[ -f $work/api/kubeconfig ]] && break; sleep 0.1; done
  [[ -f $work/api/kubeconfig ]] || { echo "the fake API server did not start" >&2; exit 1; }
  "$portdrift" run --node worker-1 \
    --listen 127.0.0.1:$agent_port --findings-listen 127.0.0.1:$agent_port --interval 30s --kubeconfig "$work/api/kubeconfig" \
    --kube-proxy-healthz off --startup-jitter 0s --nodeport-range "$nodeport_range" 2>"$work/agent.log" &
  agent=$!
  scans() { curl -s 127.0.0.1:$agent_port/metrics | awk '/^portdrift_scans_total/ {print $2}'; }
  until [ "$(scans)" -ge 1 ] 2>/dev/null; do
    kill -0 "$agent" 2>/dev/null || { echo "the agent exited:" >&2; tail -5 "$work/agent.log" >&2; exit 1; }
    sleep 1
  done
  # Let what the start-up freed be returned, then take the idle size.
  sleep 10
  rss_idle=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
  # The peak from here on: the kernel's high-water mark, reset (Linux 4.0+), catches a
  # read's brief peak that a sample each second can miss.
  rss_startup=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
  echo 5 >"/proc/$agent/clear_refs"
  # kube-proxy's syncs: the selected one, once a second.
  python3 "$replay" loop --select "$work/select" >"$work/churn.out" 2>&1 &
  churn=$!
  ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$agent/stat"; }
  s0=$(scans) t0=$(ticks) rss_max=0 appeared=- gone=- appeared_all=() gone_all=()
  started=$(date +%s)
  while (($(date +%s) - started < window)); do
    kill -0 "$churn" 2>/dev/null || { echo "the syncs stopped:" >&2; cat "$work/churn.out" >&2; exit 1; }
    kill -0 "$agent" 2>/dev/null || { echo "the agent exited:" >&2; tail -5 "$work/agent.log" >&2; exit 1; }
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
    ((rss > rss_max)) && rss_max=$rss
    if [[ $appeared == - ]] && (($(date +%s) - started >= window / 2)); then
      # The stale rule comes and goes $rounds times, each after a random pause: a round
      # starts just after the scan that saw the last one gone, so without the pause
      # every round would land at the same point of the agent's cycle of scans, and
      # the time it shows depends on that point as much as on the agent.
      appeared_all=() gone_all=()
      for ((round = 0; round < rounds; round++)); do
        sleep $((RANDOM % 15))
        echo "$work/stale.batch" >"$work/select"
        appeared_all+=("$(wait_for_stale 1)")
        echo "$work/unstale.batch" >"$work/select"
        # Gone from a list it never reached says nothing.
        if [[ ${appeared_all[-1]} == '>'* ]]; then gone_all+=(-); else gone_all+=("$(wait_for_stale 0)"); fi
        echo "$work/sync.batch" >"$work/select"
      done
      appeared=$(median "${appeared_all[@]}") gone=$(median "${gone_all[@]}")
    fi
    sleep 1
  done
  t1=$(ticks) s1=$(scans) took=$(($(date +%s) - started))
  rss_hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
  # Where a scan's time went, as the agent's own histograms say (whole run, mean).
  curl -s 127.0.0.1:$agent_port/metrics | awk '
    /^portdrift_scan_phase_duration_seconds_sum/ { split($1, a, "\""); sum[a[2]] = $2 }
    /^portdrift_scan_phase_duration_seconds_count/ { split($1, a, "\""); n[a[2]] = $2 }
    END { for (p in sum) if (n[p] > 0) printf "    scan phase %s: %.0f ms mean over %d scans\n", p, 1000 * sum[p] / n[p], n[p] }'
  if [[ -n ${PERF:-} ]]; then
    # Where the agent's CPU goes while the syncs run (PERF=1; needs perf).
    perf record -q -g -p "$agent" -o "$work/perf.data" -- sleep 20 >/dev/null 2>&1 || true
    perf report -i "$work/perf.data" --stdio --no-children --percent-limit 2 2>/dev/null |
      grep -E '^ +[0-9.]+%' | head -25 | sed 's/^/    perf: /' || true
  fi
  kill -TERM "$churn" && wait "$churn" || { echo "the syncs failed:" >&2; cat "$work/churn.out" >&2; exit 1; }
  churn=''
  hz=$(getconf CLK_TCK)
  cpu_s=$(echo "scale=2; ($t1 - $t0) / $hz" | bc)
  cpu_pct=$(echo "scale=1; ($t1 - $t0) * 100 / $hz / $took" | bc)
  mib() { echo "scale=1; $1 / 1024" | bc; }
  syncs=$(cat "$work/churn.out")
  rate=$(sed -n 's/.* = \([0-9.]*\)\/s;.*/\1/p' <<<"$syncs")
  sync_ms=$(sed -n 's/.*took \([0-9]*\) ms mean.*/\1/p' <<<"$syncs")
  echo "syncs: $syncs"
  echo "over ${took} s of syncs: agent CPU $cpu_s s = $cpu_pct% of one core;" \
    "RSS $(mib "$rss_startup") MiB at most in start-up, $(mib "$rss_idle") MiB idle before the churn, at most $(mib "$rss_hwm") MiB during it (VmHWM; sampled each second: at most $(mib "$rss_max") MiB); $((s1 - s0)) scans;" \
    "stale rule in /findings after ${appeared} s, gone after ${gone} s (median of $rounds rounds: in ${appeared_all[*]}, gone ${gone_all[*]})"
  # What the agent said about the churn (netlink reads and notifications, overruns,
  # rules it could not read), counted.
  grep -iE 'netlink|notif|enobufs|overrun|resync|lost|timed.out|not checked' "$work/agent.log" |
    sed -E 's/^[^ ]* *//' | cut -c1-240 | sort | uniq -c | sort -rn | head -8 | sed 's/^/    agent log: /' || true
  if [[ -n ${AGENT_LOG:-} ]]; then cp "$work/agent.log" "$AGENT_LOG.$services.$mode"; fi
  echo "| $services | $mode | $order | $rate | $sync_ms | $cpu_pct | $(mib "$rss_idle") | $(mib "$rss_hwm") | $((s1 - s0)) | $appeared | $gone |" >"$work/row"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "bench-churn: needs root (it creates a network namespace)" >&2; exit 2; }
for tool in bc python3 nft nfacct iptables-nft-restore; do
  command -v "$tool" >/dev/null || { echo "bench-churn: needs $tool" >&2; exit 2; }
done
case $mode in
  both) modes=(iptables-nft nftables) ;;
  iptables-nft | nftables) modes=("$mode") ;;
  *) echo "bench-churn: MODE is iptables-nft, nftables or both, not $mode" >&2; exit 2 ;;
esac
if [[ -n ${PORTDRIFT:-} ]]; then
  portdrift=$(realpath "$PORTDRIFT")
  cargo build --release --quiet --example synth_node --example fake_apiserver
else
  portdrift=$PWD/target/release/portdrift
  cargo build --release --quiet --bin portdrift --example synth_node --example fake_apiserver
fi
[[ -x $portdrift ]] || { echo "bench-churn: $portdrift is not an executable" >&2; exit 2; }
work=''
trap 'if [[ -n $work ]]; then rm -rf "$work"; fi' EXIT
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); agent $portdrift; a sync a second, ${window} s a run"
rows=()
for services in "${@:-1000 10000}"; do
  for n in $services; do
    for m in "${modes[@]}"; do
      work=$(mktemp -d)
      ports_for "$n"
      target/release/examples/synth_node --services "$n" --first-node-port "$first_port" --grouped --out "$work/node" >/dev/null
      echo "== $n Services, $m mode"
      unshare -n bash "$0" --inside "$work" "$window" "$m" "$portdrift" "$n"
      rows+=("$(cat "$work/row")")
      rm -rf "$work"
      work=''
    done
  done
done
echo
echo "| Services | mode | chain order | syncs/s | sync (ms) | agent CPU (% of a core) | idle RSS (MiB) | peak RSS (MiB) | scans | stale in /findings (s) | stale gone (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
# The project's goals (docs/performance.md): no worse than the figures before (CPU under
# churn, time to /findings); at 50,000 Services, 150 MiB at rest and 5% of a core.
echo
echo "goals: agent CPU under churn <= 5% of a core and resting RSS <= 150 MiB at 50,000 Services; at 10,000, resting RSS <= 64 MiB; no figure worse than docs/performance.md's last"
