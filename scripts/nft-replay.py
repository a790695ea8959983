#!/usr/bin/env python3
"""Replays kube-proxy's syncs fast enough to reach one a second on a large node.

A kube-proxy sync rewrites KUBE-NODEPORTS with `iptables-restore --noflush`, and with
iptables-nft that is one nf_tables transaction: "delete every rule of the chain" then
"append each rule", committed at once. `iptables-nft-restore` itself cannot repeat that
every second on a large node: before it writes, it fetches and parses the whole ruleset
(at 10,000 Services about 9 s, mostly in user space), so a loop of it measures the tool,
not a node under kube-proxy's churn. What the agent sees is only the kernel's side: the
transaction and its notifications. So this tool asks the kernel once for the chain's
rules (an NFT_MSG_GETRULE dump), turns them into the same transaction (one
NFT_MSG_DELRULE naming the chain, then one NFT_MSG_NEWRULE per dumped rule, inside one
nfnetlink batch), and sends those prebuilt bytes every second.

kube-proxy's nftables mode is played the same way: a sync after endpoints moved deletes
and re-adds elements of `service-nodeports` (dumped with NFT_MSG_GETSETELEM, replayed as
one NFT_MSG_DELSETELEM and one NFT_MSG_NEWSETELEM) and rewrites per-Service chains. Its
own `nft -f` of such a sync takes ~1.1 s at 10,000 Services, most of it listing the
table's chains and maps before it writes.

Python's standard library is enough (an AF_NETLINK socket and struct), so the benchmark
needs no extra build step or dependency; the per-sync work here is one sendmsg and
reading the acks, the rest is the kernel's.

  nft-replay.py capture [--family ip] [--chain TABLE:CHAIN ...]
                        [--map TABLE:MAP --replace N --add-port P --remove-port P] --out FILE
      dumps the chains (and map) and writes the batch: each chain emptied, then its
      rules appended in their dumped order; the N lowest ports' elements deleted and
      added again; port P's element (as dumped) added, then removed
  nft-replay.py send FILE
      commits the batch once and prints how long the kernel took
  nft-replay.py loop --select CTL [--interval 1]
      every interval, commits the batch whose path CTL holds (re-read each time, so the
      caller can switch to another batch, e.g. one with a stale rule); on SIGTERM or
      SIGINT prints the syncs done, the rate reached and the time a sync took
A refused batch (any error ack) ends the tool with status 1 and the kernel's error.
"""

import argparse
import os
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
NETLINK_CAP_ACK = 10
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_CREATE = 0x400
NLM_F_APPEND = 0x800
NLMSG_ERROR = 2
NLMSG_DONE = 3

NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_NEWRULE = 6
NFT_MSG_GETRULE = 7
NFT_MSG_DELRULE = 8
NFT_MSG_NEWSETELEM = 12
NFT_MSG_GETSETELEM = 13
NFT_MSG_DELSETELEM = 14

NFTA_RULE_TABLE = 1
NFTA_RULE_CHAIN = 2
NFTA_RULE_HANDLE = 3
NFTA_RULE_POSITION = 6
NFTA_RULE_ID = 8
NFTA_RULE_POSITION_ID = 9
NFTA_SET_ELEM_LIST_TABLE = 1
NFTA_SET_ELEM_LIST_SET = 2
NFTA_SET_ELEM_LIST_ELEMENTS = 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY = 1
NFTA_SET_ELEM_TIMEOUT = 4
NFTA_SET_ELEM_EXPIRATION = 5
NFTA_DATA_VALUE = 1
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF  # drops NLA_F_NESTED / NLA_F_NET_BYTEORDER

FAMILIES = {"ip": 2, "ip6": 10, "inet": 1}

# Big enough for the whole batch of a 10,000-Service KUBE-NODEPORTS (about 15 MB) and
# for a dump's replies; the FORCE options ignore net.core.[rw]mem_max (needs
# CAP_NET_ADMIN, which the benchmark has).
BUFFER = 256 << 20


def align4(n):
    return (n + 3) & ~3


def attr(kind, payload):
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (align4(len(payload)) - len(payload))


def strz(s):
    return s.encode() + b"\0"


def message(msg_type, flags, seq, family, payload, res_id=0):
    body = struct.pack("=BBH", family, 0, socket.htons(res_id)) + payload
    return struct.pack("=IHHII", 16 + len(body), msg_type, flags, seq, 0) + body


def nft_type(msg):
    return (NFNL_SUBSYS_NFTABLES << 8) | msg


def attrs(data):
    """(type, raw attribute bytes including its header) for each attribute."""
    out = []
    off = 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        out.append((kind & NLA_TYPE_MASK, data[off : off + align4(length)]))
        off += align4(length)
    return out


def messages(data):
    off = 0
    while off + 16 <= len(data):
        length, msg_type, flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
        if length < 16:
            raise SystemExit(f"nft-replay: malformed netlink reply (length {length})")
        yield msg_type, flags, seq, data[off + 16 : off + length]
        off += align4(length)


def open_socket():
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER)
    # Errors without a copy of the refused request (a 20,000-message batch refused whole
    # would otherwise echo it all), but with the kernel's extended error text.
    sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
    sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
    sock.bind((0, 0))
    return sock


def error_text(payload):
    """errno and, if the kernel gave one, its extended-ack message."""
    code = -struct.unpack_from("=i", payload, 0)[0]
    text = os.strerror(code)
    # nlmsgerr: error, then the request's header (capped: no payload), then ext-ack attrs.
    for kind, raw in attrs(payload[4 + 16 :]):
        if kind == 1:  # NLMSGERR_ATTR_MSG
            text += ": " + raw[4:].split(b"\0", 1)[0].decode(errors="replace")
    return code, text


def dump(sock, family, msg, selector, what):
    """The (type, payload) of each answer to a dump, until its end; an error ends the
    script."""
    sock.send(message(nft_type(msg), NLM_F_REQUEST | NLM_F_DUMP, 1, family, selector))
    while True:
        data = sock.recv(BUFFER)
        for msg_type, _flags, _seq, payload in messages(data):
            if msg_type == NLMSG_DONE:
                return
            if msg_type == NLMSG_ERROR:
                code, text = error_text(payload)
                if code:
                    raise SystemExit(f"nft-replay: dumping {what}: {text}")
                continue
            yield msg_type, payload


def dump_chain(sock, family, table, chain):
    """The chain's rules as NFT_MSG_NEWRULE payloads (attributes), in the kernel's order."""
    selector = attr(NFTA_RULE_TABLE, strz(table)) + attr(NFTA_RULE_CHAIN, strz(chain))
    rules = []
    for msg_type, payload in dump(sock, family, NFT_MSG_GETRULE, selector, f"{table} {chain}"):
        if msg_type != nft_type(NFT_MSG_NEWRULE):
            continue
        names = {}
        kept = []
        for kind, raw in attrs(payload[4:]):
            if kind in (NFTA_RULE_TABLE, NFTA_RULE_CHAIN):
                names[kind] = raw[4:].split(b"\0", 1)[0].decode()
            # The handle and position belong to this copy of the rule: the new
            # rules get their own handles and are appended in the dumped order.
            if kind not in (NFTA_RULE_HANDLE, NFTA_RULE_POSITION, NFTA_RULE_ID, NFTA_RULE_POSITION_ID):
                kept.append(raw)
        # Older kernels ignore the dump's selector: filter here as well.
        if names.get(NFTA_RULE_TABLE) == table and names.get(NFTA_RULE_CHAIN) == chain:
            rules.append(b"".join(kept))
    return selector, rules


def dump_elements(sock, family, table, set_name):
    """{port: (key-only element, whole element)} of a `proto . port` map, as
    NFTA_LIST_ELEM attributes ready to be deleted or added again."""
    selector = attr(NFTA_SET_ELEM_LIST_TABLE, strz(table)) + attr(NFTA_SET_ELEM_LIST_SET, strz(set_name))
    elements = {}
    for _, payload in dump(sock, family, NFT_MSG_GETSETELEM, selector, f"{table} {set_name}"):
        for kind, raw in attrs(payload[4:]):
            if kind != NFTA_SET_ELEM_LIST_ELEMENTS:
                continue
            for _, elem in attrs(raw[4:]):
                parts = attrs(elem[4:])
                key = next(r for k, r in parts if k == NFTA_SET_ELEM_KEY)
                value = next(r for k, r in attrs(key[4:]) if k == NFTA_DATA_VALUE)
                # inet_proto . inet_service: the protocol, then the port (network
                # order), each in a 4-byte register.
                port = struct.unpack_from(">H", value, 8)[0]
                # A timeout is the set's business, not the element's content.
                whole = b"".join(r for k, r in parts if k not in (NFTA_SET_ELEM_TIMEOUT, NFTA_SET_ELEM_EXPIRATION))
                elements[port] = (attr(NFTA_LIST_ELEM | NLA_F_NESTED, key), attr(NFTA_LIST_ELEM | NLA_F_NESTED, whole))
    return selector, elements


def element_requests(selector, elems, msg):
    """One NEWSETELEM or DELSETELEM carrying all the given elements."""
    return (msg, NLM_F_CREATE if msg == NFT_MSG_NEWSETELEM else 0,
            selector + attr(NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, b"".join(elems)))


def capture(args):
    """Dumps the chains' rules and the map's elements and writes one batch (one
    transaction): per chain, DELRULE(chain) + NEWRULE(each rule), as one
    `iptables-restore` of those chains; the replaced elements deleted and added again, as
    a kube-proxy nftables-mode sync does with elements whose endpoints moved."""
    family = FAMILIES[args.family]
    sock = open_socket()
    requests = []
    counts = []
    chains = {}
    for spec in args.chain:
        table, _, chain = spec.partition(":")
        selector, rules = dump_chain(sock, family, table, chain)
        if not rules:
            raise SystemExit(f"nft-replay: {args.family} {table} {chain} has no rules (or does not exist)")
        # Only the chain: the kernel deletes every rule in it (a restore's `:CHAIN`).
        requests.append((NFT_MSG_DELRULE, 0, selector))
        requests += [(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, rule) for rule in rules]
        chains[f"{table} {chain}"] = len(rules)
    if len(chains) <= 2:
        counts += [f"{n} rules in {name}" for name, n in chains.items()]
    elif chains:
        counts.append(f"{len(chains)} chains ({sum(chains.values())} rules) rewritten")
    if args.map:
        table, _, set_name = args.map.partition(":")
        selector, elements = dump_elements(sock, family, table, set_name)
        special = set(args.add_port + args.remove_port)
        missing = special - elements.keys()
        if missing:
            raise SystemExit(f"nft-replay: {table} {set_name} has no element for port(s) {sorted(missing)}")
        # The lowest ports, so that captures taken at different times replace the same ones.
        replaced = [p for p in sorted(elements) if p not in special][: args.replace]
        if replaced:
            requests.append(element_requests(selector, [elements[p][0] for p in replaced], NFT_MSG_DELSETELEM))
            requests.append(element_requests(selector, [elements[p][1] for p in replaced], NFT_MSG_NEWSETELEM))
        # Adding before removing makes the removal valid whether the element is there or not.
        if args.add_port:
            requests.append(element_requests(selector, [elements[p][1] for p in args.add_port], NFT_MSG_NEWSETELEM))
        if args.remove_port:
            requests.append(element_requests(selector, [elements[p][0] for p in args.remove_port], NFT_MSG_DELSETELEM))
        counts.append(f"{len(replaced)} elements of {table} {set_name} replaced"
                      + (f", port(s) {args.add_port} added" if args.add_port else "")
                      + (f", port(s) {args.remove_port} removed" if args.remove_port else ""))
    if not requests:
        raise SystemExit("nft-replay: nothing to capture (no --chain, no --map)")
    seq = 1
    batch = [message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, b"", NFNL_SUBSYS_NFTABLES)]
    for i, (msg, flags, payload) in enumerate(requests):
        seq += 1
        # An ack for the last request only: errors are reported whatever the flag, and
        # 20,000 success acks a second would be the tool's cost, not kube-proxy's.
        flags |= NLM_F_REQUEST | (NLM_F_ACK if i == len(requests) - 1 else 0)
        batch.append(message(nft_type(msg), flags, seq, family, payload))
    seq += 1
    batch.append(message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, b"", NFNL_SUBSYS_NFTABLES))
    data = b"".join(batch)
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"{args.family}: {'; '.join(counts)}; a batch of {len(data)} bytes")


def last_ack_seq(batch):
    """The sequence number of the request that asks for an ack (the last rule)."""
    last = None
    for _msg_type, flags, seq, _payload in messages(batch):
        if flags & NLM_F_ACK:
            last = seq
    if last is None:
        raise SystemExit("nft-replay: the batch asks for no ack (not written by `capture`?)")
    return last


def commit(sock, batch, ack_seq):
    """Sends one batch; returns once the kernel acked its last request, fails on any error."""
    sock.send(batch)
    # The kernel processes the batch within sendmsg, so its replies are already queued;
    # still, wait for the ack (a busy machine) rather than assume it.
    while True:
        data = sock.recv(1 << 20)
        for msg_type, _flags, seq, payload in messages(data):
            if msg_type != NLMSG_ERROR:
                continue
            code, text = error_text(payload)
            if code:
                raise SystemExit(f"nft-replay: the kernel refused the batch (request {seq}): {text}")
            if seq == ack_seq:
                return


def send(args):
    with open(args.batch, "rb") as f:
        batch = f.read()
    sock = open_socket()
    start = time.monotonic()
    commit(sock, batch, last_ack_seq(batch))
    print(f"committed {len(batch)} bytes in {(time.monotonic() - start) * 1000:.0f} ms")


def loop(args):
    sock = open_socket()
    loaded = {}
    took = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    start = time.monotonic()
    tick = start
    while not stop:
        with open(args.select) as f:
            path = f.read().strip()
        if path not in loaded:
            with open(path, "rb") as f:
                batch = f.read()
            loaded[path] = (batch, last_ack_seq(batch))
        t0 = time.monotonic()
        try:
            commit(sock, *loaded[path])
        except OSError as e:
            raise SystemExit(f"nft-replay: {e}") from e
        took.append(time.monotonic() - t0)
        # One sync per interval, as kube-proxy's minSyncPeriod allows; a sync longer
        # than that is followed at once by the next, never by two.
        tick = max(tick + args.interval, time.monotonic())
        while not stop and time.monotonic() < tick:
            time.sleep(min(0.05, max(0.0, tick - time.monotonic())))
    elapsed = time.monotonic() - start
    if took:
        ms = sorted(t * 1000 for t in took)
        print(
            f"{len(took)} syncs in {elapsed:.0f} s = {len(took) / elapsed:.2f}/s;"
            f" a sync took {sum(ms) / len(ms):.0f} ms mean, {ms[len(ms) // 2]:.0f} median, {ms[-1]:.0f} max",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("capture")
    p.add_argument("--family", default="ip", choices=sorted(FAMILIES))
    p.add_argument("--chain", action="append", default=[], metavar="TABLE:CHAIN", help="rewrite this chain")
    p.add_argument("--map", metavar="TABLE:MAP", help="a `proto . port` map whose elements to replace, add or remove")
    p.add_argument("--replace", type=int, default=0, metavar="N", help="replace the N lowest ports' elements")
    p.add_argument("--add-port", type=int, action="append", default=[], metavar="PORT", help="(re)add this element")
    p.add_argument("--remove-port", type=int, action="append", default=[], metavar="PORT", help="then remove it")
    p.add_argument("--out", required=True)
    p.set_defaults(run=capture)
    p = sub.add_parser("send")
    p.add_argument("batch")
    p.set_defaults(run=send)
    p = sub.add_parser("loop")
    p.add_argument("--select", required=True, help="file holding the path of the batch to commit")
    p.add_argument("--interval", type=float, default=1.0)
    p.set_defaults(run=loop)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())
