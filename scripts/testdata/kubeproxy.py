"""A small, deterministic model of what kubelet and kube-proxy write on a node.

Used by scripts/gen-testdata.py to produce the `source/` files of the snapshot
bundles under testdata/. It follows kube-proxy's iptables proxier (pkg/proxy/iptables,
~v1.31) and nftables proxier (pkg/proxy/nftables, ~v1.33+) closely enough that the
rules, chain names and hashes are the ones a real node would hold. The chain names
it reproduces across releases are in docs/findings.md ("Chain names across kube-proxy
releases"); the layout is kube-proxy's own, in pkg/proxy/iptables/proxier.go and
pkg/proxy/nftables/proxier.go of its source.

Nothing here decides findings: expected.json files are written by hand.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import uuid
from dataclasses import dataclass, field
from typing import Optional

LARGE_CLUSTER_ENDPOINTS = 1000
MASQ_MARK = "0x4000"
LOCALHOST_NPS_COUNTER = "localhost_nps_accepted_pkts"
CT_INVALID_COUNTER = "ct_state_invalid_dropped_pkts"


def b32(s: str, n: int) -> str:
    return base64.b32encode(hashlib.sha256(s.encode()).digest()).decode()[:n]


def stable_uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "portdrift-testdata/" + "/".join(parts)))


def family_of(ip: str) -> str:
    return "IPv6" if ":" in ip else "IPv4"


def join_host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


# --------------------------------------------------------------------------- API model


@dataclass
class Port:
    name: str
    protocol: str  # TCP / UDP / SCTP
    port: int
    target_port: object  # int or named port
    node_port: Optional[int] = None


@dataclass
class Service:
    namespace: str
    name: str
    type: str = "ClusterIP"  # ClusterIP / NodePort / LoadBalancer / ExternalName
    cluster_ips: list = field(default_factory=list)  # ["None"] for headless
    ports: list = field(default_factory=list)
    etp: str = "Cluster"
    itp: str = "Cluster"
    hc_node_port: Optional[int] = None
    lb_ips: list = field(default_factory=list)
    lb_source_ranges: list = field(default_factory=list)
    external_ips: list = field(default_factory=list)
    affinity_timeout: Optional[int] = None  # ClientIP affinity when set
    external_name: Optional[str] = None
    ip_family_policy: Optional[str] = None
    selector: Optional[dict] = None
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    created: str = "2025-01-14T09:12:33Z"
    resource_version: str = "1000"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def headless(self) -> bool:
        return self.cluster_ips == ["None"]


@dataclass
class Endpoint:
    ip: str
    node: Optional[str]
    ready: Optional[bool] = True
    serving: Optional[bool] = None  # None: same as ready
    terminating: Optional[bool] = False
    pod: Optional[str] = None
    zone: Optional[str] = None

    def is_ready(self) -> bool:
        return self.ready is None or self.ready

    def is_serving(self) -> bool:
        if self.serving is None:
            return self.is_ready()
        return self.serving

    def is_terminating(self) -> bool:
        return bool(self.terminating)


@dataclass
class Slice:
    namespace: str
    service: str
    name: str
    address_type: str
    endpoints: list
    ports: list  # [(name or None, port, protocol)]
    created: str = "2025-01-14T09:12:34Z"
    last_change: Optional[str] = None
    resource_version: str = "1001"
    labels: dict = field(default_factory=dict)


@dataclass
class Cluster:
    services: list
    slices: list

    def service(self, key: str) -> Service:
        for s in self.services:
            if s.key == key:
                return s
        raise KeyError(key)


# --------------------------------------------------------------------------- cluster.json


def _service_json(s: Service) -> dict:
    meta = {
        "creationTimestamp": s.created,
        "name": s.name,
        "namespace": s.namespace,
        "resourceVersion": s.resource_version,
        "uid": stable_uid("svc", s.key),
    }
    if s.labels:
        meta["labels"] = dict(s.labels)
    if s.annotations:
        meta["annotations"] = dict(s.annotations)
    spec: dict = {"sessionAffinity": "ClientIP" if s.affinity_timeout else "None", "type": s.type}
    if s.type == "ExternalName":
        spec["externalName"] = s.external_name
        if s.ports:
            spec["ports"] = [_port_json(p, s) for p in s.ports]
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec,
                "status": {"loadBalancer": {}}}
    spec["clusterIP"] = s.cluster_ips[0]
    spec["clusterIPs"] = list(s.cluster_ips)
    if s.headless:
        spec["ipFamilies"] = ["IPv4"]
    else:
        spec["ipFamilies"] = [family_of(ip) for ip in s.cluster_ips]
    spec["ipFamilyPolicy"] = s.ip_family_policy or (
        "RequireDualStack" if len(s.cluster_ips) > 1 else "SingleStack")
    spec["internalTrafficPolicy"] = s.itp
    if s.type in ("NodePort", "LoadBalancer"):
        spec["externalTrafficPolicy"] = s.etp
    if s.type == "LoadBalancer":
        spec["allocateLoadBalancerNodePorts"] = True
        if s.hc_node_port:
            spec["healthCheckNodePort"] = s.hc_node_port
        if s.lb_source_ranges:
            spec["loadBalancerSourceRanges"] = list(s.lb_source_ranges)
    if s.external_ips:
        spec["externalIPs"] = list(s.external_ips)
    spec["ports"] = [_port_json(p, s) for p in s.ports]
    if s.selector:
        spec["selector"] = dict(s.selector)
    elif s.selector is None:
        spec["selector"] = {"app.kubernetes.io/name": s.name}
    # selector == {}: a Service without selector (default/kubernetes): no field
    if s.affinity_timeout:
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": s.affinity_timeout}}
    status: dict = {"loadBalancer": {}}
    if s.type == "LoadBalancer" and s.lb_ips:
        status["loadBalancer"] = {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in s.lb_ips]}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec, "status": status}


def _port_json(p: Port, s: Service) -> dict:
    out = {"port": p.port, "protocol": p.protocol, "targetPort": p.target_port}
    if p.name:
        out["name"] = p.name
    if p.node_port and s.type in ("NodePort", "LoadBalancer"):
        out["nodePort"] = p.node_port
    return out


def _slice_json(sl: Slice, services: dict) -> dict:
    svc = services.get(f"{sl.namespace}/{sl.service}")
    labels = {
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        "kubernetes.io/service-name": sl.service,
    }
    if svc is not None and svc.headless:
        labels["service.kubernetes.io/headless"] = ""
    if svc is not None and svc.key != "default/kubernetes":
        labels["app.kubernetes.io/name"] = sl.service
    labels.update(sl.labels)
    meta = {
        "creationTimestamp": sl.created,
        "generateName": sl.service + "-",
        "generation": 1 + len(sl.endpoints),
        "labels": labels,
        "name": sl.name,
        "namespace": sl.namespace,
        "resourceVersion": sl.resource_version,
        "uid": stable_uid("eps", sl.namespace, sl.name),
    }
    if sl.last_change:
        meta["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": sl.last_change}
    if svc is not None:
        meta["ownerReferences"] = [{
            "apiVersion": "v1", "blockOwnerDeletion": True, "controller": True,
            "kind": "Service", "name": svc.name, "uid": stable_uid("svc", svc.key)}]
    eps = []
    for e in sl.endpoints:
        cond = {"ready": e.is_ready(), "serving": e.is_serving(), "terminating": e.is_terminating()}
        ej: dict = {"addresses": [e.ip], "conditions": cond}
        if e.node:
            ej["nodeName"] = e.node
        if e.pod:
            ej["targetRef"] = {"kind": "Pod", "name": e.pod, "namespace": sl.namespace,
                               "uid": stable_uid("pod", sl.namespace, e.pod)}
        if e.zone:
            ej["zone"] = e.zone
        eps.append(ej)
    ports = []
    for name, port, proto in sl.ports:
        pj = {"port": port, "protocol": proto}
        pj["name"] = name if name is not None else ""
        ports.append(pj)
    return {"addressType": sl.address_type, "apiVersion": "discovery.k8s.io/v1",
            "endpoints": eps, "kind": "EndpointSlice", "metadata": meta, "ports": ports}


def cluster_json(c: Cluster) -> str:
    services = {s.key: s for s in c.services}
    items = [_service_json(s) for s in sorted(c.services, key=lambda s: (s.namespace, s.name))]
    items += [_slice_json(sl, services)
              for sl in sorted(c.slices, key=lambda s: (s.namespace, s.name))]
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    return json.dumps(doc, indent=4, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- proxy view


@dataclass
class EP:
    ip: str
    port: int
    local: bool
    ready: bool
    serving: bool
    terminating: bool

    @property
    def string(self) -> str:
        return join_host_port(self.ip, self.port)


@dataclass
class SvcPort:
    """One Service port as one family's proxier sees it."""
    svc: Service
    port: Port
    cluster_ip: str
    endpoints: list  # [EP], sorted by string

    @property
    def name(self) -> str:  # svcPortName
        return f"{self.svc.key}:{self.port.name}" if self.port.name else self.svc.key

    @property
    def proto(self) -> str:
        return self.port.protocol.lower()

    @property
    def hash(self) -> str:
        return b32(self.name + self.proto, 16)

    def sep(self, ep: EP) -> str:
        return "KUBE-SEP-" + b32(self.name + self.proto + ep.string, 16)

    @property
    def node_port(self) -> int:
        if self.svc.type in ("NodePort", "LoadBalancer") and self.port.node_port:
            return self.port.node_port
        return 0

    @property
    def lb_ips(self) -> list:
        fam = family_of(self.cluster_ip)
        return [ip for ip in self.svc.lb_ips if family_of(ip) == fam] if self.svc.type == "LoadBalancer" else []

    @property
    def external_ips(self) -> list:
        fam = family_of(self.cluster_ip)
        return [ip for ip in self.svc.external_ips if family_of(ip) == fam]

    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.lb_ips or self.external_ips)

    def external_policy_local(self) -> bool:
        return self.externally_accessible() and self.svc.etp == "Local"

    def internal_policy_local(self) -> bool:
        return self.svc.itp == "Local"

    def uses_cluster_endpoints(self) -> bool:
        return not self.internal_policy_local() or (
            self.externally_accessible() and not self.external_policy_local())

    def uses_local_endpoints(self) -> bool:
        return self.internal_policy_local() or self.external_policy_local()

    def categorize(self):
        """proxy.CategorizeEndpoints without topology hints."""
        eps = self.endpoints
        cluster: list = []
        local: list = []
        has_any = False
        if self.uses_cluster_endpoints():
            cluster = [e for e in eps if e.ready]
            if not cluster:
                cluster = [e for e in eps if e.serving and e.terminating]
            has_any = bool(cluster)
        if not self.uses_local_endpoints():
            return cluster, local, list(cluster), has_any
        local_ready = local_st = False
        for e in eps:
            if e.ready:
                has_any = True
                local_ready = local_ready or e.local
            elif e.serving and e.terminating:
                has_any = True
                local_st = local_st or e.local
        if local_ready:
            local = [e for e in eps if e.local and e.ready]
        elif local_st:
            local = [e for e in eps if e.local and e.serving and e.terminating]
        if not self.uses_cluster_endpoints():
            return cluster, local, list(local), has_any
        merged = {e.string: e for e in cluster}
        merged.update({e.string: e for e in local})
        return cluster, local, sorted(merged.values(), key=lambda e: e.string), has_any


def proxy_view(c: Cluster, family: str, node: str) -> list:
    """The service ports one family's proxier would program, with their endpoints."""
    out = []
    for s in sorted(c.services, key=lambda s: (s.namespace, s.name)):
        if s.type == "ExternalName" or s.headless or not s.cluster_ips:
            continue
        if s.labels.get("service.kubernetes.io/service-proxy-name") is not None:
            continue
        cips = [ip for ip in s.cluster_ips if family_of(ip) == family]
        if not cips:
            continue
        for p in s.ports:
            eps: dict = {}
            for sl in c.slices:
                if sl.namespace != s.namespace or sl.service != s.name or sl.address_type != family:
                    continue
                for pname, pport, pproto in sl.ports:
                    if (pname or "") != p.name or pproto != p.protocol or not pport:
                        continue
                    for e in sl.endpoints:
                        ep = EP(e.ip, pport, e.node == node, e.is_ready(), e.is_serving(),
                                e.is_terminating())
                        old = eps.get(ep.string)
                        if old is None or (old.terminating and not ep.terminating):
                            eps[ep.string] = ep
            out.append(SvcPort(s, p, cips[0], sorted(eps.values(), key=lambda e: e.string)))
    return out


# --------------------------------------------------------------------------- iptables


@dataclass
class IptOptions:
    family: str = "IPv4"
    node: str = "worker-1"
    cluster_cidr: str = "10.244.0.0/16"
    localhost_nodeports: bool = True
    nfacct: bool = True  # the nfacct counters exist (twin rules, INVALID counter)
    random_fully: bool = True
    node_ip: str = "10.0.1.21"
    # Older kube-proxy (before nfacct counters, v1.28 and earlier) wrote no counters.
    with_kubelet: bool = True
    with_kube_proxy: bool = True
    extra_filter_chains: list = field(default_factory=list)  # (chain, [rules]) of other software
    extra_nat_chains: list = field(default_factory=list)
    extra_filter_jumps: list = field(default_factory=list)  # raw "-A INPUT ..." lines
    extra_nat_jumps: list = field(default_factory=list)


def _q(s: str) -> str:
    return f'"{s}"'


class IptRules:
    """The rules kube-proxy writes for one family: filter and nat chains and rules."""

    def __init__(self):
        self.filter_chains: list = []
        self.filter_rules: list = []
        self.nat_chains: list = []
        self.nat_rules: list = []


def kube_proxy_iptables(view: list, o: IptOptions) -> IptRules:
    v6 = o.family == "IPv6"
    r = IptRules()
    for ch in ["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS",
               "KUBE-PROXY-FIREWALL"]:
        r.filter_chains.append(ch)
    for ch in ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"]:
        r.nat_chains.append(ch)
    nat, flt = r.nat_rules, r.filter_rules
    nat.append(f"-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN")
    nat.append(f"-A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}")
    nat.append('-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
               "-j MASQUERADE" + (" --random-fully" if o.random_fully else ""))
    nat.append(f"-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}")
    if not v6 and o.localhost_nodeports:
        r.filter_chains.append("KUBE-FIREWALL")
        flt.append('-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" '
                   "-d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")

    total = sum(len(sp.endpoints) for sp in view)
    large = total > LARGE_CLUSTER_ENDPOINTS
    if_not_local = f"! -s {o.cluster_cidr}"
    if_local = f"-s {o.cluster_cidr}"

    def svc_comment(args: list, comment: str) -> list:
        return args if large else args + ["-m", "comment", "--comment", comment]

    for sp in view:
        proto = sp.proto
        name = sp.name
        cluster_eps, local_eps, reachable, has_eps = sp.categorize()
        svc_chain = "KUBE-SVC-" + sp.hash
        svl_chain = "KUBE-SVL-" + sp.hash
        ext_chain = "KUBE-EXT-" + sp.hash
        fw_chain = "KUBE-FW-" + sp.hash
        uses_cluster_chain = bool(cluster_eps) and sp.uses_cluster_endpoints()
        uses_local_chain = bool(local_eps) and sp.uses_local_endpoints()
        internal_chain, has_internal = svc_chain, has_eps
        if sp.internal_policy_local():
            internal_chain = svl_chain
            has_internal = has_internal and bool(local_eps)
        external_policy_chain, has_external = svc_chain, has_eps
        if sp.external_policy_local():
            external_policy_chain = svl_chain
            has_external = has_external and bool(local_eps)
        uses_ext = has_eps and sp.externally_accessible()
        lb_chain = ext_chain
        uses_fw = has_eps and bool(sp.lb_ips) and bool(sp.svc.lb_source_ranges)
        if uses_fw:
            lb_chain = fw_chain
        if not has_eps:
            int_target, int_comment = "REJECT", _q(f"{name} has no endpoints")
            ext_target, ext_comment = "REJECT", int_comment
        else:
            int_target = ext_target = "DROP"
            int_comment = ext_comment = _q(f"{name} has no local endpoints")
        m = f"-m {proto} -p {proto}"
        if has_internal:
            nat.append(f'-A KUBE-SERVICES -m comment --comment {_q(name + " cluster IP")} {m} '
                       f"-d {sp.cluster_ip} --dport {sp.port.port} -j {internal_chain}")
        else:
            flt.append(f"-A KUBE-SERVICES -m comment --comment {int_comment} {m} "
                       f"-d {sp.cluster_ip} --dport {sp.port.port} -j {int_target}")
        for eip in sp.external_ips:
            if has_eps:
                nat.append(f'-A KUBE-SERVICES -m comment --comment {_q(name + " external IP")} {m} '
                           f"-d {eip} --dport {sp.port.port} -j {ext_chain}")
            if not has_external:
                flt.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {m} "
                           f"-d {eip} --dport {sp.port.port} -j {ext_target}")
        for lbip in sp.lb_ips:
            if has_eps:
                nat.append(f'-A KUBE-SERVICES -m comment --comment {_q(name + " loadbalancer IP")} {m} '
                           f"-d {lbip} --dport {sp.port.port} -j {lb_chain}")
            if uses_fw:
                flt.append(f"-A KUBE-PROXY-FIREWALL -m comment --comment "
                           f"{_q(name + ' traffic not accepted by ' + fw_chain)} {m} "
                           f"-d {lbip} --dport {sp.port.port} -j DROP")
        if not has_external:
            for lbip in sp.lb_ips:
                flt.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {m} "
                           f"-d {lbip} --dport {sp.port.port} -j {ext_target}")
        if sp.node_port:
            if has_eps:
                if o.localhost_nodeports and not v6 and o.nfacct:
                    nat.append(f"-A KUBE-NODEPORTS -m comment --comment {name} {m} -d 127.0.0.0/8 "
                               f"--dport {sp.node_port} -m nfacct --nfacct-name {LOCALHOST_NPS_COUNTER} "
                               f"-j {ext_chain}")
                nat.append(f"-A KUBE-NODEPORTS -m comment --comment {name} {m} "
                           f"--dport {sp.node_port} -j {ext_chain}")
            if not has_external:
                flt.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} "
                           f"-m addrtype --dst-type LOCAL {m} --dport {sp.node_port} -j {ext_target}")
        if sp.svc.hc_node_port and sp.svc.type == "LoadBalancer" and sp.svc.etp == "Local":
            flt.append(f"-A KUBE-NODEPORTS -m comment --comment {_q(name + ' health check node port')} "
                       f"-m tcp -p tcp --dport {sp.svc.hc_node_port} -j ACCEPT")
        if has_internal:
            nat.append(f'-A {internal_chain} -m comment --comment {_q(name + " cluster IP")} {m} '
                       f"-d {sp.cluster_ip} --dport {sp.port.port} {if_not_local} -j KUBE-MARK-MASQ")
        if uses_ext:
            r.nat_chains.append(ext_chain)
            if not sp.external_policy_local():
                nat.append(f"-A {ext_chain} -m comment --comment "
                           f"{_q('masquerade traffic for ' + name + ' external destinations')} -j KUBE-MARK-MASQ")
            else:
                nat.append(f"-A {ext_chain} -m comment --comment "
                           f"{_q('pod traffic for ' + name + ' external destinations')} {if_local} -j {svc_chain}")
                nat.append(f"-A {ext_chain} -m comment --comment "
                           f"{_q('masquerade LOCAL traffic for ' + name + ' external destinations')} "
                           "-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ")
                nat.append(f"-A {ext_chain} -m comment --comment "
                           f"{_q('route LOCAL traffic for ' + name + ' external destinations')} "
                           f"-m addrtype --src-type LOCAL -j {svc_chain}")
            if has_external:
                nat.append(f"-A {ext_chain} -j {external_policy_chain}")
        if uses_fw:
            r.nat_chains.append(fw_chain)
            for cidr in sp.svc.lb_source_ranges:
                nat.append(f"-A {fw_chain} -m comment --comment {_q(name + ' loadbalancer IP')} "
                           f"-s {cidr} -j {ext_chain}")
            nat.append(f"-A {fw_chain} -m comment --comment "
                       f"{_q('other traffic to ' + name + ' will be dropped by KUBE-PROXY-FIREWALL')}")

        def to_endpoints(chain: str, eps: list):
            if sp.svc.affinity_timeout:
                for e in eps:
                    args = svc_comment(["-A", chain], _q(f"{name} -> {e.string}"))
                    nat.append(" ".join(args + [
                        "-m", "recent", "--name", sp.sep(e), "--rcheck", "--seconds",
                        str(sp.svc.affinity_timeout), "--reap", "-j", sp.sep(e)]))
            n = len(eps)
            for i, e in enumerate(eps):
                args = svc_comment(["-A", chain], _q(f"{name} -> {e.string}"))
                if i < n - 1:
                    args += ["-m", "statistic", "--mode", "random", "--probability",
                             "%0.10f" % (1.0 / (n - i))]
                nat.append(" ".join(args + ["-j", sp.sep(e)]))

        if uses_cluster_chain:
            r.nat_chains.append(svc_chain)
            to_endpoints(svc_chain, cluster_eps)
        if uses_local_chain:
            r.nat_chains.append(svl_chain)
            to_endpoints(svl_chain, local_eps)
        for e in reachable:
            chain = sp.sep(e)
            r.nat_chains.append(chain)
            args = svc_comment(["-A", chain], name)
            nat.append(" ".join(args + ["-s", e.ip, "-j", "KUBE-MARK-MASQ"]))
            if sp.svc.affinity_timeout:
                args = args + ["-m", "recent", "--name", chain, "--set"]
            nat.append(" ".join(args + ["-m", proto, "-p", proto, "-j", "DNAT",
                                        "--to-destination", e.string]))
    if v6:
        dest = "-m addrtype --dst-type LOCAL ! -d ::1/128"
    elif not o.localhost_nodeports:
        dest = "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8"
    else:
        dest = "-m addrtype --dst-type LOCAL"
    nat.append('-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be '
               f'the last rule in this chain" {dest} -j KUBE-NODEPORTS')
    flt.append("-A KUBE-FORWARD -m conntrack --ctstate INVALID"
               + (f" -m nfacct --nfacct-name {CT_INVALID_COUNTER}" if o.nfacct else "") + " -j DROP")
    flt.append('-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
               f"-m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT")
    flt.append('-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
               "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
    return r


def _dedup(seq):
    seen = set()
    out = []
    for x in seq:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def iptables_restore_file(view: Optional[list], o: IptOptions, header: str,
                          patch=None) -> str:
    """A complete iptables-restore input for an empty namespace: what kubelet
    (`iptables -N`/`-I`), kube-proxy's startup (`-N` canaries, `-I` jump rules) and
    kube-proxy's sync (`iptables-restore --noflush`, its exact text) leave behind.

    `patch(rules)` may edit the kube-proxy rules (an IptRules) before they are written,
    to reproduce an incident."""
    v6 = o.family == "IPv6"
    kp = kube_proxy_iptables(view, o) if (o.with_kube_proxy and view is not None) else None
    if kp is not None and patch is not None:
        patch(kp)
    out = [f"# {line}" if line else "#" for line in header.strip("\n").split("\n")]

    # mangle: kubelet's hint and canary, kube-proxy's canary
    out.append("*mangle")
    for b in ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]:
        out.append(f":{b} ACCEPT [0:0]")
    if o.with_kubelet:
        out += [":KUBE-IPTABLES-HINT - [0:0]", ":KUBE-KUBELET-CANARY - [0:0]"]
    if kp is not None:
        out.append(":KUBE-PROXY-CANARY - [0:0]")
    out.append("COMMIT")

    # filter
    out.append("*filter")
    for b in ["INPUT", "FORWARD", "OUTPUT"]:
        out.append(f":{b} ACCEPT [0:0]")
    chains = []
    if o.with_kubelet:
        chains += (["KUBE-FIREWALL"] if not v6 else []) + ["KUBE-KUBELET-CANARY"]
    if kp is not None:
        chains += ["KUBE-PROXY-CANARY"] + kp.filter_chains + ["KUBE-FIREWALL"]
    chains += [c for c, _ in o.extra_filter_chains]
    for c in _dedup(chains):
        out.append(f":{c} - [0:0]")
    # Jump rules, in the order repeated `-I` (prepend) calls leave them.
    jumps = {"INPUT": [], "FORWARD": [], "OUTPUT": []}
    if kp is not None:
        if v6:
            jumps["INPUT"].append("-j KUBE-FIREWALL")
            jumps["OUTPUT"].append("-j KUBE-FIREWALL")
        jumps["INPUT"] += [
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
            '-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        ]
        jumps["FORWARD"] += [
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
            '-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        ]
        jumps["OUTPUT"] += [
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
            '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        ]
    if o.with_kubelet and not v6:
        jumps["INPUT"].append("-j KUBE-FIREWALL")
        jumps["OUTPUT"].append("-j KUBE-FIREWALL")
    for chain in ["INPUT", "FORWARD", "OUTPUT"]:
        for j in jumps[chain]:
            out.append(f"-A {chain} {j}")
    out += o.extra_filter_jumps
    if o.with_kubelet and not v6 and (kp is None or "KUBE-FIREWALL" not in kp.filter_chains):
        out.append('-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" '
                   "--dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")
    if kp is not None:
        out += kp.filter_rules
    for _, rules in o.extra_filter_chains:
        out += rules
    out.append("COMMIT")

    # nat
    out.append("*nat")
    for b in ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]:
        out.append(f":{b} ACCEPT [0:0]")
    chains = []
    if o.with_kubelet:
        chains.append("KUBE-KUBELET-CANARY")
    if kp is not None:
        chains += ["KUBE-PROXY-CANARY"] + kp.nat_chains
    chains += [c for c, _ in o.extra_nat_chains]
    for c in _dedup(chains):
        out.append(f":{c} - [0:0]")
    if kp is not None:
        out.append('-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
        out.append('-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES')
        out.append('-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING')
    out += o.extra_nat_jumps
    if kp is not None:
        out += kp.nat_rules
    for _, rules in o.extra_nat_chains:
        out += rules
    out.append("COMMIT")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- nftables


@dataclass
class NftOptions:
    family: str = "IPv4"
    node: str = "worker-1"
    cluster_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    node_ips: list = field(default_factory=lambda: ["10.0.1.21"])


def nft_name(sp: SvcPort) -> str:
    return f"{sp.svc.namespace}/{sp.svc.name}/{sp.proto}/{sp.port.name}"


def nft_chain(prefix: str, name: str) -> str:
    return f"{prefix}-{b32(name, 8)}-{name}"


def nft_ep_name(sp: SvcPort, e: EP) -> str:
    ip = e.ip.replace(":", ".") if ":" in e.ip else e.ip
    return f"{nft_name(sp)}__{ip}/{e.port}"


def kube_proxy_nft(view: list, o: NftOptions, patch=None) -> str:
    v6 = o.family == "IPv6"
    fam = "ip6" if v6 else "ip"
    addr = "ipv6_addr" if v6 else "ipv4_addr"
    ipx = "ip6" if v6 else "ip"
    T = f"{fam} kube-proxy"
    base = [
        f'add table {T} {{ comment "rules for kube-proxy" ; }}',
        "",
        f'add set {T} cluster-ips {{ type {addr} ; comment "Active ClusterIPs" ; }}',
        f'add set {T} nodeport-ips {{ type {addr} ; comment "IPs that accept NodePort traffic" ; }}',
        "",
        f'add map {T} firewall-ips {{ type {addr} . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }}',
        f'add map {T} no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }}',
        f'add map {T} no-endpoint-services {{ type {addr} . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }}',
        f'add map {T} service-ips {{ type {addr} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }}',
        f'add map {T} service-nodeports {{ type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }}',
        "",
        f"add chain {T} cluster-ips-check",
        f"add chain {T} filter-prerouting-pre-dnat {{ type filter hook prerouting priority -110 ; }}",
        f"add chain {T} filter-output-pre-dnat {{ type filter hook output priority -110 ; }}",
        f"add chain {T} filter-forward {{ type filter hook forward priority 0 ; }}",
        f"add chain {T} filter-input {{ type filter hook input priority 0 ; }}",
        f"add chain {T} filter-output {{ type filter hook output priority 0 ; }}",
        f"add chain {T} firewall-check",
        f"add chain {T} mark-for-masquerade",
        f"add chain {T} masquerading",
        f"add chain {T} nat-output {{ type nat hook output priority -100 ; }}",
        f"add chain {T} nat-postrouting {{ type nat hook postrouting priority 100 ; }}",
        f"add chain {T} nat-prerouting {{ type nat hook prerouting priority -100 ; }}",
        f"add chain {T} nodeport-endpoints-check",
        f'add chain {T} reject-chain {{ comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }}',
        f"add chain {T} services",
        f"add chain {T} service-endpoints-check",
        "",
        f'add rule {T} cluster-ips-check {ipx} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
        f'add rule {T} cluster-ips-check {ipx} daddr {{ {o.service_cidr} }} drop comment "Drop traffic to unallocated ClusterIPs"',
        f"add rule {T} filter-prerouting-pre-dnat ct state new jump firewall-check",
        f"add rule {T} filter-forward ct state new jump service-endpoints-check",
        f"add rule {T} filter-forward ct state new jump cluster-ips-check",
        f"add rule {T} filter-input ct state new jump nodeport-endpoints-check",
        f"add rule {T} filter-input ct state new jump service-endpoints-check",
        f"add rule {T} filter-output ct state new jump service-endpoints-check",
        f"add rule {T} filter-output-pre-dnat ct state new jump firewall-check",
        f"add rule {T} filter-output ct state new jump cluster-ips-check",
        f"add rule {T} firewall-check {ipx} daddr . meta l4proto . th dport vmap @firewall-ips",
        f"add rule {T} mark-for-masquerade mark set mark or {MASQ_MARK}",
        f"add rule {T} masquerading mark and {MASQ_MARK} == 0 return",
        f"add rule {T} masquerading mark set mark xor {MASQ_MARK}",
        f"add rule {T} masquerading masquerade fully-random",
        f"add rule {T} nat-output jump services",
        f"add rule {T} nat-postrouting jump masquerading",
        f"add rule {T} nat-prerouting jump services",
        f"add rule {T} nodeport-endpoints-check {ipx} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
        f"add rule {T} reject-chain reject",
        f"add rule {T} services {ipx} daddr . meta l4proto . th dport vmap @service-ips",
        f"add rule {T} services {ipx} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        "",
    ]
    base += [f"add element {T} nodeport-ips {{ {ip} }}" for ip in o.node_ips]
    base.append(f"add rule {T} service-endpoints-check {ipx} daddr . meta l4proto . th dport vmap @no-endpoint-services")
    blocks: list = []
    for sp in view:
        b: list = [f"# {sp.svc.name}"]
        name = nft_name(sp)
        cluster_eps, local_eps, reachable, has_eps = sp.categorize()
        svc_chain = nft_chain("service", name)
        loc_chain = nft_chain("local", name)
        ext_chain = nft_chain("external", name)
        fw_chain = nft_chain("firewall", name)
        uses_cluster_chain = bool(cluster_eps) and sp.uses_cluster_endpoints()
        uses_local_chain = bool(local_eps) and sp.uses_local_endpoints()
        internal_chain, has_internal = svc_chain, has_eps
        if sp.internal_policy_local():
            internal_chain = loc_chain
            has_internal = has_internal and bool(local_eps)
        ext_policy_chain, has_external = svc_chain, has_eps
        if sp.external_policy_local():
            ext_policy_chain = loc_chain
            has_external = has_external and bool(local_eps)
        uses_ext = has_eps and sp.externally_accessible()
        uses_fw = has_eps and bool(sp.lb_ips) and bool(sp.svc.lb_source_ranges)
        proto = sp.proto
        spn = sp.name

        def ep_chain(e):
            return nft_chain("endpoint", nft_ep_name(sp, e))

        def aff_set(e):
            return nft_chain("affinity", nft_ep_name(sp, e))

        def dispatch(chain, eps):
            if sp.svc.affinity_timeout:
                for e in eps:
                    b.append(f"add rule {T} {chain} {ipx} saddr @{aff_set(e)} goto {ep_chain(e)}")
            vm = " , ".join(f"{i} : goto {ep_chain(e)}" for i, e in enumerate(eps))
            b.append(f"add rule {T} {chain} numgen random mod {len(eps)} vmap {{ {vm} }}")

        if sp.svc.affinity_timeout:
            for e in reachable:
                b.append(f"add set {T} {aff_set(e)} {{ type {addr} ; flags dynamic,timeout ; "
                         f"timeout {sp.svc.affinity_timeout}s ; }}")
        if uses_cluster_chain:
            b.append(f"add chain {T} {svc_chain}")
            b.append(f"add rule {T} {svc_chain} {ipx} daddr {sp.cluster_ip} {ipx} saddr != {o.cluster_cidr} "
                     "jump mark-for-masquerade")
            dispatch(svc_chain, cluster_eps)
        if uses_local_chain:
            b.append(f"add chain {T} {loc_chain}")
            dispatch(loc_chain, local_eps)
        if uses_ext:
            b.append(f"add chain {T} {ext_chain}")
            if not sp.external_policy_local():
                b.append(f"add rule {T} {ext_chain} jump mark-for-masquerade")
                b.append(f"add rule {T} {ext_chain} goto {svc_chain}")
            else:
                b.append(f'add rule {T} {ext_chain} {ipx} saddr {o.cluster_cidr} goto {svc_chain} '
                         'comment "short-circuit pod traffic"')
                b.append(f'add rule {T} {ext_chain} fib saddr type local jump mark-for-masquerade '
                         'comment "masquerade local traffic"')
                b.append(f'add rule {T} {ext_chain} fib saddr type local goto {svc_chain} '
                         'comment "short-circuit local traffic"')
                if has_external:
                    b.append(f"add rule {T} {ext_chain} goto {ext_policy_chain}")
        for e in reachable:
            c = ep_chain(e)
            b.append(f"add chain {T} {c}")
            b.append(f"add rule {T} {c} {ipx} saddr {e.ip} jump mark-for-masquerade")
            if sp.svc.affinity_timeout:
                b.append(f"add rule {T} {c} update @{aff_set(e)} {{ {ipx} saddr }}")
            b.append(f"add rule {T} {c} meta l4proto {proto} dnat to {e.string}")
        if uses_fw:
            b.append(f"add chain {T} {fw_chain}")
            b.append(f"add rule {T} {fw_chain} {ipx} saddr != {{ {', '.join(sp.svc.lb_source_ranges)} }} drop")
        b.append("")
        b.append(f"add element {T} cluster-ips {{ {sp.cluster_ip} }}")
        if has_internal:
            b.append(f"add element {T} service-ips {{ {sp.cluster_ip} . {proto} . {sp.port.port} : goto {internal_chain} }}")
        else:
            verdict = "goto reject-chain" if not has_eps else "drop"
            b.append(f'add element {T} no-endpoint-services {{ {sp.cluster_ip} . {proto} . {sp.port.port} '
                     f'comment "{spn}" : {verdict} }}')
        if has_eps:
            for ip in sp.external_ips + sp.lb_ips:
                b.append(f"add element {T} service-ips {{ {ip} . {proto} . {sp.port.port} : goto {ext_chain} }}")
            if sp.node_port:
                b.append(f"add element {T} service-nodeports {{ {proto} . {sp.node_port} : goto {ext_chain} }}")
            if uses_fw:
                for ip in sp.lb_ips:
                    b.append(f"add element {T} firewall-ips {{ {ip} . {proto} . {sp.port.port} : goto {fw_chain} }}")
        if not has_external:
            verdict = "goto reject-chain" if not has_eps else "drop"
            if sp.node_port:
                b.append(f'add element {T} no-endpoint-nodeports {{ {proto} . {sp.node_port} '
                         f'comment "{spn}" : {verdict} }}')
            for ip in sp.external_ips + sp.lb_ips:
                b.append(f'add element {T} no-endpoint-services {{ {ip} . {proto} . {sp.port.port} '
                         f'comment "{spn}" : {verdict} }}')
        blocks.append(b)
    if patch is not None:
        patch(blocks, T)
    lines = list(base)
    for b in blocks:
        # Chains and sets are declared before the rules that jump to them (the order of a
        # knftables transaction: objects first, then rules and elements).
        decls = [l for l in b if l.startswith(("add chain", "add set"))]
        rest = [l for l in b if not l.startswith(("add chain", "add set", "#"))]
        lines.append("")
        lines += [l for l in b if l.startswith("#")] + decls + rest
    return "\n".join(lines).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- helpers


def ip_in(ip: str, cidr: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr)
