#!/usr/bin/env python3
"""An independent, deliberately simple reference reading of the snapshot bundles.

It parses the *captured* files of a bundle (the save dumps, nft.json, proc/net,
cluster.json, node) -- not the generator's model -- applies the finding semantics
written down for portdrift's bundles, and compares the result with the bundle's
hand-written expected.json. It exists to catch mistakes in the bundles themselves
(a "clean" node that is not clean, an expected finding that the dumps do not
support); it is not portdrift and cuts corners portdrift must not (no unparsed
reporting, no streaming, no grace windows).

    scripts/check-testdata.py [bundle...]     exit 1 on any difference
    scripts/check-testdata.py --print BUNDLE  print what it finds, as expected.json
"""

from __future__ import annotations

import base64
import collections
import hashlib
import ipaddress
import json
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NP_RANGE = range(30000, 32768)
SVC_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-")
NFT_PREFIXES = ("service-", "local-", "external-", "firewall-", "endpoint-")
BACKEND_ORDER = {"iptables-nft": 0, "nftables": 1, "iptables-legacy": 2}


def b32(s, n):
    return base64.b32encode(hashlib.sha256(s.encode()).digest()).decode()[:n]


def hostport(ip, port):
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


# ------------------------------------------------------------------ desired state


class Desired:
    def __init__(self, cluster, node):
        self.node = node
        self.ports = []  # dicts
        self.allocated = set()  # (proto, port) incl. skipped services
        self.hc_ports = set()
        items = cluster["items"]
        slices = [i for i in items if i["kind"] == "EndpointSlice"]
        for svc in (i for i in items if i["kind"] == "Service"):
            spec, meta = svc["spec"], svc["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            for p in spec.get("ports", []):
                if p.get("nodePort"):
                    self.allocated.add((p["protocol"].lower(), p["nodePort"]))
            if spec.get("healthCheckNodePort"):
                self.hc_ports.add(spec["healthCheckNodePort"])
            cips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
            if spec.get("type") == "ExternalName" or not cips or cips[0] in ("None", ""):
                continue
            if "service.kubernetes.io/service-proxy-name" in meta.get("labels", {}):
                continue
            fams = ["ipv6" if ":" in ip else "ipv4" for ip in cips]
            my_slices = [s for s in slices if s["metadata"]["namespace"] == meta["namespace"]
                         and s["metadata"].get("labels", {}).get("kubernetes.io/service-name") == meta["name"]]
            for p in spec.get("ports", []):
                pname = p.get("name", "")
                proto = p["protocol"].lower()
                spn = f"{key}:{pname}" if pname else key
                d = {"service": key, "spn": spn, "proto": proto, "node_port": p.get("nodePort"),
                     "families": fams, "etp_local": spec.get("externalTrafficPolicy") == "Local"
                     and bool(p.get("nodePort") or spec.get("externalIPs")
                              or svc.get("status", {}).get("loadBalancer", {}).get("ingress")),
                     "eps": {}}
                for fam in fams:
                    at = "IPv6" if fam == "ipv6" else "IPv4"
                    eps = {}
                    for s in my_slices:
                        if s["addressType"] != at:
                            continue
                        for sp in s.get("ports") or []:
                            if (sp.get("name") or "") != pname or sp.get("protocol", "TCP").lower() != proto \
                                    or not sp.get("port"):
                                continue
                            for e in s.get("endpoints") or []:
                                c = e.get("conditions", {})
                                ready = c.get("ready") is not False
                                serving = c.get("serving", c.get("ready")) is not False
                                term = c.get("terminating") is True
                                t = hostport(e["addresses"][0], sp["port"])
                                old = eps.get(t)
                                if old is None or (old["term"] and not term):
                                    eps[t] = {"ready": ready, "serving": serving, "term": term,
                                              "local": e.get("nodeName") == node}
                    listed = set(eps)
                    cluster_set = {t for t, e in eps.items() if e["ready"]} or \
                        {t for t, e in eps.items() if e["serving"] and e["term"]}
                    local_set = set()
                    if d["etp_local"]:
                        local_set = {t for t, e in eps.items() if e["ready"] and e["local"]} or \
                            {t for t, e in eps.items() if e["serving"] and e["term"] and e["local"]}
                    has = any(e["ready"] or (e["serving"] and e["term"]) for e in eps.values())
                    d["eps"][fam] = {"listed": listed, "usable": cluster_set | local_set, "has": has,
                                     "cluster": cluster_set, "local": local_set}
                self.ports.append(d)
        self.by_hash = {b32(d["spn"] + d["proto"], 16): d for d in self.ports}
        self.by_spn = {(d["spn"], d["proto"]): d for d in self.ports}

    def owners(self, proto, port, fam=None):
        return [d for d in self.ports if d["proto"] == proto and d["node_port"] == port
                and (fam is None or fam in d["families"])]


# ------------------------------------------------------------------ observed: iptables


class Source:
    def __init__(self, backend, family):
        self.backend, self.family = backend, family
        self.nat_np = []  # dispatch rules: dict(proto, port, dest, named, targets:set, dnat_ids:set, text)
        self.filter_np = []  # dict(proto, port, verdict, named)
        self.orphans = []  # dict(chain, named)
        self.kube_proxy = False


def parse_iptables(path, backend, family, desired):
    tables = collections.defaultdict(lambda: collections.defaultdict(list))
    cur = None
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("*"):
            cur = line[1:]
        elif line.startswith(":"):
            tables[cur][line[1:].split()[0]]
        elif line.startswith("-A "):
            toks = shlex.split(line)
            tables[cur][toks[1]].append((toks, line))
    src = Source(backend, family)
    nat, flt = tables.get("nat", {}), tables.get("filter", {})
    src.kube_proxy = "KUBE-SERVICES" in nat or "KUBE-NODEPORTS" in nat

    def opt(toks, name):
        for i, t in enumerate(toks):
            if t == name and i + 1 < len(toks):
                return toks[i + 1]
        return None

    def comment_spn(toks):
        c = opt(toks, "--comment")
        if c is None:
            return None
        c = c.split(" ")[0]
        return c if "/" in c else None

    def named(toks, chain):
        proto = opt(toks, "-p")
        spn = comment_spn(toks)
        if spn:
            return spn, proto
        if chain and chain.startswith(SVC_PREFIXES[:4]):
            d = desired.by_hash.get(chain.split("-", 2)[2])
            if d:
                return d["spn"], d["proto"]
        return None

    def walk(chain, seen, skip=None):
        for i, (toks, _) in enumerate(nat.get(chain, [])):
            tgt = opt(toks, "-j")
            if tgt == "DNAT":
                yield (chain, i), opt(toks, "--to-destination")
            elif tgt in nat and tgt not in seen and not (skip and tgt.startswith(skip)):
                seen.add(tgt)
                yield from walk(tgt, seen, skip)

    for toks, line in nat.get("KUBE-NODEPORTS", []):
        proto, port = opt(toks, "-p"), int(opt(toks, "--dport"))
        d = opt(toks, "-d")
        dest = "any" if d is None else ("localhost" if d.startswith("127.0.0.0/8") and "nfacct" in toks else d)
        tgt = opt(toks, "-j")
        r = {"proto": proto, "port": port, "dest": dest, "text": line, "targets": set(), "pairs": [],
             "external": set()}
        if tgt == "DNAT":
            r["targets"].add(opt(toks, "--to-destination"))
            r["external"].add(opt(toks, "--to-destination"))
            r["pairs"].append((("KUBE-NODEPORTS", line), opt(toks, "--to-destination")))
            r["named"] = (comment_spn(toks), proto) if comment_spn(toks) else None
        else:
            r["named"] = named(toks, tgt)
            for ident, t in walk(tgt, {tgt}):
                r["targets"].add(t)
                r["pairs"].append((ident, t))
            # what a client outside the node reaches: not through the cluster chain
            r["external"] = {t for _, t in walk(tgt, {tgt}, skip="KUBE-SVC-")}
        src.nat_np.append(r)
    for toks, line in flt.get("KUBE-EXTERNAL-SERVICES", []):
        if opt(toks, "--dst-type") == "LOCAL" and opt(toks, "--dport") and opt(toks, "-j") in ("REJECT", "DROP"):
            src.filter_np.append({"proto": opt(toks, "-p"), "port": int(opt(toks, "--dport")),
                                  "verdict": opt(toks, "-j"),
                                  "named": (comment_spn(toks), opt(toks, "-p")) if comment_spn(toks) else None})
    jumped = {opt(t, "-j") for rules in nat.values() for t, _ in rules}
    for chain, rules in nat.items():
        if chain.startswith(SVC_PREFIXES) and chain not in jumped:
            nm = None
            if chain.startswith("KUBE-SEP-"):
                for toks, _ in rules:
                    if opt(toks, "-j") == "DNAT":
                        t = opt(toks, "--to-destination")
                        for dp in desired.ports:
                            if "KUBE-SEP-" + b32(dp["spn"] + dp["proto"] + t, 16) == chain:
                                nm = (dp["spn"], dp["proto"])
            else:
                dp = desired.by_hash.get(chain.split("-", 2)[2])
                nm = (dp["spn"], dp["proto"]) if dp else None
            src.orphans.append({"chain": chain, "named": nm})
    return src


# ------------------------------------------------------------------ observed: nftables


def parse_nft(path, desired):
    doc = json.load(open(path))["nftables"]
    out = []
    for fam_name, family in (("ip", "ipv4"), ("ip6", "ipv6")):
        objs = [o for o in doc if any(k in o for k in ("map", "chain", "rule"))
                and next(iter(o.values())).get("table") == "kube-proxy"
                and next(iter(o.values())).get("family") == fam_name]
        if not objs:
            continue
        src = Source("nftables", family)
        src.kube_proxy = True
        rules = collections.defaultdict(list)
        chains = []
        maps = {}
        for o in objs:
            if "chain" in o:
                chains.append(o["chain"]["name"])
            elif "rule" in o:
                rules[o["rule"]["chain"]].append(o["rule"])
            elif "map" in o:
                maps[o["map"]["name"]] = o["map"]

        def refs(x):
            if isinstance(x, dict):
                for k in ("goto", "jump"):
                    if k in x and isinstance(x[k], dict) and "target" in x[k]:
                        yield x[k]["target"]
                for v in x.values():
                    yield from refs(v)
            elif isinstance(x, list):
                for v in x:
                    yield from refs(v)

        def walk(chain, seen, skip=None):
            for r in rules.get(chain, []):
                for e in r["expr"]:
                    if "dnat" in e:
                        yield (chain, r["handle"]), hostport(e["dnat"]["addr"], e["dnat"]["port"])
                for t in refs(r["expr"]):
                    if t not in seen and not (skip and t.startswith(skip)):
                        seen.add(t)
                        yield from walk(t, seen, skip)

        def named(chain):
            parts = chain.split("-", 2)
            if len(parts) < 3:
                return None
            fields = parts[2].split("__")[0].split("/")
            if len(fields) != 4:
                return None
            ns, name, proto, pname = fields
            return (f"{ns}/{name}:{pname}" if pname else f"{ns}/{name}", proto)

        for el in maps.get("service-nodeports", {}).get("elem", []):
            key, val = el
            if "elem" in key:
                key = key["elem"]["val"]
            proto, port = key["concat"]
            tgt = next(refs(val), None)
            r = {"proto": proto, "port": port, "dest": "any", "text": f"{proto} . {port}",
                 "targets": set(), "pairs": [], "named": named(tgt) if tgt else None}
            for ident, t in walk(tgt, {tgt}):
                r["targets"].add(t)
                r["pairs"].append((ident, t))
            r["external"] = {t for _, t in walk(tgt, {tgt}, skip="service-")}
            src.nat_np.append(r)
        for el in maps.get("no-endpoint-nodeports", {}).get("elem", []):
            key, val = el
            comment = key["elem"].get("comment") if "elem" in key else None
            if "elem" in key:
                key = key["elem"]["val"]
            proto, port = key["concat"]
            src.filter_np.append({"proto": proto, "port": port, "verdict": "DROP" if "drop" in val else "REJECT",
                                  "named": (comment, proto) if comment else None})
        referenced = set()
        for rs in rules.values():
            for r in rs:
                referenced |= set(refs(r["expr"]))
        for m in maps.values():
            referenced |= set(refs(m.get("elem", [])))
        for c in chains:
            if c.startswith(NFT_PREFIXES) and "/" in c and c not in referenced:
                src.orphans.append({"chain": c, "named": named(c)})
        out.append(src)
    return out


# ------------------------------------------------------------------ listeners


def parse_proc(path, proto, v6):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path).read().splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        if f[3] != ("0A" if proto == "tcp" else "07"):
            continue
        a, p = f[1].split(":")
        raw = b"".join(int(a[i:i + 8], 16).to_bytes(4, "little") for i in range(0, len(a), 8))
        ip = ipaddress.ip_address(raw)
        fam = "ipv6" if v6 else "ipv4"
        if v6 and ip.ipv4_mapped:
            fam = "ipv4"
        out.append((proto, fam, int(p, 16)))
    return out


# ------------------------------------------------------------------ findings


def F(kind, sev, proto, port, fam, backend, service, target):
    return {"kind": kind, "severity": sev, "protocol": proto, "port": port, "family": fam,
            "backend": backend, "service": service, "target": target}


def svc_of(named):
    if not named or not named[0]:
        return None
    return named[0].split(":")[0]


def analyse(bundle):
    b = os.path.join(ROOT, "testdata", bundle) if not os.path.isdir(bundle) else bundle
    node = open(os.path.join(b, "node")).read().strip()
    desired = Desired(json.load(open(os.path.join(b, "cluster.json"))), node)
    sources = []
    for fname, backend, fam in (("iptables-nft-save.txt", "iptables-nft", "ipv4"),
                                ("iptables-legacy-save.txt", "iptables-legacy", "ipv4"),
                                ("ip6tables-nft-save.txt", "iptables-nft", "ipv6"),
                                ("ip6tables-legacy-save.txt", "iptables-legacy", "ipv6")):
        p = os.path.join(b, fname)
        if os.path.exists(p):
            sources.append(parse_iptables(p, backend, fam, desired))
    if os.path.exists(os.path.join(b, "nft.json")):
        sources += parse_nft(os.path.join(b, "nft.json"), desired)
    sources = [s for s in sources if s.kube_proxy]
    findings = []

    def owner_ok(r, fam):
        owners = desired.owners(r["proto"], r["port"], fam)
        if not owners:
            return None
        o = owners[0]
        if r["named"] and (r["named"][0], r["named"][1]) != (o["spn"], o["proto"]):
            return None
        return o

    # active backend per family
    active = {}
    for fam in ("ipv4", "ipv6"):
        cands = [s for s in sources if s.family == fam]
        if not cands:
            continue

        def score(s):
            good = bad = 0
            for r in s.nat_np:
                o = owner_ok(r, fam)
                if o and r["targets"] <= o["eps"][fam]["listed"]:
                    good += 1
                else:
                    bad += 1
            return good - bad
        active[fam] = sorted(cands, key=lambda s: (-score(s), BACKEND_ORDER[s.backend]))[0]

    for s in sources:
        fam, be = s.family, s.backend
        is_active = active.get(fam) is s
        seen_dnat = set()
        for r in s.nat_np:
            o = owner_ok(r, fam)
            if o is None:
                findings.append(F("stale-nodeport", "warning", r["proto"], r["port"], fam, be,
                                  svc_of(r["named"]), None))
                continue
            # stale DNATs, one per distinct DNAT rule
            for ident, t in r["pairs"]:
                if ident in seen_dnat:
                    continue
                seen_dnat.add(ident)
                if t not in o["eps"][fam]["listed"]:
                    findings.append(F("stale-endpoint", "critical", r["proto"], r["port"], fam, be,
                                      o["service"], t))
        for r in s.filter_np:
            if not desired.owners(r["proto"], r["port"], fam):
                findings.append(F("stale-nodeport", "info", r["proto"], r["port"], fam, be,
                                  svc_of(r["named"]), None))
        groups = collections.defaultdict(list)
        for r in s.nat_np:
            groups[(r["proto"], r["port"], r["dest"])].append(r)
        for (proto, port, _), rs in groups.items():
            if len(rs) < 2:
                continue
            differ = len({frozenset(r["targets"]) for r in rs}) > 1
            owners = desired.owners(proto, port, fam)
            for r in rs[1:]:
                svc = owners[0]["service"] if owners else svc_of(r["named"])
                findings.append(F("duplicate-rule", "critical" if differ else "warning", proto, port, fam, be,
                                  svc, None))
        for o in s.orphans:
            dp = desired.by_spn.get(o["named"]) if o["named"] else None
            findings.append(F("orphan-chain", "info", dp["proto"] if dp else None,
                              dp["node_port"] if dp else None, fam, be, dp["service"] if dp else None, None))
        if not is_active:
            # one per stale backend and family, whatever it holds
            findings.append(F("backend-split", "warning", None, None, fam, be, None, None))
            continue
        # missing rules / endpoints in the active backend
        for d in desired.ports:
            if not d["node_port"] or fam not in d["families"]:
                continue
            eps = d["eps"][fam]
            rules = [r for r in s.nat_np if r["proto"] == d["proto"] and r["port"] == d["node_port"]
                     and owner_ok(r, fam) is d]
            if not rules:
                if eps["has"]:
                    findings.append(F("missing-rule", "critical", d["proto"], d["node_port"], fam, be,
                                      d["service"], None))
                continue
            reached = set().union(*(r["targets"] for r in rules))
            missing = {t: "warning" for t in eps["cluster"] - reached}
            if d["etp_local"]:
                # externalTrafficPolicy Local: outside clients reach only what bypasses the
                # cluster chain; critical when the node drops them all (its DROP in place)
                external = set().union(*(r["external"] for r in rules))
                dropped = any(f["proto"] == d["proto"] and f["port"] == d["node_port"] and f["verdict"] == "DROP"
                              for f in s.filter_np)
                blocked = dropped and not (eps["local"] & external)
                for t in eps["local"] - external:
                    missing[t] = "critical" if blocked else "warning"
            for t, sev in sorted(missing.items()):
                findings.append(F("missing-endpoint", sev, d["proto"], d["node_port"], fam, be,
                                  d["service"], t))

    # squatters
    for proto, fam, port in (parse_proc(os.path.join(b, "proc/net/tcp"), "tcp", False)
                             + parse_proc(os.path.join(b, "proc/net/tcp6"), "tcp", True)
                             + parse_proc(os.path.join(b, "proc/net/udp"), "udp", False)
                             + parse_proc(os.path.join(b, "proc/net/udp6"), "udp", True)):
        if proto == "tcp" and port in desired.hc_ports:
            continue
        owners = desired.owners(proto, port)
        if owners:
            findings.append(F("squatter", "critical", proto, port, fam, None, owners[0]["service"], None))
        elif port in NP_RANGE and not any(p == port for _, p in desired.allocated) and port not in desired.hc_ports:
            findings.append(F("squatter", "warning", proto, port, fam, None, None, None))
    # collisions
    claims = collections.defaultdict(set)
    for d in desired.ports:
        if d["node_port"]:
            claims[(d["proto"], d["node_port"])].add(d["service"])
    for (proto, port), svcs in claims.items():
        if len(svcs) > 1:
            # one per colliding port; its `service` is the first claimant
            findings.append(F("nodeport-collision", "critical", proto, port, None, None, sorted(svcs)[0], None))
    return findings


def canon(fs):
    return sorted(json.dumps(f, sort_keys=True) for f in fs)


def main(argv):
    if argv[:1] == ["--print"]:
        print(json.dumps({"findings": analyse(argv[1])}, indent=2))
        return 0
    names = argv or sorted(d for d in os.listdir(os.path.join(ROOT, "testdata"))
                           if os.path.exists(os.path.join(ROOT, "testdata", d, "expected.json")))
    bad = 0
    for n in names:
        got = canon(analyse(n))
        want = canon(json.load(open(os.path.join(ROOT, "testdata", n, "expected.json")))["findings"])
        if got == want:
            print(f"ok   {n}: {len(want)} findings")
            continue
        bad += 1
        print(f"DIFF {n}")
        for x in sorted(set(want) - set(got)):
            print(f"  expected, not found: {x}")
        for x in sorted(set(got) - set(want)):
            print(f"  found, not expected: {x}")
        cw, cg = collections.Counter(want), collections.Counter(got)
        for x in cw:
            if x in cg and cw[x] != cg[x]:
                print(f"  count {cw[x]} expected, {cg[x]} found: {x}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
