# shellcheck shell=bash
# Shared by the benchmark scripts (scripts/bench-*.sh), sourced from the repository
# root: starting the fake API server and the agent (release builds), and loading a
# network namespace's rules.

# A scratch directory in $work, and the background processes listed in $pids, removed
# and killed when the script exits.
bench_scratch() {
  work=$(mktemp -d)
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}

# Starts the fake API server in the background with ARGS, its stdin from STDIN (it
# serves until that closes) and its stderr to LOG; its pid in $apiserver_pid, and in
# $pids to be killed at exit.
bench_start_apiserver() {
  local stdin=$1 log=$2
  shift 2
  target/release/examples/fake_apiserver "$@" <"$stdin" 2>"$log" &
  # shellcheck disable=SC2034 # read by the caller
  apiserver_pid=$!
  pids+=("$!")
}

# Waits up to TRIES tenths of a second for DIR/kubeconfig, which the fake API server
# writes once it serves every object; else shows LOG (if given) and exits.
bench_await_apiserver() {
  local dir=$1 tries=$2 log=${3:-}
  for _ in $(seq "$tries"); do
    [[ -f $dir/kubeconfig ]] && return 0
    sleep 0.1
  done
  if [[ -n $log ]]; then cat "$log" >&2; fi
  echo "the fake API server did not start" >&2
  exit 1
}

# Inside the namespace: loads SAVE (iptables-nft-save output) with iptables-nft-restore,
# after creating the nfacct objects its rules count into (the restore fails without them).
bench_restore_iptables_nft() {
  local save=$1
  grep -o -- '--nfacct-name  *[^ ]*' "$save" | awk '{print $2}' | sort -u |
    while read -r name; do nfacct add "$name"; done
  iptables-nft-restore <"$save"
}

# Serves WORK/node/cluster.json (synth_node's) from the fake API server for SECONDS (it
# stops when its stdin closes), its kubeconfig and log in WORK/api; returns once it serves.
bench_serve_node_cluster() {
  local work=$1 seconds=$2
  mkdir -p "$work/api"
  (sleep "$seconds" | target/release/examples/fake_apiserver \
    --objects "$work/node/cluster.json" --dir "$work/api" 2>"$work/api/log") &
  bench_await_apiserver "$work/api" 600
}

# Starts `portdrift run` for worker-1 in the background against WORK/api's server:
# metrics on 127.0.0.1:9741, a scan every 30 s, its log in WORK/agent.log. WRAPPER...,
# if given, runs it (e.g. /usr/bin/time); the pid of what was started in $agent_job.
bench_start_agent() {
  local work=$1
  shift
  "$@" target/release/portdrift run --node worker-1 \
    --listen 127.0.0.1:9741 --findings-listen 127.0.0.1:9741 --interval 30s --kubeconfig "$work/api/kubeconfig" \
    --kube-proxy-healthz off --startup-jitter 0s --nodeport-range 20000-32767 2>"$work/agent.log" &
  # shellcheck disable=SC2034 # read by the caller
  agent_job=$!
}

# The scans the agent of bench_start_agent has run, from its metrics.
bench_scans() {
  curl -s 127.0.0.1:9741/metrics | awk '/^portdrift_scans_total/ {print $2}'
}

# Waits until that agent has finished its start-up: the initial API lists and the first
# full read of the rules.
bench_await_first_scan() {
  until [ "$(bench_scans)" -ge 1 ] 2>/dev/null; do
    sleep 1
  done
}

# The CPU the kernel accounts to PID and its waited-for children: utime, stime, cutime
# and cstime of /proc/PID/stat, in clock ticks.
bench_cpu_ticks() {
  awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"
}

# Exits (2) unless it runs as root with bc, as the namespace benchmarks NAME need.
bench_require_root_and_bc() {
  local name=$1
  [[ $(id -u) -eq 0 ]] || { echo "$name: needs root (it creates a network namespace)" >&2; exit 2; }
  command -v bc >/dev/null || { echo "$name: needs bc" >&2; exit 2; }
}

# The machine, for the header line: `N cores: CPU MODEL`.
bench_machine() {
  echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
}
