#!/usr/bin/env bash
# Re-records the netlink decoders' fixtures (tests/fixtures/netlink): as root, each
# integration test below loads its rules into a private network namespace (never the
# host's), records the raw nf_tables messages a live read decodes there, checks that
# decoding them again gives what the live read gave, and writes them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "needs root (network namespaces, nf_tables)" >&2
    exit 1
fi
PORTDRIFT_CAPTURE_FIXTURES=1 CI=true cargo test --test iptables_netlink --test nft_netlink \
    recorded_messages_decode_as_the_live_read
ls -l tests/fixtures/netlink
