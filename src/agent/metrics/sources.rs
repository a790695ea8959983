//! `portdrift_source_up`, `portdrift_nodeport_rules` and `portdrift_listeners`: how each
//! source read at the last scan, and the rules and listening sockets they held.

use std::collections::BTreeMap;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::count;
use super::described::Described;
use super::labels::{BackendFamilyLabel, ProtocolFamilyLabel, SourceLabel, socket_label};
use super::last_scan::LastScanGauge;
use super::series::at_zero;
use crate::heart::input::Input;
use crate::heart::model::{Backend, Family as IpFamily};
use crate::heart::outcome::InputStatus;

/// The backends and families `portdrift_nodeport_rules` always has a series for.
const RULE_BACKENDS: [Backend; 3] = [Backend::IptablesNft, Backend::IptablesLegacy, Backend::Nftables];
const RULE_FAMILIES: [IpFamily; 2] = [IpFamily::Ipv4, IpFamily::Ipv6];

pub(super) struct SourceMetrics {
    up: LastScanGauge<SourceLabel>,
    nodeport_rules: Family<BackendFamilyLabel, Gauge>,
    listeners: Family<ProtocolFamilyLabel, Gauge>,
}

fn rule_labels() -> impl Iterator<Item = BackendFamilyLabel> {
    RULE_BACKENDS.into_iter().flat_map(|backend| {
        RULE_FAMILIES.into_iter().map(move |family| BackendFamilyLabel {
            backend: backend.as_str(),
            family: family.as_str(),
        })
    })
}

fn listener_labels() -> impl Iterator<Item = ProtocolFamilyLabel> {
    Input::SOCKETS.into_iter().filter_map(|input| match input {
        Input::Sockets { protocol, family } => Some(socket_label(protocol.protocol(), family)),
        _ => None,
    })
}

impl SourceMetrics {
    pub(super) fn register(registry: &mut Described<'_>) -> SourceMetrics {
        let up = LastScanGauge::register(
            registry,
            "source_up",
            "1 when the last scan could read the source (or it is absent on this node), 0 when reading it failed",
            None,
        );
        let nodeport_rules = at_zero(Family::default(), rule_labels());
        registry.add(
            "nodeport_rules",
            "NodePort rules the last scan read, by backend and IP family",
            None,
            nodeport_rules.clone(),
        );
        let listeners = at_zero(Family::default(), listener_labels());
        registry.add(
            "listeners",
            "Listening sockets the last scan read, by protocol and IP family",
            None,
            listeners.clone(),
        );
        SourceMetrics {
            up,
            nodeport_rules,
            listeners,
        }
    }

    /// Sets each source's up/down, and the rules and listeners they held.
    pub(super) fn record(&self, sources: &[InputStatus]) {
        self.record_up(sources);
        self.record_rules(sources);
        self.record_listeners(sources);
    }

    fn record_up(&self, sources: &[InputStatus]) {
        // A name can appear more than once (nft.json holds an IPv4 and an IPv6 table):
        // it is up only when every part of it is.
        let mut up: BTreeMap<&'static str, bool> = BTreeMap::new();
        for s in sources {
            *up.entry(s.source.name()).or_insert(true) &= !s.status.is_failure();
        }
        self.up.replace(up.into_iter().map(|(source, up)| {
            (
                SourceLabel {
                    source: source.into(),
                },
                i64::from(up),
            )
        }));
    }

    fn record_rules(&self, sources: &[InputStatus]) {
        let mut rules: BTreeMap<(&'static str, &'static str), usize> = BTreeMap::new();
        for s in sources {
            if let (Some(backend), Some(family)) = (s.backend, s.family) {
                *rules.entry((backend.as_str(), family.as_str())).or_default() += s.items.unwrap_or(0);
            }
        }
        for label in rule_labels() {
            let n = rules.get(&(label.backend, label.family)).copied().unwrap_or(0);
            self.nodeport_rules.get_or_create(&label).set(count(n));
        }
    }

    fn record_listeners(&self, sources: &[InputStatus]) {
        let mut listeners: BTreeMap<(&'static str, &'static str), usize> = BTreeMap::new();
        for s in sources {
            if let Input::Sockets { protocol, family } = s.source {
                let label = socket_label(protocol.protocol(), family);
                *listeners.entry((label.protocol, label.family)).or_default() += s.items.unwrap_or(0);
            }
        }
        for label in listener_labels() {
            let n = listeners
                .get(&(label.protocol, label.family))
                .copied()
                .unwrap_or(0);
            self.listeners.get_or_create(&label).set(count(n));
        }
    }
}
