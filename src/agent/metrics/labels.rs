//! The label sets of the metrics, each bounded (see [`crate::agent::metrics`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::heart::model::{Family as IpFamily, Protocol};

/// The label names of a label set or of a metric's series, in the order the exposition
/// writes them: what the reference lists for each metric.
pub trait LabelNames {
    const LABELS: &'static [&'static str];
}

impl<S: LabelNames, M, C> LabelNames for Family<S, M, C> {
    const LABELS: &'static [&'static str] = S::LABELS;
}

impl<N, A> LabelNames for Counter<N, A> {
    const LABELS: &'static [&'static str] = &[];
}

impl<N, A> LabelNames for Gauge<N, A> {
    const LABELS: &'static [&'static str] = &[];
}

impl LabelNames for Histogram {
    const LABELS: &'static [&'static str] = &[];
}

/// A label set struct and its [`LabelNames`] from one list of fields, so the names the
/// reference gives cannot drift from the names the encoder writes.
macro_rules! label_set {
    ($(#[$attr:meta])* pub struct $name:ident { $(pub $field:ident: $ty:ty,)* }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            $(pub $field: $ty,)*
        }

        impl LabelNames for $name {
            const LABELS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

label_set! {
    /// `kind` of `portdrift_findings`.
    pub struct KindLabel {
        pub kind: &'static str,
    }
}

label_set! {
    /// `source` of `portdrift_scan_errors_total`, `portdrift_source_up` and
    /// `portdrift_kube_proxy_reachable`: a source's name in the report, bounded by
    /// [`Input::name`](crate::heart::input::Input::name), a fixed set.
    pub struct SourceLabel {
        pub source: String,
    }
}

label_set! {
    /// `result` of `portdrift_repairs_total`.
    pub struct ResultLabel {
        pub result: &'static str,
    }
}

label_set! {
    /// `version`, `revision` and `rustc_version` of `portdrift_build_info`, as Go
    /// exporters' build_info carries `version`, `revision` and `goversion`.
    pub struct BuildLabel {
        pub version: &'static str,
        pub revision: &'static str,
        pub rustc_version: &'static str,
    }
}

label_set! {
    /// `phase` of `portdrift_scan_phase_duration_seconds`.
    pub struct PhaseLabel {
        pub phase: &'static str,
    }
}

label_set! {
    /// `kind`, `backend` of `portdrift_findings_by_backend`.
    pub struct KindBackendLabel {
        pub kind: &'static str,
        pub backend: &'static str,
    }
}

label_set! {
    /// `kind`, `severity` of `portdrift_findings_by_severity`.
    pub struct KindSeverityLabel {
        pub kind: &'static str,
        pub severity: &'static str,
    }
}

label_set! {
    /// One finding's series in `portdrift_finding`. Fields a finding lacks are `""`
    /// (`backend` is `none`, as in `portdrift_findings_by_backend`).
    #[derive(PartialOrd, Ord)]
    pub struct FindingLabel {
        pub kind: &'static str,
        pub severity: &'static str,
        pub protocol: &'static str,
        pub port: String,
        pub service: String,
        pub backend: &'static str,
    }
}

label_set! {
    /// `backend`, `family` of `portdrift_nodeport_rules`.
    pub struct BackendFamilyLabel {
        pub backend: &'static str,
        pub family: &'static str,
    }
}

label_set! {
    /// `protocol`, `family` of `portdrift_listeners`.
    pub struct ProtocolFamilyLabel {
        pub protocol: &'static str,
        pub family: &'static str,
    }
}

label_set! {
    /// `mode` of `portdrift_proxy_mode_info`: bounded by [`crate::heart::model::ProxyMode`].
    pub struct ModeLabel {
        pub mode: &'static str,
    }
}

label_set! {
    /// `resource` of the `portdrift_api_watch_*` families.
    pub struct ResourceLabel {
        pub resource: &'static str,
    }
}

/// The label set of a series without labels, in a family so that the series can be
/// removed (kube-proxy's health is unknown when its `/healthz` is not read).
pub(super) type NoLabels = Vec<(&'static str, &'static str)>;

impl LabelNames for NoLabels {
    const LABELS: &'static [&'static str] = &[];
}

pub(super) fn socket_label(protocol: Protocol, family: IpFamily) -> ProtocolFamilyLabel {
    ProtocolFamilyLabel {
        protocol: protocol.as_str(),
        family: family.as_str(),
    }
}
