//! The diff: desired + observed → findings. Pure: no I/O, no clock.
//!
//! One function per finding kind. Each rule is first *attributed* to a Service port
//! (by the hash in its chain name, which kube-proxy keeps even when it drops comments,
//! or by its comment), then judged against the Service that owns its port now.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

// FxHash: keys are ports and chain hashes from local sources, looked up ~100k times
// per scan of a large node; SipHash's flood resistance buys nothing here.
use rustc_hash::FxHashMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::heart::desired::{DesiredPort, DesiredState};
use crate::heart::finding::{Finding, Kind, Severity};
use crate::heart::kube_proxy;
use crate::heart::model::{
    Backend, DestMatch, DnatTarget, Family, NodePortRule, Protocol, ProxyMode, RuleIdentity, RuleSource,
    ServicePortRef, Verdict,
};
use crate::heart::observed::Observed;
use crate::heart::proxy_mode::{self, ProxyDecision};

/// Settings that change what counts as drift.
#[derive(Debug, Clone)]
pub struct DetectConfig {
    /// The cluster's `--service-node-port-range`.
    pub nodeport_range: RangeInclusive<u16>,
    /// How long kube-proxy may take to apply a change before a difference counts.
    pub grace: Option<Grace>,
    /// The cluster state is the last good one but no longer current (the API watch
    /// is failing or silent): findings that depend on it are marked, so nobody —
    /// least of all repair — acts on them as if they were fresh.
    pub cluster_state_stale: bool,
}

/// kube-proxy applies API changes seconds late: a difference about a Service that
/// changed less than `window` before `now` is reported as pending (severity info).
/// `now` is passed in, so the detector stays free of clocks.
#[derive(Debug, Clone, Copy)]
pub struct Grace {
    pub now: jiff::Timestamp,
    pub window: std::time::Duration,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            nodeport_range: 30000..=32767,
            grace: None,
            cluster_state_stale: false,
        }
    }
}

/// How many unparsed lines of one source are reported one by one.
const UNPARSED_REPORTED: usize = 100;

/// What the detector found, and the proxy mode it judged the node by.
#[derive(Debug, Clone)]
pub struct Detection {
    pub findings: Vec<Finding>,
    pub proxy: ProxyDecision,
}

/// Finds every difference between the desired and the observed state. Without a
/// desired state only the checks that need no cluster state run (duplicates, backend
/// split, orphans, unparsed lines, rules kube-proxy never writes).
pub fn detect(desired: Option<&DesiredState>, observed: &Observed, config: &DetectConfig) -> Vec<Finding> {
    examine(desired, observed, config).findings
}

/// [`detect`], with the proxy mode and the sources the verdicts rest on.
pub fn examine(desired: Option<&DesiredState>, observed: &Observed, config: &DetectConfig) -> Detection {
    let empty = DesiredState::default();
    let index = DesiredIndex::new(desired.unwrap_or(&empty));
    let has_desired = desired.is_some();
    let mut findings = Vec::new();

    // Each rule is attributed to a Service port once; every check reads the verdict.
    let judged: Vec<Vec<Judged<'_>>> = observed.sources.iter().map(|s| judge_source(s, &index)).collect();
    let primaries = choose_primaries(&observed.sources, &judged, &index, has_desired);
    let proxy = proxy_mode::decide(observed, &primaries);
    for (source, judged) in observed.sources.iter().zip(&judged) {
        // iptables-mode rules that IPVS mode's KUBE-SERVICES no longer leads to are
        // leftovers no packet reaches: not judged (the coverage says so).
        if source.signals.services_dispatch != Some(ProxyMode::Ipvs) {
            if has_desired {
                stale_rules(source, judged, &index, &mut findings);
                hostport_conflicts(source, &index, &mut findings);
            }
            duplicate_rules(source, judged, &index, &mut findings);
        }
        orphan_chains(source, &index, &mut findings);
        unparsed_rules(source, &mut findings);
        malformed_rules(source, &mut findings);
    }
    backend_split(&observed.sources, &primaries, &mut findings);
    port_range_overlap(observed, config, &mut findings);
    if has_desired {
        if proxy.mode.is_read() {
            for (&family, &primary) in &primaries {
                missing_rules(
                    family,
                    &observed.sources[primary],
                    &judged[primary],
                    &index,
                    &mut findings,
                );
            }
        }
        squatters(observed, &index, config, &mut findings);
        nodeport_collisions(&index, &mut findings);
    }
    if let Some(grace) = config.grace {
        mark_pending(&mut findings, &index, grace);
    }
    if config.cluster_state_stale && has_desired {
        mark_stale_state(&mut findings);
    }
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    drop_identical(&mut findings);
    Detection { findings, proxy }
}

/// Removes findings identical to an earlier one (two rules that prove the same thing in
/// the same words): a report lists each fact once. Identical findings share a sort key,
/// so only neighbours with an equal key are compared.
fn drop_identical(findings: &mut Vec<Finding>) {
    let mut kept: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut group_start = 0;
    for f in findings.drain(..) {
        if kept.last().is_none_or(|last| last.sort_key() != f.sort_key()) {
            group_start = kept.len();
        }
        if !kept[group_start..].contains(&f) {
            kept.push(f);
        }
    }
    *findings = kept;
}

// === Attribution ===

/// Lookup tables over the desired state, built once per scan.
struct DesiredIndex<'a> {
    state: &'a DesiredState,
    by_port: PortIndex<usize>,
    by_hash: FxHashMap<[u8; 16], usize>,
    by_name: FxHashMap<(&'a ServicePortRef, Protocol), usize>,
    health_check: HashMap<u16, usize>,
    /// Every port allocated to any Service, whatever its protocol or whether kube-proxy
    /// programs it.
    allocated: HashSet<u16>,
}

impl<'a> DesiredIndex<'a> {
    fn new(state: &'a DesiredState) -> Self {
        let mut by_hash = FxHashMap::default();
        let mut by_name = FxHashMap::default();
        let mut health_check = HashMap::new();
        for (i, p) in state.ports.iter().enumerate() {
            by_hash.insert(kube_proxy::service_chain_hash_bytes(&p.service, p.protocol), i);
            by_name.insert((&p.service, p.protocol), i);
            if let Some(hc) = p.health_check_node_port {
                health_check.insert(hc, i);
            }
        }
        let by_port = PortIndex::new(
            state
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| ((p.protocol, p.node_port), i)),
        );
        let allocated = by_port
            .keys()
            .map(|(_, port)| port)
            .chain(health_check.keys().copied())
            .chain(state.other_allocated.iter().map(|&(_, port)| port))
            .collect();
        DesiredIndex {
            state,
            by_port,
            by_hash,
            by_name,
            health_check,
            allocated,
        }
    }

    fn port(&self, i: usize) -> &'a DesiredPort {
        &self.state.ports[i]
    }

    /// Desired ports owning `protocol`/`port` in `family`.
    fn owners(&self, protocol: Protocol, port: u16, family: Family) -> impl Iterator<Item = usize> + '_ {
        self.by_port
            .get((protocol, port))
            .iter()
            .copied()
            .filter(move |&i| self.port(i).in_family(family))
    }

    fn attribute<'r>(&self, rule: &'r NodePortRule) -> Attribution<'r> {
        if let Some(hash) = &rule.chain_hash {
            return match hash_key(hash).and_then(|k| self.by_hash.get(&k)) {
                Some(&i) => Attribution::Known(i),
                None => Attribution::Foreign(rule.comment_service.as_ref()),
            };
        }
        if let Some(svc) = &rule.comment_service {
            return match self.by_name.get(&(svc, rule.protocol)) {
                Some(&i) => Attribution::Known(i),
                None => Attribution::Foreign(Some(svc)),
            };
        }
        Attribution::Unknown
    }

    /// Attributes a rule and names the Service port it serves now, if any: the one it
    /// names when that one owns its port, or the port's owner when it names none.
    fn judge<'r>(&self, rule: &'r NodePortRule, family: Family) -> Judged<'r> {
        let attribution = self.attribute(rule);
        let owner = match attribution {
            Attribution::Known(i) => self.owners(rule.protocol, rule.port, family).find(|&o| o == i),
            Attribution::Unknown => self.owners(rule.protocol, rule.port, family).next(),
            Attribution::Foreign(_) => None,
        };
        Judged { attribution, owner }
    }

    /// Whether endpoint checks can be trusted for this desired port.
    fn endpoints_certain(&self, i: usize) -> bool {
        !self.state.uncertain && !self.port(i).uncertain
    }

    fn allocated(&self, port: u16) -> bool {
        self.allocated.contains(&port)
    }
}

/// Values grouped by protocol and port: one sorted vector, looked up by binary search,
/// so a 10,000-Service cluster costs no allocation per port.
struct PortIndex<T> {
    keys: Vec<(Protocol, u16)>,
    values: Vec<T>,
}

impl<T> PortIndex<T> {
    fn new(items: impl Iterator<Item = ((Protocol, u16), T)>) -> Self {
        let mut items: Vec<_> = items.collect();
        // Stable: values of one key keep their order (rules stay in dump order).
        items.sort_by_key(|(k, _)| *k);
        let (keys, values) = items.into_iter().unzip();
        PortIndex { keys, values }
    }

    fn get(&self, key: (Protocol, u16)) -> &[T] {
        let from = self.keys.partition_point(|k| *k < key);
        let to = from + self.keys[from..].partition_point(|k| *k == key);
        &self.values[from..to]
    }

    fn keys(&self) -> impl Iterator<Item = (Protocol, u16)> + '_ {
        self.keys.iter().copied()
    }

    /// Each key with its values, in key order.
    fn groups(&self) -> impl Iterator<Item = ((Protocol, u16), &[T])> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let key = *self.keys.get(at)?;
            let len = self.keys[at..].partition_point(|k| *k == key);
            let group = &self.values[at..at + len];
            at += len;
            Some((key, group))
        })
    }
}

/// A chain-name hash as an index key.
fn hash_key(hash: &str) -> Option<[u8; 16]> {
    hash.as_bytes().try_into().ok()
}

/// Which Service port a rule belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attribution<'r> {
    /// A Service port in the desired state.
    Known(usize),
    /// A Service port the cluster no longer has (named when the rule says which).
    Foreign(Option<&'r ServicePortRef>),
    /// The rule names no Service (a hand-written DNAT without a comment).
    Unknown,
}

/// A rule's attribution and the Service port it serves now.
#[derive(Debug, Clone, Copy)]
struct Judged<'r> {
    attribution: Attribution<'r>,
    owner: Option<usize>,
}

/// A rule beside its judgment.
type JudgedRule<'s, 'r> = (&'s NodePortRule, &'s Judged<'r>);

/// Judges every rule of a source, in the source's order.
fn judge_source<'r>(source: &'r RuleSource, index: &DesiredIndex<'_>) -> Vec<Judged<'r>> {
    source
        .nodeports
        .iter()
        .map(|r| index.judge(r, source.family))
        .collect()
}

// === Shared finding builders ===

fn rule_finding(
    kind: Kind,
    severity: Severity,
    source: &RuleSource,
    rule: &NodePortRule,
    message: String,
) -> Finding {
    let mut f = Finding::new(kind, severity, message);
    f.protocol = Some(rule.protocol);
    f.port = Some(rule.port);
    f.family = Some(source.family);
    f.backend = Some(source.backend);
    f.rule = Some(rule.rule.text.to_string());
    f.rule_source = Some(locate(&source.origin, rule.rule.line));
    f.evidence.extend(describe_path(rule, None));
    f
}

/// The service-level chains of a rule's path (endpoint chains are many and named by
/// the target instead), ending in `endpoint_chain` when one target is meant.
fn describe_path(rule: &NodePortRule, endpoint_chain: Option<&str>) -> Option<String> {
    let is_endpoint = |c: &str| c.starts_with("KUBE-SEP-") || c.starts_with("endpoint-");
    let mut hops: Vec<&str> = rule
        .path
        .iter()
        .map(|c| &**c)
        .filter(|c| !is_endpoint(c))
        .collect();
    let endpoints = rule.path.iter().filter(|c| is_endpoint(c)).count();
    match endpoint_chain {
        Some(chain) => hops.push(chain),
        None if endpoints > 0 => {
            return Some(format!(
                "path: {} → {endpoints} endpoint chains",
                hops.join(" → ")
            ));
        }
        None => {}
    }
    (!hops.is_empty()).then(|| format!("path: {}", hops.join(" → ")))
}

fn locate(origin: &str, line: u32) -> String {
    if line == 0 {
        origin.to_string()
    } else {
        format!("{origin}:{line}")
    }
}

fn set_service(f: &mut Finding, svc: &ServicePortRef) {
    f.service = Some(svc.service());
    f.service_port = Some(svc.port_name.clone());
}

/// The Service port a rule is for, as the report names it: its owner, or the one its
/// comment names (decoded from the rule text when the parser left it to the hash).
fn describe_attribution<'r>(
    index: &DesiredIndex<'r>,
    rule: &'r NodePortRule,
    a: Attribution<'r>,
) -> Option<Cow<'r, ServicePortRef>> {
    match a {
        Attribution::Known(i) => Some(Cow::Borrowed(&index.port(i).service)),
        Attribution::Foreign(Some(s)) => Some(Cow::Borrowed(s)),
        Attribution::Foreign(None) if matches!(rule.identity, RuleIdentity::Iptables { .. }) => {
            rule.undecoded_comment_service().map(Cow::Owned)
        }
        Attribution::Foreign(None) | Attribution::Unknown => None,
    }
}

// === stale-nodeport and stale-endpoint ===

/// For each NodePort key, the first line at which the port's owner has its own rule.
type OwnerLines<'s> = FxHashMap<(Protocol, u16, &'s DestMatch), u32>;

fn owner_rule_lines<'s>(source: &'s RuleSource, judged: &[Judged<'_>]) -> OwnerLines<'s> {
    let mut lines = OwnerLines::default();
    for (r, j) in source.nodeports.iter().zip(judged) {
        if r.verdict == Verdict::Forward
            && j.owner.is_some()
            && matches!(j.attribution, Attribution::Known(_))
        {
            let line = lines.entry((r.protocol, r.port, &r.dest)).or_insert(r.rule.line);
            *line = (*line).min(r.rule.line);
        }
    }
    lines
}

fn stale_rules(source: &RuleSource, judged: &[Judged<'_>], index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    let mut reported_dnats: HashSet<&RuleIdentity> = HashSet::new();
    let mut checked: rustc_hash::FxHashSet<(usize, usize)> = Default::default();
    // Needed only to judge stale rules, which a healthy node has none of.
    let mut owner_lines: Option<OwnerLines<'_>> = None;
    let all_judged = judged;
    // The main rules first, so evidence shows them rather than kube-proxy's localhost twins.
    let rules = || source.nodeports.iter().zip(all_judged);
    let main_first = rules()
        .filter(|(r, _)| r.dest != DestMatch::Localhost)
        .chain(rules().filter(|(r, _)| r.dest == DestMatch::Localhost));
    for (rule, judged) in main_first {
        // A port held by a Service the cluster state could not show in full (an
        // unreadable object, or a Service kube-proxy skips) is not judged: its rules
        // may be right, and "stale" would be a guess.
        if index.state.uncertain || index.state.other_allocated.contains(&(rule.protocol, rule.port)) {
            continue;
        }
        match rule.verdict {
            Verdict::HealthCheckAccept => stale_health_check(source, rule, index, out),
            Verdict::Reject | Verdict::Drop => {
                if index
                    .owners(rule.protocol, rule.port, source.family)
                    .next()
                    .is_none()
                {
                    out.push(stale_filter_finding(source, rule));
                }
            }
            Verdict::Forward => match judged.owner {
                None => {
                    let lines = owner_lines.get_or_insert_with(|| owner_rule_lines(source, all_judged));
                    out.push(stale_nodeport_finding(
                        source,
                        rule,
                        index,
                        lines,
                        judged.attribution,
                    ));
                }
                Some(owner) => {
                    // kube-proxy's localhost twin shares its targets with the main rule:
                    // one check serves both.
                    if checked.insert((Arc::as_ptr(&rule.targets) as *const DnatTarget as usize, owner)) {
                        stale_endpoints(source, rule, index, owner, &mut reported_dnats, out);
                    }
                }
            },
        }
    }
}

fn stale_filter_finding(source: &RuleSource, rule: &NodePortRule) -> Finding {
    let mut f = rule_finding(
        Kind::StaleNodeport,
        Severity::Info,
        source,
        rule,
        format!(
            "{} still {} {}/{} for a Service that no longer owns the port; the port is dead anyway, but kube-proxy should have removed this rule: check that kube-proxy is syncing.",
            source.backend,
            if rule.verdict == Verdict::Reject {
                "rejects"
            } else {
                "drops"
            },
            rule.protocol,
            rule.port
        ),
    );
    if let Some(svc) = &rule.comment_service {
        set_service(&mut f, svc);
    }
    f
}

fn stale_health_check(
    source: &RuleSource,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    let owned = index
        .health_check
        .get(&rule.port)
        .is_some_and(|&i| index.port(i).in_family(source.family));
    if owned {
        return;
    }
    let mut f = rule_finding(
        Kind::StaleNodeport,
        Severity::Info,
        source,
        rule,
        format!(
            "{} still accepts health checks on tcp/{} although no Service uses it as healthCheckNodePort; harmless, but kube-proxy should have removed it: check that kube-proxy is syncing.",
            source.backend, rule.port
        ),
    );
    if let Some(svc) = &rule.comment_service {
        set_service(&mut f, svc);
    }
    out.push(f);
}

fn stale_endpoints<'s>(
    source: &'s RuleSource,
    rule: &'s NodePortRule,
    index: &DesiredIndex<'_>,
    owner: usize,
    reported_dnats: &mut HashSet<&'s RuleIdentity>,
    out: &mut Vec<Finding>,
) {
    if !index.endpoints_certain(owner) {
        return;
    }
    let desired = index.port(owner);
    let Some(eps) = desired.endpoints(source.family) else {
        return;
    };
    for target in rule.targets.iter() {
        if eps.listed.contains(&target.addr) || !reported_dnats.insert(&target.identity) {
            continue;
        }
        let mut f = rule_finding(
            Kind::StaleEndpoint,
            Severity::Critical,
            source,
            rule,
            format!(
                "{}'s NodePort {}/{} still sends traffic to {}, which no EndpointSlice of the Service lists (a deleted pod): connections there fail; kube-proxy has not synced this Service — check its logs for restore errors, or remove the stale rule.",
                desired.service.service(),
                rule.protocol,
                rule.port,
                target.addr
            ),
        );
        set_service(&mut f, &desired.service);
        f.target = Some(target.addr.to_string());
        f.evidence.clear();
        // A DNAT written straight into the dispatch chain is its own evidence.
        if target.rule.line != rule.rule.line || target.rule.text != rule.rule.text {
            f.evidence.push(format!(
                "NodePort rule: {} ({})",
                rule.rule.text,
                locate(&source.origin, rule.rule.line)
            ));
            f.evidence.extend(describe_path(rule, Some(&target.chain)));
        }
        f.rule = Some(target.rule.text.to_string());
        f.rule_source = Some(locate(&source.origin, target.rule.line));
        out.push(f);
    }
}

fn stale_nodeport_finding(
    source: &RuleSource,
    rule: &NodePortRule,
    index: &DesiredIndex<'_>,
    owner_lines: &OwnerLines<'_>,
    attribution: Attribution<'_>,
) -> Finding {
    let named = describe_attribution(index, rule, attribution);
    let owner = index.owners(rule.protocol, rule.port, source.family).next();
    // A stale rule ahead of the owner's rule takes the owner's traffic.
    let owner_line = owner_lines.get(&(rule.protocol, rule.port, &rule.dest)).copied();
    let hijacks = owner.is_some() && owner_line.is_none_or(|l| rule.rule.line < l);
    let whose = match &named {
        Some(svc) => format!("for {}", svc.service()),
        None => "naming no Service".to_string(),
    };
    let message = match owner {
        None => format!(
            "No Service owns {}/{} in {}, but {} still forwards it ({whose}); kube-proxy should have removed this rule: check that it is running and syncing, then delete the rule.",
            rule.protocol, rule.port, source.family, source.backend
        ),
        Some(owner) => format!(
            "{}/{} now belongs to {}, but {} still has a rule {whose}{}; delete the stale rule.",
            rule.protocol,
            rule.port,
            index.port(owner).service.service(),
            source.backend,
            if hijacks {
                " that matches first and takes the port's traffic"
            } else {
                ""
            }
        ),
    };
    let severity = if hijacks {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut f = rule_finding(Kind::StaleNodeport, severity, source, rule, message);
    if let Some(svc) = &named {
        set_service(&mut f, svc);
    }
    for t in rule.targets.iter() {
        f.evidence.push(format!(
            "forwards to {} ({})",
            t.addr,
            locate(&source.origin, t.rule.line)
        ));
    }
    if let Some(chain) = &rule.dangling {
        f.evidence
            .push(format!("jumps to chain {chain}, which the dump does not define"));
    }
    f
}

// === missing-rule and missing-endpoint ===

fn missing_rules(
    family: Family,
    primary: &RuleSource,
    judged: &[Judged<'_>],
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    if !primary.complete {
        // A truncated or partly unreadable dump cannot prove a rule is absent.
        return;
    }
    let by_port = PortIndex::new(
        primary
            .nodeports
            .iter()
            .zip(judged)
            .map(|(r, j)| ((r.protocol, r.port), (r, j))),
    );
    let mut forwarding: Vec<&NodePortRule> = Vec::new();
    for (i, desired) in index.state.ports.iter().enumerate() {
        if !desired.in_family(family) || !index.endpoints_certain(i) {
            continue;
        }
        let Some(eps) = desired.endpoints(family) else {
            continue;
        };
        if !eps.has_endpoints {
            continue;
        }
        let rules = by_port.get((desired.protocol, desired.node_port));
        forwarding.clear();
        forwarding.extend(
            rules
                .iter()
                .filter(|(r, j)| r.verdict == Verdict::Forward && j.owner == Some(i))
                .map(|(r, _)| *r),
        );
        if forwarding.is_empty() {
            out.push(missing_rule_finding(family, primary, desired, rules));
            continue;
        }
        forwarding.sort_by_key(|r| r.dest == DestMatch::Localhost);
        let reached = |addr: &SocketAddr| {
            forwarding
                .iter()
                .any(|r| r.targets.iter().any(|t| t.addr == *addr))
        };
        // The local endpoints external traffic must reach (externalTrafficPolicy Local)
        // and does not.
        let local_unreached: Vec<&SocketAddr> = if desired.external_policy_local {
            eps.local
                .iter()
                .filter(|a| !forwarding.iter().any(|r| r.external_targets.contains(a)))
                .collect()
        } else {
            Vec::new()
        };
        // Each unreached endpoint once; `true` when it is such a local endpoint.
        let mut missing: BTreeMap<&SocketAddr, bool> = BTreeMap::new();
        if !eps.cluster_uncertain {
            missing.extend(eps.cluster.iter().filter(|a| !reached(a)).map(|a| (a, false)));
        }
        missing.extend(local_unreached.iter().map(|&a| (a, true)));
        // The node drops the port's external traffic as if it had no local endpoint, and
        // none of its local endpoints is reached: every external client is dropped here.
        let dropping = rules
            .iter()
            .find(|(r, _)| r.verdict == Verdict::Drop)
            .map(|(r, _)| *r)
            .filter(|_| !local_unreached.is_empty() && local_unreached.len() == eps.local.len());
        for (addr, local) in missing {
            let f = if local {
                local_endpoint_unreached(primary, desired, forwarding[0], addr, reached(addr), dropping)
            } else {
                let mut f = rule_finding(
                    Kind::MissingEndpoint,
                    Severity::Warning,
                    primary,
                    forwarding[0],
                    format!(
                        "{}'s endpoint {addr} is ready to serve, but NodePort {}/{} never sends traffic to it in {}: kube-proxy has not synced the latest EndpointSlice — check its logs.",
                        desired.service.service(),
                        desired.protocol,
                        desired.node_port,
                        primary.backend
                    ),
                );
                set_service(&mut f, &desired.service);
                f.target = Some(addr.to_string());
                f
            };
            out.push(f);
        }
    }
}

/// A local endpoint of an externalTrafficPolicy Local port that traffic from outside
/// the node never reaches: critical when the node drops that traffic outright (the drop
/// rule is the evidence), a warning when only pod and host traffic reaches it.
fn local_endpoint_unreached(
    primary: &RuleSource,
    desired: &DesiredPort,
    forwarding: &NodePortRule,
    addr: &SocketAddr,
    internally: bool,
    dropping: Option<&NodePortRule>,
) -> Finding {
    let service = desired.service.service();
    let (protocol, port) = (desired.protocol, desired.node_port);
    let mut f = match dropping {
        Some(drop) => {
            let mut f = rule_finding(
                Kind::MissingEndpoint,
                Severity::Critical,
                primary,
                drop,
                format!(
                    "{service} has externalTrafficPolicy Local and a ready endpoint on this node ({addr}), but {} still drops external traffic to NodePort {protocol}/{port} as if the node had none: clients from outside reaching this node get no answer — kube-proxy has not synced the endpoint; check its logs.",
                    primary.backend
                ),
            );
            f.evidence.push(format!(
                "NodePort rule: {} ({}), which {}",
                forwarding.rule.text,
                locate(&primary.origin, forwarding.rule.line),
                if internally {
                    format!("reaches {addr} for pod and host traffic only")
                } else {
                    format!("does not reach {addr} at all")
                }
            ));
            f
        }
        None => rule_finding(
            Kind::MissingEndpoint,
            Severity::Warning,
            primary,
            forwarding,
            format!(
                "{service} has externalTrafficPolicy Local and a ready endpoint on this node ({addr}), but in {} external traffic to NodePort {protocol}/{port} never reaches it (only pod and host traffic does): kube-proxy has not synced the latest EndpointSlice — check its logs.",
                primary.backend
            ),
        ),
    };
    set_service(&mut f, &desired.service);
    f.target = Some(addr.to_string());
    f
}

fn missing_rule_finding(
    family: Family,
    primary: &RuleSource,
    desired: &DesiredPort,
    rules: &[(&NodePortRule, &Judged<'_>)],
) -> Finding {
    let mut f = Finding::new(
        Kind::MissingRule,
        Severity::Critical,
        format!(
            "{} has endpoints, but {} has no {} NodePort rule for {}/{}, so the port does not reach the Service on this node: kube-proxy is not syncing — check that it runs and its logs.",
            desired.service.service(),
            primary.backend,
            family,
            desired.protocol,
            desired.node_port
        ),
    );
    f.protocol = Some(desired.protocol);
    f.port = Some(desired.node_port);
    f.family = Some(family);
    f.backend = Some(primary.backend);
    set_service(&mut f, &desired.service);
    for (r, _) in rules {
        let what = match r.verdict {
            Verdict::Reject => "still rejects the port as if the Service had no endpoints",
            Verdict::Drop => "still drops the port as if there were no local endpoints",
            Verdict::HealthCheckAccept => "accepts health checks on the port",
            Verdict::Forward => "forwards the port for another Service",
        };
        f.evidence.push(format!(
            "{} {what}: {}",
            locate(&primary.origin, r.rule.line),
            r.rule.text
        ));
    }
    f
}

// === duplicate-rule ===

fn duplicate_rules(
    source: &RuleSource,
    judged: &[Judged<'_>],
    index: &DesiredIndex<'_>,
    out: &mut Vec<Finding>,
) {
    // Sorted by key, stable, so each group keeps dump order: the first rule matches.
    let mut forward: Vec<JudgedRule<'_, '_>> = source
        .nodeports
        .iter()
        .zip(judged)
        .filter(|(r, _)| r.verdict == Verdict::Forward)
        .collect();
    forward.sort_by(|(a, _), (b, _)| (a.protocol, a.port, &a.dest).cmp(&(b.protocol, b.port, &b.dest)));
    let same_key = |(a, _): &JudgedRule<'_, '_>, (b, _): &JudgedRule<'_, '_>| {
        (a.protocol, a.port, &a.dest) == (b.protocol, b.port, &b.dest)
    };
    // In a dump that is not whole (a paste of several greps), one line can appear twice
    // without the rule being there twice: only copies that differ prove a duplicate.
    if !source.complete {
        let mut seen: HashSet<&str> = HashSet::new();
        forward.retain(|(r, _)| seen.insert(&r.rule.text));
    }
    for rules in forward.chunk_by(same_key).filter(|g| g.len() > 1) {
        let (protocol, port) = (rules[0].0.protocol, rules[0].0.port);
        let first = rules[0].0;
        // The rule to keep: kube-proxy's own when exactly one is, else the first (the
        // one that matches). Every other rule of the group is reported.
        let kube_proxys: Vec<usize> = (0..rules.len())
            .filter(|&i| written_by_kube_proxy(rules[i].0))
            .collect();
        let keep = if kube_proxys.len() == 1 { kube_proxys[0] } else { 0 };
        let kept = rules[keep].0;
        let kept_targets: BTreeSet<SocketAddr> = kept.targets.iter().map(|t| t.addr).collect();
        for (i, &(rule, j)) in rules.iter().enumerate().filter(|&(i, _)| i != keep) {
            let targets: BTreeSet<SocketAddr> = rule.targets.iter().map(|t| t.addr).collect();
            let differ = targets != kept_targets;
            let shadows = i == 0;
            let message = format!(
                "{protocol}/{port} has {} NodePort rules in {}; only the first ({}) ever matches{}: delete this {}rule{}.",
                rules.len(),
                source.backend,
                locate(&source.origin, first.rule.line),
                if differ {
                    ", and they disagree on where traffic goes"
                } else {
                    ""
                },
                if written_by_kube_proxy(rule) {
                    ""
                } else {
                    "hand-written "
                },
                if shadows {
                    format!(
                        ", which shadows kube-proxy's ({})",
                        locate(&source.origin, kept.rule.line)
                    )
                } else {
                    String::new()
                }
            );
            let severity = if differ {
                Severity::Critical
            } else {
                Severity::Warning
            };
            let mut f = rule_finding(Kind::DuplicateRule, severity, source, rule, message);
            // A hand-written rule names no Service: it serves the port's owner.
            let named = describe_attribution(index, rule, j.attribution)
                .or_else(|| j.owner.map(|i| Cow::Borrowed(&index.port(i).service)));
            if let Some(svc) = named {
                set_service(&mut f, &svc);
            }
            f.evidence.push(format!("kept rule: {}", kept.rule.text));
            out.push(f);
        }
    }
}

/// Rules kube-proxy writes jump to its hashed per-service chains (iptables) or are its
/// map elements (nftables); anything else was written by someone else.
fn written_by_kube_proxy(rule: &NodePortRule) -> bool {
    rule.chain_hash.is_some() || rule.backend == Backend::Nftables
}

// === backend-split ===

/// Backend preference when the evidence ties: iptables-nft is what current kube-proxy
/// images pick by default, nftables is opt-in, legacy is the leftover of old nodes.
fn backend_rank(b: Backend) -> u8 {
    match b {
        Backend::IptablesNft => 0,
        Backend::Nftables => 1,
        Backend::IptablesLegacy => 2,
    }
}

/// Picks, per family, the source kube-proxy is actively writing: the one whose rules
/// agree best with the cluster state.
fn choose_primaries(
    sources: &[RuleSource],
    judged: &[Vec<Judged<'_>>],
    index: &DesiredIndex<'_>,
    has_desired: bool,
) -> BTreeMap<Family, usize> {
    let mut best: BTreeMap<Family, (i64, usize)> = BTreeMap::new();
    for (i, s) in sources.iter().enumerate() {
        if !s.has_kube_proxy || !proxy_mode::holds_live_dispatch(s) {
            continue;
        }
        let score = if has_desired {
            agreement(s, &judged[i], index)
        } else {
            s.kube_rule_count as i64
        };
        let better = match best.get(&s.family) {
            None => true,
            Some(&(bs, bi)) => {
                score > bs || (score == bs && backend_rank(s.backend) < backend_rank(sources[bi].backend))
            }
        };
        if better {
            best.insert(s.family, (score, i));
        }
    }
    best.into_iter().map(|(f, (_, i))| (f, i)).collect()
}

/// +1 for every forwarding rule that matches its Service's current endpoints, -1 for
/// every one that does not.
fn agreement(source: &RuleSource, judged: &[Judged<'_>], index: &DesiredIndex<'_>) -> i64 {
    source
        .nodeports
        .iter()
        .zip(judged)
        .filter(|(r, _)| r.verdict == Verdict::Forward)
        .map(|(r, j)| {
            let fresh = j.owner.is_some_and(|i| {
                index
                    .port(i)
                    .endpoints(source.family)
                    .is_some_and(|eps| r.targets.iter().all(|t| eps.listed.contains(&t.addr)))
            });
            if fresh { 1 } else { -1 }
        })
        .sum()
}

fn backend_split(sources: &[RuleSource], primaries: &BTreeMap<Family, usize>, out: &mut Vec<Finding>) {
    for (i, s) in sources.iter().enumerate() {
        let Some(&primary) = primaries.get(&s.family) else {
            continue;
        };
        if i == primary || !s.has_kube_proxy || sources[primary].backend == s.backend {
            continue;
        }
        let active = sources[primary].backend;
        let forwarding: Vec<&NodePortRule> = s
            .nodeports
            .iter()
            .filter(|r| r.verdict == Verdict::Forward && r.dest != DestMatch::Localhost)
            .collect();
        let mut ports: Vec<(Protocol, u16)> = forwarding.iter().map(|r| (r.protocol, r.port)).collect();
        ports.sort();
        ports.dedup();
        // One finding per stale backend and family: what each stale copy does to its
        // port is in the stale-* findings.
        let message = if ports.is_empty() {
            format!(
                "{} {} also holds kube-proxy chains ({} rules) while kube-proxy writes {}; the kernel evaluates both, so remove kube-proxy's chains from {}.",
                s.backend, s.family, s.kube_rule_count, active, s.backend
            )
        } else {
            const LISTED: usize = 10;
            let listed: Vec<String> = ports
                .iter()
                .take(LISTED)
                .map(|(p, n)| format!("{p}/{n}"))
                .collect();
            format!(
                "{} {} also holds {} kube-proxy NodePort rules, for {} ports ({}{}), while kube-proxy writes {}; the kernel evaluates both and nothing keeps the {} copy current: remove kube-proxy's chains from {}. What each stale copy does to its port is in the stale-* findings.",
                s.backend,
                s.family,
                forwarding.len(),
                ports.len(),
                listed.join(", "),
                if ports.len() > LISTED { ", …" } else { "" },
                active,
                s.backend,
                s.backend
            )
        };
        let mut f = Finding::new(Kind::BackendSplit, Severity::Warning, message);
        f.family = Some(s.family);
        f.backend = Some(s.backend);
        f.rule_source = Some(s.origin.clone());
        // The port numbers, each once (one may serve tcp and udp).
        f.ports = ports.iter().map(|&(_, n)| n).collect();
        f.ports.sort_unstable();
        f.ports.dedup();
        f.evidence.extend(
            forwarding
                .iter()
                .take(5)
                .map(|r| format!("{} ({})", r.rule.text, locate(&s.origin, r.rule.line))),
        );
        if forwarding.len() > 5 {
            f.evidence
                .push(format!("… and {} more NodePort rules", forwarding.len() - 5));
        }
        out.push(f);
    }
}

// === stale cluster state ===

/// Marks the findings that rest on the cluster state when that state is stale.
fn mark_stale_state(findings: &mut [Finding]) {
    for f in findings.iter_mut() {
        let depends = matches!(
            f.kind,
            Kind::StaleNodeport
                | Kind::StaleEndpoint
                | Kind::MissingEndpoint
                | Kind::MissingRule
                | Kind::Squatter
                | Kind::NodeportCollision
                | Kind::HostportConflict
        );
        if depends {
            f.on_stale_cluster_state = true;
            f.message = format!(
                "(cluster state not current: the API watch is failing) {}",
                f.message
            );
        }
    }
}

// === grace ===

/// Turns differences about recently changed Services into pending, info findings. A
/// rule whose Service no longer exists has no clock: it is never pending.
fn mark_pending(findings: &mut [Finding], index: &DesiredIndex<'_>, grace: Grace) {
    for f in findings.iter_mut() {
        if !matches!(
            f.kind,
            Kind::StaleEndpoint | Kind::MissingEndpoint | Kind::MissingRule
        ) {
            continue;
        }
        let (Some(protocol), Some(port), Some(service)) = (f.protocol, f.port, f.service.as_deref()) else {
            continue;
        };
        let changed = index
            .by_port
            .get((protocol, port))
            .iter()
            .map(|&i| index.port(i))
            .find(|p| {
                p.service.service() == service
                    && Some(p.service.port_name.as_str()) == f.service_port.as_deref()
            })
            .and_then(|p| p.last_change.as_deref())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let Some(changed) = changed else { continue };
        let age = grace.now.duration_since(changed);
        let window = jiff::SignedDuration::try_from(grace.window).unwrap_or(jiff::SignedDuration::MAX);
        if age >= window {
            continue;
        }
        let left = (window - age.max(jiff::SignedDuration::ZERO)).as_secs();
        f.severity = Severity::Info;
        f.pending_seconds = Some(left.max(0) as u64);
        f.message = format!(
            "Pending for {left} s more: {service} changed {} s ago, and kube-proxy may still be applying it. {}",
            age.as_secs().max(0),
            f.message
        );
    }
}

// === port-range-overlap ===

/// The node's ephemeral port range (`net.ipv4.ip_local_port_range`, which also governs
/// IPv6) against the NodePort range: any overlap that `ip_local_reserved_ports` does
/// not cover lets an outgoing connection take a NodePort (kubernetes#111682).
fn port_range_overlap(observed: &Observed, config: &DetectConfig, out: &mut Vec<Finding>) {
    let Some(sysctls) = &observed.sysctls else { return };
    let Some(local) = &sysctls.local_port_range else {
        return;
    };
    let nodeports = &config.nodeport_range;
    let (from, to) = (
        (*local.start()).max(*nodeports.start()),
        (*local.end()).min(*nodeports.end()),
    );
    if from > to {
        return;
    }
    let open = uncovered(from..=to, &sysctls.reserved_ports);
    if open.is_empty() {
        return;
    }
    let count: u32 = open
        .iter()
        .map(|r| u32::from(*r.end()) - u32::from(*r.start()) + 1)
        .sum();
    let ranges: Vec<String> = open
        .iter()
        .take(5)
        .map(|r| format!("{}-{}", r.start(), r.end()))
        .collect();
    let mut f = Finding::new(
        Kind::PortRangeOverlap,
        Severity::Warning,
        format!(
            "The node's ephemeral port range (net.ipv4.ip_local_port_range {}-{}) overlaps the NodePort range {}-{} on {count} ports that ip_local_reserved_ports does not reserve: an outgoing connection can take a NodePort and break that Service on this node — reserve the range (sysctl net.ipv4.ip_local_reserved_ports={}-{}) or move the ephemeral range.",
            local.start(),
            local.end(),
            nodeports.start(),
            nodeports.end(),
            nodeports.start(),
            nodeports.end()
        ),
    );
    f.rule_source = Some("proc/sys/net/ipv4/ip_local_port_range".into());
    f.evidence.push(format!(
        "unreserved: {}{}",
        ranges.join(", "),
        if open.len() > 5 { ", …" } else { "" }
    ));
    out.push(f);
}

/// The parts of `range` that none of `reserved` covers.
fn uncovered(range: RangeInclusive<u16>, reserved: &[RangeInclusive<u16>]) -> Vec<RangeInclusive<u16>> {
    let mut reserved: Vec<&RangeInclusive<u16>> = reserved.iter().collect();
    reserved.sort_by_key(|r| *r.start());
    let mut out = Vec::new();
    let mut next = u32::from(*range.start());
    let end = u32::from(*range.end());
    for r in reserved {
        let (rs, re) = (u32::from(*r.start()), u32::from(*r.end()));
        if re < next || rs > end {
            continue;
        }
        if rs > next {
            out.push(next as u16..=(rs - 1) as u16);
        }
        next = next.max(re + 1);
    }
    if next <= end {
        out.push(next as u16..=end as u16);
    }
    out
}

// === hostport-conflict ===

fn hostport_conflicts(source: &RuleSource, index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    for hp in &source.hostports {
        // The allocator hands a port out once, whatever the protocol; but a hostPort
        // only competes with a Service of its own protocol.
        let Some(owner) = index.owners(hp.protocol, hp.port, source.family).next() else {
            continue;
        };
        let desired = index.port(owner);
        let to = match hp.targets.first() {
            Some(t) => format!(" to {t}"),
            None => String::new(),
        };
        let mut f = Finding::new(
            Kind::HostportConflict,
            Severity::Critical,
            format!(
                "A pod's hostPort mapping (CNI portmap) sends {}/{}{to}, while {} owns that port as its NodePort: whichever rule the kernel meets first takes the traffic — remove the hostPort or give the Service another nodePort.",
                hp.protocol,
                hp.port,
                desired.service.service()
            ),
        );
        f.protocol = Some(hp.protocol);
        f.port = Some(hp.port);
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        set_service(&mut f, &desired.service);
        f.target = hp.targets.first().map(|t| t.to_string());
        f.rule = Some(hp.rule.text.to_string());
        f.rule_source = Some(locate(&source.origin, hp.rule.line));
        out.push(f);
    }
}

// === squatter ===

fn squatters(observed: &Observed, index: &DesiredIndex<'_>, config: &DetectConfig, out: &mut Vec<Finding>) {
    let mut seen = HashSet::new();
    for l in &observed.listeners {
        if !seen.insert((l.protocol, l.port, l.inode)) {
            continue;
        }
        // kube-proxy itself serves health checks on these.
        if l.protocol == Protocol::Tcp && index.health_check.contains_key(&l.port) {
            continue;
        }
        let owner = index.by_port.get((l.protocol, l.port)).first().copied();
        let process = observed.owners.get(&l.inode).cloned();
        let who = match &process {
            Some(p) => format!("{} (pid {})", p.name, p.pid),
            None => format!("A process (socket inode {})", l.inode),
        };
        let verb = if l.protocol == Protocol::Tcp {
            "listens"
        } else {
            "is bound"
        };
        let mut f = match owner {
            Some(i) => {
                let desired = index.port(i);
                let mut f = Finding::new(
                    Kind::Squatter,
                    Severity::Critical,
                    format!(
                        "{who} {verb} on {}/{}, which {} owns as its NodePort: traffic kube-proxy does not redirect reaches this process instead — stop it or move it off the NodePort range.",
                        l.protocol,
                        l.port,
                        desired.service.service()
                    ),
                );
                set_service(&mut f, &desired.service);
                f
            }
            None if config.nodeport_range.contains(&l.port) && !index.allocated(l.port) => Finding::new(
                Kind::Squatter,
                Severity::Warning,
                format!(
                    "{who} {verb} on {}/{} inside the NodePort range {}-{}; the next Service given this port will collide with it — move the process, or reserve the port.",
                    l.protocol,
                    l.port,
                    config.nodeport_range.start(),
                    config.nodeport_range.end()
                ),
            ),
            None => continue,
        };
        f.protocol = Some(l.protocol);
        f.port = Some(l.port);
        f.family = Some(l.family);
        f.inode = Some(l.inode);
        f.process = process;
        f.rule_source = Some(locate(&l.origin, l.line));
        f.evidence.push(format!(
            "socket {}:{} uid {} inode {}",
            l.addr, l.port, l.uid, l.inode
        ));
        out.push(f);
    }
}

// === nodeport-collision ===

fn nodeport_collisions(index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    for ((protocol, port), claimants) in index.by_port.groups().filter(|(_, v)| v.len() > 1) {
        // One Service with the port twice (two families, a duplicated port entry) is not
        // a collision: only distinct Services are.
        let mut names: Vec<String> = claimants
            .iter()
            .map(|&i| index.port(i).service.service())
            .collect();
        names.dedup();
        if names.len() < 2 {
            continue;
        }
        let first = index.port(claimants[0]);
        let mut f = Finding::new(
            Kind::NodeportCollision,
            Severity::Critical,
            format!(
                "{} Services claim {protocol}/{port} as their nodePort ({}); only one can receive its traffic — give the others a different nodePort.",
                names.len(),
                names.join(", ")
            ),
        );
        f.protocol = Some(protocol);
        f.port = Some(port);
        set_service(&mut f, &first.service);
        f.services = names;
        out.push(f);
    }
}

// === orphan-chain ===

fn orphan_chains(source: &RuleSource, index: &DesiredIndex<'_>, out: &mut Vec<Finding>) {
    // An orphan is the absence of a jump, which a partial dump cannot show.
    if source.orphans.is_empty() || !source.complete {
        return;
    }
    let endpoint_hashes = endpoint_hash_index(index, source.family, &source.orphans);
    let mut budget = ORPHAN_HASH_BUDGET;
    for orphan in &source.orphans {
        let owner = owner_of_chain(orphan, index, &endpoint_hashes, &mut budget);
        let mut f = Finding::new(
            Kind::OrphanChain,
            Severity::Info,
            format!(
                "Chain {} in {} is no longer referenced by any rule; kube-proxy deletes such leftovers lazily, so it is harmless unless it persists across syncs.",
                orphan.chain, source.backend
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(format!(":{}", orphan.chain));
        f.rule_source = Some(locate(&source.origin, orphan.line));
        if let Some(i) = owner {
            let desired = index.port(i);
            f.protocol = Some(desired.protocol);
            f.port = Some(desired.node_port);
            set_service(&mut f, &desired.service);
        }
        out.push(f);
    }
}

/// `KUBE-SEP-` hashes of every listed endpoint, computed only when a source has
/// orphan endpoint chains to attribute.
fn endpoint_hash_index(
    index: &DesiredIndex<'_>,
    family: Family,
    orphans: &[crate::heart::model::OrphanChain],
) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    if !orphans.iter().any(|o| o.chain.starts_with("KUBE-SEP-")) {
        return out;
    }
    for (i, p) in index.state.ports.iter().enumerate() {
        if let Some(eps) = p.endpoints(family) {
            for addr in &eps.listed {
                out.insert(kube_proxy::endpoint_chain_hash(&p.service, p.protocol, addr), i);
            }
        }
    }
    out
}

/// How many endpoint-chain hashes may be computed, in all, to attribute orphan
/// endpoint chains of deleted pods (each try is one sha256 per Service port): enough
/// for the leftovers of an ordinary rollout, bounded after a mass deletion.
const ORPHAN_HASH_BUDGET: usize = 200_000;

fn owner_of_chain(
    orphan: &crate::heart::model::OrphanChain,
    index: &DesiredIndex<'_>,
    endpoint_hashes: &HashMap<String, usize>,
    budget: &mut usize,
) -> Option<usize> {
    let chain = orphan.chain.as_str();
    if let Some(hash) = kube_proxy::chain_hash(chain) {
        if !chain.starts_with("KUBE-SEP-") {
            return hash_key(hash).and_then(|k| index.by_hash.get(&k)).copied();
        }
        if let Some(&i) = endpoint_hashes.get(hash) {
            return Some(i);
        }
        // The pod is gone from the API, but the chain still DNATs to it: the name is
        // the hash of (Service port, protocol, that address), so try each Service port.
        let dnat = orphan.dnat?;
        let ports = index.state.ports.len();
        if *budget < ports {
            return None;
        }
        *budget -= ports;
        return index
            .state
            .ports
            .iter()
            .position(|p| kube_proxy::endpoint_chain_hash(&p.service, p.protocol, &dnat) == hash);
    }
    let (svc, protocol) = kube_proxy::parse_nft_service_chain(chain)?;
    index.by_name.get(&(&svc, protocol)).copied()
}

// === malformed-rule ===

fn malformed_rules(source: &RuleSource, out: &mut Vec<Finding>) {
    for m in &source.malformed {
        let mut f = Finding::new(
            Kind::MalformedRule,
            Severity::Warning,
            format!(
                "A rule in {} {} chain {} {}, which kube-proxy never writes: an iptables binary that does not match the one that wrote the rules (kubernetes#112477), or a hand edit, leaves such rules — compare the node's and kube-proxy's iptables versions, and let kube-proxy resync.",
                source.backend, m.table, m.chain, m.problem
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(m.rule.text.to_string());
        f.rule_source = Some(locate(&source.origin, m.rule.line));
        out.push(f);
    }
}

// === unparsed-rule ===

fn unparsed_rules(source: &RuleSource, out: &mut Vec<Finding>) {
    for u in source.unparsed.iter().take(UNPARSED_REPORTED) {
        let mut f = Finding::new(
            Kind::UnparsedRule,
            Severity::Warning,
            format!(
                "Line {} of {} could not be understood ({}); the analysis of this dump may be incomplete — check the capture, and report the line if it is a valid rule.",
                u.line, source.origin, u.reason
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule = Some(u.text.clone());
        f.rule_source = Some(locate(&source.origin, u.line));
        out.push(f);
    }
    let rest = source.unparsed.len().saturating_sub(UNPARSED_REPORTED);
    if rest > 0 {
        let mut f = Finding::new(
            Kind::UnparsedRule,
            Severity::Warning,
            format!(
                "{rest} more lines of {} could not be understood; the dump looks damaged.",
                source.origin
            ),
        );
        f.family = Some(source.family);
        f.backend = Some(source.backend);
        f.rule_source = Some(source.origin.clone());
        out.push(f);
    }
}

#[cfg(test)]
mod tests;
