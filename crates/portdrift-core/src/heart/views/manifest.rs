//! The Services a manifest declares, each value with its line: what `portdrift lint`
//! checks. Read from YAML by `decode::manifests`.

/// A value and the line it is on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: usize,
}

/// One port of a Service manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestPort {
    pub line: usize,
    pub name: Option<String>,
    /// As written, upper case (`TCP` when unset, as the API defaults it).
    pub protocol: String,
    pub node_port: Option<Located<i64>>,
}

/// A Service as a manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestService {
    pub file: String,
    /// The line of the Service's `kind`.
    pub line: usize,
    /// None when the manifest leaves it to `kubectl apply -n` (or the default).
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `ClusterIP` when unset, as the API defaults it.
    pub service_type: String,
    pub ports: Vec<ManifestPort>,
    pub health_check_node_port: Option<Located<i64>>,
    pub external_traffic_policy: Option<Located<String>>,
    pub allocate_load_balancer_node_ports: Option<Located<bool>>,
}

/// Something in a file that could not be read as intended: YAML that does not parse,
/// or a field of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestProblem {
    pub file: String,
    pub line: usize,
    pub message: String,
}
