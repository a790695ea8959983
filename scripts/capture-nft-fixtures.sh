#!/bin/sh
# Regenerates the nftables fixtures under testdata/nft/ with the real nft and
# iptables-nft. Each testdata/nft/NAME.nft (plus NAME.iptables, an iptables-restore
# input, when present) is loaded into a private, throw-away network namespace, and the
# ruleset is captured the ways a node bundle may hold it:
#   NAME.json          nft -j list ruleset
#   NAME.txt           nft list ruleset
#   NAME.handles.txt   nft -a list ruleset (with rule handles, for repair identities)
#   NAME.ip-table.json nft -j list table ip kube-proxy
# Needs root, nft and iptables-nft. Never touches the host's network namespace.
set -eu
cd "$(dirname "$0")/../testdata/nft"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for script in *.nft; do
	name=${script%.nft}
	# shellcheck disable=SC2016 # expanded by the inner shell
	if ! unshare -n sh -euc '
		name=$1
		if [ -f "$name.iptables" ]; then iptables-nft-restore < "$name.iptables"; fi
		nft -f "$name.nft"
		nft -j list ruleset > "$name.json"
		nft list ruleset > "$name.txt"
		nft -a list ruleset > "$name.handles.txt"
		nft -j list table ip kube-proxy > "$name.ip-table.json"
	' capture "$name" 2> "$errors"; then
		cat "$errors" >&2
		echo "capture of $name failed" >&2
		exit 1
	fi
	# nft warns on stderr about iptables-nft's tables; anything else is worth seeing.
	grep -v 'is managed by iptables-nft, do not touch' "$errors" >&2 || true
	echo "captured $name: $(wc -c < "$name.json") bytes of JSON, $(wc -l < "$name.txt") lines of text"
done
