//! The label sets of the metrics, each bounded (see [`crate::agent::metrics`]).

use prometheus_client::encoding::EncodeLabelSet;

use crate::heart::model::{Family as IpFamily, Protocol};

/// `kind` of `portdrift_findings`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// `source` of `portdrift_scan_errors_total`, `portdrift_source_up` and
/// `portdrift_kube_proxy_reachable`: a source's name in the report, bounded by
/// [`bounded_source`](super::bounded_source).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

/// `result` of `portdrift_repairs_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// `version`, `revision` and `rustc_version` of `portdrift_build_info`, as Go
/// exporters' build_info carries `version`, `revision` and `goversion`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    pub version: &'static str,
    pub revision: &'static str,
    pub rustc_version: &'static str,
}

/// `phase` of `portdrift_scan_phase_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

/// `kind`, `backend` of `portdrift_findings_by_backend`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindBackendLabel {
    pub kind: &'static str,
    pub backend: &'static str,
}

/// `kind`, `severity` of `portdrift_findings_by_severity`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindSeverityLabel {
    pub kind: &'static str,
    pub severity: &'static str,
}

/// One finding's series in `portdrift_finding`. Fields a finding lacks are `""`
/// (`backend` is `none`, as in `portdrift_findings_by_backend`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct FindingLabel {
    pub kind: &'static str,
    pub severity: &'static str,
    pub protocol: &'static str,
    pub port: String,
    pub service: String,
    pub backend: &'static str,
}

/// `backend`, `family` of `portdrift_nodeport_rules`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendFamilyLabel {
    pub backend: &'static str,
    pub family: &'static str,
}

/// `protocol`, `family` of `portdrift_listeners`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolFamilyLabel {
    pub protocol: &'static str,
    pub family: &'static str,
}

/// `mode` of `portdrift_proxy_mode_info`: bounded by [`crate::heart::model::ProxyMode`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: &'static str,
}

/// `resource` of the `portdrift_api_watch_*` families.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: &'static str,
}

/// The label set of a series without labels, in a family so that the series can be
/// removed (kube-proxy's health is unknown when its `/healthz` is not read).
pub(super) type NoLabels = Vec<(&'static str, &'static str)>;

pub(super) fn socket_label(protocol: Protocol, v6: bool) -> ProtocolFamilyLabel {
    ProtocolFamilyLabel {
        protocol: protocol.as_str(),
        family: if v6 { IpFamily::Ipv6 } else { IpFamily::Ipv4 }.as_str(),
    }
}
