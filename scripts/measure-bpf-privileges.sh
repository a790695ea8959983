#!/bin/bash
# Measures what reading a pinned BPF map with bpftool needs, the way the agent reads
# Cilium's service maps (`bpftool -j map show pinned P`, `bpftool -j map dump pinned P`):
# which capabilities, whether a non-root user can, whether a read-only bind mount of the
# BPF filesystem is enough, and what a map carrying BTF changes. A map created here
# (`bpftool map create`, without the capability) is the control: it must fail wherever
# the capabilities were dropped, proving the drop took effect.
#
# Root only. Everything happens in a private mount namespace, on a fresh BPF filesystem
# mounted on a temporary directory: the host's /sys/fs/bpf is never touched, and the
# maps go away with the namespace. Safe to run again. Needs bpftool, setpriv
# (util-linux), capsh (libcap2-bin) and, for the BTF case, python3.
#
#   sudo scripts/measure-bpf-privileges.sh          # the table
#   sudo scripts/measure-bpf-privileges.sh -v       # and every command with its output
#
# Not measured here: the container runtime's seccomp profile (see docs/install.md,
# "Cilium nodes"); this script runs no container.
set -euo pipefail

verbose=${1:-}
if [ "$(id -u)" -ne 0 ]; then
	echo "measure-bpf-privileges: run as root" >&2
	exit 1
fi
for tool in bpftool setpriv capsh unshare; do
	command -v "$tool" >/dev/null || { echo "measure-bpf-privileges: $tool is not installed" >&2; exit 1; }
done

# Outside: make a scratch directory and re-run this script in a private mount namespace.
if [ -z "${PORTDRIFT_BPF_MEASURE_INNER:-}" ]; then
	scratch=$(mktemp -d -t portdrift-bpf-measure.XXXXXX)
	trap 'rm -rf "$scratch"' EXIT
	# The non-root case must reach the pins (bpftool says "directory not in bpf file
	# system" when it cannot stat their directory).
	chmod 0755 "$scratch"
	PORTDRIFT_BPF_MEASURE_INNER=$scratch unshare --mount --propagation private "$0" "$verbose"
	exit $?
fi

scratch=$PORTDRIFT_BPF_MEASURE_INNER
fs=$scratch/fs   # the BPF filesystem
ro=$scratch/ro   # the same, through a read-only bind mount
log=$scratch/log
mkdir -p "$fs" "$ro"
mount -t bpf bpf "$fs"
mount --bind "$fs" "$ro"
mount -o remount,bind,ro "$ro"
trap 'umount -R "$late" "$host" "$ro" "$fs" 2>/dev/null || true' EXIT

globals=tc/globals
mkdir -p "$fs/$globals"
name=cilium_lb4_services_v2
pin=$fs/$globals/$name
# As Cilium's: hash, key 12, value 12 (lb4_key, lb4_service), 65536 entries.
bpftool map create "$pin" type hash key 12 value 12 entries 65536 name cilium_lb4_serv
# 10.0.0.1:30000/TCP -> service 1, one backend (the bytes matter little here).
bpftool map update pinned "$pin" \
	key hex 0a 00 00 01 75 30 00 00 06 00 00 00 \
	value hex 01 00 00 00 01 00 01 00 00 00 00 00
# The same map pinned again, owned by nobody, for the non-root case.
bpftool map pin pinned "$pin" "$fs/$globals/${name}_nobody"
chown 65534:65534 "$fs/$globals/${name}_nobody"

# A BPF filesystem mounted after the container started, as Cilium's init container may
# do: the container's view is a read-only bind of the host directory, made a slave
# (Kubernetes' readOnly: true with mountPropagation: HostToContainer), and the host then
# mounts bpffs below it. The same map is pinned there.
host=$scratch/host # stands for the host's /sys/fs
late=$scratch/late # the container's /sys/fs/bpf
mkdir -p "$host" "$late"
mount -t tmpfs tmpfs "$host"
mount --make-shared "$host"
mkdir "$host/bpf"
mount --bind "$host/bpf" "$late"
mount -o remount,bind,ro "$late"
mount --make-rslave "$late"
mount -t bpf bpf "$host/bpf"
mkdir -p "$host/bpf/$globals"
bpftool map pin pinned "$pin" "$host/bpf/$globals/$name"

# A hash map like the one above that carries BTF (key and value typed as a struct of
# three u32), created with the bpf(2) syscall directly: bpftool cannot attach BTF.
btf_pin=$fs/$globals/${name}_btf
have_btf=no
if command -v python3 >/dev/null && python3 - "$btf_pin" <<'PY'
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    fd = libc.syscall(321, cmd, buf, 128)  # __NR_bpf on x86_64
    if fd < 0:
        raise OSError(ctypes.get_errno(), "bpf(%d)" % cmd)
    return fd
names = b"\0u32\0k\0a\0b\0c\0"
types = struct.pack("<IIII", 1, 1 << 24, 4, 32)            # [1] int u32
types += struct.pack("<III", 5, (4 << 24) | 3, 12)         # [2] struct k {a, b, c}
for i, off in enumerate((7, 9, 11)):
    types += struct.pack("<III", off, 1, 32 * i)
blob = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(names)) + types + names
raw = ctypes.create_string_buffer(blob, len(blob))
btf = bpf(18, struct.pack("<QQIII", ctypes.addressof(raw), 0, len(blob), 0, 0))  # BPF_BTF_LOAD
m = bpf(0, struct.pack("<IIIIIII16sIIII", 1, 12, 12, 65536, 0, 0, 0,          # BPF_MAP_CREATE
                       b"cilium_lb4_serv", 0, btf, 2, 2))
path = ctypes.create_string_buffer(sys.argv[1].encode())
bpf(6, struct.pack("<QII", ctypes.addressof(path), m, 0))                      # BPF_OBJ_PIN
PY
then
	have_btf=yes
	bpftool map update pinned "$btf_pin" key hex 0a 00 00 01 75 30 00 00 06 00 00 00 \
		value hex 01 00 00 00 01 00 01 00 00 00 00 00
fi

# One attempt: the command and what it said go to the log; the table gets ok or the
# error's first line.
attempt() {
	local out rc
	out=$("$@" 2>&1) && rc=0 || rc=$?
	{
		printf '$ %s\n' "$*"
		printf '%s\n' "$out" | head -c 600
		printf '[exit %s]\n\n' "$rc"
	} >>"$log"
	if [ "$rc" -eq 0 ]; then
		echo ok
	else
		# bpftool -j prints {"error":"..."}; plain bpftool prints "Error: ...".
		printf '%s\n' "$out" | sed -n 's/^{"error":"\(.*\)"}$/\1/p; s/^Error: //p' | head -n 1 |
			sed "s|$scratch/||g"
	fi
}

# The ways to run a command, each with what it runs as.
declare -A as
as[root]=""
as[no-bpf-sysadmin]="setpriv --bounding-set -bpf,-sys_admin --inh-caps -bpf,-sys_admin --ambient-caps -bpf,-sys_admin --"
as[capsh-no-bpf-sysadmin]="capsh --drop=cap_bpf,cap_sys_admin --"
as[no-caps]="setpriv --bounding-set -all --inh-caps -all --ambient-caps -all --"
as[deployed]="setpriv --bounding-set -all,+net_admin,+net_raw --inh-caps -all --ambient-caps -all --no-new-privs --"
as[deployed+bpf]="setpriv --bounding-set -all,+net_admin,+net_raw,+bpf --inh-caps -all --ambient-caps -all --no-new-privs --"
as[nobody]="setpriv --reuid 65534 --regid 65534 --clear-groups --bounding-set -all --inh-caps -all --ambient-caps -all --no-new-privs --"
as[only-bpf]="setpriv --bounding-set -all,+bpf --inh-caps -all --ambient-caps -all --"
as[only-sysadmin]="setpriv --bounding-set -all,+sys_admin --inh-caps -all --ambient-caps -all --"

# run AS CMD...: CMD as AS (capsh takes one shell command line after --).
run() {
	local who=$1
	shift
	if [ "$who" = capsh-no-bpf-sysadmin ]; then
		attempt capsh --drop=cap_bpf,cap_sys_admin -- -c "$*"
	else
		# shellcheck disable=SC2086 # the prefix is a word list
		attempt ${as[$who]} "$@"
	fi
}

caps_of() {
	if [ "$1" = capsh-no-bpf-sysadmin ]; then
		capsh --drop=cap_bpf,cap_sys_admin -- -c 'grep CapEff /proc/self/status' | awk '{print $2}'
	else
		# shellcheck disable=SC2086
		${as[$1]} grep CapEff /proc/self/status | awk '{print $2}'
	fi
}

n=0
row() { # row AS PIN-DIR PIN-NAME LABEL
	local who=$1 dir=$2 pinname=$3 label=$4 show dump create
	n=$((n + 1))
	show=$(run "$who" bpftool -j map show pinned "$dir/$globals/$pinname")
	dump=$(run "$who" bpftool -j map dump pinned "$dir/$globals/$pinname")
	create=$(run "$who" bpftool map create "$dir/$globals/control_$n" type hash key 4 value 4 entries 1 name control)
	printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$who" "$(caps_of "$who")" "$show" "$dump" "$create"
}

echo "kernel $(uname -r); $(bpftool version | head -n 1); $(sysctl kernel.unprivileged_bpf_disabled)"
echo
echo "| map, path | runs as | CapEff | map show | map dump | map create (control) |"
echo "|---|---|---|---|---|---|"
for who in root no-bpf-sysadmin capsh-no-bpf-sysadmin no-caps deployed deployed+bpf; do
	row "$who" "$fs" "$name" "no BTF, read-write bpffs"
done
row nobody "$fs" "$name" "no BTF, pin root:root 0600"
row nobody "$fs" "${name}_nobody" "no BTF, pin chowned to 65534"
for who in root no-caps deployed deployed+bpf; do
	row "$who" "$ro" "$name" "no BTF, read-only bind mount"
done
for who in deployed deployed+bpf; do
	row "$who" "$late" "$name" "no BTF, bpffs mounted later below a read-only HostToContainer mount"
done
if [ "$have_btf" = yes ]; then
	for who in root no-caps deployed+bpf only-bpf only-sysadmin; do
		row "$who" "$fs" "${name}_btf" "with BTF, read-write bpffs"
	done
else
	echo "| with BTF | (skipped: python3 missing or BTF load failed) | | | | |"
fi
echo
if command -v strace >/dev/null; then
	printf 'bpftool opens the pin with: %s\n' "$(strace -f -e trace=bpf bpftool -j map dump pinned "$ro/$globals/$name" 2>&1 >/dev/null |
		grep -o 'BPF_OBJ_GET, {[^}]*}' | head -n 1 | sed "s|$scratch/||g")"
fi
echo "Not measured: the container runtime's seccomp profile (no runtime runs here)."
if [ "$verbose" = -v ]; then
	echo
	echo "== every command and what it said"
	cat "$log"
fi
